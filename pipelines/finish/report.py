"""The run report: one self-contained HTML file per run, readable without a notebook.

`write_report` reads what the run produced back from ML Metadata (`pipelines.core.metadata`: the
`pipeline_run` context's executions and their input and output artifacts; a cached execution's
outputs are linked too) and writes `<run dir>/report.html`: the verdict and the gate decisions,
the data statistics of every split, the data gate's anomalies, drift and skew, the evaluation of
every slice for the candidate against the baseline with the thresholds that failed, and the push
with a link to the pushed version's model card (`pipelines.finish.model_card`).
A run that stopped early shows what exists and says what does not.

This module prepares the page's data as plain dataclasses from what the artifact readers
(`pipelines.finish.artifacts`) return; the markup is the jinja2 templates in
`pipelines/finish/templates/` (autoescaped, so a message or a column name is text, never markup).
The page has inline CSS, no scripts and no external URLs. Its charts (`pipelines.finish.charts`:
distributions per feature, top values, metrics per slice, seconds per component, the loss by
training step from the Trainer's TensorBoard summary) are inline SVG drawn with matplotlib,
imported only when the first chart is drawn; a chart that cannot be drawn is left out, never a
reason to lose the page. The page of a taxi-sized run (15 columns, two
splits and a drift reference) stays under `SIZE_BUDGET_BYTES`.

TensorFlow Model Analysis is imported only when the run has an evaluation to read; statistics and
anomalies are read with the tensorflow_metadata protos alone.
"""

from __future__ import annotations

import datetime
import functools
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from pipelines.core import storage
from pipelines.core.metadata import (
    HYPERPARAMETERS_TYPE,
    ArtifactRecord,
    NodeArtifacts,
    find_output,
    open_store,
    read_run_artifacts,
)
from pipelines.core.object_path import as_path
from pipelines.core.outcome import Outcome, Reason, RunResult
from pipelines.core.paths import REPORT_FILE, RunPaths, find_run_dirs, recent_run_dirs
from pipelines.finish import artifacts
from pipelines.finish.charts import ChartRenderer, Frequencies, Histogram
from pipelines.serving_state.models_table import model_card_files

TOP_VALUES = 5
TEMPLATES_DIR = Path(__file__).parent / "templates"
TEMPLATE = "report.html.j2"
# What a run's page may weigh: a taxi-sized run (15 columns, two splits, a drift reference, an
# evaluation by slice) is about a tenth of it (tests/unit/test_report_charts.py measures it).
SIZE_BUDGET_BYTES = 1_000_000
TOP_VALUES_CHARTED = 8
REFERENCE_LABEL = "reference"  # the drift reference's series in a distribution


# The infra validator's InfraBlessing properties naming its model server (written by
# components/infra_validator/blessing.py, a layer above, which tests hold equal to these).
INFRA_SERVER_PROPERTY = "conveyor_infra_server"
INFRA_SERVER_DESCRIPTION_PROPERTY = "conveyor_infra_server_description"


# --- what the templates draw ---------------------------------------------------------------------


@dataclass(frozen=True)
class Badge:
    """A coloured word with an optional plain-text note after it.

    `kind` is the CSS class: ok (green), warn (amber), bad (red) or none (grey).
    """

    text: str
    kind: str
    note: str = ""


@dataclass
class Table:
    """A table of text cells (a cell may be a `Badge`); `numeric` columns are right-aligned."""

    headers: Sequence[str]
    rows: list[list[Any]]
    numeric: frozenset[int] = frozenset()


@dataclass
class Summary:
    """The page's head: the verdict, the run's message and where its files are."""

    pipeline: str
    run_id: str | None
    outcome: Badge
    reason: str  # the run's reason code (`pipelines.core.outcome.Reason`)
    message: str
    night: str | None
    span: int | None
    pushed_version: str | None
    pushed_path: str | None
    model_card: str | None  # the pushed version's model card page, None when it has none
    model_card_link: str  # ... as a file:// URL when it is local, "" in a bucket
    serving_dir: str
    run_dir: str
    metadata: str


@dataclass
class GateDecisions:
    """The decisions of a run: the data gate, the model gate (blessing), the infra validator
    (None when the pipeline has none), the push."""

    data_gate: Badge
    model: Badge
    push: Badge
    infra: Badge | None = None
    tflite: Badge | None = None  # None: the pipeline has no TF Lite converter
    infra_server: str | None = None  # the model server that checked the model, in words


@dataclass
class SplitStatistics:
    """One dataset of a split's statistics; `table` is None when the split has no file."""

    name: str
    examples: str = ""
    table: Table | None = None


@dataclass(frozen=True)
class FeatureChart:
    """One feature's distribution as inline SVG (already safe markup)."""

    feature: str
    svg: markupsafe.Markup


@dataclass
class Statistics:
    """StatisticsGen's output, split by split, and a chart per feature (the splits and the
    drift reference overlaid; `reference` names that reference, None when there was none)."""

    uri: str | None  # None: StatisticsGen did not run
    cached: bool = False
    splits: list[SplitStatistics] = field(default_factory=list)
    charts: list[FeatureChart] = field(default_factory=list)
    reference: str | None = None


@dataclass
class Components:
    """Each node's state and seconds, as a table and a chart (None when none was drawn)."""

    table: Table
    chart: markupsafe.Markup | None = None


@dataclass
class GateTable:
    """A titled table of the data gate's findings, or the word for none (`empty`)."""

    title: str
    table: Table | None
    empty: str = "none"


@dataclass
class DataGate:
    """The data gate's findings: anomalies, drift and skew (or ExampleValidator's own)."""

    verdict: Badge | None  # None: the runner did not report the gate's findings
    validator: GateTable | None = None  # ExampleValidator's own findings, for such a run
    tables: list[GateTable] = field(default_factory=list)


@dataclass
class Evaluation:
    """The Evaluator's metrics per slice for the candidate and the baseline, and the verdict."""

    missing: str = ""  # why there is no evaluation; "" when there is one
    notes: list[str] = field(default_factory=list)
    uri: str = ""
    read_error: str = ""
    verdict: Badge | None = None  # None: the evaluation had no thresholds to validate
    missing_thresholds: bool = False
    missing_slices: list[str] = field(default_factory=list)
    rubber_stamp: bool = False
    table: Table | None = None
    charts: list[markupsafe.Markup] = field(default_factory=list)  # a metric per slice each


@dataclass
class Training:
    """The Trainer's TensorBoard log directory (its ModelRun artifact) and what is in it: the
    command that opens it, the profiler traces, and the loss curve of its summary."""

    log_dir: str | None  # None: the Trainer did not run
    link: str = ""  # a file:// URL of a local log directory, "" for a remote one
    command: str = ""
    cached: bool = False
    traces: list[str] = field(default_factory=list)
    profile_steps: tuple[int, int] | None = None  # what the trainer was asked to profile
    chart: markupsafe.Markup | None = None
    points: int = 0  # training loss points read


@dataclass
class Push:
    """What the Pusher decided, as its PushedModel artifact records it."""

    pushed: bool
    version: Any
    destination: Any
    reason: Any
    pusher_state: str | None


@dataclass
class Section:
    """One section after the summary; `error` replaces it when its data could not be read."""

    name: str  # the macro in templates/sections.html.j2 that draws it
    data: Any = None
    error: str | None = None


@dataclass
class ReportPage:
    """Everything `templates/report.html.j2` draws."""

    title: str
    summary: Summary
    recorded: bool  # ML Metadata holds the run
    sections: list[Section]
    generated: str


# --- preparing the data --------------------------------------------------------------------------


def _num(value: float | int | None, digits: int = 6) -> str:
    if value is None:
        return ""
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Iterable[int] = ()
) -> Table:
    """A `Table`; a missing value (None) is an empty cell."""
    cells = [["" if cell is None else cell for cell in row] for row in rows]
    return Table(list(headers), cells, frozenset(numeric))


_PASSED = Badge("passed", "ok")
_BLOCKED = Badge("blocked", "bad")


def _outcome_badge(result: RunResult) -> Badge:
    # Green for a new version, amber for a run that kept serving as it was, red for one that
    # alerts operators (its reason code says so: a model the infra validator refused too).
    outcome = Outcome(result.outcome)
    kind = "bad" if result.alerts else "ok" if outcome is Outcome.PUSHED else "warn"
    return Badge(outcome.label, kind)


def _summary(result: RunResult, paths: RunPaths) -> Summary:
    card = _model_card(result, paths)
    return Summary(
        pipeline=result.pipeline,
        run_id=result.run_id,
        outcome=_outcome_badge(result),
        reason=Reason(result.reason).value,
        message=result.message,
        night=result.night,
        span=result.span,
        pushed_version=result.pushed_version,
        pushed_path=result.pushed_path,
        model_card=card,
        model_card_link=as_path(card).absolute().as_uri() if card and "://" not in card else "",
        serving_dir=str(paths.serving_dir),
        run_dir=result.run_dir,
        metadata=str(paths.metadata_path),
    )


def _model_card(result: RunResult, paths: RunPaths) -> str | None:
    """The pushed version's model card page, when the run pushed one and its card was written."""
    if Outcome(result.outcome) is not Outcome.PUSHED or not result.pushed_version:
        return None
    name = paths.spec.push.model_name
    _, page = model_card_files(paths.serving_config_dir, name, result.pushed_version)
    return str(page) if storage.exists(str(page)) else None


def _gate_decisions(result: RunResult, nodes: dict[str, NodeArtifacts]) -> GateDecisions:
    gate = result.data_gate
    data_node = nodes.get("data_gate")
    if gate:
        data = _PASSED if gate.get("passed") else _BLOCKED
    elif data_node is not None:
        blocked = data_node.state == "failed" or Outcome(result.outcome) is Outcome.BLOCKED
        data = _BLOCKED if blocked else _PASSED
    else:
        data = Badge("not run", "none")

    eval_node, blessing = find_output(nodes, "ModelBlessing")
    if blessing is None:
        model = Badge("not evaluated", "none")
    else:
        baseline = blessing.get("baseline_model_id")
        notes = [
            f"against the baseline model (artifact {baseline})"
            if baseline is not None
            else "with no baseline (value thresholds only)"
        ]
        if eval_node is not None and eval_node.cached:
            notes.append("(cached evaluation of an earlier run)")
        if blessing.get("conveyor_confidence_gate"):  # evaluation.confidence overruled TFMA
            notes.append(f"({blessing.get('conveyor_confidence_gate')})")
        blessed = blessing.get("blessed") == 1
        model = Badge(
            "blessed" if blessed else "not blessed", "ok" if blessed else "bad", " ".join(notes)
        )

    push_node, pushed = find_output(nodes, "PushedModel")
    if pushed is None:
        push = Badge("did not run", "none")
    else:
        reason = pushed.get("conveyor_reason") or ""
        # The reason of a push repeats the badge ("pushed version 3 ..."): it is left out.
        notes = [reason] if reason and not reason.startswith("pushed version") else []
        if push_node is not None and push_node.cached:
            notes.append("(cached: the decision of an earlier run; nothing was pushed now)")
        if pushed.get("pushed") == 1:
            push = Badge(f"pushed version {pushed.get('pushed_version')}", "ok", " ".join(notes))
        else:
            push = Badge("not pushed", "warn", " ".join(notes))
    return GateDecisions(
        data, model, push, _infra_badge(nodes), _tflite_badge(nodes), _infra_server(nodes)
    )


def gate_decisions(
    result: RunResult, paths: RunPaths, nodes: dict[str, NodeArtifacts] | None = None
) -> GateDecisions:
    """The run's decisions (data gate, model, infra validation, push) as the report shows
    them, read from ML Metadata (or from `nodes`, the run's nodes already read): what
    `--log-format json` logs as `gate` and `push` events, and what a model card lists."""
    if nodes is None:
        store = open_store(paths.spec, paths.metadata_path)
        nodes = read_run_artifacts(store, result.run_id) if store is not None else {}
    return _gate_decisions(result, nodes)


def _infra_badge(nodes: dict[str, NodeArtifacts]) -> Badge | None:
    """The infra validator's verdict and its reason (components/infra_validator)."""
    node, infra = find_output(nodes, "InfraBlessing")
    if infra is None:
        return None
    notes = [infra.get("conveyor_reason") or ""]
    if node is not None and node.cached:
        notes.append("(cached validation of an earlier run)")
    if infra.get("blessed") == 1:
        return Badge("blessed", "ok", " ".join(notes).strip())
    return Badge("not blessed", "bad", " ".join(notes).strip())


def _infra_server(nodes: dict[str, NodeArtifacts]) -> str | None:
    """Which model server the infra validator checked the model with, as its InfraBlessing
    records it (components/infra_validator/blessing.py: SERVER_DESCRIPTION_PROPERTY, the kind
    when a blessing has no description); None when none was started."""
    _, infra = find_output(nodes, "InfraBlessing")
    if infra is None:
        return None
    return infra.get(INFRA_SERVER_DESCRIPTION_PROPERTY) or infra.get(INFRA_SERVER_PROPERTY)


def _markup(svg: str | None) -> markupsafe.Markup | None:
    """A chart's SVG as markup the templates put in as is: matplotlib escapes every text it
    writes into it (a column name, a value), and the SVG has no script."""
    return markupsafe.Markup(svg) if svg else None


def _components(result: RunResult, charts: ChartRenderer) -> Components | None:
    if not result.nodes:
        return None
    rows = [(n.node_id, n.state, f"{n.seconds:.1f}") for n in result.nodes]
    chart = charts.timings([(n.node_id, n.state, float(n.seconds)) for n in result.nodes])
    return Components(_table(("node", "state", "seconds"), rows, numeric={2}), _markup(chart))


def _feature_rows(dataset) -> list[tuple]:
    """One row per feature of a `DatasetFeatureStatistics`: presence, moments, top values."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    type_names = statistics_pb2.FeatureNameStatistics.Type
    total = dataset.num_examples
    rows = []
    for feature in sorted(dataset.features, key=lambda f: ".".join(f.path.step) or f.name):
        name = ".".join(feature.path.step) or feature.name
        kind = feature.WhichOneof("stats")
        stats = getattr(feature, kind) if kind else None
        common = stats.common_stats if stats is not None and kind != "struct_stats" else None
        if common is not None:
            # CSV columns: an empty cell is a feature with no values, not a missing feature.
            present = (
                common.tot_num_values if common.max_num_values <= 1 else common.num_non_missing
            )
            present = int(min(present, common.num_non_missing))
        else:
            present = total
        missing = total - present
        missing_pct = f"{100.0 * missing / total:.1f}%" if total else ""
        numeric = kind == "num_stats"
        strings = kind == "string_stats"
        top = ""
        if strings:
            top = ", ".join(
                f"{v.value} ({int(v.frequency)})" for v in stats.top_values[:TOP_VALUES]
            )
        rows.append(
            (
                name,
                type_names.Name(feature.type),
                _num(present),
                missing_pct,
                _num(stats.mean) if numeric else "",
                _num(stats.std_dev) if numeric else "",
                _num(stats.min) if numeric else "",
                _num(stats.max) if numeric else "",
                _num(int(stats.unique)) if strings else "",
                top,
            )
        )
    return rows


_STATISTICS_HEADERS = (
    "feature",
    "type",
    "with a value",
    "missing",
    "mean",
    "std",
    "min",
    "max",
    "unique",
    f"top {TOP_VALUES} values (count)",
)


def _statistics(nodes: dict[str, NodeArtifacts], charts: ChartRenderer) -> Statistics:
    node, artifact = find_output(nodes, "ExampleStatistics")
    if artifact is None:
        return Statistics(uri=None)
    section = Statistics(uri=artifact.uri, cached=node.cached)
    datasets = {}
    for split in artifacts.split_names(artifact):
        dataset = artifacts.read_statistics(artifact.uri, split)
        if dataset is None:
            section.splits.append(SplitStatistics(split))
            continue
        datasets[split] = dataset
        table = _table(_STATISTICS_HEADERS, _feature_rows(dataset), numeric=range(2, 9))
        section.splits.append(SplitStatistics(split, _num(int(dataset.num_examples)), table))
    reference = artifacts.drift_reference(nodes, list(datasets))
    if reference is not None:
        section.reference = reference[0]
    section.charts = _distribution_charts(datasets, reference, charts)
    return section


def _histogram(label: str, stats, reference: bool = False) -> Histogram | None:
    """TFDV's equal-width histogram of a numeric feature (its STANDARD one), or None."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    standard = statistics_pb2.Histogram.HistogramType.STANDARD
    for histogram in stats.histograms:
        if histogram.type == standard and histogram.buckets:
            buckets = histogram.buckets
            edges = [b.low_value for b in buckets] + [buckets[-1].high_value]
            return Histogram(label, edges, [b.sample_count for b in buckets], reference)
    return None


def _frequencies(label: str, stats, reference: bool = False) -> Frequencies:
    """A string feature's top values as shares of its values (TFDV counts each value)."""
    total = stats.common_stats.tot_num_values or sum(v.frequency for v in stats.top_values)
    shares = {v.value: v.frequency / total for v in stats.top_values[:TOP_VALUES_CHARTED] if total}
    return Frequencies(label, shares, reference)


def _distribution_charts(datasets: dict, reference, charts: ChartRenderer) -> list[FeatureChart]:
    """One chart per feature: a numeric feature's histograms, a string feature's top values,
    each split overlaid with the drift reference; a feature without one draws nothing."""
    by_split = {split: artifacts.feature_stats(dataset) for split, dataset in datasets.items()}
    reference_stats = artifacts.feature_stats(reference[1]) if reference is not None else {}
    features = sorted({name for stats in by_split.values() for name in stats})
    drawn = []
    for feature in features:
        found = [(split, stats[feature]) for split, stats in by_split.items() if feature in stats]
        if feature in reference_stats:
            found.append((REFERENCE_LABEL, reference_stats[feature]))
        numeric = [(label, s) for label, s in found if hasattr(s, "histograms")]
        if numeric:
            series = [_histogram(label, s, label == REFERENCE_LABEL) for label, s in numeric]
            svg = charts.distribution(feature, [s for s in series if s is not None])
        else:
            series = [_frequencies(label, s, label == REFERENCE_LABEL) for label, s in found]
            svg = charts.top_values(feature, series, TOP_VALUES_CHARTED)
        if svg:
            drawn.append(FeatureChart(feature, markupsafe.Markup(svg)))
    return drawn


_GATE_TITLES = {"anomalies": "Anomalies", "drift": "Drift", "skew": "Training/serving skew"}
_GATE_COLUMNS = {
    "anomalies": ("column", "split", "description"),
    "drift": ("column", "measure", "distance", "threshold", "breached", "against"),
    "skew": ("column", "measure", "distance", "threshold", "breached", "against"),
}


def _gate_table(kind: str, entries: list[dict] | None) -> GateTable:
    """One kind of the data gate's findings; `entries` None: the gate did not check it."""
    title = _GATE_TITLES[kind]
    if not entries:
        word = "none" if kind == "anomalies" and entries is not None else "not checked"
        return GateTable(title, None, word)
    columns = list(_GATE_COLUMNS[kind])
    columns += sorted({k for entry in entries for k in entry} - set(columns))
    rows = []
    for entry in entries:
        row = []
        for column in columns:
            value = entry.get(column)
            if column == "breached":
                value = Badge("breached", "bad") if value else Badge("ok", "ok")
            elif isinstance(value, float):
                value = _num(value)
            row.append(value)
        rows.append(row)
    numeric = [i for i, c in enumerate(columns) if c in ("distance", "threshold")]
    return GateTable(title, _table(columns, rows, numeric=numeric))


def validator_anomalies(nodes: dict[str, NodeArtifacts]) -> GateTable | None:
    """ExampleValidator's own findings, for a run whose runner did not report the gate; None
    when ExampleValidator did not run."""
    rows = artifacts.validator_anomaly_rows(nodes)
    if rows is None:
        return None
    table = _table(("column", "split", "anomaly", "description"), rows) if rows else None
    return GateTable("ExampleValidator anomalies", table)


def _data_gate(result: RunResult, nodes: dict[str, NodeArtifacts]) -> DataGate:
    gate = result.data_gate
    if not gate:
        return DataGate(
            verdict=None,
            validator=validator_anomalies(nodes),
            tables=[_gate_table("drift", None), _gate_table("skew", None)],
        )
    return DataGate(
        verdict=_PASSED if gate.get("passed") else _BLOCKED,
        tables=[_gate_table(kind, gate.get(kind)) for kind in ("anomalies", "drift", "skew")],
    )


def _threshold_text(spec, metric_name: str) -> tuple[str, str]:
    """(class name, the spec's thresholds as text) for a TFMA metric name."""
    for metric in spec.evaluation.metrics:
        if artifacts.keras_metric_name(metric.name) == metric_name or metric.name == metric_name:
            bounds = []
            if metric.lower_bound is not None:
                bounds.append(f">= {metric.lower_bound}")
            if metric.upper_bound is not None:
                bounds.append(f"<= {metric.upper_bound}")
            if metric.change is not None:
                change = metric.change
                limits = [
                    f"{label} {value:+g}"
                    for label, value in (
                        ("absolute", change.absolute),
                        ("relative", change.relative),
                    )
                    if value is not None
                ]
                bounds.append(f"change ({change.direction.value}) " + ", ".join(limits))
            return metric.name, "; ".join(bounds)
    return metric_name, ""


def _declared_metric(spec, metric_name: str):
    """The spec's `evaluation.metrics` entry of a TFMA metric name (`name [output]` too), or
    None for a metric the spec does not name (example_count, say)."""
    base = metric_name.split(" [", 1)[0]
    for metric in spec.evaluation.metrics:
        if base in (artifacts.keras_metric_name(metric.name), metric.name):
            return metric
    return None


def _failure_text(failure) -> str:
    """A failed TFMA threshold in words, e.g. `0.5283 < lower bound 0.8`."""
    value = failure.metric_value.double_value.value
    threshold = failure.metric_threshold
    texts = []
    if threshold.HasField("value_threshold"):
        bounds = threshold.value_threshold
        if bounds.HasField("lower_bound") and value < bounds.lower_bound.value:
            texts.append(f"{_num(value, 4)} < lower bound {bounds.lower_bound.value:g}")
        if bounds.HasField("upper_bound") and value > bounds.upper_bound.value:
            texts.append(f"{_num(value, 4)} > upper bound {bounds.upper_bound.value:g}")
    if threshold.HasField("change_threshold"):
        change = threshold.change_threshold
        limits = [
            f"{label} {getattr(change, label).value:+g}"
            for label in ("absolute", "relative")
            if change.HasField(label)
        ]
        texts.append(f"change {value:+.4g} beyond the allowed " + ", ".join(limits))
    return "; ".join(texts) or failure.message or "threshold not met"


_NO_EVALUATION = {
    Outcome.BLOCKED: "the run was blocked at the data gate, before training",
    Outcome.FAILED: "the run failed before the Evaluator finished",
}


def _evaluation_notes(node: NodeArtifacts | None) -> list[str]:
    """Which models were compared, and whether the evaluation is an earlier run's."""
    candidate: ArtifactRecord | None = node.input("model") if node is not None else None
    baseline: ArtifactRecord | None = node.input("baseline_model") if node is not None else None
    notes = [f"candidate model: artifact {candidate.id}"] if candidate is not None else []
    notes.append(
        f"baseline (the served model): artifact {baseline.id}"
        if baseline is not None
        else "no baseline: nothing was served yet, only value thresholds apply"
    )
    if node is not None and node.cached:
        notes.append("cached: the evaluation of an earlier run of the same model and data")
    return notes


def _evaluation(
    nodes: dict[str, NodeArtifacts], result: RunResult, spec, charts: ChartRenderer
) -> Evaluation:
    node, artifact = find_output(nodes, "ModelEvaluation")
    if artifact is None:
        why = _NO_EVALUATION.get(
            Outcome(result.outcome), "the pipeline has no Evaluator or it did not run"
        )
        return Evaluation(missing=why)
    section = Evaluation(notes=_evaluation_notes(node), uri=artifact.uri)
    try:
        per_slice, validation = artifacts.load_evaluation(artifact.uri)
    except Exception as err:  # a report must not fail on a damaged or foreign evaluation
        section.read_error = str(err)
        return section

    failures: dict[tuple[str, str, str], str] = {}
    if validation is not None:
        for per in validation.metric_validations_per_slice:
            for failure in per.failures:
                key = failure.metric_key
                failures[(artifacts.slice_name(per.slice_key), key.name, str(key.is_diff))] = (
                    _failure_text(failure)
                )
        section.verdict = (
            Badge("thresholds met", "ok")
            if validation.validation_ok
            else Badge("thresholds not met", "bad")
        )
        section.missing_thresholds = bool(validation.missing_thresholds)
        section.missing_slices = [str(missing) for missing in validation.missing_slices]
        section.rubber_stamp = bool(validation.rubber_stamp)

    def sort_key(entry):
        name = artifacts.slice_name(entry.slice_key)
        return (name != "all examples", name)

    rows = []
    by_metric: dict[str, list[tuple[str, float | None, float | None]]] = {}
    for metrics in sorted(per_slice, key=sort_key):
        values: dict[str, dict[str, float]] = {}
        for item in metrics.metric_keys_and_values:
            if not item.value.HasField("double_value"):
                continue  # matrices and plots are not table cells
            key = item.key
            role = "diff" if key.is_diff else (key.model_name or "candidate")
            label = key.name + (f" [{key.output_name}]" if key.output_name else "")
            values.setdefault(label, {})[role] = item.value.double_value.value
        shown = artifacts.slice_name(metrics.slice_key)
        for name in sorted(values):
            got = values[name]
            by_metric.setdefault(name, []).append(
                (shown, got.get("candidate"), got.get("baseline"))
            )
            class_name, threshold = _threshold_text(spec, name)
            failed = [m for (s, n, _), m in failures.items() if s == shown and n == name]
            if failed:
                status = Badge("failed", "bad", "; ".join(failed))
            elif threshold and shown == "all examples" and validation is not None:
                status = Badge("passed", "ok")
            else:
                status = ""
            rows.append(
                (
                    shown,
                    class_name if class_name == name else f"{class_name} ({name})",
                    _num(got.get("candidate"), 4),
                    _num(got.get("baseline"), 4),
                    "" if "diff" not in got else f"{got['diff']:+.4g}",
                    threshold if shown == "all examples" else "",
                    status,
                )
            )
    headers = ("slice", "metric", "candidate", "baseline", "difference", "threshold", "result")
    if rows:
        section.table = _table(headers, rows, numeric={2, 3, 4})
    for name, slices in by_metric.items():  # the metrics the spec names, thresholds drawn
        declared = _declared_metric(spec, name)
        if declared is not None:
            svg = charts.slice_metric(
                f"{declared.name} by slice", slices, declared.lower_bound, declared.upper_bound
            )
            if svg:
                section.charts.append(markupsafe.Markup(svg))
    return section


def _training(nodes: dict[str, NodeArtifacts], charts: ChartRenderer) -> Training:
    """The Trainer's ModelRun folder read back (pipelines.finish.training_summary): Conveyor's
    trainer writes its summary there with Keras' TensorBoard callback; a run_fn module writes
    there what it chooses to."""
    from pipelines.finish.training_summary import read_training_log

    node, model_run = find_output(nodes, "ModelRun")
    if model_run is None:
        return Training(log_dir=None)
    uri = model_run.uri
    local = "://" not in uri
    found = read_training_log(uri) if local else None
    section = Training(
        log_dir=uri,
        link=as_path(uri).absolute().as_uri() if local else "",
        command=f"tensorboard --logdir {shlex.quote(uri)}",
        cached=node is not None and node.cached,
    )
    if found is None:
        return section
    asked = found.summary.get("profile_steps")
    section.profile_steps = (int(asked[0]), int(asked[1])) if asked else None
    section.traces = [str(path) for path in found.traces]
    train = found.train_loss()
    section.points = len(train)
    profiled = section.profile_steps if section.traces else None
    section.chart = _markup(charts.loss_curve(train, found.validation_loss(), profiled))
    return section


def _push(nodes: dict[str, NodeArtifacts]) -> Push | None:
    node, pushed = find_output(nodes, "PushedModel")
    if pushed is None:
        return None  # the Pusher did not run
    return Push(
        pushed=pushed.get("pushed") == 1,
        version=pushed.get("pushed_version"),
        destination=pushed.get("pushed_destination"),
        reason=pushed.get("conveyor_reason"),
        pusher_state=node.state if node is not None else None,
    )


@dataclass
class Tuning:
    """What the run did about hyperparameters: the trials when it tuned (best first, the best
    and the spec's own setting marked), else which tuned artifact the Trainer reused."""

    tuned: bool
    note: str
    table: Table | None = None


def _spec_setting(spec, names) -> dict[str, Any]:
    """The spec's own value of each searched hyperparameter, as the trials record it."""
    from pipelines.spec.models import encode_layers

    values = {}
    for name in names:
        value = getattr(spec.trainer, name, None)
        if name == "hidden_units":
            values[name] = encode_layers(value)
        elif value is not None:
            values[name] = float(value)
    return values


def _same_setting(trial: dict[str, Any], setting: dict[str, Any]) -> bool:
    for name, value in setting.items():
        found = trial.get(name)
        if isinstance(value, float):
            if not isinstance(found, int | float) or abs(found - value) > 1e-12:
                return False
        elif found != value:
            return False
    return True


def _tuning(nodes: dict[str, NodeArtifacts], spec) -> Tuning | None:
    from pipelines.finish.artifacts import read_hyperparameters, read_tuner_trials

    if spec.tuning is None:
        return None
    node, results = find_output(nodes, "TunerResults")
    if results is not None:
        trials = read_tuner_trials(results.uri)
        names = sorted({k for t in trials for k in t} - {"trial_id", "score"})
        setting = _spec_setting(spec, names)
        rows = []
        for index, trial in enumerate(trials):
            marks = (["best"] if index == 0 else []) + (
                ["the spec's setting"] if _same_setting(trial, setting) else []
            )
            rows.append(
                [trial.get("trial_id"), *(trial.get(n) for n in names)]
                + [_num(trial.get("score")), ", ".join(marks)]
            )
        objective = f"{spec.tuning.objective} ({spec.tuning.objective_direction.value})"
        cached = " (a cached search of an earlier run)" if node is not None and node.cached else ""
        return Tuning(
            tuned=True,
            note=f"{len(trials)} trials scored by {objective}{cached}; the Trainer trained with "
            f"the best, HyperParameters artifact {_tuned_id(nodes)}.",
            table=_table(("trial", *names, "score", ""), rows, numeric={len(names) + 1}),
        )
    trainer = next((n for n in nodes.values() if n.input("hyperparameters")), None)
    if trainer is None:
        return Tuning(
            tuned=False,
            note="This run did not tune, and no earlier run had: the Trainer trained with the "
            "spec's values.",
        )
    reused = trainer.input("hyperparameters")
    values = read_hyperparameters(reused.uri)
    shown = ", ".join(f"{k} {v}" for k, v in sorted(values.items()))
    return Tuning(
        tuned=False,
        note=f"This run did not tune (tuning.retune: {spec.tuning.retune.value}): the Trainer "
        f"reused the last tuned hyperparameters, artifact {reused.id} ({shown}).",
    )


def _tuned_id(nodes: dict[str, NodeArtifacts]) -> str:
    _, best = find_output(nodes, HYPERPARAMETERS_TYPE)
    return str(best.id) if best is not None else "-"


@dataclass
class TfLite:
    """The TF Lite converter's verdict and figures (components/tflite/artifact.py), and what
    the Pusher did with its model."""

    verdict: Badge
    table: Table
    in_push: str


def _tflite_badge(nodes: dict[str, NodeArtifacts]) -> Badge | None:
    """The TF Lite converter's verdict and its reason, or None when it did not run."""
    node, converted = find_output(nodes, "TFLiteModel")
    if converted is None:
        return None
    note = converted.get("conveyor_reason") or ""
    if node is not None and node.cached:
        note += " (cached conversion of an earlier run)"
    if converted.get("passed") == 1:
        return Badge("passed", "ok", note.strip())
    if note.startswith("not converted"):  # a model not blessed: nothing was tried
        return Badge("not converted", "none", note.strip())
    return Badge("not passed", "warn", note.strip())


def _tflite(nodes: dict[str, NodeArtifacts]) -> TfLite | None:
    verdict = _tflite_badge(nodes)
    if verdict is None:
        return None
    _, converted = find_output(nodes, "TFLiteModel")
    _, pushed = find_output(nodes, "PushedModel")
    # The difference and the tolerance are recorded as text (a double keeps six decimals only).
    worst = str(converted.get("max_abs_difference") or "")
    if converted.get("worst_output"):
        worst += f" ({converted.get('worst_output')})"
    metric = converted.get("metric")
    rows = [
        ("quantization", converted.get("quantization")),
        ("model.tflite (bytes)", _num(converted.get("size_bytes"))),
        ("SavedModel (bytes)", _num(converted.get("savedmodel_size_bytes"))),
        ("evaluation rows compared", _num(converted.get("parity_rows"))),
        ("largest absolute difference", worst),
        ("tolerance", converted.get("tolerance")),
        ("class agreement", _num(converted.get("agreement"))),
    ]
    if metric:
        rows += [
            (f"{metric}: SavedModel", _num(converted.get("metric_savedmodel"))),
            (f"{metric}: TF Lite", _num(converted.get("metric_tflite"))),
            (f"{metric}: TF Lite minus SavedModel", _num(converted.get("metric_delta"))),
        ]
    in_push = (pushed.get("conveyor_tflite") if pushed is not None else None) or (
        "the Pusher did not run" if pushed is None else "not pushed"
    )
    return TfLite(verdict, _table(("", ""), rows), in_push)


def _section(name: str, prepare) -> Section:
    try:
        return Section(name, prepare())
    except Exception as err:  # one unreadable artifact must not cost the whole report
        return Section(name, error=str(err))


def report_page(result: RunResult, paths: RunPaths, nodes: dict[str, NodeArtifacts]) -> ReportPage:
    """The report's data for a run, from its `RunResult` and its nodes in ML Metadata
    (`pipelines.core.metadata.read_run_artifacts`); what the templates draw."""
    charts = ChartRenderer("chart")
    sections = [
        _section("gate_decisions", lambda: _gate_decisions(result, nodes)),
        _section("components", lambda: _components(result, charts)),
        _section("statistics", lambda: _statistics(nodes, charts)),
        _section("data_gate", lambda: _data_gate(result, nodes)),
        _section("tuning", lambda: _tuning(nodes, paths.spec)),
        _section("training", lambda: _training(nodes, charts)),
        _section("evaluation", lambda: _evaluation(nodes, result, paths.spec, charts)),
        _section("push", lambda: _push(nodes)),
        _section("tflite", lambda: _tflite(nodes)),
    ]
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return ReportPage(
        title=f"{result.pipeline} {result.run_id}: {Outcome(result.outcome).value}",
        summary=_summary(result, paths),
        recorded=bool(nodes),
        sections=sections,
        generated=generated,
    )


@functools.lru_cache(maxsize=1)
def templates() -> jinja2.Environment:
    """The report's jinja2 environment: its templates, autoescaped, undefined names an error."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=jinja2.select_autoescape(
            enabled_extensions=("html", "html.j2"), default_for_string=True, default=True
        ),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.tests["badge"] = lambda value: isinstance(value, Badge)
    return environment


def render_report(result: RunResult, paths: RunPaths, nodes: dict[str, NodeArtifacts]) -> str:
    """The report's HTML for a run, from its `RunResult` and its nodes in ML Metadata."""
    return templates().get_template(TEMPLATE).render(page=report_page(result, paths, nodes))


def write_report(
    result: RunResult, paths: RunPaths, nodes: dict[str, NodeArtifacts] | None = None
) -> Path:
    """Writes `<result.run_dir>/report.html` for a finished run and returns its path.

    Args:
      result: the run's `RunResult` (with `run_dir` set).
      paths: the run's `RunPaths` (its metadata store, serving directory and spec).
      nodes: the run's nodes; None reads them from ML Metadata ({}: a run whose store Conveyor
        cannot read, whose page carries what its result says).
    """
    if not result.run_dir:  # never the current directory: a run without a folder has no page
        raise ValueError(f"run {result.run_id} has no run folder to write its report into")
    if nodes is None:
        store = open_store(paths.spec, paths.metadata_path)
        nodes = read_run_artifacts(store, result.run_id) if store is not None else {}
    target = as_path(result.run_dir) / REPORT_FILE
    # Whole or not at all: a temporary file renamed over it, or an object replaced whole.
    storage.write_text(str(target), render_report(result, paths, nodes))
    return target


def find_report(workdir: Path, run_id: str) -> Path | None:
    """`<workdir>/runs/<pipeline>/<run_id>/report.html`, whichever pipeline ran it."""
    for run_dir in find_run_dirs(workdir, run_id):
        report = run_dir / REPORT_FILE
        if report.is_file():
            return report
    return None


def recent_run_ids(workdir: Path, limit: int = 5) -> list[str]:
    """The newest run ids with a directory under `<workdir>/runs/`, newest first."""
    return [p.name for p in recent_run_dirs(workdir, limit)]
