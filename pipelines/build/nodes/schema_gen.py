"""schema_gen: the curated schema file, or one inferred from the statistics."""

from __future__ import annotations

from pipelines.build.context import BuildContext
from pipelines.paths import project_file
from pipelines.spec.components import Orchestrator
from pipelines.spec.models import SchemaSource


def build(ctx: BuildContext, node_id: str) -> None:
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
    else:
        from tfx.components import SchemaGen

        node = SchemaGen(statistics=ctx.need("statistics", node_id), infer_feature_shape=False)
    node = ctx.add(node.with_id(node_id))
    ctx.provide("schema", node.outputs["schema"])
