"""A pipeline's runs read back from ML Metadata: one run (`find_run`), the latest few
(`list_runs`, for `conveyor runs`), and many at once for the history page (`run_history`).

A run's record holds each node's execution with its state, the span it ingested, the push its
Pusher executed (the `pushed`, `pushed_version` and `conveyor_reason` properties Conveyor's
Pusher sets on its output) and the data gate's findings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipelines.core.metadata.artifacts import ArtifactRecord, artifact_record
from pipelines.core.metadata.records import (
    EVALUATION_TYPE,
    EXAMPLES_TYPE,
    GATE_FINDINGS_TYPE,
    MODEL_TYPE,
    NODE_CONTEXT_TYPE,
    OUTPUT_EVENTS,
    RUN_CONTEXT_TYPE,
    STATE_NAMES,
    STATISTICS_TYPE,
    custom_property,
    node_context_type_id,
    node_id_of,
    run_context,
    span_of,
)

# components.evaluator.executor records the whole evaluation set's metrics on its output under
# these prefixes; the Trainer records its last epoch's metrics as `conveyor_final_<name>`.
METRIC_PREFIX = "conveyor_metric_"
BASELINE_METRIC_PREFIX = "conveyor_baseline_metric_"
TRAINING_METRIC_PREFIX = "conveyor_final_val_"
_BATCH = 500  # ids per query: SQLite limits the parameters of one statement


@dataclass
class NodeRecord:
    """One node's execution in a run, as ML Metadata recorded it: its `state` (a STATE_NAMES
    value: executed, cached, failed...) and how long it took, in seconds."""

    node_id: str
    state: str
    seconds: float


@dataclass
class RunRecord:
    """One pipeline run read back from ML Metadata: what `conveyor runs`, reports and run results
    show, without re-running anything."""

    run_id: str
    started_ms: int
    state: str  # succeeded / failed / running
    pushed_version: str | None = None
    push_reason: str | None = None
    nodes: list[NodeRecord] = field(default_factory=list)
    span: int | None = None  # of the examples this run ingested (or found already ingested)
    gate_findings_uri: str | None = None  # the data gate's findings, when it passed


def run_record(store: metadata_store.MetadataStore, context) -> RunRecord:
    """Reads one run (its pipeline-run `context`) from the store: each node's execution, the run's
    state (failed if any node failed, running while any has not finished), its span, the push
    its Pusher executed (a cached Pusher's output records an earlier run's push, so it is not
    counted) and the data gate's findings."""
    executions = store.get_executions_by_context(context.id)
    node_type_id = node_context_type_id(store)
    nodes: list[NodeRecord] = []
    pushed_version = push_reason = span = gate_findings_uri = None
    failed = running = False
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    for execution in sorted(executions, key=lambda e: e.id):
        node_id = node_id_of(store, execution, node_type_id)
        state = STATE_NAMES.get(execution.last_known_state, "unknown")
        failed |= state == "failed"
        running |= state in ("new", "running")
        seconds = max(0, execution.last_update_time_since_epoch - execution.create_time_since_epoch)
        nodes.append(NodeRecord(node_id, state, seconds / 1000))
        if state not in ("executed", "cached"):
            continue
        output_ids = [
            e.artifact_id
            for e in store.get_events_by_execution_ids([execution.id])
            if e.type == metadata_store_pb2.Event.OUTPUT
        ]
        for artifact in store.get_artifacts_by_id(output_ids):
            type_name = type_names.get(artifact.type_id)
            if type_name == EXAMPLES_TYPE and span_of(artifact) is not None:
                span = span_of(artifact)
            elif type_name == GATE_FINDINGS_TYPE:
                gate_findings_uri = artifact.uri
            if state != "executed":
                continue  # a cached Pusher's output records an earlier run's push
            if "pushed" in artifact.custom_properties:
                if custom_property(artifact, "pushed"):
                    pushed_version = custom_property(artifact, "pushed_version")
                push_reason = custom_property(artifact, "conveyor_reason")
    state = "failed" if failed else "running" if running else "succeeded"
    return RunRecord(
        run_id=context.name,
        started_ms=context.create_time_since_epoch,
        state=state,
        pushed_version=pushed_version,
        push_reason=push_reason,
        nodes=nodes,
        span=span,
        gate_findings_uri=gate_findings_uri,
    )


def list_runs(
    store: metadata_store.MetadataStore, pipeline_name: str, limit: int = 10
) -> list[RunRecord]:
    """The pipeline's most recent runs, newest first."""
    contexts = [
        c
        for c in store.get_contexts_by_type(RUN_CONTEXT_TYPE)
        if c.name.startswith(pipeline_name + "-")
    ]
    contexts.sort(key=lambda c: c.create_time_since_epoch, reverse=True)
    return [run_record(store, c) for c in contexts[:limit]]


def find_run(store: metadata_store.MetadataStore, run_id: str) -> RunRecord | None:
    """The run named `run_id`, or None when the store has no such run."""
    context = run_context(store, run_id)
    return run_record(store, context) if context else None


# --- many runs at once, for the pipeline's history page ---------------------------------------


@dataclass
class RunHistory:
    """One run as the history page draws it, read from ML Metadata alone.

    `metrics` are the candidate's metrics on the whole evaluation set (the Evaluator's, or
    the Trainer's on its validation split, prefixed `val_`, for an evaluation that recorded
    none); `failed_nodes` the nodes whose latest execution failed.
    """

    run_id: str
    started_ms: int
    state: str  # succeeded / failed / running
    nodes: list[NodeRecord] = field(default_factory=list)
    failed_nodes: list[str] = field(default_factory=list)
    span: int | None = None
    pushed_version: str | None = None
    statistics_uri: str | None = None
    gate_findings_uri: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)


def _batched(ids: Sequence[int]):
    ids = list(ids)
    for start in range(0, len(ids), _BATCH):
        yield ids[start : start + _BATCH]


def _prefixed(custom: dict[str, object], prefix: str) -> dict[str, float]:
    return {
        key[len(prefix) :]: float(value)
        for key, value in custom.items()
        if key.startswith(prefix) and isinstance(value, (int, float))
    }


def run_history(
    store: metadata_store.MetadataStore, pipeline_name: str, limit: int = 100
) -> list[RunHistory]:
    """The pipeline's latest `limit` runs, oldest first, each with its nodes, span, push,
    statistics, data gate findings and evaluation metrics.

    Read in a few batched queries (one per run and per node for the attributions, then all
    events and all output artifacts at once), not run by run, so that a hundred nights read in
    well under a second.
    """
    from ml_metadata import errors

    try:
        run_type = store.get_context_type(RUN_CONTEXT_TYPE)
    except errors.NotFoundError:
        return []
    contexts = [
        c
        for c in store.get_contexts_by_type(run_type.name)
        if c.name.startswith(pipeline_name + "-")
    ]
    contexts.sort(key=lambda c: (c.create_time_since_epoch, c.id))
    contexts = contexts[-limit:] if limit else []
    node_of: dict[int, str] = {}
    prefix = pipeline_name + "."
    for node_context in store.get_contexts_by_type(NODE_CONTEXT_TYPE):
        if node_context.name.startswith(prefix):
            for execution in store.get_executions_by_context(node_context.id):
                node_of[execution.id] = node_context.name[len(prefix) :]
    executions_of = {c.id: store.get_executions_by_context(c.id) for c in contexts}
    execution_ids = [e.id for found in executions_of.values() for e in found]
    outputs: dict[int, list[int]] = {}
    for ids in _batched(execution_ids):
        for event in store.get_events_by_execution_ids(ids):
            if event.type in OUTPUT_EVENTS:
                outputs.setdefault(event.execution_id, []).append(event.artifact_id)
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    artifacts: dict[int, ArtifactRecord] = {}
    for ids in _batched(sorted({a for found in outputs.values() for a in found})):
        for artifact in store.get_artifacts_by_id(ids):
            artifacts[artifact.id] = artifact_record(artifact, type_names)
    return [
        _history_of(context, executions_of[context.id], node_of, outputs, artifacts)
        for context in contexts
    ]


def _history_of(context, executions, node_of, outputs, artifacts) -> RunHistory:
    """One run's `RunHistory` from the executions and output artifacts read in bulk."""
    run = RunHistory(context.name, context.create_time_since_epoch, "succeeded")
    latest: dict[str, str] = {}
    training_metrics: dict[str, float] = {}
    running = False
    for execution in sorted(executions, key=lambda e: e.id):
        node_id = node_of.get(execution.id)
        if node_id is None and "component_id" in execution.properties:
            node_id = execution.properties["component_id"].string_value
        node_id = node_id or f"execution {execution.id}"
        state = STATE_NAMES.get(execution.last_known_state, "unknown")
        latest[node_id] = state
        running |= state in ("new", "running")
        seconds = max(0, execution.last_update_time_since_epoch - execution.create_time_since_epoch)
        run.nodes.append(NodeRecord(node_id, state, seconds / 1000))
        if state not in ("executed", "cached"):
            continue
        for artifact_id in outputs.get(execution.id, []):
            artifact = artifacts.get(artifact_id)
            if artifact is None:
                continue
            custom = artifact.custom_properties
            if artifact.type_name == EXAMPLES_TYPE and "span" in custom:
                run.span = int(custom["span"])
            elif artifact.type_name == STATISTICS_TYPE and run.statistics_uri is None:
                run.statistics_uri = artifact.uri
            elif artifact.type_name == GATE_FINDINGS_TYPE:
                run.gate_findings_uri = artifact.uri
            elif artifact.type_name == EVALUATION_TYPE:
                run.metrics.update(_prefixed(custom, METRIC_PREFIX))
            elif artifact.type_name == MODEL_TYPE:
                training_metrics = {
                    f"val_{k}": v for k, v in _prefixed(custom, TRAINING_METRIC_PREFIX).items()
                }
            elif state == "executed" and custom.get("pushed"):  # a cached push is an earlier one
                run.pushed_version = str(custom.get("pushed_version"))
    run.metrics = run.metrics or training_metrics
    run.failed_nodes = [node for node, state in latest.items() if state == "failed"]
    run.state = "failed" if run.failed_nodes else "running" if running else "succeeded"
    return run
