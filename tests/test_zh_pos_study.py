"""How benchmarks/zh_pos_study.py plans each pre-training's steps from its FLOPs budget: a
--dry_run per configuration (real run_pretraining.py processes on real TFRecords), two-stage
training charged its two stages rather than the joint figure the run reports."""

import json
import os
import sys

import pytest

from conftest import ROOT
from electra_tf.modeling.config import EncoderConfig

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "study"))
import grid  # noqa: E402
import zh_pos_study  # noqa: E402

BUDGET, BATCH = 1e13, 8


def test_two_stage_is_charged_its_stages_not_the_joint_figure(tmp_path, austen_data):
    data, _ = austen_data
    zh_pos_study.FLAGS(["zh_pos_study", f"--work_dir={tmp_path}", "--max_seq_length=128",
                        f"--train_batch_size={BATCH}", f"--flops_budget={BUDGET}"])
    try:
        commands = []
        steps = {name: zh_pos_study.planned_steps(name, data, commands)
                 for name in ("generator_1", "two_stage")}
    finally:
        zh_pos_study.FLAGS.unparse_flags()
    info = {name: json.loads((tmp_path / "plan" / name / "model_info.json").read_text())
            for name in steps}
    # Same networks (a generator as wide as the discriminator); the run reports the joint
    # algorithm's FLOPs for both.
    assert info["two_stage"]["algorithm"] == "two_stage"
    assert info["two_stage"]["generator"] == info["generator_1"]["generator"]
    joint = info["generator_1"]["train_flops_per_example"]
    assert info["two_stage"]["train_flops_per_example"] == joint
    assert steps["generator_1"] == round(BUDGET / (joint * BATCH))
    # Two-stage: half the steps train the generator alone, half the discriminator on the
    # frozen generator's samples (its forward pass only): about 1.6 times cheaper per step.
    charged = grid.two_stage_flops_per_example(
        *(EncoderConfig(**info["two_stage"][n])
          for n in ("discriminator", "generator")),
        128, 0.15, info["two_stage"]["masked_positions"])
    assert 1.4 < joint / charged < 1.8
    assert steps["two_stage"] == round(BUDGET / (charged * BATCH))
    assert steps["two_stage"] / steps["generator_1"] == pytest.approx(joint / charged, rel=1e-2)
    assert grid.charged_flops_per_example(info["two_stage"]) == charged
    assert grid.charged_flops_per_example(info["generator_1"]) == joint
    older = {k: v for k, v in info["two_stage"].items() if k != "mask_prob"}
    with pytest.raises(SystemExit, match=r"^m/model_info.json has no mask_prob .*rerun its "):
        grid.charged_flops_per_example(older, "m")
    # The plan runs are dry runs of two steps (two-stage training needs one per stage).
    assert len(commands) == 2 and all(
        "--dry_run" in c and "NUM_TRAIN_STEPS=2" in c for c in commands)
    assert "--gin_file=ablations/two_stage.gin" in commands[1]
