"""Prometheus metrics of each finished run, for the dashboards and alert rules in `monitoring/`.

`finish_run` (pipelines/finish/contract.py) calls `export_run_metrics` for every run, whoever
ran it. The metrics are gathered into a registry of their own per run, with the official client
(`prometheus_client`), from the run's `RunResult` and what ML Metadata holds for it (read
with `pipelines.core.metadata`, as the run report reads it), then go to the sinks
`runtime.metrics` names:

- a node-exporter textfile: `<textfile_dir>/<pipeline>.prom`, replaced atomically (written
  to a temporary file beside it, then renamed), so the collector never reads half a file;
- a Pushgateway, whose URL is in the environment variable `pushgateway_url_env` names (a URL
  can carry credentials: it is never logged). The run's metrics replace the group
  `{job=<job>, pipeline=<pipeline>}`, so a column that drifted last night and is gone tonight
  leaves no stale series behind.

Every metric is a gauge of the run's state: a run is one event, and the sinks keep the last
run's values until the next run replaces them (a counter would need state across runs that a
Pushgateway group or a textfile does not keep). Names follow Prometheus' conventions: the
`conveyor_` prefix, the unit in the name (`_seconds`, `_rows`), base units, and labels of low
cardinality only (pipeline, component, split, column, measure, metric, slice, model, outcome,
reason: a `Reason` code, never the message): never a run id, a night or a version, which are
values.

A sink that fails is a warning line, never a failed run: metrics are news of the run, like its
alert.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile
from prometheus_client.exposition import push_to_gateway

from pipelines.core.metadata import (
    NodeArtifacts,
    find_output,
    open_store,
    read_run_artifacts,
    successful_pushes,
)
from pipelines.core.object_path import as_path
from pipelines.core.outcome import Outcome, Reason, RunResult
from pipelines.core.paths import RunPaths
from pipelines.finish import artifacts
from pipelines.spec.models import PipelineSpec

PREFIX = "conveyor_"
PUSH_TIMEOUT_SECONDS = 10.0
OVERALL_SLICE = "overall"  # the slice label of the whole evaluation set (TFMA's empty slice key)
TEXTFILE_SUFFIX = ".prom"  # node-exporter's textfile collector reads only these


class RunMetrics:
    """The metric families of one run, declared in a registry of their own.

    Declaring them all up front (a labelled gauge with no child exports no sample) lets the
    dashboards' test list every name Conveyor exports from an empty `RunMetrics`.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Declares every family in `registry` (a new one when None)."""
        self.registry = registry if registry is not None else CollectorRegistry()

        def gauge(name: str, documentation: str, *labels: str) -> Gauge:
            return Gauge(
                PREFIX + name, documentation, ("pipeline", *labels), registry=self.registry
            )

        self.outcome = gauge(
            "run_outcome",
            "1 for the outcome of the pipeline's last run (pushed, not_pushed, blocked, "
            "failed), 0 for the others.",
            "outcome",
        )
        self.reason = gauge(
            "run_reason",
            "1 for the reason code of the pipeline's last run (pushed, model_not_blessed, "
            "infra_refused, data_gate_blocked, component_failed...), 0 for the others.",
            "reason",
        )
        self.finished = gauge(
            "run_finished_timestamp_seconds", "When the pipeline's last run finished (Unix time)."
        )
        self.duration = gauge(
            "run_duration_seconds",
            "Seconds the last run's pipeline took, every component and TFX's bookkeeping.",
        )
        self.span = gauge("run_span", "The span (night) the last run ingested; absent if none.")
        self.component_duration = gauge(
            "component_duration_seconds",
            "Seconds each component's execution took in the last run.",
            "component",
        )
        self.component_cached = gauge(
            "component_cached",
            "1 when the component's execution in the last run was a cache hit, else 0.",
            "component",
        )
        self.rows = gauge(
            "data_rows", "Examples in each split of the last run's data (StatisticsGen).", "split"
        )
        self.anomalies = gauge(
            "data_anomalies",
            "Columns with an anomaly in each split of the last run's data (the data gate's, or "
            "ExampleValidator's findings).",
            "split",
        )
        self.drift = gauge(
            "data_drift_distance",
            "Distance of each checked column from its drift reference in the last run.",
            "column",
            "measure",
        )
        self.drift_threshold = gauge(
            "data_drift_threshold",
            "The drift distance above which the data gate blocks a run.",
            "column",
            "measure",
        )
        self.skew = gauge(
            "data_skew_distance",
            "Distance of each checked column between training and serving data in the last run.",
            "column",
            "measure",
        )
        self.skew_threshold = gauge(
            "data_skew_threshold",
            "The skew distance above which the data gate blocks a run.",
            "column",
            "measure",
        )
        self.evaluation = gauge(
            "evaluation_metric",
            "The Evaluator's metrics in the last run, per slice, for the candidate and the "
            "baseline (the served model).",
            "metric",
            "slice",
            "model",
        )
        self.lower_bound = gauge(
            "evaluation_lower_bound",
            "The spec's lower bound of an evaluation metric (evaluation.metrics[].lower_bound).",
            "metric",
        )
        self.blessed = gauge(
            "model_blessed", "1 when the last run's candidate was blessed, 0 when not."
        )
        self.infra_blessed = gauge(
            "infra_validation_blessed",
            "1 when the last run's infra validation passed, 0 when it did not.",
        )
        self.pushed_version = gauge(
            "model_pushed_version", "The version the pipeline pushed last (in any run)."
        )
        self.last_push = gauge(
            "model_last_push_timestamp_seconds",
            "When the pipeline last pushed a model successfully (Unix time).",
        )


def exported_names(registry: CollectorRegistry) -> set[str]:
    """The sample names a registry exports, as PromQL sees them: a counter's `_total`, a
    histogram's `_bucket`, `_sum` and `_count`, a gauge's own name."""
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_sum", "_count"),
        "summary": ("", "_sum", "_count"),
        "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
        "info": ("_info",),
    }
    names = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    return names


def run_metric_names() -> set[str]:
    """Every metric name a run can export (what the dashboards and rules may query)."""
    return exported_names(RunMetrics().registry)


# --- gathering a run's metrics ------------------------------------------------------------------


def slice_label(slice_key) -> str:
    """A TFMA slice key as a label value: `overall` for the whole set, else `column=value`
    pairs joined by `,` (the report's words, without spaces)."""
    name = artifacts.slice_name(slice_key)
    if name == "all examples":
        return OVERALL_SLICE
    return name.replace(" = ", "=").replace(", ", ",")


def collect_run_metrics(
    result: RunResult, paths: RunPaths, now: float | None = None
) -> CollectorRegistry:
    """A registry holding the run's metrics, from its result and ML Metadata.

    Args:
      result: the finished run.
      paths: its paths (the spec, the metadata store).
      now: the run's finishing time (Unix seconds); None: now.
    """
    metrics = result_metrics(result, paths.spec, now)
    pipeline = result.pipeline
    store = open_store(paths.spec, paths.metadata_path)
    nodes = read_run_artifacts(store, result.run_id) if store and result.run_id else {}
    splits = _rows(metrics, pipeline, nodes)
    _data_gate(metrics, pipeline, result, nodes, splits)
    _evaluation(metrics, pipeline, nodes)
    _, blessing = find_output(nodes, "ModelBlessing")
    if blessing is not None:
        metrics.blessed.labels(pipeline).set(blessing.get("blessed") == 1)
    _, infra = find_output(nodes, "InfraBlessing")
    if infra is not None:
        metrics.infra_blessed.labels(pipeline).set(infra.get("blessed") == 1)
    pushes = successful_pushes(store, pipeline) if store is not None else None
    if pushes:
        from pipelines.core.metadata import custom_property

        last = pushes[-1]
        set_last_push(
            metrics,
            pipeline,
            custom_property(last, "pushed_version"),
            last.create_time_since_epoch / 1000,
        )
    return metrics.registry


def set_outcome(metrics: RunMetrics, pipeline: str, possible: Iterable[Outcome]) -> None:
    """Sets `conveyor_run_outcome` from the outcomes the run may have had: with one, 1 for it
    and 0 for the others; with several (a Kubeflow run that succeeded, when the exit handler
    cannot tell whether it pushed), 0 for the outcomes ruled out and nothing for the rest, since
    a guess would draw a wrong outcome on the dashboard."""
    possible = set(possible)
    for each in Outcome:
        if each not in possible:
            metrics.outcome.labels(pipeline, each.value).set(0)
        elif len(possible) == 1:
            metrics.outcome.labels(pipeline, each.value).set(1)


def result_metrics(
    result: RunResult,
    spec: PipelineSpec,
    now: float | None = None,
    possible_outcomes: Iterable[Outcome] | None = None,
) -> RunMetrics:
    """The metrics a run's result and its spec tell without ML Metadata: the outcome, when it
    finished, its duration and span, each component's time, the evaluation floors.

    Args:
      result: the finished run (its `pipeline_seconds`, `span` and `nodes` may be unknown).
      spec: its spec (the evaluation's lower bounds).
      now: the run's finishing time (Unix seconds); None: now.
      possible_outcomes: when the outcome is not known for sure, those it may be
        (`set_outcome`); None: the result's.
    """
    metrics = RunMetrics()
    pipeline = result.pipeline
    outcomes = [Outcome(result.outcome)] if possible_outcomes is None else possible_outcomes
    set_outcome(metrics, pipeline, outcomes)
    for each in Reason:
        metrics.reason.labels(pipeline, each.value).set(each is Reason(result.reason))
    metrics.finished.labels(pipeline).set(time.time() if now is None else now)
    if result.pipeline_seconds is not None:
        metrics.duration.labels(pipeline).set(result.pipeline_seconds)
    if result.span is not None:
        metrics.span.labels(pipeline).set(result.span)
    for node in result.nodes:
        metrics.component_duration.labels(pipeline, node.node_id).set(node.seconds)
        metrics.component_cached.labels(pipeline, node.node_id).set(node.state == "cached")
    for metric in spec.evaluation.metrics:
        if metric.lower_bound is not None:
            bound = metric.lower_bound
            name = artifacts.keras_metric_name(metric.name)
            metrics.lower_bound.labels(pipeline, name).set(bound)
    return metrics


def set_last_push(
    metrics: RunMetrics, pipeline: str, version: str | int | None, pushed_at: float
) -> None:
    """Sets the pipeline's last successful push: its version (when it is a number, as TF
    Serving's version folders are) and its time (Unix seconds)."""
    if version is not None and str(version).isdigit():
        metrics.pushed_version.labels(pipeline).set(int(version))
    metrics.last_push.labels(pipeline).set(pushed_at)


def _rows(metrics: RunMetrics, pipeline: str, nodes: dict[str, NodeArtifacts]) -> list[str]:
    """Sets the rows of each split StatisticsGen counted; returns the splits."""
    _, artifact = find_output(nodes, "ExampleStatistics")
    if artifact is None:
        return []
    for split, rows in artifacts.split_rows(artifact).items():
        metrics.rows.labels(pipeline, split).set(rows)
    return artifact.split_names()


def _data_gate(
    metrics: RunMetrics,
    pipeline: str,
    result: RunResult,
    nodes: dict[str, NodeArtifacts],
    splits: Iterable[str],
) -> None:
    """Anomalies per split, drift and skew per column: the data gate's findings, or
    ExampleValidator's anomalies for a run whose gate did not report (the report's reading)."""
    gate = result.data_gate
    if gate:
        anomalies = [entry.get("split") or "" for entry in gate.get("anomalies") or []]
    else:
        found = artifacts.validator_anomaly_rows(nodes)
        if found is None:
            return
        anomalies = [row[1] for row in found]
    for split in sorted(set(splits) | set(anomalies)):
        metrics.anomalies.labels(pipeline, split).set(anomalies.count(split))
    for kind, distance, threshold in (
        ("drift", metrics.drift, metrics.drift_threshold),
        ("skew", metrics.skew, metrics.skew_threshold),
    ):
        for entry in (gate or {}).get(kind) or []:
            labels = (pipeline, str(entry.get("column")), str(entry.get("measure")))
            if entry.get("distance") is not None:
                distance.labels(*labels).set(entry["distance"])
            if entry.get("threshold") is not None:
                threshold.labels(*labels).set(entry["threshold"])


def _evaluation(metrics: RunMetrics, pipeline: str, nodes: dict[str, NodeArtifacts]) -> None:
    """The Evaluator's scalar metrics per slice, for the candidate and the baseline."""
    _, artifact = find_output(nodes, "ModelEvaluation")
    if artifact is None:
        return
    per_slice, _ = artifacts.load_evaluation(artifact.uri)
    for slice_metrics in per_slice:
        slice_name = slice_label(slice_metrics.slice_key)
        for item in slice_metrics.metric_keys_and_values:
            key = item.key
            if key.is_diff or not item.value.HasField("double_value"):
                continue  # differences are two samples apart; matrices are not one number
            name = key.name + (f"/{key.output_name}" if key.output_name else "")
            model = key.model_name or "candidate"
            value = item.value.double_value.value
            metrics.evaluation.labels(pipeline, name, slice_name, model).set(value)


# --- the sinks -----------------------------------------------------------------------------------


def textfile_path(spec: PipelineSpec, workdir: Path) -> Path | None:
    """`<runtime.metrics.textfile_dir>/<pipeline>.prom` (a relative folder is under the
    workdir), or None when the spec writes no textfile."""
    folder = spec.runtime.metrics.textfile_dir
    if not folder:
        return None
    return (as_path(workdir) / folder) / f"{spec.name}{TEXTFILE_SUFFIX}"


def pushgateway_url(spec: PipelineSpec) -> str:
    """The Pushgateway URL from the variable `runtime.metrics.pushgateway_url_env` names, or ""
    when the spec names none or it is unset or empty."""
    variable = spec.runtime.metrics.pushgateway_url_env
    return os.environ.get(variable, "").strip() if variable else ""


def export_run_metrics(
    result: RunResult, paths: RunPaths, echo: Callable[[str], None] = print
) -> CollectorRegistry | None:
    """Sends a finished run's metrics to the sinks its spec names; a sink that fails is a
    warning line, never an exception.

    Args:
      result: the finished run.
      paths: its paths (the spec names the sinks).
      echo: where the lines saying what went where go.

    Returns:
      The run's registry, or None when the spec names no sink (nothing was read then).
    """
    if not has_sink(paths.spec):
        return None
    registry = collect_run_metrics(result, paths)
    send_run_metrics(registry, paths.spec, paths.workdir, echo)
    return registry


def has_sink(spec: PipelineSpec) -> bool:
    """The spec names a textfile, or a Pushgateway whose variable holds a URL."""
    return bool(spec.runtime.metrics.textfile_dir or pushgateway_url(spec))


def send_run_metrics(
    registry: CollectorRegistry,
    spec: PipelineSpec,
    workdir: Path,
    echo: Callable[[str], None] = print,
) -> None:
    """Writes a run's registry to the textfile and pushes it to the Pushgateway the spec
    names (either or both); a sink that fails is a warning line, never an exception.

    Args:
      registry: the run's metrics (`collect_run_metrics`, or `result_metrics(...).registry`).
      spec: the run's spec (its `runtime.metrics`).
      workdir: what a relative `textfile_dir` is under.
      echo: where the lines saying what went where go.
    """
    textfile = textfile_path(spec, workdir)
    url = pushgateway_url(spec)
    if textfile is not None:
        try:
            textfile.parent.mkdir(parents=True, exist_ok=True)
            write_to_textfile(str(textfile), registry)
            echo(f"metrics: {textfile}")
        except OSError as err:
            echo(f"warning: metrics textfile {textfile} not written: {err}")
    if url:
        variable = spec.runtime.metrics.pushgateway_url_env
        try:
            push_to_gateway(
                url,
                job=spec.runtime.metrics.job,
                registry=registry,
                grouping_key={"pipeline": spec.name},
                timeout=PUSH_TIMEOUT_SECONDS,
            )
            echo(f"metrics: pushed to the Pushgateway in ${variable}")
        except Exception as err:  # noqa: BLE001 - any failure to push is only a warning
            # The reason may quote the URL, which can hold credentials: never show it.
            reason = str(getattr(err, "reason", err)).replace(url, "***")
            echo(
                f"warning: metrics not pushed to the Pushgateway in ${variable}: "
                f"{type(err).__name__}: {reason}"
            )


# --- TF Serving's own metrics ---------------------------------------------------------------------

# What the `tensorflow/serving` image exports on its Prometheus path once the monitoring.config
# Conveyor writes enables it: TensorFlow's monitoring metrics, declared in TF Serving's and
# TensorFlow's C++ sources under these names, with these labels. Its exporter
# (tensorflow_serving/util/prometheus_exporter.cc, GetPrometheusMetricName) turns every
# character that is not [a-zA-Z0-9_] into `:`, so `/tensorflow/serving/request_count` is scraped
# as `:tensorflow:serving:request_count`; a counter keeps its name (no `_total`), a sampler is a
# histogram (`_bucket`, `_sum`, `_count`). Latencies are in microseconds.
TF_SERVING_METRICS = {
    # name in the source: (kind, labels, source file)
    "/tensorflow/serving/request_count": (
        "counter",
        ("model_name", "status"),  # status: the canonical code's name: OK, INVALID_ARGUMENT...
        "tensorflow/serving: tensorflow_serving/servables/tensorflow/util.cc",
    ),
    "/tensorflow/serving/request_latency": (
        "histogram",  # microseconds; `status` is a label in releases since it was added
        ("model_name", "API", "entrypoint", "status"),
        "tensorflow/serving: tensorflow_serving/servables/tensorflow/util.cc",
    ),
    "/tensorflow/serving/runtime_latency": (
        "histogram",  # microseconds in the TensorFlow runtime alone
        ("model_name", "API", "runtime"),
        "tensorflow/serving: tensorflow_serving/servables/tensorflow/util.cc",
    ),
    "/tensorflow/serving/request_example_counts": (
        "histogram",
        ("model",),
        "tensorflow/serving: tensorflow_serving/servables/tensorflow/util.cc",
    ),
    "/tensorflow/serving/request_example_count_total": (
        "counter",
        ("model",),
        "tensorflow/serving: tensorflow_serving/servables/tensorflow/util.cc",
    ),
    "/tensorflow/serving/model_warmup_latency": (
        "histogram",  # microseconds; status: the warm-up's status text ("OK" when it worked)
        ("model_path", "status"),
        "tensorflow/serving: tensorflow_serving/servables/tensorflow/saved_model_warmup_util.cc",
    ),
    "/tensorflow/cc/saved_model/load_attempt_count": (
        "counter",  # status: "success" or "fail"; model_path: the version's folder
        ("model_path", "status"),
        "tensorflow/tensorflow: tensorflow/cc/saved_model/loader.cc",
    ),
    "/tensorflow/cc/saved_model/load_latency": (
        "counter",  # microseconds spent loading, summed over successful loads
        ("model_path",),
        "tensorflow/tensorflow: tensorflow/cc/saved_model/loader.cc",
    ),
}


def tf_serving_prometheus_name(name: str) -> str:
    """A TensorFlow monitoring metric's name as TF Serving's Prometheus exporter writes it
    (prometheus_exporter.cc's GetPrometheusMetricName)."""
    rendered = re.sub(r"[^a-zA-Z0-9_]", ":", name)
    return "_" + rendered if rendered[:1].isdigit() else rendered


def tf_serving_metric_names() -> set[str]:
    """Every sample name TF_SERVING_METRICS gives, as PromQL sees it."""
    suffixes = {"counter": ("",), "histogram": ("_bucket", "_sum", "_count")}
    return {
        tf_serving_prometheus_name(name) + suffix
        for name, (kind, _, _) in TF_SERVING_METRICS.items()
        for suffix in suffixes[kind]
    }


def metric_names_in(promql: str) -> set[str]:
    """The metric names a PromQL expression reads that Conveyor's monitoring knows: Conveyor's
    (`conveyor_...`) and TF Serving's (`:tensorflow:...`); label values (quoted) are left out,
    so `{job="conveyor_x"}` names none."""
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', promql)
    conveyor = re.findall(rf"\b{PREFIX}[A-Za-z0-9_]*", unquoted)
    tf_serving = re.findall(r"(?<![A-Za-z0-9_:]):tensorflow:[A-Za-z0-9_:]*", unquoted)
    return set(conveyor) | set(tf_serving)
