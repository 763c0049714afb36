"""A Kubeflow run's push, recorded in Conveyor's ML Metadata store from what its tasks told.

Kubeflow Pipelines records a run in its own ML Metadata, which no task (and no `conveyor`
command) can read. So on Kubeflow the Pusher writes its decision into the run's folder in the
workdir (`PUSH_DECISION_FILE`, `components.pusher.executor.write_push_decision`): the
PushedModel it recorded, the Model and ModelBlessing it judged, and, on the Model, what the
Trainer learned from (`TRAINED_FROM_PROPERTY`: examples with their spans, schema, code
version, user code). The exit handler hands the file to `record_told_push`, which records in
the store the spec names (`runtime.metadata`: the team's MySQL-compatible server in
production) the shape TFX records for a run:

- contexts `pipeline` (the pipeline's name), `pipeline_run` (the run's folder name) and `node`
  (`<pipeline>.<node id>`) for the Trainer and the Pusher;
- a Trainer execution, INPUT the Examples (with their `span`) and the Schema, OUTPUT the Model;
- a Pusher execution, INPUT the Model and the ModelBlessing, OUTPUT the PushedModel with
  Conveyor's properties (`pushed`, `pushed_version`, `conveyor_labels`, the reason code).

That is what `conveyor lineage`, `models`, `rollback` and `bless` read
(`pipelines.core.metadata.lineage`, `pipelines.serving_state.records`), so they answer for a
Kubeflow run as for a local one. An artifact already recorded at the same URI (an earlier
span's examples in tonight's window) is linked, not copied. Recording a run twice (KFP retries
an exit handler) records it once.
"""

from __future__ import annotations

import json
from typing import Any

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipelines.core.metadata.records import (
    EXAMPLES_TYPE,
    MODEL_TYPE,
    NODE_CONTEXT_TYPE,
    PUSHED_MODEL_TYPE,
    RUN_CONTEXT_TYPE,
    SCHEMA_TYPE,
)

# On the Model (components.trainer): what it learned from, a JSON object {"examples": [{"uri",
# "span"}], "schema": URI, "code_version", "user_code"}.
TRAINED_FROM_PROPERTY = "conveyor_trained_from"
BLESSING_TYPE = "ModelBlessing"
PIPELINE_CONTEXT_TYPE = "pipeline"
# The executions recorded here: TFX's executions are typed by component class, which a task
# on Kubeflow does not tell; the node context says which node each was.
TOLD_EXECUTION_TYPE = "conveyor.KubeflowTask"

_INPUT = metadata_store_pb2.Event.INPUT
_OUTPUT = metadata_store_pb2.Event.OUTPUT


# TFX's Kubeflow entry point hands a task its input artifacts' metadata as struct values, a
# single value under this key (tfx.types.artifact._encode_struct_value).
_STRUCT_SINGLE_VALUE_KEY = "__value__"


def custom_values(artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    """An ML Metadata artifact's int, double and string custom properties as plain values,
    also where they come as TFX's single-value structs (an input artifact on Kubeflow)."""
    from google.protobuf import json_format

    values = {}
    for name, value in artifact.custom_properties.items():
        kind = value.WhichOneof("value")
        if kind in ("int_value", "double_value", "string_value"):
            values[name] = getattr(value, kind)
        elif kind == "struct_value":
            decoded = json_format.MessageToDict(value.struct_value)
            single = decoded.get(_STRUCT_SINGLE_VALUE_KEY) if len(decoded) == 1 else None
            if isinstance(single, (int, float, str)):
                values[name] = single
    return values


def described(artifact: metadata_store_pb2.Artifact) -> dict[str, Any]:
    """What the push decision keeps of an artifact: its URI and custom properties."""
    return {"uri": artifact.uri, "custom": custom_values(artifact)}


def _set_custom(proto, values: dict[str, Any]) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or isinstance(value, int):
            proto.custom_properties[name].int_value = int(value)
        elif isinstance(value, float):
            # KFP's metadata holds every number as a double: a whole one was an int.
            if value.is_integer() and name in ("pushed", "blessed", "span"):
                proto.custom_properties[name].int_value = int(value)
            else:
                proto.custom_properties[name].double_value = value
        elif isinstance(value, str):
            proto.custom_properties[name].string_value = value


def _type_id(store, kind: str, name: str) -> int:
    proto = {
        "artifact": metadata_store_pb2.ArtifactType,
        "execution": metadata_store_pb2.ExecutionType,
        "context": metadata_store_pb2.ContextType,
    }[kind](name=name)
    put = getattr(store, f"put_{kind}_type")
    # TFX may have registered the type with properties of its own: neither side's are needed.
    return put(proto, can_add_fields=True, can_omit_fields=True)


def _context(store, type_name: str, name: str) -> metadata_store_pb2.Context:
    found = store.get_context_by_type_and_name(type_name, name)
    if found is not None:
        return found
    context = metadata_store_pb2.Context(type_id=_type_id(store, "context", type_name), name=name)
    [context_id] = store.put_contexts([context])
    return store.get_contexts_by_id([context_id])[0]


def _artifact(store, type_name: str, uri: str, custom: dict[str, Any]):
    """The artifact of `type_name` recorded at `uri`, or a new one (not yet put)."""
    type_id = _type_id(store, "artifact", type_name)
    for found in store.get_artifacts_by_uri(uri) if uri else []:
        if found.type_id == type_id:
            return found
    artifact = metadata_store_pb2.Artifact(
        type_id=type_id, uri=uri, state=metadata_store_pb2.Artifact.LIVE
    )
    _set_custom(artifact, custom)
    return artifact


def _execution(store, node_id: str, custom: dict[str, Any]) -> metadata_store_pb2.Execution:
    execution = metadata_store_pb2.Execution(
        type_id=_type_id(store, "execution", TOLD_EXECUTION_TYPE),
        last_known_state=metadata_store_pb2.Execution.COMPLETE,
    )
    _set_custom(execution, {"node_id": node_id, **custom})
    return execution


def _recorded(store, run: metadata_store_pb2.Context, pusher_node) -> bool:
    ids = {e.id for e in store.get_executions_by_context(run.id)}
    return any(e.id in ids for e in store.get_executions_by_context(pusher_node.id))


def record_told_push(
    store: metadata_store.MetadataStore,
    pipeline_name: str,
    run_id: str,
    node_ids: tuple[str, str],
    decision: dict[str, Any],
) -> bool:
    """Records a Kubeflow run's Trainer and Pusher, as the Pusher's `decision` tells them
    (module docstring); returns False when the run's push was recorded already.

    Args:
      store: Conveyor's ML Metadata store.
      pipeline_name: the spec's name.
      run_id: the run's folder name (KFP's job name), its `pipeline_run` context.
      node_ids: the ids of the Trainer and the Pusher nodes.
      decision: the Pusher's decision file, read as JSON.
    """
    trainer_id, pusher_id = node_ids
    pipeline = _context(store, PIPELINE_CONTEXT_TYPE, pipeline_name)
    run = _context(store, RUN_CONTEXT_TYPE, run_id)
    trainer_node = _context(store, NODE_CONTEXT_TYPE, f"{pipeline_name}.{trainer_id}")
    pusher_node = _context(store, NODE_CONTEXT_TYPE, f"{pipeline_name}.{pusher_id}")
    if _recorded(store, run, pusher_node):
        return False
    model_told = decision["model"]
    trained_from = json.loads(model_told["custom"].get(TRAINED_FROM_PROPERTY) or "{}")
    model = _artifact(store, MODEL_TYPE, model_told["uri"], model_told["custom"])
    if not model.id:  # the Model first: the Trainer that produced it, with what it read
        inputs = [
            _artifact(store, EXAMPLES_TYPE, told["uri"], {"span": told["span"]})
            for told in trained_from.get("examples", [])
            if told.get("span") is not None
        ]
        if trained_from.get("schema"):
            inputs.append(_artifact(store, SCHEMA_TYPE, trained_from["schema"], {}))
        trainer = _execution(
            store,
            trainer_id,
            {
                key: trained_from[key]
                for key in ("code_version", "user_code")
                if trained_from.get(key)
            },
        )
        _, [*_, model_id], _ = store.put_execution(
            trainer,
            [*((a, metadata_store_pb2.Event(type=_INPUT)) for a in inputs)]
            + [(model, metadata_store_pb2.Event(type=_OUTPUT))],
            [pipeline, run, trainer_node],
        )
        model = store.get_artifacts_by_id([model_id])[0]
    blessing_told = decision["blessing"]
    blessing = _artifact(store, BLESSING_TYPE, blessing_told["uri"], blessing_told["custom"])
    push_told = decision["push"]
    push = _artifact(store, PUSHED_MODEL_TYPE, "", push_told["custom"])
    push.uri = push_told["uri"]
    store.put_execution(
        _execution(store, pusher_id, {}),
        [
            (model, metadata_store_pb2.Event(type=_INPUT)),
            (blessing, metadata_store_pb2.Event(type=_INPUT)),
            (push, metadata_store_pb2.Event(type=_OUTPUT)),
        ],
        [pipeline, run, pusher_node],
    )
    return True
