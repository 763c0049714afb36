"""bulk_inferrer: TFX's BulkInferrer over this run's blessed candidate, and, when the spec names
output columns, the prediction table beside it (components/bulk_inferrer)."""

from __future__ import annotations

from pipelines.builder.context import BuildContext

TABLE_SUFFIX = "_table"  # the table node's id: `<bulk_inferrer's id>_table`


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds TFX's BulkInferrer reading the span's examples (the `inference.splits`, default every
    split), the candidate and its blessing, wired as TFX's own examples wire it: a model the
    Evaluator did not bless predicts nothing. With `inference.output_columns`, also adds the
    PredictionTable node (`<node_id>_table`) writing those columns beside each prediction. It
    builds the same for every orchestrator."""
    from tfx.components.bulk_inferrer.component import BulkInferrer
    from tfx.proto import bulk_inferrer_pb2

    inference = ctx.spec.inference
    node = BulkInferrer(
        examples=ctx.need("examples", node_id),
        model=ctx.need("model", node_id),
        model_blessing=ctx.need("blessing", node_id),
        data_spec=bulk_inferrer_pb2.DataSpec(example_splits=list(inference.splits)),
        model_spec=bulk_inferrer_pb2.ModelSpec(model_signature_name=[inference.signature]),
    ).with_id(node_id)
    ctx.add(node)
    ctx.provide("inference_result", node.outputs["inference_result"])
    if not inference.output_columns:
        return
    from components.bulk_inferrer.component import PredictionTable

    table = PredictionTable(
        inference_result=node.outputs["inference_result"],
        columns=inference.output_columns,
        table_format=inference.output_format.value,
    ).with_id(node_id + TABLE_SUFFIX)
    ctx.add(table)
