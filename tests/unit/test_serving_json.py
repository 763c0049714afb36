"""TF Serving's JSON mapping (pipelines/serving/model_server/json_tensor.py) without a server: the
type and shape rules of json_tensor.cc, and the answers' shapes. The end-to-end files
(tests/e2e/test_serving_*.py) send the same kinds of bodies to a real server."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from pipelines.serving.model_server import json_tensor as jt
from pipelines.serving.model_server.errors import ServingError

FLOAT = {"x": jt.DT_FLOAT}


def _refused(doc, dtypes, code="INVALID_ARGUMENT") -> str:
    with pytest.raises(ServingError) as raised:
        jt.predict_inputs(doc, dtypes, "")
    assert raised.value.code == code
    return raised.value.message


def test_row_format_batches_instances_into_one_tensor_per_input():
    tensors, fmt = jt.predict_inputs(
        {"instances": [{"a": [1, 2], "s": "x"}, {"a": [3, 4], "s": {"b64": "eQ=="}}]},
        {"a": jt.DT_INT64, "s": jt.DT_STRING},
        "",
    )
    assert fmt == jt.ROW
    np.testing.assert_array_equal(tensors["a"], np.array([[1, 2], [3, 4]], np.int64))
    assert tensors["s"].tolist() == [b"x", b"y"]


def row_outcome(instances, dtypes):
    """What _from_instances makes of rows: its tensors (dtype, shape, values) or its error."""
    try:
        tensors = jt._from_instances(instances, dtypes)
    except ServingError as err:
        return ("error", err.message)
    return {n: (t.dtype, t.shape, [repr(v) for v in t.tolist()]) for n, t in tensors.items()}


ROW_VALUES = (0, -1, 2**24 - 1, 2**24, 2**31, 2**53, 2**63, 2**64, 1.5, float("nan"))
ROW_VALUES += (float("inf"), 3.5e38, 1e300, True, "a", "é", None, [1], {"b64": "YQ=="})
ROW_DTYPES = (jt.DT_FLOAT, jt.DT_DOUBLE, jt.DT_INT32, jt.DT_INT64, jt.DT_UINT8, jt.DT_UINT64)
ROW_DTYPES += (jt.DT_STRING, jt.DT_BOOL)


def test_rows_of_scalars_take_a_fast_path_that_builds_and_refuses_as_the_general_one(
    monkeypatch,
):
    # The fast path (_scalar_columns) must give the very tensors the general path gives, and
    # hand everything it does not take to the general path, which words the error.
    cases = []
    for dtype in ROW_DTYPES:
        for value in ROW_VALUES:
            cases.append(([{"a": value, "s": "x"}, {"a": value, "s": "y"}], dtype))
    cases.append(([{"a": 1.0, "s": "x"}, {"a": 1.0}], jt.DT_FLOAT))  # a key missing
    cases.append(([{"a": 1.0, "s": "x", "z": 1}], jt.DT_FLOAT))  # a key too many
    cases.append(([{"a": 1.0, "s": "x"}, [1.0, "y"]], jt.DT_FLOAT))  # a list among objects
    fast_hits = 0
    outcomes = []
    for instances, dtype in cases:
        dtypes = {"a": dtype, "s": jt.DT_STRING}
        fast_hits += jt._scalar_columns(instances, dtypes) is not None
        outcomes.append(row_outcome(instances, dtypes))
    monkeypatch.setattr(jt, "_scalar_columns", lambda instances, dtypes: None)
    general = [row_outcome(i, {"a": d, "s": jt.DT_STRING}) for i, d in cases]
    assert outcomes == general
    assert fast_hits >= 20  # the fast path did take the well-formed rows


def test_columnar_format_takes_each_input_whole_and_scalars_too():
    tensors, fmt = jt.predict_inputs({"inputs": {"x": 2.5, "y": [[1.0]]}}, {"x": 1, "y": 1}, "")
    assert fmt == jt.COLUMNAR
    assert tensors["x"].shape == () and tensors["y"].shape == (1, 1)


@pytest.mark.parametrize(
    ("value", "dtype", "message"),
    [
        (True, jt.DT_FLOAT, "JSON Value: true Type: True is not of expected type: float"),
        (1.5, jt.DT_INT64, "JSON Value: 1.5 Type: Number is not of expected type: int64"),
        (1 << 31, jt.DT_INT32, "is not of expected type: int32"),
        (1, jt.DT_STRING, "JSON Value: 1 Type: Number is not of expected type: string"),
        ({"b64": "!!"}, jt.DT_STRING, "Unable to base64 decode"),
        ({"b64": "eQ==", "x": 1}, jt.DT_STRING, "not formatted correctly for base64 data"),
    ],
)
def test_values_of_the_wrong_type_are_refused_as_tf_serving_words_it(value, dtype, message):
    assert message in _refused({"inputs": [value]}, {"x": dtype})


def test_ragged_and_misnested_lists_are_refused():
    assert "Encountered list at unexpected size: 1 at level: 1 expected size: 2" in _refused(
        {"inputs": [[1.0, 2.0], [3.0]]}, FLOAT
    )
    assert "found at incorrect level: 2 in the JSON DOM. Expected at level: 2" in _refused(
        {"inputs": [[1.0], 2.0]}, FLOAT
    )
    assert (
        "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: "
        "Expecting tensor size: 2 but got: 1" in _refused({"instances": [[1.0, 2.0], [3.0]]}, FLOAT)
    )
    assert "Expecting shape [1,2] but got: [2,1]" in _refused(
        {"instances": [[[1.0, 2.0]], [[1.0], [2.0]]]}, FLOAT
    )


def test_unsupported_dtypes_are_unimplemented():
    assert "to type: half" in _refused({"inputs": [1.0]}, {"x": 19}, code="UNIMPLEMENTED")


def test_answers_take_tf_servings_shapes():
    outputs = {"y": np.array([[2.5], [3.0]], np.float32)}
    assert jt.predict_answer(outputs, jt.ROW) == {"predictions": [[2.5], [3.0]]}
    assert jt.predict_answer(outputs, jt.COLUMNAR) == {"outputs": [[2.5], [3.0]]}
    two = {"b": np.array([1, 2]), "a_bytes": np.array([b"\x00", b"\xff"], dtype=object)}
    assert jt.predict_answer(two, jt.ROW) == {
        "predictions": [{"a_bytes": {"b64": "AA=="}, "b": 1}, {"a_bytes": {"b64": "/w=="}, "b": 2}]
    }
    with pytest.raises(ServingError, match="inconsistent batch size: 1 expecting: 2"):
        jt.predict_answer({"a": np.zeros(2), "b": np.zeros(1)}, jt.ROW)


def test_floats_are_written_as_the_float32_they_are():
    values = np.array([0.1, 1 / 3, float("nan"), float("-inf")], np.float32)
    written = jt.dumps({"v": jt.json_values("v", values)})
    assert written == b'{"v":[0.1,0.33333334,NaN,-Infinity]}'
    np.testing.assert_array_equal(np.array(jt.parse_body(written)["v"], np.float32), values)


def test_examples_merge_the_context_and_the_examples_own_values_win():
    from tensorflow.core.example import example_pb2

    doc = {
        "context": {"x": 1.0, "tag": "a"},
        "examples": [
            {"x2": [1, 2]},
            {"x": 5.0, "raw": {"b64": base64.b64encode(b"\x01").decode()}},
        ],
    }
    first, second = (example_pb2.Example.FromString(e) for e in jt.serialized_examples(doc))
    assert first.features.feature["x"].float_list.value == [1.0]
    assert first.features.feature["x2"].int64_list.value == [1, 2]
    assert second.features.feature["x"].float_list.value == [5.0]
    assert second.features.feature["tag"].bytes_list.value == [b"a"]
    assert second.features.feature["raw"].bytes_list.value == [b"\x01"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "When method is classify, key 'examples' is expected and was not found"),
        ({"examples": []}, "'examples' value is an empty array"),
        ({"examples": [1]}, "Example must be JSON object but got JSON Number"),
        ({"examples": [{"x": [1, 2.5]}]}, "Unexpected element type in feature: x"),
        ({"examples": [{"x": None}]}, "Feature: x has element with unexpected JSON type: Null"),
    ],
)
def test_bad_examples_are_refused(doc, message):
    with pytest.raises(ServingError) as raised:
        jt.serialized_examples(doc)
    assert message in raised.value.message


def test_answers_written_from_arrays_read_back_as_the_plain_answer():
    outputs = {
        "probabilities": np.array([[0.1, 1 / 3, 2e-7], [np.nan, 1.0, 0.0]], np.float32),
        "class_ids": np.array([[2], [0]], np.int64),
        "classes": np.array([[b"Gentoo"], [b"Adelie"]], dtype=object),
    }

    def as_float32(answer):
        # The float32 values an answer names (TF Serving's 9 digits and the plain answer's
        # shortest form are two texts of one float32), the other values as they are.
        if isinstance(answer, dict):
            return {k: as_float32(v) for k, v in answer.items()}
        if isinstance(answer, list):
            return [as_float32(v) for v in answer]
        if isinstance(answer, float):
            return "nan" if answer != answer else float(np.float32(answer))
        return answer

    for request_format in (jt.ROW, jt.COLUMNAR):
        plain = jt.predict_answer(outputs, request_format)
        written = jt.dumps(jt.predict_answer(outputs, request_format, arrays=True))
        assert b"0.333333343" in written and b"NaN" in written
        assert as_float32(jt.parse_body(written)) == as_float32(plain)


def test_bodies_orjson_refuses_are_read_as_the_json_module_reads_them():
    assert jt.parse_body(b'{"inputs": [NaN, Infinity]}')["inputs"][1] == float("inf")
    assert jt.parse_body(b'{"inputs": [18446744073709551616]}')["inputs"] == [1 << 64]
    with pytest.raises(ServingError, match="JSON Parse error: Invalid value. at offset: 11"):
        jt.parse_body(b'{"inputs": }')
