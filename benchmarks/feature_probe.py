"""What did pre-training put into the encoder? Linear probes of frozen features: a logistic
regression on the [CLS] output, on the mean-pooled output (of the top layer and of every
layer below it) and on the mean of the input word embeddings, trained on a labelled set's
training sentences and scored on its dev sentences, for pre-trained model dirs against the
same shapes randomly initialised. Also how alike the
dev sentences' mean-pooled vectors are (mean cosine; near 1 means the encoder maps every
sentence to about the same vector), and how evenly [CLS] attends over the sentence in each
layer (the entropy of its attention over the real tokens, averaged over heads, divided by
the log of the sentence's length: 1 is uniform, where [CLS] reads the mean of the sentence's
values like a bag of words; near 0 is a few tokens).

    .venv/bin/python benchmarks/feature_probe.py     # a minute; after finetune_study.py

Defaults: the three encoders benchmarks/finetune_study.py pre-trains (ELECTRA, MLM, tiny,
3000 steps on the Austen corpus) and its movie-review sentiment split (4,000 training and
2,000 dev sentences). `--random` adds, for each model dir, its shape with the random initial
weights fine-tuning's --random_init starts from (seed 0). Fine-tuning trains the whole
encoder; a probe shows only what the features already hold, which is where a fine-tuning
gap from pre-training should start. Results: benchmarks/results/feature_probe.{json,md}.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402

STUDY = os.path.join(common.CACHE_DIR, "finetune_study")
flags.DEFINE_list("init", [os.path.join(STUDY, "pretrained"), os.path.join(STUDY, "pretrained_mlm")],
                  "Pre-training model dirs to probe.")
flags.DEFINE_bool("random", True, "Also probe each model dir's shape randomly initialised.")
flags.DEFINE_string("train_file", os.path.join(STUDY, "train.csv"), "label,text CSV to fit on.")
flags.DEFINE_string("dev_file", os.path.join(STUDY, "dev.csv"), "label,text CSV to score on.")
flags.DEFINE_integer("max_seq_length", 64, "Tokens per sentence (as fine-tuned).")
flags.DEFINE_integer("seed", 0, "Seed of the random initialisation.")
flags.DEFINE_string("results_name", "feature_probe", "benchmarks/results/<name>.{json,md}.")
FLAGS = flags.FLAGS


def probe(init_dir: str, random_init: bool) -> dict:
    import keras
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from electra_tf.finetune import features, readers, runner
    from electra_tf.finetune.models import TaskModel

    init = runner.load_initialization(init_dir, random_init=random_init)
    tokenizer = init.tokenizer()
    train = readers.read_table(FLAGS.train_file)
    dev = readers.read_table(FLAGS.dev_file)
    labels = readers.sorted_labels({e.label for e in train})
    data = {name: features.encode_sentences(tokenizer, examples, FLAGS.max_seq_length,
                                            labels)[0]
            for name, examples in (("train", train), ("dev", dev))}
    keras.utils.set_random_seed(FLAGS.seed)
    model = TaskModel(init.config, "sentence", len(labels))
    if init.weights is not None:
        model.encoder.set_weights(init.weights)
    table = model.encoder.get_weights()[0]  # the word embeddings [V, E]
    assert table.shape[0] == init.config.vocab_size, table.shape

    def views(f):
        cls, mean, bag = [], [], []
        for i in range(0, len(f["input_ids"]), 256):
            ids, mask = f["input_ids"][i:i + 256], f["input_mask"][i:i + 256]
            sequence = np.asarray(model.encoder(ids, mask, f["segment_ids"][i:i + 256],
                                                training=False))
            weights = mask[..., None].astype(np.float32)
            cls.append(sequence[:, 0])
            mean.append((sequence * weights).sum(1) / weights.sum(1))
            bag.append((table[ids] * weights).sum(1) / weights.sum(1))
        return {"cls": np.concatenate(cls), "mean": np.concatenate(mean),
                "embeddings": np.concatenate(bag)}

    def layer_means(f) -> np.ndarray:
        """The mean over real tokens of each layer's output, [layers + 1, N, H]: the
        (projected) embedding block's first, then each transformer block's."""
        from electra_tf.modeling.encoder import attention_bias
        encoder, means = model.encoder, []
        for i in range(0, len(f["input_ids"]), 256):
            ids, mask = f["input_ids"][i:i + 256], f["input_mask"][i:i + 256]
            x = encoder.embeddings(ids, f["segment_ids"][i:i + 256], training=False)
            if encoder.embeddings_project is not None:
                x = encoder.embeddings_project(x)
            bias = attention_bias(mask, encoder.attention)
            weights = mask[..., None].astype(np.float32)
            batch = [(np.asarray(x) * weights).sum(1) / weights.sum(1)]
            for block in encoder.blocks:
                x = block(x, bias, training=False)
                batch.append((np.asarray(x) * weights).sum(1) / weights.sum(1))
            means.append(np.stack(batch))
        return np.concatenate(means, axis=1)

    def cls_attention_evenness(f) -> list[float]:
        """Per layer: the mean over sentences and heads of [CLS]'s attention entropy over
        the real tokens divided by log(real length)."""
        from electra_tf.modeling.encoder import attention_bias
        ids, mask = f["input_ids"][:1000], f["input_mask"][:1000]
        encoder = model.encoder
        x = encoder.embeddings(ids, f["segment_ids"][:1000], training=False)
        if encoder.embeddings_project is not None:
            x = encoder.embeddings_project(x)
        bias = attention_bias(mask, encoder.attention)
        length = mask.sum(1).astype(np.float64)
        evenness = []
        for block in encoder.blocks:
            attention = block.attention
            q = np.asarray(attention._heads(attention.query(x)))[:, :, 0]  # [B, heads, D]
            k = np.asarray(attention._heads(attention.key(x)))  # [B, heads, L, D]
            scores = (np.einsum("bhd,bhld->bhl", q, k) * encoder.config.head_size ** -0.5
                      + np.asarray(bias)[:, :, 0])
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            entropy = -(probs * np.log(np.maximum(probs, 1e-30))).sum(-1).mean(1)  # [B]
            evenness.append(float((entropy / np.log(length)).mean()))
            x = block(x, bias, training=False)
        return evenness

    train_views, dev_views = views(data["train"]), views(data["dev"])
    accuracy = {}
    for view in ("cls", "mean", "embeddings"):
        classifier = LogisticRegression(max_iter=3000).fit(train_views[view],
                                                           data["train"]["label_ids"])
        accuracy[view] = float((classifier.predict(dev_views[view])
                                == data["dev"]["label_ids"]).mean())
    train_layers, dev_layers = layer_means(data["train"]), layer_means(data["dev"])
    # The top layer's mean is the "mean" view: the same forward pass, layer by layer.
    np.testing.assert_allclose(dev_layers[-1], dev_views["mean"], rtol=1e-4, atol=1e-4)
    per_layer = []
    for layer_train, layer_dev in zip(train_layers, dev_layers):
        classifier = LogisticRegression(max_iter=3000).fit(layer_train,
                                                           data["train"]["label_ids"])
        per_layer.append(float((classifier.predict(layer_dev)
                                == data["dev"]["label_ids"]).mean()))
    vectors = dev_views["mean"][:1000]
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return {"init": os.path.relpath(init_dir, common.REPO), "random_init": random_init,
            "source": init.source, "accuracy": accuracy, "mean_per_layer": per_layer,
            "mean_cosine": float((vectors @ vectors.T).mean()),
            "cls_attention_evenness": cls_attention_evenness(data["dev"]),
            "embedding_norm": float(np.linalg.norm(table, axis=1).mean())}


def main(argv):
    del argv
    import numpy as np
    missing = [d for d in FLAGS.init if not os.path.isdir(d)]
    if missing:
        print(f"error: no model dir {missing[0]}; run benchmarks/finetune_study.py first or "
              "pass --init", file=sys.stderr)
        return 1
    results = []
    for init_dir in FLAGS.init:
        for random_init in ((False, True) if FLAGS.random else (False,)):
            result = probe(init_dir, random_init)
            results.append(result)
            print(f"{result['init']}{' (random init)' if random_init else ''}: "
                  f"{result['accuracy']}, mean cosine {result['mean_cosine']:.3f}", flush=True)
    rows = [[r["init"] + (" — random init" if r["random_init"] else ""),
             f"{r['accuracy']['cls']:.1%}", f"{r['accuracy']['mean']:.1%}",
             f"{r['accuracy']['embeddings']:.1%}", f"{r['mean_cosine']:.3f}",
             f"{r['embedding_norm']:.3f}",
             " / ".join(f"{e:.2f}" for e in r["cls_attention_evenness"])] for r in results]
    table = common.markdown_table(
        ["encoder", "[CLS] output", "mean-pooled output", "mean input embedding",
         "mean cosine of dev vectors", "mean embedding norm",
         "[CLS] attention evenness per layer"], rows)
    layer_rows = [[r["init"] + (" — random init" if r["random_init"] else ""),
                   *(f"{a:.1%}" for a in r["mean_per_layer"]),
                   f"{max(r['mean_per_layer']):.1%} (layer "
                   f"{int(np.argmax(r['mean_per_layer']))})"] for r in results]
    depth = len(results[0]["mean_per_layer"]) - 1
    table += ("\n\nThe mean-pooled probe at every depth (0: the embedding block's output, "
              "projected to the hidden size where the encoder has a projection; k: "
              "transformer layer k's output):\n\n" + common.markdown_table(
                  ["encoder", *map(str, range(depth + 1)), "best"], layer_rows))
    notes = [f"Logistic regression (scikit-learn, L2, C=1) on frozen features of "
             f"{os.path.relpath(FLAGS.train_file, common.REPO)}, dev accuracy on "
             f"{os.path.relpath(FLAGS.dev_file, common.REPO)}; seq {FLAGS.max_seq_length}.",
             "Random-init rows of model dirs with the same shape are the same weights "
             f"(keras seed {FLAGS.seed}).",
             "Reading it: a pre-trained encoder whose probes score no better than its random "
             "twin's has not learned features the task can use, and fine-tuning starts no "
             "better off; a mean cosine near 1 says it maps every sentence to about the "
             "same vector.",
             "[CLS] attention evenness: per layer, bottom first, the entropy of [CLS]'s "
             "attention over the real tokens / log(length), mean over heads and the first "
             "1,000 dev sentences (1: uniform, a bag of the sentence's values; 0: one token)."]
    record = {"title": "Linear probes of frozen encoder features", "run": common.run_info(),
              "settings": {f: FLAGS[f].value for f in ("init", "random", "train_file",
                                                       "dev_file", "max_seq_length", "seed")},
              "results": results}
    paths = common.write_results(FLAGS.results_name, record,
                                 table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    print(table)
    print("wrote " + ", ".join(os.path.relpath(p, common.REPO) for p in paths))
    return 0


if __name__ == "__main__":
    common.run(main)
