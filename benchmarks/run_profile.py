"""The pre-training run as users start it, profiled on a GPU: `scripts/run_pretraining.py`'s
loop (tf.data reading and masking real TFRecords, the trainer, orbit) for one size, with its
throughput and MFU, what one loop's GPU time goes to kernel by kernel (TensorFlow's
profiler), and what a resumed run takes to its first loop with the XLA compilation cache.

    python benchmarks/run_profile.py --gin_file=base.gin --batch_size=128 \
        --precision=mixed_bfloat16 --results_name=run_profile_base

Runs (one process each):
1. The run: a first loop (tracing and compiling), --timed_loops loops timed, then one loop
   under the profiler, then one more loop; it stops there (a checkpoint was written after
   the profiled loop), as a preempted run would.
2. With --resume: the same command again in the same model dir, as a new process: it
   restores the checkpoint, loads the compiled step from the model dir's XLA cache
   (`pretraining.xla_cache`) and trains the last loop. Its time to the first loop's line
   against the run's (which compiled) is what the cache saves a resumed run.

Several may share one GPU (each with its own XLA_FLAGS, say): with --barrier_dir and
--peers, each waits after its first loop until the peers' first loops are done too (at most
--peer_wait_s), then runs its timed and profiled loops under a lock on the barrier dir, so
that no timed loop overlaps another process's work on the GPU.

The kernels: every event on the GPU planes of the profile (kernels and copies), summed by
name over the profiled loop and divided by its steps; grouped as matrix multiplications
(cuBLAS / cuBLASLt / CUTLASS / Triton GEMM kernels), reductions, other XLA fusions (mostly
elementwise) and memory copies. The GPU is busy for the union of those events' intervals;
the rest of the loop's time it waits (for the host, or between kernels).

Results: <--results_dir>/<--results_name>.{json,md}, and with --keep_trace the profile
itself (<name>.xplane.pb.gz, for TensorBoard's profile plugin or a later look).
"""

import time

PROCESS_START = time.perf_counter()  # first: the run's times count from the process's start

import collections  # noqa: E402
import fcntl  # noqa: E402
import glob  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags  # noqa: E402

import common  # noqa: E402
from electra_tf.training import xla_cache  # noqa: E402

flags.DEFINE_string("gin_file", "small.gin", "The size's gin file.")
flags.DEFINE_multi_string("bindings", [], "More gin bindings.")
flags.DEFINE_integer("batch_size", 128, "TRAIN_BATCH_SIZE.")
flags.DEFINE_integer("seq_length", 128, "MAX_SEQ_LENGTH (the data must match).")
flags.DEFINE_enum("precision", "mixed_bfloat16", ["float32", "mixed_bfloat16", "mixed_float16"],
                  "pretraining.precision.")
flags.DEFINE_bool("jit_compile", True, "pretraining.jit_compile (XLA).")
flags.DEFINE_integer("loop_steps", 20, "STEPS_PER_LOOP.")
flags.DEFINE_integer("timed_loops", 3, "Loops timed after the first (median reported).")
flags.DEFINE_bool("profile", True, "Profile one loop after the timed ones.")
flags.DEFINE_bool("keep_trace", False, "Also write the profile (<name>.xplane.pb.gz).")
flags.DEFINE_bool("resume", True, "Then time a resumed run (a new process) to its first loop.")
flags.DEFINE_string("train_data", None, "Pre-training TFRecords (glob); default: the "
                    "embedded Austen corpus, built once into benchmarks/.cache.")
flags.DEFINE_string("work_dir", None, "Where the model dir goes (default: a temporary one).")
flags.DEFINE_string("barrier_dir", None, "Shared with peer processes (see the docstring).")
flags.DEFINE_integer("peers", 1, "Processes sharing --barrier_dir, this one included.")
flags.DEFINE_float("peer_wait_s", 600, "Longest wait for the peers' first loops.")
flags.DEFINE_integer("top", 30, "Kernels listed.")
flags.DEFINE_string("results_name", "run_profile", "<results_dir>/<name>.{json,md}.")
flags.DEFINE_string("results_dir", common.RESULTS_DIR, "Where the results go.")
FLAGS = flags.FLAGS

STEP_LINE = re.compile(r"^step (\d+)/\d+ \|.* ([\d.]+) examples/s(?: \| MFU ([\d.]+)%)?")
CACHE_LINE = re.compile(r"^XLA compilation cache: .* \((\d+) compiled programs? from earlier")
# Kernel names by family. cuBLAS(Lt) on Hopper names its GEMMs sm90_xmma_gemm_* or nvjet_*;
# XLA's Triton GEMM fusions are gemm_fusion_* / triton_gemm_*; CUTLASS's cutlass_*.
GEMM = re.compile(r"gemm|xmma|nvjet|cutlass|cublas|wgmma|triton_(?:gemm|dot)|dot_fusion",
                  re.IGNORECASE)
COPY = re.compile(r"memcpy|memset|copy_|^copy|transpose", re.IGNORECASE)
REDUCE = re.compile(r"reduce|reduction", re.IGNORECASE)
CATEGORIES = ("matmul (GEMM kernels)", "reductions (XLA fusions)", "other XLA fusions",
              "copies and transposes")


class _Stop(Exception):
    """Ends the profiled run after its last loop, as a preemption would."""


def category(kernel: str) -> str:
    if GEMM.search(kernel):
        return CATEGORIES[0]
    if REDUCE.search(kernel):
        return CATEGORIES[1]
    if COPY.search(kernel):
        return CATEGORIES[3]
    return CATEGORIES[2]


def device_events(logdir: str, lines_seen: list | None = None) -> list[tuple]:
    """(name, start_ps, duration_ps, site) of every event on the profile's GPU planes
    (kernels and memory copies), start times on one clock. An XLA kernel's site is the
    TensorFlow op most of its fused HLO instructions came from (`common.site`: layer and
    copy numbers left out), read from the HLO the profile holds; other events' site is
    their name. The planes' line names go to `lines_seen`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    events = []
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        sites = _hlo_sites(space)
        for plane in space.planes:
            if not plane.name.startswith("/device:GPU:"):
                continue
            names = {k: m.name for k, m in plane.event_metadata.items()}
            stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
            for line in plane.lines:
                if lines_seen is not None:
                    lines_seen.append(f"{plane.name}: {line.name} ({len(line.events)})")
                # Derived lines ("XLA Ops", "Steps", ...) repeat the streams' events.
                if not line.name.startswith("Stream"):
                    continue
                base = line.timestamp_ns * 1000
                for event in line.events:
                    name = names.get(event.metadata_id, "?")
                    hlo_op = next((stat_names.get(stat.ref_value, "") or stat.str_value
                                   for stat in event.stats
                                   if stat_names.get(stat.metadata_id) == "hlo_op"), None)
                    events.append((name, base + event.offset_ps, event.duration_ps,
                                   sites.get(hlo_op, name)))
    return events


def _hlo_sites(space) -> dict:
    """{HLO instruction name: its site} for the compiled programs a profile holds (TensorFlow
    stores each program's HLO with its trace)."""
    from tensorflow.compiler.xla.service import hlo_pb2
    sites = {}
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        for metadata in plane.event_metadata.values():
            for stat in metadata.stats:
                if not stat.bytes_value:
                    continue
                proto = hlo_pb2.HloProto()
                proto.ParseFromString(stat.bytes_value)
                computations = {c.id: c for c in proto.hlo_module.computations}
                for computation in proto.hlo_module.computations:
                    for instruction in computation.instructions:
                        ops = [instruction.metadata.op_name] + [
                            inner.metadata.op_name
                            for called in instruction.called_computation_ids
                            for inner in computations[called].instructions]
                        ops = [common.site(op) for op in ops if op]
                        if ops:
                            sites[instruction.name] = collections.Counter(ops).most_common(1)[0][0]
    return sites


def busy_ps(events) -> int:
    """The length of the union of the events' intervals."""
    total, end = 0, None
    for _, start, duration, _ in sorted(events, key=lambda e: e[1]):
        stop = start + duration
        if end is None or start > end:
            total += duration
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def kernel_summary(events, steps: int, loop_seconds: float) -> dict:
    """Per-step milliseconds by kernel and by category, and the GPU's busy share."""
    by_kernel, count, by_site = (collections.Counter(), collections.Counter(),
                                 collections.Counter())
    for name, _, duration, site in events:
        by_kernel[name] += duration * 1e-9 / steps
        by_site[site] += duration * 1e-9 / steps
        count[name] += 1
    by_category = collections.Counter()
    for name, ms in by_kernel.items():
        by_category[category(name)] += ms
    span = (max(s + d for _, s, d, _ in events) - min(e[1] for e in events)) if events else 0
    return {"steps": steps, "loop_ms_per_step": loop_seconds * 1e3 / steps,
            "events_per_step": len(events) / steps,
            "kernel_ms_per_step": sum(by_kernel.values()),
            "busy_ms_per_step": busy_ps(events) * 1e-9 / steps,
            "span_ms_per_step": span * 1e-9 / steps,
            "by_category": {c: by_category.get(c, 0.0) for c in CATEGORIES},
            "kernels": [{"name": name, "category": category(name), "ms_per_step": ms,
                         "calls_per_step": count[name] / steps}
                        for name, ms in by_kernel.most_common()],
            "sites": [{"site": site, "ms_per_step": ms} for site, ms in by_site.most_common()]}


class _Barrier:
    """Peers' first loops done, then one timed phase at a time (see the docstring)."""

    def __init__(self, directory: str | None, peers: int, name: str):
        self.directory, self.peers, self.name, self.lock = directory, peers, name, None
        if directory:
            os.makedirs(directory, exist_ok=True)

    def compiled(self):
        if self.directory:
            open(os.path.join(self.directory, f"{self.name}.compiled"), "w").close()

    def acquire(self) -> dict:
        if not self.directory:
            return {}
        deadline = time.time() + FLAGS.peer_wait_s
        start = time.time()
        while (len(glob.glob(os.path.join(self.directory, "*.compiled"))) < self.peers
               and time.time() < deadline):
            time.sleep(1)
        ready = len(glob.glob(os.path.join(self.directory, "*.compiled")))
        self.lock = open(os.path.join(self.directory, "lock"), "w")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        return {"peers_compiled": ready, "peers": self.peers,
                "waited_s": time.time() - start}

    def release(self):
        if self.lock:
            fcntl.flock(self.lock, fcntl.LOCK_UN)
            self.lock.close()
            self.lock = None


def loop_numbers() -> tuple[int, int]:
    """(the profiled loop's number, the last loop's): loops count from 1, the first
    compiles, then --timed_loops, then (with --profile) the profiled one, then one more."""
    profiled_loop = 1 + FLAGS.timed_loops + (1 if FLAGS.profile else 0)
    return profiled_loop, profiled_loop + 1


def bindings() -> list[str]:
    """The run's gin bindings, the same for the run and its resumption: the last loop's
    steps, and a checkpoint after the profiled loop (where the run stops)."""
    profiled_loop, last_loop = loop_numbers()
    return [f"TRAIN_BATCH_SIZE = {FLAGS.batch_size}", f"MAX_SEQ_LENGTH = {FLAGS.seq_length}",
            f"NUM_TRAIN_STEPS = {last_loop * FLAGS.loop_steps}",
            f"STEPS_PER_LOOP = {FLAGS.loop_steps}",
            f"CHECKPOINT_EVERY = {profiled_loop * FLAGS.loop_steps}",
            f"pretraining.precision = '{FLAGS.precision}'",
            f"pretraining.jit_compile = {FLAGS.jit_compile}", *FLAGS.bindings]


def profiled_run(model_dir: str, data: str, barrier: _Barrier) -> dict:
    """The run in this process (see the docstring); returns its figures."""
    import tensorflow as tf

    from electra_tf import gin_files
    from electra_tf.training import pretraining

    loop = FLAGS.loop_steps
    profiled_loop, last_loop = loop_numbers()
    gin_files.parse([FLAGS.gin_file], bindings())
    loops = []
    trace_dir = tempfile.mkdtemp(prefix="run_profile_trace_")
    barrier_info = {}

    def log(line: str):
        print(line, flush=True)
        match = STEP_LINE.match(line)
        if not match:
            return
        number = int(match.group(1)) // loop
        loops.append({"loop": number, "examples_per_s": float(match.group(2)),
                      "mfu": float(match.group(3)) / 100 if match.group(3) else None,
                      "at_s": time.perf_counter() - PROCESS_START})
        if number == 1:
            barrier.compiled()
            barrier_info.update(barrier.acquire())
        if FLAGS.profile and number == profiled_loop - 1:
            tf.profiler.experimental.start(trace_dir)
        if FLAGS.profile and number == profiled_loop:
            tf.profiler.experimental.stop()
        if number == last_loop:
            raise _Stop()

    try:
        pretraining.run_pretraining(model_dir, data, seed=0, log=log)
    except _Stop:
        pass
    finally:
        barrier.compiled()  # a peer waits for no process that failed
    with open(os.path.join(model_dir, "model_info.json")) as f:
        model_info = json.load(f)
    timed = [entry for entry in loops if 2 <= entry["loop"] <= 1 + FLAGS.timed_loops]
    result = {"first_loop_s": loops[0]["at_s"] if loops else None, "loops": loops,
              "timed_examples_per_s": _median([e["examples_per_s"] for e in timed]),
              "timed_mfu": _median([e["mfu"] for e in timed if e["mfu"] is not None]),
              "barrier": barrier_info, "device": model_info.get("device"),
              "parameters": model_info.get("trainable_params"),
              "flops_per_example": model_info.get("train_flops_per_example_hardware"),
              "peak_flops_per_second": model_info.get("peak_flops_per_second")}
    if FLAGS.profile:
        profiled = next(e for e in loops if e["loop"] == profiled_loop)
        loop_seconds = loop * FLAGS.batch_size / profiled["examples_per_s"]
        result["trace_lines"] = []
        events = device_events(trace_dir, result["trace_lines"])
        result["profiled_loop_examples_per_s"] = profiled["examples_per_s"]
        result["profile"] = kernel_summary(events, loop, loop_seconds) if events else None
        if FLAGS.keep_trace:
            paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
            if paths:
                out = os.path.join(FLAGS.results_dir, f"{FLAGS.results_name}.xplane.pb.gz")
                with open(paths[0], "rb") as src, gzip.open(out + ".tmp", "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.replace(out + ".tmp", out)
    shutil.rmtree(trace_dir, ignore_errors=True)
    return result


def resumed_run(model_dir: str, data: str) -> dict:
    """The same run resumed by a new process of scripts/run_pretraining.py: seconds to its
    first loop's line and to its end."""
    command = [sys.executable, os.path.join(common.REPO, "scripts", "run_pretraining.py"),
               f"--gin_file={FLAGS.gin_file}", f"--model_dir={model_dir}",
               f"--train_data={data}", "--seed=0"]
    command += [f"--gin_bindings={b}" for b in bindings()]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    first, cached, tail = None, None, []
    for line in process.stdout:
        tail = (tail + [line.rstrip()])[-20:]
        if first is None and STEP_LINE.match(line):
            first = time.perf_counter() - start
        match = CACHE_LINE.match(line)
        if match:
            cached = int(match.group(1))
    process.wait()
    return {"first_loop_s": first, "total_s": time.perf_counter() - start,
            "exit_code": process.returncode, "cached_programs": cached, "log_tail": tail}


def _median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else None


def report(result: dict) -> str:
    size = FLAGS.gin_file.removesuffix(".gin")
    xla_flags = os.environ.get("XLA_FLAGS", "").strip() or "(none)"
    text = (f"`{FLAGS.gin_file}`, batch {FLAGS.batch_size} x seq {FLAGS.seq_length}, "
            f"{FLAGS.precision}, XLA {'on' if FLAGS.jit_compile else 'off'}, XLA_FLAGS "
            f"`{xla_flags}`, {FLAGS.loop_steps} steps per loop, on "
            f"{result['device'] or 'the CPU'}.\n\n")
    rate, mfu = result["timed_examples_per_s"], result["timed_mfu"]
    text += common.markdown_table(
        ["size", "first loop (s, compile included)", "examples/s (median of timed loops)",
         "MFU"],
        [[size, f"{result['first_loop_s']:.0f}" if result["first_loop_s"] else "-",
          f"{rate:,.0f}" if rate else "-", f"{mfu:.1%}" if mfu is not None else "-"]]) + "\n"
    if result.get("barrier"):
        b = result["barrier"]
        text += (f"\nTimed and profiled alone on the GPU: {b['peers_compiled']} of {b['peers']} "
                 f"processes had compiled when the timed loops began (waited "
                 f"{b['waited_s']:.0f} s).\n")
    profile = result.get("profile")
    if profile:
        text += (f"\nOne loop profiled ({profile['steps']} steps, "
                 f"{result['profiled_loop_examples_per_s']:,.0f} examples/s under the "
                 f"profiler): per step, {profile['loop_ms_per_step']:.1f} ms of loop, the GPU "
                 f"busy {profile['busy_ms_per_step']:.1f} ms "
                 f"({profile['busy_ms_per_step'] / profile['loop_ms_per_step']:.0%}), "
                 f"{profile['events_per_step']:.0f} kernels and copies.\n\n")
        total = profile["kernel_ms_per_step"]
        text += common.markdown_table(
            ["kind", "ms/step", "share of kernel time"],
            [[c, f"{ms:.2f}", f"{ms / total:.1%}"]
             for c, ms in profile["by_category"].items()]) + "\n\n"
        text += common.markdown_table(
            ["kernel", "kind", "ms/step", "calls/step", "share"],
            [[k["name"][:90], k["category"], f"{k['ms_per_step']:.2f}",
              f"{k['calls_per_step']:g}", f"{k['ms_per_step'] / total:.1%}"]
             for k in profile["kernels"][:FLAGS.top]]) + "\n"
        text += ("\nThe same kernel time by the TensorFlow op each kernel mostly came from "
                 "(layer and copy numbers left out; `gradient_tape/` is the backward pass):"
                 "\n\n")
        text += common.markdown_table(
            ["TensorFlow op", "ms/step", "share"],
            [[s["site"][:110], f"{s['ms_per_step']:.2f}", f"{s['ms_per_step'] / total:.1%}"]
             for s in profile["sites"][:FLAGS.top]]) + "\n"
    elif FLAGS.profile:
        text += "\nThe profile holds no GPU events (no GPU, or CUPTI missing).\n"
    resumed = result.get("resumed")
    if resumed:
        first = resumed["first_loop_s"]
        text += (f"\nResumed by a new process with the model dir's XLA cache: first loop's "
                 f"line after {first:.0f} s (the run's first: {result['first_loop_s']:.0f} s); "
                 f"{resumed['cached_programs']} compiled programs found in the cache, exit "
                 f"code {resumed['exit_code']}.\n" if first is not None else
                 f"\nThe resumed run printed no loop line (exit code {resumed['exit_code']}); "
                 "its last lines are in the JSON.\n")
    return text


def main(argv):
    del argv
    data = FLAGS.train_data
    if not data:
        directory = os.path.join(common.CACHE_DIR, f"austen_{FLAGS.seq_length}")
        if FLAGS.seq_length != 128:
            raise app.UsageError("the embedded corpus is built at seq 128; pass --train_data")
        common.build_austen_data(directory)
        data = os.path.join(directory, "pretrain_data-0000[0-4]-of-*")
    work = tempfile.mkdtemp(prefix="run_profile_", dir=FLAGS.work_dir)
    model_dir = os.path.join(work, "model")
    barrier = _Barrier(FLAGS.barrier_dir, FLAGS.peers, FLAGS.results_name)
    try:
        result = profiled_run(model_dir, data, barrier)
        record = {"title": f"The pre-training run profiled ({FLAGS.gin_file}, "
                           f"{FLAGS.precision}, {result['device'] or 'CPU'})",
                  "run": common.run_info(),
                  "settings": {"gin_file": FLAGS.gin_file, "bindings": FLAGS.bindings,
                               "batch_size": FLAGS.batch_size, "seq_length": FLAGS.seq_length,
                               "precision": FLAGS.precision, "jit_compile": FLAGS.jit_compile,
                               "loop_steps": FLAGS.loop_steps, "timed_loops": FLAGS.timed_loops,
                               "xla_flags": os.environ.get("XLA_FLAGS", "")},
                  "result": result}
        common.write_results(FLAGS.results_name, record, report(result), FLAGS.results_dir)
        if FLAGS.resume:  # still holding the lock: the resumed run is timed alone too
            result["resumed"] = resumed_run(model_dir, data)
            common.write_results(FLAGS.results_name, record, report(result),
                                 FLAGS.results_dir)
    finally:
        barrier.release()
    shutil.rmtree(work, ignore_errors=True)
    print(report(result))
    return 0


if __name__ == "__main__":
    xla_cache.stage()  # before app.run: TensorFlow reads its cache flag when it starts
    common.run(main)
