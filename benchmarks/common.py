"""Shared helpers for the benchmark scripts: machine facts and recording results.

Each benchmark writes `benchmarks/results/<name>.json` (every figure, the machine, the commit,
the date and the exact command) and `benchmarks/results/<name>.md` (a short table).
"""

import datetime
import json
import math
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE_DIR = os.path.join(REPO, "benchmarks", ".cache")
RESULTS_DIR = os.path.join(REPO, "benchmarks", "results")


def positive_integers(flag: str, values: list[str]) -> list[int]:
    """A list flag's values as whole numbers of at least 1, else a UserInputError naming
    the flag (int() of 'a' was a traceback; 0 workers ran and reported nothing)."""
    from electra_tf.errors import UserInputError
    if not values or not all(re.fullmatch(r"\s*[1-9]\d*\s*", v) for v in values):
        raise UserInputError(f"--{flag}={','.join(values)}: give whole numbers of at least 1, "
                             "comma-separated")
    return [int(v) for v in values]


def run_child(command: list[str], grace: float = 10, **popen) -> subprocess.CompletedProcess:
    """subprocess.run(command, **popen) for a benchmark's worker process or a study's job:
    where this process is stopped meanwhile, the child is given `grace` seconds to clean up
    and exit (its temporary model folders, a checkpoint: subprocess.run killed it outright)
    before it is killed. A SIGTERM sent to this process alone (cli.Terminated) is passed on
    to it; Ctrl-C reached the child's process group itself."""
    from electra_tf import cli
    process = subprocess.Popen(command, **popen)
    try:
        out, err = process.communicate()
    except BaseException as stopped:
        if isinstance(stopped, cli.Terminated) and process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def run(main):
    """absl's app.run for a benchmark, with the project scripts' endings: Ctrl-C one line
    (exit 130; what was written is whole, each result file atomically), a UserInputError
    its `error:` line (exit 1), and a command the benchmark ran that failed after printing
    its own error, one line naming it (each was a traceback); a flag refused as the scripts
    refuse one (absl's bounds and enums were two 'FATAL Flags parsing error' lines)."""
    from absl import app

    def guarded(argv):
        from electra_tf import cli
        from electra_tf.errors import UserInputError
        from electra_tf.training import signals

        def terminated(*_):  # (raised in the main thread: `with` blocks clean up, as on
            raise cli.Terminated  # Ctrl-C; a benchmark's temporary folders were left)

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, terminated)
        try:
            return main(argv)
        except KeyboardInterrupt:
            print(signals.INTERRUPTED_LINE, file=sys.stderr)
            return 130
        except cli.Terminated:
            print("terminated (SIGTERM)", file=sys.stderr)
            return cli.TERMINATED_EXIT_CODE
        except UserInputError as e:
            print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
            return 1
        except subprocess.CalledProcessError as e:
            command = e.cmd if isinstance(e.cmd, str) else shown(list(map(str, e.cmd)))
            print(f"error: this command failed (its output is above): {command}",
                  file=sys.stderr)
            return 1

    from electra_tf import cli
    app.run(guarded, flags_parser=cli.parse_flags)


def define_results_name(default: str) -> None:
    """Defines --results_name, the name of a script's results files (called by the script,
    not at this module's import: flags defined at import clash between benchmarks), as the
    caller's own flag (--helpshort lists it)."""
    from absl import flags
    caller = sys._getframe(1).f_globals.get("__name__")
    flags.DEFINE_string("results_name", default,
                        f"benchmarks/results/<name>.{{json,md}} (default {default}); to check "
                        f"an install or try a small size, {default}_check, which git ignores "
                        "(the default writes over the committed results).",
                        module_name=sys.argv[0] if caller == "__main__" else caller)


def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return describe_cpu(f.read())
    except OSError:
        return platform.processor() or "unknown"


def describe_cpu(cpuinfo: str) -> str:
    """The CPU's name from /proc/cpuinfo's text, with its family/model numbers and widest
    vector instructions: hosts named alike ("AMD EPYC") differ by CPU generation, and CPU
    speed ratios between frameworks differ with them (AVX-512 with bfloat16 or not, AMX)."""
    fields = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "cpu family", "model", "flags"):
            fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or "unknown"
    flags = set(fields.get("flags", "").split())
    vector = ("AVX-512" + (" + bf16" if "avx512_bf16" in flags else "")
              if "avx512f" in flags else "AVX2" if "avx2" in flags else None)
    # Intel's AMX tile unit ran TensorFlow's bfloat16 matmul at 4.2x its float32 one
    # (benchmarks/results/model_step_intel_amx_xla{_bf16,}.md: 1,541 against 363 GFLOP/s),
    # so it decides what mixed_bfloat16 gains on a CPU.
    if vector and "amx_bf16" in flags:
        vector += " + AMX"
    details = [f"family {fields['cpu family']} model {fields['model']}"
               if "cpu family" in fields and "model" in fields else None, vector]
    details = [d for d in details if d]
    return f"{name} ({', '.join(details)})" if details else name


def _memory_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1e6, 1)
    except OSError:
        pass
    return None


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all processes, all cores) since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children."""
    import resource
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class LoadMonitor:
    """Measures how many cores *other* processes kept busy during a timed region.

    The benchmark machine is shared; a figure taken while something else ran is not
    comparable, so every timing records this next to it.
    """

    def __enter__(self):
        self._machine = busy_cpu_seconds()
        self._own = own_cpu_seconds()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        wall = max(time.perf_counter() - self._start, 1e-9)
        others = (busy_cpu_seconds() - self._machine) - (own_cpu_seconds() - self._own)
        self.other_cores = max(0.0, others / wall)
        return False


QUIET_CORES = 0.25  # what other processes may use during a measurement kept as quiet


def wait_for_quiet(max_wait_s: float = 300, threshold_cores: float = QUIET_CORES,
                   sample_s: float = 2.0) -> float:
    """Waits (up to max_wait_s) until other processes use < threshold_cores; returns the
    last sampled load in cores."""
    deadline = time.monotonic() + max_wait_s
    while True:
        with LoadMonitor() as monitor:
            time.sleep(sample_s)
        if monitor.other_cores < threshold_cores or time.monotonic() > deadline:
            return monitor.other_cores
        print(f"machine busy ({monitor.other_cores:.2f} cores used by other processes); "
              "waiting", file=sys.stderr)
        time.sleep(5)


def measure_quietly(measure, max_wait_s: float = 300, threshold_cores: float = QUIET_CORES,
                    attempts: int = 4) -> dict:
    """Runs measure() (which returns a dict) when the machine is quiet; if other processes
    used more than threshold_cores during it, discards the figure and measures again (up to
    `attempts` times). Adds other_cores_before/during and discarded_attempts to the dict."""
    discarded = []
    for attempt in range(attempts):
        before = wait_for_quiet(max_wait_s, threshold_cores)
        with LoadMonitor() as monitor:
            result = measure()
        result.update(other_cores_before=before, other_cores_during=monitor.other_cores)
        if monitor.other_cores < threshold_cores or attempt == attempts - 1:
            result["discarded_attempts"] = discarded
            return result
        discarded.append({"other_cores_during": monitor.other_cores,
                          "seconds": result.get("seconds")})
        print(f"discarding a measurement: other processes used {monitor.other_cores:.2f} "
              "cores during it", file=sys.stderr)


def seconds_per_call(fn, seconds: float, repeats: int = 3, max_wait_s: float = 300,
                     label: str | None = None) -> float:
    """Median seconds per call of fn() over `repeats` quiet runs (measure_quietly), each of
    at least 3 calls and `seconds`, after 2 untimed calls (tracing, warm-up). With a
    `label`, prints each run's figure."""
    for _ in range(2):
        fn()
    per_call = []
    for r in range(repeats):
        def measure():
            start, calls = time.perf_counter(), 0
            while calls < 3 or time.perf_counter() - start < seconds:
                fn()
                calls += 1
            return {"seconds": time.perf_counter() - start, "calls": calls}
        run = measure_quietly(measure, max_wait_s)
        per_call.append(run["seconds"] / run["calls"])
        if label:
            print(f"  {label}, run {r + 1}/{repeats}: {per_call[-1] * 1e3:,.1f} ms", flush=True)
    return statistics.median(per_call)


def run_info() -> dict:
    """Machine, software and provenance facts recorded with every result."""
    import tensorflow as tf
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        # (the script's path from the repo root, wherever it was run from)
        "command": shown([sys.executable, os.path.abspath(sys.argv[0])] + sys.argv[1:]),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        # Other work lands in the tree while benchmarks run; say so instead of hiding it.
        "git_tracked_files_modified": bool(dirty) and dirty != "unknown",
        "nproc": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gb": _memory_gb(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
    }


def shown(command: list[str]) -> str:
    """A command as recorded in results: the venv's python and paths relative to the repo."""
    command = [".venv/bin/python" if a == sys.executable else a for a in command]
    return " ".join(shlex.quote(a.replace(REPO + os.sep, "")) for a in command)


def run_recorded(command: list[str], commands: list[str]):
    """Runs a command from the repo root (failing if it fails) and appends it to `commands`."""
    commands.append(shown(command))
    print("$ " + commands[-1], flush=True)
    subprocess.run(command, cwd=REPO, check=True)


def site(name: str) -> str:
    """A TensorFlow op's name without its numbers, so that one site sums a kind of op over
    layers and copies: 'a_1/layer_4_1/mul_2:Mul' -> 'a/layer/mul:Mul'."""
    return re.sub(r"_\d+(?=[/:_]|$)", "", name)


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def replace_atomically(path: str, write, binary: bool = False):
    """Calls write(file) on a temporary file of this process (text, or bytes with `binary`),
    then renames it to `path`: a reader (another study sharing the work dir) never sees it
    half written, and an interrupted write leaves the old file."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with (open(temporary, "wb") if binary
              else open(temporary, "w", newline="", encoding="utf-8")) as f:
            write(f)
        os.replace(temporary, path)
    finally:  # (a failed write's; renamed, it is gone)
        if os.path.exists(temporary):
            os.remove(temporary)


def write_results(name: str, record: dict, markdown_body: str,
                  results_dir: str = RESULTS_DIR) -> tuple[str, str]:
    """Writes <results_dir>/<name>.json and <name>.md (default: benchmarks/results/);
    returns their paths."""
    os.makedirs(results_dir, exist_ok=True)
    json_path = os.path.join(results_dir, f"{name}.json")
    md_path = os.path.join(results_dir, f"{name}.md")
    replace_atomically(json_path, lambda f: f.write(json.dumps(record, indent=1) + "\n"))
    info = record["run"]
    dirty = " (tracked files modified)" if info["git_tracked_files_modified"] else ""
    header = (f"# {record['title']}\n\n"
              f"{info['date']}, commit `{info['git_commit']}`{dirty}, {info['nproc']} x "
              f"{info['cpu_model']}, {info['memory_gb']} GB, TF {info['tensorflow']}, "
              f"Python {info['python']}.\n\n"
              f"Command: `{info['command']}`\n\n")
    replace_atomically(md_path, lambda f: f.write(header + markdown_body.rstrip() + "\n"))
    return json_path, md_path


def plot_panels(panels: list, lines: list, path: str, title: str, xlabel: str):
    """A 2 x 2 PNG of training curves: a panel per (tag, panel title) of `panels`, and in
    each a line per (label, matplotlib style, colour, {tag: [(step, value)]}) of `lines`
    that has the tag. Written by replace_atomically: never half a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for axis, (tag, panel_title) in zip(axes.flat, panels):
        for label, style, colour, curves in lines:
            if curves.get(tag):
                steps, values = zip(*curves[tag])
                axis.plot(steps, values, style, color=colour, markersize=3, label=label)
        axis.set_title(panel_title)
        axis.set_xlabel(xlabel)
        axis.grid(alpha=0.3)
    axes.flat[0].legend()
    figure.suptitle(title)
    figure.tight_layout()
    replace_atomically(path, lambda f: figure.savefig(f, dpi=110, format="png"), binary=True)
    plt.close(figure)


AUSTEN_VOCAB = os.path.join(REPO, "data", "vocab", "bert_uncased.txt")


def build_austen_data(directory: str):
    """Pre-training TFRecords (seq 128, BERT uncased vocab) of the embedded Austen corpus in
    `directory`, built once: shards 0-4 to train on, shard 5 held out."""
    if os.path.exists(os.path.join(directory, "metadata.json")):
        return
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "build_pretraining_data.py"),
                    f"--input={os.path.join(REPO, 'data', 'corpus', '*.txt.gz')}",
                    f"--vocab_file={AUSTEN_VOCAB}", f"--output_dir={directory}",
                    "--max_seq_length=128", "--num_workers=1", "--progress=false"], check=True)


HEALTH_TAGS = ("discriminator/auc", "loss/discriminator", "generator/mlm_accuracy")


def pretraining_curve(model_dir: str, tags=HEALTH_TAGS) -> dict:
    """{tag: [(step, value)]} of a pre-training run's scalars (TensorBoard; by default its
    health); the tags the run did not write (an MLM run has no discriminator) are left
    out."""
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator
    events = event_accumulator.EventAccumulator(os.path.join(model_dir, "train"),
                                                size_guidance={"tensors": 0})
    events.Reload()
    written = set(events.Tags()["tensors"])
    return {tag: [(e.step, round(float(tf.make_ndarray(e.tensor_proto)), 4))
                  for e in events.Tensors(tag)]
            for tag in tags if tag in written}


def earlier_finetuning(out: str, init: str, num_trials: int, num_train: int,
                       bindings: list[str], random_init: bool,
                       files: list[str] = ()) -> dict | None:
    """The results.json a run of scripts/run_finetuning.py left in `out` if it is the run
    asked for now (same number of trials and training examples, initialised from the model
    dir or checkpoint `init`, randomly or not, and every macro binding in `bindings` that
    results.json records among its hyperparameters, e.g. MAX_SEQ_LENGTH=64,
    LEARNING_RATE=1e-3 or NUM_EPOCHS=10, with that value), else None. Bindings results.json
    does not record, and gin files' own values, are not compared. So is what the run read
    (`finetuning_inputs_match`): the data `files` as they are now, and a pre-trained
    `init`'s latest checkpoint (a model dir trained further, or pre-trained again, is
    fine-tuned again)."""
    try:
        with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError):
        return None
    if not finetuning_inputs_match(result, None if random_init else init, files):
        return None
    recorded = result.get("hyperparameters", {})
    for binding in bindings:
        name, _, value = binding.partition("=")
        key = name.strip().lower()
        if key in recorded and not _same_value(recorded[key], value.strip()):
            return None
    checkpoint = result["init_checkpoint"].removeprefix("random, shaped as ")
    # Relative paths are read from the repo root, where the fine-tuning runs start. `init`
    # is a model dir (its latest checkpoint was used) or one checkpoint in it.
    same_init = os.path.normpath(os.path.join(REPO, init)) in {
        os.path.normpath(os.path.join(REPO, path))
        for path in (checkpoint, os.path.dirname(checkpoint))}
    if random_init and not same_init:
        # Random weights depend on the encoder's shape only (and the trial seeds): any
        # model dir with the same discriminator and vocab gives the same run.
        shape = _encoder_shape(init)
        same_init = shape is not None and shape == _encoder_shape(checkpoint)
    if (len(result["trials"]) != num_trials or result["num_train_examples"] != num_train
            or result["init_checkpoint"].startswith("random") != random_init or not same_init):
        return None
    return result


def _encoder_shape(init: str) -> list | None:
    """The discriminator's shape and the vocab (file, casing) in the model_info.json of the
    model dir `init` (or of the dir of the checkpoint `init`), or None without one."""
    init = os.path.join(REPO, init)
    for directory in (init, os.path.dirname(init)):
        try:
            with open(os.path.join(directory, "model_info.json")) as f:
                info = json.load(f)
        except (OSError, ValueError):
            continue
        return [info.get(key) for key in ("discriminator", "vocab_file", "lower_case",
                                          "strip_accents")]
    return None


def finetuning_inputs_match(result: dict, init: str | None, files=()) -> bool:
    """Whether a fine-tuning run's results.json (its `inputs_sha256`) describes these
    inputs: every data file in `files` with the content it read, and for a pre-trained
    `init` (a model dir: its latest checkpoint; or a checkpoint prefix) that checkpoint,
    with the same weights (its .index file, a checksum of every tensor)."""
    import hashlib
    recorded = result.get("inputs_sha256")
    if recorded is None:  # written before results.json recorded its inputs
        return False

    def sha256(path):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    data = {v for k, v in recorded.items() if k != "init_checkpoint"}
    if any(not os.path.exists(p) or sha256(p) not in data for p in files):
        return False
    if init is None:
        return True
    path = os.path.join(REPO, init)
    if os.path.isdir(path):
        import tensorflow as tf
        path = tf.train.latest_checkpoint(path)
        if path is None:
            return False
    ran = os.path.join(REPO, result["init_checkpoint"])
    return (os.path.normpath(path) == os.path.normpath(ran) and os.path.exists(path + ".index")
            and sha256(path + ".index") == recorded.get("init_checkpoint"))


def _same_value(recorded, binding_value: str) -> bool:
    """Whether a gin binding's value text (`1e-3`, `10`, `None`, `'x'`) is the value
    results.json recorded."""
    try:
        return float(recorded) == float(binding_value)
    except (TypeError, ValueError):
        return str(recorded) == binding_value.strip("'\"")


def _defined(value) -> bool:
    return value is not None and math.isfinite(value)


def score_text(value) -> str:
    """A score to 4 decimals; 'undefined' for results.json's null (a Pearson or Spearman
    correlation of a constant series) or a NaN. (As electra_tf.finetune.runner.score_text
    prints it; this module stays free of TensorFlow, which importing the runner loads.)"""
    return f"{value:.4f}" if _defined(value) else "undefined"


def spread_text(stats: dict, metric: str | None = None) -> str:
    """'median (mean ± std)' of results.json's statistics (of one metric when given)."""
    pick = (lambda k: stats[k]) if metric is None else (lambda k: stats[k][metric])
    return (f"{score_text(pick('median'))} ({score_text(pick('mean'))} ± "
            f"{score_text(pick('std'))})")


def points_text(value, baseline) -> str:
    """value - baseline in points (x100), signed; 'undefined' when either is."""
    if not (_defined(value) and _defined(baseline)):
        return "undefined"
    return f"{100 * (value - baseline):+.1f}"


def finetuning_rows(conditions: dict, metrics: list[str],
                    per_trial: str = "accuracy") -> list[list[str]]:
    """Markdown table rows: each condition's median (mean ± std) per metric and every
    trial's dev `per_trial` metric."""
    return [[name] + [spread_text(c, m) for m in metrics]
            + [", ".join(score_text(t["dev"][per_trial]) for t in c["trials"])]
            for name, c in conditions.items()]
