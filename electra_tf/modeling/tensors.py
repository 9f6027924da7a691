"""Small tensor helpers of the pre-training objectives: gathering and scattering at masked
positions, and sampling from the generator."""

import tensorflow as tf


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


def sample_from_logits(logits, seed, temperature: float = 1.0, disallow=None):
    """Gumbel-max sampling: one token per row of logits [..., V]; ids int32 [...].

    Args:
      logits: float [..., V] (unnormalised; zeros give the uniform distribution).
      seed: int32 [2], the stateless seed (e.g. stack([run_seed, step])).
      temperature: logits are divided by it; near 0 the sample is the argmax.
      disallow: optional ids [...] that must not be sampled (e.g. the original token).
    """
    logits = tf.cast(logits, tf.float32) / temperature
    if disallow is not None:
        logits += -1e9 * tf.one_hot(disallow, tf.shape(logits)[-1], dtype=tf.float32)
    uniform = tf.random.stateless_uniform(tf.shape(logits), seed, minval=1e-9, maxval=1.0)
    gumbel = -tf.math.log(-tf.math.log(uniform))
    return tf.argmax(logits + gumbel, axis=-1, output_type=tf.int32)
