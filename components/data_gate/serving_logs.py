"""The rows a model server's request log holds, for the data gate's skew check
(`data.serving_data_format: prediction_log`).

The log is TF Serving's format: TFRecord files of PredictionLog records
(`tensorflow_serving.apis.prediction_log_pb2`), as Conveyor's model server writes them
(`pipelines.serving.model_server.request_log`). Each record's request becomes rows: a predict
request's inputs that hold one value a row (a `[batch]` or `[batch, 1]` tensor: the raw-feature
signature's columns), or the tf.Examples of a serialized-Example input or of a classify or
regress request. A file still being written may end in a partial record: what comes before it
is read, the rest is left to the next night.
"""

from __future__ import annotations

import os
from typing import Any

from pipelines.core.artifact_files import REQUEST_LOG_SUFFIX


def log_files(folder: str) -> list[str]:
    """The request log's files in `folder` (and the folders under it), sorted."""
    from tfx.dsl.io import fileio

    if "://" in folder:  # a bucket: TensorFlow's s3:// needs tensorflow-io
        from pipelines.core import storage

        storage.register_tensorflow_filesystems()
    found = []
    for root, _dirs, files in fileio.walk(folder):
        found.extend(os.path.join(root, f) for f in files if f.endswith(REQUEST_LOG_SUFFIX))
    return sorted(found)


def read_rows(folder: str) -> tuple[list[dict[str, Any]], int]:
    """Every logged row under `folder`, and how many files ended in a partial record."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    rows: list[dict[str, Any]] = []
    partial = 0
    for path in log_files(folder):
        try:
            for record in tf.data.TFRecordDataset(path):
                entry = prediction_log_pb2.PredictionLog.FromString(record.numpy())
                rows.extend(logged_rows(entry))
        except tf.errors.DataLossError:  # a record still being written
            partial += 1
    return rows, partial


def _columns_of_tensor_inputs(inputs) -> dict[str, list]:
    """A PredictRequest's inputs that hold one value a row, as columns of raw values."""
    import tensorflow as tf

    columns: dict[str, list] = {}
    for name, proto in inputs.items():
        array = tf.make_ndarray(proto)
        if array.ndim == 0:
            array = array.reshape(1)
        if array.ndim > 1:
            array = array.reshape(array.shape[0], -1)
            if array.shape[1] != 1:
                continue  # not one value a row: no column of the data to compare with
            array = array[:, 0]
        columns[name] = array.tolist()
    return columns


def _plain(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _rows_of_examples(examples) -> list[dict[str, Any]]:
    rows = []
    for example in examples:
        row = {}
        for name, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            values = list(getattr(feature, kind).value) if kind else []
            if len(values) == 1:
                row[name] = _plain(values[0])
        rows.append(row)
    return rows


def _examples(values: list) -> list | None:
    """The values as tf.Examples when each is a serialized one with features, else None."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.example import example_pb2

    if not values or not all(isinstance(v, bytes) for v in values):
        return None
    try:
        parsed = [example_pb2.Example.FromString(v) for v in values]
    except DecodeError:
        return None
    return parsed if all(e.features.feature for e in parsed) else None


def logged_rows(entry) -> list[dict[str, Any]]:
    """The rows one PredictionLog's request held, as {column: value} (module docstring)."""
    kind = entry.WhichOneof("log_type")
    if kind in ("classify_log", "regress_log"):
        request = getattr(entry, kind).request
        return _rows_of_examples(request.input.example_list.examples)
    if kind != "predict_log":
        return []
    columns = _columns_of_tensor_inputs(entry.predict_log.request.inputs)
    if len(columns) == 1:
        examples = _examples(next(iter(columns.values())))
        if examples is not None:
            return _rows_of_examples(examples)
    count = max((len(v) for v in columns.values()), default=0)
    return [
        {name: _plain(values[i]) for name, values in columns.items() if i < len(values)}
        for i in range(count)
    ]
