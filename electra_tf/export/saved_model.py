"""SavedModels for TF Serving: raw text in (tokenized inside the graph), or token ids.

    export(model_dir, export_dir, model_name="electra", kind="discriminator")
    -> export_dir/electra/1/{saved_model.pb, variables/, assets/vocab.txt,
                              assets.extra/tf_serving_warmup_requests}
       export_dir/models.config (a TF Serving model config listing the exported models)

Signatures (`kind` picks the network):

  serving_default  text: string [batch] -> tokenized with the model's own vocab and casing,
                   "[MASK]" written in the text becomes the mask token, truncated to the
                   trained length, [CLS] ... [SEP], padded to the batch's longest
    discriminator  tokens string [b, L], replaced_probability float32 [b, L],
                   input_mask int32 [b, L]
    generator      tokens [b, L], input_mask [b, L], mask_positions int32 [b, M] (-1:
                   none), top_k_tokens string [b, M, k], top_k_probabilities float32 [b, M, k]
                   (M: the most [MASK]s in a text of the batch)
    encoder        tokens [b, L], input_mask [b, L], sequence_output float32 [b, L, H],
                   cls_output float32 [b, H]
  predict_ids      input_ids, input_mask, segment_ids: int32 [b, L] ->
                   replaced_logits [b, L] | mlm_logits [b, L, V] | sequence_output [b, L, H]

`ServingModule` is the same computation in memory (the detector CLI uses it on a model dir).
"""

import os

import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf import tokenization
from electra_tf.errors import UserInputError
from electra_tf.modeling.pretrainer import ElectraPretrainer

KINDS = ("discriminator", "generator", "encoder", "task")
WARMUP_FILE = "tf_serving_warmup_requests"
WARMUP_TEXTS = ("The quick brown fox jumps over the lazy dog.",
                "ELECTRA pre-trains text encoders as [MASK] rather than generators.")
MODELS_CONFIG = "models.config"


class ServingModule(tf.Module):
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
        super().__init__(name=f"electra_{kind}")
        if kind not in KINDS[:3]:
            raise UserInputError(f"--kind={kind} is not one of {', '.join(KINDS[:3])} for a "
                                 "pre-training model dir")
        if kind == "generator" and model.generator is None:
            raise UserInputError("this model has no masked-LM generator to export (objective "
                                 f"{model.objective}); use --kind=discriminator or encoder")
        if kind == "discriminator" and model.discriminator_predictions is None:
            raise UserInputError(f"objective {model.objective} trains no replaced-token head; "
                                 "use --kind=encoder")
        self.model, self.kind, self.top_k = model, kind, top_k
        self.max_seq_length = max_seq_length
        self._tokenizer = tokenization.Tokenizer(vocab_file, lower_case, strip_accents)
        self.vocab = tf.saved_model.Asset(vocab_file)
        self.id_to_token = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                self.vocab, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER, tf.string,
                tf.lookup.TextFileIndex.WHOLE_LINE), default_value="")
        self.serving_default = tf.function(
            self._serve_text, input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        self.predict_ids = tf.function(self._serve_ids, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="input_ids"),
            tf.TensorSpec([None, None], tf.int32, name="input_mask"),
            tf.TensorSpec([None, None], tf.int32, name="segment_ids")])

    # -- text -> ids

    def encode(self, text):
        """string [b] -> input_ids, input_mask, segment_ids int32 [b, L] (L: the longest)."""
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
        tokens = tokens[:, :self.max_seq_length - 2]
        ids, segments = tf_text.combine_segments([tokens], start_of_sequence_id=tok.cls_id,
                                                 end_of_segment_id=tok.sep_id)
        input_ids = tf.cast(ids.to_tensor(), tf.int32)
        input_mask = tf.cast(tf.ones_like(ids).to_tensor(), tf.int32)
        return input_ids, input_mask, tf.cast(segments.to_tensor(), tf.int32)

    def tokens(self, input_ids, input_mask):
        """The word pieces of ids [b, L], "" at padding."""
        tokens = self.id_to_token.lookup(tf.cast(input_ids, tf.int64))
        return tf.where(input_mask > 0, tokens, "")

    # -- the networks

    def _serve_ids(self, input_ids, input_mask, segment_ids):
        model = self.model
        if self.kind == "discriminator":
            hidden = model.discriminator(input_ids, input_mask, segment_ids, training=False)
            return {"replaced_logits": model.discriminator_predictions(hidden)}
        if self.kind == "generator":
            hidden = model.generator(input_ids, input_mask, segment_ids, training=False)
            return {"mlm_logits": model.generator_predictions(
                hidden, model.generator.embeddings.word_embeddings)}
        return {"sequence_output": tf.cast(model.discriminator(
            input_ids, input_mask, segment_ids, training=False), tf.float32)}

    def _serve_text(self, text):
        input_ids, input_mask, segment_ids = self.encode(text)
        out = {"tokens": self.tokens(input_ids, input_mask), "input_mask": input_mask}
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


def export(model_dir: str, export_dir: str, model_name: str = "electra",
           kind: str = "discriminator", version: int = 1, vocab_file: str | None = None,
           top_k: int = 5, overwrite: bool = False) -> str:
    """Exports a model dir's network as a TF Serving SavedModel; returns its directory.

    The SavedModel is written under a temporary name and renamed into place, so a failed
    export leaves nothing at export_dir/model_name/version. Also adds (or updates) the
    model in export_dir/models.config.
    """
    from electra_tf.training.checkpoints import load_pretrainer
    if kind not in KINDS:
        raise UserInputError(f"--kind={kind} is not one of {', '.join(KINDS)}")
    if kind == "task":
        raise UserInputError(f"{model_dir} is a pre-training model dir; --kind=task exports a "
                             "fine-tuned model (scripts/run_finetuning.py writes those)")
    if version < 1:
        raise UserInputError(f"--version={version} must be a positive integer (TF Serving "
                             "serves the highest)")
    target = os.path.join(export_dir, model_name, str(version))
    if tf.io.gfile.exists(target) and not overwrite:
        raise UserInputError(f"{target} exists; pass --version={version + 1} (TF Serving "
                             "serves the highest version) or --overwrite")
    loaded = load_pretrainer(model_dir, vocab_file)
    module = ServingModule(loaded.model, kind, loaded.vocab_file, loaded.max_seq_length,
                           loaded.lower_case, loaded.strip_accents, top_k)
    temporary = os.path.join(export_dir, model_name, f".tmp-{version}-{os.getpid()}")
    if tf.io.gfile.exists(temporary):
        tf.io.gfile.rmtree(temporary)
    try:
        tf.saved_model.save(module, temporary, signatures={
            "serving_default": module.serving_default, "predict_ids": module.predict_ids})
        _write_warmup(os.path.join(temporary, "assets.extra"), model_name)
        if tf.io.gfile.exists(target):
            tf.io.gfile.rmtree(target)
        tf.io.gfile.rename(temporary, target)
    finally:
        if tf.io.gfile.exists(temporary):
            tf.io.gfile.rmtree(temporary)
    write_models_config(export_dir, model_name)
    return target


def _write_warmup(directory: str, model_name: str):
    """assets.extra/tf_serving_warmup_requests: PredictionLog records TF Serving replays at
    load time (batch sizes 1 and 2), so the first real request is not the slow one."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
    tf.io.gfile.makedirs(directory)
    with tf.io.TFRecordWriter(os.path.join(directory, WARMUP_FILE)) as writer:
        for texts in (WARMUP_TEXTS[:1], WARMUP_TEXTS):
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name,
                                               signature_name="serving_default"))
            request.inputs["text"].CopyFrom(tf.make_tensor_proto(list(texts), dtype=tf.string))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def write_models_config(export_dir: str, model_name: str):
    """Adds `model_name` to export_dir/models.config (TF Serving's --model_config_file),
    keeping the models already there; base paths are as the official Docker image mounts
    them: /models/<name>."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2
    path = os.path.join(export_dir, MODELS_CONFIG)
    config = model_server_config_pb2.ModelServerConfig()
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            text_format.Parse(f.read(), config)
    entries = config.model_config_list.config
    if not any(entry.name == model_name for entry in entries):
        entry = entries.add()
        entry.name, entry.base_path, entry.model_platform = (
            model_name, f"/models/{model_name}", "tensorflow")
    temporary = f"{path}.tmp-{os.getpid()}"
    with tf.io.gfile.GFile(temporary, "w") as f:
        f.write(text_format.MessageToString(config))
    tf.io.gfile.rename(temporary, path, overwrite=True)

