"""When the benchmarks reuse an earlier fine-tuning run (benchmarks/common.py
earlier_finetuning): the same initialisation, trials, examples and recorded bindings; a random
initialisation from any model dir of the same encoder shape and vocab; the same data files and
checkpoint as the run read. On made-up model dirs and results.json files."""

import hashlib
import json
import os
import subprocess
import sys
import tempfile

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import common  # noqa: E402

TINY = {"vocab_size": 21128, "hidden_size": 128, "num_layers": 2, "num_heads": 2,
        "intermediate_size": 512, "embedding_size": 128}


def _model_dir(root, name, shape, vocab_file="data/vocab/bert_chinese.txt"):
    path = root / name
    path.mkdir()
    (path / "model_info.json").write_text(json.dumps(
        {"discriminator": shape, "vocab_file": vocab_file, "lower_case": True}))
    _checkpoint(path, 8512)
    return str(path)


def _checkpoint(model_dir, step, content=b"weights"):
    """A checkpoint's .index (its tensors' checksums; made up here), now the latest."""
    (model_dir / f"ckpt-{step}.index").write_bytes(content + b"%d" % step)
    (model_dir / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\n')


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _results(out, init_checkpoint, trials=5, examples=2000, epochs=10, files=()):
    """A results.json as run_finetuning.py writes it, having read `files` and, unless
    random, `init_checkpoint`."""
    os.makedirs(out)
    inputs = {f"split_{i}": _sha256(path) for i, path in enumerate(files)}
    if not init_checkpoint.startswith("random"):
        inputs["init_checkpoint"] = _sha256(init_checkpoint + ".index")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"init_checkpoint": init_checkpoint, "trials": [{}] * trials,
                   "num_train_examples": examples, "inputs_sha256": inputs,
                   "hyperparameters": {"num_epochs": epochs}}, f)
    return out


def test_random_init_is_reused_from_any_dir_of_the_same_shape(tmp_path):
    electra = _model_dir(tmp_path, "electra", TINY)
    generator_1 = _model_dir(tmp_path, "generator_1", dict(TINY))
    wider = _model_dir(tmp_path, "wider", {**TINY, "hidden_size": 256})
    other_vocab = _model_dir(tmp_path, "other_vocab", dict(TINY), "learned/vocab.txt")
    out = _results(str(tmp_path / "ft" / "random_init"),
                   "random, shaped as " + os.path.join(electra, "ckpt-8512"))
    bindings = ["NUM_EPOCHS=10"]
    assert common.earlier_finetuning(out, electra, 5, 2000, bindings, True) is not None
    assert common.earlier_finetuning(out, generator_1, 5, 2000, bindings, True) is not None
    assert common.earlier_finetuning(out, wider, 5, 2000, bindings, True) is None
    assert common.earlier_finetuning(out, other_vocab, 5, 2000, bindings, True) is None
    # A random run is never reused for a pre-trained one, whatever the shape.
    assert common.earlier_finetuning(out, electra, 5, 2000, bindings, False) is None
    # Other trials, examples or a recorded binding's value: run again.
    assert common.earlier_finetuning(out, generator_1, 3, 2000, bindings, True) is None
    assert common.earlier_finetuning(out, generator_1, 5, 1000, bindings, True) is None
    assert common.earlier_finetuning(out, generator_1, 5, 2000, ["NUM_EPOCHS=3"], True) is None


def test_pretrained_init_is_reused_only_from_its_own_dir(tmp_path):
    electra = _model_dir(tmp_path, "electra", TINY)
    generator_1 = _model_dir(tmp_path, "generator_1", dict(TINY))
    out = _results(str(tmp_path / "ft" / "electra"), os.path.join(electra, "ckpt-8512"))
    assert common.earlier_finetuning(out, electra, 5, 2000, [], False) is not None
    assert common.earlier_finetuning(out, os.path.join(electra, "ckpt-8512"), 5, 2000, [],
                                     False) is not None
    assert common.earlier_finetuning(out, generator_1, 5, 2000, [], False) is None
    assert common.earlier_finetuning(str(tmp_path / "ft" / "none"), electra, 5, 2000, [],
                                     False) is None


def test_a_run_is_redone_when_what_it_read_changed(tmp_path):
    """Pre-trained further or again (the latest checkpoint, or its weights, changed), or
    other data files: the earlier results no longer describe the run."""
    electra = _model_dir(tmp_path, "electra", TINY)
    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    train.write_text("label,text\na,x\n")
    dev.write_text("label,text\nb,y\n")
    files = [str(train), str(dev)]
    out = _results(str(tmp_path / "ft"), os.path.join(electra, "ckpt-8512"), files=files)
    assert common.earlier_finetuning(out, electra, 5, 2000, [], False, files) is not None
    dev.write_text("label,text\nb,z\n")  # another dev set
    assert common.earlier_finetuning(out, electra, 5, 2000, [], False, files) is None
    assert common.earlier_finetuning(out, electra, 5, 2000, [], False, files[:1]) is not None
    _checkpoint(tmp_path / "electra", 8512, b"other weights")  # pre-trained again
    assert common.earlier_finetuning(out, electra, 5, 2000, [], False, files[:1]) is None
    _checkpoint(tmp_path / "electra", 8512)
    assert common.earlier_finetuning(out, electra, 5, 2000, [], False, files[:1]) is not None
    _checkpoint(tmp_path / "electra", 9000)  # trained further: the dir's latest is newer
    assert common.earlier_finetuning(out, electra, 5, 2000, [], False, files[:1]) is None
    assert common.earlier_finetuning(out, os.path.join(electra, "ckpt-8512"), 5, 2000, [],
                                     False, files[:1]) is not None
    # Random weights do not depend on the checkpoint: its data still counts.
    random = _results(str(tmp_path / "random"), "random, shaped as "
                      + os.path.join(electra, "ckpt-8512"), files=files)
    assert common.earlier_finetuning(random, electra, 5, 2000, [], True, files) is not None
    train.write_text("label,text\na,w\n")
    assert common.earlier_finetuning(random, electra, 5, 2000, [], True, files) is None
    # A results.json from before the inputs were recorded is not trusted.
    with open(os.path.join(random, "results.json")) as f:
        result = json.load(f)
    del result["inputs_sha256"]
    assert not common.finetuning_inputs_match(result, None)


def test_describe_cpu_names_generation_and_vector_width():
    """Recorded with every benchmark: two 2-core hosts both named "AMD EPYC" ran PyTorch's
    matmul at 0.47x TensorFlow's on one and not the other, so the name alone is not enough."""
    zen5 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
            "model name\t: AMD EPYC\nflags\t\t: fpu avx avx2 fma avx512f avx512_bf16\n\n"
            "processor\t: 1\ncpu family\t: 99\nmodel name\t: other\n")
    assert common.describe_cpu(zen5) == "AMD EPYC (family 26 model 2, AVX-512 + bf16)"
    avx2 = "cpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7B13\nflags\t\t: avx avx2 fma\n"
    assert common.describe_cpu(avx2) == "AMD EPYC 7B13 (family 25 model 1, AVX2)"
    amx = ("cpu family\t: 6\nmodel\t\t: 167\nmodel name\t: Intel(R) Xeon(R) Processor\n"
           "flags\t\t: avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile\n")
    assert common.describe_cpu(amx) == ("Intel(R) Xeon(R) Processor (family 6 model 167, "
                                        "AVX-512 + bf16 + AMX)")
    assert common.describe_cpu("model name\t: Some CPU\n") == "Some CPU"


def test_finetuning_rows_print_undefined_scores():
    # results.json holds null for a Pearson/Spearman of a constant series, and its statistics.
    conditions = {"stsb": {
        "median": {"pearson": None, "spearman": 0.5},
        "mean": {"pearson": None, "spearman": 0.25},
        "std": {"pearson": None, "spearman": 0.125},
        "trials": [{"dev": {"pearson": None}}, {"dev": {"pearson": 0.75}}]}}
    assert common.finetuning_rows(conditions, ["pearson", "spearman"], "pearson") == [[
        "stsb", "undefined (undefined ± undefined)", "0.5000 (0.2500 ± 0.1250)",
        "undefined, 0.7500"]]
    assert common.points_text(0.75, 0.5) == "+25.0"
    assert common.points_text(0.75, None) == "undefined"
    assert common.score_text(float("nan")) == "undefined"


def _run_benchmark(body: str, *args: str) -> subprocess.CompletedProcess:
    """`body` run as a benchmark script's code (after `import common` and the modules it
    uses), with command-line `args`, in a process of its own."""
    script = ("import os, signal, subprocess, sys, tempfile, threading, time\n"
              f"sys.path.insert(0, os.path.join({ROOT!r}, 'benchmarks'))\n"
              "import common\n" + body)
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("raised, code, line", [
    ("KeyboardInterrupt", 130, "interrupted (Ctrl-C)"),
    ("UserInputError('unknown model size \\'huge\\'')", 1,
     "error: unknown model size 'huge'"),
    ("subprocess.CalledProcessError(2, ['python', 'scripts/run_pretraining.py', '--x=1'])", 1,
     "error: this command failed (its output is above): python scripts/run_pretraining.py "
     "--x=1")])
def test_a_benchmark_ends_in_one_line(raised, code, line):
    """Ctrl-C, a refused input and a failed child command end a benchmark (common.run) as
    they end the project's scripts: one line on stderr, no traceback."""
    done = _run_benchmark("from electra_tf.errors import UserInputError\n"
                          "def main(argv):\n"
                          f"    raise {raised}\n"
                          "common.run(main)\n")
    assert (done.returncode, done.stderr.strip()) == (code, line)


def test_a_benchmark_stopped_by_sigterm_cleans_up_and_ends_in_one_line():
    """SIGTERM (a `timeout`, a scheduler) ends a benchmark as Ctrl-C does: its `with`
    blocks clean up (serving.py left its 115 MB temporary export in /tmp) and one line."""
    done = _run_benchmark("def main(argv):\n"
                          "    with tempfile.TemporaryDirectory(prefix='bench_') as work:\n"
                          "        print(work, flush=True)\n"
                          "        os.kill(os.getpid(), signal.SIGTERM)\n"
                          "        time.sleep(60)\n"
                          "common.run(main)\n")
    assert (done.returncode, done.stderr.strip()) == (143, "terminated (SIGTERM)")
    work = done.stdout.strip()
    assert work and not os.path.exists(work)


def test_a_benchmark_stopped_while_its_worker_runs_lets_the_worker_clean_up(tmp_path):
    """SIGTERM to a benchmark (as `timeout` sends it, to the parent alone) while a worker
    process runs (common.run_child): the worker gets SIGTERM too and removes its temporary
    folder (subprocess.run killed it outright, and model_step's stayed in /tmp)."""
    child = ("import os, sys, tempfile, time\n"
             f"sys.path.insert(0, os.path.join({ROOT!r}, 'benchmarks'))\n"
             "import common\n"
             "def main(argv):\n"
             "    with tempfile.TemporaryDirectory(prefix='worker_') as work:\n"
             f"        open({str(tmp_path / 'where')!r}, 'w').write(work)\n"
             "        time.sleep(60)\n"
             "common.run(main)\n")
    done = _run_benchmark("def stop():\n"
                          f"    while not os.path.exists({str(tmp_path / 'where')!r}):\n"
                          "        time.sleep(0.1)\n"
                          "    os.kill(os.getpid(), signal.SIGTERM)\n"
                          "def main(argv):\n"
                          "    threading.Thread(target=stop, daemon=True).start()\n"
                          f"    common.run_child([sys.executable, '-c', {child!r}])\n"
                          "common.run(main)\n")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (
        143, "terminated (SIGTERM)"), done.stderr
    work = (tmp_path / "where").read_text()
    assert work.startswith(os.path.join(tempfile.gettempdir(), "worker_"))
    assert not os.path.exists(work)


def test_the_benchmarks_size_choices_are_the_models():
    """The --size flags' choices (electra_tf.choices, no TensorFlow: a bad size is refused
    at parsing, before step_profile measured the matmul rate for 40 s) are the sizes the
    library builds."""
    from electra_tf import choices
    from electra_tf.modeling import config
    assert choices.MODEL_SIZES == tuple(config.SIZES)


def test_every_benchmark_names_its_results_by_results_name():
    """`--results_name=<name>_check` (git-ignored) is how a user checks a script without
    writing over the committed results; ten scripts wrote theirs under a fixed name. Each
    script that writes results names them by the flag, which it defines."""
    import re
    folder = os.path.join(ROOT, "benchmarks")
    writers = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py") or name == "common.py":
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            text = f.read()
        calls = re.findall(r"common\.write_results\(\s*([^,]+),", text)
        if not calls:
            continue
        writers.append(name)
        for call in calls:  # op_profile's and step_profile's: a name set from the flag
            assert call.strip() == "FLAGS.results_name" or re.search(
                r"^\s*" + re.escape(call.strip()) + r" = .*FLAGS\.results_name if "
                r'FLAGS\["results_name"\]\.present', text, re.M | re.S), (name, call)
        assert re.search(r'DEFINE_string\(\s*"results_name"|define_results_name\(|'
                         r"import model_step", text), name
        assert not re.search(r'RESULTS_DIR, "\w+\.png"', text), name  # plots too
    assert len(writers) >= 20, writers


def test_define_results_name_makes_the_callers_flag(tmp_path):
    script = ("import os, sys\n"
              f"sys.path.insert(0, os.path.join({ROOT!r}, 'benchmarks'))\n"
              "import common\n"
              "from absl import app, flags\n"
              "common.define_results_name('probe')\n"
              "app.run(lambda argv: print(flags.FLAGS.results_name))\n")
    path = tmp_path / "probe.py"
    path.write_text(script)
    shown = subprocess.run([sys.executable, str(path), "--helpshort"], capture_output=True,
                           text=True, timeout=120)
    assert "--results_name: benchmarks/results/<name>.{json,md} (default probe)" in " ".join(
        shown.stdout.split()), shown.stdout
    done = subprocess.run([sys.executable, str(path), "--results_name=probe_check"],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "probe_check", done.stderr[-500:]


def test_list_flags_of_counts_are_whole_numbers_of_at_least_one():
    """serving.py --batch_sizes=a was int()'s traceback; build_data.py --workers=0 ran."""
    from electra_tf.errors import UserInputError
    assert common.positive_integers("batch_sizes", ["1", " 32"]) == [1, 32]
    for values in (["a"], ["0"], ["1", "-2"], ["1.5"], []):
        with pytest.raises(UserInputError, match=r"^--batch_sizes=.*: give whole numbers of "
                                                 r"at least 1, comma-separated$"):
            common.positive_integers("batch_sizes", values)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "table.md"
    path.write_text("old\n")

    def write(f):
        f.write("half")
        raise ValueError("the writer failed")

    with pytest.raises(ValueError, match="the writer failed"):
        common.replace_atomically(str(path), write)
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["table.md"]
    common.replace_atomically(str(path), lambda f: f.write("new\n"))
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["table.md"]


def test_the_recorded_command_names_the_venv_python_and_repo_relative_paths(monkeypatch):
    monkeypatch.setattr(sys, "argv", [os.path.join(ROOT, "benchmarks", "serving.py"),
                                      "--size=tiny"])
    assert common.run_info()["command"] == ".venv/bin/python benchmarks/serving.py --size=tiny"
    monkeypatch.chdir(os.path.join(ROOT, "benchmarks"))  # (run from inside benchmarks/)
    monkeypatch.setattr(sys, "argv", ["serving.py", "--size=tiny"])
    assert common.run_info()["command"] == ".venv/bin/python benchmarks/serving.py --size=tiny"


def test_a_benchmark_flag_out_of_its_bounds_is_one_error_line():
    """absl's own bound and enum checks ended a benchmark in two 'FATAL Flags parsing
    error' lines; they end it as the scripts' do."""
    done = _run_benchmark("from absl import flags\n"
                          "flags.DEFINE_integer('repeats', 3, 'Runs.', lower_bound=1)\n"
                          "common.run(lambda argv: print('ran'))\n", "--repeats=0")
    assert (done.returncode, done.stdout, done.stderr.strip()) == (
        1, "", "error: flag --repeats=0: 0 is not a positive integer (--helpshort lists the "
        "flags)")
