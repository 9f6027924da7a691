"""A run's latest checkpoint as a weights-only model dir: what fine-tuning, export and
detect_replaced.py read (operative_config.gin, model_info.json, ckpt-N), without the
optimizer slots (two thirds of a checkpoint with Adam). Used to carry a model pre-trained on
a lent GPU machine back here (benchmarks/results/gpu_small_transfer.md). With --all, every
checkpoint the run keeps (step 0's random initial weights aside), for
benchmarks/finetune_pretrained.py --along_runs.

    python benchmarks/gpu/export_weights.py MODEL_DIR OUTPUT_DIR [VOCAB_FILE] [--all]
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tensorflow as tf  # noqa: E402

from electra_tf.training import checkpoints  # noqa: E402
from electra_tf.training.pretraining import MODEL_INFO, OPERATIVE_CONFIG  # noqa: E402


def main(model_dir: str, output_dir: str, vocab_file: str | None = None,
         every_checkpoint: bool = False):
    loaded = checkpoints.load_pretrainer(model_dir, vocab_file=vocab_file)
    paths = [loaded.checkpoint]
    if every_checkpoint:
        paths = list(tf.train.get_checkpoint_state(model_dir).all_model_checkpoint_paths)
        paths = [p if os.path.isabs(p) else os.path.join(model_dir, p) for p in paths
                 if not p.endswith("-0")] or paths
    os.makedirs(output_dir, exist_ok=True)
    weights = tf.train.Checkpoint(model=loaded.model)
    manager = tf.train.CheckpointManager(weights, output_dir, max_to_keep=len(paths))
    for path in paths:  # oldest first, so that the manager's latest is the run's latest
        checkpoints.read_weights(loaded.model, path, OPERATIVE_CONFIG)
        manager.save(checkpoint_number=int(path.rsplit("-", 1)[1]))
        print(f"wrote the weights of {path} to {output_dir}")
    for name in (OPERATIVE_CONFIG, MODEL_INFO):
        shutil.copy(os.path.join(model_dir, name), output_dir)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--all"]
    if len(args) not in (2, 3) or any(a.startswith("-") for a in args):
        raise SystemExit(__doc__.strip().splitlines()[-1].strip())
    main(*args, every_checkpoint="--all" in sys.argv[1:])
