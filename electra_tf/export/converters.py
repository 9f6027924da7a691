"""Checkpoints in and out: the official TF1 ELECTRA checkpoints, HuggingFace directories.

    import_tf1("electra_base/electra_base", "out/electra_base")   # both networks
    import_hf("google/electra-base-discriminator dir", "out/x", generator_dir=...)
    export_hf("out/my_run", "out/hf")  -> out/hf/discriminator, out/hf/generator

An imported model dir is what run_pretraining.py writes (a checkpoint `ckpt-1`,
`operative_config.gin` with the architecture, `model_info.json`): export, fine-tuning and
continued pre-training (`--init_checkpoint`) take it. The architecture is read from the
source (the tensors' shapes for TF1, config.json for HuggingFace); the vocab is the
source's (vocab.txt beside the TF1 checkpoint, a HuggingFace dir's vocab.txt or the
WordPiece vocab of its tokenizer.json), copied into the model dir, and so is its case.

The official TF1 checkpoint holds both networks: the discriminator under `electra/`, the
generator under `generator/` reading `electra/embeddings` (tied), heads under
`discriminator_predictions/` and `generator_predictions/`; one trained as BERT
(electra_objective=False) or with untied_generator=False has no `generator/`, its
`generator_predictions/` read `electra/` (imported as objective 'mlm', or sharing 'all'
beside `discriminator_predictions/`). The checkpoint's names are translated to
transformers' and loaded through the same checked mapping as HuggingFace weights
(`huggingface.py`), so a tensor that does not fit is an error naming it, never a partial
load; optimizer slots (`adam_m`, `adam_v`), `global_step` and other extras are skipped and
listed.
"""

import contextlib
import dataclasses
import io
import json
import os
import pickle
import re

import keras
import numpy as np
import tensorflow as tf

from electra_tf import atomic, tokenization
from electra_tf.data import writer
from electra_tf.errors import UserInputError, first_line
from electra_tf.export import huggingface
from electra_tf.modeling.config import EncoderConfig, generator_config
from electra_tf.modeling.pretrainer import ElectraPretrainer
from electra_tf.training.checkpoints import (RENAME, checkpoint_prefix, folder_checkpoint,
                                           generator_stage, held_checkpoint, is_hf_folder,
                                           is_tf1_checkpoint, load_pretrainer)
from electra_tf.training.pretraining import MODEL_INFO, OPERATIVE_CONFIG, describe

DEFAULT_VOCAB = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "data", "vocab", "bert_uncased.txt")
# The parts of a pretrainer an import can leave freshly initialised (model_info.json's
# `not_imported`), as a user reads them.
NOT_IMPORTED = {
    "discriminator_predictions": "the replaced-token head (discriminator_predictions)",
    "generator": "the generator (its layers and masked-LM head)"}
# TF1 tensors that are not weights of the networks.
_SKIPPED = re.compile(r"(^global_step$|/adam_[mv]$|^generator_predictions/temperature$)")
# The official code's Electric (electric_objective=True) scopes, which ELECTRA has not.
_ELECTRIC_SCOPES = {"generator_ltr", "generator_rtl", "cloze_predictions"}


# ------------------------------------------------------------------------------ TF1


def tf1_to_hf_name(name: str) -> tuple[str | None, str | None]:
    """(network, transformers name) of an official TF1 variable; (None, None) if unknown.

    network is "discriminator", "generator" or "shared" (the embedding block both read).
    """
    parts = name.split("/")
    if parts[0] == "discriminator_predictions":
        layer = {"dense": "dense", "dense_1": "dense_prediction"}.get(parts[1])
        return ("discriminator", f"discriminator_predictions.{layer}.{_leaf(parts[2])}"
                ) if layer and len(parts) == 3 else (None, None)
    if parts[0] == "generator_predictions":
        if parts[1:] == ["output_bias"]:
            return "generator", "generator_lm_head.bias"
        if len(parts) == 3 and parts[1] in ("dense", "LayerNorm"):
            return "generator", f"generator_predictions.{parts[1]}.{_leaf(parts[2])}"
        return None, None
    if parts[0] not in ("electra", "generator"):
        return None, None
    network = "discriminator" if parts[0] == "electra" else "generator"
    if parts[1] == "embeddings":
        network = "shared" if parts[0] == "electra" else "generator"
    rest = ".".join(parts[1:-1])
    rest = re.sub(r"layer_(\d+)", r"layer.\1", rest)
    leaf = parts[-1]
    if parts[1] == "embeddings" and leaf.endswith("_embeddings"):
        return network, f"electra.embeddings.{leaf}.weight"
    return network, f"electra.{rest}.{_leaf(leaf)}"


def _leaf(leaf: str) -> str:
    return {"kernel": "weight", "gamma": "weight", "beta": "bias"}.get(leaf, leaf)


def hf_to_tf1_name(network: str, hf_name: str) -> str:
    """The official TF1 variable a transformers name comes from (tf1_to_hf_name's inverse):
    network "generator" reads generator/..., "discriminator" and "shared" electra/..."""
    parts = hf_name.split(".")
    if hf_name == "generator_lm_head.bias":
        return "generator_predictions/output_bias"
    if parts[0] in ("discriminator_predictions", "generator_predictions"):
        layer = {"dense_prediction": "dense_1"}.get(parts[1], parts[1])
        return f"{parts[0]}/{layer}/{_tf1_leaf(parts[1], parts[2])}"
    scope = "generator" if network == "generator" else "electra"
    if parts[1] == "embeddings" and parts[2].endswith("_embeddings"):
        return f"{scope}/embeddings/{parts[2]}"
    path = re.sub(r"layer/(\d+)", r"layer_\1", "/".join(parts[1:-1]))
    return f"{scope}/{path}/{_tf1_leaf(parts[-2], parts[-1])}"


def _tf1_leaf(module: str, leaf: str) -> str:
    if module == "LayerNorm":
        return {"weight": "gamma", "bias": "beta"}[leaf]
    return {"weight": "kernel"}.get(leaf, leaf)


def read_tf1(checkpoint: str) -> tuple[dict, dict, list[str]]:
    """(discriminator state dict, generator state dict or {}, skipped names) of an official
    TF1 checkpoint, in transformers' names and layouts (kernels transposed to [out, in])."""
    if tf.io.gfile.exists(os.path.join(checkpoint, OPERATIVE_CONFIG)):
        raise _needs_no_conversion(checkpoint, "an official TF1 checkpoint")
    # (TensorFlow's reader finds the files by a pattern built from the path)
    atomic.check_no_wildcards(checkpoint, f"--input={checkpoint}", RENAME)
    if not tf.io.gfile.exists(checkpoint + ".index"):
        raise UserInputError(f"--input={checkpoint} is not a TF1 checkpoint prefix (no "
                             f"{checkpoint}.index); pass e.g. electra_base/electra_base, "
                             "the released zip's prefix")
    if not tf.io.gfile.glob(checkpoint + ".data-*"):
        raise UserInputError(f"{checkpoint} has an .index but no data file "
                             f"({os.path.basename(checkpoint)}.data-00000-of-00001 beside it); "
                             "re-download the checkpoint (all its files)")
    discriminator, generator, shared, skipped = {}, {}, {}, []
    try:
        reader = tf.train.load_checkpoint(checkpoint)
        names = sorted(reader.get_variable_to_shape_map())
        # A model dir's: its model's names, or (a trained run's, whose variables are named
        # by the optimizer's list) an object-based checkpoint beside its model_info.json.
        if any(name.startswith("model/discriminator/") for name in names) or (
                "_CHECKPOINTABLE_OBJECT_GRAPH" in names and tf.io.gfile.exists(
                    os.path.join(os.path.dirname(checkpoint) or ".", MODEL_INFO))):
            raise _needs_no_conversion(checkpoint, "an official TF1 checkpoint")
        electric = sorted({name.split("/")[0] for name in names} & _ELECTRIC_SCOPES)
        if electric:  # read as ELECTRA, its head's energies would be served as probabilities
            raise UserInputError(
                f"{checkpoint} is an Electric checkpoint (the official code's "
                f"{', '.join(s + '/' for s in electric)}): its two-tower generator and energy "
                "head are not imported; convert ELECTRA checkpoints only")
        for name in names:
            network, hf_name = tf1_to_hf_name(name)
            if _SKIPPED.search(name) or network is None:
                skipped.append(name)
                continue
            value = reader.get_tensor(name)
            if name.endswith("/kernel"):
                value = np.ascontiguousarray(value.T)
            {"discriminator": discriminator, "generator": generator, "shared": shared}[
                network][hf_name] = value
    except (tf.errors.OpError, IndexError) as e:
        # A truncated .data file fails in get_tensor: "Read less bytes than requested".
        raise UserInputError(f"{checkpoint} could not be read ({first_line(e)}): its .index or "
                             ".data file is missing, truncated or corrupt; re-download the "
                             "checkpoint") from None
    if not discriminator and not shared:
        raise UserInputError(f"{checkpoint} holds no ELECTRA variables (electra/...); is it an "
                             "ELECTRA checkpoint?")
    discriminator.update(shared)
    if generator and not any(k.startswith("electra.embeddings.") for k in generator):
        generator.update(shared)  # tied embeddings: the generator reads electra/embeddings
    return discriminator, generator, skipped


def _needs_no_conversion(path: str, source: str) -> UserInputError:
    """The refusal of a model dir of this project (or a checkpoint in one) as the `source`
    of an import."""
    model_dir = path if tf.io.gfile.isdir(path) else os.path.dirname(path) or "."
    what = "model dir" if model_dir == path else "checkpoint"
    return UserInputError(
        f"{path} is a {what} of this project, not {source}: it needs no conversion (pass "
        f"{model_dir} as is to --init_checkpoint or --model_dir); for HuggingFace folders, "
        f"convert it with --source=native --target=hf --input={model_dir}")


def config_from_state_dict(state: dict, num_heads: int | None = None,
                           network: str = "discriminator",
                           checkpoint: str = "the checkpoint") -> EncoderConfig:
    """An encoder's shape from its tensors (transformers names, read from an official TF1
    `checkpoint`'s `network`); heads: hidden / 64 as in every released ELECTRA, unless
    given."""
    def tensor(name):
        if name not in state:
            raise UserInputError(f"{checkpoint} has no {hf_to_tf1_name(network, name)}; is it "
                                 "a complete ELECTRA checkpoint?")
        return state[name]

    layers = {int(m.group(1)) for k in state
              for m in [re.match(r"electra\.encoder\.layer\.(\d+)\.", k)] if m}
    if not layers:
        scope = "generator" if network == "generator" else "electra"
        raise UserInputError(f"{checkpoint} has no encoder layers ({scope}/encoder/layer_0/...)")
    word = tensor("electra.embeddings.word_embeddings.weight")
    hidden = tensor("electra.encoder.layer.0.attention.self.query.weight").shape[0]
    return EncoderConfig(
        vocab_size=word.shape[0], hidden_size=hidden, num_layers=max(layers) + 1,
        num_heads=num_heads or max(1, hidden // 64),
        intermediate_size=tensor("electra.encoder.layer.0.intermediate.dense.weight").shape[0],
        embedding_size=word.shape[1],
        max_position_embeddings=tensor("electra.embeddings.position_embeddings.weight").shape[0],
        type_vocab_size=tensor("electra.embeddings.token_type_embeddings.weight").shape[0])


def _fraction(generator_hidden_fraction: float | None) -> float:
    """A fresh generator's hidden fraction: 1/4 (the paper's small and large; the released
    Small++'s is 1.0, base's 1/3) unless given."""
    return 0.25 if generator_hidden_fraction is None else generator_hidden_fraction


# The released models' hidden sizes (Small, Base, Large), each with a head per 64.
_RELEASED_HIDDEN_SIZES = (256, 768, 1024)


def import_tf1(checkpoint: str, output_dir: str, vocab_file: str | None = None,
               lower_case: bool | None = None, num_heads: int | None = None,
               max_seq_length: int | None = None,
               generator_hidden_fraction: float | None = None, seed: int = 0) -> dict:
    """Imports an official TF1 ELECTRA checkpoint (both networks, any size) into a model
    dir; returns {"model_info", "skipped", "not_imported", "notes"}. A checkpoint without a
    generator or a replaced-token head (a fine-tuned one) gets those parts freshly
    initialised from `seed` (a generator of `generator_hidden_fraction`, None: 1/4), listed
    in `not_imported` as import_hf does; a fraction for a checkpoint with a generator is
    refused.

    `vocab_file` None: the vocab.txt beside the checkpoint (the released checkpoints ship
    one), else DEFAULT_VOCAB, said in `notes`. `lower_case` None: as the vocab is (cased
    or not, see writer.check_case)."""
    check_new_model_dir(output_dir)
    checkpoint = checkpoint_prefix(checkpoint.rstrip("/"))  # (one of its files given)
    if is_hf_folder(checkpoint):
        raise UserInputError(f"--input={checkpoint} is a HuggingFace model folder, not a TF1 "
                             "checkpoint; pass --source=hf")
    if (tf.io.gfile.isdir(checkpoint)
            and not tf.io.gfile.exists(os.path.join(checkpoint, OPERATIVE_CONFIG))):
        # The released zip's folder: its `checkpoint` file names the prefix.
        checkpoint = folder_checkpoint(checkpoint, f"--input={checkpoint}") or checkpoint
    notes = []
    if vocab_file is None:
        beside = os.path.join(os.path.dirname(checkpoint), "vocab.txt")
        vocab_file = beside if tf.io.gfile.exists(beside) else _default_vocab(
            f"{os.path.dirname(checkpoint) or '.'} has no vocab.txt", notes)
    discriminator, generator, skipped = read_tf1(checkpoint)
    if generator and generator_hidden_fraction is not None:
        raise UserInputError(f"--generator_hidden_fraction is for a checkpoint without a "
                             f"generator; {checkpoint} has one: drop the flag")
    disc_config = config_from_state_dict(discriminator, num_heads, checkpoint=checkpoint)
    if num_heads is None and disc_config.hidden_size not in _RELEASED_HIDDEN_SIZES:
        # (a wrong count reads every weight and gives other outputs, without an error)
        notes.append(
            f"a TF1 checkpoint does not record its number of attention heads: "
            f"{disc_config.num_heads} assumed for its hidden size {disc_config.hidden_size} "
            "(one per 64, as in the released models); pass --num_heads=N if it was trained "
            "with another")
    objective, sharing = "electra", "embeddings"
    if generator and not any(k.startswith("electra.encoder.") for k in generator):
        # generator_predictions/ without generator/: the official code's
        # electra_objective=False (BERT's masked LM) or untied_generator=False built the
        # generator in the electra/ scope, one network with the discriminator.
        if "discriminator_predictions.dense.weight" in discriminator:
            gen_config, sharing = disc_config, "all"
        else:
            gen_config, objective = None, "mlm"
        generator = {**{k: v for k, v in discriminator.items()
                        if not k.startswith("discriminator_predictions.")}, **generator}
    elif generator:
        gen_config = config_from_state_dict(generator, network="generator",
                                            checkpoint=checkpoint)
        tied = np.array_equal(generator["electra.embeddings.word_embeddings.weight"],
                              discriminator["electra.embeddings.word_embeddings.weight"])
        sharing = "embeddings" if tied else "none"
    else:  # e.g. a fine-tuned checkpoint: a fresh generator, recorded as not imported
        gen_config = generator_config(disc_config, _fraction(generator_hidden_fraction))
    model = new_pretrainer(disc_config, gen_config, sharing, objective, seed)
    _check_describable(model, checkpoint)
    try:
        not_imported = _load_networks(model, discriminator, generator or None)
    except huggingface.TensorMismatch as e:
        raise _in_tf1_terms(e, checkpoint) from None
    info = write_model_dir(model, output_dir, vocab_file, lower_case, max_seq_length,
                           source=f"tf1:{atomic.absolute(checkpoint)}",
                           not_imported=not_imported)
    return {"model_info": info, "skipped": skipped, "not_imported": not_imported,
            "notes": notes}


def _default_vocab(reason: str, notes: list[str]) -> str:
    notes.append(f"{reason}, so the model dir gets {DEFAULT_VOCAB} (BERT's uncased vocab, the "
                 "released ELECTRA models'); pass --vocab_file if the model was trained with "
                 "another")
    return DEFAULT_VOCAB


def _check_describable(model: ElectraPretrainer, source: str):
    """gin_bindings' refusal of a generator this project cannot describe, before the
    weights are loaded, naming its `source` (it named none)."""
    try:
        gin_bindings(model)
    except UserInputError as e:
        raise UserInputError(f"{source}: {e}") from None


def _in_tf1_terms(error: huggingface.TensorMismatch, checkpoint: str) -> UserInputError:
    """A tensor that does not fit, said in the TF1 checkpoint's names and layout (kernels
    [in, out]); the shapes our model needs come from the checkpoint's other tensors. (A
    generator reading electra/embeddings never fails on them: the discriminator, checked
    first, holds the same arrays.)"""
    name = hf_to_tf1_name(error.network, error.name)
    layout = (lambda shape: tuple(reversed(shape))) if name.endswith("/kernel") else tuple
    if error.kind == "missing":
        return UserInputError(
            f"{checkpoint} has no {name} (shape {layout(error.expected)}), which the rest of its "
            "tensors imply; is it a complete ELECTRA checkpoint?")
    if error.kind == "shape":
        return UserInputError(
            f"{checkpoint}'s {name} has shape {layout(error.shape)} but the rest of its tensors "
            f"imply {layout(error.expected)}; is it an official ELECTRA checkpoint?")
    return UserInputError(
        f"{checkpoint} has {name} (shape {layout(error.shape)}) that a model of its other "
        "tensors' shapes has no place for; is it an official ELECTRA checkpoint?")


def _load_networks(model: ElectraPretrainer, discriminator: dict,
                   generator: dict | None) -> list[str]:
    """Loads transformers-named state dicts (the discriminator's with or without its
    replaced-token head; the generator's or None) into `model`; returns the parts left
    freshly initialised, by NOT_IMPORTED's names."""
    has_head = "discriminator_predictions.dense.weight" in discriminator
    if has_head:
        huggingface.load_hf_state_dicts(model, discriminator, generator)
    else:
        huggingface.load_hf_discriminator(model.discriminator, discriminator)
        if generator is not None:
            huggingface.load_hf_generator(model, generator)
    # objective 'mlm' has no replaced-token head to leave fresh
    fresh_head = not has_head and model.discriminator_predictions is not None
    return (["discriminator_predictions"] if fresh_head else []) + (
        [] if generator is not None else ["generator"])


# ------------------------------------------------------------------------------ HuggingFace


def _read_safetensors(path: str) -> dict:
    """{name: array} of a safetensors file, read through tf.io.gfile (gs:// too), floats as
    float32 (safetensors' numpy reader has no bfloat16, in which models are often saved)."""
    from safetensors import deserialize
    with tf.io.gfile.GFile(path, "rb") as f:
        tensors = deserialize(f.read())
    state = {}
    for name, tensor in tensors:
        data, dtype = tensor["data"], tensor["dtype"]
        if dtype == "BF16":  # the upper half of a float32's bits
            value = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in _SAFETENSORS_TYPES:
            value = np.frombuffer(data, _SAFETENSORS_TYPES[dtype])
        else:
            raise UserInputError(f"{path}: tensor {name!r} is of type {dtype}, which this "
                                 "import does not read; save the model in float32, float16 or "
                                 "bfloat16")
        # A copy, writable and native-endian (frombuffer's view is neither).
        kind = np.float32 if value.dtype.kind == "f" else value.dtype.newbyteorder("=")
        state[name] = value.astype(kind).reshape(tensor["shape"])
    return state


# safetensors' type names (but BF16, which numpy has not), little-endian as the format is.
_SAFETENSORS_TYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                      "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_hf_dir(directory: str, flag: str = "--input") -> tuple[dict, dict]:
    """(config.json, state dict of numpy arrays) of a transformers model directory
    (model.safetensors, or pytorch_model.bin, which needs torch); errors name `flag`, the
    flag that gave it."""
    config_path = os.path.join(directory, "config.json")
    if tf.io.gfile.exists(directory) and not tf.io.gfile.isdir(directory):
        raise UserInputError(f"{flag}={directory} is a file; pass the folder that holds it "
                             "and its config.json (a transformers model directory)")
    if not tf.io.gfile.exists(config_path):
        if tf.io.gfile.exists(os.path.join(directory, OPERATIVE_CONFIG)):
            raise _needs_no_conversion(directory, "a HuggingFace folder")
        if tf.io.gfile.isdir(directory):
            held = held_checkpoint(directory)
            if held and is_tf1_checkpoint(held):
                raise UserInputError(f"{flag}={directory} is an official TF1 ELECTRA "
                                     f"checkpoint, not a HuggingFace folder; pass --source=tf1 "
                                     f"--input={held}")
        state = "does not exist" if not tf.io.gfile.exists(directory) else "has no config.json"
        raise UserInputError(f"{flag}={directory} {state}; pass a transformers model "
                             "directory (config.json + model.safetensors)")
    config = _read_json(config_path)
    if not isinstance(config, dict):
        raise UserInputError(f"{config_path} is not a transformers config (a JSON object); "
                             "re-download it")
    safetensors_path = os.path.join(directory, "model.safetensors")
    bin_path = os.path.join(directory, "pytorch_model.bin")
    if tf.io.gfile.exists(safetensors_path):
        state = _read_one(safetensors_path)
    elif tf.io.gfile.exists(bin_path):
        state = _read_one(bin_path)
    elif any(tf.io.gfile.exists(os.path.join(directory, name + ".index.json"))
             for name in ("model.safetensors", "pytorch_model.bin")):
        state = _read_sharded(directory)
    else:
        raise UserInputError(f"{directory} has neither model.safetensors nor "
                             "pytorch_model.bin (nor a sharded one's .index.json)")
    # Older checkpoints (the hub's bert-base-uncased among them) name LayerNorm's scale and
    # offset gamma and beta; transformers renames them when it loads, and so do we.
    state = {_LEGACY_NORM.sub(lambda m: ".weight" if m.group(1) == "gamma" else ".bias", k): v
             for k, v in state.items()}
    return config, state


_LEGACY_NORM = re.compile(r"(?<=LayerNorm)\.(gamma|beta)$")


_LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def _read_one(path: str) -> dict:
    """The numpy arrays of one safetensors file or (torch) PyTorch .bin file."""
    with tf.io.gfile.GFile(path, "rb") as f:
        if f.read(len(_LFS_POINTER)) == _LFS_POINTER:  # (a clone without git-lfs's files)
            raise UserInputError(f"{path} is a Git LFS pointer, not the weights (the folder "
                                 "was cloned without them); run `git lfs pull` in it, or "
                                 "download the file itself")
    if path.endswith(".safetensors"):
        from safetensors import SafetensorError
        try:
            return _read_safetensors(path)
        except SafetensorError as e:
            raise UserInputError(f"{path} could not be read ({first_line(e)}): it is "
                                 "truncated or corrupt; re-download it") from None
    try:
        import torch
    except ImportError:
        raise UserInputError(f"{path} is a PyTorch file and torch is not installed; "
                             "pip install torch, or save the model as safetensors") from None
    try:
        with tf.io.gfile.GFile(path, "rb") as f:  # gs:// too (torch reads local files)
            state = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise UserInputError(f"{path} could not be read ({first_line(e)}): it is "
                             "truncated or corrupt; re-download it") from None
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in state.items()}


def _read_sharded(directory: str) -> dict:
    """The state dict of a checkpoint saved in shards (save_pretrained's max_shard_size):
    model.safetensors.index.json (or pytorch_model.bin.index.json) names each tensor's
    file."""
    name = ("model.safetensors" if tf.io.gfile.exists(
        os.path.join(directory, "model.safetensors.index.json")) else "pytorch_model.bin")
    index_path = os.path.join(directory, name + ".index.json")
    index = _read_json(index_path)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserInputError(f"{index_path} has no weight_map (tensor -> file); re-download "
                             "the model's index")
    state = {}
    for shard in sorted(set(weight_map.values())):
        path = os.path.join(directory, shard)
        if not tf.io.gfile.exists(path):
            raise UserInputError(f"{path}, a shard {index_path} names, is missing; download "
                                 "every shard")
        single = _read_one(path)
        state.update({k: v for k, v in single.items() if weight_map.get(k) == shard})
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise UserInputError(f"{index_path} names {missing[0]} in {weight_map[missing[0]]}, "
                             "which does not hold it; re-download the model")
    return state


# Top-level names of ELECTRA's pre-training networks (an ElectraModel's without "electra.");
# a fine-tuned ElectraFor* adds its task head (classifier, qa_outputs, sequence_summary).
_ELECTRA_NAMES = ("electra.", "embeddings.", "embeddings_project.", "encoder.",
                  "discriminator_predictions.", "generator_predictions.", "generator_lm_head.")


def _prefix(state: dict) -> str:
    """How a transformers state dict names its encoder's tensors: 'electra.' (or 'bert.')
    before them, or '' (an ElectraModel's, a BertModel's)."""
    for prefix in ("electra.", "bert."):
        if any(k.startswith(prefix) for k in state):
            return prefix
    return ""


def _model_type(config: dict, state: dict) -> str | None:
    """config.json's model_type; 'bert' for a BERT's weights (bert.*) where an old
    config.json has none."""
    given = config.get("model_type")
    if given is None and any(k.startswith("bert.") for k in state):
        return "bert"
    return given


def _check_model_type(config: dict, state: dict, directory: str, flag: str) -> None:
    """Only ELECTRA's and BERT's encoders are ours: another transformers model with the
    same tensor names (RoBERTa's embeddings.*, encoder.*, whose positions start after its
    padding index) imported without a word and gave other outputs."""
    kind = _model_type(config, state)
    if kind not in (None, "electra", "bert"):
        raise UserInputError(
            f"{flag}={directory} is a {kind!r} model (its config.json's model_type); only "
            "ELECTRA and BERT checkpoints can be imported (another architecture's weights "
            "would load into the wrong places)")


def _as_electra(config: dict, state: dict) -> tuple[dict, list[str]]:
    """(a state dict in ELECTRA's names; the names of what is left out). A BERT's
    (BertModel, BertForMaskedLM, a fine-tuned BertFor*, ...) is the same encoder, "bert." ->
    "electra.", without the pooler and every head; an ELECTRA's is without a fine-tuned
    ElectraFor*'s task head."""
    if _model_type(config, state) != "bert":
        skipped = sorted(k for k in state if not k.startswith(_ELECTRA_NAMES))
        return {k: v for k, v in state.items() if k.startswith(_ELECTRA_NAMES)}, skipped
    out, skipped = {}, []
    for full_name, value in state.items():
        name = full_name[len("bert."):] if full_name.startswith("bert.") else full_name
        if not name.startswith(("embeddings.", "encoder.")):  # pooler, heads, classifiers
            skipped.append(full_name)
            continue
        out["electra." + name] = value
    return out, sorted(skipped)


def import_hf(discriminator_dir: str, output_dir: str, generator_dir: str | None = None,
              vocab_file: str | None = None, lower_case: bool | None = None,
              max_seq_length: int | None = None,
              generator_hidden_fraction: float | None = None, seed: int = 0) -> dict:
    """Imports transformers directories into a model dir: an `ElectraForPreTraining` (or
    `ElectraModel`, a fine-tuned `ElectraFor*` or a BERT checkpoint: the encoder only, a
    task head, pooler or BERT's heads skipped and listed) and optionally an
    `ElectraForMaskedLM` generator; returns {"model_info", "skipped", "not_imported",
    "notes"}.

    Without a generator (or a replaced-token head), those parts start from a fresh
    initialisation drawn from `seed` (a generator of `generator_hidden_fraction`, None:
    1/4; refused with `generator_dir`): random until pre-trained further. They are listed
    in `not_imported` and in model_info.json, where `saved_model.check_trained` (export,
    detection) finds them.
    """
    check_new_model_dir(output_dir)
    if generator_dir and generator_hidden_fraction is not None:
        raise UserInputError("--generator_hidden_fraction is for a source without a generator; "
                             "--generator_input gives one: drop the flag")
    disc_hf, disc_state = read_hf_dir(discriminator_dir)
    if (any(k.startswith(("generator_predictions.", "generator_lm_head.")) for k in disc_state)
            and not any(k.startswith("discriminator_predictions.") for k in disc_state)):
        raise UserInputError(
            f"--input={discriminator_dir} is a generator (ElectraForMaskedLM: it has "
            "generator_predictions and no discriminator_predictions); pass it as "
            "--generator_input and the discriminator as --input")
    if disc_hf.get(huggingface.ELECTRIC_MARK):
        raise UserInputError(
            f"--input={discriminator_dir} is an Electric model (its config.json's "
            f"{huggingface.ELECTRIC_MARK}): its head is an energy over a two-tower cloze "
            "model HuggingFace has no class for, and would be read as ELECTRA's replaced-token "
            "logits; convert ELECTRA models only (the Electric model dir itself exports and "
            "fine-tunes)")
    _check_model_type(disc_hf, disc_state, discriminator_dir, "--input")
    prefixes = {"discriminator": _prefix(disc_state)}
    disc_state, skipped = _as_electra(disc_hf, disc_state)
    disc_config = huggingface.config_from_hf(
        disc_hf, os.path.join(discriminator_dir, "config.json"))
    gen_state = None
    if generator_dir:
        gen_hf, gen_state = read_hf_dir(generator_dir, "--generator_input")
        if (any(k.startswith("discriminator_predictions.") for k in gen_state)
                and not any(k.startswith(("generator_predictions.", "generator_lm_head."))
                            for k in gen_state)):
            raise UserInputError(
                f"--generator_input={generator_dir} is a discriminator (ElectraForPreTraining: "
                "it has discriminator_predictions and no generator_predictions); pass the "
                "generator (ElectraForMaskedLM) trained with --input's discriminator")
        _check_model_type(gen_hf, gen_state, generator_dir, "--generator_input")
        prefixes["generator"] = _prefix(gen_state)
        gen_state, _ = _as_electra(gen_hf, gen_state)
        gen_config = huggingface.config_from_hf(gen_hf,
                                                os.path.join(generator_dir, "config.json"))
        if gen_config.vocab_size != disc_config.vocab_size:
            raise UserInputError(
                f"--generator_input={generator_dir} has a vocab of {gen_config.vocab_size} "
                f"tokens, --input's discriminator {disc_config.vocab_size}: the two networks of "
                "one ELECTRA share a vocab; pass the generator trained with this discriminator "
                "(or import the discriminator alone)")
        table = huggingface.WORD_EMBEDDINGS
        disc_table = disc_state.get(table, disc_state.get(table[len("electra."):]))
        tied = (table in gen_state and disc_table is not None
                and np.array_equal(gen_state[table], disc_table))
        sharing = "embeddings" if tied else "none"
        shared = sorted(k for k in gen_state if k.startswith("electra.embeddings.")) if tied else []
        for name in shared:
            theirs = disc_state.get(name, disc_state.get(name[len("electra."):]))
            if theirs is not None and not np.array_equal(theirs, gen_state[name]):
                ours = gen_state[name]
                apart = (f"max abs difference {np.max(np.abs(theirs - ours)):.3g}"
                         if theirs.shape == ours.shape else
                         f"shape {list(ours.shape)}, the discriminator's {list(theirs.shape)}")
                raise UserInputError(
                    f"{generator_dir} has the discriminator's word embeddings but its own "
                    f"'{name}' ({apart}): this project's networks share the whole embedding "
                    "block or nothing; import the discriminator alone (without "
                    "--generator_input)")
        if not tied and gen_config.embedding_width != gen_config.hidden_size:
            raise UserInputError(
                f"{generator_dir} has word embeddings of its own (not the discriminator's), "
                f"{gen_config.embedding_width} wide against its hidden size "
                f"{gen_config.hidden_size}: this project's untied generators embed at their "
                "hidden size, so it cannot hold them; import the discriminator alone (without "
                "--generator_input)")
    else:
        gen_config = generator_config(disc_config, _fraction(generator_hidden_fraction))
        sharing = "embeddings"
    model = new_pretrainer(disc_config, gen_config, sharing, seed=seed)
    _check_describable(model, f"--generator_input={generator_dir}" if generator_dir
                       else f"--input={discriminator_dir}")
    try:
        not_imported = _load_networks(model, disc_state, gen_state)
    except huggingface.TensorMismatch as e:
        folder, flag = ((generator_dir, "--generator_input") if e.network == "generator"
                        else (discriminator_dir, "--input"))
        # (named as the folder's file names its tensors: a BERT's bert.*, an ElectraModel's
        # without a prefix)
        name = e.name
        if name.startswith("electra.") and prefixes.get(e.network, "electra.") != "electra.":
            name = prefixes[e.network] + name[len("electra."):]
        if e.kind == "missing":
            raise UserInputError(
                f"{flag}={folder} has no '{name}' (shape {e.expected}), which its "
                "config.json's sizes imply; copy the model's config.json and weights again, "
                "together (or pass the folder of the right model)") from None
        if e.kind == "unexpected":
            raise UserInputError(
                f"{flag}={folder} has '{name}' (shape {e.shape}), which a model of its "
                "config.json's sizes has no place for; copy the model's config.json and "
                "weights again, together") from None
        raise UserInputError(
            f"{flag}={folder}'s config.json does not describe its weights: '{name}' has "
            f"shape {e.shape}, its config.json's sizes give {e.expected}; copy the model's "
            "config.json and weights again, together") from None
    notes = []
    tokenizer = _hf_tokenizer(discriminator_dir, vocab_file, lower_case, notes)
    source = f"hf:{atomic.absolute(discriminator_dir)}" + (
        f" (generator hf:{atomic.absolute(generator_dir)})" if generator_dir else "")
    info = write_model_dir(model, output_dir, max_seq_length=max_seq_length,
                           source=source, not_imported=not_imported, **tokenizer)
    return {"model_info": info, "skipped": skipped, "not_imported": not_imported,
            "notes": notes}


def _hf_tokenizer(directory: str, vocab_file: str | None, lower_case: bool | None,
                  notes: list[str]) -> dict:
    """write_model_dir's arguments for the tokenizer of a transformers directory: the vocab
    (`vocab_file`, else its vocab.txt, else the WordPiece vocab in its tokenizer.json, else
    DEFAULT_VOCAB with a note) and the case (`lower_case`, else tokenizer_config.json's
    do_lower_case, else tokenizer.json's normalizer, else left to the vocab); strip_accents
    None follows lower_case, as in BertTokenizer."""
    config_path = os.path.join(directory, "tokenizer_config.json")
    config = _read_json(config_path) if tf.io.gfile.exists(config_path) else {}
    fast_path = os.path.join(directory, "tokenizer.json")
    _check_basic_tokenization(config_path, config, fast_path)
    vocab, normalizer = None, {}
    if vocab_file is None:
        if tf.io.gfile.exists(os.path.join(directory, "vocab.txt")):
            vocab_file = os.path.join(directory, "vocab.txt")
        elif tf.io.gfile.exists(fast_path):
            vocab_file = fast_path
            vocab, normalizer = _wordpiece_of(fast_path)
        else:
            vocab_file = _default_vocab(f"{directory} has neither vocab.txt nor tokenizer.json",
                                        notes)
    case_from = None
    if lower_case is None and "do_lower_case" in config:
        lower_case, case_from = bool(config["do_lower_case"]), config_path
    elif lower_case is None and "lowercase" in normalizer:
        lower_case, case_from = bool(normalizer["lowercase"]), fast_path
    strip_accents = config.get("strip_accents", normalizer.get("strip_accents"))
    return dict(vocab_file=vocab_file, vocab=vocab, lower_case=lower_case,
                strip_accents=None if strip_accents is None else bool(strip_accents),
                case_from=case_from)


def _check_basic_tokenization(config_path: str, config: dict, fast_path: str) -> None:
    """Refuses a tokenizer that splits text otherwise than BERT's default, which is the
    only one this project's tokenizer has (the model would read other tokens than it was
    trained on): tokenize_chinese_chars / handle_chinese_chars off (CJK characters kept
    in words), no basic tokenization (no splitting at punctuation), never_split words."""
    normalizer = _bert_normalizer(_read_json(fast_path)) if tf.io.gfile.exists(fast_path) else {}
    for path, settings, key, what in (
            (config_path, config, "tokenize_chinese_chars", "keeps CJK characters inside words"),
            (fast_path, normalizer, "handle_chinese_chars", "keeps CJK characters inside words"),
            (config_path, config, "do_basic_tokenize", "does not split text at spaces and "
                                                       "punctuation before WordPiece")):
        if settings.get(key) is False:
            raise UserInputError(
                f"{path} sets {key}=false: its tokenizer {what}, and this project's tokenizer "
                "is BERT's default only (it would read other tokens than the model was "
                "trained on); this model cannot be imported")
    # (special tokens there change nothing: the tokenizer keeps them whole anyway)
    specials = set(tokenization.SPECIAL_TOKENS) | {
        v for k, v in config.items() if k.endswith("_token") and isinstance(v, str)}
    kept = [w for w in config.get("never_split") or () if w not in specials]
    if kept:
        shown = ", ".join(map(str, kept[:3])) + (", ..." if len(kept) > 3 else "")
        raise UserInputError(
            f"{config_path} sets never_split ({shown}): words its tokenizer keeps whole, "
            "which this project's tokenizer splits as BERT's default does; remove the "
            "setting if the model was not trained with it")


def _wordpiece_of(path: str) -> tuple[list[str], dict]:
    """(the tokens by id, the BertNormalizer's settings or {}) of a transformers fast
    tokenizer's tokenizer.json; refuses one that is not BERT's WordPiece."""
    data = _read_json(path)
    model = data.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise UserInputError(
            f"{path} holds a {model.get('type', 'non-WordPiece')} tokenizer, not BERT's "
            "WordPiece, and there is no vocab.txt beside it; pass --vocab_file with the "
            "model's WordPiece vocab")
    by_id = {i: token for token, i in model["vocab"].items()}
    if sorted(by_id) != list(range(len(model["vocab"]))):
        raise UserInputError(f"{path}'s WordPiece vocab does not number its tokens 0 to "
                             f"{len(model['vocab']) - 1}; pass --vocab_file with the model's "
                             "vocab.txt")
    vocab = [by_id[i] for i in range(len(by_id))]
    missing = [t for t in tokenization.SPECIAL_TOKENS if t not in model["vocab"]]
    if missing:
        raise UserInputError(f"{path}'s WordPiece vocab lacks the special tokens "
                             f"{', '.join(missing)}; pass --vocab_file with a BERT-style vocab")
    normalizer = _bert_normalizer(data)
    return vocab, {k: normalizer[k] for k in ("lowercase", "strip_accents") if k in normalizer}


def _bert_normalizer(data) -> dict:
    """The BertNormalizer of a tokenizer.json's contents (alone or in a Sequence), or {}."""
    normalizers = (data.get("normalizer") or {}) if isinstance(data, dict) else {}
    normalizers = normalizers.get("normalizers", [normalizers])
    return next((n for n in normalizers if isinstance(n, dict)
                 and n.get("type") == "BertNormalizer"), {})


def _read_json(path: str):
    try:
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserInputError(f"{path} is not valid JSON ({first_line(e)}); "
                             "re-download it") from None


def export_hf(model_dir: str, output_dir: str, log=lambda *_: None,
              vocab_file: str | None = None) -> list[str]:
    """Writes a model dir's networks as transformers directories: output_dir/discriminator
    (ElectraForPreTraining, or ElectraModel without a replaced-token head) and, when the
    model has a single-tower masked-LM generator, output_dir/generator (ElectraForMaskedLM),
    each with config.json, model.safetensors and the vocab (`vocab_file` overrides the one
    model_info.json names); returns the directories written. What is left out (no
    generator, an objective without a replaced-token head, Electric's energy head, parts an
    import initialised afresh and no pre-training has trained since) is said in one `log`
    line each."""
    from electra_tf.export.saved_model import fresh_parts, weights_read
    check_output_dir(output_dir)
    if is_hf_folder(model_dir):
        raise UserInputError(f"--input={model_dir} is a HuggingFace model folder already: "
                             "nothing to convert (--target=hf converts a model dir of this "
                             "project)")
    earlier = [n for n in ("discriminator", "generator")
               if tf.io.gfile.exists(os.path.join(output_dir, n))]
    if earlier:
        raise UserInputError(f"--output_dir={output_dir} already holds an export "
                             f"({', '.join(n + '/' for n in earlier)}); use a new directory")
    loaded = load_pretrainer(model_dir, vocab_file)
    # (a two-stage run's discriminator before its switch: random, left out as an import's
    # fresh parts are; it was written with a note)
    untrained = generator_stage(loaded.checkpoint, loaded.info, "--input=MODEL_DIR/ckpt-N")
    for line in weights_read(loaded, "generator" if untrained else "converting"):
        log(line)
    model = loaded.model
    discriminator, generator = huggingface.export_hf_state_dicts(model)
    fresh = fresh_parts(loaded)
    notes = _hf_notes(model)
    if untrained:
        discriminator = None
        notes.append(f"no discriminator/: {untrained}")
    if "discriminator_predictions" in fresh:
        discriminator = {k: v for k, v in discriminator.items()
                         if not k.startswith("discriminator_predictions.")}
        notes.append(f"{model_dir} was imported without a replaced-token head and not "
                     "pre-trained since: discriminator/ holds the encoder only (ElectraModel)")
    if "generator" in fresh and generator is not None:
        generator = None
        notes.append(f"no generator/: {model_dir} was imported without one and not "
                     "pre-trained since (its weights are random)")
    for note in notes:
        log(f"note: {note}")
    has_head = any(k.startswith("discriminator_predictions.") for k in discriminator or ())
    # transformers' default pad_token_id is 0 ([PAD] in BERT's vocabs, not in every vocab).
    pad_id = tokenization.load_vocab(loaded.vocab_file).index(tokenization.PAD_TOKEN)
    parts = [(name, state, config, architecture) for name, state, config, architecture in (
        ("discriminator", discriminator, model.discriminator_config,
         "ElectraForPreTraining" if has_head else "ElectraModel"),
        ("generator", generator, model.generator.config if generator else None,
         "ElectraForMaskedLM")) if state is not None]

    def fill(folder, name, state, config, architecture):
        # Electric's head is an energy: marked, so that an import refuses it (read as
        # ELECTRA's, its energies would be served as probabilities).
        marks = ({huggingface.ELECTRIC_MARK: True}
                 if model.objective == "electric" and name == "discriminator" else {})
        with tf.io.gfile.GFile(os.path.join(folder, "config.json"), "w") as f:
            json.dump(huggingface.hf_config(config, architecture, pad_token_id=pad_id,
                                            **marks), f, indent=2)
        _save_safetensors(state, os.path.join(folder, "model.safetensors"),
                          like=os.path.join(folder, "config.json"))
        tf.io.gfile.copy(loaded.vocab_file, os.path.join(folder, "vocab.txt"), True)
        with tf.io.gfile.GFile(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": loaded.lower_case,
                       "strip_accents": loaded.strip_accents,
                       "tokenizer_class": "ElectraTokenizer",
                       "model_max_length": loaded.max_seq_length}, f, indent=2)

    written = [os.path.join(output_dir, part[0]) for part in parts]
    if not tf.io.gfile.exists(output_dir):
        # A new --output_dir moves in whole, both folders in one rename: a kill leaves
        # neither (between two renames it left a lone generator/, which refused the rerun
        # as an earlier export).
        # (a dangling symbolic link: written through, as write_model_dir does)
        with atomic.staged_dir(output_dir if "://" in output_dir
                               else os.path.realpath(output_dir)) as temporary:
            for part in parts:
                tf.io.gfile.makedirs(os.path.join(temporary, part[0]))
                fill(os.path.join(temporary, part[0]), *part)
        return written
    # Into a folder that is there: both filled before either moves in, and one moved in
    # before the other's move failed is removed (a failure leaves neither).
    moved = []
    with contextlib.ExitStack() as staged:
        staged.push(lambda failed, *_: _remove(moved) if failed else None)
        for part, directory in zip(parts, written):
            fill(staged.enter_context(atomic.staged_dir(directory)), *part)
            moved.append(directory)
    return written


def _save_safetensors(state: dict, path: str, like: str) -> None:
    """safetensors' save_file, with the file's mode that of `like` (a file written as every
    other output is: safetensors writes 0600, which another user serving the folder cannot
    read), and a failed write as the OSError it was (safetensors names neither the file nor
    the error's type: "I/O error: No space left on device (os error 28)"). safetensors
    writes local files only: to gs:// (any URL) the bytes go through tf.io.gfile."""
    from safetensors.numpy import save, save_file
    arrays = {k: np.ascontiguousarray(v) for k, v in state.items()}
    if "://" in path:  # an object's mode is the bucket's business
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(save(arrays, metadata={"format": "pt"}))
        return
    try:
        save_file(arrays, path, metadata={"format": "pt"})
    except Exception as e:  # safetensors' SafetensorError
        found = re.search(r"\(os error (\d+)\)", str(e))
        if not found:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), path) from e
    os.chmod(path, os.stat(like).st_mode & 0o777)


def _remove(directories: list[str]) -> None:
    """Removes those of `directories` that exist (returns None: an exception unwinding an
    ExitStack that calls it goes on)."""
    for directory in directories:
        if tf.io.gfile.exists(directory):
            tf.io.gfile.rmtree(directory)


def _hf_notes(model: ElectraPretrainer) -> list[str]:
    """What export_hf leaves out or writes with another meaning than transformers'."""
    notes = []
    if model.objective == "electric":
        notes.append(
            "Electric's discriminator head is an energy: discriminator/ holds it as "
            "ElectraForPreTraining's logits, but the replaced probability is sigmoid(logits + "
            "log q(token | context) + log(p / (1 - p))), q Electric's two-tower cloze model, "
            "which transformers has no class for and which is not written (no generator/); "
            "export_saved_model.py --kind=discriminator serves that probability")
    elif model.generator is None:
        notes.append("no generator/: this model sampled its replacements uniformly (it has "
                     "no masked-LM generator)")
    if model.discriminator_predictions is None:
        notes.append(f"objective {model.objective} trains no replaced-token head: "
                     "discriminator/ holds the encoder only (load it with ElectraModel or an "
                     "ElectraFor* fine-tuning class)")
    if model.generator is not None and model.generator is model.discriminator:
        one = ("objective mlm (BERT)" if model.objective == "mlm" else "sharing 'all'")
        official = _derives_itself(model.discriminator_config)
        notes.append(f"{one} trains one network: generator/ and discriminator/ hold copies "
                     "of its encoder; "
                     + ("imported back with --generator_input they are two networks of full "
                        "size (sharing 'embeddings'"
                        + (", objective 'electra'" if model.objective == "mlm" else "")
                        + "), not this one" if official else
                        "they cannot be imported back as a generator and a discriminator: "
                        "its shape is not one this project derives a generator of (an FFN 4x "
                        "the hidden size, heads of 64); import discriminator/ alone"))
    return notes


# ------------------------------------------------------------------------------ model dirs


def new_pretrainer(discriminator: EncoderConfig, generator: EncoderConfig | None,
                   sharing: str, objective: str = "electra",
                   seed: int | None = None) -> ElectraPretrainer:
    """A pretrainer of these shapes (no generator: uniform replacements, unless the
    objective is 'mlm', BERT's one network), fresh weights (drawn from `seed`, which seeds
    Keras, where given)."""
    if seed is not None:
        keras.utils.set_random_seed(seed)
    if generator is not None and sharing == "embeddings":
        generator = dataclasses.replace(generator, embedding_size=discriminator.embedding_width)
    return ElectraPretrainer(discriminator, generator, objective=objective, sharing=sharing,
                             uniform_generator=generator is None and objective != "mlm")


def gin_bindings(model: ElectraPretrainer) -> str:
    """gin bindings that rebuild `model` (its operative_config.gin): the architecture."""
    d, g = model.discriminator_config, model.generator_config
    lines = [f"pretrainer.{field} = {getattr(d, field)!r}" for field in (
        "hidden_size", "num_layers", "num_heads", "intermediate_size", "embedding_size",
        "max_position_embeddings", "dropout_rate", "attention_dropout_rate",
        "type_vocab_size", "layer_norm_epsilon")]
    lines += [f"pretrainer.sharing = {model.sharing!r}",
              f"pretrainer.objective = {model.objective!r}"]
    if g is None and model.objective != "mlm":  # 'mlm': the masked-LM head is on the encoder
        lines.append("pretrainer.uniform_generator = True")
    elif g is not None:
        fraction = g.hidden_size / d.hidden_size
        layers = g.num_layers / d.num_layers
        try:
            derived = generator_config(d, fraction, layers)
        except UserInputError:  # (its heads do not divide that width)
            derived = None
        if model.sharing != "all" and g.num_layers > d.num_layers:
            raise UserInputError(
                f"the generator has {g.num_layers} layers, more than the discriminator's "
                f"{d.num_layers}; this project builds generators of at most the "
                "discriminator's depth: import the discriminator alone")
        if model.sharing != "all" and (derived is None or _shape(derived) != _shape(g)):
            heads = lambda n: f"{n} head{'s' * (n != 1)}"  # noqa: E731
            raise UserInputError(
                f"the generator's shape (hidden {g.hidden_size}, FFN {g.intermediate_size}, "
                f"{heads(g.num_heads)}) is not the official derivation from the "
                "discriminator's ("
                + ("none at its hidden size" if derived is None else
                   f"at its hidden size, an FFN {derived.intermediate_size} and "
                   f"{heads(derived.num_heads)}")
                + "); this project builds generators that way only: import the discriminator "
                "alone")
        # sharing 'all' (fraction 1): the generator is the discriminator, whatever its shape
        lines += [f"pretrainer.generator_hidden_fraction = {fraction!r}",
                  f"pretrainer.generator_layers_fraction = {layers!r}"]
    return "\n".join(["# The architecture of an imported model (convert_checkpoint.py).",
                      *lines, ""])


def _derives_itself(config: EncoderConfig) -> bool:
    """Whether a generator of this network's full size, derived as the official code does,
    has its shape (an FFN 4x the hidden size, heads of 64): only then does a one-network
    model exported as two networks import back as them."""
    try:
        return _shape(generator_config(config, 1.0, 1.0)) == _shape(config)
    except UserInputError:  # (no generator of that width: its heads do not divide it)
        return False


def _shape(config: EncoderConfig) -> tuple[int, int, int, int]:
    return (config.hidden_size, config.intermediate_size, config.num_heads, config.num_layers)


def check_output_dir(output_dir: str) -> None:
    """Refuses an --output_dir that is a file or lies under one (it cannot be made)."""
    path = output_dir.rstrip("/")
    while path and "://" not in output_dir and not tf.io.gfile.exists(path):
        path = os.path.dirname(path)
    if path and tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path):
        where = "is a file" if path == output_dir.rstrip("/") else f"lies under a file ({path})"
        raise UserInputError(f"--output_dir={output_dir} {where}, not a directory; pass a new "
                             "directory")


def check_new_model_dir(output_dir: str) -> None:
    """Refuses an --output_dir a model dir cannot be imported into: a file, a directory
    that holds anything (an empty one is used), a path with a wildcard
    (atomic.check_no_wildcards)."""
    atomic.check_no_wildcards(output_dir, f"--output_dir={output_dir}")
    check_output_dir(output_dir)
    if "://" not in output_dir:
        # (the import puts a new folder in its place, which would leave the shell that ran
        # it in a deleted one; the staging folder was put inside it, and renaming it failed)
        here, real = os.path.realpath(os.getcwd()), os.path.realpath(output_dir)
        if here == real or here.startswith(real.rstrip(os.sep) + os.sep):
            raise UserInputError(
                f"--output_dir={output_dir} is the folder this command runs in"
                + ("" if here == real else " (or one above it)") + ", which the import "
                f"replaces with the model dir; pass a new folder, e.g. --output_dir="
                f"{os.path.join(output_dir, 'model')}")
    if tf.io.gfile.exists(output_dir) and tf.train.latest_checkpoint(output_dir):
        raise UserInputError(f"--output_dir={output_dir} already holds a checkpoint; use a new "
                             "directory")
    if tf.io.gfile.exists(output_dir) and tf.io.gfile.listdir(output_dir):
        held = sorted(n.rstrip("/") for n in tf.io.gfile.listdir(output_dir))
        raise UserInputError(f"--output_dir={output_dir} is not empty (it holds "
                             f"{', '.join(held[:3])}{', ...' if len(held) > 3 else ''}); use a "
                             "new directory")


def write_model_dir(model: ElectraPretrainer, output_dir: str, vocab_file: str | None,
                    lower_case: bool | None, max_seq_length: int | None, source: str,
                    not_imported=(), strip_accents: bool | None = None,
                    vocab: list[str] | None = None, case_from: str | None = None) -> dict:
    """Writes `model` as a model dir (checkpoint ckpt-1, operative_config.gin,
    model_info.json, vocab.txt), refusing a dir that already holds anything (an empty one is
    used). `max_seq_length` None: the checkpoint's positions.

    The vocab (`vocab_file`, default DEFAULT_VOCAB; or the tokens `vocab`, read from
    `vocab_file`, a tokenizer.json) is copied into the model dir, which model_info.json
    names: the dir does not depend on the source it was imported from. `lower_case` None:
    as the vocab is (cased or not); one the vocab contradicts is refused (writer.check_case;
    `case_from`: the file that gave it, if not the caller). `strip_accents` None: as
    `lower_case` (BERT's rule).

    model_info.json records the parts the source did not hold (`not_imported`, names of
    NOT_IMPORTED: freshly initialised) and `imported_checkpoint`, the checkpoint they are
    random in: a later checkpoint of continued pre-training has trained them.
    """
    defaulted = not vocab_file
    vocab_file = vocab_file or DEFAULT_VOCAB
    tokens_given = vocab is not None
    if not tokens_given:
        vocab = tokenization.load_vocab(vocab_file)
    if len(vocab) != model.discriminator_config.vocab_size:
        raise UserInputError(f"{vocab_file} has {len(vocab)} tokens but the checkpoint's "
                             f"embeddings have {model.discriminator_config.vocab_size}"
                             + (" (the source has no vocab of its own, so the default was "
                                "taken)" if defaulted or vocab_file == DEFAULT_VOCAB else "")
                             + "; pass --vocab_file with the model's vocab")
    lower_case = _checked_case(vocab, vocab_file, lower_case, case_from)
    check_new_model_dir(output_dir)
    positions = model.discriminator_config.max_position_embeddings
    if max_seq_length is None:
        max_seq_length = positions
    elif not 8 <= max_seq_length <= positions:
        raise UserInputError(f"--max_seq_length={max_seq_length} does not fit the checkpoint's "
                             f"{positions} positions; pass 8 to {positions} (default: "
                             f"{positions})")
    config = gin_bindings(model)
    info = describe(model, seq_length=max_seq_length,
                    num_predictions=max(1, int(0.155 * max_seq_length)), mask_prob=0.15,
                    train_batch_size=0, num_train_steps=0)
    own_vocab = os.path.join(output_dir, "vocab.txt")
    info.update(vocab_file=own_vocab if "://" in own_vocab else os.path.abspath(own_vocab),
                vocab_size=len(vocab), lower_case=lower_case,
                strip_accents=lower_case if strip_accents is None else strip_accents,
                source=source, not_imported=list(not_imported))
    # An empty --output_dir (checked above) is replaced; the `checkpoint` file's paths are
    # relative, so the checkpoint written under the temporary name reads the same after it.
    # A symbolic link is written through (it was replaced by the folder, the folder it
    # named left empty).
    with atomic.staged_dir(output_dir if "://" in output_dir
                           else os.path.realpath(output_dir)) as temporary:
        copy = os.path.join(temporary, "vocab.txt")
        if tokens_given:
            with tf.io.gfile.GFile(copy, "w") as f:
                f.write("\n".join(vocab) + "\n")
        else:
            tf.io.gfile.copy(vocab_file, copy)
        info["vocab_sha256"] = tokenization.vocab_sha256(copy)
        saved = tf.train.Checkpoint(model=model).save(os.path.join(temporary, "ckpt"))
        info["imported_checkpoint"] = os.path.basename(saved)
        for name, text in ((OPERATIVE_CONFIG, config), (MODEL_INFO, json.dumps(info, indent=2))):
            with tf.io.gfile.GFile(os.path.join(temporary, name), "w") as f:
                f.write(text)
    return info


def _checked_case(vocab: list[str], vocab_file: str, lower_case: bool | None,
                  case_from: str | None) -> bool:
    """`lower_case`, or None: whether the vocab is uncased; refused where the vocab says
    otherwise (writer.check_case)."""
    if lower_case is None:
        return not writer.vocab_is_cased(vocab)
    try:
        writer.check_case(vocab, vocab_file, lower_case)
    except UserInputError:
        if case_from is None:
            raise
        key = "lowercase" if case_from.endswith("tokenizer.json") else "do_lower_case"
        # (the vocab allows the other value: bert-base-chinese's tokenizer_config.json says
        # do_lower_case=false of an uncased vocab, whose capitalised words would be [UNK])
        raise UserInputError(
            f"{case_from} has {key}={str(lower_case).lower()}, but the vocab "
            f"{vocab_file} is {'cased' if lower_case else 'uncased'}; pass "
            f"--lower_case={str(not lower_case).lower()} (as the vocab was learned)") from None
    return lower_case
