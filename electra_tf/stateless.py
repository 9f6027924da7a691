"""Counter-based random numbers: a hash of (seed, stream, example index, slot).

The data pipeline's masks and the generator's samples are drawn from these instead of from
RNG state. A draw depends only on the run's seed, which draw it is (the stream), the
example's index in the input stream and the slot within the example. So a resumed run sees
the same masks and samples, and so does a run that splits its global batch differently
(another batch size, replica count or gradient accumulation).
"""

import tensorflow as tf

# The independent draws, one stream each.
STREAM_MASK_POSITIONS = 1
STREAM_MASK_KEEP = 2
STREAM_MASK_WORDS = 3
STREAM_GENERATOR_SAMPLES = 4

_M1 = 0x85EBCA6B
_M2 = 0xC2B2AE35
_GOLDEN = 0x9E3779B9


def _u32(value: int) -> tf.Tensor:
    return tf.constant(value & 0xFFFFFFFF, tf.uint32)


def fmix32(h: tf.Tensor) -> tf.Tensor:
    """MurmurHash3's finaliser: a bijective, well-mixed uint32 -> uint32 map."""
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, _u32(16)))
    h = h * _u32(_M1)
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, _u32(13)))
    h = h * _u32(_M2)
    return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, _u32(16)))


def hash_bits(seed: int, stream: int, example_index: tf.Tensor, slot: tf.Tensor) -> tf.Tensor:
    """Random uint32 bits for each (example, slot).

    Args:
      seed: Python int, the run's seed.
      stream: Python int separating independent draws (one of the STREAM_* constants).
      example_index: int64 [B], each example's index in the stream.
      slot: int32 [B, K] (or broadcastable), e.g. token positions.
    Returns: uint32 [B, K].
    """
    key = fmix32(_u32(seed) ^ _u32(stream * _GOLDEN))
    index = tf.cast(example_index, tf.uint64)
    low = tf.cast(tf.bitwise.bitwise_and(index, tf.constant(0xFFFFFFFF, tf.uint64)), tf.uint32)
    high = tf.cast(tf.bitwise.right_shift(index, tf.constant(32, tf.uint64)), tf.uint32)
    h = fmix32(key ^ low)
    h = fmix32(h ^ (high + _u32(_GOLDEN)))[:, None]
    return fmix32(h ^ tf.cast(slot, tf.uint32) * _u32(_GOLDEN))


def hash_uniform(seed, stream, example_index, slot) -> tf.Tensor:
    """Uniform float32 in [0, 1) for each (example, slot), 24 random bits; see hash_bits."""
    bits = tf.bitwise.right_shift(hash_bits(seed, stream, example_index, slot), _u32(8))
    return tf.cast(bits, tf.float32) * (1.0 / (1 << 24))


def hash_open_uniform(seed, stream, example_index, slot) -> tf.Tensor:
    """Uniform float32 in the open interval (0, 1) for each (example, slot): the odd
    multiples of 2^-24, from 23 random bits; see hash_bits.

    For draws that must be neither 0 nor 1 (e.g. -log(-log(u)), Gumbel noise): hash_uniform's
    1 - 2^-24 plus any half step rounds to 1.0 in float32.
    """
    bits = tf.bitwise.right_shift(hash_bits(seed, stream, example_index, slot), _u32(9))
    return (tf.cast(bits, tf.float32) * 2.0 + 1.0) * (1.0 / (1 << 24))
