"""benchmarks/console_curves.py: the losses and examples/s read back from run_pretraining.py's
console lines, and one clear line for a log that has none."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import console_curves  # noqa: E402

LOG = """XLA compilation cache: /tmp/run/xla_cache (0 compiled programs from earlier runs)
step 100/300 | loss 34.0689 (generator 10.2844, discriminator 0.4757) | 191.3 examples/s | MFU 0.2% | ETA 4h26m
step 200/300 | loss 26.5403 (generator 9.9879, discriminator 0.3310) | 7628.1 examples/s | ETA 6m39s
SIGTERM: saved checkpoint to /tmp/run/ckpt-200.
step 200/300 | loss 26.0000 (generator 9.5000, discriminator 0.3300) | 7000.0 examples/s | ETA 6m40s
step 300/300 | loss 22.7729 (generator 9.7220, discriminator 0.2610) | 7659.6 examples/s | MFU 7.1% | ETA 0m00s
"""


def test_parse_reads_every_step_and_a_resumed_step_keeps_its_last_line():
    run = console_curves.parse(LOG)
    assert run["num_train_steps"] == 300
    assert list(run["points"]) == [100, 200, 300]
    assert run["points"][100] == {"loss": 34.0689, "generator": 10.2844,
                                  "discriminator": 0.4757, "examples_per_second": 191.3}
    assert run["points"][200]["generator"] == 9.5 and run["points"][200]["loss"] == 26.0
    assert console_curves.value_at(run["points"], 300, "discriminator") == 0.261
    assert console_curves.value_at(run["points"], 250, "discriminator") is None
    # An MLM run's lines have no discriminator loss (they showed 0.0000).
    mlm = console_curves.parse("step 20/20 | loss 10.3338 (generator 10.3338) | 450.2 "
                               "examples/s | ETA 0m00s")
    assert mlm["points"] == {20: {"loss": 10.3338, "generator": 10.3338, "discriminator": None,
                                  "examples_per_second": 450.2}}


def test_the_tables_default_steps_are_logged_steps():
    """Ten evenly spaced steps, each moved back to a step some run logged: a 120-step log
    of 20-step loops showed '-' in 8 of its 10 rows."""
    run = {"points": {step: {} for step in range(20, 121, 20)}}
    assert console_curves.table_steps({"a": run}, []) == [20, 40, 60, 80, 100, 120]
    assert console_curves.table_steps({"a": run}, ["30", "120"]) == [30, 120]


def test_parse_names_a_log_without_step_lines():
    with pytest.raises(ValueError, match=r"^train\.log: no 'step N/T \| loss \.\.\.' lines"):
        console_curves.parse("pretraining exit 1 after 3 s\n", "train.log")


@pytest.mark.parametrize("args, message", [
    ([], "pass LABEL=LOG for each run"),
    (["run=/nonexistent/train.log"], "/nonexistent/train.log: no such file"),
    (["run={empty}"], "{empty}: no 'step N/T | loss ...' lines"),
    (["run={folder}"], "{folder}: a folder, not a file; pass the console log"),
    (["--at_steps=abc", "run={log}"], "--at_steps=abc: pass whole step numbers"),
])
def test_bad_arguments_give_one_line_and_write_nothing(tmp_path, args, message):
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    (tmp_path / "log.txt").write_text(LOG)
    places = dict(empty=empty, folder=tmp_path, log=tmp_path / "log.txt")
    args = [a.format(**places) for a in args]
    name = "console_curves_test_never_written"
    done = subprocess.run([sys.executable, "benchmarks/console_curves.py",
                           f"--results_name={name}"] + args,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message.format(**places) in lines[0], done.stderr
    assert not [f for f in os.listdir(os.path.join(ROOT, "benchmarks", "results"))
                if f.startswith(name)]
