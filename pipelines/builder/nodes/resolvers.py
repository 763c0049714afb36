"""The resolvers: which earlier artifacts a run reads (spans for the window and for drift, the
served model for warm start and as the evaluation baseline).

Conveyor's own strategies (components/spans, components/baseline) read ML Metadata from the
executing process. Kubeflow Pipelines runs resolvers as queries of its own and knows only
TFX's LatestArtifact and LatestBlessedModel strategies, so each build function says what it
builds there instead: the served model comes from Conveyor's ServedModel component, which
reads the serving folder (see `pipelines.spec.components` for the table of these choices).
"""

from __future__ import annotations

from typing import Any

from pipelines.builder.context import BuildContext
from pipelines.spec.components import Orchestrator


def _span_resolver(
    ctx: BuildContext,
    node_id: str,
    strategy_class: type,
    role: str,
    config: dict[str, Any] | None = None,
    extra_channels: dict[str, Any] | None = None,
):
    """A Resolver over every artifact of `role`'s type in the pipeline, anchored to this run's."""
    from tfx.dsl.components.common.resolver import Resolver
    from tfx.types.channel import Channel

    from components.spans.strategy import CANDIDATES_KEY

    anchor = ctx.need(role, node_id)
    node = Resolver(
        strategy_class=strategy_class,
        config=config or {},
        **{role: anchor, CANDIDATES_KEY: Channel(type=anchor.type)},
        **(extra_channels or {}),
    ).with_id(node_id)
    return ctx.add(node)


def build_span_window(ctx: BuildContext, node_id: str) -> None:
    """This span and the accepted ones before it, `data.window_spans` in all: what the Trainer
    learns from."""
    if ctx.target is Orchestrator.KUBEFLOW:
        ctx.note(
            node_id,
            "no node: Conveyor's Trainer reads the window from the record of accepted spans",
        )
        ctx.provide("training_examples", ctx.need("examples", node_id))
        return
    from components.spans import strategy

    node = _span_resolver(
        ctx,
        node_id,
        strategy.TrainingWindowStrategy,
        strategy.EXAMPLES_KEY,
        config={"num_spans": ctx.spec.data.window_spans},
    )
    ctx.provide("training_examples", node.outputs[strategy.EXAMPLES_KEY])


def build_drift_baseline(ctx: BuildContext, node_id: str) -> None:
    """The statistics of the last span that passed the data gate: what drift is measured from."""
    if ctx.target is Orchestrator.KUBEFLOW:
        ctx.note(node_id, "no node: the data gate reads the record of accepted spans")
        return
    from tfx.types import standard_artifacts
    from tfx.types.channel import Channel

    from components.spans import strategy

    node = _span_resolver(
        ctx,
        node_id,
        strategy.AcceptedPreviousStatisticsStrategy,
        strategy.STATISTICS_KEY,
        extra_channels={strategy.SOURCE_EXAMPLES_KEY: Channel(type=standard_artifacts.Examples)},
    )
    ctx.provide("previous_statistics", node.outputs[strategy.STATISTICS_KEY])
    ctx.provide("previous_examples", node.outputs[strategy.SOURCE_EXAMPLES_KEY])


def _served_model_resolver(
    ctx: BuildContext, node_id: str, strategy_class: type, anchor: tuple[str, str]
):
    """A Resolver over every Model and push of the pipeline, anchored to this run's channel
    `anchor = (input key, role)`, which also orders it after that channel's producer. On
    Kubeflow, which runs no strategy of ours, Conveyor's ServedModel reads the served version
    from the serving folder every task reaches (components/baseline/served.py)."""
    from tfx.dsl.components.common.resolver import Resolver
    from tfx.types import standard_artifacts
    from tfx.types.channel import Channel

    from components.baseline.strategy import MODEL_KEY, PUSH_KEY

    if ctx.target is Orchestrator.KUBEFLOW:
        from components.baseline.served import ServedModel

        ctx.note(node_id, f"{strategy_class.__name__} -> ServedModel (the serving folder)")
        node = ServedModel(
            serving_dir=str(ctx.paths.serving_dir),
            serving_config_dir=str(ctx.paths.serving_config_dir),
            model_name=ctx.spec.push.model_name,
        ).with_id(node_id)
        return ctx.add(node).outputs["model"]
    anchor_key, anchor_role = anchor
    node = Resolver(
        strategy_class=strategy_class,
        **{
            anchor_key: ctx.need(anchor_role, node_id),
            MODEL_KEY: Channel(type=standard_artifacts.Model),
            PUSH_KEY: Channel(type=standard_artifacts.PushedModel),
        },
    )
    node = ctx.add(node.with_id(node_id))
    return node.outputs[MODEL_KEY]


def build_baseline(ctx: BuildContext, node_id: str) -> None:
    """The served model other than the candidate: what the Evaluator compares against."""
    from components.baseline import strategy

    model = _served_model_resolver(
        ctx, node_id, strategy.ServedModelStrategy, (strategy.CANDIDATE_KEY, "model")
    )
    ctx.provide("baseline_model", model)


def build_warm_start(ctx: BuildContext, node_id: str) -> None:
    """The served model not trained on this run's examples: what the Trainer starts from."""
    from components.baseline import strategy

    model = _served_model_resolver(
        ctx, node_id, strategy.WarmStartModelStrategy, (strategy.EXAMPLES_KEY, "examples")
    )
    ctx.provide("warm_start_model", model)
