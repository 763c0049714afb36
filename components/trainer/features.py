"""What the trainer knows about each column, derived from the schema and the data's statistics.

Pure Python over tensorflow_metadata protos (no TensorFlow), so it is cheap to test: numeric
features get the mean and standard deviation StatisticsGen computed over the training split,
categorical strings get their vocabulary from the statistics' rank histogram, and the label's
classes come from the schema's domain or, failing that, the statistics.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

# Beside the trainer's summary in the model run directory: per split, the rows whose label
# the model's classes do not include, by value.
UNSEEN_LABELS_FILE = "unseen_labels.json"


class TrainerConfigError(ValueError):
    """The trainer cannot be built from this spec, schema and statistics."""


class DType(str, enum.Enum):
    """A column's value type, as the schema gives it (BYTES is STRING here)."""

    FLOAT = "float"
    INT = "int"
    STRING = "string"


_SCHEMA_TYPES = {
    schema_pb2.FLOAT: DType.FLOAT,
    schema_pb2.INT: DType.INT,
    schema_pb2.BYTES: DType.STRING,
}


@dataclass(frozen=True)
class FeatureInfo:
    """One input column and how the model encodes it.

    Numeric columns are standardised with `mean` and `std`; categorical text is looked up in
    `vocabulary` (most frequent first); categorical integers are hashed into `hash_buckets`;
    text is embedded by the SavedModel at `embedding` (as the spec gives the path).
    """

    name: str
    kind: str  # "numeric", "categorical" or "text", as in the spec
    dtype: DType
    mean: float = 0.0
    std: float = 1.0
    vocabulary: tuple[str, ...] = ()
    hash_buckets: int = 0
    embedding: str = ""


@dataclass(frozen=True)
class LabelInfo:
    """The label column: the task, and for classification the classes in output order."""

    name: str
    task: str  # "classification" or "regression"
    dtype: DType
    classes: tuple[str, ...] = ()

    @property
    def is_binary(self) -> bool:
        """Classification with two classes: one sigmoid output rather than a softmax."""
        return self.task == "classification" and len(self.classes) == 2

    @property
    def output_units(self) -> int:
        """Width of the network's head: 1 for regression and binary, else one per class."""
        if self.task == "regression" or self.is_binary:
            return 1
        return len(self.classes)


def _feature_dict(feature: FeatureInfo) -> dict[str, Any]:
    described = feature.__dict__ | {"dtype": feature.dtype.value}
    if not described["embedding"]:
        # Left out unless set: records written before text features existed compare equal.
        del described["embedding"]
    return described


@dataclass(frozen=True)
class FeatureSet:
    """Everything the trainer knows about the columns: the features in order, and the label."""

    features: tuple[FeatureInfo, ...]
    label: LabelInfo

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (dtypes as their names), recorded with an export for warm starts."""
        return {
            "features": [_feature_dict(f) for f in self.features],
            "label": self.label.__dict__ | {"dtype": self.label.dtype.value},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSet:
        """The inverse of to_dict (JSON round trips lists for tuples)."""
        features = tuple(
            FeatureInfo(
                **{
                    **f,
                    "dtype": DType(f["dtype"]),
                    "vocabulary": tuple(f.get("vocabulary", ())),
                }
            )
            for f in data["features"]
        )
        label = data["label"]
        return cls(
            features,
            LabelInfo(
                **{**label, "dtype": DType(label["dtype"]), "classes": tuple(label["classes"])}
            ),
        )


def _feature_stats(
    stats: statistics_pb2.DatasetFeatureStatisticsList,
) -> dict[str, statistics_pb2.FeatureNameStatistics]:
    if not stats.datasets:
        raise TrainerConfigError("the training statistics hold no dataset")
    by_name = {}
    for feature in stats.datasets[0].features:
        name = feature.path.step[0] if feature.path.step else feature.name
        by_name[name] = feature
    return by_name


def _vocabulary(feature: statistics_pb2.FeatureNameStatistics, limit: int) -> tuple[str, ...]:
    string_stats = feature.string_stats
    if string_stats.rank_histogram.buckets:
        counts = [(b.label, b.sample_count) for b in string_stats.rank_histogram.buckets]
    else:
        counts = [(v.value, v.frequency) for v in string_stats.top_values]
    # Most frequent first, ties by value, so the same data always gives the same vocabulary.
    ranked = sorted(counts, key=lambda item: (-item[1], item[0]))
    return tuple(value for value, _ in ranked[:limit] if value != "")


def describe(
    trainer: Mapping[str, Any],
    schema: schema_pb2.Schema,
    stats: statistics_pb2.DatasetFeatureStatisticsList,
) -> FeatureSet:
    """Builds the FeatureSet for a trainer spec (as a dict) from schema and training statistics.

    Raises:
      TrainerConfigError: naming the column when the spec and the data disagree.
    """
    schema_features = {f.name: f for f in schema.feature}
    stats_by_name = _feature_stats(stats)

    def column(
        name: str, role: str
    ) -> tuple[schema_pb2.Feature, statistics_pb2.FeatureNameStatistics]:
        if name not in schema_features:
            raise TrainerConfigError(
                f"{role} column {name!r} is not in the schema "
                f"(columns: {', '.join(sorted(schema_features))})"
            )
        if name not in stats_by_name:
            raise TrainerConfigError(
                f"{role} column {name!r} has no statistics in the training split"
            )
        return schema_features[name], stats_by_name[name]

    infos = []
    for spec in trainer["features"]:
        schema_feature, feature_stats = column(spec["name"], "feature")
        dtype = _SCHEMA_TYPES.get(schema_feature.type)
        if dtype is None:
            raise TrainerConfigError(f"feature {spec['name']!r} has an unsupported schema type")
        if spec["kind"] == "numeric":
            if dtype is DType.STRING:
                raise TrainerConfigError(
                    f"feature {spec['name']!r} is declared numeric but its column holds text"
                )
            num = feature_stats.num_stats
            std = num.std_dev if num.std_dev > 1e-12 else 1.0
            infos.append(FeatureInfo(spec["name"], "numeric", dtype, mean=num.mean, std=std))
        elif spec["kind"] == "text":
            if dtype is not DType.STRING:
                raise TrainerConfigError(
                    f"feature {spec['name']!r} is declared text but its column holds numbers"
                )
            infos.append(
                FeatureInfo(spec["name"], "text", dtype, embedding=spec["embedding"]["module"])
            )
        elif dtype is DType.STRING:
            vocabulary = _vocabulary(feature_stats, int(spec.get("max_vocabulary", 1000)))
            infos.append(FeatureInfo(spec["name"], "categorical", dtype, vocabulary=vocabulary))
        else:
            infos.append(
                FeatureInfo(
                    spec["name"],
                    "categorical",
                    dtype,
                    hash_buckets=int(spec.get("hash_buckets", 64)),
                )
            )

    label_name = trainer["label"]
    schema_label, label_stats = column(label_name, "label")
    label_dtype = _SCHEMA_TYPES[schema_label.type]
    task = trainer.get("task", "classification")
    classes: Sequence[str] = ()
    if task == "classification":
        classes = _label_classes(schema, schema_label, label_stats, label_dtype)
        if len(classes) < 2:
            raise TrainerConfigError(
                f"label column {label_name!r} has {len(classes)} class(es); classification needs 2+"
            )
    elif label_dtype is DType.STRING:
        raise TrainerConfigError(f"regression label {label_name!r} holds text")
    label = LabelInfo(label_name, task, label_dtype, tuple(classes))
    return FeatureSet(tuple(infos), label)


def _label_classes(
    schema: schema_pb2.Schema,
    feature: schema_pb2.Feature,
    stats: statistics_pb2.FeatureNameStatistics,
    dtype: DType,
) -> tuple[str, ...]:
    if dtype is DType.STRING:
        domain = None
        if feature.HasField("string_domain"):
            domain = feature.string_domain
        elif feature.HasField("domain"):
            domain = next((d for d in schema.string_domain if d.name == feature.domain), None)
        if domain is not None and domain.value:
            return tuple(sorted(domain.value))
        return tuple(sorted(_vocabulary(stats, 10_000)))
    if dtype is DType.INT:
        # Integer classes are 0..max: the model's class ids are the label values themselves.
        top = int(stats.num_stats.max)
        if stats.num_stats.min < 0:
            raise TrainerConfigError(f"integer label {feature.name!r} has negative values")
        return tuple(str(i) for i in range(top + 1))
    raise TrainerConfigError(f"classification label {feature.name!r} holds floats")


def label_counts(
    label: LabelInfo, stats: statistics_pb2.DatasetFeatureStatisticsList
) -> dict[str, Any] | None:
    """One split's rows, rows without a label, and by value the rows whose label `label`'s
    classes do not include, read from the split's statistics; None when they cannot say it
    exactly (the caller then counts from the examples).

    Text labels: the rank histogram counts every distinct value, unless the data has more than
    it ranks. Integer labels: values outside 0..len(classes)-1 exist when the minimum or the
    maximum says so, but the statistics hold no count by value: None then (and {} when not).
    Regression has no classes: {}.
    """
    if label.task != "classification" or not stats.datasets:
        return {}
    dataset = stats.datasets[0]
    feature = _feature_stats(stats).get(label.name)
    if feature is None:
        return None
    if label.dtype is DType.STRING:
        common = feature.string_stats.common_stats
        string_stats = feature.string_stats
        buckets = {b.label: int(b.sample_count) for b in string_stats.rank_histogram.buckets}
        if len(buckets) < string_stats.unique:
            return None  # more distinct values than ranked: some counts are missing
        classes = set(label.classes)
        unseen = {v: n for v, n in buckets.items() if v not in classes and v != ""}
    else:
        common = feature.num_stats.common_stats
        num = feature.num_stats
        if common.tot_num_values and (num.min < 0 or num.max > len(label.classes) - 1):
            return None
        unseen = {}
    return {
        "rows": int(dataset.num_examples),
        # A label is one value per row: rows without one are the rows less the values.
        "without_label": int(dataset.num_examples - common.tot_num_values),
        "unseen": dict(sorted(unseen.items(), key=lambda item: (-item[1], item[0]))),
    }
