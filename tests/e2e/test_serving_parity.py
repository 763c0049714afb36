"""A real model server answers over HTTP as TF Serving 2.16 does where it once differed (the unit
side is tests/unit/test_serving_parity.py).

One `python -m pipelines.serving.model_server` process serves, from a models.config:
`half_plus_two` (TF Serving's test model, written by tests/half_plus_two.py), TF Serving's own
`saved_model_half_plus_three` and `saved_model_counter` (copied from tests/data/tf_serving: TF1
SavedModels only a session runs), and `nothing_kept`, a filter whose answer has no rows. The
expected bodies are the bytes TF Serving's documentation (g3doc/api_rest.md) and tests
(json_tensor_test.cc, http_rest_api_handler_test.cc, predict_impl_test.cc) give, compact.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.half_plus_two import write_half_plus_two
from tests.serving_server import serving

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "tf_serving"
HALF_PLUS_THREE = "saved_model_half_plus_three"
COUNTER = "saved_model_counter"


def _write_nothing_kept(export_dir: Path) -> None:
    """A SavedModel whose serving_default keeps the inputs above 100: none, for small ones."""
    import tensorflow as tf

    class Filter(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            return {"kept": tf.boolean_mask(x, x > 100.0)}

    module = Filter()
    tf.saved_model.save(module, str(export_dir), signatures={"serving_default": module.serve})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving_parity")
    write_half_plus_two(root / "half_plus_two" / "1")
    _write_nothing_kept(root / "nothing_kept" / "1")
    for name in (HALF_PLUS_THREE, COUNTER):
        shutil.copytree(FIXTURES / name, root / name)
    entries = "".join(
        f'  config {{ name: "{name}" base_path: "{root / name}" model_platform: "tensorflow" }}\n'
        for name in ("half_plus_two", "nothing_kept", HALF_PLUS_THREE, COUNTER)
    )
    config = root / "models.config"
    config.write_text(f"model_config_list {{\n{entries}}}\n")
    with serving(["--model-config-file", str(config)], root / "server") as running:
        yield running


def _body(response, status: int) -> bytes:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    return response.content


def _error(response, status: int = 400) -> str:
    body = _body(response, status)
    assert list(response.json()) == ["error"], body
    return response.json()["error"]


# ------------------------------------------------------------------ 1. zero-row batches


def test_an_answer_of_no_rows_is_an_empty_predictions_list(server):
    response = server.post("/v1/models/nothing_kept:predict", {"instances": [1.0, 2.0]})
    assert _body(response, 200) == b'{"predictions":[]}'


# ------------------------------------------------------------------ 2. integers into floats


def test_an_integer_too_large_for_a_float_exactly_is_converted(server):
    # 1435774380 (a timestamp) is 1435774336 as a float32; y = 0.5x + 2.
    response = server.post("/v1/models/half_plus_two:predict", {"instances": [[1435774380]]})
    assert _body(response, 200) == b'{"predictions":[[717887168.0]]}'


# ------------------------------------------------------------------ 3. float overflow


def test_a_float_beyond_float32_is_an_infinity(server):
    body = {"instances": [[1e39], [-1.7976931348623157e308]]}
    response = server.post("/v1/models/half_plus_two:predict", body)
    assert _body(response, 200) == b'{"predictions":[[Infinity],[-Infinity]]}'


# ------------------------------------------------------------------ 4. TF1 SavedModels


def test_half_plus_three_loads_and_answers_as_tf_servings_rest_documentation_shows(server):
    available = {"state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    status = server.get(f"/v1/models/{HALF_PLUS_THREE}")
    assert status.json() == {"model_version_status": [{"version": "123", **available}]}
    predict = server.post(f"/v1/models/{HALF_PLUS_THREE}:predict", '{"instances": [1.0,2.0,5.0]}')
    assert _body(predict, 200) == b'{"predictions":[3.5,4.0,5.5]}'
    regress = server.post(
        f"/v1/models/{HALF_PLUS_THREE}:regress",
        {"signature_name": "tensorflow/serving/regress", "examples": [{"x": 1.0}, {"x": 2.0}]},
    )
    assert _body(regress, 200) == b'{"results":[3.5,4.0]}'


def test_the_counter_loads_and_its_reference_typed_outputs_answer(server):
    assert server.get(f"/v1/models/{COUNTER}").json()["model_version_status"][0]["state"] == (
        "AVAILABLE"
    )
    metadata = server.get(f"/v1/models/{COUNTER}/metadata").json()
    assert set(metadata["metadata"]["signature_def"]["signature_def"]) == {
        "get_counter",
        "incr_counter",
        "incr_counter_by",
        "reset_counter",
    }
    by = {"signature_name": "incr_counter_by", "inputs": {"delta": 3.0}}
    assert _body(server.post(f"/v1/models/{COUNTER}:predict", by), 200) == b'{"outputs":3.0}'
    assert _body(server.post(f"/v1/models/{COUNTER}:predict", by), 200) == b'{"outputs":6.0}'
    # A signature without inputs cannot be asked over REST: there is nothing to send.
    no_inputs = {"signature_name": "get_counter", "inputs": {}}
    assert _error(server.post(f"/v1/models/{COUNTER}:predict", no_inputs)) == (
        "Failed to get input map for signature: get_counter"
    )


# ------------------------------------------------------------------ 5. deep nesting


@pytest.mark.parametrize("depth", [1000, 300_000])
def test_a_deeply_nested_body_is_a_400_and_the_server_stays_up(server, depth):
    body = '{"instances": ' + "[" * depth + "1.0" + "]" * depth + "}"
    response = server.post("/v1/models/half_plus_two:predict", body)
    assert _error(response) == "JSON Parse error: The document is nested too deeply."
    again = server.post("/v1/models/half_plus_two:predict", {"instances": [[1.0]]})
    assert _body(again, 200) == b'{"predictions":[[2.5]]}'
    assert server.process.poll() is None


# ------------------------------------------------------------------ 6. float text


def test_numbers_are_written_as_tf_serving_prints_them(server):
    body = {"instances": [[17999996.0], [1.0], [2.0], [0.6666667]]}
    response = server.post("/v1/models/half_plus_two:predict", body)
    assert _body(response, 200) == b'{"predictions":[[9e+06],[2.5],[3.0],[2.33333325]]}'


# ------------------------------------------------------------------ 7. error texts


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("instances = [1, 2]", "JSON Parse error: Invalid value. at offset: 0"),
        (
            '{"instances": 1}',
            "JSON Value: {\n    \"instances\": 1\n} Expecting 'instances' to be an list/array",
        ),
        (
            '{"instances": [{"x": 1.0, "y": 2.0}]}',
            "Failed to process element: 0 key: y of 'instances' list. Error: INVALID_ARGUMENT: "
            "JSON object: does not have named input: y",
        ),
        (
            '{"signature_name": 100}',
            'JSON Value: {\n    "signature_name": 100\n} not formatted correctly. '
            "'signature_name' key must be a string value.",
        ),
    ],
)
def test_refusals_are_worded_as_tf_serving_2_16_words_them(server, body, message):
    assert _error(server.post("/v1/models/half_plus_two:predict", body)) == message
