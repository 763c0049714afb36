"""`conveyor serve` on a penguin model the pipeline really pushed.

One cold `penguin` run with the `ci` profile pushes version 1 (and the pusher writes
models.config with its labels); `conveyor serve` then serves it over TF Serving's REST API.
Every answer is compared with the pushed SavedModel called in this process: the raw-row
`serving_default` signature in row and columnar format, and the tf.Example signature
`serving_examples` with binary (b64) values.

The server logs every request it answers (`push.request_log`), as TF Serving's PredictionLog
records; the module ends with the loop back to training: traffic skewed to one island, then
the next night, whose data gate reads that log and blocks the night naming the feature.
"""

from __future__ import annotations

import base64
import json
import sys

import numpy as np
import pytest
import tensorflow as tf

from components.data_gate.serving_logs import log_files
from pipelines.ops import nightly
from pipelines.serving_state.versions import served_versions
from pipelines.spec.loading import load_spec
from tests.conftest import penguin_ci_run
from tests.serving_server import serving

# Every answered request is logged (the default dir: request_logs/<model> under the workdir).
REQUEST_LOG = "push.request_log={sampling_rate: 1.0}"

ROWS = [
    {
        "island": "Torgersen",
        "sex": "male",
        "bill_length_mm": 39.1,
        "bill_depth_mm": 18.7,
        "flipper_length_mm": 181.0,
        "body_mass_g": 3750.0,
    },
    {
        "island": "Biscoe",
        "sex": "female",
        "bill_length_mm": 46.5,
        "bill_depth_mm": 14.5,
        "flipper_length_mm": 213.0,
        "body_mass_g": 4800.0,
    },
    {  # a missing sex is "", a missing number NaN (the REST API's JSON allows NaN)
        "island": "Dream",
        "sex": "",
        "bill_length_mm": 50.0,
        "bill_depth_mm": 19.3,
        "flipper_length_mm": 197.0,
        "body_mass_g": float("nan"),
    },
]
NUMERIC = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    paths, result = penguin_ci_run(tmp_path_factory.mktemp("serving_penguin"))
    assert result.outcome == "pushed", result.message
    return paths


@pytest.fixture(scope="module")
def server(pushed):
    command = [sys.executable, "-m", "pipelines.cli", "serve", "penguin", "--env", "ci"]
    with serving(
        ["--workdir", str(pushed.workdir), "--poll-seconds", "0.5", "--set", REQUEST_LOG],
        pushed.workdir / "server",
        command=command,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def signatures(pushed):
    return tf.saved_model.load(str(pushed.serving_dir / "1")).signatures


def _columns() -> dict[str, tf.Tensor]:
    return {
        name: tf.constant([row[name] for row in ROWS], tf.float32 if name in NUMERIC else tf.string)
        for name in ROWS[0]
    }


def _assert_same(answer: dict, expected: dict) -> None:
    assert sorted(answer) == sorted(expected)
    for name, tensor in expected.items():
        values = tensor.numpy()
        if values.dtype == object:
            assert answer[name] == [v.decode() for v in values.tolist()], name
        else:
            np.testing.assert_array_equal(np.asarray(answer[name], values.dtype), values, name)


def test_serve_follows_the_models_config_the_push_wrote(server):
    assert "serving " in server.log() and "models.config" in server.log()
    status = server.get("/v1/models/penguin/labels/stable").json()
    assert status["model_version_status"][0]["version"] == "1"
    assert status["model_version_status"][0]["state"] == "AVAILABLE"


def test_row_format_equals_the_in_process_call(server, signatures):
    response = server.post("/v1/models/penguin/labels/stable:predict", {"instances": ROWS})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert [p["classes"] for p in predictions] == ["Adelie", "Gentoo", "Chinstrap"]
    expected = signatures["serving_default"](**_columns())
    columns = {name: [p[name] for p in predictions] for name in predictions[0]}
    _assert_same(columns, expected)


def test_columnar_format_equals_the_in_process_call(server, signatures):
    inputs = {name: [row[name] for row in ROWS] for name in ROWS[0]}
    response = server.post("/v1/models/penguin:predict", {"inputs": inputs})
    assert response.status_code == 200, response.text
    _assert_same(response.json()["outputs"], signatures["serving_default"](**_columns()))


def test_tf_examples_travel_as_b64_and_equal_the_in_process_call(server, signatures):
    examples = []
    for row in ROWS:
        feature = {}
        for name, value in row.items():
            if name in NUMERIC:
                feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
            elif value:  # a missing string is an absent feature in a tf.Example
                feature[name] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[value.encode()])
                )
        examples.append(
            tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        )
    body = {
        "signature_name": "serving_examples",
        "inputs": {"examples": [{"b64": base64.b64encode(e).decode()} for e in examples]},
    }
    response = server.post("/v1/models/penguin/versions/1:predict", body)
    assert response.status_code == 200, response.text
    expected = signatures["serving_examples"](examples=tf.constant(examples))
    _assert_same(response.json()["outputs"], expected)


def test_classify_refuses_the_tf_example_signature_as_tf_serving_does(server):
    # serving_examples takes `examples` and answers class_ids/probabilities: not the shape TF
    # Serving's Classify needs (an input named `inputs`, outputs `classes`/`scores`).
    response = server.post(
        "/v1/models/penguin:classify",
        {"signature_name": "serving_examples", "examples": [{"island": "Biscoe"}]},
    )
    assert response.status_code == 400
    assert response.json()["error"].startswith("No classification inputs found in SignatureDef")


def test_classify_on_the_classification_signature_equals_predict(server, signatures):
    # TF Serving's REST format: one JSON object of features per tf.Example.
    examples = [{k: v for k, v in row.items() if v != ""} for row in ROWS]
    body = {"signature_name": "classification", "examples": examples}
    response = server.post("/v1/models/penguin/labels/stable:classify", body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    expected = signatures["serving_default"](**_columns())
    # Every row lists every class, in the order of serving_default's probabilities.
    names = {row["classes"].decode(): row["class_ids"] for row in _rows(expected)}
    classes = [name for name, _ in sorted(names.items(), key=lambda item: item[1])]
    assert [[label for label, _ in row][: len(classes)] for row in results] == [classes] * 3
    assert all(len(row) == expected["probabilities"].shape[1] for row in results)
    scores = np.array([[score for _, score in row] for row in results], np.float32)
    np.testing.assert_allclose(scores, expected["probabilities"].numpy(), rtol=1e-5, atol=1e-6)
    metadata = server.get("/v1/models/penguin/metadata").json()["metadata"]
    method = metadata["signature_def"]["signature_def"]["classification"]["method_name"]
    assert method == "tensorflow/serving/classify"


def _rows(outputs: dict) -> list[dict]:
    values = {name: tensor.numpy() for name, tensor in outputs.items()}
    return [{name: array[i] for name, array in values.items()} for i in range(len(ROWS))]


def test_metadata_lists_the_raw_feature_inputs(server):
    body = server.get("/v1/models/penguin/metadata").json()
    inputs = body["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
    assert {name: spec["dtype"] for name, spec in inputs.items()} == {
        "island": "DT_STRING",
        "sex": "DT_STRING",
        **{name: "DT_FLOAT" for name in NUMERIC},
    }


def test_skewed_traffic_blocks_the_next_night_naming_the_feature(pushed, server):
    # Serving sees penguins of one island only, where a third of the training data's are from
    # there: the next night's data gate reads the server's request log (every request the
    # tests above sent, and these) and measures the training/serving skew per feature.
    skewed = [{**ROWS[0], "body_mass_g": 3500.0 + i} for i in range(60)]
    response = server.post("/v1/models/penguin:predict", {"instances": skewed})
    assert response.status_code == 200, response.text
    assert "logging 100% of answered requests under " in server.log()
    (logged,) = log_files(str(pushed.workdir / "request_logs" / "penguin"))
    assert logged.endswith(".tfrecord")
    metrics = server.get("/monitoring/prometheus/metrics").text
    assert 'conveyor_serving_request_log_records_total{model="penguin",status="ok"}' in metrics
    assert 'status="failed"' not in metrics
    overrides = [
        REQUEST_LOG,
        "data.skew={island: 0.3, sex: 0.9}",
        "data.serving_data_dir=request_logs/penguin",
        "data.serving_data_format=prediction_log",
    ]
    loaded = load_spec("penguin", env="ci", overrides=overrides, workdir=pushed.workdir)
    night = nightly.run(loaded, pushed.workdir, echo=lambda _: None)
    assert night.outcome == "blocked", night.message
    assert "island: skew L-infinity " in night.message, night.message
    assert "sex: skew" not in night.message  # measured, within its threshold
    summary = json.loads((pushed.runs_dir / str(night.run_id) / "summary.json").read_text())
    skew = {row["column"]: row for row in summary["data_gate"]["skew"]}
    assert skew["island"]["breached"] and not skew["sex"]["breached"], skew
    assert skew["island"]["distance"] > 0.5, skew["island"]
    assert served_versions(str(pushed.serving_dir)) == [1]  # serving untouched
