"""Small tensor helpers of the pre-training objectives: gathering and scattering at masked
positions, sampling from the generator, and the masked LM's cross-entropy."""

import tensorflow as tf

from electra_tf.stateless import STREAM_GENERATOR_SAMPLES, hash_open_uniform


def gather_positions(sequence, positions):
    """Rows of `sequence` at `positions`.

    sequence [B, L] or [B, L, D]; positions int [B, N] -> [B, N] or [B, N, D].
    """
    return tf.gather(sequence, positions, batch_dims=1)


def scatter_positions(sequence, positions, updates, weights):
    """`sequence` [B, L] with `updates` [B, N] written at `positions` [B, N] where
    `weights` [B, N] is non-zero (padding slots, weight 0, leave the sequence as it is).

    Returns (updated [B, L], written [B, L] bool: the positions written to).
    """
    real = weights > 0
    updates = tf.where(real, tf.cast(updates, sequence.dtype),
                       gather_positions(sequence, positions))
    batch = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
    indices = tf.stack([batch, tf.cast(positions, tf.int32)], axis=-1)  # [B, N, 2]
    updated = tf.tensor_scatter_nd_update(sequence, indices, updates)
    written = tf.scatter_nd(indices, tf.cast(real, tf.int32), tf.shape(sequence)) > 0
    return updated, written


# The vocabulary is cut into blocks of this many ids for sampling: a search over the blocks'
# sums, then over one block's probabilities.
SAMPLE_BLOCK = 128


def sampling_logits(logits, temperature: float = 1.0, disallow=None):
    """The logits `sample_from_logits` draws from: float32, divided by `temperature`, the
    `disallow` ids [B, ...] (if any) at -1e9, so their probability is 0. Their log-softmax
    is the sampling policy's (the adversarial generator's policy gradient)."""
    logits = tf.cast(logits, tf.float32) / temperature
    if disallow is not None:
        logits += -1e9 * tf.one_hot(disallow, tf.shape(logits)[-1], dtype=tf.float32)
    return logits


def sample_from_logits(logits, seed: int, example_index, temperature: float = 1.0,
                       disallow=None):
    """One token per row of logits [B, ..., V], drawn from softmax(logits / temperature);
    ids int32 [B, ...].

    Inverse-CDF sampling with one uniform number u per row: the token whose interval of the
    cumulative distribution holds u. This is the distribution the official Gumbel-max
    sampling draws from; it costs a softmax and a sum over [B, ..., V] instead of a random
    number, two logarithms and an argmax for every logit (the generator's [32, 20, 30522]
    logits on 2 Xeon cores: 132 -> 21 ms, benchmarks/results/sampling.md). The search runs
    over blocks of SAMPLE_BLOCK ids: first the running sum of the blocks' probabilities,
    then the running sum within the block it falls in, so no float32 sum runs over more
    than a few hundred terms. u takes 2^23 values, so probabilities are resolved to about
    1e-7, the float32 rounding of the sums themselves. A token of probability 0
    (underflowed, or disallowed) is never drawn, rounding included.

    u for row (b, slot) is a hash of (seed, example_index[b], slot) (`electra_tf.stateless`):
    an example's sample depends on the example, not on the batch it came in, the replica
    that ran it or the step, so runs that split their batches differently (replicas,
    gradient accumulation, a resumed run) sample the same tokens.

    Args:
      logits: float [B, ..., V] (unnormalised; zeros give the uniform distribution).
      seed: the run's seed (a Python int).
      example_index: int [B], each example's index in the input stream.
      temperature: logits are divided by it; near 0 the sample is the argmax.
      disallow: optional ids [B, ...] that must not be sampled (e.g. the original token).
    """
    logits = sampling_logits(logits, temperature, disallow)
    shape = tf.shape(logits)
    vocab, width = shape[-1], SAMPLE_BLOCK
    blocks = (vocab + width - 1) // width
    probs = tf.nn.softmax(tf.reshape(logits, [-1, vocab]))  # [R, V]
    probs = tf.reshape(tf.pad(probs, [[0, 0], [0, blocks * width - vocab]]),
                       [-1, blocks, width])  # [R, blocks, width], padding of probability 0
    block_probs = tf.reduce_sum(probs, -1)  # [R, blocks]
    block_cdf = tf.cumsum(block_probs, -1)
    slots = tf.range(tf.size(logits) // (vocab * shape[0]))[None, :]
    uniform = hash_open_uniform(seed, STREAM_GENERATOR_SAMPLES, example_index, slots)
    target = tf.reshape(uniform, [-1, 1]) * block_cdf[:, -1:]  # [R, 1]

    def first_above(cdf, weights):
        # The first index whose cdf exceeds target (its weight is then > 0); where rounding
        # leaves none, the last index of weight > 0.
        index = tf.reduce_sum(tf.cast(cdf <= target, tf.int32), -1)
        size = tf.shape(weights)[-1]
        last = size - 1 - tf.argmax(tf.reverse(tf.cast(weights > 0, tf.int32), [-1]), -1,
                                    output_type=tf.int32)
        return tf.minimum(index, last)

    block = first_above(block_cdf, block_probs)  # [R]
    before = tf.gather(tf.pad(block_cdf[:, :-1], [[0, 0], [1, 0]]), block[:, None],
                       batch_dims=1)  # [R, 1]: the cdf up to the block, as compared above
    within = tf.gather(probs, block, batch_dims=1)  # [R, width]
    offset = first_above(before + tf.cumsum(within, -1), within)
    return tf.reshape(block * width + offset, shape[:-1])


def sparse_cross_entropy(logits, labels):
    """-log softmax(logits)[labels] for float32 logits [..., V] and int labels [...]: the
    value and gradient of `tf.nn.sparse_softmax_cross_entropy_with_logits`, computed around
    one softmax.

    TensorFlow's CPU kernel for that op makes its Eigen passes over [..., V] without
    AVX-512; oneDNN's softmax is several times faster, and the rest is two maxima and a
    gather. The log-normaliser comes from the largest probability, which is exp(0) over
    the softmax's sum and so never underflows: the loss is (max(logits) - logits[label]) -
    log(max(p)), the difference taken first so that large logits lose no precision. The
    gradient is softmax minus the one-hot labels, from the forward pass's p. (The generator's
    [B, 20, 30522] logits, ELECTRA-Small's batch of 32 on 2 Xeon cores: forward + backward
    88 -> 31 ms.) Labels outside [0, V) are an error on CPU, as in TensorFlow's op.
    """
    labels = tf.cast(labels, tf.int32)
    depth = tf.shape(logits)[-1]

    @tf.custom_gradient
    def cross_entropy(logits):
        probs = tf.nn.softmax(logits)
        below_max = tf.reduce_max(logits, -1) - tf.gather(logits, labels,
                                                          batch_dims=len(labels.shape))
        losses = below_max - tf.math.log(tf.reduce_max(probs, -1))

        def grad(upstream):
            return upstream[..., None] * (probs - tf.one_hot(labels, depth, dtype=probs.dtype))

        return losses, grad

    return cross_entropy(logits)
