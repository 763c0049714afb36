"""schema_gen: the schema tonight's data is held to, curated or kept from an accepted run.

`schema.source: file` imports the curated file with TFX's ImportSchemaGen: drift from it is an
anomaly, and changing it is a reviewed commit (`conveyor schema diff` / `accept`).

`schema.source: infer` infers once and then keeps what it inferred, TFX's practice of importing
the previous schema. The first run (no run accepted yet) builds SchemaGen, which infers a schema
from that run's statistics. Every later run builds ImportSchemaGen, under the same node id, of
the schema of the last accepted run: the newest run whose data gate passed (its `data_gate`
execution completed or was cached; a spec without a data gate counts the Trainer instead). So
ExampleValidator and the data gate check tonight's data against a schema that earlier data
set, and a column that turns to text, disappears or gains a category is caught, not inferred
into the schema. A run blocked at the gate is passed over: its data never becomes the schema.

Where that schema is comes from ML Metadata, read when the pipeline is built: `conveyor run`
reads the runner's store before it runs, an Airflow DAG whenever Airflow parses its file. A
Kubeflow pipeline is compiled without access to the metadata KFP keeps, so there the choice is
the task's: `components.accepted_schema` copies the schema the data gate last passed data
against (its record in the workdir), or infers before any run was accepted.

The import names the same file while the schema does not change (see
`pipelines.core.metadata.AcceptedSchema.source_file`), so an unchanged re-run stays a cache hit; the
second run re-executes from schema_gen on once, as its schema is then an imported artifact.

An inferred schema becomes a curated one by copying it under `schemas/<pipeline>/`, setting
`schema.source: file` and `schema.path`, and committing it; docs/schema.md has the steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.builder.context import BuildContext, BuildError
from pipelines.core.paths import RunPaths, project_file
from pipelines.spec.components import Orchestrator
from pipelines.spec.models import PipelineSpec, SchemaSource

if TYPE_CHECKING:  # ml_metadata is imported only where a store is read
    from pipelines.core.metadata import AcceptedSchema


def gate_node_ids(spec: PipelineSpec) -> list[str]:
    """The nodes whose success accepts a run's data: the data gates, else the Trainers."""
    gates = [c.id for c in spec.components if c.type == "data_gate"]
    return gates or [c.id for c in spec.components if c.type == "trainer"]


def previous_schema(
    spec: PipelineSpec, paths: RunPaths, node_id: str | None = None
) -> AcceptedSchema | None:
    """The schema of the last accepted run in the spec's ML Metadata store, or None when no
    run was accepted yet (or the local store does not exist): what an inferring pipeline's next
    run imports. `node_id` is the schema_gen node (default: the spec's first one).
    """
    if node_id is None:
        node_id = next((c.id for c in spec.components if c.type == "schema_gen"), None)
        if node_id is None:
            return None
    from pipelines.core.metadata import last_accepted_schema, open_store

    store = open_store(spec, paths.metadata_path)
    if store is None:
        return None
    return last_accepted_schema(store, spec.name, gate_node_ids(spec), node_id)


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds the node that provides the `schema` role, as the module docstring describes:
    ImportSchemaGen of the curated file (`schema.source: file`); for `infer`, SchemaGen on the
    first run, else ImportSchemaGen of the last accepted run's schema (on Kubeflow,
    AcceptedSchemaGen, which chooses between them when it runs).

    Raises:
      BuildError: the last accepted run's schema file no longer exists.
    """
    schema = ctx.spec.schema_
    if schema.source is SchemaSource.FILE:
        from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen

        if ctx.target is Orchestrator.KUBEFLOW:
            # Kubeflow's containers run from the pipeline image, which holds the project at
            # `runtime.container.project_root` (the Dockerfile puts it there).
            root = ctx.spec.runtime.container.project_root.rstrip("/")
            schema_file = f"{root}/{schema.path}"
            ctx.note(node_id, f"schema_file -> {schema_file}")
        else:
            schema_file = str(project_file(schema.path))
        node = ImportSchemaGen(schema_file=schema_file)
    elif ctx.target is Orchestrator.KUBEFLOW:
        from components.accepted_schema.component import AcceptedSchemaGen
        from pipelines.builder.nodes.data_gate import accepted_schema_file

        record = accepted_schema_file(ctx)
        ctx.note(
            node_id,
            "AcceptedSchemaGen: the schema the data gate last accepted data against, recorded "
            f"in {record}; before any, inferred from the run's statistics",
        )
        node = AcceptedSchemaGen(
            statistics=ctx.need("statistics", node_id),
            accepted_schema_file=record,
            infer_feature_shape=ctx.spec.transform is not None,
        )
    else:
        previous = previous_schema(ctx.spec, ctx.paths, node_id)
        if previous is None:
            ctx.note(node_id, "SchemaGen: no run accepted yet, so this run infers the schema")
            node = _infer(ctx, node_id)
        else:
            from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen

            if not Path(previous.source_file).is_file():
                raise BuildError(
                    f"component {node_id!r}: the schema of the last accepted run "
                    f"{previous.run_id} is gone ({previous.source_file}). Restore it, curate a "
                    "schema (schema.source: file, see docs/schema.md), or start a new metadata "
                    "store to infer afresh."
                )
            ctx.note(
                node_id,
                f"ImportSchemaGen of run {previous.run_id}'s schema (the last accepted run): "
                f"{previous.source_file}",
            )
            node = ImportSchemaGen(schema_file=previous.source_file)
    node = ctx.add(node.with_id(node_id))
    ctx.provide("schema", node.outputs["schema"])


def _infer(ctx: BuildContext, node_id: str):
    from tfx.components import SchemaGen

    # TFX Transform modules expect TFX's convention: a column present in every row is a
    # fixed-shape feature (dense tensors in preprocessing_fn); Conveyor's trainer reads either.
    return SchemaGen(
        statistics=ctx.need("statistics", node_id),
        infer_feature_shape=ctx.spec.transform is not None,
    )
