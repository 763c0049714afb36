"""example_validator: TFDV anomalies of the statistics against the schema."""

from __future__ import annotations

from pipelines.builder.context import BuildContext


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds TFX's ExampleValidator over the statistics and schema, and publishes its `anomalies`
    for the data gate."""
    from tfx.components import ExampleValidator

    node = ExampleValidator(
        statistics=ctx.need("statistics", node_id), schema=ctx.need("schema", node_id)
    ).with_id(node_id)
    ctx.add(node)
    ctx.provide("anomalies", node.outputs["anomalies"])
