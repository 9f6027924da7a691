"""What every script shares (electra_tf.cli): its --help usage, its refusals of bad flags."""

import ast
import glob
import os
import subprocess
import sys

import pytest
from conftest import ROOT, UNCASED_VOCAB

SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "scripts", "*.py")))
# What each script says without any flag: absl's refusal naming its first required flag,
# or (detect_replaced.py, whose flags are all optional) its own one-line error.
WITHOUT_FLAGS = {
    "build_pretraining_data.py": "Flag --input must have a value other than None",
    "convert_checkpoint.py": "Flag --source must have a value other than None",
    "detect_replaced.py": "error: no sentence given; pass one or more after the flags",
    "export_saved_model.py": "Flag --model_dir must have a value other than None",
    "inspect_pretraining_data.py": "Flag --data must have a value other than None",
    "learn_vocab.py": "Flag --input must have a value other than None",
    "run_finetuning.py": "Flag --task must have a value other than None",
    "run_pretraining.py": "Flag --gin_file must have a value other than None",
}


def test_every_script_usage_keeps_its_shell_line_breaks():
    """A usage example continued with ` \\` in a plain docstring reaches --help as one line
    with a run of spaces (Python reads backslash-newline as nothing); raw docstrings keep it."""
    scripts = sorted(glob.glob(os.path.join(ROOT, "scripts", "*.py")))
    assert len(scripts) >= 8
    for path in scripts:
        source = open(path, encoding="utf-8").read()
        docstring = ast.get_docstring(ast.parse(source), clean=False)
        assert docstring, path
        written = source.split('"""')[1]  # the docstring as written in the file
        assert written.count(" \\\n") == docstring.count(" \\\n"), path


def _imports(script, *args):
    """Runs `script` with `args`: (exit code, stderr without the import lines, the modules
    it imported)."""
    done = subprocess.run([sys.executable, "-X", "importtime", os.path.join("scripts", script),
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = done.stderr.splitlines()
    modules = {line.rsplit("|", 1)[1].strip() for line in lines
               if line.startswith("import time:") and "|" in line}
    said = "\n".join(line for line in lines if not line.startswith("import time:"))
    return done.returncode, said, done.stdout, modules


def test_the_refusal_table_names_every_script():
    assert sorted(WITHOUT_FLAGS) == SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_script_refuses_a_missing_flag_and_prints_help_without_tensorflow(script):
    """absl parses the flags before main and the scripts import the library in main, so a
    missing or mistyped flag, or --helpshort, is answered without TensorFlow's ~5 s import."""
    code, said, _, modules = _imports(script)
    assert "absl.flags" in modules and "electra_tf.cli" in modules  # the probe sees imports
    assert code == 1
    assert WITHOUT_FLAGS[script] in said, said
    assert not [m for m in modules if m.split(".")[0] in ("tensorflow", "keras")]
    code, said, out, modules = _imports(script, "--helpshort")
    assert out.startswith(ast.get_docstring(ast.parse(open(
        os.path.join(ROOT, "scripts", script), encoding="utf-8").read())).splitlines()[0])
    assert not [m for m in modules if m.split(".")[0] in ("tensorflow", "keras")]


@pytest.mark.parametrize("script, flag, choices", [
    ("run_pretraining.py", "--strategy=tpus", "default|mirrored|multi_worker_mirrored|tpu"),
    ("build_pretraining_data.py", "--input_format=json", "text|jsonl"),
    ("build_pretraining_data.py", "--word_segmenter=jeiba", "none|jieba"),
    ("learn_vocab.py", "--input_format=txt", "text|jsonl"),
    ("export_saved_model.py", "--kind=classifier", "discriminator|generator|encoder|task"),
])
def test_a_bad_choice_is_refused_with_the_choices_without_tensorflow(script, flag, choices):
    """The enum flags' choices come from electra_tf.choices, which imports nothing heavy."""
    code, said, _, modules = _imports(script, flag)
    assert code == 1
    assert f"{flag}: value should be one of <{choices}>" in said, said
    assert not [m for m in modules if m.split(".")[0] in ("tensorflow", "keras")]


# One refusal per script that it makes after TensorFlow has started (tests elsewhere check
# the scripts' refusals in the test's own process, `in_process.run_script`, which does not
# see what TensorFlow's C++ logging writes to file descriptor 2).
AFTER_TENSORFLOW = {
    "build_pretraining_data.py": (["--input={missing}/*.txt", "--vocab_file={vocab}",
                                   "--output_dir={out}"],
                                  "error: input {missing}/*.txt matches no file; check the "
                                  "path or glob in --input"),
    "convert_checkpoint.py": (["--source=tf1", "--input={missing}/model.ckpt",
                               "--output_dir={out}"],
                              "error: --input={missing}/model.ckpt is not a TF1 checkpoint "
                              "prefix (no {missing}/model.ckpt.index); pass e.g. "
                              "electra_base/model.ckpt-766000"),
    "detect_replaced.py": (["--saved_model={missing}", "a sentence"],
                           "error: --saved_model={missing} holds no saved_model.pb; pass "
                           "EXPORT_DIR/MODEL_NAME/VERSION of an export"),
    "export_saved_model.py": (["--model_dir={missing}", "--export_dir={out}",
                               "--model_name=electra", "--kind=discriminator"],
                              "error: {missing} does not exist or is not a folder; pass a "
                              "model dir written by run_pretraining.py or "
                              "convert_checkpoint.py"),
    "inspect_pretraining_data.py": (["--data={missing}/*.tfrecord", "--vocab_file={vocab}"],
                                    "error: data {missing}/*.tfrecord matches no file; check the "
                                    "path, or build the data with "
                                    "scripts/build_pretraining_data.py"),
    "learn_vocab.py": (["--input={missing}/*.txt", "--output={out}/vocab.txt",
                        "--vocab_size=1000"],
                       "error: input {missing}/*.txt matches no file; check the path or glob "
                       "in --input"),
    "run_finetuning.py": (["--task=sst3", "--init_checkpoint={missing}", "--model_dir={out}"],
                          "error: --task=sst3 is unknown; choose one of classification, "),
    "run_pretraining.py": (["--gin_file=tiny.gin", "--gin_bindings=pretrainer.hiden_size=3",
                            "--model_dir={out}", "--train_data={missing}/*"],
                           "error: --gin_bindings='pretrainer.hiden_size=3': Configurable "
                           "'pretrainer' doesn't have a parameter named 'hiden_size'"),
}


def test_the_after_tensorflow_table_names_every_script():
    assert sorted(AFTER_TENSORFLOW) == SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_refusal_after_tensorflow_starts_is_the_one_line_on_stderr(script, tmp_path):
    """TensorFlow's start-up logs through C++ (the CUDA build's cuInit error on a machine
    without a GPU, CPU feature notes) unless `electra_tf.cli` quiets it first: the error line
    must be all a user sees, exit code 1, and nothing written."""
    args, expected = AFTER_TENSORFLOW[script]
    names = {"missing": str(tmp_path / "missing"), "out": str(tmp_path / "out"),
             "vocab": UNCASED_VOCAB}
    code, said, out, modules = _imports(script, *[a.format(**names) for a in args])
    assert "tensorflow" in modules  # (the refusal is made after TensorFlow's import)
    assert code == 1
    assert said.splitlines() == [said.strip()] and said.startswith(expected.format(**names)), said
    assert out == "" and not os.path.exists(tmp_path / "out")
