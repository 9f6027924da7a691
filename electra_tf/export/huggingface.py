"""Weights between our ELECTRA and HuggingFace transformers' PyTorch ELECTRA, both ways.

transformers keeps a pre-trained ELECTRA as two models: `ElectraForPreTraining` (the
discriminator: encoder + replaced-token head) and `ElectraForMaskedLM` (the generator: an
encoder + masked-LM head tied to its word embeddings). Our `ElectraPretrainer` holds both
networks; by default they share one embedding block, of which transformers' generator keeps
its own copy with the same values.

Everything here reads and writes state dicts of numpy arrays (name -> array), so torch is
needed only by whoever builds the transformers models:

    >>> discriminator, generator = export_hf_state_dicts(pretrainer)
    >>> hf = ElectraForPreTraining(ElectraConfig(**hf_config(pretrainer.discriminator.config)))
    >>> hf.load_state_dict({k: torch.from_numpy(v) for k, v in discriminator.items()})
    >>> load_hf_discriminator(pretrainer, hf.state_dict())  # torch tensors are accepted too

The names map by the tables below. torch Linear weights are [out, in] and our Dense kernels
[in, out], so every tensor whose name on our side ends in `kernel` is transposed.
"""

import re

import numpy as np

from electra_tf.errors import UserInputError
from electra_tf.modeling.config import EncoderConfig
from electra_tf.modeling.encoder import Encoder
from electra_tf.modeling.pretrainer import ElectraPretrainer

# ------------------------------------------------------------------------------ the mapping

# transformers name -> attribute path in our `Encoder`; "{i}" runs over the blocks.
ENCODER_NAMES = {
    "electra.embeddings.word_embeddings.weight": "embeddings.word_embeddings",
    "electra.embeddings.position_embeddings.weight": "embeddings.position_embeddings",
    "electra.embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings",
    "electra.embeddings.LayerNorm.weight": "embeddings.layer_norm.gamma",
    "electra.embeddings.LayerNorm.bias": "embeddings.layer_norm.beta",
    # Only when the embedding size differs from the hidden size.
    "electra.embeddings_project.weight": "embeddings_project.kernel",
    "electra.embeddings_project.bias": "embeddings_project.bias",
    "electra.encoder.layer.{i}.attention.self.query.weight": "blocks.{i}.attention.query.kernel",
    "electra.encoder.layer.{i}.attention.self.query.bias": "blocks.{i}.attention.query.bias",
    "electra.encoder.layer.{i}.attention.self.key.weight": "blocks.{i}.attention.key.kernel",
    "electra.encoder.layer.{i}.attention.self.key.bias": "blocks.{i}.attention.key.bias",
    "electra.encoder.layer.{i}.attention.self.value.weight": "blocks.{i}.attention.value.kernel",
    "electra.encoder.layer.{i}.attention.self.value.bias": "blocks.{i}.attention.value.bias",
    "electra.encoder.layer.{i}.attention.output.dense.weight":
        "blocks.{i}.attention.output_dense.kernel",
    "electra.encoder.layer.{i}.attention.output.dense.bias":
        "blocks.{i}.attention.output_dense.bias",
    "electra.encoder.layer.{i}.attention.output.LayerNorm.weight":
        "blocks.{i}.attention.layer_norm.gamma",
    "electra.encoder.layer.{i}.attention.output.LayerNorm.bias":
        "blocks.{i}.attention.layer_norm.beta",
    "electra.encoder.layer.{i}.intermediate.dense.weight": "blocks.{i}.intermediate.kernel",
    "electra.encoder.layer.{i}.intermediate.dense.bias": "blocks.{i}.intermediate.bias",
    "electra.encoder.layer.{i}.output.dense.weight": "blocks.{i}.output_dense.kernel",
    "electra.encoder.layer.{i}.output.dense.bias": "blocks.{i}.output_dense.bias",
    "electra.encoder.layer.{i}.output.LayerNorm.weight": "blocks.{i}.layer_norm.gamma",
    "electra.encoder.layer.{i}.output.LayerNorm.bias": "blocks.{i}.layer_norm.beta",
}

# transformers name -> attribute path in our `DiscriminatorHead`.
DISCRIMINATOR_HEAD_NAMES = {
    "discriminator_predictions.dense.weight": "dense.kernel",
    "discriminator_predictions.dense.bias": "dense.bias",
    "discriminator_predictions.dense_prediction.weight": "dense_prediction.kernel",
    "discriminator_predictions.dense_prediction.bias": "dense_prediction.bias",
}

# transformers name -> attribute path in our `MaskedLMHead`.
GENERATOR_HEAD_NAMES = {
    "generator_predictions.dense.weight": "dense.kernel",
    "generator_predictions.dense.bias": "dense.bias",
    "generator_predictions.LayerNorm.weight": "layer_norm.gamma",
    "generator_predictions.LayerNorm.bias": "layer_norm.beta",
    "generator_lm_head.bias": "output_bias",
}

# transformers' output projection of the generator, tied to (equal to) its word embeddings;
# our head multiplies by the embedding table itself.
TIED_LM_WEIGHT = "generator_lm_head.weight"
WORD_EMBEDDINGS = "electra.embeddings.word_embeddings.weight"

# Index buffers that older transformers checkpoints save; they hold no weights.
BUFFERS = ("electra.embeddings.position_ids", "electra.embeddings.token_type_ids")


# ------------------------------------------------------------------------------ configs


def hf_config(config: EncoderConfig, architecture: str | None = None, **overrides) -> dict:
    """Keyword arguments of transformers' `ElectraConfig` for an encoder of this shape.

    Args:
      config: the network's shape (`pretrainer.discriminator.config` or
        `pretrainer.generator.config`).
      architecture: e.g. "ElectraForPreTraining" or "ElectraForMaskedLM", written to
        `architectures` so `AutoModel` classes pick the right head.
      overrides: any other ElectraConfig field (e.g. pad_token_id).
    """
    values = {
        "model_type": "electra",
        "vocab_size": config.vocab_size,
        "embedding_size": config.embedding_width,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "gelu",  # transformers' "gelu" is the exact (erf) GELU, as ours
        "hidden_dropout_prob": config.dropout_rate,
        "attention_probs_dropout_prob": config.attention_dropout_rate,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_epsilon,
        "position_embedding_type": "absolute",
    }
    if architecture is not None:
        values["architectures"] = [architecture]
    return {**values, **overrides}


# config.json's mark of an Electric discriminator (written by export_hf; transformers keeps
# unknown keys as attributes).
ELECTRIC_MARK = "electra_tf_electric_energy_head"

# config.json keys that have no default: the shape is unknown without them.
REQUIRED_CONFIG = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                   "intermediate_size")


def config_from_hf(hf: dict, source: str = "the transformers config") -> EncoderConfig:
    """Our `EncoderConfig` from a transformers ELECTRA config dict (`config.to_dict()` or a
    checkpoint's config.json, named by `source` in errors)."""
    missing = [key for key in REQUIRED_CONFIG if not isinstance(hf.get(key), int)]
    if missing:
        raise UserInputError(f"{source} has no integer {missing[0]!r}, which every transformers "
                             "ELECTRA or BERT config holds; re-download it")
    if hf.get("hidden_act", "gelu") != "gelu":
        raise UserInputError(f"{source} has hidden_act={hf['hidden_act']!r}; our encoder "
                             "computes the exact GELU ('gelu') only")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise UserInputError(f"{source} has position_embedding_type="
                             f"{hf['position_embedding_type']!r}; our encoder has learned "
                             "absolute positions only")
    try:
        return _encoder_config(hf)
    except UserInputError as e:  # (a size out of range: "num_layers=0 must be at least 1")
        said = re.sub(r"\b(\w+)=", lambda m: f"{_HF_KEYS.get(m.group(1), m.group(1))}=",
                      str(e))
        fix = "" if ";" in said else "; fix it, or copy the model's config.json again"
        raise UserInputError(f"{source}: {said}{fix}") from None


# Our EncoderConfig's fields -> transformers config.json's keys, for its errors.
_HF_KEYS = {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
            "dropout_rate": "hidden_dropout_prob",
            "attention_dropout_rate": "attention_probs_dropout_prob",
            "layer_norm_epsilon": "layer_norm_eps"}


def _encoder_config(hf: dict) -> EncoderConfig:
    return EncoderConfig(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        # (transformers' ElectraConfig defaults it to 128; a BERT's embeds at its width)
        embedding_size=hf.get("embedding_size", 128 if hf.get("model_type") == "electra"
                              else hf["hidden_size"]),
        max_position_embeddings=hf.get("max_position_embeddings", 512),
        type_vocab_size=hf.get("type_vocab_size", 2),
        dropout_rate=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.1),
        initializer_range=hf.get("initializer_range", 0.02),
        layer_norm_epsilon=hf.get("layer_norm_eps", 1e-12))


# ------------------------------------------------------------------------------ weights


def load_hf_discriminator(target, state_dict) -> None:
    """Load an `ElectraForPreTraining` state dict into our discriminator.

    Args:
      target: an ElectraPretrainer (its discriminator and discriminator_predictions), an
        Encoder (the head's tensors are then ignored: e.g. for fine-tuning), or a tuple
        (Encoder, DiscriminatorHead or None).
      state_dict: transformers name -> numpy array or torch tensor. An `ElectraModel` state
        dict (no "electra." prefix) is accepted too.

    Raises UserInputError (a ValueError) naming the first missing, misshapen or unexpected
    tensor; nothing is written then.
    """
    encoder, head = _discriminator_parts(target)
    pairs = _pairs(encoder, "discriminator", head, "discriminator_predictions",
                   DISCRIMINATOR_HEAD_NAMES)
    _assign(pairs, _checked(pairs, state_dict, head is None))


def load_hf_generator(target, state_dict) -> None:
    """Load an `ElectraForMaskedLM` state dict into our generator.

    Args:
      target: an ElectraPretrainer (its generator and generator_predictions), an Encoder
        (the head's tensors are then ignored), or a tuple (Encoder, MaskedLMHead or None).
      state_dict: transformers name -> numpy array or torch tensor.

    With shared embeddings (the default) this writes the generator's copy of the embeddings
    into the block both networks use; `load_hf_state_dicts` checks the two copies agree.
    Raises UserInputError (a ValueError) naming the first bad tensor; nothing is written then.
    """
    encoder, head = _generator_parts(target)
    pairs = _pairs(encoder, "generator", head, "generator_predictions", GENERATOR_HEAD_NAMES)
    _assign(pairs, _checked(pairs, state_dict, head is None))


def load_hf_state_dicts(pretrainer: ElectraPretrainer, discriminator_state_dict,
                        generator_state_dict=None) -> None:
    """Load both networks of a transformers ELECTRA into `pretrainer` (the inverse of
    `export_hf_state_dicts`). Weights our two networks share (the embedding block, or all
    of them with sharing="all") must be equal in the two state dicts."""
    d_pairs = _pairs(pretrainer.discriminator, "discriminator",
                     pretrainer.discriminator_predictions, "discriminator_predictions",
                     DISCRIMINATOR_HEAD_NAMES)
    d_values = _checked(d_pairs, discriminator_state_dict,
                        pretrainer.discriminator_predictions is None)
    if generator_state_dict is None:
        _assign(d_pairs, d_values)
        return
    encoder, head = _generator_parts(pretrainer)
    g_pairs = _pairs(encoder, "generator", head, "generator_predictions", GENERATOR_HEAD_NAMES)
    g_values = _checked(g_pairs, generator_state_dict, False)
    discriminator_values = {id(v): (name, value) for (name, _, v), value in zip(d_pairs, d_values)}
    for (name, ours, variable), value in zip(g_pairs, g_values):
        if id(variable) in discriminator_values:
            d_name, d_value = discriminator_values[id(variable)]
            if not np.array_equal(d_value, value):
                raise UserInputError(
                    f"our networks share {ours}, but the generator's '{name}' differs from the "
                    f"discriminator's '{d_name}' (max abs difference "
                    f"{np.max(np.abs(d_value - value)):.3g}); load them into a pretrainer "
                    "with sharing='none'")
    _assign(d_pairs, d_values)
    _assign(g_pairs, g_values)


def export_hf_state_dicts(pretrainer: ElectraPretrainer):
    """(discriminator, generator) state dicts of numpy arrays in transformers' names.

    The discriminator's loads into `ElectraForPreTraining` (without its head, when the
    objective has none, into any `ElectraFor*` fine-tuning class); the generator's into
    `ElectraForMaskedLM`, with its own copy of shared embeddings and the tied
    `generator_lm_head.weight`. The generator's is None when the pretrainer has no
    single-tower generator (uniform generator, Electric).
    """
    discriminator = _state_dict(_pairs(
        pretrainer.discriminator, "discriminator", pretrainer.discriminator_predictions,
        "discriminator_predictions", DISCRIMINATOR_HEAD_NAMES))
    if pretrainer.generator is None:
        return discriminator, None
    generator = _state_dict(_pairs(pretrainer.generator, "generator",
                                   pretrainer.generator_predictions, "generator_predictions",
                                   GENERATOR_HEAD_NAMES))
    generator[TIED_LM_WEIGHT] = generator[WORD_EMBEDDINGS].copy()
    return discriminator, generator


# ------------------------------------------------------------------------------ helpers


def _discriminator_parts(target):
    if isinstance(target, ElectraPretrainer):
        return target.discriminator, target.discriminator_predictions
    return target if isinstance(target, tuple) else (target, None)


def _generator_parts(target):
    if isinstance(target, ElectraPretrainer):
        if target.generator is None:
            kind = ("Electric's two-tower generator has no transformers equivalent"
                    if target.generator_ltr is not None else "it samples uniformly")
            raise UserInputError(f"this pretrainer has no masked-LM generator to load ({kind})")
        return target.generator, target.generator_predictions
    return target if isinstance(target, tuple) else (target, None)


def _resolve(obj, path: str):
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def _pairs(encoder: Encoder, encoder_name: str, head, head_name: str, head_names: dict):
    """[(transformers name, our name, our variable)] of one network, in table order."""
    pairs = []
    for hf, ours in ENCODER_NAMES.items():
        if ours.startswith("embeddings_project.") and encoder.embeddings_project is None:
            continue
        for i in range(encoder.config.num_layers) if "{i}" in hf else [None]:
            path = ours.format(i=i)
            pairs.append((hf.format(i=i), f"{encoder_name}.{path}", _resolve(encoder, path)))
    if head is not None:
        pairs += [(hf, f"{head_name}.{ours}", _resolve(head, ours))
                  for hf, ours in head_names.items()]
    return pairs


def _transposed(our_name: str) -> bool:
    return our_name.endswith("kernel")


def _state_dict(pairs) -> dict:
    out = {}
    for name, ours, variable in pairs:
        value = np.array(variable.numpy())
        out[name] = np.ascontiguousarray(value.T) if _transposed(ours) else value
    return out


def _as_numpy(value):
    if hasattr(value, "detach"):  # a torch tensor; torch itself is not imported here
        value = value.detach().cpu()
        value = value.float() if value.is_floating_point() else value
        value = value.numpy()
    return np.asarray(value)


class TensorMismatch(UserInputError):
    """A state-dict tensor that does not fit our network, in transformers' names and layout,
    so that an importer of another format (the TF1 one) can say it in that format's terms.

    kind: "missing", "shape" or "unexpected"; network: "discriminator" or "generator" (the
    state dict being checked); shape: the tensor's (None when missing); expected: the shape
    our network needs (None when unexpected).
    """

    def __init__(self, message: str, kind: str, network: str, name: str,
                 shape: tuple | None, expected: tuple | None):
        super().__init__(message)
        self.kind, self.network, self.name = kind, network, name
        self.shape, self.expected = shape, expected


def _checked(pairs, state_dict, ignore_heads: bool):
    """The values of `pairs` from `state_dict`, in our layout, after checking names and
    shapes; raises TensorMismatch on the first missing, misshapen or unexpected tensor."""
    network = pairs[0][1].split(".")[0]
    heads = ("discriminator_predictions.", "generator_predictions.", "generator_lm_head.")
    state_dict = dict(state_dict)
    if WORD_EMBEDDINGS not in state_dict and WORD_EMBEDDINGS[len("electra."):] in state_dict:
        # An ElectraModel's state dict: the encoder without the "electra." prefix.
        state_dict = {k if k.startswith(heads) else "electra." + k: v
                      for k, v in state_dict.items()}
    values = []
    for name, ours, variable in pairs:
        expected = tuple(variable.shape)[::-1] if _transposed(ours) else tuple(variable.shape)
        if name not in state_dict:
            raise TensorMismatch(
                f"the state dict has no '{name}' (shape {expected}) for our {ours}; check that "
                "it is the right model (ElectraForPreTraining for the discriminator, "
                "ElectraForMaskedLM for the generator) and that the configs match",
                "missing", network, name, None, expected)
        value = _as_numpy(state_dict[name])
        if tuple(value.shape) != expected:
            raise TensorMismatch(
                f"'{name}' has shape {tuple(value.shape)} but our {ours} needs {expected}; "
                "build our model with the checkpoint's config (see config_from_hf)",
                "shape", network, name, tuple(value.shape), expected)
        value = value.T if _transposed(ours) else value
        values.append(np.asarray(value, dtype=variable.dtype))
    known = {name for name, _, _ in pairs} | set(BUFFERS)
    if TIED_LM_WEIGHT in state_dict:
        tied, table = _as_numpy(state_dict[TIED_LM_WEIGHT]), _as_numpy(state_dict[WORD_EMBEDDINGS])
        if tied.shape != table.shape or not np.array_equal(tied, table):
            raise UserInputError(
                f"'{TIED_LM_WEIGHT}' {tied.shape} is not equal to '{WORD_EMBEDDINGS}' "
                f"{table.shape}; our masked-LM head is tied to the word embeddings")
        known.add(TIED_LM_WEIGHT)
    for name, value in state_dict.items():
        if name not in known and not (ignore_heads and name.startswith(heads)):
            shape = tuple(_as_numpy(value).shape)
            raise TensorMismatch(
                f"the state dict has '{name}' (shape {shape}) that our model has no place "
                "for; check the model type and config (num_layers, embedding_size)",
                "unexpected", network, name, shape, None)
    return values


def _assign(pairs, values):
    for (_, _, variable), value in zip(pairs, values):
        variable.assign(value)
