"""The study runner (benchmarks/study/run_study.py) end to end at toy scale: every
configuration of the grid pre-trained with the same FLOPs budget on the embedded corpus,
fine-tuned with 2 seeds on the committed movie-review fixture, one table and the plots
written; a rerun reuses everything, and one with two pre-training seeds only runs seed 1.
(About 2 minutes on 2 cores; the real grids are not run here.)
"""

import json
import os
import re
import statistics
import struct
import subprocess
import sys

import pytest

from conftest import ROOT

# One pytest-xdist worker runs them all: the module's study (about 2 minutes) is built once.
pytestmark = pytest.mark.xdist_group("study")
RUNNER = os.path.join(ROOT, "benchmarks", "study", "run_study.py")
GRID = ("electra", "mlm", "electra_15", "replace_mlm", "all_tokens_mlm", "generator_1_8",
        "generator_1_2", "generator_1", "sharing_none", "sharing_all", "two_stage",
        "adversarial")
PLOTS = ("curve", "objective", "sharing", "generator_size", "algorithm")


def _run(work, results, *more):
    result = subprocess.run(
        [sys.executable, RUNNER, "--scale=toy", f"--work_dir={work}",
         f"--results_dir={results}", *more], cwd=ROOT, capture_output=True, text=True,
        timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _png_size(path):
    """(width, height) from a PNG's header; fails unless it is a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


# Session scope: a worker whose queue interleaves these tests with other modules would
# otherwise tear the study down between them and build it again.
@pytest.fixture(scope="session")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    work, results = root / "work", root / "results"
    first = _run(work, results)
    with open(results / "study_toy.json") as f:
        record = json.load(f)
    stamps = {p: os.path.getmtime(p) for p in work.rglob("results.json")}
    second = _run(work, results)
    with open(results / "study_toy.json") as f:
        rerun = json.load(f)
    return dict(work=work, results=results, first=first, second=second, record=record,
                rerun=rerun, stamps=stamps)


def test_every_configuration_has_scores(study):
    record = study["record"]
    assert set(record["configs"]) == set(GRID)
    for name, config in record["configs"].items():
        final = config["finetune"][str(config["steps"])]
        assert final["metric"] == "accuracy"
        assert len(final["per_seed"]) == 2 and all(0 <= v <= 1 for v in final["per_seed"])
        assert min(final["per_seed"]) <= final["median"] <= max(final["per_seed"])
    baseline = record["random_init"]
    assert len(baseline["per_seed"]) == 2 and 0 <= baseline["median"] <= 1
    table = (study["results"] / "study_toy.md").read_text()
    for name in (*GRID, "random_init"):
        assert f"| `{name}` |" in table
    assert "median per pre-training run" not in table  # one seed: no per-run columns
    assert record["comparisons"] == [] and "Differences" not in table


def test_equal_flops_within_one_step(study):
    record = study["record"]
    budget = record["settings"]["flops_budget"]
    steps = {}
    for name, config in record["configs"].items():
        per_step = config["flops_per_step"]
        assert config["total_flops"] == pytest.approx(config["steps"] * per_step)
        assert abs(config["total_flops"] - budget) <= per_step, name
        # What the run itself reports, and that it trained that many steps. Two-stage
        # training is charged its two stages; the estimator reports the joint figure.
        model_dir = study["work"] / "pretrain" / name
        with open(model_dir / "model_info.json") as f:
            info = json.load(f)
        assert info["train_flops_per_example"] == pytest.approx(
            config["reported_flops_per_example"])
        if name != "two_stage":
            assert info["train_flops_per_example"] * info["train_batch_size"] == (
                pytest.approx(per_step))
        assert info["num_train_steps"] == config["steps"]
        assert (model_dir / f"ckpt-{config['steps']}.index").exists()
        steps[name] = config["steps"]
    # Cheaper steps, more of them: BERT has no generator, All-Tokens MLM the costliest head.
    assert steps["mlm"] > steps["electra"] > steps["all_tokens_mlm"]
    assert steps["two_stage"] > steps["generator_1"]


def test_curve_fine_tunes_checkpoints_along_the_runs(study):
    configs = study["record"]["configs"]
    for name in ("electra", "mlm"):
        points = configs[name]["finetune"]
        assert len(points) >= 2
        flops = [points[s]["flops"] for s in sorted(points, key=int)]
        assert flops == sorted(flops) and flops[-1] == pytest.approx(
            configs[name]["total_flops"])
    for name in set(GRID) - {"electra", "mlm"}:
        assert list(configs[name]["finetune"]) == [str(configs[name]["steps"])]


def test_plots_are_pngs(study):
    assert study["record"]["plots"] == [f"study_toy_{p}.png" for p in PLOTS]
    for name in study["record"]["plots"]:
        width, height = _png_size(study["results"] / name)
        assert width > 300 and height > 200


def test_a_smaller_grid_removes_the_plots_it_does_not_make(study, tmp_path):
    """A results folder that held the whole grid's plots, written again with two
    configurations: the plots this grid does not make go (they belonged to the old
    study.{json,md}); other files stay."""
    import shutil
    sys.path.insert(0, os.path.dirname(RUNNER))
    try:
        import grid
        import plots
    finally:
        sys.path.remove(os.path.dirname(RUNNER))
    for p in PLOTS:
        shutil.copy(study["results"] / f"study_toy_{p}.png", tmp_path)
    (tmp_path / "notes.png").write_bytes(b"kept")
    record = study["record"]
    configs = {n: record["configs"][n] for n in ("sharing_none", "sharing_all")}
    paths = plots.write_plots(configs, record["random_init"], str(tmp_path), "study_toy",
                              grid.GROUPS, ("electra", "mlm"),
                              record["settings"]["flops_budget"])
    assert paths == [str(tmp_path / "study_toy_sharing.png")]
    assert sorted(os.listdir(tmp_path)) == ["notes.png", "study_toy_sharing.png"]
    assert _png_size(paths[0])[0] > 300


def test_commands_recorded(study):
    commands = study["record"]["commands"]
    assert commands[0].startswith(".venv/bin/python scripts/build_pretraining_data.py ")
    assert sum("scripts/run_pretraining.py" in c for c in commands) == len(GRID)
    assert sum("scripts/run_finetuning.py" in c for c in commands) == len(GRID) + 2 + 1
    assert any("--gin_file=ablations/two_stage.gin" in c for c in commands)
    assert any("--random_init" in c for c in commands)
    assert study["record"]["run"]["git_commit"]


def test_rerun_reuses_everything(study):
    assert "$ " not in study["second"]  # no job ran again
    assert {p: os.path.getmtime(p) for p in study["stamps"]} == study["stamps"]
    first, rerun = study["record"], study["rerun"]
    assert rerun["configs"] == first["configs"]
    assert rerun["random_init"] == first["random_init"]
    assert rerun["commands"] == first["commands"]


def test_more_pretraining_seeds_reuse_seed_0_and_pool_the_runs(study):
    """--pretrain_seeds=0,1 over the grid's work dir: seed 0's runs are the one-seed
    study's (not run again), seed 1 is pre-trained and fine-tuned anew, and each score pools
    both runs' trials."""
    results = study["results"] / "two_seeds"
    out = _run(study["work"], results, "--configs=electra,mlm,electra_15,random_init",
               "--pretrain_seeds=0,1")
    ran = [line for line in out.splitlines() if line.startswith("$ ")]
    assert ran and all("_seed1" in line for line in ran), ran
    pretraining = [line for line in ran if "scripts/run_pretraining.py" in line]
    assert len(pretraining) == 3 and all("--seed=1" in line for line in pretraining)
    with open(results / "study_toy.json") as f:
        record = json.load(f)
    assert record["settings"]["pretrain_seeds"] == [0, 1]
    first = study["record"]["configs"]["electra"]
    config = record["configs"]["electra"]
    assert set(config["runs"]) == {"0", "1"}
    assert (study["work"] / "pretrain" / "electra_seed1" / f"ckpt-{config['steps']}.index"
            ).exists()
    for step, pooled in config["finetune"].items():
        seed0 = config["runs"]["0"]["finetune"][step]
        seed1 = config["runs"]["1"]["finetune"][step]
        assert seed0["per_seed"] == first["finetune"][step]["per_seed"]
        assert pooled["per_seed"] == seed0["per_seed"] + seed1["per_seed"]
        assert pooled["median"] == pytest.approx(statistics.median(pooled["per_seed"]))
        assert pooled["mean"] == pytest.approx(sum(pooled["per_seed"]) / 4)
        assert pooled["std"] == pytest.approx(statistics.stdev(pooled["per_seed"]))
    runs = config["runs"].values()
    assert config["pretrain_seconds"] == pytest.approx(
        sum(r["pretrain_seconds"] for r in runs) / 2, abs=0.1)
    assert record["random_init"] == study["record"]["random_init"]
    table = (results / "study_toy.md").read_text()
    assert "median per pre-training run" in table
    final = config["runs"]["0"]["finetune"][str(config["steps"])]["median"], config["runs"][
        "1"]["finetune"][str(config["steps"])]["median"]
    assert f"{final[0]:.4f} / {final[1]:.4f}" in table
    # The differences: ELECTRA - BERT at each pair of checkpoints along the runs, ELECTRA 15%
    # - BERT at the end, then ELECTRA and BERT against random weights (one set of trials),
    # the pooled medians' difference with an interval that resamples the two pre-training
    # runs.
    mlm = record["configs"]["mlm"]
    pairs = list(zip(sorted(config["finetune"], key=int), sorted(mlm["finetune"], key=int)))
    comparisons = record["comparisons"]
    assert [(c["a"], c["a_step"], c["b"], c["b_step"]) for c in comparisons] == [
        ("electra", int(a), "mlm", int(b)) for a, b in pairs] + [
        ("electra_15", record["configs"]["electra_15"]["steps"], "mlm", mlm["steps"]),
        ("electra", config["steps"], "random_init", 0), ("mlm", mlm["steps"], "random_init", 0)]
    for c, (a, b) in zip(comparisons, pairs):
        assert c["runs"] == [2, 2]
        assert c["difference"] == pytest.approx(
            config["finetune"][a]["median"] - mlm["finetune"][b]["median"])
        assert c["flops"] == [config["finetune"][a]["flops"], mlm["finetune"][b]["flops"]]
    ablation = record["configs"]["electra_15"]
    assert comparisons[len(pairs)]["difference"] == pytest.approx(
        ablation["finetune"][str(ablation["steps"])]["median"]
        - mlm["finetune"][str(mlm["steps"])]["median"])
    against_random = comparisons[len(pairs) + 1]
    assert against_random["runs"] == [2, 1]
    assert against_random["difference"] == pytest.approx(
        config["finetune"][str(config["steps"])]["median"] - record["random_init"]["median"])
    assert all(c["low"] <= c["high"] and 0 <= c["share_above"] <= 1 for c in comparisons)
    assert "Differences (pooled median of the first minus the second" in table
    for c in comparisons:
        assert f"| {c['difference']:+.4f} | {c['low']:+.4f} to {c['high']:+.4f} |" in table


@pytest.mark.parametrize("seeds", ["0,0", "one"])
def test_bad_pretrain_seeds_fail_with_one_line(tmp_path, seeds):
    result = subprocess.run(
        [sys.executable, RUNNER, "--scale=toy", f"--work_dir={tmp_path}",
         f"--pretrain_seeds={seeds}", "--plan"], cwd=ROOT, capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: --pretrain_seeds={seeds}: give distinct non-negative integers, "
        "e.g. --pretrain_seeds=0,1"]
    assert not any(tmp_path.iterdir())


_UNITS = r"""
import glob, json, os, shutil, sys
sys.argv = ["run_study"]
sys.path.insert(0, os.path.join({root!r}, "benchmarks", "study"))
import run_study as rs
from electra_tf import tokenization
from electra_tf.errors import UserInputError

# Checkpoints: none next to the end (the run still saves it).
plan = rs.checkpoint_plan(1001, 4, 500)
assert plan["checkpoints"] == [500, 1001] and plan["saved_checkpoints"] == 3, plan
plan = rs.checkpoint_plan(3021, 4, 100)  # the cpu grid's ELECTRA: unchanged
assert plan["checkpoints"] == [800, 1600, 2400, 3021] and plan["saved_checkpoints"] == 4
# ELECTRA's checkpoints paired with BERT's nearest in FLOPs, whatever their numbers.
a = {{"34": {{"flops": 1.0}}, "69": {{"flops": 2.0}}}}
b = {{str(s): {{"flops": f}} for s, f in ((31, 0.5), (62, 1.1), (93, 1.5), (124, 2.0))}}
assert rs.checkpoint_pairs(a, b) == [("34", "62"), ("69", "124")]
assert rs.checkpoint_pairs(b, a) == [("62", "34"), ("124", "69")]

# The masked positions a pretraining.max_predictions_per_seq binding gives are charged.
vocab = len(tokenization.load_vocab(os.path.join({root!r}, rs.VOCAB)))
flops = {{}}
for n in ("", "4", "10"):  # 4: the official N at seq 32, int(0.155 * 32)
    rs.FLAGS.unparse_flags()
    rs.FLAGS(["run_study", "--scale=toy"]
             + ([f"--pretrain_bindings=pretraining.max_predictions_per_seq={{n}}"] if n else []))
    flops[n] = rs.describe_config(rs.SCALES["toy"], rs.CONFIGS["electra"], vocab)[
        "reported_flops_per_example"]
assert flops[""] == flops["4"] < flops["10"], flops

# Job records: every job dir is checked before any is written; a rebuilt input refused.
tmp = {tmp!r}
job = lambda n: rs.Job("scripts/x.py", [("n", n)])
runner = rs.Runner(in_process=False)
os.makedirs(os.path.join(tmp, "b"))
rs._write_json(os.path.join(tmp, "b", rs.JOB_RECORD), {{"command": "another", "seconds": 1.0}})
try:
    runner.run_all([(job("1"), os.path.join(tmp, "a"), lambda: False, None),
                    (job("2"), os.path.join(tmp, "b"), lambda: False, None)])
    raise AssertionError("not refused")
except UserInputError as e:
    assert "holds a run of another command" in str(e)
assert not os.path.exists(os.path.join(tmp, "a")), "a record was written before the checks"
data = os.path.join(tmp, "metadata.json")
with open(data, "w") as f:
    f.write("1")
rs.execute = lambda job, in_process: 0.0  # nothing to run
runner.run_all([(job("1"), os.path.join(tmp, "a"), lambda: False, None, [data])])
runner.run_all([(job("1"), os.path.join(tmp, "a"), lambda: True, None, [data])])
with open(data, "w") as f:
    f.write("2")
try:
    runner.run_all([(job("1"), os.path.join(tmp, "a"), lambda: True, None, [data])])
    raise AssertionError("not refused")
except UserInputError as e:
    assert str(e).startswith(os.path.join(tmp, "a") + " ran on another "), e
# A job that failed before making anything (its dir holds only its record) is no run: its
# command may change. One that made something keeps its command.
rs._write_json(os.path.join(tmp, "c", rs.JOB_RECORD), {{"command": "another",
                                                       "interrupted_seconds": 3.0}})
runner.run_all([(job("3"), os.path.join(tmp, "c"), lambda: False, None)])
assert rs._read_json(os.path.join(tmp, "c", rs.JOB_RECORD))["command"].endswith("--n=3")
rs._write_json(os.path.join(tmp, "d", rs.JOB_RECORD), {{"command": "another"}})
open(os.path.join(tmp, "d", "ckpt-2.index"), "w").close()
try:
    runner.run_all([(job("4"), os.path.join(tmp, "d"), lambda: False, None)])
    raise AssertionError("not refused")
except UserInputError as e:
    assert "holds a run of another command" in str(e)
# The gin files a job reads, includes too: a finished job on an edited one is refused.
gin_dir = os.path.join({root!r}, "gin")
assert rs.gin_inputs(["tiny.gin", "ablations/mlm.gin"]) == [
    os.path.join(gin_dir, f) for f in ("tiny.gin", "ablations/mlm.gin", "pretraining.gin")]
assert rs.gin_inputs(["finetune/tiny.gin"]) == [
    os.path.join(gin_dir, "finetune", f) for f in ("tiny.gin", "finetuning.gin")]

# A fine-tuning is done only from the same weights, on the same splits.
work = {work!r}
out = sorted(glob.glob(os.path.join(work, "finetune", "mlm", "step*")))[-1]
init = os.path.join(work, "pretrain", "mlm", "ckpt-" + out.rsplit("step", 1)[1])
files = [os.path.join(work, "train.csv"), os.path.join(work, "dev.csv")]
assert rs.finetuned(out, init, files)
other = os.path.join(tmp, "dev.csv")
with open(files[1]) as f, open(other, "w") as g:
    g.write(f.read().replace("positive", "negative", 1))
assert not rs.finetuned(out, init, [files[0], other])
earlier = sorted(glob.glob(os.path.join(work, "pretrain", "mlm", "ckpt-*.index")))[0][:-6]
assert not rs.finetuned(out, earlier, files)
print("units ok")
"""


def test_plan_pairs_job_records_and_staleness(study, tmp_path):
    """Checkpoint plans and ELECTRA/BERT pairs that cannot mismatch, masked-position
    bindings charged, job dirs all checked before any is written and refused when an input
    was rebuilt, fine-tuning redone when its weights or splits changed (the runner's parts,
    in a fresh process: run_study defines flags)."""
    code = _UNITS.format(root=ROOT, tmp=str(tmp_path), work=str(study["work"]))
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and "units ok" in result.stdout, result.stderr[-3000:]


def _snippet(code: str, timeout: int = 300) -> str:
    """Runs `code` in a fresh process (run_study defines flags) with run_study imported as
    `rs`; fails with its stderr unless it prints "ok"."""
    head = ("import os, sys\nsys.argv = ['run_study']\n"
            f"sys.path.insert(0, os.path.join({ROOT!r}, 'benchmarks', 'study'))\n"
            "import run_study as rs\n")
    result = subprocess.run([sys.executable, "-c", head + code], cwd=ROOT,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0 and "ok" in result.stdout.split(), (
        result.stdout[-3000:] + result.stderr[-3000:])
    return result.stdout


# A job that writes `saved` (its --out) on SIGTERM, and `saved.started` once it runs.
_SAVING_JOB = r"""
tmp = {tmp!r}
job_script = os.path.join(tmp, "job.py")
with open(job_script, "w") as f:
    f.write(chr(10).join([
        "import signal, sys, time",
        "def stop(*_):",
        "    open(sys.argv[1][6:], 'w').write('saved')",
        "    sys.exit(143)",
        "signal.signal(signal.SIGTERM, stop)",
        "open(sys.argv[1][6:] + '.started', 'w').close()",
        "time.sleep(60)", ""]))
saved = os.path.join(tmp, "saved")
"""
_SIGTERM_PASSED_ON = _SAVING_JOB + r"""
import signal, threading, time
from electra_tf import cli


def terminate(*_):
    raise cli.Terminated


signal.signal(signal.SIGTERM, terminate)


def send_when_started():
    while not os.path.exists(saved + ".started"):
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)  # this process alone, as `kill PID` does


threading.Thread(target=send_when_started, daemon=True).start()
started = time.time()
try:
    rs.execute(rs.Job(job_script, [("out", saved)]), in_process=False)
    raise AssertionError("not stopped")
except cli.Terminated:
    pass
assert open(saved).read() == "saved"  # the job got SIGTERM and saved (it was SIGKILLed)
assert time.time() - started < 30
print("ok")
"""


def test_a_sigterm_to_the_study_reaches_its_running_job(tmp_path):
    """A study stopped by SIGTERM passes it on to the job it waits for, which saves and
    exits as it does on its own SIGTERM, and the study then stops (subprocess.run killed
    the job with SIGKILL, mid-save; the study's own process had no handler)."""
    _snippet(_SIGTERM_PASSED_ON.format(tmp=str(tmp_path)), timeout=120)


_KILLED_STUDY = _SAVING_JOB + r"""
import signal, subprocess, time
# The study: a process that runs the job as a subprocess, killed with SIGKILL.
study = subprocess.Popen([sys.executable, "-c", chr(10).join([
    "import os, sys",
    "sys.argv = ['run_study']",
    f"sys.path.insert(0, {{os.path.dirname(rs.__file__)!r}})",
    "import run_study as rs",
    f"rs.execute(rs.Job({{job_script!r}}, [('out', {{saved!r}})]), in_process=False)"])],
    cwd=rs.common.REPO)
started = time.time()
while not os.path.exists(saved + ".started"):
    assert study.poll() is None and time.time() - started < 120, "the job did not start"
    time.sleep(0.05)
study.kill()
study.wait()
killed = time.time()
# (until it holds what the job writes: the file exists a moment before its text does)
while not (os.path.exists(saved) and open(saved).read()) and time.time() - killed < 30:
    time.sleep(0.05)
assert os.path.exists(saved) and open(saved).read() == "saved", "the job outlived its study"
print("ok")
"""


def test_a_killed_study_leaves_no_job_running(tmp_path):
    """`kill -9` of the study: its job (a subprocess) got no signal and ran on, unseen,
    holding its model dir (a rerun was refused: "being written by another
    run_pretraining.py" of a PID the user never started); it gets SIGTERM, saves and stops."""
    _snippet(_KILLED_STUDY.format(tmp=str(tmp_path)), timeout=300)


_JOB_SECONDS = r"""
import re
import time
tmp = {tmp!r}
job = rs.Job("scripts/x.py", [("n", "1")])
path = os.path.join(tmp, "a", rs.JOB_RECORD)
runner = rs.Runner(in_process=False)


def run(took=None, fail_after=None, done=False):
    def execute(job, in_process):
        if fail_after is not None:
            time.sleep(fail_after)
            raise KeyboardInterrupt  # a kill
        return took
    rs.execute = execute
    return runner.run_all([(job, os.path.join(tmp, "a"), lambda: done, None)])[0]


assert run(took=5.0) == 5.0 and rs._read_json(path)["seconds"] == 5.0
assert run(done=True) == 5.0  # skipped: the recorded seconds
# Redone (its weights changed, say): the new run's seconds, not added to the old run's.
assert run(took=4.0) == 4.0 and rs._read_json(path)["seconds"] == 4.0
# Killed part way: the seconds it ran are kept and added to its resumption's.
try:
    run(fail_after=0.3)
    raise AssertionError("not interrupted")
except KeyboardInterrupt:
    pass
record = rs._read_json(path)
assert "seconds" not in record and 0.3 <= record["interrupted_seconds"] < 1.0, record
assert run(took=2.0) == round(2.0 + record["interrupted_seconds"], 1)
assert rs._read_json(path) == {{"command": record["command"], "seconds": run(done=True),
                               "commit": rs.job_commit()}}
assert re.fullmatch(r"[0-9a-f]{{7,}}(\+modified)?", rs.job_commit()), rs.job_commit()
# While a job runs, its record holds its seconds so far (a SIGKILL loses one interval).
rs.HEARTBEAT_SECONDS = 0.05
seen = []


def slow(job, in_process):
    time.sleep(0.4)
    seen.append(rs._read_json(path).get("interrupted_seconds"))
    return 0.4


rs.execute = slow
assert runner.run_all([(job, os.path.join(tmp, "a"), lambda: False, None)]) == [0.4]
assert seen[0] is not None and seen[0] >= 0.2, seen
# A later job killed: the earlier one's seconds stand, and a rerun reuses them.
rs.execute = lambda job, in_process: 3.0
second = rs.Job("scripts/x.py", [("n", "2")])
items = [(job, os.path.join(tmp, "a"), lambda: False, None),
         (second, os.path.join(tmp, "b"), lambda: False, None)]
calls = []


def first_then_kill(job, in_process):
    calls.append(job)
    if len(calls) == 2:
        raise KeyboardInterrupt
    return 3.0


rs.execute = first_then_kill
try:
    runner.run_all(items)
    raise AssertionError("not interrupted")
except KeyboardInterrupt:
    pass
assert rs._read_json(path)["seconds"] == 3.0
rs.execute = lambda job, in_process: 1.0
assert runner.run_all([(job, os.path.join(tmp, "a"), lambda: True, None),
                       items[1]]) == [3.0, 1.0]
print("ok")
"""


def test_job_seconds_recorded_once_per_completed_job_and_kept_across_kills(tmp_path):
    """A job's seconds are those of the run that completed it (a redone job's are not added
    to the run it replaces) plus those of the attempts killed before it, which its record
    keeps while it runs; a kill of a later job leaves an earlier one's record as it was."""
    _snippet(_JOB_SECONDS.format(tmp=str(tmp_path)))


_TWO_STAGE_AND_HARDWARE = r"""
from electra_tf.errors import UserInputError
import grid
scale, budget = rs.SCALES["toy"], 1.3e10


def plan(names, *bindings, budget=budget):
    rs.FLAGS.unparse_flags()
    rs.FLAGS(["run_study", "--scale=toy"] + [f"--pretrain_bindings={b}" for b in bindings])
    return rs.build_plan(scale, names, budget, 2)


default = plan(["electra", "mlm", "two_stage"])
# Every configuration also gets what a device executes: lookups as gathers, backward 2x.
for name in ("electra", "mlm"):
    p = default[name]
    assert p["hardware_flops_per_example"] == p["reported_hardware_flops_per_example"]
    assert p["hardware_total_flops"] == (
        p["hardware_flops_per_example"] * p["train_batch_size"] * p["steps"])
    assert p["hardware_flops_per_example"] < p["train_flops_per_example"] / 2
assert "BERT trains" in rs.hardware_ratio(default) and rs.hardware_ratio({}) == ""
# Two-stage at the default switch (half the run): each stage's figure for its steps.
p = default["two_stage"]
batch, steps = p["train_batch_size"], p["steps"]
for kind, total in (("official", "total_flops"), ("hardware", "hardware_total_flops")):
    generator, discriminator = p["stage_flops"][kind]
    assert abs(p[total] - batch * (generator * (steps // 2)
                                   + discriminator * (steps - steps // 2))) <= 1e-6 * p[total]
# pretraining.two_stage_steps bound: the generator stage's figure up to that switch (100
# steps of about 900 at 1e12 FLOPs: fewer of the cheaper steps than half the run).
bound = plan(["two_stage"], "pretraining.two_stage_steps=100", budget=1e12)["two_stage"]
generator, discriminator = bound["stage_flops"]["official"]
assert bound["two_stage_steps"] == 100 and bound["steps"] > 100
total = batch * (generator * 100 + discriminator * (bound["steps"] - 100))
assert abs(bound["total_flops"] - total) <= 1e-6 * total, (bound["total_flops"], total)
assert abs(total - 1e12) <= batch * discriminator / 2 + 1
assert bound["steps"] < plan(["two_stage"], budget=1e12)["two_stage"]["steps"]
try:
    plan(["two_stage"], "pretraining.two_stage_steps=100000")
    raise AssertionError("not refused")
except UserInputError as e:
    assert str(e).startswith("pretraining.two_stage_steps=100000: its generator stage alone "
                             "spends "), e
# A finished run is charged its own switch (model_info.json's, or its operative config's).
import dataclasses
from electra_tf.modeling.config import EncoderConfig, encoder_config
tiny = dataclasses.asdict(encoder_config("tiny"))
info = {"algorithm": "two_stage", "num_train_steps": 100, "two_stage_steps": 10,
        "train_batch_size": 8, "max_seq_length": 32, "mask_prob": 0.15,
        "masked_positions": 4, "discriminator": tiny, "generator": tiny}
generator, discriminator = grid.two_stage_stage_flops(
    EncoderConfig(**tiny), EncoderConfig(**tiny), 32, 0.15, 4)
charged = grid.charged_flops_per_example(info)
assert abs(charged - (10 * generator + 90 * discriminator) / 100) <= 1e-9 * charged
assert abs(grid.charged_flops(info, 100) - 8 * 100 * charged) <= 1e-9 * 800 * charged
print("ok")
"""


def test_two_stage_charged_at_its_switch_and_hardware_flops_per_configuration():
    """The plan charges two-stage training each stage's FLOPs for its own steps, at half
    the run or at a bound pretraining.two_stage_steps (one that spends the budget on the
    generator alone is refused), and gives every configuration the FLOPs a device executes
    beside the official (paper's) figure the budget counts."""
    _snippet(_TWO_STAGE_AND_HARDWARE)


_GPUS_HIDDEN = r"""
import tensorflow as tf
calls = []
real = tf.config.set_visible_devices
tf.config.set_visible_devices = lambda devices, kind=None: calls.append((devices, kind))


class Planned(Exception):
    pass


def build_plan(*args):
    calls.append("plan")
    raise Planned


rs.build_plan = build_plan
for in_process, hidden in (("--in_process", False), ("--noin_process", True)):
    calls.clear()
    rs.FLAGS.unparse_flags()
    rs.FLAGS(["run_study", "--scale=toy", in_process, "--work_dir={tmp}", "--plan"])
    try:
        rs.main([])
    except Planned:
        pass
    # Jobs as subprocesses: this process plans on the CPU, the GPUs left to the jobs.
    assert calls == ([([], "GPU"), "plan"] if hidden else ["plan"]), (in_process, calls)
tf.config.set_visible_devices = real
rs.hide_gpus()  # before any op, as main calls it: TensorFlow accepts it
assert tf.config.get_visible_devices("GPU") == [] and float(tf.constant(1.0) + 1) == 2.0
print("ok")
"""


def test_gpus_hidden_from_the_planning_process_when_jobs_are_subprocesses(tmp_path):
    """With jobs run as subprocesses (the cpu and small scales), the process that plans the
    grid (building each pretrainer) hides the GPUs before any TensorFlow op, else it takes
    all of a GPU's memory before the first job starts; in process it keeps them."""
    _snippet(_GPUS_HIDDEN.format(tmp=str(tmp_path)))


_BAD_INPUTS = r"""
from electra_tf.errors import UserInputError
# Planning imports no TensorFlow before keep_off_the_tpu (it would take a TPU VM's TPU).
assert "tensorflow" not in sys.modules
tmp = {tmp!r}
labelled = os.path.join(tmp, "labelled.csv")
with open(labelled, "w") as f:
    f.write("text,sentiment\nfine,1\n")


def refused(*flags):
    rs.FLAGS.unparse_flags()
    rs.FLAGS(["run_study", "--jobs=1", "--configs=electra,random_init",
              f"--work_dir={{tmp}}/work", *flags])
    try:
        rs.main([])
    except UserInputError as e:
        return str(e)
    raise AssertionError(f"not refused: {{flags}}")


# Each before any job runs (no data built).
assert refused("--scale=toy", "--labelled_data=/nonexistent.csv") == (
    "--labelled_data=/nonexistent.csv: no such file; give 'vader' or a CSV with a `text` "
    "and a --label_column column")
assert refused("--scale=toy", f"--labelled_data={{labelled}}", "--label_column=label") == (
    f"--labelled_data={{labelled}} has no `label` column (its columns: text, sentiment); "
    "pass --label_column")
assert refused("--scale=toy", "--flops_budget=0") == (
    "--flops_budget=0: give a positive number of FLOPs (the scale's: 1.3e+10)")
assert refused("--scale=toy", "--flops_budget=1e6").startswith(
    "a budget of 1e+06 FLOPs is under two steps of electra (")
assert refused("--scale=toy", "--configs=mlm,random_init") == (
    "random_init fine-tunes the electra run's discriminator with random weights: include "
    "electra in --configs")
assert refused("--scale=cpu", "--configs=" + ",".join([*rs.CONFIGS, rs.RANDOM_INIT]),
               "--flops_budget=1e14", "--num_trials=2") == (
    "--flops_budget=1e+14 --num_trials=2 makes another study than --scale=cpu's: its "
    "results would replace benchmarks/results/study.{{json,md}}; pass --results_dir, e.g. "
    "--results_dir=benchmarks/results/study_flops_budget")
# A configuration named twice (its two jobs wrote one model dir at once); the scale's own
# results dir named: as if not given.
assert refused("--scale=toy", "--configs=electra,electra,random_init") == (
    "--configs names electra twice; name each configuration once")
assert refused("--scale=toy", "--configs=") == (
    "--configs is empty; name configurations, e.g. --configs=electra,mlm,random_init, or "
    "leave it out for the grid")
assert refused("--scale=toy", "--num_trials=-1") == (
    "--num_trials=-1 is negative; give a positive number, or leave it out for the scale's "
    f"({{rs.SCALES['toy'].num_trials}})")
for value in ("nan", "inf"):  # (a traceback in the plan's rounding)
    assert refused("--scale=toy", f"--flops_budget={{value}}") == (
        f"--flops_budget={{value}}: give a positive number of FLOPs (the scale's: 1.3e+10)")
assert refused("--scale=toy", "--jobs=-1") == (  # (a traceback once every job dir was made)
    "--jobs=-1 is negative; give a positive number, or leave it out (the scale's: 2)")
assert refused("--scale=toy", "--estimate=-5") == (
    "--estimate=-5 is negative; give a positive number, or leave it out (0: off)")
# The corpus named as the study's flag (it said the builder's --input), a relative path
# read from where the study runs (it was read from the repository's root).
assert refused("--scale=toy", f"--corpus={{tmp}}/none/*.txt") == (
    f"--corpus={{tmp}}/none/*.txt: input {{tmp}}/none/*.txt matches no file; check the path or "
    "glob")
os.makedirs(os.path.join(tmp, "empty"))
assert refused("--scale=toy", f"--corpus={{tmp}}/empty") == (
    f"--corpus={{tmp}}/empty: input {{tmp}}/empty holds no files (hidden ones, named '.*', are "
    "skipped); check --corpus")
os.chdir(tmp)
assert refused("--scale=toy", "--corpus=data/corpus/persuasion.txt.gz") == (
    f"--corpus=data/corpus/persuasion.txt.gz: input {{tmp}}/data/corpus/persuasion.txt.gz "
    "matches no file; check the path or glob")
assert refused("--scale=toy", "--labelled_data=labelled.csv", "--label_column=label") == (
    "--labelled_data=labelled.csv has no `label` column (its columns: text, sentiment); "
    "pass --label_column")
os.chdir(rs.common.REPO)
assert refused("--scale=toy", "--plan", "--estimate=10") == (
    "--plan and --estimate each stop early, at different points; pass one of them")
assert refused("--scale=cpu", "--results_dir=benchmarks/results").startswith(
    "--configs=electra,random_init is part of the grid")
assert not os.path.exists(os.path.join(tmp, "work", "data32")), os.listdir(tmp + "/work")
# A study's runs made when jobs kept a count of checkpoints are reused (keep_checkpoints
# changes what a run keeps, not what it computes); other bindings are other runs.
kept = ("--gin_bindings=CHECKPOINT_EVERY=800 --gin_bindings=pretraining.keep_checkpoints={{}} "
        "--seed=0")
assert rs._comparable(kept.format(6)) == rs._comparable(kept.format("None"))
assert rs._comparable(kept.format(6)) != rs._comparable(kept.replace("800", "900").format(6))
# gin's own subclass of the error, which a worker process could not send back (pickle):
# a job's error is the plain one, its first line.
import gin, pickle
@gin.configurable
def fails():
    raise UserInputError("a bad binding")
job = rs.Job("scripts/run_pretraining.py", [])
rs.IN_PROCESS["scripts/run_pretraining.py"] = (lambda job: fails(), set())
record = os.path.join(tmp, "record", "study_job.json")
rs._write_json(record, {{}})
try:
    rs.run_timed(job, True, record, "abc")
    raise AssertionError("not raised")
except UserInputError as e:
    assert type(e) is UserInputError and str(e) == "a bad binding", (type(e), str(e))
    pickle.loads(pickle.dumps(e))
# How the runs compute (precision, XLA), more seeds, and a 0 meaning the scale's value
# keep the scale's study; other bindings, or seeds without 0, make another.
cpu, grid = rs.SCALES["cpu"], list(rs.CONFIGS)
rs.FLAGS.unparse_flags()
rs.FLAGS(["run_study", "--scale=cpu", "--pretrain_bindings=pretraining.precision='mixed_bfloat16'",
          "--pretrain_bindings=pretraining.jit_compile=True", "--pretrain_seeds=0,1",
          "--curve_points=0"])
rs.check_results_dir(grid, True, "study", cpu)
for flag in ("--pretrain_bindings=LEARNING_RATE=3e-4", "--pretrain_seeds=1,2"):
    rs.FLAGS.unparse_flags()
    rs.FLAGS(["run_study", "--scale=cpu", flag])
    try:
        rs.check_results_dir(grid, True, "study", cpu)
        raise AssertionError(f"not refused: {{flag}}")
    except UserInputError as e:
        assert str(e).startswith(f"{{flag}} makes another study than --scale=cpu's"), e
# A binding the study overrides, or one gin cannot read, is refused naming the study's flag.
toy = rs.SCALES["toy"]
for binding, expected in (
        ("NUM_TRAIN_STEPS=5", "--pretrain_bindings='NUM_TRAIN_STEPS=5': the study sets each "
         "run's steps from the budget (--flops_budget); leave it out"),
        ("pretraining.num_train_steps=5", "--pretrain_bindings='pretraining.num_train_steps=5'"
         ": the study sets each run's steps"),
        ("MAX_SEQ_LENGTH=64", "--pretrain_bindings='MAX_SEQ_LENGTH=64': the study builds its "
         "data at the scale's sequence length, which a run must match; leave it out"),
        ("pretraining.keep_checkpoints=3", "--pretrain_bindings='pretraining.keep_checkpoints=3"
         "': the study keeps every checkpoint"),
        ("pretraining.nosuch=1", "--pretrain_bindings='pretraining.nosuch=1': Configurable "
         "'pretraining' doesn't have a parameter named 'nosuch'; check the name")):
    rs.FLAGS.unparse_flags()
    rs.FLAGS(["run_study", "--scale=toy", f"--pretrain_bindings={{binding}}"])
    try:
        rs.check_pretrain_bindings(toy)
        raise AssertionError(f"not refused: {{binding}}")
    except UserInputError as e:
        assert str(e).startswith(expected), e
rs.FLAGS.unparse_flags()
rs.FLAGS(["run_study", "--scale=toy", "--pretrain_bindings=LEARNING_RATE=3e-4"])
rs.check_pretrain_bindings(toy)
print("ok")
"""


def test_bad_study_inputs_are_refused_before_any_job_runs(tmp_path):
    """A missing labelled file or column, a budget of no steps, random_init without electra,
    and the scale's study run with other settings into its results: one line each, before
    the data is built."""
    _snippet(_BAD_INPUTS.format(tmp=str(tmp_path)))


def test_a_part_of_the_grid_needs_its_own_results_dir(tmp_path):
    """--configs without --results_dir would replace the whole grid's study.{json,md} in
    benchmarks/results/: refused before anything runs or is written."""
    result = subprocess.run(
        [sys.executable, RUNNER, "--scale=cpu", "--configs=electra,mlm",
         f"--work_dir={tmp_path / 'work'}", f"--corpus={tmp_path / 'none' / '*.txt'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "error: --configs=electra,mlm is part of the grid: its results would replace the "
        "whole grid's benchmarks/results/study.{json,md}; pass --results_dir, e.g. "
        "--results_dir=benchmarks/results/study_electra_mlm"]
    assert not any(tmp_path.iterdir())


def test_documented_parts_of_the_grid_pass_a_results_dir():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = readme.split("## The paper's claims at small scale")[1].split("\n## ")[0]
    docs = [section, open(RUNNER, encoding="utf-8").read().split('"""')[1],
            open(os.path.join(ROOT, "benchmarks", "study", "README.md"),
                 encoding="utf-8").read()]
    commands = [c for text in docs for piece in re.split(r"`|\n\n", text)
                for c in re.split(r"\n\s*(?=\.venv/bin/python )", piece)
                if "run_study.py" in c and "--configs=" in c]
    assert commands and all("--results_dir=" in c for c in commands), commands


_FOREIGN_FILES_KEPT = r"""
import make_corpus
from electra_tf.errors import UserInputError
tmp = {tmp!r}
out = os.path.join(tmp, "out")
os.makedirs(os.path.join(out, "my_notes"))
for name in ("keep.txt", "my_notes/thesis.txt", "gcide-00000.txt.gz"):
    open(os.path.join(out, name), "w").write("mine")
try:
    make_corpus.make_corpus(out)
    raise AssertionError("not refused")
except UserInputError as e:
    assert str(e) == (f"--output_dir={{out}} holds files this script did not write (keep.txt, "
                      "my_notes); pass a new or empty folder"), str(e)
assert sorted(os.listdir(out)) == ["gcide-00000.txt.gz", "keep.txt", "my_notes"]
assert open(os.path.join(out, "my_notes", "thesis.txt")).read() == "mine"
print("ok")
"""


def test_make_corpus_deletes_nothing_it_did_not_write(tmp_path):
    """make_corpus.py rebuilds a folder without a complete build in it: it deleted the whole
    folder first (a user's --output_dir=., the checkout; data/corpus, its own input); a
    folder holding files of other names is now refused, untouched."""
    _snippet(_FOREIGN_FILES_KEPT.format(tmp=str(tmp_path)), timeout=120)
