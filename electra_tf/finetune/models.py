"""Task models: the discriminator's encoder with a fine-tuning head.

Heads (the official ELECTRA fine-tuning heads):
- `sentence`: dropout + linear on the [CLS] position (classification logits, or one
  regression value); ELECTRA has no pooler.
- `token`: linear at every position (tagging logits; no dropout, as the official
  tagging_tasks.py).
- `span`: linear to start and end logits at every position; with `answerability`, also a
  linear on [CLS] giving the logit that the question has an answer (SQuAD 2.0; BERT's
  head, without dropout as the official qa_tasks.py's heads).
"""

import keras
from keras import ops

from electra_tf.modeling.config import EncoderConfig
from electra_tf.modeling.encoder import Encoder
from electra_tf.modeling.layers import Dropout, default_initializer

HEADS = ("sentence", "token", "span")


class TaskModel(keras.Model):
    """An ELECTRA encoder (named `electra`, as the pretrainer's discriminator) and a head.

    Args:
      config: the encoder's shape.
      head: "sentence", "token" or "span".
      num_outputs: classes (1 for regression); unused by "span".
      head_dropout: dropout before the sentence head's linear layer (0.1 in the paper; the
        official token and span heads have none).
      answerability: "span" only: add the answerability logit.

    Call: `model(features, training=False)` with `input_ids`, `input_mask`, `segment_ids`
    int [B, L] returns {"logits": [B, C] | [B, L, C]} or, for "span", {"start_logits",
    "end_logits": [B, L], "answerable_logits": [B]}, all float32.

    Example:
      >>> model = TaskModel(encoder_config("tiny"), "sentence", num_outputs=2)
      >>> model({"input_ids": ids, "input_mask": mask, "segment_ids": seg})["logits"].shape
      TensorShape([8, 2])
    """

    def __init__(self, config: EncoderConfig, head: str, num_outputs: int = 1,
                 head_dropout: float = 0.1, answerability: bool = False, **kwargs):
        super().__init__(**kwargs)
        if head not in HEADS:
            raise ValueError(f"head={head!r} is not one of {HEADS}")
        self.config, self.head, self.num_outputs = config, head, num_outputs
        self.answerability = answerability
        # -- layers
        self.encoder = Encoder(config, name="electra")
        with keras.name_scope("task_head"):
            self.dropout = Dropout(head_dropout, dtype="float32")
            # The official heads are dense layers without an initializer: Glorot uniform.
            # They compute in float32 under a mixed policy too: in bfloat16 a regression
            # score or a span logit would keep 8 bits (STS-B scores in steps of 1/32).
            self.output_layer = keras.layers.Dense(
                2 if head == "span" else num_outputs, kernel_initializer=default_initializer(),
                dtype="float32", name="output")
            self.output_layer.build((None, config.hidden_size))
            self.answerable_layer = None
            if answerability:
                self.answerable_layer = keras.layers.Dense(
                    1, kernel_initializer=default_initializer(), dtype="float32",
                    name="answerable")
                self.answerable_layer.build((None, config.hidden_size))
        self.built = True

    def call(self, features, training=False):
        sequence = self.encoder(features["input_ids"], features["input_mask"],
                                features["segment_ids"], training=training)  # [B, L, H]
        sequence = ops.cast(sequence, "float32")  # the heads' input, as they compute
        if self.head == "sentence":
            cls = self.dropout(sequence[:, 0], training=training)
            return {"logits": self.output_layer(cls)}
        if self.head == "token":
            return {"logits": self.output_layer(sequence)}
        logits = self.output_layer(sequence)  # [B, L, 2]
        outputs = {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
        if self.answerable_layer is not None:
            outputs["answerable_logits"] = self.answerable_layer(sequence[:, 0])[:, 0]
        return outputs
