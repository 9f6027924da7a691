"""The tf.distribute strategies a pre-training run can use, and who writes what.

- `default`: one device (the CPU, or the first GPU).
- `mirrored`: every local GPU (or, with none, the CPU's logical devices).
- `multi_worker_mirrored`: several machines, described by the TF_CONFIG environment
  variable (`{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type":
  "worker", "index": 0}}`); every worker runs the same command.
- `tpu`: a Cloud TPU, found by `--tpu` (a name, a grpc:// address, or "local" on a TPU VM).

Under `multi_worker_mirrored` every worker takes part in saving a checkpoint, but only the
chief (worker 0) writes the model directory; the others write to a scratch directory, which
keeps only the worker's data position (`data-STEP`) when the run ends.
"""

import contextlib
import hashlib
import json
import os
import signal
import threading

import tensorflow as tf

from electra_tf.choices import STRATEGIES
from electra_tf.errors import UserInputError, first_line


_CREATED: dict[tuple, tf.distribute.Strategy] = {}


def create_strategy(name: str, tpu: str | None = None, log=None) -> tf.distribute.Strategy:
    """The strategy called `name` (one of STRATEGIES). `log`: where a worker of a
    multi-worker cluster says that it waits for the others.

    One instance per kind and process: a second MirroredStrategy over the same devices
    numbers its collective ops from the same start as the first, and their all-reduces can
    collide ("Shape mismatch in the collective instance ...") when both have run.
    """
    if name not in STRATEGIES:
        raise UserInputError(f"--strategy={name} is not one of {', '.join(STRATEGIES)}")
    if tpu and name != "tpu":  # (the run trained on the TPU VM's CPU without a word)
        raise UserInputError(f"--tpu={tpu} is for --strategy=tpu; add --strategy=tpu, or leave "
                             "--tpu out")
    if name == "default":
        return tf.distribute.get_strategy()
    key = (name, tpu)
    if key not in _CREATED:
        _CREATED[key] = _create(name, tpu, log or (lambda _: None))
    return _CREATED[key]


def _create(name: str, tpu: str | None, log) -> tf.distribute.Strategy:
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(devices) == 1:  # (it ran as the default strategy without a word)
            log(f"note: --strategy=mirrored found one device ({devices[0]}): the run has one "
                "replica")
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker_mirrored":
        if "TF_CONFIG" not in os.environ:
            raise UserInputError(
                "--strategy=multi_worker_mirrored needs the TF_CONFIG environment variable "
                "describing the cluster and this worker's index; set it on every worker")
        return _join_cluster(_check_tf_config(os.environ["TF_CONFIG"]), log)
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
    except ValueError as e:  # no --tpu and nothing in the environment names one
        raise UserInputError(
            f"--strategy=tpu found no TPU ({_first_line(e)}); pass --tpu=NAME (the TPU's "
            "name or grpc:// address, or --tpu=local on a TPU VM)") from None
    except (ImportError, RuntimeError, OSError) as e:  # finding a TPU Node by name
        raise UserInputError(f"{tpu_flag(tpu)}: {_tpu_failure(tpu, e)}") from None
    try:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (tf.errors.OpError, ImportError, RuntimeError, OSError, ValueError) as e:
        raise UserInputError(f"{tpu_flag(tpu)}: {_tpu_failure(tpu, e)}") from None
    return tf.distribute.TPUStrategy(resolver)


def _first_line(error: BaseException) -> str:
    line = first_line(error)
    return line if len(line) <= 200 else line[:197] + "..."


def _tpu_failure(tpu: str | None, error: BaseException) -> str:
    """Why no TPU could be started, and what to do: on a TPU VM (`--tpu=local`), TensorFlow
    finds its TPU only in the tensorflow-tpu build; a TPU Node is found by name through the
    Google API client (cloud-tpu-client), which the TPU install does not bring."""
    if tpu == "local":
        import importlib.metadata
        try:
            importlib.metadata.version("tensorflow-tpu")
            fix = ("is the TPU free (no other process holding it) and libtpu the pinned one? "
                   "(BUILD.md, 'Cloud TPU VM')")
        except importlib.metadata.PackageNotFoundError:
            fix = ("on a Cloud TPU VM install the tensorflow-tpu build (BUILD.md, 'Cloud TPU "
                   "VM'); elsewhere use --strategy=default or --strategy=mirrored")
        return f"no TPU could be started on this machine ({_first_line(error)}); {fix}"
    return (f"the TPU could not be reached ({_first_line(error)}); check its name or grpc:// "
            "address, and for a name pip install cloud-tpu-client; on a TPU VM pass "
            "--tpu=local")


def on_tpu(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` is a TPUStrategy (tf.distribute's or its experimental one, which
    is another class)."""
    return isinstance(strategy, (tf.distribute.TPUStrategy,
                                 tf.distribute.experimental.TPUStrategy))


def check_xla_off_tpu(binding: str, jit_compile: bool, strategy: tf.distribute.Strategy):
    """`binding`=True (a step XLA compiles) off a TPU needs XLA for the device it runs on:
    the tensorflow-tpu build compiles none for the CPU (TensorFlow's NotFoundError, "could
    not find registered transfer manager for platform Host", at the first step)."""
    if not jit_compile or on_tpu(strategy) or tf.config.list_logical_devices("GPU"):
        return
    from electra_tf.modeling.layers import xla_compiles_for_cpu
    if not xla_compiles_for_cpu():
        raise UserInputError(f"{binding}=True: this TensorFlow (the tensorflow-tpu build) "
                             "compiles no XLA for the CPU; add --strategy=tpu, or unbind it")


def tpu_flag(tpu: str | None) -> str:
    """How a message names the TPU the command line chose."""
    return f"--tpu={tpu}" if tpu else "--strategy=tpu without --tpu"


def is_tpu_node(strategy_name: str, tpu: str | None) -> bool:
    """Whether --strategy/--tpu name a TPU Node (a TPU reached over the network, by name or
    grpc:// address, or TPU_NAME without --tpu), not a TPU VM's own TPU (`--tpu=local`;
    neither: TensorFlow's resolver says it found none). Once connected, a Node's host
    runs the run's TensorFlow ops, its input pipeline and checkpoint writes among them."""
    tpu = tpu or os.environ.get("TPU_NAME")  # (what TensorFlow's resolver reads without one)
    return strategy_name == "tpu" and bool(tpu) and tpu != "local"


def check_tpu_node_paths(strategy_name: str, tpu: str | None, paths: dict) -> None:
    """On a TPU Node, that every path in `paths` ({flag: value or None}; values may be
    comma-separated lists) is on gs://: the TPU's host reads and writes them, and it sees
    none of this machine's files (a local path passes the checks made here, then fails at
    the first step, or splits the model dir between two machines)."""
    if not is_tpu_node(strategy_name, tpu):
        return
    for flag, value in paths.items():
        for path in (value or "").split(","):
            if path.strip() and not path.strip().startswith("gs://"):
                raise UserInputError(
                    f"{flag}={path.strip()}: a TPU Node ({tpu_flag(tpu)}) reads and writes "
                    "through its own host, which sees only gs:// paths; give a gs:// path, "
                    "or run on a TPU VM with --tpu=local")


def worker_info(strategy: tf.distribute.Strategy) -> tuple[int, bool]:
    """(this worker's index among all training tasks, which is its input pipeline; whether
    it is the chief that writes the model directory)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return 0, True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type is None:  # a one-worker TF_CONFIG
        return 0, True
    cluster = resolver.cluster_spec().as_dict()
    chief = task_type == "chief" or (task_type == "worker" and task_id == 0
                                     and "chief" not in cluster)
    return task_index(cluster, task_type, int(task_id or 0)), chief


def hold_model_dir(held: contextlib.ExitStack, model_dir: str, script: str,
                   strategy: tf.distribute.Strategy) -> None:
    """The chief holds `model_dir` for the rest of `held` (`atomic.hold`: a second run on
    it stops in one line). With several workers every one learns whether the chief could:
    the workers of a refused chief stop too, rather than touch the running run's worker
    folders and then wait for a chief that has gone."""
    from electra_tf import atomic
    refused = None
    if worker_info(strategy)[1]:
        try:
            held.enter_context(atomic.hold(model_dir, script))
        except UserInputError as error:
            refused = error
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        said = summed_over_workers(strategy, tf.constant(0.0 if refused is None else 1.0))
        if refused is None and float(said) > 0:
            raise UserInputError(
                f"--model_dir={model_dir} is being written by another {script} (the chief "
                "found its mark); wait for it to end or stop it, or choose another "
                "--model_dir")
    if refused is not None:
        raise refused


def check_same_settings(strategy: tf.distribute.Strategy, settings: dict) -> None:
    """With several workers, that every one was given the same `settings` ({what: value},
    e.g. {"gin configs": gin.config_str()}): a worker with another batch size, schedule or
    data trains along in the same all-reduces without a word (one with fewer steps ends,
    and the others then fail). Every worker learns which differ, and all stop in one line."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    names = list(settings)
    # Each setting's digest, 40 bits: summed over the replicas exactly in float64.
    mine = tf.constant([int(hashlib.sha256(json.dumps(settings[n], sort_keys=True,
                                                      default=str).encode()).hexdigest()[:10],
                            16) for n in names], tf.float64)
    # All equal exactly when every replica's digest times the replica count is the sum;
    # a second sum tells every worker what any of them found.
    differs = tf.cast(summed_over_workers(strategy, mine) != mine * strategy.num_replicas_in_sync,
                      tf.float64)
    found = [n for n, d in zip(names, summed_over_workers(strategy, differs).numpy()) if d > 0]
    if found:
        # Which worker, and where: the first setting's text from every worker (every one
        # found the same settings, so every one takes part in this exchange).
        value = settings[found[0]]
        texts = _texts_of_workers(strategy, value if isinstance(value, str) else json.dumps(
            value, sort_keys=True, indent=1, default=str))
        where = ""
        for task, text in enumerate(texts[1:], 1):
            if text != texts[0]:
                theirs, chiefs = _first_difference(text, texts[0])
                label = _task_label(strategy)
                where = f" ({label(task)}: {theirs}; {label(0)}: {chiefs})"
                break
        raise UserInputError(f"the workers were given different {', '.join(found)}{where}; run "
                             "the same command on every worker (the same gin files and "
                             "bindings, data and flags)")


def _task_label(strategy: tf.distribute.Strategy):
    """A training task's name in TF_CONFIG's terms, from its index (task_index)."""
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    if "chief" in cluster:
        return lambda i: "the chief" if i == 0 else f"worker {i - 1}"
    return lambda i: f"worker {i}"


def _texts_of_workers(strategy: tf.distribute.Strategy, text: str) -> list[str]:
    """Every training task's `text`, in task_index order (each worker calls this with its
    own, at the same point: two all-reduces, of the lengths, then of the bytes, each
    worker's in its own row)."""
    import numpy as np
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    tasks = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    local = strategy.num_replicas_in_sync // tasks  # (every worker has as many replicas)
    me = worker_info(strategy)[0]
    data = np.frombuffer(text.encode("utf-8"), np.uint8)
    lengths = np.zeros(tasks)
    lengths[me] = len(data)
    lengths = np.rint(summed_over_workers(strategy, tf.constant(lengths)).numpy() / local)
    rows = np.zeros((tasks, int(lengths.max())))
    rows[me, :len(data)] = data
    rows = np.rint(summed_over_workers(strategy, tf.constant(rows)).numpy() / local)
    return [bytes(row[:int(n)].astype(np.uint8)).decode("utf-8", "replace")
            for row, n in zip(rows, lengths)]


def _first_difference(text: str, other: str, width: int = 80) -> tuple[str, str]:
    """The first line of `text` that `other` lacks and the line of `other` in its place
    (blank and comment lines left out, a line's separating comma too), each quoted and cut
    to `width` characters; "nothing" where one has no line there."""
    import difflib

    def lines(t):  # (JSON's items, gin's lists: one each, its comma the text's form)
        return [line.strip().removesuffix(",") for line in t.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]

    def shown(line):
        return repr(line if len(line) <= width else line[:width - 3] + "...")

    a, b = lines(text), lines(other)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            return (shown(a[i1]) if i1 < i2 else "nothing",
                    shown(b[j1]) if j1 < j2 else "nothing")
    return "the same lines in another order", "these"


def summed_over_workers(strategy: tf.distribute.Strategy, value: tf.Tensor) -> tf.Tensor:
    """`value` summed over every replica of every worker (in a tf.function: run eagerly, a
    collective strategy logs a warning about its overhead each time; one per strategy, as
    one made per call logged TensorFlow's retracing warning at a fine-tuning's fifth)."""
    summed = getattr(strategy, "_electra_tf_sum", None)  # (kept with it, freed with it)
    if summed is None:
        summed = tf.function(lambda x: strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(x,)), axis=None),
            reduce_retracing=True)
        strategy._electra_tf_sum = summed
    return summed(tf.convert_to_tensor(value))


def task_index(cluster: dict, task_type: str, task_id: int) -> int:
    """A training task's place among all of them, as tf.distribute numbers them: the chief
    (when the cluster has one) 0, then the workers. (A worker's own task_id restarts at 0
    beside a chief: fed by it, worker 0 read the chief's share of the data.)"""
    if task_type == "chief":
        return 0
    if task_type != "worker":
        raise UserInputError(f"TF_CONFIG's task type {task_type!r} does not train; give the "
                             "training tasks type 'chief' or 'worker'")
    return task_id + (1 if "chief" in cluster else 0)


def checkpoint_directory(model_dir: str, strategy: tf.distribute.Strategy) -> str:
    """Where this worker writes checkpoints: the model dir for the chief, a scratch dir
    inside it for other workers."""
    task_id, chief = worker_info(strategy)
    return model_dir if chief else scratch_directory(model_dir, task_id)


def scratch_directory(model_dir: str, worker: int) -> str:
    """Worker `worker`'s (not the chief's) checkpoints: its own input pipeline's position."""
    return os.path.join(model_dir, f".worker-{worker}-scratch")


def num_chips(strategy: tf.distribute.Strategy, device: str | None = None) -> int:
    """Accelerator chips (or CPU replicas) taking part: the replica count, but on TPU v2 and
    v3, whose chips each hold two TensorCores, each core a replica (`device`: its
    device_description)."""
    return chips(strategy.num_replicas_in_sync, device)


def chips(replicas: int, device: str | None) -> int:
    """The chips `replicas` replicas run on (see num_chips)."""
    if device in ("TPU v2", "TPU v3"):
        return max(1, replicas // 2)
    return replicas


def device_description(strategy: tf.distribute.Strategy) -> str | None:
    """A description of the accelerator (its name, e.g. "NVIDIA H100 80GB HBM3" or "TPU
    v4"), for looking up its peak FLOP/s; None on CPUs."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        kind = (os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("ACCELERATOR_TYPE")
                or _gce_accelerator_type())
        return f"TPU {kind.split('-')[0]}" if kind else None
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name")


def _gce_accelerator_type() -> str | None:
    """A Cloud TPU VM's accelerator type ("v4-8"), from the VM's metadata server (TPU VMs
    keep it there, not always in the environment); None off Google Cloud."""
    import urllib.request
    request = urllib.request.Request(
        "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
        "accelerator-type", headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.read().decode().strip() or None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


_TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": '
                      '{"type": "worker", "index": 0}}')


def _check_tf_config(text: str) -> tuple[str, str, int, int] | None:
    """One line for a TF_CONFIG that is not JSON, has no cluster, or whose task is not one
    of the cluster's training tasks (TensorFlow's resolver and strategy fail on each with a
    traceback). Returns (this task's address, type, index, the number of training tasks),
    or None without a task (a one-worker TF_CONFIG)."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserInputError(f"TF_CONFIG is not JSON ({e}); set it to e.g. "
                             f"{_TF_CONFIG_EXAMPLE}") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise UserInputError(f"TF_CONFIG has no \"cluster\" object; set it to e.g. "
                             f"{_TF_CONFIG_EXAMPLE}")
    cluster = {}  # job -> {index: address} (TensorFlow takes a list or such a mapping)
    for job, addresses in config["cluster"].items():
        if isinstance(addresses, list):
            addresses = dict(enumerate(addresses))
        elif isinstance(addresses, dict) and all(str(k).isdigit() for k in addresses):
            addresses = {int(k): a for k, a in addresses.items()}
        else:
            addresses = None
        if addresses is None or not all(isinstance(a, str) and a.rpartition(":")[2].isdigit()
                                        for a in addresses.values()):
            raise UserInputError(f"TF_CONFIG's cluster {job!r} is "
                                 f"{json.dumps(config['cluster'][job])}, not a list of "
                                 f"\"host:port\" addresses; set it to e.g. {_TF_CONFIG_EXAMPLE}")
        cluster[job] = addresses
    tasks = sum(len(cluster.get(job, {})) for job in ("chief", "worker"))
    task = config.get("task")
    if task is None and tasks <= 1:
        return None
    kind = task.get("type") if isinstance(task, dict) else None
    index = task.get("index") if isinstance(task, dict) else None
    if isinstance(index, str) and index.isdigit():  # (TensorFlow reads int(index))
        index = int(index)
    if not isinstance(kind, str) or not isinstance(index, int) or isinstance(index, bool):
        raise UserInputError(f"TF_CONFIG's task is {json.dumps(task)}; give it a \"type\" and "
                             "an \"index\" (a number), e.g. {\"type\": \"worker\", \"index\": 0}")
    if kind not in ("chief", "worker"):
        raise UserInputError(f"TF_CONFIG's task type {kind!r} does not train; give every "
                             "task that runs this command type 'chief' or 'worker'")
    if kind not in cluster:
        raise UserInputError(f"TF_CONFIG's task type {kind!r} is not in its cluster (which "
                             f"has {', '.join(sorted(cluster))}); add it or fix the type")
    if index not in cluster[kind]:
        raise UserInputError(f"TF_CONFIG's task index {index} is not one of its cluster's "
                             f"{kind!r} indices ({', '.join(map(str, sorted(cluster[kind])))}); "
                             "give each task its place")
    if index >= len(cluster[kind]):  # a sparse cluster's: TensorFlow refuses it
        raise UserInputError(f"TF_CONFIG's task index {index} is not below the number of its "
                             f"cluster's {kind!r} addresses ({len(cluster[kind])}); number "
                             f"them 0 to {len(cluster[kind]) - 1}")
    return cluster[kind][index], kind, index, tasks


def _join_cluster(task: tuple[str, str, int, int] | None,
                  log) -> tf.distribute.MultiWorkerMirroredStrategy:
    """MultiWorkerMirroredStrategy(), which starts this task's server and waits until every
    task has: said first, since TensorFlow waits without a word (for as long as a task takes
    to come). Ctrl-C stops the wait: it is in TensorFlow's C++, where Python's handler
    cannot run, so SIGINT gets its default action, which ends the process (nothing has been
    written yet). TensorFlow takes SIGTERM for itself while it waits; `kill -9` stops it."""
    if task is not None and task[3] > 1:
        log(f"{task[1]} {task[2]} of TF_CONFIG's {task[3]} training tasks, at {task[0]}: "
            "waiting for all of them to start (Ctrl-C stops)")
    main = threading.current_thread() is threading.main_thread()
    handler = (signal.signal(signal.SIGINT, signal.SIG_DFL)
               if main and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN else None)
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except tf.errors.UnknownError as e:
        if "Could not start gRPC server" not in str(e) or task is None:
            raise
        raise UserInputError(
            f"could not listen at {task[0]}, this task's address in TF_CONFIG (is another "
            "process, an earlier run, using its port?); stop that process or give the task "
            "another port") from None
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


def sum_over_replicas(context: tf.distribute.ReplicaContext | None, values):
    """`values` (a tensor or a nest) summed over the replicas in sync (all-reduce); as they
    are with one replica or outside a replica context."""
    if context is None or context.num_replicas_in_sync == 1:
        return values
    return context.all_reduce(tf.distribute.ReduceOp.SUM, values)
