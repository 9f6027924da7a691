"""Assembles the study's pre-training corpus: over 50 MB of real English text from Debian
packages, as gzipped text files that scripts/build_pretraining_data.py reads (one sentence
per line, a blank line between documents).

    .venv/bin/python benchmarks/study/make_corpus.py     # about a minute; reruns reuse it

Nothing is fetched but the packages (`apt-get download` + `dpkg-deb -x` into
benchmarks/.cache/deb/, see benchmarks/corpora.py). The sources, with what they gave here
(Debian 12, 60.8 MB in all):
- gcide (dict-gcide 0.48.5, 28.7 MB): the GCIDE dictionary (Webster's 1913 with later
  additions), cleaned as benchmarks/build_data.py does; a document is a "page" of
  consecutive entries (at least 2,000 characters).
- wordnet (wordnet-base 3.0, 11.5 MB): every synset's words, gloss and usage examples
  ("dog, domestic dog, Canis familiaris: a member of the genus Canis ..."); a document is
  a page of consecutive synsets of one part of speech.
- bible_web (sword-text-web 426.0, 5.0 MB): the World English Bible with the deuterocanon
  (public domain) and bible_kjv (sword-text-kjv 14.3, 4.2 MB): the King James Version;
  SWORD zText modules read here (zlib blocks and a verse index), OSIS markup and footnotes
  dropped; a document is a chapter, a verse per line.
- python_docs (python3.11-doc 3.11.2, 7.5 MB): the Python documentation's HTML pages as
  text (stdlib html.parser: the page body without code blocks; indexes left out); a
  document is a page.
- austen (r-cran-janeaustenr 1.0.0, 4.0 MB): Jane Austen's six novels, the repository's
  data/corpus/ (converted from that package by data/make_sample_corpus.py); a document is
  a chapter.

Paragraphs are split into sentences (a line each) at ". ", "! " and "? " before a capital,
so that the builder's packing (which truncates an over-long line) loses little text.
Output: OUTPUT_DIR/<source>-NNNNN.txt.gz pieces of about 8 MB of text (several pieces let
the builder's workers share a source) and manifest.json (package versions, sizes). The
script fails if the total is under --min_mb.
"""

import glob
import gzip
import html
import html.parser
import json
import os
import re
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags  # noqa: E402

import common  # noqa: E402
import corpora  # noqa: E402
from electra_tf.errors import UserInputError  # noqa: E402

flags.DEFINE_string("output_dir", os.path.join(common.CACHE_DIR, "study", "corpus"),
                    "Where the gzipped text pieces and manifest.json go.")
flags.DEFINE_float("min_mb", 50.0, "Fail if the corpus holds fewer MB of text than this.")
flags.DEFINE_float("piece_mb", 8.0, "MB of text per output file.")
flags.DEFINE_bool("overwrite", False, "Rebuild even if OUTPUT_DIR has a complete corpus.")
FLAGS = flags.FLAGS

MANIFEST = "manifest.json"
PAGE_CHARS = 2000
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]\u201d\u2019]?\s+(?=[\"'(\[\u201c\u2018]?[A-Z])")
_SPACES = re.compile(r"\s+")


def sentences(paragraph: str) -> list[str]:
    """A paragraph as sentences (whitespace collapsed)."""
    paragraph = _SPACES.sub(" ", paragraph).strip()
    return [s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()]


def pages(items, min_chars: int = PAGE_CHARS):
    """Groups consecutive short documents (lists of lines) into documents of at least
    min_chars: packing never crosses a document, so tiny ones would waste sequence length."""
    page, size = [], 0
    for lines in items:
        page += lines
        size += sum(len(line) + 1 for line in lines)
        if size >= min_chars:
            yield page
            page, size = [], 0
    if page:
        yield page


# ------------------------------------------------------------------ the sources


def gcide_documents():
    root, version = corpora.debian_package("dict-gcide")
    entries = ([s for p in entry for s in sentences(p)] for entry in corpora.gcide_documents(root))
    return "dict-gcide", version, pages(entries)


def wordnet_documents():
    root, version = corpora.debian_package("wordnet-base")

    def synsets(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:  # the licence header
                    continue
                fields, gloss = line.split(" | ", 1)
                fields = fields.split()
                count = int(fields[3], 16)
                words = [re.sub(r"\(.*\)$", "", w).replace("_", " ")
                         for w in fields[4:4 + 2 * count:2]]
                yield [f"{', '.join(words)}: {_SPACES.sub(' ', gloss).strip()}"]

    def documents():
        for part in ("noun", "verb", "adj", "adv"):
            yield from pages(synsets(os.path.join(root, "usr/share/wordnet", f"data.{part}")))
    return "wordnet-base", version, documents()


_NOTE = re.compile(r"<note\b[^>]*>.*?</note>", re.S)
_TAG = re.compile(r"<[^>]*>")
_SPACE_BEFORE_PUNCT = re.compile(r" ([,.;:!?\u2019\u201d])")


def sword_documents(package: str):
    """A SWORD zText Bible module: `*.bzs` lists the zlib blocks (offset, size, unpacked
    size: 3 x uint32), `*.bzz` holds them, `*.bzv` indexes each verse (block, offset:
    uint32, size: uint16) in versification order, book and chapter headings included."""
    root, version = corpora.debian_package(package)
    module = glob.glob(os.path.join(root, "usr/share/sword/modules/texts/ztext/*"))[0]

    def documents():
        for testament in ("ot", "nt"):
            path = os.path.join(module, testament)
            if not os.path.exists(path + ".bzs"):
                continue
            with open(path + ".bzs", "rb") as f:
                index = f.read()
            with open(path + ".bzz", "rb") as f:
                data = f.read()
            with open(path + ".bzv", "rb") as f:
                verses = f.read()
            blocks = {}
            chapter = []
            for i in range(0, len(verses) - 9, 10):
                block, offset, size = struct.unpack("<IIH", verses[i:i + 10])
                if size == 0:
                    continue
                if block not in blocks:
                    start, length, _ = struct.unpack("<III", index[12 * block:12 * block + 12])
                    blocks = {block: zlib.decompress(data[start:start + length])}
                raw = blocks[block][offset:offset + size].decode("utf-8", "replace")
                if "<chapter " in raw and "sID=" in raw and len(chapter) > 1:
                    yield chapter  # a book's title alone stays with its first chapter
                    chapter = []
                # A verse is a line; a long entry (a preface, a book's introduction) is
                # split into sentences.
                text = html.unescape(_TAG.sub("", _NOTE.sub(" ", raw))).replace("\u00b6", "")
                text = _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACES.sub(" ", text))
                chapter += sentences(text) if len(text) > 400 else [text.strip()] * bool(
                    text.strip())
            if chapter:
                yield chapter
    return package, version, documents()


class _DocText(html.parser.HTMLParser):
    """The text of a Sphinx page's body (div role="main") as paragraphs; code blocks,
    scripts and the pilcrow links left out."""
    BLOCKS = {"p", "div", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "td",
              "th", "br", "blockquote", "table", "ul", "ol", "dl", "section", "caption",
              "figcaption"}
    SKIP = {"pre", "script", "style"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs, self._text = [], []
        self._body_depth = 0  # open divs inside the body; 0: outside it
        self._skipping = []  # the open elements whose text is left out

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div":
            if self._body_depth:
                self._body_depth += 1
            elif attrs.get("role") == "main":
                self._body_depth = 1
        if tag in self.SKIP or (tag == "a" and "headerlink" in (attrs.get("class") or "")):
            self._skipping.append(tag)
        if tag in self.BLOCKS:
            self._flush()

    def handle_endtag(self, tag):
        if self._skipping and self._skipping[-1] == tag:
            self._skipping.pop()
        if tag in self.BLOCKS:
            self._flush()
        if tag == "div" and self._body_depth:
            self._body_depth -= 1

    def handle_data(self, data):
        if self._body_depth and not self._skipping:
            self._text.append(data)

    def _flush(self):
        text = _SPACES.sub(" ", "".join(self._text)).strip()
        self._text = []
        if len(text.split()) >= 3:
            self.paragraphs.append(text)


def python_docs_documents():
    root, version = corpora.debian_package("python3.11-doc")
    html_dir = os.path.join(root, "usr/share/doc/python3.11/html")
    skip = re.compile(r"^(_|genindex|py-modindex|search|contents)")

    def documents():
        for path in sorted(glob.glob(os.path.join(html_dir, "**", "*.html"), recursive=True)):
            if skip.match(os.path.relpath(path, html_dir)):
                continue
            parser = _DocText()
            with open(path, encoding="utf-8", errors="replace") as f:
                parser.feed(f.read())
            lines = [s for p in parser.paragraphs for s in sentences(p)]
            if lines:
                yield lines
    return "python3.11-doc", version, documents()


def austen_documents():
    """data/corpus/ as it is (already one sentence per line, a chapter per document)."""
    def documents():
        for path in sorted(glob.glob(os.path.join(common.REPO, "data", "corpus", "*.txt.gz"))):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for document in f.read().split("\n\n"):
                    lines = [line for line in document.split("\n") if line.strip()]
                    if lines:
                        yield lines
    return "r-cran-janeaustenr 1.0.0-1 (data/corpus/)", "1.0.0-1", documents()


SOURCES = {
    "gcide": gcide_documents,
    "wordnet": wordnet_documents,
    "bible_web": lambda: sword_documents("sword-text-web"),
    "bible_kjv": lambda: sword_documents("sword-text-kjv"),
    "python_docs": python_docs_documents,
    "austen": austen_documents,
}


# ------------------------------------------------------------------ writing


def write_source(name: str, documents, output_dir: str, piece_bytes: int) -> dict:
    """Writes the documents as NAME-NNNNN.txt.gz pieces of about piece_bytes of text."""
    files, text_bytes, num_documents, num_lines = [], 0, 0, 0
    out, piece = None, 0

    def open_piece():
        path = os.path.join(output_dir, f"{name}-{len(files):05d}.txt.gz")
        files.append(os.path.basename(path))
        return gzip.open(path + ".tmp", "wt", encoding="utf-8", compresslevel=6)

    for lines in documents:
        if out is None or piece >= piece_bytes:
            if out is not None:
                out.close()
            out, piece = open_piece(), 0
        block = "\n".join(lines) + "\n\n"
        out.write(block)
        size = len(block.encode("utf-8"))
        piece += size
        text_bytes += size
        num_documents += 1
        num_lines += len(lines)
    if out is not None:
        out.close()
    for f in files:
        os.replace(os.path.join(output_dir, f + ".tmp"), os.path.join(output_dir, f))
    return {"files": files, "text_bytes": text_bytes, "documents": num_documents,
            "lines": num_lines}


# What a build writes: its sources' pieces and the manifest (and their staging names).
_OWN_FILE = re.compile(rf"(?:(?:{'|'.join(SOURCES)})-\d{{5}}\.txt\.gz|{re.escape(MANIFEST)})"
                       r"(?:\.tmp)?")


def make_corpus(output_dir: str, piece_mb: float = 8.0, overwrite: bool = False) -> dict:
    """Builds the corpus in output_dir (or reads the manifest of an earlier build); returns
    the manifest."""
    manifest_path = os.path.join(output_dir, MANIFEST)
    if os.path.exists(manifest_path) and not overwrite:
        with open(manifest_path) as f:
            manifest = json.load(f)
        if all(os.path.exists(os.path.join(output_dir, p))
               for s in manifest["sources"].values() for p in s["files"]):
            return manifest
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise UserInputError(f"--output_dir={output_dir} is a file; pass a new or empty folder")
    others = sorted(f for f in os.listdir(output_dir) if not _OWN_FILE.fullmatch(f)) if (
        os.path.isdir(output_dir)) else []
    if others:  # (a build's own files are replaced; nothing else is deleted)
        raise UserInputError(f"--output_dir={output_dir} holds files this script did not write "
                             f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); "
                             "pass a new or empty folder")
    for name in os.listdir(output_dir) if os.path.isdir(output_dir) else []:
        os.remove(os.path.join(output_dir, name))
    os.makedirs(output_dir, exist_ok=True)
    manifest = {"sources": {}, "format": "gzipped text: one sentence per line, a blank line "
                "between documents"}
    for name, source in SOURCES.items():
        package, version, documents = source()
        stats = write_source(name, documents, output_dir, int(piece_mb * 1e6))
        manifest["sources"][name] = {"package": package, "version": version, **stats}
        print(f"{name:12s} {package:45s} {stats['text_bytes'] / 1e6:6.1f} MB "
              f"{stats['documents']:7,d} documents {stats['lines']:9,d} lines", flush=True)
    manifest["text_bytes"] = sum(s["text_bytes"] for s in manifest["sources"].values())
    with open(manifest_path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(manifest_path + ".tmp", manifest_path)
    return manifest


def main(argv):
    del argv
    manifest = make_corpus(FLAGS.output_dir, FLAGS.piece_mb, FLAGS.overwrite)
    rows = [[name, s["package"], s["version"], f"{s['text_bytes'] / 1e6:.1f}",
             f"{s['documents']:,}", f"{s['lines']:,}"] for name, s in manifest["sources"].items()]
    print(common.markdown_table(["source", "package", "version", "MB", "documents", "lines"],
                                rows))
    total = manifest["text_bytes"] / 1e6
    print(f"total {total:.1f} MB of text in {FLAGS.output_dir}")
    if total < FLAGS.min_mb:
        print(f"error: the corpus holds {total:.1f} MB, less than --min_mb={FLAGS.min_mb}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    common.run(main)
