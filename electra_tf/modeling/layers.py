"""The BERT building blocks ELECTRA uses: embeddings, self-attention, the transformer block,
and the two pre-training heads.

Everything is exact BERT: erf GELU, LayerNorm epsilon from the config, truncated-normal
initialisation, post-LayerNorm residual blocks. Kernels are [in, out] as in TF1 checkpoints.
Under a mixed-precision policy the attention softmax, LayerNorm and the feed-forward's bias
add and GELU run in float32, and the heads return float32 logits.

In training outside an XLA-compiled step (the CPU's default), the GELU and the dropout
masks' application run as small XLA programs (`xla_elementwise`).

Layers that build their sublayers in `__init__` do so inside their own name scope, so every
variable has a unique path that names its network (`electra/layer_0/attention/query/kernel`,
`generator/layer_0/...`), which weight-decay exclusion and layer-wise learning rates key on.
"""

import contextlib
import math
import os

import keras
import tensorflow as tf
from keras import ops
from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext

from electra_tf.errors import UserInputError
from electra_tf.modeling.config import EncoderConfig


_SQRT_HALF = 0.5 ** 0.5
_INV_SQRT_2PI = (2 * math.pi) ** -0.5


@tf.custom_gradient
def gelu(x):
    """The exact (erf) GELU of BERT and ELECTRA, not the tanh approximation:
    x * Phi(x), Phi the standard normal CDF, computed as they do (with erf).

    The gradient is written out, Phi(x) + x * phi(x), reusing the forward pass's Phi and
    x / sqrt(2) (phi(x) is exp(-(x / sqrt(2))^2) / sqrt(2 pi), whose square, negation and
    exp Grappler fuses into one pass), instead of TensorFlow differentiating the composition
    of erf. On CPU, where every elementwise op is a pass over the [B, L, intermediate]
    tensor, that takes a fifth off the GELU's forward + backward (ELECTRA-Small's
    feed-forward, one thread: 38 -> 31 ms); reusing x / sqrt(2) saves one more pass.
    """
    scaled = x * _SQRT_HALF
    cdf = 0.5 * (1.0 + tf.math.erf(scaled))

    def grad(dy):
        return dy * (cdf + x * (tf.exp(-tf.square(scaled)) * _INV_SQRT_2PI))

    return x * cdf, grad


XLA_ELEMENTWISE_ENV = "ELECTRA_TF_XLA_ELEMENTWISE"


def xla_elementwise_setting() -> bool:
    """ELECTRA_TF_XLA_ELEMENTWISE read: 1 or unset is on, 0 off, anything else an error
    (the scripts check it before they start, `electra_tf.cli`)."""
    value = os.environ.get(XLA_ELEMENTWISE_ENV, "1")
    if value not in ("0", "1"):
        raise UserInputError(f"{XLA_ELEMENTWISE_ENV}={value!r} is neither 1 (the default: "
                             "XLA-compiled GELU and dropout masks) nor 0 (off); set one of them")
    return value == "1"


def xla_elementwise() -> bool:
    """Whether the GELU and the dropout masks' application being traced run as XLA-compiled
    functions: yes unless the graph is already compiled by XLA as a whole (it fuses them by
    itself there) or the environment sets ELECTRA_TF_XLA_ELEMENTWISE=0 (1 or unset: on;
    anything else is an error).

    Without XLA, TensorFlow runs each elementwise op of a chain as its own kernel, a pass
    over memory each; XLA compiles the chain into one loop. On 2 Xeon cores that takes the
    GELU's forward + backward over ELECTRA-Small's [32, 128, 1024] feed-forward from 20 to
    11 ms, and ELECTRA-Small's float32 train step runs 1.04-1.06x faster with the dropout
    masks' too (`benchmarks/model_step.py`, `ours` against `ours_plain`). Only elementwise
    chains: XLA's CPU reductions are slower than TensorFlow's (a LayerNorm through XLA was
    no faster; the GELU with its bias gradient's sum inside took longer), so those stay
    TensorFlow's. Used in training only, so inference and exported SavedModels hold no
    XLA-compiled functions.
    """
    if not xla_elementwise_setting():
        return False
    if GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return False
    return xla_compiles_for_cpu()


_XLA_CPU: list[bool] = []


def xla_compiles_for_cpu() -> bool:
    """Whether this TensorFlow build compiles XLA programs for the CPU. The tensorflow-tpu
    build does not ("could not find registered transfer manager for platform Host"): on a
    TPU VM anything outside the TPU's replicas runs without XLA. Checked once a process, by
    compiling a one-op function (eagerly, also when asked while a function is traced)."""
    if not _XLA_CPU:
        try:
            with tf.init_scope(), tf.device("/CPU:0"):
                tf.function(lambda x: x + 1, jit_compile=True)(tf.constant(0.0)).numpy()
            _XLA_CPU.append(True)
        except tf.errors.OpError:  # (NotFoundError in the tensorflow-tpu build)
            _XLA_CPU.append(False)
    return _XLA_CPU[0]


@tf.function(jit_compile=True, autograph=False)
def _gelu_forward(x):
    return x * (0.5 * (1.0 + tf.math.erf(x * _SQRT_HALF)))


@tf.function(jit_compile=True, autograph=False)
def _gelu_backward(x, dy):
    scaled = x * _SQRT_HALF
    return dy * (0.5 * (1.0 + tf.math.erf(scaled))
                 + x * (tf.exp(-tf.square(scaled)) * _INV_SQRT_2PI))


@tf.custom_gradient
def xla_gelu(x):
    """`gelu` as two XLA-compiled functions, forward and gradient (which recomputes the
    CDF from x instead of keeping it: one loop reading x and dy)."""
    return _gelu_forward(x), lambda dy: _gelu_backward(x, dy)


@tf.function(jit_compile=True, autograph=False)
def _keep_scaled(x, bits, threshold, scale):
    return x * (tf.cast(bits >= tf.constant(threshold, tf.uint16), x.dtype) * scale)


def _xla_keep(x, bits, threshold: int, scale: float):
    """x * (bits >= threshold) * scale in one XLA-compiled loop, and its gradient the same
    loop over dy (the keep mask is recomputed from the 16-bit draws instead of kept as a
    float tensor)."""

    @tf.custom_gradient
    def keep(x):
        return (_keep_scaled(x, bits, threshold, scale),
                lambda dy: _keep_scaled(dy, bits, threshold, scale))

    return keep(x)


@contextlib.contextmanager
def precision_policy(name: str):
    """Keras' global dtype policy set to `name` inside (the layers built there take it),
    the process's own put back after."""
    before = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_dtype_policy(before)


def initializer(config: EncoderConfig):
    """The official code's `create_initializer`: truncated normal, stddev 0.02."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def default_initializer():
    """What the official code's layers created without a kernel_initializer get: TF1's
    default, Glorot uniform (limit sqrt(6 / (fan_in + fan_out))). Those are
    `embeddings_project`, the discriminator's output layer and the fine-tuning output layers;
    transformers initialises them with normal(0.02) instead, which for ELECTRA-Small's
    embedding projection (128 -> 256) is a 3.6x smaller start."""
    return keras.initializers.GlorotUniform()


class GeluDense(keras.layers.Dense):
    """Dense followed by the exact GELU, with the bias add and the GELU in float32 under a
    mixed-precision policy (the matmul stays in the compute dtype).

    The same function as `Dense(activation=gelu)` (its variables and names too), but
    TensorFlow's CPU kernels for elementwise ops on bfloat16 convert element by element and
    cost more than float32's, so the bias add, GELU and their gradients are cheaper on the
    float32 copy than on bfloat16 itself (ELECTRA-Small's [32, 128, 1024] feed-forward on 2
    Xeon cores: 32 -> 21 ms forward + backward), and the pre-activation is not rounded to
    bfloat16 before the GELU. Under float32 it is Dense(activation=gelu).
    """

    def call(self, inputs, training=None):
        x = tf.nn.bias_add(tf.cast(ops.matmul(inputs, self.kernel), tf.float32),
                           tf.cast(self.bias, tf.float32))
        activation = xla_gelu if training and xla_elementwise() else gelu
        return ops.cast(activation(x), self.compute_dtype)


def _dense(units: int, config: EncoderConfig, name: str, activation=None, kernel_initializer=None):
    """A BERT dense layer; `activation` None or `gelu` (a GeluDense)."""
    layer = GeluDense if activation is gelu else keras.layers.Dense
    if activation not in (None, gelu):
        raise ValueError(f"activation={activation!r}: only None and gelu are built here")
    return layer(units, kernel_initializer=kernel_initializer or initializer(config), name=name)


def layer_norm(x, gamma, beta, epsilon: float):
    """LayerNorm over the last axis, computed in float32 and returned in x's dtype, with its
    gradient written out.

    The same function as Keras' LayerNormalization (mean and variance over the last axis,
    (x - mean) / sqrt(variance + epsilon) * gamma + beta), whose gradient TensorFlow
    otherwise builds by differentiating the moments, a dozen more elementwise passes and
    Tile ops. The written-out one is the textbook form, with g = dy * gamma and xhat the
    normalised input: dx = (g - mean(g) - xhat * mean(g * xhat)) / sqrt(variance + epsilon),
    dgamma = sum(dy * xhat), dbeta = sum(dy). On CPU that takes a third off a LayerNorm's
    forward + backward (ELECTRA-Small's [32, 128, 256] activations, 2 Xeon cores: 6.9 ->
    4.5 ms).
    """
    dtype = x.dtype

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        mean = tf.reduce_mean(x, -1, keepdims=True)
        centred = x - mean
        inverse_std = tf.math.rsqrt(
            tf.reduce_mean(tf.square(centred), -1, keepdims=True) + epsilon)
        normalized = centred * inverse_std

        def grad(dy):
            outer = list(range(len(dy.shape) - 1))
            scaled = dy * gamma
            dx = inverse_std * (scaled - tf.reduce_mean(scaled, -1, keepdims=True)
                                - normalized * tf.reduce_mean(scaled * normalized, -1,
                                                              keepdims=True))
            return dx, tf.reduce_sum(dy * normalized, outer), tf.reduce_sum(dy, outer)

        return normalized * gamma + beta, grad

    out = normalize(tf.cast(x, tf.float32), tf.cast(gamma, tf.float32),
                    tf.cast(beta, tf.float32))
    return tf.cast(out, dtype)


class LayerNormalization(keras.layers.LayerNormalization):
    """Keras' LayerNormalization (same variables, names and float32 computation under a
    mixed-precision policy) over the last axis, run through `layer_norm`'s written-out
    gradient."""

    def call(self, inputs):
        return ops.cast(layer_norm(inputs, self.gamma, self.beta, self.epsilon),
                        self.compute_dtype)


def _layer_norm(config: EncoderConfig, name: str = "LayerNorm"):
    return LayerNormalization(epsilon=config.layer_norm_epsilon, name=name)


_AUTO_SELECT = 3  # tf.random.Algorithm.AUTO_SELECT: Philox on CPU and GPU, the TPU's own
_REPLICA_STEP = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: spreads replica ids over the keys


def dropout_key(seed, replica_id=None) -> tf.Tensor:
    """The random-bit generator's key (uint64 [1]) for an int [2] dropout seed, and on a
    replica of a tf.distribute strategy its id: the seed's two 32-bit halves side by side,
    plus the replica id times a large odd constant (mod 2^64).

    Distinct seeds (a Keras SeedGenerator's [layer seed, call count]) give distinct keys, and
    so do distinct replicas. `tf.random.stateless_uniform` instead scrambles the seed into a
    key and counter with 10 Philox rounds written out as scalar operations, about 270 of
    them per draw: under XLA, 19,000 of ELECTRA-Small's 54,600 HLO train-step instructions
    (74 dropouts) for no better masks, since Philox's outputs for distinct keys are already
    independent streams.
    """
    seed = tf.bitwise.bitwise_and(tf.cast(seed, tf.int64), tf.constant(0xFFFFFFFF, tf.int64))
    key = tf.bitwise.bitwise_or(tf.bitwise.left_shift(seed[0], tf.constant(32, tf.int64)),
                                seed[1])
    key = tf.bitcast(key, tf.uint64)
    if replica_id is not None:
        key += tf.cast(replica_id, tf.uint64) * tf.constant(_REPLICA_STEP, tf.uint64)
    return tf.reshape(key, [1])


def dropout(inputs, rate: float, seed, replica_id=None):
    """Inverted dropout whose keep decisions take 16 random bits each.

    An element is kept when a 16-bit draw is at least `round(rate * 65536)` and then scaled
    by `65536 / (65536 - that threshold)`, so the output's expectation is `inputs` (up to
    the scale's rounding in the inputs' dtype, as in TensorFlow's dropout); the realised rate
    is `rate` to within 1/65536 (0.1000061 for 0.1). TensorFlow's own
    `stateless_dropout` draws a 32-bit float per element; on CPU the random numbers are what
    dropout costs (a Philox draw costs the same per bit), so half the bits halve it. Each
    uint32 draw keeps two neighbouring elements of the flattened tensor: its two 16-bit
    halves, read by a bitcast in the device's byte order (low half first on CPUs and
    GPUs), which costs nothing where splitting the draw by shifts and masks and
    concatenating the halves cost a fifth of the dropout on a CPU. Only integer and bool
    operations, so XLA compiles it for every device. The bits come from `seed` and
    `replica_id` through `dropout_key` (counter 0). Outside XLA the mask's comparison and
    multiplication run as one XLA-compiled loop (`xla_elementwise`); this function is only
    called in training.
    """
    threshold = round(rate * 65536)
    if threshold >= 65536:
        return tf.zeros_like(inputs)
    size = tf.size(inputs)
    bits = tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=tf.reshape((size + 1) // 2, [1]), key=dropout_key(seed, replica_id),
        counter=tf.zeros([2], tf.uint64), alg=tf.constant(_AUTO_SELECT, tf.int32),
        dtype=tf.uint32)
    halves = tf.reshape(tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size], tf.shape(inputs))
    scale = 65536 / (65536 - threshold)
    if xla_elementwise():
        return _xla_keep(inputs, halves, threshold, scale)
    return inputs * (tf.cast(halves >= tf.constant(threshold, tf.uint16), inputs.dtype) * scale)


class Dropout(keras.layers.Dropout):
    """Keras' dropout layer with `dropout`'s 16-bit masks and a different mask on every
    replica of a tf.distribute strategy.

    Keras 3 draws dropout seeds from a SeedGenerator whose state is mirrored, so every
    replica would drop the same units (and every TPU core would too). Here the replica id
    goes into the key (`dropout_key`).
    """

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        seed = self.seed_generator.next()
        context = tf.distribute.get_replica_context()
        replica_id = None
        if context is not None and context.num_replicas_in_sync > 1:
            replica_id = context.replica_id_in_sync_group
        return dropout(inputs, self.rate, seed, replica_id)


class Embeddings(keras.layers.Layer):
    """Word + position + token-type embeddings, then LayerNorm and dropout.

    Inputs: input_ids, segment_ids int [B, L]. Output [B, L, E]. `word_embeddings` [V, E] is
    the table the masked-LM heads tie their output projection to.
    """

    def __init__(self, config: EncoderConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        width = config.embedding_width
        self.word_embeddings = self.add_weight(
            (config.vocab_size, width), initializer(config), name="word_embeddings")
        self.position_embeddings = self.add_weight(
            (config.max_position_embeddings, width), initializer(config),
            name="position_embeddings")
        self.token_type_embeddings = self.add_weight(
            (config.type_vocab_size, width), initializer(config), name="token_type_embeddings")
        with keras.name_scope(self.name):
            self.layer_norm = _layer_norm(config)
            self.layer_norm.build((None, None, width))
            self.dropout = Dropout(config.dropout_rate)

    def call(self, input_ids, segment_ids, training=False):
        length = ops.shape(input_ids)[1]
        x = (ops.take(self.word_embeddings, input_ids, axis=0)
             + ops.take(self.token_type_embeddings, segment_ids, axis=0)
             + self.position_embeddings[None, :length])
        return self.dropout(self.layer_norm(x), training=training)


class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention with BERT's output block: dense, dropout, residual, LayerNorm.

    Inputs: x [B, L, H]; attention_bias [B, 1, L, L] (0 where attending is allowed, a large
    negative number elsewhere). Output [B, L, H].
    """

    def __init__(self, config: EncoderConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        h = config.hidden_size
        self.query = _dense(h, config, "query")
        self.key = _dense(h, config, "key")
        self.value = _dense(h, config, "value")
        self.output_dense = _dense(h, config, "output_dense")
        self.layer_norm = _layer_norm(config)
        self.attention_dropout = Dropout(config.attention_dropout_rate)
        self.dropout = Dropout(config.dropout_rate)

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value, self.output_dense):
            layer.build(input_shape)
        self.layer_norm.build(input_shape)

    def _heads(self, x):
        """[B, L, H] -> [B, heads, L, head_size]."""
        b, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (b, length, self.config.num_heads, self.config.head_size))
        return ops.transpose(x, (0, 2, 1, 3))

    def call(self, x, attention_bias, training=False):
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))  # [B, heads, L, L]
        # Keras casts the bias argument to the compute dtype; the softmax runs in float32.
        scores = (ops.cast(scores, "float32") * (self.config.head_size ** -0.5)
                  + ops.cast(attention_bias, "float32"))
        probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        probs = self.attention_dropout(probs, training=training)
        context = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))  # [B, L, heads, size]
        context = ops.reshape(context, ops.shape(x))
        out = self.dropout(self.output_dense(context), training=training)
        return self.layer_norm(out + x)


class TransformerBlock(keras.layers.Layer):
    """BERT's post-LayerNorm block: self-attention, then GELU feed-forward with residual and
    LayerNorm. Input and output [B, L, H]."""

    def __init__(self, config: EncoderConfig, **kwargs):
        super().__init__(**kwargs)
        self.attention = SelfAttention(config, name="attention")
        self.intermediate = _dense(config.intermediate_size, config, "intermediate", gelu)
        self.output_dense = _dense(config.hidden_size, config, "output_dense")
        self.layer_norm = _layer_norm(config)
        self.dropout = Dropout(config.dropout_rate)

    def build(self, input_shape):
        self.attention.build(input_shape)
        self.intermediate.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate.units,))
        self.layer_norm.build(input_shape)

    def call(self, x, attention_bias, training=False):
        x = self.attention(x, attention_bias, training=training)
        out = self.dropout(self.output_dense(self.intermediate(x)), training=training)
        return self.layer_norm(out + x)


class MaskedLMHead(keras.layers.Layer):
    """The generator's head: dense(E, gelu) -> LayerNorm -> tied projection onto the word
    embeddings + an output bias.

    Inputs: hidden [B, N, H] (any width), word_embeddings [V, E]. Output float32 [B, N, V].
    """

    def __init__(self, config: EncoderConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.dense = _dense(config.embedding_width, config, "dense", gelu)
        self.layer_norm = _layer_norm(config)
        self.output_bias = self.add_weight((config.vocab_size,), "zeros", name="output_bias",
                                           autocast=False)

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.layer_norm.build(tuple(input_shape[:-1]) + (self.config.embedding_width,))

    def call(self, hidden, word_embeddings):
        hidden = self.layer_norm(self.dense(hidden))
        table = ops.cast(word_embeddings, hidden.dtype)
        logits = ops.matmul(hidden, ops.transpose(table))
        return ops.add(ops.cast(logits, "float32"), self.output_bias)


class DiscriminatorHead(keras.layers.Layer):
    """dense(H, gelu) -> dense(1): one replaced-token logit per position.

    Input [B, L, H]; output float32 [B, L] (positive means replaced).
    """

    def __init__(self, config: EncoderConfig, **kwargs):
        super().__init__(**kwargs)
        self.dense = _dense(config.hidden_size, config, "dense", gelu)
        self.dense_prediction = _dense(1, config, "dense_prediction",
                                       kernel_initializer=default_initializer())

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.dense_prediction.build(tuple(input_shape[:-1]) + (self.dense.units,))

    def call(self, hidden):
        return ops.cast(ops.squeeze(self.dense_prediction(self.dense(hidden)), -1), "float32")
