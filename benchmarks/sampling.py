"""The generator's sampling on CPU: ours (`tensors.sample_from_logits`, inverse CDF over
blocks of the vocabulary) against the official Gumbel-max sampling (argmax of logits plus
-log(-log(u)), one hashed uniform per logit), in the same process: alone on one batch's
generator logits [B, N, V], and inside model_step.py's train step (ours, tf.function, no
XLA), each size's step once with each sampler.

    .venv/bin/python benchmarks/sampling.py                      # tiny and small, ~5 minutes
    .venv/bin/python benchmarks/sampling.py --sizes=tiny --repeats=1 --min_seconds=2

Medians of --repeats runs of at least --min_seconds each, after 2 warm-up calls
(model_step.py's flags, batch and shapes). Both samplers draw from softmax(logits); they
draw different tokens for the same seed.
Results: benchmarks/results/sampling.{json,md}.
"""

import importlib.util
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402
import model_step  # noqa: E402  (its flags, batch and shapes)
flags.adopt_module_key_flags(model_step)  # (--helpshort lists them)

FLAGS = flags.FLAGS
flags.DEFINE_list("vocab_sizes", ["30522", "21128"], "Vocabularies of the sampler-alone "
                  "rows (BERT's English uncased, Chinese).")
flags.DEFINE_bool("torch", True, "Also time PyTorch's Gumbel-max and torch.multinomial on "
                  "the first vocabulary's logits (where torch is installed).")


def gumbel_max_sample(logits, seed: int, example_index, temperature: float = 1.0,
                      disallow=None):
    """The official sampling (pretrain_helpers.sample_from_softmax): the argmax of logits
    plus Gumbel noise, with our hashed uniforms (one per logit) instead of tf.random."""
    import tensorflow as tf

    from electra_tf.stateless import STREAM_GENERATOR_SAMPLES, hash_open_uniform
    logits = tf.cast(logits, tf.float32) / temperature
    if disallow is not None:
        logits += -1e9 * tf.one_hot(disallow, tf.shape(logits)[-1], dtype=tf.float32)
    flat = tf.reshape(logits, [tf.shape(logits)[0], -1])
    slots = tf.range(tf.shape(flat)[1])[None, :]
    uniform = hash_open_uniform(seed, STREAM_GENERATOR_SAMPLES, example_index, slots)
    gumbel = tf.reshape(-tf.math.log(-tf.math.log(uniform)), tf.shape(logits))
    return tf.argmax(logits + gumbel, axis=-1, output_type=tf.int32)


SAMPLERS = {"ours": "ours (inverse CDF)", "gumbel_max": "official Gumbel-max"}


def sampler(name: str):
    from electra_tf.modeling import tensors
    return tensors.sample_from_logits if name == "ours" else gumbel_max_sample


def alone(name: str, vocab: int):
    import tensorflow as tf
    shape = [FLAGS.batch_size, FLAGS.max_predictions, vocab]
    logits = 3.0 * tf.random.stateless_normal(shape, [FLAGS.seed, 1])
    index = tf.range(shape[0], dtype=tf.int64)
    sample = tf.function(lambda: sampler(name)(logits, FLAGS.seed, index))
    return lambda: sample().numpy()


def torch_samplers(vocab: int) -> dict:
    """PyTorch's Gumbel-max (model_step.py's PyTorch step) and torch.multinomial on the
    softmax, same logits shape, torch threads = cores."""
    import torch
    torch.set_num_threads(os.cpu_count())
    logits = 3.0 * torch.randn(FLAGS.batch_size, FLAGS.max_predictions, vocab)

    def gumbel_max():
        uniform = torch.rand_like(logits).clamp_(1e-9, 1 - 1e-9)
        return torch.argmax(logits - torch.log(-torch.log(uniform)), -1)

    def multinomial():
        return torch.multinomial(torch.softmax(logits.view(-1, vocab), -1), 1)
    return {"PyTorch Gumbel-max": gumbel_max, "PyTorch torch.multinomial": multinomial}


def in_step(name: str, size: str, batch: dict):
    from electra_tf.modeling import pretrainer
    pretrainer.sample_from_logits = sampler(name)  # what ElectraPretrainer.sample calls
    step, _ = model_step.build_ours(batch, size, jit_compile=False)
    counter = [0]

    def call():
        counter[0] += 1
        step(counter[0])
    return call


def main(argv):
    del argv
    measure = lambda fn, label: common.seconds_per_call(  # noqa: E731
        fn, FLAGS.min_seconds, FLAGS.repeats, FLAGS.max_wait_quiet_s, label)
    rows, record = [], {"alone": {}, "step": {}}

    def add(what, key, seconds):
        record[what][key] = seconds
        rows.append([key if what == "alone" else f"{key} train step"]
                    + [f"{seconds[n] * 1e3:,.1f}" for n in SAMPLERS]
                    + [f"{(seconds['gumbel_max'] - seconds['ours']) * 1e3:,.1f}",
                       f"{seconds['gumbel_max'] / seconds['ours']:.2f}x"])

    for vocab in [int(v) for v in FLAGS.vocab_sizes]:
        key = f"sampling alone, [{FLAGS.batch_size}, {FLAGS.max_predictions}, {vocab}]"
        add("alone", key, {n: measure(alone(n, vocab), f"{label}, {key}")
                           for n, label in SAMPLERS.items()})
    torch_rows = []
    if FLAGS.torch and importlib.util.find_spec("torch"):
        vocab = int(FLAGS.vocab_sizes[0])
        for label, fn in torch_samplers(vocab).items():
            record["alone"][label] = measure(fn, label)
            torch_rows.append([f"{label}, [{FLAGS.batch_size}, {FLAGS.max_predictions}, "
                               f"{vocab}]", f"{record['alone'][label] * 1e3:,.1f}"])
    batch = model_step.make_batch(FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions,
                                  FLAGS.seed)
    for size in FLAGS.sizes:
        add("step", size, {n: measure(in_step(n, size, batch), f"{label}, {size} step")
                           for n, label in SAMPLERS.items()})
    body = (f"Batch {FLAGS.batch_size} x seq {FLAGS.seq_length}, {FLAGS.max_predictions} "
            f"masked slots, {FLAGS.precision}, tf.function without XLA; medians of "
            f"{FLAGS.repeats} runs of at least {FLAGS.min_seconds:g} s.\n\n"
            + common.markdown_table(["what", "ms, " + SAMPLERS["ours"],
                                     "ms, " + SAMPLERS["gumbel_max"], "saved (ms)",
                                     "speed-up"], rows)
            + "\n\n- ours: `electra_tf.modeling.tensors.sample_from_logits`: softmax, sums "
            f"over blocks of {_block()} ids, one hashed uniform per masked slot, a search "
            "over the blocks' running sums and then within one block.\n"
            "- official Gumbel-max: argmax(logits - log(-log(u))), one hashed uniform per "
            "logit (what `sample_from_logits` did before; the official code and "
            "benchmarks/model_step.py's PyTorch step sample this way).\n"
            "- train step: model_step.py's step of ours (generator, sampling, discriminator, "
            "losses, backward, Keras AdamW), the same model and batch with either sampler.\n")
    if torch_rows:
        body += ("\nPyTorch in the same process (torch threads = cores), for scale:\n\n"
                 + common.markdown_table(["what", "ms"], torch_rows) + "\n")
    paths = common.write_results(FLAGS.results_name,
                                 {"title": "The generator's sampling on CPU",
                                  "run": common.run_info(),
                                  "settings": {"sizes": FLAGS.sizes,
                                               "vocab_sizes": FLAGS.vocab_sizes,
                                               "batch_size": FLAGS.batch_size,
                                               "seq_length": FLAGS.seq_length,
                                               "max_predictions": FLAGS.max_predictions,
                                               "precision": FLAGS.precision,
                                               "min_seconds": FLAGS.min_seconds,
                                               "repeats": FLAGS.repeats},
                                  "seconds": record}, body)
    print(body)
    print("wrote " + ", ".join(os.path.relpath(p, common.REPO) for p in paths))
    return 0


def _block() -> int:
    from electra_tf.modeling.tensors import SAMPLE_BLOCK
    return SAMPLE_BLOCK


if __name__ == "__main__":
    FLAGS.set_default("sizes", ["tiny", "small"])
    FLAGS.set_default("min_seconds", 5.0)
    FLAGS.set_default("results_name", "sampling")
    common.run(main)
