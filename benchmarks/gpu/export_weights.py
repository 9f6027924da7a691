"""A run's latest checkpoint as a weights-only model dir: what fine-tuning, export and
detect_replaced.py read (operative_config.gin, model_info.json, ckpt-N), without the
optimizer slots (two thirds of a checkpoint with Adam). Used to carry a model pre-trained on
a lent GPU machine back here (benchmarks/results/gpu_small_transfer.md).

    python benchmarks/gpu/export_weights.py MODEL_DIR OUTPUT_DIR [VOCAB_FILE]
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tensorflow as tf  # noqa: E402

from electra_tf.training import checkpoints  # noqa: E402
from electra_tf.training.pretraining import MODEL_INFO, OPERATIVE_CONFIG  # noqa: E402


def main(model_dir: str, output_dir: str, vocab_file: str | None = None):
    loaded = checkpoints.load_pretrainer(model_dir, vocab_file=vocab_file)
    step = int(loaded.checkpoint.rsplit("-", 1)[1])
    os.makedirs(output_dir, exist_ok=True)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=loaded.model), output_dir, 1)
    manager.save(checkpoint_number=step)
    for name in (OPERATIVE_CONFIG, MODEL_INFO):
        shutil.copy(os.path.join(model_dir, name), output_dir)
    print(f"wrote the weights of {loaded.checkpoint} to {output_dir}")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__.strip().splitlines()[-1].strip())
    main(*sys.argv[1:])
