"""A pushed version's `model.tflite` against the SavedModel beside it, on rows of a CSV the test
feeds both: what a client of either would get (tests/e2e/test_tflite.py, test_taxi.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import tensorflow as tf


def csv_columns(path: Path, inputs: dict, limit: int) -> dict[str, np.ndarray]:
    """Up to `limit` rows of a CSV as one array per signature input, typed as the input is; an
    empty field is the trainer's missing marker (NaN, -1, "")."""
    with open(path, newline="") as handle:
        rows = [row for _, row in zip(range(limit), csv.DictReader(handle), strict=False)]
    columns = {}
    for name, spec in inputs.items():
        values = [row[name] for row in rows]
        if spec.dtype == tf.string:
            columns[name] = np.array([v.encode() for v in values], dtype=object)
        elif spec.dtype.is_floating:
            columns[name] = np.array([float(v) if v else np.nan for v in values], np.float32)
        else:
            # Integer columns may be written as floats ("300.0") by the data generator.
            parsed = [int(float(v)) if v else -1 for v in values]
            columns[name] = np.array(parsed, dtype=spec.dtype.as_numpy_dtype)
    return columns


def largest_difference(version_dir: Path, csv_path: Path, limit: int = 400) -> tuple[float, int]:
    """The largest absolute difference between the floating-point outputs of the version's
    SavedModel (`serving_default`, in TensorFlow) and its `model.tflite` (in TF Lite's
    interpreter) on the CSV's first `limit` rows, and how many rows that was."""
    served = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    inputs = served.structured_input_signature[1]
    columns = csv_columns(csv_path, inputs, limit)
    expected = served(**{n: tf.constant(v, dtype=inputs[n].dtype) for n, v in columns.items()})
    interpreter = tf.lite.Interpreter(model_path=str(version_dir / "model.tflite"))
    answers = interpreter.get_signature_runner("serving_default")(**columns)
    worst = 0.0
    for name, tensor in expected.items():
        want = tensor.numpy()
        if want.dtype.kind == "f":
            worst = max(worst, float(np.max(np.abs(answers[name] - want))))
    return worst, len(next(iter(columns.values())))
