"""SavedModel export: each kind loaded in a fresh Python process, both signatures called and
compared with each other and with the in-memory model; saved_model_cli's listing; the
warmup records; models.config; the detector CLI; bad input."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, pretrain
from electra_tf.errors import UserInputError
from electra_tf.export import saved_model
from electra_tf.training.checkpoints import load_pretrainer

TEXTS = ["The quick red fox runs over the lazy dog.",
         "She was [MASK] happy to see him, and [MASK] said so.",
         "Ünïcödé, CJK 中文 and ligatures ﬁ survive."]
# Run in a fresh interpreter: load the SavedModel as TF Serving's Python clients do, call
# both signatures, save every output.
LOADER = """
import sys, numpy as np, tensorflow as tf, tensorflow_text
path, ids_file, out_file = sys.argv[1:4]
model = tf.saved_model.load(path)
ids = np.load(ids_file)
text = model.signatures["serving_default"](text=tf.constant(%r))
by_ids = model.signatures["predict_ids"](**{k: tf.constant(ids[k]) for k in ids.files})
plain = lambda v: (np.char.decode(v.numpy().astype(bytes), "utf-8")
                   if v.dtype == tf.string else v.numpy())
np.savez(out_file, **{"text_" + k: plain(v) for k, v in text.items()},
         **{"ids_" + k: plain(v) for k, v in by_ids.items()})
""" % (TEXTS,)


@pytest.fixture(scope="module")
def model_dir(austen_data, tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    pretrain(directory, os.path.join(austen_data[0], "*.tfrecord"), ["NUM_TRAIN_STEPS = 2"])
    return str(directory)


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


@pytest.mark.parametrize("kind", ["discriminator", "generator", "encoder"])
def test_each_kind_loads_in_a_fresh_process_and_agrees_with_the_model(model_dir, tmp_path, kind):
    path = saved_model.export(model_dir, str(tmp_path), "electra", kind)
    loaded = load_pretrainer(model_dir)
    ids = _ids(loaded, TEXTS)
    np.savez(tmp_path / "ids.npz", **ids)
    subprocess.run([sys.executable, "-c", LOADER, path, str(tmp_path / "ids.npz"),
                    str(tmp_path / "out.npz")], check=True, capture_output=True,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    out = dict(np.load(tmp_path / "out.npz"))
    # The raw-text signature tokenized exactly as the tokenizer does.
    np.testing.assert_array_equal(out["text_input_mask"], ids["input_mask"])
    tokens = np.array([[loaded.tokenizer().vocab[i] if m else "" for i, m in zip(r, mr)]
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
        positions = np.nonzero(ids["input_ids"][1] == loaded.tokenizer().mask_id)[0]
        np.testing.assert_array_equal(out["text_mask_positions"][1], positions)
        probabilities = tf.nn.softmax(expected[1].numpy()[positions]).numpy()
        top = np.argsort(-probabilities, axis=-1)[:, :5]
        np.testing.assert_array_equal(
            out["text_top_k_tokens"][1].astype(str),
            np.array(loaded.tokenizer().vocab)[top])
        np.testing.assert_allclose(out["text_top_k_probabilities"][1],
                                   np.take_along_axis(probabilities, top, -1), atol=1e-5)
    else:
        expected = model.discriminator(*args).numpy()
        np.testing.assert_allclose(out["ids_sequence_output"][mask], expected[mask], atol=1e-5)
        np.testing.assert_allclose(out["text_cls_output"], expected[:, 0], atol=1e-5)


def test_saved_model_cli_warmup_records_and_models_config(model_dir, tmp_path):
    path = saved_model.export(model_dir, str(tmp_path), "electra", "discriminator")
    saved_model.export(model_dir, str(tmp_path), "electra-encoder", "encoder")
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
    config = text_format.Parse((tmp_path / "models.config").read_text(),
                               model_server_config_pb2.ModelServerConfig())
    assert [(c.name, c.base_path) for c in config.model_config_list.config] == [
        ("electra", "/models/electra"), ("electra-encoder", "/models/electra-encoder")]


def test_detector_cli_from_a_saved_model_and_from_a_model_dir(model_dir, tmp_path):
    path = saved_model.export(model_dir, str(tmp_path), "electra", "discriminator")
    script = os.path.join(ROOT, "scripts", "detect_replaced.py")
    outputs = []
    for source in (f"--saved_model={path}", f"--model_dir={model_dir}"):
        result = subprocess.run(
            [sys.executable, script, source, "--threshold=0.0",
             "The quick brown fox jumps over the lazy dog", "The quick red fox runs"],
            capture_output=True, text=True, check=True)
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]
    lines = outputs[0].splitlines()
    assert lines[0] == "The quick brown fox jumps over the lazy dog"
    words = "the quick brown fox jumps over the lazy dog".split()
    assert [line.split()[0] for line in lines[1:10]] == words
    assert all(line.endswith("<- replaced") for line in lines[1:10])  # threshold 0
    assert lines[10] == "The quick red fox runs" and len(lines) == 16


def test_bad_exports_fail_with_one_clear_line(model_dir, tmp_path):
    saved_model.export(model_dir, str(tmp_path), "electra", "discriminator")
    with pytest.raises(UserInputError, match=r"electra/1 exists; pass --version=2"):
        saved_model.export(model_dir, str(tmp_path), "electra", "discriminator")
    with pytest.raises(UserInputError, match="--kind=task exports a fine-tuned model"):
        saved_model.export(model_dir, str(tmp_path), "other", "task")
    with pytest.raises(UserInputError, match="has no operative_config.gin"):
        saved_model.export(str(tmp_path), str(tmp_path), "other", "encoder")
    assert sorted(os.listdir(tmp_path / "electra")) == ["1"]  # nothing half-written
    process = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "export_saved_model.py"),
         f"--model_dir={tmp_path}/nothing", f"--export_dir={tmp_path}/x"],
        capture_output=True, text=True)
    assert process.returncode == 1
    assert process.stderr.strip().splitlines() == [
        f"error: {tmp_path}/nothing has no operative_config.gin; pass a model dir written by "
        "run_pretraining.py or convert_checkpoint.py"]
    assert not os.path.exists(tmp_path / "x")
    info = json.loads(open(os.path.join(model_dir, "model_info.json")).read())
    assert info["lower_case"] is True and os.path.isabs(info["vocab_file"])
