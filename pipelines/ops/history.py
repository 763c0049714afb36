"""The pipeline's history page: its last N runs on one self-contained page.

`conveyor report NAME --history [--nights N]` writes `<workdir>/runs/NAME/history.html`: each
run's outcome on a timeline, the evaluation metrics of each pushed version over time, the data
gate's drift distance per column with its threshold, the rows per run and how long each took,
then a table linking each run's own report (`<run id>/report.html`, relative, so the folder can
be copied or served as it is).

Everything comes from ML Metadata (`pipelines.core.metadata.run_history`, a few batched queries) and
the small files the runs wrote beside it (each run's `summary.json`, the data gate's
`findings.json`, StatisticsGen's statistics for the row counts): no TensorFlow, no TFMA. A run
ML Metadata holds but whose folder is gone still gets its row, its outcome then read from ML
Metadata alone.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path

import markupsafe

from pipelines.builder import spans
from pipelines.core import storage
from pipelines.core.artifact_files import DATA_GATE_TYPE, GATE_FINDINGS_FILE
from pipelines.core.metadata import RunHistory, open_store, run_history
from pipelines.core.object_path import as_path
from pipelines.core.outcome import Outcome
from pipelines.core.paths import REPORT_FILE, RUN_SUMMARY, RunPaths
from pipelines.finish.artifacts import keras_metric_name
from pipelines.finish.charts import ChartRenderer
from pipelines.finish.report import Badge, templates

HISTORY_FILE = "history.html"
TEMPLATE = "history.html.j2"
DEFAULT_NIGHTS = 30
MOST_METRICS = 6  # drawn when the spec names none of the recorded metrics


@dataclass
class HistoryRow:
    """One run as the page's table shows it (`report` is a relative link, None without one)."""

    run_id: str
    when: str  # the night it processed, else when it started (UTC)
    outcome: Badge
    pushed_version: str | None
    rows: int | None
    seconds: float | None
    breached: str  # the columns whose drift or skew broke their threshold
    message: str
    report: str | None


@dataclass
class HistoryPage:
    """Everything `templates/history.html.j2` draws."""

    title: str
    pipeline: str
    metadata: str
    generated: str
    runs: list[HistoryRow] = field(default_factory=list)  # newest first
    charts: list[markupsafe.Markup] = field(default_factory=list)


@dataclass
class _Run:
    """One run's MLMD record and what its folder adds."""

    record: RunHistory
    summary: dict
    findings: dict | None
    outcome: Outcome | None  # None: still running
    when: str
    rows: int | None
    seconds: float | None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _outcome(record: RunHistory, summary: dict, gate_nodes: set[str]) -> Outcome | None:
    """The run's outcome: its summary's, else what ML Metadata says it did."""
    if summary.get("outcome"):
        return Outcome(summary["outcome"])
    if record.pushed_version:
        return Outcome.PUSHED
    if gate_nodes & set(record.failed_nodes):
        return Outcome.BLOCKED
    if record.failed_nodes:
        return Outcome.FAILED
    return None if record.state == "running" else Outcome.NOT_PUSHED


def _when(record: RunHistory, summary: dict, dated: bool) -> str:
    night = summary.get("night")
    if night:
        return str(night)
    if record.span is not None and dated:
        return spans.date_of_span(record.span).isoformat()
    started = datetime.datetime.fromtimestamp(record.started_ms / 1000, tz=datetime.timezone.utc)
    return started.strftime("%Y-%m-%d %H:%M")


class _RowCounter:
    """Rows of a statistics artifact (all its splits), each artifact read once: an unchanged
    night reuses the earlier run's statistics."""

    def __init__(self):
        self._known: dict[str, int | None] = {}

    def rows(self, uri: str | None) -> int | None:
        if not uri:
            return None
        if uri not in self._known:
            self._known[uri] = self._count(as_path(uri))
        return self._known[uri]

    @staticmethod
    def _count(uri: Path) -> int | None:
        from tensorflow_metadata.proto.v0 import statistics_pb2

        total, found = 0, False
        for path in sorted(uri.glob("Split-*/FeatureStats.pb")):
            stats = statistics_pb2.DatasetFeatureStatisticsList()
            try:
                stats.ParseFromString(path.read_bytes())
            except Exception:  # a damaged file: no count for that run, never a failed page
                continue
            total += sum(int(d.num_examples) for d in stats.datasets)
            found = True
        return total if found else None


def _gather(paths: RunPaths, records: list[RunHistory]) -> list[_Run]:
    spec = paths.spec
    gate_nodes = {c.id for c in spec.components if c.type == DATA_GATE_TYPE}
    counter = _RowCounter()
    runs = []
    for record in records:
        summary = _read_json(paths.run_dir(record.run_id) / RUN_SUMMARY) or {}
        findings = None
        if record.gate_findings_uri:
            findings = _read_json(as_path(record.gate_findings_uri) / GATE_FINDINGS_FILE)
        findings = findings or summary.get("data_gate") or None
        seconds = summary.get("pipeline_seconds")
        if seconds is None and record.nodes:
            seconds = round(sum(n.seconds for n in record.nodes), 1)
        runs.append(
            _Run(
                record=record,
                summary=summary,
                findings=findings,
                outcome=_outcome(record, summary, gate_nodes),
                when=_when(record, summary, bool(spec.data.dated_spans)),
                rows=counter.rows(record.statistics_uri),
                seconds=seconds,
            )
        )
    return runs


def _breached(findings: dict | None) -> str:
    if not findings:
        return ""
    columns = [
        f"{row.get('column')} ({kind})"
        for kind in ("drift", "skew")
        for row in findings.get(kind) or []
        if row.get("breached")
    ]
    return ", ".join(columns)


def _badge(outcome: Outcome | None) -> Badge:
    if outcome is None:
        return Badge("RUNNING", "none")
    kind = "bad" if outcome.alerts else "ok" if outcome is Outcome.PUSHED else "warn"
    return Badge(outcome.label, kind)


def _metric_charts(paths: RunPaths, runs: list[_Run], charts: ChartRenderer) -> str | None:
    """The evaluation metrics of each pushed version over time, with the spec's bounds."""
    pushed = [r for r in runs if r.record.pushed_version and r.record.metrics]
    if not pushed:
        return None
    names = sorted({name for r in pushed for name in r.record.metrics})
    declared = {}
    for metric in paths.spec.evaluation.metrics:
        for name in names:
            if name in (
                metric.name,
                keras_metric_name(metric.name),
                f"val_{keras_metric_name(metric.name)}",
            ):
                declared[name] = metric
    # One axis for all: the metrics the spec names (counts would flatten the rates).
    if declared:
        names = sorted(declared)
    else:
        names = [n for n in names if "count" not in n][:MOST_METRICS]
    labels = [f"v{r.record.pushed_version} {r.when}" for r in pushed]
    series = {name: [r.record.metrics.get(name) for r in pushed] for name in names}
    bounds = {
        name: metric.lower_bound
        for name, metric in declared.items()
        if name in series and metric.lower_bound is not None
    }
    return charts.over_time(
        "Evaluation metrics of each pushed version (dashed: lower bounds)", labels, series, bounds
    )


def _drift_chart(runs: list[_Run], charts: ChartRenderer) -> str | None:
    """The data gate's drift distance per column over the runs, thresholds dashed."""
    series: dict[str, list[float | None]] = {}
    thresholds: dict[str, float] = {}
    for index, run in enumerate(runs):
        for row in (run.findings or {}).get("drift") or []:
            column = str(row.get("column"))
            values = series.setdefault(column, [None] * len(runs))
            if isinstance(row.get("distance"), (int, float)):
                values[index] = float(row["distance"])
            if isinstance(row.get("threshold"), (int, float)):
                thresholds[column] = float(row["threshold"])
    labels = [r.when for r in runs]
    return charts.over_time(
        "Drift distance per column (dashed: thresholds)", labels, series, thresholds
    )


def history_page(paths: RunPaths, records: list[RunHistory]) -> HistoryPage:
    """The history page's data for the runs `records` (oldest first), as
    `pipelines.core.metadata.run_history` reads them."""
    runs = _gather(paths, records)
    charts = ChartRenderer("history")
    labels = [r.when for r in runs]
    drawn = [
        charts.outcomes(labels, [r.outcome.value if r.outcome else "running" for r in runs]),
        _metric_charts(paths, runs, charts),
        _drift_chart(runs, charts),
        charts.bars_over_time("Rows per run (all splits)", labels, [r.rows for r in runs], "rows"),
        charts.bars_over_time(
            "Seconds per run (the whole pipeline)", labels, [r.seconds for r in runs], "seconds"
        ),
    ]
    rows = []
    for run in reversed(runs):
        record = run.record
        has_report = (paths.run_dir(record.run_id) / REPORT_FILE).is_file()
        rows.append(
            HistoryRow(
                run_id=record.run_id,
                when=run.when,
                outcome=_badge(run.outcome),
                pushed_version=record.pushed_version,
                rows=run.rows,
                seconds=run.seconds,
                breached=_breached(run.findings),
                message=str(run.summary.get("message") or ""),
                report=f"{record.run_id}/{REPORT_FILE}" if has_report else None,
            )
        )
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return HistoryPage(
        title=f"{paths.spec.name}: the last {len(runs)} runs",
        pipeline=paths.spec.name,
        metadata=str(paths.metadata_path),
        generated=generated,
        runs=rows,
        charts=[markupsafe.Markup(svg) for svg in drawn if svg],
    )


def render_history(paths: RunPaths, nights: int = DEFAULT_NIGHTS) -> str:
    """The history page's HTML for the pipeline's last `nights` runs in ML Metadata."""
    store = open_store(paths.spec, paths.metadata_path)
    records = run_history(store, paths.spec.name, nights) if store is not None else []
    return templates().get_template(TEMPLATE).render(page=history_page(paths, records))


def write_history(paths: RunPaths, nights: int = DEFAULT_NIGHTS) -> Path:
    """Writes `<workdir>/runs/<pipeline>/history.html` (atomically) and returns its path."""
    paths.runs_dir.mkdir(parents=True, exist_ok=True)
    target = paths.runs_dir / HISTORY_FILE
    # Whole or not at all: a temporary file renamed over it, or an object replaced whole.
    storage.write_text(str(target), render_history(paths, nights))
    return target
