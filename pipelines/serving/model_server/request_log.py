"""The request log: a sampled share of the requests the server answered, as TF Serving's
request logger writes them, PredictionLog records (`tensorflow_serving.apis.prediction_log`)
in TFRecord files, which the next night's data gate reads to measure training-serving skew
(`data.serving_data_format: prediction_log`, `components.data_gate`).

TF Serving configures its logger per model in `models.config` (`logging_config`: a sampling
rate and a log collector), but open-source `tensorflow_model_server` ships no log collector and
refuses to start with one configured ("No request-logger-creator provided",
tensorflow/serving#408). So Conveyor's models.config never carries it (the real server must
read the same file), and this server takes the settings from the spec's `push.request_log`
instead (`conveyor serve` passes them; `RequestLogOptions`).

Each answered :predict, :classify or :regress request is logged with probability
`sampling_rate`, its request only (the skew check needs what serving saw, not what it said):
a PredictRequest with the inputs as TensorProtos, or a Classification/RegressionRequest with
its tf.Examples. Records go to `<dir>/<model>/requests-<UTC start>-<pid>-<n>.tfrecord`, one
file per server process at a time, flushed after every record, so a reader (or a server that
dies) loses at most the record being written; a file is closed and the next one started when
it passes `max_file_megabytes` or is `max_file_seconds` old, as a log rotates. A record that
cannot be written is counted and said once, never the request's failure: serving does not
depend on its log.
"""

from __future__ import annotations

import datetime
import logging
import os
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.core.artifact_files import REQUEST_LOG_SUFFIX

log = logging.getLogger("conveyor.serving")

FILE_PREFIX = "requests-"


@dataclass(frozen=True)
class RequestLogOptions:
    """Where and how much the server logs (the spec's `push.request_log`)."""

    dir: str
    sampling_rate: float
    max_file_megabytes: float = 64.0
    max_file_seconds: float = 3600.0


class RequestLog:
    """Writes sampled requests as PredictionLog records (module docstring); thread-safe."""

    def __init__(
        self,
        options: RequestLogOptions,
        random_draw=random.random,
        clock=time.time,
        observe=None,
    ):
        """`observe(model, ok)` is told of every record written or not (the server's metrics)."""
        self._options = options
        self._observe = observe
        self._draw = random_draw
        self._clock = clock
        self._lock = threading.Lock()
        self._files: dict[str, _OpenFile] = {}
        self._sequence = 0
        self.failed = 0

    def sampled(self) -> bool:
        """Whether this request is logged (one draw against the sampling rate)."""
        return self._options.sampling_rate >= 1.0 or self._draw() < self._options.sampling_rate

    def record(
        self, model: str, version: int, signature: str, verb: str, doc: Mapping[str, Any], servable
    ) -> None:
        """Logs one answered request (its parsed body `doc`, answered by `servable`)."""
        try:
            entry = prediction_log(model, version, signature, verb, doc, servable)
            self._write(model, entry.SerializeToString())
        except Exception as err:  # noqa: BLE001 - the log must never fail a request
            self.failed += 1
            if self._observe is not None:
                self._observe(model, False)
            if self.failed == 1:
                log.warning(
                    "request log: a record was not written (%s: %s)", type(err).__name__, err
                )
            return
        if self._observe is not None:
            self._observe(model, True)

    def _write(self, model: str, data: bytes) -> None:
        with self._lock:
            current = self._files.get(model)
            now = self._clock()
            if current is not None and current.full(self._options, now):
                current.close()
                current = None
            if current is None:
                current = self._open(model, now)
                self._files[model] = current
            current.write(data)

    def _open(self, model: str, now: float) -> _OpenFile:
        import tensorflow as tf

        if "://" in self._options.dir:  # a bucket: TensorFlow's s3:// needs tensorflow-io
            from pipelines.core import storage

            storage.register_tensorflow_filesystems()
        folder = os.path.join(self._options.dir, model)
        tf.io.gfile.makedirs(folder)
        self._sequence += 1
        stamp = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
        name = f"{FILE_PREFIX}{stamp:%Y%m%dT%H%M%SZ}-{os.getpid()}-{self._sequence}"
        name += REQUEST_LOG_SUFFIX
        return _OpenFile(tf.io.TFRecordWriter(os.path.join(folder, name)), now)

    def close(self) -> None:
        """Closes every open file (the server stops)."""
        with self._lock:
            for current in self._files.values():
                current.close()
            self._files.clear()


class _OpenFile:
    def __init__(self, writer, opened_at: float):
        self.writer = writer
        self.opened_at = opened_at
        self.size = 0

    def full(self, options: RequestLogOptions, now: float) -> bool:
        too_big = self.size >= options.max_file_megabytes * 1024 * 1024
        return too_big or now - self.opened_at >= options.max_file_seconds

    def write(self, data: bytes) -> None:
        self.writer.write(data)
        self.writer.flush()
        self.size += len(data) + 16  # a TFRecord's length, its CRCs

    def close(self) -> None:
        self.writer.close()


def prediction_log(model: str, version: int, signature: str, verb: str, doc, servable):
    """One request as TF Serving's logger records it: a PredictionLog whose request is the
    PredictRequest (inputs as TensorProtos, as the signature was fed) or the Classification/
    RegressionRequest (its tf.Examples)."""
    import tensorflow as tf
    from tensorflow.core.example import example_pb2
    from tensorflow_serving.apis import prediction_log_pb2

    from pipelines.serving.model_server import json_tensor

    entry = prediction_log_pb2.PredictionLog()
    entry.log_metadata.timestamp_secs = int(time.time())
    if verb == "predict":
        request = entry.predict_log.request
        feeds, _ = json_tensor.predict_inputs(
            doc, servable.signature(signature).input_dtypes, signature
        )
        for name, array in feeds.items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(array))
    else:
        log_entry = entry.classify_log if verb == "classify" else entry.regress_log
        request = log_entry.request
        examples = request.input.example_list.examples
        for serialized in json_tensor.serialized_examples(doc):
            examples.add().CopyFrom(example_pb2.Example.FromString(serialized))
    spec = request.model_spec
    spec.name, spec.signature_name = model, signature
    spec.version.value = int(version)
    return entry
