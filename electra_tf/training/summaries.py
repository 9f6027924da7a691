"""Reading back the scalars a run wrote to TensorBoard (for plots, studies and tests)."""

import os

import tensorflow as tf


def read_scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of every scalar in a TensorBoard run directory (e.g.
    MODEL_DIR/train), in the order written. As in TensorBoard, a SessionLog START event (a
    run writes one at the first step it computes) drops what was written at or after its
    step, and a step written twice keeps its last value; a file whose last record
    a kill -9 cut short gives the records before it. Any tf.io.gfile path (gs://...)."""
    values: dict[str, dict[int, float]] = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        for event in _events(path):
            if event.session_log.status == tf.compat.v1.SessionLog.START:
                for steps in values.values():
                    for step in [s for s in steps if s >= event.step]:
                        del steps[step]
            for value in event.summary.value:
                if value.HasField("tensor") and value.tensor.dtype == tf.float32.as_datatype_enum:
                    number = float(tf.make_ndarray(value.tensor))
                elif value.HasField("simple_value"):
                    number = value.simple_value
                else:
                    continue
                values.setdefault(value.tag, {})[event.step] = number
    return {tag: sorted(steps.items()) for tag, steps in values.items()}


def _events(path: str):
    try:
        for record in tf.data.TFRecordDataset(path):
            yield tf.compat.v1.Event.FromString(record.numpy())
    except tf.errors.DataLossError:  # the end of a file a kill -9 cut short
        return
