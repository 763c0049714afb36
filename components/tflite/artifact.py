"""The TF Lite converter's output type and the verdict it records, with no TensorFlow import:
the Pusher, the run report and the structured log read them.

A `TFLiteModel` artifact holds `model.tflite` (the name TF Serving looks for inside a SavedModel
version folder when started with `--prefer_tflite_model`) and `tflite_parity.json`. Its custom
properties say whether it may be pushed (`passed`) and why (`conveyor_reason`), with the
figures behind the verdict (PROPERTIES below).
"""

from __future__ import annotations

from tfx.types import artifact

from pipelines.core.outcome import REASON_PROPERTY

TFLITE_FILE = "model.tflite"  # TF Serving's kTfLiteModelFilename (saved_model_bundle_factory.cc)
PARITY_FILE = "tflite_parity.json"
TFLITE_MODEL_KEY = "tflite_model"  # the converter's output and the Pusher's input

PASSED_PROPERTY = "passed"  # 1: converted and within tolerance; 0: not (the reason says why)
# The figures, as custom properties of the artifact (name -> what it holds).
PROPERTIES = {
    "quantization": "none, dynamic or float16 (push.tflite.quantization)",
    "tolerance": "the largest absolute difference allowed (push.tflite.tolerance), as text",
    "size_bytes": "the size of model.tflite",
    "savedmodel_size_bytes": "the size of the SavedModel it was converted from",
    "parity_rows": "evaluation rows both models answered",
    "max_abs_difference": "the largest absolute difference over the floating-point outputs, as "
    "text (ML Metadata keeps a double to six decimals only)",
    "worst_output": "the output it was found in",
    "agreement": "share of rows whose integer and string outputs (class ids, classes) agree",
    "metric": "the metric compared (the spec's first, or accuracy / mean absolute error)",
    "metric_savedmodel": "its value for the SavedModel on those rows",
    "metric_tflite": "its value for the TF Lite model on the same rows",
    "metric_delta": "metric_tflite - metric_savedmodel",
    "convert_seconds": "how long the conversion took",
}


class TFLiteModel(artifact.Artifact):
    """A TF Lite flatbuffer converted from a Model, with its parity verdict against it."""

    TYPE_NAME = "TFLiteModel"


def tflite_verdict(input_dict) -> tuple[str | None, str] | None:
    """What the Pusher does with the converter's output: (the `model.tflite` path to push or
    None, the reason), or None when the pipeline has no converter."""
    import os

    found = input_dict.get(TFLITE_MODEL_KEY) or []
    if len(found) != 1:
        return None
    converted = found[0]
    reason = (
        converted.get_string_custom_property(REASON_PROPERTY)
        if converted.has_custom_property(REASON_PROPERTY)
        else "no reason recorded"
    )
    if converted.get_int_custom_property(PASSED_PROPERTY) != 1:
        return None, reason
    return os.path.join(converted.uri, TFLITE_FILE), reason
