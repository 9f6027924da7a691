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
import json
import os

import tensorflow as tf

from electra_tf.choices import STRATEGIES
from electra_tf.errors import UserInputError


_CREATED: dict[tuple, tf.distribute.Strategy] = {}


def create_strategy(name: str, tpu: str | None = None) -> tf.distribute.Strategy:
    """The strategy called `name` (one of STRATEGIES).

    One instance per kind and process: a second MirroredStrategy over the same devices
    numbers its collective ops from the same start as the first, and their all-reduces can
    collide ("Shape mismatch in the collective instance ...") when both have run.
    """
    if name not in STRATEGIES:
        raise UserInputError(f"--strategy={name} is not one of {', '.join(STRATEGIES)}")
    if name == "default":
        return tf.distribute.get_strategy()
    key = (name, tpu)
    if key not in _CREATED:
        _CREATED[key] = _create(name, tpu)
    return _CREATED[key]


def _create(name: str, tpu: str | None) -> tf.distribute.Strategy:
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker_mirrored":
        if "TF_CONFIG" not in os.environ:
            raise UserInputError(
                "--strategy=multi_worker_mirrored needs the TF_CONFIG environment variable "
                "describing the cluster and this worker's index; set it on every worker")
        _check_tf_config(os.environ["TF_CONFIG"])
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
    except ValueError as e:  # no --tpu and nothing in the environment names one
        raise UserInputError(
            f"--strategy=tpu found no TPU ({str(e).strip()}); pass --tpu=NAME (the TPU's "
            "name or grpc:// address, or --tpu=local on a TPU VM)") from None
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


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
        flag = tf.constant(0.0 if refused is None else 1.0)
        said = strategy.reduce(tf.distribute.ReduceOp.SUM,
                               strategy.run(lambda: tf.identity(flag)), axis=None)
        if refused is None and float(said) > 0:
            raise UserInputError(
                f"--model_dir={model_dir} is being written by another {script} (the chief "
                "found its mark); wait for it to end or stop it, or choose another "
                "--model_dir")
    if refused is not None:
        raise refused


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
        kind = os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("ACCELERATOR_TYPE")
        return f"TPU {kind.split('-')[0]}" if kind else None
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name")


_TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": '
                      '{"type": "worker", "index": 0}}')


def _check_tf_config(text: str) -> None:
    """One line for a TF_CONFIG that is not JSON or has no cluster (TensorFlow's resolver
    fails on it with a traceback)."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserInputError(f"TF_CONFIG is not JSON ({e}); set it to e.g. "
                             f"{_TF_CONFIG_EXAMPLE}") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise UserInputError(f"TF_CONFIG has no \"cluster\" object; set it to e.g. "
                             f"{_TF_CONFIG_EXAMPLE}")


def sum_over_replicas(context: tf.distribute.ReplicaContext | None, values):
    """`values` (a tensor or a nest) summed over the replicas in sync (all-reduce); as they
    are with one replica or outside a replica context."""
    if context is None or context.num_replicas_in_sync == 1:
        return values
    return context.all_reduce(tf.distribute.ReduceOp.SUM, values)
