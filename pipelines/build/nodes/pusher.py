"""pusher: publishes a blessed model as the next TF Serving version, atomically."""

from __future__ import annotations

from pipelines.build.context import BuildContext


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds Conveyor's Pusher, which publishes a blessed model under `paths.serving_dir`, and
    publishes its `pushed_model`. `evaluation.first_run` decides whether a model blessed with no
    baseline (the very first) is pushed."""
    from tfx.proto import pusher_pb2

    from components.pusher.component import Pusher

    base = str(ctx.paths.serving_dir)
    node = Pusher(
        model=ctx.need("model", node_id),
        model_blessing=ctx.need("blessing", node_id),
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base)
        ),
        custom_config={
            "serving_base_dir": base,
            "first_run_policy": ctx.spec.evaluation.first_run.value,
        },
    ).with_id(node_id)
    ctx.add(node)
    ctx.provide("pushed_model", node.outputs["pushed_model"])
