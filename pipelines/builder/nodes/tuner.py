"""tuner: TFX's Tuner on the nights that tune, and on the others a resolver that hands the
Trainer the last tuned hyperparameters in ML Metadata.

A night tunes for one reason, a `TuneReason`: `tuning.retune` says so (`always`, or `weekly` on
its weekday), or ML Metadata says the search is missing or stale: no search completed yet, or
the schema tonight trains under differs from the one the last search read
(`tuning.retune_on_schema_change`). ML Metadata is read when the pipeline is built, as
`schema_gen` reads it for the schema to import: `conveyor run` reads the runner's store before
it runs, an Airflow DAG whenever Airflow parses its file. A Kubeflow pipeline is compiled
without access to the metadata KFP keeps, so there only the spec decides.
"""

from __future__ import annotations

import datetime
import enum

from pipelines.builder.context import BuildContext, code_version, user_code
from pipelines.spec.models import Orchestrator, PipelineSpec, Retune, SchemaSource

GENERIC_TUNER_FN = "components.tuner.generic.tuner_fn"
# The resolver's id when a night does not tune: `<tuner's id>_latest`.
LATEST_SUFFIX = "_latest"
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


class TuneReason(str, enum.Enum):
    """Why a night runs the Tuner."""

    ALWAYS = "always"  # tuning.retune: always
    WEEKDAY = "weekday"  # tuning.retune: weekly, and tonight is tuning.weekday
    NONE_TUNED = "none_tuned"  # ML Metadata holds no completed search of this tuner
    SCHEMA_CHANGED = "schema_changed"  # tonight's schema is not the last search's


def night_of(spec: PipelineSpec, span: int | None, today: datetime.date) -> datetime.date:
    """The night a run stands for: its dated span's date, else `today` (UTC)."""
    from pipelines.builder.spans import date_of_span

    if span is not None and spec.data.dated_spans:
        return date_of_span(span)
    return today


def tuning_due(spec: PipelineSpec, target: Orchestrator, night: datetime.date) -> bool:
    """Whether the spec alone schedules a search tonight (`tuning.retune`).

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


def tune_reason(ctx: BuildContext, node_id: str, night: datetime.date) -> TuneReason | None:
    """Why tonight tunes, or None when it reuses the last search (module docstring)."""
    spec = ctx.spec
    if tuning_due(spec, ctx.target, night):
        return TuneReason.ALWAYS if spec.tuning.retune is Retune.ALWAYS else TuneReason.WEEKDAY
    if ctx.target is Orchestrator.KUBEFLOW:
        return None
    from pipelines.core.metadata import last_tuning, open_store

    store = open_store(spec, ctx.paths.metadata_path)
    last = last_tuning(store, spec.name, node_id) if store is not None else None
    if last is None:
        return TuneReason.NONE_TUNED
    if spec.tuning.retune_on_schema_change and _schema_changed(ctx, last.schema_uri):
        return TuneReason.SCHEMA_CHANGED
    return None


def _schema_changed(ctx: BuildContext, searched_schema_uri: str | None) -> bool:
    """Whether the schema tonight trains under holds other bytes than the one the last search
    read. Tonight's is known before the run: the curated file, or the last accepted run's
    (what `schema_gen` imports); before any run was accepted it is not, and nothing changed."""
    from pipelines.builder.nodes.schema_gen import previous_schema
    from pipelines.core import storage
    from pipelines.core.metadata import SCHEMA_FILE
    from pipelines.core.paths import project_file

    if searched_schema_uri is None:
        return False
    schema = ctx.spec.schema_
    if schema.source is SchemaSource.FILE:
        tonight = str(project_file(schema.path))
    else:
        accepted = previous_schema(ctx.spec, ctx.paths)
        if accepted is None:
            return False
        tonight = str(accepted.file)
    searched = f"{searched_schema_uri.rstrip('/')}/{SCHEMA_FILE}"
    if not storage.exists(searched):  # the search's schema was cleaned away: search again
        return True
    return storage.read_bytes(tonight) != storage.read_bytes(searched)


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
    reason = tune_reason(ctx, node_id, night_of(spec, ctx.span, today))
    if reason is None:
        if tuning.retune is Retune.WEEKLY and ctx.target is not Orchestrator.LOCAL:
            ctx.note(node_id, "retune weekly -> reuse: the pipeline is built once, not per night")
        _reuse_latest(ctx, node_id)
        return
    ctx.note(node_id, f"tunes: {reason.value}")
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
