"""Reading Conveyor's runs back from ML Metadata, with ml_metadata alone (no TFX, no TensorFlow).

TFX records each run as a `pipeline_run` context (Conveyor names it `<pipeline>-<UTC time>`),
each node's execution with its state, and the Pusher's ModelPushPath output with the
properties Conveyor's Pusher sets (`pushed`, `pushed_version`, `conveyor_reason`).
`last_accepted_schema` finds the schema an inferring pipeline holds its next run to.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipelines.spec.models import MetadataKind, PipelineSpec

RUN_CONTEXT_TYPE = "pipeline_run"
# TFX's Airflow runner still launches components the pre-IR way: its run context is of type
# `run`, named `<pipeline>.<Airflow run id>`, with no `node` contexts (each execution carries a
# `component_id` property instead).
LEGACY_RUN_CONTEXT_TYPE = "run"
NODE_CONTEXT_TYPE = "node"
PUSHED_MODEL_TYPE = "PushedModel"
EXAMPLES_TYPE = "Examples"
GATE_FINDINGS_TYPE = "conveyor.DataGateFindings"  # components.data_gate.component

STATE_NAMES = {
    metadata_store_pb2.Execution.NEW: "new",
    metadata_store_pb2.Execution.RUNNING: "running",
    metadata_store_pb2.Execution.COMPLETE: "executed",
    metadata_store_pb2.Execution.FAILED: "failed",
    metadata_store_pb2.Execution.CACHED: "cached",
    metadata_store_pb2.Execution.CANCELED: "canceled",
}


class MetadataConfigError(ValueError):
    """The profile's metadata settings cannot give a connection; the message names the key."""


def metadata_password(spec: PipelineSpec) -> str:
    """The MySQL password from the environment variable `runtime.metadata.password_env` names.

    The one place the password is read: it is never stored in a spec, a profile or a file
    Conveyor writes.
    """
    variable = spec.runtime.metadata.password_env
    if not variable:
        return ""
    if variable not in os.environ:
        raise MetadataConfigError(
            f"runtime.metadata.password_env: the environment variable {variable!r} is not set "
            "(it holds the metadata database's password)."
        )
    return os.environ[variable]


def connection_config(
    spec: PipelineSpec, metadata_path: Path
) -> metadata_store_pb2.ConnectionConfig:
    """The ML Metadata connection the profile's `runtime.metadata` describes: what TFX's
    runners and Conveyor's own readers both open. A SQLite store's folder is created."""
    config = metadata_store_pb2.ConnectionConfig()
    metadata = spec.runtime.metadata
    if metadata.kind is MetadataKind.SQLITE:
        metadata_path.parent.mkdir(parents=True, exist_ok=True)
        config.sqlite.filename_uri = str(metadata_path)
        config.sqlite.connection_mode = (
            metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
        )
    else:
        config.mysql.host = str(metadata.host)
        config.mysql.port = int(metadata.port or 3306)
        config.mysql.database = str(metadata.database)
        config.mysql.user = str(metadata.user)
        config.mysql.password = metadata_password(spec)
    return config


def open_store(spec: PipelineSpec, metadata_path: Path) -> metadata_store.MetadataStore | None:
    """The run's metadata store, or None when a local SQLite store does not exist yet."""
    if spec.runtime.metadata.kind is MetadataKind.SQLITE and not metadata_path.exists():
        return None
    return metadata_store.MetadataStore(connection_config(spec, metadata_path))


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


def _span(artifact) -> int | None:
    """ExampleGen records an Examples artifact's span as a custom property."""
    for properties in (artifact.custom_properties, artifact.properties):
        if "span" in properties:
            return properties["span"].int_value
    return None


def custom_property(artifact_or_execution, key: str):
    """A custom property's value (int, string...), or None when it or its owner is absent."""
    if artifact_or_execution is None or key not in artifact_or_execution.custom_properties:
        return None
    value = artifact_or_execution.custom_properties[key]
    kind = value.WhichOneof("value")  # int_value, string_value, ...
    return getattr(value, kind) if kind else None


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


def statistics_file(statistics_uri: str, split: str) -> Path:
    """Where StatisticsGen writes one split's DatasetFeatureStatisticsList."""
    return Path(statistics_uri) / f"Split-{split}" / "FeatureStats.pb"


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
            if type_name == EXAMPLES_TYPE and _span(artifact) is not None:
                span = _span(artifact)
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


@dataclass
class PushLineage:
    """What produced one pushed version, read back from ML Metadata's events."""

    version: str
    run_id: str
    pushed_at_ms: int
    model_uri: str
    spans: list[int]
    examples_uris: list[str]
    schema_uri: str | None
    schema_sha256: str | None
    code_version: str | None
    trainer_run_id: str
    # The team's code the Trainer ran (`module@digest`, comma-separated), if any.
    user_code: str | None = None

    def describe(self) -> str:
        """The lineage as aligned lines for `conveyor lineage`: the version, its run and push
        time (UTC), the model, the spans and examples it learned from, the schema and the code
        version."""
        pushed = datetime.datetime.fromtimestamp(
            self.pushed_at_ms / 1000, tz=datetime.timezone.utc
        ).strftime("%Y-%m-%d %H:%M:%S")
        spans = ", ".join(_span_label(s) for s in self.spans) or "-"
        return "\n".join(
            [
                f"version {self.version}: pushed by run {self.run_id} at {pushed} UTC",
                f"  model     {self.model_uri} (trained in run {self.trainer_run_id})",
                f"  spans     {spans}",
                *[f"  examples  {uri}" for uri in self.examples_uris],
                f"  schema    {self.schema_uri} (sha256 {(self.schema_sha256 or '-')[:16]})",
                f"  code      {self.code_version or '-'}",
                *([f"  user code {self.user_code}"] if self.user_code else []),
            ]
        )


def _span_label(span: int) -> str:
    # Dated spans count days since 1970-01-01 (TFX's rule); a small number is a {SPAN}.
    if span > 3650:
        night = datetime.date(1970, 1, 1) + datetime.timedelta(days=span)
        return f"{span} ({night.isoformat()})"
    return str(span)


def _linked(store, execution_id: int, event_type) -> list:
    ids = [
        e.artifact_id
        for e in store.get_events_by_execution_ids([execution_id])
        if e.type == event_type
    ]
    return store.get_artifacts_by_id(ids) if ids else []


def _producer(store, artifact_id: int):
    ids = [
        e.execution_id
        for e in store.get_events_by_artifact_ids([artifact_id])
        if e.type == metadata_store_pb2.Event.OUTPUT
    ]
    return store.get_executions_by_id(ids)[0] if ids else None


def _run_of(store, execution_id: int) -> str:
    run_type = store.get_context_type(RUN_CONTEXT_TYPE).id
    return next(
        (c.name for c in store.get_contexts_by_execution(execution_id) if c.type_id == run_type),
        "",
    )


def _file_sha256(directory: str) -> str | None:
    import hashlib

    path = Path(directory) / "schema.pbtxt"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def successful_pushes(store: metadata_store.MetadataStore, pipeline_name: str) -> list | None:
    """The pipeline's PushedModel artifacts that record a push (`pushed` set), oldest first;
    None when ML Metadata holds no run of the pipeline at all."""
    pipeline = store.get_context_by_type_and_name("pipeline", pipeline_name)
    if pipeline is None:
        return None
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    pushes = [
        a
        for a in store.get_artifacts_by_context(pipeline.id)
        if type_names.get(a.type_id) == PUSHED_MODEL_TYPE and custom_property(a, "pushed")
    ]
    return sorted(pushes, key=lambda a: a.id)


def pushed_lineage(store: metadata_store.MetadataStore, pipeline_name: str) -> list[PushLineage]:
    """Every version the pipeline pushed, oldest first, with the spans (Examples artifacts),
    schema and code version of the Trainer execution that produced the pushed model."""
    import json

    pushes = successful_pushes(store, pipeline_name) or []
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    lineage = []
    for push in sorted(pushes, key=lambda a: a.id):
        pusher = _producer(store, push.id)
        if pusher is None:
            continue
        model = next(
            (
                a
                for a in _linked(store, pusher.id, metadata_store_pb2.Event.INPUT)
                if type_names.get(a.type_id) == "Model"
            ),
            None,
        )
        trainer = _producer(store, model.id) if model is not None else None
        inputs = _linked(store, trainer.id, metadata_store_pb2.Event.INPUT) if trainer else []
        examples = sorted(
            (a for a in inputs if type_names.get(a.type_id) == EXAMPLES_TYPE),
            key=lambda a: _span(a) or 0,
        )
        schema = next((a for a in inputs if type_names.get(a.type_id) == "Schema"), None)
        code_version = user_code = None
        if trainer is not None:
            raw = custom_property(trainer, "custom_config")
            if raw:
                code_version = json.loads(raw).get("code_version")
            # A TFX run_fn module's Trainer keeps them as execution properties of their own.
            code_version = code_version or custom_property(trainer, "code_version") or None
            user_code = custom_property(trainer, "user_code") or None
        lineage.append(
            PushLineage(
                version=str(custom_property(push, "pushed_version")),
                run_id=_run_of(store, pusher.id),
                pushed_at_ms=push.create_time_since_epoch,
                model_uri=model.uri if model is not None else "",
                spans=[s for s in (_span(a) for a in examples) if s is not None],
                examples_uris=[a.uri for a in examples],
                schema_uri=schema.uri if schema is not None else None,
                schema_sha256=_file_sha256(schema.uri) if schema is not None else None,
                code_version=code_version,
                trainer_run_id=_run_of(store, trainer.id) if trainer else "",
                user_code=user_code,
            )
        )
    return lineage


# --- one run's nodes and their artifacts, for the run report -----------------------------------


@dataclass(frozen=True)
class ArtifactRecord:
    """One artifact as ML Metadata records it: its id, type name, URI and property values.

    Plain values rather than the MLMD proto, so that readers (the run report) never handle the
    store's messages. `properties` holds the type's declared properties, `custom_properties`
    the ones a component set on the artifact (TFX's `blessed`, Conveyor's `pushed`...).
    """

    id: int
    type_name: str
    uri: str
    properties: dict[str, object] = field(default_factory=dict)
    custom_properties: dict[str, object] = field(default_factory=dict)

    def get(self, key: str, default=None):
        """A property's value, the custom one first (TFX sets most values there)."""
        if key in self.custom_properties:
            return self.custom_properties[key]
        return self.properties.get(key, default)

    def split_names(self) -> list[str]:
        """The splits a statistics or examples artifact holds (TFX records them as JSON), or []."""
        import json

        names = self.get("split_names")
        try:
            return [str(n) for n in json.loads(names)] if names else []
        except (TypeError, ValueError):
            return []


@dataclass
class NodeArtifacts:
    """One node's latest execution in a run: its state and its artifacts by input/output key."""

    node_id: str
    state: str  # a STATE_NAMES value: executed, cached, failed, ...
    inputs: dict[str, list[ArtifactRecord]] = field(default_factory=dict)
    outputs: dict[str, list[ArtifactRecord]] = field(default_factory=dict)

    @property
    def cached(self) -> bool:
        """TFX reused an earlier run's execution: its outputs are that run's, not this one's."""
        return self.state == "cached"

    def input(self, key: str) -> ArtifactRecord | None:
        """The first artifact under an input key (`model`, `baseline_model`...), or None."""
        found = self.inputs.get(key) or []
        return found[0] if found else None

    def output(self, key: str) -> ArtifactRecord | None:
        """The first artifact under an output key, or None."""
        found = self.outputs.get(key) or []
        return found[0] if found else None


def _values(properties) -> dict[str, object]:
    """An MLMD property map as plain values (int, float, str...; a struct stays a message)."""
    values = {}
    for key, value in properties.items():
        kind = value.WhichOneof("value")
        if kind:
            values[key] = getattr(value, kind)
    return values


def _artifact_record(artifact, type_names: dict[int, str]) -> ArtifactRecord:
    return ArtifactRecord(
        id=artifact.id,
        type_name=artifact.type or type_names.get(artifact.type_id, ""),
        uri=artifact.uri,
        properties=_values(artifact.properties),
        custom_properties=_values(artifact.custom_properties),
    )


_INPUT_EVENTS = {metadata_store_pb2.Event.INPUT, metadata_store_pb2.Event.DECLARED_INPUT}
_OUTPUT_EVENTS = {metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT}


def read_run_artifacts(
    store: metadata_store.MetadataStore, run_id: str
) -> dict[str, NodeArtifacts]:
    """Node id -> its execution in the run `run_id`, with the artifacts it read and wrote.

    A cached execution is linked to the run too: its outputs are the earlier run's, and its
    state says so. A node that ran more than once in the run (a retry) is its latest execution.
    Returns {} when the store holds no such run.
    """
    context = run_context(store, run_id)
    if context is None:
        return {}
    node_type_id = node_context_type_id(store)
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    nodes: dict[str, NodeArtifacts] = {}
    for execution in sorted(store.get_executions_by_context(context.id), key=lambda e: e.id):
        node_id = node_id_of(store, execution, node_type_id)
        node = NodeArtifacts(node_id, STATE_NAMES.get(execution.last_known_state, "unknown"))
        events = store.get_events_by_execution_ids([execution.id])
        ids = sorted({e.artifact_id for e in events})
        artifacts = {
            a.id: _artifact_record(a, type_names)
            for a in (store.get_artifacts_by_id(ids) if ids else [])
        }
        for event in events:
            if event.type in _INPUT_EVENTS:
                target = node.inputs
            elif event.type in _OUTPUT_EVENTS:
                target = node.outputs
            else:
                continue
            key = next((s.key for s in event.path.steps if s.HasField("key")), "")
            if event.artifact_id in artifacts:
                target.setdefault(key, []).append(artifacts[event.artifact_id])
        nodes[node_id] = node  # executions run in id order: a retried node's latest wins
    return nodes


def find_output(
    nodes: dict[str, NodeArtifacts], type_name: str
) -> tuple[NodeArtifacts | None, ArtifactRecord | None]:
    """(node, artifact) of the first node in the run with an output of this MLMD type
    (`ExampleStatistics`, `ModelBlessing`, `PushedModel`...); (None, None) when none has."""
    for node in nodes.values():
        for artifacts in node.outputs.values():
            for artifact in artifacts:
                if artifact.type_name == type_name:
                    return node, artifact
    return None, None


# --- the schema of the last accepted run, for `schema.source: infer` --------------------------

SCHEMA_TYPE = "Schema"
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
        return Path(self.uri) / SCHEMA_FILE


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
                for a in _linked(store, execution.id, metadata_store_pb2.Event.OUTPUT)
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
    own = Path(schema.uri) / SCHEMA_FILE
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


# --- many runs at once, for the pipeline's history page ---------------------------------------

EVALUATION_TYPE = "ModelEvaluation"
MODEL_TYPE = "Model"
STATISTICS_TYPE = "ExampleStatistics"
# components.evaluator.executor records the whole evaluation set's metrics on its output under
# these prefixes; the Trainer records its last epoch's metrics as `conveyor_final_<name>`.
METRIC_PREFIX = "conveyor_metric_"
BASELINE_METRIC_PREFIX = "conveyor_baseline_metric_"
TRAINING_METRIC_PREFIX = "conveyor_final_val_"
_BATCH = 500  # ids per query: SQLite limits the parameters of one statement


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
            if event.type in _OUTPUT_EVENTS:
                outputs.setdefault(event.execution_id, []).append(event.artifact_id)
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    artifacts: dict[int, ArtifactRecord] = {}
    for ids in _batched(sorted({a for found in outputs.values() for a in found})):
        for artifact in store.get_artifacts_by_id(ids):
            artifacts[artifact.id] = _artifact_record(artifact, type_names)
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
