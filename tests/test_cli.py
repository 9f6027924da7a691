"""What every script shares (electra_tf.cli): its --help usage, its refusals of bad flags."""

import ast
import glob
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import DATA, ROOT, UNCASED_VOCAB
from in_process import run_script

SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "scripts", "*.py")))
# What each script says without any flag: one line naming its required flags (absl said
# 'FATAL Flags parsing error: ...' of each, and a second line), or (detect_replaced.py, whose
# flags are all optional) its own one-line error.
_HELP = " (--helpshort lists the flags)"
WITHOUT_FLAGS = {
    "build_pretraining_data.py": "error: --input, --vocab_file and --output_dir are required; "
                                 "pass them" + _HELP,
    "convert_checkpoint.py": "error: --source, --input and --output_dir are required; pass "
                             "them" + _HELP,
    "detect_replaced.py": "error: no sentence given; pass one or more after the flags, e.g. "
                          "\"The quick red fox runs over the lazy dog\"",
    "export_saved_model.py": "error: --model_dir and --export_dir are required; pass them"
                             + _HELP,
    "inspect_pretraining_data.py": "error: --data is required; pass it" + _HELP,
    "learn_vocab.py": "error: --input, --output and --vocab_size are required; pass them"
                      + _HELP,
    "run_finetuning.py": "error: --task, --init_checkpoint and --model_dir are required; pass "
                         "them" + _HELP,
    "run_pretraining.py": "error: --gin_file, --model_dir and --train_data are required; pass "
                          "them" + _HELP,
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
    missing or mistyped flag, or --helpshort, is answered without TensorFlow's ~5 s import;
    the usage asked for exits 0."""
    code, said, _, modules = _imports(script)
    assert "absl.flags" in modules and "electra_tf.cli" in modules  # the probe sees imports
    assert code == 1
    assert said == WITHOUT_FLAGS[script]
    assert not [m for m in modules if m.split(".")[0] in ("tensorflow", "keras")]
    code, said, out, modules = _imports(script, "--helpshort")
    assert code == 0  # asked for: a success (absl exits 1)
    assert out.startswith(ast.get_docstring(ast.parse(open(
        os.path.join(ROOT, "scripts", script), encoding="utf-8").read())).splitlines()[0])
    assert not [m for m in modules if m.split(".")[0] in ("tensorflow", "keras")]


def test_every_spelling_of_help_absl_answers_exits_0():
    """absl answers --help, -helpshort, --helpfull=true, --help=1 and -? with the usage and
    exit 1; each is a success. --help=false asks for none (here: a missing flag, 1)."""
    for arg in ("--help", "-helpshort", "--helpfull=true", "--help=1", "-?"):
        code, _, out, _ = _imports("learn_vocab.py", arg)
        assert (code, "--input" in out) == (0, True), arg
    assert _imports("learn_vocab.py", "--help=false")[0] == 1


REQUIRED = {  # each script's required flags, given (the refusal comes first)
    "build_pretraining_data.py": ["--input=x", "--vocab_file=x", "--output_dir=x"],
    "convert_checkpoint.py": ["--source=tf1", "--input=x", "--output_dir=x"],
    "export_saved_model.py": ["--model_dir=x", "--export_dir=x"],
    "inspect_pretraining_data.py": ["--data=x"],
    "learn_vocab.py": ["--input=x", "--output=x", "--vocab_size=100"],
    "run_finetuning.py": ["--task=classification", "--init_checkpoint=x", "--model_dir=x"],
    "run_pretraining.py": ["--gin_file=tiny.gin", "--model_dir=x", "--train_data=x"],
}


@pytest.mark.parametrize("script", sorted(REQUIRED))
def test_a_word_after_the_flags_is_refused_without_tensorflow(script):
    """A script that takes only flags ignored a stray word, exit 0 after its work; and
    `--lower_case false`, which absl reads as --lower_case (true) and the word 'false', did
    the opposite of what it says. (detect_replaced.py reads its sentences there.)"""
    assert sorted(REQUIRED) == sorted(set(SCRIPTS) - {"detect_replaced.py"})
    code, said, _, modules = _imports(script, *REQUIRED[script], "extra")
    assert (code, said) == (1, "error: 'extra' is not a flag and this script takes only "
                               "flags; write each as --name=value")
    assert not [m for m in modules if m.split(".")[0] in ("tensorflow", "keras")]
    code, said, _, _ = _imports(script, *REQUIRED[script], "--showprefixforinfo", "False")
    assert (code, said) == (1, "error: '--showprefixforinfo False' reads as "
                               "--showprefixforinfo and a stray word 'False'; write "
                               "--showprefixforinfo=false")


@pytest.mark.parametrize("script", ["convert_checkpoint.py", "run_finetuning.py",
                                    "run_pretraining.py"])
def test_a_seed_keras_cannot_take_is_refused_without_tensorflow(script):
    """A --seed below 0 or above 2**32 - 1 was numpy's traceback from
    keras.utils.set_random_seed, after the model was built and the data read."""
    for seed in (-5, 2**32):
        code, said, _, modules = _imports(script, *REQUIRED[script], f"--seed={seed}")
        assert (code, said) == (1, f"error: flag --seed={seed}: {seed} is not an integer in "
                                   "the range [0, 4294967295] (--helpshort lists the flags)")
        assert not [m for m in modules if m.split(".")[0] in ("tensorflow", "keras")]


def test_a_stray_word_is_named_after_the_boolean_flag_it_follows():
    """'--flag value' is absl's form for a flag that takes a value: only after a boolean flag
    is the word stray, and that flag is the one named (the first flag before a same word was,
    '--num_layers 1 --lower_case 1' blamed --num_layers)."""
    from absl import flags

    from electra_tf import cli
    if "stray_test_bool" not in flags.FLAGS:
        flags.DEFINE_boolean("stray_test_bool", False, "")
        flags.DEFINE_integer("stray_test_int", 0, "")
    raw = ["prog", "--stray_test_int", "1", "--stray_test_bool", "1"]
    assert cli.stray_argument(["prog", "1"], raw) == (
        "'--stray_test_bool 1' reads as --stray_test_bool and a stray word '1'; write "
        "--stray_test_bool=1")
    assert cli.stray_argument(["prog", "1"], ["prog", "--stray_test_int=1", "1"]) == (
        "'1' is not a flag and this script takes only flags; write each as --name=value")
    assert cli.stray_argument(["prog"], raw) is None


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
    assert said == f"error: flag {flag}: value should be one of <{choices}>{_HELP}"
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
                              "electra_base/electra_base, the released zip's prefix"),
    "detect_replaced.py": (["--saved_model={missing}", "a sentence"],
                           "error: --saved_model={missing} holds no saved_model.pb; pass "
                           "EXPORT_DIR/MODEL_NAME/VERSION of an export"),
    "export_saved_model.py": (["--model_dir={missing}", "--export_dir={out}",
                               "--model_name=electra", "--kind=discriminator"],
                              "error: {missing} does not exist or is not a folder; pass a "
                              "model dir written by run_pretraining.py or "
                              "convert_checkpoint.py"),
    "inspect_pretraining_data.py": (["--data={missing}/*.tfrecord", "--vocab_file={vocab}"],
                                    "error: --data {missing}/*.tfrecord matches no file; check the "
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


# ------------------------------------------------------------------------------ full disks


def test_a_path_under_a_broken_link_or_of_an_unknown_scheme_is_one_line(tmp_path):
    """An --output_dir or --model_dir that is a link to a removed folder (or under one), and
    s3:// paths, which this TensorFlow has no file system for, ended in tracebacks
    (NotFoundError naming a temporary file; UnimplementedError); the errors TensorFlow and
    the OS raise are named by the link, or the scheme."""
    import tensorflow as tf

    from electra_tf.data import corpus
    from electra_tf.errors import UserInputError, path_failure
    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "removed")
    expected = (f"{link} is a broken link (to {tmp_path}/removed); create what it points to, "
                "or choose another path")
    for path in (str(link / ".running.json.tmp-17106-7b73740d"), str(link / "x" / "y")):
        with pytest.raises(tf.errors.NotFoundError) as raised:
            with tf.io.gfile.GFile(path, "w") as f:
                f.write("x")
        assert path_failure(raised.value) == expected
        with pytest.raises(OSError) as raised:
            open(path, "w")
        assert path_failure(raised.value) == expected
    with pytest.raises(tf.errors.UnimplementedError) as raised:
        tf.io.gfile.makedirs("s3://bucket/run")
    assert path_failure(raised.value) == (
        "this TensorFlow cannot read or write s3:// paths (s3://bucket/run); use a local path "
        "or gs:// (copy the files, or mount the bucket)")
    with pytest.raises(OSError) as raised:  # a missing file under no link: not this error
        open(tmp_path / "none" / "x")
    assert path_failure(raised.value) is None
    # A link to nothing in an input folder: named (it was a traceback from open()).
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("A line.\n")
    (tmp_path / "texts" / "./c.txt").symlink_to("/nonexistent/c.txt")
    with pytest.raises(UserInputError, match=f"input {tmp_path}/texts/c.txt is a broken link "
                                             r"\(to /nonexistent/c.txt\); fix it or take it "
                                             "out of --input's folder"):
        corpus.expand_inputs(str(tmp_path / "texts"))
    with pytest.raises(UserInputError, match=f"input {tmp_path}/texts/c.txt is a broken link "
                                             r"\(to /nonexistent/c.txt\); fix it or pass "
                                             "another --input"):
        corpus.expand_inputs(str(tmp_path / "texts" / "c.txt"))  # (it "matched no file")
    (tmp_path / "texts" / "c.txt").unlink()
    (tmp_path / "empty").mkdir()  # beside a good input it was taken silently
    (tmp_path / "empty" / ".hidden.txt").write_text("A line.\n")
    with pytest.raises(UserInputError, match=f"input {tmp_path}/empty holds no files \\(hidden "
                                             r"ones, named '\.\*', are skipped\); check"):
        corpus.expand_inputs(f"{tmp_path}/texts,{tmp_path}/empty")
    os.mkfifo(tmp_path / "pipe")  # as /dev/stdin or <(zcat x.gz) are: it was "empty (0 bytes)"
    with pytest.raises(UserInputError, match=f"input {tmp_path}/pipe is a pipe or device, not "
                                             "a file; write it to a file and pass that"):
        corpus.expand_inputs(str(tmp_path / "pipe"))


def test_a_write_the_disk_refuses_is_named_by_the_output_it_was_for():
    """A full, read-only or forbidden disk, as the OS and TensorFlow's file system report it,
    named by the output being written rather than the temporary name it is staged under."""
    import tensorflow as tf

    from electra_tf.errors import storage_failure, storage_message
    with pytest.raises(tf.errors.ResourceExhaustedError) as full:
        tf.io.write_file("/dev/full", "x" * 100_000)  # a device that is always full
    assert storage_failure(full.value) == ("no space", "/dev/full")
    with pytest.raises(OSError) as full:
        with open("/dev/full", "w") as f:
            f.write("x")
    assert storage_failure(full.value) == ("no space", None)
    assert storage_failure(OSError(30, "Read-only file system", "/m/x.json")) == (
        "read-only", "/m/x.json")

    def op_error(kind, message):
        return kind(None, None, message)
    save = ("{{function_node __wrapped__SaveV2_dtypes_22_device_/job:localhost/replica:0/task:0"
            "/device:CPU:0}} /runs/a b/ckpt-20_temp/part-00000-of-00001.data-00000-of-00001"
            ".tempstate8807; No space left on device [Op:SaveV2]")
    staged = {save: "/runs/a b/ckpt-20",
              "/d/pretrain_data-00001-of-00006.tfrecord.tmp-3539-00429397; No space left on "
              "device": "/d/pretrain_data-00001-of-00006.tfrecord",
              "/e/electra/.tmp-1-host-4706/variables/variables_temp/part-0; Disk quota "
              "exceeded": "/e/electra/1",
              "/m/checkpoint.tmp0123456789abcdef0123456789abcdef; No space left on device":
                  "/m/checkpoint",
              "/f/trial_0.partial/model/ckpt_temp/part-0; No space left on device": "/f/trial_0",
              "/g/out.tmp-5406-ab12cd34/ckpt-1_temp/x; No space left on device": "/g/out",
              "/g/hf.tmp-5406-ab12cd34-my_host.lan_3d1219c7c4c5_4026531836/generator/x; No "
              "space left on device": "/g/hf",
              # a user's names that look like ours are theirs
              "/scratch/run_temp/ckpt-20_temp/part-0; No space left on device":
                  "/scratch/run_temp/ckpt-20",
              "/data/exp.partial/model/x; No space left on device": "/data/exp.partial/model/x"}
    for message, path in staged.items():
        assert storage_failure(op_error(tf.errors.ResourceExhaustedError, message)) == (
            "no space", path), message
    assert storage_failure(op_error(tf.errors.PermissionDeniedError, "/m/.running.json.tmp-12-"
                                    "ab12cd34; Read-only file system")) == ("read-only", "/m")
    assert storage_failure(op_error(tf.errors.PermissionDeniedError, "/m; Permission "
                                    "denied")) == ("no permission", "/m")
    # Not a disk's: memory, and a file that is not there.
    assert storage_failure(op_error(tf.errors.ResourceExhaustedError, "OOM when allocating "
                                    "tensor with shape[32,128,30522]")) is None
    assert storage_failure(op_error(tf.errors.NotFoundError, "/x; No such file or "
                                    "directory")) is None
    assert storage_failure(ValueError("No space left on device")) is None
    assert storage_message("no space", "/runs/ckpt-20", "--model_dir") == (
        "no space left on the device writing /runs/ckpt-20; free some space (or choose another "
        "--model_dir) and rerun: what was complete is kept")
    assert storage_message("read-only", "/runs", None) == (
        "/runs is on a read-only file system; choose another place to write to")
    assert storage_message("no permission", "/runs", "--output_dir") == (
        "permission denied for /runs; choose another --output_dir or change its permissions")


def test_a_full_or_read_only_disk_stops_a_build_in_one_line_and_the_rerun_resumes(small_disk):
    disk = small_disk("256k")
    out = f"{disk.path}/data"
    args = [f"--input={DATA}/corpus/persuasion.txt.gz", f"--vocab_file={UNCASED_VOCAB}",
            "--max_seq_length=128", "--num_workers=1"]
    done = run_script("build_pretraining_data.py", *args, f"--output_dir={out}")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert re.fullmatch(
        rf"error: no space left on the device writing {out}/pretrain_data-\d{{5}}-of-\d{{5}}"
        r"\.tfrecord; free some space \(or choose another --output_dir\) and rerun: what was "
        r"complete is kept", done.stderr.strip().splitlines()[-1]), done.stderr
    assert not [n for n in os.listdir(out) if ".tmp-" in n]  # the part-written shard is gone
    disk.resize("64m")
    done = run_script("build_pretraining_data.py", *args, f"--output_dir={out}")
    assert done.returncode == 0, done.stderr
    assert os.path.exists(f"{out}/metadata.json")
    disk.read_only()
    done = run_script("build_pretraining_data.py", *args, f"--output_dir={disk.path}/other")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: {disk.path}/other is on a read-only file system; choose another --output_dir"]


def test_running_out_of_memory_is_named_by_what_could_not_be_allocated():
    """TensorFlow's out-of-memory errors as raised eagerly, in an XLA-compiled function and
    in a graph (its message's first line is another: "Graph execution error:"). A CPU's
    allocator refuses a tensor larger than the machine's memory (after 10 s of waiting for
    memory to be freed), as a GPU's does one larger than what is free."""
    import tensorflow as tf

    from electra_tf.errors import out_of_memory
    huge = 2**38  # floats: 1 TiB
    with pytest.raises(tf.errors.ResourceExhaustedError) as eager:
        tf.zeros([huge])
    assert out_of_memory(eager.value) == f"a float tensor of shape [{huge}] on CPU:0"
    with pytest.raises(tf.errors.ResourceExhaustedError) as compiled:
        tf.function(lambda x: tf.reduce_sum(tf.tile(x, [2**18, 2**18])), jit_compile=True)(
            tf.ones([64, 64]))
    assert re.fullmatch(r"1,048,57\d\.\d GiB for an XLA-compiled step",
                        out_of_memory(compiled.value))
    with pytest.raises(tf.errors.ResourceExhaustedError) as full:
        tf.io.write_file("/dev/full", "x" * 100_000)
    assert out_of_memory(full.value) is None  # a full disk: storage_failure's
    assert out_of_memory(MemoryError()) is None
    later = tf.errors.ResourceExhaustedError(None, None, "Graph execution error:\n\nDetected at "
                                             "node ones\n\n" + str(eager.value))
    assert out_of_memory(later) == f"a float tensor of shape [{huge}] on CPU:0"
    # A TPU's two messages (as reported in tensorflow/tpu#385 and google-research/albert#168)
    tpu = tf.errors.ResourceExhaustedError(None, None, "Compilation failure: Ran out of memory "
                                           "in memory space hbm. Used 17.62G of 15.48G hbm. "
                                           "Exceeded hbm capacity by 2.14G.")
    assert out_of_memory(tpu) == "17.62G of the TPU's 15.48G HBM for the compiled step"
    reserve = tf.errors.ResourceExhaustedError(None, None, "Attempting to reserve 12.29G at the "
                                               "bottom of memory. That was not possible.")
    assert out_of_memory(reserve) == "12.29G of TPU memory for the compiled step"


def test_a_lost_worker_is_named_by_why_the_collectives_stopped():
    """The messages of TensorFlow's UnavailableError when another worker of a cluster died
    (as the runs of test_pretraining's cluster tests raise them); one from a storage service
    is not a lost worker."""
    import tensorflow as tf

    from electra_tf.errors import lost_worker

    def unavailable(text):
        return tf.errors.UnavailableError(None, None, text)

    assert lost_worker(unavailable(
        "Graph execution error:\n\nDetected at node CollectiveReduceV2_1 defined at ...\n"
        "Collective ops is aborted by: recvmsg:Connection reset by peer\nAdditional GRPC "
        "error information from remote target /job:worker/replica:0/task:1")) == (
        "recvmsg:Connection reset by peer")
    assert lost_worker(unavailable(
        "{{function_node __wrapped__CollectiveReduceV2}} Collective ops is aborted by: Error "
        "reported from /job:worker/task:1: The following tasks are unhealthy (stopped sending "
        "heartbeats):\n/job:worker/replica:0/task:1\nThe tasks have crashed. Check the task "
        "logs")) == ("Error reported from /job:worker/task:1: The following tasks are "
                     "unhealthy (stopped sending heartbeats): /job:worker/replica:0/task:1")
    assert lost_worker(unavailable(
        "Collective ops is aborted by: Failed to send RPC to coordination service. Either the "
        "leader task was preempted")) == "Failed to send RPC to coordination service"
    assert lost_worker(unavailable("Socket closed (from /job:worker/replica:0/task:1)")) == (
        "Socket closed (from /job:worker/replica:0/task:1)")
    for storage in ("Error executing an HTTP request: libcurl code 6", "recvmsg:Connection "
                    "reset by peer"):  # gs:// (a one-worker run's)
        assert lost_worker(unavailable(storage)) is None
    assert lost_worker(tf.errors.InternalError(None, None, "Collective ops is aborted by: "
                                                           "x")) is None


# ------------------------------------------------------------------------------ paths


def test_a_home_relative_path_is_expanded(tmp_path):
    """`--output_dir=~/data`: the shell leaves the `~` after `=` as it is, so the build went
    into a folder named `~` in the working directory."""
    home, elsewhere = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    elsewhere.mkdir()
    done = run_script("build_pretraining_data.py", f"--input={DATA}/corpus/persuasion.txt.gz",
                      "--vocab_file=~/vocab.txt", "--output_dir=~/data",
                      "--max_seq_length=128", env={"HOME": str(home)}, cwd=str(elsewhere))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: vocab file {home}/vocab.txt does not exist; pass --vocab_file=PATH to a "
        "WordPiece vocab (data/vocab/bert_uncased.txt ships with the project)")
    (home / "vocab.txt").write_bytes(open(UNCASED_VOCAB, "rb").read())
    for name in ("persuasion", "northangerabbey"):
        (home / f"{name}.txt.gz").write_bytes(open(f"{DATA}/corpus/{name}.txt.gz", "rb").read())
    done = run_script("build_pretraining_data.py",
                      "--input=~/persuasion.txt.gz,~/northangerabbey.txt.gz",
                      "--vocab_file=~/vocab.txt", "--output_dir=~/data",
                      "--max_seq_length=128", env={"HOME": str(home)}, cwd=str(elsewhere))
    assert done.returncode == 0, done.stderr
    metadata = json.loads((home / "data" / "metadata.json").read_text())
    inputs = metadata["build_config"]["inputs"]
    assert sorted(inputs) == [f"{home}/northangerabbey.txt.gz", f"{home}/persuasion.txt.gz"]
    assert os.listdir(elsewhere) == []


def test_a_model_dir_with_a_wildcard_is_refused(tmp_path):
    """TensorFlow finds checkpoint files (and CheckpointManager those to delete) by patterns
    built from the model dir: `run[1]` restarted a finished run from step 0, `a*b` deleted
    another run's checkpoints."""
    from electra_tf.errors import UserInputError
    from electra_tf.training import checkpoints
    for name, char in (("run[1]", "["), ("a*b", "*"), ("a?b", "?")):
        done = run_script("run_pretraining.py", "--gin_file=tiny.gin",
                          f"--model_dir={tmp_path}/{name}", f"--train_data={tmp_path}/x",
                          "--dry_run")
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            f"error: --model_dir={tmp_path}/{name} has '{char}' in its path, which TensorFlow "
            "reads as a wildcard where it looks for checkpoint files; choose a path without "
            "* ? ["]
        assert not os.path.exists(tmp_path / name)
    # A SavedModel's variables are a checkpoint too: TensorFlow's loader could not read one.
    from electra_tf.export import saved_model
    with pytest.raises(UserInputError) as error:
        saved_model.export(f"{tmp_path}/m", f"{tmp_path}/exports[1]", kind="discriminator")
    assert str(error.value) == (
        f"--export_dir={tmp_path}/exports[1] --model_name=electra has '[' in its path, which "
        "TensorFlow reads as a wildcard where it looks for checkpoint files; choose a path "
        "without [")
    with pytest.raises(UserInputError) as error:  # "*" and "?" it reads: not refused
        saved_model.export(f"{tmp_path}/m", f"{tmp_path}/w*x", kind="discriminator")
    assert "wildcard" not in str(error.value)
    (tmp_path / "run[1]").mkdir()
    with pytest.raises(UserInputError) as error:
        checkpoints.latest_checkpoint(f"{tmp_path}/run[1]")
    assert str(error.value) == (
        f"{tmp_path}/run[1] has '[' in its path, which TensorFlow reads as a wildcard where it "
        "looks for checkpoint files; rename it, or pass a symlink to it, without * ? [")


_HELD = """
import hashlib, os, signal, sys, time
sys.path.insert(0, {root!r})
from electra_tf import cli
def main(argv):
    try:
        print("ready", flush=True)
        if argv[1:] == ["held"]:  # one C call that keeps the main thread (as an XLA compile)
            hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10**9)
        elif argv[1:] == ["wrapped"]:  # code that raises its own error in the signal's place
            try:
                time.sleep(60)
            except BaseException:
                import traceback
                traceback.print_exc()  # as TensorFlow's C++ does (PyErr_Print) on its way out
                raise RuntimeError("stopped while busy") from None
        elif argv[1] in ("deleting", "deleting-ctrl-c"):  # found inside a __del__ (by gc)
            number = signal.SIGTERM if argv[1] == "deleting" else signal.SIGINT
            signal.signal(signal.SIGINT, signal.default_int_handler)  # (not inherited)
            class Collected:
                def __del__(self):
                    os.kill(os.getpid(), number)
                    deadline = time.time() + 2
                    while time.time() < deadline:  # Python code: the handler runs here
                        pass
            Collected()
            print("went on", flush=True)
            time.sleep(60)
        else:
            time.sleep(60)
    finally:
        print("cleaned up", flush=True)
    return 0
cli.run(main, handles_sigterm=True, positional=True)  # (the mode)
"""


@pytest.mark.parametrize("mode", ["sleeps", "held", "wrapped", "deleting", "deleting-ctrl-c"])
def test_sigterm_ends_a_script_even_inside_one_long_call(mode):
    """A script that handles SIGTERM (the builder, fine-tuning) ends with its one line and
    exit code 143: cleaning up, where its main thread is back in Python (also where the
    code it interrupted raised another error in its place: a traceback and exit code 1,
    seen once in fine-tuning's SIGTERM test, or printed a traceback of it: seen in
    export's, "SystemError: <built-in function __import__> returned a result with an
    exception set"); or, where that thread is inside one long
    call, from the watcher thread once the grace period is over (it waited for the call to
    return, minutes for an XLA compilation); or, where the signal found the main thread in a
    `__del__` (Python reports an exception raised there and goes on), at once: the script
    ran to its end, exit code 0, its stderr muted; so does Ctrl-C there, which printed a
    traceback and was ignored."""
    import signal
    import time

    from electra_tf import cli
    from electra_tf.training import signals
    held = mode == "held"
    process = subprocess.Popen([sys.executable, "-c", _HELD.format(root=ROOT), mode],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n"
    deleting = mode.startswith("deleting")  # (which signals itself)
    if not deleting:
        time.sleep(1)  # inside the call
        process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    line, code = ((signals.INTERRUPTED_LINE, 130) if mode == "deleting-ctrl-c" else
                  (cli.TERMINATED_LINE, 143))
    assert (process.returncode, err) == (code, line + "\n")
    assert out == ("" if held or deleting else "cleaned up\n")


_WORKER = """
import json, os, socket, sys, time
sys.path.insert(0, {root!r})
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ["TF_CONFIG"] = json.dumps({{"cluster": {{"worker": [f"127.0.0.1:{{port}}"]}},
                                      "task": {{"type": "worker", "index": 0}}}})
from electra_tf import cli
def main(argv):
    from electra_tf.training import strategies
    strategy = strategies.create_strategy("multi_worker_mirrored")
    # (TensorFlow's daemon thread checking the peers' health, caught running an op as the
    # interpreter exits, can crash it: seen once under load; not what is tested here)
    strategy.extended._stop_check_health_thread()
    cli.reclaim_sigterm()
    print("ready", flush=True)
    time.sleep(60)
    return 0
cli.run(main, handles_sigterm=True)
"""


def test_sigterm_reaches_a_script_after_a_multi_worker_strategy_is_made():
    """MultiWorkerMirroredStrategy's preemption watcher takes SIGTERM for itself: a
    fine-tuning worker ignored `kill` until the script took it back (reclaim_sigterm)."""
    import signal

    from electra_tf import cli
    process = subprocess.Popen([sys.executable, "-c", _WORKER.format(root=ROOT)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n", process.communicate()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert (process.returncode, err.splitlines()[-1]) == (143, cli.TERMINATED_LINE), err
