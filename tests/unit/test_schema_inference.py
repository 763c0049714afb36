"""`schema.source: infer` infers once, then holds every later run to the last accepted run's schema.

The ML Metadata store here is a real SQLite one, written with ml_metadata's API the way TFX
records runs: a `pipeline_run` context per run (`penguin-<stamp>`), a `node` context per node
(`penguin.<node id>`), each execution attributed to both with its state, and the Schema artifact
linked to the execution that wrote it, or reused it from the cache, by an OUTPUT event.
"""

import hashlib
from pathlib import Path

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd

from pipelines.builder.nodes.schema_gen import gate_node_ids, previous_schema
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.run import fingerprint
from pipelines.spec.loading import load_spec

COMPLETE, CACHED, FAILED = mlmd.Execution.COMPLETE, mlmd.Execution.CACHED, mlmd.Execution.FAILED
SCHEMA_A = b'feature { name: "body_mass_g" type: FLOAT }\n'
SCHEMA_B = b'feature { name: "body_mass_g" type: BYTES }\n'


class RecordedRuns:
    """Writes runs into an ML Metadata store as TFX's LocalDagRunner does."""

    def __init__(self, store: metadata_store.MetadataStore, pipeline_root: Path):
        self.store = store
        self.root = pipeline_root
        put_type = store.put_context_type
        self.run_type = put_type(mlmd.ContextType(name=metadata.RUN_CONTEXT_TYPE))
        self.node_type = put_type(mlmd.ContextType(name=metadata.NODE_CONTEXT_TYPE))
        pipeline_type = put_type(mlmd.ContextType(name="pipeline"))
        self.schema_type = store.put_artifact_type(mlmd.ArtifactType(name="Schema"))
        self.pipeline = self._context(pipeline_type, "penguin")
        self.node_contexts: dict[str, mlmd.Context] = {}
        self.execution_types: dict[str, int] = {}

    def _context(self, type_id: int, name: str) -> mlmd.Context:
        [context_id] = self.store.put_contexts([mlmd.Context(type_id=type_id, name=name)])
        return self.store.get_contexts_by_id([context_id])[0]

    def _execution_type(self, name: str) -> int:
        if name not in self.execution_types:
            self.execution_types[name] = self.store.put_execution_type(
                mlmd.ExecutionType(name=name)
            )
        return self.execution_types[name]

    def run(self, stamp: str, *nodes) -> str:
        """Records one run: each node a (node id, state, what it output, its schema_file).

        What a node outputs: bytes (a new Schema artifact holding them, as SchemaGen or
        ImportSchemaGen writes it), an earlier artifact id (a cached execution reusing it), or
        None.
        """
        run = self._context(self.run_type, f"penguin-{stamp}")
        for node_id, state, output, schema_file in nodes:
            if node_id not in self.node_contexts:
                self.node_contexts[node_id] = self._context(self.node_type, f"penguin.{node_id}")
            execution = mlmd.Execution(
                type_id=self._execution_type(node_id), last_known_state=state
            )
            if schema_file:
                execution.custom_properties["schema_file"].string_value = str(schema_file)
            artifacts_and_events = []
            if output is not None:
                event = mlmd.Event(type=mlmd.Event.OUTPUT)
                event.path.steps.add().key = "schema"
                artifacts_and_events.append((self._schema(output, f"{stamp}-{node_id}"), event))
            contexts = [self.pipeline, run, self.node_contexts[node_id]]
            self.store.put_execution(execution, artifacts_and_events, contexts)
        return run.name

    def _schema(self, output, folder: str) -> mlmd.Artifact:
        if isinstance(output, int):  # a cached execution links the artifact it reused
            return self.store.get_artifacts_by_id([output])[0]
        uri = self.root / "schema_gen" / "schema" / folder
        uri.mkdir(parents=True)
        (uri / "schema.pbtxt").write_bytes(output)
        return mlmd.Artifact(type_id=self.schema_type, uri=str(uri), state=mlmd.Artifact.LIVE)

    def schema_artifacts(self) -> list[mlmd.Artifact]:
        return sorted(self.store.get_artifacts_by_type("Schema"), key=lambda a: a.id)


@pytest.fixture
def penguin(tmp_path):
    """The penguin spec inferring its schema, its paths under tmp_path (no store yet)."""
    spec = load_spec("penguin", env="ci", overrides=["schema.source=infer"]).spec
    return RunPaths(workdir=tmp_path, spec=spec)


def recorded(paths: RunPaths) -> RecordedRuns:
    store = metadata_store.MetadataStore(
        metadata.connection_config(paths.spec, paths.metadata_path)
    )
    return RecordedRuns(store, paths.pipeline_root)


def accepted_run(runs: RecordedRuns, stamp: str, schema) -> str:
    """A run whose data gate passed; `schema` as `RecordedRuns.run` takes it."""
    return runs.run(
        stamp,
        ("schema_gen", COMPLETE, schema, None),
        ("data_gate", COMPLETE, None, None),
        ("trainer", COMPLETE, None, None),
    )


def blocked_run(runs: RecordedRuns, stamp: str, schema) -> str:
    return runs.run(
        stamp, ("schema_gen", COMPLETE, schema, None), ("data_gate", FAILED, None, None)
    )


def schema_node(paths: RunPaths, target: str = "local"):
    from pipelines.builder.pipeline import build_nodes

    ctx = build_nodes(paths.spec, paths, target, None)
    [node] = [n for n in ctx.nodes if n.id == "schema_gen"]
    return node, ctx.notes.get("schema_gen", "")


def test_building_follows_the_accepted_runs_and_only_them(penguin):
    # No store yet: the first run infers.
    node, note = schema_node(penguin)
    assert type(node).__name__ == "SchemaGen"
    assert "no run accepted yet" in note

    runs = recorded(penguin)
    first = accepted_run(runs, "20261129T010000", SCHEMA_A)
    [first_schema] = runs.schema_artifacts()
    node, note = schema_node(penguin)
    assert type(node).__name__ == "ImportSchemaGen"
    assert node.exec_properties["schema_file"] == f"{first_schema.uri}/schema.pbtxt"
    assert first in note

    # Tonight's data broke the schema and the gate blocked it: its schema is not the next one.
    blocked = blocked_run(runs, "20261130T010000", SCHEMA_B)
    node, note = schema_node(penguin)
    assert type(node).__name__ == "ImportSchemaGen"
    assert node.exec_properties["schema_file"] == f"{first_schema.uri}/schema.pbtxt"
    assert first in note and blocked not in note


def test_kubeflow_chooses_the_schema_in_the_task_from_the_gates_record(penguin):
    # The build cannot read the metadata KFP keeps: the task chooses when it runs, from the
    # record the data gate keeps in the workdir (components/accepted_schema).
    runs = recorded(penguin)
    accepted_run(runs, "20261129T010000", SCHEMA_A)
    assert previous_schema(penguin.spec, penguin) is not None
    node, note = schema_node(penguin, "kubeflow")
    assert type(node).__name__ == "AcceptedSchemaGen"
    record = str(penguin.runs_dir / "accepted_schema.json")
    assert node.exec_properties["accepted_schema_file"] == record
    assert record in note


def test_only_blocked_or_failed_runs_leave_the_schema_to_be_inferred(penguin):
    assert previous_schema(penguin.spec, penguin) is None  # no store
    runs = recorded(penguin)
    blocked_run(runs, "20261129T010000", SCHEMA_A)
    runs.run("20261130T010000", ("schema_gen", FAILED, None, None))
    assert previous_schema(penguin.spec, penguin) is None


def test_an_unchanged_schema_is_imported_from_the_same_file_run_after_run(penguin):
    runs = recorded(penguin)
    first = accepted_run(runs, "20261129T010000", SCHEMA_A)
    [inferred] = runs.schema_artifacts()
    first_file = f"{inferred.uri}/schema.pbtxt"
    found = previous_schema(penguin.spec, penguin)
    assert (found.run_id, found.artifact_id, found.source_file) == (first, inferred.id, first_file)

    # The second run's ImportSchemaGen copied that file into a new artifact of its own.
    second = runs.run(
        "20261130T010000",
        ("schema_gen", COMPLETE, SCHEMA_A, first_file),
        ("data_gate", COMPLETE, None, None),
    )
    copied = runs.schema_artifacts()[-1]
    found = previous_schema(penguin.spec, penguin)
    assert (found.run_id, found.artifact_id) == (second, copied.id)
    assert found.source_file == first_file  # the same import: TFX's cache hits from here on

    # The third run's import was a cache hit (it reused the second run's artifact).
    third = runs.run(
        "20261201T010000",
        ("schema_gen", CACHED, copied.id, first_file),
        ("data_gate", CACHED, None, None),
    )
    found = previous_schema(penguin.spec, penguin)
    assert (found.run_id, found.artifact_id, found.source_file) == (third, copied.id, first_file)

    # Once the first file no longer holds the same schema, the copy is imported instead.
    Path(first_file).write_bytes(SCHEMA_B)
    assert previous_schema(penguin.spec, penguin).source_file == f"{copied.uri}/schema.pbtxt"


def test_without_a_data_gate_the_trainer_accepts_a_run(penguin):
    spec = load_spec(
        "penguin",
        env="ci",
        overrides=[
            "schema.source=infer",
            "components=[{type: csv_example_gen}, {type: statistics_gen}, {type: schema_gen}, "
            "{type: example_validator}, {type: trainer}]",
        ],
    ).spec
    paths = RunPaths(workdir=penguin.workdir, spec=spec)
    assert gate_node_ids(spec) == ["trainer"]
    runs = recorded(paths)
    runs.run(
        "20261129T010000",
        ("schema_gen", COMPLETE, SCHEMA_A, None),
        ("trainer", FAILED, None, None),
    )
    assert previous_schema(spec, paths) is None
    accepted = accepted_run(runs, "20261130T010000", SCHEMA_B)
    assert previous_schema(spec, paths).run_id == accepted


def test_the_fingerprint_holds_the_schema_the_run_will_import(penguin):
    assert fingerprint.compute(penguin)["schema"] == ""  # it will infer
    runs = recorded(penguin)
    blocked_run(runs, "20261129T010000", SCHEMA_B)
    assert fingerprint.compute(penguin)["schema"] == ""
    accepted_run(runs, "20261130T010000", SCHEMA_A)
    assert fingerprint.compute(penguin)["schema"] == hashlib.sha256(SCHEMA_A).hexdigest()


def test_a_lost_schema_file_stops_the_build_instead_of_inferring_again(penguin):
    from pipelines.builder.context import BuildError

    runs = recorded(penguin)
    accepted_run(runs, "20261129T010000", SCHEMA_A)
    lost = Path(runs.schema_artifacts()[0].uri) / "schema.pbtxt"
    lost.unlink()
    assert fingerprint.compute(penguin)["schema"] == f"missing {lost}"
    with pytest.raises(BuildError, match="schema of the last accepted run .* is gone"):
        schema_node(penguin)
