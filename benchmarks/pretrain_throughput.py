r"""End-to-end pre-training throughput on CPU: examples/s of our whole training run (the
tf.data pipeline reading and masking real TFRecords, the trainer, orbit) for tiny, small and
base, in the same run as transformers' PyTorch ELECTRA and TF Model Garden's
ElectraPretrainer at the same sizes and batch.

    .venv/bin/python benchmarks/pretrain_throughput.py          # about an hour on 2 cores
    .venv/bin/python benchmarks/pretrain_throughput.py --sizes=tiny --repeats=1 \
        --results_name=pretrain_throughput_check   # a check

The peers are timed on their bare train step over one batch held in memory (no input
pipeline at all: their best case), so the ratios are a lower bound of ours against theirs.
It is benchmarks/model_step.py with other defaults: `ours_run` runs
`electra_tf.training.pretraining.run_pretraining` with the size's gin file and times its
loops (the first, which traces, is left out). Results:
benchmarks/results/pretrain_throughput.{json,md}.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import model_step  # noqa: E402  (its flags and workers)
flags.adopt_module_key_flags(model_step)  # (--helpshort lists them)

if __name__ == "__main__":
    model_step.FLAGS.set_default("sizes", ["tiny", "small", "base"])
    model_step.FLAGS.set_default("frameworks", ["ours_run", "pytorch", "model_garden"])
    model_step.FLAGS.set_default("results_name", "pretrain_throughput")
    model_step.common.run(model_step.main)
