"""Reading gin files and bindings: every mistake is one UserInputError naming the binding."""

from pathlib import Path

import pytest

from electra_tf import gin_files
from electra_tf.errors import UserInputError
from electra_tf.finetune import runner  # noqa: F401  (registers the fine-tuning configurables)
from electra_tf.training import pretraining  # noqa: F401  (registers the configurables)


def test_a_misspelled_macro_is_an_error_naming_the_macro_it_meant():
    # gin itself takes NUM_TRAIN_STEP=3 as a new macro and runs with NUM_TRAIN_STEPS' value.
    with pytest.raises(UserInputError, match=r"^--gin_bindings='NUM_TRAIN_STEP=3': no gin file "
                       r"uses the macro NUM_TRAIN_STEP; did you mean NUM_TRAIN_STEPS\? the "
                       r"macros in use: CHECKPOINT_EVERY, .*NUM_TRAIN_STEPS.* "
                       r"\(see gin/tiny.gin\)"):
        gin_files.parse(["tiny.gin"], ["NUM_TRAIN_STEP=3"])
    with pytest.raises(UserInputError, match=r"LEARNING_RATES=1e-4.*did you mean LEARNING_RATE\? "
                       r".*\(see gin/finetune/tiny.gin\)"):
        gin_files.parse(["finetune/tiny.gin"], ["LEARNING_RATES=1e-4"])
    # Macros the files use, and one a later binding uses, are fine.
    gin_files.parse(["tiny.gin"], ["NUM_TRAIN_STEPS=3", "STEPS=2", "STEPS_PER_LOOP=%STEPS"])


def test_a_misspelled_or_unused_macro_in_a_users_file_or_a_multi_line_binding_is_named(
        tmp_path):
    """Only a one-statement binding's macro was checked: one in a user's file (or its
    include), or on a binding's second line, ran with the value it meant to change (a
    fine-tuning file of macros without finetune/'s files: all ignored, the defaults used)."""
    mine = tmp_path / "mine.gin"
    mine.write_text("include 'tiny.gin'\nNUM_TRAIN_STEP = 40\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file={mine}: no gin file uses the "
                                             r"macro NUM_TRAIN_STEP; did you mean "
                                             r"NUM_TRAIN_STEPS\? "):
        gin_files.parse([str(mine)], [])
    outer = tmp_path / "outer.gin"
    outer.write_text(f"include '{mine}'\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file={mine}: no gin file uses"):
        gin_files.parse([str(outer)], [])
    alone = tmp_path / "ft.gin"
    alone.write_text("LEARNING_RATE = 0.5\nTRAIN_BATCH_SIZE = 4\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file={alone}: no gin file uses the macro "
                                             r"TRAIN_BATCH_SIZE; the gin files given use no "
                                             r"macros: give a size's file first"):
        gin_files.parse([str(alone)], [])
    with pytest.raises(UserInputError, match=r"^--gin_bindings='NUM_TRAIN_STEPS=40\\nTRAIN_BATCH_"
                                             r"SIZ=16': no gin file uses the macro "
                                             r"TRAIN_BATCH_SIZ; did you mean TRAIN_BATCH_SIZE\?"):
        gin_files.parse(["tiny.gin"], ["NUM_TRAIN_STEPS=40\nTRAIN_BATCH_SIZ=16"])
    # A user's file of macros after the size file, which uses them, is fine.
    mine.write_text("NUM_TRAIN_STEPS = 40\n")
    gin_files.parse(["tiny.gin", str(mine)], [])


def test_a_binding_the_script_does_not_read_is_refused():
    """A scoped binding changed nothing (no configurable is called in a scope); fine-tuning
    accepted pre-training's bindings (pretrainer.num_layers=1: the same predictions) and
    pre-training named fine-tuning's as an unknown configurable."""
    import gin
    with pytest.raises(UserInputError, match=r"^foo/pretrainer.num_layers: this project calls "
                                             r"its configurables in no gin scope, so a scoped "
                                             r"binding changes nothing; drop 'foo/'$"):
        gin_files.parse(["tiny.gin"], ["foo/pretrainer.num_layers=1"])
    for bindings in (["pretrainer.dropout_rate=0.0"], ["pretraining.mask_prob=0.3"]):
        gin_files.parse(["finetune/tiny.gin"], bindings)
        with pytest.raises(UserInputError, match=rf"^{bindings[0].split('=')[0]} is a "
                                                 r"pre-training setting, which fine-tuning does "
                                                 r"not read \(it builds the model the "
                                                 r"checkpoint's model_info.json describes\); drop "
                                                 r"it \(fine-tuning's own: gin/finetune/, "
                                                 r"finetuning.\*\)$"):
            gin_files.check_read_by("fine-tuning")
    gin_files.parse(["tiny.gin"], ["finetuning.head_dropout=0.2"])
    with pytest.raises(UserInputError, match=r"^finetuning.head_dropout is a fine-tuning "
                                             r"setting, which pre-training does not read "
                                             r"\(run_finetuning.py does\); drop it$"):
        gin_files.check_read_by("pre-training")
    for name, example in (("tiny.gin", "finetune/tiny.gin"), ("pretraining.gin",
                                                               "finetune/small.gin"),
                          ("ablations/mlm.gin", "finetune/small.gin")):
        with pytest.raises(UserInputError, match=rf"^--gin_file={name} sets up pre-training; "
                                                 r"fine-tuning's files are in gin/finetune/ "
                                                 rf"\(e.g. --gin_file={example}\)$"):
            gin_files.check_finetuning_files(["finetune/base.gin", name])
    gin_files.check_finetuning_files(["finetune/base.gin"])
    # (in run_pretraining.py's process fine-tuning's configurable is not registered)
    assert gin_files._other_script(ValueError("No configurable matching 'finetuning'.")) == (
        "finetuning.* are fine-tuning settings, which pre-training does not read "
        "(run_finetuning.py does); drop it")
    gin.clear_config()


def test_a_value_that_is_not_a_literal_and_an_unknown_name_say_which():
    with pytest.raises(UserInputError, match=r"^--gin_bindings='NUM_TRAIN_STEPS=abc': the value "
                       r"is not a Python literal; write a number, .*quoted string"):
        gin_files.parse(["tiny.gin"], ["NUM_TRAIN_STEPS=abc"])
    with pytest.raises(UserInputError, match=r"^--gin_bindings='finetuning.nope=1': .*nope.*; "
                       r"check the name against the gin files \(e.g. gin/finetune/small.gin\)"):
        gin_files.parse(["finetune/small.gin"], ["finetuning.nope=1"])
    # A value gin cannot parse (full-width digits, smart quotes, two values) is not a name to
    # check (it ended "check the name against the gin files").
    for binding, odd in (("NUM_TRAIN_STEPS = ４０", " (４ ０ are not: digits and quotes"),
                         ("OBJECTIVE = “mlm”", " (“ ” are not: digits and quotes"),
                         ("NUM_TRAIN_STEPS = 4 4", ""),
                         ("OBJECTIVE = 'électra' 2", "")):  # (é: a letter, fine in quotes)
        with pytest.raises(UserInputError) as error:
            gin_files.parse(["tiny.gin"], [binding])
        message = str(error.value).splitlines()[0]
        assert message.startswith(f"--gin_bindings={binding!r}: ") and (
            "; write NAME = VALUE, the name as the gin files give it, the value a number, "
            "True/False/None, a quoted string ('...'), a list or a %MACRO"
            f"{', in ASCII' if odd else ''}{odd}") in message, message
        assert "check the name" not in message


def test_an_ablation_file_must_follow_a_size_file():
    """Before the size file (or alone) an ablation's OBJECTIVE was overwritten (or bound
    nothing) and the run trained plain ELECTRA without a word."""
    import gin
    for files in (["ablations/mlm.gin", "small.gin"], ["ablations/electric.gin"]):
        with pytest.raises(UserInputError, match=rf"^--gin_file={files[0]} changes a model that "
                                                 r"a size file sets up .* give e.g. "
                                                 rf"--gin_file=small.gin --gin_file={files[0]}$"):
            gin_files.parse(files, [])
    gin_files.parse(["small.gin", "ablations/mlm.gin"], [])
    assert gin.query_parameter("%OBJECTIVE") == "mlm"


def test_an_undefined_macro_is_an_error_naming_it():
    with pytest.raises(UserInputError, match=r"^%NUM_TRAIN_STEP \(did you mean "
                                             r"%NUM_TRAIN_STEPS\?\) is used but no gin file or "
                                             r"--gin_bindings defines it"):
        gin_files.parse(["tiny.gin"], ["pretraining.num_train_steps = %NUM_TRAIN_STEP"])


@pytest.mark.parametrize("files, message", [
    (["tiny.gin", "ablations/electra_15.gin", "ablations/mlm.gin"],
     r"^--gin_file=ablations/mlm.gin sets OBJECTIVE = 'mlm', which "
     r"--gin_file=ablations/electra_15.gin set to 'electra_15': they are different studies"),
    (["small.gin", "ablations/generator_half.gin", "ablations/sharing_all.gin"],
     r"^--gin_file=ablations/sharing_all.gin sets pretrainer.generator_hidden_fraction = 1.0, "
     r"which --gin_file=ablations/generator_half.gin set to 0.5"),
    (["tiny.gin", "ablations/two_stage.gin", "ablations/adversarial.gin"],
     r"sets pretrainer.algorithm = 'adversarial', which .*two_stage.gin set to 'two_stage'"),
    (["tiny.gin", "ablations/mlm.gin", "ablations/generator_half.gin"],
     r"^--gin_file=ablations/generator_half.gin sets the generator's size, but "
     r"--gin_file=ablations/mlm.gin trains no generator \(BERT\): drop "
     r"--gin_file=ablations/generator_half.gin$"),
    (["tiny.gin", "ablations/generator_half.gin", "ablations/uniform_generator.gin"],
     r"^--gin_file=ablations/generator_half.gin sets the generator's size, but "
     r"--gin_file=ablations/uniform_generator.gin replaces tokens uniformly at random, "
     r"without a generator: drop --gin_file=ablations/generator_half.gin$"),
    (["tiny.gin", "ablations/mlm.gin", "small.gin"],
     r"^--gin_file=small.gin is a size file, which sets up a whole run: give it first \(after "
     r"--gin_file=ablations/mlm.gin it sets that file's values back\), and one size file only$"),
    # two size files: a hybrid (small.gin's model with tiny.gin's optimizer.bias_correction)
    (["tiny.gin", "small.gin"],
     r"^--gin_file=small.gin is a size file, which sets up a whole run: give it first \(after "
     r"--gin_file=tiny.gin it sets that file's values back\), and one size file only$"),
])
def test_ablation_files_that_undo_each_other_are_refused(files, message):
    with pytest.raises(UserInputError, match=message):
        gin_files.parse(files, [])


def test_a_generator_size_file_for_a_model_another_file_leaves_without_one(tmp_path):
    """generator_half.gin after a user's file (a run's operative_config.gin) or a binding
    that makes the model BERT or its generator uniform: refused by the values read (the
    check compared ablation files only, and the size was taken without a word)."""
    mine = tmp_path / "operative_config.gin"
    mine.write_text("OBJECTIVE = 'mlm'\n")
    for files, bindings, removed in (
            (["tiny.gin", str(mine)], [], r"OBJECTIVE='mlm' trains no generator \(BERT\)"),
            (["tiny.gin"], ["pretrainer.uniform_generator = True"],
             r"pretrainer.uniform_generator=True replaces tokens uniformly at random, without "
             r"a generator")):
        with pytest.raises(UserInputError, match=(
                rf"^--gin_file=ablations/generator_half.gin sets the generator's size, but "
                rf"{removed}: drop --gin_file=ablations/generator_half.gin$")):
            gin_files.parse(files + ["ablations/generator_half.gin"], bindings)
    gin_files.parse(["tiny.gin", str(mine)], [])  # (its size file's fraction: no file's)


def test_ablation_files_of_different_studies_combine(tmp_path):
    import gin
    gin_files.parse(["small.gin", "ablations/sharing_none.gin",
                     "ablations/learned_loss_weights.gin", "ablations/electra_15.gin"], [])
    assert (gin.query_parameter("pretrainer.sharing"), gin.query_parameter("%OBJECTIVE"),
            gin.query_parameter("pretrainer.learn_loss_weights")) == ("none", "electra_15", True)
    # A user's own file after them (not a size file) sets what it sets.
    mine = tmp_path / "my_lr.gin"
    mine.write_text("LEARNING_RATE = 3e-4\n")
    gin_files.parse(["small.gin", "ablations/mlm.gin", str(mine)], [])
    assert gin.query_parameter("%LEARNING_RATE") == 3e-4


def test_a_users_file_that_undoes_an_ablation_is_refused(tmp_path):
    """A user's file that undoes an ablation file's value (a copy of a size file after it,
    through the pretraining.gin it includes; a run's operative_config.gin; a file binding
    the parameter an ablation's macro feeds, before or after it) trained the other variant
    without a word; the same value (through a macro too), a literal binding before the
    ablation file that sets it, or a binding after them all, is fine."""
    import gin
    copy = tmp_path / "my_tiny.gin"
    copy.write_text(open(gin_files.resolve("tiny.gin"), encoding="utf-8").read())
    with pytest.raises(UserInputError) as info:
        gin_files.parse(["tiny.gin", "ablations/mlm.gin", str(copy)], [])
    assert str(info.value) == (
        f"--gin_file={copy} sets OBJECTIVE = 'electra', which --gin_file=ablations/mlm.gin "
        "sets to 'mlm': drop it from that file (a run's operative_config.gin goes before the "
        "ablation files), or bind the value you want with --gin_bindings")
    operative = tmp_path / "operative_config.gin"  # a sharing 'all' run's, as gin writes it
    operative.write_text("# Parameters for pretrainer:\npretrainer.objective = %OBJECTIVE\n"
                         "pretrainer.sharing = 'all'\nOBJECTIVE = 'electra'\n")
    with pytest.raises(UserInputError, match=r"^--gin_file=.*/operative_config.gin sets "
                                             r"pretrainer.sharing = 'all', which --gin_file="
                                             r"ablations/sharing_none.gin sets to 'none': "):
        gin_files.parse(["tiny.gin", "ablations/sharing_none.gin", str(operative)], [])
    direct = tmp_path / "objective.gin"  # as an import's operative_config.gin binds it
    direct.write_text("pretrainer.objective = 'electra'\n")
    for files in (["tiny.gin", "ablations/mlm.gin", str(direct)],
                  ["tiny.gin", str(direct), "ablations/mlm.gin"]):
        with pytest.raises(UserInputError) as info:
            gin_files.parse(files, [])
        assert str(info.value).startswith(
            f"--gin_file={direct} sets pretrainer.objective = 'electra', which --gin_file="
            "ablations/mlm.gin sets to 'mlm' (as OBJECTIVE): drop it from that file"), info.value
    same = tmp_path / "fraction.gin"
    same.write_text("FRACTION = 1.0\npretrainer.generator_hidden_fraction = %FRACTION\n")
    gin_files.parse(["tiny.gin", "ablations/sharing_all.gin", str(same)], [])
    gin_files.parse(["tiny.gin", "ablations/sharing_all.gin", str(operative)], [])
    gin_files.parse(["tiny.gin", str(operative), "ablations/sharing_none.gin"], [])
    assert gin.query_parameter("pretrainer.sharing") == "none"
    gin_files.parse(["tiny.gin", "ablations/mlm.gin"], ["OBJECTIVE = 'electra'"])
    assert gin.query_parameter("%OBJECTIVE") == "electra"


@pytest.mark.parametrize("binding, message", [
    ("pretraining.seed = 3", r"^--gin_bindings='pretraining.seed = 3': pretraining.seed is not "
                             r"set by gin; pass --seed$"),
    ("optimizer.num_train_steps = 500", r"optimizer.num_train_steps is not set by gin; the "
                                        r"schedule spans the run: bind NUM_TRAIN_STEPS"),
    ("pretrainer.num_layers = [", r"^--gin_bindings='pretrainer.num_layers = \[': a bracket or "
                                  r"quote is not closed"),
    ("pretraining/optimizer.aggregate_gradients = True",  # scoped
     r"optimizer.aggregate_gradients is not set by gin; the trainer sets it"),
])
def test_a_binding_gin_cannot_take_says_what_to_do(binding, message):
    with pytest.raises(UserInputError, match=message):
        gin_files.parse(["tiny.gin"], [binding])


def test_an_unclosed_bracket_or_a_denylisted_name_in_a_gin_file_is_one_line(tmp_path):
    path = tmp_path / "mine.gin"
    path.write_text("pretrainer.num_layers = (3\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file={path}: a bracket or quote is not "
                                             r"closed; fix the file"):
        gin_files.parse(["tiny.gin", str(path)], [])
    path.write_text("optimizer.num_train_steps = 500\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file={path}: optimizer.num_train_steps "
                                             r"is not set by gin; the schedule spans the run"):
        gin_files.parse(["tiny.gin", str(path)], [])


def test_a_users_gin_file_includes_its_neighbours_and_ours(tmp_path, monkeypatch):
    """`include 'common.gin'` in a user's file finds common.gin beside it (or in the working
    directory), and `include 'tiny.gin'` ours in gin/, whatever the working directory."""
    import gin
    folder = tmp_path / "cfg dir ü"
    folder.mkdir()
    (folder / "my [x].gin").write_text("include 'tiny.gin'\ninclude 'common.gin'\n")
    (folder / "common.gin").write_text("NUM_TRAIN_STEPS = 7\n")
    (tmp_path / "here.gin").write_text("WARMUP_STEPS = 3\n")
    (folder / "uses_cwd.gin").write_text("include 'tiny.gin'\ninclude 'here.gin'\n")
    monkeypatch.chdir(tmp_path)
    try:
        gin_files.parse([str(folder / "my [x].gin")], [])
        assert gin.query_parameter("%NUM_TRAIN_STEPS") == 7
        assert gin.query_parameter("pretrainer.hidden_size") == 128  # tiny.gin's, from gin/
        gin_files.parse([str(folder / "uses_cwd.gin")], [])
        assert gin.query_parameter("%WARMUP_STEPS") == 3
        with pytest.raises(UserInputError, match=r"uses_cwd.gin: Unable to open file: "
                                                 r"here.gin"):
            monkeypatch.chdir(folder)
            gin_files.parse([str(folder / "uses_cwd.gin")], [])
    finally:
        gin.clear_config()
    assert gin.config._LOCATION_PREFIXES == [""]  # the search paths put back
    monkeypatch.chdir(gin_files.GIN_DIR)  # gin/'s own tiny.gin, found twice, is one file
    gin_files.parse([str(folder / "my [x].gin")], [])
    gin.clear_config()
    # A base.gin of theirs beside the file, and ours: which one is meant is not guessed.
    (folder / "base.gin").write_text("TRAIN_BATCH_SIZE = 7\n")
    (folder / "mine.gin").write_text('include "base.gin"\n')
    with pytest.raises(UserInputError) as error:
        gin_files.parse([str(folder / "mine.gin")], [])
    assert str(error.value) == (
        f"--gin_file={folder}/mine.gin includes 'base.gin', which is both {folder}/base.gin "
        "and the project's gin/base.gin (read first); include yours by its full path, or "
        "rename it")


def test_a_gin_file_on_an_object_store_is_refused_saying_to_copy_it():
    """gin reads local files: a gs:// gin file (ram:// stands for it) was 'not found'
    although it is there."""
    import tensorflow as tf
    tf.io.gfile.makedirs("ram://gin_test")
    tf.io.gfile.copy(gin_files.resolve("tiny.gin"), "ram://gin_test/tiny.gin", overwrite=True)
    with pytest.raises(UserInputError, match=r"^--gin_file=ram://gin_test/tiny.gin: gin files "
                       r"are read from this machine's disk; copy it here \(with the files it "
                       r"includes\) and pass its path$"):
        gin_files.parse(["ram://gin_test/tiny.gin"], [])


def test_a_users_file_before_the_size_file_is_refused(tmp_path):
    """It was overwritten without a word (NUM_TRAIN_STEPS = 40 before tiny.gin ran 2000)."""
    mine = tmp_path / "mine.gin"
    mine.write_text("NUM_TRAIN_STEPS = 40\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file=tiny.gin is a size file, which sets "
                                             rf"up a whole run: give it first \(after "
                                             rf"--gin_file={mine} it sets"):
        gin_files.parse([str(mine), "tiny.gin"], [])
    gin_files.parse(["tiny.gin", str(mine)], [])
    import gin
    assert gin.query_parameter("%NUM_TRAIN_STEPS") == 40
    gin.clear_config()


def test_gin_files_that_are_not_text_loop_or_import_are_one_line(tmp_path):
    """Each was a traceback (a RecursionError of 3,000 lines, a UnicodeDecodeError, a
    ModuleNotFoundError) or gin's "Unexpected token" / "Unable to open file"."""
    import gin
    looped, back = tmp_path / "a.gin", tmp_path / "b.gin"
    looped.write_text(f"include 'tiny.gin'\ninclude '{back}'\n")
    back.write_text(f"include '{looped}'\n")
    latin = tmp_path / "latin.gin"
    latin.write_bytes(b"include 'tiny.gin'\n# r\xe9sum\xe9\n")
    bom = tmp_path / "bom.gin"
    bom.write_bytes(b"\xef\xbb\xbfinclude 'tiny.gin'\n")
    imports = tmp_path / "imports.gin"
    imports.write_text("import t5.models.mesh_transformer\ninclude 'tiny.gin'\n")
    including = tmp_path / "including.gin"
    including.write_text("include 'bom.gin'\nNUM_TRAIN_STEPS = 40\n")
    (tmp_path / "sub").mkdir()
    folder = tmp_path / "folder.gin"
    folder.write_text("include 'tiny.gin'\ninclude 'sub'\n")
    for files, bindings, message in (
            ([looped], [], rf"^--gin_file={looped}: its includes go round in a loop \(a file "
                           r"includes itself, directly or through another\); remove the "
                           r"include that closes it$"),
            ([latin], [], rf"^--gin_file={latin} is not UTF-8 text \(byte 22\); pass a gin "
                          r"file, saved as UTF-8$"),
            ([bom], [], rf"^--gin_file={bom} begins with a byte-order mark \(saved as \"UTF-8 "
                        r"with BOM\"\), which gin cannot read; save it as UTF-8 without one$"),
            ([imports], [], rf"^--gin_file={imports}: it imports t5, which is not installed "
                            r"here; drop the import \(this project's settings need none\)$"),
            ([tmp_path], [], rf"^--gin_file={tmp_path} is a folder; pass a gin file \(e.g. "
                             rf"{tmp_path}/operative_config.gin of a model dir\)$"),
            # (a file of theirs that one includes: as given; it was gin's "Unexpected token")
            ([including], [], rf"^{bom} \(included by --gin_file={including}\) begins with a "
                              r"byte-order mark \(saved as \"UTF-8 with BOM\"\), which gin "
                              r"cannot read; save it as UTF-8 without one$"),
            ([folder], [], rf"^{tmp_path}/sub \(included by --gin_file={folder}\) is a folder; "
                           r"pass a gin file"),
            (["tiny.gin"], ["NUM_TRAIN_STEPS=%NUM_TRAIN_STEPS"],
             r"^the macro NUM_TRAIN_STEPS = %NUM_TRAIN_STEPS names itself, so it has no value; "
             r"give it one$"),
            (["tiny.gin"], ["X=%Y", "Y=%X", "pretraining.num_train_steps=%X"],
             r"^the macros X = %Y, Y = %X go round in a loop, so none has a value; give one of "
             r"them a value$")):
        with pytest.raises(UserInputError, match=message):
            gin_files.parse([str(f) for f in files], bindings)
    gin.clear_config()


def test_a_generator_size_bound_for_a_model_without_one_is_refused():
    """It was accepted and changed nothing (as ablation files' were refused)."""
    import gin
    for files, bindings, without in (
            (["tiny.gin", "ablations/mlm.gin"], ["pretrainer.generator_hidden_fraction=0.5"],
             r"OBJECTIVE='mlm' trains no generator \(BERT\)"),
            (["tiny.gin"], ["OBJECTIVE='mlm'\npretrainer.generator_layers_fraction=0.5"],
             r"OBJECTIVE='mlm' trains no generator \(BERT\)"),
            (["tiny.gin", "ablations/uniform_generator.gin"],
             ["pretrainer.generator_layers_fraction=0.5"], r"pretrainer.uniform_generator=True "
             r"replaces tokens uniformly at random, without a generator")):
        with pytest.raises(UserInputError, match=r"^--gin_bindings=.* sets the generator's size, "
                                                 rf"but {without}: drop it$"):
            gin_files.parse(files, bindings)
    gin_files.parse(["tiny.gin", "ablations/mlm.gin"], [])  # (tiny.gin's own binding of it)
    gin_files.parse(["tiny.gin"], ["pretrainer.generator_hidden_fraction=0.5"])
    gin.clear_config()


def test_smaller_authoring_slips_get_a_fitting_line(tmp_path, monkeypatch):
    """A bare ablation name suggests its path (it listed every file); a binding ending in
    a CRLF script's carriage return is read ("Expected newline"); an indented binding that
    undoes an ablation names its own file (it blamed gin/tiny.gin); gin/pretraining.gin
    alone names every macro it lacks at once (one a run, nine runs)."""
    import gin
    with pytest.raises(UserInputError, match=r"^--gin_file=mlm.gin not found, here or in .*; "
                                             r"did you mean ablations/mlm.gin\?$"):
        gin_files.parse(["tiny.gin", "mlm.gin"], [])
    gin_files.parse(["tiny.gin"], ["NUM_TRAIN_STEPS=40\r"])
    assert gin.query_parameter("%NUM_TRAIN_STEPS") == 40
    # An include in a binding is looked up in gin/ as the files' are (it was not, from
    # another working directory, and gin logged "Path not found" first).
    with monkeypatch.context() as patch:
        patch.chdir(tmp_path)
        gin_files.parse(["tiny.gin"], ["include 'ablations/mlm.gin'"])
    assert gin.query_parameter("%OBJECTIVE") == "mlm"
    indented = tmp_path / "indented.gin"
    indented.write_text("  OBJECTIVE = 'electra'\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file={indented} sets OBJECTIVE = "
                                             r"'electra', which --gin_file=ablations/mlm.gin "
                                             r"sets to 'mlm'"):
        gin_files.parse(["tiny.gin", "ablations/mlm.gin", str(indented)], [])
    with pytest.raises(UserInputError, match=r"^the macros %NUM_TRAIN_STEPS, .*%LEARNING_RATE.* "
                                             r"are used but no gin file or --gin_bindings defines "
                                             r"them; give a size's file first \(e.g. small.gin, "
                                             r"or finetune/small.gin for fine-tuning\), which "
                                             r"defines them$"):
        gin_files.parse(["pretraining.gin"], [])
    gin.clear_config()


def test_ablations_a_users_file_includes_are_checked_and_nested_includes_found(tmp_path):
    """Through a user's file's include the ablation checks were bypassed (mlm.gin before
    tiny.gin trained ELECTRA; two objectives; a generator size for BERT); a file included
    from a subfolder did not find the files beside it."""
    import gin
    mine = tmp_path / "mine.gin"
    for includes, message in (
            (["ablations/mlm.gin", "tiny.gin"],
             rf"^--gin_file=ablations/mlm.gin \(included by {mine}\) changes a model that a size "
             r"file sets up"),
            (["tiny.gin", "ablations/electra_15.gin", "ablations/mlm.gin"],
             rf"^--gin_file=ablations/mlm.gin \(included by {mine}\) sets OBJECTIVE = 'mlm', "
             rf"which --gin_file=ablations/electra_15.gin \(included by {mine}\) set to "
             r"'electra_15'"),
            (["tiny.gin", "ablations/mlm.gin", "ablations/generator_half.gin"],
             rf"^--gin_file=ablations/generator_half.gin \(included by {mine}\) sets the "
             rf"generator's size, but --gin_file=ablations/mlm.gin \(included by {mine}\) "
             rf"trains no generator \(BERT\): drop the include of ablations/generator_half.gin "
             rf"from {mine}$")):
        mine.write_text("".join(f"include '{name}'\n" for name in includes))
        with pytest.raises(UserInputError, match=message):
            gin_files.parse([str(mine)], [])
    # (a user's file making the model BERT, then an included size: named as included)
    bert = tmp_path / "operative_config.gin"
    bert.write_text("OBJECTIVE = 'mlm'\n")
    mine.write_text("include 'ablations/generator_half.gin'\n")
    with pytest.raises(UserInputError, match=(
            rf"^--gin_file=ablations/generator_half.gin \(included by {mine}\) sets the "
            rf"generator's size, but OBJECTIVE='mlm' trains no generator \(BERT\): drop the "
            rf"include of ablations/generator_half.gin from {mine}$")):
        gin_files.parse(["tiny.gin", str(bert), str(mine)], [])
    # Through a file of theirs that another includes: named by the file whose line it is.
    theirs = tmp_path / "theirs.gin"
    theirs.write_text("include 'ablations/generator_half.gin'\n")
    mine.write_text(f"include '{theirs}'\n")
    with pytest.raises(UserInputError, match=(
            rf"^--gin_file=ablations/generator_half.gin \(included by {theirs}\) sets the "
            rf"generator's size, but OBJECTIVE='mlm' trains no generator \(BERT\): drop the "
            rf"include of ablations/generator_half.gin from {theirs}$")):
        gin_files.parse(["tiny.gin", str(bert), str(mine)], [])
    mine.write_text("include 'tiny.gin'\ninclude 'ablations/mlm.gin'\n")
    gin_files.parse([str(mine)], [])
    assert gin.query_parameter("%OBJECTIVE") == "mlm"
    with pytest.raises(UserInputError, match=rf"^--gin_file=tiny.gin \(included by {mine}\) is "
                                             r"a size file, which sets up a whole run: give it "
                                             r"first \(after --gin_file=small.gin it sets"):
        gin_files.parse(["small.gin", str(mine)], [])
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.gin").write_text("include 'sibling.gin'\n")
    (tmp_path / "sub" / "sibling.gin").write_text("NUM_TRAIN_STEPS = 40\n")
    mine.write_text("include 'tiny.gin'\ninclude 'sub/inner.gin'\n")
    gin_files.parse([str(mine)], [])
    assert gin.query_parameter("%NUM_TRAIN_STEPS") == 40
    gin.clear_config()


def test_review_cases_of_includes_and_macros(tmp_path):
    """A run's operative_config.gin (or a copy of a size file) with a binding of a parameter
    its macro fed was refused as a misspelt macro; a typo in a file the user's file includes
    from theirs, an indented include of an ablation, a size file included after the file's
    own bindings and a scoped macro were accepted; an included size file given twice was
    named as given."""
    import gin
    copy = tmp_path / "copy_of_tiny.gin"
    copy.write_text((Path(gin_files.GIN_DIR) / "tiny.gin").read_text())
    gin_files.parse([str(copy)], ["pretraining.num_train_steps=5"])
    mine = tmp_path / "lr.gin"
    mine.write_text("MY_LR = 1e-4\noptimizer.learning_rate = %MY_LR\n")
    gin_files.parse(["tiny.gin", str(mine)], ["optimizer.learning_rate=1e-3"])
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.gin").write_text("NUM_TRAIN_STEP = 40\n")
    outer = tmp_path / "a.gin"
    outer.write_text("include 'sub/b.gin'\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file={tmp_path}/sub/b.gin: no gin file "
                                             r"uses the macro NUM_TRAIN_STEP; did you mean "):
        gin_files.parse(["tiny.gin", str(outer)], [])
    indented = tmp_path / "indented.gin"
    indented.write_text("  include 'ablations/mlm.gin'\n")
    with pytest.raises(UserInputError, match=rf"sets OBJECTIVE = 'electra_15', which "
                                             rf"--gin_file=ablations/mlm.gin \(included by "
                                             rf"{indented}\) set to 'mlm'"):
        gin_files.parse(["tiny.gin", str(indented), "ablations/electra_15.gin"], [])
    late = tmp_path / "late.gin"
    late.write_text("NUM_TRAIN_STEPS = 10\ninclude 'tiny.gin'\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file={late} includes tiny.gin after "
                                             r"bindings of its own, which that file would set "
                                             r"back; put the include first$"):
        gin_files.parse([str(late)], [])
    again = tmp_path / "again.gin"
    again.write_text("include 'tiny.gin'\nNUM_TRAIN_STEPS = 10\n")
    with pytest.raises(UserInputError, match=rf"^--gin_file=tiny.gin \(included by {again}\) "
                                             r"is a size file, .* \(after --gin_file=tiny.gin "
                                             r"it sets"):
        gin_files.parse(["tiny.gin", str(again)], [])
    with pytest.raises(UserInputError, match=r"^foo/NUM_TRAIN_STEPS: this project calls its "
                                             r"configurables in no gin scope, so a scoped macro "
                                             r"changes nothing; drop 'foo/'$"):
        gin_files.parse(["tiny.gin"], ["foo/NUM_TRAIN_STEPS=1"])
    gin.clear_config()
