"""Pre-training metrics, under the TensorBoard tags of ARCHITECTURE.md.

`PretrainingMetrics.update(outputs)` reads the dict an `ElectraPretrainer` call returns;
`result()` gives {tag: value} for the steps since the last `reset()`.
"""

import keras
import tensorflow as tf

# The AUC is taken over logits clipped to [-AUC_LOGIT_RANGE, AUC_LOGIT_RANGE] and mapped
# linearly onto [0, 1], at 401 thresholds (a tenth of a logit apart): the probabilities
# themselves can all lie under 0.005, the first of Keras' 200 evenly spaced thresholds
# (Electric's adds log q(x) + log(p / (1 - p)) to the logit, about -12), where the AUC read
# 0.5 at every step. The area depends only on the scores' order, which the map keeps.
AUC_LOGIT_RANGE = 20.0


class PretrainingMetrics:
    """Running means of the losses and accuracies, and the discriminator's AUC, precision
    and recall at probability 0.5, each weighted by real tokens (or real masked slots)."""

    def __init__(self):
        mean = keras.metrics.Mean
        self.metrics = {
            "loss/total": mean(), "loss/generator": mean(), "loss/discriminator": mean(),
            "generator/mlm_accuracy": mean(), "generator/sampled_accuracy": mean(),
            "discriminator/accuracy": mean(), "discriminator/replaced_fraction": mean(),
            "discriminator/auc": keras.metrics.AUC(num_thresholds=401),
            "discriminator/precision": keras.metrics.Precision(thresholds=0.5),
            "discriminator/recall": keras.metrics.Recall(thresholds=0.5),
        }
        self._updated = set()  # tags the objective produces (known once update is traced)

    @property
    def variables(self):
        return [v for m in self.metrics.values() for v in m.variables]

    def update(self, outputs: dict, parts=(True, True)):
        """Both updates from one call's outputs (one batch, not split into pieces); `parts`
        as in update_losses."""
        self.update_losses(outputs["loss"], outputs["generator_loss"],
                           outputs["discriminator_loss"], parts=parts)
        self.update_predictions(outputs)

    def update_losses(self, total, generator, discriminator, keep=None,
                      parts=(True, True)):
        """The step's losses, once per step (a trainer that splits the batch over replicas or
        micro-batches sums the pieces' losses first).

        keep: optional scalar bool tensor; where False the update adds nothing, even if the
        values are not finite. A weight of 0 instead of a `tf.cond`: under XLA on a GPU
        every conditional makes the host wait for the device to read its predicate.
        parts: whether the generator's and the discriminator's losses exist
        (`ElectraPretrainer.loss_parts`): a loss the objective or phase lacks (BERT's
        discriminator, a uniform generator's) is not recorded, rather than as a constant.
        """
        m = self.metrics
        weight = None if keep is None else tf.cast(keep, tf.float32)
        for tag, value, present in (("loss/total", total, True),
                                    ("loss/generator", generator, parts[0]),
                                    ("loss/discriminator", discriminator, parts[1])):
            if present:
                self._updated.add(tag)
                m[tag].update_state(*_kept(keep, value), sample_weight=weight)

    def update_predictions(self, outputs: dict, keep=None):
        """Accuracies, AUC, precision, recall and replaced fraction of one batch or piece of
        one (weighted by its real masked slots or tokens); `keep` as in update_losses."""
        m = self.metrics
        if "mlm_logits" in outputs:  # (not a uniform generator's: it has none)
            self._updated.add("generator/mlm_accuracy")
            ids = outputs["masked_lm_ids"]
            weights, = _kept(keep, outputs["masked_lm_weights"])
            predicted = tf.argmax(outputs["mlm_logits"], -1, output_type=ids.dtype)
            m["generator/mlm_accuracy"].update_state(tf.cast(predicted == ids, tf.float32),
                                                     sample_weight=weights)
        if "sampled_ids" in outputs and "mlm_logits" in outputs:
            self._updated.add("generator/sampled_accuracy")
            m["generator/sampled_accuracy"].update_state(
                tf.cast(tf.cast(outputs["sampled_ids"], ids.dtype) == ids, tf.float32),
                sample_weight=weights)
        if "discriminator_logits" in outputs:
            self._updated.update(t for t in m if t.startswith("discriminator/"))
            logits = tf.cast(outputs["discriminator_logits"], tf.float32)
            labels, weights, logits = _kept(
                keep, tf.cast(outputs["discriminator_labels"], tf.float32),
                outputs["discriminator_weights"], logits)
            probs = tf.sigmoid(logits)
            correct = tf.cast(tf.equal(tf.cast(probs > 0.5, tf.float32), labels), tf.float32)
            m["discriminator/accuracy"].update_state(correct, sample_weight=weights)
            m["discriminator/replaced_fraction"].update_state(labels, sample_weight=weights)
            scores = (tf.clip_by_value(logits, -AUC_LOGIT_RANGE, AUC_LOGIT_RANGE)
                      + AUC_LOGIT_RANGE) / (2 * AUC_LOGIT_RANGE)
            m["discriminator/auc"].update_state(labels, scores, sample_weight=weights)
            for name in ("precision", "recall"):
                m["discriminator/" + name].update_state(labels, probs, sample_weight=weights)

    def result(self) -> dict:
        """{tag: float} of the metrics the objective's outputs feed; the AUC only where it is
        defined, both replaced and original tokens seen (ELECTRA 15% scores only masked
        positions, all of which an early generator replaces: Keras' AUC then reads 0, as
        if the discriminator ranked every token backwards)."""
        out = {tag: float(metric.result()) for tag, metric in self.metrics.items()
               if tag in self._updated}
        if "discriminator/auc" in out:
            auc = self.metrics["discriminator/auc"]
            positives = float(auc.true_positives[0] + auc.false_negatives[0])
            negatives = float(auc.false_positives[0] + auc.true_negatives[0])
            if not (positives > 0 and negatives > 0):
                del out["discriminator/auc"]
        return out

    def reset(self):
        for metric in self.metrics.values():
            metric.reset_state()


def _kept(keep, *tensors) -> list:
    """The tensors, or zeros of their shapes where the scalar `keep` is False (None: keep)."""
    if keep is None:
        return list(tensors)
    return [tf.where(keep, t, tf.zeros_like(t)) for t in tensors]
