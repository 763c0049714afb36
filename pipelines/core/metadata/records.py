"""How TFX records a run in ML Metadata, and the small readers every question about it shares.

TFX records each run as a `pipeline_run` context (Conveyor names it `<pipeline>-<UTC time>`),
each node's execution with its state under a `node` context (`<pipeline>.<node id>`), and the
artifacts each execution read and wrote as INPUT and OUTPUT events.
"""

from __future__ import annotations

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

RUN_CONTEXT_TYPE = "pipeline_run"
# TFX's Airflow runner still launches components the pre-IR way: its run context is of type
# `run`, named `<pipeline>.<Airflow run id>`, with no `node` contexts (each execution carries a
# `component_id` property instead).
LEGACY_RUN_CONTEXT_TYPE = "run"
NODE_CONTEXT_TYPE = "node"

# Artifact type names, as TFX and Conveyor's components register them.
EXAMPLES_TYPE = "Examples"
STATISTICS_TYPE = "ExampleStatistics"
SCHEMA_TYPE = "Schema"
HYPERPARAMETERS_TYPE = "HyperParameters"  # what TFX's Tuner writes its best values as
MODEL_TYPE = "Model"
EVALUATION_TYPE = "ModelEvaluation"
PUSHED_MODEL_TYPE = "PushedModel"
GATE_FINDINGS_TYPE = "conveyor.DataGateFindings"  # components.data_gate.component

STATE_NAMES = {
    metadata_store_pb2.Execution.NEW: "new",
    metadata_store_pb2.Execution.RUNNING: "running",
    metadata_store_pb2.Execution.COMPLETE: "executed",
    metadata_store_pb2.Execution.FAILED: "failed",
    metadata_store_pb2.Execution.CACHED: "cached",
    metadata_store_pb2.Execution.CANCELED: "canceled",
}

INPUT_EVENTS = {metadata_store_pb2.Event.INPUT, metadata_store_pb2.Event.DECLARED_INPUT}
OUTPUT_EVENTS = {metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT}


def custom_property(artifact_or_execution, key: str):
    """A custom property's value (int, string...), or None when it or its owner is absent."""
    if artifact_or_execution is None or key not in artifact_or_execution.custom_properties:
        return None
    value = artifact_or_execution.custom_properties[key]
    kind = value.WhichOneof("value")  # int_value, string_value, ...
    return getattr(value, kind) if kind else None


def span_of(artifact) -> int | None:
    """The span of an Examples artifact (ExampleGen records it as a custom property), or None."""
    for properties in (artifact.custom_properties, artifact.properties):
        if "span" in properties:
            return properties["span"].int_value
    return None


def node_id_of(store: metadata_store.MetadataStore, execution, node_type_id: int | None) -> str:
    """The pipeline node an execution ran for (TFX names node contexts `<pipeline>.<node>`)."""
    name = next(
        (
            c.name
            for c in store.get_contexts_by_execution(execution.id)
            if c.type_id == node_type_id
        ),
        "",
    )
    if name:
        return name.split(".", 1)[-1]
    if "component_id" in execution.properties:  # TFX's Airflow runner records no node contexts
        return execution.properties["component_id"].string_value
    return f"execution {execution.id}"


def node_context_type_id(store: metadata_store.MetadataStore) -> int | None:
    """The id of TFX's `node` context type, or None in a store without one."""
    from ml_metadata import errors

    try:
        return store.get_context_type(NODE_CONTEXT_TYPE).id
    except errors.NotFoundError:  # a store only TFX's Airflow runner wrote
        return None


def run_context(store: metadata_store.MetadataStore, run_id: str):
    """The context of the run `run_id`: a `pipeline_run` (LocalDagRunner names it after the run
    id), or the `run` context TFX's Airflow runner records (`<pipeline>.<Airflow run id>`);
    None when the store holds no such run."""
    for type_name in (RUN_CONTEXT_TYPE, LEGACY_RUN_CONTEXT_TYPE):
        context = store.get_context_by_type_and_name(type_name, run_id)
        if context is not None:
            return context
    return None


def linked_artifacts(store: metadata_store.MetadataStore, execution_id: int, event_type) -> list:
    """The artifacts an execution is linked to by events of `event_type` (INPUT, OUTPUT...)."""
    ids = [
        e.artifact_id
        for e in store.get_events_by_execution_ids([execution_id])
        if e.type == event_type
    ]
    return store.get_artifacts_by_id(ids) if ids else []
