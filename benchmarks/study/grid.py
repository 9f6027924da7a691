"""The study's grid: the pre-training configurations that mirror the paper (each gin files
from gin/ablations/ and bindings, over a size file) and the studies they answer. Shared by
benchmarks/study/run_study.py and benchmarks/zh_pos_study.py."""

import dataclasses
import math

from electra_tf.errors import UserInputError


@dataclasses.dataclass(frozen=True)
class Config:
    """One pre-training configuration: gin files (after the scale's size file) and bindings."""
    name: str
    title: str
    gin_files: tuple[str, ...] = ()
    bindings: tuple[str, ...] = ()


_SAME_SIZE = ("pretrainer.generator_hidden_fraction=1.0",)
CONFIGS = {c.name: c for c in (
    Config("electra", "ELECTRA (generator 1/4, embeddings shared, joint)"),
    Config("mlm", "BERT: masked LM, no generator", ("ablations/mlm.gin",)),
    Config("electra_15", "ELECTRA 15%: discriminator loss on masked positions only",
           ("ablations/electra_15.gin",)),
    Config("replace_mlm", "Replace MLM: predict originals at generator-replaced positions",
           ("ablations/replace_mlm.gin",)),
    Config("all_tokens_mlm", "All-Tokens MLM: predict every token, copy mechanism",
           ("ablations/all_tokens_mlm.gin",)),
    Config("generator_1_8", "ELECTRA, generator 1/8",
           bindings=("pretrainer.generator_hidden_fraction=0.125",)),
    Config("generator_1_2", "ELECTRA, generator 1/2", ("ablations/generator_half.gin",)),
    Config("generator_1", "ELECTRA, generator 1/1 (embeddings shared)", bindings=_SAME_SIZE),
    Config("sharing_none", "ELECTRA, generator 1/1, nothing shared",
           ("ablations/sharing_none.gin",), _SAME_SIZE),
    Config("sharing_all", "ELECTRA, generator 1/1, all weights shared",
           ("ablations/sharing_all.gin",)),
    Config("two_stage", "ELECTRA, generator 1/1, two-stage training",
           ("ablations/two_stage.gin",)),
    Config("adversarial", "ELECTRA, generator 1/4 trained adversarially (REINFORCE)",
           ("ablations/adversarial.gin",)),
)}
RANDOM_INIT = "random_init"

# study -> (title, [(config, label)]): the table's and the bar charts' grouping.
GROUPS = {
    "objective": ("Efficiency ablations (paper Table 5)", [
        ("electra", "ELECTRA"), ("all_tokens_mlm", "All-Tokens MLM"),
        ("replace_mlm", "Replace MLM"), ("electra_15", "ELECTRA 15%"), ("mlm", "BERT")]),
    "sharing": ("Weight sharing, generator 1/1 (paper Sec. 3.1)", [
        ("sharing_none", "none"), ("generator_1", "embeddings"), ("sharing_all", "all")]),
    "generator_size": ("Generator size (paper Figure 3 left)", [
        ("generator_1_8", "1/8"), ("electra", "1/4"), ("generator_1_2", "1/2"),
        ("generator_1", "1/1")]),
    "algorithm": ("Training algorithm (paper Figure 3 right)", [
        ("electra", "joint"), ("adversarial", "adversarial"), ("generator_1", "joint, gen. 1/1"),
        ("two_stage", "two-stage, gen. 1/1")]),
}


def two_stage_stage_flops(discriminator, generator, seq_length: int, mask_prob: float,
                          num_predictions: int) -> tuple[float, float]:
    """Training FLOPs per example of two-stage training's generator stage (its masked LM
    alone) and discriminator stage (the frozen generator's forward pass, the
    discriminator's training): flops.two_stage_flops_per_example."""
    from electra_tf.modeling import flops
    phases = flops.two_stage_flops_per_example(discriminator, generator, seq_length, mask_prob,
                                               max_predictions=num_predictions)
    return phases["generator"], phases["discriminator"]


def two_stage_flops_per_example(discriminator, generator, seq_length: int, mask_prob: float,
                                num_predictions: int) -> float:
    """Training FLOPs per example of two-stage training, over its two halves (the default
    switch, pretraining.two_stage_steps at half the run): the generator alone (its masked
    LM), then the discriminator on the frozen generator's samples (the generator's forward
    pass, no backward). The estimator (and model_info.json) charges
    the joint algorithm's figure, about 1.6 times this with a generator of the
    discriminator's size."""
    return sum(two_stage_stage_flops(discriminator, generator, seq_length, mask_prob,
                                     num_predictions)) / 2


def two_stage_run_flops(generator: float, discriminator: float, steps: int,
                        switch: int | None) -> float:
    """A two-stage run's FLOPs per example summed over its `steps` steps: `generator` (the
    generator stage's per example) for the steps before `switch`, `discriminator` for the
    rest; switch None: half the run, pretraining's default (steps // 2)."""
    switch = steps // 2 if switch is None else switch
    return generator * switch + discriminator * (steps - switch)


def two_stage_steps(budget_per_example: float, generator: float, discriminator: float,
                    switch: int | None) -> int:
    """The steps of a two-stage run that spend `budget_per_example` (the FLOPs budget over
    the batch size) within about a step's: with the default switch (None, half the run)
    2 x budget / (generator + discriminator); with pretraining.two_stage_steps bound, the
    switch's generator steps and then discriminator steps for what they leave."""
    if switch is None:
        return max(2, round(2 * budget_per_example / (generator + discriminator)))
    if generator * switch >= budget_per_example:
        raise UserInputError(
            f"pretraining.two_stage_steps={switch}: its generator stage alone spends "
            f"{generator * switch:.3g} FLOPs per example, the whole budget of "
            f"{budget_per_example:.3g}; bind fewer than "
            f"{math.ceil(budget_per_example / generator)} steps or raise --flops_budget")
    return switch + max(1, round((budget_per_example - generator * switch) / discriminator))


def charged_flops_per_example(info: dict, model_dir: str = "the model dir") -> float:
    """The training FLOPs per example a run is charged, from its model_info.json (and, for
    two-stage training, the switch in its operative config): the estimator's figure, except
    for two-stage training, charged its two stages (the generator stage's figure before the
    switch, the discriminator stage's after it; two_stage_switch) over the run, where the
    run reports the joint algorithm's figure."""
    if info.get("algorithm") != "two_stage":
        return info["train_flops_per_example"]
    generator, discriminator = _stage_flops(info, model_dir)
    steps = info["num_train_steps"]
    return two_stage_run_flops(generator, discriminator, steps,
                               two_stage_switch(info, model_dir)) / steps


def _stage_flops(info: dict, model_dir: str) -> tuple[float, float]:
    if "mask_prob" not in info:
        raise SystemExit(f"{model_dir}/model_info.json has no mask_prob (written by an older "
                         f"run_pretraining.py); rerun its command to resume, which rewrites it")
    from electra_tf.modeling.config import EncoderConfig
    return two_stage_stage_flops(
        EncoderConfig(**info["discriminator"]), EncoderConfig(**info["generator"]),
        info["max_seq_length"], info["mask_prob"], info["masked_positions"])


def two_stage_switch(info: dict, model_dir: str) -> int | None:
    """The step a two-stage run switches to its discriminator (pretraining.two_stage_steps
    in its operative config, else as its model_info.json records it, else half the run);
    None for other algorithms."""
    if info.get("algorithm") != "two_stage":
        return None
    import os
    import re
    try:
        with open(os.path.join(model_dir, "operative_config.gin")) as f:
            bound = re.search(r"^pretraining\.two_stage_steps = (\d+)$", f.read(), re.M)
    except FileNotFoundError:
        bound = None
    if bound:
        return int(bound.group(1))
    return info.get("two_stage_steps") or info["num_train_steps"] // 2


def charged_flops(info: dict, step: int, model_dir: str = "the model dir") -> float:
    """The training FLOPs a run is charged up to `step`: for two-stage training each stage's
    own steps (a checkpoint in the generator stage has spent no discriminator FLOPs),
    otherwise the estimator's per-example figure."""
    batch = info["train_batch_size"]
    switch = two_stage_switch(info, model_dir)
    if switch is None:
        return charged_flops_per_example(info, model_dir) * batch * step
    generator, discriminator = _stage_flops(info, model_dir)
    return batch * (generator * min(step, switch) + discriminator * max(0, step - switch))
