"""Fine-tuning: metrics against references, readers, every task kind trained a few steps on
real text, results.json, layer-wise learning rates, GLUE files, Chinese, and bad input."""

import csv
import dataclasses
import gzip
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import (CHINESE_VOCAB, DATA, FIXTURES, ROOT, UNCASED_VOCAB, cased_vocab,
                      chinese_reviews, pretrain)
from in_process import run_script

MOVIES = os.path.join(FIXTURES, "finetune", "movie_snippets.csv")
PYTHON = sys.executable


# ------------------------------------------------------------------------------ helpers


def movie_rows():
    with open(MOVIES, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_csv(path, header, rows, delimiter=","):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def read_tsv(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, austen_data):
    """A very small pre-trained ELECTRA (conftest.SMALL: 1 layer, hidden 32; seq 128)."""
    directory = tmp_path_factory.mktemp("pretrained")
    pretrain(directory, os.path.join(austen_data[0], "*.tfrecord"), eager=True)
    return str(directory)


@pytest.fixture(scope="module")
def init(model_dir):
    from electra_tf.finetune import runner
    return runner.load_initialization(model_dir)


def finetune(task, out, init, bindings=(), num_trials=1, seed=0, strategy=None, log=None,
             overwrite=False, **files):
    """tasks.load + run_finetuning in this process under finetune/tiny.gin + bindings."""
    import gin

    from electra_tf import gin_files
    from electra_tf.finetune import runner, tasks
    data = tasks.load(tasks.get_task(task), log=lambda *_: None, **files)
    gin_files.parse(["finetune/tiny.gin"], ["MAX_SEQ_LENGTH = 48", "TRAIN_BATCH_SIZE = 8",
                                            "finetuning.eval_batch_size = 32"] + list(bindings))
    try:
        return runner.run_finetuning(data, init, str(out), num_trials=num_trials, seed=seed,
                                     log=log or (lambda *_: None), strategy=strategy,
                                     overwrite=overwrite)
    finally:
        gin.clear_config()


# ------------------------------------------------------------------------------ metrics


def test_sentence_metrics_match_sklearn_and_scipy():
    from sklearn import metrics as sklearn
    from scipy import stats
    from electra_tf.finetune import metrics
    rng = np.random.default_rng(0)
    for classes in (2, 3):
        y, p = rng.integers(0, classes, 200), rng.integers(0, classes, 200)
        assert metrics.accuracy(y, p) == pytest.approx(sklearn.accuracy_score(y, p))
        assert metrics.matthews_corrcoef(y, p) == pytest.approx(sklearn.matthews_corrcoef(y, p))
        assert metrics.macro_f1(y, p) == pytest.approx(sklearn.f1_score(y, p, average="macro"))
        # A class neither labelled nor predicted has no F1 to average (perfect: 1).
        kept = y != classes - 1
        assert metrics.macro_f1(y[kept], y[kept]) == 1.0
    assert metrics.f1(y, p, positive=1) == pytest.approx(
        sklearn.f1_score(y, p, labels=[1], average="macro"))
    x = rng.normal(size=100)
    z = np.round(x + rng.normal(size=100), 1)  # ties, for Spearman's average ranks
    assert metrics.pearson(x, z) == pytest.approx(stats.pearsonr(x, z)[0])
    assert metrics.spearman(np.round(x, 1), z) == pytest.approx(
        stats.spearmanr(np.round(x, 1), z)[0])


def test_sentence_metrics_by_hand():
    from electra_tf.finetune import metrics
    y, p = [1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 0, 1, 0, 0, 0, 0]
    # TP 2, FN 1, FP 1, TN 4: F1 = 4 / 6, MCC = (2*4 - 1*1) / sqrt(3*3*5*5) = 7 / 15.
    assert metrics.f1(y, p) == pytest.approx(2 / 3)
    assert metrics.matthews_corrcoef(y, p) == pytest.approx(7 / 15)
    assert metrics.matthews_corrcoef(y, [0] * 8) == 0.0  # undefined -> 0, as sklearn
    assert metrics.spearman([1, 2, 3, 4], [10, 20, 30, 25]) == pytest.approx(0.8)
    assert metrics.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    # A constant series, even one whose centred float64 values are not exactly 0.
    assert np.isnan(metrics.pearson([0.1, 0.1, 0.1], [1, 2, 3]))
    assert np.isnan(metrics.pearson([1, 2, 3], [0.7] * 3))
    np.testing.assert_array_equal(metrics.rank([10, 20, 20, 5]), [2, 3.5, 3.5, 1])


def test_span_f1_by_hand_and_against_seqeval():
    from electra_tf.finetune import metrics
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "I-ORG"]]
    pred = [["B-PER", "I-PER", "O", "B-PER"], ["O", "B-ORG", "I-ORG", "O"]]
    # Gold chunks: PER(0-1), LOC(3), ORG(1-3); predicted: PER(0-1), PER(3), ORG(1-2).
    # One correct of 3 predicted and 3 gold: P = R = F1 = 1/3. Tokens right: 6 of 8.
    scores = metrics.span_scores(gold, pred)
    assert scores["f1"] == pytest.approx(1 / 3)
    assert scores["precision"] == pytest.approx(1 / 3)
    assert scores["accuracy"] == pytest.approx(6 / 8)
    # IOB1 (a chunk may start with I-) and IOBES read as conlleval reads them.
    assert metrics.chunks(["I-PER", "I-PER", "O", "I-LOC", "B-LOC"]) == {
        ("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 4)}
    assert metrics.chunks(["S-PER", "B-LOC", "E-LOC", "S-LOC"]) == {
        ("PER", 0, 0), ("LOC", 1, 2), ("LOC", 3, 3)}
    assert metrics.chunks(["NN", "VB", "NN"]) == {("NN", 0, 0), ("VB", 1, 1), ("NN", 2, 2)}
    from seqeval import metrics as seqeval
    rng = np.random.default_rng(1)
    tags = ["O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    gold = [[tags[i] for i in rng.integers(0, 6, 12)] for _ in range(50)]
    pred = [[tags[i] for i in rng.integers(0, 6, 12)] for _ in range(50)]
    scores = metrics.span_scores(gold, pred)
    assert scores["f1"] == pytest.approx(seqeval.f1_score(gold, pred))
    assert scores["precision"] == pytest.approx(seqeval.precision_score(gold, pred))
    assert scores["recall"] == pytest.approx(seqeval.recall_score(gold, pred))


def test_typeless_chunk_tags_are_scored_as_chunks_as_conlleval_and_seqeval_do():
    """Chinese word segmentation's B/M/E/S and a chunker's bare B/I carry no type:
    conlleval (and seqeval) read them as chunks of an empty type. They were scored as
    one-token chunks of types 'B', 'I'..., which is token accuracy, not word F1. A tagset's
    M (CTB's measure word) among other tags stays a tag of its own."""
    from seqeval import metrics as seqeval

    from electra_tf.finetune import metrics
    gold, pred = [["B", "I", "O", "B", "I"]], [["B", "B", "O", "B", "I"]]
    assert metrics.span_scores(gold, pred)["f1"] == pytest.approx(0.4)
    rng = np.random.default_rng(3)
    gold = [[str(t) for t in rng.choice(["O", "B", "I"], 10)] for _ in range(60)]
    pred = [[str(t) for t in rng.choice(["O", "B", "I"], 10)] for _ in range(60)]
    assert metrics.typeless(gold) and not metrics.typeless([["B-X", "I-X"]])
    assert metrics.span_scores(gold, pred)["f1"] == pytest.approx(seqeval.f1_score(gold, pred))
    # Segmentation: the same words as the typed file's, whose F1 was right.
    words, guess = ["B", "E", "S", "B", "M", "E"], ["B", "M", "E", "S", "B", "E"]
    typed = [[f"{t}-W" for t in words]], [[f"{t}-W" for t in guess]]
    assert metrics.span_scores([words], [guess]) == metrics.span_scores(*typed)
    assert metrics.span_scores([words], [guess])["f1"] == 0.0  # no word right
    assert metrics.span_scores([words], [words])["f1"] == 1.0
    lower = [[t.lower() for t in words]], [[t.lower() for t in guess]]  # snownlp's b/m/e/s
    assert metrics.typeless(lower[0]) and not metrics.typeless([["b", "E"]])
    assert metrics.span_scores(*lower) == metrics.span_scores(*typed)
    ctb = [["NN", "M", "M", "VV"]]
    assert not metrics.typeless(ctb)
    assert metrics.span_scores(ctb, [["NN", "M", "VV", "VV"]])["f1"] == pytest.approx(0.75)


def test_tags_re_encode_with_the_same_chunks():
    """retag: span tags in BIO, IOB1 or BIOES hold the chunks conlleval reads in them, for
    any sequence, well-formed or not; a well-formed sentence's BIOES chunks are seqeval's
    (an independent reader) of its BIO tags; tag_scheme tells the files' schemes apart."""
    from seqeval.metrics.sequence_labeling import get_entities

    from electra_tf.finetune import metrics
    assert metrics.retag("B-NP I-NP I-NP O B-VP B-NP".split(), "BIOES") == (
        "B-NP I-NP E-NP O S-VP S-NP".split())
    assert metrics.retag("I-PER I-PER B-PER O I-LOC".split(), "BIO") == (
        "B-PER I-PER B-PER O B-LOC".split())
    assert metrics.retag("B-PER E-PER S-PER S-LOC".split(), "IOB1") == (
        "I-PER I-PER B-PER I-LOC".split())
    rng = np.random.default_rng(0)
    tagset = ["O", "B-A", "I-A", "E-A", "S-A", "B-B", "I-B", "E-B", "S-B", "L-A", "U-B", "M-A"]
    for _ in range(3000):
        tags = [tagset[i] for i in rng.integers(0, len(tagset), rng.integers(1, 10))]
        for scheme in metrics.TAG_SCHEMES:
            assert metrics.chunks(metrics.retag(tags, scheme)) == metrics.chunks(tags)
        bio = metrics.retag(tags, "BIO")
        assert get_entities(metrics.retag(tags, "BIOES")) == get_entities(bio)
    assert metrics.tag_scheme([["B-X", "I-X", "O"], ["O", "B-X", "B-X"]]) == "BIO"
    assert metrics.tag_scheme([["I-X", "O", "I-Y", "B-Y"], ["I-X", "O"]]) == "IOB1"
    # BIO with one stray chunk starting with I- (an annotation slip) stays BIO.
    assert metrics.tag_scheme([["B-X", "I-X", "O"]] * 50 + [["O", "I-Y", "I-Y"]]) == "BIO"
    assert metrics.tag_scheme([["B-X", "E-X", "O"]]) == "BIOES"
    assert metrics.tag_scheme([["NN", "VB"], ["B-X"]]) is None  # token-level: as they are
    # BMES (Chinese NER files: Resume, Weibo, MSRA): M- is I-, and predictions go back so.
    bmes = "B-ORG M-ORG E-ORG O S-PER B-LOC E-LOC".split()
    assert metrics.tag_scheme([bmes, ["O", "S-LOC"]]) == "BMES"
    assert metrics.chunks(bmes) == {("ORG", 0, 2), ("PER", 4, 4), ("LOC", 5, 6)}
    assert metrics.retag(bmes, "BIOES") == "B-ORG I-ORG E-ORG O S-PER B-LOC E-LOC".split()
    assert metrics.retag(metrics.retag(bmes, "BIOES"), "BMES") == bmes
    assert metrics.tag_scheme([["B-X", "M-X", "I-X", "E-X"]]) == "BIOES"  # both: spelt I-
    assert metrics.tag_scheme([["S-X"], ["NR", "B-X"]]) is None  # token-level, wherever it is
    # IOE1 (IOB1 mirrored: E- only before a chunk of its type) against IOE2 (E- ends each).
    ioe1 = "I-X E-X I-X O I-Y I-Y".split()
    assert metrics.tag_scheme([ioe1]) == "IOE1"
    assert metrics.tag_scheme([ioe1, ["E-X", "O"]]) == "BIOES"  # an E- with no X after: IOE2
    assert metrics.tag_scheme([["I-X", "O"]]) == "IOB1"  # no E- at all: read as IOB1
    assert metrics.retag(metrics.retag(ioe1, "BIOES"), "IOE1") == ioe1


@pytest.mark.parametrize("gold", [
    "B-PER L-PER U-LOC O B-ORG I-ORG L-ORG".split(),             # BILOU
    "B_PER I_PER O B_LOC O B_PER".split(),                       # BIO with '_'
    "I-PER E-PER O E-LOC I-ORG I-ORG E-ORG E-ORG".split(),       # IOE2
    "I-PER E-PER I-PER O I-LOC O I-ORG".split(),                 # IOE1
    "B-PER I-PER O B-LOC".split(), "B-X M-X E-X S-Y".split()])  # as retag spells them
def test_predictions_keep_the_files_spelling(gold):
    """A perfect model's tags, as fine-tuning writes them (the file's scheme, then its
    spelling), are the file's tags: token accuracy 1 (it was 0.5 for BILOU, 0.25 for '_'),
    and the predictions file compares with the gold column token by token."""
    from electra_tf.finetune import metrics
    scheme, spelling = metrics.tag_scheme([gold]), metrics.tag_spelling([gold])
    written = metrics.respell(metrics.retag(metrics.retag(gold, "BIOES"), scheme), spelling)
    assert written == gold
    assert metrics.span_scores([gold], [written]) == {"f1": 1.0, "precision": 1.0,
                                                      "recall": 1.0, "accuracy": 1.0}
    assert (spelling is None) == (gold[-1] in ("B-LOC", "S-Y"))  # the last two: as retag's


def test_served_tags_are_retag_in_the_graph():
    """The SavedModel's retag_bioes (TensorFlow ops) writes a model's BIOES tags in each
    scheme exactly as metrics.retag does in Python, for any tags, padded rows included."""
    from electra_tf.export import saved_model
    from electra_tf.finetune import metrics
    rng = np.random.default_rng(1)
    tagset = ["O", "B-A", "I-A", "E-A", "S-A", "B-B", "I-B", "E-B", "S-B"]
    rows = [[tagset[i] for i in rng.integers(0, len(tagset), rng.integers(1, 9))]
            for _ in range(400)]
    width = max(map(len, rows))
    padded = tf.constant([r + [""] * (width - len(r)) for r in rows])
    for scheme in metrics.TAG_SCHEMES:
        served = saved_model.retag_bioes(padded, scheme).numpy().astype(str).tolist()
        assert [s[:len(r)] for s, r in zip(served, rows)] == [
            metrics.retag(r, scheme) for r in rows], scheme
        assert all(set(s[len(r):]) <= {""} for s, r in zip(served, rows))


def test_iob1_predictions_keep_neighbouring_chunks_apart():
    """An IOB1 file of I- tags alone (no B-: none of its chunks follows one of its type)
    is not IOE: the B- that keeps two predicted neighbouring chunks of a type apart stays
    (respelt as I-, they merged into one and F1 fell)."""
    from electra_tf.finetune import metrics
    train = [["I-PER", "I-PER", "O", "I-LOC"], ["O", "I-ORG"]]
    scheme, spelling = metrics.tag_scheme(train), metrics.tag_spelling(train)
    assert (scheme, spelling) == ("IOB1", None)
    written = metrics.respell(metrics.retag(["S-PER", "S-PER", "O"], scheme), spelling)
    assert written == ["I-PER", "B-PER", "O"]
    assert metrics.chunks(written) == {("PER", 0, 0), ("PER", 1, 1)}
    # ... unless dev's E- shows IOE1 (E- between two chunks of a type): written so (it was
    # IOB1's B-, a letter neither file has).
    dev = [["I-PER", "E-PER", "I-PER", "O"]]
    scheme, spelling = metrics.files_scheme(train, dev)
    assert scheme == "IOE1"
    written = metrics.respell(metrics.retag(["B-PER", "E-PER", "S-PER", "O"], scheme), spelling)
    assert written == dev[0]


def test_squad_metrics_official_definitions():
    from electra_tf.finetune import metrics
    assert metrics.normalize_answer("The  Eiffel-Tower, in PARIS!") == "eiffeltower in paris"
    assert metrics.token_f1("the big red dog", "a red dog") == pytest.approx(0.8)
    golds = {"q1": ["Denver Broncos", "The Denver Broncos"], "q2": ["Santa Clara"],
             "q3": []}
    predictions = {"q1": "denver broncos", "q2": "Clara, California", "q3": ""}
    scores = metrics.squad_scores(golds, predictions)
    # q1 exact; q2 F1: common {clara}, P 1/2, R 1/2 -> 1/2; q3 no answer predicted.
    assert scores["exact"] == pytest.approx(200 / 3)
    assert scores["f1"] == pytest.approx(100 * 2.5 / 3)
    assert scores["has_answer_f1"] == pytest.approx(75.0)
    assert scores["has_answer_exact"] == pytest.approx(50.0)
    assert scores["no_answer_f1"] == scores["no_answer_exact"] == pytest.approx(100.0)
    # Best threshold: answering q3 "" is right; if q2's answer is dropped (prob 0.7 > t)
    # q2 scores 0 instead of 0.5, so the best threshold keeps it.
    scores = metrics.squad_scores(golds, predictions, {"q1": 0.1, "q2": 0.7, "q3": 0.9})
    assert scores["best_f1"] == pytest.approx(100 * 2.5 / 3)
    # At the threshold (0.5) q2 is answered "" and scores 0 (the official
    # apply_no_ans_threshold), q3 1.
    assert scores["f1"] == pytest.approx(100 * 2 / 3)
    assert scores["has_answer_f1"] == pytest.approx(50.0)
    # A gold answer that normalises to nothing still makes its question answerable (the
    # official qid_to_has_ans): "no answer" there scores 0 at the threshold, as
    # evaluate-v2.0 scores it, while its raw score (against "", the gold answer it is left
    # with) is 1, which find_best_thresh adds for an answerable question whatever its
    # prediction: the best threshold keeps both questions answered.
    scores = metrics.squad_scores({"q1": ["The"], "q2": ["Paris"]}, {"q1": "", "q2": "Paris"},
                                  {"q1": 0.9, "q2": 0.1})
    assert scores == {"exact": 50.0, "f1": 50.0, "has_answer_exact": 50.0,
                      "has_answer_f1": 50.0, "best_exact": 100.0,
                      "best_exact_threshold": pytest.approx(0.9), "best_f1": 100.0,
                      "best_f1_threshold": pytest.approx(0.9)}
    # Each group is scored where the set has it, both only in a v2.0 scoring.
    scores = metrics.squad_scores({"q1": ["Paris"], "q2": ["Rome"]}, {"q1": "Paris", "q2": "x"},
                                  {"q1": 0.1, "q2": 0.2})
    assert (scores["has_answer_exact"], scores["has_answer_f1"]) == (50.0, 50.0)
    assert "no_answer_f1" not in scores
    # v1.1 (every question answerable, no odds) keeps such a gold answer, as its script:
    # "" matches "a" exactly, with F1 0 (no token in common); so does CMRC 2018's.
    scores = metrics.squad_scores({"q1": ["a", "cat"]}, {"q1": ""})
    assert scores == {"exact": 100.0, "f1": 0.0}
    scores = metrics.squad_scores({"q1": ["，"], "q2": ["北京"]}, {"q1": "。", "q2": "北京"})
    assert scores == {"exact": 100.0, "f1": 50.0}


# ------------------------------------------------------------------------------ readers


def test_readers_csv_tsv_jsonl_agree_and_keep_string_labels(tmp_path):
    from electra_tf.finetune import readers
    rows = movie_rows()[:20]
    csv_path = write_csv(tmp_path / "a.csv", ["sentiment", "text"],
                         [(r["sentiment"], r["text"]) for r in rows])
    tsv_path = write_csv(tmp_path / "a.tsv", ["sentiment", "text"],
                         [(r["sentiment"], r["text"]) for r in rows], delimiter="\t")
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("".join(json.dumps({"text": r["text"], "sentiment": r["sentiment"]}) + "\n"
                             for r in rows), encoding="utf-8")
    read = [readers.read_table(p, label_column="sentiment") for p in (csv_path, tsv_path,
                                                                      str(jsonl))]
    for examples in read:
        assert [e.text_a for e in examples] == [r["text"] for r in rows]
        assert [e.label for e in examples] == [r["sentiment"] for r in rows]
    assert readers.sorted_labels(["10", "9", "1"]) == ["1", "9", "10"]
    assert readers.sorted_labels(["pos", "neg"]) == ["neg", "pos"]
    assert readers.sorted_labels(["-0.5", "-1", "2.5", "10", "1.0", "1"]) == [
        "-1", "-0.5", "1", "1.0", "2.5", "10"]
    ratings = readers.read_table(MOVIES, label_column="rating", kind="regression")
    assert ratings[0].label == pytest.approx(float(rows[0]["rating"]))


def test_tsv_files_plain_or_quoted_keep_every_row_and_quote(tmp_path):
    """A plain TSV (GLUE's kind) takes a double quote as a character: a text opening with
    one does not swallow the tabs and lines after it. A TSV quoted as Python's csv and
    pandas write it (fields with quotes, tabs or line breaks wrapped, quotes doubled) is
    read back to its texts."""
    from electra_tf.finetune import readers
    plain = tmp_path / "plain.tsv"
    plain.write_text('text\tlabel\n"Meh, boring\tneg\nA solid film, fine"\tpos\n'
                     '"Wow" is great\tpos\nok\tneg\n', encoding="utf-8")
    examples = readers.read_table(str(plain))
    assert [(e.text_a, e.label) for e in examples] == [
        ('"Meh, boring', "neg"), ('A solid film, fine"', "pos"), ('"Wow" is great', "pos"),
        ("ok", "neg")]
    texts = ['He said "hi"', 'a\ttab and "quotes"', "two\nlines", "plain"]
    quoted = write_csv(tmp_path / "quoted.tsv", ["text", "label"],
                       [(t, "pos") for t in texts], delimiter="\t")
    assert [e.text_a for e in readers.read_table(quoted)] == texts
    assert [e.text_a for e in readers.read_table(write_csv(
        tmp_path / "one.tsv", ["text", "label"], [(texts[0], "pos")], delimiter="\t"))] == [
        texts[0]]
    # A lone carriage return inside a plain TSV's text is kept in it (the row was split in
    # two at it: "line 3 has 1 fields", a line too far), with quotes in the file or none.
    for quote in ('"', ""):
        plain.write_text(f'text\tlabel\n{quote}ok\tpos\nbad\rline\tneg\nfine\tpos\n',
                         encoding="utf-8")
        assert [(e.text_a, e.label, e.guid) for e in readers.read_table(str(plain))] == [
            (f"{quote}ok", "pos", "2"), ("bad\rline", "neg", "3"), ("fine", "pos", "4")]
    # A file of old Mac line ends ("\r" alone) is read by them, quotes or none.
    for quote in ('"', ""):
        plain.write_text(f"text\tlabel\r{quote}Good film.\tpos\rBad film.\tneg\r",
                         encoding="utf-8", newline="")
        assert [(e.text_a, e.guid) for e in readers.read_table(str(plain))] == [
            (f"{quote}Good film.", "2"), ("Bad film.", "3")]


def test_conll_reader(tmp_path):
    from electra_tf.finetune import readers
    path = tmp_path / "x.txt"
    path.write_text("-DOCSTART- -X- O\n\nEmma NNP B-PER\nsmiled VBD O\n\nMr NNP B-PER\n"
                    "Knightley NNP I-PER\n", encoding="utf-8")
    sentences = readers.read_conll(str(path))
    assert [s.words for s in sentences] == [["Emma", "smiled"], ["Mr", "Knightley"]]
    assert [s.tags for s in sentences] == [["B-PER", "O"], ["B-PER", "I-PER"]]
    assert readers.read_conll(str(path), tag_column=1)[0].tags == ["NNP", "VBD"]
    # Windows and old Mac line ends read alike (a file of lone "\r" was one line: one word),
    # and "\r\r\n" (unix2dos twice) as one line end
    for end in ("\r\n", "\r", "\r\r\n"):
        path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                         .replace(b"\n", end.encode()))
        assert [(s.words, s.tags, s.guid) for s in readers.read_conll(str(path))] == [
            (["Emma", "smiled"], ["B-PER", "O"], "3"),
            (["Mr", "Knightley"], ["B-PER", "I-PER"], "6")]


# ------------------------------------------------------------------------------ initialisation


def test_task_encoder_equals_the_pretrained_discriminator(model_dir):
    """The task model's encoder computes exactly what the pre-trained discriminator does,
    from the model dir and from a ckpt-N prefix; --random_init keeps the shape only."""
    from electra_tf.finetune import runner
    from electra_tf.finetune.models import TaskModel
    from electra_tf.training.checkpoints import load_pretrainer
    discriminator = load_pretrainer(model_dir).model.discriminator
    ids = np.array([[101, 7592, 1010, 2088, 999, 102, 0, 0]], np.int32)
    args = (ids, (ids > 0).astype(np.int32), np.zeros_like(ids))
    expected = discriminator(*args, training=False).numpy()
    for source in (model_dir, os.path.join(model_dir, "ckpt-6")):
        init = runner.load_initialization(source)
        model = TaskModel(init.config, "sentence", 2)
        model.encoder.set_weights(init.weights)
        np.testing.assert_array_equal(model.encoder(*args, training=False).numpy(), expected)
    older = runner.load_initialization(os.path.join(model_dir, "ckpt-4"))
    assert not all(np.array_equal(a, b) for a, b in zip(older.weights, init.weights))
    random = runner.load_initialization(model_dir, random_init=True)
    assert random.weights is None and random.config == init.config


def test_task_heads_start_as_the_official_ones():
    """The official heads are `tf.layers.dense` without an initializer: TF1's Glorot
    uniform, limit sqrt(6 / (fan_in + fan_out)); the encoder keeps stddev 0.02."""
    import keras

    from electra_tf.finetune.models import TaskModel
    from electra_tf.modeling.config import encoder_config
    keras.utils.set_random_seed(0)
    config = encoder_config("small", vocab_size=100)
    bert = TaskModel(config, "span", answerability=True, qa_head="bert")
    electra = TaskModel(config, "span", answerability=True)  # qa_tasks.py's dense layers
    for layer, fan_in, fan_out in (
            (bert.output_layer, 256, 2), (bert.answerable_layer, 256, 1),
            (electra.output_layer, 256, 1), (electra.end_hidden, 512, 512),
            (electra.end_layer, 512, 1), (electra.answerable_hidden, 512, 512),
            (electra.answerable_layer, 512, 1)):
        kernel = layer.kernel.numpy()
        limit = np.sqrt(6 / (fan_in + fan_out))
        assert kernel.shape == (fan_in, fan_out) and np.abs(kernel).max() <= limit
        assert kernel.std() == pytest.approx(limit / np.sqrt(3), rel=0.15)
        assert not layer.bias.numpy().any()
    model = electra
    query = model.encoder.layer_0.attention.query.kernel.numpy()
    assert query.std() == pytest.approx(0.02 * 0.8796, rel=0.1)


@pytest.mark.parametrize("head", ["sentence", "span", "electra_span"])
def test_task_heads_compute_in_float32_under_mixed_bfloat16(head):
    """A regression score or a span logit in bfloat16 keeps 8 bits (STS-B scores in steps
    of 1/32): the heads take the encoder's output as float32 and compute in float32 (ELECTRA's
    span head too, training and inference)."""
    import keras

    from electra_tf.finetune.models import TaskModel
    from electra_tf.modeling.config import encoder_config
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        model = TaskModel(encoder_config("tiny", vocab_size=100), head.removeprefix("electra_"),
                          1, answerability=True,
                          qa_head="electra" if head == "electra_span" else "bert")
        ids = np.random.default_rng(0).integers(1, 100, (64, 16)).astype(np.int32)
        features = {"input_ids": ids, "input_mask": np.ones_like(ids),
                    "segment_ids": np.ones_like(ids)}
        outputs = model(features, training=False)
        trained = model({**features, "start_positions": np.arange(64) % 16},
                        training=True)
        sequence = model.encoder(ids, features["input_mask"], features["segment_ids"])
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    assert sequence.dtype == "bfloat16"  # the encoder does run in bfloat16
    hidden = np.asarray(sequence, np.float32)
    kernel, bias = (np.asarray(w) for w in model.output_layer.weights)
    if head == "sentence":
        expected = hidden[:, 0] @ kernel + bias
        np.testing.assert_allclose(outputs["logits"], expected, rtol=1e-5, atol=1e-6)
        assert len(np.unique(outputs["logits"])) == 64  # no bfloat16 ties
    elif head == "electra_span":
        for out in (outputs, trained):
            assert all(v.dtype in ("float32", "int32") for v in out.values())
        expected = (hidden @ kernel + bias)[..., 0]
        np.testing.assert_allclose(outputs["start_logits"], expected, rtol=1e-5, atol=1e-5)
        end = trained["end_logits"].numpy()
        assert len(np.unique(end)) > 0.99 * end.size  # no bfloat16 ties
    else:
        expected = hidden @ kernel + bias
        np.testing.assert_allclose(outputs["start_logits"], expected[..., 0], rtol=1e-5,
                                   atol=1e-6)
        kernel, bias = (np.asarray(w) for w in model.answerable_layer.weights)
        np.testing.assert_allclose(outputs["answerable_logits"],
                                   (hidden[:, 0] @ kernel + bias)[:, 0], rtol=1e-5, atol=1e-6)


def test_electra_qa_head_is_the_official_one():
    """ELECTRA's span head computed by numpy from the official qa_tasks.py formulas: start
    logits masked to the context and [CLS]; end logits of gelu(dense_512([h_start; h_end]))
    given the gold start when training; the answerable logit from [h_CLS; softmax(start)
    . h]. At inference, the beam: the K best starts by log-probability, and for each the K
    best ends of the same end distribution that training computes for that start. A
    sequence shorter than K fills the beam's last slots with positions past it."""
    import keras
    from scipy.special import erf, log_softmax, softmax

    from electra_tf.finetune.models import TaskModel
    from electra_tf.modeling.config import encoder_config
    keras.utils.set_random_seed(0)
    config = dataclasses.replace(encoder_config("tiny", vocab_size=100), dropout_rate=0.0,
                                 attention_dropout_rate=0.0)
    model = TaskModel(config, "span", answerability=True, beam_size=5)
    rng = np.random.default_rng(0)
    b, length = 6, 16
    ids = rng.integers(1, 100, (b, length)).astype(np.int32)
    real = np.arange(length)[None] < np.array([16, 16, 12, 9, 7, 16])[:, None]
    segment = (np.arange(length)[None] >= np.array([5, 8, 4, 3, 5, 2])[:, None]) & real
    features = {"input_ids": ids * real, "input_mask": real.astype(np.int32),
                "segment_ids": segment.astype(np.int32)}
    gold = np.array([0, 9, 4, 5, 6, 15], np.int32)
    trained = model({**features, "start_positions": gold}, training=True)
    inferred = model(features, training=False)
    h = model.encoder(features["input_ids"], features["input_mask"],
                      features["segment_ids"]).numpy()

    def dense(layer, x):
        return x @ layer.kernel.numpy() + layer.bias.numpy()

    def gelu(x):
        return x * 0.5 * (1.0 + erf(x / np.sqrt(2.0)))

    allowed = segment.astype(np.float32)
    allowed[:, 0] = 1.0
    start = dense(model.output_layer, h)[..., 0] + 1000.0 * (allowed - 1.0)

    def end_logits(starts):  # [b] -> [b, L]
        pair = np.concatenate([np.repeat(h[np.arange(b), starts][:, None], length, 1), h], -1)
        return (dense(model.end_layer, gelu(dense(model.end_hidden, pair)))[..., 0]
                + 1000.0 * (allowed - 1.0))

    p = softmax(start, axis=-1)
    cls_and_start = np.concatenate([h[:, 0], np.einsum("bl,blh->bh", p, h)], -1)
    answerable = dense(model.answerable_layer, gelu(dense(model.answerable_hidden,
                                                          cls_and_start)))[:, 0]
    for outputs in (trained, inferred):
        np.testing.assert_allclose(outputs["start_logits"], start, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(outputs["answerable_logits"], answerable, rtol=1e-5,
                                   atol=1e-5)
    np.testing.assert_allclose(trained["end_logits"], end_logits(gold), rtol=1e-5, atol=1e-4)
    assert "end_logits" not in inferred
    # The beam.
    k = 5
    start_log_probs = log_softmax(start, axis=-1)
    top = np.argsort(-start_log_probs, axis=-1, kind="stable")[:, :k]
    np.testing.assert_array_equal(inferred["start_top_index"], top)
    np.testing.assert_allclose(inferred["start_top_log_probs"],
                               np.take_along_axis(start_log_probs, top, -1), atol=1e-5)
    assert (np.take_along_axis(allowed, top, -1)[4, :3] == 1).all()  # [CLS] + 2 context
    for i in range(k):
        end_log_probs = log_softmax(end_logits(top[:, i]), axis=-1)
        top_end = np.argsort(-end_log_probs, axis=-1, kind="stable")[:, :k]
        np.testing.assert_array_equal(inferred["end_top_index"][:, i], top_end)
        np.testing.assert_allclose(inferred["end_top_log_probs"][:, i],
                                   np.take_along_axis(end_log_probs, top_end, -1), atol=1e-4)
    # Shorter than the beam: slots 3 and 4 of a 3-token sequence point past it.
    short = model({k: v[:, :3] for k, v in features.items()}, training=False)
    assert short["start_top_index"].shape == (b, 5) and short["end_top_index"].shape == (b, 5, 5)
    assert (short["start_top_index"].numpy()[:, 3:] >= 3).all()
    assert (short["start_top_log_probs"].numpy()[:, 3:] == -1e9).all()
    assert (short["end_top_index"].numpy()[:, :3, 3:] >= 3).all()
    with pytest.raises(ValueError, match="pass start_positions with training=True"):
        model(features, training=True)


# ------------------------------------------------------------------------------ sentence tasks


def test_classification_learns_and_results_json(tmp_path, init):
    """32 real reviews with string labels: training drives the training set's accuracy to
    1 (dev = train); results.json has every trial and the right median/mean/std; the
    predictions file holds the original label strings."""
    rows = movie_rows()[:32]
    train = write_csv(tmp_path / "train.csv", ["sentiment", "review"],
                      [(r["sentiment"], r["text"]) for r in rows])
    results = finetune("classification", tmp_path / "out", init,
                       ["LEARNING_RATE = 2e-3", "NUM_EPOCHS = 12", "LAYERWISE_LR_DECAY = 1.0"],
                       num_trials=2, seed=7, train_file=train, dev_file=train,
                       text_column="review", label_column="sentiment")
    on_disk = json.loads((tmp_path / "out" / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results))
    assert set(on_disk) >= {"task", "metric", "trials", "median", "mean", "std"}
    assert on_disk["task"] == "classification" and on_disk["metric"] == "accuracy"
    assert [t["seed"] for t in on_disk["trials"]] == [7, 8]
    assert on_disk["labels"] == ["negative", "positive"]
    import hashlib
    import pathlib
    checkpoint = on_disk["init_checkpoint"] + ".index"
    assert on_disk["inputs_sha256"] == {  # what the run read: dev = train here
        name: hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
        for name, path in (("train", train), ("dev", train), ("init_checkpoint", checkpoint))}
    for key in ("accuracy", "mcc", "f1"):
        values = [t["dev"][key] for t in on_disk["trials"]]
        assert on_disk["median"][key] == pytest.approx(np.median(values))
        assert on_disk["mean"][key] == pytest.approx(np.mean(values))
        assert on_disk["std"][key] == pytest.approx(np.std(values, ddof=1))
    assert on_disk["median"]["accuracy"] == 1.0
    for trial in (0, 1):
        table = read_tsv(tmp_path / "out" / f"trial_{trial}" / "dev_predictions.tsv")
        assert table[0] == ["id", "prediction", "label"]
        assert [row[0] for row in table[1:]] == [str(n) for n in range(2, 34)]  # line numbers
        assert [row[2] for row in table[1:]] == [r["sentiment"] for r in rows]
        predicted = [row[1] for row in table[1:]]
        assert set(predicted) <= {"negative", "positive"}
        accuracy = np.mean([p == r["sentiment"] for p, r in zip(predicted, rows)])
        assert on_disk["trials"][trial]["dev"]["accuracy"] == pytest.approx(accuracy)
        info = json.loads((tmp_path / "out" / f"trial_{trial}" / "task_info.json").read_text())
        assert info["labels"] == ["negative", "positive"]
        assert os.path.exists(tmp_path / "out" / f"trial_{trial}" / "model" / "ckpt.index")
    assert not [p for p in os.listdir(tmp_path / "out") if ".tmp-" in p or p.endswith(".partial")]


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_fine_tuning_learns_and_keeps_float32_weights(tmp_path, init, precision):
    """finetuning.precision: the 32 reviews are learnt as in float32; the saved weights are
    float32; under float16 every step whose gradients overflowed was skipped and halved the
    loss scale (2^15 at the start, no growth in so few steps); the process's policy is back."""
    import keras
    import tensorflow as tf
    rows = movie_rows()[:32]
    train = write_csv(tmp_path / "train.csv", ["sentiment", "review"],
                      [(r["sentiment"], r["text"]) for r in rows])
    lines = []
    results = finetune("classification", tmp_path / "out", init,
                       ["LEARNING_RATE = 2e-3", "NUM_EPOCHS = 12", "LAYERWISE_LR_DECAY = 1.0",
                        f"finetuning.precision = '{precision}'"],
                       train_file=train, dev_file=train, text_column="review",
                       label_column="sentiment", log=lines.append)
    assert keras.mixed_precision.dtype_policy().name == "float32"
    assert results["hyperparameters"]["precision"] == precision
    assert results["median"]["accuracy"] == 1.0
    trial = results["trials"][0]
    if precision == "mixed_float16":
        assert trial["final_loss_scale"] == 2.0 ** (15 - trial["skipped_steps"])
        assert 0 < trial["skipped_steps"] < results["num_train_steps"] // 4
        last_step = [line for line in lines if line.startswith("  step ")][-1]
        assert last_step.endswith(f"| loss scale {trial['final_loss_scale']:g}, "
                                  f"{trial['skipped_steps']} skipped")
    else:
        assert "skipped_steps" not in trial and "loss scale" not in " ".join(lines)
    reader = tf.train.load_checkpoint(str(tmp_path / "out" / "trial_0" / "model" / "ckpt"))
    dtypes = {v for k, v in reader.get_variable_to_dtype_map().items()
              if k.startswith("model/") and "OPTIMIZER" not in k}
    assert dtypes == {tf.float32}


def test_xla_fine_tuning_trains_the_weights_of_the_uncompiled_step(tmp_path, init,
                                                                    mirrored_strategy):
    """finetuning.jit_compile: XLA compiles the forward and backward pass of batches cut to
    a multiple of 32 tokens (padding the attention masks out); with dropout off the weights
    end as the uncompiled step's, on one device and on 2 replicas."""
    import dataclasses

    import tensorflow as tf

    from electra_tf.finetune import runner
    quiet = dataclasses.replace(init, config=dataclasses.replace(
        init.config, dropout_rate=0.0, attention_dropout_rate=0.0))
    rows = movie_rows()[:24]
    train = write_csv(tmp_path / "train.csv", ["label", "text"],
                      [(r["sentiment"], r["text"]) for r in rows])
    weights = {}
    for name, jit, strategy in (("plain", False, None), ("xla", True, None),
                                ("xla_mirrored", True, mirrored_strategy)):
        results = finetune("classification", tmp_path / name, quiet,
                           ["NUM_EPOCHS = 2", "LEARNING_RATE = 1e-3",
                            "finetuning.head_dropout = 0.0", f"finetuning.jit_compile = {jit}"],
                           strategy=strategy, train_file=train, dev_file=train)
        assert results["hyperparameters"]["jit_compile"] is jit
        reader = tf.train.load_checkpoint(str(tmp_path / name / "trial_0" / "model" / "ckpt"))
        weights[name] = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
                         if n.startswith("model/") and "OPTIMIZER_SLOT" not in n}
    assert len(weights["plain"]) > 20
    for name in ("xla", "xla_mirrored"):
        assert weights[name].keys() == weights["plain"].keys()
        for key in weights["plain"]:
            np.testing.assert_allclose(weights[name][key], weights["plain"][key], rtol=1e-4,
                                       atol=2e-5, err_msg=f"{name}: {key}")
    features = {"input_ids": np.ones((3, 48), np.int32),
                "input_mask": (np.arange(48) < np.array([[5], [20], [40]])).astype(np.int32),
                "label_ids": np.arange(3)}
    assert runner._batch(features, np.array([0, 1]), 32)["input_ids"].shape == (2, 32)
    assert runner._batch(features, np.array([0, 2]), 32)["input_mask"].shape == (2, 48)
    assert runner._batch(features, np.array([0, 1]))["input_ids"].shape == (2, 20)
    assert runner._batch(features, np.array([2]), 32)["label_ids"].tolist() == [2]


def test_static_shapes_train_and_predict_as_batches_cut_to_their_longest(
        tmp_path, init, mirrored_strategy, monkeypatch):
    """finetuning.static_shapes (on by itself under TPUStrategy): every training batch keeps
    all MAX_SEQ_LENGTH positions and every prediction batch has eval_batch_size rows (the
    last padded with empty rows). With dropout off the weights and the dev predictions end
    as with batches cut to their longest sequence: on one device; with XLA compiling the
    whole step, clipping and update included, and each prediction batch, as a TPU compiles
    them (jit_compile=True refuses an op XLA cannot compile); and on 2 replicas, which split
    the predictions too. A sentence task, and SQuAD 2.0 with ELECTRA's head (whose beam
    search runs in the predictions)."""
    from electra_tf.finetune import runner
    quiet = dataclasses.replace(init, config=dataclasses.replace(
        init.config, dropout_rate=0.0, attention_dropout_rate=0.0))
    shapes = []
    batch = runner._batch

    def recorded(*args, **kwargs):
        out = batch(*args, **kwargs)
        shapes.append(out["input_ids"].shape)
        return out

    monkeypatch.setattr(runner, "_batch", recorded)
    rows = movie_rows()[:24]
    sentences = write_csv(tmp_path / "train.csv", ["label", "text"],
                          [(r["sentiment"], r["text"]) for r in rows])
    qa = squad_json(tmp_path / "squad.json",
                    [austen_sentences(12)[i:i + 2] for i in range(0, 12, 2)], impossible=True)
    bindings = ["NUM_EPOCHS = 2", "LEARNING_RATE = 1e-3", "finetuning.head_dropout = 0.0",
                "finetuning.eval_batch_size = 10"]
    runs = (("classification", sentences, [], ("static", "static_xla", "static_mirrored")),
            ("squad_v2", qa, ["MAX_SEQ_LENGTH = 96", "finetuning.max_query_length = 24"],
             ("static_xla",)))
    for task, train, more, variants in runs:
        length = 96 if task == "squad_v2" else 48
        outcome = {}
        for name in ("cut",) + variants:
            shapes.clear()
            results = finetune(
                task, tmp_path / f"{task}_{name}", quiet, bindings + more + [
                    f"finetuning.static_shapes = {name != 'cut'}",
                    f"finetuning.jit_compile = {name == 'static_xla'}"],
                strategy=mirrored_strategy if name == "static_mirrored" else None,
                train_file=train, dev_file=train)
            assert results["hyperparameters"]["static_shapes"] is (name != "cut")
            if name == "cut":
                assert min(shape[1] for shape in shapes) < length  # there was padding to cut
            else:
                assert set(shapes) == {(8, length), (10, length)}, name
            reader = tf.train.load_checkpoint(str(tmp_path / f"{task}_{name}" / "trial_0"
                                                  / "model" / "ckpt"))
            outcome[name] = ({n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
                              if n.startswith("model/") and "OPTIMIZER_SLOT" not in n},
                             results["trials"][0]["dev"])
        cut, scores = outcome["cut"]
        assert len(cut) > 20
        for name in variants:
            weights, dev = outcome[name]
            assert weights.keys() == cut.keys()
            for key in cut:
                np.testing.assert_allclose(weights[key], cut[key], rtol=1e-4, atol=2e-5,
                                           err_msg=f"{task} {name}: {key}")
            # (SQuAD 2.0's best thresholds are no-answer probabilities: to the weights' rtol)
            thresholds = {k for k in scores if k.endswith("_threshold")}
            assert {k: v for k, v in dev.items() if k not in thresholds} == pytest.approx(
                {k: v for k, v in scores.items() if k not in thresholds},
                abs=1e-6), f"{task} {name}"
            assert {k: dev[k] for k in thresholds} == pytest.approx(
                {k: scores[k] for k in thresholds}, rel=1e-4), f"{task} {name}"
        if task == "classification":  # the dev predictions, row by row
            predicted = [read_tsv(tmp_path / f"{task}_{name}" / "trial_0" /
                                  "dev_predictions.tsv") for name in ("cut",) + variants]
            assert len(predicted[0]) == 25 and all(p == predicted[0] for p in predicted)


def test_a_random_encoder_on_a_cased_vocab_needs_lower_case_false(tmp_path):
    """--init_checkpoint=none takes its casing from --lower_case (default true): with a
    cased vocab that would lower-case every text, so it is refused as the data builder
    refuses it; --lower_case=false keeps the capitals."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import runner
    vocab = cased_vocab(tmp_path / "cased.txt")
    with pytest.raises(UserInputError, match=r"cased\.txt is cased .* but --lower_case=true "
                                             r"lower-cases the text.*pass --lower_case=false"):
        runner.load_initialization("none", vocab, model_size="tiny")
    init = runner.load_initialization("none", vocab, model_size="tiny", lower_case=False)
    assert (init.lower_case, init.strip_accents) == (False, False)
    assert runner.load_initialization("none", UNCASED_VOCAB, model_size="tiny").lower_case


def test_a_random_encoder_on_an_accented_vocab_needs_strip_accents_false(tmp_path):
    """--init_checkpoint=none strips accents as --lower_case unless --strip_accents says
    otherwise: a vocab learned without stripping is refused as the data builder refuses it
    (it trained with stripping, the vocab's accented tokens dead, without a word), and
    --strip_accents=false keeps them; with a checkpoint, whose model_info.json gives its
    text processing, both flags are refused (--lower_case was silently ignored)."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import runner
    vocab = open(UNCASED_VOCAB, encoding="utf-8").read().split("\n")
    for k in range(80):
        vocab[vocab.index(f"[unused{k}]")] = f"caf\u00e9{k}"
    accented = tmp_path / "accented.txt"
    accented.write_text("\n".join(vocab), encoding="utf-8")
    with pytest.raises(UserInputError, match=r"accented\.txt was learned without stripping "
                                             r"accents .* pass --strip_accents=false"):
        runner.load_initialization("none", str(accented), model_size="tiny")
    init = runner.load_initialization("none", str(accented), model_size="tiny",
                                      strip_accents=False)
    assert (init.lower_case, init.strip_accents) == (True, False)
    assert init.tokenizer().encode(["Café5"]) == [[vocab.index("caf\u00e95")]]
    for flags, named in ((["--lower_case"], "--lower_case is"),
                         (["--nolower_case", "--strip_accents"],
                          "--lower_case and --strip_accents are"),
                         # (the checkpoint's shape was trained silently)
                         (["--model_size=large", "--lower_case"],
                          "--model_size and --lower_case are")):
        result = run_script("run_finetuning.py", "--task=classification",
                            f"--init_checkpoint={tmp_path}/model", f"--model_dir={tmp_path}/out",
                            f"--train_file={tmp_path}/t.csv", f"--dev_file={tmp_path}/d.csv",
                            *flags, cwd=ROOT)
        assert (result.returncode, result.stderr.splitlines()) == (1, [
            f"error: {named} for --init_checkpoint=none; a checkpoint is fine-tuned with the "
            "shape and text processing it was trained with (its model_info.json): drop "
            + ("them" if len(flags) > 1 else "it")])


def test_an_unknown_precision_or_qa_head_or_a_wrong_type_fails_before_training(tmp_path,
                                                                            init):
    from electra_tf.errors import UserInputError
    rows = movie_rows()[:8]
    train = write_csv(tmp_path / "train.csv", ["sentiment", "review"],
                      [(r["sentiment"], r["text"]) for r in rows])
    for binding, message in (
            ("finetuning.precision = 'bfloat16'", r"finetuning.precision='bfloat16' is not one "
                                                  r"of float32, mixed_bfloat16, mixed_float16"),
            ("finetuning.doc_stride = 0", r"^finetuning.doc_stride=0 must be at least 1"),
            ("finetuning.tag_encoding = 'IOB'", r"^finetuning.tag_encoding='IOB' is not "
                                                r"'BIOES' or 'file'"),
            ("finetuning.qa_head = 'xlnet'", r"^finetuning.qa_head='xlnet' is not one of "
                                             r"electra, bert"),
            # a string 'False' is true: it would have compiled with XLA
            ("finetuning.jit_compile = 'False'", r"^finetuning.jit_compile='False' must be "
                                                 r"True or False \(no quotes\)"),
            ("finetuning.clip_norm = 0.0", r"^finetuning.clip_norm=0.0 must be a positive "
                                           r"number, or None for no clipping"),
            ("LEARNING_RATE = '3e-4'", r"^LEARNING_RATE='3e-4' \(finetuning.learning_rate\) "
                                       r"must be a number \(no quotes\)"),
            # before anything is written (--overwrite deleted the earlier run first)
            ("optimizer.bias_correction = 'False'", r"^optimizer.bias_correction='False' must "
                                                    r"be True or False \(no quotes\)"),
            # the official qa_na_threshold is a logit; ours a probability
            ("finetuning.no_answer_threshold = -2.75",
             r"^finetuning.no_answer_threshold=-2.75 is not a probability: .* \(the official "
             r"qa_na_threshold, -2.75, is a logit: 0.0601, the default for qa_head='electra'\)")):
        with pytest.raises(UserInputError, match=message):
            finetune("classification", tmp_path / "out", init, [binding], train_file=train,
                     dev_file=train, text_column="review", label_column="sentiment")
    # The last trial's seed past numpy's 2**32 - 1: a traceback once two trials had trained.
    with pytest.raises(UserInputError, match=(
            r"^--seed=4294967294 with --num_trials=3 seeds trials up to 4294967296, above "
            r"4294967295: use a --seed from 0 to 4294967293\n")):
        finetune("classification", tmp_path / "out", init, num_trials=3, seed=2**32 - 2,
                 train_file=train, dev_file=train, text_column="review",
                 label_column="sentiment")
    assert not os.path.exists(tmp_path / "out")


def test_regression_jsonl_scores_match_predictions(tmp_path, init):
    from scipy import stats
    rows = movie_rows()
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps({"sentence": r["text"], "score": float(r["rating"])})
                             + "\n" for r in rows[:64]), encoding="utf-8")
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps({"id": f"review-{i}", "sentence": r["text"],
                                       "score": float(r["rating"])}) + "\n"
                           for i, r in enumerate(rows[64:104])), encoding="utf-8")
    results = finetune("regression", tmp_path / "out", init, ["NUM_EPOCHS = 1"],
                       train_file=str(jsonl), dev_file=str(dev), text_column="sentence",
                       label_column="score")
    table = read_tsv(tmp_path / "out" / "trial_0" / "dev_predictions.tsv")[1:]
    assert [row[0] for row in table] == [f"review-{i}" for i in range(40)]  # the id field
    predicted = [float(row[1]) for row in table]
    gold = [float(r["rating"]) for r in rows[64:104]]
    np.testing.assert_allclose([float(row[2]) for row in table], gold, rtol=1e-5)
    dev_scores = results["trials"][0]["dev"]
    assert results["metric"] == "spearman"
    assert dev_scores["pearson"] == pytest.approx(stats.pearsonr(gold, predicted)[0], abs=1e-4)
    assert dev_scores["spearman"] == pytest.approx(stats.spearmanr(gold, predicted)[0], abs=1e-4)


STS_B_HEADER = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
                "sentence1", "sentence2", "score"]


def _glue(folder, name, header, rows):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        if header:
            f.write("\t".join(header) + "\n")
        f.writelines("\t".join(r) + "\n" for r in rows)


def test_glue_formats_and_submission_files(tmp_path, init):
    """SST-2, CoLA (no header), MNLI (matched + mismatched dev and test) and STS-B
    (regression) in the GLUE release's layout: scores per dev set, test predictions in the
    submission format."""
    rows = movie_rows()
    label = lambda r: "1" if r["sentiment"] == "positive" else "0"  # noqa: E731
    sst = tmp_path / "glue" / "SST-2"
    _glue(sst, "train.tsv", ["sentence", "label"], [(r["text"], label(r)) for r in rows[:40]])
    _glue(sst, "dev.tsv", ["sentence", "label"], [(r["text"], label(r)) for r in rows[40:60]])
    _glue(sst, "test.tsv", ["index", "sentence"], [(str(i), r["text"])
                                                   for i, r in enumerate(rows[60:70])])
    results = finetune("sst2", tmp_path / "sst", init, ["NUM_EPOCHS = 1"],
                       data_dir=str(tmp_path / "glue"))  # finds glue/SST-2
    assert results["metric"] == "accuracy" and set(results["median"]) == {"accuracy", "mcc", "f1"}
    submission = read_tsv(tmp_path / "sst" / "trial_0" / "glue" / "SST-2.tsv")
    assert submission[0] == ["index", "prediction"]
    assert [r[0] for r in submission[1:]] == [str(i) for i in range(10)]
    assert {r[1] for r in submission[1:]} <= {"0", "1"}

    cola = tmp_path / "CoLA"
    _glue(cola, "train.tsv", None, [("src", label(r), "", r["text"]) for r in rows[:24]])
    _glue(cola, "dev.tsv", None, [("src", label(r), "", r["text"]) for r in rows[24:40]])
    lines = []
    results = finetune("cola", tmp_path / "cola", init, ["finetuning.max_train_steps = 2"],
                       data_dir=str(cola), log=lines.append)
    assert results["metric"] == "mcc"
    # The cap shows as the cap, not as the epochs it cuts short.
    assert re.search(r"24 training examples \(24 features of 48 tokens\), 2 steps of 8 "
                     r"\(max_train_steps=2 of the \d+ of [\d.]+ epochs\)", "\n".join(lines))
    predicted = [r[1] for r in read_tsv(tmp_path / "cola" / "trial_0" / "dev_predictions.tsv")[1:]]
    gold = [int(label(r)) for r in rows[24:40]]
    cola_mcc = results["median"]["mcc"]

    mnli = tmp_path / "MNLI"
    nli = ("contradiction", "entailment", "neutral")
    head = ["index", "promptID", "pairID", "genre", "s1b", "s2b", "s1p", "s2p", "sentence1",
            "sentence2", "gold_label"]
    pair = lambda i, r: [str(i)] + ["x"] * 7 + [r["text"], rows[i + 1]["text"]]  # noqa: E731
    _glue(mnli, "train.tsv", head, [pair(i, r) + [nli[i % 3]] for i, r in enumerate(rows[:24])])
    for name, part in (("dev_matched.tsv", rows[24:36]), ("dev_mismatched.tsv", rows[36:48])):
        _glue(mnli, name, head, [pair(i, r) + [nli[i % 3]] for i, r in enumerate(part)])
    for name in ("test_matched.tsv", "test_mismatched.tsv"):
        _glue(mnli, name, head[:-1], [pair(i, r) for i, r in enumerate(rows[50:56])])
    # GLUE's diagnostic set (the root's diagnostic/ folder), predicted as AX.tsv.
    _glue(tmp_path / "diagnostic", "diagnostic.tsv", ["index", "sentence1", "sentence2"],
          [(str(i), r["text"], rows[i + 1]["text"]) for i, r in enumerate(rows[60:65])])
    results = finetune("mnli", tmp_path / "mnli", init, ["finetuning.max_train_steps = 2"],
                       data_dir=str(mnli))
    assert {"accuracy", "accuracy_mismatched", "macro_f1_mismatched"} <= set(results["median"])
    for name, n in (("MNLI-m.tsv", 6), ("MNLI-mm.tsv", 6), ("AX.tsv", 5)):
        submission = read_tsv(tmp_path / "mnli" / "trial_0" / "glue" / name)
        assert submission[0] == ["index", "prediction"]
        assert [r[0] for r in submission[1:]] == [str(i) for i in range(n)]
        assert {r[1] for r in submission[1:]} <= set(nli)
    # A dev file's rows are named by its index column (the line number where it has none).
    dev = read_tsv(tmp_path / "mnli" / "trial_0" / "dev_predictions.tsv")
    assert [r[0] for r in dev[1:]] == [str(i) for i in range(12)]
    sts = tmp_path / "STS-B"
    head = STS_B_HEADER
    score = lambda r: f"{(float(r['rating']) + 4) * 5 / 8:.3f}"  # noqa: E731  [-4, 4] -> [0, 5]
    sts_row = lambda i, r: [str(i)] + ["x"] * 6 + [r["text"], rows[i + 2]["text"]]  # noqa: E731
    _glue(sts, "train.tsv", head, [sts_row(i, r) + [score(r)] for i, r in enumerate(rows[:24])])
    _glue(sts, "dev.tsv", head, [sts_row(i, r) + [score(r)] for i, r in enumerate(rows[24:40])])
    _glue(sts, "test.tsv", head[:-1], [sts_row(i, r) for i, r in enumerate(rows[40:45])])
    results = finetune("stsb", tmp_path / "stsb", init, ["finetuning.max_train_steps = 2"],
                       data_dir=str(sts))
    assert results["metric"] == "spearman" and results["labels"] is None
    assert set(results["median"]) == {"pearson", "spearman", "mse"}
    assert results["hyperparameters"]["double_unordered"] is True  # (STS-B's pairs: unordered)
    submission = read_tsv(tmp_path / "stsb" / "trial_0" / "glue" / "STS-B.tsv")
    assert submission[0] == ["index", "prediction"] and len(submission) == 6
    assert all(0.0 <= float(v) <= 5.0 and re.fullmatch(r"\d\.\d{3}", v) for _, v in submission[1:])
    from sklearn import metrics as sklearn
    assert cola_mcc == pytest.approx(sklearn.matthews_corrcoef(gold, [int(p) for p in predicted]))


def test_glue_files_of_another_shape_are_refused_naming_the_line(tmp_path):
    """A GLUE row with more or fewer fields than the header (a tab inside a text shifted the
    columns read; STS-B's from the end took another column as its sentence), a test file
    that is not the release's test.tsv (a dev file: its sentences became the indices) or
    repeats an index, and a malformed QQP test row (dropped: the submission lacked it) are
    refused naming the file and line; QQP's train and dev files skip theirs, as before."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import tasks

    def refused(name, message, **files):
        with pytest.raises(UserInputError) as error:
            tasks.load(tasks.get_task(name), log=lambda *_: None, **files)
        assert str(error.value) == message

    sts = tmp_path / "STS-B"
    good = [str(0), *["x"] * 6, "A man plays.", "A man sings.", "2.5"]
    _glue(sts, "train.tsv", STS_B_HEADER, [good, good[:6] + good[7:]])
    _glue(sts, "dev.tsv", STS_B_HEADER, [good])
    refused("stsb", f"{sts}/train.tsv line 3 has 9 tab-separated fields where the header has "
            "10 (a tab inside a text, or a field missing?); fix the line, or use the files of "
            "the GLUE release (or --task=classification with your own columns)",
            data_dir=str(sts))
    cola = tmp_path / "CoLA"
    _glue(cola, "train.tsv", None, [("src", "1", "", "Fine."), ("src", "0", "", "Bad\tone.")])
    _glue(cola, "dev.tsv", None, [("src", "1", "", "Fine.")])
    refused("cola", f"{cola}/train.tsv line 2 has 5 tab-separated fields where a CoLA file has "
            "4 (a tab inside a text, or a field missing?); fix the line, or use the files of "
            "the GLUE release (or --task=classification with your own columns)",
            data_dir=str(cola))
    sst = tmp_path / "SST-2"
    _glue(sst, "train.tsv", ["sentence", "label"], [("Good.", "1"), ("Bad.", "0")])
    _glue(sst, "dev.tsv", ["sentence", "label"], [("Fine.", "1")])
    files = dict(train_file=str(sst / "train.tsv"), dev_file=str(sst / "dev.tsv"))
    refused("sst2", f"{sst}/dev.tsv is not a GLUE test file: its header begins 'sentence', "
            "not 'index' (the release's test.tsv); pass that file (or --task=classification "
            "for your own columns)", test_file=str(sst / "dev.tsv"), **files)
    _glue(sst, "test.tsv", ["index", "sentence"], [("0", "Good."), ("1", "Bad."), ("0", "Ok.")])
    refused("sst2", f"{sst}/test.tsv line 4: index 0 is also line 2's; the GLUE server takes "
            "each once, fix the file", data_dir=str(sst))
    qqp = tmp_path / "QQP"
    head = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    row = lambda i: [str(i), "1", "2", "Why?", "Why not?", str(i % 2)]  # noqa: E731
    _glue(qqp, "train.tsv", head, [row(0), row(1), row(2)[:4], row(3)])
    _glue(qqp, "dev.tsv", head, [row(4), row(5)])
    _glue(qqp, "test.tsv", ["id", "question1", "question2"], [("0", "Why?", "Why not?"),
                                                               ("1", "How?")])
    refused("qqp", f"{qqp}/test.tsv line 3 has 2 tab-separated fields where the header has 3 "
            "(a tab inside a text, or a field missing?); fix the line, or use the files of the "
            "GLUE release (or --task=classification with your own columns)", data_dir=str(qqp))
    (qqp / "test.tsv").unlink()
    lines = []
    data = tasks.load(tasks.get_task("qqp"), data_dir=str(qqp), log=lines.append)
    assert len(data.train.examples) == 3 and lines == [
        "skipped 1 malformed lines in the QQP files (known in QQP)"]
    assert [e.guid for e in data.dev[0].examples] == ["4", "5"]  # the id column
    # A --data_dir that is not there; MRPC as Microsoft releases it (no train.tsv).
    refused("rte", f"--data_dir={tmp_path}/nowhere does not exist; pass the folder of the "
            "task's release", data_dir=str(tmp_path / "nowhere"))
    (tmp_path / "MRPC").mkdir()
    (tmp_path / "MRPC" / "msr_paraphrase_train.txt").write_text("Quality\n")
    refused("mrpc", f"{tmp_path}/MRPC has no train file (train.tsv) (GLUE's download script "
            "makes MRPC's train.tsv and dev.tsv from msr_paraphrase_train.txt); pass the folder "
            "of the task's release as --data_dir", data_dir=str(tmp_path / "MRPC"))
    # A dev file whose header begins as a test file's (STS-B's index, QQP's id) has a label.
    refused("stsb", f"{sts}/dev.tsv is not a GLUE test file: it has a label column (score), as "
            "train and dev files do; pass the release's test.tsv",
            train_file=str(sts / "dev.tsv"), dev_file=str(sts / "dev.tsv"),
            test_file=str(sts / "dev.tsv"))
    # On a file system with URLs (gs://; TensorFlow's ram:// here), MNLI's diagnostic set in
    # the GLUE root's diagnostic/ (a path with ".." it does not take).
    root = f"ram://{tmp_path.name}/glue"
    head = ["index", *"abcdefg", "sentence1", "sentence2"]
    pair = ["0", *"xxxxxxx", "A man plays.", "A man sings."]
    for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv", "test_matched.tsv"):
        labelled = name != "test_matched.tsv"
        with tf.io.gfile.GFile(f"{root}/MNLI/{name}", "w") as f:
            f.write("\n".join("\t".join(row + ["gold_label" if i == 0 else "neutral"][
                :labelled]) for i, row in enumerate((head, pair))) + "\n")
    with tf.io.gfile.GFile(f"{root}/diagnostic/diagnostic.tsv", "w") as f:
        f.write("index\tsentence1\tsentence2\n0\tA man plays.\tA man sings.\n")
    data = tasks.load(tasks.get_task("mnli"), data_dir=f"{root}/MNLI", log=lambda *_: None)
    assert [(s.path, s.submission) for s in data.test] == [
        (f"{root}/MNLI/test_matched.tsv", "MNLI-m.tsv"),
        (f"{root}/diagnostic/diagnostic.tsv", "AX.tsv")]
    # A CoNLL-2003 folder given to the generic tagging task.
    conll = tmp_path / "conll"
    conll.mkdir()
    for name in ("train.txt", "valid.txt"):
        (conll / name).write_text("Emma B-PER\n")
    refused("tagging", f"{conll} has no dev file (dev.tsv or dev.txt or dev.conll) (a "
            "CoNLL-2003 release? --task=conll reads its valid.txt); name yours so, or pass "
            "--train_file and --dev_file", data_dir=str(conll))
    # A generic QA folder reads SQuAD's JSON only (a train.csv was read, and refused as not
    # JSON), and is not a release.
    qa = tmp_path / "qa"
    qa.mkdir()
    (qa / "train.csv").write_text("text,label\nFine.,pos\n")
    refused("qa", f"{qa} has no train file (train.json); name yours so, or pass --train_file "
            "and --dev_file", data_dir=str(qa))
    # MNLI's test files given one by one go to their own submission files.
    assert tasks._submission_of(tasks.get_task("mnli"), "x/test_mismatched.tsv") == (
        "MNLI-mm.tsv", None)
    assert tasks._submission_of(tasks.get_task("mnli"), "x/diagnostic.tsv") == ("AX.tsv", (1, 2))
    assert tasks._submission_of(tasks.get_task("mnli"), "x/test.tsv") == ("MNLI-m.tsv", None)


def test_mrpc_and_stsb_train_on_both_orders_and_stsb_on_scores_over_5(tmp_path, init):
    """The official code's double_unordered (MRPC and STS-B train on each pair in both
    orders) and STS-B targets (score / 5; predictions scaled back). The pairs cut to fit
    are noted, each once."""
    from electra_tf.finetune import features, runner, tasks
    rows = movie_rows()[:12]
    pairs = [(rows[i]["text"], rows[i + 1]["text"]) for i in range(0, 12, 2)]
    _glue(tmp_path / "MRPC", "train.tsv", ["Quality", "#1 ID", "#2 ID", "#1", "#2"],
          [(str(i % 2), "1", "2", a, b) for i, (a, b) in enumerate(pairs)])
    _glue(tmp_path / "MRPC", "dev.tsv", ["Quality", "#1 ID", "#2 ID", "#1", "#2"],
          [("1", "1", "2", *pairs[0])])
    head = STS_B_HEADER
    _glue(tmp_path / "STS-B", "train.tsv", head,
          [(str(i), *["x"] * 6, a, b, f"{i * 0.8:.1f}") for i, (a, b) in enumerate(pairs)])
    _glue(tmp_path / "STS-B", "dev.tsv", head, [("0", *["x"] * 6, *pairs[0], "2.5")])
    tokenizer = init.tokenizer()
    options = dict(max_seq_length=48, doc_stride=128, max_query_length=64)
    for name in ("mrpc", "stsb"):
        data = tasks.load(tasks.get_task(name), data_dir=str(tmp_path), log=lambda *_: None)
        labels, regression = data.labels, name == "stsb"
        notes = []
        adapter = runner._SentenceTask(data, tokenizer, {**options, "double_unordered": True},
                                       notes.append)
        swapped = [dataclasses.replace(e, text_a=e.text_b, text_b=e.text_a)
                   for e in data.train.examples]
        expected, _ = features.encode_sentences(tokenizer, data.train.examples + swapped, 48,
                                                labels, regression)
        assert len(expected["input_ids"]) == 2 * len(pairs)
        for key, value in expected.items():
            np.testing.assert_array_equal(adapter.train_features[key], value)
        cut = features.encode_sentences(tokenizer, data.train.examples, 48, labels)[1]
        assert 0 < cut < len(pairs)
        assert notes == [f"{data.train.path}: {cut} of {len(pairs)} examples do not fit in 48 "
                         "tokens; they are cut, a word piece at a time from the longer text "
                         "(raise MAX_SEQ_LENGTH to keep more)"]
        single = runner._SentenceTask(data, tokenizer, {**options, "double_unordered": False},
                                      notes.append)
        assert len(single.train_features["input_ids"]) == len(pairs)
        assert notes[1:] == notes[:1]
    # STS-B: the head learns score / 5, and predicts score.
    scores = adapter.train_features["label_ids"]
    assert float(adapter.loss({"logits": tf.constant(scores[:, None] / 5)},
                              adapter.train_features)) == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(adapter.predictions({"logits": scores[:, None] / 5}), scores,
                               rtol=1e-6)


# ------------------------------------------------------------------------------ optimization


def test_layerwise_multipliers_reach_every_variable():
    """One step with the same gradient everywhere (no weight decay) moves each variable
    lr x decay^depth: the head depth 0, block i of n depth n - i, the embeddings n + 1;
    one more for every encoder variable with the official exponents."""
    import gin
    import tensorflow as tf

    from electra_tf.finetune import runner
    from electra_tf.modeling.config import encoder_config
    config = encoder_config("tiny", vocab_size=30522, num_layers=3,
                            embedding_size=64)  # with the embeddings' projection
    random = runner.Initialization(config, None, UNCASED_VOCAB, True, True, "random")
    gin.parse_config("optimizer.weight_decay_rate = 0.0")
    try:
        for official in (False, True):
            model, optimizer = runner.build_trial(
                random, "sentence", 2, seed=0, steps=10, learning_rate=1e-3,
                layerwise_lr_decay=0.5, official_layerwise_decay=official,
                warmup_proportion=0.0)
            variables = model.trainable_variables
            before = [v.numpy().copy() for v in variables]
            optimizer.apply([tf.ones_like(v) for v in variables], variables)
            moved = {v.path: float(np.abs(v.numpy() - b).mean())
                     for v, b in zip(variables, before)}
            head = moved["task_head/output/bias"]
            assert head == pytest.approx(moved["task_head/output/kernel"], rel=1e-5)
            depths = []
            for path, distance in moved.items():
                if path.startswith("task_head/"):
                    continue
                block = re.match(r"electra/layer_(\d+)/", path)
                depth = 3 - int(block.group(1)) if block else 4  # embeddings(+projection)
                depths.append(depth)
                assert distance / head == pytest.approx(0.5 ** (depth + official), rel=1e-4), path
            assert sorted(set(depths)) == [1, 2, 3, 4]
            assert any(p.startswith("electra/embeddings_project/") for p in moved)
    finally:
        gin.clear_config()


# ------------------------------------------------------------------------------ tagging and QA


NAMES = {"Elizabeth", "Darcy", "Bingley", "Jane", "Lydia", "Wickham", "Collins", "Bennet",
         "Charlotte", "Kitty", "Lucas", "Catherine", "Gardiner", "Fitzwilliam", "Meryton"}


def austen_sentences(limit):
    """Sentences of Pride and Prejudice that name a character."""
    out = []
    with gzip.open(os.path.join(DATA, "corpus", "prideprejudice.txt.gz"), "rt",
                   encoding="utf-8") as f:
        for line in f:
            words = re.findall(r"\w+|[^\w\s]", line)
            if 6 <= len(words) <= 30 and NAMES & set(words):
                out.append(line.strip())
                if len(out) == limit:
                    break
    return out


TITLES = {"Mr.", "Mrs.", "Miss", "Lady", "Sir", "Colonel"}


def conll(path, sentences):
    """Names tagged B-PER, a title before a name B-PER with the name I-PER."""
    lines = []
    for sentence in sentences:
        words = re.findall(r"(?:Mrs?)\.|\w+|[^\w\s]", sentence)
        tags = ["O"] * len(words)
        for i, word in enumerate(words):
            if word in NAMES:
                if i and words[i - 1] in TITLES:
                    tags[i - 1], tags[i] = "B-PER", "I-PER"
                else:
                    tags[i] = "I-PER" if i and tags[i - 1] != "O" else "B-PER"
        lines += [f"{w} {t}" for w, t in zip(words, tags)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


def test_sentence_features_are_berts_packing(uncased_tokenizer, monkeypatch):
    """[CLS] A [SEP] (B [SEP]) placed from the flat ids, a chunk of rows at a time (here 7),
    equal the per-example packing they replace: texts shorter and longer than L, empty
    ones, pairs cut a piece at a time from the longer text (the second on a tie), a
    missing second text."""
    from electra_tf.finetune import features, readers
    monkeypatch.setattr(features, "_PACK_ROWS", 7)
    tok, L = uncased_tokenizer, 24
    sentences = austen_sentences(40)
    texts = [" ".join(sentences[i:i + i % 4]) for i in range(40)]  # 0 to 3 sentences
    for pairs in (False, True):
        examples = [readers.Example(t, (texts[-1 - i] if i % 5 else None) if pairs else None,
                                    None, str(i)) for i, t in enumerate(texts)]
        got, cut = features.encode_sentences(tok, examples, L, None)
        expected_cut = 0
        for n, e in enumerate(examples):
            a = tok.encode([e.text_a])[0]
            b = tok.encode([e.text_b or ""])[0] if pairs else None
            expected_cut += len(a) + (len(b) + 1 if b is not None else 0) > L - 2
            if b is None:
                ids, segments = [tok.cls_id] + a[:L - 2] + [tok.sep_id], []
            else:
                while len(a) + len(b) > L - 3:
                    (a if len(a) > len(b) else b).pop()
                ids = [tok.cls_id] + a + [tok.sep_id] + b + [tok.sep_id]
                segments = [1] * (len(b) + 1)
            pad = [0] * (L - len(ids))
            assert got["input_ids"][n].tolist() == ids + pad, n
            assert got["input_mask"][n].tolist() == [1] * len(ids) + pad, n
            assert got["segment_ids"][n].tolist() == (
                [0] * (len(ids) - len(segments)) + segments + pad), n
        assert cut == expected_cut and 0 < cut < len(examples), (pairs, cut)  # some were cut


def test_prediction_tables_quote_fields_with_tabs_and_line_ends():
    """An id or label holding a tab or a line end (a validly quoted CSV's) is quoted as csv
    and pandas read it, so that each row stays one record (it split rows and shifted
    columns); plain fields are written as they are."""
    import csv
    import io

    from electra_tf.finetune import runner
    rows = [["id", "prediction", "label"], ["7", "good", "bad"],
            ["id\t0", "good\tone", "bad\none"], ['say "hi"', "x", "a\rb"]]
    text = runner._tsv(rows)
    assert text.startswith("id\tprediction\tlabel\n7\tgood\tbad\n")
    assert list(csv.reader(io.StringIO(text, newline=""), delimiter="\t")) == rows


def test_tagging_predictions_are_tab_separated_where_a_word_holds_a_space(tmp_path):
    """CoNLL's columns are space-separated; a word with a space (a tab-separated file's
    "New York", a Chinese file's U+3000, which Python's str.split splits at) would add a
    column, so such a split's predictions are tab-separated."""
    from electra_tf.finetune import readers, runner
    task = object.__new__(runner._TaggingTask)
    task.labels, task.tag_scheme, task.fallback = ["B-LOC", "O"], None, "O"
    for words, sep in ((["New York", "sleeps"], "\t"), (["Emma", "sleeps"], " "),
                       (["\u3000", "sleeps"], "\t")):  # (an ideographic space is a word)
        split = runner._Split("dev", "dev.txt", [readers.TaggedSentence(words, ["B-LOC", "O"],
                                                                        "1")],
                              {}, None, {"positions": np.array([[1, 3]])})
        task.write(str(tmp_path), split, {"tag_ids": np.array([[1, 0, 1, 1]], np.int32)})
        assert (tmp_path / "dev_predictions.txt").read_text() == (
            f"{words[0]}{sep}B-LOC{sep}B-LOC\nsleeps{sep}O{sep}O\n")


def test_tagging_word_positions_hold_only_the_words_that_can_fit(uncased_tokenizer):
    """A sentence of 5,000 words (a missing blank line) among short ones: word positions
    are as wide as the words a sequence can hold (L - 2), not the longest sentence, whose
    words past them are cut and counted."""
    from electra_tf.finetune import features, readers
    sentences = [readers.TaggedSentence(["the"] * 5000, ["O"] * 5000, "0"),
                 readers.TaggedSentence(["a", "b"], ["O", "O"], "1")]
    _, positions, cut = features.encode_tagging(uncased_tokenizer, sentences, 16, ["O"])
    assert positions.shape == (2, 14) and cut == 5000 - 14
    assert positions.tolist() == [list(range(1, 15)), [1, 2] + [-1] * 12]


def test_a_dev_chunk_tag_training_lacks_is_predicted_in_the_files_scheme(tmp_path, init):
    """A dev S-PER beside a BIO training file: the model (BIOES) has S-PER, and its
    predictions are written in the files' scheme read together (BIOES), so that a perfect
    model's tags are dev's (in BIO its accuracy was 1/3). finetuning.tag_encoding='file'
    learns the training file's tags only: such a dev tag is refused there."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import metrics, runner, tasks
    train, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    train.write_text("Emma B-PER\nWoodhouse I-PER\nof O\nHighbury B-LOC\n", encoding="utf-8")
    dev.write_text("Emma S-PER\nat O\nHartfield S-LOC\n", encoding="utf-8")
    data = tasks.load(tasks.get_task("tagging"), train_file=str(train), dev_file=str(dev))
    task = runner._TaggingTask(data, init.tokenizer(), {"max_seq_length": 16},
                               lambda *_: None)
    assert task.tag_scheme == "BIOES" and {"S-PER", "S-LOC"} <= set(task.labels)
    # Only what training leaves open: a stray I- in a BMES pair of files changes nothing (it
    # turned every M- into I-: accuracy 0.72 for a perfect model), and is refused.
    bmes = "石 B-LOC\n家 M-LOC\n庄 E-LOC\n\n京 S-LOC\n"
    (tmp_path / "bmes.txt").write_text(bmes, encoding="utf-8")
    (tmp_path / "bmes_dev.txt").write_text(bmes + "\n上 B-LOC\n海 I-LOC\n市 E-LOC\n",
                                           encoding="utf-8")
    with pytest.raises(UserInputError, match="tag 'I-LOC' does not occur in the training"):
        tasks.load(tasks.get_task("tagging"), train_file=str(tmp_path / "bmes.txt"),
                   dev_file=str(tmp_path / "bmes_dev.txt"))
    (tmp_path / "bmes_dev.txt").write_text(bmes, encoding="utf-8")
    both = tasks.load(tasks.get_task("tagging"), train_file=str(tmp_path / "bmes.txt"),
                      dev_file=str(tmp_path / "bmes_dev.txt"))
    assert runner._TaggingTask(both, init.tokenizer(), {"max_seq_length": 16},
                               lambda *_: None).tag_scheme == "BMES"
    gold = data.dev[0].examples[0].tags
    written = metrics.respell(metrics.retag(metrics.retag(gold, "BIOES"), task.tag_scheme),
                              task.tag_spelling)
    assert metrics.span_scores([gold], [written])["accuracy"] == 1.0
    with pytest.raises(UserInputError, match=f"{dev} \\(sentence at line 1\\): tag 'S-PER' "
                                             "does not occur in the training file, and "
                                             "finetuning.tag_encoding='file' learns only"):
        runner._TaggingTask(data, init.tokenizer(), {"max_seq_length": 16,
                                                     "tag_encoding": "file"}, lambda *_: None)


def test_tagging_notes_the_words_cut_off_as_untrained_or_predicted(tmp_path, init):
    """Words beyond MAX_SEQ_LENGTH are noted per file: the training file's are not trained
    on (the note said they were predicted, as it says of the dev file's)."""
    from electra_tf.finetune import features, runner, tasks
    sentences = austen_sentences(30)
    data = tasks.load(tasks.get_task("tagging"), train_file=conll(tmp_path / "train.txt",
                                                                  sentences[:20]),
                      dev_file=conll(tmp_path / "dev.txt", sentences[20:]))
    tokenizer, notes = init.tokenizer(), []
    runner._TaggingTask(data, tokenizer, {"max_seq_length": 16, "tag_encoding": "file"},
                        notes.append)
    cut = [features.encode_tagging(tokenizer, s.examples, 16, data.labels)[2]
           for s in (data.train, data.dev[0])]
    assert min(cut) > 0
    assert notes == [
        f"{data.train.path}: 3 tags, learnt as written (finetuning.tag_encoding='file')",
        f"{data.train.path}: {cut[0]} words do not fit in 16 tokens; they are not trained on "
        "(raise MAX_SEQ_LENGTH to avoid it)",
        f"{data.dev[0].path}: {cut[1]} words do not fit in 16 tokens; they are predicted 'O' "
        "(raise MAX_SEQ_LENGTH to avoid it)"]


def test_tagging_span_f1_on_written_predictions(tmp_path, init):
    from seqeval import metrics as seqeval
    sentences = austen_sentences(90)
    train, dev = conll(tmp_path / "train.txt", sentences[:60]), conll(tmp_path / "dev.txt",
                                                                      sentences[60:])
    results = finetune("tagging", tmp_path / "out", init,
                       ["NUM_EPOCHS = 4", "LEARNING_RATE = 2e-3"], train_file=train,
                       dev_file=dev)
    assert results["metric"] == "f1" and results["labels"] == ["B-PER", "I-PER", "O"]
    # Learnt as BIOES (the official encoding), written and scored in the file's BIO.
    assert results["hyperparameters"]["tag_scheme"] == "BIO"
    info = json.loads((tmp_path / "out" / "trial_0" / "task_info.json").read_text())
    # Every chunk shape of the type, I-PER too (the training file's names are all two words
    # long: none is B-PER I-PER E-PER, which a dev name of three words needs).
    assert (info["labels"], info["tag_scheme"]) == (["B-PER", "E-PER", "I-PER", "O", "S-PER"],
                                                    "BIO")
    gold, pred, sentence = [], [], ([], [])
    for line in (tmp_path / "out" / "trial_0" / "dev_predictions.txt").read_text().split("\n"):
        if not line:
            if sentence[0]:
                gold.append(sentence[0])
                pred.append(sentence[1])
            sentence = ([], [])
            continue
        _, g, p = line.split(" ")
        sentence[0].append(g)
        sentence[1].append(p)
    assert len(gold) == 30
    assert {t for p in pred for t in p} <= {"B-PER", "I-PER", "O"}
    dev_scores = results["trials"][0]["dev"]
    assert dev_scores["f1"] == pytest.approx(seqeval.f1_score(gold, pred))
    assert dev_scores["accuracy"] == pytest.approx(
        np.mean([a == b for g, p in zip(gold, pred) for a, b in zip(g, p)]))
    # Most tokens are O: a model that learned anything gets them right.
    assert dev_scores["accuracy"] > 0.8


def test_mirrored_replicas_train_the_weights_of_one_device(tmp_path, init, mirrored_strategy):
    """2 replicas (2 logical CPUs), each on half of every batch, end with the weights one
    device trains on the whole batch: a sentence task (examples-mean loss), a tagging
    task (tagged-token mean, unevenly split between the replicas) and SQuAD 2.0 with
    ELECTRA's head (each replica's end logits given its own rows' gold starts). Dropout is
    off, so the two runs see the same computation."""
    import dataclasses

    import tensorflow as tf
    quiet = dataclasses.replace(init, config=dataclasses.replace(
        init.config, dropout_rate=0.0, attention_dropout_rate=0.0))
    rows = movie_rows()[:24]
    sentences = write_csv(tmp_path / "train.csv", ["label", "text"],
                          [(r["sentiment"], r["text"]) for r in rows])
    tagged = austen_sentences(24)
    tagging = conll(tmp_path / "train.txt", tagged)
    qa = squad_json(tmp_path / "squad.json", [tagged[i:i + 3] for i in range(0, 12, 3)],
                    impossible=True)
    bindings = ["NUM_EPOCHS = 2", "LEARNING_RATE = 1e-3", "finetuning.head_dropout = 0.0"]
    for task, train, more in (("classification", sentences, []), ("tagging", tagging, []),
                              ("squad_v2", qa, ["MAX_SEQ_LENGTH = 64",
                                                "finetuning.max_query_length = 24"])):
        weights = []
        for name, strategy in (("one", None), ("mirrored", mirrored_strategy)):
            results = finetune(task, tmp_path / f"{task}_{name}", quiet, bindings + more,
                               strategy=strategy, train_file=train, dev_file=train)
            reader = tf.train.load_checkpoint(str(tmp_path / f"{task}_{name}" / "trial_0"
                                                  / "model" / "ckpt"))
            names = sorted(n for n in reader.get_variable_to_shape_map()
                           if "OPTIMIZER_SLOT" not in n and n.startswith("model/"))
            weights.append({n: reader.get_tensor(n) for n in names})
            weights[-1]["loss"] = results["trials"][0]["final_train_loss"]
        one, mirrored = weights
        assert one.keys() == mirrored.keys() and len(one) > 20
        for key in one:
            np.testing.assert_allclose(mirrored[key], one[key], rtol=1e-4, atol=2e-5,
                                       err_msg=f"{task}: {key}")
    assert init.weights is not None  # the runs started from pre-trained weights


def test_summed_loss_steps_on_count_times_the_mean_gradients(tmp_path, init):
    """finetuning.loss_reduction='sum' (the official code's): the gradients handed to the
    optimizer are those of the mean times the batch's denominator (8 examples; the tagged
    words of 8 sentences), and the reported loss stays the mean."""
    import dataclasses

    from electra_tf.finetune import runner, tasks
    quiet = dataclasses.replace(init, config=dataclasses.replace(
        init.config, dropout_rate=0.0, attention_dropout_rate=0.0))
    rows = movie_rows()[:16]
    sentences = write_csv(tmp_path / "train.csv", ["label", "text"],
                          [(r["sentiment"], r["text"]) for r in rows])
    tagging = conll(tmp_path / "train.txt", austen_sentences(16))
    options = dict(max_seq_length=48, doc_stride=128, max_query_length=64,
                   double_unordered=True)

    class Recorder:  # the optimizer's place: keeps what it would apply
        def __init__(self, variables):
            self.grads = [tf.Variable(tf.zeros_like(v)) for v in variables]

        def apply(self, grads, variables):
            for slot, g in zip(self.grads, grads):
                slot.assign(g)

    for task, train in (("classification", sentences), ("tagging", tagging)):
        data = tasks.load(tasks.get_task(task), train_file=train, dev_file=train,
                          log=lambda *_: None)
        adapter = runner._ADAPTERS[task](data, quiet.tokenizer(), options, lambda *_: None)
        features, seen = adapter.train_features, {}
        for summed in (False, True):
            model, _ = runner.build_trial(quiet, adapter.head, adapter.num_outputs, 0, 1, 1e-3,
                                          0.8, head_dropout=0.0, aggregate_gradients=False)
            recorder = Recorder(model.trainable_variables)
            loss, _ = runner._train(model, recorder, adapter, features, 1, 8, 0, None, 1,
                                    lambda *_: None, tf.distribute.get_strategy(),
                                    summed=summed)
            seen[summed] = (loss, [g.numpy() for g in recorder.grads])
        first = np.random.default_rng(0).permutation(len(features["input_ids"]))[:8]
        count = float(adapter.loss_count(runner._batch(features, first, 1)))
        assert count == 8 if task == "classification" else count > 8
        assert seen[True][0] == pytest.approx(seen[False][0], rel=1e-6)
        # float32 rounding of two different sums: to 1e-4 of the largest gradient
        largest = max(np.abs(total).max() for total in seen[True][1])
        for mean, total in zip(seen[False][1], seen[True][1]):
            np.testing.assert_allclose(total, count * mean, rtol=1e-4, atol=1e-4 * largest)


def test_multi_worker_fine_tuning_trains_one_devices_weights_and_the_chief_writes(
        tmp_path, austen_data):
    """run_finetuning.py in 2 worker processes on 127.0.0.1 (a replica each): the chief's
    weights are those one device trains on the whole batch, both workers score alike, and
    only the chief writes the model dir (on shared storage two writers deleted each other's
    trial folders: here each worker is given its own, and the other worker's stays
    unwritten). The strategy is made before the checkpoint is read: after it, collective
    ops could no longer be configured."""
    import socket

    import tensorflow as tf

    from electra_tf.finetune import runner
    pretrained = tmp_path / "pretrained"  # dropout off: one device's weights to compare
    pretrain(pretrained, os.path.join(austen_data[0], "*.tfrecord"),
             ["pretrainer.dropout_rate = 0.0", "pretrainer.attention_dropout_rate = 0.0"],
             eager=True)
    rows = movie_rows()[:24]
    train = write_csv(tmp_path / "train.csv", ["label", "text"],
                      [(r["sentiment"], r["text"]) for r in rows])
    bindings = ["MAX_SEQ_LENGTH = 48", "TRAIN_BATCH_SIZE = 8", "NUM_EPOCHS = 1",
                "LEARNING_RATE = 1e-3", "finetuning.head_dropout = 0.0"]
    out = str(tmp_path / "worker_")
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(f"127.0.0.1:{s.getsockname()[1]}")

    def workers(out, *more):
        return [subprocess.Popen(
            [PYTHON, os.path.join(ROOT, "scripts", "run_finetuning.py"), "--task=classification",
             f"--init_checkpoint={pretrained}", f"--model_dir={out}{i}", f"--train_file={train}",
             f"--dev_file={train}", "--gin_file=finetune/tiny.gin",
             "--strategy=multi_worker_mirrored"] + [f"--gin_bindings={b}" for b in bindings]
            + list(more[i]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CONFIG": json.dumps(
                {"cluster": {"worker": ports}, "task": {"type": "worker", "index": i}})})
            for i in range(2)]

    # Workers given different seeds are refused, both, before training (they trained).
    processes = workers(str(tmp_path / "seeds_"), [], ["--seed=1"])
    for p, (_, err) in zip(processes, [p.communicate(timeout=600) for p in processes]):
        assert p.returncode == 1 and err.strip().splitlines()[-1] == (
            "error: the workers were given different --seed (worker 1: '1'; worker 0: '0'); "
            "run the same command on every worker (the same gin files and bindings, data and "
            "flags)"), err[-3000:]
    assert not os.path.exists(tmp_path / "seeds_0")  # made for the run, removed empty
    processes = workers(out, [], [])
    outputs = [p.communicate(timeout=600) for p in processes]
    for p, (_, err) in zip(processes, outputs):
        assert p.returncode == 0, err[-3000:]
        # (the workers' sums: one traced function each, not one made per call, which logged
        # TensorFlow's retracing warning at the fifth)
        assert "retracing" not in err, err[-3000:]
    scores = [[line for line in o.splitlines() if line.startswith("trial 0 (seed ")]
              for o, _ in outputs]
    assert len(scores[0]) == 1 and scores[0] == scores[1], outputs
    assert sorted(os.listdir(out + "0")) == ["results.json", "trial_0"]
    assert not os.path.exists(out + "1")
    assert "worker 1: the chief writes" in outputs[1][0]
    assert outputs[1][0].strip().splitlines()[-1].endswith(
        "over 1 trial(s); the chief writes the results (worker 1 writes nothing)")

    one = finetune("classification", tmp_path / "one", runner.load_initialization(
        str(pretrained)), bindings[2:], train_file=train, dev_file=train)
    with open(os.path.join(out + "0", "results.json")) as f:
        assert json.load(f)["trials"][0]["final_train_loss"] == pytest.approx(
            one["trials"][0]["final_train_loss"], rel=1e-4)
    weights = []
    for run in (out + "0", tmp_path / "one"):
        reader = tf.train.load_checkpoint(os.path.join(run, "trial_0", "model", "ckpt"))
        weights.append({n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
                        if "OPTIMIZER_SLOT" not in n and n.startswith("model/")})
    assert weights[0].keys() == weights[1].keys() and len(weights[0]) > 20
    for key in weights[0]:
        np.testing.assert_allclose(weights[0][key], weights[1][key], rtol=1e-4, atol=2e-5,
                                   err_msg=key)


def test_finetuning_batch_must_split_over_replicas(tmp_path, init, mirrored_strategy):
    from electra_tf.errors import UserInputError
    rows = movie_rows()[:8]
    train = write_csv(tmp_path / "train.csv", ["label", "text"],
                      [(r["sentiment"], r["text"]) for r in rows])
    with pytest.raises(UserInputError, match="TRAIN_BATCH_SIZE=7 does not split over 2 "
                                             "replicas; use a multiple of 2"):
        finetune("classification", tmp_path / "out", init, ["TRAIN_BATCH_SIZE = 7"],
                 strategy=mirrored_strategy, train_file=train, dev_file=train)
    # With static shapes the predictions are split over the replicas too.
    with pytest.raises(UserInputError, match=r"^finetuning.eval_batch_size=9 does not split "
                                             "over 2 replicas; use a multiple of 2\n"):
        finetune("classification", tmp_path / "out", init,
                 ["finetuning.static_shapes = True", "finetuning.eval_batch_size = 9"],
                 strategy=mirrored_strategy, train_file=train, dev_file=train)
    # Each setting too small is named alone.
    for binding, message in (("MAX_SEQ_LENGTH = 4", "MAX_SEQ_LENGTH=4 is too small; use at "
                                                    "least 8\n"),
                             ("TRAIN_BATCH_SIZE = 0", "TRAIN_BATCH_SIZE=0 is too small; use at "
                                                      "least 1\n")):
        with pytest.raises(UserInputError, match="^" + message):
            finetune("classification", tmp_path / "out", init, [binding], train_file=train,
                     dev_file=train)
    assert not (tmp_path / "out").exists()


def squad_json(path, contexts, impossible=False):
    """SQuAD questions from Austen passages: a sentence of the passage with one name
    replaced by 'who' (answer: that name); with `impossible`, a question about the next
    passage is added to each passage, unanswerable."""
    data, n = [], 0
    for c, sentences in enumerate(contexts):
        context = " ".join(sentences)
        qas = []
        for sentence in sentences:
            name = next((w for w in re.findall(r"\w+", sentence) if w in NAMES), None)
            if name is None:
                continue
            start = context.index(sentence) + re.search(rf"\b{name}\b", sentence).start()
            question = re.sub(rf"\b{name}\b", "who", sentence, count=1).rstrip(".;,!") + "?"
            qas.append({"id": f"q{n}", "question": question,
                        "answers": [{"text": name, "answer_start": start}]})
            n += 1
        if impossible:
            other = contexts[(c + 1) % len(contexts)][0]
            qas.append({"id": f"q{n}", "question": other + "?", "answers": [],
                        "is_impossible": True})
            n += 1
        data.append({"title": f"p{c}", "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"version": "x", "data": data}), encoding="utf-8")
    return str(path)


def test_qa_max_context_flags_are_berts_check_is_max_context():
    """Each piece's max-context window, found among the few windows that hold it, is the
    one BERT's _check_is_max_context finds among all of them (which made featurizing
    quadratic in a context's length), for many shapes: strides under, at and over the
    budget, contexts shorter than a window and of exact multiples."""
    from electra_tf.finetune import squad

    def every_window(starts, budget, total, window, piece):  # BERT's, as it was here
        best, best_window = None, None
        for w, start in enumerate(starts):
            length = min(budget, total - start)
            if not start <= piece < start + length:
                continue
            score = min(piece - start, start + length - 1 - piece) + 0.01 * length
            if best is None or score > best:
                best, best_window = score, w
        return best_window == window

    for total, budget, stride in [(1, 5, 2), (5, 5, 2), (6, 5, 2), (40, 8, 3), (40, 8, 8),
                                  (41, 8, 16), (100, 17, 5), (64, 16, 4), (300, 29, 7)]:
        starts = squad._window_starts(total, budget, stride)
        flags = squad._max_context_flags(total, budget, stride)
        assert len(flags) == len(starts) and starts[-1] + budget >= total
        for w, start in enumerate(starts):
            assert list(flags[w]) == [every_window(starts, budget, total, w, piece) for piece
                                      in range(start, min(start + budget, total))], (total, w)


def test_qa_windows_point_at_the_answer_and_decode_back(uncased_tokenizer):
    """Long contexts over several windows (doc stride): every window holding the answer
    labels exactly the answer's pieces, and logits peaked there decode to the answer text,
    character for character."""
    from electra_tf.finetune import squad
    sentences = austen_sentences(40)
    contexts = [sentences[i:i + 5] for i in range(0, 40, 5)]
    examples = []
    for c, part in enumerate(contexts):
        context = " ".join(part)
        for sentence in part:
            name = next((w for w in re.findall(r"\w+", sentence) if w in NAMES), None)
            if name:
                start = context.index(sentence) + re.search(rf"\b{name}\b", sentence).start()
                examples.append(squad.QAExample(f"q{len(examples)}", "who is it?", context,
                                                [name], start, name, False))
    features, windows, dropped = squad.encode(uncased_tokenizer, examples, 48, 16, 16, True)
    assert dropped == []
    assert len(windows) > 2 * len(examples)  # contexts span several windows
    n_answerable = 0
    for f, window in enumerate(windows):
        s, e = features["start_positions"][f], features["end_positions"][f]
        if features["answerable"][f]:
            n_answerable += 1
            answer = examples[window["example"]].answer_text
            assert features["input_ids"][f, s:e + 1].tolist() == uncased_tokenizer.encode(
                [answer])[0]
        else:
            assert s == e == 0
    assert n_answerable >= len(examples)
    # Decoding: put the peak on the answer in every window that labels it.
    features, windows, _ = squad.encode(uncased_tokenizer, examples, 48, 16, 16, True)
    start = np.full(features["input_ids"].shape, -5.0, np.float32)
    end = start.copy()
    for f in range(len(windows)):
        if features["answerable"][f]:
            start[f, features["start_positions"][f]] = 5.0
            end[f, features["end_positions"][f]] = 5.0
    answers, _ = squad.decode(examples, windows, {"start_logits": start, "end_logits": end},
                              tokenizer=uncased_tokenizer)
    assert answers == {e.qid: e.answer_text for e in examples}
    # ELECTRA's beam: the answer as start rank 2 with end rank 1 (log-probabilities -1.5
    # and -0.5: -2.0); scored higher but not allowed: a start in the question, an end
    # before the start, a span longer than max_answer_length (5), a start past the
    # sequence (a short sequence's beam slot); lower: a start and end rank 0 elsewhere.
    k, n_windows = 4, len(windows)
    beam = {"start_top_index": np.zeros((n_windows, k), np.int32),
            "start_top_log_probs": np.full((n_windows, k), -9.0, np.float32),
            "end_top_index": np.zeros((n_windows, k, k), np.int32),
            "end_top_log_probs": np.full((n_windows, k, k), -9.0, np.float32),
            "start_logits": start}
    for f, w in enumerate(windows):
        first, last = w["first"], w["first"] + w["length"] - 1
        s_, e_ = features["start_positions"][f], features["end_positions"][f]
        beam["start_top_log_probs"][f] = [-0.1, -0.1, -1.5, -1.6]
        if not features["answerable"][f]:  # not the answer, and lower
            s_ = e_ = last - 1
            beam["start_top_log_probs"][f, 2] = -1.7
        beam["start_top_index"][f] = [first - 1, 48, s_, last - 1]
        beam["end_top_index"][f, 0] = [first + 1, first, first, first]
        beam["end_top_index"][f, 1] = [first + 1, first, first, first]
        beam["end_top_log_probs"][f, :2] = -0.1
        beam["end_top_index"][f, 2] = [s_ - 1, e_, s_ + 5, e_]
        beam["end_top_log_probs"][f, 2] = [-0.1, -0.5, -0.2, -0.6]
        beam["end_top_index"][f, 3] = [last, last, last, last]
        beam["end_top_log_probs"][f, 3] = [-0.5, -0.6, -0.7, -0.8]
    answers, _ = squad.decode(examples, windows, beam, tokenizer=uncased_tokenizer,
                              max_answer_length=5)
    assert answers == {e.qid: e.answer_text for e in examples}
    # SQuAD 2.0: an answer the model doubts (no-answer probability 0.6) is still decoded;
    # scoring applies the threshold, and the best threshold is searched over it (blanked
    # at 0.5 in decoding, it could never count: best_f1 50 instead of 100).
    doubt = np.full(len(windows), np.log(0.4 / 0.6), np.float32)
    answers, no_answer = squad.decode(examples, windows, {
        "start_logits": start, "end_logits": end, "answerable_logits": doubt},
        tokenizer=uncased_tokenizer)
    assert answers == {e.qid: e.answer_text for e in examples}
    assert no_answer == pytest.approx({e.qid: 0.6 for e in examples})
    from electra_tf.finetune import metrics
    golds = {e.qid: [e.answer_text] for e in examples}
    golds[examples[0].qid] = []  # one question without an answer: answered, wrongly
    scores = metrics.squad_scores(golds, answers, no_answer)
    n = len(examples)
    assert scores["f1"] == pytest.approx(100 / n)  # all dropped at 0.5: only the unanswerable
    assert scores["best_f1"] == pytest.approx(100 * (n - 1) / n)  # none dropped


def test_qa_pieces_map_to_their_own_characters(uncased_tokenizer, tmp_path):
    """squad.piece_char_spans: each word piece's characters in its basic token, each
    character normalised on its own (accents stripped, "İ" lower-cased to "i" + U+0307 and
    stripped to "i", a zero-width space deleted and kept with the piece before it,
    full-width letters, emoji); the whole token for each piece where the mapping is not
    exact: an [UNK] piece, or a cased model's NFC joining "e" + U+0301 into one
    character."""
    from electra_tf import tokenization
    from electra_tf.finetune import squad
    chinese = tokenization.Tokenizer(CHINESE_VOCAB)
    cased = tokenization.Tokenizer(cased_vocab(tmp_path / "vocab.txt", ["é", "##é"]),
                                   lower_case=False)
    cases = [  # tokenizer, basic token, its pieces, their characters
        (chinese, "195g", ["195", "##g"], ["195", "g"]),
        (uncased_tokenizer, "195g", ["195", "##g"], ["195", "g"]),
        (uncased_tokenizer, "5kg", ["5", "##k", "##g"], ["5", "k", "g"]),
        (uncased_tokenizer, "unremarkable", ["un", "##rem", "##ark", "##able"],
         ["un", "rem", "ark", "able"]),
        (uncased_tokenizer, "Éclair", ["ec", "##lai", "##r"], ["Éc", "lai", "r"]),
        (uncased_tokenizer, "e\u0301clair", ["ec", "##lai", "##r"], ["e\u0301c", "lai", "r"]),
        (uncased_tokenizer, "İzmir", ["i", "##z", "##mir"], ["İ", "z", "mir"]),
        (uncased_tokenizer, "Œuvre", ["œ", "##u", "##vre"], ["Œ", "u", "vre"]),
        (uncased_tokenizer, "ab\u200bcd", ["abc", "##d"], ["ab\u200bc", "d"]),
        (chinese, "Ｈｅｌｌｏ", ["ｈ", "##ｅ", "##ｌ", "##ｌ", "##ｏ"], list("Ｈｅｌｌｏ")),
        (chinese, "ＡＢＣ123", ["ａ", "##ｂ", "##ｃ", "##123"], ["Ａ", "Ｂ", "Ｃ", "123"]),
        (chinese, "195g😂", ["195", "##g", "##😂"], ["195", "g", "😂"]),
        (cased, "cafés", ["caf", "##é", "##s"], ["caf", "é", "s"]),
        # Not exact: each piece is the whole token.
        (cased, "cafe\u0301s", ["caf", "##é", "##s"], ["cafe\u0301s"] * 3),
        (uncased_tokenizer, "a😀b", ["[UNK]"], ["a😀b"]),
        (chinese, "Ｈｅｌｌｏ😀", ["[UNK]"], ["Ｈｅｌｌｏ😀"]),
        (uncased_tokenizer, "the", ["the"], ["the"]),
    ]
    for tok, word, pieces, chars in cases:
        ids = tok.encode([word])[0]
        assert tok.convert_ids_to_tokens(ids) == pieces, word
        spans = squad.piece_char_spans(tok, [word], [ids])[0]
        assert [word[a:b] for a, b in spans] == chars, word
    assert squad.piece_char_spans(uncased_tokenizer, [], []) == []


def test_qa_decode_quotes_the_spans_pieces_not_whole_words(uncased_tokenizer):
    """A span of part of a word is answered with that part of the context, as the
    official get_final_text answers and as training labels tight spans: "195" of "195g"
    (Chinese) and "lair" of "Éclair"; a word with an [UNK] piece is answered whole."""
    from electra_tf import tokenization
    from electra_tf.finetune import squad
    chinese = tokenization.Tokenizer(CHINESE_VOCAB)
    for tok, context, first, last, answer in [
            (chinese, "这款手机重195g，很轻。", "195", "195", "195"),
            (chinese, "这款手机重195g，很轻。", "##g", "轻", "g，很轻"),
            (uncased_tokenizer, "An Éclair, 5kg.", "##lai", "##r", "lair"),
            (uncased_tokenizer, "An Éclair, 5kg.", "ec", "5", "Éclair, 5"),
            (uncased_tokenizer, "a😀b and 10km", "[UNK]", "10", "a😀b and 10")]:
        example = squad.QAExample("q", "how heavy?", context, [], None, None, False)
        features, windows, _ = squad.encode(tok, [example], 48, 16, 16, False)
        tokens = tok.convert_ids_to_tokens(features["input_ids"][0])
        start = np.where(np.array(tokens) == first, 5.0, -5.0).astype(np.float32)[None]
        end = np.where(np.array(tokens) == last, 5.0, -5.0).astype(np.float32)[None]
        answers, _ = squad.decode([example], windows, {"start_logits": start,
                                                       "end_logits": end}, tok)
        assert answers == {"q": answer}, context


def test_a_question_whose_answer_is_not_at_answer_start_is_skipped_and_named(
        uncased_tokenizer):
    """answer_start counted in UTF-8 bytes (as some converters write it: É is two) points
    past the answer: the question is left out of training and the run's note shows where."""
    from electra_tf.finetune import squad
    context = "Émile met Anne. The cat sat on the mat."
    good = squad.QAExample("q0", "who?", context, ["Anne"], context.index("Anne"), "Anne",
                           False)
    in_bytes = len(context[:context.index("mat")].encode("utf-8"))
    bad = squad.QAExample("q1", "where?", context, ["mat"], in_bytes, "mat", False)
    _, windows, dropped = squad.encode(uncased_tokenizer, [good, bad], 48, 16, 16, True)
    assert dropped == [bad]
    assert {w["example"] for w in windows} == {0}
    assert squad.dropped_note("train.json", dropped, 2) == (
        "train.json: 1 of 2 questions skipped: their answer text is not at answer_start "
        "(question 'q1': 'mat' at 36, where the context has 'at.'); answer_start counts "
        "characters, not bytes, from the context's start")
    blank = squad.QAExample("q2", "what?", context, [" "], 5, " ", False)  # there, no word
    _, _, dropped = squad.encode(uncased_tokenizer, [blank, bad], 48, 16, 16, True)
    assert dropped == [blank, bad]
    assert squad.dropped_note("train.json", dropped, 2) == (
        "train.json: 2 of 2 questions skipped: their answer text is not at answer_start or "
        "holds no word (question 'q2': ' ' at 5)")


def test_an_answer_spaced_otherwise_than_its_context_is_trained_on(uncased_tokenizer):
    """An answer the context spells at answer_start but for its whitespace ("with many
    spaces" where the context has a tab and a line end) is trained on, as the official
    readers train on it (it was skipped as "not at answer_start"); one that is not there
    (answer_start in bytes, the answer inside the words there) stays skipped."""
    from electra_tf.finetune import squad
    context = "Émile wrote it with\tmany \n spaces\u202fhere. The cat sat on the mat."
    at = context.index("with")
    cases = {"with many spaces": True, " with many spaces here. ": True,
             "with many": True, "with many spaces here. The": True,
             "with  many spaces": True, "with\u00a0many spaces": True, "withmany": False,
             "with many spices": False, "ith many": False, " many spaces": True}
    # (" many spaces" at the tab before "many", as BERT's reader maps it to the word before)
    examples = [squad.QAExample(f"q{n}", "what?", context, [text],
                                at + 4 if text == " many spaces" else at, text, False)
                for n, text in enumerate(cases)]
    in_bytes = len(context[:context.index("mat")].encode("utf-8"))  # "at." there
    examples.append(squad.QAExample("b", "where?", context, ["mat"], in_bytes, "mat", False))
    features, windows, dropped = squad.encode(uncased_tokenizer, examples, 64, 16, 16, True)
    assert [e.answer_text for e in dropped] == [t for t, kept in cases.items() if not kept] + [
        "mat"]
    for n, (text, kept) in enumerate(cases.items()):
        if not kept:
            continue
        row = [i for i, w in enumerate(windows) if w["example"] == n][0]
        ids = features["input_ids"][row]
        span = ids[features["start_positions"][row]:features["end_positions"][row] + 1]
        assert list(span) == list(uncased_tokenizer.encode([text.strip()])[0]), text


def test_the_run_counts_the_qa_questions_it_trains_on(tmp_path, init):
    """A question skipped for its answer_start is not counted among the training examples
    (the run said 15 after '1 of 15 questions skipped')."""
    train = squad_json(tmp_path / "train.json", [austen_sentences(60)[i:i + 3]
                                                 for i in range(0, 12, 3)])
    data = json.loads(open(train).read())
    questions = [q for d in data["data"] for p in d["paragraphs"] for q in p["qas"]]
    questions[0]["answers"][0]["answer_start"] += 1
    (tmp_path / "train.json").write_text(json.dumps(data))
    lines = []
    finetune("qa", tmp_path / "out", init, ["finetuning.max_train_steps = 1"],
             train_file=train, dev_file=train, log=lines.append)
    n = len(questions)
    assert any(line.startswith(f"{train}: 1 of {n} questions skipped") for line in lines)
    assert any(line.startswith(f"qa: {n - 1} training examples (") for line in lines), lines
    # Questions longer than max_query_length are cut: said per file (it was silent).
    lines = []
    finetune("qa", tmp_path / "short", init, ["finetuning.max_train_steps = 1",
                                              "finetuning.max_query_length = 3"],
             train_file=train, dev_file=train, log=lines.append)
    from electra_tf import tokenization
    tok = tokenization.Tokenizer(UNCASED_VOCAB)
    long = sum(len(q) > 3 for q in tok.encode([q["question"] for q in questions]))
    assert 0 < long
    assert lines.count(f"{train}: {long} of {n} questions have more than 3 word pieces; they "
                       "are cut to their first 3 (raise finetuning.max_query_length to keep "
                       "more)") == 2  # as training and as dev
    # Over half of them off (offsets in bytes, say): refused, not trained on the rest.
    from electra_tf.errors import UserInputError
    for question in questions[1:n // 2 + 1]:
        question["answers"][0]["answer_start"] += 1
    (tmp_path / "train.json").write_text(json.dumps(data))
    with pytest.raises(UserInputError, match=(
            rf"^{re.escape(train)}: {n // 2 + 1} of {n} questions would be skipped: their "
            r"answer text is not at answer_start .*; that is over half the file: fix those "
            r"answers \(their answer_start, or their text\)\n")):
        finetune("qa", tmp_path / "half", init, ["finetuning.max_train_steps = 1"],
                 train_file=train, dev_file=train)


def test_qa_loss_and_heads_follow_the_official_ones(tmp_path, init):
    """The span softmax runs over the context and [CLS] only (the official answer_mask: a
    logit on a question token changes nothing); ELECTRA's loss is (start + end) / 2 + 0.5
    x the answerability loss on whether the *question* has an answer (the official
    is_impossible; BERT's head learns whether the window holds it, weight 1); the token
    and span heads have no dropout (the official tagging and QA heads); the sentence head
    keeps its 0.1."""
    import dataclasses

    from electra_tf.finetune import runner, tasks
    from electra_tf.finetune.models import TaskModel
    sentences = austen_sentences(12)
    train = squad_json(tmp_path / "train.json", [sentences[i:i + 3] for i in range(0, 12, 3)],
                       impossible=True)
    data = tasks.load(tasks.get_task("squad_v2"), train_file=train, dev_file=train,
                      log=lambda *_: None)
    adapter = runner._QATask(data, init.tokenizer(), dict(
        max_seq_length=64, doc_stride=32, max_query_length=24, double_unordered=True),
        lambda *_: None)
    batch = {k: tf.constant(v[:8]) for k, v in adapter.train_features.items()}
    rng = np.random.default_rng(0)
    outputs = {k: tf.constant(rng.normal(size=(8, 64)).astype(np.float32))
               for k in ("start_logits", "end_logits")}
    outputs["answerable_logits"] = tf.constant(rng.normal(size=8).astype(np.float32))
    question = (batch["input_mask"].numpy() == 1) & (batch["segment_ids"].numpy() == 0)
    question[:, 0] = False  # [CLS] stands for "no answer"
    assert question.sum() > 8 * 3
    louder = {**outputs, **{k: outputs[k] + 20.0 * question for k in ("start_logits",
                                                                       "end_logits")}}
    assert float(adapter.loss(louder, batch)) == pytest.approx(float(adapter.loss(outputs,
                                                                                  batch)))
    question_level = batch["question_answerable"].numpy()
    window_level = batch["answerable"].numpy()
    assert (question_level >= window_level).all() and (question_level > window_level).any()
    allowed = (batch["input_mask"].numpy() * batch["segment_ids"].numpy()).astype(bool)
    allowed[:, 0] = True

    def cross_entropy(logits, positions):
        logits = np.where(allowed, logits.numpy().astype(np.float64), -np.inf)
        log_z = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
        return log_z - logits[np.arange(8), positions.numpy()]

    def bce(logits, labels):
        return np.log1p(np.exp(-logits)) + (1 - labels) * logits

    spans = np.mean(cross_entropy(outputs["start_logits"], batch["start_positions"])
                    + cross_entropy(outputs["end_logits"], batch["end_positions"])) / 2
    logit = outputs["answerable_logits"].numpy().astype(np.float64)
    assert float(adapter.loss(outputs, batch)) == pytest.approx(
        spans + 0.5 * np.mean(bce(logit, question_level)), rel=1e-5)
    adapter.qa_head = "bert"
    assert float(adapter.loss(outputs, batch)) == pytest.approx(
        spans + np.mean(bce(logit, window_level)), rel=1e-5)
    config = dataclasses.replace(init.config, dropout_rate=0.0, attention_dropout_rate=0.0)
    ids = {"input_ids": batch["input_ids"], "input_mask": batch["input_mask"],
           "segment_ids": batch["segment_ids"]}
    for head, qa_head, keeps in (("token", "bert", True), ("span", "bert", True),
                                 ("span", "electra", True), ("sentence", "bert", False)):
        model = TaskModel(config, head, 3, head_dropout=0.5, answerability=head == "span",
                          qa_head=qa_head)
        trained = model({**ids, "start_positions": batch["start_positions"]}, training=True)
        inferred = model(ids, training=False)
        for key in set(inferred) & set(trained):
            same = np.allclose(trained[key].numpy(), inferred[key].numpy(), atol=1e-6)
            assert same == keeps, (head, key)


def test_qa_v1_and_v2_end_to_end(tmp_path, init):
    from electra_tf.finetune import metrics
    sentences = austen_sentences(60)
    contexts = [sentences[i:i + 3] for i in range(0, 60, 3)]
    train = squad_json(tmp_path / "train.json", contexts[:14])
    dev = squad_json(tmp_path / "dev.json", contexts[14:])
    # BERT's head here, ELECTRA's (the default) for SQuAD 2.0 below.
    results = finetune("qa", tmp_path / "v1", init, ["NUM_EPOCHS = 1",
                                                      "finetuning.qa_head = 'bert'"],
                       train_file=train, dev_file=dev)
    assert results["hyperparameters"]["qa_head"] == "bert"
    assert "double_unordered" not in results["hyperparameters"]  # (MRPC's and STS-B's only)
    predictions = json.loads((tmp_path / "v1" / "trial_0" / "dev_predictions.json").read_text())
    golds = {q["id"]: [a["text"] for a in q["answers"]]
             for d in json.loads(open(dev).read())["data"] for p in d["paragraphs"]
             for q in p["qas"]}
    assert set(predictions) == set(golds)
    contexts_by_id = {q["id"]: p["context"] for d in json.loads(open(dev).read())["data"]
                      for p in d["paragraphs"] for q in p["qas"]}
    assert all(predictions[q] in contexts_by_id[q] for q in predictions)  # spans of the text
    assert results["metric"] == "f1"
    assert results["median"] == pytest.approx(metrics.squad_scores(golds, predictions))

    train = squad_json(tmp_path / "train2.json", contexts[:14], impossible=True)
    dev = squad_json(tmp_path / "dev2.json", contexts[14:], impossible=True)
    # The official sequence length for QA unless one is bound: 512 (of the encoder's 512).
    results = finetune("squad_v2", tmp_path / "v2", init, ["NUM_EPOCHS = 1",
                                                            "MAX_SEQ_LENGTH = None"],
                       train_file=train, dev_file=dev)
    assert results["hyperparameters"]["max_seq_length"] == 512
    # ELECTRA's head, and its no-answer threshold: -2.75 on the impossibility logit.
    threshold = results["hyperparameters"]["no_answer_threshold"]
    assert results["hyperparameters"]["qa_head"] == "electra"
    assert threshold == pytest.approx(1 / (1 + np.exp(2.75)))
    info = json.loads((tmp_path / "v2" / "trial_0" / "task_info.json").read_text())
    assert (info["qa_head"], info["beam_size"], info["no_answer_threshold"]) == (
        "electra", 20, threshold)
    odds = json.loads((tmp_path / "v2" / "trial_0" / "dev_null_odds.json").read_text())
    predictions = json.loads((tmp_path / "v2" / "trial_0" / "dev_predictions.json").read_text())
    assert set(odds) == set(predictions) and all(0 <= p <= 1 for p in odds.values())
    # The official files: every question's best span (blanked only by the scoring), which
    # with the odds give results.json's scores as evaluate-v2.0.py --na-prob-thresh=0.06.
    assert all(predictions.values())
    golds = {q["id"]: [a["text"] for a in q["answers"]]
             for d in json.loads(open(dev).read())["data"] for p in d["paragraphs"]
             for q in p["qas"]}
    assert results["median"] == pytest.approx(metrics.squad_scores(golds, predictions, odds,
                                                                   threshold))
    assert {"exact", "f1", "has_answer_f1", "no_answer_f1", "best_f1"} <= set(results["median"])


# ------------------------------------------------------------------------------ Chinese


def test_chinese_label_text_csv_end_to_end(tmp_path):
    """A `label,text` CSV of Chinese reviews with Chinese labels, the Chinese vocab and a
    random tiny encoder, through the script: characters become single known tokens, the
    model learns the training set, predictions keep the labels."""
    from electra_tf.tokenization import Tokenizer
    names = {"1": "正面", "0": "负面"}
    with open(os.path.join(FIXTURES, "zh_reviews.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t", 1) for line in f]
    picked = [r for r in rows if r[0] == "1"][:12] + [r for r in rows if r[0] == "0"][:12]
    train = write_csv(tmp_path / "train.csv", ["label", "text"],
                      [(names[label], text[:40]) for label, text in picked])
    ids = Tokenizer(CHINESE_VOCAB).encode([picked[0][1][:10]])[0]
    assert len(ids) == 10 and 100 not in ids  # one known token per character
    out = tmp_path / "out"
    args = ["--task=classification", "--init_checkpoint=none", "--model_size=tiny",
            f"--vocab_file={CHINESE_VOCAB}", f"--train_file={train}", f"--dev_file={train}",
            f"--model_dir={out}", "--gin_bindings=MAX_SEQ_LENGTH=48",
            "--gin_bindings=TRAIN_BATCH_SIZE=8", "--gin_bindings=NUM_EPOCHS=15",
            "--gin_bindings=LEARNING_RATE=1e-3", "--gin_bindings=LAYERWISE_LR_DECAY=1.0"]
    result = run_script("run_finetuning.py", *args, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "finetune/tiny.gin" in result.stdout  # picked by the model's size
    results = json.loads((out / "results.json").read_text())
    assert results["labels"] == sorted(names.values())
    assert results["f1_label"] == sorted(names.values())[1] and "f1" in results["median"]
    assert results["median"]["accuracy"] == 1.0
    for written in (out / "results.json", out / "trial_0" / "task_info.json"):  # as written,
        assert "正面" in written.read_text(encoding="utf-8")  # not "\u6b63\u9762"
    table = read_tsv(out / "trial_0" / "dev_predictions.tsv")
    assert [r[2] for r in table[1:]] == [names[label] for label, _ in picked]
    assert "[UNK]" not in result.stdout
    # With the English vocab most characters are [UNK]: said (it trained without a word).
    english = [a.replace(CHINESE_VOCAB, UNCASED_VOCAB).replace(str(out), str(out) + "_en")
               for a in args] + ["--gin_bindings=finetuning.max_train_steps=1"]
    result = run_script("run_finetuning.py", *english, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    noted = [line for line in result.stdout.splitlines() if "[UNK]" in line]
    assert len(noted) == 1 and re.fullmatch(
        rf"note: [6-9]\d% of {re.escape(str(train))}'s tokens are \[UNK\]: the model's vocab "
        rf"\({re.escape(UNCASED_VOCAB)}\) does not cover the text \(its characters or script: "
        r"a Chinese text needs a Chinese vocab\); check --init_checkpoint or --vocab_file",
        noted[0]), noted
    # The same command again is refused before anything is loaded: the run stays whole.
    before = (out / "results.json").read_bytes()
    again = run_script("run_finetuning.py", *args, cwd=ROOT)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines()[-1] == (
        f"error: --model_dir={out} already holds a fine-tuning run (results.json, trial_0); "
        "pass --num_trials above 1 to add trials to it, --overwrite to replace it, or choose "
        "another --model_dir")
    assert (out / "results.json").read_bytes() == before


# ------------------------------------------------------------------------------ bad input


def test_bad_file_fails_with_one_clear_line_through_the_script(tmp_path):
    rows = movie_rows()[:10]
    good = write_csv(tmp_path / "train.csv", ["sentiment", "text"],
                     [(r["sentiment"], r["text"]) for r in rows])
    bad_json = tmp_path / "dev.jsonl"
    bad_json.write_text('{"text": "Fine.", "sentiment": "positive"}\n{"text": "Oops", '
                        '"sentiment": \n', encoding="utf-8")
    result = run_script(
        "run_finetuning.py", f"--model_dir={tmp_path / 'out'}", "--task=classification",
        "--init_checkpoint=none", f"--vocab_file={UNCASED_VOCAB}", f"--train_file={good}",
        f"--dev_file={bad_json}", "--label_column=sentiment", cwd=ROOT)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {bad_json} line 2 is not valid JSON (Expecting value); the file must hold "
        "one JSON object per line")
    assert not os.path.exists(tmp_path / "out")  # nothing half-written
    # --strategy=tpu with no TPU to be found: one line naming the flag that finds one.
    result = run_script(
        "run_finetuning.py", f"--model_dir={tmp_path / 'out'}", "--task=classification",
        "--init_checkpoint=none", f"--vocab_file={UNCASED_VOCAB}", f"--train_file={good}",
        f"--dev_file={good}", "--label_column=sentiment", "--strategy=tpu", cwd=ROOT)
    assert result.returncode == 1
    assert re.fullmatch(r"error: --strategy=tpu found no TPU \(.*\); pass --tpu=NAME \(the "
                        r"TPU's name or grpc:// address, or --tpu=local on a TPU VM\)",
                        result.stderr.strip().splitlines()[-1])
    assert not os.path.exists(tmp_path / "out")
    # An optimizer.* binding that each trial sets from finetuning.* (pre-training reads it):
    # refused, not overridden without a word.
    result = run_script(
        "run_finetuning.py", f"--model_dir={tmp_path / 'out'}", "--task=classification",
        "--init_checkpoint=none", f"--vocab_file={UNCASED_VOCAB}", f"--train_file={good}",
        f"--dev_file={good}", "--label_column=sentiment",
        "--gin_bindings=optimizer.learning_rate = 1e-3", cwd=ROOT)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "error: optimizer.learning_rate is not read by fine-tuning, which sets it from its own "
        "settings; bind LEARNING_RATE (finetuning.learning_rate) instead")
    assert not os.path.exists(tmp_path / "out")
    # A --model_dir another run of this machine is writing (a live process's mark): refused
    # before its trials could be touched.
    from electra_tf import atomic
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.makedirs(tmp_path / "out" / "trial_0.partial")
        (tmp_path / "out" / atomic.RUNNING).write_text(json.dumps(
            {"owner": atomic.owner(), "pid": running.pid,
             "started": atomic._started(running.pid), "script": "run_finetuning.py"}))
        result = run_script(
            "run_finetuning.py", f"--model_dir={tmp_path / 'out'}", "--task=classification",
            "--init_checkpoint=none", f"--vocab_file={UNCASED_VOCAB}", f"--train_file={good}",
            f"--dev_file={good}", "--label_column=sentiment", "--overwrite", cwd=ROOT)
    finally:
        running.kill()
        running.wait()
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --model_dir={tmp_path / 'out'} is being written by another run_finetuning.py "
        f"(PID {running.pid}) on this machine; wait for it to end or stop it, or choose "
        f"another --model_dir (if no such run is going, delete {tmp_path / 'out'}/.running.json)")
    assert sorted(os.listdir(tmp_path / "out")) == [".running.json", "trial_0.partial"]


def test_missing_column_empty_cells_and_unknown_label_name_the_file_and_the_fix(tmp_path):
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import readers, tasks
    rows = movie_rows()[:10]
    good = write_csv(tmp_path / "train.csv", ["sentiment", "text"],
                     [(r["sentiment"], r["text"]) for r in rows])
    dev = write_csv(tmp_path / "dev.csv", ["sentiment", "text"],
                    [(r["sentiment"], r["text"]) for r in rows[:3]] + [("neutral", "Meh.")])
    task = tasks.get_task("classification")
    with pytest.raises(UserInputError) as error:
        tasks.load(task, train_file=good, dev_file=dev)
    assert str(error.value) == (f"{good} has no column 'label' (columns: sentiment, text); "
                                "pass --label_column=NAME")
    with pytest.raises(UserInputError) as error:
        tasks.load(task, train_file=good, dev_file=dev, label_column="sentiment")
    assert str(error.value) == (f"{dev} line 5: label 'neutral' does not occur in the "
                                "training file (labels: negative, positive); fix the label or "
                                "add training examples with it")
    with pytest.raises(UserInputError, match="has no column 'review'.*--text_b_column=NAME"):
        tasks.load(task, train_file=good, dev_file=dev, label_column="sentiment",
                   text_b_column="review")
    # Spaces around the header's names are not the names; another case is hinted.
    spaced = tmp_path / "spaced.csv"
    spaced.write_text("Text , label\nLovely film., positive\n")
    with pytest.raises(UserInputError) as error:
        readers.read_table(str(spaced))
    assert str(error.value) == (f"{spaced} has no column 'text' (columns: Text, label); pass "
                                "--text_column=NAME (--text_column=Text?)")
    assert readers.read_table(str(spaced), text_column="Text")[0].label == "positive"
    # An empty text cell, or JSON's NaN (a missing value pandas wrote out), is no text; a
    # CoNLL line with an empty tag cell has no tag.
    for path, content, line in (("empty.csv", "text,label\nFine.,pos\n  ,neg\n", 3),
                                ("nan.jsonl", '{"text": NaN, "label": "x"}\n', 1)):
        (tmp_path / path).write_text(content)
        with pytest.raises(UserInputError) as error:
            readers.read_table(str(tmp_path / path))
        assert str(error.value) == (f"{tmp_path / path} line {line} has no text in column "
                                    "'text'; fill it in or drop the row")
    # A JSON boolean, array or object is not text missing: said as what it is.
    for value, kind in (("true", "boolean"), ("[1]", "array"), ('{"a": 1}', "object")):
        (tmp_path / "typed.jsonl").write_text(f'{{"text": "ok", "label": "x"}}\n'
                                              f'{{"text": {value}, "label": "y"}}\n')
        with pytest.raises(UserInputError) as error:
            readers.read_table(str(tmp_path / "typed.jsonl"))
        assert str(error.value) == (f"{tmp_path / 'typed.jsonl'} line 2 has a JSON {kind} in "
                                    "column 'text', not text; write the text as a string")
    conll = tmp_path / "tags.txt"
    conll.write_text("EU\tB-ORG\tx\nrejects\t\tx\n")
    with pytest.raises(UserInputError) as error:
        readers.read_conll(str(conll), 1)
    assert str(error.value) == (f"{conll} line 2 has an empty tag ('rejects\\t\\tx'); give "
                                "every word a tag (O outside entities)")
    conll.write_text("EU\t\tx\nrejects\t\tx\n")  # a test file's tag column blanked
    [sentence] = readers.read_conll(str(conll), 1, labelled=False)
    assert sentence.words == ["EU", "rejects"] and sentence.tags is None


def test_overwrite_replaces_the_whole_earlier_run(tmp_path, init):
    """--overwrite deletes the earlier run's results.json and trial folders before training,
    so the dir never holds scores of one run beside trials of another."""
    from electra_tf.errors import UserInputError
    rows = movie_rows()[:16]
    train = write_csv(tmp_path / "train.csv", ["label", "text"],
                      [(r["sentiment"], r["text"]) for r in rows])
    out = tmp_path / "out"
    quick = ["finetuning.max_train_steps = 1", "finetuning.save_model = False"]
    finetune("classification", out, init, quick, num_trials=3, train_file=train,
             dev_file=train)
    with pytest.raises(UserInputError, match=r"already holds a fine-tuning run \(results.json, "
                                             r"trial_0, trial_1, \.\.\.\); pass --num_trials above "
                                             r"3 to add trials to it, --overwrite"):
        finetune("classification", out, init, quick, train_file=train, dev_file=train)
    # A value out of range is refused before the earlier run is deleted (it was refused
    # when the first trial built its optimizer, the earlier run gone), by the name bound.
    for binding, message in (
            ("finetuning.warmup_proportion = -0.5", r"^finetuning.warmup_proportion=-0.5 must "
                                                    r"be from 0 to 1 \(the share of the steps "
                                                    r"that warm up\)"),
            ("LAYERWISE_LR_DECAY = 0.0", r"^LAYERWISE_LR_DECAY=0.0 \(finetuning."
                                         r"layerwise_lr_decay\) must be above 0 and at most 1"),
            ("LEARNING_RATE = -1.0", r"^LEARNING_RATE=-1.0 \(finetuning.learning_rate\) must "
                                     r"be at least 0 and finite"),
            ("finetuning.eval_batch_size = 0", r"^finetuning.eval_batch_size=0 must be at "
                                               r"least 1 \(a count\)"),
            ("NUM_EPOCHS = 0", r"^NUM_EPOCHS=0 \(finetuning.num_epochs\) must be None or "
                               r"above 0 and finite"),
            ("finetuning.max_train_steps = 0", r"^finetuning.max_train_steps=0 must be None "
                                               r"or at least 1"),
            ("finetuning.head_dropout = 1.0", r"^finetuning.head_dropout=1.0 must be at least "
                                              r"0 and below 1 \(a dropout rate\)")):
        with pytest.raises(UserInputError, match=message):
            finetune("classification", out, init, [*quick, binding], overwrite=True,
                     train_file=train, dev_file=train)
        assert (out / "results.json").exists() and (out / "trial_2").exists()
    (out / "notes.txt").write_text("mine")
    results = finetune("classification", out, init, quick, seed=5, overwrite=True,
                       train_file=train, dev_file=train)
    assert [t["seed"] for t in results["trials"]] == [5]
    assert json.loads((out / "results.json").read_text())["trials"][0]["seed"] == 5
    assert sorted(os.listdir(out)) == ["notes.txt", "results.json", "trial_0"]
    info = json.loads((out / "trial_0" / "task_info.json").read_text())
    assert info["seed"] == 5


def test_bad_inputs_in_process(tmp_path):
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import readers, squad, tasks
    ratings = write_csv(tmp_path / "r.csv", ["label", "text"], [("great", "Lovely film.")])
    with pytest.raises(UserInputError, match=r"line 2: label 'great' is not a number; "
                                             "regression needs numeric labels"):
        readers.read_table(ratings, kind="regression")
    broken = tmp_path / "squad.json"
    broken.write_text('{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "1", '
                      '"answers": [{"text": "x", "answer_start": 0}]}]}]}]}')
    with pytest.raises(UserInputError, match="is not in the SQuAD format: question '1' has no "
                                             "'question'"):
        squad.read_squad(str(broken), training=True)
    broken.write_text('{"data": [')
    with pytest.raises(UserInputError, match=r"squad.json is not valid JSON \(line 1"):
        squad.read_squad(str(broken), training=False)
    tags = tmp_path / "t.txt"
    tags.write_text("Emma B-PER\nsmiled\n")
    with pytest.raises(UserInputError, match="line 2 has no tag column"):
        readers.read_conll(str(tags))
    # --label_column naming the word column or past the last one: said so.
    tags.write_text("the NN _ O\nEmma NNP _ B-PER\n")
    for column, message in ((0, f"{tags}: --label_column=0 is the word column; the tags are in "
                                "another (-1, the default, is the last)"),
                            (-4, f"{tags}: --label_column=-4 is the word column; the tags are "
                                 "in another (-1, the default, is the last)"),
                            (9, f"{tags} line 1 has 4 columns, no column 9 (--label_column); "
                                "choose the tag column's index, 1 to 3 (or -1, the last)")):
        with pytest.raises(UserInputError) as error:
            readers.read_conll(str(tags), column)
        assert str(error.value) == message
    assert [s.tags for s in readers.read_conll(str(tags), 1)] == [["NN", "NNP"]]
    with pytest.raises(UserInputError, match="--task=sst3 is unknown"):
        tasks.get_task("sst3")
    with pytest.raises(UserInputError, match="has no train file"):
        tasks.load(tasks.get_task("rte"), data_dir=str(tmp_path))
    # Two train files in a --data_dir: which one is meant (was: the CSV, silently)?
    both = tmp_path / "both"
    both.mkdir()
    for name in ("train.csv", "train.tsv", "dev.csv"):
        (both / name).write_text("text,label\na,x\nb,y\n")
    with pytest.raises(UserInputError) as raised:
        tasks.load(tasks.get_task("classification"), data_dir=str(both))
    assert str(raised.value) == (f"{both} has several train files (train.csv, train.tsv); keep "
                                 "one, or pass --train_file, --dev_file and --test_file")


def test_more_bad_inputs_fail_before_training_with_one_line(tmp_path):
    """A GLUE dev file with no examples, --test_file beside --data_dir (which has its own),
    a non-numeric answer_start, a test file's sentence tagged on some lines only."""
    from electra_tf.errors import UserInputError
    from electra_tf.finetune import readers, squad, tasks
    sst = tmp_path / "SST-2"
    _glue(sst, "train.tsv", ["sentence", "label"], [("Lovely film.", "1"), ("Dull.", "0")])
    _glue(sst, "dev.tsv", ["sentence", "label"], [])
    with pytest.raises(UserInputError, match=r"^.*SST-2/dev.tsv holds no examples; check the "
                                             r"file$"):
        tasks.load(tasks.get_task("sst2"), data_dir=str(sst))
    _glue(sst, "dev.tsv", ["sentence", "label"], [("Fine.", "1")])
    assert len(tasks.load(tasks.get_task("sst2"), data_dir=str(sst)).dev[0].examples) == 1
    with pytest.raises(UserInputError, match=r"^pass either --data_dir or --train_file/"
                                             r"--dev_file\[/--test_file\], not both"):
        tasks.load(tasks.get_task("classification"), data_dir=str(sst),
                   test_file=str(sst / "dev.tsv"))
    qa = tmp_path / "squad.json"
    qa.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Emma smiled.", "qas": [
        {"id": "q1", "question": "Who?", "answers": [{"text": "Emma",
                                                      "answer_start": "first"}]}]}]}]}))
    with pytest.raises(UserInputError, match=r"squad.json: question 'q1' has answer_start "
                                             r"'first', not a character offset"):
        squad.read_squad(str(qa), training=True)
    # A test file needs no answers.
    qa.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Emma smiled.", "qas": [
        {"id": "q1", "question": "Who smiled?"}]}]}]}))
    test = squad.read_squad(str(qa), training=False, labelled=False)
    assert [(e.qid, e.answers) for e in test] == [("q1", [])]
    with pytest.raises(UserInputError, match="not in the SQuAD format"):
        squad.read_squad(str(qa), training=False)  # a dev file does
    tags = tmp_path / "test.txt"
    tags.write_text("Emma\nsmiled\n\nAnne B-PER\nwent\nhome O\n")
    with pytest.raises(UserInputError, match=r"test.txt line 5 has no tag but other lines of "
                                             r"its sentence \(from line 4\) have one"):
        readers.read_conll(str(tags), labelled=False)
    tags.write_text("Emma\nsmiled\n\nAnne B-PER\nwent O\n")
    assert [s.tags for s in readers.read_conll(str(tags), labelled=False)] == [
        None, ["B-PER", "O"]]


def test_a_tagger_of_one_character_per_word_is_exported_with_a_note(tmp_path, init):
    """A Chinese NER/POS file tags one character per line; served through serving_default,
    whose text is split at whitespace, an unspaced sentence is one word with one tag: the
    export says so (task_info.json records it); a file of English words does not."""
    from electra_tf.export import saved_model
    from electra_tf.finetune import runner, tasks
    sentences = [s for s in chinese_reviews() if 6 <= len(s) <= 30][:24]
    assert len(sentences) == 24
    zh = tmp_path / "zh.txt"
    zh.write_text("\n\n".join("\n".join(f"{c} {'B-X' if c in '好不' else 'O'}"
                                        for c in s if not c.isspace())
                              for s in sentences) + "\n", encoding="utf-8")
    en = conll(tmp_path / "en.txt", austen_sentences(8))
    for path, characters in ((str(zh), True), (en, False)):
        data = tasks.load(tasks.get_task("tagging"), train_file=path, dev_file=path)
        assert runner._TaggingTask(data, init.tokenizer(), {"max_seq_length": 48},
                                   lambda *_: None).character_words is characters
    finetune("tagging", tmp_path / "zh", init, ["finetuning.max_train_steps = 1"],
             train_file=str(zh), dev_file=str(zh))
    info = json.loads((tmp_path / "zh" / "trial_0" / "task_info.json").read_text())
    assert info["character_words"] is True
    lines = []
    saved_model.export(str(tmp_path / "zh"), str(tmp_path / "serving"), "zh", "task",
                       log=lines.append)
    assert ("note: this tagger was trained on one character per word: serving_default splits "
            "its text at whitespace, so send the characters spaced (我 爱 北 京), or each "
            "text's characters as a list to tag_words; unspaced, a sentence is one word with "
            "one tag") in lines
