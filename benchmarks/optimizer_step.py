"""The optimizer's update alone on CPU: AdamWeightDecay (the official update the trainer
applies, `apply_gradients(where=)` as the trainer calls it) through TensorFlow's fused Adam
kernel, its default on a CPU, against the same update written out as elementwise ops (what
it runs under XLA and on accelerators) and Keras' AdamW, in the same process, on the
trainable variables of ELECTRA-Small and -Base pre-training (generator and discriminator).

    .venv/bin/python benchmarks/optimizer_step.py                 # about 2 minutes
    .venv/bin/python benchmarks/optimizer_step.py --sizes=small

Each update is a tf.function without XLA over random gradients held in memory; after 2
warm-up calls, the median of --repeats runs of at least --min_seconds each (model_step.py's
flags, shapes and AdamW settings).
Results: benchmarks/results/optimizer_step.{json,md}.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402
import model_step  # noqa: E402  (its flags, shapes and AdamW settings)
flags.adopt_module_key_flags(model_step)  # (--helpshort lists them)

FLAGS = flags.FLAGS

IMPLEMENTATIONS = {"fused": "AdamWeightDecay, fused kernel (CPU default)",
                   "written_out": "AdamWeightDecay, written out (XLA, accelerators)",
                   "keras_adamw": "keras.optimizers.AdamW"}


def variables_of(size: str):
    """The trainable variables of ElectraPretrainer at `size` (model_step.py's shapes)."""
    from electra_tf.modeling.pretrainer import ElectraPretrainer
    discriminator, generator = model_step.shapes(size)
    model = ElectraPretrainer(discriminator, generator, objective="electra",
                              sharing="embeddings", seed=0)
    return model.trainable_variables


def update_function(implementation: str, variables):
    import keras
    import tensorflow as tf

    from electra_tf.training.optimization import AdamWeightDecay
    if implementation == "keras_adamw":
        optimizer = keras.optimizers.AdamW(model_step.LEARNING_RATE,
                                           weight_decay=model_step.WEIGHT_DECAY,
                                           epsilon=model_step.ADAM_EPSILON)
    else:
        optimizer = AdamWeightDecay(model_step.LEARNING_RATE,
                                    weight_decay_rate=model_step.WEIGHT_DECAY,
                                    epsilon=model_step.ADAM_EPSILON)
        if implementation == "written_out":  # the path taken under XLA and on accelerators
            optimizer._fused_on = lambda variable: False
    optimizer.build(variables)
    grads = [tf.random.stateless_normal(v.shape, [i, 1], stddev=1e-3)
             for i, v in enumerate(variables)]
    where = tf.constant(True)

    @tf.function
    def update():
        if implementation == "keras_adamw":
            optimizer.apply_gradients(zip(grads, variables))
        else:
            optimizer.apply_gradients(zip(grads, variables), where=where)
        return optimizer.iterations

    return lambda: update().numpy()


def main(argv):
    del argv
    rows, record = [], {}
    for size in FLAGS.sizes:
        variables = variables_of(size)
        parameters = sum(int(v.shape.num_elements()) for v in variables)
        seconds = {}
        for implementation, label in IMPLEMENTATIONS.items():
            seconds[implementation] = common.seconds_per_call(
                update_function(implementation, variables), FLAGS.min_seconds, FLAGS.repeats,
                FLAGS.max_wait_quiet_s)
            print(f"{size}, {label}: {seconds[implementation] * 1e3:,.1f} ms", flush=True)
        record[size] = {"parameters": parameters, "variables": len(variables),
                        "seconds_per_update": seconds}
        for implementation, label in IMPLEMENTATIONS.items():
            rows.append([size, label, f"{seconds[implementation] * 1e3:,.1f}",
                         f"{seconds['written_out'] / seconds[implementation]:.2f}x"])
    sizes = ", ".join(f"{s} {record[s]['parameters'] / 1e6:.1f}M parameters in "
                      f"{record[s]['variables']} variables" for s in FLAGS.sizes)
    body = (f"One optimizer update of ElectraPretrainer's trainable variables ({sizes}), "
            "a tf.function without XLA, random gradients held in memory; median of "
            f"{FLAGS.repeats} runs of at least {FLAGS.min_seconds:g} s.\n\n"
            + common.markdown_table(["size", "update", "ms", "speed-up over written out"],
                                    rows)
            + "\n\n- AdamWeightDecay is the official update (no bias correction, weight decay "
            "0.01 except LayerNorm and bias, epsilon 1e-6), applied with `where=` as the "
            "trainer applies it. `fused`: ResourceApplyGradientDescent for the decay, then "
            "ResourceApplyAdam, one kernel each per variable; `written out`: the same update "
            "as TensorFlow elementwise ops, forced here by switching the fused path off.\n"
            "- keras.optimizers.AdamW (Keras' decoupled decay and bias correction, no "
            "`where`) is what benchmarks/model_step.py's step applies.\n")
    paths = common.write_results(FLAGS.results_name,
                                 {"title": "The optimizer update on CPU",
                                  "run": common.run_info(),
                                  "settings": {"sizes": FLAGS.sizes,
                                               "min_seconds": FLAGS.min_seconds,
                                               "repeats": FLAGS.repeats},
                                  "sizes": record}, body)
    print(body)
    print("wrote " + ", ".join(os.path.relpath(p, common.REPO) for p in paths))
    return 0


if __name__ == "__main__":
    FLAGS.set_default("min_seconds", 5.0)
    FLAGS.set_default("results_name", "optimizer_step")
    common.run(main)
