"""The run report: one self-contained HTML file per run, readable without a notebook.

`write_report` reads what the run produced back from ML Metadata (the `pipeline_run` context's
executions and their input and output artifacts; a cached execution's outputs are linked too)
and writes `<run dir>/report.html`: the verdict and the gate decisions, the data statistics of
every split, the data gate's anomalies, drift and skew, the evaluation of every slice for the
candidate against the baseline with the thresholds that failed, and the push. A run that stopped
early shows what exists and says what does not. Inline CSS, no scripts, no external URLs.

TensorFlow Model Analysis is imported only when the run has an evaluation to read; statistics and
anomalies are read with the tensorflow_metadata protos alone.
"""

from __future__ import annotations

import datetime
import html
import logging
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.paths import REPORT_FILE, RunPaths, find_run_dirs, recent_run_dirs

TOP_VALUES = 5

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d232b;
       margin: 2em auto; max-width: 1100px; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 2em;
     border-bottom: 1px solid #d6dbe1; padding-bottom: .2em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { border: 1px solid #d6dbe1; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f1f3f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: .1em .6em; border-radius: .8em; font-weight: 600; }
.ok { background: #dcf5e3; color: #145c2c; } .bad { background: #fde0e0; color: #8a1c1c; }
.warn { background: #fff1cc; color: #6b4e00; } .none { background: #eceff3; color: #4a5563; }
.note { color: #4a5563; } code { background: #f1f3f6; padding: 0 .25em; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: float | int | None, digits: int = 6) -> str:
    if value is None:
        return ""
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _badge(text: str, kind: str) -> str:
    return f'<span class="badge {kind}">{_e(text)}</span>'


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: set[int] = frozenset()):
    """An HTML table; cells are escaped unless given as `_Raw`."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = cell.html if isinstance(cell, _Raw) else _e(cell)
            cells.append(f'<td class="num">{text}</td>' if i in numeric else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


@dataclass(frozen=True)
class _Raw:
    html: str


# --- reading the run from ML Metadata -----------------------------------------------------------


@dataclass
class NodeArtifacts:
    """One node's latest execution in the run, with its artifacts by input / output key."""

    node_id: str
    state: str
    inputs: dict[str, list[Any]] = field(default_factory=dict)
    outputs: dict[str, list[Any]] = field(default_factory=dict)

    def output(self, key: str):
        found = self.outputs.get(key) or []
        return found[0] if found else None

    def input(self, key: str):
        found = self.inputs.get(key) or []
        return found[0] if found else None


def read_run(store, run_id: str) -> dict[str, NodeArtifacts]:
    """Node id -> its execution's artifacts in the run `run_id` ({} when it is not recorded)."""
    from ml_metadata.proto import metadata_store_pb2

    from pipelines.metadata import NODE_CONTEXT_TYPE, RUN_CONTEXT_TYPE, STATE_NAMES, node_id_of

    context = store.get_context_by_type_and_name(RUN_CONTEXT_TYPE, run_id)
    if context is None:
        return {}
    node_type = store.get_context_type(NODE_CONTEXT_TYPE)
    event = metadata_store_pb2.Event
    input_types = {event.INPUT, event.DECLARED_INPUT}
    output_types = {event.OUTPUT, event.DECLARED_OUTPUT}
    nodes: dict[str, NodeArtifacts] = {}
    for execution in sorted(store.get_executions_by_context(context.id), key=lambda e: e.id):
        node_id = node_id_of(store, execution, node_type.id if node_type else None)
        node = NodeArtifacts(node_id, STATE_NAMES.get(execution.last_known_state, "unknown"))
        events = store.get_events_by_execution_ids([execution.id])
        artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
        for ev in events:
            target = (
                node.inputs
                if ev.type in input_types
                else node.outputs
                if ev.type in output_types
                else None
            )
            key = next((s.key for s in ev.path.steps if s.HasField("key")), "")
            if target is not None and ev.artifact_id in artifacts:
                target.setdefault(key, []).append(artifacts[ev.artifact_id])
        nodes[node_id] = node  # a retried node: its latest execution wins
    return nodes


def _custom(artifact, key: str):
    from pipelines.metadata import custom_property

    return custom_property(artifact, key)


def _find_output(nodes: dict[str, NodeArtifacts], type_name: str):
    """(node, artifact) of the first node with an output of this MLMD type."""
    for node in nodes.values():
        for artifacts in node.outputs.values():
            for artifact in artifacts:
                if artifact.type == type_name:
                    return node, artifact
    return None, None


def _splits(artifact) -> list[str]:
    import json

    names = _custom(artifact, "split_names")
    if not names and "split_names" in artifact.properties:
        names = artifact.properties["split_names"].string_value
    try:
        return list(json.loads(names)) if names else []
    except ValueError:
        return []


# --- sections ------------------------------------------------------------------------------------


def _outcome_badge(outcome: str) -> str:
    kind = {"pushed": "ok", "not_pushed": "warn", "blocked": "bad", "failed": "bad"}
    return _badge(outcome.upper().replace("_", " "), kind.get(outcome, "none"))


def _summary(result, paths: RunPaths) -> str:
    rows = [
        ("pipeline", result.pipeline),
        ("run id", result.run_id),
        ("night", result.night or "-"),
        ("span", "-" if result.span is None else result.span),
        (
            "pushed version",
            f"{result.pushed_version} ({result.pushed_path})" if result.pushed_version else "none",
        ),
        ("serving directory", paths.serving_dir),
        ("run directory", result.run_dir),
        ("metadata", paths.metadata_path),
    ]
    return (
        f"<h1>{_e(result.pipeline)}: run {_e(result.run_id)}</h1>"
        f"<p>{_outcome_badge(result.outcome)} {_e(result.message)}</p>" + _table(("", ""), rows)
    )


def _gate_decisions(result, nodes: dict[str, NodeArtifacts]) -> str:
    gate = result.data_gate
    data_node = nodes.get("data_gate")
    if gate:
        data = _badge("passed", "ok") if gate.get("passed") else _badge("blocked", "bad")
    elif data_node is not None:
        blocked = data_node.state == "failed" or result.outcome == "blocked"
        data = _badge("blocked", "bad") if blocked else _badge("passed", "ok")
    else:
        data = _badge("not run", "none")

    eval_node, blessing = _find_output(nodes, "ModelBlessing")
    if blessing is None:
        model = _badge("not evaluated", "none")
    else:
        blessed = _custom(blessing, "blessed") == 1
        model = _badge("blessed", "ok") if blessed else _badge("not blessed", "bad")
        baseline = _custom(blessing, "baseline_model_id")
        model += (
            f" against the baseline model (artifact {baseline})"
            if baseline is not None
            else " with no baseline (value thresholds only)"
        )
        if eval_node is not None and eval_node.state == "cached":
            model += " (cached evaluation of an earlier run)"

    push_node, pushed = _find_output(nodes, "PushedModel")
    if pushed is None:
        push = _badge("did not run", "none")
    else:
        reason = _custom(pushed, "conveyor_reason") or ""
        if _custom(pushed, "pushed") == 1:
            push = _badge(f"pushed version {_custom(pushed, 'pushed_version')}", "ok")
        else:
            push = _badge("not pushed", "warn")
        if reason and not reason.startswith("pushed version"):
            push += f" {_e(reason)}"
        if push_node is not None and push_node.state == "cached":
            push += " (cached: the decision of an earlier run; nothing was pushed now)"
    rows = [("data gate", _Raw(data)), ("model", _Raw(model)), ("push", _Raw(push))]
    return "<h2>Gate decisions</h2>" + _table(("gate", "decision"), rows)


def _components(result) -> str:
    if not result.nodes:
        return ""
    rows = [(n.node_id, n.state, f"{n.seconds:.1f}") for n in result.nodes]
    return "<h2>Components</h2>" + _table(("node", "state", "seconds"), rows, numeric={2})


def _feature_rows(dataset) -> list[tuple]:
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


def _statistics(nodes: dict[str, NodeArtifacts]) -> str:
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from pipelines.metadata import statistics_file

    out = ["<h2>Data statistics</h2>"]
    node, artifact = _find_output(nodes, "ExampleStatistics")
    if artifact is None:
        out.append('<p class="note">No statistics: StatisticsGen did not run.</p>')
        return "".join(out)
    note = " (cached from an earlier run)" if node.state == "cached" else ""
    out.append(f'<p class="note">From <code>{_e(artifact.uri)}</code>{_e(note)}.</p>')
    headers = (
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
    splits = _splits(artifact) or sorted(
        p.name[len("Split-") :] for p in Path(artifact.uri).glob("Split-*")
    )
    for split in splits:
        path = statistics_file(artifact.uri, split)
        if not path.is_file():
            out.append(f'<p class="note">Split {_e(split)}: no statistics file.</p>')
            continue
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        stats.ParseFromString(path.read_bytes())
        for dataset in stats.datasets:
            out.append(f"<h3>Split {_e(split)}: {_num(int(dataset.num_examples))} examples</h3>")
            out.append(_table(headers, _feature_rows(dataset), numeric={2, 3, 4, 5, 6, 7, 8}))
    return "".join(out)


_GATE_COLUMNS = {
    "anomalies": ("column", "split", "description"),
    "drift": ("column", "measure", "distance", "threshold", "breached", "against"),
    "skew": ("column", "measure", "distance", "threshold", "breached", "against"),
}


def _gate_table(kind: str, entries: list[dict] | None) -> str:
    title = {"anomalies": "Anomalies", "drift": "Drift", "skew": "Training/serving skew"}[kind]
    if not entries:
        word = "none" if kind == "anomalies" and entries is not None else "not checked"
        return f'<h3>{title}</h3><p class="note">{word}</p>'
    columns = list(_GATE_COLUMNS[kind])
    columns += sorted({k for entry in entries for k in entry} - set(columns))
    rows = []
    for entry in entries:
        row = []
        for column in columns:
            value = entry.get(column)
            if column == "breached":
                value = _Raw(_badge("breached", "bad") if value else _badge("ok", "ok"))
            elif isinstance(value, float):
                value = _num(value)
            row.append(value)
        rows.append(row)
    numeric = {i for i, c in enumerate(columns) if c in ("distance", "threshold")}
    return f"<h3>{title}</h3>" + _table(columns, rows, numeric=numeric)


def _validator_anomalies(nodes: dict[str, NodeArtifacts]) -> str:
    """ExampleValidator's own findings, for a run whose runner did not report the gate."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    _, artifact = _find_output(nodes, "ExampleAnomalies")
    if artifact is None:
        return '<p class="note">ExampleValidator did not run: the data was not checked.</p>'
    rows = []
    for split_dir in sorted(Path(artifact.uri).glob("Split-*")):
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
    if not rows:
        return '<h3>ExampleValidator anomalies</h3><p class="note">none</p>'
    return "<h3>ExampleValidator anomalies</h3>" + _table(
        ("column", "split", "anomaly", "description"), rows
    )


def _data_gate(result, nodes: dict[str, NodeArtifacts]) -> str:
    out = ["<h2>Data gate</h2>"]
    gate = result.data_gate
    if not gate:
        out.append('<p class="note">The runner did not report the data gate\'s findings.</p>')
        out.append(_validator_anomalies(nodes))
        out.append(_gate_table("drift", None))
        out.append(_gate_table("skew", None))
        return "".join(out)
    passed = gate.get("passed")
    out.append(f"<p>{_badge('passed', 'ok') if passed else _badge('blocked', 'bad')}</p>")
    for kind in ("anomalies", "drift", "skew"):
        out.append(_gate_table(kind, gate.get(kind)))
    return "".join(out)


def _snake(class_name: str) -> str:
    """Keras's default metric name for a metric class: SparseCategoricalAccuracy ->
    sparse_categorical_accuracy, AUC -> auc."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", class_name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def _slice_name(slice_key) -> str:
    parts = []
    for key in slice_key.single_slice_keys:
        kind = key.WhichOneof("kind")
        value = getattr(key, kind) if kind else ""
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        parts.append(f"{key.column} = {value}")
    return ", ".join(parts) or "all examples"


def _threshold_text(spec, metric_name: str) -> tuple[str, str]:
    """(class name, the spec's thresholds as text) for a TFMA metric name."""
    for metric in spec.evaluation.metrics:
        if _snake(metric.name) == metric_name or metric.name == metric_name:
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


def _load_evaluation(uri: str):
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


def _evaluation(nodes: dict[str, NodeArtifacts], result, spec) -> str:
    out = ["<h2>Evaluation</h2>"]
    node, artifact = _find_output(nodes, "ModelEvaluation")
    if artifact is None:
        why = {
            "blocked": "the run was blocked at the data gate, before training",
            "failed": "the run failed before the Evaluator finished",
        }.get(result.outcome, "the pipeline has no Evaluator or it did not run")
        out.append(f'<p class="note">No evaluation: {_e(why)}.</p>')
        return "".join(out)
    baseline = node.input("baseline_model") if node is not None else None
    candidate = node.input("model") if node is not None else None
    notes = [f"candidate model: artifact {candidate.id}" if candidate is not None else ""]
    notes.append(
        f"baseline (the served model): artifact {baseline.id}"
        if baseline is not None
        else "no baseline: nothing was served yet, only value thresholds apply"
    )
    if node is not None and node.state == "cached":
        notes.append("cached: the evaluation of an earlier run of the same model and data")
    out.append(f'<p class="note">{_e("; ".join(n for n in notes if n))}.</p>')
    try:
        per_slice, validation = _load_evaluation(artifact.uri)
    except Exception as err:  # a report must not fail on a damaged or foreign evaluation
        out.append(f'<p class="note">Could not read {_e(artifact.uri)}: {_e(err)}</p>')
        return "".join(out)

    failures: dict[tuple[str, str, str], str] = {}
    if validation is not None:
        for per in validation.metric_validations_per_slice:
            for failure in per.failures:
                key = failure.metric_key
                failures[(_slice_name(per.slice_key), key.name, str(key.is_diff))] = _failure_text(
                    failure
                )
        verdict = (
            _badge("thresholds met", "ok")
            if validation.validation_ok
            else _badge("thresholds not met", "bad")
        )
        out.append(f"<p>{verdict}</p>")
        if validation.missing_thresholds:
            out.append('<p class="note">Some thresholds had no metric value to check.</p>')
        for missing in validation.missing_slices:
            out.append(f'<p class="note">A sliced threshold found no slice: {_e(missing)}</p>')
        if validation.rubber_stamp:
            out.append(
                '<p class="note">No baseline: change thresholds were not applied (TFMA\'s '
                "rubber stamp).</p>"
            )

    def sort_key(entry):
        name = _slice_name(entry.slice_key)
        return (name != "all examples", name)

    rows = []
    for metrics in sorted(per_slice, key=sort_key):
        values: dict[str, dict[str, float]] = {}
        for item in metrics.metric_keys_and_values:
            if not item.value.HasField("double_value"):
                continue  # matrices and plots are not table cells
            key = item.key
            role = "diff" if key.is_diff else (key.model_name or "candidate")
            label = key.name + (f" [{key.output_name}]" if key.output_name else "")
            values.setdefault(label, {})[role] = item.value.double_value.value
        slice_name = _slice_name(metrics.slice_key)
        for name in sorted(values):
            got = values[name]
            class_name, threshold = _threshold_text(spec, name)
            failed = [m for (s, n, _), m in failures.items() if s == slice_name and n == name]
            if failed:
                status = _Raw(_badge("failed", "bad") + " " + _e("; ".join(failed)))
            elif threshold and slice_name == "all examples" and validation is not None:
                status = _Raw(_badge("passed", "ok"))
            else:
                status = ""
            rows.append(
                (
                    slice_name,
                    class_name if class_name == name else f"{class_name} ({name})",
                    _num(got.get("candidate"), 4),
                    _num(got.get("baseline"), 4),
                    "" if "diff" not in got else f"{got['diff']:+.4g}",
                    threshold if slice_name == "all examples" else "",
                    status,
                )
            )
    headers = ("slice", "metric", "candidate", "baseline", "difference", "threshold", "result")
    if rows:
        out.append(_table(headers, rows, numeric={2, 3, 4}))
    else:
        out.append('<p class="note">The evaluation holds no metric values.</p>')
    out.append(
        '<p class="note">Thresholds gate the whole evaluation set; the other slices are for '
        "reading.</p>"
    )
    return "".join(out)


def _push(result, nodes: dict[str, NodeArtifacts]) -> str:
    out = ["<h2>Push</h2>"]
    node, pushed = _find_output(nodes, "PushedModel")
    if pushed is None:
        out.append('<p class="note">The Pusher did not run: serving is unchanged.</p>')
        return "".join(out)
    rows = [
        ("pushed", "yes" if _custom(pushed, "pushed") == 1 else "no"),
        ("version", _custom(pushed, "pushed_version") or "-"),
        ("destination", _custom(pushed, "pushed_destination") or "-"),
        ("reason", _custom(pushed, "conveyor_reason") or "-"),
        ("pusher", node.state if node is not None else "-"),
    ]
    out.append(_table(("", ""), rows))
    return "".join(out)


def render_report(result, paths: RunPaths, nodes: dict[str, NodeArtifacts]) -> str:
    """The report's HTML for a run, from its `RunResult` and its artifacts in ML Metadata."""
    sections = []
    for section in (
        lambda: _gate_decisions(result, nodes),
        lambda: _components(result),
        lambda: _statistics(nodes),
        lambda: _data_gate(result, nodes),
        lambda: _evaluation(nodes, result, paths.spec),
        lambda: _push(result, nodes),
    ):
        try:
            sections.append(section())
        except Exception as err:  # one unreadable artifact must not cost the whole report
            sections.append(f'<p class="note">This section could not be written: {_e(err)}</p>')
    if not nodes:
        sections.insert(0, '<p class="note">ML Metadata holds no record of this run.</p>')
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(result.pipeline)} {_e(result.run_id)}: {_e(result.outcome)}</title>"
        f"<style>{_CSS}</style></head><body>"
        + _summary(result, paths)
        + "".join(sections)
        + f'<p class="note">Written by Conveyor at {generated}.</p></body></html>\n'
    )


def write_report(result, paths: RunPaths) -> Path:
    """Writes `<result.run_dir>/report.html` for a finished run and returns its path.

    Args:
      result: the run's `pipelines.run.local.RunResult` (with `run_dir` set).
      paths: the run's `RunPaths` (its metadata store, serving directory and spec).
    """
    from pipelines.metadata import open_store

    store = open_store(paths.spec, paths.metadata_path)
    nodes = read_run(store, result.run_id) if store is not None else {}
    target = Path(result.run_dir) / REPORT_FILE
    partial = target.with_name(REPORT_FILE + ".partial")
    partial.write_text(render_report(result, paths, nodes), encoding="utf-8")
    partial.replace(target)
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
