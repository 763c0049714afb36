"""The data gate: stops a run before training when the night's data is not fit to train on.

TFX's ExampleValidator records anomalies but lets the pipeline go on to train on bad data, and
it never looks at drift (it has no previous span) or at serving skew. This component fails
instead, so nothing downstream (Trainer, Evaluator, Pusher) runs and the model in serving stays
as it was, when:
- ExampleValidator found schema anomalies (a column missing, a wrong type...);
- a column drifted from the last span that passed this gate by more than its threshold in
  `data.drift`;
- a column of the training data is further than its `data.skew` threshold from the requests
  serving logged (`data.serving_data_dir`).
Distances are TFDV's own (`tfdv.validate_statistics` with drift and skew comparators): L-infinity
for string columns, approximate Jensen-Shannon divergence for numeric ones. Its error lists every
problem in one paragraph; its findings (every distance measured, breached or not) are written as
an output artifact for the run report.
"""

import json
import os
from typing import Any

from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.io import fileio
from tfx.types import artifact, artifact_utils, standard_artifacts

from components.spans.accepted import examples_span, last_accepted_before, record_accepted_span
from pipelines.core.artifact_files import GATE_FINDINGS_FILE, GATE_VERDICT_FILE
from pipelines.core.outcome import Reason

ANOMALIES_FILE = "SchemaDiff.pb"  # as tfx.components.example_validator.executor writes it
STATS_FILE = "FeatureStats.pb"  # as tfx.components.statistics_gen.executor writes it
SKEW_REFERENCE = "serving data"
GATED_SPLIT = "train"  # drift and skew are measured on what the trainer would learn from
_MEASURES = {
    anomalies_pb2.DriftSkewInfo.Measurement.L_INFTY: "L-infinity",
    anomalies_pb2.DriftSkewInfo.Measurement.JENSEN_SHANNON_DIVERGENCE: "Jensen-Shannon",
}


class DataGateFindings(artifact.Artifact):
    """What the data gate measured: `findings.json` (anomalies, drift and skew distances)."""

    # `namespace.Name`: the form Kubeflow Pipelines requires of artifact types, used everywhere.
    TYPE_NAME = "conveyor.DataGateFindings"


class DataGateError(RuntimeError):
    """The data is not fit to train on; the message names each column and what is wrong.

    `findings` holds the same as the gate's output artifact would have (the run report reads it,
    since a failed execution publishes no artifact); `reason` is the code the run records."""

    reason = Reason.DATA_GATE_BLOCKED

    def __init__(self, message: str, findings: dict[str, Any] | None = None):
        super().__init__(message)
        self.findings = findings or {}


def describe_anomalies(anomalies_by_split: dict[str, anomalies_pb2.Anomalies]) -> list[str]:
    """One 'column (split): what is wrong' string per anomaly, columns sorted."""
    return [_anomaly_text(a) for a in anomaly_rows(anomalies_by_split)]


def _anomaly_text(row: dict[str, str]) -> str:
    return f"{row['column']} ({row['split']} split): {row['description']}"


def anomaly_rows(anomalies_by_split: dict[str, anomalies_pb2.Anomalies]) -> list[dict[str, str]]:
    """One {"column", "split", "description"} row per anomaly, splits and columns sorted, with a
    "dataset" row for an anomaly of the whole split (too few examples, say): the form the
    findings and the run report's table take."""
    rows = []
    for split, anomalies in sorted(anomalies_by_split.items()):
        for column, info in sorted(anomalies.anomaly_info.items()):
            detail = "; ".join(r.description for r in info.reason) or info.description
            rows.append(
                {
                    "column": column,
                    "split": split,
                    "description": f"{info.short_description}: {detail}",
                }
            )
        if anomalies.HasField("dataset_anomaly_info"):
            info = anomalies.dataset_anomaly_info
            rows.append({"column": "dataset", "split": split, "description": info.description})
    return rows


def read_anomalies(anomalies_artifact) -> dict[str, anomalies_pb2.Anomalies]:
    """ExampleValidator's Anomalies artifact, read back as one Anomalies proto per split."""
    result = {}
    for split in artifact_utils.decode_split_names(anomalies_artifact.split_names):
        path = os.path.join(
            artifact_utils.get_split_uri([anomalies_artifact], split), ANOMALIES_FILE
        )
        anomalies = anomalies_pb2.Anomalies()
        with fileio.open(path, "rb") as handle:
            anomalies.ParseFromString(handle.read())
        result[split] = anomalies
    return result


def read_statistics(statistics_artifact, split: str = GATED_SPLIT):
    """One split's DatasetFeatureStatisticsList from a StatisticsGen artifact (by default the
    `train` split the gate measures drift and skew on)."""
    path = os.path.join(artifact_utils.get_split_uri([statistics_artifact], split), STATS_FILE)
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    with fileio.open(path, "rb") as handle:
        stats.ParseFromString(handle.read())
    return stats


def _with_comparators(
    schema: schema_pb2.Schema, drift: dict[str, float], skew: dict[str, float]
) -> schema_pb2.Schema:
    """A copy of the schema with TFDV comparators: L-infinity for strings, JS otherwise."""
    compared = schema_pb2.Schema()
    compared.CopyFrom(schema)
    for feature in compared.feature:
        for thresholds, comparator in (
            (drift, feature.drift_comparator),
            (skew, feature.skew_comparator),
        ):
            if feature.name not in thresholds:
                continue
            if feature.type == schema_pb2.BYTES:
                comparator.infinity_norm.threshold = thresholds[feature.name]
            else:
                comparator.jensen_shannon_divergence.threshold = thresholds[feature.name]
    return compared


def measure(
    schema: schema_pb2.Schema,
    current: statistics_pb2.DatasetFeatureStatisticsList,
    previous: statistics_pb2.DatasetFeatureStatisticsList | None,
    serving: statistics_pb2.DatasetFeatureStatisticsList | None,
    drift: dict[str, float],
    skew: dict[str, float],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(drift rows, skew rows) as TFDV measures them: one row per compared column."""
    import tensorflow_data_validation as tfdv

    drift = drift if previous is not None else {}
    skew = skew if serving is not None else {}
    if not drift and not skew:
        return [], []
    result = tfdv.validate_statistics(
        current,
        _with_comparators(schema, drift, skew),
        previous_statistics=previous if drift else None,
        serving_statistics=serving if skew else None,
    )
    rows: dict[str, list[dict[str, Any]]] = {"drift": [], "skew": []}
    for info in result.drift_skew_info:
        column = ".".join(info.path.step)
        for kind, measurements in (
            ("drift", info.drift_measurements),
            ("skew", info.skew_measurements),
        ):
            for m in measurements:
                rows[kind].append(
                    {
                        "column": column,
                        "measure": _MEASURES.get(m.type, str(m.type)),
                        "distance": round(float(m.value), 6),
                        "threshold": float(m.threshold),
                        "breached": float(m.value) > float(m.threshold),
                    }
                )
    for kind, wanted in (("drift", drift), ("skew", skew)):
        measured = {r["column"] for r in rows[kind]}
        for column in sorted(set(wanted) - measured):  # e.g. the column is missing tonight
            rows[kind].append(
                {
                    "column": column,
                    "measure": "not measured (no statistics for the column)",
                    "distance": None,
                    "threshold": wanted[column],
                    "breached": False,
                }
            )
        rows[kind].sort(key=lambda r: r["column"])
    return rows["drift"], rows["skew"]


def serving_statistics(serving_data_dir: str, data_format: str = "csv"):
    """TFDV statistics of the logged serving requests, or None when there are none: the `*.csv`
    files in the folder, or (`prediction_log`) the rows of a model server's request log
    (components/data_gate/serving_logs.py)."""
    import tensorflow_data_validation as tfdv

    if data_format == "prediction_log":
        import pandas as pd

        from components.data_gate.serving_logs import read_rows

        rows, _partial = read_rows(serving_data_dir)
        if not rows:
            return None
        return tfdv.generate_statistics_from_dataframe(pd.DataFrame.from_records(rows))
    files = fileio.glob(os.path.join(serving_data_dir, "*.csv"))
    if not files:
        return None
    return tfdv.generate_statistics_from_csv(data_location=os.path.join(serving_data_dir, "*.csv"))


def _describe_span(examples, unknown: str = "the last accepted span") -> str:
    """'span 20781 (2026-11-24)' for Examples with a span (a previous span's, or tonight's);
    `unknown` for none."""
    import datetime

    span = examples_span(examples)
    if span is None:
        return unknown
    night = datetime.date(1970, 1, 1) + datetime.timedelta(days=span)
    return f"span {span} ({night.isoformat()})" if span > 3650 else f"span {span}"


def problems_of(findings: dict[str, Any]) -> list[str]:
    """Every anomaly and every breached distance, one line each."""
    problems = [_anomaly_text(a) for a in findings["anomalies"]]
    for kind, against in (("drift", findings.get("drift_against")), ("skew", SKEW_REFERENCE)):
        for row in findings[kind]:
            if row["breached"]:
                problems.append(
                    f"{row['column']}: {kind} {row['measure']} {row['distance']:.4g} above its "
                    f"threshold {row['threshold']:g} (against {against})"
                )
    return problems


def write_findings(uri: str, findings: dict[str, Any]) -> None:
    """Writes `findings.json` into the findings artifact's folder, creating it: no orchestrator
    promises the folder exists (Kubeflow's entry point creates none), and on Vertex AI the URI
    is `gs://...`, which TFX's file I/O reaches and `open` does not."""
    fileio.makedirs(uri)
    with fileio.open(os.path.join(uri, GATE_FINDINGS_FILE), "w") as handle:
        handle.write(json.dumps(findings, indent=2))


@component
def DataGate(  # noqa: N802 - TFX names components like classes
    anomalies: InputArtifact[standard_artifacts.ExampleAnomalies],
    statistics: InputArtifact[standard_artifacts.ExampleStatistics],
    schema: InputArtifact[standard_artifacts.Schema],
    examples: InputArtifact[standard_artifacts.Examples],
    findings: OutputArtifact[DataGateFindings],
    input_base: Parameter[str],
    data_description: Parameter[str],
    thresholds: Parameter[str],
    # Optional: a default of None is how TFX's function components declare an optional input.
    previous_statistics: InputArtifact[standard_artifacts.ExampleStatistics] = None,
    previous_examples: InputArtifact[standard_artifacts.Examples] = None,
    runs_dir: Parameter[str] = None,
    job_name: Parameter[str] = None,
    job_resource_name: Parameter[str] = None,
    accepted_spans_dir: Parameter[str] = None,
    accepted_schema_file: Parameter[str] = None,
) -> None:
    """Raises DataGateError listing each problem; passes (and records findings) when none.

    `thresholds` is JSON: {"drift": {column: max}, "skew": {column: max},
    "serving_data_dir": path or null, "serving_data_format": "prediction_log" (absent: CSV)}.
    `data_description` names the data in the refusal; "" names the span of `examples`
    (Kubeflow, where the run's range decides it).

    On Kubeflow, `runs_dir` (the pipeline's folder of run folders) and KFP's job name
    placeholders (`{{$.pipeline_job_name}}`, `{{$.pipeline_job_resource_name}}`) name the run's
    folder as the exit handler names it from the run's final status; a gate that refuses the
    data writes its verdict there (`write_verdict`), since its failed task publishes no artifact
    and the exit handler could otherwise report only a failed task.

    With `accepted_spans_dir` (Kubeflow, whose resolvers cannot find the last accepted span),
    the gate finds its drift baseline in the record kept there and records each span it
    accepts (components/spans/accepted.py). `examples` is an input so that ML Metadata records which
    examples this gate accepted (what the resolver finds a baseline by) and to read its span.
    With `accepted_schema_file` (Kubeflow with `schema.source: infer`), the schema of data it
    accepts is recorded there: the schema the next run keeps (components/accepted_schema).
    """
    from tfx.utils import io_utils

    limits = json.loads(thresholds)
    if accepted_spans_dir and previous_statistics is None and limits.get("drift"):
        previous_statistics, previous_examples = last_accepted_before(
            accepted_spans_dir, examples_span(examples)
        )
    schema_proto = io_utils.SchemaReader().read(
        io_utils.get_only_uri_in_dir(artifact_utils.get_single_uri([schema]))
    )
    previous = read_statistics(previous_statistics) if previous_statistics is not None else None
    serving_dir = limits.get("serving_data_dir")
    serving = None
    if serving_dir and limits.get("skew"):
        serving = serving_statistics(serving_dir, limits.get("serving_data_format") or "csv")
    drift_rows, skew_rows = measure(
        schema_proto,
        read_statistics(statistics),
        previous,
        serving,
        limits.get("drift") or {},
        limits.get("skew") or {},
    )
    drift_against = _describe_span(previous_examples) if previous is not None else None
    result: dict[str, Any] = {
        "anomalies": anomaly_rows(read_anomalies(anomalies)),
        # Each row names what it was measured against (the report's tables show it).
        "drift": [{**row, "against": drift_against} for row in drift_rows],
        "skew": [{**row, "against": SKEW_REFERENCE} for row in skew_rows],
        "drift_against": drift_against,
        "notes": [],
    }
    if limits.get("drift") and previous is None:
        result["notes"].append("drift not checked: no earlier span has passed this gate yet")
    if limits.get("skew") and serving is None:
        result["notes"].append(f"skew not checked: no serving data in {serving_dir}")
    problems = problems_of(result)
    result["passed"] = not problems
    if problems:  # the run's reason code, recorded with what the gate found
        result["reason"] = DataGateError.reason.value
    write_findings(findings.uri, result)
    if accepted_spans_dir and not problems:
        record_accepted_span(accepted_spans_dir, statistics, examples)
    if accepted_schema_file and not problems:
        from components.accepted_schema.component import record_accepted_schema

        record_accepted_schema(accepted_schema_file, schema)
    if problems:
        described = data_description or _describe_span(examples, "its examples")
        error = DataGateError(
            f"Data gate: the data in {input_base} ({described}) is not fit to train on, "
            f"so the run stopped before training and nothing was pushed. {len(problems)} "
            f"problem{'' if len(problems) == 1 else 's'}: " + " | ".join(problems),
            result,
        )
        if runs_dir:
            write_verdict(runs_dir, job_name, job_resource_name, error)
        raise error


def write_verdict(
    runs_dir: str, job_name: str | None, job_resource_name: str | None, error: DataGateError
) -> str | None:
    """Writes the refusal (reason, message, findings) into the Kubeflow run's folder under
    `runs_dir`, named from KFP's job name as the exit handler names it; returns the file, or
    None when KFP resolved neither placeholder (no name to meet the exit handler by)."""
    from components.run_finish.component import kubeflow_run_folder

    folder = kubeflow_run_folder(runs_dir, job_name, job_resource_name)
    if folder is None:
        return None
    fileio.makedirs(folder)
    target = os.path.join(folder, GATE_VERDICT_FILE)
    verdict = {"reason": error.reason.value, "message": str(error), "findings": error.findings}
    with fileio.open(target, "w") as handle:
        handle.write(json.dumps(verdict, indent=2))
    return target
