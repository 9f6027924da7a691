"""FLOPs per example of pre-training and inference, and accelerators' peak FLOP/s.

The counting method is the official ELECTRA one (google-research/electra
`flops_computation.py`, behind the paper's compute figures):

- An operation is a mathematical operation: a multiply-add is 2 FLOPs, so a dense layer
  costs 2 * in * out per token; an exp, compare or divide is 1.
- Elementwise costs per element: dropout 4 (random number, compare, mask, rescale),
  LayerNorm 5 (mean, variance, shift, scale), GELU 8, softmax 5 (max, subtract, exp, sum,
  divide).
- Embedding lookups are dense: a one-hot row times the table, 2 * E * V per token for the
  words and 2 * E * (L + type_vocab_size) for positions and token types (what an accelerator
  without fast gathers does; pass `dense_embedding_lookup=False` to count gathers as free).
- Attention costs what full bidirectional attention costs, masks included: the causal towers
  of Electric and padded positions are counted like any other.
- The masked-LM head runs on the N masked slots of a sequence (the pipeline gathers N
  positions, padded): dense(E, gelu), LayerNorm, the tied projection onto the vocabulary,
  softmax and the cross-entropy pick (2 V). The discriminator head, dense(H, gelu) ->
  dense(1), runs on every token.
- The backward pass costs `backward_multiplier` times the forward pass. The official method
  (and so the paper's figures) takes it equal to the forward pass: training = 2 x forward.
  The FLOPs an accelerator executes are closer to 2 x forward for the backward pass (a
  matmul's gradient needs one matmul for the input and one for the weights): pass
  `backward_multiplier=2.0` (training = 3 x forward) and `dense_embedding_lookup=False`
  (our lookups are gathers) when computing hardware utilisation:
  `hardware_train_flops_per_example`.
- Not counted, as in the official method: the sampling and the scatter of sampled
  tokens, the loss reductions, the attention-mask add, the optimizer update.

Where this module departs from the official file:
- the LayerNorm after the attention output costs 5 * H per token (the official counts 5: a
  missing factor H, about 0.05% of ELECTRA-Small's total);
- the number of masked slots N is the data pipeline's `int((mask_prob + 0.005) * L)` (19 of
  128), not the fixed fraction 0.15625 (BERT's 20 of 128, 80 of 512) the official file uses
  for every model; pass `max_predictions` to choose N;
- inference counts no dropout.
With `max_predictions=20` (L=128) or 80 (L=512) the official figures come out within 0.1%
(tests/test_flops.py).

Example:
  >>> d = encoder_config("small")
  >>> per_example = train_flops_per_example(d, generator_config(d, 0.25), 128)
  >>> per_example * 128 * 1_000_000   # 1M steps of batch 128: about 1.29e18
"""

import re

from electra_tf.errors import UserInputError
from electra_tf.modeling.config import EncoderConfig

DROPOUT_FLOPS = 4
LAYER_NORM_FLOPS = 5
ACTIVATION_FLOPS = 8
SOFTMAX_FLOPS = 5

OBJECTIVES = ("electra", "mlm", "electra_15", "replace_mlm", "all_tokens_mlm", "electric")
INFERENCE_HEADS = ("discriminator", "masked_lm", "none")


# ------------------------------------------------------------------------------ pieces


def block_flops(config: EncoderConfig, seq_length: int,
                training: bool = True) -> dict[str, float]:
    """Forward FLOPs of one transformer block on one sequence of `seq_length`, by operation.

    Matmuls: query/key/value (3 dense H -> H), attention scores (Q K^T: 2 * L * H per token),
    attention-weighted values (2 * L * H per token), attention output (dense H -> H), the
    feed-forward pair (H -> I -> H). Elementwise: biases, score scaling, softmax, GELU,
    residuals, the two LayerNorms, and, when `training`, the three dropouts.
    """
    h, i, heads, length = (config.hidden_size, config.intermediate_size, config.num_heads,
                           seq_length)
    per_token = {
        "qkv": 3 * 2 * h * h,
        "qkv_bias": 3 * h,
        "attention_scores": 2 * length * h,
        "attention_scale": length * heads,
        "attention_softmax": SOFTMAX_FLOPS * length * heads,
        "attention_dropout": DROPOUT_FLOPS * length * heads,
        "attention_values": 2 * length * h,
        "attention_output": 2 * h * h,
        "attention_output_bias": h,
        "attention_output_dropout": DROPOUT_FLOPS * h,
        "attention_residual": h,
        "attention_layer_norm": LAYER_NORM_FLOPS * h,
        "intermediate": 2 * h * i,
        "intermediate_bias": i,
        "intermediate_activation": ACTIVATION_FLOPS * i,
        "output": 2 * i * h,
        "output_bias": h,
        "output_dropout": DROPOUT_FLOPS * h,
        "output_residual": h,
        "output_layer_norm": LAYER_NORM_FLOPS * h,
    }
    if not training:
        per_token = {k: v for k, v in per_token.items() if not k.endswith("dropout")}
    return {k: float(v * length) for k, v in per_token.items()}


# The matmul entries of `block_flops` (the rest is elementwise work).
BLOCK_MATMULS = ("qkv", "attention_scores", "attention_values", "attention_output",
                 "intermediate", "output")


def embedding_flops(config: EncoderConfig, seq_length: int, training: bool = True,
                    dense_lookup: bool = True) -> dict[str, float]:
    """Forward FLOPs of the embedding block on one sequence, by operation.

    Dense (one-hot) lookups of word, position and token-type rows when `dense_lookup`; the
    two adds, LayerNorm, dropout when `training`, and the projection E -> H when E != H.
    """
    e, h, length = config.embedding_width, config.hidden_size, seq_length
    per_token = {}
    if dense_lookup:
        per_token["word_lookup"] = 2 * e * config.vocab_size
        per_token["position_and_type_lookup"] = 2 * e * (length + config.type_vocab_size)
    per_token["add"] = 2 * e
    per_token["layer_norm"] = LAYER_NORM_FLOPS * e
    if training:
        per_token["dropout"] = DROPOUT_FLOPS * e
    if e != h:
        per_token["projection"] = 2 * e * h
        per_token["projection_bias"] = h
    return {k: float(v * length) for k, v in per_token.items()}


def encoder_flops(config: EncoderConfig, seq_length: int, training: bool = True,
                  dense_lookup: bool = True) -> float:
    """Forward FLOPs of a whole encoder (embeddings + blocks) on one sequence."""
    return (sum(embedding_flops(config, seq_length, training, dense_lookup).values())
            + config.num_layers * sum(block_flops(config, seq_length, training).values()))


def masked_lm_head_flops(config: EncoderConfig, num_positions: int,
                         input_width: int | None = None, training: bool = True) -> float:
    """Forward FLOPs of the masked-LM head at `num_positions` positions.

    Per position: dense(input_width -> E) with bias and GELU, LayerNorm, the tied projection
    onto the vocabulary (2 * E * V), softmax over V, and when `training` the cross-entropy
    pick (2 * V, as the official counts it). `input_width` defaults to H (Electric's cloze
    head reads both towers: 2 * H).
    """
    width = config.hidden_size if input_width is None else input_width
    e, v = config.embedding_width, config.vocab_size
    per_position = (2 * width * e + e + ACTIVATION_FLOPS * e + LAYER_NORM_FLOPS * e
                    + 2 * e * v + SOFTMAX_FLOPS * v + (2 * v if training else 0))
    return float(per_position * num_positions)


def discriminator_head_flops(config: EncoderConfig, seq_length: int) -> float:
    """Forward FLOPs of dense(H, gelu) -> dense(1) on every token of one sequence."""
    h = config.hidden_size
    return float((2 * h * h + h + ACTIVATION_FLOPS * h + 2 * h) * seq_length)


# ------------------------------------------------------------------------------ totals


def num_predictions(seq_length: int, mask_prob: float = 0.15,
                    max_predictions: int | None = None) -> int:
    """The masked slots N per sequence: `max_predictions`, or the pipeline's default
    int((mask_prob + 0.005) * seq_length) (electra_tf.data.masking.default_max_predictions)."""
    n = int((mask_prob + 0.005) * seq_length) if max_predictions is None else max_predictions
    if not 1 <= n <= seq_length:
        raise UserInputError(f"the number of masked slots ({n}) must be in [1, seq_length="
                             f"{seq_length}]; check mask_prob={mask_prob} and max_predictions")
    return n


def forward_flops_per_example(discriminator: EncoderConfig, generator: EncoderConfig | None,
                              seq_length: int, objective: str = "electra",
                              mask_prob: float = 0.15, max_predictions: int | None = None,
                              dense_embedding_lookup: bool = True) -> float:
    """FLOPs of one training forward pass (dropout on) per example: the networks and heads
    the objective runs. See `train_flops_per_example` for what each objective counts."""
    if objective not in OBJECTIVES:
        raise UserInputError(f"objective={objective!r} is not one of {', '.join(OBJECTIVES)}")
    for name, config in (("discriminator", discriminator), ("generator", generator)):
        if config is not None and seq_length > config.max_position_embeddings:
            raise UserInputError(f"seq_length={seq_length} exceeds the {name}'s "
                                 f"max_position_embeddings={config.max_position_embeddings}; "
                                 "use a shorter sequence or a larger position table")
    if objective == "electric" and generator is None:
        raise UserInputError("objective='electric' needs its two-tower generator: pass "
                             "generator=generator_config(discriminator, fraction)")
    n = num_predictions(seq_length, mask_prob, max_predictions)
    length = seq_length

    def encoder(config):
        return encoder_flops(config, length, True, dense_embedding_lookup)

    if objective == "mlm":
        return encoder(discriminator) + masked_lm_head_flops(discriminator, n)

    if objective == "electric":
        noise = 2 * encoder(generator) + masked_lm_head_flops(
            generator, length, input_width=2 * generator.hidden_size)
    elif generator is None:
        noise = 0.0  # uniform replacements: nothing to run
    else:
        noise = encoder(generator) + masked_lm_head_flops(generator, n)

    heads = {
        "electra": discriminator_head_flops(discriminator, length),
        "electra_15": discriminator_head_flops(discriminator, length),
        "electric": discriminator_head_flops(discriminator, length),
        "replace_mlm": masked_lm_head_flops(discriminator, n),
        "all_tokens_mlm": (masked_lm_head_flops(discriminator, length)
                           + 2.0 * discriminator.hidden_size * length),  # + the copy gate
    }
    return noise + encoder(discriminator) + heads[objective]


def train_flops_per_example(discriminator: EncoderConfig, generator: EncoderConfig | None,
                            seq_length: int, objective: str = "electra",
                            mask_prob: float = 0.15, *, max_predictions: int | None = None,
                            backward_multiplier: float = 1.0,
                            dense_embedding_lookup: bool = True) -> float:
    """Training FLOPs per example: (1 + backward_multiplier) x the forward pass.

    Forward pass by objective (N = masked slots per sequence, L = seq_length):
      electra, electra_15: generator encoder + MLM head on N slots, then discriminator
        encoder + replaced-token head on all L tokens (ELECTRA 15% weights the loss, not the
        compute). With `generator=None` the replacements are uniform: no generator cost.
      mlm: BERT, the discriminator network with an MLM head on N slots; `generator` is
        ignored (the pretrainer builds none).
      replace_mlm: the generator as for electra, then the discriminator with an MLM head on
        the N slots.
      all_tokens_mlm: as replace_mlm, with the MLM head on all L tokens plus the copy gate
        (dense(1)) on each.
      electric: two generator towers (left-to-right and right-to-left, each a full generator
        encoder) and the cloze head (input 2 * generator H) on all L tokens, then the
        discriminator with its binary head. Needs a generator.

    The default `backward_multiplier=1.0` is the official method behind the paper's
    figures; use 2.0 for the FLOPs the hardware executes (model FLOPs utilisation).
    `max_predictions` overrides N (the pipeline's default: int((mask_prob + 0.005) * L)).
    """
    return (1.0 + backward_multiplier) * forward_flops_per_example(
        discriminator, generator, seq_length, objective, mask_prob, max_predictions,
        dense_embedding_lookup)


def hardware_train_flops_per_example(discriminator: EncoderConfig,
                                     generator: EncoderConfig | None, seq_length: int,
                                     objective: str = "electra", mask_prob: float = 0.15, *,
                                     max_predictions: int | None = None) -> float:
    """The training FLOPs per example a device executes, for model FLOPs utilisation: the
    backward pass 2 x the forward pass, and embedding lookups as the gathers they are (no
    FLOPs). Arguments as train_flops_per_example."""
    return train_flops_per_example(discriminator, generator, seq_length, objective, mask_prob,
                                   max_predictions=max_predictions, backward_multiplier=2.0,
                                   dense_embedding_lookup=False)


def two_stage_flops_per_example(discriminator: EncoderConfig, generator: EncoderConfig,
                                seq_length: int, mask_prob: float = 0.15, *,
                                max_predictions: int | None = None, hardware: bool = False
                                ) -> dict[str, float]:
    """Training FLOPs per example of each phase of two-stage training: "generator" (its
    masked LM alone, forward and backward) and "discriminator" (the frozen generator's
    forward pass to sample, then the discriminator's training on the replaced-token task).
    The official counting, or with `hardware` what a device executes (as
    hardware_train_flops_per_example)."""
    backward, dense = (2.0, False) if hardware else (1.0, True)
    options = dict(max_predictions=max_predictions, dense_embedding_lookup=dense)
    generator_forward = forward_flops_per_example(generator, None, seq_length, "mlm",
                                                  mask_prob, **options)
    discriminator_forward = forward_flops_per_example(discriminator, None, seq_length,
                                                      "electra", mask_prob, **options)
    return {"generator": (1.0 + backward) * generator_forward,
            "discriminator": generator_forward + (1.0 + backward) * discriminator_forward}


def inference_flops_per_example(config: EncoderConfig, seq_length: int,
                                head: str = "discriminator", *,
                                dense_embedding_lookup: bool = True) -> float:
    """Forward FLOPs of the encoder on one sequence, dropout off, plus a head on every token.

    head: "discriminator" (dense(H, gelu) -> dense(1), the official inference figure and
    about what a fine-tuned classifier costs), "masked_lm" (the MLM head with its softmax on
    every token, no loss), or "none" (the sequence output only).
    """
    if head not in INFERENCE_HEADS:
        raise UserInputError(f"head={head!r} is not one of {', '.join(INFERENCE_HEADS)}")
    if seq_length > config.max_position_embeddings:
        raise UserInputError(f"seq_length={seq_length} exceeds max_position_embeddings="
                             f"{config.max_position_embeddings}; use a shorter sequence")
    total = encoder_flops(config, seq_length, False, dense_embedding_lookup)
    if head == "discriminator":
        total += discriminator_head_flops(config, seq_length)
    elif head == "masked_lm":
        total += masked_lm_head_flops(config, seq_length, training=False)
    return total


# ------------------------------------------------------------------------------ peak FLOP/s

_T = 1e12


def _peaks(bfloat16, float16, tensorfloat32, float32):
    return {"bfloat16": bfloat16, "float16": float16, "tensorfloat32": tensorfloat32,
            "float32": float32}


# Peak dense FLOP/s per chip (no structured sparsity). NVIDIA's datasheets give tensor-core
# figures "with sparsity"; the dense figure is half of it (H100 SXM: BF16 1,979 -> 989.5,
# TF32 989 -> 494.5; H100 PCIe: 1,513 and 756; H100/H200 NVL: 1,671 and 835; L4: 242 and
# 120). A100: BF16 312, TF32 156, FP32 19.5 (SXM and PCIe alike). V100 (Volta) and T4
# (Turing) have FP16 tensor cores only: V100 SXM2 125 / FP32 15.7, V100 PCIe 112 / 14,
# V100S 130 / 16.4, T4 65 / 8.1. A10: BF16 125, TF32 62.5, FP32 31.2. A10G (AWS G5; no
# public NVIDIA datasheet; AWS's figures): BF16 70, TF32 35, FP32 35. TPUs: Google Cloud's
# "peak compute per chip (bf16)": v2 45, v3 123, v4 275, v5e 197, v5p 459, v6e
# (Trillium) 918; Google publishes no float16 or float32 figure for them. "float32" is the
# CUDA-core rate; "tensorfloat32" the rate TensorFlow's float32 matmuls reach on Ampere and
# later, where TF32 is on by default. None: the chip has no such fast path.
_H100_SXM = _peaks(989.5 * _T, 989.5 * _T, 494.5 * _T, 67 * _T)
_H100_PCIE = _peaks(756.5 * _T, 756.5 * _T, 378 * _T, 51 * _T)
_NVL = _peaks(835.5 * _T, 835.5 * _T, 417.5 * _T, 60 * _T)
_A100 = _peaks(312 * _T, 312 * _T, 156 * _T, 19.5 * _T)
_TPU = {v: _peaks(bf16 * _T, None, None, None)
        for v, bf16 in (("v2", 45), ("v3", 123), ("v4", 275), ("v5e", 197), ("v5p", 459),
                        ("v6e", 918))}

# Keys are fragments of a device description (tf.config.experimental.get_device_details
# (gpu)["device_name"], e.g. "NVIDIA H100 80GB HBM3", or a TPU kind such as "TPU v4" or
# "TPU v5 lite"), matched case-insensitively as whole words, longest first, with "-" and "_"
# read as spaces: "NVIDIA H100 PCIe" is the PCIe card, "NVIDIA H100 80GB HBM3" the SXM one.
PEAK_FLOPS = {
    "H100": _H100_SXM,
    "H100 SXM": _H100_SXM,
    "H100 PCIe": _H100_PCIE,
    "H100 NVL": _NVL,
    "H200": _H100_SXM,
    "H200 NVL": _NVL,
    "A100": _A100,
    "V100": _peaks(None, 125 * _T, None, 15.7 * _T),
    "V100 PCIe": _peaks(None, 112 * _T, None, 14 * _T),
    "V100S": _peaks(None, 130 * _T, None, 16.4 * _T),
    "T4": _peaks(None, 65 * _T, None, 8.1 * _T),
    "L4": _peaks(121 * _T, 121 * _T, 60 * _T, 30.3 * _T),
    "A10": _peaks(125 * _T, 125 * _T, 62.5 * _T, 31.2 * _T),
    "A10G": _peaks(70 * _T, 70 * _T, 35 * _T, 35 * _T),
    "TPU v2": _TPU["v2"],
    "TPU v3": _TPU["v3"],
    "TPU v4": _TPU["v4"],
    "TPU v5 lite": _TPU["v5e"],
    "v5e": _TPU["v5e"],
    "v5litepod": _TPU["v5e"],
    "TPU v5": _TPU["v5p"],  # JAX's device_kind for v5p
    "v5p": _TPU["v5p"],
    "TPU v6 lite": _TPU["v6e"],
    "v6e": _TPU["v6e"],
    "Trillium": _TPU["v6e"],
}

# Keras mixed-precision policy name -> the compute dtype the matmuls run in.
PRECISIONS = {"float32": "float32", "mixed_bfloat16": "bfloat16",
              "mixed_float16": "float16"}


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[-_]", " ", text.lower()).split())


def peak_flops_per_second(device_description: str, precision: str,
                          tensor_float_32: bool = True) -> float | None:
    """Peak dense FLOP/s of one chip for a precision policy, or None when unknown.

    device_description: a GPU's device_name ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB")
      or a TPU kind ("TPU v4", "TPU v5 lite", "v6e-8"); see PEAK_FLOPS.
    precision: "float32", "mixed_bfloat16" or "mixed_float16".
    tensor_float_32: whether float32 matmuls use TF32 tensor cores (TensorFlow's default;
      tf.config.experimental.tensor_float_32_execution_enabled()).

    None for an unknown device (a CPU, say) or a precision the chip has no fast path for
    (bfloat16 on V100 and T4, float16 and float32 on TPUs).
    """
    if precision not in PRECISIONS:
        raise UserInputError(f"precision={precision!r} is not one of {', '.join(PRECISIONS)}")
    text = _normalise(device_description)
    for fragment in sorted(PEAK_FLOPS, key=len, reverse=True):
        if re.search(rf"(?<![a-z0-9]){re.escape(_normalise(fragment))}(?![a-z0-9])", text):
            peaks = PEAK_FLOPS[fragment]
            break
    else:
        return None
    dtype = PRECISIONS[precision]
    if dtype == "float32" and tensor_float_32 and peaks["tensorfloat32"] is not None:
        return peaks["tensorfloat32"]
    return peaks[dtype]
