"""Rebuilds data/corpus/ from Debian's r-cran-janeaustenr package (provenance script).

The six novels are public domain (Project Gutenberg texts packaged by the janeaustenr R
package, MIT licence for the packaging). Output is the official ELECTRA corpus format: one
sentence per line, a blank line between documents; here a document is a chapter.

    apt-get download r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*.deb x
    pip install rdata
    python data/make_sample_corpus.py --package_dir=x/usr/lib/R/site-library/janeaustenr

Not needed at run time; the output is committed.
"""

import argparse
import bz2
import gzip
import lzma
import os
import re
import zlib

import rdata

_CHAPTER = re.compile(r"^(CHAPTER|Chapter)\b")
_ABBREVIATIONS = ("Mr", "Mrs", "Ms", "Dr", "St", "Col", "Capt", "Gen", "Rev", "Lt")
# A sentence ends at . ! or ? (plus closing quotes) followed by a capital, unless the full
# stop ends a title such as "Mr." (Austen writes "Mr. Bennet" on every page).
_SENTENCE_END = re.compile(
    "".join(rf"(?<!\b{a}\.)" for a in _ABBREVIATIONS)
    + r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]*[A-Z])")


def _decompress(blob: bytes) -> bytes:
    if blob[:2] == b"\x1f\x8b":
        return gzip.decompress(blob)
    kind = blob[4:5]
    if kind == b"Z":
        return lzma.decompress(blob[5:])
    if kind == b"2":
        return bz2.decompress(blob[5:])
    return zlib.decompress(blob[4:])


def _read(obj_bytes: bytes):
    return rdata.conversion.convert(rdata.parser.parse_data(_decompress(obj_bytes)))


def load_novels(package_dir: str) -> dict[str, list[str]]:
    base = os.path.join(package_dir, "data", "Rdata")
    with open(base + ".rdx", "rb") as f:
        index = _read(f.read())
    with open(base + ".rdb", "rb") as f:
        store = f.read()
    novels = {}
    for name, (offset, length) in index["variables"].items():
        offset, length = int(offset), int(length)
        novels[str(name)] = [str(line) for line in _read(store[offset:offset + length])]
    return novels


def split_sentences(paragraph: str) -> list[str]:
    # Split after the end punctuation *and* any closing quote, so a quote stays with its
    # sentence.
    parts, start = [], 0
    for m in _SENTENCE_END.finditer(paragraph):
        parts.append(paragraph[start:m.end()].strip())
        start = m.end()
    parts.append(paragraph[start:].strip())
    return [p for p in parts if p]


def to_documents(lines: list[str]) -> list[list[str]]:
    documents, sentences, paragraph = [], [], []

    def flush_paragraph():
        if paragraph:
            sentences.extend(split_sentences(" ".join(paragraph)))
            paragraph.clear()

    for line in lines:
        line = line.strip()
        if _CHAPTER.match(line):
            flush_paragraph()
            if sentences:
                documents.append(sentences)
            sentences = []
            continue
        if not line:
            flush_paragraph()
        else:
            paragraph.append(line)
    flush_paragraph()
    if sentences:
        documents.append(sentences)
    return documents


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--package_dir", required=True)
    parser.add_argument("--output_dir", default=os.path.join(os.path.dirname(__file__), "corpus"))
    args = parser.parse_args()
    os.makedirs(args.output_dir, exist_ok=True)
    for name, lines in sorted(load_novels(args.package_dir).items()):
        documents = to_documents(lines)
        text = "\n\n".join("\n".join(doc) for doc in documents) + "\n"
        path = os.path.join(args.output_dir, f"{name}.txt.gz")
        # mtime=0 keeps the committed bytes reproducible.
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write(text.encode("utf-8"))
        print(f"{path}: {len(documents)} documents, {len(text)} chars")


if __name__ == "__main__":
    main()
