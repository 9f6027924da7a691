"""The fine-tuning tasks: what each reads, predicts and is scored by.

Generic tasks read your files: `classification` and `regression` (CSV, TSV or JSONL with
--text_column, --text_b_column, --label_column), `tagging` (CoNLL-style), `qa` (SQuAD 1.1
or 2.0 JSON). Named tasks read a standard release from --data_dir: the GLUE tasks (the GLUE
TSVs; MNLI is scored on its matched and mismatched dev sets), `squad_v1`, `squad_v2`
(train-v1.1.json/dev-v1.1.json, train-v2.0.json/dev-v2.0.json) and `conll` (CoNLL-2003
NER: train.txt, valid.txt, test.txt).

Epochs are paper Table 7's: 3, 10 for RTE and STS-B, 2 for SQuAD; the sequence length the
official code's default, 128, and 512 for QA (`conll`, which the official code does not
have, takes the default too). As in the official code, MRPC and STS-B train on both
orders of each sentence pair, and STS-B's 0-5 scores are learnt divided by 5.
"""

import collections
import dataclasses
import os

import tensorflow as tf

from electra_tf.errors import UserInputError
from electra_tf.finetune import metrics, readers
from electra_tf.finetune.readers import GlueFormat

KINDS = ("classification", "regression", "tagging", "qa")


@dataclasses.dataclass(frozen=True)
class Task:
    """A task: its kind, its primary metric (the one medians are quoted for), the paper's
    epochs, the official sequence length, whether a pair's order carries no meaning (the
    official code then trains on both orders), what a regression target is divided by for
    training (the official STS-B's 5), and for named tasks where its files are."""
    name: str
    kind: str
    metric: str
    epochs: float = 3.0
    max_seq_length: int = 128
    unordered_pairs: bool = False
    target_scale: float = 1.0
    glue: GlueFormat | None = None
    submission: str | None = None  # GLUE submission file name (test predictions)
    files: dict | None = None  # named non-GLUE tasks: split -> candidate file names


_NLI = ("entailment", "not_entailment")
GLUE = {
    "cola": Task("cola", "classification", "mcc", glue=GlueFormat(
        "CoLA", ("0", "1"), 3, None, 1, 1, None, header=False, width=4),
        submission="CoLA.tsv"),
    "sst2": Task("sst2", "classification", "accuracy", glue=GlueFormat(
        "SST-2", ("0", "1"), 0, None, 1, 1, None), submission="SST-2.tsv"),
    "mrpc": Task("mrpc", "classification", "accuracy", unordered_pairs=True, glue=GlueFormat(
        "MRPC", ("0", "1"), 3, 4, 0, 3, 4), submission="MRPC.tsv"),
    "stsb": Task("stsb", "regression", "spearman", epochs=10, unordered_pairs=True,
                 target_scale=5.0, glue=GlueFormat(
        "STS-B", None, -3, -2, -1, -2, -1), submission="STS-B.tsv"),
    "qqp": Task("qqp", "classification", "accuracy", glue=GlueFormat(
        "QQP", ("0", "1"), 3, 4, 5, 1, 2, skip_malformed=True), submission="QQP.tsv"),
    "mnli": Task("mnli", "classification", "accuracy", glue=GlueFormat(
        "MNLI", ("contradiction", "entailment", "neutral"), 8, 9, -1, 8, 9,
        dev_files=(("dev", "dev_matched.tsv"), ("dev_mismatched", "dev_mismatched.tsv")),
        test_files=(("test", ("test_matched.tsv",), "MNLI-m.tsv", None),
                    ("test_mismatched", ("test_mismatched.tsv",), "MNLI-mm.tsv", None),
                    # GLUE's diagnostic set, predicted by the MNLI model (the official
                    # code's "diagnostic" split): in the MNLI folder, or the GLUE root's
                    ("diagnostic", ("diagnostic.tsv", "AX.tsv", "../diagnostic/diagnostic.tsv"),
                     "AX.tsv", (1, 2)))),
        submission="MNLI-m.tsv"),
    "qnli": Task("qnli", "classification", "accuracy", glue=GlueFormat(
        "QNLI", _NLI, 1, 2, 3, 1, 2), submission="QNLI.tsv"),
    "rte": Task("rte", "classification", "accuracy", epochs=10, glue=GlueFormat(
        "RTE", _NLI, 1, 2, 3, 1, 2), submission="RTE.tsv"),
    "wnli": Task("wnli", "classification", "accuracy", glue=GlueFormat(
        "WNLI", ("0", "1"), 1, 2, 3, 1, 2), submission="WNLI.tsv"),
}
TASKS = {
    "classification": Task("classification", "classification", "accuracy"),
    "regression": Task("regression", "regression", "spearman"),
    "tagging": Task("tagging", "tagging", "f1"),
    "qa": Task("qa", "qa", "f1", epochs=2, max_seq_length=512),
    **GLUE,
    "squad_v1": Task("squad_v1", "qa", "f1", epochs=2, max_seq_length=512, files={
        "train": ("train-v1.1.json",), "dev": ("dev-v1.1.json",)}),
    "squad_v2": Task("squad_v2", "qa", "f1", epochs=2, max_seq_length=512, files={
        "train": ("train-v2.0.json",), "dev": ("dev-v2.0.json",)}),
    "conll": Task("conll", "tagging", "f1", files={
        "train": ("train.txt",), "dev": ("valid.txt", "dev.txt", "testa.txt"),
        "test": ("test.txt", "testb.txt")}),
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise UserInputError(f"--task={name} is unknown; choose one of {', '.join(TASKS)}")
    return TASKS[name]


@dataclasses.dataclass
class Split:
    """One evaluation (or test) set: its name, where it came from, its examples, and for a
    GLUE test set the submission file its predictions go to."""
    name: str
    path: str
    examples: list
    submission: str | None = None


@dataclasses.dataclass
class TaskData:
    task: Task
    train: Split
    dev: list[Split]
    test: list[Split]
    labels: list[str] | None  # classification and tagging: the label of each class id
    # The columns read, where a flag chooses them (your own files: text, text_b and label
    # columns; tagging: the tag column's index); None for GLUE and SQuAD files.
    columns: dict | None = None


def _find(data_dir: str, names, what: str, required: bool = True,
          fix: str = "pass the folder of the task's release as --data_dir") -> str | None:
    """The one file of `names` in data_dir; two of them are refused (which one is meant?),
    none (where `required`) too, with `fix`."""
    found = [name for name in names if tf.io.gfile.exists(os.path.join(data_dir, name))]
    if len(found) > 1:
        raise UserInputError(f"{data_dir} has several {what} files ({', '.join(found)}); keep "
                             "one, or pass --train_file, --dev_file and --test_file")
    if found:
        return os.path.join(data_dir, found[0])
    if required:
        hint = ""
        if tf.io.gfile.exists(os.path.join(data_dir, "msr_paraphrase_train.txt")):
            hint = (" (GLUE's download script makes MRPC's train.tsv and dev.tsv from "
                    "msr_paraphrase_train.txt)")
        elif what == "dev" and any(tf.io.gfile.exists(os.path.join(data_dir, name))
                                   for name in TASKS["conll"].files["dev"]):
            hint = " (a CoNLL-2003 release? --task=conll reads its valid.txt)"
        elif names[0].endswith(".tsv") and names[-1].endswith(".conll"):  # tagging's
            other = [f"{what}.{ext}" for ext in ("jsonl", "json", "csv")
                     if tf.io.gfile.exists(os.path.join(data_dir, f"{what}.{ext}"))]
            if other:
                hint = (f" ({other[0]} is not read: tagging reads CoNLL text, a word and its "
                        "tag per line)")
        raise UserInputError(f"{data_dir} has no {what} file ({' or '.join(names)}){hint}; "
                             f"{fix}")
    return None


def _submission_of(task, test_file: str) -> tuple[str, tuple | None]:
    """The submission file (and text columns) of a GLUE test file given as --test_file:
    MNLI's by its name (test_matched, test_mismatched, the diagnostic set), which the
    --data_dir layout tells apart."""
    name = os.path.basename(test_file)
    for _, files, submission, columns in task.glue.test_files:
        if submission and any(name == os.path.basename(f) for f in files):
            return submission, columns
    return task.submission, None


def _glue_dir(data_dir: str, fmt: GlueFormat) -> str:
    """The folder holding the task's TSVs: data_dir itself or data_dir/<GLUE name>."""
    inner = os.path.join(data_dir, fmt.directory)
    if not tf.io.gfile.exists(os.path.join(data_dir, "train.tsv")) and tf.io.gfile.exists(
            os.path.join(inner, "train.tsv")):
        return inner
    return data_dir


def chunk_tags(train_tags, dev_tags, labels) -> tuple[set, str, set]:
    """(prefix letters, separator, types) of the chunk tags a model of span tags learnt as
    BIOES predicts, in the scheme and spelling predictions are written in
    (`metrics.files_scheme` of the training and dev files' tags, a list per sentence); no
    letters where the training file's are not chunk tags."""
    scheme, spelling = metrics.files_scheme(train_tags, dev_tags)
    if scheme is None:
        return set(), "", set()
    letters, separator = metrics.scheme_prefixes(scheme, spelling)
    return letters, separator, {metrics.chunk_type(t) for t in labels} - {None}


def load(task: Task, data_dir: str | None = None, train_file: str | None = None,
         dev_file: str | None = None, test_file: str | None = None,
         text_column: str | None = None, text_b_column: str | None = None,
         label_column: str | None = None, log=print) -> TaskData:
    """Reads a task's train, dev and (optional) test sets, checks them against each other
    (labels, columns) and returns them; nothing is trained or written before this passes."""
    given = {"--text_column": text_column, "--text_b_column": text_b_column,
             "--label_column": label_column}
    if task.kind == "tagging":
        given.pop("--label_column")  # (the tag column's index)
    unread = [flag for flag, value in given.items()
              if value is not None and (task.kind in ("tagging", "qa") or task.glue)]
    if unread:  # (each was ignored without a word)
        reads = {"tagging": "a CoNLL file (a word and its tags per line; --label_column picks "
                            "the tag column's index)",
                 "qa": "SQuAD JSON (its own keys)"}.get(task.kind, "its release's own columns")
        named = ", ".join(unread[:-1]) + " and " * (len(unread) > 1) + unread[-1]
        raise UserInputError(f"{named} {'is' if len(unread) == 1 else 'are'} not "
                             f"read by --task={task.name}, which reads {reads}; drop "
                             f"{'it' if len(unread) == 1 else 'them'}")
    if data_dir and (train_file or dev_file or test_file):
        raise UserInputError("pass either --data_dir or --train_file/--dev_file[/--test_file], "
                             "not both (--data_dir's own test file is used if it has one)")
    if not data_dir and not (train_file and dev_file):
        raise UserInputError(f"--task={task.name} needs --train_file and --dev_file (or "
                             "--data_dir holding train and dev files)")
    if data_dir and not tf.io.gfile.isdir(data_dir):
        raise UserInputError(f"--data_dir={data_dir} "
                             + ("is a file" if tf.io.gfile.exists(data_dir) else
                                "does not exist")
                             + "; pass the folder of the task's release")
    if task.glue is not None:
        return _load_glue(task, data_dir, train_file, dev_file, test_file, log)
    if data_dir:
        files = task.files or {}
        # (a generic task has no release: the user's own files)
        fix = ({} if "train" in files else
               {"fix": "name yours so, or pass --train_file and --dev_file"})
        train_file = _find(data_dir, files.get("train", _generic_names("train", task)), "train",
                           **fix)
        dev_file = _find(data_dir, files.get("dev", _generic_names("dev", task)), "dev", **fix)
        test_file = _find(data_dir, files.get("test", _generic_names("test", task)), "test",
                          required=False)
    if task.kind == "tagging":
        column = _tag_column(label_column)
        train = readers.read_conll(train_file, column)
        dev = readers.read_conll(dev_file, column)
        test = readers.read_conll(test_file, column, labelled=False) if test_file else None
        labels = readers.sorted_labels(t for s in train for t in s.tags)
        if len(labels) < 2:
            raise UserInputError(f"{train_file} has a single tag ({labels[0]!r}) in its tag "
                                 "column; tagging needs at least two (or pick the right "
                                 "--label_column)" if labels else
                                 f"{train_file} has no tagged words; check the file")
        # A chunk tag of a type training has, in the scheme predictions are written in (a
        # dev S- or M- may widen training's), is one the model learnt as BIOES can predict
        # (finetuning.tag_encoding='file' learns only the training file's: runner checks).
        # A test file's tags are not scored: its types are checked.
        letters, separator, types = chunk_tags([s.tags for s in train],
                                               [s.tags for s in dev if s.tags], labels)
        for split, path in ((dev, dev_file), (test, test_file)):
            for sentence in split or ():
                for tag in sentence.tags or ():
                    if tag not in labels and not (
                            (split is test or (tag[:1] in letters and tag[1:2] == separator))
                            and metrics.chunk_type(tag) in types):
                        raise UserInputError(
                            f"{path} (sentence at line {sentence.guid}): tag {tag!r} does not "
                            f"occur in the training file (tags: {', '.join(labels)}); fix the "
                            "tag or add training sentences that use it")
        return _task_data(task, (train_file, train), (dev_file, dev), (test_file, test), labels,
                          {"tag": column})
    if task.kind == "qa":
        from electra_tf.finetune import squad
        train = squad.read_squad(train_file, training=True)
        dev = squad.read_squad(dev_file, training=False)
        test = (squad.read_squad(test_file, training=False, labelled=False) if test_file
                else None)
        impossible = sum(e.is_impossible for e in train)
        if task.name == "squad_v1" and impossible:
            raise UserInputError(
                f"--task=squad_v1 is SQuAD 1.1, whose questions all have answers, but "
                f"{train_file} marks {impossible} is_impossible (SQuAD 2.0): pass "
                "--task=squad_v2 (or --task=qa)")
        answerless = [e.qid for e in dev if not e.is_impossible and not e.answers]
        if task.name == "squad_v1" and answerless:
            raise UserInputError(
                f"{dev_file}: question {answerless[0]!r}"
                + (f" (and {len(answerless) - 1} more)" if len(answerless) > 1 else "")
                + " has no answers; --task=squad_v1 (SQuAD 1.1) scores each question against "
                "its answers: give it one, or pass --task=squad_v2 if some questions are "
                "unanswerable")
        unanswerable = sum(e.is_impossible for e in dev)
        if unanswerable and not impossible:
            log(f"note: {dev_file} has {unanswerable} unanswerable questions (is_impossible) "
                f"but {train_file} none: the model does not learn to leave a question "
                "unanswered, and those score 0")
        return _task_data(task, (train_file, train), (dev_file, dev), (test_file, test), None)
    columns = dict(text_column=text_column or "text", text_b_column=text_b_column,
                   label_column=label_column or "label", kind=task.kind)
    train = readers.read_table(train_file, log=log, **columns)
    dev = readers.read_table(dev_file, log=log, **columns)
    test = (readers.read_table(test_file, labelled=False, log=log, **columns) if test_file
            else None)
    for path, examples in ((dev_file, dev), (test_file, test)):
        _note_repeated_ids(path, examples or (), log)
    labels = None
    if task.kind == "classification":
        labels = readers.sorted_labels(e.label for e in train)
        if len(labels) < 2:
            raise UserInputError(f"{train_file} has a single label ({labels[0]!r}) in column "
                                 f"'{columns['label_column']}'; classification needs at least "
                                 "two (or pick the right --label_column)")
        # Scores read as classes: many distinct numbers, or fractions.
        scores = readers.numeric_labels(labels) and (
            len(labels) > 20 or not all(float(label).is_integer() for label in labels))
        regression = "; if they are scores, --task=regression learns them as numbers"
        # One number written two ways ("1" and "1.0", as pandas writes a column that held
        # a NaN): two classes, and a dev file written one way scored 0.
        if readers.numeric_labels(labels):
            spellings = {}
            for label in labels:
                spellings.setdefault(float(label), []).append(label)
            same = next((s for s in spellings.values() if len(s) > 1), None)
            if same:
                raise UserInputError(
                    f"{train_file} writes one label two ways ({' and '.join(map(repr, same))} "
                    f"in column '{columns['label_column']}'), which would be two classes; "
                    "write each class one way" + (regression if scores else ""))
        for split, path in ((dev, dev_file), (test, test_file)):
            for index, example in enumerate(split or ()):
                if example.label is not None and example.label not in labels:
                    # ("1.0" where the training file has "1": one number written otherwise)
                    alike = [label for label in labels if readers.numeric_labels(
                        [label, example.label]) and float(label) == float(example.label)]
                    raise UserInputError(
                        f"{_where(path, index, example)}: label {example.label!r} does not "
                        f"occur in the training file (labels: {readers.shown(labels)}); "
                        + (f"it is {alike[0]!r} written otherwise: write it so" if alike else
                           "the labels are numbers" + regression if scores else
                           "fix the label or add training examples with it"))
        if scores:
            log(f"note: the {len(labels)} classes of {train_file} are numbers "
                f"({readers.shown(labels, 5)})" + regression)
        for label in labels:
            if label.lower() in ("nan", "none", "null"):
                count = sum(e.label == label for e in train)
                log(f"note: {count} examples of {train_file} have the label {label!r}, which "
                    "may be a missing value written as text (pandas' astype(str) writes 'nan'); "
                    "if so, fill them in or drop them")
    return _task_data(task, (train_file, train), (dev_file, dev), (test_file, test), labels,
                      {"text": columns["text_column"], "text_b": columns["text_b_column"],
                       "label": columns["label_column"]})


def _note_repeated_ids(path: str, examples, log):
    """Notes ids (an `id` column's, or line numbers where its cell is empty) that name more
    than one example of a file, whose predictions are matched back to it by id."""
    counts = collections.Counter(e.guid for e in examples)
    repeated = [(guid, n) for guid, n in counts.items() if n > 1]
    if repeated:
        guid, n = repeated[0]
        ids = f"{len(repeated)} ids name" if len(repeated) > 1 else "an id names"
        log(f"note: {path}: {ids} more than one example ({guid!r} {n} times); its "
            "predictions are written a row per example, in the file's order")


def _where(path: str, index: int, example: readers.Example) -> str:
    """"PATH line N" of the `index`-th example `read_table` gave of `path`, and its id if
    the file has an `id` column (the example's guid, its name in the predictions files, is
    then the id, not the line). Read again: this is only for an error message."""
    rows, _ = readers._rows(path)
    if index < len(rows):
        number, row = rows[index]
        guid = row.get("id")
        if example.guid == (str(number) if guid in (None, "") else str(guid)):
            return f"{path} line {number}" + ("" if guid in (None, "") else f" (id {guid!r})")
    return f"{path}, the example {example.guid!r}"


def _task_data(task, train, dev, test, labels, columns=None) -> TaskData:
    """TaskData from (file, examples) pairs; the test pair's file is None when there is none."""
    return TaskData(task, Split("train", *train), [Split("dev", *dev)],
                    [Split("test", *test)] if test[0] else [], labels, columns)


def _not_empty(path, examples, skipped):
    """A GLUE file must hold examples (the other readers check their files themselves)."""
    if not examples:
        raise UserInputError(f"{path} holds no examples"
                             + (f" ({skipped} malformed lines skipped)" if skipped else "")
                             + "; check the file")


def _generic_names(split, task):
    """A generic task's file names in --data_dir: tagging reads CoNLL text only (its JSONL
    was read as words, and trained), QA SQuAD's JSON (a train.csv beside it was read and
    refused as not JSON)."""
    kinds = (("tsv", "txt", "conll") if task.kind == "tagging" else ("json",)
             if task.kind == "qa" else ("csv", "tsv", "jsonl", "json", "txt"))
    return tuple(f"{split}.{ext}" for ext in kinds)


def _tag_column(label_column):
    if label_column is None:
        return -1
    try:
        return int(label_column)
    except ValueError:
        raise UserInputError(f"--label_column={label_column} must be a column index for "
                             "tagging (CoNLL files have no header; -1 is the last)") from None


def _load_glue(task, data_dir, train_file, dev_file, test_file, log) -> TaskData:
    fmt = task.glue
    if data_dir:
        folder = _glue_dir(data_dir, fmt)
        train_file = _find(folder, ("train.tsv",), "train")
        devs = [(name, _find(folder, (f,), name)) for name, f in fmt.dev_files]
        tests = []
        for name, files, submission, columns in fmt.test_files:
            # ("../": the folder above, not a path with "..": gs:// takes no such)
            paths = [os.path.join(os.path.dirname(folder.rstrip("/")), f[3:])
                     if f.startswith("../") else os.path.join(folder, f) for f in files]
            found = [path for path in paths if tf.io.gfile.exists(path)]
            if found:
                tests.append((name, found[0], submission or task.submission, columns))
    else:
        devs = [("dev", dev_file)]
        tests = [("test", test_file, *_submission_of(task, test_file))] if test_file else []
    train, skipped = readers.read_glue(train_file, fmt)
    _not_empty(train_file, train, skipped)
    dev_splits = []
    for name, path in devs:
        examples, s = readers.read_glue(path, fmt)
        _not_empty(path, examples, s)
        skipped += s
        dev_splits.append(Split(name, path, examples))
    test_splits = []
    for name, path, submission, columns in tests:
        examples, s = readers.read_glue(path, fmt, test=True, columns=columns)
        _not_empty(path, examples, s)
        test_splits.append(Split(name, path, examples, submission))
    if skipped:
        log(f"skipped {skipped} malformed lines in the {fmt.directory} files (known in QQP)")
    return TaskData(task, Split("train", train_file, train), dev_splits, test_splits,
                    list(fmt.labels) if fmt.labels else None)
