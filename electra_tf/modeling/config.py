"""Network shapes: the encoder configuration, the paper's sizes, the generator's shape.

`EncoderConfig` holds what determines an encoder's weights and computation. The sizes are
paper Table 6 (small, base, large) plus `tiny` for tests and the CPU demo. A generator is
derived from its discriminator with the official rounding: hidden size
`round(H * fraction)`, FFN `4 * hidden`, heads `max(1, hidden // 64)`, layers
`round(num_layers * layers_fraction)`.
"""

import dataclasses
import numbers

from electra_tf.errors import UserInputError


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """A BERT post-LayerNorm transformer encoder with factorized embeddings.

    Attributes:
      vocab_size: WordPiece vocabulary size V.
      hidden_size: transformer width H.
      num_layers: transformer blocks.
      num_heads: attention heads (H must be a multiple of it).
      intermediate_size: feed-forward inner width.
      embedding_size: embedding width E; a dense projection E -> H follows when E != H.
        None means E = H.
      max_position_embeddings: learned absolute positions.
      type_vocab_size: token types (segments).
      dropout_rate: dropout after embeddings, attention output and feed-forward output.
      attention_dropout_rate: dropout on attention probabilities.
      initializer_range: stddev of the truncated-normal initialiser.
      layer_norm_epsilon: LayerNorm epsilon (BERT: 1e-12).
    """
    vocab_size: int = 30522
    hidden_size: int = 256
    num_layers: int = 12
    num_heads: int = 4
    intermediate_size: int = 1024
    embedding_size: int | None = None
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    initializer_range: float = 0.02
    layer_norm_epsilon: float = 1e-12

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            if getattr(self, name) < 1:
                raise UserInputError(f"{name}={getattr(self, name)} must be at least 1")
        if self.embedding_size is not None and self.embedding_size < 1:
            raise UserInputError(f"embedding_size={self.embedding_size} must be at least 1 "
                                 "(or None: the hidden size)")
        for name in ("dropout_rate", "attention_dropout_rate", "layer_norm_epsilon",
                     "initializer_range"):  # (an imported config's null)
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise UserInputError(f"{name}={value!r} must be a number")
        # (a rate of 1 drops everything: the loss was then not finite at step 1, said as
        # the learning rate's fault; `not` also catches NaN)
        for name in ("dropout_rate", "attention_dropout_rate"):
            if not 0 <= getattr(self, name) < 1:
                raise UserInputError(f"{name}={getattr(self, name)} must be at least 0 and "
                                     "below 1 (the official 0.1)")
        for name, official in (("layer_norm_epsilon", "1e-12"), ("initializer_range", "0.02")):
            if not getattr(self, name) > 0:
                raise UserInputError(f"{name}={getattr(self, name)} must be above 0 (the "
                                     f"official {official})")
        if self.hidden_size % self.num_heads:
            raise UserInputError(f"hidden_size={self.hidden_size} is not a multiple of "
                                 f"num_heads={self.num_heads}; pick sizes that divide")

    @property
    def embedding_width(self) -> int:
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads


SIZES = {
    "tiny": dict(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512,
                 embedding_size=128),
    "small": dict(hidden_size=256, num_layers=12, num_heads=4, intermediate_size=1024,
                  embedding_size=128),
    "base": dict(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072,
                 embedding_size=768),
    "large": dict(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096,
                  embedding_size=1024),
}

# The paper's generator size for each model size (fraction of the discriminator's hidden
# size, FFN and heads).
GENERATOR_FRACTIONS = {"tiny": 0.25, "small": 0.25, "base": 1 / 3, "large": 0.25}


def encoder_config(size: str, **overrides) -> EncoderConfig:
    """The named size with any field overridden, e.g. `encoder_config("small", vocab_size=8000)`."""
    if size not in SIZES:
        raise UserInputError(f"unknown model size '{size}'; choose one of {', '.join(SIZES)}")
    return EncoderConfig(**{**SIZES[size], **overrides})


def generator_config(discriminator: EncoderConfig, hidden_fraction: float = 0.25,
                     layers_fraction: float = 1.0) -> EncoderConfig:
    """The generator's shape, derived from the discriminator's as the official code does.

    The embedding size stays the discriminator's (the embeddings are shared by default);
    the generator projects them to its own hidden size.
    """
    if not 0 < hidden_fraction <= 1 or not 0 < layers_fraction <= 1:
        raise UserInputError(f"generator fractions must be in (0, 1]; got hidden_fraction="
                             f"{hidden_fraction}, layers_fraction={layers_fraction}")
    hidden = int(round(discriminator.hidden_size * hidden_fraction))
    if hidden < 1:
        raise UserInputError(
            f"generator_hidden_fraction={hidden_fraction} gives a generator {hidden} wide "
            f"(round({discriminator.hidden_size} x {hidden_fraction})); choose a fraction of "
            f"at least 1/{discriminator.hidden_size}")
    if hidden % max(1, hidden // 64):
        raise UserInputError(
            f"generator_hidden_fraction={hidden_fraction} gives a generator "
            f"{hidden} wide (round({discriminator.hidden_size} x {hidden_fraction})) with "
            f"{hidden // 64} heads (its width // 64), which do not divide it; choose a fraction "
            "that gives a multiple of 64 (or a width under 128)")
    return dataclasses.replace(
        discriminator, hidden_size=hidden, intermediate_size=4 * hidden,
        num_heads=max(1, hidden // 64),
        num_layers=max(1, int(round(discriminator.num_layers * layers_fraction))),
        embedding_size=discriminator.embedding_width)
