"""Fine-tuning runs and what they write: QA metrics for English and Chinese answers,
results files that are valid JSON, resuming an interrupted multi-trial run, and the
messages of a bad --model_dir or an unknown label."""

import collections
import json
import math
import os
import random
import re
import shutil
import string

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, UNCASED_VOCAB, pretrain
from in_process import run_script


# ------------------------------------------------------------------------------ QA metrics


def _official_normalize(s):
    """The official SQuAD scripts' normalize_answer, copied."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", s)
    return " ".join(s.split())


def _official_squad(prediction, gold):
    """(exact, F1) of the official evaluate-v2.0.py (normalize_answer, get_tokens,
    compute_exact, compute_f1), copied; v1.1's are the same on a non-empty gold."""
    normalize = _official_normalize
    gold_toks, pred_toks = normalize(gold).split(), normalize(prediction).split()
    exact = int(normalize(gold) == normalize(prediction))
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return exact, int(gold_toks == pred_toks)
    if same == 0:
        return exact, 0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return exact, 2 * precision * recall / (precision + recall)


_CMRC_MARKS = ["-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=", "，", "。", "：", "？",
               "！", "“", "”", "；", "’", "《", "》", "……", "·", "、", "「", "」", "（", "）",
               "－", "～", "『", "』"]


def _official_cmrc(prediction, gold):
    """(exact, F1) of the official cmrc2018_evaluate.py (mixed_segmentation with
    rm_punc, remove_punctuation, find_lcs, calc_f1_score, calc_em_score), copied but for
    nltk.word_tokenize, here str.split: the same on the words of these tests."""
    def segments(s):
        s, out, run = s.lower().strip(), [], ""
        for ch in s:
            if ch in _CMRC_MARKS:
                continue
            if re.search(r"[\u4e00-\u9fa5]", ch):
                out.extend(run.split())
                run = ""
                out.append(ch)
            else:
                run += ch
        return out + run.split()

    def lcs(a, b):
        m = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        best = 0
        for i in range(len(a)):
            for j in range(len(b)):
                if a[i] == b[j]:
                    m[i + 1][j + 1] = m[i][j] + 1
                    best = max(best, m[i + 1][j + 1])
        return best

    def strip(s):
        return "".join(ch for ch in s.lower().strip() if ch not in _CMRC_MARKS)
    a, p = segments(gold), segments(prediction)
    same = lcs(a, p)
    f1 = 0 if same == 0 else 2 * (same / len(p)) * (same / len(a)) / (
        same / len(p) + same / len(a))
    return int(strip(gold) == strip(prediction)), f1


ENGLISH = [("The Eiffel-Tower, in PARIS!", "eiffel tower in paris"),
           ("the big red dog", "a red dog"), ("Denver Broncos", "The Denver Broncos"),
           ("\u201cSmart\u201d quotes \u2014 kept", "smart quotes kept"),  # not ASCII: kept
           ("an apple", "The"), ("", "Clara"), ("1,000 km", "1000 km"),
           ("Beyonc\u00e9 Knowles", "beyonce knowles"), ("théâtre", "Théâtre")]
# Answers the official CMRC script and ours read alike (CJK, digits, its marks, spaces).
CHINESE = [("北京", "北京天安门"), ("天安门。", "天安门"), ("2008年北京奥运会", "北京奥运会"),
           ("上海北京", "北京上海"), ("《红楼梦》", "红楼梦"), ("曹雪芹", "高鹗"),
           ("约1000万人", "1000万"), ("iphone 手机", "iphone手机"), ("一、二", "一二三")]


def test_english_qa_scores_stay_the_official_squad_ones():
    from electra_tf.finetune import metrics
    for prediction, gold in ENGLISH:
        exact, f1 = _official_squad(prediction, gold)
        assert metrics.exact_match(prediction, gold) == exact, (prediction, gold)
        assert metrics.token_f1(prediction, gold) == pytest.approx(f1), (prediction, gold)
    golds = {str(i): [g] for i, (_, g) in enumerate(ENGLISH)}
    predictions = {str(i): p for i, (p, _) in enumerate(ENGLISH)}
    # A set with a Chinese answer or two among English ones stays SQuAD's.
    golds["zh"], predictions["zh"] = ["北京"], "北京市"
    assert metrics.qa_style(golds) == "squad"
    scores = metrics.squad_scores(golds, predictions)
    official = [_official_squad(predictions[q], golds[q][0]) for q in golds]
    assert scores["exact"] == pytest.approx(100 * sum(e for e, _ in official) / len(golds))
    assert scores["f1"] == pytest.approx(100 * sum(f for _, f in official) / len(golds))


def _official_v2(golds, predictions, no_answer_probs, threshold):
    """evaluate-v2.0.py's main on {id: gold answers} (get_raw_scores,
    apply_no_ans_threshold, make_eval_dict with the HasAns/NoAns splits, find_best_thresh),
    copied, with its keys as squad_scores names them."""
    has_answer = {q: bool(answers) for q, answers in golds.items()}
    raw = {}
    for q, answers in golds.items():
        answers = [a for a in answers if _official_normalize(a)] or [""]
        raw[q] = [max(_official_squad(predictions[q], a)[i] for a in answers) for i in (0, 1)]
    kept = {q: [float(not has_answer[q])] * 2 if no_answer_probs[q] > threshold else raw[q]
            for q in golds}
    out = {}
    for group, questions in (("", list(golds)),
                             ("has_answer_", [q for q in golds if has_answer[q]]),
                             ("no_answer_", [q for q in golds if not has_answer[q]])):
        for i, name in enumerate(("exact", "f1")):
            if questions:
                out[group + name] = 100.0 * sum(kept[q][i] for q in questions) / len(questions)
    for i, name in enumerate(("exact", "f1")):
        score = best = sum(not has for has in has_answer.values())
        best_threshold = 0.0
        for q in sorted(no_answer_probs, key=lambda q: no_answer_probs[q]):
            score += raw[q][i] if has_answer[q] else (-1 if predictions[q] else 0)
            if score > best:
                best, best_threshold = score, no_answer_probs[q]
        out[f"best_{name}"] = 100.0 * best / len(golds)
        out[f"best_{name}_threshold"] = best_threshold
    return out


def test_squad_2_scores_equal_the_official_scripts_on_random_sets():
    """Every key and value of evaluate-v2.0.py's output, on 2,000 random small sets of
    answers with articles, punctuation and no-answer questions (the has-answer exact match
    was missing, and a question whose gold answer normalises to nothing, answered "", did
    not count towards the best threshold as the script counts it; one whose answer text is
    "", answerable for the script, was counted as a no-answer question); to the last
    digit."""
    from electra_tf.finetune import metrics
    words = ["a", "the", "An", "cat", "dog", "Paris", ",", "red", "Dog!", "the cat",
             "a red dog", "cat, dog", ""]
    rng = random.Random(0)
    for _ in range(2000):
        golds = {f"q{i}": [] if rng.random() < 0.3 else
                 [rng.choice(words) for _ in range(rng.randint(1, 3))]
                 for i in range(rng.randint(1, 6))}
        predictions = {q: rng.choice(words) for q in golds}
        odds = {q: round(rng.random(), 2) for q in golds}
        ours = metrics.squad_scores(golds, predictions, odds, 0.5, style="squad")
        official = _official_v2(golds, predictions, odds, 0.5)
        # (to the last digit: np.mean for the splits differed there)
        assert ours == official, (golds, predictions, odds)


def test_chinese_qa_scores_are_cmrc_2018s_by_character():
    """Whitespace-split, a Chinese answer was one word (F1 0 or 1) and its full-width
    punctuation stayed: "北京" against "北京天安门" scored 0, "天安门。" against "天安门"
    was no exact match."""
    from electra_tf.finetune import metrics
    golds = {"a": ["北京天安门"], "b": ["天安门"], "c": ["北京上海", "上海"], "d": [],
             "e": ["Tim Cook"]}
    predictions = {"a": "北京", "b": "天安门。", "c": "上海北京", "d": "", "e": "Cook"}
    scores = metrics.squad_scores(golds, predictions)
    # a: the longest common run 北京, P 1, R 2/5 -> 4/7; b exact; c: against 上海, P 1/2,
    # R 1 -> 2/3 (against 北京上海 1/2: a run, not a bag); d: no answer, none given;
    # e: Cook of Tim Cook, P 1, R 1/2 -> 2/3.
    assert scores["exact"] == pytest.approx(100 * 2 / 5)
    assert scores["f1"] == pytest.approx(100 * (4 / 7 + 1 + 2 / 3 + 1 + 2 / 3) / 5)
    assert scores["no_answer_f1"] == 100.0
    # SQuAD's would give a, b and c 0.
    assert metrics.qa_style(golds) == "cmrc2018"  # 3 of the 4 answered are Chinese
    assert metrics.squad_scores(golds, predictions, style="squad")["f1"] == pytest.approx(
        100 * (0 + 0 + 0 + 1 + 2 / 3) / 5)
    assert metrics.cmrc_tokens("2008年，北京 Olympics！") == [
        "2008", "年", "北", "京", "olympics"]
    for prediction, gold in CHINESE:
        exact, f1 = _official_cmrc(prediction, gold)
        assert metrics.exact_match(prediction, gold, "cmrc2018") == exact, (prediction, gold)
        assert metrics.token_f1(prediction, gold, "cmrc2018") == pytest.approx(f1), (
            prediction, gold)


# ------------------------------------------------------------------------------ messages


def write_csv(path, header, rows):
    import csv
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


REVIEWS = [("positive", "A warm, funny film."), ("negative", "Dull and far too long."),
           ("positive", "The cast is superb."), ("negative", "I left early."),
           ("positive", "Lovely to look at.\nAnd to hear."), ("negative", "A mess.")] * 2


def test_an_unknown_label_names_the_line_and_the_id(tmp_path):
    """A dev file with an id column: its example's guid is the id, which the message gave
    as a line number ("line ab-7")."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import tasks
    train = write_csv(tmp_path / "train.csv", ["label", "text"], REVIEWS)
    # Line 2-3 is one record (a quoted line break): the unknown label is on line 5.
    dev = write_csv(tmp_path / "dev.csv", ["id", "label", "text"],
                    [("ab-1", "positive", "Fine.\nReally."), ("ab-2", "negative", "No."),
                     ("ab-7", "neutral", "Meh.")])
    task = tasks.get_task("classification")
    with pytest.raises(UserInputError) as error:
        tasks.load(task, train_file=train, dev_file=dev)
    assert str(error.value) == (f"{dev} line 5 (id 'ab-7'): label 'neutral' does not occur in "
                                "the training file (labels: negative, positive); fix the label "
                                "or add training examples with it")
    # Without an id column the guid is the line, and the message as it was.
    dev = write_csv(tmp_path / "dev.csv", ["label", "text"],
                    [("positive", "Fine.\nReally."), ("neutral", "Meh.")])
    with pytest.raises(UserInputError, match=r"dev.csv line 4: label 'neutral' does not"):
        tasks.load(task, train_file=train, dev_file=dev)


def _refusal(train, model_dir, stdout=False):
    """The error line of run_finetuning.py refusing a tiny classification run into
    `model_dir` (exit code 1, no traceback); with `stdout`, and what it printed there."""
    result = run_script(
        "run_finetuning.py", "--task=classification", "--init_checkpoint=none",
        "--model_size=tiny", f"--vocab_file={UNCASED_VOCAB}", f"--train_file={train}",
        f"--dev_file={train}", f"--model_dir={model_dir}", cwd=ROOT)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    return (line, result.stdout) if stdout else line


def test_a_model_dir_that_is_a_file_fails_with_one_line(tmp_path):
    """--model_dir naming a file (or a path inside one) was a traceback at the first
    write, after the data and the model had been loaded."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import runner
    train = write_csv(tmp_path / "train.csv", ["label", "text"], REVIEWS)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert _refusal(train, notes) == (
        f"error: --model_dir={notes} is a file, not a folder; choose another --model_dir")
    assert notes.read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "train.csv"]  # nothing written
    with pytest.raises(UserInputError) as error:
        runner.check_model_dir(str(notes / "out"))
    assert str(error.value) == (f"--model_dir={notes / 'out'} is inside {notes}, a file; "
                                "choose another --model_dir")
    assert runner.check_model_dir(str(tmp_path / "new" / "out")) == []


@pytest.mark.parametrize("written, message", [
    (("model_info.json", "checkpoint", "ckpt-60.index"),
     "holds a pre-trained model (checkpoints, model_info.json), not a fine-tuning run; "
     "fine-tuning writes its trials to a folder of their own: choose another --model_dir "
     "(--init_checkpoint={d} fine-tunes that model)"),
    (("task_info.json", "trial.json", "vocab.txt"),
     "is a trial of a fine-tuning run (task_info.json), not a folder for a run: choose another "
     "--model_dir (--init_checkpoint={d} fine-tunes its encoder further)"),
    (("saved_model.pb", "variables/variables.index"),
     "holds an exported SavedModel (saved_model.pb), not a fine-tuning run; choose another "
     "--model_dir"),
    (("1/saved_model.pb", "2/saved_model.pb"),
     "holds an exported model's versions (N/saved_model.pb), not a fine-tuning run; choose "
     "another --model_dir"),
    (("models.config", "electra/1/saved_model.pb"),
     "holds exported models for TF Serving (models.config), not a fine-tuning run; choose "
     "another --model_dir"),
])
def test_a_model_dir_of_another_kind_is_refused(tmp_path, written, message):
    """A pre-training model dir (or a trial) given as --model_dir took the trials beside its
    checkpoints: an --init_checkpoint of it then took the best trial, and export refused it
    as a fine-tuning run; --overwrite would not have made it one either. An export's folder
    (a SavedModel, a model's versions, an --export_dir) took them beside its models."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import runner
    model = tmp_path / "model"
    model.mkdir()
    for name in written:
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_text("{}")
    for overwrite in (False, True):
        with pytest.raises(UserInputError) as error:
            runner.check_model_dir(str(model), overwrite)
        assert str(error.value) == f"--model_dir={model} " + message.format(d=model)
    assert sorted(str(p.relative_to(model)) for p in model.rglob("*") if p.is_file()) == sorted(
        written)


def test_a_run_exported_into_its_own_folder_is_still_extended_or_overwritten(tmp_path):
    """export_saved_model.py --export_dir=<the run's model dir> writes models.config and a
    model's versions there: the run is still the run (it was refused as exported models)."""
    from electra_tf.finetune import runner
    (tmp_path / "trial_0").mkdir()
    (tmp_path / "results.json").write_text(json.dumps({"trials": [{}]}))
    (tmp_path / "models.config").write_text("model_config_list {}")
    (tmp_path / "electra" / "1").mkdir(parents=True)
    for kwargs in ({"num_trials": 2}, {"overwrite": True}):
        assert runner.check_model_dir(str(tmp_path), **kwargs) == ["results.json", "trial_0"]


def test_a_disk_without_room_for_a_trial_is_refused_before_it_trains(tmp_path, small_disk):
    """A trial's model is written when it has trained: on a disk without room for it, one
    line before the training (it was a traceback of the failed write after it)."""
    train = write_csv(tmp_path / "train.csv", ["label", "text"], REVIEWS)
    disk = small_disk("1m")
    out = f"{disk.path}/out"
    line, said = _refusal(train, out, stdout=True)
    assert re.fullmatch(rf"error: --model_dir={out} has 1\.0 MB free, but trial 0's model takes "
                        r"1\d\.\d MB; free some space or choose another --model_dir", line), line
    assert "trial 0" not in said  # refused before training
    assert os.listdir(disk.path) == []  # the dir it made is gone


# ------------------------------------------------------------------------------ results


def test_an_undefined_score_is_written_null_and_said_so(tmp_path):
    """Pearson's r of a constant series is undefined (scipy: NaN; it was 0 here, which
    reads as a score). results.json is strict JSON: the undefined score and the statistics
    over it are null, and a line says so; it was NaN, which JSON has no word for."""
    from scipy import stats

    from electra_tf.finetune import metrics, runner
    with pytest.warns(stats.ConstantInputWarning):
        assert math.isnan(stats.pearsonr([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])[0])
    assert math.isnan(metrics.pearson([1, 2, 3], [2, 2, 2]))
    assert math.isnan(metrics.spearman([4, 4, 4], [1, 2, 3]))
    trials = [{"seed": 0, "dev": {"pearson": 0.5, "mse": 1.0}, "final_train_loss": 0.3},
              {"seed": 1, "dev": {"pearson": math.nan, "mse": 2.0}, "final_train_loss": 0.4}]
    lines = []
    results = runner.write_results(str(tmp_path), runner.summarize("stsb", "pearson", trials),
                                   lines.append)
    text = (tmp_path / "results.json").read_text()

    def no_constants(name):
        raise ValueError(f"{name} is not JSON")
    on_disk = json.loads(text, parse_constant=no_constants)
    assert on_disk == results
    assert on_disk["trials"][1]["dev"] == {"pearson": None, "mse": 2.0}
    assert on_disk["median"] == {"pearson": None, "mse": 1.5}
    assert on_disk["std"]["pearson"] is None and on_disk["mean"]["mse"] == 1.5
    assert lines == ["undefined, written as null: pearson (trial 1), pearson (median), "
                     "pearson (mean), pearson (std) (a constant prediction or label has no "
                     "correlation; a median, mean or std with an undefined trial is "
                     "undefined)"]
    assert runner.table(results).splitlines()[2].split() == ["1", "1", "undefined", "2.0000"]
    # Anything else that is not finite is a bug: it fails before the file is written.
    trials[0]["final_train_loss"] = math.inf
    with pytest.raises(ValueError, match="not JSON compliant"):
        runner.write_results(str(tmp_path / "other"), runner.summarize(
            "stsb", "pearson", trials), lines.append)
    assert not (tmp_path / "other").exists()


# ------------------------------------------------------------------------------ resuming


class Interrupted(Exception):
    pass


def stop_after_trial_0(line):
    """A log that stops a run once its first trial is written."""
    if line.startswith("trial 0 (seed 0)"):
        raise Interrupted


def finetune(out, train, dev, init, bindings=(), num_trials=2, seed=0, log=None):
    """A regression run of a few steps in this process (finetune/tiny.gin + bindings)."""
    import gin

    from electra_tf import gin_files
    from electra_tf.finetune import runner, tasks
    data = tasks.load(tasks.get_task("regression"), train_file=train, dev_file=dev,
                      log=lambda *_: None)
    gin_files.parse(["finetune/tiny.gin"], ["MAX_SEQ_LENGTH = 16", "TRAIN_BATCH_SIZE = 4",
                                            "finetuning.max_train_steps = 2"] + list(bindings))
    try:
        return runner.run_finetuning(data, init, str(out), num_trials=num_trials, seed=seed,
                                     log=log or (lambda *_: None))
    finally:
        gin.clear_config()


def test_an_interrupted_run_resumes_keeping_its_complete_trials(tmp_path):
    """2 trials stopped while the second was written: the same command keeps trial_0 (its
    files untouched, its scores from its trial.json), trains trial_1 again over its
    half-written folder, and writes results.json over both. A rerun that would train
    them otherwise (another learning rate, seed or number of trials) is refused in one line
    naming the trial, and leaves the dir as it was. (Before, the dir was refused, and
    --overwrite deleted the finished trials.) The dev labels are constant: every trial's
    Pearson is undefined, written null and kept so."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import metrics, runner
    init = runner.load_initialization("none", UNCASED_VOCAB, model_size="tiny")
    rows = [(str(i % 5), text) for i, (_, text) in enumerate(REVIEWS)]
    train = write_csv(tmp_path / "train.csv", ["label", "text"], rows)
    dev = write_csv(tmp_path / "dev.csv", ["label", "text"], [("2", t) for _, t in rows[:4]])
    out = tmp_path / "out"
    with pytest.raises(Interrupted):
        finetune(out, train, dev, init, log=stop_after_trial_0)
    assert sorted(os.listdir(out)) == ["trial_0"]
    # Exporting it names its complete trial.
    from electra_tf.export.saved_model import load_finetuned
    with pytest.raises(UserInputError) as error:
        load_finetuned(str(out))
    assert str(error.value) == (
        f"{out} is an unfinished fine-tuning run (no results.json yet); rerun its "
        "run_finetuning.py command to finish it, or pass a complete trial: "
        f"--model_dir={out / 'trial_0'}")
    with pytest.raises(UserInputError, match=r"or pass a complete trial: --init_checkpoint="):
        runner.load_initialization(str(out))
    # trial_0 as a run before trained_seq_length was recorded wrote it: still resumed.
    recorded = json.loads((out / "trial_0" / "task_info.json").read_text())
    del recorded["trained_seq_length"]
    assert "tag_spelling" not in recorded  # (tagging's only: a sentence trial's is as before)
    (out / "trial_0" / "task_info.json").write_text(json.dumps(recorded))
    # ... and scored it with an older scoring of its task (a lower scores_version): said.
    record = json.loads((out / "trial_0" / "trial.json").read_text())
    assert record["scores_version"] == metrics.SCORES_VERSIONS["regression"]
    record["scores_version"] -= 1
    (out / "trial_0" / "trial.json").write_text(json.dumps(record))
    (out / "trial_1.partial").mkdir()  # killed while writing trial_1
    (out / "trial_1.partial" / "task_info.json").write_text("{")
    before = {name: (out / "trial_0" / name).read_bytes() for name in (
        "task_info.json", "dev_predictions.tsv", "model/ckpt.index")}

    lines = []
    results = finetune(out, train, dev, init, log=lines.append)
    assert sorted(os.listdir(out)) == ["results.json", "trial_0", "trial_1"]
    assert {name: (out / "trial_0" / name).read_bytes() for name in before} == before
    assert [line.split(":")[0] for line in lines if re.match(r"trial \d", line)] == [
        "trial 0 (seed 0)", "trial 1 (seed 1)"]
    assert any(line.startswith(f"trial 0 (seed 0): kept, complete in {out / 'trial_0'}: ")
               for line in lines)
    assert ("note: kept trial(s) 0 were scored by an older release, whose scoring of "
            "regression has been corrected since") in "\n".join(lines)
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk == results
    earlier = json.loads((out / "trial_0" / "trial.json").read_text())
    assert earlier["dev"]["pearson"] is None and earlier["seed"] == 0
    assert on_disk["trials"][0] == earlier  # as it was, "seconds" included
    # (a trial.json without scores_version reads as 1: regression's scoring never changed)
    assert metrics.SCORES_VERSIONS["regression"] == 1
    assert [t["seed"] for t in on_disk["trials"]] == [0, 1]
    assert on_disk["median"]["pearson"] is None
    assert on_disk["median"]["mse"] == pytest.approx(
        (on_disk["trials"][0]["dev"]["mse"] + on_disk["trials"][1]["dev"]["mse"]) / 2)
    info = json.loads((out / "trial_1" / "task_info.json").read_text())
    assert info["seed"] == 1 and info["num_train_steps"] == 2
    assert info["inputs_sha256"] == on_disk["inputs_sha256"]
    assert info["hyperparameters"]["learning_rate"] == 3e-4

    # A finished run is refused as before; interrupted again, reruns that differ are refused.
    with pytest.raises(UserInputError, match=r"already holds a fine-tuning run \(results.json"):
        finetune(out, train, dev, init)
    os.remove(out / "results.json")
    listing = sorted(os.listdir(out))
    for bindings, num_trials, seed, message in (
            (["LEARNING_RATE = 1e-3"], 2, 0, f"{out / 'trial_0'} was fine-tuned with "
             "hyperparameters.learning_rate=0.0003, not 0.001 as this run would be; rerun its "
             "command to resume it, or pass --overwrite to replace the earlier run, or choose "
             "another --model_dir"),
            ([], 2, 1, f"{out / 'trial_0'} was fine-tuned with seed=0, not 1 as this run "
             "would be; rerun its command to resume it, or pass --overwrite to replace the "
             "earlier run, or choose another --model_dir"),
            ([], 1, 0, f"{out / 'trial_1'} is not one of this run's 1 trial(s); rerun with the "
             "earlier --num_trials to resume it, or pass --overwrite to replace the earlier "
             "run, or choose another --model_dir")):
        with pytest.raises(UserInputError) as error:
            finetune(out, train, dev, init, bindings, num_trials=num_trials, seed=seed)
        # (gin adds a line naming the configurable; the script prints the first)
        assert str(error.value).splitlines()[0] == message
        assert sorted(os.listdir(out)) == listing
    # Fine-tuned from a model dir that has trained on since (the weights' digest differs):
    # the checkpoint it read is the fix where it is still there with those weights (the
    # refusal said only that two digests differ), not where it is gone or was rewritten.
    info_path = out / "trial_0" / "task_info.json"
    original = info_path.read_text()
    (tmp_path / "pretrained").mkdir()
    index = tmp_path / "pretrained" / "ckpt-20.index"
    index.write_bytes(b"the weights it read")
    info = json.loads(original)
    info["init_checkpoint"] = str(tmp_path / "pretrained" / "ckpt-20")
    info["inputs_sha256"]["init_checkpoint"] = runner.file_sha256(str(index))
    info_path.write_text(json.dumps(info))
    with pytest.raises(UserInputError) as error:
        finetune(out, train, dev, init)
    assert str(error.value).splitlines()[0] == (
        f"{out / 'trial_0'} was fine-tuned from {info['init_checkpoint']}, whose weights are "
        "not those --init_checkpoint gives now (a model dir that has trained on since, say); "
        f"rerun its command to resume it with --init_checkpoint={info['init_checkpoint']}, "
        "or pass --overwrite to replace the earlier run, or choose another --model_dir")
    index.write_bytes(b"other weights")
    with pytest.raises(UserInputError, match="was fine-tuned with inputs_sha256.init_checkpoint="):
        finetune(out, train, dev, init)
    info_path.write_text(original)


def test_a_long_prediction_says_how_far_it_is(tmp_path, monkeypatch):
    """Predicting a split that takes longer than PROGRESS_SECONDS (here 0) logs the rows
    done after each batch but the last."""
    from electra_tf.finetune import runner
    monkeypatch.setattr(runner, "PROGRESS_SECONDS", 0)
    init = runner.load_initialization("none", UNCASED_VOCAB, model_size="tiny")
    rows = [(str(i % 5), text) for i, (_, text) in enumerate(REVIEWS)]
    train = write_csv(tmp_path / "train.csv", ["label", "text"], rows)
    dev = write_csv(tmp_path / "dev.csv", ["label", "text"], rows[:10])
    lines = []
    finetune(tmp_path / "out", train, dev, init, ["finetuning.eval_batch_size = 4"],
             num_trials=1, log=lines.append)
    assert [line for line in lines if "predicting" in line] == [
        f"  predicting {dev}: 4 of 10 rows", f"  predicting {dev}: 8 of 10 rows"]


def test_prediction_progress_counts_inputs_where_they_are_not_the_files_rows(monkeypatch):
    """QA's windows (and a pair task's both orders) outnumber the file's rows: the progress
    line says inputs and names the rows, not 'rows' of a count the file does not have."""
    from electra_tf.finetune import runner
    monkeypatch.setattr(runner, "PROGRESS_SECONDS", 0)
    lines = []
    split = runner._Split("dev", "dev.json", examples=[None] * 3, features={})
    report = runner._progress(split, lines.append)
    report(4, 7)
    report(7, 7)  # the last batch says nothing
    assert lines == ["  predicting dev.json: 4 of 7 inputs (the file's 3 rows)"]


@pytest.mark.parametrize("steps", [4, 15, 25, 779])
def test_a_trials_learning_rate_is_the_official_formulas(steps):
    """The official fine-tuning schedule, lr x min(1, step / (0.1 x steps)) x (1 - step /
    steps), at every step: the warmup was rounded to whole steps (half to even), so a run
    of 4 or 5 steps had none and took its first step at the full rate, 15 steps warmed up
    over 2 and 25 over 2."""
    from electra_tf.finetune import runner
    init = runner.load_initialization("none", UNCASED_VOCAB, model_size="tiny")
    _, optimizer = runner.build_trial(init, "sentence", 2, 0, steps, 3e-4, 1.0, False, 0.1,
                                      0.1, False, aggregate_gradients=False)
    schedule = optimizer._learning_rate
    got = np.array([float(schedule(step)) for step in range(steps + 1)])
    expected = np.array([3e-4 * min(1.0, step / (0.1 * steps)) * (1 - step / steps)
                         for step in range(steps + 1)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-10)  # (float32)


def test_a_trials_splits_share_one_traced_prediction_function():
    """A trial's dev and test splits run one traced forward pass: each traced its own, and
    with small splits TensorFlow's warning that 5 calls in a row retraced landed among an
    MNLI run's lines (2 dev and 3 test sets)."""
    from electra_tf.finetune import runner
    init = runner.load_initialization("none", UNCASED_VOCAB, model_size="tiny")
    model, _ = runner.build_trial(init, "sentence", 2, 0, 10, 1e-4, 1.0, False, 0.1, 0.1,
                                  False, aggregate_gradients=False)
    rng = np.random.default_rng(0)
    functions = {}
    for rows, length in ((3, 8), (5, 12), (2, 8)):
        features = {"input_ids": rng.integers(1, 100, (rows, length)).astype(np.int32),
                    "input_mask": np.ones((rows, length), np.int32),
                    "segment_ids": np.zeros((rows, length), np.int32)}
        out = runner._predict(model, features, 4, functions=functions)
        assert out["logits"].shape == (rows, 2)
    (traced,) = functions.values()
    assert traced.experimental_get_tracing_count() == 1


def test_sigterm_ends_the_script_with_one_line_keeping_the_complete_trials(tmp_path):
    """SIGTERM (a scheduler's stop) while trial 1 of 2 trains: one line and exit code 143
    (the process died without a word), trial_0 kept, nothing of trial 1 and no results.json
    written, and the model dir's mark of a running run taken away."""
    import signal
    import subprocess
    import sys
    import time
    rows = [(str(i % 5), text) for i, (_, text) in enumerate(REVIEWS * 4)]
    train = write_csv(tmp_path / "train.csv", ["label", "text"], rows)
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", "run_finetuning.py"),
         "--task=regression", "--init_checkpoint=none", "--model_size=tiny",
         f"--vocab_file={UNCASED_VOCAB}", f"--train_file={train}", f"--dev_file={train}",
         f"--model_dir={out}", "--num_trials=2", "--gin_bindings=MAX_SEQ_LENGTH=16",
         "--gin_bindings=TRAIN_BATCH_SIZE=4", "--gin_bindings=NUM_EPOCHS=30"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (out / "trial_0").exists() and time.time() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    assert (process.wait(timeout=120), process.stderr.read()) == (
        143, "terminated (SIGTERM); what was complete is kept: rerun the same command to go "
        "on\n")
    assert sorted(os.listdir(out)) == ["trial_0"]
    assert json.loads((out / "trial_0" / "trial.json").read_text())["seed"] == 0


def test_a_finished_run_is_extended_by_a_larger_num_trials(tmp_path):
    """The finished command again with --num_trials 3 where 2 were run keeps both trials
    (their files untouched), trains trial_2 with seed 2 and rewrites results.json over the
    three; the same or a smaller number is refused naming the way to add trials, and an
    extension that would train otherwise is refused, leaving results.json as it was."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import runner
    init = runner.load_initialization("none", UNCASED_VOCAB, model_size="tiny")
    rows = [(str(i % 5), text) for i, (_, text) in enumerate(REVIEWS)]
    train = write_csv(tmp_path / "train.csv", ["label", "text"], rows)
    dev = write_csv(tmp_path / "dev.csv", ["label", "text"], rows[:8])
    out = tmp_path / "out"
    first = finetune(out, train, dev, init)
    kept = {(k, name): (out / f"trial_{k}" / name).read_bytes() for k in (0, 1)
            for name in ("task_info.json", "trial.json", "model/ckpt.index")}
    finished = (out / "results.json").read_bytes()
    for num_trials in (2, 1):
        with pytest.raises(UserInputError) as error:
            finetune(out, train, dev, init, num_trials=num_trials)
        assert str(error.value).splitlines()[0] == (  # (gin adds a line naming finetuning)
            f"--model_dir={out} already holds a fine-tuning run (results.json, trial_0, "
            "trial_1); pass --num_trials above 2 to add trials to it, --overwrite to replace "
            "it, or choose another --model_dir")
    with pytest.raises(UserInputError) as error:
        finetune(out, train, dev, init, ["LEARNING_RATE = 1e-3"], num_trials=3)
    assert str(error.value).splitlines()[0] == (
        f"{out / 'trial_0'} was fine-tuned with hyperparameters.learning_rate=0.0003, not "
        "0.001 as this run would be; rerun with its settings to extend the run, or pass "
        "--overwrite to replace the earlier run, or choose another --model_dir")
    assert (out / "results.json").read_bytes() == finished
    assert sorted(os.listdir(out)) == ["results.json", "trial_0", "trial_1"]

    lines = []
    results = finetune(out, train, dev, init, num_trials=3, log=lines.append)
    assert (f"note: {out} holds a finished run of 2 trial(s); its trials are kept and the "
            "run is extended to 3") in lines
    assert sorted(os.listdir(out)) == ["results.json", "trial_0", "trial_1", "trial_2"]
    assert {key: (out / f"trial_{key[0]}" / key[1]).read_bytes() for key in kept} == kept
    assert [t["seed"] for t in results["trials"]] == [0, 1, 2]
    assert results["trials"][:2] == first["trials"]
    assert json.loads((out / "results.json").read_text()) == results
    assert json.loads((out / "trial_2" / "task_info.json").read_text())["seed"] == 2
    assert results["median"]["mse"] == pytest.approx(
        float(np.median([t["dev"]["mse"] for t in results["trials"]])))
    # A results.json that cannot be read (here not UTF-8) is refused, not extended.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(UserInputError) as error:
        runner.check_model_dir(str(tmp_path / "bad"), num_trials=3)
    assert str(error.value) == (
        f"--model_dir={tmp_path / 'bad'} already holds a fine-tuning run (results.json); "
        "pass --overwrite to replace it, or choose another --model_dir")


def test_trials_that_read_other_columns_are_not_kept(tmp_path):
    """The same files read in other columns (--text_column, --text_b_column,
    --label_column) train another model: its trials are refused, not kept and mixed into
    results.json (they were: the columns were not recorded)."""
    import gin

    from electra_tf import gin_files
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import runner, tasks
    init = runner.load_initialization("none", UNCASED_VOCAB, model_size="tiny")
    rows = [(str(i % 5), text, text.split(" ")[0]) for i, (_, text) in enumerate(REVIEWS)]
    train = write_csv(tmp_path / "train.csv", ["label", "text", "title"], rows)
    out = tmp_path / "out"

    def run(text_column, num_trials):
        data = tasks.load(tasks.get_task("regression"), train_file=train, dev_file=train,
                          text_column=text_column, log=lambda *_: None)
        gin_files.parse(["finetune/tiny.gin"], ["MAX_SEQ_LENGTH = 16", "TRAIN_BATCH_SIZE = 4",
                                                "finetuning.max_train_steps = 2"])
        try:
            return runner.run_finetuning(data, init, str(out), num_trials=num_trials,
                                         log=lambda *_: None)
        finally:
            gin.clear_config()

    run("title", 1)
    info = json.loads((out / "trial_0" / "task_info.json").read_text())
    assert info["columns"] == {"text": "title", "text_b": None, "label": "label"}
    with pytest.raises(UserInputError) as error:
        run("text", 2)
    assert str(error.value).splitlines()[0] == (
        f"{out / 'trial_0'} was fine-tuned with columns.text=\"title\", not \"text\" as this "
        "run would be; rerun with its settings to extend the run, or pass --overwrite to "
        "replace the earlier run, or choose another --model_dir")
    assert [t["seed"] for t in run("title", 2)["trials"]] == [0, 1]
    # A trial recorded before the columns were is kept (what it read is not known).
    del info["columns"]
    (out / "trial_0" / "task_info.json").write_text(json.dumps(info))
    (out / "results.json").unlink()
    shutil.rmtree(out / "trial_1")
    assert [t["seed"] for t in run("title", 2)["trials"]] == [0, 1]


def test_the_vocab_is_recorded_by_absolute_path_and_contents(tmp_path, monkeypatch):
    """--vocab_file=data/vocab/... (as BUILD.md writes it, from the checkout) is recorded
    in task_info.json by absolute path and SHA-256, and copied into the trial: a trial
    that recorded it as given still resumes from where it ran; the same command from a
    checkout moved elsewhere resumes (the vocab's contents match); a trial moved away from
    the vocab's path, or whose vocab file was replaced since, exports with its copy; another
    vocab of the same size is refused."""
    import shutil

    from electra_tf import tokenization
    from electra_tf.errors import UserInputError
    from electra_tf.export.saved_model import load_finetuned
    from electra_tf.finetune import runner
    relative = os.path.relpath(UNCASED_VOCAB, ROOT)
    checkout = tmp_path / "checkout"
    os.makedirs(checkout / os.path.dirname(relative))
    shutil.copy(UNCASED_VOCAB, checkout / relative)
    monkeypatch.chdir(checkout)
    init = runner.load_initialization("none", relative, model_size="tiny")
    rows = [(str(i % 5), text) for i, (_, text) in enumerate(REVIEWS)]
    train = write_csv(tmp_path / "train.csv", ["label", "text"], rows)
    out = tmp_path / "out"
    with pytest.raises(Interrupted):
        finetune(out, train, train, init, log=stop_after_trial_0)
    info_file = out / "trial_0" / "task_info.json"
    info = json.loads(info_file.read_text())
    assert info["vocab_file"] == str(checkout / relative)
    assert info["vocab_sha256"] == tokenization.vocab_sha256(UNCASED_VOCAB)
    assert (out / "trial_0" / "vocab.txt").read_bytes() == open(UNCASED_VOCAB, "rb").read()
    info["vocab_file"] = relative  # as runs before this wrote it
    del info["vocab_sha256"]
    info_file.write_text(json.dumps(info))
    lines = []
    finetune(out, train, train, init, log=lines.append)
    assert any(line.startswith("trial 0 (seed 0): kept") for line in lines)
    # The checkout moved: the same relative path from the new place.
    moved = tmp_path / "moved"
    shutil.move(checkout, moved)
    monkeypatch.chdir(moved)
    lines = []
    finetune(out, train, train, runner.load_initialization("none", relative, model_size="tiny"),
             num_trials=3, log=lines.append)
    assert any(line.startswith("trial 1 (seed 1): kept") for line in lines)
    # trial_1 recorded the checkout's old path, now gone: its copy.
    monkeypatch.chdir(tmp_path)
    assert load_finetuned(str(out / "trial_1")).vocab_file == str(out / "trial_1" / "vocab.txt")
    other = tmp_path / "other.txt"
    words = open(UNCASED_VOCAB, encoding="utf-8").read().splitlines()
    other.write_text("\n".join(words[:-1] + ["zzzunseen"]) + "\n", encoding="utf-8")
    with pytest.raises(UserInputError) as error:
        load_finetuned(str(out / "trial_1"), vocab_file=str(other))
    assert str(error.value) == (
        f"{other} is not the vocab {out / 'trial_1'} was fine-tuned with (its sha256 differs "
        "from task_info.json's vocab_sha256); pass the model's vocab")
    # trial_2 recorded the moved checkout's path, whose file now holds another vocab (a new
    # one written over it): its copy; without the copy, the changed file is refused.
    shutil.copy(other, moved / relative)
    trial_2 = out / "trial_2"
    assert load_finetuned(str(trial_2)).vocab_file == str(trial_2 / "vocab.txt")
    os.remove(trial_2 / "vocab.txt")
    with pytest.raises(UserInputError) as error:
        load_finetuned(str(trial_2))
    assert str(error.value) == (
        f"{moved / relative} is not the vocab {trial_2} was fine-tuned with (its sha256 "
        "differs from task_info.json's vocab_sha256); pass the model's vocab")


def test_a_fine_tuned_model_initialises_fine_tuning_on_another_task(tmp_path):
    """Intermediate-task transfer: --init_checkpoint may name a fine-tuning output dir (its
    best dev trial), a trial dir or its model/ckpt; the next run starts from that trial's
    encoder, its head left out."""
    from electra_tf.finetune import runner
    init = runner.load_initialization("none", UNCASED_VOCAB, model_size="tiny")
    rows = [(str(i % 5), text) for i, (_, text) in enumerate(REVIEWS)]
    train = write_csv(tmp_path / "train.csv", ["label", "text"], rows)
    dev = write_csv(tmp_path / "dev.csv", ["label", "text"], rows[:8])
    first = tmp_path / "first"
    finetune(first, train, dev, init, num_trials=1)
    checkpoint = str(first / "trial_0" / "model" / "ckpt")
    reader = tf.train.load_checkpoint(checkpoint)
    encoder = [reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
               if name.startswith("model/encoder/") and "OPTIMIZER_SLOT" not in name]
    for path in (first, first / "trial_0", checkpoint, checkpoint + ".index"):
        again = runner.load_initialization(str(path))
        assert again.source == checkpoint and again.config == init.config
        assert (again.vocab_file, again.lower_case) == (UNCASED_VOCAB, True)
        assert len(again.weights) == len(encoder)
        np.testing.assert_allclose(sorted(np.linalg.norm(w) for w in again.weights),
                                   sorted(np.linalg.norm(w) for w in encoder), rtol=1e-6)
    # Trained at 16 tokens, fine-tuned at 32: a note says positions 16-31 start untrained.
    lines = []
    finetune(tmp_path / "next", train, dev, again, ["MAX_SEQ_LENGTH = 32"], num_trials=1,
             log=lines.append)
    info = json.loads((tmp_path / "next" / "trial_0" / "task_info.json").read_text())
    assert info["init_checkpoint"] == checkpoint and info["max_seq_length"] == 32
    assert info["trained_seq_length"] == 32  # trained at 16, then 32
    assert (init.trained_seq_length, again.trained_seq_length) == (None, 16)
    assert lines[0] == (f"note: MAX_SEQ_LENGTH=32, but {checkpoint} was trained on sequences "
                        "of 16: the position embeddings from 16 to 31 start untrained")
    # Continued pre-training from any of them is refused, naming the model to start from
    # (it was "holds no checkpoint" or "does not fit this model").
    from electra_tf.errors import UserInputError
    for path in (tmp_path / "next", tmp_path / "next" / "trial_0",
                 tmp_path / "next" / "trial_0" / "model" / "ckpt.index", first):
        with pytest.raises(UserInputError) as error:
            pretrain(tmp_path / "continued", str(tmp_path / "unread"), init_checkpoint=str(path))
        assert str(error.value).splitlines()[0] == (
            f"--init_checkpoint={path} is a fine-tuning output (a task's model), not a "
            "pre-trained one; pass the pre-training model dir it was fine-tuned from"
            + (f" ({checkpoint})" if path != first else ""))  # (first's: random weights)
    # The same weights spelt otherwise (a link, "./", another working directory) extend
    # the run: they are compared by contents, as the vocab is (the spelling was refused).
    os.symlink(first, tmp_path / "alias")
    alias = runner.load_initialization(str(tmp_path / "alias"))
    assert alias.source != checkpoint
    results = finetune(tmp_path / "next", train, dev, alias, ["MAX_SEQ_LENGTH = 32"],
                       num_trials=2)
    assert [t["seed"] for t in results["trials"]] == [0, 1]


def test_the_chief_decides_which_trials_every_worker_keeps(mirrored_strategy):
    """Workers must train the same trials; only the chief reads the model dir."""
    from electra_tf.finetune import runner
    assert runner._chief_decides(mirrored_strategy, [True, False, True], chief=True) == [
        True, False, True]
    assert runner._chief_decides(mirrored_strategy, [True, False, True], chief=False) == [
        False, False, False]


def test_every_worker_stops_when_the_chief_has_no_room_for_a_trial(mirrored_strategy, tmp_path):
    """The chief alone asks its disk; the others, which would go on to wait in the first
    all-reduce for a chief that has stopped, stop too (a process that is not the chief,
    here the only one, hears 'no room')."""
    import keras

    from electra_tf.errors import UserInputError
    from electra_tf.finetune import runner
    with mirrored_strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    runner._check_room(str(tmp_path), model, 0, mirrored_strategy, chief=True, worker=0)
    with pytest.raises(UserInputError) as error:
        runner._check_room(str(tmp_path), model, 2, mirrored_strategy, chief=False, worker=1)
    assert str(error.value) == ("worker 1: the chief's --model_dir has no room for trial 2's "
                                "model (its error line says how much it needs)")
