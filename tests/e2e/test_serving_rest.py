"""The local model server against TF Serving's REST contract, on TF Serving's own test model.

One real `python -m pipelines.serving.model_server` process serves `half_plus_two` from a
models.config (versions 1 and 2, labels `stable` and `canary`): version 1 is TF Serving's
half_plus_two (y = 0.5x + 2), version 2 adds one (0.5x + 3, the half_plus_three of TF Serving's
REST documentation). The requests and expected answers are the ones TF Serving's REST
documentation (g3doc/api_rest.md) and its handler tests (http_rest_api_handler_test.cc) show;
answers are also compared with the same SavedModel called in this process. The last tests move a
label in the config, then restart the server on it.
"""

from __future__ import annotations

import base64
import json
import os

import numpy as np
import pytest
from google.protobuf import text_format
from prometheus_client.parser import text_string_to_metric_families

from pipelines.serving.model_server.app import INLINE_BODY_BYTES
from pipelines.serving_state.config_files import ServedModel, models_config
from tests.half_plus_two import write_half_plus_two
from tests.serving_server import serving, wait_for

MODEL = "half_plus_two"
POLL = "0.25"
# As TF Serving is started on a config with labels: without the flag, a label on a version not
# loaded yet (every version, at start) is refused.
SERVER_ARGS = ["--allow-version-labels-for-unavailable-models", "--model-config-file"]


def _write_config(path, labels: dict[str, int]) -> None:
    """Writes models.config atomically (the server re-reads it every poll)."""
    model = ServedModel(name=MODEL, base_path=str(path.parent / MODEL), policy="all", labels=labels)
    staged = path.with_name(".models.config.tmp")
    staged.write_text(text_format.MessageToString(models_config([model])))
    os.replace(staged, path)


def _write_warmup_requests(version_dir) -> None:
    """TF Serving's warm-up file: one Predict and one Regress request, as PredictionLogs."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    predict = prediction_log_pb2.PredictionLog()
    predict.predict_log.request.inputs["x"].CopyFrom(tf.make_tensor_proto([[1.0]], tf.float32))
    regress = prediction_log_pb2.PredictionLog()
    regress.regress_log.request.model_spec.signature_name = "regress_x_to_y"
    example = regress.regress_log.request.input.example_list.examples.add()
    example.features.feature["x"].float_list.value.append(1.0)
    (version_dir / "assets.extra").mkdir()
    with tf.io.TFRecordWriter(
        str(version_dir / "assets.extra" / "tf_serving_warmup_requests")
    ) as out:
        for record in (predict, regress):
            out.write(record.SerializeToString())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving_rest")
    write_half_plus_two(root / MODEL / "1")
    write_half_plus_two(root / MODEL / "2", offset=1.0)
    _write_warmup_requests(root / MODEL / "2")
    (root / MODEL / "3").mkdir()  # a version that cannot load: no SavedModel in it
    (root / MODEL / "3" / "README").write_text("not a model")
    config = root / "models.config"
    _write_config(config, {"stable": 1, "canary": 2})
    return root, config


@pytest.fixture(scope="module")
def server(models):
    root, config = models
    with serving([*SERVER_ARGS, str(config), "--poll-seconds", POLL], root / "server") as running:
        yield running


@pytest.fixture(scope="module")
def in_process(models):
    """The two versions loaded in this process, as a client of the SavedModel would."""
    import tensorflow as tf

    root, _ = models
    return {v: tf.saved_model.load(str(root / MODEL / str(v))).signatures for v in (1, 2)}


def _example(**features: float) -> bytes:
    import tensorflow as tf

    return tf.train.Example(
        features=tf.train.Features(
            feature={
                k: tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                for k, v in features.items()
            }
        )
    ).SerializeToString()


def _ok(response) -> dict:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def _error(response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["error"]
    return body["error"]


# ----------------------------------------------------------------------------- status


def test_status_lists_every_version_as_tf_serving_shapes_it(server, models):
    root, _ = models
    available = {"state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    failed = {
        "version": "3",
        "state": "END",
        "status": {
            "error_code": "UNKNOWN",
            "error_message": f"{root / MODEL / '3'} holds no saved_model.pb or saved_model.pbtxt",
        },
    }
    assert _ok(server.get(f"/v1/models/{MODEL}")) == {
        "model_version_status": [
            failed,
            {"version": "2", **available},
            {"version": "1", **available},
        ]
    }
    assert _ok(server.get(f"/v1/models/{MODEL}/versions/1")) == {
        "model_version_status": [{"version": "1", **available}]
    }
    assert _ok(server.get(f"/v1/models/{MODEL}/labels/canary")) == {
        "model_version_status": [{"version": "2", **available}]
    }


def test_metadata_renders_the_signature_defs_as_tf_serving_does(server):
    body = _ok(server.get(f"/v1/models/{MODEL}/versions/1/metadata"))
    assert body["model_spec"] == {"name": MODEL, "signature_name": "", "version": "1"}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert sorted(signatures) == [
        "classify_x_to_y",
        "regress_x2_to_y3",
        "regress_x_to_y",
        "regress_x_to_y2",
        "serving_default",
    ]
    # As in TF Serving's saved_model_half_plus_two_2_versions_metadata.json.
    dims = {"dim": [{"size": "-1", "name": ""}, {"size": "1", "name": ""}], "unknown_rank": False}
    assert signatures["serving_default"] == {
        "inputs": {"x": {"dtype": "DT_FLOAT", "tensor_shape": dims, "name": "x:0"}},
        "outputs": {"y": {"dtype": "DT_FLOAT", "tensor_shape": dims, "name": "y:0"}},
        "method_name": "tensorflow/serving/predict",
        "defaults": {},
    }
    assert signatures["classify_x_to_y"]["inputs"]["inputs"] == {
        "dtype": "DT_STRING",
        "tensor_shape": {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False},
        "name": "tf_example:0",
    }
    assert signatures["classify_x_to_y"]["method_name"] == "tensorflow/serving/classify"
    assert _ok(server.get(f"/v1/models/{MODEL}/metadata"))["model_spec"]["version"] == "2"


# ----------------------------------------------------------------------------- predict


def test_predict_in_row_format_answers_predictions(server):
    # The REST documentation's example (half_plus_three is version 2, the latest).
    assert _ok(server.post(f"/v1/models/{MODEL}:predict", {"instances": [1.0, 2.0, 5.0]})) == {
        "predictions": [3.5, 4.0, 5.5]
    }
    assert _ok(
        server.post(f"/v1/models/{MODEL}/versions/1:predict", {"instances": [1.0, 2.0, 5.0]})
    ) == {"predictions": [2.5, 3.0, 4.5]}
    assert _ok(
        server.post(f"/v1/models/{MODEL}/versions/1:predict", {"instances": [[1.0], [2.0]]})
    ) == {"predictions": [[2.5], [3.0]]}


def test_predict_in_columnar_format_answers_outputs(server):
    assert _ok(
        server.post(
            f"/v1/models/{MODEL}/versions/1:predict",
            {"signature_name": "serving_default", "inputs": [3.0, 4.0]},
        )
    ) == {"outputs": [3.5, 4.0]}
    assert _ok(
        server.post(f"/v1/models/{MODEL}/versions/1:predict", {"inputs": {"x": [[3.0], [4.0]]}})
    ) == {"outputs": [[3.5], [4.0]]}


def test_predict_on_a_named_signature(server):
    # regress_x2_to_y3 takes the float tensor x2 (y3 = 0.5 * x2 + 3).
    assert _ok(
        server.post(
            f"/v1/models/{MODEL}/labels/stable:predict",
            {"signature_name": "regress_x2_to_y3", "instances": [[1.0], [4.0]]},
        )
    ) == {"predictions": [[3.5], [5.0]]}


def test_binary_values_travel_as_b64(server):
    encoded = base64.b64encode(_example(x=20.0)).decode()
    path = f"/v1/models/{MODEL}/versions/1:predict"
    body = {"signature_name": "classify_x_to_y", "instances": [{"b64": encoded}]}
    assert _ok(server.post(path, body)) == {"predictions": [[12.0]]}
    body = {"signature_name": "classify_x_to_y", "inputs": {"inputs": [{"b64": encoded}] * 2}}
    assert _ok(server.post(path, body)) == {"outputs": [[12.0], [12.0]]}


def test_answers_equal_the_in_process_call(server, in_process):
    import tensorflow as tf

    rows = [[0.1], [-3.7], [1e6], [123.456]]
    for version in (1, 2):
        answer = _ok(
            server.post(f"/v1/models/{MODEL}/versions/{version}:predict", {"instances": rows})
        )
        expected = in_process[version]["serving_default"](x=tf.constant(rows))["y"].numpy()
        np.testing.assert_array_equal(np.asarray(answer["predictions"], np.float32), expected)

    examples = [_example(x=0.3), _example(x=-17.25)]
    answer = _ok(
        server.post(
            f"/v1/models/{MODEL}/versions/2:classify",
            {"signature_name": "classify_x_to_y", "examples": [{"x": 0.3}, {"x": -17.25}]},
        )
    )
    scores = in_process[2]["classify_x_to_y"](inputs=tf.constant(examples))["scores"].numpy()
    assert [[label for label, _ in row] for row in answer["results"]] == [[""], [""]]
    np.testing.assert_array_equal(
        np.asarray([[s for _, s in row] for row in answer["results"]], np.float32), scores
    )


def test_a_batch_too_big_for_the_event_loop_is_answered_the_same(server, in_process):
    # Bodies from INLINE_BODY_BYTES on are parsed and run in a worker thread, not on the event
    # loop: the answer is the same, and the server goes on answering small ones after it.
    import tensorflow as tf

    rows = [[i / 7] for i in range(40_000)]
    assert len(json.dumps({"instances": rows})) > INLINE_BODY_BYTES
    answer = _ok(server.post(f"/v1/models/{MODEL}/versions/1:predict", {"instances": rows}))
    expected = in_process[1]["serving_default"](x=tf.constant(rows))["y"].numpy()
    np.testing.assert_array_equal(np.asarray(answer["predictions"], np.float32), expected)
    assert _ok(server.post(f"/v1/models/{MODEL}/versions/1:predict", {"instances": [2.0]})) == {
        "predictions": [3.0]
    }


# ----------------------------------------------------------------------------- classify, regress


def test_classify_answers_label_score_pairs(server):
    assert _ok(
        server.post(
            f"/v1/models/{MODEL}/labels/stable:classify",
            {"signature_name": "classify_x_to_y", "examples": [{"x": 20.0}]},
        )
    ) == {"results": [[["", 12.0]]]}
    # A context feature is shared by every example; an example's own value wins.
    assert _ok(
        server.post(
            f"/v1/models/{MODEL}/versions/1:classify",
            {
                "signature_name": "classify_x_to_y",
                "context": {"x": 10.0},
                "examples": [{}, {"x": 20.0}],
            },
        )
    ) == {"results": [[["", 7.0]], [["", 12.0]]]}


def test_regress_answers_one_value_per_example(server):
    assert _ok(
        server.post(
            f"/v1/models/{MODEL}/versions/1:regress",
            {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]},
        )
    ) == {"results": [42.0]}
    assert _ok(
        server.post(
            f"/v1/models/{MODEL}/versions/1:regress",
            {
                "signature_name": "regress_x_to_y2",
                "context": {"x": 4.0},
                "examples": [{"x2": 1.0}, {"x": 10.0}],
            },
        )
    ) == {"results": [5.0, 8.0]}


def test_classify_refuses_a_signature_that_is_not_a_classifier(server):
    message = _error(server.post(f"/v1/models/{MODEL}:classify", {"examples": [{"x": 1.0}]}), 400)
    assert message.startswith("No classification inputs found in SignatureDef:")


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "JSON Parse error: The document is empty"),
        ("instances = [1, 2]", "JSON Parse error:"),
        ({"instances": ["x", "y"]}, 'JSON Value: "x" Type: String is not of expected type: float'),
        ({"instances": [1.0], "inputs": [1.0]}, "expecting only one of 'inputs' or 'instances'"),
        ({"signature_name": 100}, "'signature_name' key must be a string value."),
        ({"foo": [1.0]}, "Missing 'inputs' or 'instances' key"),
        ({"instances": []}, "No values in 'instances' array"),
        ({"instances": [{"x": 1.0, "z": 2.0}]}, "JSON object: does not have named input: z"),
        ({"inputs": {"z": [1.0]}}, "Missing named input: x in 'inputs' object."),
        ({"instances": [[1.0], [1.0, 2.0]]}, "Expecting tensor size: 1 but got: 2"),
        (
            {"signature_name": "nope", "instances": [1.0]},
            'Serving signature name: "nope" not found in signature def',
        ),
    ],
)
def test_a_bad_request_is_400_with_tf_servings_message(server, body, message):
    assert message in _error(server.post(f"/v1/models/{MODEL}:predict", body), 400)


def test_unknown_models_versions_and_labels(server):
    body = {"instances": [1.0]}
    assert _error(server.post("/v1/models/half:predict", body), 404) == (
        "Servable not found for request: Latest(half)"
    )
    assert _error(server.post(f"/v1/models/{MODEL}/versions/7:predict", body), 404) == (
        f"Servable not found for request: Specific({MODEL}, 7)"
    )
    assert _error(server.get("/v1/models/half"), 404) == "Could not find any versions of model half"
    assert _error(server.get(f"/v1/models/{MODEL}/versions/7"), 404) == (
        f"Could not find version 7 of model {MODEL}"
    )
    # TF Serving answers an unknown label with INVALID_ARGUMENT, i.e. 400, not 404.
    assert _error(server.post(f"/v1/models/{MODEL}/labels/nope:predict", body), 400) == (
        "Unrecognized servable version label: nope"
    )
    assert _error(server.post(f"/v1/models/{MODEL}/version/1:predict", body), 400) == (
        f"Malformed request: POST /v1/models/{MODEL}/version/1:predict"
    )
    assert _error(server.get("/v1/models"), 400) == "Missing model name in request."


def test_metrics_count_requests_by_model_version_signature_and_status(server):
    server.post(f"/v1/models/{MODEL}/versions/1:predict", {"instances": [1.0]})
    server.post("/v1/models/half:predict", {"instances": [1.0]})
    response = server.get("/monitoring/prometheus/metrics")
    assert response.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    ok = dict(model=MODEL, version="1", signature="serving_default", method="predict")
    assert value("conveyor_serving_requests_total", **ok, status="200") >= 1
    assert value("conveyor_serving_request_latency_seconds_count", **ok) >= 1
    unknown = dict(model="", version="", signature="serving_default", method="predict")
    assert value("conveyor_serving_request_errors_total", **unknown, status="404") >= 1
    assert value("conveyor_serving_loaded_versions", model=MODEL) == 2
    assert value("conveyor_serving_model_load_seconds_count", model=MODEL) == 2
    assert value("conveyor_serving_model_load_failures_total", model=MODEL) == 1


def test_a_version_warms_up_before_it_is_served(server):
    log = server.log()
    assert (
        f"{MODEL} version 2 available (loaded and warmed in" in log
        and "2 warm-up request(s) from assets.extra/tf_serving_warmup_requests)" in log
    )
    # Without a warm-up file, each signature is called once with a dummy row.
    assert "signature(s) called with a dummy row)" in log


# ----------------------------------------------------------------------------- labels


def _stable_answer(server) -> float:
    return _ok(server.post(f"/v1/models/{MODEL}/labels/stable:predict", {"instances": [2.0]}))[
        "predictions"
    ][0]


def test_a_label_moved_in_the_config_follows_and_survives_a_restart(server, models):
    root, config = models
    assert _stable_answer(server) == 3.0  # version 1
    _write_config(config, {"stable": 2, "canary": 2})
    wait_for(lambda: _stable_answer(server) == 4.0, 10, "stable to move to version 2")
    assert (
        _ok(server.get(f"/v1/models/{MODEL}/labels/stable"))["model_version_status"][0]["version"]
        == "2"
    )

    # A label moved to a version that is not available: the whole config is refused, as TF
    # Serving's ServerCore refuses it, and the one before stays in force.
    _write_config(config, {"stable": 3, "canary": 2})
    refusal = (
        f"Request to assign label to version 3 of model {MODEL}, which is not currently "
        "available for inference"
    )
    wait_for(lambda: refusal in server.log(), 10, "the refusal")
    assert _stable_answer(server) == 4.0

    _write_config(config, {"stable": 2, "canary": 1})
    with serving(
        [*SERVER_ARGS, str(config), "--poll-seconds", POLL], root / "restarted"
    ) as restarted:
        assert _stable_answer(restarted) == 4.0
        canary = _ok(
            restarted.post(f"/v1/models/{MODEL}/labels/canary:predict", {"instances": [2.0]})
        )
        assert canary == {"predictions": [3.0]}
