"""Parity with HuggingFace transformers' PyTorch ELECTRA: the same weights give the same
logits (within 1e-4) in both directions of `electra_tf.export.huggingface`, weights survive
a round trip exactly, bad state dicts fail with the tensor's name, and our networks have the
published parameter counts of the released shapes."""

import keras
import numpy as np
import pytest
import torch
import transformers

from electra_tf.export.huggingface import (config_from_hf, export_hf_state_dicts, hf_config,
                                           load_hf_discriminator, load_hf_generator,
                                           load_hf_state_dicts)
from electra_tf.modeling.config import encoder_config, generator_config
from electra_tf.modeling.pretrainer import ElectraPretrainer

V = 1000
TOLERANCE = 1e-4  # the bound on logits
# E != H in both networks (discriminator 48 -> 64, generator 48 -> 32), and E == H in both.
SHAPES = {
    "factorized": (encoder_config("tiny", vocab_size=V, hidden_size=64, embedding_size=48,
                                  num_layers=2, num_heads=2, intermediate_size=128,
                                  max_position_embeddings=64), 0.5),
    "unfactorized": (encoder_config("tiny", vocab_size=V, hidden_size=64, embedding_size=None,
                                    num_layers=2, num_heads=2, intermediate_size=128,
                                    max_position_embeddings=64), 1.0),
}


def _inputs(B=3, L=12, seed=0):
    """[CLS] A [SEP] B [SEP] rows, two padded, segment 1 on B; int32 arrays [B, L]."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(104, V, (B, L)).astype(np.int32)
    mask = np.ones((B, L), np.int32)
    segments = np.zeros((B, L), np.int32)
    for row, (length, split) in enumerate([(L, 6), (7, 4), (10, 5)][:B]):
        ids[row, 0], ids[row, split - 1], ids[row, length - 1] = 101, 102, 102
        segments[row, split:length] = 1
        ids[row, length:], mask[row, length:] = 0, 0
    return ids, mask, segments


def _pretrainer(shape, sharing="embeddings", seed=1):
    keras.utils.set_random_seed(seed)
    disc, fraction = SHAPES[shape]
    gen = disc if sharing == "all" else generator_config(disc, fraction)
    return ElectraPretrainer(disc, gen, sharing=sharing)


def _hf_model(cls, config):
    return cls(transformers.ElectraConfig(**hf_config(config))).eval()


def _randomize_hf(model, seed):
    """Weights far from the initialiser's (LayerNorms and biases included) so every tensor
    matters to the logits."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
    return model


def _randomize_ours(model, seed):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        noise = rng.normal(0.0, 0.1, tuple(v.shape)).astype(np.float32)
        v.assign(noise + 1 if v.path.endswith("gamma") else noise)


def _numpy_state(model):
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _torch_state(state):
    return {k: torch.from_numpy(v) for k, v in state.items()}


def _hf_logits(model, ids, mask, segments):
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids).long(),
                    attention_mask=torch.from_numpy(mask).long(),
                    token_type_ids=torch.from_numpy(segments).long())
    return out.logits.numpy()


def _our_discriminator_logits(model, ids, mask, segments):
    hidden = model.discriminator(ids, mask, segments, training=False)
    return np.asarray(model.discriminator_predictions(hidden))


def _our_generator_logits(model, ids, mask, segments):
    hidden = model.generator(ids, mask, segments, training=False)
    return np.asarray(model.generator_predictions(
        hidden, model.generator.embeddings.word_embeddings))


def _max_diff(a, b):
    assert a.shape == b.shape
    return float(np.max(np.abs(a - b)))


# ------------------------------------------------------------------------------ logits


@pytest.mark.parametrize("shape", SHAPES)
def test_discriminator_logits_match_transformers(shape):
    hf = _randomize_hf(_hf_model(transformers.ElectraForPreTraining, SHAPES[shape][0]), 0)
    model = _pretrainer(shape)
    load_hf_discriminator(model, _numpy_state(hf))
    ids, mask, segments = _inputs()
    expected = _hf_logits(hf, ids, mask, segments)
    ours = _our_discriminator_logits(model, ids, mask, segments)
    assert np.std(expected) > 0.1  # the weights make a difference to the logits
    diff = _max_diff(ours, expected)
    print(f"discriminator {shape}: max abs diff {diff:.2e}")
    assert diff <= TOLERANCE


@pytest.mark.parametrize("shape", SHAPES)
def test_generator_logits_match_transformers(shape):
    model = _pretrainer(shape)
    hf = _randomize_hf(_hf_model(transformers.ElectraForMaskedLM, model.generator.config), 0)
    load_hf_generator(model, _numpy_state(hf))
    ids, mask, segments = _inputs()
    expected = _hf_logits(hf, ids, mask, segments)  # [B, L, V]
    diff = _max_diff(_our_generator_logits(model, ids, mask, segments), expected)
    print(f"generator {shape}: max abs diff {diff:.2e} (all positions)")
    assert diff <= TOLERANCE

    # The pretrainer's own path: logits at the masked positions only.
    positions = np.array([[1, 3, 8], [2, 5, 0], [1, 7, 8]], np.int32)
    batch = {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
             "masked_lm_positions": positions}
    logits, _ = model.generator_logits(batch, training=False)
    gathered = np.take_along_axis(expected, positions[:, :, None], axis=1)
    assert _max_diff(np.asarray(logits), gathered) <= TOLERANCE


@pytest.mark.parametrize("shape", SHAPES)
def test_exported_weights_give_transformers_our_logits(shape):
    model = _pretrainer(shape)
    _randomize_ours(model, 2)
    discriminator, generator = export_hf_state_dicts(model)
    hf_disc = _hf_model(transformers.ElectraForPreTraining, model.discriminator.config)
    hf_gen = _hf_model(transformers.ElectraForMaskedLM, model.generator.config)
    hf_disc.load_state_dict(_torch_state(discriminator), strict=True)
    hf_gen.load_state_dict(_torch_state(generator), strict=True)
    ids, mask, segments = _inputs(seed=3)
    d = _max_diff(_our_discriminator_logits(model, ids, mask, segments),
                  _hf_logits(hf_disc, ids, mask, segments))
    g = _max_diff(_our_generator_logits(model, ids, mask, segments),
                  _hf_logits(hf_gen, ids, mask, segments))
    print(f"export {shape}: discriminator {d:.2e}, generator {g:.2e}")
    assert d <= TOLERANCE and g <= TOLERANCE


# ------------------------------------------------------------------------------ round trip


@pytest.mark.parametrize("shape,sharing", [("factorized", "embeddings"),
                                           ("unfactorized", "embeddings"),
                                           ("factorized", "none"), ("factorized", "all")])
def test_round_trip_gives_identical_weights(shape, sharing):
    source = _pretrainer(shape, sharing, seed=1)
    _randomize_ours(source, 4)
    discriminator, generator = export_hf_state_dicts(source)
    # transformers' generator has its own copy of the shared embeddings, equal to ours.
    for name in ("electra.embeddings.word_embeddings.weight",
                 "electra.embeddings.LayerNorm.bias"):
        if sharing != "none":
            np.testing.assert_array_equal(discriminator[name], generator[name])
    np.testing.assert_array_equal(generator["generator_lm_head.weight"],
                                  generator["electra.embeddings.word_embeddings.weight"])

    target = _pretrainer(shape, sharing, seed=2)
    load_hf_state_dicts(target, discriminator, generator)
    assert len(target.weights) == len(source.weights)
    for a, b in zip(source.weights, target.weights):
        assert a.path == b.path
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_transformers_sizes_accept_our_state_dicts():
    model = _pretrainer("factorized")
    discriminator, generator = export_hf_state_dicts(model)
    for cls, state, config in [
            (transformers.ElectraForPreTraining, discriminator, model.discriminator.config),
            (transformers.ElectraForMaskedLM, generator, model.generator.config)]:
        hf = _hf_model(cls, config)
        assert set(hf.state_dict()) == set(state)
        for name, value in hf.state_dict().items():
            assert tuple(value.shape) == state[name].shape, name


def test_config_round_trips_through_transformers():
    for shape in SHAPES:
        disc = SHAPES[shape][0]
        for config in (disc, generator_config(disc, 0.5)):
            hf = transformers.ElectraConfig(**hf_config(config)).to_dict()
            back = config_from_hf(hf)
            assert back.embedding_width == config.embedding_width
            assert hf_config(back) == hf_config(config)
    with pytest.raises(ValueError, match="hidden_act='gelu_new'"):
        config_from_hf({**hf_config(SHAPES["factorized"][0]), "hidden_act": "gelu_new"})


def test_encoder_alone_loads_a_discriminator_and_an_electra_model():
    model = _pretrainer("factorized")
    hf = _randomize_hf(_hf_model(transformers.ElectraForPreTraining, model.discriminator.config), 5)
    state = _numpy_state(hf)
    load_hf_discriminator(model.discriminator, state)  # the head's tensors are ignored
    ids, mask, segments = _inputs()
    with torch.no_grad():
        expected = hf.electra(input_ids=torch.from_numpy(ids).long(),
                              attention_mask=torch.from_numpy(mask).long(),
                              token_type_ids=torch.from_numpy(segments).long())[0].numpy()
    hidden = np.asarray(model.discriminator(ids, mask, segments))
    assert _max_diff(hidden, expected) <= TOLERANCE
    # An ElectraModel's state dict has no "electra." prefix.
    _randomize_ours(model, 6)
    load_hf_discriminator(model.discriminator, _numpy_state(hf.electra))
    assert _max_diff(np.asarray(model.discriminator(ids, mask, segments)), expected) <= TOLERANCE


# ------------------------------------------------------------------------------ errors


def _snapshot(model):
    return [v.numpy().copy() for v in model.weights]


def _assert_unchanged(model, before):
    for value, v in zip(before, model.weights):
        np.testing.assert_array_equal(value, v.numpy(), err_msg=v.path)


def test_bad_state_dicts_name_the_tensor_and_write_nothing():
    model = _pretrainer("factorized")
    discriminator, generator = export_hf_state_dicts(model)
    _randomize_ours(model, 7)
    before = _snapshot(model)

    missing = dict(discriminator)
    del missing["electra.encoder.layer.1.output.LayerNorm.bias"]
    with pytest.raises(ValueError, match=r"no 'electra\.encoder\.layer\.1\.output\.LayerNorm"
                                         r"\.bias' \(shape \(64,\)\)"):
        load_hf_discriminator(model, missing)

    misshapen = {**discriminator,
                 "electra.embeddings_project.weight": np.zeros((64, 32), np.float32)}
    with pytest.raises(ValueError, match=r"'electra\.embeddings_project\.weight' has shape "
                                         r"\(64, 32\) but .* needs \(64, 48\)"):
        load_hf_discriminator(model, misshapen)

    extra = {**discriminator, "electra.encoder.layer.2.output.dense.bias": np.zeros(64)}
    with pytest.raises(ValueError, match=r"'electra\.encoder\.layer\.2\.output\.dense\.bias'"):
        load_hf_discriminator(model, extra)

    same_width = _pretrainer("factorized", "all")  # one network: every encoder tensor fits
    with pytest.raises(ValueError, match=r"no 'discriminator_predictions\.dense\.weight'.*"
                                         r"ElectraForPreTraining for the discriminator"):
        load_hf_discriminator(same_width, export_hf_state_dicts(same_width)[1])  # wrong network

    untied = {**generator, "generator_lm_head.weight": generator["generator_lm_head.weight"] + 1}
    with pytest.raises(ValueError, match="generator_lm_head.weight"):
        load_hf_generator(model, untied)

    other = {**generator, "electra.embeddings.LayerNorm.weight":
             generator["electra.embeddings.LayerNorm.weight"] * 2}
    with pytest.raises(ValueError, match=r"share generator\.embeddings\.layer_norm\.gamma"):
        load_hf_state_dicts(model, discriminator, other)

    _assert_unchanged(model, before)


def test_pretrainer_without_a_masked_lm_generator():
    disc = SHAPES["factorized"][0]
    model = ElectraPretrainer(disc, None, uniform_generator=True)
    discriminator, generator = export_hf_state_dicts(model)
    assert generator is None and "discriminator_predictions.dense.weight" in discriminator
    with pytest.raises(ValueError, match="no masked-LM generator"):
        load_hf_generator(model, {})


# ------------------------------------------------------------------------------ sizes


def _count(variables):
    unique = {id(v): v for v in variables}.values()
    return sum(int(np.prod(v.shape)) for v in unique)


# (size, generator hidden fraction, encoder without pooler, discriminator with its head,
#  standalone generator: own embeddings + encoder + tied MLM head), vocab 30522.
PUBLISHED = [
    ("small", 0.25, 13_483_008, 13_549_057, 4_620_026),    # paper's small generator (64)
    ("small", 1.0, 13_483_008, 13_549_057, 13_546_682),    # Small++ (256)
    ("base", 1 / 3, 108_891_648, 109_483_009, 33_740_602),  # Base++ generator (256)
    ("large", 0.25, 334_092_288, 335_142_913, 51_295_290),  # generator (256)
]


@pytest.mark.parametrize("size,fraction,encoder,discriminator,generator", PUBLISHED,
                         ids=["small", "small++", "base", "large"])
def test_parameter_counts_match_published(size, fraction, encoder, discriminator, generator):
    disc = encoder_config(size, vocab_size=30522)
    model = ElectraPretrainer(disc, generator_config(disc, fraction))
    assert model.generator.config.hidden_size == (256 if fraction != 0.25 or size == "large"
                                                  else 64)
    assert _count(model.discriminator.weights) == encoder
    assert _count(model.discriminator.weights
                  + model.discriminator_predictions.weights) == discriminator
    # The generator's weights include the shared embedding block, which transformers'
    # standalone generator holds as its own copy; the MLM head adds no output matrix.
    assert _count(model.generator.weights + model.generator_predictions.weights) == generator
