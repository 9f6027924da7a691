"""What dropout costs in the pre-training train step, and what other ways to draw its masks
would: the same step with each dropout, timed in one process, round after round.

    .venv/bin/python benchmarks/dropout_cost.py                   # small, CPU, ~12 minutes
    .venv/bin/python benchmarks/dropout_cost.py --jit_compile --precision=mixed_bfloat16 \\
        --size=base --batch_size=128 --results_name=dropout_cost_gpu_base   # on a GPU

Variants (each builds model_step.py's `ours` step, swapping `electra_tf.modeling.layers.dropout`
while it traces):
- ours: the library's dropout (16-bit Philox draws, two elements per 32-bit draw, the mask
  applied by an XLA-compiled loop outside XLA);
- hashed: the candidate whose masks are a hash of a key and each element's index (two rounds
  of MurmurHash3's finaliser, `hashed_dropout` below), recomputed in the forward and the
  backward loop instead of drawn into memory and kept for the gradient;
- tf_stateless: TensorFlow's own `tf.nn.experimental.stateless_dropout` (a float32 Philox
  draw per element);
- none: every dropout rate 0 (what the step costs without dropout).

The variants' steps run in turn, `--steps_per_round` steps each per round, over `--rounds`
rounds (each after waiting for the machine to be quiet), so a shared machine's slow spells
fall on all of them; the table gives each variant's median step and its median ratio to
`ours` over the rounds with those ratios' quartiles (the first round, which runs the graphs'
first optimisations, is left out).

Results: benchmarks/results/<--results_name>.{json,md} (default dropout_cost).
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # the tests import this module: no environment change there
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import common  # noqa: E402

from electra_tf.modeling import layers  # noqa: E402
from electra_tf.stateless import fmix32  # noqa: E402

VARIANTS = ("ours", "hashed", "tf_stateless", "none")
_KEY_STEP = 0x9E3779B9  # 2^32 / golden ratio


def hashed_key(seed, replica_id=None) -> tf.Tensor:
    """The candidate's key (uint32 scalar) from an int [2] seed ([layer seed, call count],
    each as its low 32 bits): fmix32(layer seed * odd constant ^ call count), plus the replica
    id times that constant."""
    seed = tf.cast(tf.bitwise.bitwise_and(tf.cast(seed, tf.int64),
                                          tf.constant(0xFFFFFFFF, tf.int64)), tf.uint32)
    step = tf.constant(_KEY_STEP, tf.uint32)
    key = fmix32(seed[0] * step ^ seed[1])
    if replica_id is not None:
        key += tf.cast(replica_id, tf.uint32) * step
    return key


def hashed_bits(key: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
    """uint32 bits for each element of `shape` (< 2^31 elements): fmix32(fmix32(i ^ key) +
    key) of its row-major index i; the key enters both rounds, so two keys' bits are not the
    same bits at permuted indices."""
    index = tf.bitcast(tf.reshape(tf.range(tf.reduce_prod(shape)), shape), tf.uint32)
    return fmix32(fmix32(index ^ key) + key)


def _keep_scaled(x, key, threshold: int, scale: float):
    keep = hashed_bits(key, tf.shape(x)) >= tf.constant(threshold, tf.uint32)
    return x * (tf.cast(keep, x.dtype) * scale)


# Traced once per shape and dtype rather than at each of the model's dropouts.
_traced_keep_scaled = tf.function(_keep_scaled, autograph=False)
_xla_keep_scaled = tf.function(_keep_scaled, jit_compile=True, autograph=False)


def hashed_dropout(inputs, rate: float, seed, replica_id=None):
    """Inverted dropout keeping an element when its hashed bits are at least
    round(rate * 2^32), scaled by 2^32 / (2^32 - that); the gradient recomputes the mask."""
    threshold = round(rate * 2 ** 32)
    if threshold >= 2 ** 32:
        return tf.zeros_like(inputs)
    key = hashed_key(seed, replica_id)
    scale = 2 ** 32 / (2 ** 32 - threshold)
    keep_scaled = _xla_keep_scaled if layers.xla_elementwise() else _traced_keep_scaled

    @tf.custom_gradient
    def apply(x):
        return (keep_scaled(x, key, threshold, scale),
                lambda dy: keep_scaled(dy, key, threshold, scale))

    return apply(inputs)


def tf_stateless_dropout(inputs, rate: float, seed, replica_id=None):
    del replica_id  # one replica here
    return tf.nn.experimental.stateless_dropout(inputs, rate, tf.cast(seed, tf.int64))


def main(argv):
    del argv
    import model_step

    FLAGS = model_step.FLAGS
    unknown = [v for v in FLAGS.variants if v not in VARIANTS]
    if unknown or "ours" not in FLAGS.variants:
        what = f"unknown {', '.join(unknown)}" if unknown else "no ours (the reference)"
        print(f"--variants={','.join(FLAGS.variants)}: {what}; choose from "
              f"{', '.join(VARIANTS)}, ours included", file=sys.stderr)
        return 1
    batch = model_step.make_batch(FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions,
                                  FLAGS.seed)
    library = layers.dropout
    swapped = {"ours": library, "hashed": hashed_dropout,
               "tf_stateless": tf_stateless_dropout, "none": library}
    steps, facts = {}, {}
    for name in FLAGS.variants:
        layers.dropout = swapped[name]
        try:
            start = time.perf_counter()
            step, facts = model_step.build_ours(batch, FLAGS.size, FLAGS.jit_compile,
                                                "no_dropout" if name == "none" else "full")
            for i in range(2):  # traced (and compiled) under the swapped dropout
                float(step(i))
        finally:
            layers.dropout = library
        steps[name] = step
        print(f"{name}: built, first two steps {time.perf_counter() - start:.1f} s", flush=True)
    times = {name: [] for name in steps}
    for r in range(FLAGS.rounds):
        common.wait_for_quiet(FLAGS.max_wait_quiet_s)
        for name, step in steps.items():
            start = time.perf_counter()
            for i in range(FLAGS.steps_per_round):
                float(step(i))
            times[name].append((time.perf_counter() - start) / FLAGS.steps_per_round)
        print(f"round {r + 1}/{FLAGS.rounds}: " + ", ".join(
            f"{name} {t[-1] * 1e3:,.0f} ms" for name, t in times.items()), flush=True)
    kept = {name: t[1:] if len(t) > 1 else t for name, t in times.items()}
    results = []
    for name, t in kept.items():
        ratios = [a / b for a, b in zip(t, kept["ours"])]
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        results.append({"variant": name, "ms_per_step": statistics.median(t) * 1e3,
                        "ratio_to_ours": statistics.median(ratios),
                        "ratio_quartiles": [quartiles[0], quartiles[2]],
                        "all_ms": [x * 1e3 for x in times[name]]})
        print(f"{name}: {results[-1]['ms_per_step']:,.0f} ms a step, "
              f"{results[-1]['ratio_to_ours']:.3f}x ours (quartiles "
              f"{quartiles[0]:.3f}-{quartiles[2]:.3f})")
    none = next((x for x in results if x["variant"] == "none"), None)
    rows = []
    for x in results:
        share = "-"
        if none and x["variant"] != "none":
            share = f"{1 - none['ratio_to_ours'] / x['ratio_to_ours']:.1%}"
        low, high = x["ratio_quartiles"]
        rows.append([x["variant"], f"{x['ms_per_step']:,.0f}", f"{x['ratio_to_ours']:.3f}x",
                     f"{low:.3f}-{high:.3f}", share])
    table = common.markdown_table(["dropout", "ms/step (median)", "step time / ours (median "
                                   "over rounds)", "the rounds' ratios, quartiles",
                                   "dropout's share of the step"], rows)
    device = facts.get("device", "cpu")
    notes = [
        f"ELECTRA-{FLAGS.size.capitalize()}'s train step as `benchmarks/model_step.py` builds "
        f"`ours` (batch {FLAGS.batch_size} x seq {FLAGS.seq_length}, {FLAGS.max_predictions} "
        f"masked slots, {FLAGS.precision}, Keras' AdamW), "
        + ("compiled with XLA" if FLAGS.jit_compile else "a tf.function without XLA")
        + f", on {'the CPU' if device == 'cpu' else device}; dropout 0.1 at each of the "
        "model's dropouts, swapped while the step traces.",
        f"{FLAGS.rounds} rounds of {FLAGS.steps_per_round} steps of each variant in turn, in "
        "one process, each round after waiting for other processes to use under 0.25 cores; "
        "the first round is left out. 'step time / ours' is the median over the rounds of "
        "each round's ratio, with the quartiles of those ratios beside it (a difference "
        "inside them is noise); 'dropout's share' is 1 - (none / variant) of the medians.",
        "Variants: ours = the library's dropout (16-bit Philox draws; outside XLA the mask "
        "applied by an XLA-compiled loop); hashed = masks hashed from a key and each "
        "element's index, recomputed in the backward pass (`hashed_dropout`); tf_stateless "
        "= tf.nn.experimental.stateless_dropout; none = dropout rates 0.",
    ]
    record = {"title": "What dropout costs in the train step", "run": common.run_info(),
              "flags": {k: FLAGS[k].value for k in ("size", "batch_size", "seq_length",
                                                      "max_predictions", "precision",
                                                      "jit_compile", "rounds",
                                                      "steps_per_round", "seed")},
              "device": device, "results": results, "notes": notes}
    body = table + "\n\n" + "\n".join(f"- {n}" for n in notes)
    paths = common.write_results(FLAGS.results_name, record, body)
    print("wrote " + ", ".join(os.path.relpath(p) for p in paths))
    return 0


if __name__ == "__main__":
    import model_step  # defines the step's flags (batch, precision, seed, results_name)
    from absl import flags

    from electra_tf import choices
    flags.DEFINE_enum("size", "small", choices.MODEL_SIZES, "Model size.")
    flags.DEFINE_bool("jit_compile", False, "Compile the step with XLA (as on a GPU or TPU).")
    flags.DEFINE_list("variants", list(VARIANTS), "Dropouts to time: " + ", ".join(VARIANTS))
    flags.DEFINE_integer("rounds", 8, "Rounds of each variant's steps in turn.")
    flags.DEFINE_integer("steps_per_round", 3, "Steps of a variant per round.")
    flags.FLAGS.set_default("results_name", "dropout_cost")
    del model_step
    common.run(main)
