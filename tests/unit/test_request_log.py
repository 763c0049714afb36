"""The model server's request log (pipelines/serving/model_server/request_log.py) and what the
data gate reads back from it (components/data_gate/serving_logs.py): PredictionLog records in
TFRecord files, sampled, rotated by size and age, read back as rows."""

import base64
import json

import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from components.data_gate.serving_logs import log_files, read_rows
from pipelines.serving.model_server.metrics import ServerMetrics
from pipelines.serving.model_server.request_log import RequestLog, RequestLogOptions
from tests.storage_emulators import storage_emulators  # noqa: F401 - a fixture


class _Signature:
    input_dtypes = {"island": tf.string.as_datatype_enum, "mass": tf.float32.as_datatype_enum}


class _Servable:
    """What the log asks of the servable that answered: its signature's input types."""

    def signature(self, name):
        assert name == "serving_default"
        return _Signature()


class _Clock:
    def __init__(self):
        self.now = 1_795_831_200.0

    def __call__(self):
        return self.now


def _example(**features) -> str:
    example = tf.train.Example()
    for name, value in features.items():
        feature = example.features.feature[name]
        if isinstance(value, str):
            feature.bytes_list.value.append(value.encode())
        else:
            feature.float_list.value.append(value)
    return base64.b64encode(example.SerializeToString()).decode()


def test_predict_and_classify_requests_are_logged_and_read_back_as_rows(tmp_path):
    log = RequestLog(RequestLogOptions(str(tmp_path), sampling_rate=1.0))
    rows = {"instances": [{"island": "Biscoe", "mass": 4200.0}, {"island": "Dream", "mass": 3100}]}
    log.record("penguin", 3, "serving_default", "predict", rows, _Servable())
    columns = {"inputs": {"island": ["Torgersen"], "mass": [3700.5]}}
    log.record("penguin", 3, "serving_default", "predict", columns, _Servable())
    examples = {"examples": [{"island": "Biscoe", "mass": 5000.0}]}
    log.record("penguin", 3, "serving_examples", "classify", examples, _Servable())
    log.close()
    assert log.failed == 0

    (path,) = log_files(str(tmp_path))
    assert path.startswith(str(tmp_path / "penguin" / "requests-"))
    records = [
        prediction_log_pb2.PredictionLog.FromString(r.numpy())
        for r in tf.data.TFRecordDataset(path)
    ]
    spec = records[0].predict_log.request.model_spec
    assert (spec.name, spec.version.value, spec.signature_name) == ("penguin", 3, "serving_default")
    assert records[2].classify_log.request.model_spec.signature_name == "serving_examples"
    found, partial = read_rows(str(tmp_path))
    assert partial == 0
    assert found == [
        {"island": "Biscoe", "mass": 4200.0},
        {"island": "Dream", "mass": 3100.0},
        {"island": "Torgersen", "mass": 3700.5},
        {"island": "Biscoe", "mass": 5000.0},
    ]


def test_a_serialized_example_input_is_read_as_its_features(tmp_path):
    class ExamplesSignature:
        input_dtypes = {"examples": tf.string.as_datatype_enum}

    class Servable:
        def signature(self, name):
            return ExamplesSignature()

    log = RequestLog(RequestLogOptions(str(tmp_path), sampling_rate=1.0))
    doc = {"instances": [{"b64": _example(island="Dream", mass=3000.0)}]}
    log.record("penguin", 1, "serving_examples", "predict", doc, Servable())
    log.close()
    assert read_rows(str(tmp_path)) == ([{"island": "Dream", "mass": 3000.0}], 0)


def test_only_the_sampled_share_is_logged():
    draws = iter([0.05, 0.5, 0.09, 0.99])
    options = RequestLogOptions("unused", sampling_rate=0.1)
    log = RequestLog(options, random_draw=lambda: next(draws))
    assert [log.sampled() for _ in range(4)] == [True, False, True, False]


def test_files_rotate_by_age_and_size_and_a_partial_record_is_left_for_later(tmp_path):
    clock = _Clock()
    options = RequestLogOptions(
        str(tmp_path), sampling_rate=1.0, max_file_megabytes=0.0005, max_file_seconds=60
    )
    log = RequestLog(options, clock=clock)
    one = {"instances": [{"island": "Biscoe", "mass": 1.0}]}
    log.record("penguin", 1, "serving_default", "predict", one, _Servable())
    clock.now += 61  # older than max_file_seconds: the next record starts a file
    log.record("penguin", 1, "serving_default", "predict", one, _Servable())
    many = {"instances": [{"island": "Biscoe", "mass": float(i)} for i in range(40)]}
    log.record("penguin", 1, "serving_default", "predict", many, _Servable())  # past 512 bytes
    log.record("penguin", 1, "serving_default", "predict", one, _Servable())
    log.close()
    files = log_files(str(tmp_path))
    assert len(files) == 3, files
    # A server killed mid-write leaves a partial record: the rows before it are read.
    with open(files[-1], "ab") as handle:
        handle.write((100).to_bytes(8, "little") + b"\x00" * 4 + b"half a record")
    rows, partial = read_rows(str(tmp_path))
    assert (len(rows), partial) == (43, 1)


def test_a_record_that_cannot_be_written_never_fails_the_request(tmp_path):
    # ... and the server's metrics count it (TF Serving's request_log_count{status}).
    blocked = tmp_path / "a-file"
    blocked.write_text("where the log's folder should be")
    metrics = ServerMetrics()
    one = {"instances": [{"island": "Biscoe", "mass": 1.0}]}
    for folder in (blocked, tmp_path / "log"):
        options = RequestLogOptions(str(folder), sampling_rate=1.0)
        log = RequestLog(options, observe=metrics.observe_logged)
        log.record("penguin", 1, "serving_default", "predict", one, _Servable())
        log.record("penguin", 1, "serving_default", "predict", json.loads("{}"), _Servable())
        log.close()
    assert log.failed == 1  # the second log: the request body that is no request
    counted = {
        sample.labels["status"]: sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == "conveyor_serving_request_log_records_total"
    }
    assert counted == {"failed": 3.0, "ok": 1.0}


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_the_log_can_live_in_a_bucket(storage_emulators, scheme):  # noqa: F811 - the fixture
    folder = f"{storage_emulators.root(scheme)}/request-log-test"
    log = RequestLog(RequestLogOptions(folder, sampling_rate=1.0))
    one = {"instances": [{"island": "Biscoe", "mass": 1.0}]}
    log.record("penguin", 1, "serving_default", "predict", one, _Servable())
    log.close()
    assert log.failed == 0
    (path,) = log_files(folder)
    assert path.startswith(f"{folder}/penguin/requests-")
    assert read_rows(folder) == ([{"island": "Biscoe", "mass": 1.0}], 0)
