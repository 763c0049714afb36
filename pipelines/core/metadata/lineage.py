"""What produced each pushed version: the pushes a pipeline recorded and, for each, the model,
the spans and examples it learned from, the schema and the code version (`conveyor lineage`).

A push is a PushedModel artifact with Conveyor's `pushed` property set; its lineage is followed
through ML Metadata's events: Pusher <- Model <- Trainer <- Examples and Schema.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipelines.core.metadata.records import (
    EXAMPLES_TYPE,
    MODEL_TYPE,
    PUSHED_MODEL_TYPE,
    RUN_CONTEXT_TYPE,
    SCHEMA_TYPE,
    custom_property,
    linked_artifacts,
    span_of,
)


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
                for a in linked_artifacts(store, pusher.id, metadata_store_pb2.Event.INPUT)
                if type_names.get(a.type_id) == MODEL_TYPE
            ),
            None,
        )
        trainer = _producer(store, model.id) if model is not None else None
        inputs = (
            linked_artifacts(store, trainer.id, metadata_store_pb2.Event.INPUT) if trainer else []
        )
        examples = sorted(
            (a for a in inputs if type_names.get(a.type_id) == EXAMPLES_TYPE),
            key=lambda a: span_of(a) or 0,
        )
        schema = next((a for a in inputs if type_names.get(a.type_id) == SCHEMA_TYPE), None)
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
                spans=[s for s in (span_of(a) for a in examples) if s is not None],
                examples_uris=[a.uri for a in examples],
                schema_uri=schema.uri if schema is not None else None,
                schema_sha256=_file_sha256(schema.uri) if schema is not None else None,
                code_version=code_version,
                trainer_run_id=_run_of(store, trainer.id) if trainer else "",
                user_code=user_code,
            )
        )
    return lineage
