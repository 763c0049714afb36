"""The last search a pipeline's Tuner ran, which decides whether a night its `tuning.retune` does
not tune must tune anyway: nothing was tuned yet, or the schema changed since
(pipelines/builder/nodes/tuner.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipelines.core.metadata.records import (
    HYPERPARAMETERS_TYPE,
    NODE_CONTEXT_TYPE,
    RUN_CONTEXT_TYPE,
    SCHEMA_TYPE,
    linked_artifacts,
)

_DONE = (metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED)


@dataclass(frozen=True)
class LastTuning:
    """The newest Tuner execution that completed (or was cached): its run, the best
    HyperParameters it wrote, and the Schema it searched under (None if it read none)."""

    run_id: str
    hyperparameters_uri: str
    schema_uri: str | None


def last_tuning(
    store: metadata_store.MetadataStore, pipeline_name: str, tuner_node_id: str
) -> LastTuning | None:
    """The last search of the `tuner_node_id` node, or None when it never completed one.

    Only the Tuner's own node counts: a night that reused hyperparameters ran a resolver under
    another node id (`<tuner id>_latest`), which searched nothing.
    """
    context = store.get_context_by_type_and_name(
        NODE_CONTEXT_TYPE, f"{pipeline_name}.{tuner_node_id}"
    )
    if context is None:
        return None
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    run_types = {t.id for t in store.get_context_types() if t.name == RUN_CONTEXT_TYPE}
    done = [e for e in store.get_executions_by_context(context.id) if e.last_known_state in _DONE]
    for execution in sorted(done, key=lambda e: e.id, reverse=True):  # newest first
        written = linked_artifacts(store, execution.id, metadata_store_pb2.Event.OUTPUT)
        best = [a for a in written if type_names.get(a.type_id) == HYPERPARAMETERS_TYPE]
        if not best:
            continue
        read = linked_artifacts(store, execution.id, metadata_store_pb2.Event.INPUT)
        schema = next((a for a in read if type_names.get(a.type_id) == SCHEMA_TYPE), None)
        run = next(
            (c for c in store.get_contexts_by_execution(execution.id) if c.type_id in run_types),
            None,
        )
        return LastTuning(
            run_id=run.name if run is not None else "",
            hyperparameters_uri=best[0].uri,
            schema_uri=schema.uri if schema is not None else None,
        )
    return None
