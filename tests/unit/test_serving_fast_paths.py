"""The model server's per-request shortcuts give what the plain paths give: rows of scalars
checked column by column (json_tensor._scalar_columns) take or hand over exactly the rows the
general conversion would build alike, and answers written row by row from one formatting
(json_tensor._row_fragments, predict_answer) read as each value written alone."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pipelines.serving.model_server import json_tensor as jt
from tests.unit.test_serving_json import row_outcome

FLOAT32_MAX = float(np.finfo(np.float32).max)
# Values that sit at the edges of what the column checks decide on: a NaN first or later
# (max() and min() read past a NaN only when it is not first), infinities, floats just past
# float32's range, ints at a double's exact limit, bools among numbers.
EDGES = [
    1.5,
    -2.0,
    float("nan"),
    float("inf"),
    float("-inf"),
    FLOAT32_MAX,
    -FLOAT32_MAX,
    3.5e38,
    -3.5e38,
    math.nextafter(FLOAT32_MAX, math.inf),
    2**53,
    2**53 + 1,
    -(2**53) - 1,
    7,
    True,
]


@pytest.mark.parametrize("dtype", [jt.DT_FLOAT, jt.DT_DOUBLE, jt.DT_INT64, jt.DT_BOOL])
def test_mixed_columns_are_built_or_handed_over_as_the_general_path_builds_them(dtype, monkeypatch):
    cases = [
        [{"a": first, "s": "x"}, {"a": second, "s": "y"}, {"a": third, "s": "z"}]
        for first, second, third in itertools.product(EDGES, repeat=3)
    ]
    fast = [row_outcome(rows, {"a": dtype, "s": jt.DT_STRING}) for rows in cases]
    taken = sum(
        jt._scalar_columns(rows, {"a": dtype, "s": jt.DT_STRING}) is not None for rows in cases
    )
    monkeypatch.setattr(jt, "_scalar_columns", lambda instances, dtypes: None)
    general = [row_outcome(rows, {"a": dtype, "s": jt.DT_STRING}) for rows in cases]
    assert fast == general
    assert taken > 0  # the fast path took the rows it can


def test_rows_of_floats_are_written_as_each_value_alone():
    rng = np.random.default_rng(11)
    for shape in [(64, 3), (17, 1), (20, 2), (3, 0), (0, 3), (5, 2, 2)]:
        values = rng.standard_normal(shape).astype(np.float32) * 1000
        if values.size:
            values.flat[0] = np.nan
        rows = jt._row_fragments(values)
        expected = [jt.dumps({"r": row}) for row in values]  # each row through _numpy_json
        assert [jt.dumps({"r": fragment}) for fragment in rows] == expected


def test_a_row_format_answer_of_several_outputs_is_the_plain_answer():
    rng = np.random.default_rng(5)
    outputs = {
        "probabilities": rng.random((64, 3)).astype(np.float32),
        "class_ids": rng.integers(0, 3, 64),
        "classes": np.array([b"Adelie", b"Gentoo", b"\xff"] * 21 + [b"x"], dtype=object),
    }
    written = jt.parse_body(jt.dumps(jt.predict_answer(outputs, jt.ROW, arrays=True)))
    plain = jt.predict_answer(outputs, jt.ROW)
    assert [sorted(row) for row in written["predictions"]] == [
        sorted(row) for row in plain["predictions"]
    ]
    for got, want in zip(written["predictions"], plain["predictions"], strict=True):
        assert got["classes"] == want["classes"] and got["class_ids"] == want["class_ids"]
        assert (
            np.float32(got["probabilities"]).tolist() == np.float32(want["probabilities"]).tolist()
        )
    assert plain["predictions"][2]["classes"] == "\ufffd"
