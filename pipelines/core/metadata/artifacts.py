"""One run's nodes and the artifacts they read and wrote, as plain values for reports.

Readers (the run report, the run's metrics) get `ArtifactRecord`s and never handle the store's
messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ml_metadata.metadata_store import metadata_store

from pipelines.core.metadata.records import (
    INPUT_EVENTS,
    OUTPUT_EVENTS,
    STATE_NAMES,
    node_context_type_id,
    node_id_of,
    run_context,
)
from pipelines.core.object_path import as_path


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


def artifact_record(artifact, type_names: dict[int, str]) -> ArtifactRecord:
    """An MLMD artifact as an `ArtifactRecord`; `type_names` maps artifact type ids to names."""
    return ArtifactRecord(
        id=artifact.id,
        type_name=artifact.type or type_names.get(artifact.type_id, ""),
        uri=artifact.uri,
        properties=_values(artifact.properties),
        custom_properties=_values(artifact.custom_properties),
    )


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
            a.id: artifact_record(a, type_names)
            for a in (store.get_artifacts_by_id(ids) if ids else [])
        }
        for event in events:
            if event.type in INPUT_EVENTS:
                target = node.inputs
            elif event.type in OUTPUT_EVENTS:
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


def statistics_file(statistics_uri: str, split: str) -> Path:
    """Where StatisticsGen writes one split's DatasetFeatureStatisticsList."""
    return as_path(statistics_uri) / f"Split-{split}" / "FeatureStats.pb"
