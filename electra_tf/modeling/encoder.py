"""The ELECTRA encoder: embeddings (optionally another encoder's), a projection to the hidden
size when the embedding size differs, and a stack of transformer blocks."""

import keras
from keras import ops

from electra_tf.errors import UserInputError
from electra_tf.modeling.config import EncoderConfig
from electra_tf.modeling.layers import (Embeddings, TransformerBlock,
                                        default_initializer)

ATTENTION_KINDS = ("bidirectional", "left_to_right", "right_to_left")
_NEG = -10000.0  # BERT's additive attention mask


def attention_bias(input_mask, kind: str = "bidirectional"):
    """Additive attention bias [B, 1, L, L] (float32) from input_mask [B, L].

    `left_to_right` lets position i see positions <= i, `right_to_left` positions >= i
    (the two towers of Electric's cloze generator).
    """
    mask = ops.cast(input_mask, "float32")[:, None, None, :]  # [B, 1, 1, L]
    if kind != "bidirectional":
        length = ops.shape(input_mask)[1]
        i = ops.arange(length)[:, None]
        j = ops.arange(length)[None, :]
        causal = ops.cast(j <= i if kind == "left_to_right" else j >= i, "float32")
        mask = mask * causal[None, None]
    return (1.0 - mask) * _NEG


class Encoder(keras.layers.Layer):
    """A BERT post-LayerNorm transformer encoder with factorized embeddings.

    Args:
      config: the shape (EncoderConfig).
      embeddings: an `Embeddings` layer to use instead of creating one (weight sharing:
        ELECTRA's generator uses the discriminator's). Its width must be
        config.embedding_width.
      attention: "bidirectional", or "left_to_right"/"right_to_left" (causal towers).

    Call: `encoder(input_ids, input_mask, segment_ids, training=False)` with int [B, L]
    inputs returns the sequence output [B, L, H].

    Example:
      >>> encoder = Encoder(encoder_config("tiny"))
      >>> ids = np.array([[101, 7592, 102, 0]])
      >>> encoder(ids, ids > 0, np.zeros_like(ids)).shape
      TensorShape([1, 4, 128])
    """

    def __init__(self, config: EncoderConfig, embeddings: Embeddings | None = None,
                 attention: str = "bidirectional", **kwargs):
        super().__init__(**kwargs)
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention={attention!r} is not one of {ATTENTION_KINDS}")
        self.config = config
        self.attention = attention
        if embeddings is not None and embeddings.config.embedding_width != config.embedding_width:
            raise UserInputError(
                f"shared embeddings are {embeddings.config.embedding_width} wide but this "
                f"encoder expects embedding_size={config.embedding_width}")
        with keras.name_scope(self.name):
            self.embeddings = embeddings if embeddings is not None else Embeddings(
                config, name="embeddings")
            self.embeddings_project = None
            if config.embedding_width != config.hidden_size:
                self.embeddings_project = keras.layers.Dense(
                    config.hidden_size, kernel_initializer=default_initializer(),
                    name="embeddings_project")
                self.embeddings_project.build((None, None, config.embedding_width))
            # Attributes layer_0, layer_1, ..., not a list: Keras 3 does not make a list of
            # layers a dependency of tf.train.Checkpoint, which would then save no block.
            for i in range(config.num_layers):
                block = TransformerBlock(config, name=f"layer_{i}")
                block.build((None, None, config.hidden_size))
                setattr(self, f"layer_{i}", block)

    @property
    def blocks(self) -> list[TransformerBlock]:
        """The transformer blocks, bottom first."""
        return [getattr(self, f"layer_{i}") for i in range(self.config.num_layers)]

    def call(self, input_ids, input_mask, segment_ids, training=False):
        x = self.embeddings(input_ids, segment_ids, training=training)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        bias = attention_bias(input_mask, self.attention)
        for block in self.blocks:
            x = block(x, bias, training=training)
        return x
