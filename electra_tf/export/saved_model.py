"""SavedModels for TF Serving: raw text in (tokenized inside the graph), or token ids.

    export(model_dir, export_dir, model_name="electra", kind="discriminator")
    -> export_dir/electra/1/{saved_model.pb, variables/, assets/vocab.txt,
                              assets.extra/tf_serving_warmup_requests}
       export_dir/models.config (a TF Serving model config listing the exported models)

`kind` picks the network: "discriminator", "generator" or "encoder" of a pre-training
model dir, or "task": the fine-tuned model of a run_finetuning.py output dir (by default
its trial with the best dev score on the task's primary metric; `trial` picks another) or
of one of its trial_K dirs.

Signatures:

  serving_default  text: string [batch] (and text_b: string [batch] for a pair task) ->
                   tokenized with the model's own vocab and casing, truncated to the
                   trained length as training truncated it, [CLS] A [SEP] (B [SEP]),
                   padded to the batch's longest (L); every kind but tagging and qa also
                   outputs truncated bool [b]: the text (pair) had pieces that were cut
    discriminator  tokens string [b, L], replaced_probability float32 [b, L],
                   input_mask int32 [b, L] ("[MASK]" written in the text becomes the mask
                   token, for these three kinds). Electric: the probability its training
                   scores, sigmoid(energy + log q(token | context) + log(p / (1 - p))), q
                   the two-tower cloze model exported with it, p the masking probability
    generator      tokens [b, L], input_mask [b, L], mask_positions int32 [b, M] (-1:
                   none), top_k_tokens string [b, M, k], top_k_probabilities float32 [b, M, k]
                   (M: the most [MASK]s in a text of the batch)
    encoder        tokens [b, L], input_mask [b, L], sequence_output float32 [b, L, H],
                   cls_output float32 [b, H]
    task           classification: probabilities float32 [b, C], label_id int32 [b],
                   label string [b] (the training file's label names)
                   regression: score float32 [b]
                   tagging (text: words separated by whitespace, as Python's str.split()
                   splits; each word is tokenized on its own, and only whole words that
                   fit are kept, as fine-tuning did):
                   tokens string [b, L], input_mask, word_start int32 [b, L] (1 at each
                   word's first piece, where its tag was trained), tag_probabilities
                   float32 [b, L, C], tag_ids int32 [b, L], tags string [b, L] (the
                   model's labels, BIOES for span tags; "" at padding), words string
                   [b, W], word_tags string [b, W] (in the training file's scheme, as
                   fine-tuning writes them; "" for a word that did not fit); and a
                   `tag_words` signature taking words string [b, W] (each text's words
                   as a list, "" padding; a word may hold or be a space), with the same
                   outputs
                   qa (text: the question, cut to max_query_length pieces, and to
                   L - 4; text_b: the context, in windows doc_stride pieces apart as
                   fine-tuning made them, each read with the question; all windows of
                   a request run as one batch): window int32 [b] (the answer's window,
                   0 the first, and the first where no window has a span), and of that
                   window tokens,
                   input_mask, start_logits float32 [b, L], and ELECTRA's QA head's
                   beam (start_top_index, start_top_log_probs [b, K], end_top_index,
                   end_top_log_probs [b, K, K]) or BERT's end_logits [b, L];
                   answer string [b] (the best span over all windows, chosen as
                   fine-tuning's decoding does, quoted from the context from the first
                   character of its first piece to the last of its last, as
                   fine-tuning's predictions are; a word whose pieces do not map to
                   its characters exactly, whole),
                   answer_char_start, answer_char_end int32 [b] (where it is in the
                   context, in characters: context[start:end] in Python),
                   answer_start, answer_end int32 [b] (the span's pieces in the
                   window; for a word quoted whole, those of its pieces the window
                   holds, as a word may straddle two windows; -1: no answer, for
                   all four); with an answerability head
                   (SQuAD 2.0) also answerable_probability float32 [b] (the most
                   answerable window's), and no answer when 1 - it exceeds the
                   fine-tuning's no_answer_threshold
  predict_ids      input_ids, input_mask, segment_ids: int32 [b, L] ->
                   replaced_logits [b, L] (the sigmoid's argument above) | mlm_logits
                   [b, L, V] | sequence_output [b, L, H]
                   | task: logits [b, C] (regression [b, 1], tagging [b, L, C]) or the
                   QA head's outputs as above (+ answerable_logits [b])

`ServingModule` and `TaskServingModule` are the same computations in memory (the detector
CLI uses the first on a model dir).
"""

import dataclasses
import json
import math
import os
import re
import shutil
import textwrap

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf import atomic, tokenization
from electra_tf.choices import EXPORT_KINDS as KINDS
from electra_tf.errors import UserInputError
from electra_tf.modeling.layers import precision_policy
from electra_tf.modeling.pretrainer import ElectraPretrainer
from electra_tf.training import xla_scratch

WARMUP_FILE = "tf_serving_warmup_requests"
WARMUP_TEXTS = ("The quick brown fox jumps over the lazy dog.",
                "ELECTRA pre-trains text encoders as [MASK] rather than generators.")
WARMUP_PAIRS = (("Who jumps over the lazy dog?", "The quick brown fox jumps over the lazy dog."),
                ("What does ELECTRA train?", "ELECTRA pre-trains text encoders as "
                 "discriminators rather than generators."))
MODELS_CONFIG = "models.config"
# A name TF Serving's model config takes, and a plain directory name.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
IDS_SIGNATURE = [tf.TensorSpec([None, None], tf.int32, name=name)
                 for name in ("input_ids", "input_mask", "segment_ids")]


def _with_rank(value, rank: int, message: str):
    """`value`, once seen at run time to have `rank` dimensions (an error with `message`
    otherwise: the signatures' inputs have static ranks, so a request of another rank, a
    REST client's bare string for a list of one, failed deep inside with a message that
    named no input). The check reads the shape's values, which TensorFlow's shape
    inference cannot fold as it folds tf.rank to the signature's rank."""
    padded = tf.concat([tf.shape(value), tf.fill([rank + 1], -1)], 0)
    check = tf.debugging.assert_equal(
        tf.stack([padded[rank - 1] >= 0 if rank else True, padded[rank] < 0]), True,
        message=message)
    with tf.control_dependencies([check]):
        return tf.identity(value)


def _text_vector(value, name: str):
    # (no quotes: TensorFlow's error escapes them)
    return _with_rank(value, 1, f"{name} must be a list of strings, [batch]: one text is a "
                                f"list of one (in the REST API of TF Serving, instances: [...] "
                                f"or inputs: {{{name}: [...]}})")


def _dense(values):
    """Ragged int [b, (t)] -> int32 [b, L], at least [CLS] [SEP]'s 2 columns: an empty batch
    is [0, 2], not [0, 0], whose [CLS] column no head could take."""
    values = values.to_tensor()
    padding = tf.maximum(2 - tf.shape(values)[1], 0)
    return tf.cast(tf.pad(values, [[0, 0], [0, padding]]), tf.int32)


class _TextModule(tf.Module):
    """What every export shares: the vocab (an asset of the SavedModel), in-graph
    tokenization and packing, and the `predict_ids` signature over `_serve_ids`."""

    def __init__(self, name: str, vocab_file: str, max_seq_length: int, lower_case: bool,
                 strip_accents: bool, input_names=("text",)):
        super().__init__(name=name)
        self.max_seq_length, self.input_names = max_seq_length, tuple(input_names)
        self._tokenizer = tokenization.Tokenizer(vocab_file, lower_case, strip_accents)
        self.vocab = tf.saved_model.Asset(vocab_file)
        self.id_to_token = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                self.vocab, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER, tf.string,
                tf.lookup.TextFileIndex.WHOLE_LINE), default_value="")
        self.predict_ids = tf.function(self._checked_ids, input_signature=IDS_SIGNATURE)

    def _checked_ids(self, input_ids, input_mask, segment_ids):
        """predict_ids: _serve_ids, once the three inputs are seen to have one shape, no more
        columns than the model has positions and values in range (an error naming the input
        otherwise: TensorFlow's kernels might read past a short mask, and a CPU gather wraps
        a negative id round to another token's embedding)."""
        input_ids, input_mask, segment_ids = (
            _with_rank(value, 2, f"predict_ids: {name} must be [batch, length]: a batch of "
                                 "one is [[...]]")
            for name, value in (("input_ids", input_ids), ("input_mask", input_mask),
                                ("segment_ids", segment_ids)))
        shape = tf.shape(input_ids)
        config = self.encoder_config()
        positions = config.max_position_embeddings
        checks = [tf.debugging.assert_equal(
                      tf.shape(value), shape,
                      message=f"predict_ids: {name} must have the shape of input_ids, "
                      "[batch, length]")
                  for name, value in (("input_mask", input_mask), ("segment_ids", segment_ids))]
        checks.append(tf.debugging.assert_less_equal(
            shape[1], positions, message=f"predict_ids: at most {positions} tokens a row (the "
            "positions of the model)"))
        checks.append(tf.debugging.assert_positive(  # a task's head reads [CLS]'s position
            shape[1], message="predict_ids: at least 1 token a row ([CLS] first)"))
        for name, value, size, what in (
                ("input_ids", input_ids, config.vocab_size, "ids of the vocab"),
                ("input_mask", input_mask, 2, "1 for a token, 0 for padding"),
                ("segment_ids", segment_ids, config.type_vocab_size,
                 "token types of the model")):
            message = f"predict_ids: {name} must lie in [0, {size}) ({what})"
            checks += [tf.debugging.assert_non_negative(value, message=message),
                       tf.debugging.assert_less(value, size, message=message)]
        with tf.control_dependencies(checks):  # every input waits for the checks
            input_ids, input_mask, segment_ids = (
                tf.identity(x) for x in (input_ids, input_mask, segment_ids))
        return self._serve_ids(input_ids, input_mask, segment_ids)

    @staticmethod
    def same_batch(text, text_b):
        """text and text_b, once seen to hold as many strings (an error otherwise: the pair
        trimmer reads past the shorter one)."""
        check = tf.debugging.assert_equal(
            tf.size(text), tf.size(text_b),
            message="text and text_b must hold as many strings (one text_b for each text)")
        with tf.control_dependencies([check]):
            return tf.identity(text), tf.identity(text_b)

    def pack(self, *segments):
        """Word pieces of one or two segments, int32 ragged [b, (t)] each and already cut to
        fit -> input_ids, input_mask, segment_ids int32 [b, L]: [CLS] A [SEP] (B [SEP]),
        L the longest."""
        tok = self._tokenizer
        ids, segment_ids = tf_text.combine_segments(
            list(segments), start_of_sequence_id=tok.cls_id, end_of_segment_id=tok.sep_id)
        return _dense(ids), _dense(tf.ones_like(ids)), _dense(segment_ids)

    @staticmethod
    def aligned(*values):
        """Per-piece int32 values of the segments (ragged [b, (t)] each) laid out as `pack`
        lays out their pieces -> int32 [b, L], 0 at [CLS], [SEP] and padding."""
        out, _ = tf_text.combine_segments(list(values), start_of_sequence_id=0,
                                          end_of_segment_id=0)
        return _dense(out)

    def tokens(self, input_ids, input_mask):
        """The word pieces of ids [b, L], "" at padding."""
        tokens = self.id_to_token.lookup(tf.cast(input_ids, tf.int64))
        return tf.where(input_mask > 0, tokens, "")


def truncate_pair(a: tf.RaggedTensor, b: tf.RaggedTensor, budget: int):
    """BERT's pair truncation (fine-tuning's `features.pair_lengths`: a piece at a time
    from the longer text, from the second on a tie) of each row to at most `budget` pieces,
    in closed form and core TensorFlow ops: tensorflow-text's RoundRobinTrimmer writes its
    own op (TFText>RoundRobinTrim), which the official TF Serving image, built with an older
    tensorflow-text, does not have, and it would refuse to load the model."""
    length_a, length_b = a.row_lengths(), b.row_lengths()
    keep_b = tf.minimum(length_b, tf.maximum(budget - length_a, budget // 2))
    keep_a = tf.minimum(length_a, budget - keep_b)
    return [tf.ragged.boolean_mask(x, tf.ragged.range(length) < keep[:, None])
            for x, length, keep in ((a, length_a, keep_a), (b, length_b, keep_b))]


class ServingModule(_TextModule):
    """The exported computation: a pretrainer's network behind raw-text and ids signatures.

    Args:
      model: the ElectraPretrainer (its discriminator, generator or encoder is served).
      kind: "discriminator", "generator" or "encoder".
      vocab_file: the model's WordPiece vocab (becomes an asset of the SavedModel).
      max_seq_length: texts are truncated to this many tokens, [CLS] and [SEP] included.
      lower_case, strip_accents: how the model's training text was tokenized.
      top_k: candidates per [MASK] (generator).
    """

    def __init__(self, model: ElectraPretrainer, kind: str, vocab_file: str,
                 max_seq_length: int, lower_case: bool = True, strip_accents: bool = True,
                 top_k: int = 5):
        if kind not in KINDS[:3]:
            raise UserInputError(f"--kind={kind} is not one of {', '.join(KINDS[:3])} for a "
                                 "pre-training model dir")
        vocab_size = model.discriminator_config.vocab_size
        if kind == "generator" and not 1 <= top_k <= vocab_size:
            raise UserInputError(f"--top_k={top_k} must be between 1 and the vocab's "
                                 f"{vocab_size} tokens")
        if kind == "generator" and model.generator is None:
            why = ("Electric's generator is a two-tower cloze model" if
                   model.objective == "electric" else "it sampled its replacements uniformly")
            raise UserInputError(f"this model has no masked-LM generator to export ({why}); "
                                 "use --kind=discriminator or encoder")
        if kind == "discriminator" and model.discriminator_predictions is None:
            # (BERT's generator is its masked LM; Replace and All-Tokens MLM train the
            # encoder, beside a small generator that --kind=generator would serve)
            others = ("generator or encoder" if model.objective == "mlm" else
                      "encoder (the network this objective trains; --kind=generator would "
                      "serve its small generator)" if model.generator is not None else
                      "encoder")
            raise UserInputError(f"objective {model.objective} trains no replaced-token head; "
                                 f"use --kind={others}")
        super().__init__(f"electra_{kind}", vocab_file, max_seq_length, lower_case,
                         strip_accents)
        self.model, self.kind, self.top_k = model, kind, top_k
        self.serving_default = tf.function(
            self._serve_text, input_signature=[tf.TensorSpec([None], tf.string, name="text")])

    # -- text -> ids

    def encode(self, text):
        """string [b] -> input_ids, input_mask, segment_ids int32 [b, L] (L: the longest), and
        truncated bool [b] (the text had pieces beyond the max_seq_length - 2 kept)."""
        tok = self._tokenizer
        pieces = tf.strings.split(text, sep=tokenization.MASK_TOKEN)  # [b, (p)]
        tokens = tok.tokenize(pieces.flat_values)                     # [P, (t)]
        # Every piece but a text's last is followed by the mask token.
        last = tf.equal(pieces.value_rowids(), tf.concat([pieces.value_rowids()[1:], [-1]], 0))
        masks = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(last, tf.int32))], tf.constant(tok.mask_id, tf.int32)),
            tf.cast(last, tf.int64))
        tokens = tf.RaggedTensor.from_row_splits(tf.concat([tokens, masks], axis=1),
                                                 pieces.row_splits).merge_dims(1, 2)
        return (*self.pack(tokens[:, :self.max_seq_length - 2]),
                tokens.row_lengths() > self.max_seq_length - 2)

    # -- the networks

    def encoder_config(self):
        return self.model.discriminator_config

    def _serve_ids(self, input_ids, input_mask, segment_ids):
        model = self.model
        if self.kind == "discriminator":
            hidden = model.discriminator(input_ids, input_mask, segment_ids, training=False)
            logits = model.discriminator_predictions(hidden)
            if model.objective == "electric":  # training conditions q on the original
                # text; serving can only read the text given
                logits += model.noise_logits(
                    model.cloze_logits(input_ids, input_mask, segment_ids), input_ids)
            return {"replaced_logits": logits}
        if self.kind == "generator":
            hidden = model.generator(input_ids, input_mask, segment_ids, training=False)
            return {"mlm_logits": model.generator_predictions(
                hidden, model.generator.embeddings.word_embeddings)}
        return {"sequence_output": tf.cast(model.discriminator(
            input_ids, input_mask, segment_ids, training=False), tf.float32)}

    def _serve_text(self, text):
        text = _text_vector(text, "text")
        input_ids, input_mask, segment_ids, truncated = self.encode(text)
        out = {"tokens": self.tokens(input_ids, input_mask), "input_mask": input_mask,
               "truncated": truncated}
        model = self.model
        if self.kind == "discriminator":
            logits = self._serve_ids(input_ids, input_mask, segment_ids)["replaced_logits"]
            out["replaced_probability"] = tf.sigmoid(logits) * tf.cast(input_mask, tf.float32)
        elif self.kind == "generator":
            is_mask = tf.equal(input_ids, self._tokenizer.mask_id)
            positions = tf.ragged.boolean_mask(
                tf.broadcast_to(tf.range(tf.shape(input_ids)[1]), tf.shape(input_ids)), is_mask)
            positions = positions.to_tensor(default_value=-1)             # [b, M]
            hidden = model.generator(input_ids, input_mask, segment_ids, training=False)
            hidden = tf.gather(hidden, tf.maximum(positions, 0), batch_dims=1)
            logits = model.generator_predictions(
                hidden, model.generator.embeddings.word_embeddings)          # [b, M, V]
            probabilities, ids = tf.math.top_k(tf.nn.softmax(logits), k=self.top_k)
            real = (positions >= 0)[..., None]
            out["mask_positions"] = positions
            out["top_k_tokens"] = tf.where(real, self.id_to_token.lookup(tf.cast(ids, tf.int64)),
                                           "")
            out["top_k_probabilities"] = tf.where(real, probabilities, 0.0)
        else:
            sequence = self._serve_ids(input_ids, input_mask, segment_ids)["sequence_output"]
            out["sequence_output"] = sequence
            out["cls_output"] = sequence[:, 0]
        return out


# ------------------------------------------------------------------------------ task models


class TaskServingModule(_TextModule):
    """A fine-tuned task model behind raw-text and ids signatures (outputs: the module
    docstring). Text is featurized as fine-tuning featurized it (finetune.features, squad).

    Args:
      model: the TaskModel.
      info: its trial's task_info.json (kind, labels, max_seq_length, text_pair, casing,
        and for QA max_query_length, max_answer_length, no_answer_threshold).
      vocab_file: the vocab it was fine-tuned with (becomes an asset of the SavedModel).
    """

    def __init__(self, model, info: dict, vocab_file: str):
        kind = info["kind"]
        pair = kind == "qa" or info["text_pair"]
        super().__init__(f"electra_{kind}", vocab_file, info["max_seq_length"],
                         info["lower_case"], info["strip_accents"],
                         ("text", "text_b") if pair else ("text",))
        self.model, self.kind = model, kind
        self.label_names = tuple(info.get("labels") or ())
        self.max_query_length = info.get("max_query_length", 64)
        self.max_answer_length = info.get("max_answer_length", 30)
        self.n_best_size = info.get("n_best_size", 20)
        self.doc_stride = info.get("doc_stride", 128)
        self.no_answer_threshold = info.get("no_answer_threshold", 0.5)
        self.target_scale = info.get("target_scale", 1.0)  # regression: what training divided by
        self.tag_scheme = info.get("tag_scheme")  # tagging: the file's, the labels are BIOES
        self.tag_spelling = info.get("tag_spelling")  # and how it spells them (None: B-...)
        strings = tf.TensorSpec([None], tf.string, name="text")
        if pair:
            self.serving_default = tf.function(self._serve_pair, input_signature=[
                strings, tf.TensorSpec([None], tf.string, name="text_b")])
        else:
            self.serving_default = tf.function(self._serve_text, input_signature=[strings])
        self.extra_signatures = {}
        if kind == "tagging":
            self.extra_signatures["tag_words"] = tf.function(
                self._serve_words,
                input_signature=[tf.TensorSpec([None, None], tf.string, name="words")])

    def _serve_ids(self, input_ids, input_mask, segment_ids):
        return self.model({"input_ids": input_ids, "input_mask": input_mask,
                           "segment_ids": segment_ids}, training=False)

    def _serve_text(self, text):
        text = _text_vector(text, "text")
        if self.kind == "tagging":
            return self._tagging(text)
        pieces = self._tokenizer.tokenize(text)
        return self._sentence([pieces[:, :self.max_seq_length - 2]],
                              pieces.row_lengths() > self.max_seq_length - 2)

    def encoder_config(self):
        return self.model.config

    def _serve_pair(self, text, text_b):
        text, text_b = self.same_batch(_text_vector(text, "text"), _text_vector(text_b, "text_b"))
        if self.kind == "qa":
            return self._qa(text, text_b)
        a, b = self._tokenizer.tokenize(text), self._tokenizer.tokenize(text_b)
        return self._sentence(truncate_pair(a, b, self.max_seq_length - 3),
                              a.row_lengths() + b.row_lengths() > self.max_seq_length - 3)

    def _sentence(self, segments, truncated):
        """`truncated` bool [b]: a text (pair) had more pieces than the segments keep."""
        logits = self._serve_ids(*self.pack(*segments))["logits"]  # [b, C]
        if self.kind == "regression":
            return {"score": logits[:, 0] * self.target_scale, "truncated": truncated}
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"probabilities": tf.nn.softmax(logits), "label_id": label_id,
                "label": tf.gather(tf.constant(self.label_names), label_id),
                "truncated": truncated}

    def _serve_words(self, words):
        """tag_words: the words of each text as a list, exactly as the training file had
        them (a word may hold spaces or be one: Chinese NER files tag U+3000, which
        `text`'s split cannot send); "" pads a row."""
        words = _with_rank(words, 2, "words must be a list of lists of strings, [batch, "
                                     "words]: one text is a list of one list of its words, "
                                     "padded with empty strings")
        given = tf.not_equal(words, "")
        # "" only pads: one before a word would be dropped, moving every later tag a word.
        padding_last = tf.debugging.assert_equal(
            given, tf.cast(tf.math.cumprod(tf.cast(given, tf.int32), axis=1), tf.bool),
            message="words: an empty string before a word of its row; \"\" only pads the "
                    "end of a row (a word cannot be empty)")
        with tf.control_dependencies([padding_last]):
            given = tf.identity(given)
        return self._tagging(words=tf.ragged.boolean_mask(words, given))

    def _tagging(self, text=None, words=None):
        """Tags `text`'s words (split as Python's str.split() splits) or `words` [b, (w)]."""
        tok = self._tokenizer
        if words is None:
            words = tf.strings.split(tf.strings.regex_replace(text, _PY_WHITESPACE, " "))
        pieces = tok.tokenize(words.flat_values)                        # [W, (p)]
        # A word that normalises away is one [UNK] (features.encode_tagging).
        empty = tf.cast(tf.equal(pieces.row_lengths(), 0), tf.int64)
        pieces = tf.concat([pieces, tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(empty)], tf.constant(tok.unk_id, tf.int32)), empty)], axis=1)
        first = tf.cast(tf.equal(tf.ragged.range(pieces.row_lengths()), 0), tf.int32)
        # The words that fit whole between [CLS] and [SEP]: a prefix of each text's words.
        ends = tf.cumsum(pieces.row_lengths())                           # [W]
        before = tf.gather(tf.concat([tf.zeros([1], tf.int64), ends], 0), words.row_splits)
        fits = ends - tf.gather(before, words.value_rowids()) <= self.max_seq_length - 2
        fits = tf.RaggedTensor.from_row_splits(fits, words.row_splits)  # [b, (w)]
        input_ids, input_mask, segment_ids = self.pack(_kept(pieces, fits))
        word_start = self.aligned(_kept(first, fits))                   # [b, L]
        logits = self._serve_ids(input_ids, input_mask, segment_ids)["logits"]  # [b, L, C]
        tag_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        tags = tf.where(input_mask > 0, tf.gather(tf.constant(self.label_names), tag_ids), "")
        # (returned as valid UTF-8: TF Serving's REST reply copies a string output as it is,
        # and bytes that are not UTF-8, which gRPC and b64 inputs may send, made its JSON
        # invalid; each such byte a U+FFFD, as QA reads them)
        words = tf.strings.unicode_transcode(
            words.to_tensor(default_value=""), "UTF-8", "UTF-8", errors="replace",
            replacement_char=0xFFFD)                                    # [b, W]
        word_tags = tf.ragged.boolean_mask(tags, word_start > 0).to_tensor(
            default_value="", shape=tf.shape(words, out_type=tf.int64))
        if self.tag_scheme:
            word_tags = respell(retag_bioes(word_tags, self.tag_scheme), self.tag_spelling)
        return {"tokens": self.tokens(input_ids, input_mask), "input_mask": input_mask,
                "word_start": word_start, "tag_probabilities": tf.nn.softmax(logits),
                "tag_ids": tag_ids, "tags": tags, "words": words, "word_tags": word_tags,
                "truncated": ~tf.reduce_all(fits, axis=1)}

    def _qa(self, question, context):
        tok = self._tokenizer
        # Bytes that are not UTF-8 (gRPC sends any) as U+FFFD, a character each: the answer
        # is quoted from the context's bytes, by offsets its characters give.
        question, context = (tf.strings.unicode_transcode(
            x, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
            for x in (question, context))
        # Every window of the context, as squad.encode makes them: [CLS] question [SEP]
        # window [SEP], the question cut to max_query_length pieces (and so that a context
        # piece fits), windows of what is left, doc_stride pieces apart.
        asked = tok.tokenize(question)
        query = asked[:, :min(self.max_query_length, self.max_seq_length - 4)]  # [b, (q)]
        # The context's basic tokens (tokenization.basic_token_spans'), each tokenized on its own as
        # fine-tuning tokenized them, with their byte spans to quote the answer from.
        words, word_begin, _ = tf_text.regex_split_with_offsets(
            tf.strings.regex_replace(context, tokenization.NUL, tokenization.NUL_STAND_IN),
            tokenization.BASIC_SPLIT, tokenization.BASIC_KEPT)              # [b, (w)]
        word_pieces = tok.tokenize(words.flat_values)                       # [w, (p)]
        pieces = tf.RaggedTensor.from_row_splits(
            word_pieces.flat_values, tf.gather(word_pieces.row_splits, words.row_splits))
        rows = tf.shape(question, out_type=tf.int64)[0]
        context_length = pieces.row_lengths()
        budget = self.max_seq_length - 3 - query.row_lengths()              # [b], >= 1
        stride = tf.minimum(budget, self.doc_stride)
        windows = 1 + (tf.maximum(context_length - budget, 0) + stride - 1) // stride
        row = tf.repeat(tf.range(rows), windows)                            # [W]
        k = tf.ragged.range(windows).flat_values                            # [W]
        start = k * tf.gather(stride, row)
        length = tf.minimum(tf.gather(budget, row), tf.gather(context_length, row) - start)
        offset = tf.gather(pieces.row_starts(), row) + start
        window = tf.gather(pieces.flat_values, tf.ragged.range(offset, offset + length))
        input_ids, input_mask, segment_ids = self.pack(tf.gather(query, row), window)
        out = self._serve_ids(input_ids, input_mask, segment_ids)
        first = tf.gather(query.row_lengths(), row) + 2  # the window's first context position
        i = tf.range(tf.shape(input_ids, out_type=tf.int64)[1])[None]
        in_context = (i >= first[:, None]) & (i < (first + length)[:, None])  # [W, L]
        # A start is taken from the window giving it the most context (squad.decode's rule).
        can_start = in_context & _max_context(
            start[:, None] + i - first[:, None], k, tf.gather(stride, row),
            tf.gather(budget, row), tf.gather(context_length, row), tf.gather(windows, row),
            tf.reduce_max(tf.concat([(budget + stride - 1) // stride, [1]], 0)))
        if "start_top_index" in out:  # ELECTRA's head: the beam
            span_first, span_last, found, score = best_beam_spans(
                out["start_top_index"], out["start_top_log_probs"], out["end_top_index"],
                out["end_top_log_probs"], can_start, in_context, self.max_answer_length)
        else:
            span_first, span_last, found, score = best_spans(
                out["start_logits"], out["end_logits"], can_start, in_context,
                input_mask > 0, self.n_best_size, self.max_answer_length)
        # Each text's answer: the best window's span, the first of equals (decode's order);
        # the text's first window where no window has one.
        count = tf.shape(row, out_type=tf.int64)[0]
        score = tf.where(found, score, -np.inf)
        best = tf.gather(tf.math.unsorted_segment_max(score, row, rows), row)
        chosen = tf.math.unsorted_segment_min(
            tf.where(found & tf.equal(score, best), tf.range(count), count), row, rows)
        chosen = tf.where(chosen < count, chosen, tf.cumsum(windows, exclusive=True))  # [b]
        pick = lambda x: tf.gather(x, chosen)  # noqa: E731
        result = {"tokens": self.tokens(pick(input_ids), pick(input_mask)),
                  "input_mask": pick(input_mask), "window": tf.cast(pick(k), tf.int32),
                  "truncated": asked.row_lengths() > query.row_lengths(),
                  **{key: pick(v) for key, v in out.items() if key != "answerable_logits"}}
        answered = pick(found)
        if "answerable_logits" in out:  # the most answerable window's
            probability = tf.sigmoid(tf.math.unsorted_segment_max(
                out["answerable_logits"], row, rows))
            result["answerable_probability"] = probability
            answered &= 1.0 - probability <= self.no_answer_threshold
        # Quoted from the context, as squad.decode answers: its own characters from the
        # first of the span's first piece to the last of its last (piece_bytes; the whole
        # word where a word's pieces do not map to its characters exactly).
        shift = pick(start) - pick(first)  # window position -> context piece
        piece_word = tf.concat([word_pieces.value_rowids(), [-1]], 0)  # [c + 1], -1: none
        nowhere = tf.size(piece_word, out_type=tf.int64) - 1

        def piece_of(position):  # [b] window position -> the context's piece, or nowhere
            piece = tf.cast(position, tf.int64) + shift + pieces.row_starts()
            return tf.where(answered, piece, nowhere)

        first_piece, last_piece = piece_of(pick(span_first)), piece_of(pick(span_last))
        first_word = tf.gather(piece_word, first_piece)
        last_word = tf.gather(piece_word, last_piece)
        # The words at both ends, [2b]; one past the last (no pieces, "") where none.
        end_word = tf.concat([first_word, last_word], 0)
        end_word = tf.where(end_word >= 0, end_word, tf.size(words.flat_values,
                                                             out_type=tf.int64))
        splits = tf.concat([word_pieces.row_splits, word_pieces.row_splits[-1:]], 0)
        word_first = tf.gather(splits, end_word)  # the word's first piece
        within_begin, within_end, whole = piece_bytes(
            tf.gather(tf.concat([words.flat_values, [""]], 0), end_word),
            tf.gather(tf.RaggedTensor.from_row_splits(word_pieces.flat_values, splits),
                      end_word),
            tf.maximum(tf.concat([first_piece, last_piece], 0) - word_first, 0),
            self.id_to_token, tok.lower_case, tok.strip_accents, tok.unk_id)
        byte_begin, byte_end = tf.split(
            tf.gather(tf.concat([word_begin.flat_values, [0]], 0), end_word)
            + tf.where(tf.range(2 * rows) < rows, within_begin, within_end), 2)
        text = tf.strings.substr(context, byte_begin, byte_end - byte_begin)
        char_start = tf.strings.length(
            tf.strings.substr(context, tf.zeros_like(byte_begin), byte_begin), unit="UTF8_CHAR")
        char_end = char_start + tf.strings.length(text, unit="UTF8_CHAR")
        # The answer's pieces in the window served: the span's, or where a word is quoted
        # whole, those of its pieces the window holds.
        word_last = tf.gather(splits, end_word[rows:] + 1) - 1
        answer_first = tf.where(whole[:rows], word_first[:rows], first_piece)
        answer_last = tf.where(whole[rows:], word_last, last_piece)
        low, high = pick(first), pick(first + length) - 1
        answer_start = tf.clip_by_value(answer_first - pieces.row_starts() - shift, low, high)
        answer_end = tf.clip_by_value(answer_last - pieces.row_starts() - shift, low, high)
        found = first_word >= 0
        result.update(answer_start=tf.cast(tf.where(found, answer_start, -1), tf.int32),
                      answer_end=tf.cast(tf.where(found, answer_end, -1), tf.int32),
                      answer=tf.where(found, text, ""),
                      answer_char_start=tf.where(found, char_start, -1),
                      answer_char_end=tf.where(found, char_end, -1))
        return result


def piece_bytes(words, pieces, piece, id_to_token, lower_case: bool, strip_accents: bool,
                unk_id: int):
    """squad.piece_char_spans in the graph, for one piece of each basic token: words
    string [n], their pieces int32 ragged [n, (p)], piece int64 [n] (which of them) ->
    the piece's byte span in its word, begin and end int64 [n], and whether the word is
    taken whole (bool [n]: its pieces do not map to its characters exactly, or it has one).
    Each character is normalised on its own (tokenization.normalize) and the pieces' texts
    (their vocab strings, "##" off a piece that continues the word) are laid over those
    lengths; a character normalised to nothing goes with the piece before it."""
    chars = tf.strings.unicode_split(words, "UTF-8")                                # [n, (m)]
    sizes = tf.strings.length(tokenization.normalize(chars.flat_values, lower_case,
                                                     strip_accents), unit="UTF8_CHAR")
    # Each character's end in the normalised word, rows padded with their total: [n, M + 1].
    ends = tf.cumsum(tf.pad(chars.with_flat_values(sizes).to_tensor(), [[0, 0], [0, 1]]),
                     axis=1)
    # Where each character begins, in bytes: [n, M + 1] (the word's length from its m-th).
    byte_of = tf.cumsum(tf.pad(chars.with_flat_values(tf.strings.length(
        chars.flat_values)).to_tensor(), [[0, 0], [1, 0]]), axis=1)
    texts = id_to_token.lookup(tf.cast(pieces.flat_values, tf.int64))
    continues = tf.ragged.range(pieces.row_lengths()).flat_values > 0
    texts = tf.where(continues, tf.strings.regex_replace(
        texts, "^" + tokenization.SUFFIX_INDICATOR, ""), texts)
    # Each piece's end in the normalised word: [n, N + 1].
    bounds = tf.cumsum(tf.pad(pieces.with_flat_values(
        tf.strings.length(texts, unit="UTF8_CHAR")).to_tensor(), [[0, 0], [0, 1]]), axis=1)
    m = tf.cast(chars.row_lengths(), tf.int32)
    p = tf.cast(pieces.row_lengths(), tf.int32)
    after = tf.searchsorted(ends, bounds, side="right")  # the characters up to each end
    inside = tf.equal(tf.searchsorted(ends, bounds, side="left"), after)  # in a character
    after = tf.minimum(after, m[:, None])
    interior = tf.range(tf.shape(bounds)[1])[None] < p[:, None] - 1
    whole = (tf.reduce_any(inside & interior, axis=1) | (p < 2)
             | tf.reduce_any(tf.equal(pieces, unk_id), axis=1)
             | tf.not_equal(ends[:, -1], bounds[:, -1]))
    piece = tf.cast(piece, tf.int32)
    begin = tf.where(piece > 0, tf.gather(after, tf.maximum(piece - 1, 0), batch_dims=1), 0)
    end = tf.where(piece < p - 1, tf.gather(after, piece, batch_dims=1), m)
    begin, end = tf.where(whole, 0, begin), tf.where(whole, m, end)
    return (tf.cast(tf.gather(byte_of, begin, batch_dims=1), tf.int64),
            tf.cast(tf.gather(byte_of, end, batch_dims=1), tf.int64), whole)


def _max_context(piece, window, stride, budget, context_length, windows, reach):
    """Whether each window is the one giving each of its pieces the most context
    (squad._max_context_flags: min(left, right) + 0.01 x the window's length, the first of
    equals). piece [W, L]: the context piece at each position of window `window` [W] of a
    text whose windows start `stride` [W] apart, `budget` [W] pieces long at most, over
    `context_length` [W] pieces in `windows` [W] windows. Only the windows within `reach`
    (at least ceil(budget / stride)) of a window can share its pieces: those are compared,
    so the work grows with the windows, not their square."""
    offsets = tf.range(-reach, reach + 1)[None, :, None]                  # [1, J, 1]
    j = window[:, None, None] + offsets                                  # [W, J, 1]
    other_start = j * stride[:, None, None]                              # [W, J, 1]
    other_length = tf.minimum(budget[:, None, None],
                              context_length[:, None, None] - other_start)
    g = piece[:, None, :]                                                # [W, 1, L]
    contains = ((j >= 0) & (j < windows[:, None, None]) & (g >= other_start)
                & (g < other_start + other_length))
    score = (tf.cast(tf.minimum(g - other_start, other_start + other_length - 1 - g),
                     tf.float64) + 0.01 * tf.cast(other_length, tf.float64))
    score = tf.where(contains, score, -np.inf)
    top = tf.reduce_max(score, axis=1, keepdims=True)
    best = tf.reduce_min(tf.where(tf.equal(score, top), j, tf.reduce_max(windows) + 1), axis=1)
    return tf.equal(best, window[:, None])


# What Python's str.split() splits on (RE2's \s lacks \v, \x1c-\x1f, \x85 and \p{Z}).
_PY_WHITESPACE = r"[\t\n\x{0b}\x{0c}\r\x{1c}-\x{1f}\x{85}\p{Z}]+"


def best_spans(start, end, can_start, can_end, real, n_best_size: int,
               max_answer_length: int):
    """squad.decode's answer span of each row, by piece position: the start among the
    n_best_size highest start logits of the row's real positions (`real`, [b, L] bool) and
    where it may start (`can_start`: in the context, where the window gives it the most
    context), the end among its n_best_size highest end logits and in the context
    (`can_end`), end >= start, at most max_answer_length pieces; the highest start + end
    logit. -> (first, last) int32 [b] (-1, -1 where the row has none), whether it has
    one, and its score float32 [b]."""
    length = tf.shape(start)[1]
    k = tf.minimum(n_best_size, length)

    def among_best(logits):  # at or above the row's k-th highest real logit
        kth = tf.math.top_k(tf.where(real, logits, -np.inf), k).values[:, -1:]
        return logits >= kth

    i = tf.range(length)
    span = (i[None, :] >= i[:, None]) & (i[None, :] - i[:, None] < max_answer_length)
    allowed = ((can_start & among_best(start))[:, :, None]
               & (can_end & among_best(end))[:, None, :] & span[None])
    scores = tf.reshape(tf.where(allowed, start[:, :, None] + end[:, None, :], -np.inf),
                        [tf.shape(start)[0], -1])
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    found = tf.reduce_any(allowed, axis=[1, 2])
    return (tf.where(found, best // length, -1), tf.where(found, best % length, -1), found,
            tf.reduce_max(scores, axis=-1))


def best_beam_spans(start_index, start_log_probs, end_index, end_log_probs, can_start,
                    can_end, max_answer_length: int):
    """squad.decode's answer span of each row from ELECTRA's beam (start_index,
    start_log_probs [b, K]; end_index, end_log_probs [b, K, K], the ends of each start):
    a start where it may start (`can_start` [b, L]: in the context, where the window gives
    it the most context), an end in the context (`can_end`), end >= start, at most
    max_answer_length pieces; the highest start + end log-probability. -> (first, last)
    int32 [b] (-1, -1 where no candidate is allowed), whether one is, and its score."""
    length = tf.shape(can_start)[1]
    # Beam slots past a short row point beyond it: a False column at index L catches them.
    starts = tf.broadcast_to(start_index[:, :, None], tf.shape(end_index))  # [b, K, K]

    def at(mask, index):
        return tf.gather(tf.pad(mask, [[0, 0], [0, 1]]), tf.minimum(index, length),
                         batch_dims=1)

    allowed = (at(can_start, starts) & at(can_end, end_index)
               & (end_index >= starts) & (end_index - starts < max_answer_length))
    rows = tf.shape(end_index)[0]
    scores = tf.reshape(tf.where(allowed, start_log_probs[:, :, None] + end_log_probs,
                                 -np.inf), [rows, -1])
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    found = tf.reduce_any(allowed, axis=[1, 2])
    pick = lambda index: tf.gather(tf.reshape(index, [rows, -1]), best[:, None],  # noqa: E731
                                   batch_dims=1)[:, 0]
    return (tf.where(found, pick(starts), -1), tf.where(found, pick(end_index), -1), found,
            tf.reduce_max(scores, axis=-1))


def retag_bioes(tags, scheme: str):
    """metrics.retag of BIOES tags [b, W] ("" past a row's words, read as O and kept):
    the same chunks, as conlleval reads them, in `scheme` (metrics.TAG_SCHEMES)."""
    outside = tf.equal(tags, "O") | tf.equal(tags, "")
    prefix = tf.where(outside, "O", tf.strings.substr(tags, 0, 1))
    type_ = tf.where(outside, "", tf.strings.regex_replace(tags, "^..", ""))
    rows = tf.shape(tags)[0]

    def shifted(x, fill, step):  # x[:, i - 1] (step 1) or x[:, i + 1] (step -1)
        pad = tf.fill([rows, 1], fill)
        return tf.concat([pad, x[:, :-1]], 1) if step == 1 else tf.concat([x[:, 1:], pad], 1)

    def isin(x, values):
        return tf.reduce_any(tf.stack([tf.equal(x, v) for v in values]), axis=0)

    prev_prefix, prev_type = shifted(prefix, "O", 1), shifted(type_, "", 1)
    next_prefix, next_type = shifted(prefix, "O", -1), shifted(type_, "", -1)
    inside = ~tf.equal(prefix, "O")
    # conlleval's startOfChunk and endOfChunk (metrics._chunk_starts, _chunk_ends).
    starts = (isin(prefix, "BS") | (isin(prev_prefix, "ESO") & isin(prefix, "EI"))
              | (inside & ~tf.equal(prev_type, type_)))
    ends = (isin(prefix, "ES") | (isin(prefix, "BI") & isin(next_prefix, "BSO"))
            | (inside & ~tf.equal(type_, next_type)))
    if scheme in ("BIOES", "BMES"):
        inside = "M" if scheme == "BMES" else "I"
        mark = tf.where(starts, tf.where(ends, "S", "B"), tf.where(ends, "E", inside))
    elif scheme == "BIO":
        mark = tf.where(starts, "B", "I")
    elif scheme == "IOE1":
        before_same = ~tf.equal(next_prefix, "O") & tf.equal(next_type, type_)
        mark = tf.where(ends & before_same, "E", "I")
    else:  # IOB1
        after_same = ~tf.equal(prev_prefix, "O") & tf.equal(prev_type, type_)
        mark = tf.where(starts & after_same, "B", "I")
    return tf.where(outside, tags, tf.strings.join([mark, "-", type_]))


def respell(tags, spelling: dict | None):
    """metrics.respell in the graph: retag_bioes's tags [b, W] in a file's spelling."""
    if spelling is None:
        return tags
    outside = tf.equal(tags, "O") | tf.equal(tags, "")
    prefix = tf.strings.substr(tags, 0, 1)
    if not spelling["begins"]:
        prefix = tf.where(tf.equal(prefix, "B"), "I", tf.where(tf.equal(prefix, "S"), "E",
                                                                 prefix))
    prefix = tf.where(tf.equal(prefix, "E"), spelling["end"],
                      tf.where(tf.equal(prefix, "S"), spelling["single"], prefix))
    spelt = tf.strings.join([prefix, spelling["separator"],
                             tf.strings.regex_replace(tags, "^..", "")])
    return tf.where(outside, tags, spelt)


def _kept(per_word, keep):
    """Values per word piece [W, (p)] of the words `keep` [b, (w)] marks -> [b, (t)]."""
    return tf.ragged.boolean_mask(keep.with_values(per_word), keep).merge_dims(1, 2)


@dataclasses.dataclass
class FinetunedModel:
    """A fine-tuned task model restored from a trial dir, and what it was trained on."""
    model: keras.Model
    info: dict
    trial_dir: str
    vocab_file: str
    note: str  # which trial, and why


def _trial_vocab(trial_dir: str, info: dict, given: str | None, copy: str) -> str:
    """The vocab a trial was fine-tuned with: `given` (--vocab_file), else the one its
    task_info.json names, else, where that is gone or has changed since (task_info's
    vocab_sha256 differs), the trial's own copy."""
    recorded = info.get("vocab_sha256")
    candidates = [given] if given else [info["vocab_file"], copy]
    for vocab_file in candidates:
        if (vocab_file and tf.io.gfile.exists(vocab_file)
                and (not recorded or tokenization.vocab_sha256(vocab_file) == recorded)):
            return vocab_file
    vocab_file = candidates[0]
    if not vocab_file or not tf.io.gfile.exists(vocab_file):
        raise UserInputError(f"the vocab of {trial_dir} ({vocab_file}) is not there; pass "
                             "--vocab_file with the vocab the model was fine-tuned with")
    raise UserInputError(f"{vocab_file} is not the vocab {trial_dir} was fine-tuned with "
                         "(its sha256 differs from task_info.json's vocab_sha256); pass "
                         "the model's vocab")


def load_finetuned(model_dir: str, trial: str | int | None = None,
                   vocab_file: str | None = None) -> FinetunedModel:
    """The task model of a run_finetuning.py output dir or of one of its trial_K dirs, with
    its fine-tuned weights (float32).

    Of an output dir, `trial` picks trial_K (a number), or None / "best": the trial with the
    best dev score on the task's primary metric (results.json's `metric`; the first of
    equals). The best dev trial is the one to serve; results.json's median stays the number
    to report. Raises UserInputError naming what is missing or does not fit.
    """
    from electra_tf.finetune.models import TaskModel
    from electra_tf.finetune.runner import TASK_INFO, VOCAB_COPY
    from electra_tf.modeling.config import EncoderConfig
    trial_dir, note = _pick_trial(model_dir, trial)
    with tf.io.gfile.GFile(os.path.join(trial_dir, TASK_INFO)) as f:
        info = json.load(f)
    checkpoint = os.path.join(trial_dir, "model", "ckpt")
    if not tf.io.gfile.exists(checkpoint + ".index"):
        raise UserInputError(f"{trial_dir} holds no fine-tuned weights (model/ckpt); "
                             "fine-tune with finetuning.save_model = True to export it")
    vocab_file = _trial_vocab(trial_dir, info, vocab_file, os.path.join(trial_dir, VOCAB_COPY))
    if "text_pair" not in info:  # written before it was recorded: only GLUE's is known
        from electra_tf.finetune.tasks import TASKS
        glue = getattr(TASKS.get(info["task"]), "glue", None)
        info["text_pair"] = info["kind"] == "qa" or bool(glue and glue.text_b is not None)
    config = EncoderConfig(**info["encoder"])
    size = len(tokenization.load_vocab(vocab_file))
    if size != config.vocab_size:
        raise UserInputError(f"{vocab_file} has {size} tokens but {trial_dir} was fine-tuned "
                             f"with {config.vocab_size}; pass the model's vocab")
    with precision_policy("float32"):
        # A trial written before ELECTRA's QA head was the default had BERT's.
        model = TaskModel(config, info["head"], info["num_outputs"],
                          answerability=info["answerability"],
                          qa_head=info.get("qa_head", "bert"),
                          beam_size=info.get("beam_size", 20))
    from electra_tf.training.checkpoints import read_weights
    read_weights(model, checkpoint, TASK_INFO)
    return FinetunedModel(model, info, trial_dir, vocab_file, note)


def unfinished_run(model_dir: str, flag: str):
    """Raises UserInputError if `model_dir` is an interrupted fine-tuning run (complete
    trial_K dirs, no results.json), naming a complete trial to pass as `flag` instead."""
    from electra_tf.finetune.runner import RESULTS, TRIAL_RESULT
    done = sorted((d for d in _subdirs(model_dir) if re.fullmatch(r"trial_\d+", d)
                   and tf.io.gfile.exists(os.path.join(model_dir, d, TRIAL_RESULT))),
                  key=lambda d: int(d[6:]))
    if done:
        raise UserInputError(
            f"{model_dir} is an unfinished fine-tuning run (no {RESULTS} yet); rerun its "
            "run_finetuning.py command to finish it, or pass a complete trial: "
            f"{flag}={os.path.join(model_dir, done[0])}"
            + (f" (complete: {', '.join(done)})" if len(done) > 1 else ""))


def _subdirs(path: str) -> list[str]:
    return ([name.rstrip("/") for name in tf.io.gfile.listdir(path)
             if tf.io.gfile.isdir(os.path.join(path, name))]
            if tf.io.gfile.isdir(path) else [])


def _pick_trial(model_dir: str, trial) -> tuple[str, str]:
    """(the trial dir, a note saying which) of a fine-tuning output dir or a trial dir."""
    from electra_tf.finetune.runner import RESULTS, TASK_INFO
    from electra_tf.training.pretraining import OPERATIVE_CONFIG
    if not tf.io.gfile.isdir(model_dir):
        raise UserInputError(f"{model_dir} does not exist or is not a folder; --kind=task takes "
                             "a run_finetuning.py --model_dir or one of its trial_K dirs")
    if tf.io.gfile.exists(os.path.join(model_dir, TASK_INFO)):
        if trial not in (None, "best"):
            raise UserInputError(f"{model_dir} is a single trial's dir; --trial picks among "
                                 "the trials of a fine-tuning output dir (pass its parent)")
        return model_dir, model_dir
    if not tf.io.gfile.exists(os.path.join(model_dir, RESULTS)):
        if tf.io.gfile.exists(os.path.join(model_dir, OPERATIVE_CONFIG)):
            raise UserInputError(f"{model_dir} is a pre-training model dir; --kind=task exports "
                                 "a fine-tuned model (scripts/run_finetuning.py writes those)")
        unfinished_run(model_dir, "--model_dir")
        raise UserInputError(f"{model_dir} has no {RESULTS} or {TASK_INFO}; --kind=task takes "
                             "a run_finetuning.py --model_dir or one of its trial_K dirs")
    with tf.io.gfile.GFile(os.path.join(model_dir, RESULTS)) as f:
        results = json.load(f)
    trials, metric = results["trials"], results["metric"]
    if trial in (None, "best"):
        # An undefined score (null in results.json, NaN) never wins over a defined one.
        scores = [t["dev"].get(metric) for t in trials]
        scores = [math.nan if s is None else float(s) for s in scores]
        k = max(range(len(trials)),
                key=lambda i: (scores[i] if math.isfinite(scores[i]) else -math.inf, -i))
        if math.isfinite(scores[k]):
            note = (f"trial_{k} of {model_dir}, the best dev {metric} ({scores[k]:.4f}) of "
                    f"{len(trials)} trial(s)")
        else:
            note = (f"trial_{k} of {model_dir}: no trial has a defined dev {metric} (pass "
                    "--trial=K to choose another)")
    else:
        try:
            k = int(trial)
        except ValueError:
            raise UserInputError(f"--trial={trial} is neither 'best' nor a trial number") from None
        if not 0 <= k < len(trials):
            raise UserInputError(f"--trial={k} is not a trial of {model_dir} (it has trial_0 "
                                 f"to trial_{len(trials) - 1})")
        note = f"trial_{k} of {model_dir}"
    return os.path.join(model_dir, f"trial_{k}"), note


# ------------------------------------------------------------------------------ export


def export(model_dir: str, export_dir: str, model_name: str = "electra",
           kind: str = "discriminator", version: int = 1, vocab_file: str | None = None,
           top_k: int = 5, overwrite: bool = False, trial: str | int | None = None,
           log=lambda *_: None) -> str:
    """Exports a model dir's network (or, kind "task", a fine-tuned model: see
    `load_finetuned` for `trial`) as a TF Serving SavedModel; returns its directory.

    The SavedModel is written under a temporary name and renamed into place, so a failed
    export leaves nothing at export_dir/model_name/version. Also adds (or updates) the
    model in export_dir/models.config.
    """
    from electra_tf.finetune.runner import RESULTS, TASK_INFO
    from electra_tf.training.checkpoints import load_pretrainer
    if kind not in KINDS:
        raise UserInputError(f"--kind={kind} is not one of {', '.join(KINDS)}")
    if not MODEL_NAME.fullmatch(model_name):
        raise UserInputError(f"--model_name={model_name!r} is not a TF Serving model name: use "
                             "ASCII letters, digits, '_', '-' and '.' only, starting with a "
                             "letter or digit")
    if model_name == MODELS_CONFIG:
        raise UserInputError(f"--model_name={model_name} is the name of the TF Serving config "
                             "the export writes beside the models; choose another")
    if kind != "task" and any(tf.io.gfile.exists(os.path.join(model_dir, name))
                              for name in (RESULTS, TASK_INFO)):
        raise UserInputError(f"{model_dir} is a fine-tuning output dir; export its model with "
                             f"--kind=task (--kind={kind} takes a pre-training model dir)")
    if kind != "task" and trial is not None:
        raise UserInputError(f"--trial picks a fine-tuned model; it does not apply to "
                             f"--kind={kind}")
    if version < 1:
        raise UserInputError(f"--version={version} must be a positive integer (TF Serving "
                             "serves the highest)")
    # (a SavedModel's variables are a checkpoint, found by a pattern: TensorFlow's loader
    # could not read one from "exports[1]/electra/1"; "*" and "?" it reads)
    atomic.check_no_wildcards(os.path.join(export_dir, model_name),
                              f"--export_dir={export_dir} --model_name={model_name}",
                              "choose a path without [", wildcards="[")
    for path, fix in ((export_dir, "pass a --export_dir that is a directory (new or one "
                       "exported to before)"),
                      (os.path.join(export_dir, model_name), "choose another --model_name")):
        if tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path):
            raise UserInputError(f"{path} is a file, not a directory; {fix}")
    # A model's own folder (its versions, or one of them) given as --export_dir: the new
    # version would nest under it, where TF Serving's config does not look.
    held = [n.rstrip("/") for n in (tf.io.gfile.listdir(export_dir)
                                    if tf.io.gfile.isdir(export_dir) else [])]
    if "saved_model.pb" in held or any(n.isdigit() and tf.io.gfile.exists(
            os.path.join(export_dir, n, "saved_model.pb")) for n in held):
        one = "saved_model.pb" in held
        parent = os.path.dirname(export_dir.rstrip("/"))  # (gs:// kept: no normpath)
        if one:
            parent = os.path.dirname(parent)
        raise UserInputError(
            f"--export_dir={export_dir} is " + ("a version of a model" if one else
                                                 "a model's folder (it holds its versions)")
            + f"; pass the folder above the model's, --export_dir={parent or '.'}, with "
            f"--model_name=the model's folder name (it writes EXPORT_DIR/MODEL_NAME/VERSION)")
    models_config_text(export_dir, model_name)  # a bad models.config stops us here
    # What killed exports left (before the check below: one may put a version back), and
    # a config entry an export killed after its rename did not write.
    _remove_stale_staging(os.path.join(export_dir, model_name), log)
    _add_missing_config_entry(export_dir, model_name, log)
    target = os.path.join(export_dir, model_name, str(version))
    if tf.io.gfile.exists(target) and not overwrite:
        # (the next after the highest: version + 1 may be there too)
        following = max(_versions(export_dir, model_name) + [version]) + 1
        raise UserInputError(f"{target} exists; pass --version={following} (TF Serving "
                             "serves the highest version) or --overwrite")
    if kind == "task":
        loaded = load_finetuned(model_dir, trial, vocab_file)
        task, task_kind = loaded.info["task"], loaded.info["kind"]
        log(f"{task if task == task_kind else f'{task} ({task_kind})'}: {loaded.note}")
        module = TaskServingModule(loaded.model, loaded.info, loaded.vocab_file)
        if loaded.info.get("character_words"):
            log("note: this tagger was trained on one character per word: serving_default "
                "splits its text at whitespace, so send the characters spaced (我 爱 北 京), "
                "or each text's characters as a list to tag_words; unspaced, a sentence is "
                "one word with one tag")
    else:
        loaded = load_pretrainer(model_dir, vocab_file)
        check_trained(loaded, model_dir, kind)
        module = ServingModule(loaded.model, kind, loaded.vocab_file, loaded.max_seq_length,
                               loaded.lower_case, loaded.strip_accents, top_k)
        for line in weights_read(loaded, kind):  # (after a refusal of the kind, not before)
            log(line)
    # Hidden names, which TF Serving (numeric version folders) does not take for versions:
    # the new one staged, and the one it replaces while they swap.
    hidden, aside = (os.path.join(export_dir, model_name,
                                  f".{kind_}-{version}-{atomic.owner()}-{os.getpid()}")
                     for kind_ in ("tmp", "old"))
    try:
        with atomic.staged_dir(target, hidden, replace=overwrite, aside=aside) as temporary:
            tf.saved_model.save(module, temporary, signatures={
                "serving_default": module.serving_default, "predict_ids": module.predict_ids,
                **getattr(module, "extra_signatures", {})})
            _check_same_signature(temporary, export_dir, model_name, version, kind, log)
            _write_warmup(os.path.join(temporary, "assets.extra"), model_name,
                          module.input_names)
    except FileExistsError as error:
        if error.filename != target:
            raise
        # Another export of this version finished while this one ran: it is kept.
        raise UserInputError(f"{target} was written by another export while this one ran; "
                             f"it is kept: pass --version={version + 1} or --overwrite") from None
    write_models_config(export_dir, model_name)
    policy = next(e for e in _read_config(export_dir).model_config_list.config
                  if e.name == model_name).model_version_policy
    if (policy.WhichOneof("policy_choice") == "specific"
            and version not in policy.specific.versions):
        pinned = ", ".join(str(v) for v in policy.specific.versions)
        log(f"note: {MODELS_CONFIG} has TF Serving serve {model_name}'s versions {pinned} only "
            f"(model_version_policy specific): add {version} there to serve this one")
        return target
    higher = [v for v in _versions(export_dir, model_name) if v > version]
    if higher:
        log(f"note: {model_name}/{max(higher)} is a higher version: TF Serving serves that one, "
            f"not {version}")
    return target


def _remove_stale_staging(folder: str, log=lambda *_: None):
    """Clears what exports killed on this machine (SIGKILL: no clean-up ran) left in a
    local model-name folder: their staging folders (.tmp-VERSION-OWNER-PID) are removed,
    and a version one was replacing (.old-VERSION-OWNER-PID, moved aside) is removed if the
    version is in place, else put back. One whose process still runs, or of another machine
    or container, is left alone."""
    if "://" in folder or not os.path.isdir(folder):
        return
    owner = atomic.owner()
    for name in sorted(os.listdir(folder)):
        found = re.fullmatch(r"\.(tmp|old)-(\d+)-(.+)-(\d+)", name)
        if not found or found.group(3) != owner or xla_scratch.alive(int(found.group(4))):
            continue
        version = os.path.join(folder, found.group(2))
        if found.group(1) == "old" and not os.path.exists(version):
            os.rename(os.path.join(folder, name), version)
            log(f"note: put back {version}, which an export killed while replacing it had "
                "moved aside")
        else:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


def _add_missing_config_entry(export_dir: str, model_name: str, log):
    """An export killed after its version was in place and before models.config listed the
    model left a version TF Serving's config does not name: add it."""
    if not _versions(export_dir, model_name) or model_name in _config_names(export_dir):
        return
    path = os.path.join(export_dir, MODELS_CONFIG)
    write_models_config(export_dir, model_name)
    log(f"note: added {model_name} to {path}, which did not name it though its versions were "
        "there (an export stopped before writing it?)")


def serving_files(folder: str, names: list[str]) -> str | None:
    """What of an export `folder` holds (its entry `names`), as a refusal names it, or None:
    a SavedModel, a model's version folders, or an --export_dir's models.config."""
    if "saved_model.pb" in names:
        return "an exported SavedModel (saved_model.pb)"
    if any(n.isdigit() and tf.io.gfile.exists(os.path.join(folder, n, "saved_model.pb"))
           for n in names):
        return "an exported model's versions (N/saved_model.pb)"
    if MODELS_CONFIG in names:
        return f"exported models for TF Serving ({MODELS_CONFIG})"
    return None


def _versions(export_dir: str, model_name: str) -> list[int]:
    """The version folders TF Serving sees under a model name (numeric names)."""
    folder = os.path.join(export_dir, model_name)
    if not tf.io.gfile.isdir(folder):
        return []
    return sorted(int(n.rstrip("/")) for n in tf.io.gfile.listdir(folder)
                  if n.rstrip("/").isdigit())


def _signature(path: str) -> tuple[list[str], list[str]] | None:
    """serving_default's input and output names in the SavedModel at `path`."""
    from tensorflow.core.protobuf import saved_model_pb2
    pb = os.path.join(path, "saved_model.pb")
    if not tf.io.gfile.exists(pb):
        return None
    model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(pb, "rb") as f:
        model.ParseFromString(f.read())
    signature = model.meta_graphs[0].signature_def.get("serving_default")
    return signature and (sorted(signature.inputs), sorted(signature.outputs))


def _check_same_signature(path, export_dir, model_name, version, kind, log):
    """One model name serves one kind of model: TF Serving serves its highest version, so a
    version of another kind (a generator as version 2 of a discriminator's name) would
    replace what its clients call. A higher version may add outputs (a QA export of a
    later release, one with an answerability head): the clients of a lower one still get
    everything they read."""
    new = _signature(path)
    for other in _versions(export_dir, model_name):
        old = _signature(os.path.join(export_dir, model_name, str(other)))
        if other == version or old is None or old == new:
            continue
        lower, higher = (old, new) if other < version else (new, old)
        if lower[0] == higher[0] and set(lower[1]) < set(higher[1]):
            added = sorted(set(higher[1]) - set(lower[1]))
            log(f"note: {model_name}/{max(other, version)} adds the outputs "
                f"{', '.join(added)} to those of {model_name}/{min(other, version)}")
            continue
        if old[0] == new[0] and other > version and set(old[1]) < set(new[1]):
            # (written below an earlier release's version: its clients lose nothing)
            log(f"note: {model_name}/{version} has the outputs "
                f"{', '.join(sorted(set(new[1]) - set(old[1])))}, which {model_name}/{other}, "
                "the version TF Serving serves, lacks")
            continue
        inputs = old[0] != new[0]
        raise UserInputError(
            f"{os.path.join(export_dir, model_name, str(other))} serves another kind of "
            f"model ({_names(old, inputs)}) than this --kind={kind} export "
            f"({_names(new, inputs)}), and TF Serving serves a name's highest version only; "
            "pass another --model_name")


def _names(signature, inputs: bool) -> str:
    outputs = f"outputs {', '.join(signature[1])}"
    return f"inputs {', '.join(signature[0])}; {outputs}" if inputs else outputs


def weights_read(loaded, what: str) -> list[str]:
    """What a reader of a pre-training model dir says of the checkpoint it read (a run may
    be writing newer ones): "`what`: the weights of CHECKPOINT", and a note where that is
    ckpt-0, the weights before the first training step, or (but for `what` "generator") a
    two-stage run's saved at its switch, its discriminator not trained yet. (One from
    before the switch is refused: `checkpoints.generator_stage`.)"""
    lines = [f"{what}: the weights of {loaded.checkpoint}"]
    step = re.fullmatch(r"ckpt-(\d+)", os.path.basename(loaded.checkpoint))
    switch = loaded.info.get("two_stage_steps")
    if (what != "generator" and loaded.info.get("algorithm") == "two_stage" and switch
            and step and int(step[1]) == switch):
        from electra_tf.training.checkpoints import saved_stage
        if (saved_stage(loaded.checkpoint) or (0,))[0] == 1:  # (saved switched)
            lines.append(
                f"note: {loaded.checkpoint} is of a two-stage run's switch (step {switch}, "
                "from which its discriminator trains): its discriminator's encoder is the "
                "generator's, trained as a masked LM, not yet as a discriminator, and its "
                "replaced-token head is untrained; use a later checkpoint")
    if os.path.basename(loaded.checkpoint) == "ckpt-0":
        latest = tf.train.latest_checkpoint(os.path.dirname(loaded.checkpoint))
        lines.append(
            f"note: {loaded.checkpoint} holds the weights before the first training step"
            + (" (the run has saved no later checkpoint yet)"
               if latest is None or os.path.basename(latest) == "ckpt-0"
               else f" (asked for: the run's latest is {os.path.basename(latest)})")
            + ": " + (f"those it started from, {loaded.info['init_checkpoint']}"
                      if loaded.info.get("init_checkpoint") else "they are untrained"))
    return lines


def fresh_parts(loaded) -> list[str]:
    """The parts of a loaded model dir that convert_checkpoint.py did not import but
    initialised afresh (model_info.json's `not_imported`: "discriminator_predictions",
    "generator") and that no pre-training has trained since: its latest checkpoint is still
    the imported one (`imported_checkpoint`)."""
    info = loaded.info
    if os.path.basename(loaded.checkpoint) != info.get("imported_checkpoint"):
        return []
    return list(info.get("not_imported", ()))


def check_trained(loaded, model_dir: str, kind: str, script: str = "export"):
    """Raises UserInputError when `kind` ("discriminator", "encoder" or "generator") would
    serve weights that no training made: a two-stage run's discriminator before its switch
    (`checkpoints.generator_stage`), or a part that convert_checkpoint.py did not import but
    initialised afresh (model_info.json's `not_imported`) and that has not been pre-trained
    since: the model dir's latest checkpoint is still the imported one
    (`imported_checkpoint`). `script`: "export" or "detect", for the fix the message
    names."""
    from electra_tf.training.checkpoints import generator_stage
    if kind in ("discriminator", "encoder"):
        untrained = generator_stage(loaded.checkpoint, loaded.info,
                                    "--model_dir=MODEL_DIR/ckpt-N")
        if untrained:  # (served as trained, with a note)
            raise UserInputError(untrained + (", or export --kind=generator"
                                              if script == "export" else ""))
    part = {"discriminator": "discriminator_predictions", "generator": "generator"}.get(kind)
    if part not in fresh_parts(loaded):
        return
    what = {"discriminator_predictions": "replaced-token head (discriminator_predictions)",
            "generator": "generator"}[part]
    fixes = [f"pre-train it first (run_pretraining.py --init_checkpoint={model_dir} with "
             f"--gin_file={model_dir}/operative_config.gin after the size's file)"]
    if part == "generator":
        fixes.insert(0, "import one (convert_checkpoint.py --generator_input=an "
                        "ElectraForMaskedLM dir)")
    if script == "export":
        fixes.append("export --kind=encoder")
    fix = " or ".join([", ".join(fixes[:-1]), fixes[-1]] if len(fixes) > 1 else fixes)
    raise UserInputError(f"{model_dir} was imported without a {what}: it is freshly "
                         f"initialised, so its outputs are random; {fix}")


def _write_warmup(directory: str, model_name: str, input_names=("text",)):
    """assets.extra/tf_serving_warmup_requests: PredictionLog records TF Serving replays at
    load time (batch sizes 1 and 2), so the first real request is not the slow one."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
    examples = WARMUP_PAIRS if len(input_names) == 2 else [(t,) for t in WARMUP_TEXTS]
    tf.io.gfile.makedirs(directory)
    with tf.io.TFRecordWriter(os.path.join(directory, WARMUP_FILE)) as writer:
        for batch in (examples[:1], examples):
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name,
                                               signature_name="serving_default"))
            for n, name in enumerate(input_names):
                request.inputs[name].CopyFrom(
                    tf.make_tensor_proto([example[n] for example in batch], dtype=tf.string))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def _read_config(export_dir: str, with_text: bool = False):
    """export_dir/models.config as a ModelServerConfig (empty where there is none), and its
    text if `with_text` ("" where there is none); a file that is not one raises
    UserInputError."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2
    path = os.path.join(export_dir, MODELS_CONFIG)
    config = model_server_config_pb2.ModelServerConfig()
    text = ""
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            text = f.read()
        try:
            text_format.Parse(text, config)
        except text_format.ParseError as e:
            raise UserInputError(f"{path} is not a TF Serving model config ({e}); fix it, or "
                                 "move it away and export again to write a new one") from None
    return (config, text) if with_text else config


def _config_names(export_dir: str) -> list[str]:
    """The model names export_dir/models.config lists."""
    return [entry.name for entry in _read_config(export_dir).model_config_list.config]


def models_config_text(export_dir: str, model_name: str) -> str | None:
    """export_dir/models.config (TF Serving's --model_config_file) with `model_name` added,
    keeping the models already there; base paths are as the official Docker image mounts
    them: /models/<name>. None where the file lists the model already: it is left as
    written. The file's own text, comments included, is kept: the model's entry goes in
    before its last '}' (written anew from the parsed config only where that would not read
    back as the config with the model added). A file there that is not a ModelServerConfig
    text proto raises UserInputError, before anything is exported."""
    from google.protobuf import text_format
    config, text = _read_config(export_dir, with_text=True)
    entries = config.model_config_list.config
    if any(entry.name == model_name for entry in entries):
        return None
    entry = entries.add()
    entry.name, entry.base_path, entry.model_platform = (
        model_name, f"/models/{model_name}", "tensorflow")
    if "}" in text:
        end = text.rindex("}")
        spliced = (text[:end].rstrip(" ") + "  config {\n"
                   + textwrap.indent(text_format.MessageToString(entry), "    ")
                   + "  }\n" + text[end:])
        try:
            if text_format.Parse(spliced, type(config)()) == config:
                return spliced
        except text_format.ParseError:
            pass
    return text_format.MessageToString(config)


def write_models_config(export_dir: str, model_name: str):
    """Adds `model_name` to export_dir/models.config (see `models_config_text`)."""
    text = models_config_text(export_dir, model_name)
    if text is not None:
        atomic.write_text(os.path.join(export_dir, MODELS_CONFIG), text)
