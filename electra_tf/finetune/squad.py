"""Extractive QA in the SQuAD 1.1 / 2.0 format: reading, windows over long contexts, and
turning start/end logits back into answer text.

Contexts are split into BERT's basic tokens (whitespace, punctuation and CJK characters
apart), each with its character span, then into word pieces. A context longer than the
sequence is covered by windows `doc_stride` pieces apart; a piece is predicted from the
window where it has the most context on both sides (BERT's rule). Decoding takes each
window's candidate spans: with ELECTRA's head (models.TaskModel, qa_head "electra") the
beam's, each of the best starts with each of its best ends, scored start + end
log-probability; with BERT's, the `n_best_size` best starts and ends, scored start + end
logit. It keeps spans inside the context, end >= start, at most `max_answer_length`
pieces, the start where its window gives it the most context, and answers with the
context's own characters from the first character of the best span's first piece to the
last of its last piece (`piece_char_spans`): "195" of "195g" where the span is the piece
"195" without "##g", as the official get_final_text answers, and as training's answer
spans are tight (BERT's _improve_answer_span). A basic token whose pieces cannot be
mapped to its characters exactly (an [UNK] piece; a normalisation that joins or splits
characters, as NFC joins "e" + U+0301 in a cased model) is answered whole.

SQuAD 2.0: a question with no answer is trained with start = end = [CLS], and the
answerability head learns whether a question (ELECTRA's head: `question_answerable`, the
official is_impossible turned round) or a window (BERT's head: `answerable`) has an
answer. The no-answer probability of a question is 1 - the highest answerable
probability over its windows (the official min over windows of the impossibility logit,
through the sigmoid). As in the official code, decoding keeps the best span of every
question and its no-answer probability apart: scoring (metrics.squad_scores) and test
predictions answer "" where the probability exceeds a threshold, and the best threshold
is found from both.
"""

import bisect
import dataclasses
import functools
import itertools
import json
import re

import numpy as np
import tensorflow as tf

from electra_tf import tokenization
from electra_tf.errors import UserInputError
from electra_tf.finetune import readers


@dataclasses.dataclass
class QAExample:
    qid: str
    question: str
    context: str
    answers: list[str]  # gold texts ([] for an unanswerable question)
    start_char: int | None  # the first answer's offset (training)
    answer_text: str | None
    is_impossible: bool


def read_squad(path: str, training: bool, labelled: bool = True) -> list[QAExample]:
    """Questions of a SQuAD-format JSON file ({"data": [{"paragraphs": [{"context", "qas":
    [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}).
    `labelled=False` (a test file): questions may have no answers. Question ids must be
    unique (they key the predictions)."""
    try:
        data = json.loads(readers.read_text(path))
    except json.JSONDecodeError as e:
        raise UserInputError(f"{path} is not valid JSON (line {e.lineno}: {e.msg}); pass a "
                             "SQuAD-format file") from None
    readers.check_characters(data, path)
    examples, seen = [], set()
    for article in _list(data, "data", path, "the file"):
        for paragraph in _list(article, "paragraphs", path, "an article"):
            context = _text(paragraph, "context", path, "a paragraph")
            qas = _list(paragraph, "qas", path, "a paragraph")
            # Nothing to answer from: each scored 0 (a training file's are skipped by
            # `encode`, with a note).
            if qas and not context.strip() and not training:
                first = qas[0].get("id") if isinstance(qas[0], dict) else None
                raise UserInputError(f"{path}: the paragraph of question {first!r} has an "
                                     "empty context; write it, or drop the paragraph")
            for qa in qas:
                qid = _field(qa, "id", path, "a question")
                if isinstance(qid, (bool, list, dict)) or qid is None or str(qid) in seen:
                    raise UserInputError(
                        f"{path}: question id {qid!r} "
                        + ("is not a string or number" if str(qid) not in seen
                           else "occurs twice") + "; give each question its own id")
                seen.add(str(qid))
                where = f"question {qid!r}"
                impossible = _impossible(qa, path)
                if impossible and labelled and not training and qa.get("answers"):
                    # (a training file's are not used, as in BERT's and ELECTRA's readers)
                    raise UserInputError(
                        f"{path}: {where} is_impossible but has answers, which the official "
                        "evaluate-v2.0.py scores it by (as answerable); drop its answers "
                        "(SQuAD 2.0 keeps them as plausible_answers) or is_impossible")
                answers = ([] if impossible else _list(qa, "answers", path, where) if labelled
                           else _list(qa, "answers", path, where) if "answers" in qa else [])
                if training and not impossible and not answers:
                    raise UserInputError(f"{path}: {where} has no answers; give it one, or "
                                         "is_impossible: true (SQuAD 2.0)")
                texts = [_text(a, "text", path, f"an answer of {where}") for a in answers]
                question = _text(qa, "question", path, where)
                if not question.strip():
                    raise UserInputError(f"{path}: {where} has an empty question; write it, "
                                         "or drop the entry")
                examples.append(QAExample(
                    str(qid), question, context, texts,
                    _answer_start(answers[0], path, where) if answers else None,
                    texts[0] if answers else None, impossible))
    if not examples:
        raise UserInputError(f"{path} holds no questions; check the file")
    return examples


_LAYOUT = ('{"data": [{"paragraphs": [{"context": ..., "qas": [{"id", "question", '
           '"answers": [{"text", "answer_start"}]}]}]}]}')


def _json_type(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            type(None): "null"}.get(type(value), "number")


def _field(record, key, path, where):
    """record[key], where record must be a JSON object that has key."""
    if not isinstance(record, dict):
        raise UserInputError(f"{path} is not in the SQuAD format: {where} is a JSON "
                             f"{_json_type(record)}, not an object; the layout is {_LAYOUT}")
    if key not in record:
        raise UserInputError(f"{path} is not in the SQuAD format: {where} has no '{key}'; "
                             f"the layout is {_LAYOUT}")
    return record[key]


def _list(record, key, path, where) -> list:
    value = _field(record, key, path, where)
    if not isinstance(value, list):
        raise UserInputError(f"{path} is not in the SQuAD format: the '{key}' of {where} is a "
                             f"JSON {_json_type(value)}, not an array; the layout is {_LAYOUT}")
    return value


def _text(record, key, path, where) -> str:
    value = _field(record, key, path, where)
    if not isinstance(value, str):
        raise UserInputError(f"{path}: {where} has {key} {value!r}, not a string; "
                             "fix the file")
    return value


def _impossible(qa, path) -> bool:
    value = qa.get("is_impossible", False)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value not in (True, False):  # 0 and 1 too
        raise UserInputError(f"{path}: question {qa.get('id')!r} has is_impossible "
                             f"{value!r}; write true or false")
    return bool(value)


def _answer_start(answer, path, where) -> int:
    value = _field(answer, "answer_start", path, f"an answer of {where}")
    try:
        ok = not isinstance(value, bool) and int(value) == float(value) and int(value) >= 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise UserInputError(f"{path}: {where} has answer_start {value!r}, not a "
                             "character offset; fix it (an integer, where the answer starts "
                             "in the context)")
    return int(value)


# ------------------------------------------------------------------------------ tokens


def basic_tokens(text: str) -> list[tuple[int, int]]:
    """Character spans [start, end) of BERT's basic tokens of a text
    (tokenization.basic_token_spans: the split the QA export makes in its graph)."""
    return tokenization.basic_token_spans([text])[0]


@dataclasses.dataclass
class _Context:
    spans: list[tuple[int, int]]  # basic tokens' character spans
    pieces: list[int]  # the context's word piece ids
    piece_to_token: list[int]  # basic token of each piece
    token_to_piece: list[int]  # first piece of each basic token (len(pieces) if none)


def _contexts(tokenizer, texts: list[str]) -> dict[str, _Context]:
    distinct = list(dict.fromkeys(texts))
    spans = tokenization.basic_token_spans(distinct)
    words = [t[s:e] for t, sp in zip(distinct, spans) for s, e in sp]
    encoded = tokenizer.encode(words) if words else []
    out, k = {}, 0
    for text, sp in zip(distinct, spans):
        pieces, piece_to_token, token_to_piece = [], [], []
        for t in range(len(sp)):
            token_to_piece.append(len(pieces))
            pieces += encoded[k]
            piece_to_token += [t] * len(encoded[k])
            k += 1
        out[text] = _Context(sp, pieces, piece_to_token, token_to_piece)
    return out


def piece_char_spans(tokenizer, words: list[str], pieces: list[list[int]]
                     ) -> list[list[tuple[int, int]]]:
    """The character span [start, end) in each basic token `words[i]` of each of its word
    pieces `pieces[i]` (ids, as `tokenizer` gives them). Each character is normalised on
    its own as the tokenizer normalises text (tokenization.normalize: "İ" is "i", a
    zero-width space nothing), and the pieces' texts (vocab strings, less "##" on a piece
    that continues the token) are laid over those lengths; a character normalised to
    nothing goes with the piece before it. Where that is not exact: an [UNK] piece, lengths
    that do not add up (NFC joins "e" + U+0301 into one character in a cased model), a
    piece boundary inside one character's normalisation, each piece spans the whole token.
    The QA export's graph maps pieces alike (saved_model.piece_bytes)."""
    chars = sorted({c for word in words for c in word})
    sizes = {}
    if chars:
        normalised = tokenization.normalize(tf.constant(chars, tf.string),
                                            tokenizer.lower_case, tokenizer.strip_accents)
        sizes = {c: len(n.decode()) for c, n in zip(chars, normalised.numpy().tolist())}
    return [_piece_spans(word, ids, sizes, tokenizer) for word, ids in zip(words, pieces)]


def _piece_spans(word, ids, sizes, tokenizer):
    whole = [(0, len(word))] * len(ids)
    if len(ids) < 2 or tokenizer.unk_id in ids:
        return whole
    suffix = tokenization.SUFFIX_INDICATOR
    texts = [tokenizer.vocab[i] for i in ids]
    texts = texts[:1] + [t[len(suffix):] if t.startswith(suffix) else t for t in texts[1:]]
    ends = list(itertools.accumulate(sizes[c] for c in word))  # each character's, normalised
    bounds = list(itertools.accumulate(len(t) for t in texts))  # each piece's
    if not ends or ends[-1] != bounds[-1]:
        return whole
    starts = [0]
    for bound in bounds[:-1]:
        k = bisect.bisect_right(ends, bound)  # the characters up to the boundary
        if k == 0 or ends[k - 1] != bound:  # inside a character
            return whole
        starts.append(k)
    return list(zip(starts, starts[1:] + [len(word)]))


# ------------------------------------------------------------------------------ features


def encode(tokenizer, examples: list[QAExample], max_seq_length: int, doc_stride: int,
           max_query_length: int, training: bool) -> tuple[dict, list[dict], list[QAExample]]:
    """Windows of every question: features [F, L] (with `start_positions`,
    `end_positions`, `answerable` (the window holds the answer) and `question_answerable`
    (its question has one) [F] for training), each window's bookkeeping
    (example index, piece position -> context piece, max-context flags), and the training
    questions dropped because their answer text is not at answer_start."""
    contexts = _contexts(tokenizer, [e.context for e in examples])
    queries = tokenizer.encode([e.question for e in examples]) if examples else []
    answer_pieces = tokenizer.encode([e.answer_text or "" for e in examples]) if training else []
    rows = {k: [] for k in ("input_ids", "segment_ids", "start_positions", "end_positions",
                            "answerable", "question_answerable")}
    windows, dropped = [], []
    for n, example in enumerate(examples):
        ctx = contexts[example.context]
        query = queries[n][:max_query_length]
        start_piece = end_piece = None
        if training and not example.is_impossible:
            span = _answer_pieces(example, ctx, answer_pieces[n])
            if span is None:
                dropped.append(example)
                continue
            start_piece, end_piece = span
        budget = max_seq_length - len(query) - 3
        if budget < 1:
            raise UserInputError(f"max_seq_length={max_seq_length} leaves no room for the "
                                 f"context after a {len(query)}-piece question; raise "
                                 "MAX_SEQ_LENGTH or lower max_query_length")
        starts = _window_starts(len(ctx.pieces), budget, doc_stride)
        flags = _max_context_flags(len(ctx.pieces), budget, doc_stride)
        for w, start in enumerate(starts):
            length = min(budget, len(ctx.pieces) - start)
            ids = ([tokenizer.cls_id] + query + [tokenizer.sep_id]
                   + ctx.pieces[start:start + length] + [tokenizer.sep_id])
            first = len(query) + 2
            windows.append({"example": n, "first": first, "start": start, "length": length,
                            "max_context": list(flags[w])})
            rows["input_ids"].append(ids)
            rows["segment_ids"].append([0] * first + [1] * (length + 1))
            inside = (start_piece is not None and start_piece >= start
                      and end_piece < start + length)
            rows["start_positions"].append(first + start_piece - start if inside else 0)
            rows["end_positions"].append(first + end_piece - start if inside else 0)
            rows["answerable"].append(1.0 if inside else 0.0)
            rows["question_answerable"].append(0.0 if example.is_impossible else 1.0)
    features = {"input_ids": _pad(rows["input_ids"], max_seq_length),
                "input_mask": _pad([[1] * len(r) for r in rows["input_ids"]], max_seq_length),
                "segment_ids": _pad(rows["segment_ids"], max_seq_length),
                "start_positions": np.array(rows["start_positions"], np.int32),
                "end_positions": np.array(rows["end_positions"], np.int32),
                "answerable": np.array(rows["answerable"], np.float32),
                "question_answerable": np.array(rows["question_answerable"], np.float32)}
    return features, windows, dropped


def _pad(rows, length):
    out = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def dropped_note(path: str, dropped: list[QAExample], total: int) -> str:
    """The line a run logs about training questions `encode` dropped: how many, and the
    first one's answer beside what its answer_start points at."""
    first = dropped[0]
    if not first.context.strip():
        return (f"{path}: {len(dropped)} of {total} questions skipped: their answer text is "
                f"not in the context or holds no word (question {first.qid!r}'s context is "
                "empty)")
    found = first.context[first.start_char:first.start_char + len(first.answer_text)]
    if found == first.answer_text:  # there, but no word of the context: "" or spaces
        return (f"{path}: {len(dropped)} of {total} questions skipped: their answer text is "
                f"not at answer_start or holds no word (question {first.qid!r}: "
                f"{first.answer_text!r} at {first.start_char})")
    return (f"{path}: {len(dropped)} of {total} questions skipped: their answer text is not "
            f"at answer_start (question {first.qid!r}: {first.answer_text!r} at "
            f"{first.start_char}, where the context has {found!r}); answer_start counts "
            "characters, not bytes, from the context's start")


def _answer_pieces(example, ctx, answer_ids):
    """The first and last context piece of the answer, or None if the answer text is not
    at answer_start."""
    start, text = example.start_char, example.answer_text
    end = start + len(text)
    if example.context[start:end] != text:
        end = _spaced_otherwise(example.context, start, text)
        if end is None:
            return None
    tokens = [t for t, (s, e) in enumerate(ctx.spans) if s < end and e > start]
    if not tokens:
        return None
    first = ctx.token_to_piece[tokens[0]]
    last_token = tokens[-1]
    last = (ctx.token_to_piece[last_token + 1] if last_token + 1 < len(ctx.spans)
            else len(ctx.pieces)) - 1
    if last < first:
        return None
    # BERT's _improve_answer_span: a tighter piece span that spells the answer exactly.
    for new_first in range(first, last + 1):
        for new_last in range(last, new_first - 1, -1):
            if ctx.pieces[new_first:new_last + 1] == answer_ids:
                return new_first, new_last
    return first, last


# The official readers' whitespace (BERT's and ELECTRA's run_squad is_whitespace).
_SQUAD_SPACES = re.compile("[ \t\r\n\u202f]+")


def _spaced_otherwise(context: str, start: int, text: str) -> int | None:
    """Where an answer ends that the context spells at answer_start but for its whitespace
    ("with many spaces" for "with\\tmany \\n spaces"; the official readers' whitespace),
    or None. Those readers trained on such a question (their test: the whole words from
    answer_start on, joined by single spaces, hold the answer's so joined); it was skipped.
    An answer that is not at answer_start stays skipped (they took it where it lay inside
    those words: an answer_start counted in bytes)."""
    words = text.split()  # (the readers' whitespace_tokenize: str.split)
    if not words:
        return None
    space = _SQUAD_SPACES.match(context, start)
    position = space.end() if space and text[:1].isspace() else start  # " Paris" at a tab
    for n, word in enumerate(words):
        if n:
            space = _SQUAD_SPACES.match(context, position)
            if space is None:
                return None
            position = space.end()
        if not context.startswith(word, position):
            return None
        position += len(word)
    return position


def _window_starts(total: int, budget: int, stride: int) -> list[int]:
    """Where the windows of a context of `total` pieces start: every `stride` pieces (at
    most `budget`), the last reaching its end."""
    starts, offset = [], 0
    while True:
        starts.append(offset)
        if offset + budget >= total:
            return starts
        offset += min(budget, stride)


@functools.lru_cache(maxsize=8)  # (a context's questions come one after another)
def _max_context_flags(total: int, budget: int, stride: int) -> tuple[tuple[bool, ...], ...]:
    """For each window of a context of `total` pieces (windows of `budget` pieces every
    `stride`, as `encode` lays them out), whether it gives each of its pieces the most
    context of all windows that contain it: min of left and right context, plus a little
    for longer windows, the first window on a tie (BERT's _check_is_max_context). Each
    piece weighs only the few windows that hold it (it weighed all of them: quadratic in
    the context's length, 5 s a question of 32,000 words); questions on one context with
    queries of one length share the answer."""
    starts = _window_starts(total, budget, stride)
    ends = [min(start + budget, total) for start in starts]  # non-decreasing, as starts
    flags = []
    for w, (start, end) in enumerate(zip(starts, ends)):
        row = []
        for piece in range(start, end):
            best, best_window = None, None
            # The windows that hold it: start <= piece < end.
            for v in range(bisect.bisect_right(ends, piece), bisect.bisect_right(starts, piece)):
                score = (min(piece - starts[v], ends[v] - 1 - piece)
                         + 0.01 * (ends[v] - starts[v]))
                if best is None or score > best:
                    best, best_window = score, v
            row.append(best_window == w)
        flags.append(tuple(row))
    return tuple(flags)


# ------------------------------------------------------------------------------ decoding


def decode(examples: list[QAExample], windows: list[dict], outputs: dict, tokenizer=None,
           n_best_size: int = 20, max_answer_length: int = 30,
           contexts=None) -> tuple[dict, dict]:
    """{qid: the best span's text, the context's characters from the first of its first
    piece to the last of its last (piece_char_spans; "" only when no window has a valid
    span)} and {qid: no-answer probability} (empty without an answerability head).
    `outputs` are the task model's, numpy arrays with one row per window: the beam of
    ELECTRA's head (`start_top_index`, `start_top_log_probs` [F, K], `end_top_index`,
    `end_top_log_probs` [F, K, K]) or BERT's `start_logits` and `end_logits` [F, L];
    `answerable_logits` [F] if the head has them. `tokenizer`: the windows' (its vocab
    and normalisation map pieces to characters; it may be None with `contexts` given
    where every answered word is one piece)."""
    if contexts is None:
        contexts = _contexts(tokenizer, [e.context for e in examples])
    answerable_logits = outputs.get("answerable_logits")
    by_example = {}
    for f, window in enumerate(windows):
        by_example.setdefault(window["example"], []).append(f)
    answers, no_answer, spans = {}, {}, {}
    for n, example in enumerate(examples):
        best, best_score = None, -np.inf
        answerable = -np.inf
        for f in by_example.get(n, []):
            w = windows[f]
            first, length = w["first"], w["length"]
            starts, ends, scores = _candidates(outputs, f, first + length + 1, n_best_size)
            # In the context, the start where this window gives it the most context.
            max_context = np.zeros(len(outputs["start_logits"][f]) + 1, bool)
            max_context[first:first + length] = w["max_context"]
            ok = (max_context[np.clip(starts, 0, len(max_context) - 1)]
                  & (ends >= starts) & (ends < first + length)
                  & (ends - starts + 1 <= max_answer_length))
            if ok.any():
                i = np.argmax(np.where(ok, scores, -np.inf))  # the first of equals
                if scores.flat[i] > best_score:
                    best_score = scores.flat[i]
                    best = (w["start"] + starts.flat[i] - first,
                            w["start"] + ends.flat[i] - first)
            if answerable_logits is not None:
                answerable = max(answerable, float(answerable_logits[f]))
        if best is not None:
            spans[n] = best
        if answerable_logits is not None:
            probability = 1.0 - 1.0 / (1.0 + np.exp(-answerable)) if by_example.get(n) else 1.0
            no_answer[example.qid] = float(probability)
        answers[example.qid] = ""
    for n, (start, end) in _char_spans(tokenizer, examples, contexts, spans).items():
        answers[examples[n].qid] = examples[n].context[start:end]
    return answers, no_answer


def _char_spans(tokenizer, examples, contexts, spans):
    """{n: the context's characters [start, end) from the first of piece spans[n][0] to
    the last of piece spans[n][1]}."""
    tokens = {}  # (context, basic token) -> its first piece and its piece ids
    for n, pieces in spans.items():
        ctx = contexts[examples[n].context]
        for piece in pieces:
            token = ctx.piece_to_token[piece]
            if (examples[n].context, token) not in tokens:
                begin = ctx.token_to_piece[token]
                end = (ctx.token_to_piece[token + 1] if token + 1 < len(ctx.spans)
                       else len(ctx.pieces))
                tokens[examples[n].context, token] = (begin, ctx.pieces[begin:end])
    # A token of one piece is that piece: no tokenizer needed.
    several = [key for key, (_, ids) in tokens.items() if len(ids) > 1]
    mapped = dict(zip(several, piece_char_spans(
        tokenizer, [context[slice(*contexts[context].spans[t])] for context, t in several],
        [tokens[key][1] for key in several])))
    out = {}
    for n, (first, last) in spans.items():
        context = examples[n].context
        ctx = contexts[context]
        chars = []
        for piece, side in ((first, 0), (last, 1)):
            token = ctx.piece_to_token[piece]
            start, end = ctx.spans[token]
            within = mapped.get((context, token), [(0, end - start)])
            chars.append(start + within[piece - tokens[context, token][0]][side])
        out[n] = tuple(chars)
    return out


def _candidates(outputs, f, real, n_best_size):
    """Window f's candidate spans as equal-shaped arrays (starts, ends, scores), in the
    official order of preference among equal scores (start rank, then end rank)."""
    if "start_top_index" in outputs:  # ELECTRA's head: the beam
        ends = outputs["end_top_index"][f]  # [K, K]
        starts = np.broadcast_to(outputs["start_top_index"][f][:, None], ends.shape)
        scores = outputs["start_top_log_probs"][f][:, None] + outputs["end_top_log_probs"][f]
        return starts, ends, scores
    # BERT's: the n_best_size highest logits of the window's real positions ([CLS]
    # question [SEP] context [SEP]; not its padding, whose logits depend on the batch).
    start_logits, end_logits = outputs["start_logits"][f], outputs["end_logits"][f]
    starts = np.argsort(-start_logits[:real], kind="stable")[:n_best_size][:, None]
    ends = np.argsort(-end_logits[:real], kind="stable")[:n_best_size][None, :]
    starts, ends = np.broadcast_arrays(starts, ends)
    return starts, ends, start_logits[starts] + end_logits[ends]


def gold_answers(examples: list[QAExample]) -> dict[str, list[str]]:
    return {e.qid: ([] if e.is_impossible else e.answers) for e in examples}
