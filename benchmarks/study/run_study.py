"""The paper's central claims at small scale: ELECTRA vs masked-LM pre-training at equal
compute, the efficiency ablations, weight sharing, generator size and training algorithms,
each configuration pre-trained with the same FLOPs budget and fine-tuned over several seeds.

    .venv/bin/python benchmarks/study/make_corpus.py     # the 61 MB corpus (else done first)
    .venv/bin/python benchmarks/study/run_study.py --scale=cpu        # about 3.2 hours here
    .venv/bin/python benchmarks/study/run_study.py --scale=cpu --plan  # steps and FLOPs only
    .venv/bin/python benchmarks/study/run_study.py --scale=cpu --estimate=60  # time 60 steps
    .venv/bin/python benchmarks/study/run_study.py --scale=cpu --configs=electra,mlm,random_init \
        --results_dir=benchmarks/results/study_electra_mlm   # a part of the grid: its own dir
    .venv/bin/python benchmarks/study/run_study.py --scale=cpu --pretrain_seeds=0,1  # twice

Pre-training seeds (`--pretrain_seeds`, default 0): at the `cpu` scale the pre-training
seed alone moves ELECTRA's median fine-tuning score by 1.8 points at the end of its runs
and up to 3.9 at a checkpoint along them, over five seeds
(benchmarks/results/study_five_seeds/), more than most differences the grid measures.
With several seeds each configuration is pre-trained once per seed (seed 0 in
pretrain/<config>, seed s in pretrain/<config>_seed<s>, so a one-seed study's runs are
reused), every run fine-tuned with the same --num_trials seeds, and each score is the
median of all the runs' trials; the tables add each run's median, and another table the
differences ELECTRA - BERT at each pair of checkpoints along the runs, every other
configuration - BERT at the end and ELECTRA, BERT - random weights, each with a 95%
interval from a bootstrap that resamples the pre-training runs and then their trials
(compare.py).

Scales (`--scale`; the flags below override parts of them):
- `toy`: CI's test of this runner (tests/test_study.py, about 2 minutes): a 1-layer, hidden-64
  model without dropout at seq 32 on one Austen novel, 2 seeds on 32 / 16 sentences of the
  committed movie-review fixture, two jobs at a time in worker processes, tf.functions run
  eagerly (a handful of steps cost less than tracing them). Its numbers mean nothing; its
  results go to --work_dir, not benchmarks/results/.
- `cpu`: the grid on this project's 2-core machine. tiny.gin (2 layers, hidden 128, FFN 512,
  embeddings 128, generator 1/4, BERT uncased vocab) at seq 64, batch 32, LR 1e-4, warmup
  300 (benchmarks/finetune_study.py's settings, which keep the discriminator from
  collapsing), on the 61 MB Debian corpus (216,462 packed examples); a budget of 2.2e14
  FLOPs per configuration: ELECTRA 3,021 steps (97k examples, under half an epoch), BERT
  5,461, All-Tokens MLM 2,081, two-stage 4,573 (`--plan` prints them all); checkpoints at
  about every quarter of the ELECTRA and BERT runs; 5 seeds on 4,000 training / 2,000 dev
  movie-review sentences (finetune/tiny.gin: LR 3e-4, layer-wise decay 0.8, 3 epochs; seq
  64). Measured here with --estimate=60 (the 2 cores shared with other work at times):
  pre-training 9-12 minutes per configuration (All-Tokens MLM 23: its softmax over the
  vocabulary at every position), 2.3 h in all; fine-tuning 29 s per trial, 95 trials (19
  models x 5 seeds) 46 min; about 3.2 h with each job's start-up. The full grid, run with
  --jobs=2 and one thread per job, took 16-39 minutes per configuration to pre-train, 5.1 h
  of job time (about 2.6 h of wall time), and 4-5 minutes per model (5 seeds) to fine-tune
  on the first host (benchmarks/results/study_earlier_init.md); on the newer one (CPU family
  26, AVX-512 with bf16; benchmarks/results/study.md) 11-18 minutes per configuration
  (All-Tokens MLM 32), 2.9 h of job time, fine-tuning 2.2 minutes per model: 1.9 h of wall
  time for the whole grid.
- `small`: ELECTRA-Small (small.gin: 12 layers, hidden 256, seq 128, batch 128, LR 5e-4,
  10k warmup) with a budget of 1/8 of the paper's ELECTRA-Small run (1.6e17 FLOPs: 124k
  ELECTRA steps of its 1M) per configuration, checkpoints at quarters, finetune/small.gin,
  5 seeds on 8,000 / 2,000 sentences. On one GPU, one command:

      .venv/bin/python benchmarks/study/run_study.py --scale=small \
          --pretrain_bindings="pretraining.precision='mixed_bfloat16'" \
          --pretrain_bindings=pretraining.jit_compile=True

  (on a TPU VM add --strategy=tpu --tpu=local; on several GPUs --strategy=mirrored: both
  reach the pre-training jobs only, the fine-tuning jobs get no --strategy and run on one
  device; --corpus='gs://bucket/text/*.txt.gz' for a larger corpus: the 61 MB one is read
  ~150 times at this budget; --flops_budget to scale it; the labelled splits are the
  scale's, there is no --num_train flag). The jobs run as subprocesses, one at a time: this
  process hides the GPUs from itself before it plans (hide_gpus), so each job has the GPU
  to itself (two at a time on one GPU need TF_FORCE_GPU_ALLOW_GROWTH=true). The host needs
  `apt-get download` of make_corpus.py's Debian packages (or a copy of its output) and `pip
  download` of the labelled data (benchmarks/study/README.md, "Running it on a GPU"). Not
  run here. At the 4,045 examples/s
  of ELECTRA-Small measured on an H100 with these bindings (benchmarks/results/gpu_h100.md)
  ELECTRA's run takes about 65 minutes (plus minutes of XLA compilation), so the 12 runs
  about 12-15 hours and the fine-tuning an hour or two more.

The grid (CONFIGS; each is gin files from gin/ablations/ and bindings over the scale's
size file), and the studies it answers (GROUPS; a configuration serves several):
- ELECTRA vs BERT at equal compute (paper Figure 1): `electra` and `mlm`, each checkpoint
  along the run fine-tuned (`--curve_points`), plotted against its pre-training FLOPs;
- the efficiency ablations (Table 5): electra, all_tokens_mlm, replace_mlm, electra_15, mlm;
- weight sharing (Sec. 3.1, generator as large as the discriminator, as in the paper):
  sharing_none, generator_1 (embeddings shared), sharing_all;
- generator size (Figure 3 left): generator_1_8, electra (1/4), generator_1_2, generator_1;
- training algorithms (Figure 3 right): electra (joint), two_stage, adversarial, and
  generator_1 (joint with two-stage's generator size);
- and `random_init`: the same discriminator, not pre-trained (0 FLOPs).

Equal compute: the budget is in the official counting of the FLOPs estimator
(electra_tf.modeling.flops, what model_info.json reports as train_flops_per_example:
backward = forward, dense embedding lookups). Each configuration trains
round(budget / (FLOPs per example x batch)) steps, so its FLOPs equal the budget within
half a step's. Two-stage training is charged its two stages (the generator alone up to the
switch, half the run or a bound pretraining.two_stage_steps, then the discriminator with
the frozen generator's forward pass), with the estimator's pieces; adversarial training
what the estimator charges the joint algorithm (its policy-gradient update of the generator
costs about what the masked-LM update does). That counting charges each embedding lookup as
a one-hot matmul: at the `cpu` scale lookups are 88% of ELECTRA's figure and 80% of BERT's,
so the equal budget gives BERT 1.81x ELECTRA's steps while an example costs ELECTRA only
1.06x what it costs BERT on a device: BERT executes 1.71x ELECTRA's FLOPs. The plan and the
table also give each configuration's hardware figure (lookups as gathers, backward = 2 x
forward: model_info.json's train_flops_per_example_hardware) beside the budget's.

Everything is done by the project's scripts (build_pretraining_data.py,
run_pretraining.py, run_finetuning.py), as subprocesses, with the commands recorded; with
`--in_process` (the toy scale's default) the same jobs run in this process through the
library calls those scripts make (TensorFlow starts once), the commands recorded the same.
Reruns skip what is done: a pre-training run whose final checkpoint exists is not started
again (an interrupted one resumes from its last checkpoint), a fine-tuning dir whose
results.json read the same checkpoint (weights) and splits is reused (else it is redone: a
configuration pre-trained again, another --labelled_data); a job dir holding another
command, or a pre-training run on data rebuilt since, is an error (use another
--work_dir), found before anything is written. A job's seconds (job_dir/study_job.json)
are those of the run that completed it plus those of attempts killed before it (kept while
it runs). Ctrl-C or SIGTERM (to the study alone or its process group) stops the jobs running
as each stops on its own, a checkpoint saved, and the study with one line; a rerun goes
on. A study killed (`kill -9`) leaves none running: its jobs get SIGTERM (Linux) and stop
so. Results: benchmarks/results/study.{json,md} and study_*.png (`cpu`), study_small.*
(`small`); a part of the grid (--configs) is refused there unless --results_dir says where
its results go; the labelled data: the VADER movie-review snippets (benchmarks/corpora.py;
fetched with `pip download`).
"""

import csv
import dataclasses
import json
import math
import os
import random
import re
import signal
import sys
import tempfile
import time

STUDY_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(STUDY_DIR)))
sys.path.insert(0, os.path.dirname(STUDY_DIR))
sys.path.insert(0, STUDY_DIR)

from electra_tf import cli  # noqa: E402  (first: quiets TensorFlow's start-up)
from absl import flags  # noqa: E402

import common  # noqa: E402
import corpora  # noqa: E402
from electra_tf import choices  # noqa: E402
from electra_tf.errors import UserInputError, first_line  # noqa: E402
from electra_tf.training import signals  # noqa: E402  (the standard library's only)

# The grid (CONFIGS, GROUPS) is in grid.py, shared with benchmarks/zh_pos_study.py.
import grid  # noqa: E402
from grid import CONFIGS, GROUPS, RANDOM_INIT, Config  # noqa: E402

CURVE_CONFIGS = ("electra", "mlm")


@dataclasses.dataclass(frozen=True)
class Scale:
    """Everything that differs between the toy, CPU and ELECTRA-Small runs of the grid."""
    size_gin: str
    bindings: tuple[str, ...]     # over the size file, for every configuration
    seq_length: int
    batch_size: int
    flops_budget: float           # pre-training FLOPs of each configuration
    curve_points: int             # checkpoints fine-tuned along the CURVE_CONFIGS runs
    steps_per_loop: int
    corpus: str                   # comma-separated globs; "debian": make_corpus.py's output
    build_workers: int | None     # None: the builder's default
    labelled_data: str            # "vader" or a CSV with a `text` column
    label_column: str
    num_train: int
    num_dev: int
    num_trials: int
    finetune_gin: str
    finetune_bindings: tuple[str, ...]
    in_process: bool
    jobs: int                     # jobs at a time
    # In-process jobs run their tf.functions eagerly: for a handful of steps that costs
    # half of tracing them (toy only: the real grids run as the scripts do).
    eager: bool = False


SCALES = {
    "toy": Scale(
        size_gin="tiny.gin",
        # Dropout off: its masks, run eagerly, were 12% of the toy study's CPU.
        bindings=("pretrainer.num_layers=1", "pretrainer.hidden_size=64",
                  "pretrainer.num_heads=1", "pretrainer.intermediate_size=256",
                  "pretrainer.embedding_size=64", "WARMUP_STEPS=2",
                  "pretrainer.dropout_rate=0.0", "pretrainer.attention_dropout_rate=0.0"),
        seq_length=32, batch_size=4, flops_budget=1.3e10, curve_points=2, steps_per_loop=2,
        corpus="data/corpus/persuasion.txt.gz", build_workers=1,
        labelled_data="tests/fixtures/finetune/movie_snippets.csv", label_column="sentiment",
        num_train=32, num_dev=16, num_trials=2, finetune_gin="finetune/tiny.gin",
        finetune_bindings=("MAX_SEQ_LENGTH=32", "TRAIN_BATCH_SIZE=16", "NUM_EPOCHS=1",
                           "finetuning.eval_batch_size=16"),
        in_process=True, jobs=2, eager=True),
    "cpu": Scale(
        size_gin="tiny.gin", bindings=("LEARNING_RATE=1e-4", "WARMUP_STEPS=300"),
        seq_length=64, batch_size=32, flops_budget=2.2e14, curve_points=4,
        steps_per_loop=100, corpus="debian", build_workers=2, labelled_data="vader",
        label_column="label", num_train=4000, num_dev=2000, num_trials=5,
        finetune_gin="finetune/tiny.gin", finetune_bindings=("MAX_SEQ_LENGTH=64",),
        in_process=False, jobs=1),
    "small": Scale(
        size_gin="small.gin", bindings=(), seq_length=128, batch_size=128,
        flops_budget=1.6e17, curve_points=4, steps_per_loop=500, corpus="debian",
        build_workers=None, labelled_data="vader", label_column="label", num_train=8000,
        num_dev=2000, num_trials=5, finetune_gin="finetune/small.gin",
        finetune_bindings=("MAX_SEQ_LENGTH=128",), in_process=False, jobs=1),
}

flags.DEFINE_enum("scale", "cpu", list(SCALES), "Preset: toy (CI), cpu (this 2-core "
                  "machine, a few hours), small (ELECTRA-Small, a GPU or TPU).")
flags.DEFINE_list("configs", None, f"Configurations to run (default: all): "
                  f"{', '.join(CONFIGS)}, {RANDOM_INIT}.")
flags.DEFINE_float("flops_budget", None, "Pre-training FLOPs per configuration (official "
                   "counting); default: the scale's.")
flags.DEFINE_integer("curve_points", None, "Checkpoints fine-tuned along the ELECTRA and "
                     "MLM runs; default: the scale's.")
flags.DEFINE_integer("num_trials", None, "Fine-tuning seeds; default: the scale's.")
flags.DEFINE_list("pretrain_seeds", ["0"], "Pre-training seeds (run_pretraining.py's --seed: "
                  "initial weights, data order, masks and samples): each configuration is "
                  "pre-trained once per seed, every run fine-tuned with the --num_trials "
                  "seeds, and its scores pool all of them. Seed 0's runs are the one-seed "
                  "study's (a rerun with more seeds reuses them); the results replace the "
                  "one-seed study's files (pass --results_dir to keep both).")
flags.DEFINE_string("corpus", None, "Pre-training text (comma-separated globs); default: "
                    "the scale's ('debian': make_corpus.py's output, built if missing).")
flags.DEFINE_string("labelled_data", None, "'vader' (the movie-review snippets) or a CSV "
                    "with a `text` and a --label_column column; default: the scale's.")
flags.DEFINE_string("label_column", None, "The CSV's label column; default: the scale's.")
flags.DEFINE_multi_string("pretrain_bindings", [], "More gin bindings for every "
                          "pre-training run, e.g. \"pretraining.precision='mixed_bfloat16'\".")
flags.DEFINE_enum("strategy", "default", choices.STRATEGIES, "run_pretraining.py's "
                  "--strategy.")
flags.DEFINE_string("tpu", None, "run_pretraining.py's --tpu.")
flags.DEFINE_string("work_dir", None, "Data, model dirs and fine-tuning runs (reruns reuse "
                    "them); default: benchmarks/.cache/study/<scale>.")
flags.DEFINE_string("results_dir", None, "Where study.{json,md} and the plots go; default: "
                    "benchmarks/results/ (toy: --work_dir).")
flags.DEFINE_bool("in_process", None, "Run the jobs in this process instead of as "
                  "subprocesses (default: the scale's; toy: yes).")
flags.DEFINE_integer("jobs", None, "Jobs run at a time (default: the scale's; toy: 2, in "
                     "two worker processes).")
flags.DEFINE_bool("plan", False, "Print each configuration's steps and FLOPs, and exit.")
flags.DEFINE_integer("estimate", 0, "Time this many pre-training steps of every "
                     "configuration and one fine-tuning trial, print the projected "
                     "duration of the study, and exit (0: off).")
FLAGS = flags.FLAGS

VOCAB = "data/vocab/bert_uncased.txt"
JOB_RECORD = "study_job.json"


# ------------------------------------------------------------------ jobs


@dataclasses.dataclass
class Job:
    """One run of a project script: its flags, in order (a name may repeat). The command line
    and the in-process call are both made from these."""
    script: str
    flags: list[tuple[str, str]]

    def command(self) -> list[str]:
        return [sys.executable, self.script] + [f"--{k}={v}" if v != "" else f"--{k}"
                                                for k, v in self.flags]

    def values(self, name: str) -> list[str]:
        return [v for k, v in self.flags if k == name]

    def value(self, name: str, default=None):
        values = self.values(name)
        return values[-1] if values else default


def _pretrain(job: Job):
    from electra_tf import gin_files
    from electra_tf.training import pretraining
    gin_files.parse(job.values("gin_file"), job.values("gin_bindings"))
    pretraining.run_pretraining(job.value("model_dir"), job.value("train_data"),
                                strategy=job.value("strategy", "default"),
                                tpu=job.value("tpu"), seed=int(job.value("seed", 0)))


def _finetune(job: Job):
    from electra_tf import gin_files
    from electra_tf.finetune import runner, tasks
    from electra_tf.training import optimization  # noqa: F401  (registers `optimizer`)
    data = tasks.load(tasks.get_task(job.value("task")), train_file=job.value("train_file"),
                      dev_file=job.value("dev_file"), label_column=job.value("label_column"))
    init = runner.load_initialization(job.value("init_checkpoint"),
                                      random_init=job.value("random_init") == "")
    gin_files.parse(job.values("gin_file"), job.values("gin_bindings"))
    runner.run_finetuning(data, init, job.value("model_dir"),
                          num_trials=int(job.value("num_trials")), seed=int(job.value("seed")),
                          overwrite=job.value("overwrite") == "")


def _build_data(job: Job):
    from electra_tf.data import writer
    writer.build_pretraining_data(
        job.value("input").split(","), job.value("vocab_file"), job.value("output_dir"),
        max_seq_length=int(job.value("max_seq_length")),
        num_workers=int(job.value("num_workers")) if job.value("num_workers") else None,
        show_progress=False)


# script -> (the library calls the script makes, the flags they read).
IN_PROCESS = {
    "scripts/run_pretraining.py": (_pretrain, {"gin_file", "gin_bindings", "model_dir",
                                               "train_data", "strategy", "tpu", "seed"}),
    "scripts/run_finetuning.py": (_finetune, {"task", "init_checkpoint", "model_dir",
                                              "train_file", "dev_file", "label_column",
                                              "num_trials", "seed", "gin_file",
                                              "gin_bindings", "random_init", "overwrite"}),
    "scripts/build_pretraining_data.py": (_build_data, {"input", "vocab_file", "output_dir",
                                                        "max_seq_length", "num_workers",
                                                        "progress"}),
}


# In a worker process (in-process jobs run at a time): set once the study stops, when a job
# the worker takes (the pool queues one ahead, which it cannot cancel) ends at once; and the
# study's PID.
_STOPPING = _PARENT = None


def _exit_if_orphaned():
    """A worker whose study died (`kill -9`) exits once its job has saved and stopped
    (die_with_parent): no one takes its results, and the jobs its pool queued ahead would
    run, unseen, and then keep it waiting for more for ever."""
    if _PARENT is not None and os.getppid() != _PARENT:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signal.SIGTERM)


def die_with_parent(parent: int):
    """This process gets SIGTERM when `parent` (the study) dies, `kill -9` included, so
    that its job saves and stops rather than run on, unseen, holding its model dir (Linux's
    PR_SET_PDEATHSIG; elsewhere nothing)."""
    import ctypes
    # (The signal comes when the thread that started this process ends: the study's main
    # thread, which starts the pool's workers and waits on its subprocesses.)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # no prctl
        pass


_PR_SET_PDEATHSIG = 1
# A job's subprocess starts so: die_with_parent, then the job's command in its place.
_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    f"    ctypes.CDLL(None).prctl({_PR_SET_PDEATHSIG}, signal.SIGTERM)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(143)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n")


def _leave_quietly(number, frame):
    """A worker's SIGTERM and Ctrl-C between jobs (a job's run takes them as its own): it
    exits, releasing the queue's locks as it goes (a worker killed holding one left the
    other waiting on it for ever, and the study with them)."""
    raise SystemExit(128 + number)


def _start_worker(threads: int, eager: bool, stopping=None, parent: int | None = None):
    global _STOPPING, _PARENT
    _STOPPING, _PARENT = stopping, parent
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, _leave_quietly)
    if parent is not None:
        die_with_parent(parent)
        _exit_if_orphaned()  # (it died before)
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.config.run_functions_eagerly(eager)
    from electra_tf.finetune import runner  # noqa: F401
    from electra_tf.training import optimization, pretraining  # noqa: F401


def execute(job: Job, in_process: bool) -> float:
    """Runs a job here (in_process) or as a subprocess; returns its seconds."""
    started = time.time()
    if in_process:
        function, known = IN_PROCESS[job.script]
        unknown = {k for k, _ in job.flags} - known
        assert not unknown, f"{job.script}: no in-process handling of {unknown}"
        function(job)
    else:
        # Stopped meanwhile, the job saves a checkpoint and exits on SIGTERM or Ctrl-C: it
        # is waited for, a minute at most.
        code = common.run_child([sys.executable, "-c", _WITH_PARENT, str(os.getpid()),
                                 *job.command()], grace=60, cwd=common.REPO,
                                env=_job_environment).returncode
        if code == signals.INTERRUPTED_EXIT_CODE:  # Ctrl-C: it saved what it could
            raise KeyboardInterrupt
        if code == cli.TERMINATED_EXIT_CODE:  # SIGTERM (a preempted run saved a checkpoint)
            raise cli.Terminated
        if code:
            raise UserInputError(f"this command failed (its output is above): "
                             f"{common.shown(job.command())}")
    return time.time() - started


HEARTBEAT_SECONDS = 30.0
ABORT_SECONDS = 60.0  # a stopped job's time to save and exit
_job_environment = None  # the subprocesses' (None: this process's)


def keep_off_the_tpu():
    """On a TPU VM, TensorFlow takes the TPU (libtpu's lock) for the life of the process that
    imports it first: this one, which only plans, would leave its jobs none. It imports
    TensorFlow with TPU_LOAD_LIBRARY=0 (as TensorBoard is run on TPU VMs); the jobs get
    the environment as it was."""
    global _job_environment
    _job_environment = dict(os.environ)
    os.environ["TPU_LOAD_LIBRARY"] = "0"


def run_timed(job: Job, in_process: bool, record_path: str, commit: str | None = None) -> float:
    """Runs a job (execute) and keeps its seconds in its record (record_path, written
    whole each time, atomically): while it runs, every HEARTBEAT_SECONDS, and when it fails
    or is stopped, `interrupted_seconds` (so a kill loses at most one interval); once it
    completes, `seconds`: its own and those of the attempts cut off before it. Returns
    `seconds`."""
    _exit_if_orphaned()
    if _STOPPING is not None and _STOPPING.is_set():
        raise cli.Terminated  # (taken from the pool's queue as the study stopped)
    try:
        return _run_timed(job, in_process, record_path, commit)
    finally:
        _exit_if_orphaned()


def _run_timed(job: Job, in_process: bool, record_path: str, commit: str | None) -> float:
    import threading
    commit = commit or job_commit()  # the code it starts with
    record = _read_json(record_path)
    earlier = record.pop("interrupted_seconds", 0.0)
    started = time.time()

    def so_far():
        return {**record, "interrupted_seconds": round(earlier + time.time() - started, 1)}

    def tick():
        while not stop.wait(HEARTBEAT_SECONDS):
            _write_json(record_path, so_far())

    stop = threading.Event()
    clock = threading.Thread(target=tick, daemon=True)
    clock.start()
    try:
        took = execute(job, in_process)
    except BaseException as e:
        stop.set()
        clock.join()
        _write_json(record_path, so_far())
        if isinstance(e, UserInputError) and type(e) is not UserInputError:
            # gin's subclass of it, which a worker process cannot send back (pickle): the
            # plain error, its one line
            raise UserInputError(first_line(e)) from None
        raise
    stop.set()
    clock.join()
    seconds = round(earlier + took, 1)
    _write_json(record_path, {**record, "seconds": seconds, "commit": commit})
    return seconds


def job_commit() -> str:
    """The commit the repository is at, '+modified' if tracked files differ from it: kept
    with each job, as a study's jobs can span commits."""
    dirty = common._git("status", "--porcelain", "--untracked-files=no")
    return common._git("rev-parse", "--short", "HEAD") + (
        "+modified" if dirty and dirty != "unknown" else "")


class Runner:
    """Runs jobs (as subprocesses or in this process; `jobs` at a time), skips finished
    ones, records every command in order."""

    def __init__(self, in_process: bool, jobs: int = 1, eager: bool = False):
        self.in_process, self.jobs, self.eager = in_process, jobs, eager
        # In process, jobs run the code this process imported: the commit it started at.
        self.commit = job_commit() if in_process else None
        self.commands: list[str] = []
        self._pool = self._stopping = None

    def run(self, job: Job, job_dir: str, done) -> float:
        return self.run_all([(job, job_dir, done, None)])[0]

    def run_all(self, items) -> list[float]:
        """items: (job, job_dir, done, after[, inputs]): done() is true when an earlier run
        finished the job; `after` is the index of an earlier item the job needs, or None;
        `inputs`, files the job reads that exist before it starts (their digests are kept:
        a job dir that ran on other contents is refused). Returns each job's seconds, kept
        in job_dir/study_job.json (run_timed) and reused when the job is skipped: those of
        the run that completed it and of the attempts cut off before it; a job redone
        (done() false after it completed) counts afresh. Every job dir is checked before
        any is written."""
        todo, seconds, shown_commands, records = {}, [], [], []
        for i, (job, job_dir, done, after, *inputs) in enumerate(items):
            shown = common.shown(job.command())
            shown_commands.append(shown)
            record_path = os.path.join(job_dir, JOB_RECORD)
            record = _read_json(record_path) if os.path.exists(record_path) else {}
            # A job that failed before it made anything (a bad flag, a missing file) is
            # not a run: its command may change.
            if record and _comparable(record["command"]) != _comparable(shown) and not (
                    "seconds" in record or set(os.listdir(job_dir)) - {
                        JOB_RECORD, JOB_RECORD + ".tmp"}):
                record = {}
            if record and _comparable(record["command"]) != _comparable(shown):
                made = job.value("output_dir") or job.value("model_dir")
                raise UserInputError(f"{job_dir} holds a run of another command "
                                 f"({record['command']}); delete it"
                                 + (f" and {made}, which that run wrote," if made and made
                                    != job_dir else "") + " or pass another --work_dir")
            digests = {common.shown([p]): _sha256(p) for p in (inputs[0] if inputs else ())}
            changed = [p for p, d in record.get("inputs", {}).items() if digests.get(p) != d]
            if changed:
                raise UserInputError(f"{job_dir} ran on another {changed[0]} (it changed "
                                     "since); delete it or pass another --work_dir")
            seconds.append(record.get("seconds", record.get("interrupted_seconds", 0.0)))
            # A job to run drops the seconds of a run it redoes; those of attempts cut off
            # (interrupted_seconds) stay, for it to add.
            records.append((record_path, {"command": shown,
                                          **{k: v for k, v in record.items() if k != "seconds"},
                                          **({"inputs": digests} if digests else {})}))
            if not done():
                todo[i] = (job, record_path, after)
        self.commands += shown_commands
        for i in todo:
            _write_json(*records[i])

        if self.jobs == 1 or len(todo) < 2:
            if todo and self.in_process and self.eager:
                import tensorflow as tf
                tf.config.run_functions_eagerly(True)
            for i, (job, path, _) in todo.items():  # items come after what they need
                print("$ " + shown_commands[i], flush=True)
                seconds[i] = run_timed(job, self.in_process, path, self.commit)
            return seconds
        import concurrent.futures
        unfinished, running = set(todo), {}
        while todo or running:
            for i in [i for i, (_, _, after) in todo.items() if after not in unfinished]:
                job, path, _ = todo.pop(i)
                print("$ " + shown_commands[i], flush=True)
                running[self._executor().submit(run_timed, job, self.in_process, path,
                                                self.commit)] = i
            completed, _ = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in completed:
                i = running.pop(future)
                seconds[i] = future.result()
                unfinished.discard(i)
        return seconds

    def _executor(self):
        if self._pool is None:
            import concurrent.futures
            import multiprocessing
            if self.in_process:
                # Worker processes (spawned: TensorFlow does not survive a fork), each with
                # its share of the cores, starting TensorFlow once; started right away so
                # that their start-up overlaps the planning.
                threads = max(1, (os.cpu_count() or 1) // self.jobs)
                context = multiprocessing.get_context("spawn")
                self._stopping = context.Event()
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self.jobs, mp_context=context, initializer=_start_worker,
                    initargs=(threads, self.eager, self._stopping, os.getpid()))
                for _ in range(self.jobs):
                    self._pool.submit(time.sleep, 0.1)
            else:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.jobs)
        return self._pool

    def start(self):
        """Starts the worker processes (when jobs run in parallel, in process)."""
        if self.jobs > 1 and self.in_process:
            self._executor()

    def close(self, abort: bool = False):
        """Ends the workers: once their jobs are done, or (abort) now: the jobs not started
        are dropped, those running get SIGTERM (as a job run as a subprocess does), save and
        stop; a worker still there after ABORT_SECONDS is killed."""
        if self._pool is None:
            return
        if not abort:
            self._pool.shutdown()
            return
        # (a process pool's, taken first: shutdown forgets them)
        workers = list((getattr(self._pool, "_processes", None) or {}).values())
        if self._stopping is not None:
            self._stopping.set()  # (the pool has queued a job ahead, which it cannot cancel)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + ABORT_SECONDS
        for process in workers:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()


def _comparable(command: str) -> str:
    """A job's command less its keep_checkpoints binding, which changes what a run keeps,
    not what it computes (study runs made before it kept every checkpoint are reused)."""
    return re.sub(r" '?--gin_bindings=pretraining\.keep_checkpoints=[^ ']*'?", "", command)


def _write_json(path: str, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def _read_json(path: str):
    with open(path) as f:
        return json.load(f)


def gin_inputs(files: list[str]) -> list[str]:
    """The gin files a job reads: `files`, resolved as the scripts resolve them, and those
    they include. Kept in the job's record with their digests, so that a finished job is not
    reused once a file it read was edited."""
    from electra_tf import gin_files
    paths, todo = [], [os.path.abspath(gin_files.resolve(f)) for f in files]
    while todo:
        path = todo.pop(0)
        if path not in paths:
            paths.append(path)
            todo += gin_files.includes(path)
    return paths


def _sha256(path: str) -> str:
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ------------------------------------------------------------------ FLOPs and steps


def pretraining_gin(scale: Scale, config: Config) -> tuple[list[str], list[str]]:
    """(gin files, bindings) of a configuration's pre-training run, without the run's
    length and checkpointing."""
    bindings = [*scale.bindings, f"MAX_SEQ_LENGTH={scale.seq_length}",
                f"TRAIN_BATCH_SIZE={scale.batch_size}", *config.bindings,
                *FLAGS.pretrain_bindings]
    return [scale.size_gin, *config.gin_files], bindings


# Macros (and the parameters they set) the study binds after --pretrain_bindings (a run's
# length and checkpoints, from its budget), or builds its data for (the sequence length):
# a --pretrain_bindings of one would be overridden, would change the planned budget, or
# would not match the data.
_STEPS = "the study sets each run's steps from the budget (--flops_budget)"
_LOOP = "the study sets it from each run's steps"
_CURVE = "the study checkpoints at the curve's points (--curve_points)"
_LENGTH = "the study builds its data at the scale's sequence length, which a run must match"
STUDY_MACROS = {"NUM_TRAIN_STEPS": _STEPS, "pretraining.num_train_steps": _STEPS,
                "STEPS_PER_LOOP": _LOOP, "pretraining.steps_per_loop": _LOOP,
                "CHECKPOINT_EVERY": _CURVE, "pretraining.checkpoint_every": _CURVE,
                "MAX_SEQ_LENGTH": _LENGTH, "pretraining.max_seq_length": _LENGTH,
                "pretraining.keep_checkpoints": "the study keeps every checkpoint"}


def check_pretrain_bindings(scale: Scale) -> None:
    """Refuses a --pretrain_bindings the study would override (STUDY_MACROS), and one that
    gin cannot read, naming the flag given (the parse names run_pretraining.py's
    --gin_bindings)."""
    from electra_tf import gin_files
    from electra_tf.training import optimization, pretraining  # noqa: F401  (registers gin)
    for binding in FLAGS.pretrain_bindings:
        name = binding.split("=", 1)[0].strip()
        if name in STUDY_MACROS:
            raise UserInputError(f"--pretrain_bindings={binding!r}: {STUDY_MACROS[name]}; "
                                 "leave it out")
    try:
        gin_files.parse(*pretraining_gin(scale, CONFIGS["electra"]))
    except UserInputError as e:
        raise UserInputError(str(e).replace("--gin_bindings=", "--pretrain_bindings=")) from None
    finally:
        import gin
        gin.clear_config()


def describe_config(scale: Scale, config: Config, vocab_size: int) -> dict:
    """The configuration's shapes and training FLOPs per example: what model_info.json
    will report (`reported_flops_per_example`; the pretrainer is built from the same gin,
    not trained), in the official counting, and what a device executes
    (`reported_hardware_flops_per_example`: no FLOPs for the embedding lookups, the backward
    pass twice the forward). Two-stage training also gets each stage's figures in both
    countings (`stage_flops`: official and hardware, each (generator stage, discriminator
    stage)) and its switch (`two_stage_steps`: as bound, None for half the run), from which
    build_plan charges it."""
    import gin

    from electra_tf import gin_files
    from electra_tf.data import masking
    from electra_tf.modeling import factory
    from electra_tf.training import optimization, pretraining  # noqa: F401  (registers gin)
    files, bindings = pretraining_gin(scale, config)
    gin_files.parse(files, bindings)
    seq_length, mask_prob = gin.query_parameter("%MAX_SEQ_LENGTH"), gin.query_parameter(
        "%MASK_PROB")
    batch = gin.query_parameter("%TRAIN_BATCH_SIZE")
    model = factory.build_pretrainer(vocab_size=vocab_size)
    try:  # a binding, else the official N, as the run has it (the study's data is unmasked)
        num_predictions = gin.query_parameter("pretraining.max_predictions_per_seq")
    except ValueError:
        num_predictions = None
    num_predictions = num_predictions or masking.default_max_predictions(seq_length, mask_prob)
    try:
        switch = gin.query_parameter("pretraining.two_stage_steps")
    except ValueError:
        switch = None
    info = pretraining.describe(
        model, seq_length=seq_length, num_predictions=num_predictions, mask_prob=mask_prob,
        train_batch_size=batch, num_train_steps=1)
    generator = info["generator"]
    gin.clear_config()
    described = {"objective": info["objective"], "sharing": info["sharing"],
                 "algorithm": info["algorithm"],
                 "generator_hidden": generator["hidden_size"] if generator else None,
                 "discriminator_hidden": info["discriminator"]["hidden_size"],
                 "discriminator_params": info["discriminator_params"],
                 "reported_flops_per_example": info["train_flops_per_example"],
                 "reported_hardware_flops_per_example":
                     info["train_flops_per_example_hardware"],
                 "train_batch_size": batch}
    if info["algorithm"] == "two_stage":
        described["two_stage_steps"] = switch
        described["stage_flops"] = {
            kind: (phases["generator"], phases["discriminator"])
            for kind, phases in info["two_stage_flops_per_example"].items()}
    return described


def checkpoint_plan(steps: int, curve_points: int, steps_per_loop: int) -> dict:
    """The checkpoint interval of a run of `steps` (a multiple of the loop, about
    steps / curve_points), how many checkpoints the run saves, and those the curve
    fine-tunes: all but one closer to the end than half the interval (e.g. 1,000 of
    1,001)."""
    loop = max(1, min(steps_per_loop, steps // curve_points))
    every = loop * math.ceil(steps / curve_points / loop)
    saved = sorted({*range(every, steps, every), steps})
    checkpoints = [s for s in saved if s == steps or steps - s >= every / 2]
    return {"steps": steps, "steps_per_loop": loop, "checkpoint_every": every,
            "saved_checkpoints": len(saved), "checkpoints": checkpoints}


# ------------------------------------------------------------------ data


def corpus_inputs(scale: Scale, commands: list[str], check: bool = True) -> str:
    """The build's --input; `check`: that it names files (a data dir built already needs
    none: its corpus may be gone)."""
    corpus = FLAGS.corpus or scale.corpus
    if corpus != "debian":
        # (imports TensorFlow: not before keep_off_the_tpu)
        from electra_tf.data import corpus as corpus_module
        # A scale's paths are the repository's; the user's, of where they ran the study.
        base = os.getcwd() if FLAGS.corpus else common.REPO
        inputs = ",".join(p if "://" in p or os.path.isabs(p) else os.path.join(base, p)
                          for p in map(str.strip, corpus_module.split_patterns(corpus)))
        try:
            if check:
                corpus_module.expand_inputs(inputs)
        except UserInputError as e:  # (its words name the builder's flag)
            raise UserInputError(f"--corpus={corpus}: " + first_line(e).replace(
                " in --input", "").replace("--input", "--corpus")) from None
        return inputs
    import make_corpus
    output_dir = os.path.join(common.CACHE_DIR, "study", "corpus")
    manifest = make_corpus.make_corpus(output_dir)
    commands.append(common.shown([sys.executable, os.path.join(common.REPO, "benchmarks",
                                                                "study", "make_corpus.py")]))
    return ",".join(os.path.join(output_dir, f) for s in manifest["sources"].values()
                    for f in s["files"])


def labelled_rows(scale: Scale, commands: list[str]) -> tuple[list, str]:
    """(label, text) rows and where they come from."""
    source = FLAGS.labelled_data or scale.labelled_data
    if source == "vader":
        rows = corpora.movie_review_sentences(os.path.join(common.CACHE_DIR, "downloads"),
                                              commands)
        return rows, (f"PyPI {corpora.VADER} sdist, {corpora.MOVIE_SNIPPETS} (positive: "
                      "mean rating above 0, negative: below; 0 dropped)")
    path = os.path.abspath(source) if FLAGS.labelled_data else os.path.join(common.REPO, source)
    column = FLAGS.label_column or scale.label_column
    if not os.path.isfile(path):
        raise UserInputError(f"--labelled_data={source}: no such file; give 'vader' or a CSV "
                             "with a `text` and a --label_column column")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in (column, "text") if c not in (reader.fieldnames or [])]
        if missing:
            raise UserInputError(
                f"--labelled_data={source} has no `{missing[0]}` column (its columns: "
                f"{', '.join(reader.fieldnames or []) or 'none'}); "
                + ("pass --label_column" if missing[0] == column else "name the text column "
                   "`text`"))
        rows = [(r[column], r["text"]) for r in reader]
    return rows, f"{source} (label column `{column}`)"


def write_splits(rows, num_train: int, num_dev: int, work: str) -> tuple[str, str, dict]:
    """A seeded shuffle of the rows split into train.csv and dev.csv (label,text)."""
    rows = list(rows)
    random.Random(0).shuffle(rows)
    if len(rows) < num_train + num_dev:
        raise UserInputError(f"the labelled data has {len(rows)} rows, fewer than {num_train} "
                         f"training + {num_dev} dev")
    train, dev = rows[:num_train], rows[num_train:num_train + num_dev]
    paths = os.path.join(work, "train.csv"), os.path.join(work, "dev.csv")
    corpora.write_labelled_csv(paths[0], train)
    corpora.write_labelled_csv(paths[1], dev)
    labels = sorted({label for label, _ in dev})
    return (*paths, {"num_train": len(train), "num_dev": len(dev),
                     "dev_label_fractions": {label: sum(r[0] == label for r in dev) / len(dev)
                                             for label in labels}})


def pretraining_health(model_dir: str) -> dict:
    """The last TensorBoard values of the run's health scalars."""
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator
    events = event_accumulator.EventAccumulator(os.path.join(model_dir, "train"),
                                                size_guidance={"tensors": 0})
    events.Reload()
    health = {}
    for tag in ("discriminator/auc", "generator/mlm_accuracy", "loss/total"):
        if tag in events.Tags()["tensors"]:
            last = events.Tensors(tag)[-1]
            health[tag] = round(float(tf.make_ndarray(last.tensor_proto)), 4)
    return health


# ------------------------------------------------------------------ the study


def selected_configs() -> tuple[list[str], bool]:
    if FLAGS["configs"].present and not FLAGS.configs:  # "--configs=": not the whole grid
        raise UserInputError("--configs is empty; name configurations, e.g. "
                             "--configs=electra,mlm,random_init, or leave it out for the grid")
    names = FLAGS.configs or [*CONFIGS, RANDOM_INIT]
    unknown = [n for n in names if n not in CONFIGS and n != RANDOM_INIT]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # (its two jobs would write one model dir at once)
        raise UserInputError(f"--configs names {twice[0]} twice; name each configuration once")
    if unknown:
        raise UserInputError(f"--configs: unknown {', '.join(unknown)}; choose from "
                         f"{', '.join([*CONFIGS, RANDOM_INIT])}")
    return [n for n in names if n in CONFIGS], RANDOM_INIT in names


def pretrain_seeds() -> list[int]:
    try:
        seeds = [int(s) for s in FLAGS.pretrain_seeds]
    except ValueError:
        seeds = []
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise UserInputError(f"--pretrain_seeds={','.join(FLAGS.pretrain_seeds)}: give distinct "
                             "non-negative integers, e.g. --pretrain_seeds=0,1")
    return sorted(seeds)


def run_name(name: str, seed: int) -> str:
    """A pre-training run's directory name: seed 0's is the configuration's (the one-seed
    study's), another seed's has it appended."""
    return name if seed == 0 else f"{name}_seed{seed}"


def build_plan(scale: Scale, names: list[str], budget: float, curve_points: int) -> dict:
    """Each configuration's steps for the budget (in the official counting) and checkpoints,
    its FLOPs per example, per step and in all as the budget charges them, and in all as a
    device executes them (`hardware_total_flops`: the embedding lookups free, the backward
    pass twice the forward). Two-stage training is charged its generator stage's figure up
    to the switch, its discriminator stage's after it (grid.two_stage_steps): its
    `train_flops_per_example` is the run's mean."""
    from electra_tf import tokenization
    vocab_size = len(tokenization.load_vocab(os.path.join(common.REPO, VOCAB)))
    plan = {}
    for name in names:
        described = describe_config(scale, CONFIGS[name], vocab_size)
        batch = described["train_batch_size"]
        if described["algorithm"] == "two_stage":
            stages, switch = described["stage_flops"], described["two_stage_steps"]
            steps = grid.two_stage_steps(budget / batch, *stages["official"], switch)
            per_example, hardware = (grid.two_stage_run_flops(*stages[kind], steps, switch)
                                     / steps for kind in ("official", "hardware"))
        else:
            per_example = described["reported_flops_per_example"]
            steps = max(2, round(budget / (per_example * batch)))
            hardware = described["reported_hardware_flops_per_example"]
        plan[name] = {**described, "train_flops_per_example": per_example,
                      "hardware_flops_per_example": hardware,
                      "flops_per_step": per_example * batch,
                      **checkpoint_plan(steps, curve_points, scale.steps_per_loop),
                      "total_flops": per_example * batch * steps,
                      "hardware_total_flops": hardware * batch * steps}
        if plan[name]["total_flops"] > 1.5 * budget:  # fewer steps than a run's least, 2
            raise UserInputError(
                f"a budget of {budget:.3g} FLOPs is under two steps of {name} "
                f"({plan[name]['total_flops']:.3g} FLOPs); raise --flops_budget")
    return plan


def print_plan(plan: dict, budget: float):
    rows = [[name, p["objective"], p["sharing"], p["algorithm"], p["generator_hidden"],
             f"{p['train_flops_per_example']:.3g}", f"{p['steps']:,}",
             f"{p['total_flops']:.4g}", f"{p['total_flops'] / budget - 1:+.2%}",
             f"{p['hardware_flops_per_example']:.3g}", f"{p['hardware_total_flops']:.3g}"]
            for name, p in plan.items()]
    print(common.markdown_table(["config", "objective", "sharing", "algorithm",
                                 "generator hidden", "FLOPs/example", "steps",
                                 "total FLOPs", "vs budget", "hardware FLOPs/example",
                                 "hardware total"], rows))
    print(HARDWARE_NOTE + (" " + hardware_ratio(plan) if hardware_ratio(plan) else ""))


HARDWARE_NOTE = (
    "The budget is in the paper's counting (an embedding lookup is a one-hot matmul, "
    "2 x width x vocabulary FLOPs a token; backward = forward); the hardware figures count "
    "what a device executes (lookups are gathers, no FLOPs; the backward pass twice the "
    "forward; model_info.json's train_flops_per_example_hardware).")


def hardware_ratio(configs: dict) -> str:
    """What the equal budget gives BERT against ELECTRA, in steps and in executed FLOPs
    (configs: the plan's or the record's); '' without both."""
    if not {"electra", "mlm"} <= set(configs):
        return ""
    electra, mlm = configs["electra"], configs["mlm"]
    executed = mlm["hardware_total_flops"] / electra["hardware_total_flops"]
    per_example = electra["hardware_flops_per_example"] / mlm["hardware_flops_per_example"]
    return (f"At this budget BERT trains {mlm['steps'] / electra['steps']:.2f}x ELECTRA's "
            f"steps and executes {executed:.2f}x its hardware FLOPs (an example costs "
            f"ELECTRA {per_example:.2f}x what it costs BERT).")


def pretraining_job(scale: Scale, config: Config, p: dict, data_dir: str,
                    model_dir: str, seed: int = 0) -> Job:
    files, bindings = pretraining_gin(scale, config)
    bindings += [f"NUM_TRAIN_STEPS={p['steps']}", f"STEPS_PER_LOOP={p['steps_per_loop']}",
                 f"CHECKPOINT_EVERY={p['checkpoint_every']}",
                 # every one: the curve's are fine-tuned after the run, and a count would
                 # let those an interruption saves off the grid push them out
                 "pretraining.keep_checkpoints=None"]
    job_flags = [("gin_file", f) for f in files] + [("gin_bindings", b) for b in bindings]
    job_flags += [("model_dir", model_dir), ("train_data", f"{data_dir}/*.tfrecord"),
                  ("seed", str(seed))]
    if FLAGS.strategy != "default":
        job_flags.append(("strategy", FLAGS.strategy))
    if FLAGS.tpu:
        job_flags.append(("tpu", FLAGS.tpu))
    return Job("scripts/run_pretraining.py", job_flags)


def finetuning_job(scale: Scale, init: str, model_dir: str, train_csv: str, dev_csv: str,
                   num_trials: int, random_init: bool = False) -> Job:
    job_flags = [("task", "classification"), ("init_checkpoint", init),
                 ("model_dir", model_dir), ("train_file", train_csv), ("dev_file", dev_csv),
                 ("label_column", "label"), ("num_trials", str(num_trials)), ("seed", "0"),
                 ("gin_file", scale.finetune_gin)]
    job_flags += [("gin_bindings", b) for b in (*scale.finetune_bindings,
                                                "finetuning.save_model=False")]
    job_flags.append(("overwrite", ""))  # an interrupted job's trials are redone
    if random_init:
        job_flags.append(("random_init", ""))
    return Job("scripts/run_finetuning.py", job_flags)


def finetuned(out: str, init: str | None, files: list[str]) -> bool:
    """Whether `out` holds a fine-tuning run from the checkpoint `init` (None: random
    weights) on `files` as they are now."""
    path = os.path.join(out, "results.json")
    return os.path.exists(path) and common.finetuning_inputs_match(_read_json(path), init,
                                                                   files)


def finetune_summary(*model_dirs: str) -> dict:
    """A fine-tuning run's dev scores (results.json); given several runs (one per
    pre-training seed), the median, mean and sample std of all their trials, `per_seed`
    every trial's score, run after run."""
    from electra_tf.finetune import runner
    runs = [_read_json(os.path.join(d, "results.json")) for d in model_dirs]
    metric = runs[0]["metric"]
    results = runner.summarize(runs[0]["task"], metric,
                               [t for run in runs for t in run["trials"]])
    return {"metric": metric, "median": results["median"][metric],
            "mean": results["mean"][metric], "std": results["std"][metric],
            "per_seed": [t["dev"][metric] for t in results["trials"]],
            "median_all": results["median"]}


def estimate(scale: Scale, plan: dict, data_dir: str, train_csv: str, dev_csv: str,
             runner: Runner, num_trials: int, num_seeds: int = 1,
             with_random: bool = True) -> dict:
    """Times FLAGS.estimate pre-training steps of every configuration (the last loop's
    examples/s, after tracing) and one fine-tuning trial; projects the study's duration
    (each configuration pre-trained and fine-tuned once per pre-training seed)."""
    from electra_tf import gin_files
    from electra_tf.training import pretraining
    steps = FLAGS.estimate
    loop = max(1, steps // 3)
    rows, total_pretrain = [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, p in plan.items():
            files, bindings = pretraining_gin(scale, CONFIGS[name])
            gin_files.parse(files, bindings + [f"NUM_TRAIN_STEPS={3 * loop}",
                                               f"STEPS_PER_LOOP={loop}",
                                               f"CHECKPOINT_EVERY={10 * steps}"])
            result = pretraining.run_pretraining(os.path.join(tmp, name),
                                                 f"{data_dir}/*.tfrecord", log=lambda _: None)
            rate = result["train"]["throughput/examples_per_second"]
            seconds = p["steps"] * p["train_batch_size"] / rate
            total_pretrain += seconds
            rows.append({"config": name, "examples_per_second": round(rate, 1),
                         "steps": p["steps"], "projected_seconds": round(seconds)})
            print(f"{name}: {rate:.1f} examples/s -> {p['steps']:,} steps in "
                  f"{seconds / 60:.1f} min", flush=True)
        model_dir = os.path.join(tmp, "finetune")
        electra_dir = os.path.join(tmp, next(iter(plan)))
        job = finetuning_job(scale, electra_dir, model_dir, train_csv, dev_csv, 1)
        started = time.time()
        Runner(in_process=True).run(job, model_dir, lambda: False)
        trial = time.time() - started
    curve = sum(len(plan[n]["checkpoints"]) - 1 for n in CURVE_CONFIGS if n in plan)
    finetunes = (len(plan) + curve) * num_seeds + int(with_random)
    total_pretrain *= num_seeds
    startup = 0 if runner.in_process else 15.0
    total = (total_pretrain + len(plan) * num_seeds * startup
             + finetunes * (num_trials * trial + startup))
    print(f"pre-training {total_pretrain / 3600:.2f} h"
          + (f" ({num_seeds} seeds)" if num_seeds > 1 else "")
          + f"; one fine-tuning trial {trial:.0f} s x "
          f"{num_trials} seeds x {finetunes} models; with ~{startup:.0f} s start-up per job, "
          f"the study takes about {total / 3600:.1f} h")
    return {"pretraining": rows, "pretraining_seconds": round(total_pretrain),
            "finetuning_trial_seconds": round(trial, 1), "finetuning_models": finetunes,
            "total_hours": round(total / 3600, 2)}


# Flags that make another study than the scale's, whose results must not replace its own.
OTHER_STUDY_FLAGS = ("flops_budget", "curve_points", "num_trials", "corpus", "labelled_data",
                     "label_column")
# Pre-training bindings that change how the runs compute, not what they learn (the small
# scale's GPU command binds them); any other is another study.
HOW_BINDINGS = ("pretraining.precision=", "pretraining.jit_compile=",
                "pretraining.steps_per_call=")


def check_results_dir(names: list[str], with_random: bool, stem: str, scale: Scale):
    """A part of the grid (--configs), or the grid with another budget, corpus, labelled
    data, curve or number of trials, would write over the scale's results in
    benchmarks/results/: refused unless --results_dir says where its go (--plan and
    --estimate write none; more --pretrain_seeds extend the scale's study)."""
    elsewhere = FLAGS.results_dir and (os.path.realpath(FLAGS.results_dir)
                                       != os.path.realpath(common.RESULTS_DIR))
    if elsewhere or FLAGS.scale == "toy" or FLAGS.plan or FLAGS.estimate:
        return
    if set(names) != set(CONFIGS) or not with_random:
        raise UserInputError(
            f"--configs={','.join(FLAGS.configs)} is part of the grid: its results would "
            f"replace the whole grid's benchmarks/results/{stem}.{{json,md}}; pass "
            f"--results_dir, e.g. "
            f"--results_dir=benchmarks/results/{stem}_{'_'.join(names) or RANDOM_INIT}")
    # (0 and None mean the scale's value for these flags, as main reads them.)
    other = [f"--{name}={value:g}" if isinstance(value, float) else f"--{name}={value}"
             for name, value in ((n, getattr(FLAGS, n)) for n in OTHER_STUDY_FLAGS)
             if value not in (None, 0, getattr(scale, name))]
    other += [f"--pretrain_bindings={b}" for b in FLAGS.pretrain_bindings
              if not b.replace(" ", "").startswith(HOW_BINDINGS)]
    if "0" not in [s.strip() for s in FLAGS.pretrain_seeds]:  # the scale's runs are seed 0's
        other.append(f"--pretrain_seeds={','.join(FLAGS.pretrain_seeds)}")
    if other:
        raise UserInputError(
            f"{' '.join(other)} makes another study than --scale={FLAGS.scale}'s: its results "
            f"would replace benchmarks/results/{stem}.{{json,md}}; pass --results_dir, e.g. "
            f"--results_dir=benchmarks/results/{stem}_{other[0][2:].split('=')[0]}")


def hide_gpus():
    """Hides the GPUs from this process, before it runs any TensorFlow op: its jobs run as
    subprocesses, and the pretrainers it builds to plan them (describe_config) would
    otherwise take all of a GPU's memory (TensorFlow's default) for as long as it lives,
    leaving the jobs none."""
    import tensorflow as tf
    tf.config.set_visible_devices([], "GPU")


def main(argv):
    del argv
    scale = SCALES[FLAGS.scale]
    names, with_random = selected_configs()
    if with_random and "electra" not in names:
        raise UserInputError(f"{RANDOM_INIT} fine-tunes the electra run's discriminator with "
                             "random weights: include electra in --configs")
    budget = scale.flops_budget if FLAGS.flops_budget is None else FLAGS.flops_budget
    if not 0 < budget < math.inf:  # (nan fails too)
        raise UserInputError(f"--flops_budget={FLAGS.flops_budget:g}: give a positive number "
                             f"of FLOPs (the scale's: {scale.flops_budget:.3g})")
    for name, default in (("jobs", f"the scale's: {scale.jobs}"), ("estimate", "0: off")):
        if (FLAGS[name].value or 0) < 0:
            raise UserInputError(f"--{name}={FLAGS[name].value} is negative; give a positive "
                                 f"number, or leave it out ({default})")
    for name in ("curve_points", "num_trials"):  # (0: the scale's; before any work)
        if (FLAGS[name].value or 0) < 0:
            raise UserInputError(f"--{name}={FLAGS[name].value} is negative; give a positive "
                                 "number, or leave it out for the scale's "
                                 f"({getattr(scale, name)})")
    if FLAGS.plan and FLAGS.estimate:
        raise UserInputError("--plan and --estimate each stop early, at different points; "
                             "pass one of them")
    curve_points = FLAGS.curve_points or scale.curve_points
    num_trials = FLAGS.num_trials or scale.num_trials
    seeds = pretrain_seeds()
    in_process = scale.in_process if FLAGS.in_process is None else FLAGS.in_process
    # Absolute: the jobs run from the repository root.
    work = os.path.abspath(FLAGS.work_dir or os.path.join(common.CACHE_DIR, "study",
                                                          FLAGS.scale))
    results_dir = FLAGS.results_dir or (work if FLAGS.scale == "toy" else common.RESULTS_DIR)
    stem = "study" if FLAGS.scale == "cpu" else f"study_{FLAGS.scale}"
    check_results_dir(names, with_random, stem, scale)
    check_pretrain_bindings(scale)
    if not in_process and FLAGS.strategy == "tpu":
        keep_off_the_tpu()
    if not in_process and not FLAGS.estimate:
        hide_gpus()

    runner = Runner(in_process, FLAGS.jobs or scale.jobs, scale.eager)
    if not (FLAGS.plan or FLAGS.estimate or os.path.exists(
            os.path.join(results_dir, f"{stem}.json"))):
        runner.start()  # a first run: the workers start while the grid is planned
    plan = build_plan(scale, names, budget, curve_points)
    print_plan(plan, budget)
    if FLAGS.plan:
        return 0
    os.makedirs(work, exist_ok=True)

    # -- data: the labelled splits, pre-training TFRecords
    rows, labelled_source = labelled_rows(scale, runner.commands)
    data_dir = os.path.join(work, f"data{scale.seq_length}")
    build = Job("scripts/build_pretraining_data.py", [
        ("input", corpus_inputs(scale, runner.commands,
                                check=not os.path.exists(os.path.join(data_dir,
                                                                      "metadata.json")))),
        ("vocab_file", os.path.join(common.REPO, VOCAB)),
        ("output_dir", data_dir), ("max_seq_length", str(scale.seq_length))]
        + ([("num_workers", str(scale.build_workers))] if scale.build_workers else [])
        + [("progress", "false")])
    train_csv, dev_csv, split_info = write_splits(rows, scale.num_train, scale.num_dev, work)
    runner.run(build, os.path.join(work, "data_job"),
               lambda: os.path.exists(os.path.join(data_dir, "metadata.json")))
    data_info = _read_json(os.path.join(data_dir, "metadata.json"))

    if FLAGS.estimate:
        result = estimate(scale, plan, data_dir, train_csv, dev_csv, runner, num_trials,
                          len(seeds), with_random)
        _write_json(os.path.join(work, "estimate.json"), {"run": common.run_info(), **result})
        return 0

    # -- pre-training, every configuration at the same budget; fine-tuning: the final
    # checkpoint of each (every checkpoint of the curve runs), and the electra
    # discriminator's shape with random weights. A fine-tuning job starts when its
    # pre-training is done.
    runs = [(name, seed) for name in names for seed in seeds]
    model_dirs = {(name, seed): os.path.join(work, "pretrain", run_name(name, seed))
                  for name, seed in runs}
    # A rebuilt data dir or an edited gin file: the runs on the old ones are refused.
    data_record = [os.path.join(data_dir, "metadata.json")]
    items = [(pretraining_job(scale, CONFIGS[name], plan[name], data_dir,
                              model_dirs[name, seed], seed),
              model_dirs[name, seed], lambda final=os.path.join(
                  model_dirs[name, seed], f"ckpt-{plan[name]['steps']}.index"):
              os.path.exists(final), None,
              data_record + gin_inputs(pretraining_gin(scale, CONFIGS[name])[0]))
             for name, seed in runs]
    targets = [(name, seed, step, os.path.join(model_dirs[name, seed], f"ckpt-{step}"),
                os.path.join(work, "finetune", run_name(name, seed), f"step{step}"))
               for name, seed in runs
               for step in (plan[name]["checkpoints"] if name in CURVE_CONFIGS
                            else [plan[name]["steps"]])]
    if with_random:  # the shape of the lowest seed's electra run (its weights are not used)
        targets.append((RANDOM_INIT, seeds[0], 0, model_dirs["electra", seeds[0]],
                        os.path.join(work, "finetune", run_name(RANDOM_INIT, seeds[0]))))
    # Done: fine-tuned from these weights on these splits (pre-trained again, or another
    # labelled split, and it is redone).
    items += [(finetuning_job(scale, init, out, train_csv, dev_csv, num_trials,
                              random_init=name == RANDOM_INIT), out,
               lambda out=out, init=None if name == RANDOM_INIT else init: finetuned(
                   out, init, [train_csv, dev_csv]),
               runs.index(("electra", seed) if name == RANDOM_INIT else (name, seed)),
               gin_inputs([scale.finetune_gin]))
              for name, seed, _, init, out in targets]
    try:
        seconds = runner.run_all(items)
    except BaseException:
        runner.close(abort=True)  # (an idle worker process would outlive this one)
        raise
    runner.close()
    # The commit each job ran on (None: a job finished before records kept it).
    commits = [_read_json(os.path.join(job_dir, JOB_RECORD)).get("commit")
               for _, job_dir, *_ in items]
    configs = {}
    for name in names:
        configs[name] = {"title": CONFIGS[name].title,
                         "gin_files": list(CONFIGS[name].gin_files),
                         "bindings": list(CONFIGS[name].bindings), **plan[name],
                         "pretrain_seconds": None, "health": None, "finetune": {}, "runs": {}}
    for (name, seed), took, commit in zip(runs, seconds, commits):
        model_dir = model_dirs[name, seed]
        model_info = _read_json(os.path.join(model_dir, "model_info.json"))
        checks = [("train_flops_per_example", "reported_flops_per_example")]
        # The run's total too (a switch the plan did not charge is refused), but for a
        # two-stage run only once run_pretraining.py charged it its stages (an older
        # model_info.json gives the joint figure's total).
        if model_info.get("algorithm") != "two_stage" or (
                "two_stage_flops_per_example" in model_info):
            checks.append(("total_train_flops", "total_flops"))
        for key, planned in checks:
            if not math.isclose(model_info[key], plan[name][planned], rel_tol=1e-9):
                raise UserInputError(f"{model_dir}/model_info.json reports {key} "
                                     f"{model_info[key]:.6g}, the plan "
                                     f"{plan[name][planned]:.6g}")
        configs[name]["runs"][str(seed)] = {"pretrain_seconds": took,
                                            "health": pretraining_health(model_dir),
                                            "commit": commit,
                                            "finetune": {}}
    baseline, outs = None, {}
    for (name, seed, step, _, out), took, commit in zip(targets, seconds[len(runs):],
                                                        commits[len(runs):]):
        if name == RANDOM_INIT:
            baseline = {"seconds": took, "commit": commit, **finetune_summary(out)}
        else:
            configs[name]["runs"][str(seed)]["finetune"][str(step)] = {
                "seconds": took, "commit": commit, **finetune_summary(out)}
            outs.setdefault((name, step), []).append(out)
    for (name, step), dirs in outs.items():
        configs[name]["finetune"][str(step)] = {
            "flops": step * configs[name]["flops_per_step"],
            "seconds": sum(configs[name]["runs"][str(seed)]["finetune"][str(step)]["seconds"]
                           for seed in seeds), **finetune_summary(*dirs)}
    for c in configs.values():  # over the runs: the mean pre-training time and health
        values = list(c["runs"].values())
        c["pretrain_seconds"] = round(sum(r["pretrain_seconds"] for r in values)
                                      / len(values), 1)
        c["health"] = {k: round(sum(r["health"][k] for r in values) / len(values), 4)
                       for k in values[0]["health"] if all(k in r["health"] for r in values)}

    comparisons = compare_runs(configs, baseline, seeds) if len(seeds) > 1 else []

    import plots
    pngs = plots.write_plots(configs, baseline, results_dir, stem, GROUPS, CURVE_CONFIGS,
                             budget)
    record = {
        "title": f"The paper's claims at small scale ({FLAGS.scale})",
        "run": common.run_info(), "scale": FLAGS.scale,
        "settings": {**dataclasses.asdict(scale), "flops_budget": budget,
                     "curve_points": curve_points, "num_trials": num_trials,
                     "pretrain_seeds": seeds,
                     "pretrain_bindings": FLAGS.pretrain_bindings,
                     "flops_counting": "official (electra_tf.modeling.flops: backward = "
                                       "forward, dense embedding lookups)",
                     "hardware_flops_counting": "what a device executes (backward = 2 x "
                                                "forward, embedding lookups as gathers)"},
        "pretraining_data": {"inputs": build.value("input").replace(common.REPO + os.sep, ""),
                             "num_examples": data_info["num_examples"],
                             "num_tokens": data_info["num_tokens"]},
        "labelled_data": {"source": labelled_source, **split_info},
        "configs": configs, "random_init": baseline, "groups": GROUPS,
        "comparisons": comparisons,
        "job_commits": {c or "not recorded": commits.count(c) for c in dict.fromkeys(commits)},
        "plots": [os.path.basename(p) for p in pngs], "commands": runner.commands}
    body = markdown(record, budget)
    json_path, md_path = common.write_results(stem, record, body, results_dir)
    print(body)
    print(f"wrote {json_path}, {md_path} and {', '.join(pngs)}")
    return 0


def compare_runs(configs: dict, baseline: dict | None, seeds: list[int]) -> list[dict]:
    """ELECTRA minus BERT at each pair of checkpoints along the runs (each of ELECTRA's with
    BERT's nearest in FLOPs, each of BERT's used once: at the `cpu` scale the i-th of each,
    ELECTRA's first at 5.83e13 FLOPs, BERT's at 5.64e13; the ends are equal within a
    step's), and
    every other configuration minus BERT at the end, and ELECTRA and BERT minus random
    weights: the difference of pooled medians with a 95% interval resampling pre-training
    runs and their trials (compare.py)."""
    import compare

    def row(a: str, a_step: str, b: str, b_step: str) -> dict:
        def runs(name, step):
            if name == RANDOM_INIT:  # one set of trials, no pre-training runs
                return [baseline["per_seed"]]
            return [configs[name]["runs"][str(seed)]["finetune"][step]["per_seed"]
                    for seed in seeds]

        def flops(name, step):
            return 0 if name == RANDOM_INIT else configs[name]["finetune"][step]["flops"]

        return {"a": a, "a_step": int(a_step), "b": b, "b_step": int(b_step),
                "flops": [flops(a, a_step), flops(b, b_step)],
                **compare.difference(runs(a, a_step), runs(b, b_step))}

    def end(name):
        return str(configs[name]["steps"])

    rows = []
    if "mlm" in configs:
        if "electra" in configs:
            rows += [row("electra", a, "mlm", b) for a, b in checkpoint_pairs(
                configs["electra"]["finetune"], configs["mlm"]["finetune"])]
        rows += [row(name, end(name), "mlm", end("mlm")) for name in configs
                 if name not in ("electra", "mlm")]
    if baseline:
        rows += [row(name, end(name), RANDOM_INIT, "0") for name in ("electra", "mlm")
                 if name in configs]
    return rows


def checkpoint_pairs(a: dict, b: dict) -> list[tuple[str, str]]:
    """Steps of two runs' fine-tuned checkpoints ({step: {"flops": ...}}) paired by FLOPs:
    each of a's with the nearest of b's, each of b's in one pair (the closest); in order."""
    pairs = {}  # b's step -> (a's step, the FLOPs between them)
    for a_step, point in a.items():
        b_step = min(b, key=lambda s: abs(b[s]["flops"] - point["flops"]))
        gap = abs(b[b_step]["flops"] - point["flops"])
        if b_step not in pairs or gap < pairs[b_step][1]:
            pairs[b_step] = a_step, gap
    return sorted(((pair[0], s) for s, pair in pairs.items()), key=lambda p: int(p[0]))


def markdown(record: dict, budget: float) -> str:
    configs, baseline = record["configs"], record["random_init"]
    s = record["settings"]
    seeds = [str(seed) for seed in s.get("pretrain_seeds", [0])]
    several = len(seeds) > 1

    def score(f):
        return (f"{f['median']:.4f} ({f['mean']:.4f} ± {f['std']:.4f})",
                ", ".join(f"{v:.3f}" for v in f["per_seed"]))

    def by_run(c, step):
        """Each pre-training run's median, and its trials' scores, run after run."""
        finals = [c["runs"][seed]["finetune"][step] for seed in seeds]
        return [" / ".join(f"{f['median']:.4f}" for f in finals),
                " / ".join(", ".join(f"{v:.3f}" for v in f["per_seed"]) for f in finals)]

    def health(c, tag):
        if not several:
            return c["health"].get(tag, "-")
        return " / ".join(str(c["runs"][seed]["health"].get(tag, "-")) for seed in seeds)

    metric = next((f["metric"] for c in configs.values() for f in c["finetune"].values()),
                  baseline["metric"] if baseline else "accuracy")
    rows = []
    for name, c in configs.items():
        final = c["finetune"][str(c["steps"])]
        studies = [g for g, (_, members) in GROUPS.items() if name in dict(members)]
        scores = ([score(final)[0], *by_run(c, str(c["steps"]))] if several
                  else score(final))
        rows.append([f"`{name}`", c["title"], ", ".join(studies) or "-", f"{c['steps']:,}",
                     f"{c['flops_per_step']:.3g}", f"{c['total_flops']:.4g}",
                     f"{c['hardware_total_flops']:.3g}", f"{c['pretrain_seconds'] / 60:.1f}",
                     health(c, "discriminator/auc"), health(c, "generator/mlm_accuracy"),
                     *scores])
    if baseline:
        scores = ([score(baseline)[0], f"{baseline['median']:.4f}", score(baseline)[1]]
                  if several
                  else score(baseline))
        rows.append([f"`{RANDOM_INIT}`", "no pre-training (the electra discriminator's shape)",
                     "baseline", "0", "-", "0", "0", "-", "-", "-", *scores])
    score_columns = ([f"dev {metric}: median (mean ± std) of all runs' trials",
                      "median per pre-training run", "per seed, run after run"] if several
                     else [f"dev {metric}: median (mean ± std)", "per seed"])
    table = common.markdown_table(
        ["config", "what", "studies", "steps", "FLOPs/step", "pre-training FLOPs",
         "hardware FLOPs", "pre-training min" + (" (mean of the runs)" if several else ""),
         "disc. AUC (end)", "gen. MLM acc. (end)", *score_columns], rows)
    curve_rows = [[f"`{name}`", f"{int(step):,}", f"{f['flops']:.3g}",
                   *([score(f)[0], *by_run(configs[name], step)] if several else score(f))]
                  for name in CURVE_CONFIGS if name in configs
                  for step, f in configs[name]["finetune"].items()]
    curve = common.markdown_table(["config", "checkpoint step", "pre-training FLOPs",
                                   *score_columns], curve_rows)
    comparisons = ""
    if record.get("comparisons"):
        comparisons = (
            "\n\nDifferences (pooled median of the first minus the second; the 95% "
            "interval and the share of replicates in which the first is above (ties not "
            "counted) from a bootstrap that resamples the pre-training runs, then each "
            "run's trials; benchmarks/study/compare.py):\n\n"
            + common.markdown_table(
                ["first", "second", "pre-training FLOPs (first / second)",
                 f"difference in {metric}", "95% interval", "first above in",
                 "pre-training runs"],
                [[f"`{r['a']}` step {r['a_step']:,}",
                  f"`{r['b']}`" + (f" step {r['b_step']:,}" if r["b_step"] else ""),
                  " / ".join(f"{f:.3g}" for f in r["flops"]), f"{r['difference']:+.4f}",
                  f"{r['low']:+.4f} to {r['high']:+.4f}", f"{r['share_above']:.0%}",
                  f"{r['runs'][0]} / " + (str(r["runs"][1]) if r["b_step"] else "-")]
                 for r in record["comparisons"]]))
    data = record["labelled_data"]
    jobs = record.get("job_commits", {})
    return (
        f"Every configuration pre-trained with the same budget of {budget:.3g} FLOPs "
        f"({s['flops_counting']}), `{s['size_gin']}` + {', '.join(s['bindings']) or 'no bindings'}"
        f" at seq {s['seq_length']}, batch {s['batch_size']}, on "
        f"{record['pretraining_data']['num_examples']:,} packed examples; then fine-tuned "
        f"({s['finetune_gin']}, {', '.join(s['finetune_bindings'])}) on "
        f"{data['num_train']:,} training / {data['num_dev']:,} dev examples of "
        f"{data['source']}, {s['num_trials']} seeds; scores are on dev."
        + (f" Each configuration pre-trained once per seed ({', '.join(seeds)}: initial "
           "weights, data order, masks and samples), every run fine-tuned with the same "
           f"{s['num_trials']} seeds; a score pools all runs' trials, and the health "
           "columns list the runs' values in seed order." if several
           else f" Pre-training seed {seeds[0]}." if seeds != ["0"] else "")
        + "\n\n" + HARDWARE_NOTE
        + (" " + hardware_ratio(configs) if hardware_ratio(configs) else "")
        + "\n\n" + table + "\n\nELECTRA vs BERT along the runs (each checkpoint fine-tuned):\n\n"
        + curve + comparisons + "\n\nPlots: " + ", ".join(f"`{p}`" for p in record["plots"])
        + f".\n\nCommit `{record['run']['git_commit']}`"
        + (" (the jobs ran on " + ", ".join(f"`{c}`: {n}" for c, n in jobs.items()) + ")"
           if set(jobs) - {record["run"]["git_commit"]} else "")
        + ". Commands (from the repository root):\n\n```\n" + "\n".join(record["commands"])
        + "\n```\n")


if __name__ == "__main__":
    # SIGTERM: the jobs running stop as they do (a checkpoint saved), idle worker
    # processes too (they outlived this one by 90 s), and the study exits with one line.
    cli.run(main, handles_sigterm=True)
