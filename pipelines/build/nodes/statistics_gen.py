"""statistics_gen: TFDV statistics per split."""

from __future__ import annotations

from pipelines.build.context import BuildContext


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds the statistics node and publishes its `statistics`: Conveyor's ColumnarStatisticsGen
    when the Arrow reader left a Parquet copy of the examples (read in place of decoding every
    tf.Example again), else TFX's StatisticsGen."""
    examples = ctx.need("examples", node_id)
    if ctx.columnar_examples:
        # The Arrow reader left a Parquet copy of the examples: read it instead of decoding
        # every tf.Example again (components/statistics_gen).
        from components.statistics_gen.component import ColumnarStatisticsGen

        node = ColumnarStatisticsGen(examples=examples)
    else:
        from tfx.components import StatisticsGen

        node = StatisticsGen(examples=examples)
    node = ctx.add(node.with_id(node_id))
    ctx.provide("statistics", node.outputs["statistics"])
