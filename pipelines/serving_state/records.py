"""Serving state on record in ML Metadata: the pushes and the label moves.

- A push (the Pusher, `conveyor bless`) records the labels it moved on its PushedModel artifact
  (`conveyor_labels`, e.g. "stable,canary").
- A promote or rollback records one `conveyor.LabelMove` execution per label it moved, in the
  pipeline's context, with the PushedModel of its version as its input.

Reading them back in order (`recorded_events`) and folding them (`labels.fold`) gives where
each label points and whether `stable` is held: the record `reconcile` puts the files back to.
Everything here goes through `pipelines.core.metadata`, imported by each function that reads or
writes the store: the model server reads models.config through this package and never loads
ML Metadata's client. Nothing here imports TFX.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from pipelines.core.paths import RunPaths
from pipelines.serving_state.labels import RecordedLabels, fold

LABEL_MOVE_TYPE = "conveyor.LabelMove"
LABELS_PROPERTY = "conveyor_labels"  # on a PushedModel: the labels the push moved to it


@dataclass(frozen=True)
class LabelEvent:
    """One recorded label move, in the order ML Metadata recorded them.

    `action` is `push` (a Pusher or `conveyor bless`: every label it moved), `promote` or
    `rollback` (one label each)."""

    action: str
    labels: tuple[str, ...]
    version: int
    previous_version: int = 0
    at_ms: int = 0
    by: str = ""
    reason: str = ""
    hidden: str = ""  # the folders a rollback under `latest` renamed out of sight

    def describe(self) -> str:
        """One line for `conveyor lineage`: what moved to this version, when, by whom, why."""
        at = datetime.datetime.fromtimestamp(self.at_ms / 1000, tz=datetime.timezone.utc)
        names = ", ".join(self.labels) or "no label"
        line = f"{names} by {self.action} at {at:%Y-%m-%d %H:%M:%S} UTC"
        if self.previous_version:
            line += f" (from version {self.previous_version})"
        if self.by:
            line += f" by {self.by}"
        if self.reason:
            line += f": {self.reason}"
        if self.hidden:
            line += f" (hid {self.hidden})"
        return line


# --- reading the record -------------------------------------------------------------------------


def recorded_pushes(paths: RunPaths, store=None) -> tuple[bool, set[int]]:
    """(whether ML Metadata holds any run of the pipeline, the versions it recorded as pushed)."""
    from pipelines.core import metadata

    if store is None:
        store = metadata.open_store(paths.spec, paths.metadata_path)
    pushes = metadata.successful_pushes(store, paths.spec.name) if store is not None else None
    if pushes is None:
        return False, set()
    versions = {str(metadata.custom_property(a, "pushed_version")) for a in pushes}
    return True, {int(v) for v in versions if v.isdigit()}


def _label_move_executions(store, pipeline_name: str) -> list:
    from ml_metadata import errors

    try:
        moves = store.get_executions_by_type(LABEL_MOVE_TYPE)
    except errors.NotFoundError:  # no move was ever recorded: its type does not exist yet
        return []
    context = store.get_context_by_type_and_name("pipeline", pipeline_name)
    if context is None or not moves:
        return []
    mine = {e.id for e in store.get_executions_by_context(context.id)}
    return [e for e in moves if e.id in mine]


def recorded_events(store, pipeline_name: str) -> list[LabelEvent]:
    """Every label move ML Metadata recorded for the pipeline, in order.

    A push's artifact id orders it; a LabelMove records the newest push id it followed
    (`after_push_id`), so it sorts after that push and before the next, whatever the clocks
    say. Pushes recorded before labels existed (no `conveyor_labels`) are not moves."""
    from pipelines.core import metadata

    keyed = []
    for push in metadata.successful_pushes(store, pipeline_name) or []:
        version = str(metadata.custom_property(push, "pushed_version") or "")
        moved = metadata.custom_property(push, LABELS_PROPERTY)
        if moved is None or not version.isdigit():
            continue
        event = LabelEvent(
            action="push",
            labels=tuple(n for n in str(moved).split(",") if n),
            version=int(version),
            at_ms=push.create_time_since_epoch,
            by=str(metadata.custom_property(push, "conveyor_blessed_by") or ""),
        )
        keyed.append(((push.id, 0, 0), event))
    for move in _label_move_executions(store, pipeline_name):
        event = LabelEvent(
            action=str(metadata.custom_property(move, "action") or ""),
            labels=(str(metadata.custom_property(move, "label") or ""),),
            version=int(metadata.custom_property(move, "version") or 0),
            previous_version=int(metadata.custom_property(move, "previous_version") or 0),
            at_ms=move.create_time_since_epoch,
            by=str(metadata.custom_property(move, "by") or ""),
            reason=str(metadata.custom_property(move, "reason") or ""),
            hidden=str(metadata.custom_property(move, "hidden") or ""),
        )
        after_push_id = int(metadata.custom_property(move, "after_push_id") or 0)
        keyed.append(((after_push_id, 1, move.id), event))
    return [event for _, event in sorted(keyed, key=lambda pair: pair[0])]


def recorded_state(paths: RunPaths, store=None) -> tuple[bool, set[int], RecordedLabels]:
    """(whether ML Metadata holds any run of the pipeline, the versions it recorded as
    pushed, the labels its record gives)."""
    from pipelines.core import metadata

    if store is None:
        store = metadata.open_store(paths.spec, paths.metadata_path)
    has_runs, known = recorded_pushes(paths, store)
    if not has_runs:
        return False, set(), fold([], paths.spec.push.labels)
    return True, known, fold(recorded_events(store, paths.spec.name), paths.spec.push.labels)


def moves_by_version(store, pipeline_name: str) -> dict[str, list[LabelEvent]]:
    """Version (as `conveyor lineage` names it) -> the label moves to it, in order."""
    found: dict[str, list[LabelEvent]] = {}
    for event in recorded_events(store, pipeline_name):
        found.setdefault(str(event.version), []).append(event)
    return found


# --- writing the record -------------------------------------------------------------------------


def record_moves(
    paths: RunPaths,
    action: str,
    moves: Mapping[str, tuple[int, int]],
    by: str,
    reason: str,
    hidden: str = "",
) -> None:
    """Records one `conveyor.LabelMove` execution per label moved, in the pipeline's context,
    each with the PushedModel of its version as its input."""
    from ml_metadata.proto import metadata_store_pb2

    from pipelines.core import metadata

    store = metadata.open_store(paths.spec, paths.metadata_path)
    pushes = metadata.successful_pushes(store, paths.spec.name) or []
    pipeline = store.get_context_by_type_and_name("pipeline", paths.spec.name)
    type_id = store.put_execution_type(metadata_store_pb2.ExecutionType(name=LABEL_MOVE_TYPE))
    after_push_id = max((p.id for p in pushes), default=0)
    for label, (previous, version) in moves.items():
        execution = metadata_store_pb2.Execution(
            type_id=type_id, last_known_state=metadata_store_pb2.Execution.COMPLETE
        )
        values = {
            "action": action,
            "label": label,
            "reason": reason,
            "by": by,
            "at": now(),
            "hidden": hidden,
        }
        for key, value in values.items():
            execution.custom_properties[key].string_value = value
        execution.custom_properties["version"].int_value = version
        execution.custom_properties["previous_version"].int_value = previous
        execution.custom_properties["after_push_id"].int_value = after_push_id
        pushed = [
            p for p in pushes if str(metadata.custom_property(p, "pushed_version")) == str(version)
        ]
        events = (
            [(pushed[-1], metadata_store_pb2.Event(type=metadata_store_pb2.Event.INPUT))]
            if pushed
            else []
        )
        store.put_execution(execution, events, [pipeline] if pipeline is not None else [])


def now() -> str:
    """The time a hold or a label move records: UTC, to the second, ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --- the pushes `conveyor models` lists ---------------------------------------------------------


def pushes_by_version(store, pipeline_name: str) -> dict[int, tuple]:
    """Version -> (run id, spans, final validation metrics) of its newest recorded push."""
    from ml_metadata.proto import metadata_store_pb2

    from pipelines.core import metadata

    found: dict[int, tuple] = {}
    pushes = metadata.successful_pushes(store, pipeline_name) or []
    if not pushes:
        return found
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    run_type = store.get_context_type(metadata.RUN_CONTEXT_TYPE).id

    def linked(execution_id: int, kind) -> list:
        events = store.get_events_by_execution_ids([execution_id])
        chosen = [e.artifact_id for e in events if e.type == kind]
        return store.get_artifacts_by_id(chosen) if chosen else []

    def producer(artifact_id: int):
        ids = [
            e.execution_id
            for e in store.get_events_by_artifact_ids([artifact_id])
            if e.type == metadata_store_pb2.Event.OUTPUT
        ]
        return store.get_executions_by_id(ids)[0] if ids else None

    for push in pushes:
        version = str(metadata.custom_property(push, "pushed_version") or "")
        if not version.isdigit():
            continue
        pusher = producer(push.id)
        run_id, spans, metrics = "", [], {}
        if pusher is not None:
            run_id = next(
                (
                    c.name
                    for c in store.get_contexts_by_execution(pusher.id)
                    if c.type_id == run_type
                ),
                "",
            )
            inputs = linked(pusher.id, metadata_store_pb2.Event.INPUT)
            model = next((a for a in inputs if type_names.get(a.type_id) == "Model"), None)
            if model is not None:
                metrics = {
                    key[len("conveyor_final_") :]: value.double_value
                    for key, value in model.custom_properties.items()
                    if key.startswith("conveyor_final_val_")
                }
                trainer = producer(model.id)
                if trainer is not None:
                    examples = [
                        a
                        for a in linked(trainer.id, metadata_store_pb2.Event.INPUT)
                        if type_names.get(a.type_id) == metadata.EXAMPLES_TYPE
                    ]
                    spans = sorted({metadata.custom_property(a, "span") for a in examples} - {None})
        found[int(version)] = (run_id, spans, metrics)
    return found
