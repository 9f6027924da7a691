"""ELECTRA pre-training: a masked-LM generator fills the masked positions with samples, a
discriminator tells every token replaced or original; the paper's variants beside it.

The algorithm, one step (shapes: B batch, L length, N masked slots, V vocab):

    logits  = generator(masked input) at the masked positions          [B, N, V]
    sampled = a sample of softmax(logits / temperature) (no gradient)  [B, N]
    fake    = original input with `sampled` written at the positions    [B, L]
    labels  = fake != original                                          [B, L]
    loss    = 1 * MLM(logits) + 50 * sigmoid-CE(discriminator(fake), labels)

`electra` below is exactly that; the other objectives of the paper's efficiency study
(`mlm`, `electra_15`, `replace_mlm`, `all_tokens_mlm`) and Electric are small functions
beside it. The batch is what `electra_tf.data.pipeline` yields: input_ids (masked),
input_mask, segment_ids [B, L]; masked_lm_positions, masked_lm_ids, masked_lm_weights [B, N];
example_index [B] (keys the samples; without it examples are numbered from the step).

Each loss is a weighted sum divided by a count (`loss_normalizers`: real tokens, masked
slots). A trainer that splits the global batch over replicas or micro-batches passes the
global counts, so the pieces' losses and gradients add up to the global batch's exactly.
"""

import dataclasses
import math

import keras
import tensorflow as tf
from keras import ops

from electra_tf.errors import UserInputError
from electra_tf.modeling.config import EncoderConfig
from electra_tf.modeling.encoder import Encoder
from electra_tf.modeling.layers import DiscriminatorHead, MaskedLMHead, initializer
from electra_tf.modeling.tensors import (gather_positions, sample_from_logits, sampling_logits,
                                        scatter_positions, sparse_cross_entropy)

SHARING = ("none", "embeddings", "all")
OBJECTIVES = ("electra", "mlm", "electra_15", "replace_mlm", "all_tokens_mlm", "electric")
ALGORITHMS = ("joint", "two_stage", "adversarial")
# Phases of a step: joint training, or the two stages of `two_stage`.
PHASES = ("joint", "generator", "discriminator")


# ------------------------------------------------------------------------------ losses


def weighted_mean(values, weights, normalizer=None):
    """sum(values * weights) / normalizer, the normalizer defaulting to sum(weights); a
    normalizer under 1 counts as 1 (no weight: the loss is 0)."""
    if normalizer is None:
        normalizer = tf.reduce_sum(weights)
    return tf.reduce_sum(values * weights) / tf.maximum(tf.cast(normalizer, tf.float32), 1.0)


def masked_lm_loss(logits, ids, weights, normalizer=None):
    """Cross-entropy of logits [B, N, V] against ids [B, N], averaged over weights [B, N]
    (or divided by `normalizer`)."""
    return weighted_mean(sparse_cross_entropy(logits, ids), weights, normalizer)


def replaced_token_loss(logits, labels, weights, normalizer=None):
    """Sigmoid cross-entropy of logits [B, L] against 0/1 labels, averaged over weights (or
    divided by `normalizer`)."""
    losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32),
                                                     logits=logits)
    return weighted_mean(losses, weights, normalizer)


def _token_log_prob(logits, ids):
    """log softmax(logits)[ids]: logits [..., V], ids [...] -> [...]."""
    log_probs = tf.nn.log_softmax(logits)
    return tf.gather(log_probs, ids, batch_dims=len(ids.shape))


# ------------------------------------------------------------------------------ model


class ElectraPretrainer(keras.Model):
    """Generator + discriminator of ELECTRA (and the paper's variants) with their losses.

    Args:
      discriminator: shape of the discriminator (the network that is fine-tuned).
      generator: shape of the generator (see `config.generator_config`); None for
        objectives without a generator (`mlm`) or with `uniform_generator`. With
        `sharing="all"` it must equal `discriminator` (or be None).
      objective: one of OBJECTIVES.
      sharing: "embeddings" (the official default: the whole embedding block), "none", or
        "all" (generator and discriminator are one network).
      algorithm: "joint" (the official), "two_stage" (run phase "generator" then phase
        "discriminator"; see `init_discriminator_from_generator`), or "adversarial" (the
        generator is trained by policy gradient to fool the discriminator).
      generator_weight, discriminator_weight: the loss weights. The discriminator side
        defaults to 50 (the paper) for the binary objectives (electra, electra_15,
        electric) and to 1 where it is a token-prediction loss (replace_mlm,
        all_tokens_mlm).
      learn_loss_weights: learn the balance instead: total = sum_i exp(-s_i) L_i + s_i
        (Kendall et al.'s uncertainty weighting) with s_i starting at -log(weight_i).
      temperature: sampling temperature of the generator's softmax.
      disallow_correct: never sample the original token.
      uniform_generator: sample replacements uniformly (the paper's baseline); no generator.
      adversarial_mle_weight: with `adversarial`, also train the generator with this much MLM.
      mask_prob: the pipeline's masking probability (Electric's noise ratio needs it).
      cls_id, sep_id: special ids (Electric's cloze loss skips them).
      seed: base of the stateless sampling seed; a step's seed is (seed, step).

    Call: `outputs = model(batch, step=step, training=True, phase="joint",
    normalizers=None)`; outputs is a dict with `loss` (the total to minimise),
    `generator_loss`, `discriminator_loss` and the tensors `electra_tf.modeling.metrics`
    reads. `normalizers` are the counts the losses average over (`loss_normalizers`),
    summed over the whole global batch when it is split into pieces, given as integers
    (`call_counts`).

    Example:
      >>> d = encoder_config("tiny")
      >>> model = ElectraPretrainer(d, generator_config(d, 0.25))
      >>> outputs = model(batch, step=0, training=True)
      >>> outputs["loss"]
    """

    def __init__(self, discriminator: EncoderConfig, generator: EncoderConfig | None = None,
                 objective: str = "electra", sharing: str = "embeddings",
                 algorithm: str = "joint", generator_weight: float = 1.0,
                 discriminator_weight: float | None = None, learn_loss_weights: bool = False,
                 temperature: float = 1.0, disallow_correct: bool = False,
                 uniform_generator: bool = False, adversarial_mle_weight: float = 0.0,
                 mask_prob: float = 0.15, cls_id: int = 101, sep_id: int = 102,
                 seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        _check_choice("objective", objective, OBJECTIVES)
        _check_choice("sharing", sharing, SHARING)
        _check_choice("algorithm", algorithm, ALGORITHMS)
        if algorithm != "joint" and objective != "electra":
            raise UserInputError(
                f"algorithm={algorithm} is defined for objective='electra' only (the paper's "
                f"training algorithms), not {objective!r}: train one or the other "
                f"(ablations/{algorithm}.gin or ablations/{objective}.gin)")
        if algorithm != "joint" and uniform_generator:
            raise UserInputError(f"algorithm={algorithm} trains a generator; uniform_generator "
                                 "has none: use one or the other")
        needs_generator = objective != "mlm" and not uniform_generator
        if needs_generator and generator is None and sharing != "all":
            raise UserInputError(f"objective={objective} needs a generator config; pass "
                                 "generator=generator_config(discriminator, fraction)")
        if sharing == "all" and generator is not None and generator != discriminator:
            raise UserInputError("sharing='all' makes generator and discriminator one network; "
                                 "use a generator of the discriminator's size (fraction 1.0)")
        if needs_generator and generator is not None and sharing == "none":
            # Untied, the generator embeds at its own hidden size (the official code's
            # e = h_g); its config says so, for the FLOPs and model_info.json.
            generator = dataclasses.replace(generator, embedding_size=None)
        if algorithm == "two_stage" and (generator is None or sharing == "all"
                                         or dataclasses.replace(generator, embedding_size=None)
                                         != dataclasses.replace(discriminator,
                                                                embedding_size=None)):
            differ = [f"{f.name} {getattr(generator, f.name)} against "
                      f"{getattr(discriminator, f.name)}"
                      for f in dataclasses.fields(discriminator) if generator is not None
                      and f.name != "embedding_size"
                      and getattr(generator, f.name) != getattr(discriminator, f.name)]
            width = discriminator.hidden_size
            heads = max(1, width // 64)
            why = f" (the generator's {', '.join(differ)}; its heads are its hidden size / 64)"
            message = ("algorithm='two_stage' initialises the discriminator from the generator: "
                       "use a generator of the discriminator's size (fraction 1.0) and sharing "
                       "'embeddings' or 'none'" + (why if differ else ""))
            if (discriminator.intermediate_size, discriminator.num_heads) != (4 * width, heads):
                message += ("; a generator's FFN is 4x its hidden size and its heads its hidden "
                            "size // 64 (at least 1), so the discriminator's must be too")
                message += (f" (intermediate_size={4 * width}, num_heads={heads})"
                            if width % heads == 0 else
                            f", which {width} wide cannot be: a multiple of 64 (or a width under "
                            "128)")
            raise UserInputError(message)
        if (algorithm == "two_stage" and sharing == "none"
                and discriminator.embedding_width != discriminator.hidden_size):
            raise UserInputError(
                "algorithm='two_stage' with sharing='none' copies the generator's embeddings, "
                f"as wide as its hidden size ({generator.hidden_size}), into the discriminator, "
                f"whose embeddings are {discriminator.embedding_width} wide; set "
                "pretrainer.embedding_size = None (embeddings as wide as the hidden size) or "
                "keep sharing 'embeddings'")
        if temperature <= 0:
            raise UserInputError(f"temperature={temperature} must be positive (1.0: sample from "
                                 "the generator's softmax)")
        for name, weight in (("generator_weight", generator_weight),
                             ("discriminator_weight", discriminator_weight),
                             ("adversarial_mle_weight", adversarial_mle_weight)):
            if weight is not None and not 0 <= weight < math.inf:  # (a negative one: ascent)
                raise UserInputError(f"{name}={weight} must be at least 0 and finite (a loss "
                                     "weight; the paper's: generator 1, discriminator 50)")
        if learn_loss_weights and min(generator_weight, 1.0 if discriminator_weight is None
                                      else discriminator_weight) <= 0:
            raise UserInputError("learn_loss_weights starts from the loss weights' logs: "
                                 "generator_weight and discriminator_weight must be positive")
        if objective == "electric" and sharing == "all":
            raise UserInputError("Electric's generator is a two-tower cloze model; it cannot share "
                                 "all weights with the discriminator: use sharing 'embeddings'")
        discriminator_weight_bound = discriminator_weight is not None
        if discriminator_weight is None:
            discriminator_weight = 1.0 if objective in ("replace_mlm", "all_tokens_mlm") else 50.0
        self.discriminator_config = discriminator
        self.generator_config = generator
        self.objective, self.sharing, self.algorithm = objective, sharing, algorithm
        self.generator_weight = generator_weight
        self.discriminator_weight = discriminator_weight
        self.temperature, self.disallow_correct = temperature, disallow_correct
        self._discriminator_weight_bound = discriminator_weight_bound
        self.uniform_generator = uniform_generator
        self.adversarial_mle_weight = adversarial_mle_weight
        self.mask_prob, self.cls_id, self.sep_id, self.seed = mask_prob, cls_id, sep_id, seed

        # -- networks
        self.discriminator = Encoder(discriminator, name="electra")
        shared = self.discriminator.embeddings if sharing == "embeddings" else None
        self.generator = self.generator_ltr = self.generator_rtl = None
        if objective == "mlm":
            self.generator = self.discriminator  # BERT: one network, an MLM head on it
        elif uniform_generator:
            pass
        elif sharing == "all":
            self.generator = self.discriminator
        elif objective == "electric":
            self.generator_ltr = Encoder(generator, shared, "left_to_right",
                                         name="generator_ltr")
            # Untied (sharing 'none'), each tower has its own embeddings, as in the
            # official code; the cloze head reads the left tower's table.
            self.generator_rtl = Encoder(generator, shared, "right_to_left",
                                         name="generator_rtl")
        else:
            self.generator = Encoder(generator, shared, name="generator")

        # -- heads
        gen_shape = self.generator.config if self.generator is not None else (
            self.generator_ltr.config if self.generator_ltr is not None else discriminator)
        self.generator_predictions = None
        if not uniform_generator:
            self.generator_predictions = MaskedLMHead(gen_shape, name="generator_predictions")
            in_width = gen_shape.hidden_size * (2 if objective == "electric" else 1)
            self.generator_predictions.build((None, None, in_width))
        self.discriminator_predictions = None
        if objective in ("electra", "electra_15", "electric"):
            self.discriminator_predictions = DiscriminatorHead(
                discriminator, name="discriminator_predictions")
            self.discriminator_predictions.build((None, None, discriminator.hidden_size))
        self.token_predictions = self.copy_predictions = None
        if objective in ("replace_mlm", "all_tokens_mlm"):
            self.token_predictions = MaskedLMHead(discriminator, name="token_predictions")
            self.token_predictions.build((None, None, discriminator.hidden_size))
        if objective == "all_tokens_mlm":
            self.copy_predictions = keras.layers.Dense(
                1, kernel_initializer=initializer(discriminator), name="copy_predictions")
            self.copy_predictions.build((None, None, discriminator.hidden_size))
        self.reward_baseline = None
        if algorithm == "adversarial":
            self.reward_baseline = keras.layers.Dense(
                1, kernel_initializer=initializer(discriminator), name="reward_baseline")
            self.reward_baseline.build((None, None, gen_shape.hidden_size))
        self.loss_log_scales = None
        if learn_loss_weights:
            self.loss_log_scales = self.add_weight(
                (2,), keras.initializers.Constant([-math.log(generator_weight),
                                                   -math.log(discriminator_weight)]),
                name="loss_log_scales", autocast=False)
        self.built = True

    def loss_parts(self, phase: str = "joint") -> tuple[bool, bool]:
        """Whether a call in `phase` has a generator loss and a discriminator loss (BERT's
        masked LM is its generator loss; a uniform generator has none; two-stage training's
        generator phase trains no discriminator)."""
        return (not self.uniform_generator,
                self.objective != "mlm" and phase != "generator")

    # -- pieces the objectives share

    def original_ids(self, batch):
        """The unmasked input [B, L]: masked_lm_ids written back at their positions."""
        ids, _ = scatter_positions(batch["input_ids"], batch["masked_lm_positions"],
                                   batch["masked_lm_ids"], batch["masked_lm_weights"])
        return ids

    def generator_logits(self, batch, training):
        """MLM logits [B, N, V] at the masked positions and the hidden states there."""
        if self.uniform_generator:
            shape = tf.shape(batch["masked_lm_ids"])
            return tf.zeros(tf.concat([shape, [self.discriminator_config.vocab_size]], 0)), None
        sequence = self.generator(batch["input_ids"], batch["input_mask"],
                                  batch["segment_ids"], training=training)
        hidden = gather_positions(sequence, batch["masked_lm_positions"])
        table = self.generator.embeddings.word_embeddings
        return self.generator_predictions(hidden, table), hidden

    def sample(self, logits, batch, step):
        """Replacement tokens [B, N] for the masked positions (no gradient), keyed by each
        example's `example_index` (see `tensors.sample_from_logits`)."""
        index = batch.get("example_index")
        if index is None:  # not from the pipeline: number the examples from the step
            size = tf.shape(logits, out_type=tf.int64)[0]
            index = tf.cast(step, tf.int64) * size + tf.range(size, dtype=tf.int64)
        disallow = batch["masked_lm_ids"] if self.disallow_correct else None
        return tf.stop_gradient(sample_from_logits(tf.stop_gradient(logits), self.seed, index,
                                                   self.temperature, disallow))

    def corrupt(self, batch, sampled):
        """(fake input [B, L], labels [B, L]: 1 where the token was replaced by a different
        one, written [B, L]: the masked positions, original ids [B, L])."""
        original = self.original_ids(batch)
        fake, written = scatter_positions(original, batch["masked_lm_positions"], sampled,
                                          batch["masked_lm_weights"])
        labels = tf.cast(tf.not_equal(fake, original), tf.int32)
        return fake, labels, written, original

    def cloze_logits(self, input_ids, input_mask, segment_ids, training=False):
        """Electric's two-tower cloze model: logits [B, L, V] for each position's token from
        its context. Position i reads the left tower at i - 1 and the right tower at i + 1,
        so it never sees its own token; the ends wrap around (they are [CLS] and [SEP],
        never scored)."""
        left = self.generator_ltr(input_ids, input_mask, segment_ids, training=training)
        right = self.generator_rtl(input_ids, input_mask, segment_ids, training=training)
        context = ops.concatenate([ops.roll(left, 1, axis=1), ops.roll(right, -1, axis=1)], -1)
        return self.generator_predictions(context, self.generator_ltr.embeddings.word_embeddings)

    def noise_logits(self, cloze_logits, ids):
        """log q(ids) + log(p / (1 - p)) [B, L], q the cloze model's softmax and p the
        masking probability: what Electric adds to the discriminator's energy before the
        sigmoid (noise-contrastive estimation), in training and in serving."""
        return (_token_log_prob(cloze_logits, ids)
                + math.log(self.mask_prob / (1 - self.mask_prob)))

    def discriminate(self, fake, batch, training):
        sequence = self.discriminator(fake, batch["input_mask"], batch["segment_ids"],
                                      training=training)
        return sequence

    def check_training_options(self, new_run: bool = True):
        """Refuses options that train wrongly together (or not at all) with one line; run
        before pre-training. A model trained so before these checks still loads (export,
        fine-tuning): the weights are what they are. Those added since runs recorded them
        (settings of a part the model lacks, adversarial training with all weights shared)
        are checked for a `new_run` only: a run trained so resumes (without them its resume
        would be refused as another variant)."""
        if self.objective == "mlm" and self.uniform_generator:
            raise UserInputError("objective='mlm' replaces no tokens: uniform_generator applies "
                                 "to the objectives that sample replacements; unbind it")
        if self.objective == "electric" and self.uniform_generator:
            raise UserInputError("objective='electric' scores tokens with its two-tower cloze "
                                 "generator; uniform_generator has none: use one or the other")
        if (self.objective == "mlm" or self.uniform_generator) and self.sharing != "embeddings":
            # It would train as the default does, yet be recorded as another variant.
            raise UserInputError(
                f"sharing={self.sharing!r} sets what a generator shares with the "
                "discriminator; "
                + ("objective='mlm' trains one network" if self.objective == "mlm"
                   else "uniform_generator has none")
                + ": unbind it (the default, 'embeddings', is the only one these take)")
        if self.objective == "electric" and (self.temperature != 1.0 or self.disallow_correct):
            raise UserInputError(
                "Electric's noise distribution is the generator's softmax, whose log enters "
                "its loss: pretrainer.temperature must be 1.0 and disallow_correct False")
        if self.loss_log_scales is not None and (
                self.objective == "mlm" or self.uniform_generator
                or self.algorithm in ("adversarial", "two_stage")):
            raise UserInputError(
                "learn_loss_weights balances the generator's and discriminator's losses: "
                + ("objective='mlm' has one loss" if self.objective == "mlm" else
                   "uniform_generator has no generator loss" if self.uniform_generator else
                   "algorithm='two_stage' trains one of them at a time" if
                   self.algorithm == "two_stage" else
                   "the adversarial generator's policy-gradient loss can be negative, which "
                   "drives its learned weight up without bound")
                + "; unbind it")
        if new_run and self.algorithm == "adversarial" and self.sharing == "all":
            raise UserInputError(
                "algorithm='adversarial' trains the generator to fool the discriminator; "
                "sharing='all' makes them one network, which would be trained against itself: "
                "use sharing 'embeddings' or 'none' (drop ablations/sharing_all.gin)")
        # Settings of a part the model does not have: accepted, they changed nothing, and
        # were recorded as the run's (a resume with other values was refused).
        idle, why = [], None
        if self.objective == "mlm":
            idle = [(name, value) for name, value, bound in (
                ("temperature", self.temperature, self.temperature != 1.0),
                ("disallow_correct", self.disallow_correct, self.disallow_correct),
                ("discriminator_weight", self.discriminator_weight,
                 self._discriminator_weight_bound)) if bound]
            why = "objective='mlm' samples no replacements and trains no discriminator"
        elif self.uniform_generator:
            idle = [(name, value) for name, value, bound in (
                ("temperature", self.temperature, self.temperature != 1.0),
                ("generator_weight", self.generator_weight, self.generator_weight != 1.0))
                if bound]
            why = "uniform_generator samples from no softmax and has no generator loss"
        if new_run and idle:
            raise UserInputError(
                ", ".join(f"pretrainer.{name}={value!r}" for name, value in idle)
                + (" changes nothing" if len(idle) == 1 else " change nothing")
                + f": {why}; unbind {'it' if len(idle) == 1 else 'them'}")
        if self.adversarial_mle_weight and self.algorithm != "adversarial":
            raise UserInputError(
                f"adversarial_mle_weight={self.adversarial_mle_weight} applies to "
                f"algorithm='adversarial' (this run's: '{self.algorithm}'); unbind it")

    def combine(self, generator_loss, discriminator_loss, norms):
        if self.loss_log_scales is None:
            return (self.generator_weight * generator_loss
                    + self.discriminator_weight * discriminator_loss)
        s = ops.convert_to_tensor(self.loss_log_scales)
        # The regulariser s is split evenly over the pieces of a split global batch.
        return (tf.exp(-s[0]) * generator_loss + tf.exp(-s[1]) * discriminator_loss
                + (s[0] + s[1]) / norms["parts"])

    def loss_normalizers(self, batch) -> dict:
        """The counts the losses average over, in `batch`: "tokens" (real tokens), "masked"
        (real masked slots), "candidates" (real tokens other than [CLS] and [SEP]: Electric's
        cloze loss) and "parts" (1: the pieces of the global batch), float32 scalars.

        A trainer that splits the global batch over replicas or micro-batches sums these over
        the pieces and passes them to `call`: each piece's losses are then its share of the
        global batch's mean, and the pieces' losses and gradients add up to the global
        batch's exactly.
        """
        mask = tf.cast(batch["input_mask"], tf.float32)
        ids = batch["input_ids"]
        scored = mask * tf.cast((ids != self.cls_id) & (ids != self.sep_id), tf.float32)
        return {"tokens": tf.reduce_sum(mask),
                "masked": tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32)),
                "candidates": tf.reduce_sum(scored), "parts": tf.constant(1.0)}

    # -- the step

    def call(self, batch, step=0, training=False, phase="joint", normalizers=None):
        _check_choice("phase", phase, PHASES)
        # Keras casts float inputs to the compute dtype (bfloat16 under mixed precision);
        # the loss weights stay float32.
        batch = {**batch, "masked_lm_weights": tf.cast(batch["masked_lm_weights"], tf.float32)}
        if normalizers is None:
            norms = self.loss_normalizers(batch)
        else:
            norms = {name: tf.cast(count, tf.float32) for name, count in normalizers.items()}
        return OBJECTIVE_FUNCTIONS[self.objective](self, batch, step, training, phase, norms)

    def phase_variables(self, phase: str):
        """Trainable variables of a phase: all for "joint"; the generator and its head for
        "generator"; everything but the generator for "discriminator" (it is frozen)."""
        _check_choice("phase", phase, PHASES)
        if phase == "joint":
            return self.trainable_variables
        generator_ids = {id(v) for layer in (self.generator, self.generator_predictions)
                         for v in layer.trainable_variables}
        shared_ids = {id(v) for v in self.discriminator.trainable_variables}
        if phase == "generator":
            return [v for v in self.trainable_variables if id(v) in generator_ids]
        return [v for v in self.trainable_variables
                if id(v) not in generator_ids or id(v) in shared_ids]

    def init_discriminator_from_generator(self):
        """Two-stage training's switch: the discriminator's encoder takes the generator's
        weights (same shape); shared embeddings are already the same variables."""
        targets, sources = self.discriminator.weights, self.generator.weights
        if [v.shape for v in targets] != [v.shape for v in sources]:
            raise UserInputError("the generator's weights do not match the discriminator's in "
                                 "shape (different embedding sizes?); two_stage needs equal "
                                 "shapes")
        for target, source in zip(targets, sources):
            if target is not source:
                target.assign(source)


def call_counts(normalizers: dict) -> dict:
    """`loss_normalizers`' counts (summed over pieces) as `ElectraPretrainer.call` takes them:
    integers, which Keras passes as they are. It casts a float argument to the compute dtype:
    a count over 65,504 (a global batch of more real tokens) is inf in float16, which made the
    discriminator's loss 0, and bfloat16 rounds 3,917 to 3,920."""
    return {name: tf.cast(tf.round(count), tf.int64) for name, count in normalizers.items()}


def _check_choice(name, value, choices):
    if value not in choices:
        raise UserInputError(f"{name}={value!r} is not one of {', '.join(choices)}")


# ------------------------------------------------------------------------------ objectives


def electra(model: ElectraPretrainer, batch, step, training, phase, norms, masked_only=False):
    """Replaced token detection (the paper's method); `masked_only` is ELECTRA 15%."""
    logits, gen_hidden = model.generator_logits(batch, training)
    # (uniform replacements: no generator, no loss; its zero logits' would add ln V)
    mlm = tf.constant(0.0) if model.uniform_generator else masked_lm_loss(
        logits, batch["masked_lm_ids"], batch["masked_lm_weights"], norms["masked"])
    if phase == "generator":
        return {"loss": model.generator_weight * mlm, "generator_loss": mlm,
                "discriminator_loss": tf.constant(0.0), **_mlm_outputs(batch, logits)}
    sampled = model.sample(logits, batch, step)
    fake, labels, written, _ = model.corrupt(batch, sampled)
    disc_logits = model.discriminator_predictions(model.discriminate(fake, batch, training))
    weights = tf.cast(written if masked_only else batch["input_mask"], tf.float32)
    disc = replaced_token_loss(disc_logits, labels, weights,
                               norms["masked" if masked_only else "tokens"])

    generator_loss = mlm
    if model.algorithm == "adversarial":
        # (what trains the generator, and what loss/generator reports: its masked-LM loss
        # has weight adversarial_mle_weight, 0 by default; mlm_accuracy still shows it)
        generator_loss = (_policy_gradient_loss(model, logits, gen_hidden, sampled, disc_logits,
                                                labels, batch, norms)
                          + model.adversarial_mle_weight * mlm)
    if phase == "discriminator":
        total = model.discriminator_weight * disc
    else:
        total = model.combine(generator_loss, disc, norms)
    generated = {} if model.uniform_generator else _mlm_outputs(batch, logits, sampled)
    return {"loss": total, "generator_loss": generator_loss, "discriminator_loss": disc,
            **generated, **_discriminator_outputs(disc_logits, labels, weights)}


def electra_15(model, batch, step, training, phase, norms):
    """ELECTRA 15%: the discriminator's loss only over the masked positions."""
    return electra(model, batch, step, training, phase, norms, masked_only=True)


def mlm(model, batch, step, training, phase, norms):
    """BERT: masked LM on the discriminator network, with dynamic masking."""
    logits, _ = model.generator_logits(batch, training)
    loss = masked_lm_loss(logits, batch["masked_lm_ids"], batch["masked_lm_weights"],
                          norms["masked"])
    return {"loss": model.generator_weight * loss, "generator_loss": loss,
            "discriminator_loss": tf.constant(0.0), **_mlm_outputs(batch, logits)}


def replace_mlm(model, batch, step, training, phase, norms):
    """Replace MLM: masked positions hold generator samples instead of [MASK]; the model
    predicts the original tokens there."""
    logits, _ = model.generator_logits(batch, training)
    gen = masked_lm_loss(logits, batch["masked_lm_ids"], batch["masked_lm_weights"],
                         norms["masked"])
    sampled = model.sample(logits, batch, step)
    fake, _, _, _ = model.corrupt(batch, sampled)
    hidden = gather_positions(model.discriminate(fake, batch, training),
                              batch["masked_lm_positions"])
    token_logits = model.token_predictions(hidden, model.discriminator.embeddings.word_embeddings)
    loss = masked_lm_loss(token_logits, batch["masked_lm_ids"], batch["masked_lm_weights"],
                          norms["masked"])
    return {"loss": model.combine(gen, loss, norms), "generator_loss": gen,
            "discriminator_loss": loss, **_mlm_outputs(batch, logits, sampled)}


def all_tokens_mlm(model, batch, step, training, phase, norms):
    """All-Tokens MLM: like Replace MLM, but the model predicts every input token, with a
    copy mechanism: p(original) = D * [input is original] + (1 - D) * softmax(logits)."""
    logits, _ = model.generator_logits(batch, training)
    gen = masked_lm_loss(logits, batch["masked_lm_ids"], batch["masked_lm_weights"],
                         norms["masked"])
    sampled = model.sample(logits, batch, step)
    fake, labels, _, original = model.corrupt(batch, sampled)
    sequence = model.discriminate(fake, batch, training)
    token_logits = model.token_predictions(sequence, model.discriminator.embeddings.word_embeddings)
    copy_logit = tf.cast(tf.squeeze(model.copy_predictions(sequence), -1), tf.float32)
    log_softmax_original = _token_log_prob(token_logits, original)  # [B, L]
    generate = tf.math.log_sigmoid(-copy_logit) + log_softmax_original
    log_p = tf.where(labels > 0, generate,
                     tf.math.reduce_logsumexp(
                         tf.stack([tf.math.log_sigmoid(copy_logit), generate]), axis=0))
    loss = -weighted_mean(log_p, tf.cast(batch["input_mask"], tf.float32), norms["tokens"])
    return {"loss": model.combine(gen, loss, norms), "generator_loss": gen,
            "discriminator_loss": loss, **_mlm_outputs(batch, logits, sampled)}


def electric(model, batch, step, training, phase, norms):
    """Electric: a two-tower cloze generator scores every token from its context (the left
    tower sees tokens before it, the right tower tokens after); the discriminator is an
    energy model trained with noise-contrastive estimation against that noise distribution:
    logit = head(h) + log q(token) + log(p / (1 - p)), p the masking probability."""
    original = model.original_ids(batch)
    mask = batch["input_mask"]
    cloze_logits = model.cloze_logits(original, mask, batch["segment_ids"], training)
    candidates = tf.cast(mask, tf.float32) * tf.cast(
        (original != model.cls_id) & (original != model.sep_id), tf.float32)
    cloze = masked_lm_loss(cloze_logits, original, candidates, norms["candidates"])
    logits = gather_positions(cloze_logits, batch["masked_lm_positions"])
    sampled = model.sample(logits, batch, step)
    # Noise-contrastive labels, as in the official code: every slot the noise wrote is a
    # noise sample, also where it drew the original token (ELECTRA calls those "real").
    fake, _, written, _ = model.corrupt(batch, sampled)
    labels = tf.cast(written, tf.int32)
    energy = model.discriminator_predictions(model.discriminate(fake, batch, training))
    disc_logits = energy + tf.stop_gradient(model.noise_logits(cloze_logits, fake))
    weights = tf.cast(mask, tf.float32)
    disc = replaced_token_loss(disc_logits, labels, weights, norms["tokens"])
    return {"loss": model.combine(cloze, disc, norms), "generator_loss": cloze,
            "discriminator_loss": disc, **_mlm_outputs(batch, logits, sampled),
            **_discriminator_outputs(disc_logits, labels, weights)}


OBJECTIVE_FUNCTIONS = {"electra": electra, "mlm": mlm, "electra_15": electra_15,
                       "replace_mlm": replace_mlm, "all_tokens_mlm": all_tokens_mlm,
                       "electric": electric}


def _policy_gradient_loss(model, logits, gen_hidden, sampled, disc_logits, labels, batch,
                          norms):
    """REINFORCE for the adversarial generator (the paper's appendix F). The reward at a
    masked slot is the discriminator's loss on the token there: -log P(replaced) where the
    sample differs from the original, -log P(original) where it equals it. The learned
    baseline is b = -log sigmoid(w.h) on the generator's hidden state h, fitted by
    cross-entropy to exp(-reward), the probability the discriminator gave the right
    answer."""
    positions, weights = batch["masked_lm_positions"], batch["masked_lm_weights"]
    replaced = tf.cast(gather_positions(labels, positions), tf.float32)
    reward = tf.stop_gradient(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=replaced, logits=tf.cast(gather_positions(disc_logits, positions), tf.float32)))
    baseline_logit = tf.cast(
        tf.squeeze(model.reward_baseline(tf.stop_gradient(gen_hidden)), -1), tf.float32)
    baseline = tf.nn.softplus(-baseline_logit)
    advantage = tf.stop_gradient(reward - baseline)
    log_p = _token_log_prob(sampling_logits(  # the policy sampled from
        logits, model.temperature, batch["masked_lm_ids"] if model.disallow_correct else None),
        sampled)
    baseline_loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.exp(-reward),
                                                            logits=baseline_logit)
    return (-weighted_mean(advantage * log_p, weights, norms["masked"])
            + weighted_mean(baseline_loss, weights, norms["masked"]))


def _mlm_outputs(batch, logits, sampled=None):
    out = {"mlm_logits": logits, "masked_lm_ids": batch["masked_lm_ids"],
           "masked_lm_weights": batch["masked_lm_weights"]}
    if sampled is not None:
        out["sampled_ids"] = sampled
    return out


def _discriminator_outputs(logits, labels, weights):
    return {"discriminator_logits": logits, "discriminator_labels": labels,
            "discriminator_weights": weights}
