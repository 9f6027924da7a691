"""FLOPs accounting: the official ELECTRA figures, hand-counted matmuls, how the totals scale
with layers, generator and objective, and the peak-FLOP/s lookup on real device strings."""

import dataclasses

import pytest

from electra_tf.modeling import flops
from electra_tf.modeling.config import EncoderConfig, encoder_config, generator_config

SMALL, BASE, LARGE = encoder_config("small"), encoder_config("base"), encoder_config("large")


def _shape(hidden, layers, vocab=30522, embedding=None):
    """A model of the official file's TransformerHparams defaults: FFN 4H, H/64 heads."""
    return EncoderConfig(vocab_size=vocab, hidden_size=hidden, num_layers=layers,
                         num_heads=max(1, hidden // 64), intermediate_size=4 * hidden,
                         embedding_size=embedding)


# What google-research/electra flops_computation.py prints (total pre-training FLOPs), with
# each model's (discriminator, generator, seq length, batch, steps). The official file masks
# a fixed 0.15625 of the tokens (20 of 128, 80 of 512); GPT predicts every token.
OFFICIAL = {
    "bert_small": (1.4187399146496e18, SMALL, None, 128, 128, 1.45e6),
    "bert_base": (6.428335104e19, BASE, None, 512, 256, 1e6),
    "bert_large": (1.91720905883648e20, LARGE, None, 512, 256, 1e6),
    "electra_small": (1.293743798272e18, SMALL, generator_config(SMALL, 0.25), 128, 128, 1e6),
    "electra_base": (6.424541834277683e19, BASE, generator_config(BASE, 1 / 3), 512, 256,
                     766e3),
    "electra_400k": (7.117606040895488e20, LARGE, generator_config(LARGE, 0.25), 512, 2048,
                     4e5),
    "electra_1.75M": (3.113952642891776e21, LARGE, generator_config(LARGE, 0.25), 512, 2048,
                      1.75e6),
    "roberta": (3.187221435776e21, _shape(1024, 24, vocab=50265), None, 512, 8000, 5e5),
    "albert": (3.113923955392512e22, _shape(4096, 12, vocab=30000, embedding=128), None, 512,
               4096, 1.5e6),
    "gpt": (3.968752230785352e19, _shape(768, 12, vocab=40000), None, 512, 128, 960800),
}


@pytest.mark.parametrize("name", OFFICIAL)
def test_official_totals(name):
    expected, disc, gen, length, batch, steps = OFFICIAL[name]
    objective = "mlm" if gen is None else "electra"
    n = length if name == "gpt" else int(0.15625 * length)
    total = flops.train_flops_per_example(disc, gen, length, objective,
                                          max_predictions=n) * batch * steps
    # The only difference left is the attention LayerNorm's missing factor H upstream.
    assert total == pytest.approx(expected, rel=1e-3)
    assert total > expected


def test_electra_small_with_our_masking_is_1_29e18():
    """The headline figure with the pipeline's own 19 masked slots of 128."""
    per_example = flops.train_flops_per_example(SMALL, generator_config(SMALL, 0.25), 128)
    assert per_example * 128 * 1e6 == pytest.approx(1.29e18, rel=0.01)
    assert per_example * 128 * 1e6 == pytest.approx(OFFICIAL["electra_small"][0], rel=0.01)
    bert = flops.train_flops_per_example(SMALL, None, 128, "mlm") * 128 * 1.45e6
    assert bert == pytest.approx(OFFICIAL["bert_small"][0], rel=0.01)


def test_inference_matches_the_paper():
    """Paper Table 1 (sequence length 128): ELECTRA/BERT-Small 3.7e9, Base 2.9e10; and the
    official get_infer_flops values (3.677e9, 2.862e10, 8.747e10 for large)."""
    small, base, large = (flops.inference_flops_per_example(c, 128) for c in (SMALL, BASE, LARGE))
    assert round(small / 1e9, 1) == 3.7 and round(base / 1e10, 1) == 2.9
    for mine, official in ((small, 3677281792), (base, 28616498688), (large, 87465671680)):
        assert mine == pytest.approx(official, rel=0.01)


def test_block_matmuls_by_hand():
    config = EncoderConfig(vocab_size=50, hidden_size=8, num_layers=1, num_heads=2,
                           intermediate_size=32, embedding_size=4)
    L, H, I = 5, 8, 32
    block = flops.block_flops(config, L)
    dense = 2 * (H * 3 * H + H * H + H * I + I * H)  # q, k, v, attention out, FFN in and out
    attention = 2 * (L * H) * 2                       # QK^T and AV: L keys x H per token each
    assert sum(block[k] for k in flops.BLOCK_MATMULS) == L * (dense + attention)
    assert block["attention_scores"] == 2 * 2 * L * L * (H // 2)  # heads x L x L x head_size
    assert block["attention_layer_norm"] == block["output_layer_norm"] == 5 * H * L
    embed = flops.embedding_flops(config, L)
    assert embed["word_lookup"] == L * 2 * 4 * 50
    assert embed["projection"] == L * 2 * 4 * 8


def test_train_is_forward_times_one_plus_backward():
    gen = generator_config(SMALL, 0.25)
    forward = flops.forward_flops_per_example(SMALL, gen, 128)
    assert flops.train_flops_per_example(SMALL, gen, 128) == 2 * forward  # the official
    assert flops.train_flops_per_example(SMALL, gen, 128, backward_multiplier=2.0) == 3 * forward


def test_flops_scale_linearly_in_layers():
    per_layer = sum(flops.block_flops(SMALL, 128).values())
    totals = [flops.train_flops_per_example(dataclasses.replace(SMALL, num_layers=n), None, 128,
                                            "mlm") for n in (1, 2, 3, 6)]
    steps = [b - a for a, b in zip(totals, totals[1:])]
    assert steps[0] == pytest.approx(2 * per_layer) and steps[1] == pytest.approx(2 * per_layer)
    assert steps[2] == pytest.approx(3 * 2 * per_layer)
    # Inference: ELECTRA-Large's second 12 layers add 12 blocks without dropout, nothing else.
    half = dataclasses.replace(LARGE, num_layers=12)
    extra = (flops.inference_flops_per_example(LARGE, 512)
             - flops.inference_flops_per_example(half, 512))
    assert extra == pytest.approx(12 * sum(flops.block_flops(LARGE, 512, training=False).values()))


def test_generator_none_and_objectives():
    gen = generator_config(SMALL, 0.25)
    n = 19

    def train(objective, g=gen):
        return flops.train_flops_per_example(SMALL, g, 128, objective)

    generator_cost = 2 * (flops.encoder_flops(gen, 128) + flops.masked_lm_head_flops(gen, n))
    assert train("electra") - train("electra", None) == pytest.approx(generator_cost)
    assert train("electra", None) == 2 * (flops.encoder_flops(SMALL, 128)
                                          + flops.discriminator_head_flops(SMALL, 128))
    assert train("electra_15") == train("electra")
    assert train("mlm") == train("mlm", None)  # BERT ignores the generator
    assert train("replace_mlm") - train("electra") == pytest.approx(
        2 * (flops.masked_lm_head_flops(SMALL, n) - flops.discriminator_head_flops(SMALL, 128)))
    assert train("all_tokens_mlm") - train("replace_mlm") == pytest.approx(
        2 * (flops.masked_lm_head_flops(SMALL, 128 - n) + 2 * 256 * 128))
    # Electric: a second generator tower and a cloze head (input 2 x 64) on all 128 tokens.
    assert train("electric") - train("electra") == pytest.approx(2 * (
        flops.encoder_flops(gen, 128) + flops.masked_lm_head_flops(gen, 128, input_width=128)
        - flops.masked_lm_head_flops(gen, n)))
    with pytest.raises(ValueError, match="electric"):
        train("electric", None)
    with pytest.raises(ValueError, match="objective"):
        train("bert")


def test_num_predictions_is_the_pipelines():
    from electra_tf.data.masking import default_max_predictions
    for length, prob in ((128, 0.15), (512, 0.15), (512, 0.25), (64, 0.4)):
        assert flops.num_predictions(length, prob) == default_max_predictions(length, prob)
    with pytest.raises(ValueError, match="masked slots"):
        flops.num_predictions(4, 0.15)


def test_options_and_errors():
    gen = generator_config(SMALL, 0.25)
    dense = flops.forward_flops_per_example(SMALL, gen, 128)
    sparse = flops.forward_flops_per_example(SMALL, gen, 128, dense_embedding_lookup=False)
    lookups = sum(flops.embedding_flops(c, 128)[k] for c in (SMALL, gen)
                  for k in ("word_lookup", "position_and_type_lookup"))
    assert dense - sparse == pytest.approx(lookups)
    # Inference: dropout off, and the heads differ only by what runs on top.
    train_encoder = flops.encoder_flops(SMALL, 128, training=True)
    assert flops.inference_flops_per_example(SMALL, 128, "none") < train_encoder
    assert (flops.inference_flops_per_example(SMALL, 128, "masked_lm")
            - flops.inference_flops_per_example(SMALL, 128, "none")
            == flops.masked_lm_head_flops(SMALL, 128, training=False))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        flops.train_flops_per_example(SMALL, gen, 1024)
    with pytest.raises(ValueError, match="head"):
        flops.inference_flops_per_example(SMALL, 128, "pooler")


@pytest.mark.parametrize("device,precision,expected", [
    ("NVIDIA H100 80GB HBM3", "mixed_bfloat16", 989.5e12),
    ("NVIDIA H100 80GB HBM3", "float32", 494.5e12),
    ("NVIDIA H100 PCIe", "mixed_float16", 756.5e12),
    ("NVIDIA H100 NVL", "mixed_bfloat16", 835.5e12),
    ("NVIDIA H200", "mixed_bfloat16", 989.5e12),
    ("NVIDIA H200 NVL", "mixed_bfloat16", 835.5e12),
    ("NVIDIA A100-SXM4-40GB", "mixed_bfloat16", 312e12),
    ("NVIDIA A100 80GB PCIe", "float32", 156e12),
    ("Tesla V100-SXM2-16GB", "mixed_float16", 125e12),
    ("Tesla V100-SXM2-16GB", "float32", 15.7e12),
    ("Tesla V100-SXM2-16GB", "mixed_bfloat16", None),
    ("Tesla V100-PCIE-32GB", "mixed_float16", 112e12),
    ("Tesla V100S-PCIE-32GB", "mixed_float16", 130e12),
    ("Tesla T4", "mixed_float16", 65e12),
    ("NVIDIA L4", "mixed_bfloat16", 121e12),
    ("NVIDIA A10G", "mixed_bfloat16", 70e12),
    ("NVIDIA A10", "mixed_bfloat16", 125e12),
    ("TPU v2", "mixed_bfloat16", 45e12),
    ("TPU v3", "mixed_bfloat16", 123e12),
    ("TPU v4", "mixed_bfloat16", 275e12),
    ("TPU v4", "float32", None),
    ("TPU v5 lite", "mixed_bfloat16", 197e12),
    ("v5litepod-8", "mixed_bfloat16", 197e12),
    ("TPU v5e", "mixed_bfloat16", 197e12),
    ("TPU v5", "mixed_bfloat16", 459e12),
    ("TPU v5p", "mixed_bfloat16", 459e12),
    ("TPU v6 lite", "mixed_bfloat16", 918e12),
    ("v6e-8", "mixed_bfloat16", 918e12),
    # Unknown: CPUs, and names that merely contain a known one.
    ("CPU", "float32", None),
    ("Intel(R) Xeon(R) CPU @ 2.20GHz", "mixed_bfloat16", None),
    ("NVIDIA L40S", "mixed_bfloat16", None),
    ("NVIDIA GH200 480GB", "mixed_bfloat16", None),
    ("", "float32", None),
])
def test_peak_flops_lookup(device, precision, expected):
    assert flops.peak_flops_per_second(device, precision) == expected


def test_peak_flops_precision():
    assert flops.peak_flops_per_second("NVIDIA A100-SXM4-80GB", "float32",
                                       tensor_float_32=False) == 19.5e12
    assert flops.peak_flops_per_second("Tesla T4", "float32") == 8.1e12  # no TF32 on Turing
    with pytest.raises(ValueError, match="precision"):
        flops.peak_flops_per_second("NVIDIA H100 80GB HBM3", "bfloat16")
