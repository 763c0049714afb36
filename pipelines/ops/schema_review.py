"""Reviewing a curated schema against the latest data: `conveyor schema diff` and `accept`.

A pipeline with `schema.source: file` trusts `schemas/<name>/schema.pbtxt`: data that breaks it
stops at the data gate. When the data changes on purpose (a new column, a new category), the
schema has to change deliberately, as a reviewed commit. `diff` shows how the newest statistics
in ML Metadata (the `train` split of the pipeline's latest ExampleStatistics, whether or not that
run was blocked) differ from the curated file: TFDV's anomalies per column, and what
`tfdv.update_schema` would change. `accept` writes that updated schema back to the file, keeping
its header comment; the user reviews the change and commits it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.core.paths import RunPaths, project_file, relative_to_project
from pipelines.spec.models import PipelineSpec, SchemaSource

EXIT_DIFFERENT = 3  # `schema diff` found differences (0: none)
STATISTICS_TYPE = "ExampleStatistics"
STATISTICS_SPLIT = "train"


class SchemaToolError(Exception):
    """The schema cannot be compared or updated; the message says why and what to do."""


@dataclass(frozen=True)
class StatisticsSource:
    """Where the statistics being compared come from."""

    artifact_id: int
    uri: str
    path: Path  # the split's FeatureStats.pb
    run_id: str | None
    created: datetime.datetime

    def describe(self) -> str:
        """One line naming the split, the statistics artifact, its run and creation time and the
        file: so a reviewer knows which data a schema diff or accept was computed from."""
        run = f"run {self.run_id}" if self.run_id else "an unknown run"
        stamp = self.created.strftime("%Y-%m-%d %H:%M:%S UTC")
        return (
            f"{STATISTICS_SPLIT} split of ExampleStatistics {self.artifact_id} ({run}, {stamp}): "
            f"{self.path}"
        )


@dataclass
class ColumnDifference:
    """One column where the newest statistics and the curated schema disagree: TFDV's anomalies
    (what is wrong with the data) and the changes `accept` would make to the schema."""

    column: str
    anomalies: list[str] = field(default_factory=list)  # TFDV: what is wrong with the data
    changes: list[str] = field(default_factory=list)  # what accepting would change


@dataclass
class SchemaDiff:
    """What `diff` found: the curated schema file, the statistics it was compared with, the
    columns that differ, and the updated schema `accept` would write."""

    schema_path: Path
    source: StatisticsSource
    columns: list[ColumnDifference]
    updated: Any  # the schema_pb2.Schema `accept` would write

    @property
    def different(self) -> bool:
        """Whether any column differs (`conveyor schema diff` then exits with EXIT_DIFFERENT)."""
        return bool(self.columns)


def curated_schema_path(spec: PipelineSpec) -> Path:
    """The spec's curated schema file; a clear error for a spec that infers its schema."""
    if spec.schema_.source is not SchemaSource.FILE:
        raise SchemaToolError(
            f"{spec.name} infers its schema (schema.source: {spec.schema_.source.value}); "
            "`conveyor schema` reviews curated schemas only. Curate one under "
            f"schemas/{spec.name}/ and set schema.source: file and schema.path."
        )
    path = project_file(spec.schema_.path)
    if not path.is_file():
        raise SchemaToolError(f"{spec.name}: the curated schema {path} does not exist.")
    return path


def latest_statistics(spec: PipelineSpec, paths: RunPaths) -> StatisticsSource:
    """The newest ExampleStatistics of the pipeline in ML Metadata with a `train` split."""
    from ml_metadata.proto import metadata_store_pb2

    from pipelines.core.metadata import RUN_CONTEXT_TYPE, open_store, statistics_file

    store = open_store(spec, paths.metadata_path)
    artifacts = []
    if store is not None:
        pipeline_context = store.get_context_by_type_and_name("pipeline", spec.name)
        if pipeline_context is not None:
            artifacts = [
                a
                for a in store.get_artifacts_by_context(pipeline_context.id)
                if a.type == STATISTICS_TYPE and a.state == metadata_store_pb2.Artifact.LIVE
            ]
    for artifact in sorted(
        artifacts, key=lambda a: (a.create_time_since_epoch, a.id), reverse=True
    ):
        stats_file = statistics_file(artifact.uri, STATISTICS_SPLIT)
        if not stats_file.is_file():
            continue
        run_id = None
        run_type = store.get_context_type(RUN_CONTEXT_TYPE)
        producers = [
            e.execution_id
            for e in store.get_events_by_artifact_ids([artifact.id])
            if e.type == metadata_store_pb2.Event.OUTPUT
        ]
        for execution_id in producers[:1]:
            run_id = next(
                (
                    c.name
                    for c in store.get_contexts_by_execution(execution_id)
                    if run_type is not None and c.type_id == run_type.id
                ),
                None,
            )
        created = datetime.datetime.fromtimestamp(
            artifact.create_time_since_epoch / 1000, tz=datetime.timezone.utc
        )
        return StatisticsSource(artifact.id, artifact.uri, stats_file, run_id, created)
    raise SchemaToolError(
        f"no statistics of {spec.name} yet in {paths.metadata_path}: run the pipeline first "
        f"(`conveyor run {spec.name} --workdir {paths.workdir}`); a run blocked at the data "
        "gate also records its statistics."
    )


def _load_tfdv():
    import os
    import warnings

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import tensorflow_data_validation as tfdv
    return tfdv


def _one_line(message) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(message, as_one_line=True) or "(none)"


def _domain_values(schema, name: str) -> list[str]:
    for domain in schema.string_domain:
        if domain.name == name:
            return list(domain.value)
    return []


def _feature_changes(before, after, old_schema, new_schema) -> list[str]:
    """What differs between two versions of one feature, in words."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    changes = []
    fields = {f.name for f, _ in before.ListFields()} | {f.name for f, _ in after.ListFields()}
    for name in sorted(fields - {"name"}):
        old_has = _has(before, name)
        new_has = _has(after, name)
        old, new = getattr(before, name), getattr(after, name)
        if old_has == new_has and old == new:
            if name == "domain":  # same domain name: compare the values it points at
                changes += _domain_change(
                    old, _domain_values(old_schema, old), _domain_values(new_schema, new)
                )
            continue
        if name == "type":
            type_name = schema_pb2.FeatureType.Name
            changes.append(f"type {type_name(old)} -> {type_name(new)}")
        elif name == "domain":
            changes += _domain_change(
                f"{old or '(none)'} -> {new or '(none)'}",
                _domain_values(old_schema, old) if old_has else [],
                _domain_values(new_schema, new) if new_has else [],
            )
        else:
            descriptor = before.DESCRIPTOR.fields_by_name[name]
            old_text, new_text = _describe(descriptor, old), _describe(descriptor, new)
            if not new_has:
                change = f"{name} removed (was {old_text})"
            elif not old_has:
                change = f"{name} added: {new_text}"
            else:
                change = f"{name} {old_text} -> {new_text}"
            if name == "lifecycle_stage" and new_text == "DEPRECATED":
                change += " (TFDV stops checking the column instead of changing its type)"
            changes.append(change)
    return changes


def _has(message, name: str) -> bool:
    descriptor = message.DESCRIPTOR.fields_by_name[name]
    if descriptor.label == descriptor.LABEL_REPEATED:
        return len(getattr(message, name)) > 0
    return message.HasField(name)  # schema.proto is proto2: every singular field has presence


def _describe(descriptor, value) -> str:
    if descriptor.enum_type is not None:
        return descriptor.enum_type.values_by_number[value].name
    if hasattr(value, "DESCRIPTOR"):
        return "{" + _one_line(value) + "}"
    return repr(value)


def _domain_change(name: str, old: list[str], new: list[str]) -> list[str]:
    added = [v for v in new if v not in old]
    removed = [v for v in old if v not in new]
    parts = []
    if added:
        parts.append("adds " + ", ".join(repr(v) for v in added))
    if removed:
        parts.append("drops " + ", ".join(repr(v) for v in removed))
    return [f"domain {name}: " + "; ".join(parts)] if parts else []


def schema_changes(old, new) -> dict[str, list[str]]:
    """Column -> what changes from schema `old` to schema `new` (columns that differ only)."""
    old_features = {f.name: f for f in old.feature}
    new_features = {f.name: f for f in new.feature}
    changes: dict[str, list[str]] = {}
    for name, feature in new_features.items():
        if name not in old_features:
            changes[name] = [f"new column: {_one_line(_without_name(feature))}"]
            domain = _domain_values(new, feature.domain) if feature.domain else []
            if domain:
                changes[name].append(f"domain {feature.domain}: " + ", ".join(map(repr, domain)))
            continue
        found = _feature_changes(old_features[name], feature, old, new)
        if found:
            changes[name] = found
    for name in old_features.keys() - new_features.keys():
        changes[name] = ["column removed from the schema"]
    for label, field_name in (("dataset constraints", "dataset_constraints"),):
        if getattr(old, field_name) != getattr(new, field_name):
            changes[f"({label})"] = [
                f"{_one_line(getattr(old, field_name))} -> {_one_line(getattr(new, field_name))}"
            ]
    return changes


def _without_name(feature):
    copy = type(feature)()
    copy.CopyFrom(feature)
    copy.ClearField("name")
    return copy


def diff(spec: PipelineSpec, paths: RunPaths) -> SchemaDiff:
    """How the newest `train` statistics differ from the curated schema."""
    schema_path = curated_schema_path(spec)
    source = latest_statistics(spec, paths)
    tfdv = _load_tfdv()
    curated = tfdv.load_schema_text(str(schema_path))
    statistics = tfdv.load_stats_binary(str(source.path))
    anomalies = tfdv.validate_statistics(statistics, curated)
    updated = tfdv.update_schema(curated, statistics, infer_feature_shape=False)

    columns: dict[str, ColumnDifference] = {}
    for column, info in sorted(anomalies.anomaly_info.items()):
        reasons = [f"{r.short_description}: {r.description.strip()}" for r in info.reason] or [
            f"{info.short_description}: {info.description.strip()}"
        ]
        columns.setdefault(column, ColumnDifference(column)).anomalies.extend(reasons)
    if anomalies.HasField("dataset_anomaly_info"):
        info = anomalies.dataset_anomaly_info
        columns.setdefault("(dataset)", ColumnDifference("(dataset)")).anomalies.append(
            f"{info.short_description}: {info.description.strip()}"
        )
    for column, changes in schema_changes(curated, updated).items():
        columns.setdefault(column, ColumnDifference(column)).changes.extend(changes)
    order = {f.name: i for i, f in enumerate(updated.feature)}
    ordered = sorted(columns.values(), key=lambda c: (order.get(c.column, len(order)), c.column))
    return SchemaDiff(schema_path, source, ordered, updated)


def _header_comment(path: Path) -> str:
    """The leading comment block of a schema.pbtxt (TFDV's writer would drop it)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def accept(spec: PipelineSpec, paths: RunPaths) -> SchemaDiff:
    """Writes the schema updated to the newest statistics back to the curated file.

    Returns the difference that was accepted (nothing is written when there is none).
    """
    result = diff(spec, paths)
    changed = any(c.changes for c in result.columns)
    if not changed:
        return result
    tfdv = _load_tfdv()
    header = _header_comment(result.schema_path)
    partial = result.schema_path.with_name(result.schema_path.name + ".partial")
    tfdv.write_schema_text(result.updated, str(partial))
    partial.write_text(header + partial.read_text())
    partial.replace(result.schema_path)
    return result


def format_diff(result: SchemaDiff, spec: PipelineSpec) -> list[str]:
    """The per-column report `conveyor schema diff` prints."""
    lines = [
        f"schema:     {relative_to_project(result.schema_path)}",
        f"statistics: {result.source.describe()}",
    ]
    if not result.different:
        lines.append("no difference: the data matches the curated schema.")
        return lines
    lines.append("")
    for column in result.columns:
        lines.append(column.column)
        lines += [f"  anomaly: {a}" for a in column.anomalies]
        lines += [f"  accept would change: {c}" for c in column.changes]
        if column.anomalies and not column.changes:
            lines.append(
                "  accept would change: nothing (fix the data, or edit the schema by hand)"
            )
    count = len(result.columns)
    lines.append("")
    lines.append(
        f"{count} column{'s' if count != 1 else ''} differ. `conveyor schema accept {spec.name}` "
        "writes the updated schema; review it and commit it."
    )
    return lines
