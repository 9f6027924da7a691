"""The gin boundary of the models: `pretrainer` builds an ElectraPretrainer from plain
values, so gin files (gin/tiny.gin .. large.gin, gin/ablations/) can bind every shape and
option, and a custom size is a few bindings."""

import inspect
import re

import gin

from electra_tf import gin_files
from electra_tf.errors import UserInputError
from electra_tf.modeling.config import EncoderConfig, generator_config
from electra_tf.modeling.pretrainer import ElectraPretrainer


@gin.configurable("pretrainer", denylist=["vocab_size", "cls_id", "sep_id", "seed"])
def build_pretrainer(vocab_size: int = 30522, hidden_size: int = 256, num_layers: int = 12,
                     num_heads: int = 4, intermediate_size: int = 1024,
                     embedding_size: int | None = 128, max_position_embeddings: int = 512,
                     dropout_rate: float = 0.1, attention_dropout_rate: float = 0.1,
                     type_vocab_size: int = 2, layer_norm_epsilon: float = 1e-12,
                     generator_hidden_fraction: float = 0.25,
                     generator_layers_fraction: float = 1.0, objective: str = "electra",
                     sharing: str = "embeddings", algorithm: str = "joint",
                     generator_weight: float = 1.0, discriminator_weight: float | None = None,
                     learn_loss_weights: bool = False, temperature: float = 1.0,
                     disallow_correct: bool = False, uniform_generator: bool = False,
                     adversarial_mle_weight: float = 0.0, mask_prob: float = 0.15,
                     cls_id: int = 101, sep_id: int = 102, seed: int = 0) -> ElectraPretrainer:
    """An ElectraPretrainer; the defaults are ELECTRA-Small. `vocab_size`, the special ids
    and the seed come from the data and the run, not from gin. See ElectraPretrainer for the
    options."""
    _check_types(locals())
    try:
        discriminator = EncoderConfig(
            vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers,
            num_heads=num_heads, intermediate_size=intermediate_size,
            embedding_size=embedding_size, max_position_embeddings=max_position_embeddings,
            dropout_rate=dropout_rate, attention_dropout_rate=attention_dropout_rate,
            type_vocab_size=type_vocab_size, layer_norm_epsilon=layer_norm_epsilon)
        generator = None
        if objective != "mlm" and not uniform_generator:
            generator = generator_config(discriminator, generator_hidden_fraction,
                                         generator_layers_fraction)
            if (sharing == "all" and generator_hidden_fraction == 1
                    and generator_layers_fraction == 1):
                generator = discriminator
        return ElectraPretrainer(
            discriminator, generator, objective=objective, sharing=sharing,
            algorithm=algorithm, generator_weight=generator_weight,
            discriminator_weight=discriminator_weight, learn_loss_weights=learn_loss_weights,
            temperature=temperature, disallow_correct=disallow_correct,
            uniform_generator=uniform_generator, adversarial_mle_weight=adversarial_mle_weight,
            mask_prob=mask_prob, cls_id=cls_id, sep_id=sep_id, seed=seed)
    except UserInputError as e:
        raise as_bound(e) from None


def as_bound(error: UserInputError) -> UserInputError:
    """A model's refusal of a value ("num_heads=0 must be at least 1"), named as gin binds
    it (pretrainer.num_heads=0)."""
    name = re.match(r"(\w+)=", str(error))
    if name and name[1] in _MACROS:  # (what gin/pretraining.gin binds it by)
        value, rest = str(error)[len(name[0]):].split(" ", 1)
        return UserInputError(f"{_MACROS[name[1]]}={value} (pretrainer.{name[1]}) {rest}")
    if name and name[1] in inspect.signature(build_pretrainer).parameters:
        return UserInputError(f"pretrainer.{error}")
    return error


_MACROS = {"objective": "OBJECTIVE", "mask_prob": "MASK_PROB"}


# The encoder's size settings (model_info.json's discriminator and generator).
SHAPE_KEYS = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "embedding_size",
              "max_position_embeddings", "type_vocab_size")
_INTEGERS = SHAPE_KEYS
_NUMBERS = ("dropout_rate", "attention_dropout_rate", "layer_norm_epsilon",
            "generator_hidden_fraction", "generator_layers_fraction", "generator_weight",
            "discriminator_weight", "temperature", "adversarial_mle_weight", "mask_prob")
_FLAGS = ("learn_loss_weights", "disallow_correct", "uniform_generator")
_MAY_BE_NONE = ("embedding_size", "discriminator_weight")


def _check_types(values: dict):
    gin_files.check_types("pretrainer", values, integers=_INTEGERS, numbers=_NUMBERS,
                          flags=_FLAGS, may_be_none=_MAY_BE_NONE)
