"""pusher: publishes a blessed model as the next TF Serving version, atomically."""

from __future__ import annotations

from pipelines.builder.context import BuildContext

# The push keys the Pusher needs to keep TF Serving's configs (pipelines/serving_state); only
# these, so that changing, say, push.deploy does not make the Pusher a cache miss.
LABEL_KEYS = (
    "base_dir",
    "model_name",
    "version_policy",
    "labels",
    "after_rollback",
    "batching",
    "monitoring_path",
    "serving_urls",
    "serving_wait_seconds",
)


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds Conveyor's Pusher, which publishes a blessed model under `paths.serving_dir`, and
    publishes its `pushed_model`. `evaluation.first_run` decides whether a model blessed with no
    baseline (the very first) is pushed; with an infra validator before it, only a model that it
    blessed is."""
    from tfx.proto import pusher_pb2

    from components.pusher.component import Pusher

    base = str(ctx.paths.serving_dir)
    # A TF Lite converter before the Pusher: its passing model.tflite goes inside the version; a
    # failed one blocks the push only with push.tflite.required (components/tflite).
    tflite = ctx.need("tflite_model", node_id) if ctx.has("tflite_model") else None
    node = Pusher(
        model=ctx.need("model", node_id),
        model_blessing=ctx.need("blessing", node_id),
        # An infra validator listed before the Pusher: TFX's CheckBlessing then needs both.
        infra_blessing=ctx.need("infra_blessing", node_id) if ctx.has("infra_blessing") else None,
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base)
        ),
        custom_config={
            "serving_base_dir": base,
            "first_run_policy": ctx.spec.evaluation.first_run.value,
            "serving_config_dir": str(ctx.paths.serving_config_dir),
            "push": ctx.spec.push.model_dump(mode="json", include=set(LABEL_KEYS)),
            **({"tflite_required": ctx.spec.push.tflite.required} if tflite else {}),
            **_blessings_recorded(ctx),
        },
        tflite_model=tflite,
        kubeflow_run=_decision_written(ctx),
    ).with_id(node_id)
    ctx.add(node)
    ctx.provide("pushed_model", node.outputs["pushed_model"])


def _blessings_recorded(ctx: BuildContext) -> dict:
    """On Kubeflow with a training window: the record of accepted spans, where the Pusher notes
    whether each night's model was blessed (what the next nights' window asks)."""
    from components.spans.accepted import ACCEPTED_SPANS_KEY
    from pipelines.builder.nodes.data_gate import accepted_spans_dir
    from pipelines.spec.components import Orchestrator

    if ctx.target is not Orchestrator.KUBEFLOW or ctx.spec.data.window_spans <= 1:
        return {}
    return {ACCEPTED_SPANS_KEY: accepted_spans_dir(ctx)}


def _decision_written(ctx: BuildContext) -> dict[str, str] | None:
    """On Kubeflow: the run's folder, named by KFP's job name placeholders, where the Pusher
    writes its decision for the exit handler to record in Conveyor's store (as the data gate
    writes its refusal, pipelines/builder/nodes/data_gate.py)."""
    from components.pusher import executor
    from pipelines.spec.components import Orchestrator

    if ctx.target is not Orchestrator.KUBEFLOW:
        return None
    return {
        executor.RUNS_DIR_KEY: str(ctx.paths.runs_dir),
        executor.JOB_NAME_KEY: "{{$.pipeline_job_name}}",
        executor.JOB_RESOURCE_NAME_KEY: "{{$.pipeline_job_resource_name}}",
    }
