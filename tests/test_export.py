"""SavedModel export: each kind (pre-trained networks and fine-tuned task models) loaded in
a fresh Python process, both signatures called and compared with each other and with the
in-memory model; saved_model_cli's listing; the warmup records; models.config; the
detector CLI; bad input."""

import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from conftest import CHINESE_VOCAB, FIXTURES, ROOT, UNCASED_VOCAB, cased_vocab, pretrain
from electra_tf import atomic, tokenization
from electra_tf.errors import UserInputError
from electra_tf.finetune import readers
from electra_tf.export import saved_model
from electra_tf.training.checkpoints import load_pretrainer
from in_process import run_script

# One pytest-xdist worker runs them all (make test's --dist loadgroup): the module's
# fixtures (pre-trained and fine-tuned models, about a minute) are built once.
pytestmark = pytest.mark.xdist_group("export")
TEXTS = ["The quick red fox runs over the lazy dog.",
         "She was [MASK] happy to see him, and [MASK] said so.",
         "Ünïcödé, CJK 中文 and ligatures ﬁ survive."]
# Run in one fresh interpreter (TensorFlow's start-up is the slow part): load each
# SavedModel as TF Serving's Python clients do, call both signatures, save every output.
LOADER = """
import json, sys, numpy as np, tensorflow as tf, tensorflow_text
plain = lambda v: (np.char.decode(v.numpy().astype(bytes), "utf-8")
                   if v.dtype == tf.string else v.numpy())
for path, ids_file, out_file in json.loads(sys.argv[1]):
    model = tf.saved_model.load(path)
    ids = np.load(ids_file)
    text = model.signatures["serving_default"](text=tf.constant(%r))
    by_ids = model.signatures["predict_ids"](**{k: tf.constant(ids[k]) for k in ids.files})
    np.savez(out_file, **{"text_" + k: plain(v) for k, v in text.items()},
             **{"ids_" + k: plain(v) for k, v in by_ids.items()})
""" % (TEXTS,)
# What `served` exports, by the name a test asks for: (the model dir fixture, the export
# dir, the model name in it, --kind).
SERVED = {"discriminator": ("model_dir", "serving", "electra", "discriminator"),
          "generator": ("model_dir", "serving", "electra-generator", "generator"),
          "encoder": ("model_dir", "serving", "electra-encoder", "encoder"),
          "electric": ("electric_dir", "electric", "electric", "discriminator")}


@pytest.fixture(scope="module")
def model_dir(austen_data, tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    pretrain(directory, os.path.join(austen_data[0], "*.tfrecord"), ["NUM_TRAIN_STEPS = 2"],
             eager=True)
    return str(directory)


@pytest.fixture(scope="module")
def electric_dir(austen_data, tmp_path_factory):
    directory = tmp_path_factory.mktemp("electric")
    pretrain(directory, os.path.join(austen_data[0], "*.tfrecord"), ["NUM_TRAIN_STEPS = 2"],
             files=("tiny.gin", "ablations/electric.gin"), eager=True)
    return str(directory)


def _script_error(script, *args) -> list[str]:
    """The stderr lines of scripts/`script` run with `args` (in this process), which must
    exit with 1."""
    done = run_script(script, *args)
    assert done.returncode == 1, done.stderr
    return done.stderr.strip().splitlines()


def _detect(*args) -> str:
    """What scripts/detect_replaced.py run with `args` (in this process) prints; it must
    succeed."""
    done = run_script("detect_replaced.py", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _ids(loaded, texts):
    """The ids the serving signature builds, by the tokenizer: [CLS] text [SEP], padded."""
    tok = loaded.tokenizer()
    rows = []
    for text in texts:
        pieces = text.split("[MASK]")
        ids = []
        for i, piece in enumerate(pieces):
            ids += tok.encode([piece])[0] + ([tok.mask_id] if i < len(pieces) - 1 else [])
        rows.append([tok.cls_id] + ids + [tok.sep_id])
    length = max(map(len, rows))
    input_ids = np.array([r + [0] * (length - len(r)) for r in rows], np.int32)
    mask = (np.arange(length)[None] < np.array([len(r) for r in rows])[:, None]).astype(np.int32)
    return {"input_ids": input_ids, "input_mask": mask, "segment_ids": np.zeros_like(mask)}


@pytest.fixture(scope="module")
def served(model_dir, electric_dir, tmp_path_factory):
    """SERVED exported (the pre-trained model's three kinds into one export dir, as a user
    serving them together would), then TEXTS served through both signatures of each in
    one new process (LOADER): {name: (the SavedModel's path, the loaded model dir, TEXTS'
    ids, the signatures' outputs)}."""
    root = tmp_path_factory.mktemp("served")
    sources = {}  # each model dir loaded once: (the loaded model dir, TEXTS' ids)
    for source, directory in (("model_dir", model_dir), ("electric_dir", electric_dir)):
        loaded = load_pretrainer(directory)
        sources[source] = (directory, loaded, _ids(loaded, TEXTS))
        np.savez(root / f"{source}_ids.npz", **sources[source][2])
    exports, jobs = {}, []
    for name, (source, export_dir, model_name, kind) in SERVED.items():
        directory, loaded, ids = sources[source]
        path = saved_model.export(directory, str(root / export_dir), model_name, kind)
        jobs.append((path, str(root / f"{source}_ids.npz"), str(root / f"{name}_out.npz")))
        exports[name] = (path, loaded, ids)
    subprocess.run([sys.executable, "-c", LOADER, json.dumps(jobs)], check=True,
                   capture_output=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    return {name: (*exports[name], dict(np.load(root / f"{name}_out.npz")))
            for name in SERVED}


@pytest.mark.parametrize("kind", ["discriminator", "generator", "encoder"])
def test_each_kind_loads_in_a_fresh_process_and_agrees_with_the_model(served, kind):
    path, loaded, ids, out = served[kind]
    # Only ops the official TF Serving image has (see SERVING_TEXT_OPS).
    assert {op for op in _graph_ops(path) if not hasattr(tf.raw_ops, op)} <= SERVING_TEXT_OPS
    # The raw-text signature tokenized exactly as the tokenizer does.
    np.testing.assert_array_equal(out["text_input_mask"], ids["input_mask"])
    tokenizer = loaded.tokenizer()  # (once: each call reads the vocab file)
    tokens = np.array([[tokenizer.vocab[i] if m else "" for i, m in zip(r, mr)]
                       for r, mr in zip(ids["input_ids"], ids["input_mask"])])
    np.testing.assert_array_equal(out["text_tokens"].astype(str), tokens)
    model = loaded.model
    args = [tf.constant(ids[k]) for k in ("input_ids", "input_mask", "segment_ids")]
    mask = ids["input_mask"].astype(bool)
    if kind == "discriminator":
        expected = model.discriminator_predictions(model.discriminator(*args)).numpy()
        np.testing.assert_allclose(out["ids_replaced_logits"][mask], expected[mask], atol=1e-5)
        np.testing.assert_allclose(out["text_replaced_probability"],
                                   1 / (1 + np.exp(-expected)) * mask, atol=1e-5)
    elif kind == "generator":
        expected = model.generator_predictions(model.generator(*args),
                                               model.generator.embeddings.word_embeddings)
        np.testing.assert_allclose(out["ids_mlm_logits"][mask], expected.numpy()[mask],
                                   atol=1e-4)
        # Two [MASK]s in the second text, none in the others.
        np.testing.assert_array_equal(out["text_mask_positions"][0], [-1, -1])
        positions = np.nonzero(ids["input_ids"][1] == tokenizer.mask_id)[0]
        np.testing.assert_array_equal(out["text_mask_positions"][1], positions)
        probabilities = tf.nn.softmax(expected[1].numpy()[positions]).numpy()
        top = np.argsort(-probabilities, axis=-1)[:, :5]
        np.testing.assert_array_equal(
            out["text_top_k_tokens"][1].astype(str),
            np.array(tokenizer.vocab)[top])
        np.testing.assert_allclose(out["text_top_k_probabilities"][1],
                                   np.take_along_axis(probabilities, top, -1), atol=1e-5)
    else:
        expected = model.discriminator(*args).numpy()
        np.testing.assert_allclose(out["ids_sequence_output"][mask], expected[mask], atol=1e-5)
        np.testing.assert_allclose(out["text_cls_output"], expected[:, 0], atol=1e-5)


def test_electric_discriminator_serves_the_probability_training_scores(served, electric_dir):
    """Electric's discriminator head is an energy; training scores a token with
    sigmoid(energy + log q(token | context) + log(p / (1 - p))), q the two-tower cloze model.
    The export (both signatures) and the detector give that, on the same input."""
    path, loaded, ids, out = served["electric"]
    model = loaded.model
    assert model.objective == "electric"
    # Training's logits on this input: no slot masked, so the corrupted input is the input.
    b = len(TEXTS)
    batch = {k: tf.constant(v) for k, v in ids.items()}
    batch.update(masked_lm_positions=tf.zeros([b, 1], tf.int32),
                 masked_lm_ids=tf.zeros([b, 1], tf.int32), masked_lm_weights=tf.zeros([b, 1]))
    expected = model(batch, step=0, training=False)["discriminator_logits"].numpy()
    mask = ids["input_mask"].astype(bool)
    np.testing.assert_allclose(out["ids_replaced_logits"][mask], expected[mask], atol=1e-4)
    probability = 1 / (1 + np.exp(-expected)) * mask
    np.testing.assert_allclose(out["text_replaced_probability"], probability, atol=1e-5)
    # Not the energy's sigmoid alone (~0.5 for every token after a short run).
    energy = model.discriminator_predictions(model.discriminator(
        *[batch[k] for k in ("input_ids", "input_mask", "segment_ids")])).numpy()
    assert np.min(np.abs(expected - energy)[mask]) > 1.0
    # The detector prints the same, from the export and from the model dir.
    n = int(mask[0].sum())
    for source in (f"--saved_model={path}", f"--model_dir={electric_dir}"):
        printed = [float(line.split()[1]) for line in _detect(source, TEXTS[0]).splitlines()[1:]]
        np.testing.assert_allclose(printed, probability[0, 1:n - 1], atol=6e-4)


def test_models_config_keeps_the_users_text(tmp_path):
    """An export adds its model to models.config without rewriting the user's file: its
    comments and layout stay (they were dropped by every export), and a file that lists
    the model already is left byte for byte; the result is the config with the model added
    wherever the text cannot take it where it is."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    def parsed():
        return text_format.Parse((tmp_path / "models.config").read_text(),
                                 model_server_config_pb2.ModelServerConfig())

    saved_model.write_models_config(str(tmp_path), "first")  # no file: a new one
    assert [c.name for c in parsed().model_config_list.config] == ["first"]
    users = ('# owner: ml-platform; keep reg pinned to 1\nmodel_config_list {\n  config {\n'
             '    name: "reg"\n    base_path: "/models/reg"\n    model_platform: "tensorflow"\n'
             '    model_version_policy { specific { versions: 1 } }  # pinned\n  }\n}\n')
    (tmp_path / "models.config").write_text(users)
    saved_model.write_models_config(str(tmp_path), "reg")
    assert (tmp_path / "models.config").read_text() == users  # listed: left as written
    saved_model.write_models_config(str(tmp_path), "tagger")
    text = (tmp_path / "models.config").read_text()
    assert text.startswith(users[:users.rindex("}")]) and "# pinned" in text
    entries = parsed().model_config_list.config
    assert [(c.name, c.base_path) for c in entries] == [("reg", "/models/reg"),
                                                        ("tagger", "/models/tagger")]
    assert list(entries[0].model_version_policy.specific.versions) == [1]
    # A closing brace in a comment after the list: the entry cannot go before it.
    (tmp_path / "models.config").write_text(users + "# old: config { name: 'x' }\n")
    saved_model.write_models_config(str(tmp_path), "tagger")
    assert [c.name for c in parsed().model_config_list.config] == ["reg", "tagger"]


def test_saved_model_cli_warmup_records_and_models_config(served):
    path = served["discriminator"][0]
    export_dir = os.path.dirname(os.path.dirname(path))
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    listing = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True,
                             text=True, check=True).stdout
    for expected in ("signature_def['serving_default']", "signature_def['predict_ids']",
                     "inputs['text'] tensor_info:\n        dtype: DT_STRING",
                     "inputs['input_ids'] tensor_info:\n        dtype: DT_INT32",
                     "outputs['replaced_probability'] tensor_info:\n        dtype: DT_FLOAT",
                     "outputs['tokens'] tensor_info:\n        dtype: DT_STRING",
                     "outputs['replaced_logits'] tensor_info:\n        dtype: DT_FLOAT"):
        assert expected in listing, expected
    from tensorflow_serving.apis import prediction_log_pb2
    records = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in
               tf.data.TFRecordDataset(os.path.join(path, "assets.extra",
                                                    saved_model.WARMUP_FILE))]
    assert [len(r.predict_log.request.inputs["text"].string_val) for r in records] == [1, 2]
    assert {r.predict_log.request.model_spec.name for r in records} == {"electra"}
    assert os.listdir(os.path.join(path, "assets")) == ["bert_uncased.txt"]
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2
    with open(os.path.join(export_dir, "models.config")) as f:
        config = text_format.Parse(f.read(), model_server_config_pb2.ModelServerConfig())
    assert [(c.name, c.base_path) for c in config.model_config_list.config] == [
        ("electra", "/models/electra"), ("electra-generator", "/models/electra-generator"),
        ("electra-encoder", "/models/electra-encoder")]


def test_detector_cli_from_a_saved_model_and_from_a_model_dir(model_dir, served, tmp_path):
    path = served["discriminator"][0]
    outputs = [_detect(source, "--threshold=0.0", "The quick brown fox jumps over the lazy dog",
                       "The quick red fox runs")
               for source in (f"--saved_model={path}", f"--model_dir={model_dir}")]
    assert outputs[0] == outputs[1]
    # From a model dir it says, on stderr, which checkpoint it read (a run may be writing
    # newer ones); a ckpt-N prefix reads that one.
    latest = tf.train.latest_checkpoint(model_dir)
    assert run_script("detect_replaced.py", f"--model_dir={model_dir}", "Fine").stderr == (
        f"discriminator: the weights of {latest}\n")
    first = run_script("detect_replaced.py", f"--model_dir={model_dir}/ckpt-0", "Fine")
    assert first.stderr.splitlines() == [
        f"discriminator: the weights of {model_dir}/ckpt-0",
        f"note: {model_dir}/ckpt-0 holds the weights before the first training step (asked "
        f"for: the run's latest is {os.path.basename(latest)}): they are untrained"]
    lines = outputs[0].splitlines()
    assert lines[0] == "The quick brown fox jumps over the lazy dog"
    words = "the quick brown fox jumps over the lazy dog".split()
    assert [line.split()[0] for line in lines[1:10]] == words
    assert all(line.endswith("<- replaced") for line in lines[1:10])  # threshold 0
    assert lines[10] == "The quick red fox runs" and len(lines) == 16
    # An empty sentence has no token to show: said so (it printed a blank line alone).
    assert _detect(f"--saved_model={path}", "", "Fine").splitlines()[:3] == [
        "", "  (no tokens: the sentence is empty or only spaces)", "Fine"]
    # A model dir moved from its vocab takes its own copy of it; without the copy the error
    # names --vocab_file, which the detector has.
    moved = tmp_path / "moved"
    shutil.copytree(model_dir, moved)
    info = json.loads((moved / "model_info.json").read_text())
    (moved / "model_info.json").write_text(json.dumps({**info, "vocab_file": "/gone/v.txt"}))
    assert _detect(f"--model_dir={moved}", "--threshold=0.0",
                   "The quick brown fox jumps over the lazy dog",
                   "The quick red fox runs") == outputs[0]
    # and when the file it names was overwritten with another vocab (learn_vocab --overwrite)
    changed = tmp_path / "changed.txt"
    changed.write_text(Path(UNCASED_VOCAB).read_text().replace("fox", "f0x"))
    (moved / "model_info.json").write_text(json.dumps({**info, "vocab_file": str(changed)}))
    assert _detect(f"--model_dir={moved}", "--threshold=0.0",
                   "The quick brown fox jumps over the lazy dog",
                   "The quick red fox runs") == outputs[0]
    (moved / "model_info.json").write_text(json.dumps({**info, "vocab_file": "/gone/v.txt"}))
    (moved / "vocab.txt").unlink()
    assert "pass --vocab_file" in _script_error("detect_replaced.py", f"--model_dir={moved}",
                                                "a sentence")[0]
    assert _detect(f"--model_dir={moved}", f"--vocab_file={UNCASED_VOCAB}", "--threshold=0.0",
                   "The quick brown fox jumps over the lazy dog",
                   "The quick red fox runs") == outputs[0]
    assert _script_error("detect_replaced.py", f"--saved_model={path}",
                         f"--vocab_file={UNCASED_VOCAB}", "a sentence") == [
        "error: --vocab_file goes with --model_dir; a SavedModel holds its vocab"]
    # A SavedModel copied without its variables.
    part = tmp_path / "part"
    shutil.copytree(path, part, ignore=shutil.ignore_patterns("variables"))
    (error,) = _script_error("detect_replaced.py", f"--saved_model={part}", "a sentence")
    assert error.startswith(f"error: --saved_model={part} could not be loaded (") and (
        error.endswith("); export it again or copy it whole")), error
    # ... and with its variables cut short, as an interrupted copy leaves them.
    cut = tmp_path / "cut"
    shutil.copytree(path, cut)
    (data_file,) = (cut / "variables").glob("variables.data-*")
    data_file.write_bytes(data_file.read_bytes()[:1000])
    (error,) = _script_error("detect_replaced.py", f"--saved_model={cut}", "a sentence")
    assert error.startswith(f"error: --saved_model={cut} could not be loaded (") and (
        error.endswith("); export it again or copy it whole")), error
    # A model dir whose checkpoint or model_info.json is cut short.
    for name in ("checkpoint", "info"):
        broken = tmp_path / f"broken_{name}"
        shutil.copytree(model_dir, broken)
        if name == "checkpoint":
            latest = os.path.basename(load_pretrainer(str(broken)).checkpoint)
            (data_file,) = broken.glob(f"{latest}.data-*")
            data_file.write_bytes(data_file.read_bytes()[:1000])
        else:
            info_file = broken / "model_info.json"
            info_file.write_text(info_file.read_text()[:50])
        (error,) = _script_error("detect_replaced.py", f"--model_dir={broken}", "a sentence")
        expected = (rf"error: {broken}/ckpt-\d+ could not be read \(\w+: .*\): its files are "
                    "truncated or corrupt; copy them again" if name == "checkpoint" else
                    rf"error: {broken}/model_info.json is not JSON \(.*\): a part copy or an "
                    "edit gone wrong; copy the model dir again")
        assert re.fullmatch(expected, error), error
    # Sentences that are not UTF-8 (bytes from a Latin-1 terminal, as Python keeps them),
    # a threshold that is no probability, and a sentence longer than the model takes.
    assert _script_error("detect_replaced.py", f"--saved_model={path}", "fine",
                         "caf\udce9 au lait") == [
        "error: sentence 2 is not UTF-8 text; pass UTF-8 (e.g. a terminal set to UTF-8)"]
    for threshold in ("nan", "1.5", "-0.1"):
        assert _script_error("detect_replaced.py", f"--saved_model={path}",
                             f"--threshold={threshold}", "a sentence") == [
            f"error: --threshold={float(threshold)} is not a probability; pass a number from "
            "0 to 1 (default 0.5)"]
    long = _detect(f"--saved_model={path}", "word " * 300, "word " * 126).splitlines()
    assert len(long) == 2 * (1 + 126) + 1 and long[127] == (
        "  note: the sentence is longer than the 128 positions the model takes (its "
        "max_seq_length): the tokens beyond them were cut")
    assert "note:" not in "".join(long[128:])  # one that fits them exactly was not cut
    assert "note:" not in outputs[0]


def test_detector_and_export_refuse_a_model_without_a_replaced_token_head(austen_data,
                                                                         tmp_path):
    pretrain(tmp_path / "mlm", os.path.join(austen_data[0], "*.tfrecord"),
             ["NUM_TRAIN_STEPS = 2", "OBJECTIVE = 'mlm'"], eager=True)
    assert _script_error("detect_replaced.py", f"--model_dir={tmp_path}/mlm",
                         "the license is granted") == [
        f"error: --model_dir={tmp_path}/mlm was pre-trained with objective mlm, which trains no "
        "replaced-token head to detect with; pass a model dir pre-trained with electra, "
        "electra_15 or electric"]
    with pytest.raises(UserInputError, match="^objective mlm trains no replaced-token head; use "
                                             "--kind=generator or encoder$"):
        saved_model.export(str(tmp_path / "mlm"), str(tmp_path / "serving"), "x")
    assert not os.path.exists(tmp_path / "serving")
    # Replace MLM trains the encoder; its generator is the small one (it was offered as
    # the first choice).
    pretrain(tmp_path / "replace", os.path.join(austen_data[0], "*.tfrecord"),
             ["NUM_TRAIN_STEPS = 2", "OBJECTIVE = 'replace_mlm'"], eager=True)
    with pytest.raises(UserInputError, match=r"^objective replace_mlm trains no replaced-token "
                                             r"head; use --kind=encoder \(the network this "
                                             r"objective trains; --kind=generator would serve "
                                             r"its small generator\)$"):
        saved_model.export(str(tmp_path / "replace"), str(tmp_path / "serving"), "x")
    # A generator export asked of a model without one says why (it named the objective,
    # 'electra', as if that were the reason).
    from electra_tf.modeling.config import EncoderConfig, generator_config
    from electra_tf.modeling.pretrainer import ElectraPretrainer
    config = EncoderConfig(vocab_size=120, hidden_size=32, num_layers=1, num_heads=1,
                           intermediate_size=64, max_position_embeddings=64)
    for model, why in ((ElectraPretrainer(config, uniform_generator=True),
                        "it sampled its replacements uniformly"),
                       (ElectraPretrainer(config, generator_config(config, 0.5),
                                          objective="electric"),
                        "Electric's generator is a two-tower cloze model")):
        with pytest.raises(UserInputError) as error:
            saved_model.ServingModule(model, "generator", UNCASED_VOCAB, 64)
        assert str(error.value) == (f"this model has no masked-LM generator to export ({why}); "
                                    "use --kind=discriminator or encoder")


def test_sigterm_stops_an_export_with_one_line_and_nothing_written(model_dir, tmp_path):
    """SIGTERM (a scheduler's stop) while the SavedModel is written: one line, exit code
    143 and no staging folder left (the export died without a word and left it)."""
    import signal
    import time
    serving = tmp_path / "serving"
    process = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", "export_saved_model.py"),
         f"--model_dir={model_dir}", f"--export_dir={serving}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (serving / "electra").is_dir() or not os.listdir(serving / "electra"):
        assert process.poll() is None and time.time() < deadline, process.communicate()
        time.sleep(0.01)
    assert os.listdir(serving / "electra")[0].startswith(".tmp-1-")
    process.send_signal(signal.SIGTERM)
    assert (process.wait(timeout=120), process.stderr.read()) == (
        143, "terminated (SIGTERM); no version was written: rerun the command to export it\n")
    # Nothing served: the folders it made removed again, or, where TensorFlow held the main
    # thread past the grace period (a loaded machine) and the watcher ended the process,
    # only the hidden staging folder, which the next export removes.
    assert not serving.exists() or [n[:7] for n in os.listdir(serving / "electra")] == [
        ".tmp-1-"]


def test_an_export_names_its_checkpoint_and_exports_one_asked_for(model_dir, tmp_path,
                                                                   monkeypatch, austen_data):
    """The export says which checkpoint it serves (it did not: a run's ckpt-0 went out as
    the model); a ckpt-N prefix (or its .index) exports that one (refused: "does not exist
    or is not a folder"); a checkpoint a running run removes while it is read gives way to
    its newer one (it was "truncated or corrupt; copy them again"); a model's own folder as
    --export_dir is refused (the version nested under it, unseen by TF Serving)."""
    from electra_tf.training import checkpoints
    latest = tf.train.latest_checkpoint(model_dir)
    first = os.path.join(model_dir, "ckpt-0")
    assert latest != first and os.path.exists(first + ".index")
    lines = []
    saved_model.export(model_dir, str(tmp_path), "latest", "discriminator", log=lines.append)
    assert lines == [f"discriminator: the weights of {latest}"]
    lines = []
    saved_model.export(first + ".index", str(tmp_path), "first", "discriminator",
                       log=lines.append)
    assert lines == [f"discriminator: the weights of {first}",
                     f"note: {first} holds the weights before the first training step (asked "
                     f"for: the run's latest is {os.path.basename(latest)}): they are untrained"]
    # A run started from a checkpoint saved those weights as its ckpt-0: said so.
    pretrain(tmp_path / "continued", os.path.join(austen_data[0], "*.tfrecord"),
             ["NUM_TRAIN_STEPS = 2"], eager=True, init_checkpoint=model_dir)
    # (a run that has saved no later checkpoint yet: ckpt-2 not there)
    for path in glob.glob(str(tmp_path / "continued" / "ckpt-2.*")):
        os.remove(path)
    (tmp_path / "continued" / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-0"\nall_model_checkpoint_paths: "ckpt-0"\n')
    lines = []
    saved_model.export(str(tmp_path / "continued"), str(tmp_path), "continued",
                       "discriminator", log=lines.append)
    assert lines[-1] == (f"note: {tmp_path}/continued/ckpt-0 holds the weights before the "
                         "first training step (the run has saved no later checkpoint yet): "
                         f"those it started from, {latest}")
    served = [tf.saved_model.load(str(tmp_path / name / "1")).signatures["serving_default"](
        text=tf.constant(["Emma smiled at Harriet."]))["replaced_probability"].numpy()
        for name in ("latest", "first")]
    assert np.abs(served[0] - served[1]).max() > 1e-6  # other weights
    for given, what, parent in ((tmp_path / "latest", "a model's folder (it holds its "
                                 "versions)", tmp_path),
                                (tmp_path / "latest" / "1", "a version of a model", tmp_path)):
        with pytest.raises(UserInputError) as error:
            saved_model.export(model_dir, str(given), "latest", "discriminator", version=2)
        assert str(error.value) == (
            f"--export_dir={given} is {what}; pass the folder above the model's, "
            f"--export_dir={parent}, with --model_name=the model's folder name (it writes "
            "EXPORT_DIR/MODEL_NAME/VERSION)")
    # A models.config that pins the versions TF Serving serves: an export of another says so
    # (it said nothing, and TF Serving never served it).
    config = tmp_path / "models.config"
    config.write_text(config.read_text().replace(
        'name: "latest"', 'name: "latest"\n    model_version_policy { specific { versions: 1 } }'))
    lines = []
    saved_model.export(model_dir, str(tmp_path), "latest", "discriminator", version=2,
                       log=lines.append)
    assert lines[-1] == ("note: models.config has TF Serving serve latest's versions 1 only "
                         "(model_version_policy specific): add 2 there to serve this one")
    assert "versions: 1" in config.read_text()  # kept as the user wrote it
    # A run saves ckpt-9 and removes the latest while the model is read.
    copy = tmp_path / "running"
    shutil.copytree(model_dir, copy)
    read = checkpoints.read_weights
    calls = []

    def run_moves_on(model, checkpoint, described_by):
        calls.append(os.path.basename(checkpoint))
        if len(calls) == 1:
            for f in glob.glob(checkpoint + ".*"):
                os.rename(f, f.replace(os.path.basename(checkpoint), "ckpt-9"))
            tf.compat.v1.train.update_checkpoint_state(str(copy), str(copy / "ckpt-9"))
        return read(model, checkpoint, described_by)

    monkeypatch.setattr(checkpoints, "read_weights", run_moves_on)
    loaded = checkpoints.load_pretrainer(str(copy))
    assert calls == [os.path.basename(latest), "ckpt-9"]
    assert loaded.checkpoint == str(copy / "ckpt-9")
    calls.clear()  # one asked for and removed: said
    with pytest.raises(UserInputError) as error:
        checkpoints.load_pretrainer(str(copy / "ckpt-0"))
    assert str(error.value) == (
        f"{copy}/ckpt-0 was removed while it was read: a run writing {copy} keeps only its "
        "newest checkpoints (pretraining.keep_checkpoints); pass one it keeps, or the model "
        "dir for its latest")
    assert calls == ["ckpt-0"]
    # Fine-tuning reads one checkpoint: it read the latest, then again the one it had seen
    # first, which the run writing the dir had removed (a NotFoundError traceback).
    from electra_tf.finetune import runner
    copy = tmp_path / "running_again"
    shutil.copytree(model_dir, copy)
    calls.clear()
    assert runner.load_initialization(str(copy)).source == str(copy / "ckpt-9")
    assert calls == [os.path.basename(latest), "ckpt-9"]
    # A ckpt-N not there, asked for (it was "does not exist or is not a folder" or "neither
    # a model dir nor a checkpoint prefix"): one not saved or removed, or not written yet.
    monkeypatch.setattr(checkpoints, "read_weights", read)
    for given, reader in ((f"{copy}/ckpt-3", checkpoints.load_pretrainer),
                          (f"{copy}/ckpt-3.index", checkpoints.load_pretrainer),
                          (f"{copy}/ckpt-3", runner.load_initialization)):
        with pytest.raises(UserInputError) as error:
            reader(given)
        assert str(error.value).endswith(
            f"is not there: {copy} holds ckpt-9 (a step not saved, or one its run removed: it "
            "keeps only its newest checkpoints (pretraining.keep_checkpoints); pass one it "
            "keeps, or the model dir for its latest)"), str(error.value)
    with pytest.raises(UserInputError) as error:
        checkpoints.load_pretrainer(f"{copy}/ckpt-12")
    assert str(error.value) == (f"{copy}/ckpt-12 is not written (yet): the latest checkpoint "
                                f"of {copy} is ckpt-9; pass one it holds (ckpt-9), or the model "
                                "dir for its latest")


def test_bad_exports_fail_with_one_clear_line(model_dir, tmp_path, monkeypatch):
    saved_model.export(model_dir, str(tmp_path), "electra", "discriminator")
    with pytest.raises(UserInputError, match=r"electra/1 exists; pass --version=2"):
        saved_model.export(model_dir, str(tmp_path), "electra", "discriminator")
    # (the next after the highest: --version=2 was named where 2 was there too)
    os.makedirs(tmp_path / "electra" / "7")
    with pytest.raises(UserInputError, match=r"electra/1 exists; pass --version=8 "):
        saved_model.export(model_dir, str(tmp_path), "electra", "discriminator")
    os.rmdir(tmp_path / "electra" / "7")
    # Two exports of one version at once: the one finishing second is refused and the
    # other's SavedModel kept (it was replaced, silently).
    write_warmup = saved_model._write_warmup

    def another_export_finishes(folder, *args):
        shutil.copytree(tmp_path / "electra" / "1", tmp_path / "race" / "1")
        (tmp_path / "race" / "1" / "theirs").write_text("")
        write_warmup(folder, *args)

    with monkeypatch.context() as patched:
        patched.setattr(saved_model, "_write_warmup", another_export_finishes)
        with pytest.raises(UserInputError) as error:
            saved_model.export(model_dir, str(tmp_path), "race", "discriminator")
    assert str(error.value) == (
        f"{tmp_path}/race/1 was written by another export while this one ran; it is kept: "
        "pass --version=2 or --overwrite")
    assert os.listdir(tmp_path / "race") == ["1"]  # no staging folder left
    assert os.path.exists(tmp_path / "race" / "1" / "theirs")
    # A generator as version 2 of the discriminator's name would replace it in TF Serving.
    with pytest.raises(UserInputError) as error:
        saved_model.export(model_dir, str(tmp_path), "electra", "generator", version=2)
    assert str(error.value) == (
        f"{tmp_path}/electra/1 serves another kind of model (outputs input_mask, "
        "replaced_probability, tokens, truncated) than this --kind=generator export (outputs "
        "input_mask, mask_positions, tokens, top_k_probabilities, top_k_tokens, truncated), "
        "and TF Serving serves a name's highest version only; pass another --model_name")
    assert sorted(os.listdir(tmp_path / "electra")) == ["1"]
    # A higher version may add outputs (this release's export above an earlier release's):
    # the earlier one's clients get what they read; said, not refused.
    earlier = tf.Module()
    earlier.serve = tf.function(
        lambda text: {"tokens": tf.strings.split(text).to_tensor(),
                      "input_mask": tf.ones_like(tf.strings.split(text).to_tensor(), tf.int32)},
        input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    tf.saved_model.save(earlier, str(tmp_path / "grown" / "1"), signatures=earlier.serve)
    lines = []
    saved_model.export(model_dir, str(tmp_path), "grown", "discriminator", version=2,
                       log=lines.append)
    latest = tf.train.latest_checkpoint(model_dir)
    assert lines == [f"note: added grown to {tmp_path}/models.config, which did not name it "
                     "though its versions were there (an export stopped before writing it?)",
                     f"discriminator: the weights of {latest}",
                     "note: grown/2 adds the outputs replaced_probability, truncated to those of "
                     "grown/1"]
    # Written below an earlier release's version, which lacks an output: said, not refused.
    earlier.serve = tf.function(
        lambda text: {name: tf.strings.split(text).to_tensor()
                      for name in ("input_mask", "replaced_probability", "tokens")},
        input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    tf.saved_model.save(earlier, str(tmp_path / "below" / "5"), signatures=earlier.serve)
    lines = []
    saved_model.export(model_dir, str(tmp_path), "below", "discriminator", version=1,
                       log=lines.append)
    assert "note: below/1 has the outputs truncated, which below/5, the version TF Serving " \
           "serves, lacks" in lines, lines
    with pytest.raises(UserInputError, match=r"grown/2 serves another kind of model \(outputs "
                                             r"input_mask, replaced_probability, tokens, "
                                             r"truncated\) than "
                                             "this --kind=generator export"):
        saved_model.export(model_dir, str(tmp_path), "grown", "generator", version=3)
    # The same outputs of other inputs (a sentence-pair model): the inputs are named too.
    pair = tf.Module()
    pair.serve = tf.function(
        lambda text, text_b: {name: tf.strings.split(text + text_b).to_tensor()
                              for name in ("input_mask", "replaced_probability", "tokens")},
        input_signature=[tf.TensorSpec([None], tf.string, name=n) for n in ("text", "text_b")])
    tf.saved_model.save(pair, str(tmp_path / "pair" / "1"), signatures=pair.serve)
    with pytest.raises(UserInputError) as error:
        saved_model.export(model_dir, str(tmp_path), "pair", "discriminator", version=2)
    assert str(error.value) == (
        f"{tmp_path}/pair/1 serves another kind of model (inputs text, text_b; outputs "
        "input_mask, replaced_probability, tokens) than this --kind=discriminator export "
        "(inputs text; outputs input_mask, replaced_probability, tokens, truncated), and TF "
        "Serving serves a name's highest version only; pass another --model_name")
    # A version written below a higher one is not the one served: said. Staging folders
    # that killed exports of this machine left are removed; a running one's, or another
    # machine's, kept.
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    host = atomic.owner()
    stale = [f".tmp-3-{host}-{child.pid}", f".tmp-2-{host}-{os.getppid()}",
             f".tmp-3-elsewhere-{child.pid}"]
    for name in stale:
        os.makedirs(tmp_path / "low" / name / "variables")
    lines = []
    saved_model.export(model_dir, str(tmp_path), "low", "discriminator", version=3)
    assert sorted(os.listdir(tmp_path / "low")) == sorted(["3"] + stale[1:])
    saved_model.export(model_dir, str(tmp_path), "low", "discriminator", version=2,
                       log=lines.append)
    assert lines == [f"discriminator: the weights of {latest}",
                     "note: low/3 is a higher version: TF Serving serves that one, not 2"]
    # A version that an export killed while replacing it had moved aside is put back (with
    # the version in place, the copy is removed), and a version that no models.config entry
    # names (an export killed between its rename and the config) gets one, by a refused
    # rerun too.
    os.makedirs(tmp_path / "low" / f".old-2-{host}-{child.pid}" / "variables")
    shutil.copytree(tmp_path / "low" / "3", tmp_path / "low" / f".old-4-{host}-{child.pid}")
    config = tmp_path / "models.config"
    kept = config.read_text()
    config.unlink()
    lines = []
    with pytest.raises(UserInputError, match=f"^{tmp_path}/low/3 exists; pass --version=5"):
        saved_model.export(model_dir, str(tmp_path), "low", "discriminator", version=3,
                           log=lines.append)
    assert lines == [f"note: put back {tmp_path}/low/4, which an export killed while replacing "
                     "it had moved aside",
                     f"note: added low to {config}, which did not name it though its versions "
                     "were there (an export stopped before writing it?)"]
    assert sorted(os.listdir(tmp_path / "low")) == sorted(["2", "3", "4"] + stale[1:])
    assert saved_model._config_names(str(tmp_path)) == ["low"]
    config.write_text(kept)
    with pytest.raises(UserInputError, match="--kind=task exports a fine-tuned model"):
        saved_model.export(model_dir, str(tmp_path), "other", "task")
    with pytest.raises(UserInputError, match="has no operative_config.gin"):
        saved_model.export(str(tmp_path), str(tmp_path), "other", "encoder")
    for top_k in (0, 40000):
        with pytest.raises(UserInputError, match=f"^--top_k={top_k} must be between 1 and the "
                                                 "vocab's 30522 tokens$"):
            saved_model.export(model_dir, str(tmp_path), "gen", "generator", top_k=top_k)
    assert not os.path.exists(tmp_path / "gen")
    assert _script_error("export_saved_model.py", f"--model_dir={model_dir}",
                         f"--export_dir={tmp_path}", "--model_name=d", "--top_k=3") == [
        "error: --top_k is for --kind=generator (its candidates per [MASK]), not "
        "--kind=discriminator; drop it"]
    assert not os.path.exists(tmp_path / "d")
    assert sorted(os.listdir(tmp_path / "electra")) == ["1"]  # nothing half-written
    assert _script_error("export_saved_model.py", f"--model_dir={tmp_path}/nothing",
                         f"--export_dir={tmp_path}/x") == [
        f"error: {tmp_path}/nothing does not exist or is not a folder; pass a model dir "
        "written by run_pretraining.py or convert_checkpoint.py"]
    assert not os.path.exists(tmp_path / "x")
    # A model name TF Serving's config would reject stops before anything is written.
    with pytest.raises(UserInputError, match="--model_name='electra 2' is not a TF Serving"):
        saved_model.export(model_dir, str(tmp_path / "x"), "electra 2", "discriminator")
    assert _script_error("export_saved_model.py", f"--model_dir={model_dir}",
                         f"--export_dir={tmp_path}/x", "--model_name=bad name/x") == [
        "error: --model_name='bad name/x' is not a TF Serving model name: use ASCII letters, "
        "digits, '_', '-' and '.' only, starting with a letter or digit"]
    with pytest.raises(UserInputError, match="^--model_name=models.config is the name of the "
                                             "TF Serving config the export writes beside"):
        saved_model.export(model_dir, str(tmp_path / "x"), "models.config", "discriminator")
    assert not os.path.exists(tmp_path / "x")
    # An export dir (or its model folder) that is a file; a models.config TF Serving could not
    # read (it was parsed after the SavedModel was renamed into place: a traceback, and a
    # version on disk that no config named).
    (tmp_path / "afile").write_text("x")
    assert _script_error("export_saved_model.py", f"--model_dir={model_dir}",
                         f"--export_dir={tmp_path}/afile") == [
        f"error: {tmp_path}/afile is a file, not a directory; pass a --export_dir that is a "
        "directory (new or one exported to before)"]
    with pytest.raises(UserInputError, match=rf"^{tmp_path}/afile is a file, not a directory; "
                                             "choose another --model_name$"):
        saved_model.export(model_dir, str(tmp_path), "afile", "discriminator")  # its folder
    config = tmp_path / "models.config"
    config.write_text("model_config_list {\n  config {\n    name: 'electra'\n")
    with pytest.raises(UserInputError, match=rf"^{config} is not a TF Serving model config "
                                             r"\(.*\); fix it, or move it away and export "
                                             "again to write a new one$"):
        saved_model.export(model_dir, str(tmp_path), "electra", "discriminator", version=2)
    assert sorted(os.listdir(tmp_path / "electra")) == ["1"]
    info = json.loads(open(os.path.join(model_dir, "model_info.json")).read())
    assert info["lower_case"] is True and os.path.isabs(info["vocab_file"])


# ------------------------------------------------------------------------------ task models

MOVIES = os.path.join(FIXTURES, "finetune", "movie_snippets.csv")
L = 48  # the fine-tuning MAX_SEQ_LENGTH here
# Every task export in one fresh interpreter (TensorFlow's start-up is the slow part): each
# signature called with the inputs saved beside the export, every output saved.
TASK_LOADER = """
import json, sys, numpy as np, tensorflow as tf, tensorflow_text
plain = lambda v: (np.char.decode(v.numpy().astype(bytes), "utf-8")
                   if v.dtype == tf.string else v.numpy())
for path, inputs, out in json.loads(sys.argv[1]):
    model, given, outputs = tf.saved_model.load(path), np.load(inputs), {}
    for name in sorted({k.split("__")[0] for k in given.files}):
        args = {k.split("__")[1]: tf.constant(given[k]) for k in given.files
                if k.startswith(name + "__")}
        outputs.update({name + "__" + k: plain(v)
                        for k, v in model.signatures[name](**args).items()})
    np.savez(out, **outputs)
"""
LONG = " ".join(["remarkably"] * 30) + " and " + " ".join(["tedious"] * 30)


def _movies():
    with open(MOVIES, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _finetune(task, out, models, bindings=(), num_trials=1, seed=0, **files):
    """run_finetuning from a random encoder of conftest.SMALL's shape (initialised wide,
    stddev 0.2, so that its outputs vary clearly with the input), a few steps; the
    fine-tuned models, as trained and still in memory, go into `models` by trial dir."""
    import gin

    from electra_tf import gin_files
    from electra_tf.finetune import runner, tasks
    from electra_tf.modeling.config import EncoderConfig
    config = EncoderConfig(vocab_size=30522, hidden_size=32, num_layers=1, num_heads=1,
                           intermediate_size=64, embedding_size=32, max_position_embeddings=128,
                           initializer_range=0.2)
    init = runner.Initialization(config, None, UNCASED_VOCAB, True, True, "random")
    data = tasks.load(tasks.get_task(task), log=lambda *_: None, **files)
    write = runner._write_trial

    def keep(trial_dir, model, *args):
        models[trial_dir] = model
        write(trial_dir, model, *args)

    gin_files.parse(["finetune/tiny.gin"], [f"MAX_SEQ_LENGTH = {L}", "TRAIN_BATCH_SIZE = 8",
                                            "LEARNING_RATE = 1e-3",
                                            "finetuning.max_train_steps = 3",
                                            # (3 steps: no warmup, all 3 at the full rate)
                                            "finetuning.warmup_proportion = 0.0"]
                      + list(bindings))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(runner, "_write_trial", keep)
            return runner.run_finetuning(data, init, str(out), num_trials=num_trials,
                                         seed=seed, log=lambda *_: None)
    finally:
        gin.clear_config()


def _squad(path, rows, start):
    """SQuAD 2.0 JSON from reviews: 'what is the first word?' (answer: the review's first
    word) and an unanswerable question about the next review."""
    data = []
    for i, r in enumerate(rows):
        first = re.match(r"\w+", r["text"]).group()
        qas = [{"id": f"q{start + i}", "question": "What is the first word?",
                "answers": [{"text": first, "answer_start": r["text"].index(first)}]},
               {"id": f"n{start + i}", "question": rows[(i + 1) % len(rows)]["text"] + "?",
                "answers": [], "is_impossible": True}]
        data.append({"title": str(i), "paragraphs": [{"context": r["text"], "qas": qas}]})
    path.write_text(json.dumps({"version": "v2.0", "data": data}), encoding="utf-8")
    return str(path)


def _words(text):
    return re.findall(r"\w+|[^\w\s]", text)


def _caps(text):
    """The words of `text` and BIO tags: each run of capitalised words a CAP chunk."""
    words = _words(text)
    tags = [("I-CAP" if i and words[i - 1][0].isupper() else "B-CAP") if w[0].isupper()
            else "O" for i, w in enumerate(words)]
    return words, tags


@pytest.fixture(scope="module")
def task_exports(tmp_path_factory):
    """Four fine-tuned models (classification over 2 trials, sentence-pair regression,
    tagging, SQuAD 2.0 QA) exported with --kind=task, and both signatures' outputs from a
    fresh process on each one's inputs."""
    from electra_tf.finetune import features, squad
    root = tmp_path_factory.mktemp("tasks")
    rows = _movies()
    models, runs, jobs = {}, {}, []
    train = root / "reviews.csv"
    with open(train, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["sentiment", "rating", "text", "other"])
        writer.writerows((r["sentiment"], r["rating"], r["text"], rows[i + 1]["text"])
                         for i, r in enumerate(rows[:32]))
    files = dict(train_file=str(train), dev_file=str(train))
    runs["classification"] = _finetune("classification", root / "classification", models,
                                       num_trials=2, seed=3, label_column="sentiment", **files)
    # STS-B (GLUE's layout, ratings -4..4 as scores 0..5): trained on score / 5, served x 5.
    head = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
            "sentence1", "sentence2", "score"]
    for name in ("train.tsv", "dev.tsv"):
        os.makedirs(root / "STS-B", exist_ok=True)
        (root / "STS-B" / name).write_text("\n".join(["\t".join(head)] + [
            "\t".join([str(i)] + ["x"] * 6 + [r["text"], rows[i + 1]["text"],
                                             f"{(float(r['rating']) + 4) * 5 / 8:.3f}"])
            for i, r in enumerate(rows[:32])]) + "\n", encoding="utf-8")
    runs["pair"] = _finetune("stsb", root / "pair", models, data_dir=str(root / "STS-B"))
    conll = root / "tags.txt"  # runs of capitalised words as BIO chunks, learnt as BIOES
    conll.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(*_caps(r["text"])))
                                   for r in rows[:32]), encoding="utf-8")
    runs["tagging"] = _finetune("tagging", root / "tagging", models, train_file=str(conll),
                                dev_file=str(conll))
    qa = _squad(root / "squad.json", rows[:16], 0)
    runs["qa"] = _finetune("squad_v2", root / "qa", models, ["finetuning.max_query_length = 12",
                                                             "finetuning.doc_stride = 16",
                                                             "finetuning.no_answer_threshold "
                                                             "= 0.5"],
                           train_file=qa, dev_file=qa)
    tok = tokenization.Tokenizer(UNCASED_VOCAB)
    texts = [rows[40]["text"], rows[41]["text"], LONG, "Ünïcödé, CJK 中文 and ligatures ﬁ.", ""]
    pairs = [(rows[42]["text"], rows[43]["text"]), (LONG, "Short."), ("Short.", LONG),
             (LONG, LONG + " again"), ("", "")]
    sentences = [_words(rows[44]["text"]), ["Mr", "\u0301", "Darcy", "smiled", "."],
                 ["Word"] * 60, ["ﬁne", "Ünïcödé", "中文"],
                 # 11 pieces that do not fit after 40 words, then words that would
                 ["Word"] * 40 + ["supercalifragilisticexpialidocious", "c", "d"]]
    questions = [("What is the first word?", rows[45]["text"]),
                 (rows[46]["text"] + "? " + LONG, rows[47]["text"]),
                 ("Who?", LONG), ("What is the first word?", "")]
    example = lambda a, b=None: readers.Example(a, b, None, "0")  # noqa: E731
    inputs = {
        "classification": ({"text": texts}, features.encode_sentences(
            tok, [example(t) for t in texts], L, runs["classification"]["labels"])[0]),
        "pair": ({"text": [a for a, _ in pairs], "text_b": [b for _, b in pairs]},
                 features.encode_sentences(tok, [example(a, b) for a, b in pairs], L, None,
                                           regression=True)[0]),
        "tagging": ({"text": [" ".join(s) for s in sentences]}, features.encode_tagging(
            tok, [readers.TaggedSentence(s, None, "0") for s in sentences], L,
            runs["tagging"]["labels"])),
        "qa": ({"text": [q for q, _ in questions], "text_b": [c for _, c in questions]},
               squad.encode(tok, [squad.QAExample(str(i), q, c, [], None, None, False)
                                  for i, (q, c) in enumerate(questions)], L, 16, 12, False)),
    }
    # tag_words: the same sentences as lists, and one with a word holding a space and one
    # that is a space (the CoNLL reader keeps U+3000, which Chinese NER files tag), which
    # `text`'s whitespace split cannot send; padded with "".
    word_rows = sentences + [["New York", "\u3000", "Emma", "said", "\u00a0"]]
    width = max(map(len, word_rows))
    extra = {"tagging": {"tag_words__words": np.array(
        [row + [""] * (width - len(row)) for row in word_rows])}}
    word_features = features.encode_tagging(
        tok, [readers.TaggedSentence(s, None, "0") for s in word_rows], L,
        runs["tagging"]["labels"])
    lines = []
    for name, (text, ids) in inputs.items():
        if name == "tagging":
            ids = ids[0]  # (features, word positions, words cut)
        if name == "qa":  # (features, windows, _): serving answers from the first window
            firsts = [[w["example"] for w in ids[1]].index(n) for n in range(len(questions))]
            ids = {k: v[firsts] for k, v in ids[0].items()}
        length = int(ids["input_mask"].sum(axis=1).max())  # as serving pads: to the longest
        ids = {k: ids[k][:, :length] for k in ("input_ids", "input_mask", "segment_ids")}
        np.savez(root / f"{name}.npz", **{f"serving_default__{k}": np.array(v)
                                          for k, v in text.items()},
                 **{f"predict_ids__{k}": v for k, v in ids.items()}, **extra.get(name, {}))
        path = saved_model.export(str(root / name), str(root / "serving"), name, "task",
                                  log=lines.append)
        jobs.append((path, str(root / f"{name}.npz"), str(root / f"{name}.out.npz")))
        inputs[name] = (text, ids, inputs[name][1])
    subprocess.run([sys.executable, "-c", TASK_LOADER, json.dumps(jobs)], check=True,
                   capture_output=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    outputs = {name: dict(np.load(out)) for name, (_, _, out) in zip(inputs, jobs)}
    return dict(root=root, runs=runs, models=models, inputs=inputs, outputs=outputs,
                lines=lines, paths={name: job[0] for name, job in zip(inputs, jobs)},
                word_rows=word_rows, word_features=word_features)


def _expected(task_exports, name, trial=0):
    """The in-memory fine-tuned model of `name`'s trial on the ids the test featurized."""
    model = task_exports["models"][str(task_exports["root"] / name / f"trial_{trial}")]
    ids = task_exports["inputs"][name][1]
    return {k: v.numpy() for k, v in model({k: tf.constant(v) for k, v in ids.items()},
                                           training=False).items()}


def test_task_classification_best_trial_labels_and_signatures_agree(task_exports):
    run, out = task_exports["runs"]["classification"], task_exports["outputs"]["classification"]
    accuracies = [t["dev"]["accuracy"] for t in run["trials"]]
    best = int(np.argmax(accuracies))  # the first of equals
    assert task_exports["lines"][0] == (
        f"classification: trial_{best} of {task_exports['root']}/"
        f"classification, the best dev accuracy ({accuracies[best]:.4f}) of 2 trial(s)")
    expected = _expected(task_exports, "classification", best)["logits"]
    other = _expected(task_exports, "classification", 1 - best)["logits"]
    assert not np.allclose(expected, other, atol=1e-3)  # the trials differ: the best one went
    np.testing.assert_allclose(out["predict_ids__logits"], expected, atol=1e-5)
    probabilities = tf.nn.softmax(expected).numpy()
    np.testing.assert_allclose(out["serving_default__probabilities"], probabilities, atol=1e-5)
    np.testing.assert_allclose(out["serving_default__probabilities"],
                               tf.nn.softmax(out["predict_ids__logits"]).numpy(), atol=1e-6)
    # The label strings of the training file, by the fine-tuning's label order.
    assert run["labels"] == ["negative", "positive"]
    np.testing.assert_array_equal(out["serving_default__label_id"],
                                  np.argmax(probabilities, axis=-1))
    assert out["serving_default__label"].tolist() == [
        run["labels"][i] for i in out["serving_default__label_id"]]
    assert out["serving_default__label_id"].dtype == np.int32


# The ops of tensorflow-text that the official TF Serving image has: its builds embed
# tensorflow-text 2.12 (tensorflow/serving PR #4057), and a SavedModel with a later op
# (e.g. TFText>RoundRobinTrim) fails to load there. RegexSplitWithOffsets (QA's basic
# tokens) is tensorflow-text's since 2.1.
SERVING_TEXT_OPS = {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "NormalizeUTF8",
                    "RegexSplitWithOffsets"}


def _graph_ops(path) -> set[str]:
    from tensorflow.core.protobuf import saved_model_pb2
    model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        model.ParseFromString(f.read())
    return {node.op for graph in model.meta_graphs
            for nodes in [graph.graph_def.node] + [f.node_def for f in
                                                   graph.graph_def.library.function]
            for node in nodes}


def test_task_exports_use_only_ops_the_tf_serving_image_has(task_exports):
    """Every op is TensorFlow's own or one of the tensorflow-text ops the official TF
    Serving image was built with."""
    for name, path in task_exports["paths"].items():
        custom = {op for op in _graph_ops(path) if not hasattr(tf.raw_ops, op)}
        assert custom <= SERVING_TEXT_OPS, (name, custom)
    assert "FastWordpieceTokenizeWithOffsets" in _graph_ops(task_exports["paths"]["pair"])
    assert "RegexSplitWithOffsets" in _graph_ops(task_exports["paths"]["qa"])


def test_a_fine_tuning_dir_where_a_pre_trained_one_belongs_is_said_so(task_exports):
    """detect_replaced.py --model_dir (and any reader of a pre-training model dir) given a
    fine-tuning output dir: one line saying what it is (was: it has no operative_config)."""
    path = task_exports["root"] / "classification"
    assert _script_error("detect_replaced.py", f"--model_dir={path}", "A sentence.") == [
        f"error: {path} is a fine-tuning output dir (a task's model), not a pre-trained one; "
        "pass the pre-training model dir it was fine-tuned from (or, to serve it, "
        "export_saved_model.py --kind=task)"]
    # A trial's checkpoint prefix too (it was "has no operative_config.gin").
    from electra_tf.training.checkpoints import load_pretrainer
    with pytest.raises(UserInputError, match=re.escape(
            f"{path / 'trial_0'} is a fine-tuning output dir (a task's model), not a "
            "pre-trained one")):
        load_pretrainer(str(path / "trial_0" / "model" / "ckpt"))
    with pytest.raises(UserInputError, match=re.escape(
            f"{path / 'trial_0'} is a fine-tuning output dir (a task's model), not a "
            "pre-trained one")):
        load_pretrainer(str(path / "trial_0" / "model"))


def test_pair_truncation_is_berts():
    """A piece at a time from the longer text (from the second on a tie), as fine-tuning's
    features.pair_lengths says, for every pair of lengths up to 12 and budgets around them."""
    from electra_tf.export.saved_model import truncate_pair
    from electra_tf.finetune.features import pair_lengths
    lengths = [(x, y) for x in range(13) for y in range(13)]
    a = tf.ragged.constant([list(range(x)) for x, _ in lengths], tf.int32, ragged_rank=1)
    b = tf.ragged.constant([list(range(50, 50 + y)) for _, y in lengths], tf.int32,
                           ragged_rank=1)
    for budget in (0, 1, 6, 7, 12, 25):
        cut_a, cut_b = truncate_pair(a, b, budget)
        for i, (x, y) in enumerate(lengths):
            first, second = list(range(x)), list(range(50, 50 + y))
            while len(first) + len(second) > budget:
                (first if len(first) > len(second) else second).pop()
            assert (cut_a[i].numpy().tolist(), cut_b[i].numpy().tolist()) == (first, second)
            assert tuple(int(v[0]) for v in pair_lengths(np.array([x]), np.array([y]),
                                                         budget)) == (len(first), len(second))


def test_task_sentence_pair_regression_truncates_as_fine_tuning(task_exports):
    out = task_exports["outputs"]["pair"]
    ids = task_exports["inputs"]["pair"][1]
    # The pairs longer than L were cut a piece at a time from the longer text.
    assert ids["input_mask"].sum(axis=1).tolist()[1:4] == [L, L, L]
    assert ids["segment_ids"].sum(axis=1).tolist()[1:4] == [3, (L - 3) - 2 + 1, (L - 3) // 2 + 1]
    expected = _expected(task_exports, "pair")["logits"]
    np.testing.assert_allclose(out["predict_ids__logits"], expected, atol=1e-5)
    # The STS-B head learnt score / 5: served as the score.
    np.testing.assert_allclose(out["serving_default__score"], 5 * expected[:, 0], atol=5e-5)
    # Said of the pairs that were cut, each of which fills all L positions.
    truncated = out["serving_default__truncated"]
    assert truncated.tolist()[:4] == [False, True, True, True]
    assert (ids["input_mask"].sum(axis=1)[truncated] == L).all()
    assert set(out) == {"serving_default__score", "serving_default__truncated",
                        "predict_ids__logits"}


MISFIT_CALLS = """
import json, sys, tensorflow as tf, tensorflow_text
errors = []
def call(signature, **args):
    try:
        signature(**{k: tf.constant(v, tf.string if k.startswith("text") else tf.int32)
                     for k, v in args.items()})
        errors.append(None)
    except tf.errors.InvalidArgumentError as e:
        errors.append(e.message)
for path in sys.argv[1:]:
    model = tf.saved_model.load(path)
    serve, ids = model.signatures["serving_default"], model.signatures["predict_ids"]
    call(serve, text=["a", "b"], text_b=["c"])
    call(serve, text=["a"], text_b=["b", "c"])
    call(serve, text=[], text_b=["a"])
    call(ids, input_ids=[[101, 7592, 2088, 102]], input_mask=[[1, 0]],
         segment_ids=[[0, 0, 0, 0]])
    call(ids, input_ids=[[101, 102]], input_mask=[[1, 1]], segment_ids=[[0, 0, 0]])
    call(ids, input_ids=[[101] * 600], input_mask=[[1] * 600], segment_ids=[[0] * 600])
    call(ids, input_ids=[[]], input_mask=[[]], segment_ids=[[]])
    for row, mask, segments in (([101, -5, 102], [1, 1, 1], [0, 0, 0]),
                                ([101, VOCAB, 102], [1, 1, 1], [0, 0, 0]),
                                ([101, 7592, 102], [1, 2, 1], [0, 0, 0]),
                                ([101, 7592, 102], [1, 1, 1], [0, 2, 0]),
                                ([101, 7592, 102], [1, 1, 0], [0, 1, 0])):
        call(ids, input_ids=[row], input_mask=[mask], segment_ids=[segments])
print(json.dumps(errors))
"""


def test_misfit_inputs_are_refused_by_name(task_exports):
    """text and text_b of different lengths (the pair trimmer read past the shorter one:
    garbage ids or an aborted process), a mask or segment ids of another shape than the ids
    (oneDNN kernels ignored a short mask) and rows longer than the positions: an
    InvalidArgumentError naming the input, the serving process unharmed. So are ids out of
    range (a negative id was served as another token's: the CPU gather wraps it round)."""
    paths = [task_exports["paths"][name] for name in ("pair", "qa")]
    vocab = len(open(UNCASED_VOCAB, encoding="utf-8").read().splitlines())
    result = subprocess.run([sys.executable, "-c",
                             MISFIT_CALLS.replace("VOCAB", str(vocab)), *paths], check=True,
                            capture_output=True, text=True,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    pairs = "text and text_b must hold as many strings (one text_b for each text)"
    expected = [pairs] * 3 + [
        "predict_ids: input_mask must have the shape of input_ids, [batch, length]",
        "predict_ids: segment_ids must have the shape of input_ids, [batch, length]",
        "predict_ids: at most 128 tokens a row (the positions of the model)",
        # (a task model's head failed on an empty row, naming no input)
        "predict_ids: at least 1 token a row ([CLS] first)"] + [
        f"predict_ids: input_ids must lie in [0, {vocab}) (ids of the vocab)"] * 2 + [
        "predict_ids: input_mask must lie in [0, 2) (1 for a token, 0 for padding)",
        "predict_ids: segment_ids must lie in [0, 2) (token types of the model)"]
    n = len(expected) + 1
    assert len(errors) == 2 * n
    for got in (errors[:n], errors[n:]):
        assert len(got) == len(expected) + 1
        for message, want in zip(got, expected):
            assert message is not None and want in message, (message, want)
        assert got[-1] is None  # in range: served


def test_task_tagging_tags_each_word_at_its_first_piece(task_exports):
    run, out = task_exports["runs"]["tagging"], task_exports["outputs"]["tagging"]
    text, ids, (_, positions, cut) = task_exports["inputs"]["tagging"]
    # Whole words that fit: 60 - 46 of the 60 "Word"s, and the last 3 of the fifth sentence.
    assert run["labels"] == ["B-CAP", "I-CAP", "O"] and cut == 60 - (L - 2) + 3
    # The model's labels are BIOES; word_tags come back in the file's BIO, chunk for chunk.
    info = json.loads((task_exports["root"] / "tagging" / "trial_0" / "task_info.json")
                      .read_text())
    assert info["labels"] == ["B-CAP", "E-CAP", "I-CAP", "O", "S-CAP"]
    assert info["tag_scheme"] == "BIO"
    expected = _expected(task_exports, "tagging")["logits"]
    mask = ids["input_mask"].astype(bool)
    np.testing.assert_array_equal(out["serving_default__input_mask"], ids["input_mask"])
    np.testing.assert_allclose(out["predict_ids__logits"][mask], expected[mask], atol=1e-5)
    np.testing.assert_allclose(out["serving_default__tag_probabilities"][mask],
                               tf.nn.softmax(expected).numpy()[mask], atol=1e-5)
    tag_ids = np.argmax(expected, axis=-1)
    np.testing.assert_array_equal(out["serving_default__tag_ids"][mask], tag_ids[mask])
    labels = np.array(info["labels"])
    np.testing.assert_array_equal(out["serving_default__tags"],
                                  np.where(mask, labels[tag_ids], ""))
    vocab = np.array(tokenization.load_vocab(UNCASED_VOCAB))
    np.testing.assert_array_equal(out["serving_default__tokens"],
                                  np.where(mask, vocab[ids["input_ids"]], ""))
    from electra_tf.finetune import metrics
    served, learnt = [], []
    for n, words in enumerate(w.split(" ") for w in text["text"]):
        starts = np.nonzero(out["serving_default__word_start"][n])[0]
        np.testing.assert_array_equal(starts, positions[n][positions[n] >= 0])
        assert out["serving_default__words"][n][:len(words)].tolist() == words
        kept = [labels[tag_ids[n, p]] for p in positions[n, :len(words)] if p >= 0]
        assert out["serving_default__word_tags"][n][:len(words)].tolist() == (
            metrics.retag(kept, "BIO") + [""] * (len(words) - len(kept)))
        served.append(out["serving_default__word_tags"][n][:len(kept)].tolist())
        learnt.append(kept)
    # The served BIO tags hold the chunks of the model's BIOES labels.
    assert all(metrics.chunks(a) == metrics.chunks(b) for a, b in zip(served, learnt))
    assert vocab[ids["input_ids"][1, 2]] == "[UNK]"  # a word that normalises away
    # Words after the first that does not fit are cut too: a prefix, as serving keeps.
    assert positions[4, 39] == 40 and positions[4, 40:43].tolist() == [-1, -1, -1]
    # `truncated`: the sentences with words that did not fit (the 60 "Word"s, the fifth).
    cut_rows = [int((positions[n] >= 0).sum()) < len(w.split(" "))
                for n, w in enumerate(text["text"])]
    assert cut_rows[2] and cut_rows[4] and sum(cut_rows) == 2
    assert out["serving_default__truncated"].tolist() == cut_rows


def test_task_tagging_takes_words_as_lists_as_the_training_file_had_them(task_exports):
    """tag_words: each text's words as a list (a word may hold or be a space, which `text`
    cannot send: a U+3000 word, kept and tagged by fine-tuning, vanished and every later
    tag moved a word) gives what serving_default gives for the same words, and what
    fine-tuning's features give for each."""
    out, rows = task_exports["outputs"]["tagging"], task_exports["word_rows"]
    (ids, positions, cut), n = task_exports["word_features"], len(rows) - 1
    served = {k.split("__")[1]: v for k, v in out.items() if k.startswith("tag_words__")}
    assert set(served) == {k.split("__")[1] for k in out if k.startswith("serving_default__")}
    for key, value in served.items():  # the rows both take, to serving_default's width
        text = out[f"serving_default__{key}"]
        value = value[(slice(n),) + tuple(slice(d) for d in text.shape[1:])]
        if text.dtype.kind == "f":
            np.testing.assert_allclose(value, text, atol=1e-6, err_msg=key)
        else:
            np.testing.assert_array_equal(value, text, err_msg=key)
    assert served["words"][n].tolist()[:5] == rows[n] and not served["truncated"][n]
    length = int(ids["input_mask"][n].sum())
    vocab = np.array(tokenization.load_vocab(UNCASED_VOCAB))
    assert served["tokens"][n][:length].tolist() == vocab[ids["input_ids"][n, :length]].tolist()
    assert np.nonzero(served["word_start"][n])[0].tolist() == positions[n][:5].tolist()
    assert vocab[ids["input_ids"][n]][positions[n][:5]].tolist() == [
        "new", "[UNK]", "emma", "said", "[UNK]"]
    assert all(served["word_tags"][n][:5]) and cut == task_exports["inputs"]["tagging"][2][2]
    # One list of words, not a list of lists: refused naming the input.
    loaded = tf.saved_model.load(task_exports["paths"]["tagging"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="words must be a list of lists"):
        loaded.signatures["tag_words"](words=tf.constant(["a", "b"]))
    # "" before a word (it would be dropped, moving the later tags a word): refused.
    with pytest.raises(tf.errors.InvalidArgumentError, match="words: an empty string before"):
        loaded.signatures["tag_words"](words=tf.constant([["a", "b", ""], ["a", "", "b"]]))
    served = loaded.signatures["tag_words"](words=tf.constant([["a", "b", ""], ["", "", ""]]))
    assert served["words"].numpy().tolist() == [[b"a", b"b"], [b"", b""]]
    # Bytes that are not UTF-8 (gRPC and REST's b64 send any) come back each as U+FFFD: TF
    # Serving's REST reply copies a string output as it is, and they made its JSON invalid.
    # The words are tagged as before.
    for name, given in (("tag_words", {"words": tf.constant([[b"caf\xe9", b"\xffbad", b"x"]])}),
                        ("serving_default", {"text": tf.constant([b"caf\xe9 \xffbad x"])})):
        served = loaded.signatures[name](**given)
        assert served["words"].numpy()[0].tolist() == [
            "caf\ufffd".encode(), "\ufffdbad".encode(), b"x"], name
        assert all(served["word_tags"].numpy()[0]), name  # each word tagged


def test_served_tags_are_re_encoded_as_fine_tuning_writes_them():
    """retag_bioes (in the graph) = metrics.retag (fine-tuning's files and scores) on
    random BIOES label sequences, ill-formed ones included, with "" past each row's words."""
    from electra_tf.finetune import metrics
    rng = np.random.default_rng(0)
    tagset = ["O", "B-A", "I-A", "E-A", "S-A", "B-BB", "I-BB", "E-BB", "S-BB"]
    rows = [[tagset[i] for i in rng.integers(0, len(tagset), rng.integers(1, 9))]
            for _ in range(2000)]
    padded = np.array([r + [""] * (8 - len(r)) for r in rows])
    for scheme in metrics.TAG_SCHEMES:
        got = saved_model.retag_bioes(tf.constant(padded), scheme).numpy().astype(str)
        expected = [metrics.retag(r, scheme) + [""] * (8 - len(r)) for r in rows]
        assert got.tolist() == expected, scheme
    assert sum(metrics.retag(r, "BIO") != [t.replace("S-", "B-").replace("E-", "I-")
                                           for t in r] for r in rows) > 100  # not renames
    # And in a file's own spelling (BILOU with '_', IOE): respell in the graph = metrics'.
    for spelling in ({"separator": "_", "end": "L", "single": "U", "begins": True},
                     {"separator": "-", "end": "E", "single": "S", "begins": False}):
        retagged = saved_model.retag_bioes(tf.constant(padded), "BIOES")
        got = saved_model.respell(retagged, spelling).numpy().astype(str)
        expected = [metrics.respell(metrics.retag(r, "BIOES"), spelling) + [""] * (8 - len(r))
                    for r in rows]
        assert got.tolist() == expected, spelling


def test_the_detector_refuses_a_task_export_in_one_line(task_exports):
    """A fine-tuned pair model's signature takes text and text_b: not a discriminator."""
    path = task_exports["paths"]["pair"]
    assert _script_error("detect_replaced.py", f"--saved_model={path}", "a sentence") == [
        f"error: --saved_model={path} is not a discriminator; export one with "
        "export_saved_model.py --kind=discriminator of a model pre-trained with objective "
        "electra, electra_15 or electric (the others train no replaced-token head)"]


def test_task_qa_question_context_answer_and_answerability(task_exports):
    """SQuAD 2.0 with ELECTRA's head, contexts over several windows (doc_stride 16):
    predict_ids gives the in-memory model's outputs; serving_default answers each question
    as fine-tuning's decoding does over all its windows (squad.decode on the in-memory
    model's outputs: the best beam span of the window giving its start the most context,
    quoted from the context: its pieces' own characters), with the no-answer probability of
    its most answerable window and "" above the run's threshold, and returns the answer's
    window and its characters in the context."""
    from electra_tf.finetune import squad
    out = task_exports["outputs"]["qa"]
    tok = tokenization.Tokenizer(UNCASED_VOCAB)
    text, ids, (features, windows, _) = task_exports["inputs"]["qa"]
    expected = _expected(task_exports, "qa")
    threshold = task_exports["runs"]["qa"]["hyperparameters"]["no_answer_threshold"]
    assert threshold == 0.5  # bound (the default, ELECTRA's 0.06, blanks this brief run's all)
    mask = ids["input_mask"].astype(bool)
    assert ids["segment_ids"][1].tolist().index(1) == 12 + 2  # the question cut to 12 pieces
    # `truncated`: the questions of more than max_query_length (12) pieces.
    asked = [len(p) for p in tok.encode(list(text["text"]))]
    assert asked[1] > 12 and min(asked) <= 12
    assert out["serving_default__truncated"].tolist() == [n > 12 for n in asked]
    np.testing.assert_allclose(out["predict_ids__start_logits"][mask],
                               expected["start_logits"][mask], atol=1e-4)
    for key in ("start_top_log_probs", "end_top_log_probs"):  # in order (indices may swap
        np.testing.assert_allclose(out[f"predict_ids__{key}"], expected[key], atol=1e-4)
    assert (out["predict_ids__start_top_index"] == expected["start_top_index"]).mean() > 0.95
    np.testing.assert_allclose(out["predict_ids__answerable_logits"],
                               expected["answerable_logits"], atol=1e-5)
    assert "predict_ids__end_logits" not in out
    # Every window, as fine-tuning featurized and decoded them.
    model = task_exports["models"][str(task_exports["root"] / "qa" / "trial_0")]
    every = {k: v.numpy() for k, v in model(
        {k: tf.constant(features[k]) for k in ("input_ids", "input_mask", "segment_ids")},
        training=False).items()}
    examples = [squad.QAExample(str(i), q, c, [], None, None, False)
                for i, (q, c) in enumerate(zip(text["text"], text["text_b"]))]
    answers, no_answer = squad.decode(examples, windows, every, tok, max_answer_length=30)
    counts = np.bincount([w["example"] for w in windows])
    assert counts.tolist()[2] >= 3  # the long context: several windows
    np.testing.assert_allclose(out["serving_default__answerable_probability"],
                               [1 - no_answer[e.qid] for e in examples], atol=1e-5)
    firsts = np.cumsum(counts) - counts
    for n, example in enumerate(examples):
        window = firsts[n] + out["serving_default__window"][n]
        real = features["input_mask"][window].astype(bool)
        served = out["serving_default__input_mask"][n].astype(bool)
        assert served.sum() == real.sum()
        np.testing.assert_allclose(out["serving_default__start_logits"][n][served],
                                   every["start_logits"][window][real], atol=1e-4)
        answer = answers[example.qid] if no_answer[example.qid] <= threshold else ""
        assert out["serving_default__answer"][n] == answer, n
        char_start, char_end = (out["serving_default__answer_char_start"][n],
                                out["serving_default__answer_char_end"][n])
        if not answer:
            assert (char_start, char_end) == (-1, -1), n
        else:  # answer_start/end: the answer's pieces that the window served holds
            assert example.context[char_start:char_end] == answer
            first, last = out["serving_default__answer_start"][n], out[
                "serving_default__answer_end"][n]
            held = features["input_ids"][window][first:last + 1].tolist()
            # (by their text: an answer from inside a word starts with a "##" piece)
            assert held and _piece_text(tok, held) in _piece_text(tok, tok.encode([answer])[0])
    assert out["serving_default__answer"][3] == ""  # no context: no answer
    # Both ways: a question answered and one blanked by the threshold.
    assert any(out["serving_default__answer"][:3] != "")
    assert any(no_answer[e.qid] > threshold and answers[e.qid] for e in examples)


def _piece_text(tok, ids):
    return "".join(t[2:] if t.startswith("##") else t for t in tok.convert_ids_to_tokens(ids))


def _one_window_questions(rng, rows, length, first, pieces):
    """`rows` questions over one context of `pieces` one-piece words w00.. at positions
    first.. of a `length`-position window, each window giving a random 80% of its pieces
    the most context: (examples, windows, contexts for squad.decode, the serving masks
    can_start and in_context [rows, length], and decoded(answers) -> spans by position)."""
    from electra_tf.finetune import squad
    words = [f"w{k:02d}" for k in range(pieces)]
    contexts = {" ".join(words): squad._Context(
        [(4 * k, 4 * k + 3) for k in range(pieces)], list(range(pieces)), list(range(pieces)),
        list(range(pieces)))}
    examples = [squad.QAExample(str(n), "q", " ".join(words), [], None, None, False)
                for n in range(rows)]
    max_context = rng.random((rows, pieces)) < 0.8
    windows = [{"example": n, "first": first, "length": pieces, "start": 0,
                "max_context": max_context[n].tolist()} for n in range(rows)]
    positions = np.arange(length)
    in_context = np.tile((positions >= first) & (positions < first + pieces), (rows, 1))
    can_start = in_context.copy()
    can_start[:, first:first + pieces] &= max_context

    def decoded(answers):
        return [(first + words.index(a.split()[0]), first + words.index(a.split()[-1]))
                if a else (-1, -1) for a in (answers[str(n)] for n in range(rows))]

    return examples, windows, contexts, can_start, in_context, decoded


@pytest.mark.parametrize("doc_stride", [4, 64])
def test_task_qa_serving_is_decode_over_windows_of_long_contexts(task_exports, doc_stride):
    """Random contexts of words of several pieces over many windows, overlapping (stride 4)
    or not (64: each window's first piece is its own most-context start): serving answers
    what squad.decode answers on every window of the same model, a span's pieces where
    a word straddles two windows, in the context's characters: capitals, accents,
    characters the vocab lacks and Chinese as written."""
    from electra_tf.finetune import squad
    trial = str(task_exports["root"] / "qa" / "trial_0")
    info = json.loads(open(os.path.join(trial, "task_info.json")).read())
    info.update(doc_stride=doc_stride, no_answer_threshold=1.0)  # never blank: spans only
    model = task_exports["models"][trial]
    module = saved_model.TaskServingModule(model, info, UNCASED_VOCAB)
    tok = tokenization.Tokenizer(UNCASED_VOCAB)
    rng = np.random.default_rng(doc_stride)
    vocabulary = ["xylophone", "hypothetically", "unremarkable", "cat", "dog", "sat", "the",
                  "Château", "Darcy's", "☃", "naïve", "Œuvre"]  # ☃: [UNK]
    chinese = ["北京", "中国人", "日本", "山水", "。"]  # written without spaces, as Chinese is
    contexts = [re.sub(r" ?([\u3000-\u303f\u4e00-\u9fff]+) ?", r"\1", " ".join(
        rng.choice(vocabulary + chinese, rng.integers(0, 80)))) for _ in range(24)]
    questions = ["what sat?"] * 24
    out = module.serving_default(text=tf.constant(questions), text_b=tf.constant(contexts))
    examples = [squad.QAExample(str(n), q, c, [], None, None, False)
                for n, (q, c) in enumerate(zip(questions, contexts))]
    features, windows, _ = squad.encode(tok, examples, L, doc_stride, 12, False)
    assert len(windows) > 2 * len(examples)
    predicted = {k: v.numpy() for k, v in model(
        {k: tf.constant(features[k]) for k in ("input_ids", "input_mask", "segment_ids")},
        training=False).items()}
    answers, _ = squad.decode(examples, windows, predicted, tok, max_answer_length=30)
    expected = [answers[e.qid] for e in examples]
    assert [a.decode() for a in out["answer"].numpy()] == expected
    starts, ends = out["answer_char_start"].numpy(), out["answer_char_end"].numpy()
    assert [c[a:b] if b >= 0 else "" for c, a, b in zip(contexts, starts, ends)] == expected
    bounds = [{x for span in squad.basic_tokens(c) for x in span} for c in contexts]
    # Spans that begin or end inside a word: "Œu" of "Œuvre", not the whole word.
    assert sum(b >= 0 and not {a, b} <= t for a, b, t in zip(starts, ends, bounds)) >= 5
    assert sum(a.startswith(w) for a in expected for w in vocabulary[:3]) >= 3
    assert sum(w in a for a in expected for w in chinese[:4]) >= 3  # "北京", not "北 京"
    assert sum(w in a for a in expected for w in vocabulary[7:]) >= 3  # not "chateau", "[UNK]"


class _ScoredPieces:
    """A stand-in for a fine-tuned QA model with BERT's head: each vocab id has a fixed
    start and end logit, so spans fall on the pieces a test scores highest, alike in
    serving and in squad.decode."""

    def __init__(self, start, end):
        self.start, self.end = tf.constant(start, tf.float32), tf.constant(end, tf.float32)

    def __call__(self, inputs, training=False):
        ids = tf.convert_to_tensor(inputs["input_ids"])
        return {"start_logits": tf.gather(self.start, ids),
                "end_logits": tf.gather(self.end, ids)}


def test_task_qa_serving_quotes_the_spans_pieces_as_decode_does(tmp_path):
    """Serving answers with the context's characters from the first of the span's first
    piece to the last of its last, the answer and its character offsets those of
    squad.decode, on contexts of words of several pieces over several windows in three
    vocabs: "195" of "195g" (the piece "195" scored highest), accents stripped or
    decomposed, "İ", a zero-width space, NUL (BERT deletes it; the split stopped at it),
    full-width letters, emoji, and the whole word
    where the pieces do not map exactly ([UNK]; a cased vocab's NFC of "e" + U+0301);
    answer_start and answer_end are the span's pieces in the window served."""
    from electra_tf.finetune import squad
    weighs = {"这款手机重195g，很轻。": "195", "It weighs 195g.": "195"}
    cases = [  # vocab, lower_case, the words of random contexts and their separator, the
        # piece scored highest, and contexts that hold it with their answers
        (UNCASED_VOCAB, True, ["5kg", "10km", "unremarkable", "Éclair", "e\u0301clair",
                               "İzmir", "Œuvre", "ab\u200bcd", "a😀b", "x\x00yz", "xylophone",
                               "the", ","], " ", "195", weighs),
        (CHINESE_VOCAB, True, ["Ｈｅｌｌｏ", "ＡＢＣ123", "ok😂", "😀", "手机", "很轻", "，"], "",
         "195", weighs),
        (cased_vocab(tmp_path / "cased.txt", ["é", "##é"]), False,
         ["unremarkable", "xylophone", "10km", "the"], " ", "##é",
         {"Two cafés.": "é", "Two cafe\u0301s.": "cafe\u0301s"})]  # NFC: not exact
    rng = np.random.default_rng(0)
    for vocab, lower_case, pool, separator, piece, fixed in cases:
        tok = tokenization.Tokenizer(vocab, lower_case)
        start, end = rng.normal(size=(2, tok.vocab_size))
        start[tok.vocab.index(piece)] = end[tok.vocab.index(piece)] = 10.0
        model = _ScoredPieces(start, end)
        info = dict(kind="qa", max_seq_length=L, text_pair=True, lower_case=lower_case,
                    strip_accents=lower_case, max_query_length=12, doc_stride=16,
                    no_answer_threshold=1.0)
        module = saved_model.TaskServingModule(model, info, vocab)
        contexts = [separator.join(rng.choice(pool, rng.integers(1, 50))) for _ in range(24)]
        contexts += [""] + list(fixed)
        questions = ["how heavy?"] * len(contexts)
        out = {k: v.numpy() for k, v in module.serving_default(
            text=tf.constant(questions), text_b=tf.constant(contexts)).items()}
        examples = [squad.QAExample(str(n), q, c, [], None, None, False)
                    for n, (q, c) in enumerate(zip(questions, contexts))]
        features, windows, _ = squad.encode(tok, examples, L, 16, 12, False)
        assert len(windows) > len(examples) + 20  # words straddle windows' edges
        answers, _ = squad.decode(examples, windows, {k: v.numpy() for k, v in model(
            features).items()}, tok, max_answer_length=30)
        expected = [answers[e.qid] for e in examples]
        assert [a.decode() for a in out["answer"]] == expected, vocab
        if piece == "195":  # bytes that are not UTF-8 are one U+FFFD character each
            bad = {k: v.numpy() for k, v in module.serving_default(
                text=tf.constant(["how heavy?"]),
                text_b=tf.constant([b"\xe9\xff It weighs 195g \xc3."])).items()}
            read = "\ufffd\ufffd It weighs 195g \ufffd."
            assert (bad["answer"][0].decode(), bad["answer_char_start"][0],
                    bad["answer_char_end"][0]) == ("195", read.index("195"), read.index("195") + 3)
        starts, ends = out["answer_char_start"], out["answer_char_end"]
        assert [c[a:b] if b >= 0 else "" for c, a, b in zip(contexts, starts, ends)] == expected
        assert expected[24:] == [""] + list(fixed.values())
        # Parts of words: spans that begin or end inside a basic token.
        bounds = [{x for span in squad.basic_tokens(c) for x in span} for c in contexts]
        assert sum(b >= 0 and not {a, b} <= t for a, b, t in zip(starts, ends, bounds)) >= 5
        for n, answer in enumerate(expected):
            first, last = out["answer_start"][n], out["answer_end"][n]
            assert (first >= 0) == (answer != ""), n
            if n > 24:  # the span's piece, or the pieces of the word answered whole
                held = ([t.encode() for t in tok.convert_ids_to_tokens(tok.encode([answer])[0])]
                        if answer == "cafe\u0301s" else [piece.encode()])
                assert out["tokens"][n][first:last + 1].tolist() == held, n


def test_inputs_of_another_rank_are_refused_naming_the_input(task_exports):
    """A bare string for a list of one (REST's {"inputs": {"text": "hi"}}), a list of lists,
    or ids without their batch dimension: an error naming the input and its shape (they
    failed deep inside, each with another message: "Invalid reduction dimension", "input
    must be a vector", "slice index 1 of dimension 0 out of bounds")."""
    text_error = (r"text must be a list of strings, \[batch\]: one text is a list of one \(in "
                  r"the REST API of TF Serving, instances: \[...\] or inputs: \{text: \[...\]\}\)")
    for name in ("classification", "tagging", "qa", "pair"):
        served = tf.saved_model.load(task_exports["paths"][name])
        default = served.signatures["serving_default"]
        pair = name in ("qa", "pair")
        for bad in (tf.constant("Emma smiled."), tf.constant([["Emma smiled."]])):
            args = {"text": bad, **({"text_b": tf.constant(["Emma."])} if pair else {})}
            with pytest.raises(tf.errors.InvalidArgumentError, match=text_error):
                default(**args)
        if pair:
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"text_b must be a list"):
                default(text=tf.constant(["Who?"]), text_b=tf.constant("Emma."))
        ids = tf.constant([101, 102], tf.int32)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"predict_ids: input_ids must be \[batch, length\]: a batch of "
                                 r"one is \[\[...\]\]"):
            served.signatures["predict_ids"](input_ids=ids, input_mask=tf.ones_like(ids),
                                             segment_ids=tf.zeros_like(ids))
        out = default(text=tf.constant(["Who?"] * 2), **(
            {"text_b": tf.constant(["Emma."] * 2)} if pair else {}))
        assert {v.shape[0] for v in out.values()} == {2}


def test_qa_span_choice_is_fine_tunings_decode():
    """The export's span rule (best_spans) and squad.decode pick the same span on random
    logits: starts and ends among the n_best_size highest of the real positions (padding,
    here with the highest logits of all, is not ranked), inside the context, at most
    max_answer_length pieces."""
    from electra_tf.finetune import squad
    rng = np.random.default_rng(0)
    rows, length, first, pieces, n_best, longest = 200, 40, 6, 28, 5, 8
    start, end = rng.normal(size=(2, rows, length)).astype(np.float32)
    start[:, first + pieces + 1:] = end[:, first + pieces + 1:] = 50.0  # padding
    # Starts only where the window gives the piece the most context (ends anywhere).
    examples, windows, contexts, can_start, in_context, decoded = _one_window_questions(
        rng, rows, length, first, pieces)
    answers, _ = squad.decode(examples, windows, {"start_logits": start, "end_logits": end},
                              n_best_size=n_best, max_answer_length=longest,
                              contexts=contexts)
    real = tf.constant(np.tile(np.arange(length) < first + pieces + 1, (rows, 1)))
    got_first, got_last, found, _ = saved_model.best_spans(
        tf.constant(start), tf.constant(end), tf.constant(can_start), tf.constant(in_context),
        real, n_best, longest)
    assert list(zip(got_first.numpy().tolist(), got_last.numpy().tolist())) == decoded(answers)
    assert found.numpy().tolist() == [a != "" for a in answers.values()]
    assert sum(a == "" for a in answers.values()) > 5  # n_best leaves some rows no span
    # Unranked, the best pair is elsewhere in many rows: the rule is what is tested.
    unranked, _, _, _ = saved_model.best_spans(
        tf.constant(start), tf.constant(end), tf.constant(can_start), tf.constant(in_context),
        real, length, longest)
    assert np.mean(unranked.numpy() != got_first.numpy()) > 0.1


def test_qa_beam_span_choice_is_fine_tunings_decode():
    """The export's rule for ELECTRA's beam (best_beam_spans) and squad.decode pick the
    same span on random beams: every start of the beam with each of its ends, inside the
    context (not the question, [CLS], or a slot past the sequence), end >= start, at most
    max_answer_length pieces, the highest start + end log-probability."""
    from electra_tf.finetune import squad
    rng = np.random.default_rng(1)
    rows, length, first, pieces, k, longest = 300, 40, 6, 28, 3, 8
    start_index = rng.integers(0, length + 3, (rows, k)).astype(np.int32)  # some past L
    end_index = np.clip(start_index[:, :, None] + rng.integers(-3, 12, (rows, k, k)),
                        0, length + 2).astype(np.int32)
    start_lp = -rng.exponential(size=(rows, k)).astype(np.float32)
    end_lp = -rng.exponential(size=(rows, k, k)).astype(np.float32)
    examples, windows, contexts, can_start, in_context, decoded = _one_window_questions(
        rng, rows, length, first, pieces)
    beam = {"start_logits": np.zeros((rows, length), np.float32),
            "start_top_index": start_index, "start_top_log_probs": start_lp,
            "end_top_index": end_index, "end_top_log_probs": end_lp}
    answers, _ = squad.decode(examples, windows, beam, max_answer_length=longest,
                              contexts=contexts)
    got_first, got_last, found, _ = saved_model.best_beam_spans(
        tf.constant(start_index), tf.constant(start_lp), tf.constant(end_index),
        tf.constant(end_lp), tf.constant(can_start), tf.constant(in_context), longest)
    assert list(zip(got_first.numpy().tolist(), got_last.numpy().tolist())) == decoded(answers)
    assert found.numpy().tolist() == [a != "" for a in answers.values()]
    assert 3 < sum(a == "" for a in answers.values()) < rows - 100  # rows with none
    # The best score overall is often not allowed: the rule is what is tested.
    overall = np.argmax((start_lp[:, :, None] + end_lp).reshape(rows, -1), axis=1)
    best_start = np.take_along_axis(np.repeat(start_index, k, 1), overall[:, None], 1)[:, 0]
    assert np.mean(best_start != got_first.numpy()) > 0.3


def _berts_basic_tokens(text):
    """BERT's basic tokenizer's split, by Python's unicodedata (the reference)."""
    spans, start = [], None
    for i, ch in enumerate(text):
        if tokenization.is_whitespace(ch):
            if start is not None:
                spans.append((start, i))
                start = None
        elif tokenization.is_punctuation(ch) or tokenization.is_cjk(ord(ch)):
            if start is not None:
                spans.append((start, i))
                start = None
            spans.append((i, i + 1))
        elif start is None:
            start = i
    if start is not None:
        spans.append((start, len(text)))
    return spans


def test_qa_basic_tokens_are_berts_and_whitespace_is_berts():
    """Fine-tuning's QA contexts and the export's graph split by one pattern
    (tokenization.basic_token_spans): BERT's basic tokens (words at BERT's whitespace,
    each punctuation mark and CJK ideograph a token), on random text of every kind of
    character, but for code points Python 3.11's Unicode 14 does not know, which RE2 (the
    graph's) classes as Unicode 15 does; characters Python calls space but BERT deletes
    (\\f, \\x1f, \\x85) join their neighbours in both fine-tuning's and serving's
    tokens, Z* separate them."""
    import unicodedata
    from electra_tf.finetune import squad
    rng = np.random.default_rng(0)
    pool = list("aZé ,.$^_`~\t\n\r\x0b\x0c\x1f\x85\u00a0\u2028\u3000\u200b\u0301"
                "¿«»—。，「」北京ひらカナ한☃😀\U00020001\ufffd\x00")
    # (by index: a NumPy array of the characters would drop NUL, its strings' padding)
    texts = ["".join(pool[i] for i in rng.integers(0, len(pool), rng.integers(0, 30)))
             for _ in range(300)]
    assert sum("\x00" in t for t in texts) > 20
    texts += ["Mr. Darcy's 1998年 naïve\tœuvre!", "", "First part\x00 second part here."]
    assert tokenization.basic_token_spans(texts) == [_berts_basic_tokens(t) for t in texts]
    assert squad.basic_tokens(texts[-3]) == _berts_basic_tokens(texts[-3])
    kawi = "Kawi\U00011F43x"  # a Kawi punctuation mark (Unicode 15.0)
    assert unicodedata.category(kawi[4]) == "Cn" and _berts_basic_tokens(kawi) == [(0, 6)]
    assert squad.basic_tokens(kawi) == [(0, 4), (4, 5), (5, 6)]
    tok = tokenization.Tokenizer(UNCASED_VOCAB)
    for text in ("the cat\x0cdog sat", "the cat\x1fdog sat", "the cat\x85dog sat",
                 "the cat\u2028dog sat", "the cat\u00a0dog sat", "the cat\u3000dog\tsat"):
        spans = squad.basic_tokens(text)
        pieces = [p for ids in tok.encode([text[a:b] for a, b in spans]) for p in ids]
        assert pieces == tok.encode([text])[0], repr(text)
        assert len(spans) == (4 if text[7] in "\u2028\u00a0\u3000" else 3), repr(text)


def test_tagging_words_split_as_python_splits():
    texts = ["New\u00a0York is\u3000big", "a\x0bb\x0cc\x1cd\x85e\u2028f\u2029g  h\t",
             "".join(chr(c) for c in range(0x2000, 0x200b)).join("xy"), "", " \u205f "]
    words = tf.strings.split(tf.strings.regex_replace(texts, saved_model._PY_WHITESPACE, " "))
    assert [[w.decode() for w in row] for row in words.to_list()] == [t.split() for t in texts]
    spaces = [chr(c) for c in range(0x3001) if chr(c).isspace()]
    assert tf.strings.split(tf.strings.regex_replace(
        "a" + "a".join(spaces) + "a", saved_model._PY_WHITESPACE, " ")).shape == len(spaces) + 1


def test_task_serving_empty_batches_and_a_question_longer_than_the_window(task_exports):
    """An empty batch gives empty outputs (its [CLS] column was missing); a question of more
    pieces than max_seq_length - 4 leaves the context a piece per window, as squad.encode
    refuses to leave none."""
    root = task_exports["root"]
    for name in ("classification", "qa", "tagging", "pair"):
        trial = str(root / name / "trial_0")
        info = json.loads(open(os.path.join(trial, "task_info.json")).read())
        if name == "qa":
            info["max_query_length"] = 100  # fine-tuning accepts it when questions are short
        module = saved_model.TaskServingModule(task_exports["models"][trial], info,
                                               UNCASED_VOCAB)
        inputs = {"text": tf.constant([], tf.string)}
        if name in ("qa", "pair"):
            inputs["text_b"] = tf.constant([], tf.string)
        out = module.serving_default(**inputs)
        assert all(v.shape[0] == 0 for v in out.values()), name
        if name == "qa":
            question = " ".join(["remarkably"] * 60)
            out = module.serving_default(text=tf.constant([question]),
                                         text_b=tf.constant(["the cat sat on the mat"]))
            words = "the cat sat on the mat".split()
            window = int(out["window"].numpy()[0])  # one piece each: the word served
            assert out["tokens"].numpy()[0].tolist()[L - 2:] == [words[window].encode(),
                                                                 b"[SEP]"]
            assert out["answer_start"].numpy()[0] in (-1, L - 2)
            assert out["truncated"].numpy().tolist() == [True]  # cut to L - 4 pieces


def test_task_export_listing_warmup_config_and_trial_choice(task_exports):
    path = task_exports["paths"]["qa"]
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    listing = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True,
                             text=True, check=True).stdout
    for expected in ("inputs['text'] tensor_info:\n        dtype: DT_STRING",
                     "inputs['text_b'] tensor_info:\n        dtype: DT_STRING",
                     "inputs['segment_ids'] tensor_info:\n        dtype: DT_INT32",
                     "outputs['answer'] tensor_info:\n        dtype: DT_STRING",
                     "outputs['answer_start'] tensor_info:\n        dtype: DT_INT32",
                     "outputs['answerable_probability'] tensor_info:\n        dtype: DT_FLOAT",
                     "outputs['answerable_logits'] tensor_info:\n        dtype: DT_FLOAT",
                     "outputs['start_logits'] tensor_info:\n        dtype: DT_FLOAT"):
        assert expected in listing, expected
    from tensorflow_serving.apis import prediction_log_pb2
    for name, inputs in (("qa", {"text", "text_b"}), ("tagging", {"text"})):
        records = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in
                   tf.data.TFRecordDataset(os.path.join(task_exports["paths"][name],
                                                        "assets.extra", saved_model.WARMUP_FILE))]
        assert [set(r.predict_log.request.inputs) for r in records] == [inputs, inputs]
        assert [len(r.predict_log.request.inputs["text"].string_val) for r in records] == [1, 2]
        assert {r.predict_log.request.model_spec.name for r in records} == {name}
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2
    config = text_format.Parse((task_exports["root"] / "serving" / "models.config").read_text(),
                               model_server_config_pb2.ModelServerConfig())
    assert [c.name for c in config.model_config_list.config] == [
        "classification", "pair", "tagging", "qa"]
    # --trial=K, and a trial dir itself, export that trial.
    source = str(task_exports["root"] / "classification")
    for model_dir, trial in ((source, "1"), (os.path.join(source, "trial_1"), None)):
        loaded = saved_model.load_finetuned(model_dir, trial)
        assert loaded.trial_dir == os.path.join(source, "trial_1")
        assert loaded.info["labels"] == ["negative", "positive"]


def test_best_trial_skips_undefined_dev_scores(task_exports, tmp_path):
    # results.json writes an undefined score (a constant series' Pearson) as null.
    source = tmp_path / "classification"
    shutil.copytree(task_exports["root"] / "classification", source)
    results = json.loads((source / "results.json").read_text())
    metric = results["metric"]
    results["trials"][0]["dev"][metric] = None
    (source / "results.json").write_text(json.dumps(results))
    loaded = saved_model.load_finetuned(str(source))
    assert loaded.trial_dir == str(source / "trial_1")
    assert loaded.note.startswith(f"trial_1 of {source}, the best dev {metric} (")
    results["trials"][1]["dev"][metric] = None
    (source / "results.json").write_text(json.dumps(results))
    loaded = saved_model.load_finetuned(str(source))
    assert loaded.trial_dir == str(source / "trial_0")
    assert loaded.note == (f"trial_0 of {source}: no trial has a defined dev {metric} (pass "
                           "--trial=K to choose another)")


def test_bad_task_exports_fail_with_one_clear_line(task_exports, model_dir, tmp_path):
    source = str(task_exports["root"] / "classification")
    with pytest.raises(UserInputError, match="is a pre-training model dir; --kind=task exports"):
        saved_model.export(model_dir, str(tmp_path), "x", "task")
    with pytest.raises(UserInputError, match=r"has no results.json or task_info.json; "
                                             "--kind=task takes a run_finetuning.py"):
        saved_model.export(str(tmp_path), str(tmp_path), "x", "task")
    with pytest.raises(UserInputError, match=r"nope does not exist or is not a folder; "
                                             "--kind=task takes a run_finetuning.py"):
        saved_model.export(str(tmp_path / "nope"), str(tmp_path), "x", "task")
    # An empty path (an unset shell variable) is refused as a missing one, not taken as the
    # current directory.
    result = run_script("export_saved_model.py", "--export_dir=", f"--model_dir={source}",
                        "--kind=task", cwd=str(tmp_path))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: --export_dir is empty (is a shell variable in it unset?); pass it a value"]
    assert os.listdir(tmp_path) == []
    with pytest.raises(UserInputError, match=r"--trial=2 is not a trial of .* \(it has "
                                             "trial_0 to trial_1\\)"):
        saved_model.export(source, str(tmp_path), "x", "task", trial="2")
    with pytest.raises(UserInputError, match="--trial=last is neither 'best' nor a trial"):
        saved_model.export(source, str(tmp_path), "x", "task", trial="last")
    with pytest.raises(UserInputError, match="is a single trial's dir; --trial picks"):
        saved_model.export(os.path.join(source, "trial_0"), str(tmp_path), "x", "task",
                           trial="1")
    with pytest.raises(UserInputError, match="--trial picks a fine-tuned model; it does not "
                                             "apply to --kind=encoder"):
        saved_model.export(model_dir, str(tmp_path), "x", "encoder", trial="1")
    unsaved = tmp_path / "unsaved"
    shutil.copytree(os.path.join(source, "trial_0"), unsaved, ignore=shutil.ignore_patterns(
        "model"))
    with pytest.raises(UserInputError, match="holds no fine-tuned weights .*save_model = True"):
        saved_model.export(str(unsaved), str(tmp_path), "x", "task")
    assert sorted(os.listdir(tmp_path)) == ["unsaved"]  # nothing half-written
    assert _script_error("export_saved_model.py", f"--model_dir={source}",
                         f"--export_dir={tmp_path}/x", "--kind=discriminator") == [
        f"error: {source} is a fine-tuning output dir; export its model with --kind=task "
        "(--kind=discriminator takes a pre-training model dir)"]
    assert not os.path.exists(tmp_path / "x")
