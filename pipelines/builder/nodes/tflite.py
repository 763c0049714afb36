"""tflite_converter: a TF Lite copy of the blessed candidate, checked against its SavedModel on
evaluation rows (components/tflite)."""

from __future__ import annotations

from pipelines.builder.context import BuildContext


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds the TF Lite converter over the candidate, its blessing (and the infra validator's,
    when one runs before it: the conversion then waits for it) and the examples, with the
    spec's `push.tflite` settings, and publishes its `tflite_model` for the Pusher. It builds the
    same for every orchestrator."""
    from components.tflite.component import TfLiteConverter

    tflite = ctx.spec.push.tflite
    metrics = ctx.spec.evaluation.metrics
    node = TfLiteConverter(
        model=ctx.need("model", node_id),
        model_blessing=ctx.need("blessing", node_id),
        examples=ctx.need("examples", node_id),
        infra_blessing=ctx.need("infra_blessing", node_id) if ctx.has("infra_blessing") else None,
        quantization=tflite.quantization.value,
        tolerance=tflite.max_difference,
        parity_rows=tflite.parity_rows,
        metric=metrics[0].name if metrics else "",
    ).with_id(node_id)
    ctx.add(node)
    ctx.provide("tflite_model", node.outputs["tflite_model"])
