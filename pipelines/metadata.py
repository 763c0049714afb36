"""Reading Conveyor's runs back from ML Metadata, with ml_metadata alone (no TFX, no TensorFlow).

TFX records each run as a `pipeline_run` context (Conveyor names it `<pipeline>-<UTC time>`),
each node's execution with its state, and the Pusher's ModelPushPath output with the
properties Conveyor's Pusher sets (`pushed`, `pushed_version`, `conveyor_reason`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipelines.spec import MetadataKind, PipelineSpec

RUN_CONTEXT_TYPE = "pipeline_run"
NODE_CONTEXT_TYPE = "node"
PUSHED_MODEL_TYPE = "PushedModel"

_STATE_NAMES = {
    metadata_store_pb2.Execution.NEW: "new",
    metadata_store_pb2.Execution.RUNNING: "running",
    metadata_store_pb2.Execution.COMPLETE: "executed",
    metadata_store_pb2.Execution.FAILED: "failed",
    metadata_store_pb2.Execution.CACHED: "cached",
    metadata_store_pb2.Execution.CANCELED: "canceled",
}


def connection_config(
    spec: PipelineSpec, metadata_path: Path
) -> metadata_store_pb2.ConnectionConfig:
    config = metadata_store_pb2.ConnectionConfig()
    metadata = spec.runtime.metadata
    if metadata.kind is MetadataKind.SQLITE:
        config.sqlite.filename_uri = str(metadata_path)
        config.sqlite.connection_mode = (
            metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
        )
    else:
        config.mysql.host = str(metadata.host)
        config.mysql.port = int(metadata.port or 3306)
        config.mysql.database = str(metadata.database)
        config.mysql.user = str(metadata.user)
        if metadata.password_env:
            config.mysql.password = os.environ.get(metadata.password_env, "")
    return config


def open_store(spec: PipelineSpec, metadata_path: Path) -> metadata_store.MetadataStore | None:
    """The run's metadata store, or None when a local SQLite store does not exist yet."""
    if spec.runtime.metadata.kind is MetadataKind.SQLITE and not metadata_path.exists():
        return None
    return metadata_store.MetadataStore(connection_config(spec, metadata_path))


@dataclass
class NodeRecord:
    node_id: str
    state: str
    seconds: float


@dataclass
class RunRecord:
    run_id: str
    started_ms: int
    state: str  # succeeded / failed / running
    pushed_version: str | None = None
    push_reason: str | None = None
    nodes: list[NodeRecord] = field(default_factory=list)


def _custom(artifact_or_execution, key: str):
    if key not in artifact_or_execution.custom_properties:
        return None
    value = artifact_or_execution.custom_properties[key]
    kind = value.WhichOneof("value")  # int_value, string_value, ...
    return getattr(value, kind) if kind else None


def run_record(store: metadata_store.MetadataStore, context) -> RunRecord:
    executions = store.get_executions_by_context(context.id)
    node_type_id = store.get_context_type(NODE_CONTEXT_TYPE).id
    nodes: list[NodeRecord] = []
    pushed_version = push_reason = None
    failed = running = False
    for execution in sorted(executions, key=lambda e: e.id):
        node_name = next(
            (
                c.name
                for c in store.get_contexts_by_execution(execution.id)
                if c.type_id == node_type_id
            ),
            "",
        )
        # TFX names node contexts `<pipeline>.<node id>`.
        node_id = node_name.split(".", 1)[-1] if node_name else f"execution {execution.id}"
        state = _STATE_NAMES.get(execution.last_known_state, "unknown")
        failed |= state == "failed"
        running |= state in ("new", "running")
        seconds = max(0, execution.last_update_time_since_epoch - execution.create_time_since_epoch)
        nodes.append(NodeRecord(node_id, state, seconds / 1000))
        if state != "executed":
            continue  # a cached Pusher's output records an earlier run's push
        output_ids = [
            e.artifact_id
            for e in store.get_events_by_execution_ids([execution.id])
            if e.type == metadata_store_pb2.Event.OUTPUT
        ]
        for artifact in store.get_artifacts_by_id(output_ids):
            if "pushed" in artifact.custom_properties:
                if _custom(artifact, "pushed"):
                    pushed_version = _custom(artifact, "pushed_version")
                push_reason = _custom(artifact, "conveyor_reason")
    state = "failed" if failed else "running" if running else "succeeded"
    return RunRecord(
        run_id=context.name,
        started_ms=context.create_time_since_epoch,
        state=state,
        pushed_version=pushed_version,
        push_reason=push_reason,
        nodes=nodes,
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
    context = store.get_context_by_type_and_name(RUN_CONTEXT_TYPE, run_id)
    return run_record(store, context) if context else None
