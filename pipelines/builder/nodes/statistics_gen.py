"""statistics_gen: TFDV statistics per split."""

from __future__ import annotations

from pipelines.builder.context import BuildContext


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds the statistics node and publishes its `statistics`: TFX's StatisticsGen with
    Conveyor's executor, which reads the Arrow reader's Parquet copy of the examples when there
    is one (instead of decoding every tf.Example again) and computes small splits without a
    Beam pipeline (components/statistics_gen)."""
    from components.statistics_gen.component import StatisticsGen

    examples = ctx.need("examples", node_id)
    node = ctx.add(StatisticsGen(examples=examples).with_id(node_id))
    ctx.provide("statistics", node.outputs["statistics"])
