"""What a run's artifacts hold, read back for its report, metrics and record.

Readers only: each takes what ML Metadata says of the run (`pipelines.core.metadata`: its nodes
and their input and output artifacts) or a folder a component wrote, and returns plain values
or the protos TFX wrote; the page (`pipelines.finish.report`) and the metrics
(`pipelines.finish.metrics`) decide what to show. Statistics and anomalies are read with the
tensorflow_metadata protos alone; TensorFlow Model Analysis is imported only to read an
evaluation; the trainer's TensorBoard log is read without TensorFlow
(`pipelines.finish.training_summary`).
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path
from typing import Any

from pipelines.core.artifact_files import GATE_FINDINGS_FILE, GATE_FINDINGS_KEY
from pipelines.core.metadata import (
    ArtifactRecord,
    NodeArtifacts,
    find_output,
    node_context_type_id,
    node_id_of,
    open_store,
    run_context,
    statistics_file,
)
from pipelines.core.object_path import as_path
from pipelines.core.paths import RunPaths

# --- statistics (StatisticsGen) ------------------------------------------------------------------


def read_statistics(uri: str, split: str):
    """One split's first DatasetFeatureStatistics, or None when the split has no file."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    path = statistics_file(uri, split)
    if not path.is_file():
        return None
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    stats.ParseFromString(path.read_bytes())
    return stats.datasets[0] if stats.datasets else None


def split_names(artifact: ArtifactRecord) -> list[str]:
    """The splits a statistics artifact holds: as ML Metadata records them, else its folders."""
    return artifact.split_names() or sorted(
        p.name[len("Split-") :] for p in as_path(artifact.uri).glob("Split-*")
    )


def split_rows(artifact: ArtifactRecord) -> dict[str, int]:
    """Split -> the examples StatisticsGen counted in it (a split without a file is left out)."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    rows = {}
    for split in artifact.split_names():
        path = statistics_file(artifact.uri, split)
        if not path.is_file():
            continue
        statistics = statistics_pb2.DatasetFeatureStatisticsList()
        statistics.ParseFromString(path.read_bytes())
        rows[split] = sum(int(dataset.num_examples) for dataset in statistics.datasets)
    return rows


def drift_reference(nodes: dict[str, NodeArtifacts], splits: list[str]):
    """(what it is, its statistics) of the split the data gate measured drift against: the
    same split of the statistics the gate was given as `previous_statistics`; None when the
    gate had none (a first run, no drift configured) or its file is gone."""
    gate = next((n for n in nodes.values() if n.input("previous_statistics")), None)
    if gate is None:
        return None
    artifact = gate.input("previous_statistics")
    names = split_names(artifact)
    split = next((s for s in splits if s in names), names[0] if names else None)
    dataset = read_statistics(artifact.uri, split) if split else None
    if dataset is None:
        return None
    return f"split {split} of statistics artifact {artifact.id}", dataset


def feature_stats(dataset) -> dict[str, Any]:
    """Feature name -> its numeric or string statistics (other kinds are not charted)."""
    found = {}
    for feature in dataset.features:
        kind = feature.WhichOneof("stats")
        if kind in ("num_stats", "string_stats"):
            found[".".join(feature.path.step) or feature.name] = getattr(feature, kind)
    return found


# --- anomalies and the data gate's findings ------------------------------------------------------


def validator_anomaly_rows(nodes: dict[str, NodeArtifacts]) -> list[tuple] | None:
    """ExampleValidator's anomalies, one (column, split, short description, description) row
    each, `(dataset)` for an anomaly of a whole split; None when ExampleValidator did not run."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    _, artifact = find_output(nodes, "ExampleAnomalies")
    if artifact is None:
        return None
    rows = []
    for split_dir in sorted(as_path(artifact.uri).glob("Split-*")):
        path = split_dir / "SchemaDiff.pb"
        if not path.is_file():
            continue
        anomalies = anomalies_pb2.Anomalies()
        anomalies.ParseFromString(path.read_bytes())
        split = split_dir.name[len("Split-") :]
        for column, info in sorted(anomalies.anomaly_info.items()):
            rows.append((column, split, info.short_description, info.description))
        if anomalies.HasField("dataset_anomaly_info"):
            info = anomalies.dataset_anomaly_info
            rows.append(("(dataset)", split, info.short_description, info.description))
    return rows


def findings_in(folder: str | Path | None) -> dict | None:
    """The data gate's findings in its output folder (a passed or cached gate's artifact), or
    None when there is no folder or no file in it."""
    if not folder:
        return None
    found = Path(folder) / GATE_FINDINGS_FILE
    return json.loads(found.read_text()) if found.is_file() else None


def refused_gate_findings(paths: RunPaths, run_id: str, gate_id: str) -> dict | None:
    """The findings a data gate wrote in the run `run_id` before it refused the data, or None.

    A failed execution publishes no artifact, but the gate writes its findings into its output
    folder first; TFX names that folder `<pipeline root>/<node>/<output key>/<execution id>`, so
    the gate's own execution in this run (from ML Metadata) finds this run's file, never an
    earlier run's.
    """
    store = open_store(paths.spec, paths.metadata_path)
    context = run_context(store, run_id) if store is not None else None
    if context is None:
        return None
    node_type = node_context_type_id(store)
    mine = [
        e.id
        for e in store.get_executions_by_context(context.id)
        if node_id_of(store, e, node_type) == gate_id
    ]
    for execution_id in sorted(mine, reverse=True):  # a retried gate: its latest execution
        found = findings_in(paths.pipeline_root / gate_id / GATE_FINDINGS_KEY / str(execution_id))
        if found is not None:
            return found
    return None


# --- tuning (Tuner) ------------------------------------------------------------------------------

TUNER_RESULTS_FILE = "tuner_results.json"  # TFX's Tuner executor writes these two names
BEST_HYPERPARAMETERS_FILE = "best_hyperparameters.txt"


def read_tuner_trials(uri: str) -> list[dict[str, Any]]:
    """The completed trials of a TunerResults artifact, best first, as TFX's Tuner writes them:
    `trial_id`, `score` (the objective) and each hyperparameter's value."""
    path = as_path(uri) / TUNER_RESULTS_FILE
    return json.loads(path.read_text()) if path.is_file() else []


def read_hyperparameters(uri: str) -> dict[str, Any]:
    """The values of a HyperParameters artifact (a KerasTuner config); {} without its file."""
    path = as_path(uri) / BEST_HYPERPARAMETERS_FILE
    return json.loads(path.read_text()).get("values", {}) if path.is_file() else {}


# --- the evaluation (Evaluator) ------------------------------------------------------------------


def keras_metric_name(class_name: str) -> str:
    """Keras's default metric name for a metric class: SparseCategoricalAccuracy ->
    sparse_categorical_accuracy, AUC -> auc."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", class_name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def slice_name(slice_key) -> str:
    """A TFMA slice key as the report names it: `all examples`, or `column = value` pairs
    joined by commas (the run metrics label slices from it)."""
    parts = []
    for key in slice_key.single_slice_keys:
        kind = key.WhichOneof("kind")
        value = getattr(key, kind) if kind else ""
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        parts.append(f"{key.column} = {value}")
    return ", ".join(parts) or "all examples"


def load_evaluation(uri: str):
    """(metrics per slice, validation result) from an Evaluator output, quietly."""
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)  # deprecation notices from TFMA's own reader
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import tensorflow_model_analysis as tfma

            metrics = list(tfma.load_metrics(uri))
            try:
                validation = tfma.load_validation_result(uri)
            except Exception:  # an evaluation without thresholds writes no validation file
                validation = None
    finally:
        tf_logger.setLevel(level)
    return metrics, validation
