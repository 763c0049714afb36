"""tf.Examples as the Trainer's raw columns: one scalar per row and column, a missing value
replaced by a marker.

The training input, the exported model's signatures (its own and TF Serving's) and the infra
validator's requests all read examples this one way, so a value is missing in the same way
everywhere.
"""

from __future__ import annotations

import tensorflow as tf

from components.trainer.features import DType, FeatureInfo, FeatureSet, LabelInfo

# What a missing value looks like once parsed: tf.Example simply omits the feature.
MISSING_FLOAT = float("nan")
MISSING_INT = -1
MISSING_STRING = b""

_TF_DTYPES = {DType.FLOAT: tf.float32, DType.INT: tf.int64, DType.STRING: tf.string}
_MISSING = {DType.FLOAT: MISSING_FLOAT, DType.INT: MISSING_INT, DType.STRING: MISSING_STRING}


def _columns(features: FeatureSet, with_label: bool) -> list[FeatureInfo | LabelInfo]:
    return [*features.features, features.label] if with_label else list(features.features)


def parse_examples(
    serialized: tf.Tensor, features: FeatureSet, with_label: bool
) -> dict[str, tf.Tensor]:
    """Parses tf.Examples into one scalar per row and column; a missing value becomes a marker.

    TFX's CSV decoding writes an empty field as a feature with no values (not an absent
    feature), which a FixedLenFeature refuses; ragged parsing accepts both.
    """
    columns = _columns(features, with_label)
    ragged = tf.io.parse_example(
        serialized, {c.name: tf.io.RaggedFeature(_TF_DTYPES[c.dtype]) for c in columns}
    )
    return {
        c.name: ragged[c.name].to_tensor(default_value=_MISSING[c.dtype], shape=[None, 1])[:, 0]
        for c in columns
    }


def raw_input_signature(features: FeatureSet) -> dict[str, tf.TensorSpec]:
    """One batch-long vector per feature column, named after it: the `serving_default` input."""
    return {
        f.name: tf.TensorSpec([None], _TF_DTYPES[f.dtype], name=f.name) for f in features.features
    }
