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
    # Along the run: a checkpoint of the generator stage has spent the generator's FLOPs
    # only (the switch: half the run, or pretraining.two_stage_steps as bound).
    plan = str(tmp_path / "plan" / "two_stage")
    assert grid.two_stage_switch(info["two_stage"], plan) == 1
    assert grid.two_stage_switch(info["generator_1"], plan) is None
    generator, discriminator = grid.two_stage_stage_flops(
        *(EncoderConfig(**info["two_stage"][n]) for n in ("discriminator", "generator")),
        128, 0.15, info["two_stage"]["masked_positions"])
    assert generator < discriminator
    assert grid.charged_flops(info["two_stage"], 1, plan) == pytest.approx(generator * BATCH)
    assert grid.charged_flops(info["two_stage"], 2, plan) == pytest.approx(2 * charged * BATCH)
    assert grid.charged_flops(info["generator_1"], 3) == pytest.approx(3 * joint * BATCH)
    bound = tmp_path / "bound"
    bound.mkdir()
    (bound / "operative_config.gin").write_text("pretraining.two_stage_steps = 7\n")
    assert grid.two_stage_switch({**info["two_stage"], "num_train_steps": 100}, bound) == 7
    assert grid.charged_flops({**info["two_stage"], "num_train_steps": 100}, 9, bound) == (
        pytest.approx(BATCH * (7 * generator + 2 * discriminator)))
    older = {k: v for k, v in info["two_stage"].items() if k != "mask_prob"}
    with pytest.raises(SystemExit, match=r"^m/model_info.json has no mask_prob .*rerun its "):
        grid.charged_flops_per_example(older, "m")
    # The plan runs are dry runs of two steps (two-stage training needs one per stage).
    assert len(commands) == 2 and all(
        "--dry_run" in c and "NUM_TRAIN_STEPS=2" in c for c in commands)
    assert "--gin_file=ablations/two_stage.gin" in commands[1]


def test_a_model_dir_of_another_run_length_is_refused(tmp_path):
    """Another --flops_budget in the same --work_dir would resume the earlier run and go on
    with another learning-rate schedule."""
    zh_pos_study.check_run_length(str(tmp_path), 800)  # nothing there yet
    (tmp_path / "model_info.json").write_text(json.dumps({"num_train_steps": 400}))
    zh_pos_study.check_run_length(str(tmp_path), 400)
    with pytest.raises(SystemExit, match=r"holds a run of 400 steps where this budget takes "
                                         r"800; pass another --work_dir \(or delete it\)$"):
        zh_pos_study.check_run_length(str(tmp_path), 800)
