"""Corpus readers: formats, compression, document boundaries, byte-range pieces, bad text."""

import bz2
import gzip
import json
import lzma
import random
import re

import pytest
import tensorflow as tf

from electra_tf.data import corpus
from electra_tf.errors import UserInputError

TEXT = "First sentence.\nSecond one.\n\n\nDoc two line.\n\nDoc three.\nMore.\nEnd.\n"
DOCS = [["First sentence.", "Second one."], ["Doc two line."], ["Doc three.", "More.", "End."]]


def _read(path, **kwargs):
    stats = corpus.ReadStats()
    docs = [d for p in corpus.plan_pieces([str(path)]) for d in
            corpus.read_documents(p, stats=stats, **kwargs)]
    return docs, stats


@pytest.mark.parametrize("suffix,opener", [(".txt", open), (".gz", gzip.open),
                                           (".bz2", bz2.open), (".xz", lzma.open)])
def test_formats_and_compression_give_the_same_documents(tmp_path, suffix, opener):
    path = tmp_path / f"c{suffix}"
    with opener(path, "wb") as f:
        f.write(TEXT.encode())
    docs, stats = _read(path)
    assert docs == DOCS
    assert stats.text_bytes == len(TEXT.encode()) - TEXT.count("\n")
    assert stats.input_bytes == path.stat().st_size


def test_one_document_per_line(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(TEXT)
    docs, _ = _read(path, one_document_per_line=True)
    assert docs == [[line] for doc in DOCS for line in doc]


def test_jsonl_documents_bad_records_and_missing_field(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = [json.dumps({"text": "A one.\nA two.", "id": 1}), "{not json",
             json.dumps({"text": "B only."}), json.dumps({"other": 3}), json.dumps({"text": 5}),
             # Half an emoji: json.loads gives a lone surrogate, which no UTF-8 encodes.
             '{"text": "Cut \\ud83d here, whole \\ud83d\\ude00 there."}']
    path.write_text("\n".join(lines) + "\n")
    docs, stats = _read(path, input_format="jsonl")
    assert docs == [["A one.", "A two."], ["B only."], ["Cut \ufffd here, whole \U0001f600 there."]]
    assert stats.bad_json_lines == 3 and stats.invalid_utf8_lines == 1
    tf.constant(docs[-1])  # what failed on the surrogate
    with pytest.raises(UserInputError, match=r"record 1 has no field 'body' \(fields: id, text\)"
                                             r"; pass --text_field=NAME"):
        _read(path, input_format="jsonl", text_field="body")
    # A first line that is not JSON at all: plain text read as JSONL.
    plain = tmp_path / "plain.txt"
    plain.write_text("\nJust a sentence.\n{\"text\": \"a record\"}\n")
    with pytest.raises(UserInputError) as info:
        _read(plain, input_format="jsonl")
    assert str(info.value) == (f"{plain}: line 2 is not a JSON object, as "
                               "--input_format=jsonl needs; for plain text pass "
                               "--input_format=text")
    with pytest.raises(UserInputError, match="line 2 is not a JSON object"):
        corpus.check_jsonl(str(plain), "text")
    corpus.check_jsonl(str(path), "text")


def test_jsonl_read_as_text_is_caught_by_its_name_and_first_line(tmp_path):
    records = tmp_path / "c.jsonl.gz"
    with gzip.open(records, "wt", encoding="utf-8") as f:
        f.write("\n" + json.dumps({"body": "A record."}) + "\n")
    with pytest.raises(UserInputError) as info:
        corpus.check_text(str(records))
    assert str(info.value) == (f"{records} is JSONL (its first line is a JSON object) but is "
                               "read as plain text; pass --input_format=jsonl (and "
                               "--text_field=NAME if its text is not in 'text')")
    # An indented JSON document (make_corpus.py's manifest.json in the folder given) was
    # read as text: its braces and field names became examples.
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"sources": {"gcide": 1}}, indent=2))
    with pytest.raises(UserInputError) as info:
        corpus.check_text(str(manifest))
    assert str(info.value) == (f"{manifest} is a JSON document (it begins with '{{') but is "
                               "read as plain text, which would train on its braces and field "
                               "names; leave it out of --input (e.g. 'FOLDER/*.txt.gz' rather "
                               "than the folder)")
    # Text that only looks like JSON, or JSON that is not JSONL's objects, is text.
    for name, first in (("notes.txt", '{"a": 1}'), ("list.json", "[1, 2]"),
                        ("prose.jsonl", "{not json")):
        (tmp_path / name).write_text(first + "\n")
        corpus.check_text(str(tmp_path / name))


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"good line\nbad \xff\xfe line\n\nok\n")
    docs, stats = _read(path)
    assert docs == [["good line", "bad \ufffd\ufffd line"], ["ok"]]
    assert stats.invalid_utf8_lines == 1


def test_carriage_returns_that_end_no_line_are_counted(tmp_path):
    """A line ends at \n (or \r\n) only, as in the official builder; a lone \r (old Mac
    line ends) is counted, for the builder's note."""
    path = tmp_path / "c.txt"
    path.write_bytes(b"one\rtwo\r\nthree\r\n\r\n\rfour\n")
    docs, stats = _read(path)
    assert docs == [["one\rtwo", "three"], ["\rfour"]]
    assert stats.cr_lines == 2


def test_a_file_in_another_encoding_is_refused_before_it_is_read(tmp_path):
    """Real Chinese reviews saved as GBK (every line with a character fails UTF-8), also
    gzipped and as JSONL, Latin-1 French, and UTF-16 (Notepad's "Unicode"): one line naming
    the file and the fix, before the build or vocab learning reads it. A UTF-8 file with a
    bad line among good ones is read, the line replaced and counted."""
    from conftest import chinese_reviews
    reviews = chinese_reviews()[:40]
    (tmp_path / "zh.txt").write_bytes("\n".join(reviews).encode("gbk", "replace") + b"\n")
    with gzip.open(tmp_path / "zh.txt.gz", "wb") as f:
        f.write("\n\n".join(reviews).encode("gbk", "replace"))
    (tmp_path / "zh.jsonl").write_bytes("\n".join(
        json.dumps({"text": r}, ensure_ascii=False) for r in reviews).encode("gbk", "replace"))
    for name, check in (("zh.txt", corpus.check_text), ("zh.txt.gz", corpus.check_text),
                        ("zh.jsonl", lambda p: corpus.check_jsonl(p, "text"))):
        with pytest.raises(UserInputError) as info:
            check(str(tmp_path / name))
        assert str(info.value) == (
            f"input {tmp_path / name} is not UTF-8 text (40 of its first 40 non-blank lines "
            f"are not, the first at byte 0x{reviews[0].encode('gbk')[0]:02x}); re-save it as "
            "UTF-8 with its encoding named, e.g. iconv -f gb18030 -t utf-8 (simplified "
            "Chinese), -f big5 (traditional) or -f latin1")
    (tmp_path / "fr.txt").write_bytes("Le café est très bon.\nÀ demain.\nMerci.\n"
                                      .encode("latin-1"))
    with pytest.raises(UserInputError, match=r"fr.txt is not UTF-8 text \(2 of its first 3 "):
        corpus.check_text(str(tmp_path / "fr.txt"))
    (tmp_path / "u16.txt").write_bytes("A sentence.\n".encode("utf-16"))
    with pytest.raises(UserInputError) as info:
        corpus.check_text(str(tmp_path / "u16.txt"))
    assert str(info.value) == (f"input {tmp_path}/u16.txt is UTF-16 text (it starts with a "
                               "UTF-16 byte-order mark), not UTF-8; re-save it as UTF-8 (iconv "
                               "-f utf-16 -t utf-8)")
    # A binary file (a folder is read whole: TFRecords, archives, images left in it) or
    # UTF-16 without a byte-order mark: refused as not text (the iconv hint for another
    # encoding was wrong; a TFRecord of text strings, 0.5% NULs, was read as text).
    import bz2
    import io
    import zipfile

    import tensorflow as tf
    with tf.io.TFRecordWriter(str(tmp_path / "text.tfrecord")) as writer:
        for line in reviews:
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "text": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[line.encode()]))})).SerializeToString())
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.txt", "\n".join(reviews))
    (tmp_path / "corpus.zip").write_bytes(archive.getvalue())
    (tmp_path / "corpus.tgz").write_bytes(gzip.compress(b"A sentence.\n"))  # not named .gz
    (tmp_path / "corpus.bz").write_bytes(bz2.compress(b"A sentence.\n"))
    (tmp_path / "u16le.txt").write_bytes("A sentence.\n".encode("utf-16-le"))
    (tmp_path / "figure.pdf").write_bytes(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n")
    nul = ("{} NUL bytes in its first {:,}: binary data such as TFRecords, or UTF-16 text "
           "without a byte-order mark; a text file's NULs go with tr -d '\\000'")
    nuls = lambda name: nul.format(*(lambda d: (d.count(0), len(d)))(  # noqa: E731
        (tmp_path / name).read_bytes()[:8000]))
    for name, kind in (("text.tfrecord", nuls("text.tfrecord")),
                       ("corpus.zip", "a zip archive"),
                       ("corpus.tgz", "gzip data: name it .gz"),
                       ("corpus.bz", "bzip2 data: name it .bz2"), ("u16le.txt", nuls("u16le.txt")),
                       ("figure.pdf", "a PDF")):
        with pytest.raises(UserInputError) as info:
            corpus.check_text(str(tmp_path / name))
        assert str(info.value) == (f"input {tmp_path / name} is not text ({kind}); take it out "
                                   "of --input (a folder is read whole, every file in it but "
                                   "hidden ones)")
    # Text that only looks so: a stray NUL (which the tokenizer drops), a first line that
    # begins as a PDF or GIF header would.
    (tmp_path / "stray.txt").write_bytes(b"A sentence.\x00\nAnother.\n")
    (tmp_path / "about.txt").write_bytes(b"%PDF-1.7 is ISO 32000-2.\nGIF89a came in 1989.\n")
    (tmp_path / "gif.txt").write_bytes("GIF89a, in 1989 \u2014 so.\n".encode())
    for name in ("stray.txt", "about.txt", "gif.txt"):
        corpus.check_text(str(tmp_path / name))
    (tmp_path / "mostly.txt").write_bytes(b"good line\nbad \xff line\nok\n")
    corpus.check_text(str(tmp_path / "mostly.txt"))
    # A first line longer than the sample, cut inside a character, is UTF-8 all the same.
    long = ("中" * 100_000).encode()
    assert len(long) > 1 << 18 and (1 << 18) % 3
    (tmp_path / "novel.txt").write_bytes(long + b"\n")
    corpus.check_text(str(tmp_path / "novel.txt"))
    # A corrupt .xz is the reader's one line, not lzma's traceback.
    (tmp_path / "bad.txt.xz").write_bytes(lzma.compress(b"A sentence.\n" * 100)[:20] + b"junk")
    corpus.check_text(str(tmp_path / "bad.txt.xz"))
    with pytest.raises(UserInputError, match=r"bad.txt.xz is truncated or corrupt"):
        _read(tmp_path / "bad.txt.xz")


@pytest.mark.parametrize("one_document_per_line", [False, True])
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_byte_range_pieces_never_split_or_repeat_documents(tmp_path, one_document_per_line,
                                                           newline):
    """... in either line ending: a CRLF file's blank lines (\\r\\n\\r\\n) end documents
    too, so its pieces split (it was read whole by the first piece, the others empty)."""
    rng = random.Random(0)
    docs = [[f"d{d} s{s} " + "x" * rng.randint(0, 30) for s in range(rng.randint(1, 5))]
            for d in range(400)]
    text = ("\n\n".join("\n".join(d) for d in docs) + "\n").replace("\n", newline)
    path = tmp_path / "big.txt"
    path.write_bytes(text.encode())
    whole = list(corpus.read_documents(corpus.Piece(str(path)),
                                       one_document_per_line=one_document_per_line))
    for piece_bytes in (7, 100, 1000, 4096):
        pieces = corpus.plan_pieces([str(path)], piece_bytes)
        assert len(pieces) == -(-len(text) // piece_bytes)
        per_piece = [list(corpus.read_documents(p, one_document_per_line=one_document_per_line))
                     for p in pieces]
        assert [d for piece in per_piece for d in piece] == whole
        if piece_bytes >= 1000:  # a piece this long holds a document's end
            assert all(per_piece[:-1]), [len(p) for p in per_piece]
    assert whole == (docs if not one_document_per_line else [[s] for d in docs for s in d])


def test_expand_inputs(tmp_path, monkeypatch):
    (tmp_path / "a" / ".git" / "objects").mkdir(parents=True)  # hidden folders are skipped
    for name in ("a/1.txt", "a/2.txt.gz", "b.txt", "a/.hidden", "a/.git/objects/x.txt"):
        (tmp_path / name).write_text("x")
    assert corpus.expand_inputs(f"{tmp_path}/a,{tmp_path}/b.*") == [
        f"{tmp_path}/a/1.txt", f"{tmp_path}/a/2.txt.gz", f"{tmp_path}/b.txt"]
    with pytest.raises(UserInputError, match=r"input .*/nope\*.txt matches no file; check the "):
        corpus.expand_inputs(f"{tmp_path}/nope*.txt")
    # A shell's brace list, which the comma split cut: said (its first piece "matched no file").
    with pytest.raises(UserInputError, match=re.escape(
            f"input {tmp_path}/{{b matches no file; a brace list ({{a,b}}) is not a glob here: "
            "write its paths out, comma-separated (dir/a,dir/b), or use a wildcard")):
        corpus.expand_inputs(f"{tmp_path}/{{b,a/1}}.txt")
    # A path that exists is read as named, though its name holds a wildcard or a comma.
    for name in ("run[1]/x.txt", "a*b/y.txt", "aZb/z.txt", "co,mma/w.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x")
    assert corpus.expand_inputs(f"{tmp_path}/run[1]/x.txt") == [f"{tmp_path}/run[1]/x.txt"]
    assert corpus.expand_inputs(f"{tmp_path}/a*b") == [f"{tmp_path}/a*b/y.txt"]  # not aZb
    assert corpus.expand_inputs(f"{tmp_path}/co,mma/w.txt") == [f"{tmp_path}/co,mma/w.txt"]
    # ... beside other items of the list, the longest name that exists at each place.
    assert corpus.split_patterns(f"{tmp_path}/b.txt,{tmp_path}/co,mma,{tmp_path}/a*b,,x") == [
        f"{tmp_path}/b.txt", f"{tmp_path}/co,mma", f"{tmp_path}/a*b", "x"]
    assert corpus.expand_inputs(f"{tmp_path}/co,mma/w.txt,{tmp_path}/b.txt") == [
        f"{tmp_path}/b.txt", f"{tmp_path}/co,mma/w.txt"]
    # ... also where the name's first part exists alone (folder a/ beside a,2024.txt) or
    # holds a wildcard (run[1],v2.txt).
    for name in ("a,2024.txt", "run[1],v2.txt"):
        (tmp_path / name).write_text("x")
        assert corpus.split_patterns(f"{tmp_path}/{name},{tmp_path}/b.txt") == [
            f"{tmp_path}/{name}", f"{tmp_path}/b.txt"]
    assert corpus.split_patterns(f"{tmp_path}/a,{tmp_path}/b.txt") == [
        f"{tmp_path}/a", f"{tmp_path}/b.txt"]
    assert corpus.expand_inputs(f"{tmp_path}/a[*]b/*") == [f"{tmp_path}/a*b/y.txt"]  # a glob
    # An item quoted as in CSV (as absl's list flags read them) is one item, quote marks
    # doubled inside; the unquoted items beside it are read as above.
    assert corpus.split_patterns(
        f'"{tmp_path}/x, y.txt", {tmp_path}/a,2024.txt,"{tmp_path}/q""t",{tmp_path}/b.txt') == [
        f"{tmp_path}/x, y.txt", f"{tmp_path}/a,2024.txt", f'{tmp_path}/q"t', f"{tmp_path}/b.txt"]
    # A name with quote marks that exists is read as named, its commas too.
    monkeypatch.chdir(tmp_path)
    for name in ('"hi"', '"a,b"'):
        (tmp_path / name).write_text("x")
        assert corpus.split_patterns(f'{name},b.txt') == [name, "b.txt"]
    assert corpus.split_patterns(f'{tmp_path}/a"b,c') == [f'{tmp_path}/a"b', "c"]


def test_pieces_of_a_file_without_blank_lines_start_at_line_ends(tmp_path, monkeypatch):
    """One sentence per line and no blank line between documents (a common corpus layout):
    with no blank line within _BOUNDARY_WINDOW (4 MB; 1,000 bytes here) of its nominal
    start, a piece starts after the end of a line (it was the file's end: the first piece
    read it all, as one document, and the others nothing), and every line is read once."""
    monkeypatch.setattr(corpus, "_BOUNDARY_WINDOW", 1000)
    lines = [f"line {i} " + "y" * (i % 37) for i in range(3000)]
    path = tmp_path / "flat.txt"
    path.write_text("\n".join(lines) + "\n")
    pieces = corpus.plan_pieces([str(path)], 4096)
    per_piece = [list(corpus.read_documents(p)) for p in pieces]
    assert all(len(documents) == 1 for documents in per_piece)  # a document per piece
    assert [line for documents in per_piece for d in documents for line in d] == lines
    # A file smaller than the window (a 70 MB file, 4 MB pieces: the last 4 MB): the end of
    # the file was taken for the boundary, so the first piece read everything and the
    # others nothing (one busy worker, empty shards "of blank files").
    monkeypatch.setattr(corpus, "_BOUNDARY_WINDOW", 1 << 20)
    pieces = corpus.plan_pieces([str(path)], 4096)
    per_piece = [list(corpus.read_documents(p)) for p in pieces]
    assert len(pieces) > 10 and all(len(documents) == 1 for documents in per_piece)
    assert [line for documents in per_piece for d in documents for line in d] == lines


def test_document_parts_hold_at_most_max_lines_and_rebuild_the_documents(tmp_path):
    path = tmp_path / "docs.txt"
    docs = [[f"d{d} s{s}" for s in range(n)] for d, n in enumerate((1, 5, 4, 9, 2))]
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    parts = list(corpus.read_document_parts(corpus.Piece(str(path)), max_lines=4))
    assert all(len(part) <= 4 for part, _ in parts)
    rebuilt, document = [], []
    for part, last in parts:
        document += part
        if last:
            rebuilt.append(document)
            document = []
    assert rebuilt == docs and not document
    assert ([], True) in parts  # the 4-line document: its end comes after its full part


@pytest.mark.parametrize("read_chunk", [256, 1 << 20], ids=["line_over_chunks", "in_a_chunk"])
def test_a_line_longer_than_max_line_bytes_is_cut_on_a_character(tmp_path, monkeypatch,
                                                                  read_chunk):
    """A line is one sentence: past MAX_LINE_BYTES (1 MB) it is not held (a file of one 200 MB
    line took 10 GB); what is kept ends on a whole UTF-8 character."""
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 1001)
    monkeypatch.setattr(corpus, "_READ_CHUNK", read_chunk)
    path = tmp_path / "long.txt"
    path.write_bytes("short one\n".encode() + ("é" * 2500).encode() + b"\nafter\n")
    stats = corpus.ReadStats()
    documents = list(corpus.read_documents(corpus.Piece(str(path)), stats=stats))
    assert documents == [["short one", "é" * 500, "after"]]
    assert (stats.long_lines, stats.invalid_utf8_lines) == (1, 0)
    assert stats.input_bytes == path.stat().st_size


def test_jsonl_records_longer_than_max_line_bytes_are_read_whole(tmp_path, monkeypatch):
    """A JSON line is a record, not a sentence: one of several MB (a book) is checked and read
    whole, and a text file's first line is checked whole for being one (cut, it was refused
    as 'not a JSON object')."""
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 100)
    book = " ".join(f"word{i}" for i in range(200))
    path = tmp_path / "books.jsonl"
    path.write_text(json.dumps({"text": book}) + "\n")
    corpus.check_jsonl(str(path), "text")
    stats = corpus.ReadStats()
    assert list(corpus.read_documents(corpus.Piece(str(path)), corpus.JSONL,
                                      stats=stats)) == [[book]]
    assert stats.long_lines == 0
    with pytest.raises(UserInputError, match=r"books.jsonl"):
        corpus.check_text(str(path))
