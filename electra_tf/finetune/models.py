"""Task models: the discriminator's encoder with a fine-tuning head.

Heads (the official ELECTRA fine-tuning heads):
- `sentence`: dropout + linear on the [CLS] position (classification logits, or one
  regression value); ELECTRA has no pooler.
- `token`: linear at every position (tagging logits; no dropout, as the official
  tagging_tasks.py).
- `span`, `qa_head="electra"` (the official qa_tasks.py's, its defaults joint_prediction,
  answerable_classifier, answerable_uses_start_logits): start logits from a linear layer;
  end logits conditioned on the start, linear(gelu(dense_512([h_start; h_end]))), with
  the gold start when training and, at inference, each of the `beam_size` best starts,
  whose `beam_size` best ends make the candidate spans, scored by the start's plus the
  end's log-probability. With `answerability`, the logit that the question has an answer
  is linear(gelu(dense_512([h_CLS; sum_i softmax(start)_i h_i]))). Logits outside the
  context and [CLS] are pushed down by 1000 (the official answer_mask).
- `span`, `qa_head="bert"`: BERT's head, linear to independent start and end logits; with
  `answerability`, a linear on [CLS] for the answerable logit.
No span head has dropout (as the official QA heads).

The official answerable classifier's logit is the question's *impossibility* (its label
is_impossible); ours is trained on 1 - is_impossible, the same classifier with its sign
turned, so that both heads' `answerable_logits` mean the same.
"""

import keras
import tensorflow as tf
from keras import ops

from electra_tf.modeling.config import EncoderConfig
from electra_tf.modeling.encoder import Encoder
from electra_tf.modeling.layers import Dropout, default_initializer, gelu

HEADS = ("sentence", "token", "span")
QA_HEADS = ("electra", "bert")
QA_HIDDEN = 512  # the official qa_hidden and answerable dense layers' width
_MASKED = 1000.0  # the official answer_mask's push on logits outside the context and [CLS]
_NO_CANDIDATE = -1e9  # log-probability of the beam slots beyond a short sequence


class TaskModel(keras.Model):
    """An ELECTRA encoder (named `electra`, as the pretrainer's discriminator) and a head.

    Args:
      config: the encoder's shape.
      head: "sentence", "token" or "span".
      num_outputs: classes (1 for regression); unused by "span".
      head_dropout: dropout before the sentence head's linear layer (0.1 in the paper; the
        official token and span heads have none).
      answerability: "span" only: add the answerability logit.
      qa_head: "span" only: "electra" (the official ELECTRA head) or "bert".
      beam_size: qa_head "electra": the starts, and ends per start, kept at inference.

    Call: `model(features, training=False)` with `input_ids`, `input_mask`, `segment_ids`
    int [B, L] returns {"logits": [B, C] | [B, L, C]} or, for "span", {"start_logits",
    "end_logits": [B, L], "answerable_logits": [B]}, all float32. The ELECTRA head needs
    `start_positions` [B] when training (its end logits are those given the gold start);
    at inference it returns, instead of "end_logits", the beam: "start_top_index",
    "start_top_log_probs" [B, K] and "end_top_index", "end_top_log_probs" [B, K, K] (the
    best ends given start k), K = beam_size (slots past a shorter sequence have index >= L
    and log-probability -1e9).

    Example:
      >>> model = TaskModel(encoder_config("tiny"), "sentence", num_outputs=2)
      >>> model({"input_ids": ids, "input_mask": mask, "segment_ids": seg})["logits"].shape
      TensorShape([8, 2])
    """

    def __init__(self, config: EncoderConfig, head: str, num_outputs: int = 1,
                 head_dropout: float = 0.1, answerability: bool = False,
                 qa_head: str = "electra", beam_size: int = 20, **kwargs):
        super().__init__(**kwargs)
        if head not in HEADS:
            raise ValueError(f"head={head!r} is not one of {HEADS}")
        if qa_head not in QA_HEADS:
            raise ValueError(f"qa_head={qa_head!r} is not one of {QA_HEADS}")
        self.config, self.head, self.num_outputs = config, head, num_outputs
        self.answerability = answerability
        self.qa_head = qa_head if head == "span" else None
        self.beam_size = beam_size
        # -- layers
        self.encoder = Encoder(config, name="electra")
        with keras.name_scope("task_head"):
            self.dropout = Dropout(head_dropout, dtype="float32")
            # The official heads are dense layers without an initializer: Glorot uniform.
            # They compute in float32 under a mixed policy too: in bfloat16 a regression
            # score or a span logit would keep 8 bits (STS-B scores in steps of 1/32).
            hidden = config.hidden_size
            electra = self.qa_head == "electra"
            # ELECTRA's span head: "output" gives the start logit; "end_hidden" (over
            # [h_start; h_end]) and "end" the end logit.
            self.output_layer = _dense(1 if electra else 2 if head == "span" else num_outputs,
                                       "output", hidden)
            self.end_logits = self.end_hidden = self.end_layer = None
            self.answerable_hidden = None
            if electra:
                self.end_logits = _EndLogits(hidden, name="end_logits")
                self.end_hidden, self.end_layer = self.end_logits.hidden, self.end_logits.out
            self.answerable_layer = None
            if answerability:
                if electra:  # over [h_CLS; the start distribution's mean state]
                    self.answerable_hidden = _dense(QA_HIDDEN, "answerable_hidden",
                                                    2 * hidden)
                self.answerable_layer = _dense(1, "answerable",
                                               QA_HIDDEN if electra else hidden)
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
        if self.qa_head == "electra":
            return self._electra_span(sequence, features, training)
        logits = self.output_layer(sequence)  # [B, L, 2]
        outputs = {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
        if self.answerable_layer is not None:
            outputs["answerable_logits"] = self.answerable_layer(sequence[:, 0])[:, 0]
        return outputs

    def _electra_span(self, sequence, features, training):
        """The official joint start/end prediction (see the module docstring)."""
        length = tf.shape(sequence)[1]
        context = tf.cast(features["input_mask"] * features["segment_ids"], tf.float32)
        allowed = tf.maximum(context, tf.one_hot(0, length))  # the context and [CLS]
        outside = _MASKED * (allowed - 1.0)
        start_logits = self.output_layer(sequence)[..., 0] + outside  # [B, L]
        outputs = {"start_logits": start_logits}
        if training:
            if "start_positions" not in features:
                raise ValueError("the ELECTRA span head trains on the gold start: pass "
                                 "start_positions with training=True")
            start_state = tf.gather(sequence, features["start_positions"], batch_dims=1)
            outputs["end_logits"] = self.end_logits(sequence, start_state[:, None])[:, 0] + outside
        else:
            k = self.beam_size
            top_log_probs, top_index = _top_k(tf.nn.log_softmax(start_logits), k)  # [B, K]
            start_state = tf.gather(sequence, tf.minimum(top_index, length - 1),
                                    batch_dims=1)  # [B, K, H]
            end_logits = self.end_logits(sequence, start_state) + outside[:, None]  # [B, K, L]
            end_log_probs, end_index = _top_k(tf.nn.log_softmax(end_logits), k)  # [B, K, K]
            outputs.update(start_top_log_probs=top_log_probs, start_top_index=top_index,
                           end_top_log_probs=end_log_probs, end_top_index=end_index)
        if self.answerable_layer is not None:
            weights = tf.nn.softmax(start_logits)  # [B, L]
            start_feature = tf.einsum("bl,blh->bh", weights, sequence)
            hidden = self.answerable_hidden(tf.concat([sequence[:, 0], start_feature], -1))
            outputs["answerable_logits"] = self.answerable_layer(gelu(hidden))[:, 0]
        return outputs


class _EndLogits(keras.layers.Layer):
    """ELECTRA's end logits given a start: end(gelu(end_hidden([h_start; h_end]))) at every
    position, for each of K starts ([B, L, H] and [B, K, H] -> [B, K, L]). The
    concatenation is never built: end_hidden's kernel (one [2H, 512] kernel, as the
    official dense layer) is split into its start rows and its end rows, and each half
    multiplies its own input once. With several starts (the inference beam) one start's
    [B, L, 512] hidden layer is built at a time, not the beam's [B, K, L, 512] (for K = 20
    and L = 512, 21 MB an example instead of 420 MB). A float32 layer, so that under a
    mixed policy the kernels are read in float32 too."""

    def __init__(self, hidden_size: int, **kwargs):
        super().__init__(dtype="float32", **kwargs)
        self.hidden_size = hidden_size
        self.hidden = _dense(QA_HIDDEN, "end_hidden", 2 * hidden_size)
        self.out = _dense(1, "end", QA_HIDDEN)
        self.built = True

    def call(self, sequence, starts):
        kernel, bias = self.hidden.kernel, self.hidden.bias
        ends = tf.einsum("blh,hd->bld", sequence, kernel[self.hidden_size:]) + bias
        starts = tf.einsum("bkh,hd->kbd", starts, kernel[:self.hidden_size])  # [K, B, 512]

        def logits(start):  # [B, 512] -> [B, L]
            hidden = gelu(ends + start[:, None])
            return tf.einsum("bld,d->bl", hidden, self.out.kernel[:, 0]) + self.out.bias[0]

        if starts.shape[0] == 1:
            return logits(starts[0])[:, None]
        return tf.transpose(tf.map_fn(logits, starts, parallel_iterations=1,
                                      fn_output_signature=tf.float32), [1, 0, 2])


def _dense(units: int, name: str, fan_in: int) -> keras.layers.Dense:
    """A float32 head layer, initialised as the official dense layers without an
    initializer (Glorot uniform); `gelu` activations are applied by the caller."""
    layer = keras.layers.Dense(units, kernel_initializer=default_initializer(),
                               dtype="float32", name=name)
    layer.build((None, fan_in))
    return layer


def _top_k(log_probs, k: int):
    """tf.math.top_k over the last axis, which is first padded to at least k entries with
    _NO_CANDIDATE (their indices are >= the sequence's length)."""
    pad = tf.maximum(k - tf.shape(log_probs)[-1], 0)
    paddings = [[0, 0]] * (log_probs.shape.rank - 1) + [[0, pad]]
    return tf.math.top_k(tf.pad(log_probs, paddings, constant_values=_NO_CANDIDATE), k)
