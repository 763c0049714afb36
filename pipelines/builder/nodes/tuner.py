"""tuner: TFX's Tuner on the nights `tuning.retune` says to tune, and on the others a resolver
that hands the Trainer the last tuned hyperparameters in ML Metadata.

Whether a night tunes is decided here, from the spec and the night alone (never from ML
Metadata), so building stays pure and the same for every orchestrator that builds per night.
"""

from __future__ import annotations

import datetime

from pipelines.builder.context import BuildContext, code_version, user_code
from pipelines.spec.models import Orchestrator, PipelineSpec, Retune

GENERIC_TUNER_FN = "components.tuner.generic.tuner_fn"
# The resolver's id when a night does not tune: `<tuner's id>_latest`.
LATEST_SUFFIX = "_latest"
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def night_of(spec: PipelineSpec, span: int | None, today: datetime.date) -> datetime.date:
    """The night a run stands for: its dated span's date, else `today` (UTC)."""
    from pipelines.builder.spans import date_of_span

    if span is not None and spec.data.dated_spans:
        return date_of_span(span)
    return today


def tuning_due(spec: PipelineSpec, target: Orchestrator, night: datetime.date) -> bool:
    """Whether this night's pipeline runs the Tuner (`tuning.retune`).

    `weekly` tunes on `tuning.weekday`; Airflow and Kubeflow build the pipeline once for every
    night, so there it tunes only with `always`.
    """
    tuning = spec.tuning
    assert tuning is not None  # the spec validated a `tuner` component with its block
    if tuning.retune is Retune.ALWAYS:
        return True
    if tuning.retune is Retune.REUSE or target is not Orchestrator.LOCAL:
        return False
    return _WEEKDAYS[night.weekday()] == tuning.weekday.value


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds the Tuner (a tuning night) or the latest-hyperparameters resolver (any other night)
    and publishes `hyperparameters` for the Trainer.

    Conveyor's trainer is tuned by Conveyor's `tuner_fn` (components/tuner/generic.py) through
    a Tuner that also reads the statistics; a run_fn `trainer.module` is tuned by its own
    `tuner_fn` through TFX's Tuner unchanged, with Transform's graph when one runs. Each trial
    trains `tuning.trial_steps` steps; the Tuner runs after every gate, as the Trainer does.
    """
    from pipelines.spec.user_code import Contract, trainer_contract

    spec = ctx.spec
    tuning = spec.tuning
    today = datetime.datetime.now(datetime.timezone.utc).date()
    if not tuning_due(spec, ctx.target, night_of(spec, ctx.span, today)):
        if tuning.retune is Retune.WEEKLY and ctx.target is not Orchestrator.LOCAL:
            ctx.note(node_id, "retune weekly -> reuse: the pipeline is built once, not per night")
        _reuse_latest(ctx, node_id)
        return
    from tfx.proto import trainer_pb2

    train_args = trainer_pb2.TrainArgs(num_steps=tuning.trial_steps)
    eval_args = trainer_pb2.EvalArgs(num_steps=spec.trainer.eval_steps)
    module = spec.trainer.module
    if module is not None and trainer_contract(module) is Contract.TFX_RUN_FN:
        from tfx.components.tuner.component import Tuner as TfxTuner

        with_transform = ctx.has("transformed_examples")
        node = TfxTuner(
            examples=ctx.need("transformed_examples" if with_transform else "examples", node_id),
            schema=ctx.need("schema", node_id),
            transform_graph=ctx.need("transform_graph", node_id) if with_transform else None,
            tuner_fn=f"{module}.tuner_fn",
            train_args=train_args,
            eval_args=eval_args,
            custom_config=dict(spec.trainer.config),
        ).with_id(node_id)
    else:
        from components.tuner.component import Tuner

        node = Tuner(
            examples=ctx.need("examples", node_id),
            schema=ctx.need("schema", node_id),
            statistics=ctx.need("statistics", node_id),
            tuner_fn=GENERIC_TUNER_FN,
            train_args=train_args,
            eval_args=eval_args,
            custom_config={
                "trainer": spec.trainer.model_dump(mode="json"),
                "tuning": tuning.model_dump(mode="json"),
                "code_version": code_version(user_code(spec, "trainer")),
            },
        ).with_id(node_id)
    for gate in ctx.gates:  # a gate that fails stops the run before any trial trains
        node.add_upstream_node(gate)
    ctx.add(node)
    ctx.provide("hyperparameters", node.outputs["best_hyperparameters"])


def _reuse_latest(ctx: BuildContext, node_id: str) -> None:
    """TFX's Resolver with LatestArtifactStrategy over the pipeline's HyperParameters: the last
    tuned ones, or none before any night tuned (the Trainer then trains with the spec's values).
    Every orchestrator runs this strategy, Kubeflow included."""
    from tfx.dsl.components.common.resolver import Resolver
    from tfx.dsl.input_resolution.strategies.latest_artifact_strategy import (
        LatestArtifactStrategy,
    )
    from tfx.types import standard_artifacts
    from tfx.types.channel import Channel

    node = Resolver(
        strategy_class=LatestArtifactStrategy,
        hyperparameters=Channel(type=standard_artifacts.HyperParameters),
    ).with_id(node_id + LATEST_SUFFIX)
    ctx.add(node)
    ctx.provide("hyperparameters", node.outputs["hyperparameters"])
