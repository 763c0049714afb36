"""Where the model server once answered otherwise than TF Serving 2.16, the answer TF Serving's
source and tests give (tensorflow/serving at 2.16.1: util/json_tensor.cc and its test,
model_servers/http_rest_api_handler.cc and its test, g3doc/api_rest.md). One test per
difference; tests/e2e/test_serving_parity.py asks a real server the same over HTTP."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipelines.serving.model_server import json_tensor as jt
from pipelines.serving.model_server.errors import ServingError

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "tf_serving"
FLOAT = {"x": jt.DT_FLOAT}


def _refused(doc, dtypes) -> str:
    with pytest.raises(ServingError) as raised:
        jt.predict_inputs(doc, dtypes, "")
    assert raised.value.code == "INVALID_ARGUMENT"
    return raised.value.message


# ------------------------------------------------------------------ 1. zero-row batches


def test_a_batch_of_no_rows_is_answered_with_no_predictions():
    # json_tensor_test.cc FromJsonSingleZeroBatchTensor, FromJsonMultipleZeroBatchTensors.
    one = {"int_tensor": np.zeros((0, 2), np.int32)}
    assert jt.dumps(jt.predict_answer(one, jt.ROW, arrays=True)) == b'{"predictions":[]}'
    two = {
        "str_tensor": np.empty((0, 1, 2), dtype=object),
        "float_tensor": np.zeros((0, 3, 4), np.float32),
    }
    assert jt.dumps(jt.predict_answer(two, jt.ROW, arrays=True)) == b'{"predictions":[]}'
    assert jt.predict_answer(two, jt.ROW) == {"predictions": []}
    with pytest.raises(ServingError, match="inconsistent batch size: 1 expecting: 0"):
        jt.predict_answer({"a": np.zeros((0, 2)), "b": np.zeros((1, 2))}, jt.ROW)


# ------------------------------------------------------------------ 2. integers into floats


@pytest.mark.parametrize("fast", [True, False])
def test_integers_sent_to_float_inputs_are_converted_whatever_their_size(fast, monkeypatch):
    # json_tensor_test.cc FloatTensorWithPrecisionLoss: 1435774380 into DT_FLOAT is taken,
    # rounded to the float32 nearest (rapidjson's GetFloat of the number).
    if not fast:
        monkeypatch.setattr(jt, "_scalar_columns", lambda instances, dtypes: None)
    tensors, _ = jt.predict_inputs({"instances": [1435774380]}, FLOAT, "")
    assert tensors["x"].dtype == np.float32
    assert tensors["x"].tolist() == [float(np.float32(1435774380.0))]
    big = [2**24 + 1, -(2**53) - 1, 2**63, 2**70]
    rows = [{"x": v, "d": v} for v in big]
    tensors, _ = jt.predict_inputs({"instances": rows}, {"x": jt.DT_FLOAT, "d": jt.DT_DOUBLE}, "")
    assert tensors["x"].tolist() == [float(np.float32(float(v))) for v in big]
    assert tensors["d"].tolist() == [float(v) for v in big]


def test_integers_in_columnar_inputs_and_examples_are_floats_too():
    tensors, _ = jt.predict_inputs({"inputs": [[16777217, 1.5]]}, FLOAT, "")
    assert tensors["x"].tolist() == [[16777216.0, 1.5]]


# ------------------------------------------------------------------ 3. float overflow


@pytest.mark.parametrize("fast", [True, False])
def test_floats_beyond_float32_become_infinities(fast, monkeypatch):
    # json_tensor_test.cc FloatTensorThatExceedsMaxReturnsInf / ...ExceedsMinReturnsZero.
    if not fast:
        monkeypatch.setattr(jt, "_scalar_columns", lambda instances, dtypes: None)
    values = [1.7976931348623157e308, -1.7976931348623157e308, 1e39, 2.2250738585072014e-308]
    values.append(-2.2250738585072014e-308)
    tensors, _ = jt.predict_inputs({"instances": [{"x": v} for v in values]}, FLOAT, "")
    written = tensors["x"].tolist()
    assert written[:3] == [math.inf, -math.inf, math.inf]
    assert written[3] == 0.0 and math.copysign(1, written[3]) == 1
    assert written[4] == 0.0 and math.copysign(1, written[4]) == -1
    tensors, _ = jt.predict_inputs({"inputs": [1e39]}, {"x": jt.DT_DOUBLE}, "")
    assert tensors["x"].tolist() == [1e39]


def test_example_floats_beyond_float32_become_infinities():
    from tensorflow.core.example import example_pb2

    [example] = jt.serialized_examples({"examples": [{"x": [1e39, -1e39, 0.5]}]})
    parsed = example_pb2.Example.FromString(example)
    assert list(parsed.features.feature["x"].float_list.value) == [math.inf, -math.inf, 0.5]


# ------------------------------------------------------------------ 4. TF1 SavedModels


@pytest.fixture(scope="module")
def tf1_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tf1")
    for name in ("saved_model_half_plus_three", "saved_model_counter"):
        shutil.copytree(FIXTURES / name, root / name)
    return root


def test_tf_servings_half_plus_three_loads_and_answers_as_its_rest_documentation_shows(
    tf1_models,
):
    from pipelines.serving.model_server.servable import Servable

    path = tf1_models / "saved_model_half_plus_three" / "00000123"
    servable = Servable.load("saved_model_half_plus_three", 123, path)
    servable.warm_up()
    # g3doc/api_rest.md, "Example": predict, then regress on the non-default signature.
    answer = servable.predict({"instances": [1.0, 2.0, 5.0]})
    assert jt.dumps(answer) == b'{"predictions":[3.5,4.0,5.5]}'
    regress = servable.regress(
        {"signature_name": "tensorflow/serving/regress", "examples": [{"x": 1.0}, {"x": 2.0}]}
    )
    assert jt.dumps(regress) == b'{"results":[3.5,4.0]}'
    signatures = servable.metadata()["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {"serving_default", "tensorflow/serving/regress"}


def test_tf_servings_counter_loads_and_its_reference_typed_outputs_answer(tf1_models):
    from pipelines.serving.model_server.servable import Servable

    path = tf1_models / "saved_model_counter" / "00000123"
    servable = Servable.load("saved_model_counter", 123, path)
    servable.warm_up()
    # predict_impl_test.cc PredictionWithCustomizedSignatures, over REST: the signatures
    # without inputs cannot be asked (no 'inputs' or 'instances' to give), incr_counter_by can.
    # The warm-up must not have moved the counter (TF Serving runs no dummy calls).
    by = {"signature_name": "incr_counter_by", "inputs": {"delta": 3.0}}
    assert jt.dumps(servable.predict(by)) == b'{"outputs":3.0}'
    assert jt.dumps(servable.predict(by)) == b'{"outputs":6.0}'
    with pytest.raises(ServingError, match="Failed to get input map for signature: get_counter"):
        servable.predict({"signature_name": "get_counter", "inputs": {}})


# ------------------------------------------------------------------ 5. deep nesting


def test_a_body_nested_past_the_parsers_depth_is_a_json_parse_error():
    depth = 200_000
    body = b'{"instances": ' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(ServingError) as raised:
        jt.parse_body(body)
    assert raised.value.code == "INVALID_ARGUMENT"
    assert raised.value.message.startswith("JSON Parse error: ")


# ------------------------------------------------------------------ 6. float text


def test_floats_are_written_as_tf_serving_prints_them():
    # json_tensor_test.cc FromJsonSingleFloatTensorSixDigitPrecision: StrCat's six digits
    # ("%g"), "%.9g" when that does not give the float back, ".0" on whole numbers.
    values = np.array([[9000000, 999999, 0.5], [0.0003, 0.00003, 555557.5]], np.float32)
    written = jt.dumps(jt.predict_answer({"float_tensor": values}, jt.ROW, arrays=True))
    assert written == b'{"predictions":[[9e+06,999999.0,0.5],[0.0003,3e-05,555557.5]]}'
    assert jt.parse_body(written) == jt.predict_answer({"float_tensor": values}, jt.ROW)
    odd = np.array([1 / 3, 0.1, -0.0, 123456789, 1e-45, np.nan, np.inf, -np.inf], np.float32)
    assert jt.dumps({"v": odd}) == (
        b'{"v":[0.333333343,0.1,-0.0,123456792.0,1.4013e-45,NaN,Infinity,-Infinity]}'
    )
    doubles = np.array([1 / 3, 0.1, 1e22, 5.0], np.float64)
    assert jt.dumps({"v": doubles}) == (b'{"v":[0.33333333333333331,0.1,1e+22,5.0]}')
    regress = jt.regress_answer(np.array([9e6, 2.5], np.float32))
    assert jt.dumps(regress) == b'{"results":[9e+06,2.5]}'


def test_many_floats_are_written_as_each_is_written_alone():
    # Arrays are formatted in bulk (_float_texts); every value must read as float32_text /
    # float64_text give it: random bit patterns (all exponents, subnormals, NaN, infinities).
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, size=4000, dtype=np.uint64).astype(np.uint32)
    singles = np.concatenate(
        [
            bits.view(np.float32),
            np.array([0.0, -0.0, 9e6, 3e-5, 1e6, 999999, 123456789], np.float32),
        ]
    )
    with np.errstate(over="ignore", invalid="ignore"):  # whole numbers, some of them huge
        singles = np.concatenate([singles, np.round(singles[:500] * 1000) / 8])
    tens = np.array([10.0**k for k in range(-45, 39)], np.float32)  # and their neighbours
    near = [tens, np.nextafter(tens, np.float32(np.inf)), np.nextafter(tens, np.float32(0))]
    singles = np.concatenate([singles, *near, -tens])
    assert jt._float_texts(singles) == [jt.float32_text(v) for v in singles.tolist()]
    doubles = rng.integers(0, 2**63, size=4000, dtype=np.uint64).view(np.float64)
    doubles = np.concatenate([doubles, -doubles[:100], np.array([0.1, 1 / 3, 5.0, 1e22])])
    assert jt._float_texts(doubles) == [jt.float64_text(v) for v in doubles.tolist()]
    written = jt.dumps({"v": singles[:12].reshape(4, 3)})
    assert (
        written
        == (
            '{"v":['
            + ",".join(
                "[" + ",".join(jt.float32_text(v) for v in row) + "]"
                for row in singles[:12].reshape(4, 3).tolist()
            )
            + "]}"
        ).encode()
    )


# ------------------------------------------------------------------ 7. error texts


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"instances": 1},
            "JSON Value: {\n    \"instances\": 1\n} Expecting 'instances' to be an list/array",
        ),
        (
            {"instances": [{"x": 1.0, "y": 2.0}]},
            "Failed to process element: 0 of 'instances' list. JSON object: {\n    \"x\": 1.0,\n"
            '    "y": 2.0\n} keys must be equal to: x,y,z',
        ),
        (
            {"instances": [1.5]},
            "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: "
            "JSON Value: 1.5 Type: Number is not of expected type: int64",
        ),
        (
            {"inputs": [[1.0], 2.0]},
            "JSON Value: 2.0 found at incorrect level: 2 in the JSON DOM. Expected at level: 2",
        ),
    ],
)
def test_refusals_are_worded_as_tf_serving_2_16_words_them(doc, message):
    if "keys must" in message:
        dtypes = {"x": jt.DT_FLOAT, "y": jt.DT_FLOAT, "z": jt.DT_FLOAT}
    elif "int64" in message:
        dtypes = {"x": jt.DT_INT64}
    else:
        dtypes = FLOAT
    assert _refused(doc, dtypes) == message


def test_example_refusals_are_worded_as_tf_serving_2_16_words_them():
    with pytest.raises(ServingError) as raised:
        jt.serialized_examples({"examples": [{"x": [2**63]}]})
    assert raised.value.message == "Feature: x has uint64_t element. Only int64_t is supported."


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"instances = [1, 2]", "Invalid value. at offset: 0"),
        (b"   ", "The document is empty. at offset: 3"),
        (b'{"instances": }', "Invalid value. at offset: 14"),
        (b'{"instances" [1]}', "Missing a colon after a name of object member. at offset: 13"),
        (b"{instances: [1]}", "Missing a name for object member. at offset: 1"),
        (b'{"a": 1 "b": 2}', "Missing a comma or '}' after an object member. at offset: 8"),
        (b'{"a": [1 2]}', "Missing a comma or ']' after an array element. at offset: 9"),
        (
            b'{"a": [1, 2]} x',
            "The document root must not be followed by other values. at offset: 14",
        ),
        (b'{"a": "b', "Missing a closing quotation mark in string. at offset: 8"),
        (b'{"a": "\\x"}', "Invalid escape character in string. at offset: 7"),
        (b'{"a": "\x01"}', "Invalid escape character in string. at offset: 7"),
        (b'{"\xc3\xa9": [1 2]}', "Missing a comma or ']' after an array element. at offset: 10"),
    ],
)
def test_json_syntax_errors_carry_rapidjsons_words_and_byte_offsets(body, reason):
    with pytest.raises(ServingError) as raised:
        jt.parse_body(body)
    assert raised.value.message == f"JSON Parse error: {reason}"
