"""Fine-tuning readers on malformed or unusual files: each is read as its writer meant or
refused with one line naming the file, the line and the fix (never read silently wrong)."""

import json

import pytest

from electra_tf.errors import UserInputError
from electra_tf.finetune import readers, squad, tasks


def _refused(match, read, *args, **kwargs):
    with pytest.raises(UserInputError) as raised:
        read(*args, **kwargs)
    message = str(raised.value)
    assert "\n" not in message
    assert match in message, message
    return message


def test_text_that_is_not_utf8_is_refused_naming_its_line(tmp_path):
    latin1 = "Café au lait.".encode("latin-1")
    table = tmp_path / "train.csv"
    table.write_bytes(b"text,label\nFine.,pos\n" + latin1 + b",neg\n")
    _refused(f"{table} line 3 is not UTF-8 (byte 0xe9); re-save the file as UTF-8, e.g. iconv "
             "-f gb18030 -t utf-8 (simplified Chinese), -f big5 (traditional) or -f latin1",
             readers.read_table, str(table))
    conll = tmp_path / "train.txt"
    conll.write_bytes(b"Emma B-PER\n\n" + latin1 + b" O\n")
    _refused(f"{conll} line 3 is not UTF-8", readers.read_conll, str(conll))
    glue = tmp_path / "dev.tsv"
    glue.write_bytes(b"sentence\tlabel\n" + latin1 + b"\t1\n")
    _refused(f"{glue} line 2 is not UTF-8", readers.read_glue, str(glue),
             tasks.get_task("sst2").glue)
    qa = tmp_path / "dev.json"
    qa.write_bytes(b'{"data": [{"paragraphs": [{"context": "' + latin1 + b'", "qas": []}]}]}')
    _refused(f"{qa} line 1 is not UTF-8", squad.read_squad, str(qa), training=False)
    # Excel's "Unicode Text" (UTF-16 with a byte-order mark): named as such (the advice was
    # gb18030, big5 or latin1, which gives text full of NULs).
    table.write_bytes("text\tlabel\nFine.\tpos\n".encode("utf-16"))
    _refused(f"{table} is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8; "
             "re-save it as UTF-8 (iconv -f utf-16 -t utf-8)", readers.read_table, str(table))


def test_a_missing_or_numeric_classification_label_is_named(tmp_path):
    """A missing label written as text ('nan', as pandas' astype(str) writes it) is noted
    (it may be a class: Min Nan's language code); JSON's NaN is refused; scores given to
    --task=classification are noted, and a dev score not in training names regression."""
    table = tmp_path / "train.csv"
    table.write_text("text,label\nFine.,pos\nBad.,nan\nOk.,pos\n", encoding="utf-8")
    noted = []
    data = tasks.load(tasks.get_task("classification"), train_file=str(table),
                      dev_file=str(table), log=noted.append)
    assert data.labels == ["nan", "pos"]
    assert noted == [f"note: 1 examples of {table} have the label 'nan', which may be a missing "
                     "value written as text (pandas' astype(str) writes 'nan'); if so, fill "
                     "them in or drop them"]
    records = tmp_path / "train.jsonl"
    records.write_text('{"text": "Fine.", "label": "pos"}\n{"text": "Bad.", "label": NaN}\n',
                       encoding="utf-8")
    _refused(f"{records} line 2: label NaN is a missing value, not a class; fill it in or "
             "drop the row", readers.read_table, str(records))
    scores = [f"{0.25 * k - 1:g}" for k in range(24)]  # -1 ... 4.75
    table.write_text("text,label\n" + "".join(f"Text {k}.,{v}\n" for k, v in enumerate(scores)),
                     encoding="utf-8")
    dev = tmp_path / "dev.csv"
    dev.write_text("text,label\nA.,4.75\n", encoding="utf-8")
    noted = []
    data = tasks.load(tasks.get_task("classification"), train_file=str(table),
                      dev_file=str(dev), log=noted.append)
    assert data.labels[:3] == ["-1", "-0.75", "-0.5"] and len(data.labels) == 24
    assert noted == [f"note: the 24 classes of {table} are numbers (-1, -0.75, -0.5, -0.25, 0, "
                     "... (24 in all)); if they are scores, --task=regression learns them as "
                     "numbers"]
    dev.write_text("text,label\nA.,4.8\n", encoding="utf-8")
    message = _refused(f"{dev} line 2: label '4.8' does not occur in the training file (labels: "
                       "-1, -0.75, -0.5, -0.25, 0, 0.25, 0.5, 0.75, 1, 1.25, ... (24 in all)); "
                       "the labels are numbers; if they are scores, --task=regression learns "
                       "them as numbers", tasks.load, tasks.get_task("classification"),
                       train_file=str(table), dev_file=str(dev), log=noted.append)
    assert len(message) < 400
    # One number written two ways (pandas writes 1.0 in a column that held a NaN): refused,
    # where it made two classes and a dev file of 0s and 1s scored 0.
    table.write_text("text,label\nA.,0\nB.,1\nC.,0.0\nD.,1.0\n", encoding="utf-8")
    _refused(f"{table} writes one label two ways ('0' and '0.0' in column 'label'), which "
             "would be two classes; write each class one way", tasks.load,
             tasks.get_task("classification"), train_file=str(table), dev_file=str(table),
             log=noted.append)
    # A dev label that is a training label's number written otherwise: said so.
    table.write_text("text,label\nA.,0\nB.,1\n", encoding="utf-8")
    dev.write_text("text,label\nA.,1.0\n", encoding="utf-8")
    _refused(f"{dev} line 2: label '1.0' does not occur in the training file (labels: 0, 1); "
             "it is '1' written otherwise: write it so", tasks.load,
             tasks.get_task("classification"), train_file=str(table), dev_file=str(dev))


def test_a_dev_chunk_tag_of_a_type_training_has_is_taken(tmp_path):
    """The model has every B-/I-/E-/S- tag of each type training has, so a dev chunk of a
    length training lacks (S-LOC where training has only B-LOC E-LOC; BMES's M-LOC) can be
    predicted and is scored: it was refused. A type training lacks, or a token-level tag
    it lacks, is still refused."""
    train, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    train.write_text("我 O\n在 O\n北 B-LOC\n京 E-LOC\n", encoding="utf-8")
    dev.write_text("在 O\n石 B-LOC\n家 M-LOC\n庄 E-LOC\n\n京 S-LOC\n", encoding="utf-8")
    data = tasks.load(tasks.get_task("tagging"), train_file=str(train), dev_file=str(dev))
    assert data.labels == ["B-LOC", "E-LOC", "O"]
    # The scheme predictions are written in: training's B- E- widened by dev's M- (BMES).
    from electra_tf.finetune import metrics
    assert metrics.files_scheme([s.tags for s in data.train.examples],
                                [s.tags for s in data.dev[0].examples]) == ("BMES", None)
    # A test file's tags are not scored: those of training's types are taken.
    test = tmp_path / "test.txt"
    test.write_text("去 O\n京 S-LOC\n", encoding="utf-8")
    dev.write_text("在 O\n北 B-LOC\n京 E-LOC\n", encoding="utf-8")
    tasks.load(tasks.get_task("tagging"), train_file=str(train), dev_file=str(dev),
               test_file=str(test))
    dev.write_text("在 O\n京 S-ORG\n", encoding="utf-8")
    _refused(f"{dev} (sentence at line 1): tag 'S-ORG' does not occur in the training file "
             "(tags: B-LOC, E-LOC, O)", tasks.load, tasks.get_task("tagging"),
             train_file=str(train), dev_file=str(dev))
    train.write_text("我 r\n在 p\n北京 ns\n", encoding="utf-8")  # POS: tags as they are
    dev.write_text("在 p\n北京 nt\n", encoding="utf-8")
    _refused(f"{dev} (sentence at line 1): tag 'nt' does not occur", tasks.load,
             tasks.get_task("tagging"), train_file=str(train), dev_file=str(dev))
    # Bare prefixes (segmentation) are learnt as written: an M training lacks cannot be
    # predicted (its best F1 was 0).
    train.write_text("北 B\n京 E\n在 S\n", encoding="utf-8")
    dev.write_text("石 B\n家 M\n庄 E\n", encoding="utf-8")
    _refused(f"{dev} (sentence at line 1): tag 'M' does not occur", tasks.load,
             tasks.get_task("tagging"), train_file=str(train), dev_file=str(dev))
    # A tag that is no chunk tag of training's types (X- is no prefix): refused.
    train.write_text("Emma B-PER\nWood I-PER\nsaid O\n", encoding="utf-8")
    dev.write_text("Emma B-PER\nWood I-PER\nsaid O\nMr X-PER\n", encoding="utf-8")
    _refused(f"{dev} (sentence at line 1): tag 'X-PER' does not occur", tasks.load,
             tasks.get_task("tagging"), train_file=str(train), dev_file=str(dev))


def test_a_lone_surrogate_escape_in_json_is_refused_naming_its_line(tmp_path):
    """JSON may escape half of an emoji's surrogate pair (cut text); json.loads makes it a
    str that no UTF-8 encodes, which TensorFlow refused with a traceback."""
    table = tmp_path / "train.jsonl"
    table.write_text('{"text": "Fine \\ud83d\\ude00.", "label": "pos"}\n'
                     '{"text": "Cut \\ud83d.", "label": "neg"}\n', encoding="utf-8")
    _refused(f"{table} line 2 holds a lone surrogate escape (half of a pair such as "
             "\\ud83d\\ude00, an emoji): no character; fix or drop the text that holds it",
             readers.read_table, str(table))
    qa = tmp_path / "dev.json"
    qa.write_text('{"data": [{"paragraphs": [{"context": "Emma \\udc00.", "qas": []}]}]}',
                  encoding="utf-8")
    _refused(f"{qa} holds a lone surrogate escape", squad.read_squad, str(qa), training=False)


def test_byte_order_marks_are_dropped(tmp_path):
    conll = tmp_path / "train.txt"
    conll.write_text("\ufeff-DOCSTART- -X- O\n\nEmma NNP B-PER\n", encoding="utf-8")
    assert [s.words for s in readers.read_conll(str(conll))] == [["Emma"]]
    qa = tmp_path / "dev.json"
    qa.write_text("\ufeff" + json.dumps({"data": [{"paragraphs": [{"context": "Emma smiled.",
        "qas": [{"id": "q1", "question": "Who?", "answers": [
            {"text": "Emma", "answer_start": 0}]}]}]}]}), encoding="utf-8")
    assert [e.answers for e in squad.read_squad(str(qa), training=True)] == [["Emma"]]


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity", "1e400"])
def test_regression_labels_must_be_finite(tmp_path, value):
    table = tmp_path / "train.csv"
    table.write_text(f"text,label\nFine.,3.5\nOdd.,{value}\n", encoding="utf-8")
    _refused(f"{table} line 3: label '{value}' is not a finite number; regression labels "
             "must be finite", readers.read_table, str(table), kind="regression")
    jsonl = tmp_path / "train.jsonl"  # Python's json reads NaN, Infinity and 1e400 (inf)
    literal = {"nan": "NaN", "inf": "Infinity"}.get(value, value)
    jsonl.write_text('{"text": "Fine.", "label": 3.5}\n{"text": "Odd.", "label": '
                     f'{literal}}}\n', encoding="utf-8")
    _refused(f"{jsonl} line 2: label", readers.read_table, str(jsonl), kind="regression")
    stsb = tmp_path / "STS-B" / "train.tsv"
    stsb.parent.mkdir()
    stsb.write_text("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                    f"sentence2\tscore\n0\tm\tf\t2012\t0\ts\ts\tA man.\tA dog.\t{value}\n",
                    encoding="utf-8")
    _refused(f"{stsb} line 2: label '{value}' is not a finite number", readers.read_glue,
             str(stsb), tasks.get_task("stsb").glue)
    table.write_text("text,label\nFine.,3.5\nOdd.,-1e300\n", encoding="utf-8")
    assert [e.label for e in readers.read_table(str(table), kind="regression")] == [3.5, -1e300]


def test_regression_label_true_and_json_array_labels_are_refused(tmp_path):
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text('{"text": "Fine.", "label": true}\n', encoding="utf-8")
    _refused(f"{jsonl} line 1: label True is not a number", readers.read_table, str(jsonl),
             kind="regression")
    jsonl.write_text('{"text": "Fine.", "label": "pos"}\n{"text": "Both.", "label": '
                     '["pos", "neg"]}\n', encoding="utf-8")
    _refused(f'{jsonl} line 2: label ["pos", "neg"] is a JSON array; write one label per '
             "example", readers.read_table, str(jsonl))


def test_regression_labels_with_a_decimal_comma_or_underscores_are_refused(tmp_path):
    table = tmp_path / "train.csv"
    table.write_text('text,label\nFine.,"3,5"\n', encoding="utf-8")
    _refused(f"{table} line 2: label '3,5' is not a number (a decimal comma? write 3.5); "
             "regression needs numeric labels", readers.read_table, str(table),
             kind="regression")
    table.write_text('text,label\nFine.,"1,000"\nMore.,"1,000,000"\n', encoding="utf-8")
    _refused(f"{table} line 2: label '1,000' is not a number (write 1000 without the comma, "
             "or 1.000 if it is a decimal comma);", readers.read_table, str(table),
             kind="regression")
    table.write_text('text,label\nMore.,"1,000,000"\n', encoding="utf-8")
    _refused(f"{table} line 2: label '1,000,000' is not a number (write 1000000 without the "
             "comma);", readers.read_table, str(table), kind="regression")
    table.write_text("text,label\nFine.,1_5\n", encoding="utf-8")  # float("1_5") is 15.0
    _refused(f"{table} line 2: label '1_5' is not a number; regression", readers.read_table,
             str(table), kind="regression")
    stsb = tmp_path / "STS-B" / "train.tsv"
    stsb.parent.mkdir()
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    for score, message in (("3,5", "is not a number (a decimal comma? write 3.5); fix or drop "
                                   "the row"),
                           ("high", "is not a number (is this the STS-B file?); fix or drop "
                                    "the row")):
        stsb.write_text(f"{head}\tscore\n0\tm\tf\t2012\t0\ts\ts\tA man.\tA dog.\t{score}\n",
                        encoding="utf-8")
        message = _refused(f"{stsb} line 2: label '{score}' {message}", readers.read_glue,
                           str(stsb), tasks.get_task("stsb").glue)
        assert message.endswith("the row"), message
    # Scores outside STS-B's 0-5: trained as score / 5, their submissions were cut to 0-5.
    for score in ("5.2", "-0.5", "10"):
        stsb.write_text(f"{head}\tscore\n0\tm\tf\t2012\t0\ts\ts\tA man.\tA dog.\t0\n"
                        f"1\tm\tf\t2012\t0\ts\ts\tA man.\tA dog.\t{score}\n", encoding="utf-8")
        _refused(f"{stsb} line 3: label '{score}' is outside STS-B's scores, 0 to 5; fix the "
                 "row, or fine-tune other scores with --task=regression", readers.read_glue,
                 str(stsb), tasks.get_task("stsb").glue)
    stsb.write_text(f"{head}\tscore\n0\tm\tf\t2012\t0\ts\ts\tA man.\tA dog.\t5.000\n",
                    encoding="utf-8")
    assert [e.label for e in readers.read_glue(str(stsb), tasks.get_task("stsb").glue)[0]] == [
        5.0]
    assert readers.sorted_labels(["1_5", "2", "10"]) == ["10", "1_5", "2"]  # not numbers


def test_rows_of_empty_fields_are_skipped_with_a_note(tmp_path):
    """A spreadsheet's ",,," rows are not examples; they were skipped without a word (a
    test file's row then had no prediction, and the user's count was off)."""
    table = tmp_path / "test.csv"
    table.write_text("text,label\nFine.,pos\n,\n\nSlow.,neg\n , \n", encoding="utf-8")
    notes = []
    examples = readers.read_table(str(table), labelled=False, log=notes.append)
    assert [(e.text_a, e.guid) for e in examples] == [("Fine.", "2"), ("Slow.", "5")]
    assert notes == [f"note: {table}: skipped 2 rows whose fields are all empty (lines 3, 6); "
                     "they are not examples and get no prediction"]
    table.write_text("text\tlabel\nFine.\tpos\n\t\n", encoding="utf-8")
    table = table.rename(tmp_path / "train.tsv")
    notes = []
    assert len(readers.read_table(str(table), log=notes.append)) == 1
    assert notes == [f"note: {table}: skipped 1 row whose fields are all empty (line 3); "
                     "it is not an example"]
    table.write_text("text\tlabel\nFine.\tpos\n\n\n", encoding="utf-8")  # blank lines
    notes = []
    assert len(readers.read_table(str(table), log=notes.append)) == 1 and notes == []


def test_unnamed_columns_are_not_read_and_a_semicolon_csv_is_named(tmp_path):
    table = tmp_path / "train.csv"
    # A spreadsheet's export: empty trailing columns, with no name in the header.
    table.write_text("text,label,,\nFine.,pos,,\nSlow.,neg,,\n", encoding="utf-8")
    assert [(e.text_a, e.label) for e in readers.read_table(str(table))] == [
        ("Fine.", "pos"), ("Slow.", "neg")]
    for text in ("text;label\nFine.;pos\n", "text;label\nFine, really.;pos\n"):
        table.write_text(text, encoding="utf-8")
        _refused(f"{table}: its fields are separated by semicolons (header 'text;label'); save "
                 "it with commas, or with tabs as .tsv", readers.read_table, str(table))
    # A Chinese input method's full-width commas ("has no column 'text'", or "line 3 has 2
    # fields but the header has 1" where a row holds an ASCII comma)
    for text in ("label，text\n正面，很好看\n", "label，text\n正面，很好看\n负面，差,很差\n"):
        table.write_text(text, encoding="utf-8")
        _refused(f"{table}: its fields are separated by full-width commas ('，', U+FF0C; header "
                 "'label，text'); separate them with ASCII commas (,), or with tabs as .tsv",
                 readers.read_table, str(table))
    table.write_text(",\nFine.,pos\n", encoding="utf-8")
    _refused(f"{table} has no column 'text' (columns: none named); pass --text_column=NAME",
             readers.read_table, str(table))
    # A TSV named .csv, and a CSV named .tsv (was: "quote fields that contain the comma", or
    # "no column 'text' (columns: text,label)").
    table.write_text("text\tlabel\nFine, really.\tpos\n", encoding="utf-8")
    _refused(f"{table}: its fields are separated by tabs (header 'text\\tlabel'); name it "
             ".tsv", readers.read_table, str(table))
    tsv = tmp_path / "train.tsv"
    tsv.write_text("text,label\nFine.,pos\n", encoding="utf-8")
    _refused(f"{tsv}: its fields are separated by commas (header 'text,label'); name it .csv",
             readers.read_table, str(tsv))
    # ... but a one-column TSV whose column's name has a comma is read, as named.
    tsv.write_text("review, text\nGood film.\nBad film.\n", encoding="utf-8")
    assert [e.text_a for e in readers.read_table(str(tsv), text_column="review, text",
                                                 labelled=False)] == ["Good film.", "Bad film."]


def test_a_stray_quote_in_a_csv_is_refused_not_merged_into_one_row(tmp_path):
    """Read loosely, the quote opening line 3 ran to the one on line 5: three reviews became
    one example labelled 'pos'."""
    table = tmp_path / "train.csv"
    table.write_text('text,label\nFine.,pos\n"Dull,neg\nSlow,neg\n"Great" film,pos\n',
                     encoding="utf-8")
    _refused(f"{table} line 3: ',' expected after '\"' (a field that opens with a double "
             "quote runs to the next one); remove the stray quote", readers.read_table,
             str(table))
    table.write_text('text,label\nFine.,pos\n"Dull,neg\nSlow,neg\n', encoding="utf-8")
    _refused(f"{table} line 3: unexpected end of data", readers.read_table, str(table))
    # A quoted field over several lines is CSV: it is kept, and numbered from its first line.
    table.write_text('text,label\n"Two\nlines, one review",pos\nOne.,neg\n', encoding="utf-8")
    examples = readers.read_table(str(table))
    assert [(e.text_a, e.label, e.guid) for e in examples] == [
        ("Two\nlines, one review", "pos", "2"), ("One.", "neg", "4")]
    table.write_text('text,label\n"Two\nlines",pos,extra\n', encoding="utf-8")
    _refused(f"{table} the record from line 2 to 3 has 3 fields but the header has 2",
             readers.read_table, str(table))


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    table = tmp_path / "train.csv"
    table.write_text("text,label,label\nFine.,pos,neg\n", encoding="utf-8")
    _refused(f"{table}: the header names column 'label' twice; give each column its own name",
             readers.read_table, str(table))


def test_a_test_file_row_with_an_empty_label_is_unlabelled(tmp_path):
    table = tmp_path / "test.csv"
    table.write_text("text,label\nFine.,pos\nUnknown.,\nSlow., \n", encoding="utf-8")
    assert [e.label for e in readers.read_table(str(table), labelled=False)] == [
        "pos", None, None]
    _refused(f"{table} line 3 has no label in column 'label'", readers.read_table, str(table))


def test_ids_naming_several_examples_are_noted(tmp_path):
    """Predictions are matched back to a dev or test file by id: an id column naming two
    rows (or an id that is another row's line number) is noted, once per file; the training
    file's ids are not read."""
    train = tmp_path / "train.csv"
    train.write_text("id,text,label\na,Fine.,pos\na,Dull.,neg\n", encoding="utf-8")
    dev = tmp_path / "dev.csv"
    dev.write_text("id,text,label\nx,Fine.,pos\ny,Dull.,neg\nx,Good.,pos\nx,Bad.,neg\n"
                   "y,Slow.,neg\n", encoding="utf-8")
    test = tmp_path / "test.csv"
    test.write_text("id,text\n3,Fine.\n,Dull.\n", encoding="utf-8")  # line 3, id "3"
    notes = []
    tasks.load(tasks.get_task("classification"), train_file=str(train), dev_file=str(dev),
               test_file=str(test), log=notes.append)
    assert notes == [
        f"note: {dev}: 2 ids name more than one example ('x' 3 times); its predictions are "
        "written a row per example, in the file's order",
        f"note: {test}: an id names more than one example ('3' 2 times); its predictions "
        "are written a row per example, in the file's order"]


def _squad(path, qas, context="Emma smiled."):
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}),
                    encoding="utf-8")
    return str(path)


def test_squad_fields_of_the_wrong_type_or_repeated_ids(tmp_path):
    qa = tmp_path / "train.json"
    emma = {"question": "Who?", "answers": [{"text": "Emma", "answer_start": 0}]}
    _refused(f"{qa}: question id 'q1' occurs twice; give each question its own id",
             squad.read_squad, _squad(qa, [{"id": "q1", **emma}, {"id": "q1", **emma}]),
             training=True)
    # "false" was bool("false"), True: an answerable question trained as unanswerable.
    read = squad.read_squad(_squad(qa, [{"id": "q1", "is_impossible": "false", **emma},
                                        {"id": 2, "is_impossible": "True", "question": "Who?",
                                         "answers": []}]), training=True)
    assert [(e.qid, e.is_impossible, e.answers) for e in read] == [
        ("q1", False, ["Emma"]), ("2", True, [])]
    _refused(f"{qa}: question 'q1' has is_impossible 'no'; write true or false",
             squad.read_squad, _squad(qa, [{"id": "q1", "is_impossible": "no", **emma}]),
             training=True)
    _refused(f"{qa}: a paragraph has context None, not a string", squad.read_squad,
             _squad(qa, [{"id": "q1", **emma}], context=None), training=True)
    _refused(f"{qa}: a paragraph has context 7, not a string", squad.read_squad,
             _squad(qa, [{"id": "q1", **emma}], context=7), training=True)
    _refused(f"{qa}: question 'q1' has answer_start 2.7, not a character offset",
             squad.read_squad, _squad(qa, [{"id": "q1", "question": "Who?", "answers": [
                 {"text": "Emma", "answer_start": 2.7}]}]), training=True)
    read = squad.read_squad(_squad(qa, [{"id": "q1", "question": "Who?", "answers": [
        {"text": "smiled", "answer_start": "5"}]}]), training=True)
    assert [(e.start_char, e.answer_text) for e in read] == [(5, "smiled")]
    _refused(f"{qa}: question 'q1' has an empty question; write it, or drop the entry",
             squad.read_squad, _squad(qa, [{"id": "q1", **emma, "question": " "}]),
             training=False)


def test_squad_contradictions_the_official_scripts_read_otherwise_are_refused(tmp_path):
    """A dev question marked is_impossible that has answers was scored unanswerable, where
    the official evaluate-v2.0.py scores it by its answers (EM 23.1 against 15.4); in a
    training file they are not used, as in the official readers. A paragraph with an
    empty context was scored 0 on each of its questions without a word (or its training
    questions skipped as answers "not at answer_start")."""
    dev = tmp_path / "dev.json"
    emma = {"question": "Who?", "answers": [{"text": "Emma", "answer_start": 0}]}
    contradiction = [{"id": "q1", **emma}, {"id": "q2", "is_impossible": True, **emma}]
    _refused(f"{dev}: question 'q2' is_impossible but has answers, which the official "
             "evaluate-v2.0.py scores it by (as answerable); drop its answers (SQuAD 2.0 keeps "
             "them as plausible_answers) or is_impossible",
             squad.read_squad, _squad(dev, contradiction), training=False)
    read = squad.read_squad(_squad(dev, contradiction), training=True)
    assert [(e.qid, e.is_impossible, e.answers) for e in read] == [
        ("q1", False, ["Emma"]), ("q2", True, [])]
    assert len(squad.read_squad(_squad(dev, contradiction), training=False,
                                labelled=False)) == 2  # (a test file's are not read)
    _refused(f"{dev}: the paragraph of question 'q1' has an empty context; write it, or "
             "drop the paragraph", squad.read_squad,
             _squad(dev, [{"id": "q1", **emma}], context=" \n"), training=False)
    # (in a training file: skipped by encode, with a note saying why)
    empty = squad.read_squad(_squad(dev, [{"id": "q1", **emma}], context=" \n"),
                             training=True)
    assert squad.dropped_note("train.json", empty, 3) == (
        "train.json: 1 of 3 questions skipped: their answer text is not in the context or "
        "holds no word (question 'q1''s context is empty)")
    path = _squad(dev, [])  # (a paragraph without questions: nothing to answer)
    text = json.loads(open(path).read())
    text["data"][0]["paragraphs"].insert(0, {"context": "", "qas": []})
    text["data"][0]["paragraphs"][1]["qas"] = [{"id": "q1", **emma}]
    dev.write_text(json.dumps(text), encoding="utf-8")
    assert [e.qid for e in squad.read_squad(str(dev), training=False)] == ["q1"]


def test_squad_files_of_the_wrong_version_for_the_task(tmp_path):
    """SQuAD 2.0's training file given to --task=squad_v1 trained the answerability head
    without a word; a v1.1 training file with a v2.0 dev file answers every question."""
    from electra_tf.finetune import tasks
    emma = {"question": "Who?", "answers": [{"text": "Emma", "answer_start": 0}]}
    v1 = _squad(tmp_path / "v1.json", [{"id": "a", **emma}, {"id": "b", **emma}])
    v2 = _squad(tmp_path / "v2.json", [{"id": "a", **emma}, {"id": "b", "question": "Why?",
                                                              "answers": [],
                                                              "is_impossible": True}])
    _refused(f"--task=squad_v1 is SQuAD 1.1, whose questions all have answers, but {v2} marks "
             "1 is_impossible (SQuAD 2.0): pass --task=squad_v2 (or --task=qa)",
             tasks.load, tasks.get_task("squad_v1"), train_file=v2, dev_file=v1)
    for name in ("qa", "squad_v1", "squad_v2"):
        lines = []
        tasks.load(tasks.get_task(name), train_file=v1, dev_file=v2, log=lines.append)
        assert lines == [f"note: {v2} has 1 unanswerable questions (is_impossible) but {v1} "
                         "none: the model does not learn to leave a question unanswered, and "
                         "those score 0"]


def test_a_squad_v1_dev_question_without_answers_is_refused(tmp_path):
    """SQuAD 1.1 scoring has no unanswerable questions: a dev question with "answers": []
    (and no is_impossible) turned the whole set's scores into SQuAD 2.0's, scoring it 0."""
    emma = {"question": "Who?", "answers": [{"text": "Emma", "answer_start": 0}]}
    v1 = _squad(tmp_path / "v1.json", [{"id": "a", **emma}, {"id": "b", **emma}])
    dev = _squad(tmp_path / "dev.json", [{"id": "a", **emma},
                                         {"id": "b", "question": "Why?", "answers": []},
                                         {"id": "c", "question": "How?", "answers": []}])
    _refused(f"{dev}: question 'b' (and 1 more) has no answers; --task=squad_v1 (SQuAD 1.1) "
             "scores each question against its answers: give it one, or pass "
             "--task=squad_v2 if some questions are unanswerable",
             tasks.load, tasks.get_task("squad_v1"), train_file=v1, dev_file=dev)
    lines = []  # SQuAD 2.0 scores such a question as the official script does: unanswerable
    tasks.load(tasks.get_task("squad_v2"), train_file=v1, dev_file=dev, log=lines.append)
    assert lines == []


def test_column_flags_a_task_does_not_read_are_refused(tmp_path):
    """--text_column with --task=tagging (or any column with a QA or GLUE task, which read
    their own) was ignored without a word."""
    conll = tmp_path / "train.txt"
    conll.write_text("Emma B-PER\nwalks O\n", encoding="utf-8")
    _refused("--text_column is not read by --task=tagging, which reads a CoNLL file (a word "
             "and its tags per line; --label_column picks the tag column's index); drop it",
             tasks.load, tasks.get_task("tagging"), train_file=str(conll),
             dev_file=str(conll), text_column="word", label_column="1")
    _refused("--text_column and --label_column are not read by --task=squad_v2, which reads "
             "SQuAD JSON (its own keys); drop them", tasks.load, tasks.get_task("squad_v2"),
             data_dir=str(tmp_path), text_column="context", label_column="answers")
    _refused("--text_b_column is not read by --task=mrpc, which reads its release's own "
             "columns; drop it", tasks.load, tasks.get_task("mrpc"), data_dir=str(tmp_path),
             text_b_column="#2 String")
    assert len(tasks.load(tasks.get_task("tagging"), train_file=str(conll),
                          dev_file=str(conll), label_column="1").train.examples) == 1


def test_a_tagging_file_of_one_tag_is_refused_and_stray_bare_tags_are_noted(tmp_path):
    """One tag everywhere (a --label_column at the POS column of a one-tag file) trained
    and scored f1 1.0; a chunk file with a few tags lacking their prefix is read as
    token-level tags: said."""
    from electra_tf.finetune import runner
    conll = tmp_path / "train.txt"
    conll.write_text("Emma NNP\nWoodhouse NNP\n\nHarriet NNP\n", encoding="utf-8")
    _refused(f"{conll} has a single tag ('NNP') in its tag column; tagging needs at least two "
             "(or pick the right --label_column)", tasks.load, tasks.get_task("tagging"),
             train_file=str(conll), dev_file=str(conll))
    tags = [["B-PER", "I-PER", "O"]] * 10 + [["PER", "O"]]
    notes = []
    runner._note_unprefixed("train.txt", tags, notes.append)
    assert notes == ["note: train.txt: 1 of its 21 tags other than O have no chunk prefix (B-, "
                     "I-, E-, S-; e.g. 'PER'), so every tag is learnt and scored as a "
                     "one-token chunk; give those tags a prefix to learn chunks"]
    notes.clear()
    runner._note_unprefixed("pos.txt", [["NN", "VB", "O"], ["B-X"]], notes.append)
    assert notes == []  # token-level tags (POS) with one stray chunk tag: as they are


def test_squad_files_of_another_layout_are_refused_naming_the_part(tmp_path):
    qa = tmp_path / "train.json"
    layout = ('the layout is {"data": [{"paragraphs": [{"context": ..., "qas": [{"id", '
              '"question", "answers": [{"text", "answer_start"}]}]}]}]}')
    for data, part in (
            ([{"context": "x"}], "the file is a JSON array, not an object"),
            ({"data": {"paragraphs": []}}, "the 'data' of the file is a JSON object, not an "
                                           "array"),
            ({"data": [{"paragraphs": ["Emma smiled."]}]}, "a paragraph is a JSON string, not "
                                                           "an object"),
            ({"data": [{"paragraphs": [{"context": "x"}]}]}, "a paragraph has no 'qas'"),
            ({"data": [{"paragraphs": [{"context": "x", "qas": [
                {"id": "q1", "question": "Who?", "answers": {"text": "x"}}]}]}]},
             "the 'answers' of question 'q1' is a JSON object, not an array"),
            ({"data": [{"paragraphs": [{"context": "x", "qas": [
                {"id": "q1", "question": "Who?", "answers": ["x"]}]}]}]},
             "an answer of question 'q1' is a JSON string, not an object"),
            ({"data": [{"paragraphs": [{"context": "x", "qas": [
                {"id": "q1", "question": "Who?", "answers": [{"text": "x"}]}]}]}]},
             "an answer of question 'q1' has no 'answer_start'")):
        qa.write_text(json.dumps(data), encoding="utf-8")
        _refused(f"{qa} is not in the SQuAD format: {part}; {layout}", squad.read_squad,
                 str(qa), training=True)
    _refused(f"{qa}: question 'q1' has no answers; give it one, or is_impossible: true",
             squad.read_squad, _squad(qa, [{"id": "q1", "question": "Who?", "answers": []}]),
             training=True)


def test_conll_tab_columns_keep_words_with_spaces_and_columns_must_agree(tmp_path):
    conll = tmp_path / "train.txt"
    conll.write_text("New York\tNNP\tB-LOC\nsleeps\tVBZ\tO\n\nEmma NNP B-PER\n",
                     encoding="utf-8")
    sentences = readers.read_conll(str(conll))
    assert [(s.words, s.tags) for s in sentences] == [
        (["New York", "sleeps"], ["B-LOC", "O"]), (["Emma"], ["B-PER"])]
    # A test file's blanked tag column: "New York<TAB>" is the word, untagged (its trailing
    # tab stripped, it was split at the space into word 'New' and tag 'York').
    test = tmp_path / "test.txt"
    test.write_text("New York\t\nsleeps\t\n\t\nEmma\t\n", encoding="utf-8")
    assert [(s.words, s.tags) for s in readers.read_conll(str(test), labelled=False)] == [
        (["New York", "sleeps"], None), (["Emma"], None)]  # "\t" alone: a blank line
    # In a labelled file a stray tab at a space-separated line's end changes nothing.
    conll.write_text("EU B-ORG\t\nrejects O\n\t\nPeter B-PER\n", encoding="utf-8")
    assert [(s.words, s.tags) for s in readers.read_conll(str(conll))] == [
        (["EU", "rejects"], ["B-ORG", "O"]), (["Peter"], ["B-PER"])]
    # A Chinese NER file's ideographic space is a word (tagged O), not a blank before the tag.
    for sep in ("\t", " "):  # tabs or spaces between the columns; \u3000 alone: a blank
        conll.write_text(f"北{sep}B-LOC\n京{sep}I-LOC\n\u3000{sep}O\n好{sep}O\n\u3000\n"
                         f"人{sep}O\n", encoding="utf-8")
        assert [(s.words, s.tags) for s in readers.read_conll(str(conll))] == [
            (["北", "京", "\u3000", "好"], ["B-LOC", "I-LOC", "O", "O"]), (["人"], ["O"])]
    conll.write_text("Emma NNP B-NP B-PER\nsmiled VBD B-VP O\n\nMr B-PER\n", encoding="utf-8")
    _refused(f"{conll} line 4 has 2 columns but line 1 has 4; give every line the same "
             "columns", readers.read_conll, str(conll), tag_column=1)


def test_tagging_refuses_json_and_csv_files_and_looks_for_conll_text(tmp_path):
    """A JSONL file of {"word", "tag"} records given to tagging was read as CoNLL words
    ('{"word":' tagged '"O"}'), trained and scored; in --data_dir, train.jsonl was picked."""
    for name in ("train.jsonl", "train.json", "train.csv"):
        path = tmp_path / name
        path.write_text('{"word": "Emma", "tag": "B-PER"}\n{"word": "smiled", "tag": "O"}\n',
                        encoding="utf-8")
        kind = name.rsplit(".", 1)[1].upper()
        assert _refused(f"{path} is a {kind} file; tagging reads CoNLL text: a word and its tag "
                        "per line (tab- or space-separated), a blank line between sentences; "
                        "write it so (e.g. as train.txt)", tasks.load, tasks.get_task("tagging"),
                        train_file=str(path), dev_file=str(path)).startswith(str(path))
    (tmp_path / "dev.jsonl").write_text((tmp_path / "train.jsonl").read_text())
    _refused(f"{tmp_path} has no train file (train.tsv or train.txt or train.conll) "
             "(train.jsonl is not read: tagging reads CoNLL text, a word and its tag per line); "
             "name yours so, or pass --train_file and --dev_file",
             tasks.load, tasks.get_task("tagging"), data_dir=str(tmp_path))
    (tmp_path / "train.conll").write_text("Emma B-PER\nsmiled O\n\nAnne B-PER\nwept O\n")
    (tmp_path / "dev.txt").write_text("Anne B-PER\nsmiled O\n")
    loaded = tasks.load(tasks.get_task("tagging"), data_dir=str(tmp_path))
    assert loaded.train.path == str(tmp_path / "train.conll")
    assert [s.words for s in loaded.train.examples] == [["Emma", "smiled"], ["Anne", "wept"]]
