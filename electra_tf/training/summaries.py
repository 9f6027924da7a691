"""Reading back the scalars and texts a run wrote to TensorBoard (for plots, studies and
tests)."""

import os

import tensorflow as tf


def read_scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of every scalar in a TensorBoard run directory (e.g.
    MODEL_DIR/train), in the order of their steps. As in TensorBoard, a SessionLog START
    event (a run writes one at the first step it computes) drops what was written at or
    after its step, and a step written twice keeps its last value; a file whose last record
    a kill -9 cut short gives the records before it. Any tf.io.gfile path (gs://...)."""
    return _read(run_dir, _scalar)


def read_texts(run_dir: str) -> dict[str, list[tuple[int, str]]]:
    """{tag: [(step, text), ...]} of every text summary (the operative gin config) in a
    TensorBoard run directory, read as read_scalars reads scalars."""
    return _read(run_dir, _text)


def _scalar(value):
    if value.HasField("tensor") and value.tensor.dtype == tf.float32.as_datatype_enum:
        return float(tf.make_ndarray(value.tensor))
    return value.simple_value if value.HasField("simple_value") else None


def _text(value):
    if value.HasField("tensor") and value.tensor.dtype == tf.string.as_datatype_enum:
        return tf.make_ndarray(value.tensor).item().decode("utf-8")
    return None


def _read(run_dir: str, read) -> dict:
    """{tag: [(step, read(value)), ...]} of the values `read` does not give None for."""
    values: dict[str, dict] = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        for event in _events(path):
            if event.session_log.status == tf.compat.v1.SessionLog.START:
                for steps in values.values():
                    for step in [s for s in steps if s >= event.step]:
                        del steps[step]
            for value in event.summary.value:
                got = read(value)
                if got is not None:
                    values.setdefault(value.tag, {})[event.step] = got
    return {tag: sorted(steps.items()) for tag, steps in values.items()}


def _events(path: str):
    try:
        for record in tf.data.TFRecordDataset(path):
            yield tf.compat.v1.Event.FromString(record.numpy())
    except tf.errors.DataLossError:  # the end of a file a kill -9 cut short
        return
