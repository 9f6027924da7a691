"""Evaluation metrics of the fine-tuning tasks, on plain numpy arrays / Python lists.

Sentence tasks: accuracy, F1 (binary, of the positive class; macro over classes),
Matthews correlation (CoLA; 0 where undefined, as scikit-learn's), Pearson and Spearman
correlation (STS-B; NaN where undefined, as scipy's). Tagging: span precision/recall/F1 with
conlleval's chunk rules (IOB1, IOB2/BIO, IOE, IOBES tags; a tag without a prefix is a chunk of
its own type) and token accuracy.

Extractive QA: exact match and F1 (the maximum over the gold answers) and SQuAD 2.0's best
no-answer threshold, in one of two styles, picked for each dev set by `qa_style`:

  "squad": exactly the official SQuAD v1.1 / v2.0 scripts' (lower case; ASCII punctuation
    and the articles a, an, the removed; words split on whitespace; F1 of the words both
    answers hold). Used unless most answers are Chinese: whitespace-split Chinese scores
    0 or 1 (a sentence is one word) and keeps full-width punctuation.
  "cmrc2018": the CMRC 2018 script's (also DRCD's), used when at least half of the
    answered questions have a gold answer holding a CJK ideograph: lower case; Unicode
    punctuation removed (the script removes a list of 33 Chinese and ASCII marks); every
    CJK character a token (BERT's CJK blocks; the script's are U+4E00-U+9FA5 alone), other
    text split on whitespace (the script uses NLTK's English tokenizer); F1 of the longest
    run of tokens both answers hold; exact match of the lower-cased text without
    punctuation (spaces count, as in the script).
"""

import collections
import math
import re
import string

import numpy as np

from electra_tf.tokenization import is_cjk, is_punctuation, is_whitespace


# ------------------------------------------------------------------------------ sentences


def accuracy(labels, predictions) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float(np.mean(labels == predictions)) if labels.size else 0.0


def _f1_of(labels, predictions, positive) -> float:
    tp = np.sum((predictions == positive) & (labels == positive))
    fp = np.sum((predictions == positive) & (labels != positive))
    fn = np.sum((predictions != positive) & (labels == positive))
    return float(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else 0.0


def f1(labels, predictions, positive=1) -> float:
    """F1 of the class `positive` (GLUE's MRPC and QQP F1)."""
    return _f1_of(np.asarray(labels), np.asarray(predictions), positive)


def macro_f1(labels, predictions) -> float:
    """The unweighted mean of the F1 of every class that is a label or a prediction
    (scikit-learn's average="macro"; a class that is neither has no F1 to average)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes = np.union1d(labels, predictions)
    return float(np.mean([_f1_of(labels, predictions, c) for c in classes]))


def matthews_corrcoef(labels, predictions) -> float:
    """Matthews correlation (multi-class form, Gorodkin 2004; binary MCC for 2 classes);
    0 when it is undefined (a constant prediction or label)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes = np.union1d(labels, predictions)
    index = {c: i for i, c in enumerate(classes)}
    confusion = np.zeros((len(classes), len(classes)), dtype=np.float64)
    for y, p in zip(labels, predictions):
        confusion[index[y], index[p]] += 1
    t, p = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, n = np.trace(confusion), confusion.sum()
    denominator = np.sqrt((n * n - p @ p) * (n * n - t @ t))
    return float((correct * n - t @ p) / denominator) if denominator else 0.0


def pearson(x, y) -> float:
    """Pearson's r; NaN where it is undefined, a constant series (as scipy's pearsonr,
    which GLUE's evaluation uses): a regressor that predicts one value has no correlation,
    and 0 would read as a (poor) score."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size == 0 or (x == x[0]).all() or (y == y[0]).all():  # (as scipy tests it: the
        return math.nan  # centred sums of a constant float64 series need not be 0)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    return float(x @ y / denominator) if denominator else math.nan


def rank(values) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank (scipy's rankdata 'average')."""
    values = np.asarray(values)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), np.float64)
    sorted_values = values[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(x, y) -> float:
    """Spearman's rho: Pearson's r of the ranks (NaN for a constant series)."""
    return pearson(rank(x), rank(y))


# ------------------------------------------------------------------------------ tagging


# A chunk's prefixes: B/I/E/S (IOBES), BILOU's L/U and BMES's M (Chinese NER files: Resume,
# Weibo, MSRA), read as E, S and I.
_PREFIXES = "BIESLUM"


def _has_prefix(tag: str) -> bool:
    return len(tag) > 2 and tag[1] in "-_" and tag[0] in _PREFIXES


def chunk_type(tag: str) -> str | None:
    """The type of a prefixed chunk tag ('PER' of B-PER, I_PER, M-PER, U-PER), else None."""
    return tag[2:] if _has_prefix(tag) else None


def _split_tag(tag: str) -> tuple[str, str]:
    """('B', 'PER') from 'B-PER'; ('O', '') for 'O'; a tag with no prefix is its own type."""
    if tag == "O":
        return "O", ""
    if _has_prefix(tag):
        return {"L": "E", "U": "S", "M": "I"}.get(tag[0], tag[0]), tag[2:]
    return "S", tag  # e.g. a POS tag: every token is a one-token chunk


def _chunk_ends(prev_prefix, prefix, prev_type, type_) -> bool:
    # conlleval's endOfChunk.
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix == "B" and prefix in ("B", "S", "O"):
        return True
    if prev_prefix == "I" and prefix in ("B", "S", "O"):
        return True
    return prev_prefix not in ("O", "") and prev_type != type_


def _chunk_starts(prev_prefix, prefix, prev_type, type_) -> bool:
    # conlleval's startOfChunk.
    if prefix in ("B", "S"):
        return True
    if prev_prefix in ("E", "S", "O", "") and prefix in ("E", "I"):
        return True
    return prefix != "O" and prev_type != type_


TAG_SCHEMES = ("BIO", "IOB1", "BIOES", "BMES", "IOE1")


def tag_scheme(sentences_tags) -> str | None:
    """How tagged sentences encode their chunks: None for token-level tags (a tag other than
    O without a B/I/E/S/L/U/M prefix, e.g. POS); "BMES" if any tag is M- (BIOES with M- for
    I-) and none I-; "IOE1" if no tag marks beginnings or singles (no B-, S-, U-), chunks end
    with I- and E- never ends a chunk that no chunk of its type follows (IOB1 mirrored; IOE2,
    whose every chunk ends with E-, is BIOES spelt without beginnings: `tag_spelling`);
    "BIOES" if any tag marks ends or singles (E-, S-, L-, U-); "IOB1" if chunks start with I-
    and B- never starts a chunk that does not follow one of its type (CoNLL-2003's original
    files); else "BIO" (also when a BIO file has a stray chunk starting with I-)."""
    starts_with_i = b_alone = ends = with_i = with_m = False
    begins = ends_with_i = e_alone = False
    for tags in sentences_tags:
        prev_prefix, prev_type = "O", ""
        for tag in tags:
            if tag != "O" and not _has_prefix(tag):
                return None
            prefix, type_ = _split_tag(tag)
            ends |= prefix in ("E", "S")
            with_i |= tag[0] == "I"
            with_m |= tag[0] == "M"
            if prefix == "I" and _chunk_starts(prev_prefix, prefix, prev_type, type_):
                starts_with_i = True
            if prefix == "B" and (prev_prefix == "O" or prev_type != type_):
                b_alone = True
            begins |= prefix in ("B", "S")
            if prev_prefix in ("I", "E") and _chunk_ends(prev_prefix, prefix, prev_type, type_):
                ends_with_i |= prev_prefix == "I"
                e_alone |= prev_prefix == "E" and (prefix == "O" or type_ != prev_type)
            prev_prefix, prev_type = prefix, type_
        if prev_prefix in ("I", "E"):  # the sentence's last chunk
            ends_with_i |= prev_prefix == "I"
            e_alone |= prev_prefix == "E"
    if with_m and not with_i:
        return "BMES"
    if ends and not begins and ends_with_i and not e_alone:
        return "IOE1"
    if ends or with_m:
        return "BIOES"
    return "IOB1" if starts_with_i and not b_alone else "BIO"


def retag(tags: list[str], scheme: str) -> list[str]:
    """`tags` re-encoded in `scheme` (TAG_SCHEMES) with the chunks conlleval reads in them
    (`chunks(retag(t, s)) == chunks(t)`, well-formed or not). The official fine-tuning
    trains span tags as BIOES; its predictions go back to the file's scheme this way.
    Tags come out spelt B-/I-/E-/S- (B-/M-/E-/S- for BMES; a file's B_X, L-X or U-X are
    read, not written)."""
    parts = [_split_tag(t) for t in tags] + [("O", "")]
    out, prev_prefix, prev_type = [], "O", ""
    for i, (prefix, type_) in enumerate(parts[:-1]):
        if prefix == "O":
            out.append("O")
        else:
            starts = _chunk_starts(prev_prefix, prefix, prev_type, type_)
            ends = _chunk_ends(prefix, *parts[i + 1][:1], type_, parts[i + 1][1])
            if scheme in ("BIOES", "BMES"):
                inside = "M" if scheme == "BMES" else "I"
                mark = ("S" if ends else "B") if starts else ("E" if ends else inside)
            elif scheme == "BIO":
                mark = "B" if starts else "I"
            elif scheme == "IOE1":  # E only where a chunk of its type follows
                following = parts[i + 1]
                mark = "E" if ends and following[0] != "O" and following[1] == type_ else "I"
            else:  # IOB1: B only where a chunk follows one of its type
                mark = "B" if starts and prev_prefix != "O" and prev_type == type_ else "I"
            out.append(f"{mark}-{type_}")
        prev_prefix, prev_type = prefix, type_
    return out


def tag_spelling(sentences_tags) -> dict | None:
    """How a file spells the prefixes that retag writes as B-/E-/S- with '-', where it
    spells them otherwise (None: as retag does): its separator ('_' when every prefixed tag
    has it), BILOU's L and U for E and S, and IOE's chunks (E- ends them; no B- or S-), whose
    B and S are written I and E. Predictions are written in it (`respell`), so that they
    compare with the file's tags token by token."""
    letters, separators = set(), set()
    for tags in sentences_tags:
        for tag in tags:
            if tag != "O" and _has_prefix(tag):
                letters.add(tag[0])
                separators.add(tag[1])
    spelling = {"separator": "_" if separators == {"_"} else "-",
                "end": "L" if "L" in letters and "E" not in letters else "E",
                "single": "U" if "U" in letters and "S" not in letters else "S",
                # (IOE: chunks marked by their ends; a file of I- alone is IOB1's, whose B-
                # between two chunks of a type must stay)
                "begins": bool(letters & set("BSU")) or not letters & set("EL")}
    return None if spelling == {"separator": "-", "end": "E", "single": "S",
                                "begins": True} else spelling


def files_scheme(train_tags, dev_tags) -> tuple[str | None, dict | None]:
    """(scheme, spelling) predictions of span tags are written in: the training file's
    (`tag_scheme`, `tag_spelling`), widened only where dev's tags show what training leaves
    open: BIO/IOB1 training with ends or singles (E-, S-) in dev is BIOES (or BMES), IOB1
    training (I- alone: no chunk follows one of its type) whose dev has IOE1's E- is IOE1, and
    BIOES training without I- whose dev has M- is BMES. Anything else in dev (a stray I- beside
    BMES) changes nothing. (None, None): training's tags are not chunk tags."""
    scheme = tag_scheme(train_tags)
    if scheme is None:
        return None, None
    both = train_tags + dev_tags
    widened = tag_scheme(both)
    if (scheme in ("BIO", "IOB1") and widened in ("BIOES", "BMES")) or (
            scheme == "IOB1" and widened == "IOE1") or (
            scheme == "BIOES" and widened == "BMES"):
        return widened, tag_spelling(both)
    return scheme, tag_spelling(train_tags)


def scheme_prefixes(scheme: str, spelling: dict | None) -> tuple[set, str]:
    """The prefix letters and separator a file of `scheme` (TAG_SCHEMES) spelt so
    (`tag_spelling`) writes its chunk tags with: predictions come out in them."""
    letters = {"BIO": "BI", "IOB1": "BI", "BIOES": "BIES", "BMES": "BMES",
               "IOE1": "IE"}[scheme]
    spelt = respell([f"{c}-X" for c in letters], spelling)
    return {t[0] for t in spelt}, spelt[0][1]


def respell(tags: list[str], spelling: dict | None) -> list[str]:
    """retag's B-/I-/E-/S-/M- tags in a file's `spelling` (tag_spelling; None: as they are)."""
    if spelling is None:
        return list(tags)
    out = []
    for tag in tags:
        if tag == "O":
            out.append(tag)
            continue
        prefix = tag[0]
        if not spelling["begins"]:
            prefix = {"B": "I", "S": "E"}.get(prefix, prefix)
        prefix = {"E": spelling["end"], "S": spelling["single"]}.get(prefix, prefix)
        out.append(f"{prefix}{spelling['separator']}{tag[2:]}")
    return out


def chunks(tags: list[str]) -> set[tuple[str, int, int]]:
    """The chunks (type, first, last token index) of one sentence's tags, as conlleval reads
    them (so IOB1, where a chunk may start with I-, works too)."""
    found, start = set(), None
    prev_prefix, prev_type = "O", ""
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, type_ = _split_tag(tag)
        if start is not None and _chunk_ends(prev_prefix, prefix, prev_type, type_):
            found.add((prev_type, start, i - 1))
            start = None
        if _chunk_starts(prev_prefix, prefix, prev_type, type_):
            start = i
        prev_prefix, prev_type = prefix, type_
    return found


def typeless(sentences_tags) -> bool:
    """Whether tags are chunk prefixes without a type: every tag but O a bare B, I, E, S,
    L, U or M (Chinese word segmentation's B/M/E/S, or b/m/e/s as snownlp writes them; a
    chunker's B/I/O). conlleval reads a bare prefix as a chunk of an empty type; they are
    scored as such (span_scores). Only a whole file of them is: a POS tagset's M (CTB's
    measure word) among its other tags is a tag of its own."""
    tags = {t for tags in sentences_tags for t in tags} - {"O"}
    return bool(tags) and (tags <= set(_PREFIXES) or tags <= set(_PREFIXES.lower()))


def _typed(tags: list[str]) -> list[str]:
    """Typeless chunk tags (`typeless`) as prefixed tags of one type."""
    return [f"{t.upper()}-*" if len(t) == 1 and t.upper() in _PREFIXES and t != "O" else t
            for t in tags]


def span_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict:
    """Span-level precision, recall and F1 (micro, over all chunks) and token accuracy.
    Chunks are read as conlleval reads them (`chunks`), also where the gold tags are
    `typeless` (B/M/E/S word segmentation: words, not tokens, are scored)."""
    correct = n_gold = n_pred = 0
    right_tokens = total_tokens = 0
    read = _typed if typeless(gold) else list
    for g, p in zip(gold, predicted):
        if len(g) != len(p):
            raise ValueError(f"a sentence has {len(g)} gold tags but {len(p)} predicted")
        gold_chunks, pred_chunks = chunks(read(g)), chunks(read(p))
        correct += len(gold_chunks & pred_chunks)
        n_gold += len(gold_chunks)
        n_pred += len(pred_chunks)
        right_tokens += sum(a == b for a, b in zip(g, p))
        total_tokens += len(g)
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"f1": f, "precision": precision, "recall": recall,
            "accuracy": right_tokens / total_tokens if total_tokens else 0.0}


# ------------------------------------------------------------------------------ SQuAD


# By task kind, raised with each change to its scoring that can change a score already
# recorded: a trial kept from an earlier run that was scored by an older one (its
# trial.json's scores_version; 1 where none is recorded) is named in a note. Tagging 2: the
# fixes to bare B/M/E/S tags' F1 and BILOU accuracy (2026-11/12); qa 2: SQuAD's best
# threshold and a "" answer text counted answerable, as evaluate-v2.0 does (2026-12-07).
SCORES_VERSIONS = {"classification": 1, "regression": 1, "tagging": 2, "qa": 2}

QA_STYLES = ("squad", "cmrc2018")


def normalize_answer(text: str) -> str:
    """The official SQuAD evaluation's normalisation."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


# CMRC 2018's script removes the full-width tilde, which Unicode calls a symbol (Sm).
_CMRC_PUNCTUATION = "\uff5e"


def _cmrc_text(text: str) -> str:
    """CMRC 2018's remove_punctuation (with Unicode's punctuation)."""
    return "".join(ch for ch in text.lower().strip()
                   if not is_punctuation(ch) and ch not in _CMRC_PUNCTUATION)


def cmrc_tokens(text: str) -> list[str]:
    """The CMRC 2018 script's tokens of an answer (its `mixed_segmentation` with
    punctuation removed): lower case, Unicode punctuation dropped (joining what is around
    it, as SQuAD's normalisation does), each CJK character a token, the rest split on
    whitespace (the script splits it with NLTK's English tokenizer)."""
    tokens, word = [], []
    for ch in _cmrc_text(text):
        if is_cjk(ord(ch)) or is_whitespace(ch):
            if word:
                tokens.append("".join(word))
                word = []
            if is_cjk(ord(ch)):
                tokens.append(ch)
        else:
            word.append(ch)
    if word:
        tokens.append("".join(word))
    return tokens


def _tokens(text: str, style: str) -> list[str]:
    return cmrc_tokens(text) if style == "cmrc2018" else normalize_answer(text).split()


def exact_match(prediction: str, gold: str, style: str = "squad") -> float:
    """1 if the answers are equal once normalised (`style`: see the module's docstring)."""
    if style == "cmrc2018":
        return float(_cmrc_text(prediction) == _cmrc_text(gold))
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _longest_common_run(a: list[str], b: list[str]) -> int:
    """The length of the longest run of tokens that is in both (CMRC 2018's find_lcs)."""
    best, previous = 0, [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def token_f1(prediction: str, gold: str, style: str = "squad",
             empty_matches: bool = True) -> float:
    """The official token F1: of the words both hold ("squad"), or of the longest run of
    tokens both hold ("cmrc2018"). An answer with no tokens scores 1 against another with
    none if `empty_matches` (SQuAD 2.0's, where "" is the answer to an unanswerable
    question), else 0 (SQuAD v1.1's and CMRC 2018's scripts: no token in common)."""
    pred_tokens, gold_tokens = _tokens(prediction, style), _tokens(gold, style)
    if not pred_tokens or not gold_tokens:
        return float(empty_matches and pred_tokens == gold_tokens)
    if style == "cmrc2018":
        same = _longest_common_run(pred_tokens, gold_tokens)
    else:
        same = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def qa_style(golds: dict[str, list[str]]) -> str:
    """"cmrc2018" if at least half of the questions with an answer have a gold answer
    holding a CJK ideograph, else "squad" (so an English set with a few Chinese names keeps
    the official SQuAD scores exactly)."""
    answered = [answers for answers in golds.values() if any(a.strip() for a in answers)]
    chinese = sum(any(is_cjk(ord(ch)) for a in answers for ch in a) for answers in answered)
    return "cmrc2018" if answered and 2 * chinese >= len(answered) else "squad"


def squad_scores(golds: dict[str, list[str]], predictions: dict[str, str],
                 no_answer_probs: dict[str, float] | None = None,
                 no_answer_threshold: float = 0.5, style: str | None = None) -> dict:
    """EM and F1 in percent over the questions in `golds` ({id: gold answer texts}; an
    unanswerable question has none, [], as in the data: the official v2.0 script tells them
    by that, so a question whose answer text is "" is answerable). A question with no
    prediction scores 0. `style`: "squad" or "cmrc2018" (see the module's docstring);
    None: `qa_style(golds)`.

    A set with an unanswerable question, or scored with `no_answer_probs`, is scored as the
    official evaluate-v2.0 script scores it, any other as v1.1's script (or CMRC 2018's).
    They differ only where an answer normalises to nothing (only articles or punctuation):
    v2.0 drops such a gold answer (a question left with none is scored against "", though
    it still counts as answerable, as its has-answer split counts it), and v1.1 keeps it,
    with F1 0 where either answer has no token. The v2.0 scores add each question group's
    (`has_answer_exact`, `has_answer_f1`; `no_answer_exact`, `no_answer_f1`), where the set
    has one.

    With `no_answer_probs` ({id: probability of no answer}), as evaluate-v2.0 given them:
    `exact` and `f1` count a question whose probability exceeds `no_answer_threshold` as
    answered "" (right only if it has no answer), and `best_exact`/`best_f1` are the scores
    at the best threshold (its find_best_thresh)."""
    style = style or qa_style(golds)
    if style not in QA_STYLES:
        raise ValueError(f"style={style!r} is not one of {', '.join(QA_STYLES)}")
    has_answer = [q for q, a in golds.items() if a]
    no_answer = [q for q, a in golds.items() if not a]
    v2 = no_answer_probs is not None or bool(no_answer)
    em_scores, f1_scores = {}, {}
    for qid, answers in golds.items():
        if v2:
            answers = [a for a in answers if _tokens(a, style)] or [""]
        prediction = predictions.get(qid)
        if prediction is None:
            em_scores[qid] = f1_scores[qid] = 0.0
            continue
        em_scores[qid] = max(exact_match(prediction, a, style) for a in answers)
        f1_scores[qid] = max(token_f1(prediction, a, style, empty_matches=v2)
                             for a in answers)
    n = len(golds)
    em, f1 = em_scores, f1_scores
    if no_answer_probs is not None:  # the official apply_no_ans_threshold
        dropped = {q: float(q in no_answer) for q in golds
                   if q in em_scores and no_answer_probs.get(q, 0.0) > no_answer_threshold}
        em, f1 = {**em_scores, **dropped}, {**f1_scores, **dropped}
    result = {"exact": 100.0 * sum(em.values()) / n if n else 0.0,
              "f1": 100.0 * sum(f1.values()) / n if n else 0.0}
    for group, questions in (("has_answer", has_answer), ("no_answer", no_answer)):
        if v2 and questions:
            # (sum / count, the official script's order of operations: np.mean differed
            # in the last digit, 66.66666666666666 for its 66.66666666666667)
            result[f"{group}_exact"] = 100.0 * sum(em[q] for q in questions) / len(questions)
            result[f"{group}_f1"] = 100.0 * sum(f1[q] for q in questions) / len(questions)
    if no_answer_probs is not None:
        for name, scores in (("exact", em_scores), ("f1", f1_scores)):
            best, threshold = _best_threshold(predictions, scores, no_answer_probs,
                                              set(no_answer))
            result[f"best_{name}"], result[f"best_{name}_threshold"] = best, threshold
    return {k: float(v) for k, v in result.items()}


def _best_threshold(predictions, scores, no_answer_probs, unanswerable):
    """The official evaluate-v2.0 find_best_thresh."""
    score = current = float(len(unanswerable))
    threshold = 0.0
    for qid in sorted(no_answer_probs, key=lambda q: no_answer_probs[q]):
        if qid not in scores:
            continue
        if qid in unanswerable:
            delta = -1 if predictions.get(qid) else 0
        else:
            delta = scores[qid]
        current += delta
        if current > score:
            score, threshold = current, no_answer_probs[qid]
    return 100.0 * score / len(scores), float(threshold)
