"""Reading raw text corpora: globs of .txt/.gz/.bz2/.xz files and JSONL, as documents.

A document is a list of lines ("sentences" in the official builder's terms). In text
files a blank line separates documents, or (`one_document_per_line`) every line is a
document. In JSONL every record is a document and its text field is split on newlines.

Large uncompressed files are cut into byte-range *pieces* so that several workers can read
one file. A piece starts at a document boundary: for a nominal offset x the boundary is the
first offset p >= x right after a blank line (or after a newline, when a line is a document).
Every piece computes boundaries the same way, so documents are never split or duplicated.
Compressed files cannot be cut and are one piece each.
"""

import bz2
import codecs
import dataclasses
import gzip
import json
import lzma
import os
import re
from collections.abc import Iterator

import tensorflow as tf

from electra_tf.choices import INPUT_FORMATS, JSONL, PIECE_BYTES, TEXT
from electra_tf.errors import UserInputError

# What json.loads makes of a lone surrogate escape ("\ud83d", half an emoji cut in two):
# a str no UTF-8 encodes, so TensorFlow refuses it.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_COMPRESSED = {".gz": lambda f: gzip.GzipFile(fileobj=f, mode="rb"), ".bz2": bz2.BZ2File,
               ".xz": lzma.LZMAFile}
# What gzip, bz2 and lzma raise for a truncated or corrupt file.
_CORRUPT = (EOFError, OSError, ValueError, lzma.LZMAError)
_SEARCH_CHUNK = 1 << 16
_READ_CHUNK = 1 << 20
# A piece of a text file starts after a blank line (a document's end) found within this
# many bytes of its nominal start, else after a line's end: a file of one sentence per line
# without blank lines is still read in parallel, as documents cut at its pieces' starts.
_BOUNDARY_WINDOW = 4 << 20
# A text line is one sentence, of which an example holds at most max_seq_length tokens:
# longer lines are read up to this many bytes (whole characters) and the rest is skipped
# unread into memory (a file of one 200 MB line took 10 GB).
MAX_LINE_BYTES = 1 << 20
# How to re-save a file in another encoding as UTF-8 (the builder's and fine-tuning's hint).
ICONV_HINT = ("iconv -f gb18030 -t utf-8 (simplified Chinese), -f big5 (traditional) or "
              "-f latin1")


@dataclasses.dataclass(frozen=True)
class Piece:
    """A byte range [start, end) of one input file; end=None reads to the end."""
    path: str
    start: int = 0
    end: int | None = None


@dataclasses.dataclass
class ReadStats:
    """What reading saw: input (on-disk) bytes consumed, text bytes, replaced lines, bad records."""
    input_bytes: int = 0
    text_bytes: int = 0
    invalid_utf8_lines: int = 0
    bad_json_lines: int = 0
    long_lines: int = 0  # text lines cut at MAX_LINE_BYTES
    cr_lines: int = 0  # lines holding a "\r" that ends no line (old Mac line ends)

    def add(self, other: "ReadStats"):
        self.input_bytes += other.input_bytes
        self.text_bytes += other.text_bytes
        self.invalid_utf8_lines += other.invalid_utf8_lines
        self.bad_json_lines += other.bad_json_lines
        self.long_lines += other.long_lines
        self.cr_lines += other.cr_lines


def _is_remote(path: str) -> bool:
    return "://" in path


def _open_raw(path: str):
    return tf.io.gfile.GFile(path, "rb") if _is_remote(path) else open(path, "rb")


def _compression(path: str):
    return _COMPRESSED.get(os.path.splitext(path)[1].lower())


def split_patterns(patterns: str) -> list[str]:
    """A flag's comma-separated paths or globs; a path that exists is one item though its
    name has commas ("notes,2024.txt", "Smith, John.txt", "draft[1],v2.txt"), the longest
    such at each place of the list. An item may be quoted as in CSV ('"Smith, John.txt",b.txt',
    which absl's list flags read). (Local paths; a gs:// one, whose check is a request, only
    when it is the whole value. Pieces are joined only where their folder holds a name that
    starts with the piece's and a comma, and only as long as a path can be, so a list of
    thousands stays quick.)"""
    if tf.io.gfile.exists(patterns.strip()):
        return [patterns.strip()]
    parts = _QUOTED_ITEM.split(patterns)
    if len(parts) == 1:
        return _split_unquoted(patterns)
    unquoted = _split_unquoted(patterns)
    if any('"' in item and os.path.exists(item.strip()) for item in unquoted):
        return unquoted  # (a name with quote marks that exists: as named)
    items = []
    for k, part in enumerate(parts):
        if k % 2:  # a quoted item, its "" a quote mark
            items.append(part.replace('""', '"'))
        else:
            items += _split_unquoted(part)
    return [item for item in items if item.strip()]


# A CSV-quoted item: at the start or after a comma, up to the end or a comma.
_QUOTED_ITEM = re.compile(r'(?:^|,)\s*"((?:[^"]|"")*)"\s*(?=,|$)')


def _split_unquoted(patterns: str) -> list[str]:
    pieces, items, i = patterns.split(","), [], 0
    with_commas = {}  # folder -> its entries whose names hold a comma

    def may_join(piece: str) -> bool:
        folder, name = os.path.split(piece.strip())
        if "://" in piece or not name:
            return False
        if folder not in with_commas:
            try:
                with_commas[folder] = [e for e in os.listdir(folder or ".") if "," in e]
            except OSError:
                with_commas[folder] = []
        return any(e.startswith(name + ",") for e in with_commas[folder])

    while i < len(pieces):
        piece, j = pieces[i], i + 1
        if may_join(piece):
            joined, k = piece, i + 1
            while k < len(pieces) and len(joined) < _PATH_MAX:
                joined += "," + pieces[k]
                k += 1
                if os.path.exists(joined.strip()):
                    piece, j = joined.strip(), k
        if piece.strip():
            items.append(piece)
        i = j
    return items


_PATH_MAX = 4096  # (Linux's)


# A shell's brace list ("dir/{a,b}.txt"), which tf.io.gfile.glob does not expand and the
# comma split cuts: its first piece "matches no file".
BRACE_LIST_HINT = ("a brace list ({a,b}) is not a glob here: write its paths out, "
                   "comma-separated (dir/a,dir/b), or use a wildcard (dir/*)")


def expand_inputs(patterns: str | list[str]) -> list[str]:
    """Comma-separated globs and folders -> sorted list of files. Raises if none match, or
    for a broken link or a pipe. A file or folder that exists is read as named, though its
    name has a comma or a wildcard."""
    if isinstance(patterns, str):
        patterns = split_patterns(patterns)
    files = set()
    for pattern in patterns:
        pattern = pattern.strip()
        matched = [pattern] if tf.io.gfile.exists(pattern) else tf.io.gfile.glob(pattern)
        if not matched and os.path.islink(pattern):
            raise UserInputError(f"input {pattern} is a broken link (to "
                                 f"{os.readlink(pattern)}); fix it or pass another --input")
        if not matched:
            raise UserInputError(
                f"input {pattern} matches no file; "
                + (BRACE_LIST_HINT if re.search(r"[{}]", pattern)
                   else "check the path or glob in --input"))
        found = set()
        for path in matched:
            if tf.io.gfile.isdir(path):
                for root, folders, names in tf.io.gfile.walk(path):
                    folders[:] = [f for f in folders if not f.startswith(".")]  # .git, ...
                    found.update(os.path.join(root, n) for n in names if not n.startswith("."))
            else:
                found.add(path)
        if not found:  # (as a glob matching nothing is: one beside other inputs too)
            raise UserInputError(f"input {pattern} holds no files (hidden ones, named '.*', "
                                 "are skipped); check --input")
        files |= found
    if not files:
        raise UserInputError(f"input {','.join(patterns)} holds no files; check --input")
    local = sorted(f for f in files if not _is_remote(f))
    broken = next((f for f in local if os.path.islink(f) and not os.path.exists(f)), None)
    if broken:  # a link to nothing, listed in a folder
        raise UserInputError(f"input {broken} is a broken link (to {os.readlink(broken)}); "
                             "fix it or take it out of --input's folder")
    stream = next((f for f in local if not os.path.isfile(f)), None)
    if stream:  # /dev/stdin, <(zcat ...): read in pieces and resumed by offset, it cannot be
        raise UserInputError(f"input {stream} is a pipe or device, not a file; write it to a "
                             "file and pass that")
    return sorted(files)


def plan_pieces(files: list[str], piece_bytes: int = PIECE_BYTES) -> list[Piece]:
    """Splits uncompressed files larger than piece_bytes into nominal byte ranges."""
    if piece_bytes <= 0:
        raise UserInputError(f"a piece of {piece_bytes} bytes cannot split a file; pass "
                             "--piece_mb > 0")
    pieces = []
    for path in files:
        size = tf.io.gfile.stat(path).length
        if _compression(path) or size <= piece_bytes:
            pieces.append(Piece(path))
            continue
        cuts = list(range(0, size, piece_bytes))
        pieces.extend(Piece(path, a, b) for a, b in zip(cuts, cuts[1:] + [None]))
    return pieces


def input_bytes(piece: Piece) -> int:
    """On-disk bytes a piece covers (for progress and ETA)."""
    size = tf.io.gfile.stat(piece.path).length
    end = size if piece.end is None else min(piece.end, size)
    return end - piece.start


def boundaries_moved(path: str, piece_bytes: int) -> bool:
    """Whether a plain text file's pieces (plan_pieces) start elsewhere under the piece rule
    of builds since BuildConfig.piece_rule 2 than before it (the end of the file no longer
    taken as a boundary where it has no blank line near)."""
    size = tf.io.gfile.stat(path).length
    if _compression(path) or size <= piece_bytes:
        return False
    with _open_raw(path) as f:
        return any(_find_boundary(f, cut, b"\n\n") != _find_boundary(f, cut, b"\n\n", rule=1)
                   for cut in range(piece_bytes, size, piece_bytes))


def _find_boundary(f, offset: int, separator: bytes, rule: int = 2) -> int:
    """Where a piece starting at nominal `offset` really starts (and its predecessor ends):
    the first p >= offset with p == 0 or data[p - len(separator):p] == separator. A blank
    line ends a document in either line ending: for b"\n\n", b"\n\r\n" (CRLF's) counts too
    (else a CRLF file would never split, and its other pieces would come out empty); with no
    blank line within _BOUNDARY_WINDOW bytes (after it, or before it where the file ends
    sooner), the end of a line does. `rule` 1: as builds before BuildConfig.piece_rule cut,
    taking the file's end where it came within the window."""
    if offset <= 0:
        return 0
    if separator != b"\n\n":
        return _find_separator(f, offset, (separator,))
    blank = (separator, b"\n\r\n")
    found = _find_separator(f, offset, blank, _BOUNDARY_WINDOW)
    f.seek(0, os.SEEK_END)  # (tf.io.gfile's seek returns nothing: tell)
    if rule >= 2 and found is not None and found == f.tell():
        # The end of the file ends the last document, where the file has blank lines; one
        # without any near (less than the window left after the cut) is cut at a line, as
        # further in (else its first piece read all that was left, the others nothing).
        start = max(0, offset - _BOUNDARY_WINDOW)
        f.seek(start)
        before = f.read(offset - start)
        if not any(b in before for b in blank):
            found = None
    return found if found is not None else _find_separator(f, offset, (b"\n",))


def _find_separator(f, offset: int, separators: tuple, window: int | None = None):
    """The first p >= offset that ends one of `separators`, or the end of the file; None if
    neither comes within `window` bytes of offset."""
    longest = max(len(s) for s in separators)
    base = offset - min(offset, longest)
    f.seek(base)
    window_data = b""
    while True:
        chunk = f.read(_SEARCH_CHUNK)
        if not chunk:
            return base + len(window_data)
        window_data += chunk
        ends = []
        for s in separators:
            i = window_data.find(s)
            while i >= 0 and base + i + len(s) < offset:
                i = window_data.find(s, i + 1)
            if i >= 0:
                ends.append(base + i + len(s))
        if ends:
            return min(ends)
        if window is not None and base + len(window_data) - offset >= window:
            return None
        keep = longest - 1
        base += len(window_data) - keep
        window_data = window_data[len(window_data) - keep:]


def _decode(raw: bytes, stats: ReadStats) -> str:
    stats.text_bytes += len(raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8_lines += 1
        return raw.decode("utf-8", errors="replace")


def _block_lines(block: bytes, stats: ReadStats, max_line: int | None = None) -> list[str]:
    """The decoded lines of `block`, whole lines each ending in a newline (but the file's
    last); line ends ("\n", "\r\n") removed, lines over `max_line` bytes cut there. One
    decode for the block when it is clean."""
    if block.endswith(b"\n"):
        block = block[:-1]
    lines = block.split(b"\n")
    if max_line is not None and len(block) > max_line and any(
            len(line) > max_line for line in lines):
        stats.long_lines += sum(len(line) > max_line for line in lines)
        lines = [_whole_characters(line[:max_line]) if len(line) > max_line else line
                 for line in lines]
        block = b"\n".join(lines)
    if b"\r" not in block:
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            stats.text_bytes += len(block) - block.count(b"\n")
            return text.split("\n")
    lines = [line.rstrip(b"\r") for line in lines]
    stats.cr_lines += sum(b"\r" in line for line in lines)
    return [_decode(line, stats) for line in lines]


def cr_lines_note(count: int, why: str, again: str) -> str:
    """The note on `count` lines holding a lone carriage return (ReadStats.cr_lines)."""
    return (f"note: {count} line{'s hold' if count != 1 else ' holds'} carriage returns (\\r) "
            f"that end no line, as old Mac files end their lines: a line ends only at \\n "
            f"({why}), so the text between them was read as one line; if they are line ends, "
            f"convert them (tr '\\r' '\\n' < in > out) and {again}")


def _whole_characters(data: bytes) -> bytes:
    """`data` without a UTF-8 character cut short at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # the lead byte of a character of 2, 3 or 4 bytes
            size = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= size else data[:-back]
    return data


def _blocks(f, limit: int | None = None, max_line: int | None = None,
            stats: ReadStats | None = None) -> Iterator[bytes]:
    """Runs of whole lines (about _READ_CHUNK bytes each) from `f`, at most `limit` bytes.
    With `max_line`, a line that outgrows it is held to its first max_line bytes and the rest
    read past (counted in stats.long_lines), so that memory stays bounded."""
    parts, held, skipping = [], 0, False
    while True:
        size = _READ_CHUNK if limit is None else min(_READ_CHUNK, limit)
        chunk = f.read(size) if size > 0 else b""
        if not chunk:
            if parts:
                yield b"".join(parts)
            return
        if limit is not None:
            limit -= len(chunk)
        if skipping:  # the rest of a line already cut
            newline = chunk.find(b"\n")
            if newline < 0:
                continue
            chunk, skipping = chunk[newline:], False
        cut = chunk.rfind(b"\n") + 1
        if not cut:  # a line longer than a chunk: keep reading
            parts.append(chunk)
            held += len(chunk)
            if max_line is not None and held > max_line:
                line = _whole_characters(b"".join(parts)[:max_line])
                parts, held, skipping = [line], len(line), True
                stats.long_lines += 1
            continue
        parts.append(chunk[:cut])
        yield b"".join(parts)
        parts = [chunk[cut:]] if cut < len(chunk) else []
        held = len(chunk) - cut


def _lines(piece: Piece, separator: bytes, stats: ReadStats,
           cut_long_lines: bool = True) -> Iterator[str]:
    """Decoded lines (without the newline) of a piece, from its first boundary to its last;
    lines over MAX_LINE_BYTES cut there (`cut_long_lines`)."""
    max_line = MAX_LINE_BYTES if cut_long_lines else None
    compression = _compression(piece.path)
    with _open_raw(piece.path) as raw:
        if compression:
            try:
                for block in _blocks(compression(raw), max_line=max_line, stats=stats):
                    stats.input_bytes = raw.tell()
                    yield from _block_lines(block, stats, max_line)
            except _CORRUPT as e:  # gzip/bz2/lzma: truncated, corrupt
                raise UserInputError(f"input {piece.path} is truncated or corrupt ({e}); "
                                     "download or compress it again, or leave it out") from None
            stats.input_bytes = raw.tell()
            return
        start = _find_boundary(raw, piece.start, separator)
        end = None if piece.end is None else _find_boundary(raw, piece.end, separator)
        raw.seek(start)
        read = start
        for block in _blocks(raw, None if end is None else end - start, max_line, stats):
            stats.input_bytes += raw.tell() - read  # (skipped parts of long lines too)
            read = raw.tell()
            yield from _block_lines(block, stats, max_line)


def read_documents(piece: Piece, input_format: str = TEXT, text_field: str = "text",
                   one_document_per_line: bool = False,
                   stats: ReadStats | None = None) -> Iterator[list[str]]:
    """Yields the documents of a piece, each a list of non-empty lines.

    Invalid UTF-8, and in JSONL a lone surrogate escape, is replaced (U+FFFD) and counted in
    `stats`; malformed JSONL records are skipped and counted. A JSONL file whose first record
    is not a JSON object or lacks `text_field` is an error.
    """
    document = []
    for part, last in read_document_parts(piece, input_format, text_field,
                                          one_document_per_line, stats):
        document += part
        if last:
            yield document
            document = []


def read_document_parts(piece: Piece, input_format: str = TEXT, text_field: str = "text",
                        one_document_per_line: bool = False, stats: ReadStats | None = None,
                        max_lines: int | None = None) -> Iterator[tuple[list[str], bool]]:
    """`read_documents` as (lines, last) parts of at most `max_lines` lines (None: whole
    documents), `last` where the part ends its document: a document of millions of lines
    (a file without blank lines) is never held whole."""
    if input_format not in INPUT_FORMATS:
        raise UserInputError(
            f"--input_format={input_format} is not one of {', '.join(INPUT_FORMATS)}")
    stats = stats if stats is not None else ReadStats()
    if input_format == JSONL:
        for document in _jsonl_documents(piece, text_field, stats):
            yield document, True
        return
    if one_document_per_line:
        for line in _lines(piece, b"\n", stats):
            if line.strip():
                yield [line], True
        return
    document, started = [], False
    for line in _lines(piece, b"\n\n", stats):
        if line.strip():
            document.append(line)
            started = True
            if max_lines is not None and len(document) >= max_lines:
                yield document, False
                document = []
        elif started:
            yield document, True  # (empty if its lines went in earlier parts)
            document, started = [], False
    if started:
        yield document, True


_ENCODING_SAMPLE_BYTES = 1 << 18
_ENCODING_SAMPLE_LINES = 1000


# Binary files by their first bytes (what a folder of text may also hold). Those in ASCII
# (a line of text may begin so) count only in a sample that is not UTF-8 all through.
_MAGIC = ((b"PK\x03\x04", "a zip archive"), (b"\x1f\x8b", "gzip data: name it .gz"),
          (b"\xfd7zXZ\x00", "xz data: name it .xz"), (b"\x89PNG\r\n", "a PNG image"),
          (b"\xff\xd8\xff", "a JPEG image"), (b"\x7fELF", "a program"))
_ASCII_MAGIC = ((b"%PDF-", "a PDF"), (b"GIF87a", "a GIF image"), (b"GIF89a", "a GIF image"))
# NULs among the first 8,000 bytes (git's window) that make a file binary: a TFRecord's
# headers put dozens there, UTF-16 thousands; a crawled text's stray NUL (which the
# tokenizer drops) is no reason to refuse it.
_NUL_WINDOW, _NULS = 8000, 8


def _binary_kind(sample: bytes) -> str | None:
    """What a file whose first bytes are `sample` (decompressed) is, if it is not text: a
    known binary format, or a file with NUL bytes near its start (TFRecords, UTF-16 text
    without a byte-order mark)."""
    for magic, kind in _MAGIC:
        if sample.startswith(magic):
            return kind
    if re.match(rb"BZh[1-9]1AY&SY", sample):
        return "bzip2 data: name it .bz2"
    for magic, kind in _ASCII_MAGIC:
        if sample.startswith(magic):
            try:
                codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
            except UnicodeDecodeError:
                return kind
    window = sample[:_NUL_WINDOW]
    nuls = window.count(0)
    if nuls >= _NULS:
        return (f"{nuls} NUL bytes in its first {len(window):,}: binary data "
                "such as TFRecords, or UTF-16 text without a byte-order mark; a text file's "
                "NULs go with tr -d '\\000'")
    return None


def check_encoding(path: str):
    """Raises UserInputError if `path` is not UTF-8 text: a binary file (`_binary_kind`),
    or one where at least half of the first non-blank lines (up to 1,000, in its first
    256 KB, decompressed) are not UTF-8, a file in another encoding (GBK, Latin-1, UTF-16),
    which reading would turn into replacement characters and [UNK]s line after line. A few
    bad lines are kept, replaced, and counted in a note."""
    compression = _compression(path)
    with _open_raw(path) as raw:
        try:
            sample = (compression(raw) if compression else raw).read(_ENCODING_SAMPLE_BYTES)
        except _CORRUPT:
            return  # reading says it is truncated or corrupt
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UserInputError(f"input {path} is UTF-16 text (it starts with a UTF-16 byte-order "
                             "mark), not UTF-8; re-save it as UTF-8 (iconv -f utf-16 -t utf-8)")
    binary = _binary_kind(sample)
    if binary:
        raise UserInputError(
            f"input {path} is not text ({binary}); take it out of --input (a folder is read "
            "whole, every file in it but hidden ones)")
    lines = sample.split(b"\n")
    cut = len(sample) == _ENCODING_SAMPLE_BYTES  # the last line may end mid-character
    lines = [line for line in lines if line.strip()][:_ENCODING_SAMPLE_LINES]
    bad = []
    for number, line in enumerate(lines, 1):
        try:
            if cut and number == len(lines):
                codecs.getincrementaldecoder("utf-8")().decode(line, final=False)
            else:
                line.decode("utf-8")
        except UnicodeDecodeError as e:
            bad.append((number, line[e.start]))
    if bad and 2 * len(bad) >= len(lines):
        raise UserInputError(
            f"input {path} is not UTF-8 text ({len(bad)} of its first {len(lines)} non-blank "
            f"lines are not, the first at byte 0x{bad[0][1]:02x}); re-save it as UTF-8 with "
            f"its encoding named, e.g. {ICONV_HINT}")


def check_jsonl(path: str, text_field: str):
    """Raises UserInputError unless the first record of JSONL file `path` is a JSON object
    with `text_field`, and the file is UTF-8 (check_encoding).

    Reads its start: the cheap check that a build can make of every input before it writes
    anything (read_documents makes the same check as it reads).
    """
    check_encoding(path)
    first = _first_line(path)
    if first is not None:
        _check_first_record(path, *first, text_field)


BOM = "\ufeff"  # a UTF-8 byte-order mark, which some editors write first


def _first_line(path: str) -> tuple[int, str] | None:
    """(number, text) of `path`'s first non-blank line, whole (a JSONL record may be
    megabytes), None if it has none."""
    for number, line in enumerate(_lines(Piece(path), b"\n", ReadStats(),
                                         cut_long_lines=False), 1):
        if line.strip():
            return number, line
    return None


def check_text(path: str):
    """Raises UserInputError if `path`, read as plain text, is not UTF-8 (check_encoding) or
    is JSONL: a name ending in .jsonl or .json (before any compression suffix) whose first
    line is a JSON object, which as text would train on its braces and field names."""
    check_encoding(path)
    name = re.sub(r"\.(gz|bz2|xz)$", "", os.path.basename(path))
    if not name.endswith((".jsonl", ".json")):
        return
    first = _first_line(path)
    if first is None:
        return
    try:
        record = json.loads(first[1].removeprefix(BOM))
    except json.JSONDecodeError:
        # An indented JSON document (a corpus folder's manifest.json) begins "{" or "[" alone.
        if name.endswith(".json") and first[1].removeprefix(BOM).strip() in ("{", "["):
            raise UserInputError(
                f"{path} is a JSON document (it begins with {first[1].strip()!r}) but is read "
                "as plain text, which would train on its braces and field names; leave it out "
                "of --input (e.g. 'FOLDER/*.txt.gz' rather than the folder)") from None
        return
    if isinstance(record, dict):
        raise UserInputError(
            f"{path} is JSONL (its first line is a JSON object) but is read as plain text; "
            "pass --input_format=jsonl (and --text_field=NAME if its text is not in 'text')")


def _check_first_record(path: str, number: int, line: str, text_field: str) -> dict:
    """The first record of a file must be valid: later malformed ones are skipped, but a
    first one that is not JSON, or lacks `text_field`, means a flag is wrong, not the
    record."""
    try:
        record = json.loads(line.removeprefix(BOM))  # a file's byte-order mark is not JSON
    except json.JSONDecodeError:
        record = None
    if not isinstance(record, dict):
        raise UserInputError(
            f"{path}: line {number} is not a JSON object, as --input_format=jsonl needs; for "
            "plain text pass --input_format=text")
    if text_field not in record:
        raise UserInputError(
            f"{path}: record {number} has no field '{text_field}' (fields: "
            f"{', '.join(sorted(record))}); pass --text_field=NAME")
    return record


def _jsonl_documents(piece: Piece, text_field: str, stats: ReadStats) -> Iterator[list[str]]:
    # Only a piece that starts its file sees the file's first record.
    first = piece.start == 0
    for number, line in enumerate(_lines(piece, b"\n", stats, cut_long_lines=False), 1):
        if not line.strip():
            continue
        if first:
            record = _check_first_record(piece.path, number, line, text_field)
            first = False
        else:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                stats.bad_json_lines += 1
                continue
            if not isinstance(record, dict) or text_field not in record:
                stats.bad_json_lines += 1
                continue
        text = record[text_field]
        if not isinstance(text, str):
            stats.bad_json_lines += 1
            continue
        if LONE_SURROGATE.search(text):  # an escape like "\ud83d": no UTF-8 for it
            text = LONE_SURROGATE.sub("\ufffd", text)
            stats.invalid_utf8_lines += 1
        document = [s for s in text.split("\n") if s.strip()]
        if document:
            yield document
