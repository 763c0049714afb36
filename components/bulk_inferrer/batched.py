"""Batch inference over rows already grouped in batches: the Beam steps of `conveyor infer`.

tfx_bsl's RunInference (what TFX's BulkInferrer runs) takes one tf.Example per element, batches
them again, and builds each PredictionLog with `tf.make_tensor_proto`: at a million rows on the
DirectRunner most of the time goes to those per-row steps, not to the model. Here the reader
yields batches, the model answers a batch per element, and each PredictionLog is built with the
same fields and values RunInference gives a predict signature (`_PredictModelHandler.
_post_process`): the request's serialized example under the signature's one input, both model
specs naming the signature, each output's row as a TensorProto of shape [1, ...] laid out as
`tf.make_tensor_proto` lays it out (tensor_content for more than one number, the typed value
field for one). tests/e2e/test_bulk_inferrer.py compares the two on the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np

METRICS_NAMESPACE = "conveyor_infer"
PARSED, BAD = "parsed", "bad"
_DT_STRING = 7
# tf.make_tensor_proto's typed value field of a one-value tensor, by numpy dtype.
_VALUE_FIELDS = {
    np.dtype(np.float32): "float_val",
    np.dtype(np.float64): "double_val",
    np.dtype(np.int32): "int_val",
    np.dtype(np.int16): "int_val",
    np.dtype(np.int8): "int_val",
    np.dtype(np.uint8): "int_val",
    np.dtype(np.int64): "int64_val",
    np.dtype(np.bool_): "bool_val",
}


class ReadRowBatches(beam.DoFn):
    """One input file -> batches of serialized tf.Examples; bad rows tagged `bad`.

    `reader.batches(path, stream, size)` yields (`parsed`, [bytes, ...]) and (`bad`, row).
    """

    def __init__(self, reader: Any, batch_size: int):
        self._reader = reader
        self._batch_size = batch_size
        self._bad = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "bad_rows")

    def process(self, path: str) -> Iterator[Any]:
        """Reads `path` through Beam's filesystems (local, gs://, s3://)."""
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.open(path, compression_type="uncompressed") as stream:
            for tag, value in self._reader.batches(path, stream, self._batch_size):
                if tag == PARSED:
                    yield value
                else:
                    self._bad.inc()
                    yield beam.pvalue.TaggedOutput(BAD, value)


class PredictBatches(beam.DoFn):
    """A batch of serialized tf.Examples -> one serialized PredictionLog per example."""

    def __init__(self, model_dir: str, signature: str):
        self._model_dir = model_dir
        self._signature = signature
        self._predicted = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "predictions")
        self._function = None
        self._input = ""

    def setup(self) -> None:
        """Loads the SavedModel once per worker (from a bucket too: TensorFlow's s3:// comes
        with tensorflow-io, which importing TensorFlow does not load)."""
        import tensorflow as tf

        from pipelines.core import storage

        if storage.is_remote(self._model_dir):
            storage.register_tensorflow_filesystems()
        function = tf.saved_model.load(self._model_dir).signatures[self._signature]
        inputs = function.structured_input_signature[1]
        if len(inputs) != 1 or next(iter(inputs.values())).dtype != tf.string:
            raise ValueError(
                f"signature {self._signature!r} of {self._model_dir} takes {sorted(inputs)}: "
                "batch inference calls a signature with one input of serialized tf.Examples"
            )
        self._function, self._input = function, next(iter(inputs))

    def process(self, batch: list[bytes]) -> Iterator[bytes]:
        """Calls the signature on the whole batch, then logs each row."""
        import tensorflow as tf

        answers = self._function(**{self._input: tf.constant(batch)})
        outputs = {name: answers[name].numpy() for name in sorted(answers)}
        for name, values in outputs.items():
            if values.ndim < 1 or values.shape[0] != len(batch):
                raise ValueError(
                    f"output {name!r} has shape {values.shape} for a batch of {len(batch)}"
                )
        template = self._template(outputs)
        for index, example in enumerate(batch):
            yield prediction_log(template, self._input, example, outputs, index)
        self._predicted.inc(len(batch))

    def _template(self, outputs: dict[str, np.ndarray]) -> Any:
        """A PredictionLog with everything but the example and the output values."""
        import tensorflow as tf
        from tensorflow_serving.apis import prediction_log_pb2

        log = prediction_log_pb2.PredictionLog()
        predict = log.predict_log
        request = predict.request.inputs[self._input]
        request.dtype = _DT_STRING
        request.tensor_shape.dim.add().size = 1
        predict.request.model_spec.signature_name = self._signature
        predict.response.model_spec.signature_name = self._signature
        for name, values in outputs.items():
            tensor = predict.response.outputs[name]
            tensor.dtype = tf.as_dtype(values.dtype).as_datatype_enum
            for size in (1, *values.shape[1:]):
                tensor.tensor_shape.dim.add().size = size
        return log


def prediction_log(
    template: Any, input_name: str, example: bytes, outputs: dict[str, np.ndarray], index: int
) -> bytes:
    """The serialized PredictionLog of row `index`: `template` with its example and values."""
    log = type(template)()
    log.CopyFrom(template)
    predict = log.predict_log
    predict.request.inputs[input_name].string_val.append(example)
    for name, values in outputs.items():
        row = values[index]
        tensor = predict.response.outputs[name]
        if values.dtype.kind in "SOU":
            tensor.string_val.extend(np.ravel(row).tolist())
        elif row.size > 1:
            tensor.tensor_content = np.ascontiguousarray(row).tobytes()
        else:
            getattr(tensor, _VALUE_FIELDS[values.dtype]).append(row.item())
    return log.SerializeToString()
