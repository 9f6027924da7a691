"""Reading back a run's TensorBoard scalars, from any tf.io.gfile filesystem."""

import glob
import os
import subprocess
import sys

import tensorflow as tf

from electra_tf.training import summaries


def test_read_scalars_from_a_gfile_path_keeps_a_rewritten_steps_last_value():
    # ram:// stands for gs:// here: a filesystem Python's glob cannot see (it read nothing).
    writer = tf.summary.create_file_writer("ram://summaries_test/train")
    with writer.as_default():
        for step, value in ((3, 2.5), (4, 1.5), (4, 1.25)):  # step 4 again: a restored run
            tf.summary.scalar("loss/total", value, step=step)
        tf.summary.text("config/operative_config", "x = 1", step=0)  # not a scalar
    writer.flush()
    assert summaries.read_scalars("ram://summaries_test/train") == {
        "loss/total": [(3, 2.5), (4, 1.25)]}


def test_read_scalars_keeps_what_precedes_a_record_cut_short(tmp_path):
    """A kill -9 can leave an event file's last record part-written."""
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for step in (2, 4, 6):
            tf.summary.scalar("loss/total", step / 8, step=step)
            writer.flush()
    writer.close()
    (path,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    with open(path, "rb+") as f:
        f.truncate(f.seek(0, 2) - 5)
    assert summaries.read_scalars(str(tmp_path)) == {"loss/total": [(2, 0.25), (4, 0.5)]}


def test_read_scalars_drops_what_a_restart_went_back_over(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for step in (2, 4, 6):
            tf.summary.scalar("loss/total", step / 8, step=step)
            tf.summary.scalar("optimizer/grad_norm", 1.0, step=step)
        start = tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START)
        event = tf.compat.v1.Event(step=4, session_log=start)
        tf.raw_ops.ImportEvent(writer=writer._resource, event=event.SerializeToString())
        tf.summary.scalar("loss/total", 0.75, step=5)
    writer.flush()
    assert summaries.read_scalars(str(tmp_path)) == {
        "loss/total": [(2, 0.25), (5, 0.75)], "optimizer/grad_norm": [(2, 1.0)]}


def test_the_tensorboard_command_reads_a_run(tmp_path):
    """`tensorboard --logdir MODEL_DIR` (BUILD.md) starts in this environment: TensorBoard
    2.20 imports pkg_resources, which setuptools 82 removed."""
    writer = tf.summary.create_file_writer(str(tmp_path / "train"))
    with writer.as_default():
        for step in (2, 4):
            tf.summary.scalar("loss/total", 1 / step, step=step)
    writer.flush()
    tensorboard = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    done = subprocess.run([tensorboard, "--inspect", f"--logdir={tmp_path}"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr
    assert "   loss/total\n" in done.stdout and "   num_steps            2\n" in done.stdout
