"""Pre-training runs on real TFRecords: what a run writes, exact resume after kill -9 and
SIGTERM, replicas and gradient accumulation equal one big batch, two processes of
multi-worker training end identical, two-stage training, non-finite losses, bad input."""

import glob
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, SMALL, UNCASED_VOCAB, cased_vocab, pretrain as run
from electra_tf.errors import UserInputError
from electra_tf.training import pretraining
from in_process import run_script

SCRIPT = os.path.join(ROOT, "scripts", "run_pretraining.py")
NO_DROPOUT = ["pretrainer.dropout_rate = 0.0", "pretrainer.attention_dropout_rate = 0.0"]
TAGS = {"loss/total", "loss/generator", "loss/discriminator", "generator/mlm_accuracy",
        "generator/sampled_accuracy", "discriminator/accuracy", "discriminator/auc",
        "discriminator/precision", "discriminator/recall", "discriminator/replaced_fraction",
        "optimizer/learning_rate", "optimizer/grad_norm", "throughput/examples_per_second",
        "throughput/tokens_per_second", "throughput/mfu"}


@pytest.fixture(scope="module")
def data(austen_data):
    return os.path.join(austen_data[0], "*.tfrecord")


def script(*args, env=None, **popen):
    command = [sys.executable, SCRIPT, *args]
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=environment, **popen)


def script_args(model_dir, data, *bindings):
    return ["--gin_file=tiny.gin", f"--model_dir={model_dir}", f"--train_data={data}",
            *[f"--gin_bindings={b}" for b in SMALL + list(bindings)]]


def checkpoint_values(path) -> dict:
    """Every saved tensor of a checkpoint by name, but the save counter, the serialized
    object graph and the input iterator's state (a variant, which numpy cannot hold)."""
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name)
            for name, dtype in reader.get_variable_to_dtype_map().items()
            if dtype not in (tf.variant, tf.string) and not name.startswith("save_counter")}


def model_values(path) -> dict:
    """The model's weights in a checkpoint by their path from the model
    ("model/discriminator/layer_0/attention/query/_kernel"). The checkpoint's own keys name
    a variable by its shortest path, which is often the optimizer's list of variables."""
    from tensorflow.core.protobuf.trackable_object_graph_pb2 import TrackableObjectGraph
    reader = tf.train.load_checkpoint(path)
    graph = TrackableObjectGraph.FromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    values, seen = {}, set()

    def walk(node_id, prefix):
        seen.add(node_id)
        for attribute in graph.nodes[node_id].attributes:
            if attribute.name == "VARIABLE_VALUE":
                values[prefix] = reader.get_tensor(attribute.checkpoint_key)
        for child in graph.nodes[node_id].children:
            if child.node_id not in seen:
                walk(child.node_id, f"{prefix}/{child.local_name}")

    walk(next(c.node_id for c in graph.nodes[0].children if c.local_name == "model"), "model")
    return values


def summary_tags(directory) -> dict:
    """{tag: [(step, value)]} of a TensorBoard run directory."""
    tags = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(
                    (event.step, tf.make_ndarray(value.tensor) if value.HasField("tensor")
                     else value.simple_value))
    return tags


# ------------------------------------------------------------------------------ a run


def test_an_mlm_runs_console_line_has_no_discriminator_loss(tmp_path, data):
    """BERT's objective trains no discriminator: its line shows the generator's loss alone
    (it showed 'discriminator 0.0000'); Replace MLM's discriminator loss, that of the network
    it trains, with no AUC, is shown."""
    for objective, shown, files in (
            ("mlm", r"\(generator \1\)", ()),
            ("replace_mlm", r"\(generator [\d.]+, discriminator [\d.]+\)", ()),
            # a uniform generator's loss was the constant ln V (zero logits), in the total
            ("electra", r"\(discriminator [\d.]+\)", ("ablations/uniform_generator.gin",))):
        result, lines = run(tmp_path / objective, data,
                            ["NUM_TRAIN_STEPS = 2", f"OBJECTIVE = '{objective}'"],
                            files=("tiny.gin", *files))
        loops = [line for line in lines if line.startswith("step ")]
        assert result["step"] == 2 and len(loops) == 1
        assert re.match(r"step 2/2 \| loss ([\d.]+) " + shown + r" \| ", loops[0]), loops
        # TensorBoard too has only the losses and metrics the variant has (they were 0)
        tags = set(summary_tags(tmp_path / objective / "train"))
        assert ("loss/discriminator" in tags) == (objective != "mlm"), tags
        assert ("loss/generator" in tags) == (not files), tags
        assert ("generator/mlm_accuracy" in tags) == (not files), tags


def test_a_short_run_writes_checkpoints_tags_config_and_model_info(tmp_path, data):
    result, lines = run(tmp_path, data, ["pretraining.device_name = 'NVIDIA H100 80GB HBM3'",
                                         "pretraining.eval_steps = 10"], eval_data=data)
    assert result["step"] == 6
    steps = sorted(int(p.split("-")[-1].split(".")[0])
                   for p in glob.glob(str(tmp_path / "ckpt-*.index")))
    assert steps == [0, 4, 6]
    train = summary_tags(tmp_path / "train")
    assert TAGS <= set(train), TAGS - set(train)
    assert [step for step, _ in train["loss/total"]] == [2, 4, 6]
    # Not the first loop's throughput: its time includes tracing.
    assert [step for step, _ in train["throughput/examples_per_second"]] == [4, 6]
    # MFU = examples/s x hardware FLOPs per example / the H100's bf16... float32 (TF32) peak.
    info = json.loads((tmp_path / "model_info.json").read_text())
    (_, mfu), (_, eps) = train["throughput/mfu"][-1], train["throughput/examples_per_second"][-1]
    assert float(mfu) == pytest.approx(float(eps) * info["train_flops_per_example_hardware"]
                                       / 494.5e12, rel=1e-5)
    # Tokens: the real ones (about 97% of the Austen records' positions), not padding.
    _, tokens = train["throughput/tokens_per_second"][-1]
    assert 0.85 * 128 < float(tokens) / float(eps) < 127.9
    assert "config/operative_config" in train
    evaluation = summary_tags(tmp_path / "eval")
    assert TAGS - {"optimizer/learning_rate", "optimizer/grad_norm", "throughput/mfu",
                   "throughput/examples_per_second", "throughput/tokens_per_second"} <= set(
                       evaluation)
    assert [step for step, _ in evaluation["loss/total"]] == [4, 6]
    config = (tmp_path / "operative_config.gin").read_text()
    assert "NUM_TRAIN_STEPS = 6" in config
    assert "pretraining.num_train_steps = %NUM_TRAIN_STEPS" in config
    assert "pretrainer.hidden_size = 32" in config
    # model_info.json: counts of the network built, and the official FLOPs method.
    assert (info["max_seq_length"], info["mask_prob"]) == (128, 0.15)
    assert info["discriminator_params"] == (
        30522 * 32 + 512 * 32 + 2 * 32 + 2 * 32            # embeddings + LayerNorm
        + 4 * (32 * 32 + 32) + 2 * 32                      # attention + LayerNorm
        + (32 * 64 + 64) + (64 * 32 + 32) + 2 * 32         # feed-forward + LayerNorm
        + (32 * 32 + 32) + (32 + 1))                       # replaced-token head
    # Hardware FLOPs: backward = 2 x forward, and the embedding lookups are gathers, where
    # the official count has one-hot matmuls (2 E V + 2 E (L + 2) per token, per network).
    length = info["max_seq_length"]
    lookups = sum(2 * (c["embedding_size"] or c["hidden_size"]) * length
                  * (c["vocab_size"] + length + c["type_vocab_size"])
                  for c in (info["discriminator"], info["generator"]))
    assert info["train_flops_per_example_hardware"] == pytest.approx(
        1.5 * info["train_flops_per_example"] - 3 * lookups)
    assert info["total_train_flops"] == pytest.approx(info["train_flops_per_example"] * 8 * 6)
    # The console: one line per loop with step, losses, throughput and ETA.
    loops = [line for line in lines if line.startswith("step ")]
    assert len(loops) == 3 and re.match(
        r"step 6/6 \| loss [\d.]+ \(generator [\d.]+, discriminator [\d.]+\) \| ", loops[-1])
    assert "examples/s | MFU" in loops[-1] and "ETA" in loops[-1]
    assert loops[0].endswith(" examples/s (first loop: tracing and compiling included)")
    # This run evaluates on its training data, which it says.
    shards = len(glob.glob(data))
    assert (f"note: {shards} of --eval_data's {shards} files ({sorted(glob.glob(data))[0]}, "
            "...) are --train_data files too: its evaluations are not of held-out data"
            ) in lines
    # The losses of the first and last loop: training makes progress.
    losses = [float(v) for _, v in train["loss/total"]]
    assert losses[-1] < losses[0]


def test_dry_run_writes_model_info_only(tmp_path, data):
    info, lines = run(tmp_path / "m", data, dry_run=True)
    assert os.listdir(tmp_path / "m") == ["model_info.json"]
    assert json.loads(lines[0]) == info
    assert info["trainable_params"] < info["discriminator_params"] + info["generator_params"]
    # The files trained on, with their examples from metadata.json, on one line of the file.
    metadata = json.loads(open(os.path.join(os.path.dirname(data), "metadata.json")).read())
    assert info["train_files"] == [[s["file"], s["num_examples"]] for s in metadata["shards"]]
    text = (tmp_path / "m" / "model_info.json").read_text()
    assert f'  "train_files": {json.dumps(info["train_files"])}' in [
        line.rstrip(",") for line in text.splitlines()]
    # Nothing to export or detect with yet: said so (it said to pass a model dir written
    # by run_pretraining.py, which this one was).
    from electra_tf.training import checkpoints
    with pytest.raises(UserInputError) as error:
        checkpoints.load_pretrainer(str(tmp_path / "m"))
    assert str(error.value) == (
        f"{tmp_path / 'm'} holds no trained model yet, only model_info.json (a --dry_run "
        "writes that alone); pre-train into it first (run_pretraining.py without --dry_run)")


def test_a_second_run_on_a_model_dir_in_use_stops_in_one_line(tmp_path, data):
    """The same command started twice (or restarted by a scheduler while the first still
    runs): the second stops, writing nothing, rather than interleave its checkpoints with
    the first's."""
    first = script(*script_args(tmp_path / "m", data, "NUM_TRAIN_STEPS = 100000"))
    try:
        _wait_for(str(tmp_path / "m" / ".running.json"), first)
        done = run_script("run_pretraining.py", *script_args(tmp_path / "m", data),
                          "--dry_run")
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            f"error: --model_dir={tmp_path / 'm'} is being written by another "
            f"run_pretraining.py (PID {first.pid}) on this machine; wait for it to end or "
            "stop it, or choose another --model_dir (if no such run is going, delete "
            f"{tmp_path / 'm'}/.running.json)"]
        assert first.poll() is None
    finally:
        first.kill()
        first.wait()


def test_a_checkpoint_the_disk_has_no_room_for_stops_in_one_line_leaving_no_part_of_it(
        small_disk, data):
    """A full disk at a save: one line naming the checkpoint, and the save's part-written
    shards (ckpt-N_temp/, as big as the checkpoint) removed, not left filling the disk; with
    room made, the same command runs."""
    disk = small_disk("1m")
    model_dir = f"{disk.path}/m"
    done = run_script("run_pretraining.py", *script_args(model_dir, data))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: no space left on the device writing {model_dir}/ckpt-0; free some space (or "
        "choose another --model_dir) and rerun: what was complete is kept")
    assert not [n for n in os.listdir(model_dir) if n.startswith("ckpt-")]
    disk.resize("256m")
    done = run_script("run_pretraining.py", *script_args(model_dir, data))
    assert done.returncode == 0, done.stderr
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-6")


def test_a_save_that_fails_after_its_checkpoint_is_recorded_keeps_it(tmp_path, data,
                                                                      monkeypatch):
    """CheckpointManager.save writes the checkpoint, records it as the latest, then deletes
    the oldest: a failure there (a permission error, say) must not take the new checkpoint
    with the part-written files of a failed save, or the rerun starts from step 0."""
    from tensorflow.python.checkpoint import checkpoint_management

    def refused(manager):
        if len(manager._maybe_delete) > manager._max_to_keep:  # it would delete one
            raise tf.errors.PermissionDeniedError(None, None, "ckpt-0.index; Permission denied")
    monkeypatch.setattr(checkpoint_management.CheckpointManager, "_sweep", refused)
    with pytest.raises(tf.errors.PermissionDeniedError):
        run(tmp_path / "m", data, ["pretraining.keep_checkpoints = 1"])
    assert tf.train.latest_checkpoint(str(tmp_path / "m")).endswith("ckpt-4")
    assert tf.io.gfile.glob(str(tmp_path / "m" / "ckpt-4.*"))  # kept


@pytest.mark.parametrize("keep, kept", [("1", [6]), ("None", [0, 4, 6])])
def test_keep_checkpoints_keeps_the_newest_or_every_one(tmp_path, data, keep, kept):
    """None keeps every checkpoint (the study fine-tunes its curve's after the run, and a
    count let those an interruption saved off the grid push them out)."""
    run(tmp_path / "m", data, [f"pretraining.keep_checkpoints = {keep}"], eager=True)
    assert sorted(int(p.split("-")[-1].split(".")[0])
                  for p in glob.glob(str(tmp_path / "m" / "ckpt-*.index"))) == kept


def test_a_model_or_step_too_big_for_memory_stops_in_one_line(tmp_path, data):
    """TensorFlow's out-of-memory error (a traceback, and on a GPU a page of allocator
    statistics) is one line naming the tensor and what to lower."""
    done = run_script("run_pretraining.py", *script_args(
        tmp_path / "m", data, "pretrainer.embedding_size = 4194304"))  # a 512 GB table
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: out of memory allocating a float tensor of shape [30522, 4194304] on CPU:0; "
        "lower the memory a step takes (--gin_bindings=pretraining.gradient_accumulation_steps"
        "=2 or more: the same global batch, TRAIN_BATCH_SIZE, in micro-batches; or a smaller "
        "TRAIN_BATCH_SIZE) or the model's size")


# ------------------------------------------------------------------------------ resume


def _wait_for(path_glob, process, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if glob.glob(path_glob):
            return
        if process.poll() is not None:
            raise AssertionError(f"the run ended early: {process.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"{path_glob} did not appear")


def _catches(pid: int, number: int) -> bool:
    """Whether process `pid` has a handler for signal `number` (Linux: /proc's SigCgt)."""
    with open(f"/proc/{pid}/status") as f:
        caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (number - 1) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc (Linux)")
def test_sigterm_during_the_start_up_ends_with_one_line(tmp_path, data):
    """SIGTERM before the loop's own handler is in place (importing TensorFlow, building the
    model: seconds): the start-up's one line and exit code 143, as the other scripts; it
    ended the process silently."""
    from electra_tf import cli
    process = script(*script_args(tmp_path, data))
    deadline = time.time() + 60
    while not _catches(process.pid, signal.SIGTERM):
        assert process.poll() is None and time.time() < deadline, process.communicate()
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert (process.returncode, err.splitlines()[-1:]) == (143, [cli.TERMINATED_LINE]), err
    assert "Traceback" not in err and "saved checkpoint" not in out, (out, err)
    assert not glob.glob(str(tmp_path / "ckpt-*"))


def test_kill_9_then_rerun_ends_with_the_same_weights(tmp_path, data):
    more = ["NUM_TRAIN_STEPS = 12", "pretraining.keep_checkpoints = 10"]
    straight = script(*script_args(tmp_path / "straight", data, *more), "--deterministic",
                      "--seed=7")
    out, err = straight.communicate(timeout=600)
    assert straight.returncode == 0, err
    # Nothing on stderr: not XLA's "Compiled cluster using XLA!" (cli._absorb_first_xla_log).
    assert err == "", err
    killed = script(*script_args(tmp_path / "killed", data, *more), "--deterministic",
                    "--seed=7")
    _wait_for(str(tmp_path / "killed" / "ckpt-4.index"), killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not os.path.exists(tmp_path / "killed" / "ckpt-12.index")
    with open(tmp_path / "killed" / ".running.json") as f:  # its mark: a dead process's
        assert json.load(f)["pid"] == killed.pid
    # TF_CPP_MIN_LOG_LEVEL set by the user (hiding INFO): XLA's first lines are taken too.
    rerun = script(*script_args(tmp_path / "killed", data, *more), "--deterministic", "--seed=7",
                   env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    assert err == "", err
    assert "resuming from" in out
    assert not os.path.exists(tmp_path / "killed" / ".running.json")
    a = checkpoint_values(str(tmp_path / "straight" / "ckpt-12"))
    b = checkpoint_values(str(tmp_path / "killed" / "ckpt-12"))
    assert set(a) == set(b) and any(k.startswith("model/") for k in a)
    for name in a:  # weights, optimizer slots, iterator and loop state
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.usefixtures("eager")
def test_a_run_resumed_behind_its_last_summaries_shows_tensorboard_one_curve(tmp_path, data):
    """A run killed after writing step 6's scalars but before saving step 6 resumes from
    step 4 and writes step 6 again: TensorBoard (its Python loader) and read_scalars show
    each step once, with the resumed run's value."""
    from tensorboard.backend.event_processing import plugin_event_accumulator

    from electra_tf.training import summaries
    run(tmp_path, data, [])
    for path in glob.glob(str(tmp_path / "ckpt-6.*")):  # as if killed before this save
        os.remove(path)
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-4"\nall_model_checkpoint_paths: "ckpt-0"\n'
        'all_model_checkpoint_paths: "ckpt-4"\n')
    (tmp_path / "train" / "before").mkdir()
    for path in glob.glob(str(tmp_path / "train" / "events.*")):
        shutil.copy(path, tmp_path / "train" / "before")
    _, lines = run(tmp_path, data, [])
    assert lines[0] == f"resuming from {tmp_path / 'ckpt-4'} (step 4)"
    assert [step for step, _ in summary_tags(tmp_path / "train")["loss/total"]] == [
        2, 4, 6, 6]  # in the event files: the first run's 6, then the resumed run's
    resumed = summary_tags(tmp_path / "train")["loss/total"][-1][1]
    board = plugin_event_accumulator.EventAccumulator(str(tmp_path / "train"))
    board.Reload()
    shown = [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in board.Tensors("loss/total")]
    assert [step for step, _ in shown] == [2, 4, 6] and shown[-1][1] == float(resumed)
    assert summaries.read_scalars(str(tmp_path / "train"))["loss/total"] == shown
    # The first run, which started at step 0, showed as it was.
    assert [step for step, _ in summaries.read_scalars(
        str(tmp_path / "train" / "before"))["loss/total"]] == [2, 4, 6]


def test_a_resumed_xla_run_loads_its_compiled_step_and_ends_the_same(tmp_path, data):
    """Loops of 3 steps between checkpoints every 4: each loop is a call of 3 steps (the
    default steps per call, the loop's) or one of the single step left over, two compiled
    programs; a resumed run loads both (the single step's was traced when first needed,
    under a name that depended on what the process had traced before: each resume compiled
    it again and added it to the cache)."""
    more = ["NUM_TRAIN_STEPS = 8", "pretraining.keep_checkpoints = 10",
            "pretraining.jit_compile = True", "STEPS_PER_LOOP = 3"]
    args = ("--deterministic", "--seed=7")
    straight = script(*script_args(tmp_path / "straight", data, *more), *args)
    out, err = straight.communicate(timeout=600)
    assert straight.returncode == 0, err
    assert "(0 compiled programs from earlier runs)" in out
    entries = sorted(glob.glob(str(tmp_path / "straight" / "xla_cache" / "tf*" / "*.pb")))
    assert len(entries) == 2 and all(f"saved {os.path.basename(entry)} for reruns" in out
                                     for entry in entries)
    # The same run as if it had been stopped after step 4, resumed: it loads the programs
    # compiled above (a program it compiled would be saved under a new name).
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "straight", resumed)
    for path in glob.glob(str(resumed / "ckpt-[68].*")):
        os.remove(path)
    tf.compat.v1.train.update_checkpoint_state(str(resumed), str(resumed / "ckpt-4"))
    rerun = script(*script_args(resumed, data, *more), *args)
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    assert f"resuming from {resumed}/ckpt-4 (step 4)" in out
    assert "(2 compiled programs from earlier runs;" in out and "saved xla_" not in out
    assert re.search(r"^step 7/8 \| loss ", out, re.M)
    assert sorted(glob.glob(str(resumed / "xla_cache" / "tf*" / "*"))) == [
        entry.replace(str(tmp_path / "straight"), str(resumed)) for entry in entries]
    a = checkpoint_values(str(tmp_path / "straight" / "ckpt-8"))
    b = checkpoint_values(str(resumed / "ckpt-8"))
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


class _GceMetadata(http.server.BaseHTTPRequestHandler):
    """What Google Cloud's metadata server answers TensorFlow's "am I on GCP?" probe."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path.endswith("/instance/hostname") else 404)
        self.end_headers()
        self.wfile.write(b"vm.internal")

    def log_message(self, *args):
        pass


def test_sigterm_and_ctrl_c_save_a_checkpoint_and_the_rerun_resumes(tmp_path, data):
    """... on a Google Cloud VM too (its metadata server answering at GCE_METADATA_IP), where
    TensorFlow's PreemptionCheckpointHandler saves nothing for a CPU or TPU VM (the process
    died of the signal)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _GceMetadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    more = ["NUM_TRAIN_STEPS = 400", "CHECKPOINT_EVERY = 1000"]
    process = script(*script_args(tmp_path, data, *more),
                     env={"GCE_METADATA_IP": f"127.0.0.1:{server.server_port}"})
    _wait_for(str(tmp_path / "ckpt-0.index"), process)
    time.sleep(2)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=300)
    server.shutdown()
    assert process.returncode == pretraining.PREEMPTED_EXIT_CODE, err
    saved = [int(p.split("-")[-1].split(".")[0]) for p in glob.glob(str(tmp_path / "ckpt-*.index"))]
    preempted_at = max(saved)
    assert 0 < preempted_at < 400 and preempted_at % 2 == 0  # a loop boundary
    assert f"preempted (SIGTERM): saved a checkpoint at step {preempted_at}" in out
    assert "deprecated" not in err, err  # TensorFlow's own total_run_calls warning
    # The rerun resumes; Ctrl-C in it saves at the end of its loop too, and exits 130.
    rerun = script(*script_args(tmp_path, data, *more), env={"PYTHONUNBUFFERED": "1"})
    first = rerun.stdout.readline()
    assert first == f"resuming from {tmp_path}/ckpt-{preempted_at} (step {preempted_at})\n"
    time.sleep(2)
    rerun.send_signal(signal.SIGINT)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == pretraining.INTERRUPTED_EXIT_CODE, err
    interrupted_at = max(_checkpoint_steps(tmp_path))
    assert preempted_at < interrupted_at < 400 and interrupted_at % 2 == 0
    assert ("Ctrl-C: saving a checkpoint at the end of this loop, then stopping (Ctrl-C "
            "again stops at once, without it)\n") in out
    assert f"interrupted (Ctrl-C): saved a checkpoint at step {interrupted_at}; rerun" in out
    assert "Traceback" not in err, err


def test_ctrl_c_twice_stops_at_once_and_a_script_says_so_in_one_line(monkeypatch, capsys):
    """The second Ctrl-C raises KeyboardInterrupt wherever the run is (a later SIGTERM
    changes nothing), which a script prints as one line, exit 130."""
    import gc

    from absl import app

    from electra_tf import cli
    said = []
    stop = pretraining.StopOnSignal(said.append)
    stop(signal.SIGINT)
    stop(signal.SIGTERM)
    assert stop.requested.is_set() and stop.signal == signal.SIGINT and len(said) == 1
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGINT)
    monkeypatch.setattr(sys, "argv", ["script.py"])
    app.define_help_flags()

    def main(argv):
        stop(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exited:
            cli.run(main)
    finally:
        gc.unfreeze()
    assert exited.value.code == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C)\n"


def test_ctrl_c_is_answered_while_tensorflow_holds_the_main_thread():
    """A loop is one TensorFlow call, during which Python runs no signal handler: the
    installed handler's thread answers the signal inside the call (the call below returns
    only once the run has been asked to stop), and in a notebook's process the second
    Ctrl-C is a KeyboardInterrupt once the call returns."""
    said = []
    stop = pretraining.StopOnSignal(said.append)

    def wait_for_stop():  # runs on TensorFlow's thread while the main thread waits in C++
        return stop.requested.wait(timeout=60)

    @tf.function
    def call():
        return tf.py_function(wait_for_stop, [], tf.bool)

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    wakeup_fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup_fd)
    stop.install()
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        assert bool(call().numpy())  # answered inside the call
        assert said == ["Ctrl-C: saving a checkpoint at the end of this loop, then stopping "
                        "(Ctrl-C again stops at once, without it)"]
        os.kill(os.getpid(), signal.SIGTERM)  # after the first, not a second Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises in the main thread
        assert stop.signal == signal.SIGINT and len(said) == 1
    finally:
        stop.uninstall()
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert signal.set_wakeup_fd(wakeup_fd) == wakeup_fd  # the process's is back


def test_an_ignored_ctrl_c_stays_ignored():
    """A run started with SIGINT ignored (a non-interactive shell's `cmd &`) stopped at
    Ctrl-C to its process group, where fine-tuning and the other scripts, Python's default,
    went on; SIGTERM is still the run's."""
    stop = pretraining.StopOnSignal(lambda _: None)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    wakeup_fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        stop.install()
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == (
            signal.SIG_IGN, stop)
    finally:
        stop.uninstall()
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert signal.set_wakeup_fd(wakeup_fd) == wakeup_fd


def test_ctrl_c_twice_stops_the_script_inside_its_loop(tmp_path, data):
    """A loop (here of 100,000 steps: an hour) is one TensorFlow call: Ctrl-C is answered
    when it arrives, and a second one ends the run at once, without the checkpoint the
    loop's end would save. (The signals come once the loop has had time to be traced,
    which is Python, where the handler runs at once anyway.)"""
    more = ["NUM_TRAIN_STEPS = 100000", "STEPS_PER_LOOP = 100000",
            "CHECKPOINT_EVERY = 100000"]
    process = script(*script_args(tmp_path, data, *more), env={"PYTHONUNBUFFERED": "1"})
    _wait_for(str(tmp_path / "ckpt-0.index"), process)
    time.sleep(6)
    process.send_signal(signal.SIGINT)
    said = iter(process.stdout.readline, "")
    assert next(line for line in said if not line.startswith("saved checkpoint")) == (
        "Ctrl-C: saving a checkpoint at the end of this loop, then stopping (Ctrl-C again "
        "stops at once, without it)\n")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == pretraining.INTERRUPTED_EXIT_CODE, err
    assert err.endswith("interrupted (Ctrl-C)\n") and "Traceback" not in err, err
    assert "step " not in out and _checkpoint_steps(tmp_path) == [0]


def _checkpoint_steps(model_dir) -> list[int]:
    return sorted(int(p.split("-")[-1].split(".")[0])
                  for p in glob.glob(str(model_dir / "ckpt-*.index")))


def test_checkpoints_and_evaluations_stay_on_their_grid(tmp_path, data):
    """At the multiples of CHECKPOINT_EVERY and eval_every (4 here), though loops are 3
    steps long, a save falls off the grid (the two-stage switch at 3) or a run resumes; an
    evaluation missing at the step a run resumes from (one killed) runs then."""
    loops = ["STEPS_PER_LOOP = 3", "pretraining.keep_checkpoints = 10",
             "pretraining.eval_steps = 10"]
    two_stage = ["pretrainer.generator_hidden_fraction = 1.0",
                 "pretrainer.intermediate_size = 128", "pretraining.two_stage_steps = 3"]
    run(tmp_path / "a", data, loops + two_stage + ["NUM_TRAIN_STEPS = 10"],
        files=("tiny.gin", "ablations/two_stage.gin"))
    assert _checkpoint_steps(tmp_path / "a") == [0, 3, 4, 8, 10]
    b = tmp_path / "b"
    run(b, data, loops + ["NUM_TRAIN_STEPS = 8"])  # no evaluation
    assert _checkpoint_steps(b) == [0, 4, 8]
    _, lines = run(b, data, loops + ["NUM_TRAIN_STEPS = 12"], eval_data=data)
    assert _checkpoint_steps(b) == [0, 4, 8, 12]
    assert [step for step, _ in summary_tags(b / "eval")["loss/total"]] == [8, 12]
    assert "saved checkpoint to " + str(b / "ckpt-12") + "." in lines
    events = sorted(os.listdir(b / "train")) + sorted(os.listdir(b / "eval"))
    written = {name: os.path.getmtime(b / name) for name in ("model_info.json",
                                                             "operative_config.gin")}
    result, lines = run(b, data, loops + ["NUM_TRAIN_STEPS = 12"], eval_data=data)  # finished
    # Said, and nothing written: it added an event file (and the gin config's text again
    # at step 12) at every rerun.
    assert lines[-1:] == [f"{b} holds a finished run (step 12 of NUM_TRAIN_STEPS=12): nothing to "
                     "do; a larger NUM_TRAIN_STEPS extends it"]  # (after a note on the files)
    assert not any(line.startswith(("step ", "eval ", "saved ", "resuming ")) for line in lines)
    assert result["step"] == 12 and len(result["weights_sha256"]) == 64
    assert sorted(os.listdir(b / "train")) + sorted(os.listdir(b / "eval")) == events
    assert written == {name: os.path.getmtime(b / name) for name in written}


@pytest.mark.usefixtures("eager")
def test_resuming_with_another_batch_size_is_refused_before_anything_is_written(tmp_path,
                                                                               data):
    """The checkpoint's data position counts batches of the first run's size: a rerun with
    another TRAIN_BATCH_SIZE (or sequence length) stops with one line, and the model dir's
    model_info.json and operative_config.gin still describe the run it holds."""
    run(tmp_path, data, ["NUM_TRAIN_STEPS = 2"])
    before = {name: (tmp_path / name).read_bytes()
              for name in ("model_info.json", "operative_config.gin")}
    with pytest.raises(UserInputError, match=r"holds a run with TRAIN_BATCH_SIZE=8 \(model_info"
                                             r"\.json\), this one has 16; .* rerun with "
                                             r"TRAIN_BATCH_SIZE=8, or start a new --model_dir"):
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 4", "TRAIN_BATCH_SIZE = 16"])
    # A run past this one's end (it finished doing nothing, and model_info.json then said
    # NUM_TRAIN_STEPS=1 of weights trained 2 steps).
    with pytest.raises(UserInputError, match=r"holds a run at step 2, past this one's "
                                             r"NUM_TRAIN_STEPS=1; rerun with NUM_TRAIN_STEPS=2 "
                                             r"\(more extends the run\), or start a new "):
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 1"])
    # Another seed would change the data order, masks and samples mid-run.
    with pytest.raises(UserInputError, match=r"holds a run with --seed=0 \(model_info\.json\), "
                                             r"this one has --seed=1: .* rerun with --seed=0"):
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 4"], seed=1)
    with pytest.raises(UserInputError, match=r"holds a run in float32 \(model_info.json\), whose "
                                             r"checkpoint has no loss scale for mixed_float16"):
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 4", "pretraining.precision = 'mixed_float16'"])
    # Another objective, or a pretrainer option the weights do not show, even in a dry run.
    with pytest.raises(UserInputError, match=r"holds a run trained otherwise \(objective "
                                             r"'electra' -> 'mlm'; model_info\.json\): resume "
                                             r"it with .* \(its operative_config\.gin\)"):
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 4", "OBJECTIVE = 'mlm'"], dry_run=True)
    with pytest.raises(UserInputError, match=r"otherwise \(pretrainer\.temperature 1\.0 -> "
                                             r"2\.0; model_info"):
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 4", "pretrainer.temperature = 2.0"])
    # Other masks mid-run, as another MASK_PROB would give; named as MASK_PROB (it named
    # max_predictions_per_seq, derived from it, whose advice led to a second refusal).
    with pytest.raises(UserInputError, match=r"otherwise \(mask_prob 0\.15 -> 0\.2; model_info"):
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 4", "MASK_PROB = 0.2"])
    with pytest.raises(UserInputError, match=r"otherwise \(whole_word_masking False -> True; "
                                             r"model_info"):
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 4", "pretraining.whole_word_masking = True"])
    # A dry run in it prints what it would run and leaves the run's own record.
    info, _ = run(tmp_path, data, ["NUM_TRAIN_STEPS = 4"], dry_run=True)
    assert info["num_train_steps"] == 4
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    result, lines = run(tmp_path, data, ["NUM_TRAIN_STEPS = 4"])  # the same batch resumes
    assert result["step"] == 4
    # Run longer than first set: the config of its first 2 steps is kept beside the new one.
    kept = tmp_path / "operative_config-2.gin"
    assert kept.read_bytes() == before["operative_config.gin"]
    assert (f"note: this run's gin config differs from the one its first 2 steps ran with, "
            f"kept as {kept}") in lines
    assert "NUM_TRAIN_STEPS = 4" in (tmp_path / "operative_config.gin").read_text()
    # TensorBoard holds each config where it began training (it was written again at each
    # resume, and a config that trained nothing stayed beside the one rerun after it).
    from electra_tf.training import summaries
    texts = summaries.read_texts(str(tmp_path / "train"))["config/operative_config"]
    assert [(step, "NUM_TRAIN_STEPS = 4" in text) for step, text in texts] == [
        (1, False), (3, True)]
    run(tmp_path, data, ["NUM_TRAIN_STEPS = 6"], eager=True)
    run(tmp_path, data, ["NUM_TRAIN_STEPS = 6"], eager=True)  # (finished: nothing written)
    texts = summaries.read_texts(str(tmp_path / "train"))["config/operative_config"]
    assert [step for step, _ in texts] == [1, 3, 5]


@pytest.mark.usefixtures("eager")
def test_a_resumed_run_removes_the_shards_of_an_interrupted_save(tmp_path, data):
    """A save killed midway leaves ckpt-N_temp/ (the shards TensorFlow merges into
    ckpt-N.data-* when the save completes), as large as a checkpoint, kept for good unless
    step N is saved again (a preemption's save at step 3 is not); a rerun removes it."""
    run(tmp_path, data, ["NUM_TRAIN_STEPS = 2"])
    stale = tmp_path / "ckpt-3_temp"
    tf.raw_ops.SaveV2(prefix=str(stale / "part-00000-of-00001"), tensor_names=["w"],
                      shape_and_slices=[""], tensors=[tf.zeros([64])])
    assert sorted(os.listdir(stale)) == ["part-00000-of-00001.data-00000-of-00001",
                                         "part-00000-of-00001.index"]
    result, lines = run(tmp_path, data, ["NUM_TRAIN_STEPS = 4"])
    assert result["step"] == 4 and not stale.exists()
    assert f"removed {stale}: the part-written files of an interrupted save" in lines
    assert os.path.exists(tmp_path / "ckpt-4.index")


@pytest.mark.usefixtures("eager")
def test_an_imported_model_dir_is_not_resumed(tmp_path, data):
    """Pre-training in the dir convert_checkpoint.py wrote (its checkpoint holds the model
    only) was refused as 'a checkpoint of another model or configuration'; the message now
    names the fix, and the same import as --init_checkpoint trains."""
    from electra_tf.export import converters
    from electra_tf.modeling.config import EncoderConfig, generator_config
    d = EncoderConfig(vocab_size=30522, hidden_size=32, num_layers=1, num_heads=1,
                      intermediate_size=64, embedding_size=32)
    g = generator_config(d, 0.5, 1.0)
    imported = tmp_path / "imported"
    converters.write_model_dir(converters.new_pretrainer(d, g, "embeddings"), str(imported),
                               UNCASED_VOCAB, None, None, "test")
    before = sorted(os.listdir(imported))
    with pytest.raises(UserInputError, match=rf"^--model_dir={imported} holds a checkpoint "
                                             "imported by convert_checkpoint.py, not a run to "
                                             "resume; pre-train into a new --model_dir with "
                                             rf"--init_checkpoint={imported}\n"):
        run(imported, data, ["NUM_TRAIN_STEPS = 2"])
    assert sorted(os.listdir(imported)) == before
    result, lines = run(tmp_path / "continued", data, ["NUM_TRAIN_STEPS = 2"],
                        init_checkpoint=str(imported))
    assert result["step"] == 2 and f"initialised the model from {imported}/ckpt-1" in lines
    info = json.loads((tmp_path / "continued" / "model_info.json").read_text())
    # where the weights came from, and the import's 512 positions (trained elsewhere)
    assert (info["init_source"], info["trained_seq_length"]) == ("test", 512)


def _copy_data(data, folder, files=None, vocab_file=None):
    """The data's records (the first `files` of them) and metadata.json in `folder`; with
    `vocab_file`, the metadata names that vocab (and its hash) instead."""
    from electra_tf import tokenization
    source = os.path.dirname(data)
    folder.mkdir()
    for path in sorted(glob.glob(data))[:files]:
        shutil.copy(path, folder)
    metadata = json.loads(open(os.path.join(source, "metadata.json")).read())
    if vocab_file:
        metadata.update(vocab_file=str(vocab_file),
                        vocab_sha256=tokenization.vocab_sha256(str(vocab_file)))
    (folder / "metadata.json").write_text(json.dumps(metadata))
    return str(folder / "*.tfrecord")


def _write_records(path, records) -> str:
    """The serialized examples `records` (a tf.data.Dataset) as the TFRecord file `path`."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record.numpy())
    return str(path)


def test_data_without_metadata_is_cased_as_its_vocab(tmp_path, data):
    """Records without metadata.json (the official builder's) record no casing: the run
    takes it from the vocab, so that a cased model is not served lower-cased text."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in sorted(glob.glob(data)):
        shutil.copy(path, bare)
    cased = cased_vocab(tmp_path / "cased.txt")
    uncased = os.path.join(ROOT, "data", "vocab", "bert_uncased.txt")
    for vocab_file, lower_case in ((cased, False), (uncased, True)):
        info, _ = run(tmp_path / f"model_{lower_case}", str(bare / "*.tfrecord"),
                      vocab_file=vocab_file, dry_run=True)
        assert (info["lower_case"], info["strip_accents"]) == (lower_case, lower_case)


@pytest.mark.usefixtures("eager")
def test_resuming_with_another_vocab_or_other_files_is_refused_in_one_line(tmp_path, data):
    """A model dir resumes only with the vocab it was trained with (one of the same size
    but other tokens, e.g. a learn_vocab.py rerun, is refused by its hash before anything
    is written) and with its data position's files (fewer files: one line, not
    TensorFlow's iterator error); --init_checkpoint from it with the other vocab is allowed
    (an edited vocab) and said; export with the other vocab is refused."""
    from electra_tf.training.checkpoints import load_pretrainer
    vocab = open(os.path.join(ROOT, "data", "vocab", "bert_uncased.txt")).read().split("\n")
    vocab[2000], vocab[2001] = vocab[2001], vocab[2000]
    other_vocab = tmp_path / "other_vocab.txt"
    other_vocab.write_text("\n".join(vocab))
    other = _copy_data(data, tmp_path / "other", vocab_file=other_vocab)
    model_dir = tmp_path / "model"
    run(model_dir, data, ["NUM_TRAIN_STEPS = 2"])
    before = (model_dir / "model_info.json").read_bytes()
    with pytest.raises(UserInputError, match=r"was trained with another vocab \(.*bert_uncased"
                                             r"\.txt as it was then; model_info\.json's "
                                             r"vocab_sha256 differs from .*other_vocab\.txt's"):
        run(model_dir, other, ["NUM_TRAIN_STEPS = 4"])
    assert (model_dir / "model_info.json").read_bytes() == before
    with pytest.raises(UserInputError, match=r"other_vocab\.txt is not the vocab .* was trained "
                                             r"with \(its sha256 differs"):
        load_pretrainer(str(model_dir), str(other_vocab))

    fewer = _copy_data(data, tmp_path / "fewer", files=1)
    with pytest.raises(UserInputError, match=r"was trained on other --train_data files than "
                                             r"these \(pretrain_data-00001-of-00002\.tfrecord "
                                             r"then, not now; model_info.json's train_files\)"
                                             r", whose data position its checkpoint holds; "
                                             r"resume with the --train_data it was trained with"):
        run(model_dir, fewer, ["NUM_TRAIN_STEPS = 4"])
    # Shards of the same names from another corpus (restored without a word), and the same
    # text tokenized otherwise (model_info.json took the new casing).
    from electra_tf.data.writer import build_pretraining_data
    for name, novels, options in (
            ("another", ("emma", "mansfieldpark"), {}),
            ("accents", ("persuasion", "northangerabbey"), {"strip_accents": False})):
        build_pretraining_data(",".join(os.path.join(ROOT, "data", "corpus", f"{n}.txt.gz")
                                        for n in novels),
                               os.path.join(ROOT, "data", "vocab", "bert_uncased.txt"),
                               str(tmp_path / name), show_progress=False, log=lambda *_: None,
                               **options)
    assert sorted(os.listdir(tmp_path / "another")) == sorted(os.listdir(os.path.dirname(data)))
    with pytest.raises(UserInputError, match=r"trained on other --train_data files than these "
                                             r"\(pretrain_data-00000-of-\d+\.tfrecord: \d+ "
                                             r"examples then, \d+ now"):
        run(model_dir, str(tmp_path / "another" / "*.tfrecord"), ["NUM_TRAIN_STEPS = 4"])
    with pytest.raises(UserInputError, match=r"was trained on data tokenized otherwise "
                                             r"\(strip_accents=True there, False here: "
                                             r"model_info\.json against this data's metadata"
                                             r"\.json\); resume with the data it was trained "
                                             r"with, or rebuild this data with "
                                             r"--lower_case=true --strip_accents=true\n"):
        run(model_dir, str(tmp_path / "accents" / "*.tfrecord"), ["NUM_TRAIN_STEPS = 4"])
    assert (model_dir / "model_info.json").read_bytes() == before
    # The same files without their metadata.json (copied shards alone): names agree, the
    # examples are not known, the casing is the vocab's: resumed.
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in sorted(glob.glob(data)):
        shutil.copy(path, bare)
    result, _ = run(model_dir, str(bare / "*.tfrecord"), ["NUM_TRAIN_STEPS = 4"],
                    vocab_file=UNCASED_VOCAB)
    assert result["step"] == 4
    assert pretraining._other_files([["a", 3], ["b", None]], [["a", 3], ["b", 9]]) == []
    assert pretraining._other_files([["a", 3], ["b", 4]], [["b", 4], ["a", 3]]) == [
        "the same files in another order"]

    note = (f"note: --init_checkpoint={model_dir} was trained with another vocab of the same "
            "size (model_info.json's vocab_sha256 differs): each token id keeps the embedding "
            "of the token it had there")
    _, lines = run(tmp_path / "edited", other, ["NUM_TRAIN_STEPS = 2"],
                   init_checkpoint=str(model_dir), dry_run=True)  # (said by a dry run too)
    assert note in lines
    result, lines = run(tmp_path / "edited", other, ["NUM_TRAIN_STEPS = 2"],
                        init_checkpoint=str(model_dir))
    assert result["step"] == 2
    assert note in lines


def test_a_run_resumes_after_its_data_moved(tmp_path, data, monkeypatch):
    """A checkpoint's data position names the files by index, so a run resumes with its
    data in another folder (copied to a new machine or disk) and ends as it would have
    where the data was (it failed with TensorFlow's NotFoundError for the old path, or read
    the old folder where it was still there). A run begun before names them by path: it
    resumes so, and where those paths are gone says so in one line."""
    def began(name, **dataset_options):  # 2 steps; its model dir copied to resume twice
        folder = _copy_data(data, tmp_path / f"{name}_data")
        if dataset_options:
            original = pipeline.pretraining_dataset
            monkeypatch.setattr(pipeline, "pretraining_dataset",
                                lambda *a, **k: original(*a, **{**k, **dataset_options}))
        run(tmp_path / name, folder, ["NUM_TRAIN_STEPS = 2"])
        monkeypatch.undo()
        shutil.copytree(tmp_path / name, tmp_path / f"{name}_moved")
        return folder

    from electra_tf.data import pipeline
    folder = began("now")
    info = json.loads((tmp_path / "now" / "model_info.json").read_text())
    assert info["data_position"] == "file_index"
    # (a copy of its checkpoints without model_info.json resumes as this release's run)
    shutil.copytree(tmp_path / "now", tmp_path / "now_bare")
    (tmp_path / "now_bare" / "model_info.json").unlink()
    run(tmp_path / "now_bare", folder, ["NUM_TRAIN_STEPS = 4"])
    run(tmp_path / "now", folder, ["NUM_TRAIN_STEPS = 4"])
    os.rename(tmp_path / "now_data", tmp_path / "elsewhere")
    result, lines = run(tmp_path / "now_moved", str(tmp_path / "elsewhere" / "*.tfrecord"),
                        ["NUM_TRAIN_STEPS = 4"])
    assert result["step"] == 4 and any(line.startswith("resuming from") for line in lines)
    here = model_values(str(tmp_path / "now" / "ckpt-4"))
    for other in ("now_moved", "now_bare"):
        moved = model_values(str(tmp_path / other / "ckpt-4"))
        assert set(here) == set(moved)
        for name in here:
            np.testing.assert_array_equal(here[name], moved[name], err_msg=f"{other} {name}")

    # A run of an earlier release (paths in its position, no data_position recorded).
    folder = began("before", files_by_index=False)
    for name in ("before", "before_moved"):
        path = tmp_path / name / "model_info.json"
        info = json.loads(path.read_text())
        del info["data_position"]
        path.write_text(json.dumps(info))
    run(tmp_path / "before", folder, ["NUM_TRAIN_STEPS = 4"])
    os.rename(tmp_path / "before_data", tmp_path / "before_elsewhere")
    moved_data = str(tmp_path / "before_elsewhere" / "*.tfrecord")
    with pytest.raises(UserInputError, match=(
            r"^--model_dir=.*before_moved's checkpoint \(.*ckpt-2\) holds a data position "
            r"naming its input files by path, as runs begun before this release did, and "
            r".*before_data/pretrain_data-0000\d-of-00002\.tfrecord is not there: resume "
            r"with the files where they were \(a link from there to where they are now will "
            r"do\)\n")):
        run(tmp_path / "before_moved", moved_data, ["NUM_TRAIN_STEPS = 4"])
    os.symlink(tmp_path / "before_elsewhere", tmp_path / "before_data")
    run(tmp_path / "before_moved", moved_data, ["NUM_TRAIN_STEPS = 4"])
    here, moved = (model_values(str(tmp_path / d / "ckpt-4"))
                   for d in ("before", "before_moved"))
    for name in here:
        np.testing.assert_array_equal(here[name], moved[name], err_msg=name)
    info = json.loads((tmp_path / "before_moved" / "model_info.json").read_text())
    assert info["data_position"] == "file_path"


@pytest.mark.usefixtures("eager")
def test_evaluation_runs_the_steps_every_worker_has_data_for(tmp_path, data):
    """Each worker must run as many evaluation steps (one that runs out first would leave the
    others in their all-reduce forever): the steps are what the poorest worker's share of
    one pass holds, at most eval_steps; a held-out set under one batch is refused."""
    from electra_tf.data import pipeline
    files = pipeline.list_files(data)
    counts = [sum(1 for _ in tf.data.TFRecordDataset(f)) for f in files]
    assert len(files) >= 2 and min(counts) > 50
    assert pipeline.batches_per_worker(data, 8, 1, 10 ** 6) == sum(counts) // 8
    assert pipeline.batches_per_worker(data, 8, 1, 5) == 5
    for workers in range(2, len(files) + 1):  # files sharded by worker
        assert pipeline.batches_per_worker(data, 4, workers, 10 ** 6) == min(
            sum(counts[i::workers]) // 4 for i in range(workers))
    # Fewer files than workers: records sharded round robin.
    assert pipeline.batches_per_worker(files[0], 4, 2, 10 ** 6) == counts[0] // 2 // 4
    small = _write_records(tmp_path / "small.tfrecord", tf.data.TFRecordDataset(files[0]).take(20))
    result, lines = run(tmp_path / "run", data, ["pretraining.eval_steps = 50"],
                        eval_data=small)
    assert ("eval: --eval_data gives 2 full batches of 8, fewer than pretraining.eval_steps=50; "
            "each evaluation runs 2 steps") in lines
    assert result["eval"]["loss/total"] > 0
    tiny = _write_records(tmp_path / "tiny.tfrecord", tf.data.TFRecordDataset(files[0]).take(3))
    with pytest.raises(UserInputError, match=r"^--eval_data=.*tiny.tfrecord holds fewer "
                                             r"examples than one evaluation batch of 8 "
                                             r"\(TRAIN_BATCH_SIZE=8\); hold out more"):
        run(tmp_path / "tiny", data, eval_data=tiny)
    assert not os.path.exists(tmp_path / "tiny")
    # Training data under one batch trains (each batch repeats it), with a note.
    _, lines = run(tmp_path / "few", tiny, vocab_file=UNCASED_VOCAB, dry_run=True)
    assert (f"note: --train_data={tiny} holds fewer examples than one batch of 8 "
            "(TRAIN_BATCH_SIZE=8): each batch repeats them; build more data, or lower "
            "TRAIN_BATCH_SIZE") in lines


def test_an_evaluation_is_the_models_metrics_on_the_held_out_batches(data, mirrored_strategy):
    """The evaluator's losses and metrics over n steps are the model's (dropout off) on the
    first n held-out batches: losses averaged over the steps, accuracies and the replaced
    fraction weighted by real masked slots and tokens. A second evaluation sees the same
    batches, masks and samples; two replicas, each with its half of every batch, give
    the same figures."""
    import keras

    from electra_tf.data import pipeline
    from electra_tf.modeling.config import EncoderConfig, generator_config
    from electra_tf.modeling.pretrainer import ElectraPretrainer
    from electra_tf.training.trainer import PretrainingEvaluator, TrainState
    d = EncoderConfig(vocab_size=30522, hidden_size=32, num_layers=1, num_heads=1,
                      intermediate_size=64, embedding_size=32)
    options = dict(max_seq_length=128, vocab_file=UNCASED_VOCAB, seed=5, is_training=False)
    batches = list(pipeline.pretraining_dataset(data, 8, **options).take(3))

    def build(strategy):
        with strategy.scope():
            model = ElectraPretrainer(d, generator_config(d, 0.5, 1.0))
            model(batches[0])
            state = TrainState(max_skips=1)
        state.step.assign(7)
        return model, state

    keras.utils.set_random_seed(1)
    model, state = build(tf.distribute.get_strategy())
    # A unigram generator, sharpened (its logits' bias twice the log counts of the masked
    # words): it predicts the commonest at every slot and samples common words, some right.
    masked = np.concatenate([b["masked_lm_ids"].numpy()[b["masked_lm_weights"].numpy() > 0]
                             for b in batches])
    model.generator_predictions.output_bias.assign(
        2 * np.log(np.bincount(masked, minlength=30522) + 0.01).astype(np.float32))
    outputs = [model(b, step=7, training=False) for b in batches]

    def weighted(values, weights):
        return sum(float(np.sum(v * w)) for v, w in zip(values, weights)) / sum(
            float(np.sum(w)) for w in weights)

    slots = [o["masked_lm_weights"].numpy() for o in outputs]
    tokens = [o["discriminator_weights"].numpy() for o in outputs]
    labels = [o["discriminator_labels"].numpy() for o in outputs]
    said = [(o["discriminator_logits"].numpy() > 0) for o in outputs]
    ids = [o["masked_lm_ids"].numpy() for o in outputs]
    expected = {
        "loss/total": np.mean([float(o["loss"]) for o in outputs]),
        "loss/generator": np.mean([float(o["generator_loss"]) for o in outputs]),
        "loss/discriminator": np.mean([float(o["discriminator_loss"]) for o in outputs]),
        "generator/mlm_accuracy": weighted(
            [np.argmax(o["mlm_logits"].numpy(), -1) == i for o, i in zip(outputs, ids)], slots),
        "generator/sampled_accuracy": weighted(
            [o["sampled_ids"].numpy() == i for o, i in zip(outputs, ids)], slots),
        "discriminator/accuracy": weighted([s == y for s, y in zip(said, labels)], tokens),
        "discriminator/replaced_fraction": weighted(labels, tokens),
        "discriminator/recall": weighted(said, [t * y for t, y in zip(tokens, labels)]),
    }
    assert 0.02 < expected["generator/mlm_accuracy"] < 0.2
    assert 0.01 < expected["generator/sampled_accuracy"] < 0.2
    assert 0.05 < expected["discriminator/replaced_fraction"] < 0.2

    for strategy in (tf.distribute.get_strategy(), mirrored_strategy):
        if strategy is mirrored_strategy:
            weights = model.get_weights()
            model, state = build(strategy)
            model.set_weights(weights)
        dataset, local = pipeline.worker_dataset(strategy, 8, data, **options)
        evaluator = PretrainingEvaluator(model, strategy, dataset, state, local)
        evaluator.evaluate(tf.constant(3, tf.int32))
        first = evaluator.last_eval
        evaluator.evaluate(tf.constant(3, tf.int32))
        assert evaluator.last_eval == first
        for tag, value in expected.items():
            assert first[tag] == pytest.approx(value, rel=1e-5, abs=1e-7), (strategy, tag)


@pytest.mark.usefixtures("eager")
def test_an_in_process_run_puts_back_what_it_set_for_the_process(tmp_path, data):
    """During a run SIGTERM only flags a save for its loop (PreemptionCheckpointHandler),
    and the run sets Keras' precision policy and (--deterministic) op determinism; after
    it, in a notebook or any longer process, the handler, policy and determinism from
    before are back, on success and on error."""
    import keras
    from tensorflow.python.framework import config

    def handler(signum, frame):
        pass

    assert not config.is_op_determinism_enabled()
    before = signal.signal(signal.SIGTERM, handler)
    ctrl_c = signal.getsignal(signal.SIGINT)  # pytest's, or Python's KeyboardInterrupt
    try:
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 2", "pretraining.precision = 'mixed_bfloat16'"],
            deterministic=True)
        assert signal.getsignal(signal.SIGTERM) is handler
        assert signal.getsignal(signal.SIGINT) is ctrl_c
        assert keras.mixed_precision.dtype_policy().name == "float32"
        assert not config.is_op_determinism_enabled()
        with open(tmp_path / "operative_config.gin") as f:  # the run did run with both
            assert "pretraining.precision = 'mixed_bfloat16'" in f.read()
        with pytest.raises(ValueError, match="not finite"):
            run(tmp_path / "nan", data, ["LEARNING_RATE = 1e30", "WARMUP_STEPS = 0"])
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.usefixtures("eager")
def test_init_checkpoint_starts_from_those_weights(tmp_path, data):
    run(tmp_path / "a", data)
    run(tmp_path / "b", data, ["NUM_TRAIN_STEPS = 2"], init_checkpoint=str(tmp_path / "a"))
    a = model_values(str(tmp_path / "a" / "ckpt-6"))
    b0 = model_values(str(tmp_path / "b" / "ckpt-0"))
    for name in a:
        np.testing.assert_array_equal(a[name], b0[name], err_msg=name)
    # Into a variant with a part only its training uses (the adversarial generator's reward
    # baseline, the learned loss balance), which a's checkpoint lacks: that part starts from
    # its initial values (it was refused as an architecture that does not fit).
    for name in ("adversarial", "learned_loss_weights"):
        run(tmp_path / name, data, ["NUM_TRAIN_STEPS = 2"],
            files=("tiny.gin", f"ablations/{name}.gin"), init_checkpoint=str(tmp_path / "a"))
        start = model_values(str(tmp_path / name / "ckpt-0"))
        for key in a:
            np.testing.assert_array_equal(a[key], start[key], err_msg=key)
        own = {"adversarial": "reward_baseline"}.get(name, "loss_log_scales")
        assert {key.split("/")[1] for key in set(start) - set(a)} == {own}
    # Rerun in b, it resumes b: the flag is not used, and a note says so, dry run or not.
    for dry_run in (True, False):
        _, lines = run(tmp_path / "b", data, ["NUM_TRAIN_STEPS = 2"], dry_run=dry_run,
                       init_checkpoint=str(tmp_path / "a"))
        assert lines[0] == (f"note: --init_checkpoint={tmp_path / 'a'} is not used: "
                            f"--model_dir={tmp_path / 'b'} holds a run, which this one resumes "
                            "(--init_checkpoint starts a new --model_dir)")
    for dry_run in (True, False):  # a dry run checks it too
        lines = []
        with pytest.raises(ValueError, match=re.escape(
                f"--init_checkpoint={tmp_path / 'a' / 'ckpt-6'} does not fit this model (its "
                "discriminator has intermediate_size 64 (its model_info.json), this model's "
                f"48); describe its architecture: --gin_file={tmp_path / 'a'}/"
                "operative_config.gin after the size's file")):
            run(tmp_path / "c", data, ["pretrainer.intermediate_size = 48",
                                       "WARMUP_STEPS = 100"],
                init_checkpoint=str(tmp_path / "a"), dry_run=dry_run, lines=lines)
        # The schedule's note comes once the run starts (it came before the refusal).
        assert not any("learning rate peaks" in line for line in lines), lines
    # Another head count: the weights load (their shapes are alike) and attend otherwise;
    # it loaded without a word. For another variant too, which takes the encoder alone.
    for files in (("tiny.gin",), ("tiny.gin", "ablations/electra_15.gin")):
        with pytest.raises(UserInputError, match=re.escape(
                f"--init_checkpoint={tmp_path / 'a' / 'ckpt-6'} does not fit this model (its "
                "discriminator has num_heads 1 (its model_info.json), this model's 2: the "
                "weights take this model's shapes, split into other attention heads); "
                f"describe its architecture: --gin_file={tmp_path / 'a'}/operative_config.gin "
                "after the size's file")):
            run(tmp_path / "c", data, ["pretrainer.num_heads = 2"], files=files,
                init_checkpoint=str(tmp_path / "a"), dry_run=True)
    _, lines = run(tmp_path / "c", data, ["WARMUP_STEPS = 100"],
                   init_checkpoint=str(tmp_path / "a"), dry_run=True)
    assert sum("learning rate peaks" in line for line in lines) == 1, lines
    # Of another hidden size, whose generator's follows it: the same (it was said to be
    # another variant, "trained with sharing 'embeddings', a generator of hidden_size 16",
    # and told to use the same size file).
    with pytest.raises(ValueError, match=re.escape(
            "does not fit this model (its discriminator has hidden_size 32, embedding_size "
            "32 (its model_info.json), this model's 64, 64); describe its architecture")):
        run(tmp_path / "c", data, ["pretrainer.hidden_size = 64",
                                   "pretrainer.embedding_size = 64"],
            init_checkpoint=str(tmp_path / "a"))
    assert not glob.glob(str(tmp_path / "c" / "ckpt-*"))
    # A mistyped one is said to be missing, before anything is built; a model dir that is a
    # file (or inside one) too (was a traceback at the first write).
    with pytest.raises(UserInputError, match=(
            rf"^--init_checkpoint={tmp_path}/ab does not exist; pass a model dir \(of "
            r"run_pretraining.py or convert_checkpoint.py\) or a ckpt-N prefix in one")):
        run(tmp_path / "d", data, init_checkpoint=str(tmp_path / "ab"))
    (tmp_path / "afile").write_text("mine")
    for model_dir, said in ((tmp_path / "afile", "is a file, not a folder"),
                            (tmp_path / "afile" / "run", f"is inside {tmp_path}/afile, a file")):
        with pytest.raises(UserInputError, match=rf"^--model_dir={model_dir} {said}; choose "
                                                 r"another --model_dir\n"):
            run(model_dir, data)
    assert not (tmp_path / "d").exists() and (tmp_path / "afile").read_text() == "mine"


@pytest.mark.usefixtures("eager")
def test_init_checkpoint_of_another_variant_gives_its_encoder(tmp_path, data):
    """ELECTRA from a BERT-style (mlm) run of this project, from uniform replacements or
    from Replace MLM, Electric from mlm, BERT from ELECTRA: the encoder (and, between ELECTRA
    runs, the replaced-token head) comes from the checkpoint, the parts the other variant
    lacks or shapes otherwise start fresh, said in a note and model_info.json (it was
    refused as an architecture that does not fit, and the hint's operative_config.gin
    trained mlm again)."""
    for name in ("mlm", "uniform_generator", "replace_mlm"):
        run(tmp_path / name, data, files=("tiny.gin", f"ablations/{name}.gin"))
    run(tmp_path / "electra", data)
    for start, files, taken, fresh in (
            ("mlm", ("tiny.gin",), ["discriminator"],
             ["discriminator_predictions", "generator", "generator_predictions"]),
            ("uniform_generator", ("tiny.gin",), ["discriminator", "discriminator_predictions"],
             ["generator", "generator_predictions"]),
            ("electra", ("tiny.gin", "ablations/mlm.gin"), ["discriminator"],
             ["generator_predictions"]),
            # Replace MLM's checkpoint has no replaced-token head (its loss is the MLM's).
            ("replace_mlm", ("tiny.gin",), ["discriminator"],
             ["discriminator_predictions", "generator", "generator_predictions"]),
            ("mlm", ("tiny.gin", "ablations/electric.gin"), ["discriminator"],
             ["discriminator_predictions", "generator_ltr", "generator_predictions",
              "generator_rtl"])):
        out = tmp_path / f"{start}_{len(files)}"
        _, lines = run(out, data, ["NUM_TRAIN_STEPS = 2"], files=files,
                       init_checkpoint=str(tmp_path / start))
        before = model_values(str(tmp_path / start / "ckpt-6"))
        after = model_values(str(out / "ckpt-0"))
        for key in after:
            part = key.split("/")[1]
            if part in taken:
                np.testing.assert_array_equal(after[key], before[key], err_msg=key)
            else:
                assert part in fresh, key
        info = json.load(open(out / "model_info.json"))
        assert info["init_fresh"] == fresh
        note = [line for line in lines if line.startswith("note: --init_checkpoint")]
        assert note[0].startswith(f"note: --init_checkpoint={tmp_path / start} was trained "
                                  f"with objective '")
        assert f"; {', '.join(fresh)} start fresh (model_info.json: init_fresh)" in note[0]
    # Another generator (what it shares, its size) is another network too: the advice of
    # the refusal to resume with another ablation file (start a new --model_dir from it)
    # failed, the generator's weights not fitting.
    run(tmp_path / "sharing_all", data, ["pretrainer.generator_hidden_fraction = 1.0"],
        files=("tiny.gin", "ablations/sharing_all.gin"))
    for start, files, more, said in (
            ("sharing_all", ("tiny.gin",), [],
             "sharing 'all', a generator of hidden_size 32, this run with sharing "
             "'embeddings', a generator of hidden_size 16"),
            ("electra", ("tiny.gin", "ablations/sharing_none.gin"), [],
             "sharing 'embeddings', a generator of embedding_size 32, this run with sharing "
             "'none', a generator of embedding_size 16"),
            ("electra", ("tiny.gin",), ["pretrainer.generator_hidden_fraction = 1.0"],
             "sharing 'embeddings', a generator of hidden_size 16, intermediate_size 64, this "
             "run with sharing 'embeddings', a generator of hidden_size 32, intermediate_size "
             "128")):
        out = tmp_path / f"{start}_{len(files)}_{len(more)}"
        _, lines = run(out, data, ["NUM_TRAIN_STEPS = 2", *more], files=files,
                       init_checkpoint=str(tmp_path / start))
        before = model_values(str(tmp_path / start / "ckpt-6"))
        after = model_values(str(out / "ckpt-0"))
        for key in after:
            if key.split("/")[1] in ("discriminator", "discriminator_predictions"):
                np.testing.assert_array_equal(after[key], before[key], err_msg=key)
        assert json.load(open(out / "model_info.json"))["init_fresh"] == [
            "generator", "generator_predictions"]
        note = [line for line in lines if line.startswith("note: --init_checkpoint")]
        assert note[0].startswith(f"note: --init_checkpoint={tmp_path / start} was trained "
                                  f"with {said}: its encoder and replaced-token head start the "
                                  "discriminator"), note
    # ELECTRA 15%'s networks are ELECTRA's: the whole model is taken, as from its own kind.
    _, lines = run(tmp_path / "electra_15", data, ["NUM_TRAIN_STEPS = 2"],
                   files=("tiny.gin", "ablations/electra_15.gin"),
                   init_checkpoint=str(tmp_path / "electra"))
    before = model_values(str(tmp_path / "electra" / "ckpt-6"))
    after = model_values(str(tmp_path / "electra_15" / "ckpt-0"))
    assert after.keys() == before.keys()
    for key in after:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    assert not any(line.startswith("note: --init_checkpoint") for line in lines)
    # A two-stage run would overwrite that encoder at its switch.
    with pytest.raises(UserInputError, match=r"was trained with objective 'mlm': a two-stage "
                                             r"run starts its discriminator from its "
                                             r"generator at the switch, "):
        run(tmp_path / "two_stage", data, ["pretrainer.generator_hidden_fraction = 1.0",
                                           "pretrainer.intermediate_size = 128"],
            files=("tiny.gin", "ablations/two_stage.gin"), init_checkpoint=str(tmp_path / "mlm"))
    # So would it a joint ELECTRA run's discriminator (it was read, then overwritten; or,
    # of a smaller generator, "does not fit ... describe its architecture", which did not).
    with pytest.raises(UserInputError, match=r"was trained with algorithm 'joint' \(its "
                                             r"model_info.json\): a two-stage run trains its "
                                             r"generator, then starts its discriminator from "
                                             r"it, so the checkpoint's discriminator would be "
                                             r"overwritten; start a joint run from it"):
        run(tmp_path / "two_stage", data, ["pretrainer.generator_hidden_fraction = 1.0",
                                           "pretrainer.intermediate_size = 128"],
            files=("tiny.gin", "ablations/two_stage.gin"),
            init_checkpoint=str(tmp_path / "electra"))
    # Of another encoder shape, it is still refused, naming its variant.
    with pytest.raises(UserInputError, match=r"'s encoder does not fit this model's \(.*\); it "
                                             r"was trained with objective 'mlm', in the shape "):
        run(tmp_path / "c", data, ["pretrainer.intermediate_size = 48"],
            init_checkpoint=str(tmp_path / "mlm"))


@pytest.mark.usefixtures("eager")
def test_continued_pre_training_keeps_what_its_weights_were_trained_on(tmp_path, data):
    """A run from --init_checkpoint records the checkpoint it started from (its step) and,
    trained at 64 from weights trained at 128, the 128 positions those were trained on
    (fine-tuning said positions 64-127 "start untrained", exports cut text at 64), through
    its resumes; its data must be tokenized as the weights were (a stripped-accents model
    fed unstripped text saw [UNK]s without a word); a checkpoint's .index file names it."""
    from electra_tf.data.writer import build_pretraining_data
    from electra_tf.training.checkpoints import load_pretrainer
    run(tmp_path / "a", data)
    # (a's model dir keeps its vocab, for when the data's moves)
    assert (tmp_path / "a" / "vocab.txt").read_bytes() == Path(UNCASED_VOCAB).read_bytes()
    short = str(tmp_path / "short")
    build_pretraining_data(os.path.join(ROOT, "data", "corpus", "persuasion.txt.gz"),
                           UNCASED_VOCAB, short, max_seq_length=64, show_progress=False,
                           log=lambda *_: None)
    six = ["NUM_TRAIN_STEPS = 2", "MAX_SEQ_LENGTH = 64"]
    _, lines = run(tmp_path / "b", f"{short}/*.tfrecord", six,
                   init_checkpoint=f"{tmp_path}/a/ckpt-6.index")
    assert f"initialised the model from {tmp_path}/a/ckpt-6" in lines
    for rerun in (False, True):  # the rerun resumes b and keeps them
        if rerun:
            run(tmp_path / "b", f"{short}/*.tfrecord", ["NUM_TRAIN_STEPS = 4",
                                                         "MAX_SEQ_LENGTH = 64"])
        info = json.loads((tmp_path / "b" / "model_info.json").read_text())
        assert (info["max_seq_length"], info["trained_seq_length"]) == (64, 128)
        assert info["init_checkpoint"] == f"{tmp_path}/a/ckpt-6"
    assert load_pretrainer(str(tmp_path / "b")).max_seq_length == 128
    # From b at 128 again: its 128 is the run's own, nothing more to keep. With --eval_data
    # the weights are evaluated before they train too (a baseline for the continued run).
    run(tmp_path / "c", data, ["NUM_TRAIN_STEPS = 2", "pretraining.eval_steps = 2"],
        init_checkpoint=str(tmp_path / "b"), eval_data=data)
    info = json.loads((tmp_path / "c" / "model_info.json").read_text())
    assert info["init_checkpoint"] == f"{tmp_path}/b/ckpt-4" and "trained_seq_length" not in info
    assert pretraining._evaluated_steps(str(tmp_path / "c")) == {0, 2}
    # Data tokenized otherwise than a's (its metadata.json says so) is refused.
    unstripped = tmp_path / "unstripped"
    shutil.copytree(short, unstripped)
    metadata = json.loads((unstripped / "metadata.json").read_text())
    (unstripped / "metadata.json").write_text(json.dumps({**metadata, "strip_accents": False}))
    for dry_run in (True, False):
        with pytest.raises(UserInputError, match=(
                rf"^--init_checkpoint={tmp_path}/a was trained on text tokenized otherwise "
                r"than this data \(strip_accents=True there, False here: its model_info.json "
                r"against the data's metadata.json\); rebuild the data with --lower_case=true "
                r"--strip_accents=true\n")):
            run(tmp_path / "d", f"{unstripped}/*.tfrecord", six, dry_run=dry_run,
                init_checkpoint=str(tmp_path / "a"))
    assert not glob.glob(str(tmp_path / "d" / "ckpt-*"))
    # Longer sequences than the weights' positions: the data's length is what to change.
    with pytest.raises(UserInputError, match=(
            r"^MAX_SEQ_LENGTH=128 exceeds the model's max_position_embeddings=64; "
            r"--init_checkpoint's model has 64 positions: build the data with "
            r"--max_seq_length=64 or less\n")):
        run(tmp_path / "e", data, ["pretrainer.max_position_embeddings = 64"],
            init_checkpoint=str(tmp_path / "a"), dry_run=True)
    # A model dir that holds data, a fine-tuning run or exports is not one to write a run into.
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "results.json").write_text("{}")
    (tmp_path / "served" / "3").mkdir(parents=True)
    (tmp_path / "served" / "3" / "saved_model.pb").write_text("{}")
    for model_dir, what in ((short, r"pre-training data \(metadata.json\)"),
                            (tmp_path / "tuned", r"a fine-tuning run \(results.json\)"),
                            (tmp_path / "served", r"an exported model's versions "
                                                  r"\(N/saved_model.pb\)")):
        with pytest.raises(UserInputError, match=rf"^--model_dir={model_dir} holds {what}, "
                                                 r"not a pre-training run; choose another "
                                                 r"--model_dir\n"):
            run(model_dir, data, dry_run=True)
    assert sorted(os.listdir(tmp_path / "tuned")) == ["results.json"]


def test_the_first_difference_between_workers_settings_is_shown_as_they_read():
    """A JSON list's item, as shown in the refusal of workers given different files, was
    quoted with its separating comma ('"a-00000-of-00002.tfrecord",')."""
    from electra_tf.training.strategies import _first_difference
    ours, chiefs = (json.dumps(files, indent=1) for files in (
        ["a-00000-of-00002.tfrecord", "b.tfrecord"], ["a-00000-of-00001.tfrecord",
                                                       "b.tfrecord"]))
    assert _first_difference(ours, chiefs) == ("'\"a-00000-of-00002.tfrecord\"'",
                                               "'\"a-00000-of-00001.tfrecord\"'")
    assert _first_difference(json.dumps(["a", "b"], indent=1), json.dumps(["a"], indent=1)) == (
        "'\"b\"'", "nothing")


def test_other_files_name_what_differs_when_two_folders_hold_one_name():
    """Shards of one name from two folders: a folder dropped or added is not "the same files
    in another order"."""
    name = "pretrain_data-00000-of-00001.tfrecord"
    assert pretraining._other_files([[name, 5], [name, 7]], [[name, 5]]) == [
        f"{name}: 2 files of that name then, 1 now"]
    assert pretraining._other_files([["a", 1], ["b", 2]], [["b", 2], ["c", 1]]) == [
        "a then, not now", "c now, not then"]
    assert pretraining._other_files([["a", 1], ["b", 2]], [["b", 2], ["a", 1]]) == [
        "the same files in another order"]


def test_files_of_one_name_in_two_folders_resume_only_where_they_were(tmp_path, data):
    """A data position by index over files of one name in A/ and B/: renaming A/ to C/
    would put other files at the index's places, which their names (A's and B's the same)
    let through; such a run resumes with its files where they were (a link there will do)
    and says so otherwise. A run of unique names records no paths (it may move)."""
    folders = [_copy_data(data, tmp_path / name) for name in "AB"]
    model_dir = tmp_path / "model"
    run(model_dir, ",".join(folders), ["NUM_TRAIN_STEPS = 2"])
    info = json.loads((model_dir / "model_info.json").read_text())
    assert info["train_paths"] == sorted(glob.glob(folders[0]) + glob.glob(folders[1]))
    assert [n for n, _ in info["train_files"]] == [os.path.basename(p)
                                                   for p in info["train_paths"]]
    os.rename(tmp_path / "A", tmp_path / "C")
    moved = ",".join([str(tmp_path / "C" / "*.tfrecord"), folders[1]])
    with pytest.raises(UserInputError, match=(
            rf"^--model_dir={model_dir} was trained on files of one name in several folders "
            rf"\({tmp_path}/A/pretrain_data-00000-of-00002\.tfrecord among them; "
            r"model_info.json's train_paths\), which cannot be told apart once moved; resume "
            r"with --train_data naming them as then \(a link there to where they are now will "
            r"do\)\n")):
        run(model_dir, moved, ["NUM_TRAIN_STEPS = 4"])
    os.symlink(tmp_path / "C", tmp_path / "A")
    assert run(model_dir, ",".join(folders), ["NUM_TRAIN_STEPS = 4"])[0]["step"] == 4
    _, lines = run(tmp_path / "unique", folders[0], ["NUM_TRAIN_STEPS = 2"], dry_run=True)
    assert "train_paths" not in json.loads((tmp_path / "unique" / "model_info.json").read_text())


# ------------------------------------------------------------------------------ one big batch


def _weights_after(tmp_path, name, data, bindings, **kwargs):
    result, _ = run(tmp_path / name, data, NO_DROPOUT + ["NUM_TRAIN_STEPS = 2"] + bindings,
                    **kwargs)
    return result, model_values(str(tmp_path / name / "ckpt-2"))


# The plain run the three tests below compare with, run once: one xdist worker runs them.
ONE_BIG_BATCH = pytest.mark.xdist_group("plain_run")


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory, data):
    """(result, weights) of 2 steps on one replica without dropout."""
    return _weights_after(tmp_path_factory.mktemp("plain_run"), "one", data, [])


def _assert_close(a, b):
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=2e-5, atol=2e-7, err_msg=name)


def test_mirrored_on_a_single_device_says_it_has_one_replica():
    """A process with one device (no GPU: the CPU) under --strategy=mirrored: the run says
    it has one replica (it ran as the default strategy without a word)."""
    said = subprocess.run(
        [sys.executable, "-c", "from electra_tf.training import strategies; "
         "print(strategies.create_strategy('mirrored', log=print).num_replicas_in_sync)"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert said.stdout.splitlines() == [
        "note: --strategy=mirrored found one device (/device:CPU:0): the run has one "
        "replica", "1"], said.stderr[-2000:]


@ONE_BIG_BATCH
def test_mirrored_two_replicas_equal_one_replica_with_the_global_batch(tmp_path, data,
                                                                       plain_run):
    one, one_weights = plain_run
    two, two_weights = _weights_after(tmp_path, "two", data, [], strategy="mirrored")
    for key in ("loss/total", "loss/generator", "loss/discriminator",
                "discriminator/accuracy", "generator/mlm_accuracy"):
        assert two["train"][key] == pytest.approx(one["train"][key], rel=1e-5), key
    _assert_close(one_weights, two_weights)


def test_mfu_peak_counts_chips_and_follows_the_tf32_switch(tmp_path, data):
    """A TPU v2/v3 chip holds two TensorCores, each a replica: the peak is per chip. Float32
    runs at TF32's peak only while TensorFlow lets matmuls use TF32."""
    from electra_tf.training.strategies import chips
    assert (chips(8, "TPU v3"), chips(8, "TPU v2"), chips(8, "TPU v4")) == (4, 4, 8)
    assert (chips(2, "NVIDIA H100 80GB HBM3"), chips(1, None)) == (2, 1)
    peaks = []
    for tf32 in (True, False):
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        try:
            run(tmp_path / str(tf32), data, ["pretraining.device_name = 'NVIDIA H100 80GB HBM3'"],
                dry_run=True)
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(True)
        info = json.loads((tmp_path / str(tf32) / "model_info.json").read_text())
        peaks.append(info["peak_flops_per_second"])
    assert peaks == [494.5e12, 67e12]
    # A device named but not known: no MFU, said so (it was silent).
    _, lines = run(tmp_path / "rtx", data, ["pretraining.device_name = 'NVIDIA RTX 4090'"],
                   dry_run=True)
    assert ("note: pretraining.device_name='NVIDIA RTX 4090' has no known peak for float32 "
            "(electra_tf.modeling.flops.PEAK_FLOPS): throughput/mfu is not written") in lines


@ONE_BIG_BATCH
def test_gradient_accumulation_equals_one_step_of_the_whole_batch(tmp_path, data, plain_run):
    one, one_weights = plain_run
    four, four_weights = _weights_after(tmp_path, "four", data,
                                        ["pretraining.gradient_accumulation_steps = 4"])
    assert four["train"]["loss/total"] == pytest.approx(one["train"]["loss/total"], rel=1e-5)
    _assert_close(one_weights, four_weights)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_multi_worker_mirrored_two_processes_end_identical(tmp_path, data):
    """... and evaluate together: with eval_steps beyond the held-out records, each worker's
    share of them (files sharded by worker, unequal) gives the steps both run. The cluster
    has a chief and a worker, whose task ids are both 0: each reads its own input pipeline
    (both read pipeline 0 before, the same batches). A finished run goes on to more steps
    exactly: the worker keeps its data position (it resumed on the chief's before). A
    SIGTERM to one worker stops both at one step, and each resumes from its own checkpoint
    (a worker restored the chief's, and so its data position, where TensorFlow's handler
    did not restore the worker's own after it)."""
    addresses = [f"127.0.0.1:{_free_port()}" for _ in range(2)]

    def start(model_dir, steps, *more):
        return [script(*script_args(model_dir, data, f"NUM_TRAIN_STEPS = {steps}"), *more,
                       "--strategy=multi_worker_mirrored", env={"TF_CONFIG": json.dumps(
                           {"cluster": {"chief": addresses[:1], "worker": addresses[1:]},
                            "task": {"type": task, "index": 0}})})
                for task in ("chief", "worker")]

    def cluster(model_dir, steps, *more):
        processes = start(model_dir, steps, *more)
        outputs = [p.communicate(timeout=600) for p in processes]
        return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs)]

    def digests(outputs):
        for code, _, err in outputs:
            assert code == 0, err
        return [out.strip().splitlines()[-1].rsplit(" ", 1)[1] for _, out, _ in outputs]

    # Held-out files of 24 and 36 examples: 6 and 9 batches of 4 per worker.
    from electra_tf.data import pipeline
    records = tf.data.TFRecordDataset(pipeline.list_files(data)[0]).take(60)
    _write_records(tmp_path / "held_out_a.tfrecord", records.take(24))
    _write_records(tmp_path / "held_out_b.tfrecord", records.skip(24))
    model = tmp_path / "model"
    outputs = cluster(model, 4, "--gin_bindings=pretraining.eval_steps = 100000",
                      f"--eval_data={tmp_path}/held_out_*.tfrecord")
    first = digests(outputs)
    assert first[0] == first[1]
    assert os.path.exists(model / "ckpt-4.index")  # the chief wrote it
    # The worker's checkpoints are gone but for its data position.
    assert sorted(os.listdir(model / ".worker-1-scratch")) == [
        "data-4.data-00000-of-00001", "data-4.index"]
    assert ("eval: --eval_data gives 6 full batches of 4 on each worker, fewer than "
            "pretraining.eval_steps=100000; each evaluation runs 6 steps") in outputs[0][1]
    assert "eval at step 4" in outputs[0][1]
    assert [re.findall(r"worker \d of 2 reads input pipeline \d", out)
            for _, out, _ in outputs] == [["worker 0 of 2 reads input pipeline 0"],
                                          ["worker 1 of 2 reads input pipeline 1"]]
    # Rerun as it was, a finished run does nothing on either worker, writing nothing (they
    # resumed it and ended at once).
    events = sorted(glob.glob(str(model / "**" / "events.*"), recursive=True))
    outputs = cluster(model, 4, "--gin_bindings=pretraining.eval_steps = 100000",
                      f"--eval_data={tmp_path}/held_out_*.tfrecord")
    assert digests(outputs) == first
    for _, out, err in outputs:
        assert f"{model} holds a finished run (step 4 of NUM_TRAIN_STEPS=4)" in out, out
        # (TensorFlow's warnings of the preemption handler's checkpointed value, unread)
        assert "unrestored values" not in err and "could not be found" not in err, err
    assert sorted(glob.glob(str(model / "**" / "events.*"), recursive=True)) == events
    # A finished run goes on, the worker from its data position; a SIGTERM to the worker
    # makes both save the same step (the save on the grid is not made twice) and exit; the
    # rerun goes on from it, each worker from its own checkpoint.
    every = "--gin_bindings=CHECKPOINT_EVERY = 2"
    processes = start(model, 400, every)
    _wait_for(str(model / "ckpt-8.index"), processes[0])
    processes[1].send_signal(signal.SIGTERM)
    stopped = []
    for p, why in zip(processes, (r"stopped with the other workers \(one was sent a signal\)",
                                  r"preempted \(SIGTERM\)")):
        out, err = p.communicate(timeout=300)
        assert p.returncode == pretraining.PREEMPTED_EXIT_CODE, err[-3000:]
        stopped.append(re.findall(why + r": saved a checkpoint at step (\d+)", out))
    assert f"worker 1 resumes its data position from {model}/.worker-1-scratch/data-4" in out
    assert len(stopped[0]) == 1 and stopped[0] == stopped[1]
    at = int(stopped[0][0])
    assert 8 <= at < 400
    assert os.path.exists(model / ".worker-1-scratch" / f"ckpt-{at}.index")
    outputs = cluster(model, at + 2, every)
    went_on = digests(outputs)
    assert went_on[0] == went_on[1]
    assert f"resuming from {model}/.worker-1-scratch/ckpt-{at} (step {at})" in outputs[1][1]
    assert sorted(os.listdir(model / ".worker-1-scratch")) == [
        f"data-{at + 2}.data-00000-of-00001", f"data-{at + 2}.index"]
    # The model dir held by a live run of this machine (its mark): the chief refuses and
    # its worker stops too, in one line each, rather than wait for a chief that has gone.
    from electra_tf import atomic
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        (model / atomic.RUNNING).write_text(json.dumps(
            {"owner": atomic.owner(), "pid": running.pid,
             "started": atomic._started(running.pid), "script": "run_pretraining.py"}))
        refused = cluster(model, at + 4)
    finally:
        running.kill()
        running.wait()
    assert [(code, err.strip().splitlines()[-1]) for code, _, err in refused] == [
        (1, f"error: --model_dir={model} is being written by another run_pretraining.py (PID "
            f"{running.pid}) on this machine; wait for it to end or stop it, or choose "
            f"another --model_dir (if no such run is going, delete {model}/.running.json)"),
        (1, f"error: --model_dir={model} is being written by another run_pretraining.py (the "
            "chief found its mark); wait for it to end or stop it, or choose another "
            "--model_dir")]
    assert not os.path.exists(model / f"ckpt-{at + 4}.index")
    os.remove(model / atomic.RUNNING)
    # Without the worker's position both refuse, before writing anything.
    shutil.rmtree(model / ".worker-1-scratch")
    for code, _, err in cluster(model, at + 4):
        assert code == 1 and err.strip().splitlines()[-1] == (
            f"error: --model_dir={model} holds no data position at step {at + 2} for worker 1 "
            "(a run of fewer workers, or its .worker-1-scratch folder is gone), so 2 workers "
            f"cannot go on from it exactly; start a new --model_dir with --init_checkpoint="
            f"{model}")
    assert not os.path.exists(model / f"ckpt-{at + 4}.index")
    # Nor does one worker go on from two workers' run (its data position is another
    # pipeline's: a NotFoundError traceback), refused before writing anything; a run begun
    # before model_info.json kept the number of workers, when the restore fails, in one line.
    info = json.loads((model / "model_info.json").read_text())
    assert info["workers"] == 2 and info["replicas"] == 2
    for kept in (True, False):
        if not kept:
            del info["workers"]
            (model / "model_info.json").write_text(json.dumps(info))
        alone = script(*script_args(model, data, f"NUM_TRAIN_STEPS = {at + 4}"))
        _, err = alone.communicate(timeout=300)
        assert alone.returncode == 1 and err.strip().splitlines()[-1] == ((
            f"error: --model_dir={model} was trained by 2 workers (model_info.json), this run "
            "has one worker: each worker's data position is its own, so it cannot go on "
            "exactly; rerun it with 2 workers, or start a new --model_dir with "
            f"--init_checkpoint={model}") if kept else (
            f"error: --model_dir={model}'s checkpoint ({model}/ckpt-{at + 2}) holds a data "
            "position of another input pipeline (a run of another number of workers?); rerun "
            f"it as it was run, or start a new --model_dir with --init_checkpoint={model}")), err
        assert not os.path.exists(model / f"ckpt-{at + 4}.index")


def _save_steps(directory, steps):
    value = tf.Variable(0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(value=value), str(directory),
                                         max_to_keep=5)
    for step in steps:
        value.assign(step)
        manager.save(checkpoint_number=step)


def test_workers_resume_from_the_newest_step_every_one_saved(tmp_path):
    """A machine that died during a save leaves its worker a checkpoint behind the others:
    all go on from the newest step every worker saved, each process from its own checkpoint
    (its own data position) and setting its own newer checkpoints aside (not deleted),
    whatever the order the processes look in."""
    from electra_tf.training import strategies
    model = tmp_path / "model"
    scratch = [model] + [Path(strategies.scratch_directory(str(model), i)) for i in (1, 2)]
    for directory, steps in zip(scratch, ([20, 30, 40], [20, 30], [20, 30, 40])):
        _save_steps(directory, steps)
    logs = {task: [] for task in (0, 1, 2)}
    for task in (1, 2, 0):  # worker 2 looks before the chief sets its step 40 aside
        assert pretraining._common_checkpoint(  # pylint: disable=protected-access
            str(model), str(scratch[task]), 3, logs[task].append) == str(
                scratch[task] / "ckpt-30")
    for directory in scratch:
        assert tf.train.latest_checkpoint(str(directory)) == str(directory / "ckpt-30")
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(value=tf.Variable(0)),
                                             str(directory), max_to_keep=5)
        assert manager.checkpoints == [str(directory / f"ckpt-{s}") for s in (20, 30)]
    assert 'model_checkpoint_path: "ckpt-30"' in (model / "checkpoint").read_text()
    for directory in (scratch[0], scratch[2]):
        assert sorted(os.listdir(directory / "set_aside")) == [
            "ckpt-40.data-00000-of-00001", "ckpt-40.index"]
    assert logs == {
        0: ["not every worker saved step 40 (a save that did not finish): all go on from step "
            "30, the newest that every worker saved",
            f"set aside the checkpoints of step 40 in {model}/set_aside: not every worker "
            "saved them"],
        1: [],
        2: [f"set aside the checkpoints of step 40 in {scratch[2]}/set_aside: not every worker "
            "saved them"]}
    assert pretraining._common_checkpoint(  # pylint: disable=protected-access
        str(model), str(model), 3, logs[0].append) == str(model / "ckpt-30")
    assert len(logs[0]) == 2  # nothing more to set aside or say
    # No step every worker saved.
    other = tmp_path / "other"
    _save_steps(other, [10, 20])
    _save_steps(strategies.scratch_directory(str(other), 1), [30])
    with pytest.raises(UserInputError, match=(
            rf"^--model_dir={other} holds checkpoints of steps 10, 20 and worker 1's of steps "
            rf"30: no step in common, so 2 workers cannot go on from it exactly; start a new "
            rf"--model_dir with --init_checkpoint={other}$")):
        pretraining._common_checkpoint(  # pylint: disable=protected-access
            str(other), str(other), 2, print)


# ------------------------------------------------------------------------------ variants


def test_two_stage_trains_the_generator_then_the_discriminator_from_it(tmp_path, data,
                                                                       monkeypatch):
    # The generator must be the discriminator's shape (official rounding: FFN 4H).
    # The switch at 2 on the checkpoint grid: its checkpoint is written once, switched
    # (TensorFlow would rewrite the first one's index in place).
    written = []
    save = tf.train.CheckpointManager.save
    monkeypatch.setattr(tf.train.CheckpointManager, "save", lambda self, checkpoint_number,
                        **kw: written.append(checkpoint_number) or save(
                            self, checkpoint_number=checkpoint_number, **kw))
    # Loops of one step: each stage's second loop has a throughput (a first traces).
    result, lines = run(tmp_path, data, ["NUM_TRAIN_STEPS = 4", "CHECKPOINT_EVERY = 2",
                                         "STEPS_PER_LOOP = 1",
                                         "pretrainer.generator_hidden_fraction = 1.0",
                                         "pretrainer.intermediate_size = 128",
                                         "pretraining.device_name = 'NVIDIA H100 80GB HBM3'",
                                         "pretraining.eval_steps = 2"],
                        files=("tiny.gin", "ablations/two_stage.gin"), eval_data=data)
    assert "step 2: generator stage done" in " ".join(lines)
    # Each stage evaluated as it trains (the evaluation was joint: 50 x an untrained
    # discriminator's loss in the generator stage's total, the frozen generator's MLM loss
    # in the discriminator stage's), and logged its losses alone.
    evals = {tag: dict(values) for tag, values in summary_tags(tmp_path / "eval").items()}
    trains = {tag: dict(values) for tag, values in summary_tags(tmp_path / "train").items()}
    assert sorted(evals["loss/total"]) == [2, 4] and sorted(evals["loss/discriminator"]) == [4]
    assert evals["loss/total"][2] == pytest.approx(evals["loss/generator"][2], rel=1e-5)
    assert evals["loss/total"][4] == pytest.approx(50 * evals["loss/discriminator"][4],
                                                   rel=1e-5)
    assert sorted(trains["loss/discriminator"]) == [3, 4]  # (loops of one step)
    shown = [m.groups() for m in (re.match(r"step (\d+)/4 \| loss [\d.]+ \(([^)]*)\)", line)
                                  for line in lines) if m]
    assert [(int(n), re.sub(r"[\d.]+", "X", parts)) for n, parts in shown] == [
        (1, "generator X"), (2, "generator X"), (3, "generator X, discriminator X"),
        (4, "generator X, discriminator X")]
    assert [int(n) for n in written] == [0, 2, 4]
    before, switch, after = (model_values(str(tmp_path / f"ckpt-{s}")) for s in (0, 2, 4))
    generator = [k for k in before if k.startswith("model/generator/layer_")]
    discriminator = [k for k in before if k.startswith("model/discriminator/layer_")]
    assert len(generator) == len(discriminator) == 16
    # Stage 1 trains the generator only; stage 2 only the discriminator, from the generator.
    assert any(not np.array_equal(before[k], switch[k]) for k in generator)
    assert all(np.array_equal(switch[k], after[k]) for k in generator)
    assert any(not np.array_equal(switch[k], after[k]) for k in discriminator)
    for g, d in zip(sorted(generator), sorted(discriminator)):  # initialised from it
        np.testing.assert_array_equal(switch[g], switch[d])
    assert checkpoint_values(str(tmp_path / "ckpt-2"))[
        "state/stage/.ATTRIBUTES/VARIABLE_VALUE"] == 1
    # The checkpoint saved at the switch is said to be one by what reads its discriminator
    # (export, detection, conversion, fine-tuning: they took it without a word); a generator
    # export is not told.
    from electra_tf.export.saved_model import weights_read
    from electra_tf.finetune import runner
    from electra_tf.training.checkpoints import load_pretrainer
    loaded = load_pretrainer(str(tmp_path / "ckpt-2"))
    said = (f"note: {tmp_path}/ckpt-2 is of a two-stage run's switch (step 2, from which its "
            "discriminator trains): its discriminator's encoder is the generator's, trained "
            "as a masked LM, not yet as a discriminator, and its replaced-token head is "
            "untrained; use a later checkpoint")
    assert weights_read(loaded, "discriminator")[1:] == [said]
    assert weights_read(loaded, "generator")[1:] == []
    assert runner.load_initialization(str(tmp_path / "ckpt-2")).notes == (said,)
    assert runner.load_initialization(str(tmp_path)).notes == ()  # ckpt-4
    # Before the switch (stage 0) its discriminator is the random initialisation (but for
    # the embeddings it shares): refused by what would use it as trained (fine-tuning,
    # export and detection took it with a note, a joint run's --init_checkpoint without a
    # word).
    from electra_tf.export import saved_model
    untrained = (f"{tmp_path}/ckpt-0 is from a two-stage run's generator stage (step 0, "
                 "before its switch at step 2), so its discriminator is untrained (the switch "
                 "starts it from the generator)")
    with pytest.raises(UserInputError, match=re.escape(
            f"--init_checkpoint={untrained}; pass one of its checkpoints from the switch on "
            "(MODEL_DIR/ckpt-N)")):
        runner.load_initialization(str(tmp_path / "ckpt-0"))
    early = load_pretrainer(str(tmp_path / "ckpt-0"))
    for kind in ("discriminator", "encoder"):
        with pytest.raises(UserInputError, match=re.escape(
                f"{untrained}; pass one of its checkpoints from the switch on "
                "(--model_dir=MODEL_DIR/ckpt-N), or export --kind=generator")):
            saved_model.check_trained(early, str(tmp_path / "ckpt-0"), kind)
    saved_model.check_trained(early, str(tmp_path / "ckpt-0"), "generator")
    saved_model.check_trained(loaded, str(tmp_path / "ckpt-2"), "discriminator")  # switched
    # Converted to HuggingFace, the generator alone (the discriminator was written).
    from electra_tf.export import converters
    said = []
    assert converters.export_hf(str(tmp_path / "ckpt-0"), str(tmp_path / "hf"),
                                log=said.append) == [str(tmp_path / "hf" / "generator")]
    assert os.listdir(tmp_path / "hf") == ["generator"]
    assert said[0] == f"generator: the weights of {tmp_path}/ckpt-0"
    assert f"note: no discriminator/: {untrained}; pass one of its checkpoints from the " \
           "switch on (--input=MODEL_DIR/ckpt-N)" in said
    # A run that has not reached its switch yet: the fix is to train it that far.
    import shutil
    early_run = tmp_path / "early"
    early_run.mkdir()
    for name in os.listdir(tmp_path):
        if name.startswith("ckpt-0.") or name in ("model_info.json", "operative_config.gin"):
            shutil.copy(tmp_path / name, early_run / name)
    (early_run / "checkpoint").write_text('model_checkpoint_path: "ckpt-0"\n')
    from electra_tf.training.checkpoints import generator_stage
    assert generator_stage(str(early_run / "ckpt-0"), loaded.info) == (
        f"{early_run}/ckpt-0 is from a two-stage run's generator stage (step 0, before its "
        "switch at step 2), so its discriminator is untrained (the switch starts it from the "
        "generator); pre-train it past its switch first (rerun its run_pretraining.py "
        "command)")
    other = ["NUM_TRAIN_STEPS = 2", "pretrainer.generator_hidden_fraction = 1.0",
             "pretrainer.intermediate_size = 128"]
    with pytest.raises(UserInputError, match=re.escape(
            f"--init_checkpoint={untrained}; pass one of its checkpoints from the switch on")):
        run(tmp_path / "joint", data, other, init_checkpoint=str(tmp_path / "ckpt-0"))
    # A two-stage run from one past the switch would overwrite its trained discriminator (it
    # did, without a word, as a joint run's is refused).
    with pytest.raises(UserInputError, match=re.escape(
            f"--init_checkpoint={tmp_path}/ckpt-4 was saved past its two-stage run's switch, "
            "its discriminator trained: a two-stage run trains its generator")):
        run(tmp_path / "again", data, other, files=("tiny.gin", "ablations/two_stage.gin"),
            init_checkpoint=str(tmp_path))
    assert not os.path.exists(tmp_path / "joint") and not os.path.exists(tmp_path / "again")
    # A two-stage run takes it, and goes on with the generator stage.
    result, _ = run(tmp_path / "continued", data, other,
                    files=("tiny.gin", "ablations/two_stage.gin"),
                    init_checkpoint=str(tmp_path / "ckpt-0"))
    assert result["step"] == 2
    # Extending the run would move the default switch (half the run) past the one it made.
    with pytest.raises(UserInputError, match=r"holds a two-stage run whose generator stage is 2 "
                                             r"steps \(model_info.json\), this one's 3 .*"
                                             r"pretraining.two_stage_steps=2, or start a new"):
        run(tmp_path, data, ["NUM_TRAIN_STEPS = 6", "pretrainer.generator_hidden_fraction = 1.0",
                             "pretrainer.intermediate_size = 128"],
            files=("tiny.gin", "ablations/two_stage.gin"))
    # FLOPs per phase: the generator's masked LM alone, then the generator's forward pass and
    # the discriminator's training; MFU and the run's total count each phase's own.
    from electra_tf.modeling import flops
    from electra_tf.modeling.config import EncoderConfig
    info = json.loads((tmp_path / "model_info.json").read_text())
    networks = [EncoderConfig(**info[n]) for n in ("discriminator", "generator")]
    phases = {kind: flops.two_stage_flops_per_example(*networks, 128, 0.15,
                                                      max_predictions=info["masked_positions"],
                                                      hardware=kind == "hardware")
              for kind in ("official", "hardware")}
    assert info["two_stage_flops_per_example"] == phases
    generator_forward = flops.forward_flops_per_example(networks[1], None, 128, "mlm",
                                                        max_predictions=info["masked_positions"])
    assert phases["official"]["generator"] == pytest.approx(2 * generator_forward)
    assert phases["official"]["discriminator"] < info["train_flops_per_example"]
    assert info["total_train_flops"] == pytest.approx(8 * 2 * sum(phases["official"].values()))
    train = summary_tags(tmp_path / "train")
    assert [step for step, _ in train["throughput/mfu"]] == [2, 4]
    for (step, mfu), (_, eps) in zip(train["throughput/mfu"],
                                     train["throughput/examples_per_second"]):
        phase = "generator" if step <= 2 else "discriminator"
        assert float(mfu) == pytest.approx(float(eps) * phases["hardware"][phase] / 494.5e12,
                                           rel=1e-5), step


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_runs_learn(tmp_path, data, precision, mirrored_strategy):
    result, lines = run(tmp_path, data, [f"pretraining.precision = '{precision}'",
                                         "NUM_TRAIN_STEPS = 12"])
    assert np.isfinite(result["train"]["loss/total"])
    train = summary_tags(tmp_path / "train")
    steps = [line for line in lines if line.startswith("step ")]
    if precision == "mixed_float16":
        # The first steps overflow the initial scale 2^15: it halves, those steps are skipped
        # (the console counts them, as fine-tuning's does: a halving each, no doubling in 12).
        scale = result["train"]["optimizer/loss_scale"]
        assert 1 <= scale < 2 ** 15
        said = [re.search(r"\| loss scale (\S+), (\d+) skipped$", line) for line in steps]
        assert all(said) and float(said[-1][1]) == scale, steps
        assert sum(int(m[2]) for m in said) == round(np.log2(2 ** 15 / scale)) >= 1, steps
        # On 2 replicas each step counts once (each replica records it).
        result, lines = run(tmp_path / "mirrored", data, [
            f"pretraining.precision = '{precision}'", "NUM_TRAIN_STEPS = 12"],
            strategy="mirrored")
        scale = result["train"]["optimizer/loss_scale"]
        said = [re.search(r"\| loss scale \S+, (\d+) skipped$", line) for line in lines
                if line.startswith("step ")]
        assert sum(int(m[1]) for m in said) == round(np.log2(2 ** 15 / scale)) >= 1, lines
    else:
        assert not any("loss scale" in line for line in steps)
    # The norm recorded (and clipped to 1) is that of the unscaled gradients, about 45-50
    # here in either precision: under float16 loss scaling the scaled ones are the scale
    # (2^11 at the end) times larger. A loop whose steps all overflowed has no norm: no
    # point (it was written as 0).
    norms = [float(v) for _, v in train["optimizer/grad_norm"]]
    loops = len(train["loss/total"])
    assert loops - 2 <= len(norms) <= loops and all(20 < n < 100 for n in norms), norms
    losses = [float(v) for _, v in train["loss/total"]]
    assert losses[-1] < losses[0]


def test_the_compiled_step_has_no_conditional():
    """Under XLA on a GPU each conditional makes the host wait for the device (its predicate
    is copied back before a branch runs), so a skipped step's metric updates are weighted by
    0 and its optimizer update selected away, not put under a tf.cond."""
    import re

    import keras

    from electra_tf.modeling.config import encoder_config, generator_config
    from electra_tf.modeling.pretrainer import ElectraPretrainer
    from electra_tf.training.optimization import create_optimizer
    from electra_tf.training.trainer import PretrainingTrainer, TrainState

    keras.utils.set_random_seed(0)
    discriminator = encoder_config("tiny", vocab_size=200, num_layers=1)
    model = ElectraPretrainer(discriminator, generator_config(discriminator, 0.25))
    ids = tf.constant(np.random.default_rng(0).integers(5, 200, (2, 16)), tf.int32)
    batch = {"input_ids": ids, "input_mask": tf.ones_like(ids),
             "segment_ids": tf.zeros_like(ids),
             "masked_lm_positions": tf.constant([[1, 4, 7], [2, 3, 9]], tf.int32),
             "masked_lm_ids": tf.constant([[6, 7, 8], [9, 10, 11]], tf.int32),
             "masked_lm_weights": tf.ones([2, 3])}
    model(batch, step=0, training=True)
    optimizer = create_optimizer(aggregate_gradients=False)
    optimizer.build(model.trainable_variables)
    trainer = PretrainingTrainer(
        model, optimizer, tf.distribute.get_strategy(),
        iter(tf.data.Dataset.from_tensors(batch).repeat()), TrainState(max_skips=1),
        global_batch_size=2, seq_length=16, jit_compile=True)
    step = trainer._replica_step_fn()
    hlo = step.experimental_get_compiler_ir(batch)(stage="hlo")
    assert len(re.findall(r" conditional\(", hlo)) == 0

    # k steps per call: one while loop around the step, still no conditional. Two loops of
    # 3 steps are one call each of the block traced once (the single step runs in
    # test_steps_in_one_compiled_call_equal_one_call_per_step).
    trainer.steps_per_call = 3
    block = trainer._replica_block_fn()
    hlo = block.experimental_get_compiler_ir([batch] * 3)(stage="hlo")
    assert len(re.findall(r" while\(", hlo)) == 1
    assert len(re.findall(r" conditional\(", hlo)) == 0
    for _ in range(2):
        trainer.train(tf.constant(3, tf.int32))
    assert int(trainer.state.step.numpy()) == 6
    assert np.isfinite(trainer.last_loop["values"]["loss/total"])
    assert trainer._block_loop_fn.experimental_get_tracing_count() == 1
    assert trainer._train_loop_fn is None  # no single step was left over


def test_steps_in_one_compiled_call_equal_one_call_per_step(tmp_path, data):
    """pretraining.steps_per_call = 3 with loops of 4 steps: each loop is one compiled call
    of 3 steps (a while loop in the program) and one single step; dropout on. The weights
    and the loop's metrics equal those of one call per step."""
    more = ["NUM_TRAIN_STEPS = 8", "STEPS_PER_LOOP = 4", "pretraining.jit_compile = True"]
    one, _ = run(tmp_path / "one", data, more + ["pretraining.steps_per_call = 1"])
    three, _ = run(tmp_path / "three", data, more + ["pretraining.steps_per_call = 3"])
    assert one["step"] == three["step"] == 8
    # (float32 rounding only: XLA fuses a loop's steps otherwise than single steps, 5e-6 of
    # the loss on an AVX-512 host; another dropout mask or a step more moves it by 1e-2)
    for key in ("loss/total", "discriminator/accuracy", "generator/mlm_accuracy"):
        assert three["train"][key] == pytest.approx(one["train"][key], rel=5e-5), key
    # As close as an XLA step is to a plain one (test_xla_compiled_step_equals_the_plain_one),
    # but for a few values: Adam's update of an embedding entry whose gradient is near 0
    # scales the rounding up (on an AVX-512 host: 5 of 976704 values, by at most 2e-5).
    # Another dropout mask or learning rate moves every weight.
    one, three = (model_values(str(tmp_path / name / "ckpt-8")) for name in ("one", "three"))
    assert set(one) == set(three)
    for name in one:
        off = ~np.isclose(three[name], one[name], rtol=1e-3, atol=1e-5)
        assert off.mean() < 1e-4 and np.abs(three[name] - one[name]).max() < 1e-4, name


@pytest.mark.parametrize("bindings, kwargs, message", [
    (["pretraining.steps_per_call = 0"], {},
     r"^pretraining.steps_per_call=0 must be a positive integer\n"),
    (["NUM_TRAIN_STEPS = 0"], {},  # (named as the user binds it)
     r"^NUM_TRAIN_STEPS=0 \(pretraining.num_train_steps\) must be a positive integer\n"),
    (["pretraining.keep_checkpoints = 0"], {},  # (None keeps every one)
     r"^pretraining.keep_checkpoints=0 must be a positive integer, or None to keep every "
     r"checkpoint\n"),
    (["pretraining.steps_per_call = 4"], {},
     r"^pretraining.steps_per_call=4 needs pretraining.jit_compile=True \(without XLA"),
    (["pretraining.steps_per_call = 2", "pretraining.jit_compile = True"],
     {"strategy": "mirrored"},
     r"^pretraining.steps_per_call=2 runs on one replica; this run has 2 "
     r"\(MirroredStrategy\): set it to 1\n"),
])
def test_bad_steps_per_call_fails_with_one_line(tmp_path, data, bindings, kwargs, message):
    from electra_tf.errors import UserInputError
    with pytest.raises(UserInputError, match=message):
        run(tmp_path, data, bindings, **kwargs)
    assert not os.path.exists(tmp_path / "model_info.json")


@ONE_BIG_BATCH
def test_xla_compiled_step_equals_the_plain_one(tmp_path, data, plain_run):
    _, plain = plain_run
    _, compiled = _weights_after(tmp_path, "xla", data, ["pretraining.jit_compile = True"])
    for name in plain:
        np.testing.assert_allclose(plain[name], compiled[name], rtol=1e-3, atol=1e-5,
                                   err_msg=name)


@ONE_BIG_BATCH
def test_xla_on_two_replicas_compiles_each_replicas_pass_and_equals_the_plain_step(
        tmp_path, data, plain_run):
    """With several replicas (off a TPU) XLA compiles each replica's forward and backward
    pass; the all-reduces and the update stay outside it (TensorFlow's all-reduce inside a
    compiled program failed: "destinations can not be empty")."""
    _, plain = plain_run
    _, compiled = _weights_after(tmp_path, "xla2", data, ["pretraining.jit_compile = True"],
                                 strategy="mirrored")
    for name in plain:
        np.testing.assert_allclose(plain[name], compiled[name], rtol=1e-3, atol=1e-5,
                                   err_msg=name)


# ------------------------------------------------------------------------------ health


def test_nonfinite_loss_stops_with_the_step_named(tmp_path, data):
    # The first update (LR 1e30) makes the second step's loss inf: step 2, as the console
    # counts (step N made N).
    with pytest.raises(ValueError, match=r"^the loss was not finite at step 2; the run stopped "
                                         r"and its last checkpoint \(step 0\) is intact"):
        run(tmp_path, data, ["LEARNING_RATE = 1e30", "WARMUP_STEPS = 0"])
    assert not os.path.exists(tmp_path / "ckpt-2.index")
    # Rerun with a sane learning rate, as the line says: TensorBoard shows the config that
    # trained, not also the one that stopped (both were at step 0).
    from electra_tf.training import summaries
    run(tmp_path, data, ["NUM_TRAIN_STEPS = 2"])
    texts = summaries.read_texts(str(tmp_path / "train"))["config/operative_config"]
    assert [step for step, _ in texts] == [1] and "1e+30" not in texts[0][1], texts


def _write_premasked(path, batch, rows):
    with tf.io.TFRecordWriter(path) as writer:
        for i in rows:
            feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=batch[k][i]))
                       for k in ("input_ids", "input_mask", "segment_ids",
                                 "masked_lm_positions", "masked_lm_ids")}
            feature["masked_lm_weights"] = tf.train.Feature(
                float_list=tf.train.FloatList(value=batch["masked_lm_weights"][i]))
            writer.write(tf.train.Example(features=tf.train.Features(
                feature=feature)).SerializeToString())


def test_premasked_records_are_masked_by_the_run_unless_kept_as_written(tmp_path, data):
    from electra_tf.data.pipeline import pretraining_dataset
    examples = next(iter(pretraining_dataset(data, 16, 128, UNCASED_VOCAB, is_training=False)))
    path = str(tmp_path / "bert.tfrecord")
    _write_premasked(path, {k: v.numpy() for k, v in examples.items()}, range(16))
    twelve = "pretraining.max_predictions_per_seq = 12"
    info, lines = run(tmp_path / "remask", path, [twelve], vocab_file=UNCASED_VOCAB,
                      dry_run=True)
    assert info["masked_positions"] == 12
    assert lines[0] == ("note: --train_data holds pre-masked BERT records: their original "
                        "tokens are put back and masked again as other records are (dynamic "
                        "masking at mask_prob); pretraining.premasked_records='as_written' "
                        "keeps BERT's masks")
    info, lines = run(tmp_path / "kept", path,
                      [twelve, "pretraining.premasked_records = 'as_written'"],
                      vocab_file=UNCASED_VOCAB, dry_run=True)
    assert info["masked_positions"] == 19 and "used as written" in lines[0]
    with pytest.raises(UserInputError, match=r"^pretraining.premasked_records='bert' is not "
                                             r"one of remask, as_written\n"):
        run(tmp_path / "bad", path, ["pretraining.premasked_records = 'bert'"],
            vocab_file=UNCASED_VOCAB, dry_run=True)


def test_restore_mode_skips_the_poisoned_batch_and_finishes(tmp_path, data):
    import keras

    from electra_tf.data.pipeline import pretraining_dataset
    # 48 real examples as pre-masked (BERT-format) records.
    examples = next(iter(pretraining_dataset(data, 48, 128, UNCASED_VOCAB, is_training=False)))
    examples = {k: v.numpy() for k, v in examples.items()}
    clean = str(tmp_path / "clean.tfrecord")
    _write_premasked(clean, examples, range(48))
    # The run's stream (seed 0, batch 8): poison an example that is in exactly one of the
    # first 8 batches (the shuffle buffer spans epochs, so some examples come twice).
    # tf.data's shuffles also key on TensorFlow's global seed, which the run sets from its
    # seed first: set it here too, or the order depends on the tests run before this one.
    key = {examples["input_ids"][i].tobytes(): i for i in range(48)}
    keras.utils.set_random_seed(0)
    stream = pretraining_dataset(clean, 8, 128, UNCASED_VOCAB, seed=0, premasked="as_written")
    seen = [[key[row.tobytes()] for row in b["input_ids"].numpy()] for b in stream.take(8)]
    counts = np.bincount(sum(seen, []), minlength=48)
    poisoned = next(i for i in range(48) if counts[i] == 1 and i not in seen[0])
    bad_step = next(step for step, rows in enumerate(seen) if poisoned in rows)
    examples["masked_lm_weights"][poisoned, 0] = np.nan
    path = str(tmp_path / "poisoned.tfrecord")
    _write_premasked(path, examples, range(48))

    as_written = "pretraining.premasked_records = 'as_written'"  # the poisoned weights
    result, lines = run(tmp_path / "model", path,
                        ["pretraining.on_nonfinite = 'restore'", "NUM_TRAIN_STEPS = 8",
                         as_written], vocab_file=UNCASED_VOCAB)
    assert lines[0] == ("note: --train_data holds pre-masked BERT records, used as written: "
                        "BERT's static masks and 80/10/10 replacement in their 19 slots; "
                        "mask_prob, max_predictions_per_seq and whole_word_masking do not apply")
    restores = [line for line in lines if line.startswith("the loss was not finite")]
    restored_to = 4 if bad_step >= 4 else 0
    assert restores == [f"the loss was not finite at step {bad_step + 1}: restored step "
                        f"{restored_to} and will skip that batch (1/3)"]
    assert result["step"] == 8 and np.isfinite(result["train"]["loss/total"])
    assert not any("nan" in line for line in lines if line.startswith("step "))
    weights = model_values(str(tmp_path / "model" / "ckpt-8"))
    assert all(np.all(np.isfinite(v)) for v in weights.values() if v.dtype.kind == "f")
    skip = checkpoint_values(str(tmp_path / "model" / "ckpt-8"))[
        "state/skip_steps/.ATTRIBUTES/VARIABLE_VALUE"]
    assert skip.tolist() == [bad_step] + [-1] * (pretraining.SKIP_CAPACITY - 1)
    # A loop of the skipped step alone records nothing: it is said, not written as zeros.
    _, lines = run(tmp_path / "one_step_loops", path,
                   ["pretraining.on_nonfinite = 'restore'", "NUM_TRAIN_STEPS = 8",
                    "STEPS_PER_LOOP = 1", as_written], vocab_file=UNCASED_VOCAB)
    said = [line for line in lines if line.startswith(f"step {bad_step + 1}/8 | ")]
    assert said[-1] == (f"step {bad_step + 1}/8 | skipped the batch whose loss was not "
                        "finite: nothing to report"), said
    assert not any("loss 0.0000" in line for line in lines), lines
    from electra_tf.training import summaries
    totals = dict(summaries.read_scalars(str(tmp_path / "one_step_loops" / "train"))[
        "loss/total"])
    assert bad_step + 1 not in totals and all(v > 0 for v in totals.values()), totals
    # A rerun with more restores finds the run finished.
    result, lines = run(tmp_path / "model", path,
                        ["pretraining.on_nonfinite = 'restore'", "NUM_TRAIN_STEPS = 8",
                         "pretraining.max_restores = 5", as_written], vocab_file=UNCASED_VOCAB)
    assert result["step"] == 8 and lines[1] == (
        f"{tmp_path / 'model'} holds a finished run (step 8 of NUM_TRAIN_STEPS=8): nothing to "
        "do; a larger NUM_TRAIN_STEPS extends it")
    with pytest.raises(UserInputError, match=r"max_restores=65 exceeds the 64 skipped batches "
                                             r"this run's checkpoints can record"):
        run(tmp_path / "model", path, ["pretraining.max_restores = 65", "NUM_TRAIN_STEPS = 8",
                                       as_written], vocab_file=UNCASED_VOCAB)
    # Its records' masks may not change on a resume, nor those of a run from before the
    # setting was recorded (which used them as written).
    info_path = tmp_path / "model" / "model_info.json"
    for old in (False, True):
        if old:
            info = json.loads(info_path.read_text())
            del info["premasked_records"], info["whole_word_masking"]
            info_path.write_text(json.dumps(info))
        with pytest.raises(UserInputError, match=r"holds a run that took its pre-masked records "
                                                 r"'as_written' .*, this one 'remask': the masks "
                                                 r"would change mid-run; rerun with "):
            run(tmp_path / "model", path, ["NUM_TRAIN_STEPS = 8"], vocab_file=UNCASED_VOCAB,
                dry_run=True)


def test_a_restore_to_step_0_replays_the_batches_and_reruns_the_evaluations(
        tmp_path, data, monkeypatch):
    """A non-finite loss before the first checkpoint after step 0: the restore of ckpt-0
    (its input iterator not yet started) gave other batches (tf.data's file shuffle drew
    the next epoch's seeds), so the batch skipped was not the bad one; and the evaluations
    between step 0 and the loop's target were dropped, not run again."""
    from electra_tf.data import pipeline
    from electra_tf.training.trainer import PretrainingTrainer
    assert len(pipeline.list_files(data)) >= 2  # (one file replayed already)
    seen, poisoned = [], tf.Variable(False)
    step_of = PretrainingTrainer._replica_step

    def replica_step(self, batch):  # records (step, the batch's sum), poisons step 5 once
        tf.py_function(lambda s, f: seen.append((int(s), int(f))),
                       [self.state.step, tf.reduce_sum(batch["input_ids"])], [])
        poison = tf.logical_and(tf.equal(self.state.step, 5), tf.logical_not(poisoned))
        poisoned.assign(tf.logical_or(poisoned, poison))
        weights = batch["masked_lm_weights"]
        return step_of(self, {**batch, "masked_lm_weights": tf.where(
            poison, weights * np.nan, weights)})

    monkeypatch.setattr(PretrainingTrainer, "_replica_step", replica_step)
    held_out = _write_records(tmp_path / "held_out.tfrecord",
                              tf.data.TFRecordDataset(pipeline.list_files(data)[0]).take(16))
    result, lines = run(tmp_path / "model", data,
                        ["pretraining.on_nonfinite = 'restore'", "NUM_TRAIN_STEPS = 8",
                         "CHECKPOINT_EVERY = 100", "pretraining.eval_every = 2",
                         "pretraining.eval_steps = 1"], eval_data=held_out)
    assert ("the loss was not finite at step 6: restored step 0 and will skip that batch "
            "(1/3)") in lines
    first, again = seen[:6], seen[6:]
    assert [s for s, _ in first] == list(range(6)) and [s for s, _ in again] == list(range(8))
    assert again[:6] == first  # the same batches, the bad one (step 5) among them, skipped
    assert result["step"] == 8
    evaluated = [line.split(" |")[0] for line in lines if line.startswith("eval at step")]
    assert evaluated == ["eval at step 2", "eval at step 4", "eval at step 2",
                         "eval at step 4", "eval at step 6", "eval at step 8"]
    assert pretraining._evaluated_steps(str(tmp_path / "model")) == {2, 4, 6, 8}
    # The restore's START mark at step 1 dropped the config text there: written again.
    from electra_tf.training import summaries
    texts = summaries.read_texts(str(tmp_path / "model" / "train"))["config/operative_config"]
    assert [step for step, _ in texts] == [1] and "NUM_TRAIN_STEPS = 8" in texts[0][1]


def test_a_stop_right_after_a_restore_says_the_skip_was_not_saved():
    """SIGTERM after a restore but before another step: no checkpoint can be written (the
    one restored is at this step), and the line says so; it said 'saved a checkpoint'."""
    from electra_tf.training.trainer import TrainState
    lines, state = [], TrainState(3)
    state.step.assign(4)
    monitor = pretraining._Monitor(None, None, state, 8, None, "restore", 3, lines.append)
    for unsaved, said in ((False, "preempted (SIGTERM): saved a checkpoint at step 4; rerun "
                           "the same command to resume"),
                          (True, "preempted (SIGTERM): kept the checkpoint at step 4, which "
                           "does not hold the batch skipped since (the rerun meets it and "
                           "restores again); rerun the same command to resume")):
        monitor.skips_unsaved = unsaved
        with pytest.raises(SystemExit) as exited:
            monitor.preempted()
        assert exited.value.code == pretraining.PREEMPTED_EXIT_CODE and lines.pop() == said


def test_a_collapsed_discriminator_is_reported_once():
    """AUC at chance for COLLAPSE_STEPS (500) steps: one warning; a recovery resets."""
    from electra_tf.training.trainer import TrainState
    lines, state = [], TrainState(3)
    monitor = pretraining._Monitor(None, None, state, 10_000, None, "stop", 3, lines.append)
    aucs = [0.80, 0.70, 0.51, 0.50, 0.49, 0.50, 0.50, 0.51, 0.50, 0.50]  # loops of 100 steps
    for loop, auc in enumerate(aucs, start=1):
        monitor._check_discriminator(auc, 100 * loop, 100)
    assert len(lines) == 1
    assert lines[0].startswith("warning: the discriminator's AUC has been 0.500 (chance) since "
                               "step 200: its output no longer depends on its input.")
    recovering = pretraining._Monitor(None, None, state, 10_000, None, "stop", 3, lines.append)
    for loop, auc in enumerate([0.5, 0.5, 0.5, 0.5, 0.6, 0.5, 0.5, 0.5, 0.5], start=1):
        recovering._check_discriminator(auc, 100 * loop, 100)
    assert len(lines) == 1


# ------------------------------------------------------------------------------ bad input


def test_a_bad_xla_flags_gives_xlas_one_line_and_writes_nothing(tmp_path, data):
    """XLA parses XLA_FLAGS at the process's first compilation and aborts on a bad one. That
    compilation is cli._absorb_first_xla_log's, whose stderr filter takes XLA's first log
    lines: it must pass XLA's fatal line (and not Python's crash dump after it)."""
    model_dir = tmp_path / "model"
    process = script(*script_args(model_dir, data), env={"XLA_FLAGS": "--xla_no_such_flag=1"})
    out, err = process.communicate(timeout=300)
    assert process.returncode == -signal.SIGABRT, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Unknown flag in XLA_FLAGS: --xla_no_such_flag=1" in lines[0], err
    assert not os.path.exists(model_dir)


def test_a_tf_config_that_is_not_a_cluster_is_one_line(monkeypatch):
    from electra_tf.training import strategies
    example = ('{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": '
               '"worker", "index": 0}}')
    for value, start in (("{'cluster': {}}", "TF_CONFIG is not JSON (Expecting property name "
                                             "enclosed in double quotes: line 1 column 2 "
                                             "(char 1))"),
                         ('{"task": {"type": "worker", "index": 0}}',
                          'TF_CONFIG has no "cluster" object')):
        monkeypatch.setenv("TF_CONFIG", value)
        with pytest.raises(UserInputError) as error:
            strategies.create_strategy("multi_worker_mirrored")
        assert str(error.value) == f"{start}; set it to e.g. {example}"
    # A task that is not one of the cluster's training tasks (TensorFlow: a traceback each).
    cluster = '"cluster": {"worker": ["a:1", "b:2"], "ps": ["c:3"]}'
    for task, message in (
            ('{"type": "worker", "index": 2}', "TF_CONFIG's task index 2 is not one of its "
             "cluster's 'worker' indices (0, 1); give each task its place"),
            ('{"type": "chief", "index": 0}', "TF_CONFIG's task type 'chief' is not in its "
             "cluster (which has ps, worker); add it or fix the type"),
            ('{"type": "ps", "index": 0}', "TF_CONFIG's task type 'ps' does not train; give "
             "every task that runs this command type 'chief' or 'worker'"),
            ('{"type": "worker"}', 'TF_CONFIG\'s task is {"type": "worker"}; give it a "type" '
             'and an "index" (a number), e.g. {"type": "worker", "index": 0}'),
            (None, "TF_CONFIG's task is null; give it a \"type\" and an \"index\" (a number), "
             "e.g. {\"type\": \"worker\", \"index\": 0}")):
        monkeypatch.setenv("TF_CONFIG", f'{{{cluster}, "task": {task}}}' if task else
                           f'{{{cluster}}}')
        with pytest.raises(UserInputError) as error:
            strategies.create_strategy("multi_worker_mirrored")
        assert str(error.value) == message
    # TensorFlow reads a sparse cluster's task ids below its task count, and int(index).
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": {"0": "a:1", "3": "b:2"}}, '
                                    '"task": {"type": "worker", "index": "3"}}')
    with pytest.raises(UserInputError, match=r"^TF_CONFIG's task index 3 is not below the "
                                             r"number of its cluster's 'worker' addresses "
                                             r"\(2\); number them 0 to 1$"):
        strategies.create_strategy("multi_worker_mirrored")
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a"]}}')
    with pytest.raises(UserInputError) as error:
        strategies.create_strategy("multi_worker_mirrored")
    assert str(error.value) == (f"TF_CONFIG's cluster 'worker' is [\"a\"], not a list of "
                                f"\"host:port\" addresses; set it to e.g. {example}")


def test_workers_told_apart_or_lost_stop_in_one_line(tmp_path, data):
    """A cluster's workers given different settings (here a batch size) are refused, all of
    them, in one line (they trained together without a word; one with fewer steps ended
    and the others failed). A worker that waits for the others says so, and Ctrl-C ends the
    wait (TensorFlow's C++ held it: Python's handler never ran). Its address taken by
    another process is one line, and so is a worker killed mid-run, on the others (each a
    traceback of 50 to 140 lines)."""
    addresses = [f"127.0.0.1:{_free_port()}" for _ in range(2)]

    def worker(index, model_dir, *bindings, cluster=addresses):
        return script(*script_args(model_dir, data, *bindings),
                      "--strategy=multi_worker_mirrored", env={"TF_CONFIG": json.dumps(
                          {"cluster": {"worker": cluster}, "task": {"type": "worker",
                                                                    "index": index}})})

    def last_lines(processes):
        outputs = [p.communicate(timeout=300) for p in processes]
        for _, err in outputs:
            assert "Traceback" not in err, err[-3000:]
        return [(p.returncode, err.strip().splitlines()[-1])
                for p, (_, err) in zip(processes, outputs)]

    model = tmp_path / "model"
    refused = last_lines([worker(0, model), worker(1, model, "TRAIN_BATCH_SIZE = 16")])
    assert refused == [(1, "error: the workers were given different gin configs (worker 1: "
                           "'TRAIN_BATCH_SIZE = 16'; worker 0: 'TRAIN_BATCH_SIZE = 8'); run the "
                           "same command on every worker (the same gin files and bindings, "
                           "data and flags)")] * 2
    assert not os.path.exists(model)
    alone = worker(1, model)
    line = alone.stdout.readline()
    assert line == (f"worker 1 of TF_CONFIG's 2 training tasks, at {addresses[1]}: waiting "
                    "for all of them to start (Ctrl-C stops)\n")
    time.sleep(3)  # inside TensorFlow's wait
    alone.send_signal(signal.SIGINT)
    alone.communicate(timeout=60)
    assert alone.returncode == -signal.SIGINT
    with socket.socket() as taken:  # (a port of its own: the others' may be in TIME_WAIT)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        assert last_lines([worker(1, model, cluster=[addresses[0], address])]) == [
            (1, f"error: could not listen at {address}, this task's address in TF_CONFIG "
                "(is another process, an earlier run, using its port?); stop that process or "
                "give the task another port")]
    processes = [worker(i, model, "NUM_TRAIN_STEPS = 100000") for i in (0, 1)]
    _wait_for(str(model / "ckpt-0.index"), processes[0])
    time.sleep(2)
    processes[1].kill()
    processes[1].wait()
    code, said = last_lines(processes[:1])[0]
    assert code == 1
    assert re.fullmatch(r"error: lost contact with another worker of the cluster \(.+\); what "
                        r"was saved is kept: rerun the command on every worker", said), said


def test_tpu_strategy_without_a_tpu_says_which_flag(monkeypatch):
    from electra_tf.training import strategies
    monkeypatch.delenv("TPU_NAME", raising=False)
    with pytest.raises(UserInputError, match=r"^--strategy=tpu found no TPU \(.*\); pass "
                       r"--tpu=NAME \(the TPU's name or grpc:// address, or --tpu=local"):
        strategies.create_strategy("tpu")


def test_tpu_flags_that_cannot_work_are_refused_in_one_line(monkeypatch):
    """--tpu without --strategy=tpu (it trained on the TPU VM's CPU without a word); no TPU
    on a machine without the tensorflow-tpu build (TensorFlow's NotFoundError traceback); a
    TPU Node given paths its host cannot see."""
    from electra_tf.training import strategies
    monkeypatch.delenv("TPU_NAME", raising=False)
    with pytest.raises(UserInputError, match=r"^--tpu=local is for --strategy=tpu; add "
                       r"--strategy=tpu, or leave --tpu out$"):
        strategies.create_strategy("mirrored", "local")
    # (in a process of its own: connecting to a TPU system changes TensorFlow's runtime)
    done = script("--gin_file=tiny.gin", "--model_dir=unused", "--train_data=unused",
                  "--strategy=tpu", "--tpu=local")
    _, stderr = done.communicate(timeout=120)
    assert done.returncode == 1
    assert re.fullmatch(r"error: --tpu=local: no TPU could be started on this machine \(.+\); "
                        r"on a Cloud TPU VM install the tensorflow-tpu build \(BUILD.md, 'Cloud "
                        r"TPU VM'\); elsewhere use --strategy=default or --strategy=mirrored",
                        stderr.strip()), stderr
    paths = {"--model_dir": "gs://b/model", "--train_data": "gs://b/d/*,data/x.tfrecord",
             "--eval_data": None}
    strategies.check_tpu_node_paths("tpu", "local", paths)  # a TPU VM reads local files
    strategies.check_tpu_node_paths("mirrored", None, paths)
    with pytest.raises(UserInputError, match=r"^--train_data=data/x.tfrecord: a TPU Node "
                       r"\(--tpu=node-1\) reads and writes through its own host, which sees "
                       r"only gs:// paths; give a gs:// path, or run on a TPU VM with "
                       r"--tpu=local$"):
        strategies.check_tpu_node_paths("tpu", "node-1", paths)
    assert not strategies.is_tpu_node("tpu", "local")
    assert not strategies.is_tpu_node("tpu", None)  # the resolver's "found no TPU" says it
    assert strategies.is_tpu_node("tpu", "grpc://10.0.0.2:8470")


def test_a_tensorflow_without_xla_for_the_cpu_trains_without_it(monkeypatch):
    """The tensorflow-tpu build compiles no XLA for the CPU (a TPU VM's default strategy):
    the GELU and dropout functions run as plain TensorFlow there, and a step XLA would
    compile is refused in one line (TensorFlow's NotFoundError at the first step)."""
    import tensorflow as tf

    from electra_tf.modeling import layers
    from electra_tf.training import strategies
    monkeypatch.setattr(layers, "_XLA_CPU", [])
    assert tf.function(layers.xla_elementwise)()  # first asked while a function is traced
    assert layers._XLA_CPU == [True]  # this build's, checked once
    monkeypatch.setattr(layers, "_XLA_CPU", [False])
    assert not layers.xla_elementwise()
    strategies.check_xla_off_tpu("pretraining.jit_compile", False, tf.distribute.get_strategy())
    with pytest.raises(UserInputError, match=r"^pretraining.jit_compile=True: this TensorFlow "
                       r"\(the tensorflow-tpu build\) compiles no XLA for the CPU; add "
                       r"--strategy=tpu, or unbind it$"):
        strategies.check_xla_off_tpu("pretraining.jit_compile", True,
                                     tf.distribute.get_strategy())


def test_bindings_that_would_train_wrongly_are_refused_before_anything_is_written(tmp_path,
                                                                                  data):
    model_dir = tmp_path / "model"
    for bindings, message in (
            (["pretrainer.uniform_generator = 'False'"],  # a string: true, the uniform one
             r"pretrainer.uniform_generator='False' must be True or False \(no quotes\)"),
            # Those of pretraining.* and optimizer.* too ('False' turned XLA on).
            (["pretraining.jit_compile = 'False'"],
             r"^pretraining.jit_compile='False' must be True or False \(no quotes\)(\n|$)"),
            (["optimizer.bias_correction = 'False'"],
             r"^optimizer.bias_correction='False' must be True or False \(no quotes\)(\n|$)"),
            (["pretraining.clip_norm = '1.0'"],
             r"^pretraining.clip_norm='1.0' must be a number or None \(no quotes\)(\n|$)"),
            (["pretraining.clip_norm = -1.0"],  # (it clipped nothing)
             r"^pretraining.clip_norm=-1.0 must be a positive number, or None for no "
             r"clipping(\n|$)"),
            (["MASK_PROB = '0.2'"], r"^MASK_PROB='0.2' \(pretraining.mask_prob\) must be "
             r"a number \(no quotes\)"),
            # a configurable's reference as gin writes it (it was "<function build_... at 0x")
            (["optimizer.learning_rate = @pretrainer"], r"^LEARNING_RATE=@pretrainer "
             r"\(optimizer.learning_rate\) must be a number(\n|$)"),
            (["pretraining.device_name = 4"], r"^pretraining.device_name=4 must be a string or "
             r"None(\n|$)"),
            (["STEPS_PER_LOOP = True"], r"^STEPS_PER_LOOP=True \(pretraining.steps_per_loop\) "
             r"must be a positive integer(\n|$)"),
            (["pretraining.mask_prob = 0.25"], r"^pretraining.mask_prob=0.25 \(the data's "
             r"masking\) and pretrainer.mask_prob=0.15 differ; bind MASK_PROB, which sets both"),
            (["OBJECTIVE = 'mlm'", "pretrainer.learn_loss_weights = True"],
             r"^learn_loss_weights balances .*: objective='mlm' has one loss"),
            (["pretraining.two_stage_steps = 3"], r"^pretraining.two_stage_steps=3 applies to "
             r"two-stage training \(ablations/two_stage.gin; this run's algorithm: 'joint'\)")):
        with pytest.raises(UserInputError, match=message):
            run(model_dir, data, bindings)
        assert not model_dir.exists()


@pytest.mark.parametrize("case", ["unknown_binding", "unknown_file", "length_mismatch",
                                  "no_data", "batch_split", "xla_elementwise_env",
                                  "misspelled_macro", "unknown_objective", "no_run_file",
                                  "no_macros"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, data, case):
    model_dir = tmp_path / "model"
    # An import's operative_config.gin given alone (the architecture only): it ran on the
    # code's defaults, and a macro bound after it was "no gin file uses", listing none.
    architecture = tmp_path / "imported" / "operative_config.gin"
    architecture.parent.mkdir()
    architecture.write_text("pretrainer.hidden_size = 32\npretrainer.num_layers = 1\n")
    args = {
        "unknown_binding": script_args(model_dir, data, "pretrainer.hiden_size = 3"),
        "unknown_file": ["--gin_file=tinny.gin", f"--model_dir={model_dir}",
                         f"--train_data={data}"],
        "length_mismatch": script_args(model_dir, data, "MAX_SEQ_LENGTH = 64"),
        "no_data": script_args(model_dir, str(tmp_path / "none" / "*.tfrecord")),
        "batch_split": script_args(model_dir, data, "pretraining.gradient_accumulation_steps = 3"),
        "xla_elementwise_env": script_args(model_dir, data),
        "misspelled_macro": script_args(model_dir, data, "NUM_TRAIN_STEP = 3"),
        # Raised inside a gin configurable, which appends lines of its own to the message.
        "unknown_objective": script_args(model_dir, data, "OBJECTIVE = 'electrra'"),
        "no_run_file": [f"--gin_file={architecture}", f"--model_dir={model_dir}",
                        f"--train_data={data}"],
        "no_macros": [f"--gin_file={architecture}", "--gin_bindings=MAX_SEQ_LENGTH = 64",
                      f"--model_dir={model_dir}", f"--train_data={data}"],
    }[case]
    expected = {
        "unknown_binding": r"--gin_bindings='pretrainer.hiden_size = 3': .*hiden_size",
        "unknown_file": r"--gin_file=tinny.gin not found, here or in .*; choose one of .*tiny.gin",
        "length_mismatch": r"says max_seq_length=128 but the run uses 64; set MAX_SEQ_LENGTH=128",
        "no_data": r"--train_data .*none/\*.tfrecord matches no file",
        "batch_split": r"TRAIN_BATCH_SIZE=8 does not split into 1 replicas x 3 micro-batches",
        "xla_elementwise_env": r"ELECTRA_TF_XLA_ELEMENTWISE='false' is neither 1 .* nor 0 "
                               r"\(off\); set one of them",
        "misspelled_macro": r"--gin_bindings='NUM_TRAIN_STEP = 3': no gin file uses the macro "
                            r"NUM_TRAIN_STEP; did you mean NUM_TRAIN_STEPS\?",
        "unknown_objective": r"^error: OBJECTIVE='electrra' \(pretrainer.objective\) is not one of "
                             r"electra, mlm, ",
        "no_run_file": rf"^error: --gin_file={architecture} sets up no run \(gin/pretraining."
                       r"gin's settings, NUM_TRAIN_STEPS and the others, are unbound\); give a "
                       rf"size's file first, e.g. --gin_file=small.gin --gin_file={architecture}$",
        "no_macros": r"^error: --gin_bindings='MAX_SEQ_LENGTH = 64': no gin file uses the macro "
                     r"MAX_SEQ_LENGTH; the gin files given use no macros: give a size's file "
                     r"first \(e.g. small.gin, or finetune/small.gin for fine-tuning\)$",
    }[case]
    done = run_script("run_pretraining.py", *args, env={"ELECTRA_TF_XLA_ELEMENTWISE": "false"}
                      if case == "xla_elementwise_env" else None)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: ")
    assert re.search(expected, done.stderr.strip()), done.stderr
    assert not os.path.exists(model_dir)


def test_evaluation_settings_without_eval_data_are_said_to_do_nothing(tmp_path, data):
    """pretraining.eval_every without --eval_data was accepted without a word."""
    _, lines = run(tmp_path, data, ["pretraining.eval_every = 2", "NUM_TRAIN_STEPS = 2"],
                   eager=True)
    assert ("note: pretraining.eval_every sets how the run evaluates, but no --eval_data was "
            "given: nothing is evaluated (pass --eval_data to evaluate)") in lines
    assert not (tmp_path / "eval").exists()
