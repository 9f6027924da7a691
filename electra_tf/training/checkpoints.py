"""Reading a model dir back: the pretrainer a run (or an import) wrote, with its weights.

A model dir holds `operative_config.gin` (the architecture and options), `model_info.json`
(the vocab, how text was tokenized, the sequence length) and checkpoints `ckpt-N`. Export,
replaced-token detection and fine-tuning all start from one.
"""

import dataclasses
import json
import os
import re

import gin
import tensorflow as tf

from electra_tf import atomic, tokenization
from electra_tf.errors import UserInputError
from electra_tf.modeling import factory
from electra_tf.modeling.layers import precision_policy
from electra_tf.modeling.pretrainer import ElectraPretrainer
from electra_tf.training.pretraining import MODEL_INFO, OPERATIVE_CONFIG


@dataclasses.dataclass
class LoadedModel:
    """A pretrainer restored from a model dir, and how to feed it text."""
    model: ElectraPretrainer
    checkpoint: str
    vocab_file: str
    lower_case: bool
    strip_accents: bool
    max_seq_length: int
    info: dict

    def tokenizer(self) -> tokenization.Tokenizer:
        return tokenization.Tokenizer(self.vocab_file, self.lower_case, self.strip_accents)


RENAME = "rename it, or pass a symlink to it, without * ? ["
# A checkpoint's files: PREFIX.index and PREFIX.data-00000-of-00001, each naming PREFIX.
_CHECKPOINT_FILE = re.compile(r"\.(index|meta|data-\d{5}-of-\d{5})$")


def latest_checkpoint(path: str, flag: str | None = "--init_checkpoint") -> str:
    """The newest checkpoint of a model dir, or the checkpoint prefix `path` is (or whose
    .index or .data file it names); errors name `flag`, the flag that gave `path` (None:
    the path alone)."""
    atomic.check_no_wildcards(path, path, RENAME)
    given = f"{flag}={path}" if flag else path
    if tf.io.gfile.isdir(path):
        own = tf.io.gfile.exists(os.path.join(path, OPERATIVE_CONFIG))  # a model dir's
        latest = tf.train.latest_checkpoint(path) if own else folder_checkpoint(path, given)
        # (a model dir's own file first: reading a checkpoint's names costs more)
        if latest is not None and not own and is_tf1_checkpoint(latest):
            raise convert_tf1_first(given, latest)
        if latest is None:
            if is_hf_folder(path):
                raise convert_hf_first(given, path)
            raise UserInputError(f"{given} holds no checkpoint; pass a model dir that "
                                 "run_pretraining.py (or convert_checkpoint.py) wrote")
        return latest
    prefix = checkpoint_prefix(path)
    if is_tf1_checkpoint(prefix):
        raise convert_tf1_first(given, prefix)
    if not tf.io.gfile.exists(prefix + ".index"):
        gone_checkpoint(prefix, given)
        if not tf.io.gfile.exists(path) and not tf.io.gfile.glob(prefix + ".*"):
            # (nothing there: a path mistyped, or a run not made yet)
            raise UserInputError(f"{given} does not exist; pass a model dir (of "
                                 "run_pretraining.py or convert_checkpoint.py) or a ckpt-N "
                                 "prefix in one")
        raise UserInputError(f"{given} is neither a model dir nor a checkpoint prefix (no "
                             f"{prefix}.index); pass a model dir or a ckpt-N prefix")
    return prefix


# The checkpointed two-stage stage (trainer.TrainState.stage: 0 the generator's, 1 after the
# switch, which starts the discriminator from the generator).
_STAGE_KEY = "state/stage/.ATTRIBUTES/VARIABLE_VALUE"


def saved_stage(checkpoint: str) -> tuple[int, int] | None:
    """(the two-stage stage, the step) a run's `checkpoint` was saved at: stage 0 is the
    generator's (a joint run's stays 0), 1 from the switch on. None for a checkpoint
    without them (an import's)."""
    reader = tf.train.load_checkpoint(checkpoint)
    if not reader.has_tensor(_STAGE_KEY):
        return None
    return (int(reader.get_tensor(_STAGE_KEY)),
            int(reader.get_tensor("state/step/.ATTRIBUTES/VARIABLE_VALUE")))


def generator_stage(checkpoint: str, info: dict, form: str = "MODEL_DIR/ckpt-N") -> str | None:
    """Where `checkpoint` was saved in a two-stage run's generator stage (`info`: its model
    dir's model_info.json): what it is and the fix, for a refusal (its discriminator is the
    untrained initialisation, which only the switch replaces; a two-stage run takes only
    such weights, whatever it started from). `form`: how the fix names a later checkpoint.
    Else (a joint run's, an import's, one from the switch on) None."""
    saved = saved_stage(checkpoint) if info.get("algorithm") == "two_stage" else None
    if saved is None or saved[0] != 0:
        return None
    switch = info.get("two_stage_steps")
    latest = tf.train.latest_checkpoint(os.path.dirname(checkpoint) or ".")
    later = latest and latest != checkpoint and (saved_stage(latest) or (0,))[0] == 1
    return (f"{checkpoint} is from a two-stage run's generator stage (step {saved[1]}"
            + (f", before its switch at step {switch}" if switch is not None else "")
            + "), so its discriminator is untrained (the switch starts it from the "
            "generator); " + (f"pass one of its checkpoints from the switch on ({form})"
                              if later else "pre-train it past its switch first (rerun its "
                              "run_pretraining.py command)"))


_KEEPS_NEWEST = ("keeps only its newest checkpoints (pretraining.keep_checkpoints); pass one "
                 "it keeps, or the model dir for its latest")


def gone_checkpoint(prefix: str, given: str):
    """Raises UserInputError where `prefix` (without its files) is a ckpt-N of a model dir
    that holds other checkpoints (said as "not a folder" or "not a checkpoint prefix", which
    sent the user to look for another kind of path): one past its latest is not written
    (yet), an earlier one was not saved or its run deleted it."""
    model_dir = os.path.dirname(prefix) or "."
    step = re.fullmatch(r"ckpt-(\d+)", os.path.basename(prefix))
    if not step or not tf.io.gfile.isdir(model_dir):
        return
    latest = tf.train.latest_checkpoint(model_dir)
    if latest is None:
        return
    state = tf.train.get_checkpoint_state(model_dir)
    kept = [os.path.basename(p) for p in (state.all_model_checkpoint_paths if state else ())
            ] or [os.path.basename(latest)]
    newest = re.search(r"(\d+)$", latest)
    if newest and int(step.group(1)) > int(newest.group(1)):
        raise UserInputError(f"{given} is not written (yet): the latest checkpoint of "
                             f"{model_dir} is {os.path.basename(latest)}; pass one it holds "
                             f"({', '.join(kept)}), or the model dir for its latest")
    raise UserInputError(f"{given} is not there: {model_dir} holds {', '.join(kept)} (a step "
                         f"not saved, or one its run removed: it {_KEEPS_NEWEST})")


def checkpoint_prefix(path: str) -> str:
    """The checkpoint prefix `path` names: itself, or that of its .index, .data or (a TF1
    checkpoint's) .meta file."""
    return _CHECKPOINT_FILE.sub("", path)


def folder_checkpoint(folder: str, given: str) -> str | None:
    """The checkpoint prefix in `folder` (an official TF1 checkpoint's, or one a user
    copied; `given`: how the user gave it): the one its `checkpoint` file names, found
    beside that file by name first (a folder copied or moved, whose file gives the
    original's path: another machine's, or gs://, where tf.train.latest_checkpoint logged an
    error and found none, or the original's, which was read instead of the copy),
    else the folder's only one; None where it holds none. A folder of several, none of
    them named, and a data file without its .index are refused."""
    try:
        state = tf.train.get_checkpoint_state(folder)
    except ValueError:  # (a `checkpoint` file naming nothing)
        state = None
    names = tf.io.gfile.listdir(folder)
    held = sorted(name[:-len(".index")] for name in names if name.endswith(".index"))
    if state is not None:
        named = state.model_checkpoint_path
        # Its own copy first: a folder copied here whose `checkpoint` file gives the
        # original's absolute path read the original, where that still was.
        for prefix in (os.path.join(folder, named.replace("\\", "/").rsplit("/", 1)[-1]), named):
            if tf.io.gfile.exists(prefix + ".index"):
                return prefix
        if held:  # (not another one without a word)
            raise UserInputError(
                f"{given}'s checkpoint file names {named}, which is not there; pass one it "
                f"holds ({', '.join(held)}), e.g. {given.rstrip('/')}/{held[-1]}")
    if len(held) == 1:
        return os.path.join(folder, held[0])
    if held:
        raise UserInputError(
            f"{given} holds {len(held)} checkpoints ({', '.join(held)}); pass the one to read, "
            f"e.g. {given.rstrip('/')}/{held[-1]}")
    data = sorted(name for name in names if _CHECKPOINT_FILE.search(name) and ".data-" in name)
    if data:
        prefix = checkpoint_prefix(data[0])
        raise UserInputError(f"{given} holds {data[0]} but not its index ({prefix}.index); "
                             "copy the checkpoint's .index file too")
    return None


def held_checkpoint(folder: str) -> str | None:
    """folder_checkpoint's checkpoint, or None where it has none or would refuse (a caller
    that only asks whether a folder is one kind or another)."""
    try:
        return folder_checkpoint(folder, folder)
    except UserInputError:
        return None


def is_hf_folder(path: str) -> bool:
    """Whether `path` is a HuggingFace model folder: config.json and the weights."""
    return tf.io.gfile.exists(os.path.join(path, "config.json")) and any(
        tf.io.gfile.exists(os.path.join(path, name))
        for name in ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                     "pytorch_model.bin.index.json"))


def is_tf1_checkpoint(prefix: str) -> bool:
    """Whether `prefix` is an official (TF1, name-based) ELECTRA checkpoint: its variables
    are named electra/... (a model dir's are object-based: model/...)."""
    if not tf.io.gfile.exists(prefix + ".index"):
        return False
    try:
        names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError):
        return False
    return any(n.startswith("electra/") for n in names) and not any(
        n.startswith("model/") for n in names)


def convert_tf1_first(given: str, prefix: str) -> UserInputError:
    """The refusal of an official TF1 checkpoint `prefix` where a model dir belongs."""
    return UserInputError(f"{given} is an official TF1 ELECTRA checkpoint, not a model dir of "
                          "this project; convert it first (convert_checkpoint.py --source=tf1 "
                          f"--input={prefix} --output_dir=OUT), then pass OUT")


def convert_hf_first(given: str, path: str) -> UserInputError:
    """The refusal of HuggingFace folder `path` (`given`: how the user gave it) where a
    model dir belongs."""
    return UserInputError(f"{given} is a HuggingFace model folder, not a model dir of this "
                          "project; convert it first (convert_checkpoint.py --source=hf "
                          f"--input={path} --output_dir=OUT), then pass OUT")


def load_pretrainer(model_dir: str, vocab_file: str | None = None) -> LoadedModel:
    """The pretrainer described by `model_dir`'s operative_config.gin and model_info.json,
    with the weights of its latest checkpoint (float32, whatever it was trained in).

    `model_dir` may also be one of its checkpoints (a ckpt-N prefix, or its .index or .data
    file): that checkpoint's weights. `vocab_file` overrides the vocab recorded in
    model_info.json (e.g. the run's data was built elsewhere). Raises UserInputError naming
    what is missing or does not fit.
    """
    chosen = None
    if not tf.io.gfile.isdir(model_dir) and tf.io.gfile.exists(
            checkpoint_prefix(model_dir) + ".index"):
        chosen = checkpoint_prefix(model_dir)
        if is_tf1_checkpoint(chosen):
            raise convert_tf1_first(model_dir, chosen)
        model_dir = os.path.dirname(chosen) or "."
    if not tf.io.gfile.isdir(model_dir):
        gone_checkpoint(checkpoint_prefix(model_dir), model_dir)
        raise UserInputError(f"{model_dir} does not exist or is not a folder; pass a model dir "
                             "written by run_pretraining.py or convert_checkpoint.py")
    from electra_tf.finetune.runner import fine_tuning_output  # (it imports this module)
    tuned = chosen and fine_tuning_output(chosen) or fine_tuning_output(model_dir)
    if tuned:
        raise UserInputError(f"{tuned} is a fine-tuning output dir (a task's model), not "
                             "a pre-trained one; pass the pre-training model dir it was "
                             "fine-tuned from (or, to serve it, export_saved_model.py "
                             "--kind=task)")
    if (tf.io.gfile.exists(os.path.join(model_dir, MODEL_INFO))
            and not tf.io.gfile.exists(os.path.join(model_dir, OPERATIVE_CONFIG))
            and not tf.train.latest_checkpoint(model_dir)):
        raise UserInputError(f"{model_dir} holds no trained model yet, only {MODEL_INFO} (a "
                             "--dry_run writes that alone); pre-train into it first "
                             "(run_pretraining.py without --dry_run)")
    for name in (OPERATIVE_CONFIG, MODEL_INFO):
        if not tf.io.gfile.exists(os.path.join(model_dir, name)):
            if is_hf_folder(model_dir):
                raise convert_hf_first(model_dir, model_dir)
            tf1 = held_checkpoint(model_dir)
            if tf1 and is_tf1_checkpoint(tf1):
                raise convert_tf1_first(model_dir, tf1)
            raise UserInputError(f"{model_dir} has no {name}; pass a model dir written by "
                                 "run_pretraining.py or convert_checkpoint.py")
    with tf.io.gfile.GFile(os.path.join(model_dir, MODEL_INFO)) as f:
        try:
            info = json.load(f)
        except json.JSONDecodeError as e:
            raise UserInputError(f"{model_dir}/{MODEL_INFO} is not JSON ({e}): a part copy or an "
                                 "edit gone wrong; copy the model dir again") from None
    missing = [k for k in ("vocab_size", "max_seq_length")
               if not isinstance(info, dict) or k not in info]
    if missing:
        raise UserInputError(f"{model_dir}/{MODEL_INFO} lacks {', '.join(missing)}; pass a model "
                             "dir written by run_pretraining.py or convert_checkpoint.py")
    with tf.io.gfile.GFile(os.path.join(model_dir, OPERATIVE_CONFIG)) as f:
        config = f.read()
    checkpoint = chosen or latest_checkpoint(model_dir, flag=None)
    own = os.path.join(model_dir, "vocab.txt")  # the copy an import or a run keeps
    recorded = info.get("vocab_file")
    if not vocab_file and tf.io.gfile.exists(own) and not (
            recorded and tf.io.gfile.exists(recorded) and (
                not info.get("vocab_sha256")
                or tokenization.vocab_sha256(recorded) == info["vocab_sha256"])):
        vocab_file = own  # the recorded vocab moved or changed: the copy (checked below)
    vocab_file = vocab_file or recorded
    if not vocab_file or not tf.io.gfile.exists(vocab_file):
        raise UserInputError(f"the vocab of {model_dir} ({vocab_file}) is not there; pass "
                             "--vocab_file with the vocab the model was trained with")
    vocab = tokenization.load_vocab(vocab_file)
    if len(vocab) != info["vocab_size"]:
        raise UserInputError(f"{vocab_file} has {len(vocab)} tokens but {model_dir} was trained "
                             f"with {info['vocab_size']}; pass the model's vocab")
    if info.get("vocab_sha256") and tokenization.vocab_sha256(vocab_file) != info["vocab_sha256"]:
        raise UserInputError(
            f"{vocab_file} is not the vocab {model_dir} was trained with (its sha256 differs "
            f"from model_info.json's vocab_sha256; the file then was {info.get('vocab_file')}, "
            "which has changed since if that is this path); pass the model's own vocab")
    ids = {t: i for i, t in enumerate(vocab)}
    with gin.config_scope(None):
        gin.clear_config()
        gin.parse_config(config)
        try:
            with precision_policy("float32"):
                model = factory.build_pretrainer(
                    vocab_size=len(vocab), cls_id=ids[tokenization.CLS_TOKEN],
                    sep_id=ids[tokenization.SEP_TOKEN])
        finally:
            gin.clear_config()
    while True:
        try:
            read_weights(model, checkpoint, "operative_config.gin")
            break
        except UserInputError:
            if tf.io.gfile.exists(checkpoint + ".index"):
                raise
            # Removed while it was read: a run still writing the model dir keeps only its
            # newest checkpoints. Its latest, or (one asked for) a clear line.
            newer = None if chosen else tf.train.latest_checkpoint(model_dir)
            if newer is None or newer == checkpoint:
                raise UserInputError(
                    f"{checkpoint} was removed while it was read: a run writing {model_dir} "
                    f"{_KEEPS_NEWEST}") from None
            checkpoint = newer
    return LoadedModel(model=model, checkpoint=checkpoint, vocab_file=vocab_file,
                       lower_case=info.get("lower_case", True),
                       strip_accents=info.get("strip_accents", info.get("lower_case", True)),
                       max_seq_length=info.get("trained_seq_length", info["max_seq_length"]),
                       info=info)


def read_weights(model, checkpoint: str, described_by: str):
    """Reads `checkpoint` into `model` (optimizer slots and other extras ignored); a
    variable of the model the checkpoint lacks, or a shape that differs, is one clear error
    naming the checkpoint and the file (`described_by`) the model was built from."""
    atomic.check_no_wildcards(checkpoint, checkpoint, RENAME)
    try:
        tf.train.Checkpoint(model=model).read(checkpoint).expect_partial(
        ).assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        raise UserInputError(f"{checkpoint} does not fit the model its {described_by} "
                             f"describes ({str(e).splitlines()[0][:160]})") from None
    except (IndexError, tf.errors.OpError) as e:  # a truncated or corrupt data file
        raise UserInputError(f"{checkpoint} could not be read ({type(e).__name__}: "
                             f"{str(e).strip().splitlines()[0][:160]}): its files are "
                             "truncated or corrupt; copy them again") from None
