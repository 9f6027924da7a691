"""Vocab learning: exact size, BERT's layout, and vocabs that our Tokenizer encodes well."""

import collections
import os
import re
import unicodedata

import pytest
import tensorflow as tf
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, normalizers, pre_tokenizers

from conftest import CORPUS_GLOB, ROOT, chinese_reviews, corpus_lines
from electra_tf import vocab_learning
from electra_tf.errors import UserInputError
from electra_tf.tokenization import Tokenizer
from in_process import run_script

TRAIN_LINES = 30000


@pytest.fixture(scope="module")
def austen():
    lines = corpus_lines()
    return lines[:TRAIN_LINES], lines[TRAIN_LINES:]


@pytest.fixture(scope="module")
def vocabs(austen):
    train, _ = austen
    return {size: vocab_learning.learn_vocab(train, size) for size in (2000, 5000)}


@pytest.fixture(scope="module")
def vocab_file(vocabs, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    vocab_learning.write_vocab(vocabs[5000], path)
    return path


def _hf_tokenizer(vocab, lower_case=True):
    """The reference pipeline: HF's BERT normaliser, pre-tokenizer and WordPiece."""
    hf = HFTokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                      max_input_chars_per_word=100))
    hf.normalizer = normalizers.BertNormalizer(lowercase=lower_case,
                                               strip_accents=lower_case)
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return hf


@pytest.mark.parametrize("size", [2000, 5000])
def test_exact_size_bert_layout_no_duplicates(vocabs, size):
    vocab = vocabs[size]
    assert len(vocab) == size
    assert len(set(vocab)) == size
    assert vocab[0] == "[PAD]"
    assert vocab[1:100] == [f"[unused{i}]" for i in range(99)]
    assert vocab[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert all(t and not any(c.isspace() for c in t) for t in vocab)


def test_every_character_and_its_continuation_is_kept(vocabs, austen):
    vocab = set(vocabs[2000])
    text = " ".join(austen[0]).lower()
    letters = {c for c in unicodedata.normalize("NFD", text)
               if c.isalnum() and unicodedata.category(c) != "Mn"}
    assert {"a", "z", "0", "9"} <= letters
    assert letters <= vocab
    assert {"##" + c for c in letters} <= vocab
    assert {",", ".", ";", "!", "?", '"'} <= vocab


def test_smaller_vocab_is_a_prefix_of_the_larger(vocabs):
    # Both runs make the same merges in the same order; the smaller stops earlier.
    assert vocabs[5000][:2000] == vocabs[2000]


def test_deterministic(vocabs, austen):
    assert vocab_learning.learn_vocab(austen[0], 2000) == vocabs[2000]


def test_tokenizer_encodes_held_out_austen_with_few_unknowns(vocab_file, austen):
    tokenizer = Tokenizer(vocab_file)
    assert (tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (
        100, 101, 102, 103)
    held_out = austen[1]
    ids = [i for row in tokenizer.encode(held_out) for i in row]
    assert len(ids) > 30000
    assert ids.count(tokenizer.unk_id) / len(ids) < 0.005
    for word in ["the", "elizabeth", "mr", "sister", "marianne", "happiness"]:
        assert tokenizer.convert_ids_to_tokens(tokenizer.encode([word])[0]) == [word]
    pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode(["Elizabeth's"])[0])
    assert pieces == ["elizabeth", "'", "s"]


def test_learned_pieces_are_what_the_tokenizer_produces(vocab_file, austen):
    # Our in-graph Tokenizer and HF's BERT pipeline (the one the vocab was learned with)
    # give identical ids, so the pieces learned are exactly the pieces seen in training.
    tokenizer = Tokenizer(vocab_file)
    hf = _hf_tokenizer(tokenizer.vocab)
    lines = austen[1][:500] + ["Café NAÏVE façade — “quoted” Œuvre, 1,234.5 ½"]
    expected = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
    assert tokenizer.encode(lines) == expected


def test_cased_vocab_keeps_capitals(austen):
    vocab = vocab_learning.learn_vocab(austen[0][:5000], 1000, lower_case=False)
    assert len(vocab) == 1000
    assert {"E", "T", "##A", "The"} <= set(vocab)


def test_chinese_vocab_holds_single_characters():
    reviews = chinese_reviews()
    vocab = vocab_learning.learn_vocab(reviews, 2200, num_unused=10)
    assert len(vocab) == 2200 and len(set(vocab)) == 2200
    assert vocab[11:15] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    cjk = [t for t in vocab if len(t) == 1 and "\u4e00" <= t <= "\u9fff"]
    assert len(cjk) > 1500
    assert {"的", "书", "好"} <= set(cjk)
    # Ideographs always stand alone, so no piece joins two of them or continues a word.
    assert not [t for t in vocab if len(t) > 1 and any("\u4e00" <= c <= "\u9fff" for c in t)]
    assert {"dvd", "##ing"} & set(vocab)
    unk = vocab.index("[UNK]")
    ids = [i for e in _hf_tokenizer(vocab).encode_batch(reviews, add_special_tokens=False)
           for i in e.ids]
    assert ids.count(unk) / len(ids) < 0.005


def _char_piece_counts(lines):
    """Occurrences of "c" (starting a word) and "##c" (continuing one), as BERT splits words."""
    hf = _hf_tokenizer(["[UNK]"])
    counts = collections.Counter()
    for line in lines:
        text = hf.normalizer.normalize_str(line)
        for word, _ in hf.pre_tokenizer.pre_tokenize_str(text):
            counts[word[0]] += 1
            counts.update("##" + c for c in word[1:])
    return counts


def test_characters_that_do_not_all_fit_keep_the_most_frequent(austen):
    # 53 characters and their "##" forms cannot all fit in 46 learned tokens.
    lines = austen[0][:5000]
    notes = []
    vocab = vocab_learning.learn_vocab(lines, 150, log=notes.append)
    learned = vocab[104:]
    assert len(vocab) == 150 and len(set(learned)) == 46
    counts = _char_piece_counts(lines)
    assert all(len(t) == 1 or (t.startswith("##") and len(t) == 3) for t in learned)
    dropped = [t for t in counts if t not in learned]
    assert min(counts[t] for t in learned) >= max(counts[t] for t in dropped)
    assert {"e", "##e", "t", "a", ","} <= set(learned)
    [note] = notes
    pieces = int(re.search(r"of the corpus's (\d+) characters", note).group(1))
    assert note == (f"note: --vocab_size=150 leaves room for 46 of the corpus's {pieces} "
                    "characters and their ## forms and none of its longer pieces: a word "
                    f"holding one of the {pieces - 46} left out (the rarest) encodes as [UNK]; "
                    f"--vocab_size={104 + pieces} keeps them all")
    # ... as it does: every character the corpus has, its ## form too where one occurs.
    notes = []
    whole = vocab_learning.learn_vocab(lines, 104 + pieces, log=notes.append)
    assert notes == [] and set(counts) <= set(whole)
    # Room for a few "##" forms alone: every word would be [UNK], so it is refused.
    with pytest.raises(vocab_learning.UserInputError, match=(
            r"^--vocab_size=110 leaves room for 6 of the corpus's \d+ characters and their ## "
            r"forms, none of them a word's first: every word would encode as \[UNK\]; pass "
            rf"--vocab_size={104 + pieces} or more")):
        vocab_learning.learn_vocab(lines, 110)


def test_alphabet_limit_keeps_the_most_frequent_characters(austen):
    lines = austen[0][:5000]
    vocab = vocab_learning.learn_vocab(lines, 300, max_alphabet=30)
    singles = {t for t in vocab[104:] if len(t) == 1}
    counts = collections.Counter(c for c in " ".join(lines).lower() if not c.isspace())
    assert len(vocab) == 300
    assert singles == {c for c, _ in counts.most_common(30)}


def test_too_large_vocab_is_one_clear_error():
    with pytest.raises(UserInputError, match=r"supports only \d+ distinct tokens.*--vocab_size="):
        vocab_learning.learn_vocab(["the cat sat on the mat"] * 10, 1000)
    with pytest.raises(UserInputError, match="leaves no room"):
        vocab_learning.learn_vocab(["the cat"], 104)
    with pytest.raises(UserInputError, match="holds no text"):
        vocab_learning.learn_vocab([], 1000)


def test_an_input_of_blank_lines_is_named(tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n\t\n", encoding="utf-8")
    with pytest.raises(UserInputError, match=f"^input {blank} holds no text \\(only blank "
                                             r"lines\); check --input and --input_format$"):
        list(vocab_learning.read_lines(str(blank)))  # (it said "the input")


def test_max_lines_and_jsonl(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"body": "first line\\nsecond line"}\n{"body": "third"}\n',
                    encoding="utf-8")
    stats = vocab_learning.CorpusStats()
    lines = list(vocab_learning.read_lines(str(path), "jsonl", "body", stats=stats))
    assert lines == ["first line", "second line", "third"]
    assert stats.lines == 3
    assert list(vocab_learning.read_lines(str(path), "jsonl", "body", max_lines=2)) == [
        "first line", "second line"]
    with pytest.raises(UserInputError, match="matches no file"):
        vocab_learning.read_lines(str(tmp_path / "missing*.txt"))
    # A JSONL file without the field fails when the reader is made, before any file is read
    # (the trainer read every earlier file first).
    (tmp_path / "a.jsonl").write_text('{"text": "read first"}\n', encoding="utf-8")
    with pytest.raises(UserInputError) as info:
        vocab_learning.read_lines([str(tmp_path / "a.jsonl"), str(path)], "jsonl")
    assert str(info.value).startswith(f"{path}: record 1 has no field 'text'")


def _run_script(*args):
    return run_script("learn_vocab.py", *args, cwd=ROOT)


def test_script_writes_the_vocab(tmp_path):
    output = tmp_path / "sub" / "vocab.txt"
    result = _run_script(f"--input={CORPUS_GLOB}", f"--output={output}", "--vocab_size=3000",
                         "--max_lines=20000")
    assert result.returncode == 0, result.stderr
    assert str(output) in result.stdout and "3000 tokens" in result.stdout
    assert "20000 lines" in result.stdout
    vocab = output.read_text(encoding="utf-8").split("\n")
    assert vocab[-1] == "" and len(vocab[:-1]) == 3000
    assert vocab[100] == "[UNK]" and "the" in vocab
    assert os.listdir(tmp_path / "sub") == ["vocab.txt"]


def test_script_too_large_vocab_fails_with_one_line(tmp_path):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("It is a truth universally acknowledged.\n\nThe end.\n", encoding="utf-8")
    output = tmp_path / "vocab.txt"
    result = _run_script(f"--input={corpus}", f"--output={output}", "--vocab_size=30522")
    assert result.returncode == 1
    lines = result.stderr.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith("error: the corpus (2 lines) supports only")
    assert "--vocab_size=" in lines[0]
    assert not output.exists()
    # A file whose name has commas, alone or beside another input (absl's list flag split
    # it into "…/Smith" and "John.txt", its space stripped: "matches no file").
    (tmp_path / "Smith, John,2024.txt").write_text("A third line.\n", encoding="utf-8")
    # Quoted as in CSV, as absl's list flag read it, it is one item too.
    for given, lines in ((f"{tmp_path}/Smith, John,2024.txt", 1),
                         (f"{tmp_path}/Smith, John,2024.txt,{corpus}", 3),
                         (f'"{tmp_path}/Smith, John,2024.txt",{corpus}', 3)):
        result = _run_script(f"--input={given}", f"--output={output}", "--vocab_size=30522")
        assert result.stderr.startswith(f"error: the corpus ({lines} line"), result.stderr


def test_out_of_range_settings_are_one_clear_error(tmp_path):
    lines = ["the cat sat on the mat"] * 10
    with pytest.raises(UserInputError) as info:
        vocab_learning.learn_vocab(lines, 120, max_alphabet=-1)
    assert str(info.value) == ("--max_alphabet=-1 must be at least 1 (or unset: every "
                               "character seen)")
    with pytest.raises(UserInputError, match=r"^--max_alphabet=0 must be at least 1 "):
        vocab_learning.learn_vocab(lines, 120, max_alphabet=0)
    with pytest.raises(UserInputError) as info:
        vocab_learning.learn_vocab(lines, 120, min_frequency=-2)
    assert str(info.value) == "--min_frequency=-2 is negative; pass 0 or more"
    (tmp_path / "c.txt").write_text("the cat\n", encoding="utf-8")
    for max_lines in (0, -1):
        with pytest.raises(UserInputError) as info:
            vocab_learning.read_lines(str(tmp_path / "c.txt"), max_lines=max_lines)
        assert str(info.value) == (f"--max_lines={max_lines} must be at least 1 (or unset: read "
                                   "every line)")


def test_a_corpus_that_is_not_utf8_is_refused_before_learning(tmp_path):
    from conftest import chinese_reviews
    path = tmp_path / "zh.txt"
    path.write_bytes("\n".join(chinese_reviews()[:20]).encode("gbk", "replace"))
    with pytest.raises(UserInputError, match=r"^input .*zh.txt is not UTF-8 text \(20 of its "
                                             r"first 20 non-blank lines are not"):
        next(vocab_learning.read_lines(str(path)))


def test_decomposed_text_learns_composed_pieces():
    # "e" + U+0301 (as macOS writes "é") is composed first, as BERT's reference and our
    # Tokenizer compose it, so the vocab holds "é" and "café", no lone combining mark.
    lines = ["Cafe\u0301 e\u0301te\u0301 cafe\u0301 the\u0301a\u0302tre"] * 5
    vocab = vocab_learning.learn_vocab(lines, 34, strip_accents=False, num_unused=0)
    assert {t for t in vocab[5:] if len(t) == 1} == set("acefhrtâé")
    assert "café" in vocab and "##é" in vocab
    assert not [t for t in vocab if "\u0301" in t or "\u0302" in t]


def test_tokenizer_splits_decomposed_text_into_the_learned_pieces(tmp_path):
    lines = ["Cafe\u0301 e\u0301te\u0301 cafe\u0301 the\u0301a\u0302tre"] * 5
    path = str(tmp_path / "vocab.txt")
    vocab_learning.write_vocab(
        vocab_learning.learn_vocab(lines, 34, strip_accents=False, num_unused=0), path)
    tokenizer = Tokenizer(path, strip_accents=False)
    ids = tokenizer.encode(["Cafe\u0301", "Café"])
    assert [tokenizer.convert_ids_to_tokens(row) for row in ids] == [["café"], ["café"]]


def test_write_vocab_replaces_only_with_overwrite_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "vocab.txt"
    path.write_text("old\n", encoding="utf-8")
    with pytest.raises(UserInputError) as info:
        vocab_learning.write_vocab(["[PAD]", "a"], str(path))
    assert str(info.value) == (f"--output={path} exists; pass --overwrite to replace it, or "
                               "another --output")
    assert path.read_text(encoding="utf-8") == "old\n"
    vocab_learning.write_vocab(["[PAD]", "a"], str(path), overwrite=True)
    assert path.read_text(encoding="utf-8") == "[PAD]\na\n"
    assert os.listdir(tmp_path) == ["vocab.txt"]

    # A file created while the vocab was learned (after the up-front check) is kept, too.
    monkeypatch.setattr(vocab_learning, "check_output", lambda *args, **kwargs: None)
    with pytest.raises(UserInputError, match=r"exists; pass --overwrite"):
        vocab_learning.write_vocab(["[PAD]", "b"], str(path))
    assert path.read_text(encoding="utf-8") == "[PAD]\na\n"
    assert os.listdir(tmp_path) == ["vocab.txt"]

    # Any failure of the write removes the temporary file and is one line naming --output.
    def fail(*args, **kwargs):
        raise tf.errors.PermissionDeniedError(None, None, "permission denied")

    monkeypatch.setattr(vocab_learning.tf.io.gfile, "rename", fail)
    with pytest.raises(UserInputError) as info:
        vocab_learning.write_vocab(["[PAD]", "c"], str(tmp_path / "new.txt"))
    assert str(info.value) == (f"--output={tmp_path}/new.txt could not be written (permission "
                               "denied); pass another --output")
    assert os.listdir(tmp_path) == ["vocab.txt"]


def test_script_checks_the_output_before_reading_the_input(tmp_path):
    # The input is JSONL read as text, which fails as soon as it is read: each output error
    # below shows that the output was checked first.
    unread = tmp_path / "docs.jsonl"
    unread.write_text('{"text": "A sentence."}\n', encoding="utf-8")
    existing = tmp_path / "vocab.txt"
    existing.write_text("old\n", encoding="utf-8")
    (tmp_path / "file").write_text("", encoding="utf-8")
    cases = [
        (existing, f"error: --output={existing} exists; pass --overwrite to replace it, or "
                   "another --output"),
        (tmp_path, f"error: --output={tmp_path} is a folder; pass a file path, e.g. "
                   f"--output={tmp_path}/vocab.txt"),
        (f"{tmp_path}/new/", f"error: --output={tmp_path}/new/ is a folder; pass a file path, "
                             f"e.g. --output={tmp_path}/new/vocab.txt"),
        (tmp_path / "file" / "sub" / "vocab.txt",
         f"error: --output={tmp_path}/file/sub/vocab.txt lies under {tmp_path}/file, which is a "
         "file, not a folder; pass another --output"),
        ("", "error: --output is empty (is a shell variable in it unset?); pass it a value"),
    ]
    for output, expected in cases:
        result = _run_script(f"--input={unread}", f"--output={output}", "--vocab_size=200")
        assert result.returncode == 1
        assert result.stderr.strip().splitlines() == [expected]
    # A stray comma in a list flag: said so (it read "--input is empty").
    result = _run_script(f"--input={unread},", f"--output={tmp_path}/v.txt", "--vocab_size=200")
    assert (result.returncode, result.stderr.strip()) == (
        1, "error: --input has an empty item (a comma with nothing after it, or two "
           "together?); pass the items without it")
    # A folder no file can be created in (/proc, even for root) is refused before too.
    result = _run_script(f"--input={unread}", "--output=/proc/vocab.txt", "--vocab_size=200")
    assert result.returncode == 1
    assert re.fullmatch(r"error: --output=/proc/vocab.txt cannot be written \(/proc: [^()]+\); "
                        "pass another --output", result.stderr.strip())
    assert existing.read_text(encoding="utf-8") == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["docs.jsonl", "file", "vocab.txt"]


def test_script_never_overwrites_an_input_and_replaces_an_output_with_overwrite(tmp_path):
    corpus = tmp_path / "corpus" / "c.txt"
    corpus.parent.mkdir()
    text = "\n".join(corpus_lines(2000)) + "\n"
    corpus.write_text(text, encoding="utf-8")
    # The input as a folder, the output as a relative path to the same file.
    relative = os.path.relpath(corpus, ROOT)
    result = _run_script(f"--input={corpus.parent}", f"--output={relative}", "--vocab_size=500",
                         "--overwrite")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: --output={relative} is one of the --input files; pass another --output"]
    assert corpus.read_text(encoding="utf-8") == text

    output = tmp_path / "vocab.txt"
    output.write_text("old\n", encoding="utf-8")
    result = _run_script(f"--input={corpus}", f"--output={output}", "--vocab_size=500",
                         "--overwrite")
    assert result.returncode == 0, result.stderr
    assert len(output.read_text(encoding="utf-8").split("\n")) == 501
    assert sorted(os.listdir(tmp_path)) == ["corpus", "vocab.txt"]


def test_script_bad_number_is_one_line(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat\n", encoding="utf-8")
    result = _run_script(f"--input={corpus}", f"--output={tmp_path}/vocab.txt",
                         "--vocab_size=200", "--max_alphabet=-1")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: --max_alphabet=-1 must be at least 1 (or unset: every character seen)"]
    assert sorted(os.listdir(tmp_path)) == ["c.txt"]


def test_deterministic_for_characters_newer_than_pythons_unicode():
    # Emoji of Unicode 15 (unassigned in Python 3.11's tables, symbols in RE2's, which the
    # Tokenizer reads) continue words too: their "##" forms are declared up front as
    # Python's are, or the trainer numbers them in hash-map order and the ties between
    # equally frequent merges come out differently from one call to the next.
    emoji = [chr(cp) for cp in (0x1FA75, 0x1FA76, 0x1FA77, 0x1FA87, 0x1FA88, 0x1FAAD,
                                0x1FAAE, 0x1FAAF, 0x1FABB, 0x1FABC, 0x1FAE8, 0x1FAF7)]
    lines = [" ".join(a + e for a, e in zip("abcdefghijkl", emoji))] * 5
    vocabs = {tuple(vocab_learning.learn_vocab(lines, 5 + 12 * 3 + 6, num_unused=0))
              for _ in range(6)}
    assert len(vocabs) == 1
    vocab = vocabs.pop()
    assert vocab[29:] == tuple(["##" + c for c in "abcdef"] + ["##" + e for e in emoji])


def test_cjk_extension_e_stands_alone_as_in_the_tokenizer(tmp_path):
    # tokenizers' CJK blocks start Extension E 256 code points late (U+2B920, not BERT's
    # U+2B820): those ideographs are split off all the same, so no piece joins them.
    word = "\U0002B820\U0002B821"
    vocab = vocab_learning.learn_vocab([f"{word} {word} 一二 一二"] * 5, 9, num_unused=0)
    assert vocab[5:] == ["一", "二", "\U0002B820", "\U0002B821"]
    path = tmp_path / "vocab.txt"
    vocab_learning.write_vocab(vocab, str(path))
    tokenizer = Tokenizer(str(path))
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode([word])[0]) == list(word)


def _words_corpus(count: int) -> list[str]:
    """Lines of distinct random ten-letter words: the trainer's Rust part takes seconds on
    them (it counts and merges pieces), while reading them takes a moment."""
    import random
    draw = random.Random(0)
    return [" ".join("".join(draw.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(10))
                     for _ in range(20)) for _ in range(count)]


def _when_the_trainer_runs(act, timeout: float = 60.0):
    """A thread that calls `act` once the vocab trainer's thread exists (its Rust code is
    then running or about to), or after `timeout` seconds."""
    import threading
    import time

    def wait():
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(t.name == "electra-learn-vocab" for t in threading.enumerate()):
                act()
                return
            time.sleep(0.01)

    waiting = threading.Thread(target=wait, daemon=True)
    waiting.start()
    return waiting


def test_ctrl_c_stops_learning_while_the_trainer_runs():
    """Ctrl-C is answered while the trainer's Rust code runs: a signal's handler runs in the
    main thread between Python instructions, so with the trainer there it waited until
    training ended (8 to 14 s of a 45 MB corpus's 25, over a minute on 350 MB)."""
    import _thread
    import threading
    lines = _words_corpus(3000)
    waiting = _when_the_trainer_runs(_thread.interrupt_main)
    with pytest.raises(KeyboardInterrupt):
        vocab_learning.learn_vocab(iter(lines), 20000)
        waiting.join()  # (no KeyboardInterrupt came: the trainer ran in this thread)
    trainers = [t for t in threading.enumerate() if t.name == "electra-learn-vocab"]
    assert trainers, "the KeyboardInterrupt came after training had ended"
    trainers[0].join()  # (it goes on to its end; it writes nothing)


def test_script_sigterm_while_the_trainer_runs_is_one_line_and_nothing_written(tmp_path):
    """SIGTERM during the trainer's Rust part: the one line at once, exit code 143 and no
    vocab (it exited without a word; with the trainer in a thread of its own, the
    interpreter's exit then aborted in it with a Rust panic's backtrace)."""
    import subprocess
    import sys
    corpus = tmp_path / "words.txt"
    corpus.write_text("\n".join(_words_corpus(10000)) + "\n", encoding="utf-8")
    output = tmp_path / "vocab.txt"
    # The script as its own process, with a thread that sends the SIGTERM once the
    # trainer's thread exists.
    code = ("import os, signal, sys, runpy; sys.path.insert(0, 'tests'); "
            "import test_learn_vocab as t; "
            "t._when_the_trainer_runs(lambda: os.kill(os.getpid(), signal.SIGTERM)); "
            "sys.argv = ['scripts/learn_vocab.py'] + sys.argv[1:]; "
            "runpy.run_path('scripts/learn_vocab.py', run_name='__main__')")
    result = subprocess.run(
        [sys.executable, "-c", code, f"--input={corpus}", f"--output={output}",
         "--vocab_size=30000"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert (result.returncode, result.stderr.splitlines()[-1:]) == (
        143, ["terminated (SIGTERM); nothing was written: rerun the command to start "
              "again"]), result.stderr
    assert "panicked" not in result.stderr and "Traceback" not in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["words.txt"]
