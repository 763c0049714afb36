"""The TF Lite converter's executor: the blessed candidate converted, then checked against itself.

In order, the first failure deciding the verdict (its reason recorded on the TFLiteModel):
1. a model the Evaluator (or the infra validator) did not bless is not converted at all;
2. the candidate's serving SavedModel (`Format-Serving`) is converted by TF's own
   `tf.lite.TFLiteConverter`, `serving_default` only, with TF Lite's builtin ops plus
   `SELECT_TF_OPS` for what has no builtin kernel (string operations, tf.Example parsing in a
   TFX `run_fn` module's signature: TF's pip package links the Flex delegate into its Python
   interpreter, so `tf.lite.Interpreter` runs them) and the chosen quantization;
3. up to `parity_rows` rows of the evaluation split go through both, the SavedModel in TensorFlow
   and `model.tflite` in `tf.lite.Interpreter`, in the same batches; every floating-point output
   must stay within `tolerance` (largest absolute difference), NaN matching NaN only.
Integer and string outputs (class ids, class names) follow from the floating ones, so a row whose
probabilities sit on a decision boundary may flip under quantization: their agreement is
recorded, with the spec's first metric (accuracy or mean absolute error when Keras does not
know it) for both models and the delta, not judged.
A conversion that fails or drifts is a verdict, never a failed execution: the Pusher then pushes
the SavedModel without `model.tflite`, or nothing when `push.tflite.required` is true.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from absl import logging
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils, path_utils

from components.infra_validator import blessing as infra_blessing
from components.infra_validator.executor import (
    InfraValidationError,
    eval_split_files,
    raw_values,
    read_rows,
)
from components.tflite.artifact import (
    PARITY_FILE,
    PASSED_PROPERTY,
    REASON_PROPERTY,
    TFLITE_FILE,
    TFLITE_MODEL_KEY,
)

QUANTIZATION_KEY = "quantization"
TOLERANCE_KEY = "tolerance"
PARITY_ROWS_KEY = "parity_rows"
METRIC_KEY = "metric"

DEFAULT_SIGNATURE = "serving_default"
LABEL_SIGNATURE = "transform_features"  # Conveyor's export: the encoded label, for the metric
BATCH_ROWS = 256  # rows per call: bounds memory for a large `parity_rows`
# Figures recorded as text ("1.19e-07"): ML Metadata keeps a double to six decimals (its SQLite
# store reads 1.19e-07 back as 0.0), which would show a small difference as none at all.
AS_TEXT = ("tolerance", "max_abs_difference")
# push.tflite.quantization as the reasons word it.
QUANTIZATION_WORDS = {"none": "float32", "dynamic": "dynamic-range", "float16": "float16"}


class ParityError(RuntimeError):
    """The conversion or the parity check could not be done; the message is the reason."""


@dataclass
class Parity:
    """What the parity check measured, for `tflite_parity.json` and the artifact's properties."""

    quantization: str
    tolerance: float
    size_bytes: int | None = None
    savedmodel_size_bytes: int | None = None
    convert_seconds: float | None = None
    parity_rows: int = 0
    max_abs_difference: float | None = None
    worst_output: str | None = None
    agreement: float | None = None
    metric: str | None = None
    metric_savedmodel: float | None = None
    metric_tflite: float | None = None
    metric_delta: float | None = None
    notes: list[str] = field(default_factory=list)


class Executor(base_executor.BaseExecutor):
    """Converts the blessed candidate to TF Lite and marks the TFLiteModel with the verdict."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Converts, checks parity, and records the verdict (passed 1/0, the reason and the
        figures) on the `tflite_model` output."""
        self._log_startup(input_dict, output_dict, exec_properties)
        output = artifact_utils.get_single_instance(output_dict[TFLITE_MODEL_KEY])
        parity = Parity(
            quantization=exec_properties[QUANTIZATION_KEY],
            tolerance=float(exec_properties[TOLERANCE_KEY]),
        )
        refusal = not_blessed(input_dict)
        if refusal:
            return record(output, parity, False, f"not converted: {refusal}")
        model = artifact_utils.get_single_instance(input_dict["model"])
        model_path = path_utils.serving_model_path(
            model.uri, path_utils.is_old_model_artifact(model)
        )
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        try:
            started = time.monotonic()
            flatbuffer = convert(model_path, parity.quantization)
            parity.convert_seconds = round(time.monotonic() - started, 3)
            parity.size_bytes = len(flatbuffer)
            parity.savedmodel_size_bytes = folder_bytes(model_path)
            # Through TFX's file I/O: on Vertex AI the artifact lives in a bucket.
            io_utils.write_bytes_file(os.path.join(output.uri, TFLITE_FILE), flatbuffer)
            rows = read_rows(eval_split_files(examples), int(exec_properties[PARITY_ROWS_KEY]))
            compare(model_path, flatbuffer, rows, exec_properties.get(METRIC_KEY) or "", parity)
        except (ParityError, InfraValidationError) as err:
            return record(output, parity, False, str(err))
        worst = f"{parity.max_abs_difference:.3g}" + (
            f" ({parity.worst_output})" if parity.worst_output else ""
        )
        within = parity.max_abs_difference <= parity.tolerance
        kind = QUANTIZATION_WORDS.get(parity.quantization, parity.quantization)
        reason = (
            f"{kind} TF Lite model ({parity.size_bytes:,} bytes) matches the "
            f"SavedModel on {parity.parity_rows} evaluation rows: largest difference {worst} "
            f"within the tolerance {parity.tolerance:g}"
            if within
            else f"drift: the {kind} TF Lite model's outputs differ from the "
            f"SavedModel's by up to {worst} on {parity.parity_rows} evaluation rows, over the "
            f"tolerance {parity.tolerance:g} (push.tflite.tolerance)"
        )
        record(output, parity, within, reason)


def not_blessed(input_dict) -> str | None:
    """Why the candidate is not converted (the Evaluator or the infra validator did not bless
    it), or None."""
    for key, who in (("model_blessing", "the Evaluator"), ("infra_blessing", "infra validation")):
        blessings = input_dict.get(key) or []
        if any(b.get_int_custom_property(infra_blessing.BLESSED_KEY) != 1 for b in blessings):
            return f"{who} did not bless the model"
    return None


def record(output, parity: Parity, passed: bool, reason: str) -> None:
    """Writes `tflite_parity.json` and sets the verdict and the figures as custom properties."""
    logging.info("TF Lite: %s: %s", "passed" if passed else "NOT passed", reason)
    figures = {k: v for k, v in asdict(parity).items() if k != "notes"}
    document = {"passed": passed, "reason": reason, **figures, "notes": parity.notes}
    io_utils.write_string_file(
        os.path.join(output.uri, PARITY_FILE), json.dumps(document, indent=2) + "\n"
    )
    for name, value in figures.items():
        if value is None:
            continue
        if name in AS_TEXT:
            output.set_string_custom_property(name, f"{value:.6g}")
        elif isinstance(value, bool | int):
            output.set_int_custom_property(name, int(value))
        elif isinstance(value, float):
            output.set_float_custom_property(name, value)
        else:
            output.set_string_custom_property(name, str(value))
    output.set_int_custom_property(PASSED_PROPERTY, 1 if passed else 0)
    output.set_string_custom_property(REASON_PROPERTY, reason)


def folder_bytes(path: str) -> int:
    """The total size of the files under `path`."""
    import tensorflow as tf

    return sum(
        tf.io.gfile.stat(os.path.join(folder, name)).length
        for folder, _, files in tf.io.gfile.walk(path)
        for name in files
    )


def convert(model_path: str, quantization: str) -> bytes:
    """The SavedModel's `serving_default` as a TF Lite flatbuffer, quantized as asked.

    Raises `ParityError` naming the converter's complaint when the conversion fails.
    """
    import tensorflow as tf

    try:
        converter = tf.lite.TFLiteConverter.from_saved_model(
            model_path, signature_keys=[DEFAULT_SIGNATURE]
        )
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS,
            tf.lite.OpsSet.SELECT_TF_OPS,
        ]
        if quantization in ("dynamic", "float16"):
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        flatbuffer = converter.convert()
    except Exception as err:  # the converter raises many types; any of them is the verdict
        raise ParityError(f"conversion failed: {type(err).__name__}: {_one_line(err)}") from None
    logging.info("TF Lite: converted (%s), %d bytes", quantization, len(flatbuffer))
    return flatbuffer


def compare(
    model_path: str, flatbuffer: bytes, rows: Sequence[bytes], metric: str, parity: Parity
) -> None:
    """Runs `rows` through the SavedModel and the TF Lite model and fills in `parity`.

    Raises `ParityError` when either cannot answer them or their outputs do not correspond.
    """
    import numpy as np
    import tensorflow as tf

    loaded = tf.saved_model.load(model_path)
    signature = loaded.signatures[DEFAULT_SIGNATURE]
    inputs = signature.structured_input_signature[1]
    serialized = _takes_serialized_examples(inputs, rows)
    try:
        interpreter = tf.lite.Interpreter(model_content=flatbuffer)
        runner = interpreter.get_signature_runner(DEFAULT_SIGNATURE)
    except (ValueError, RuntimeError) as err:
        raise ParityError(
            f"the TF Lite interpreter cannot load the model: {_one_line(err)}"
        ) from None
    expected: dict[str, list] = {}
    got: dict[str, list] = {}
    for start in range(0, len(rows), BATCH_ROWS):
        chunk = rows[start : start + BATCH_ROWS]
        batch = _batch(chunk, inputs, serialized)
        try:
            answer = signature(
                **{n: tf.constant(v, dtype=inputs[n].dtype) for n, v in batch.items()}
            )
        except (tf.errors.OpError, ValueError, TypeError) as err:
            raise ParityError(
                f"the SavedModel fails on evaluation rows: {_one_line(err)}"
            ) from None
        try:
            lite = runner(**batch)
        except (ValueError, RuntimeError) as err:
            raise ParityError(
                f"the TF Lite interpreter fails on evaluation rows: {_one_line(err)}"
            ) from None
        for name, tensor in answer.items():
            if name not in lite:
                raise ParityError(
                    f"the TF Lite model has no output {name!r} (it has {sorted(lite)})"
                )
            expected.setdefault(name, []).append(tensor.numpy())
            got.setdefault(name, []).append(np.asarray(lite[name]))
    saved = {name: np.concatenate(parts) for name, parts in expected.items()}
    lite_all = {name: np.concatenate(parts) for name, parts in got.items()}
    parity.parity_rows = len(rows)
    _differences(saved, lite_all, parity)
    labels = _labels(loaded, rows)
    if labels is None:
        parity.notes.append(
            f"no metric: the SavedModel has no {LABEL_SIGNATURE!r} signature to read the label "
            "with (Conveyor's own trainer exports one)"
        )
        return
    _metric(metric, labels, saved, lite_all, parity)


def _takes_serialized_examples(inputs: Mapping[str, Any], rows: Sequence[bytes]) -> bool:
    """One string input that is not a column of the rows: serialized tf.Examples (a TFX
    `run_fn` module's signature), rather than raw column values (Conveyor's)."""
    import tensorflow as tf

    if len(inputs) != 1 or next(iter(inputs.values())).dtype != tf.string or not rows:
        return False
    [name] = inputs
    return name not in tf.train.Example.FromString(rows[0]).features.feature


def _batch(chunk: Sequence[bytes], inputs: Mapping[str, Any], serialized: bool) -> dict:
    """The signature's inputs for `chunk` as numpy arrays, one entry per row."""
    import numpy as np

    if serialized:
        [name] = inputs
        return {name: np.array(list(chunk), dtype=object)}
    columns = [raw_values(row, inputs) for row in chunk]
    batch = {}
    for name, spec in inputs.items():
        values = [c[name] for c in columns]
        dtype = object if spec.dtype.name == "string" else spec.dtype.as_numpy_dtype
        batch[name] = np.array(values, dtype=dtype)
    return batch


def _differences(saved: Mapping[str, Any], lite: Mapping[str, Any], parity: Parity) -> None:
    """The largest absolute difference over the floating-point outputs, and the agreement of
    the others (rows whose every integer and string output is equal)."""
    import numpy as np

    worst, worst_output = 0.0, None
    agree = None
    for name, want in saved.items():
        have = lite[name]
        if have.shape != want.shape:
            raise ParityError(
                f"the TF Lite model's output {name!r} has shape {list(have.shape)}, the "
                f"SavedModel's {list(want.shape)}"
            )
        if want.dtype.kind == "f":
            want64, have64 = want.astype(np.float64), have.astype(np.float64)
            both_nan = np.isnan(want64) & np.isnan(have64)
            difference = np.where(both_nan, 0.0, np.abs(have64 - want64))
            difference = np.nan_to_num(difference, nan=np.inf)  # NaN against a number
            largest = float(np.max(difference)) if difference.size else 0.0
            if largest > worst or worst_output is None:
                worst, worst_output = largest, name
            continue
        equal = want == have
        rows_equal = equal.reshape(len(equal), -1).all(axis=1) if equal.ndim else equal
        agree = rows_equal if agree is None else agree & rows_equal
    parity.max_abs_difference = worst
    parity.worst_output = worst_output
    if agree is not None and len(agree):
        parity.agreement = float(np.mean(agree))


def _labels(loaded, rows: Sequence[bytes]):
    """The rows' encoded labels from Conveyor's `transform_features` signature, or None."""
    import numpy as np
    import tensorflow as tf

    if LABEL_SIGNATURE not in loaded.signatures:
        return None
    try:
        encoded = loaded.signatures[LABEL_SIGNATURE](tf.constant(list(rows), dtype=tf.string))
    except (tf.errors.OpError, ValueError, TypeError):
        return None
    [values] = encoded.values()
    return np.asarray(values.numpy())


def _metric(
    name: str,
    labels,
    saved: Mapping[str, Any],
    lite: Mapping[str, Any],
    parity: Parity,
) -> None:
    """The metric for both models on the same rows: `name` when Keras knows it, else accuracy
    (classification) or mean absolute error (regression)."""
    import numpy as np
    import tensorflow as tf

    classification = "probabilities" in saved
    output = "probabilities" if classification else "predictions"
    if output not in saved:
        parity.notes.append(f"no metric: the signature has no {output!r} output")
        return
    known = labels >= 0 if classification else np.isfinite(labels)  # rows with a usable label
    if not np.any(known):
        parity.notes.append("no metric: no evaluation row has a label")
        return

    def keras_value(predictions) -> float | None:
        try:
            metric = tf.keras.metrics.get(name) if name else None
            if not isinstance(metric, tf.keras.metrics.Metric):
                return None
            metric.update_state(labels[known], predictions[known])
            return float(metric.result().numpy())
        except (ValueError, TypeError, tf.errors.OpError):
            return None

    values = [keras_value(saved[output]), keras_value(lite[output])]
    if None in values:
        if name:
            parity.notes.append(f"{name} is not a Keras metric this check can compute")
        if classification:
            name = "accuracy"
            ids = "class_ids"
            values = [
                float(np.mean(answers[ids][known] == labels[known]))
                if ids in answers
                else float(np.mean(np.argmax(answers[output][known], axis=1) == labels[known]))
                for answers in (saved, lite)
            ]
        else:
            name = "mean_absolute_error"
            values = [
                float(np.mean(np.abs(answers[output][known].reshape(-1) - labels[known])))
                for answers in (saved, lite)
            ]
    parity.metric = name
    parity.metric_savedmodel, parity.metric_tflite = values
    parity.metric_delta = values[1] - values[0]


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:500]
