"""The schema of the last accepted run, which a pipeline with `schema.source: infer` holds its
next run to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipelines.core.metadata.records import (
    NODE_CONTEXT_TYPE,
    RUN_CONTEXT_TYPE,
    SCHEMA_TYPE,
    linked_artifacts,
)
from pipelines.core.object_path import as_path

SCHEMA_FILE = "schema.pbtxt"  # what SchemaGen and ImportSchemaGen write in a Schema artifact
SCHEMA_FILE_PROPERTY = "schema_file"  # ImportSchemaGen's execution property: what it imported
_DONE = (metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED)


@dataclass(frozen=True)
class AcceptedSchema:
    """The schema of the last run whose data was accepted, and the file to import it from.

    `run_id`, `artifact_id` and `uri` name that run and its Schema artifact (the file is
    `<uri>/schema.pbtxt`). `source_file` is what the next run imports: the file that artifact
    was itself imported from when that file still holds the same bytes, else the artifact's own
    file. Importing the same path night after night keeps ImportSchemaGen's execution, and so
    everything downstream of it, a cache hit while the schema does not change.
    """

    run_id: str
    artifact_id: int
    uri: str
    source_file: str

    @property
    def file(self) -> Path:
        """The schema.pbtxt inside the accepted run's Schema artifact."""
        return as_path(self.uri) / SCHEMA_FILE


def last_accepted_schema(
    store: metadata_store.MetadataStore,
    pipeline_name: str,
    gate_node_ids: Sequence[str],
    schema_node_id: str,
) -> AcceptedSchema | None:
    """The Schema the `schema_node_id` node gave the pipeline's newest accepted run, or None.

    A run is accepted when, for each node in `gate_node_ids` (the data gates; the Trainer for a
    pipeline without one), its latest execution in that run completed or was cached: TFX caches
    only executions that succeeded, and a data gate that refuses the data fails its execution.
    A run blocked at the gate, or one that failed before it, is passed over for the one before.
    With no gate node ids, every run whose schema node completed is accepted.

    Runs are found the way TFX records them: each node's executions are attributed to its
    `node` context (`<pipeline>.<node id>`) and to the `pipeline_run` context of the run; a
    cached execution is linked by an OUTPUT event to the artifact of the run it reused.
    Returns None when no run was accepted yet (the pipeline then infers its schema).
    """
    from ml_metadata import errors

    def node_context(node_id: str):
        return store.get_context_by_type_and_name(NODE_CONTEXT_TYPE, f"{pipeline_name}.{node_id}")

    schema_context = node_context(schema_node_id)
    if schema_context is None:
        return None
    gates: list[dict[int, metadata_store_pb2.Execution]] = []
    for gate in gate_node_ids:
        context = node_context(gate)
        if context is None:
            return None  # the gate never ran: no run was accepted
        gates.append({e.id: e for e in store.get_executions_by_context(context.id)})
    try:
        run_type = store.get_context_type(RUN_CONTEXT_TYPE)
        schema_type = store.get_artifact_type(SCHEMA_TYPE)
    except errors.NotFoundError:
        return None
    produced = [
        e for e in store.get_executions_by_context(schema_context.id) if e.last_known_state in _DONE
    ]
    for execution in sorted(produced, key=lambda e: e.id, reverse=True):  # newest first
        run = next(
            (c for c in store.get_contexts_by_execution(execution.id) if c.type_id == run_type.id),
            None,
        )
        if run is None or not _accepted(store, run.id, gates):
            continue
        schema = next(
            (
                a
                for a in linked_artifacts(store, execution.id, metadata_store_pb2.Event.OUTPUT)
                if a.type_id == schema_type.id
            ),
            None,
        )
        if schema is not None:
            return AcceptedSchema(run.name, schema.id, schema.uri, _import_source(store, schema))
    return None


def _accepted(
    store: metadata_store.MetadataStore,
    run_context_id: int,
    gates: list[dict[int, metadata_store_pb2.Execution]],
) -> bool:
    """Each gate's latest execution in the run completed or was cached."""
    if not gates:
        return True
    in_run = {e.id for e in store.get_executions_by_context(run_context_id)}
    for executions in gates:
        mine = sorted(in_run & executions.keys())
        if not mine or executions[mine[-1]].last_known_state not in _DONE:
            return False
    return True


def _import_source(store: metadata_store.MetadataStore, schema) -> str:
    """The file to import `schema` from: the one ImportSchemaGen copied it from (its
    `schema_file` property, on the execution that produced it rather than one that reused it
    from the cache), when that file still holds the same bytes; else the artifact's own."""
    own = as_path(schema.uri) / SCHEMA_FILE
    producers = [
        e.execution_id
        for e in store.get_events_by_artifact_ids([schema.id])
        if e.type == metadata_store_pb2.Event.OUTPUT
    ]
    completed = [
        e
        for e in store.get_executions_by_id(producers)
        if e.last_known_state == metadata_store_pb2.Execution.COMPLETE
    ]
    if not completed:
        return str(own)
    producer = min(completed, key=lambda e: e.id)
    imported = next(
        (
            properties[SCHEMA_FILE_PROPERTY].string_value
            for properties in (producer.properties, producer.custom_properties)
            if SCHEMA_FILE_PROPERTY in properties
        ),
        "",
    )
    if (
        imported
        and own.is_file()
        and Path(imported).is_file()
        and Path(imported).read_bytes() == own.read_bytes()
    ):
        return imported
    return str(own)
