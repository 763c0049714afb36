"""An inferring pipeline checks something: the first run infers the schema, later runs import it.

Penguin with `schema.source: infer`, three runs in one working directory: the first infers its
schema, the second imports the first's (TFX's ImportSchemaGen), and a third whose body_mass_g
column turned to text stops at the data gate, as it does against the curated schema. Were each
run to infer its own schema, the third would infer a text column and pass.
"""

from pipelines import cli
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec
from tests.conftest import copy_fixture


def _schema_gen_execution(store, run_id: str):
    """The schema_gen node's execution in a run, and the name of its execution type."""
    run = store.get_context_by_type_and_name(metadata.RUN_CONTEXT_TYPE, run_id)
    node = store.get_context_by_type_and_name(metadata.NODE_CONTEXT_TYPE, "penguin.schema_gen")
    in_node = {e.id for e in store.get_executions_by_context(node.id)}
    [execution] = [e for e in store.get_executions_by_context(run.id) if e.id in in_node]
    [execution_type] = store.get_execution_types_by_id([execution.type_id])
    return execution, execution_type.name


def test_later_runs_hold_the_data_to_the_first_runs_schema(tmp_path):
    workdir = tmp_path / "work"
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    loaded = load_spec("penguin", env="ci", overrides=["schema.source=infer"], workdir=workdir)
    paths = RunPaths(workdir=workdir, spec=loaded.spec)

    first = nightly.run(loaded, workdir, echo=lambda _: None)
    assert first.outcome == "pushed", first.message
    second = nightly.run(loaded, workdir, echo=lambda _: None)
    assert second.ok, second.message

    store = metadata.open_store(loaded.spec, paths.metadata_path)
    inferred, inferred_type = _schema_gen_execution(store, first.run_id)
    assert inferred_type.endswith(".SchemaGen")
    first_schema = metadata.read_run_artifacts(store, first.run_id)["schema_gen"].output("schema")
    imported, imported_type = _schema_gen_execution(store, second.run_id)
    assert imported_type.endswith(".ImportSchemaGen")
    assert metadata.custom_property(imported, "schema_file") == f"{first_schema.uri}/schema.pbtxt"

    copy_fixture("penguins_text_in_numeric.csv", paths.input_dir, "penguins.csv")
    third = nightly.run(loaded, workdir, echo=lambda _: None)
    assert third.outcome == "blocked", third.message
    assert "body_mass_g (train split): Unexpected data type" in third.message
    states = {n.node_id: n.state for n in third.nodes}
    # The same file imported again: TFX's cache answered for schema_gen.
    assert states["schema_gen"] == "cached"
    assert states["data_gate"] == "failed"
    assert "trainer" not in states
    # The blocked run's schema is not the next run's: the second run is still the last accepted.
    accepted = metadata.last_accepted_schema(store, "penguin", ["data_gate"], "schema_gen")
    assert accepted.run_id == second.run_id
    assert accepted.source_file == f"{first_schema.uri}/schema.pbtxt"
