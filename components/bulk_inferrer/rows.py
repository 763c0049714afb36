"""Predictions as table rows, and input rows as tf.Examples: what batch inference shares between
the pipeline's `bulk_inferrer` (TFX's BulkInferrer, then `PredictionTable`) and `conveyor infer`.

A PredictionLog, as tfx_bsl's RunInference writes it, carries the serialized tf.Example it
answered (a predict signature's one string input; a classify or regress request's example list)
and the signature's outputs. A table row is the input columns a team names (`output_columns`),
read back from that example, followed by every output, one column per value: a scalar output
keeps its alias (`class_ids`), a vector one gets `alias_0`, `alias_1`... (`probabilities_2`).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# TFX's bulk_inferrer executor writes `<uri>/prediction_logs-?????-of-?????.gz`.
PREDICTION_LOGS_PREFIX = "prediction_logs"
PREDICTION_LOGS_GLOB = PREDICTION_LOGS_PREFIX + "-*.gz"
TABLE_PREFIX = "predictions"  # `predictions-00000-of-00001.csv` (or .parquet)
BAD_ROWS_FILE = "bad_rows.csv"  # `conveyor infer`: file, line, reason of each refused row

# tensorflow/core/framework/types.proto: the numeric DataTypes whose values a TensorProto may
# pack into tensor_content (tf.make_tensor_proto does for numpy arrays).
_PACKED_DTYPES = {
    1: np.float32,  # DT_FLOAT
    2: np.float64,  # DT_DOUBLE
    3: np.int32,  # DT_INT32
    9: np.int64,  # DT_INT64
    10: np.bool_,  # DT_BOOL
    19: np.float16,  # DT_HALF
}
_REPEATED_FIELDS = ("float_val", "double_val", "int_val", "int64_val", "bool_val", "string_val")
_DT_STRING = 7


def tensor_values(proto: Any) -> list:
    """The values of a TensorProto, flattened, as Python numbers or strings."""
    if proto.tensor_content and proto.dtype in _PACKED_DTYPES:
        return np.frombuffer(proto.tensor_content, dtype=_PACKED_DTYPES[proto.dtype]).tolist()
    if proto.dtype == _DT_STRING:
        return [v.decode("utf-8", "replace") for v in proto.string_val]
    for name in _REPEATED_FIELDS:
        values = list(getattr(proto, name))
        if values:
            size = math.prod(d.size for d in proto.tensor_shape.dim) or len(values)
            # A TensorProto may hold one value for a tensor of that value repeated.
            return values * size if len(values) == 1 and size > 1 else values
    return []


def logged_example(log: Any) -> Any:
    """The tf.Example a PredictionLog answered (tf.train.Example)."""
    from tensorflow.core.example import example_pb2

    kind = log.WhichOneof("log_type")
    if kind == "predict_log":
        (request,) = log.predict_log.request.inputs.values()
        return example_pb2.Example.FromString(request.string_val[0])
    if kind == "classify_log":
        return log.classify_log.request.input.example_list.examples[0]
    if kind == "regress_log":
        return log.regress_log.request.input.example_list.examples[0]
    raise ValueError(
        f"a PredictionLog of kind {kind!r}: batch inference writes predict, "
        "classify or regress logs"
    )


def logged_outputs(log: Any) -> dict[str, list]:
    """Output name -> its values for the one row a PredictionLog answered, in a stable order."""
    kind = log.WhichOneof("log_type")
    if kind == "predict_log":
        outputs = log.predict_log.response.outputs
        return {name: tensor_values(outputs[name]) for name in sorted(outputs)}
    if kind == "classify_log":
        (classification,) = log.classify_log.response.result.classifications
        return {
            "classes": [c.label for c in classification.classes],
            "scores": [c.score for c in classification.classes],
        }
    if kind == "regress_log":
        (regression,) = log.regress_log.response.result.regressions
        return {"outputs": [regression.value]}
    raise ValueError(f"a PredictionLog of kind {kind!r}")


def feature_value(example: Any, column: str) -> Any:
    """A column's one value in a tf.Example: str, int or float; None when absent or empty."""
    feature = example.features.feature.get(column)
    if feature is None:
        return None
    kind = feature.WhichOneof("kind")
    values = getattr(feature, kind).value if kind else []
    if not values:
        return None
    value = values[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def output_columns(outputs: Mapping[str, Sequence]) -> list[str]:
    """The table's columns for a model's outputs (see the module docstring)."""
    names = []
    for name, values in outputs.items():
        names += [name] if len(values) == 1 else [f"{name}_{i}" for i in range(len(values))]
    return names


@dataclass(frozen=True)
class TableLayout:
    """The columns of a prediction table: the input columns named, then the outputs'."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def header(self) -> list[str]:
        """Every column, in order."""
        return [*self.inputs, *self.outputs]

    @classmethod
    def of(cls, first_log: Any, columns: Sequence[str]) -> TableLayout:
        """The layout of the table for PredictionLogs like `first_log`."""
        outputs = output_columns(logged_outputs(first_log))
        clash = sorted(set(columns) & set(outputs))
        if clash:
            raise ValueError(
                f"output_columns {clash} have the names of model outputs; rename the input "
                "columns or leave them out"
            )
        return cls(inputs=tuple(columns), outputs=tuple(outputs))

    def row(self, log: Any) -> list:
        """One table row for `log`: the named input columns, then every output value."""
        example = logged_example(log)
        values = [feature_value(example, c) for c in self.inputs]
        for output in logged_outputs(log).values():
            values += output
        if len(values) != len(self.header):
            raise ValueError(
                f"a prediction with {len(values) - len(self.inputs)} output values where the "
                f"table has {len(self.outputs)} ({', '.join(self.outputs)})"
            )
        return values

    def arrow_schema(self, first_log: Any) -> Any:
        """The Parquet schema: an input column's type from its tf.Example kind in `first_log`
        (numbers as float64, so that an integer column with a float in a later row still
        fits), an output's from its values."""
        import pyarrow as pa

        example = logged_example(first_log)
        fields = []
        for column in self.inputs:
            sample = feature_value(example, column)
            numeric = isinstance(sample, int | float) and not isinstance(sample, bool)
            fields.append(pa.field(column, pa.float64() if numeric else pa.string()))
        values = [v for output in logged_outputs(first_log).values() for v in output]
        for column, sample in zip(self.outputs, values, strict=True):
            if isinstance(sample, str):
                kind = pa.string()
            elif isinstance(sample, bool | int):
                kind = pa.int64()
            else:
                kind = pa.float64()
            fields.append(pa.field(column, kind))
        return pa.schema(fields)

    def header_line(self) -> str:
        """The CSV header line (no newline)."""
        return _csv_line(self.header)

    def csv_line(self, log: Any) -> str:
        """One CSV line (no newline) for `log`; an absent value is an empty field."""
        return _csv_line(self.row(log))

    def record(self, log: Any, schema: Any) -> dict:
        """One Parquet record for `log`, each value coerced to the schema's type."""
        record = {}
        for field, value in zip(schema, self.row(log), strict=True):
            if value is not None and field.type == "double":
                value = float(value)
            elif value is not None and field.type == "string":
                value = str(value)
            record[field.name] = value
        return record


def _csv_line(values: Sequence) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow("" if v is None else v for v in values)
    return buffer.getvalue()
