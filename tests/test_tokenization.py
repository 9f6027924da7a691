"""Token ids equal BERT's reference tokenizer (transformers' slow BertTokenizer)."""

import pytest
from transformers import BertTokenizer

from conftest import CHINESE_VOCAB, UNCASED_VOCAB, chinese_reviews, corpus_lines
from electra_tf.errors import UserInputError
from electra_tf.tokenization import Tokenizer

# Each line exercises a place where a naive port goes wrong: accents, NFKC-only forms
# (ligatures, full-width, "…", roman numerals, ß), Turkish dotted I, Greek capital sigma
# (context-dependent lower-casing), CJK and kana, Hangul, control and format characters
# (deleted, joining their neighbours), U+FFFD, private use, emoji, long words.
HARD_TEXT = [
    "Héllo Wörld! naïve café — “quotes” ‘single’ … ½ ﬁne ﬂow Ⅻ ＡＢＣ１２３ ß İstanbul",
    "ΣΑΣ ΌΣΟΣ σας Ǆemo ǅ ǆ ÅÄÖ åäö Ñ ñ Ç ç Œ œ Æ æ Ø ø",
    "中文测试，你好！日本語のテキスト 한국어 텍스트",
    "ctrl\x00char\x07here\u200btab\tnew\nline\r\u00a0nbsp\u3000wide",
    "\ufffdbad\ufffd \ue000private\U000e0001tag",
    "hello\u0378world \u03a0\u00fc\u0378 \U0001fffe\U000effff.",  # unassigned (Cn) too
    "emoji 😀👍🏽 and math ∑∫≈ $100.00 e-mail@x.com http://a.b/c?d=e don't",
    "a" * 99 + " " + "b" * 100 + " " + "c" * 101,
    "",
]


def _reference_ids(reference, texts):
    return [reference.convert_tokens_to_ids(reference.tokenize(t)) for t in texts]


@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_english_parity_with_reference(lower_case):
    texts = corpus_lines(limit=6000) + HARD_TEXT
    reference = BertTokenizer(UNCASED_VOCAB, do_lower_case=lower_case)
    ours = Tokenizer(UNCASED_VOCAB, lower_case=lower_case).encode(texts)
    expected = _reference_ids(reference, texts)
    mismatches = [(t, e, o) for t, e, o in zip(texts, expected, ours) if e != o]
    assert not mismatches, mismatches[:3]
    assert sum(map(len, ours)) > 100_000


@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_chinese_parity_with_reference(lower_case):
    texts = chinese_reviews() + HARD_TEXT
    reference = BertTokenizer(CHINESE_VOCAB, do_lower_case=lower_case)
    ours = Tokenizer(CHINESE_VOCAB, lower_case=lower_case).encode(texts)
    assert ours == _reference_ids(reference, texts)


def test_known_ids_and_special_tokens(uncased_tokenizer):
    tok = uncased_tokenizer
    assert tok.vocab_size == 30522
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
    assert tok.encode(["Héllo, world!"]) == [[7592, 1010, 2088, 999]]
    # CJK characters are split one per token even without spaces.
    zh = Tokenizer(CHINESE_VOCAB).encode(["中文"])[0]
    assert Tokenizer(CHINESE_VOCAB).convert_ids_to_tokens(zh) == ["中", "文"]


def test_strip_accents_independent_of_case():
    keep = Tokenizer(UNCASED_VOCAB, lower_case=True, strip_accents=False)
    strip = Tokenizer(UNCASED_VOCAB, lower_case=True)
    assert keep.encode(["Café"]) != strip.encode(["Café"])
    assert strip.convert_ids_to_tokens(strip.encode(["Café"])[0]) == ["cafe"]
    reference = BertTokenizer(UNCASED_VOCAB, do_lower_case=True, strip_accents=False)
    assert keep.encode(HARD_TEXT) == _reference_ids(reference, HARD_TEXT)


def test_decode_joins_word_pieces(uncased_tokenizer):
    tok = uncased_tokenizer
    ids = tok.encode(["Unaffable persons, unquestionably."])[0]
    assert "##" in "".join(tok.convert_ids_to_tokens(ids))
    assert tok.decode(ids) == "unaffable persons , unquestionably ."
    assert tok.decode([tok.cls_id] + ids + [tok.sep_id], skip_special_tokens=True) == \
        "unaffable persons , unquestionably ."


def test_missing_or_bad_vocab_is_one_clear_error(tmp_path):
    with pytest.raises(UserInputError, match="nope.txt does not exist"):
        Tokenizer(str(tmp_path / "nope.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\nworld\n")
    with pytest.raises(UserInputError, match=r"lacks the special tokens \[PAD\], \[UNK\]"):
        Tokenizer(str(bad))
    # A model's folder where its vocab file was meant.
    with pytest.raises(UserInputError, match=rf"^vocab file {tmp_path} is a folder; pass the "
                                             r"vocab file in it \(e.g. vocab.txt\)$"):
        Tokenizer(str(tmp_path))


# Unicode separators other than the ASCII ones (Z*): no-break spaces, ogham and en/em
# spaces, the line and paragraph separators, the ideographic space.
SEPARATORS = "\u00a0\u1680\u2000\u2007\u200a\u2028\u2029\u202f\u205f\u3000"


@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_unicode_separators_split_words_as_the_reference(lower_case):
    # BERT's Chinese vocab holds "\u2028" and "##\u2028": not splitting there glued words.
    texts = ["line\u2028sep", "para\u2029sep"] + [f"one{c}two{c}{c}3" for c in SEPARATORS]
    for vocab in (UNCASED_VOCAB, CHINESE_VOCAB):
        ours = Tokenizer(vocab, lower_case=lower_case)
        reference = BertTokenizer(vocab, do_lower_case=lower_case)
        assert ours.encode(texts) == _reference_ids(reference, texts)
    zh = Tokenizer(CHINESE_VOCAB)
    assert zh.convert_ids_to_tokens(zh.encode(["line\u2028sep"])[0]) == ["line", "sep"]


def test_decomposed_text_is_composed_as_the_reference(tmp_path):
    # macOS and some Vietnamese text write "é" as "e" + U+0301; BERT's reference composes
    # (NFC) before lower-casing and accent stripping, so a cased or accent-keeping vocab
    # finds "Café", not "Cafe" and a lone mark. Hangul jamo compose into syllables.
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join([
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "Café", "café", "Cafe", "cafe", "##\u0301",
        "\u0301", "Tiếng", "tiếng", "Tie", "tie", "##\u0302", "tieng", "Tieng", "가", "\u1100",
        "##\u1161", "e", "##e"]) + "\n", encoding="utf-8")
    texts = ["Cafe\u0301 cafe\u0301 Café", "Tie\u0302\u0301ng tie\u0302\u0301ng", "\u1100\u1161",
             "e\u0301"]
    for lower_case, strip_accents in [(False, None), (True, False), (True, None), (False, True)]:
        ours = Tokenizer(str(path), lower_case=lower_case, strip_accents=strip_accents)
        reference = BertTokenizer(str(path), do_lower_case=lower_case,
                                  strip_accents=strip_accents)
        assert ours.encode(texts) == _reference_ids(reference, texts), (lower_case,
                                                                         strip_accents)
    cased = Tokenizer(str(path), lower_case=False)
    assert [cased.convert_ids_to_tokens(row) for row in cased.encode(texts[:3])] == [
        ["Café", "café", "Café"], ["Tiếng", "tiếng"], ["가"]]


LONG_WORDS = [
    "ประเทศไทยมีชื่ออย่างเป็นทางการว่าราชอาณาจักรไทย",  # 47 characters, 141 bytes
    "ประเทศไทยมีชื่ออย่างเป็นทางการว่าราชอาณาจักรไทย" * 3,
    # 40 characters (120 bytes): pieces; 104: [UNK].
    "テキスト" * 10, "テキスト" * 26,
    "ひらがなのぶん" * 6, "é" * 60, "é" * 101,
    "a" * 100, "a" * 101, "b" * 450, "😀" * 26 + " 😀",
    "plain words, then " + "x" * 150 + " and " + "テキスト" * 10 + ", then more",
]


@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_words_are_unknown_over_100_characters_not_100_bytes(lower_case):
    """tensorflow-text counts a word's bytes: a word of 34-100 multi-byte characters (a
    spaceless run of Thai or kana) was one [UNK]; transformers counts characters."""
    import tensorflow as tf
    for vocab in (UNCASED_VOCAB, CHINESE_VOCAB):
        ours = Tokenizer(vocab, lower_case=lower_case)
        expected = _reference_ids(BertTokenizer(vocab, do_lower_case=lower_case), LONG_WORDS)
        assert ours.encode(LONG_WORDS) == expected
        # In a graph (tf.data, serving) too, and beside texts without a long word.
        graph = tf.function(ours.tokenize)(tf.constant(LONG_WORDS + ["short text"]))
        assert graph.to_list()[:-1] == expected
    tokenizer = Tokenizer(CHINESE_VOCAB, lower_case=lower_case)
    ids = tokenizer.encode(LONG_WORDS[2:4])
    assert len(ids[0]) > 1 and tokenizer.unk_id not in ids[0] and ids[1] == [tokenizer.unk_id]


def test_encode_flat_in_calls_of_a_few_texts_is_one_calls(monkeypatch):
    """Many texts are tokenized _ENCODE_TEXTS at a time (TensorFlow's intermediates of one
    call over 300,000 took a gigabyte): the flat ids and row splits are one call's, empty
    texts and a word over the long-word limit included."""
    from electra_tf import tokenization
    tok = tokenization.Tokenizer(UNCASED_VOCAB)
    texts = ["Emma Woodhouse, handsome, clever", "", "and rich", "x" * 150 + " y", "a b c",
             "", "with a comfortable home", "and happy disposition"]
    whole = tok.encode_flat(texts)
    monkeypatch.setattr(tokenization, "_ENCODE_TEXTS", 3)
    parts = tok.encode_flat(texts)
    assert [p.tolist() for p in parts] == [w.tolist() for w in whole]
    assert parts[1].dtype == whole[1].dtype and len(parts[1]) == len(texts) + 1
