"""Reading fine-tuning data: GLUE TSVs, your own CSV / TSV / JSONL tables, CoNLL tagging files.

Every reader returns plain examples and raises a UserInputError naming the file (and line)
and the fix on anything it cannot read: a missing file or column, a row with too few fields,
a regression label that is not a finite number, a malformed JSON line or CSV quote, text
that is not UTF-8.
"""

import csv
import dataclasses
import io
import json
import math
import os
import re
import sys

import tensorflow as tf

from electra_tf.data import corpus
from electra_tf.errors import UserInputError

csv.field_size_limit(sys.maxsize)
TABLE_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}


@dataclasses.dataclass
class Example:
    """One sentence (or pair) example. `label` is the label as written (a string for
    classification, a float for regression), None in unlabelled test files; `guid` names
    it in predictions (a GLUE test file's index, a table's `id` column, else the row
    number)."""
    text_a: str
    text_b: str | None
    label: str | float | None
    guid: str


@dataclasses.dataclass
class TaggedSentence:
    words: list[str]
    tags: list[str] | None
    guid: str


def read_text(path: str) -> str:
    """The file's text, decoded as UTF-8 (a leading byte-order mark, as Excel's "CSV UTF-8"
    writes, dropped)."""
    if not tf.io.gfile.exists(path):
        raise UserInputError(f"{path} does not exist; check the path (--data_dir or "
                             "--train_file/--dev_file/--test_file)")
    if tf.io.gfile.isdir(path):
        raise UserInputError(f"{path} is a directory; pass the data file in it")
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):  # (Excel's "Unicode Text")
        raise UserInputError(f"{path} is UTF-16 text (it starts with a UTF-16 byte-order "
                             "mark), not UTF-8; re-save it as UTF-8 (iconv -f utf-16 -t utf-8)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise UserInputError(f"{path} line {line} is not UTF-8 (byte 0x{raw[e.start]:02x}); "
                             f"re-save the file as UTF-8, e.g. {corpus.ICONV_HINT}") from None
    return text[1:] if text.startswith("\ufeff") else text


def _lines(text: str, lone_cr: bool = False) -> list[str]:
    """Lines ended by "\n" (or "\r\n", "\r\r\n") only: text fields may hold other
    separators (U+2028, form feeds) that str.splitlines would break on. `lone_cr`: a lone
    "\r" ends a line too (old Mac line ends, as Python's universal newlines read them), for
    files whose lines hold no line break."""
    if lone_cr:
        lines = re.split(r"\r*\n|\r", text)
    else:
        lines = [line.rstrip("\r") for line in text.split("\n")]
    return lines[:-1] if lines and not lines[-1] else lines


_QUOTED_FIELD = re.compile(r'"(?:[^"]|"")*"')


def _plain_tsv(text: str) -> bool:
    """Whether a TSV file is plain (GLUE's kind: a double quote is an ordinary character)
    rather than quoted as Python's csv, pandas and spreadsheets write it (a field holding a
    quote, tab or line break is wrapped in quotes, its quotes doubled). Read quoted, a
    plain file's text opening with a quote would run over tabs and lines to the next one.
    Plain: every line splits on tabs into the header's number of fields, and some field
    holding a quote is not one wrapped field."""
    lines = [line for line in _lines(text) if line.strip()]
    if not lines:
        return False
    width = len(lines[0].split("\t"))
    fields = [line.split("\t") for line in lines]
    return (all(len(row) == width for row in fields)
            and any('"' in f and not _QUOTED_FIELD.fullmatch(f) for row in fields for f in row))


def check_characters(value, where: str):
    """Refuses JSON data holding a lone surrogate escape ("\\ud83d", half of an emoji's
    pair, as cut text leaves it): json.loads gives a str that no UTF-8 encodes, which
    TensorFlow would refuse later with a traceback."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise UserInputError(f"{where} holds a lone surrogate escape (half of a pair such as "
                             "\\ud83d\\ude00, an emoji): no character; fix or drop the text "
                             "that holds it") from None


def table_format(path: str) -> str:
    """csv, tsv or jsonl, from the file's extension."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in TABLE_FORMATS:
        raise UserInputError(f"{path}: unknown file type '{ext}'; use .csv, .tsv or .jsonl "
                             "(one JSON object per line)")
    return TABLE_FORMATS[ext]


class _PlainLines:
    """csv.reader's rows and line_num over a plain TSV (`_plain_tsv`): its lines, split at
    tabs. Only "\n" ends a line (csv's reader ends one at a lone "\r" too, which a tweet's
    text may hold: the row split in two, and every later line number one too high)."""

    def __init__(self, text: str):
        self._lines = iter(_lines(text))
        self.line_num = 0

    def __iter__(self):
        return self

    def __next__(self) -> list[str]:
        line = next(self._lines)
        self.line_num += 1
        return line.split("\t")


def _rows(path: str, empty: list[int] | None = None):
    """(line number, {column: value}) for each record of a CSV/TSV (with a header row) or
    JSONL file, and the columns. Blank lines are skipped, and so are rows of empty fields
    (a spreadsheet's ",,,"): their line numbers are added to `empty` where given."""
    fmt = table_format(path)
    text = read_text(path)
    if fmt == "jsonl":
        rows, columns = [], set()
        # Only "\n" ends a record: JSON text may hold other line separators (U+2028).
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserInputError(f"{path} line {number} is not valid JSON ({e.msg}); the "
                                     "file must hold one JSON object per line") from None
            if not isinstance(row, dict):
                raise UserInputError(f"{path} line {number} is a JSON {type(row).__name__}, not "
                                     "an object; write one {\"text\": ..., \"label\": ...} "
                                     "object per line")
            check_characters(row, f"{path} line {number}")
            rows.append((number, row))
            columns.update(row)
        return rows, sorted(columns)
    plain = fmt == "tsv" and _plain_tsv(text)
    # Lines split at "\n" only (a lone "\r" kept in a text), in a file that has any: one
    # of old Mac line ends ("\r" alone) is csv's to split. A TSV without a double quote
    # reads the same either way, but for a lone "\r".
    by_lines = fmt == "tsv" and "\n" in text and (plain or '"' not in text)
    # strict: a stray opening quote would otherwise swallow the lines up to the next quote
    # into one field, merging rows without a word.
    reader = _PlainLines(text) if by_lines else csv.reader(
        io.StringIO(text, newline=""), delimiter="," if fmt == "csv" else "\t",
        quoting=csv.QUOTE_NONE if plain else csv.QUOTE_MINIMAL, strict=True)
    rows, number = [], 1  # the line the next record starts on
    try:
        header = next(reader, None)
        if header is None:
            raise UserInputError(f"{path} is empty; it needs a header row naming the columns "
                                 "and one row per example")
        header = [name.strip() for name in header]  # "text, label": the column is 'label'
        if fmt == "csv" and len(header) == 1 and ";" in header[0]:
            # Excel's CSV in locales with a decimal comma
            raise UserInputError(f"{path}: its fields are separated by semicolons (header "
                                 f"'{header[0]}'); save it with commas, or with tabs as .tsv")
        _check_full_width_commas(path, fmt, header)
        # (columns without a name, as spreadsheets write empty trailing ones, are not read:
        # no flag can name them)
        repeated = sorted({c for c in header if c and header.count(c) > 1})
        if repeated:
            raise UserInputError(f"{path}: the header names column '{repeated[0]}' twice; give "
                                 "each column its own name")
        number = reader.line_num + 1
        for row in reader:
            start, number = number, reader.line_num + 1
            if not any(field.strip() for field in row):
                if len(row) > 1 and empty is not None:
                    empty.append(start)
                continue
            if len(row) != len(header):
                _check_named_for_its_format(path, header)
                spans = (f"the record from line {start} to {number - 1}" if number - 1 > start
                         else f"line {start}")
                raise UserInputError(
                    f"{path} {spans} has {len(row)} fields but the header has "
                    f"{len(header)}; quote fields that contain the "
                    f"{'comma' if fmt == 'csv' else 'tab'} delimiter"
                    + (" and check for a stray double quote" if number - 1 > start else ""))
            rows.append((start, {name: field for name, field in zip(header, row) if name}))
    except csv.Error as e:
        raise UserInputError(
            f"{path} line {number}: {e} (a field that opens with a double quote runs to the "
            "next one); remove the stray quote, or quote the whole field and double the "
            "quotes inside it") from None
    return rows, [name for name in header if name]


def _check_full_width_commas(path, fmt, header):
    """A CSV whose header is one field holding full-width commas ('，', U+FF0C: typed by a
    Chinese input method) was read as one column ("has no column 'text'", or a row's fields
    against a header of 1)."""
    if fmt == "csv" and len(header) == 1 and "\uff0c" in str(header[0]):
        raise UserInputError(f"{path}: its fields are separated by full-width commas ('，', "
                             f"U+FF0C; header '{header[0]}'); separate them with ASCII commas "
                             "(,), or with tabs as .tsv")


def _check_named_for_its_format(path, header):
    """A TSV named .csv or a CSV named .tsv (its header one field holding the other's
    delimiter), met where its columns do not fit: named as such."""
    other = {"csv": ("\t", "tabs", ".tsv"), "tsv": (",", "commas", ".csv")}.get(
        table_format(path))
    if other and len(header) == 1 and other[0] in str(header[0]):
        raise UserInputError(f"{path}: its fields are separated by {other[1]} (header "
                             f"{header[0]!r}); name it {other[2]}")


def _check_column(path, columns, column, flag):
    if column not in columns:
        _check_named_for_its_format(path, columns)
        alike = [c for c in columns if str(c).strip().lower() == column.strip().lower()]
        raise UserInputError(f"{path} has no column '{column}' (columns: "
                             f"{', '.join(map(str, columns)) or 'none named'}); pass "
                             f"{flag}=NAME" + (f" ({flag}={alike[0]}?)" if alike else ""))


def read_table(path: str, text_column: str = "text", text_b_column: str | None = None,
               label_column: str = "label", kind: str = "classification",
               labelled: bool = True, log=None) -> list[Example]:
    """Examples from a CSV/TSV (header row) or JSONL file.

    `labelled=False` (a test file) reads labels only if the column is there. Regression
    labels must be numbers. An example's guid (its name in the predictions files) is the
    file's `id` column where it has one, else its line number. Rows of empty fields are
    skipped, with a note to `log` (a test file's row then has no prediction).
    """
    empty = []
    rows, columns = _rows(path, empty)
    if empty and log:
        many = len(empty) > 1
        log(f"note: {path}: skipped {len(empty)} row{'s' * many} whose fields are all empty "
            f"(line{'s' * many} {shown([str(n) for n in empty], 5)}); "
            + ("they are not examples" if many else "it is not an example")
            + (f" and get{'s' * (not many)} no prediction" if not labelled else ""))
    if not rows:
        raise UserInputError(f"{path} holds no examples; check the file")
    _check_column(path, columns, text_column, "--text_column")
    if text_b_column:
        _check_column(path, columns, text_b_column, "--text_b_column")
    has_labels = labelled or label_column in columns
    if labelled:
        _check_column(path, columns, label_column, "--label_column")
    examples = []
    for number, row in rows:
        texts = []
        for column in (text_column, text_b_column):
            if column is None:
                texts.append(None)
                continue
            value = row.get(column)
            if isinstance(value, (bool, list, dict)):
                kind = {bool: "boolean", list: "array", dict: "object"}[type(value)]
                raise UserInputError(f"{path} line {number} has a JSON {kind} in column "
                                     f"'{column}', not text; write the text as a string")
            # (an empty cell, or JSON's null or NaN: a missing value pandas wrote out)
            if (value is None or (isinstance(value, float) and not math.isfinite(value))
                    or not str(value).strip()):
                raise UserInputError(f"{path} line {number} has no text in column '{column}'; "
                                     "fill it in or drop the row")
            texts.append(str(value))
        label = row.get(label_column) if has_labels else None
        if label is None or (isinstance(label, str) and not label.strip()):
            if labelled:
                raise UserInputError(f"{path} line {number} has no label in column "
                                     f"'{label_column}'; fill it in or drop the row")
            label = None  # a test file's row without a label
        else:
            label = _parse_label(label, kind, path, number)
        guid = row.get("id")
        examples.append(Example(texts[0], texts[1], label,
                                str(number) if guid in (None, "") else str(guid)))
    return examples


def _parse_label(value, kind, path, number):
    if isinstance(value, (list, dict)):
        raise UserInputError(f"{path} line {number}: label {json.dumps(value)} is a JSON "
                             f"{'array' if isinstance(value, list) else 'object'}; write one "
                             "label per example, a string or a number")
    if kind == "regression":
        return _finite(value, path, number)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and math.isnan(value):  # JSON's NaN, not a string
        raise UserInputError(f"{path} line {number}: label NaN is a missing value, not a "
                             "class; fill it in or drop the row")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def _number(value) -> float | None:
    """A label's number, or None: float's reading, less the strings it takes that a data
    file does not mean as numbers ("1_000" is 1000.0 to Python)."""
    if isinstance(value, bool) or (isinstance(value, str) and "_" in value):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _decimal_comma(value) -> str:
    """A hint for a number written with a decimal comma ("3,5") or a thousands separator
    ("1,000", which is either), else ''."""
    if not isinstance(value, str):
        return ""
    text = value.strip()
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+", text):
        return (f" (write {text.replace(',', '')} without the comma"
                + (f", or {text.replace(',', '.')} if it is a decimal comma)"
                   if text.count(",") == 1 else ")"))
    if re.fullmatch(r"[+-]?\d*,\d+", text):
        return f" (a decimal comma? write {text.replace(',', '.')})"
    return ""


def _finite(value, path, number) -> float:
    """A regression label: a finite number (nan, inf and 1e400 would train to nan)."""
    number_value = _number(value)
    if number_value is None:
        raise UserInputError(f"{path} line {number}: label {value!r} is not a number"
                             f"{_decimal_comma(value)}; regression needs numeric labels (use "
                             "--task=classification for categories)")
    if not math.isfinite(number_value):
        raise UserInputError(f"{path} line {number}: label {value!r} is not a finite number; "
                             "regression labels must be finite, fix or drop the row")
    return number_value


def sorted_labels(labels) -> list[str]:
    """The distinct labels in a stable order: numerically if they are all numbers (ties,
    "1" and "1.0", alphabetically), else alphabetically."""
    distinct = set(labels)
    if numeric_labels(distinct):
        return sorted(distinct, key=lambda label: (_number(label), label))
    return sorted(distinct)


def numeric_labels(labels) -> bool:
    """Whether every label is a number."""
    return all(_number(label) is not None for label in labels)


def shown(labels: list[str], limit: int = 10) -> str:
    """The labels for a message: all of up to `limit`, else the first and a count."""
    if len(labels) <= limit:
        return ", ".join(labels)
    return f"{', '.join(labels[:limit])}, ... ({len(labels)} in all)"


# ------------------------------------------------------------------------------ GLUE


@dataclasses.dataclass(frozen=True)
class GlueFormat:
    """Where a GLUE task's fields are in its TSVs (column indices; negative from the end).
    `test_files`: (split name, the file's candidate names, its submission file, its text
    columns where not test_text_a/b); the first found of each is read."""
    directory: str
    labels: tuple[str, ...] | None  # None: regression
    text_a: int
    text_b: int | None
    label: int
    test_text_a: int
    test_text_b: int | None
    header: bool = True
    width: int | None = None  # the fields of a row of a train or dev file without a header
    dev_files: tuple[tuple[str, str], ...] = (("dev", "dev.tsv"),)
    test_files: tuple[tuple[str, tuple[str, ...], str, tuple | None], ...] = (
        ("test", ("test.tsv",), "", None),)
    skip_malformed: bool = False


TEST_INDEX = ("index", "id")  # the first column of a GLUE test file (QQP's is id)
# The label columns of GLUE's train and dev files, which its test files lack.
GLUE_LABELS = ("label", "gold_label", "is_duplicate", "score", "Quality")


def read_glue(path: str, fmt: GlueFormat, test: bool = False,
              columns: tuple | None = None) -> tuple[list[Example], int]:
    """Examples of one GLUE TSV (the GLUE release's columns, read without quoting as the
    official code does), and how many malformed lines were skipped (only QQP has some, in
    its train and dev files). A row holds as many fields as the header (a tab inside a text
    shifted or cut it). A test file's rows are its `index` (or QQP's `id`) column's, each
    once: its predictions go to the GLUE server, which takes every index, once.
    `columns`: a test file's text columns where not the task's (MNLI's diagnostic, AX)."""
    lines = _lines(read_text(path))
    header = None
    if fmt.header or test:
        header, lines = (lines[0].lstrip("\ufeff").split("\t") if lines else []), lines[1:]
    if test and header[:1] not in [[name] for name in TEST_INDEX]:
        raise UserInputError(f"{path} is not a GLUE test file: its header begins "
                             f"{header[0] if header else ''!r}, not 'index' (the release's "
                             "test.tsv); pass that file (or --task=classification for your own "
                             "columns)")
    labelled = [name for name in header or [] if name in GLUE_LABELS] if test else []
    if labelled:
        raise UserInputError(f"{path} is not a GLUE test file: it has a label column "
                             f"({labelled[0]}), as train and dev files do; pass the release's "
                             "test.tsv")
    width = len(header) if header is not None else fmt.width
    a, b = (columns or (fmt.test_text_a, fmt.test_text_b)) if test else (fmt.text_a, fmt.text_b)
    examples, skipped, seen = [], 0, {}
    for number, line in enumerate(lines, 2 if fmt.header or test else 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        try:
            if width is not None and len(fields) != width:
                raise IndexError
            text_a = fields[a]
            text_b = fields[b] if b is not None else None
            label = None if test else fields[fmt.label]
        except IndexError:
            if fmt.skip_malformed and not test:
                skipped += 1
                continue
            if width is None or len(fields) == width:  # another task's file, say
                wrong = f"does not have the fields of a GLUE {fmt.directory} file"
            else:
                wrong = (f"has {len(fields)} tab-separated fields where "
                         f"{'the header has' if header else f'a {fmt.directory} file has'} "
                         f"{width} (a tab inside a text, or a field missing?)")
            raise UserInputError(f"{path} line {number} {wrong}; fix the line, or use the "
                                 "files of the GLUE release (or --task=classification with "
                                 "your own columns)") from None
        if not test and fmt.labels is None:  # regression (STS-B): a finite number
            text, label = label, _number(label)
            if label is None or not math.isfinite(label):
                hint = _decimal_comma(text) or f" (is this the {fmt.directory} file?)"
                raise UserInputError(f"{path} line {number}: label {text!r} is not a "
                                     f"{'finite ' if label is not None else ''}number{hint}; "
                                     "fix or drop the row")
            if not 0 <= label <= 5:  # (trained on score / 5; served and submitted 0-5)
                raise UserInputError(f"{path} line {number}: label {text!r} is outside "
                                     f"{fmt.directory}'s scores, 0 to 5; fix the row, or "
                                     "fine-tune other scores with --task=regression")
        if not test and fmt.labels is not None and label not in fmt.labels:
            raise UserInputError(f"{path} line {number}: label {label!r} is not one of "
                                 f"{', '.join(fmt.labels)}; is this the {fmt.directory} file?")
        # A test row's index; a dev row's where the file has one (else its line number)
        guid = fields[0] if header and header[0] in TEST_INDEX else str(number)
        if test and guid in seen:
            raise UserInputError(f"{path} line {number}: index {guid} is also line "
                                 f"{seen[guid]}'s; the GLUE server takes each once, fix the file")
        seen[guid] = number
        examples.append(Example(text_a, text_b, label, guid))
    return examples, skipped


# ------------------------------------------------------------------------------ CoNLL


ASCII_SPACE = " \t\r\f\v"


def read_conll(path: str, tag_column: int = -1, labelled: bool = True) -> list[TaggedSentence]:
    """Sentences of a CoNLL-style file: a token per line, columns separated by tabs where
    the line has any (so a word may hold spaces: "New York\tB-LOC"), else by whitespace (the
    word first, the tag in `tag_column`, default the last), the same number of columns on
    every tagged line, blank lines between sentences, `-DOCSTART-` lines ignored.
    `labelled=False` keeps only the words if a line has just one column (on every line of a
    sentence or on none)."""
    if path.lower().endswith((".json", ".jsonl", ".csv")):  # (read as words, it trained)
        raise UserInputError(
            f"{path} is a {path.rsplit('.', 1)[1].upper()} file; tagging reads CoNLL text: a "
            "word and its tag per line (tab- or space-separated), a blank line between "
            "sentences; write it so (e.g. as train.txt)")
    # (a lone "\r", read as whitespace, made a file of old Mac line ends one line: one word
    # and its tag, with no word said)
    lines = _lines(read_text(path), lone_cr=True)
    sentences, words, tags, untagged, start = [], [], [], [], 1
    width = None  # (columns, the first line with them)

    def flush():
        if tags and untagged:
            raise UserInputError(f"{path} line {untagged[0]} has no tag but other lines of its "
                                 f"sentence (from line {start}) have one; tag every line of a "
                                 "sentence or none")
        if words:
            sentences.append(TaggedSentence(list(words), list(tags) if tags else None,
                                            str(start)))
        words.clear()
        tags.clear()
        untagged.clear()

    for number, line in enumerate(lines, 1):
        # Columns are split at ASCII whitespace only, so a word may be a Unicode space
        # (Chinese NER corpora tag the ideographic space U+3000), which becomes [UNK] as BERT
        # deletes it; a line of Unicode spaces alone is a blank line.
        text = line.strip(ASCII_SPACE) if line.strip() else ""
        # A line with a tab between its fields is tab-separated; in a test file also one
        # whose only tab is at its end (a blanked tag column after a word with a space:
        # "New York<TAB>"). A blank line is blank, tabs or not.
        tabbed = "\t" in text or (not labelled and text and "\t" in line)
        fields = ([field.strip(ASCII_SPACE) for field in text.split("\t")] if tabbed
                  else [field for field in re.split(f"[{ASCII_SPACE}]+", text) if field])
        if not fields:
            flush()
            continue
        if fields[0] == "-DOCSTART-":
            flush()
            continue
        if not words:
            start = number
        words.append(fields[0])
        if len(fields) == 1 and not labelled:
            untagged.append(number)
            continue
        if len(fields) >= 2 and tag_column in (0, -len(fields)):
            raise UserInputError(f"{path}: --label_column={tag_column} is the word column; "
                                 "the tags are in another (-1, the default, is the last)")
        if len(fields) >= 2 and not -len(fields) <= tag_column < len(fields):
            raise UserInputError(f"{path} line {number} has {len(fields)} columns, no column "
                                 f"{tag_column} (--label_column); choose the tag column's "
                                 f"index, 1 to {len(fields) - 1} (or -1, the last)")
        if len(fields) < 2:
            raise UserInputError(f"{path} line {number} has no tag column ({line.strip()!r}); "
                                 "CoNLL files need 'word ... tag' on every line (choose the "
                                 "column with --label_column=INDEX)")
        if width is None:
            width = (len(fields), number)
        elif len(fields) != width[0]:
            raise UserInputError(f"{path} line {number} has {len(fields)} columns but line "
                                 f"{width[1]} has {width[0]}; give every line the same columns "
                                 "(separate them with tabs if a word holds a space)")
        if not fields[tag_column] and not labelled:  # a test file's blanked tag column
            untagged.append(number)
            continue
        if not fields[tag_column]:  # "word<TAB><TAB>x": an empty cell, which is no tag
            raise UserInputError(f"{path} line {number} has an empty tag ({line.strip()!r}); "
                                 "give every word a tag (O outside entities)")
        tags.append(fields[tag_column])
    flush()
    if not sentences:
        raise UserInputError(f"{path} holds no sentences; check the file")
    return sentences
