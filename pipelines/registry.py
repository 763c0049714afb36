"""Component registry: a spec's component `type` -> the function that builds that TFX node.

Each builder takes the BuildContext, reads the channels it needs by role (`examples`, `schema`,
`model`...), adds its node and publishes its own outputs by role. The spec's `components` list
is the pipeline's order; enabling or removing a component is a change to that list, never to
code. Builders import TFX inside their bodies so that `pipelines.registry` itself stays cheap to
import (the command line lists and validates without TensorFlow), and they import each TFX name
from its own module, never through `tfx.v1`: that package also imports its Google Cloud
extensions (the Vertex AI client), about 8 of the 25 s a run spent importing here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.spec import BadRows, CsvReader, PipelineSpec, SchemaSource

TRAINER_RUN_FN = "components.trainer.run.run_fn"
CODE_PACKAGES = ("components",)


class BuildError(ValueError):
    """The spec's components cannot be wired together; the message says which and why."""


@dataclass(frozen=True)
class RunPaths:
    """Absolute locations of one pipeline's inputs and outputs under a working directory."""

    workdir: Path
    spec: PipelineSpec

    @property
    def input_dir(self) -> Path:
        return self.workdir / self.spec.data.input_dir

    @property
    def pipeline_root(self) -> Path:
        return self.workdir / "pipeline_root" / self.spec.name

    @property
    def serving_dir(self) -> Path:
        """TF Serving's model base path: versions appear as `<serving_dir>/<n>/`."""
        return self.workdir / self.spec.push.base_dir / self.spec.push.model_name

    @property
    def metadata_path(self) -> Path:
        return self.workdir / self.spec.runtime.metadata.path

    @property
    def runs_dir(self) -> Path:
        return self.workdir / "runs" / self.spec.name


@dataclass
class BuildContext:
    spec: PipelineSpec
    paths: RunPaths
    # The span this run ingests (None: the spec has no spans, or ExampleGen takes the latest).
    span: int | None = None
    channels: dict[str, Any] = field(default_factory=dict)
    nodes: list[Any] = field(default_factory=list)
    gates: list[Any] = field(default_factory=list)
    # The examples come with the Arrow reader's Parquet copy (see components/statistics_gen).
    columnar_examples: bool = False

    def need(self, role: str, component_id: str) -> Any:
        if role not in self.channels:
            providers = sorted(t for t, b in BUILDERS.items() if role in b.provides)
            raise BuildError(
                f"component {component_id!r} needs {role!r}, which no earlier component "
                f"provides; list one of {providers} before it in `components`."
            )
        return self.channels[role]


@dataclass(frozen=True)
class ComponentBuilder:
    build: Callable[[BuildContext, str], None]
    provides: tuple[str, ...]


def code_version() -> str:
    """Digest of Conveyor's component code: a code change invalidates the cached outputs of
    the nodes that record it (the Trainer, the Arrow reader)."""
    from pipelines.config import source_digest

    return source_digest(CODE_PACKAGES, (".py",))[:16]


def use_arrow_reader(spec: PipelineSpec, input_dir: Path) -> bool:
    """`data.reader` resolved: `auto` streams with Arrow for big inputs or skipped rows."""
    data = spec.data
    if data.reader is not CsvReader.AUTO:
        return data.reader is CsvReader.ARROW
    if data.bad_rows is BadRows.SKIP:
        return True
    size = sum(p.stat().st_size for p in input_dir.glob("*") if p.is_file())
    return size > data.arrow_above_megabytes * (1 << 20)


def _example_gen(ctx: BuildContext, node_id: str) -> None:
    from tfx.components import CsvExampleGen
    from tfx.proto import example_gen_pb2, range_config_pb2

    splits = [
        example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=buckets)
        for name, buckets in ctx.spec.data.splits.items()
    ]
    split_config = example_gen_pb2.SplitConfig(splits=splits)
    if ctx.spec.data.split_key:  # even an empty name would count as set in the proto
        split_config.partition_feature_name = ctx.spec.data.split_key
    output_config = example_gen_pb2.Output(split_config=split_config)
    spanned: dict[str, Any] = {}
    if ctx.spec.data.span_pattern:
        # One input split read from the span's files; ExampleGen's driver substitutes the span
        # and records it (and the files' fingerprint) on the Examples artifact.
        pattern = ctx.spec.data.span_pattern
        spanned["input_config"] = example_gen_pb2.Input(
            splits=[example_gen_pb2.Input.Split(name="single_split", pattern=pattern)]
        )
        if ctx.span is not None:
            spanned["range_config"] = range_config_pb2.RangeConfig(
                static_range=range_config_pb2.StaticRange(
                    start_span_number=ctx.span, end_span_number=ctx.span
                )
            )
    if use_arrow_reader(ctx.spec, ctx.paths.input_dir):
        from components.arrow_example_gen.component import ArrowCsvExampleGen

        node = ArrowCsvExampleGen(
            input_base=str(ctx.paths.input_dir),
            output_config=output_config,
            bad_rows=ctx.spec.data.bad_rows.value,
            code_version=code_version(),
            **spanned,
        )
        ctx.columnar_examples = True
    else:
        node = CsvExampleGen(
            input_base=str(ctx.paths.input_dir), output_config=output_config, **spanned
        )
    node = node.with_id(node_id)
    ctx.nodes.append(node)
    ctx.channels["examples"] = node.outputs["examples"]


def _statistics_gen(ctx: BuildContext, node_id: str) -> None:
    from tfx.components import StatisticsGen

    examples = ctx.need("examples", node_id)
    if ctx.columnar_examples:
        # The Arrow reader left a Parquet copy of the examples: read it instead of decoding
        # every tf.Example again (components/statistics_gen).
        from components.statistics_gen.component import ColumnarStatisticsGen

        node = ColumnarStatisticsGen(examples=examples).with_id(node_id)
    else:
        node = StatisticsGen(examples=examples).with_id(node_id)
    ctx.nodes.append(node)
    ctx.channels["statistics"] = node.outputs["statistics"]


def _schema_gen(ctx: BuildContext, node_id: str) -> None:
    from tfx.components import SchemaGen
    from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen

    from pipelines.config import PROJECT_ROOT

    if ctx.spec.schema_.source is SchemaSource.FILE:
        node = ImportSchemaGen(schema_file=str(PROJECT_ROOT / str(ctx.spec.schema_.path)))
    else:
        node = SchemaGen(statistics=ctx.need("statistics", node_id), infer_feature_shape=False)
    node = node.with_id(node_id)
    ctx.nodes.append(node)
    ctx.channels["schema"] = node.outputs["schema"]


def _example_validator(ctx: BuildContext, node_id: str) -> None:
    from tfx.components import ExampleValidator

    node = ExampleValidator(
        statistics=ctx.need("statistics", node_id), schema=ctx.need("schema", node_id)
    ).with_id(node_id)
    ctx.nodes.append(node)
    ctx.channels["anomalies"] = node.outputs["anomalies"]


def _data_gate(ctx: BuildContext, node_id: str) -> None:
    import json

    from components.data_gate.component import DataGate
    from pipelines import spans

    data = ctx.spec.data
    serving_dir = str(ctx.paths.workdir / data.serving_data_dir) if data.serving_data_dir else None
    node = DataGate(
        anomalies=ctx.need("anomalies", node_id),
        statistics=ctx.need("statistics", node_id),
        schema=ctx.need("schema", node_id),
        examples=ctx.need("examples", node_id),
        previous_statistics=ctx.need("previous_statistics", node_id) if data.drift else None,
        previous_examples=ctx.need("previous_examples", node_id) if data.drift else None,
        input_base=str(ctx.paths.input_dir),
        data_description=spans.describe(ctx.spec, ctx.span),
        thresholds=json.dumps(
            {"drift": data.drift, "skew": data.skew, "serving_data_dir": serving_dir},
            sort_keys=True,
        ),
    ).with_id(node_id)
    ctx.nodes.append(node)
    ctx.gates.append(node)


def _span_resolver(
    ctx: BuildContext,
    node_id: str,
    strategy_class: type,
    role: str,
    provides: str,
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
    ctx.nodes.append(node)
    ctx.channels[provides] = node.outputs[role]
    return node


def _span_window_resolver(ctx: BuildContext, node_id: str) -> None:
    """This span and the accepted ones before it, `data.window_spans` in all: what the Trainer
    learns from."""
    from components.spans import strategy

    _span_resolver(
        ctx,
        node_id,
        strategy.TrainingWindowStrategy,
        strategy.EXAMPLES_KEY,
        "training_examples",
        config={"num_spans": ctx.spec.data.window_spans},
    )


def _drift_baseline_resolver(ctx: BuildContext, node_id: str) -> None:
    """The statistics of the last span that passed the data gate: what drift is measured from."""
    from tfx.types import standard_artifacts
    from tfx.types.channel import Channel

    from components.spans import strategy

    node = _span_resolver(
        ctx,
        node_id,
        strategy.AcceptedPreviousStatisticsStrategy,
        strategy.STATISTICS_KEY,
        "previous_statistics",
        extra_channels={strategy.SOURCE_EXAMPLES_KEY: Channel(type=standard_artifacts.Examples)},
    )
    ctx.channels["previous_examples"] = node.outputs[strategy.SOURCE_EXAMPLES_KEY]


def _trainer(ctx: BuildContext, node_id: str) -> None:
    from tfx.proto import trainer_pb2

    from components.trainer.component import Trainer

    trainer = ctx.spec.trainer
    examples_role = "training_examples" if "training_examples" in ctx.channels else "examples"
    node = Trainer(
        examples=ctx.need(examples_role, node_id),
        schema=ctx.need("schema", node_id),
        statistics=ctx.need("statistics", node_id),
        run_fn=TRAINER_RUN_FN,
        train_args=trainer_pb2.TrainArgs(num_steps=trainer.train_steps),
        eval_args=trainer_pb2.EvalArgs(num_steps=trainer.eval_steps),
        custom_config={
            "trainer": trainer.model_dump(mode="json"),
            "code_version": code_version(),
        },
        base_model=ctx.need("warm_start_model", node_id) if trainer.warm_start else None,
    ).with_id(node_id)
    for gate in ctx.gates:  # a gate that fails stops the run before any training
        node.add_upstream_node(gate)
    ctx.nodes.append(node)
    ctx.channels["model"] = node.outputs["model"]


def _served_model_resolver(
    ctx: BuildContext,
    node_id: str,
    strategy_class: type,
    anchor: tuple[str, str],
    provides: str,
) -> None:
    """A Resolver over every Model and push of the pipeline, anchored to this run's channel
    `anchor = (input key, role)`, which also orders it after that channel's producer."""
    from tfx.dsl.components.common.resolver import Resolver
    from tfx.types import standard_artifacts
    from tfx.types.channel import Channel

    from components.baseline.strategy import MODEL_KEY, PUSH_KEY

    anchor_key, anchor_role = anchor
    node = Resolver(
        strategy_class=strategy_class,
        **{
            anchor_key: ctx.need(anchor_role, node_id),
            MODEL_KEY: Channel(type=standard_artifacts.Model),
            PUSH_KEY: Channel(type=standard_artifacts.PushedModel),
        },
    ).with_id(node_id)
    ctx.nodes.append(node)
    ctx.channels[provides] = node.outputs[MODEL_KEY]


def _baseline_resolver(ctx: BuildContext, node_id: str) -> None:
    """The served model other than the candidate: what the Evaluator compares against."""
    from components.baseline import strategy

    _served_model_resolver(
        ctx,
        node_id,
        strategy.ServedModelStrategy,
        (strategy.CANDIDATE_KEY, "model"),
        "baseline_model",
    )


def _warm_start_resolver(ctx: BuildContext, node_id: str) -> None:
    """The served model not trained on this run's examples: what the Trainer starts from."""
    from components.baseline import strategy

    _served_model_resolver(
        ctx,
        node_id,
        strategy.WarmStartModelStrategy,
        (strategy.EXAMPLES_KEY, "examples"),
        "warm_start_model",
    )


def eval_config(spec: PipelineSpec):
    """The TFMA EvalConfig the spec's `evaluation` section describes."""
    import tensorflow_model_analysis as tfma

    from components.trainer.model import LABEL_SUFFIX, PREDICTION_KEY

    metrics = []
    for metric in spec.evaluation.metrics:
        threshold = tfma.MetricThreshold()
        bounds = {}
        if metric.lower_bound is not None:
            bounds["lower_bound"] = {"value": metric.lower_bound}
        if metric.upper_bound is not None:
            bounds["upper_bound"] = {"value": metric.upper_bound}
        if bounds:
            threshold.value_threshold.CopyFrom(tfma.GenericValueThreshold(**bounds))
        if metric.change is not None:
            change = tfma.GenericChangeThreshold(
                direction=(
                    tfma.MetricDirection.HIGHER_IS_BETTER
                    if metric.change.direction.value == "higher_is_better"
                    else tfma.MetricDirection.LOWER_IS_BETTER
                )
            )
            if metric.change.absolute is not None:
                change.absolute.value = metric.change.absolute
            if metric.change.relative is not None:
                change.relative.value = metric.change.relative
            threshold.change_threshold.CopyFrom(change)
        gated = bounds or metric.change is not None
        # Thresholds gate the whole evaluation set; the other slices are there to be read (a
        # slice of a few rows would otherwise block every push by chance).
        per_slice = (
            [tfma.PerSliceMetricThreshold(slicing_specs=[tfma.SlicingSpec()], threshold=threshold)]
            if gated
            else []
        )
        metrics.append(tfma.MetricConfig(class_name=metric.name, per_slice_thresholds=per_slice))
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name="serving_examples",
                label_key=spec.trainer.label + LABEL_SUFFIX,
                prediction_key=PREDICTION_KEY[spec.trainer.task.value],
                preprocessing_function_names=["transform_features"],
            )
        ],
        slicing_specs=[tfma.SlicingSpec(feature_keys=list(s)) for s in spec.evaluation.slices],
        metrics_specs=[tfma.MetricsSpec(metrics=metrics)],
    )


def _evaluator(ctx: BuildContext, node_id: str) -> None:
    from tfx.components import Evaluator

    node = Evaluator(
        examples=ctx.need("examples", node_id),
        model=ctx.need("model", node_id),
        baseline_model=ctx.channels.get("baseline_model"),
        eval_config=eval_config(ctx.spec),
    ).with_id(node_id)
    ctx.nodes.append(node)
    ctx.channels["blessing"] = node.outputs["blessing"]


def _pusher(ctx: BuildContext, node_id: str) -> None:
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
            "keep_versions": ctx.spec.push.keep_versions or 0,
        },
    ).with_id(node_id)
    ctx.nodes.append(node)
    ctx.channels["pushed_model"] = node.outputs["pushed_model"]


BUILDERS: dict[str, ComponentBuilder] = {
    "csv_example_gen": ComponentBuilder(_example_gen, ("examples",)),
    "statistics_gen": ComponentBuilder(_statistics_gen, ("statistics",)),
    "schema_gen": ComponentBuilder(_schema_gen, ("schema",)),
    "example_validator": ComponentBuilder(_example_validator, ("anomalies",)),
    "drift_baseline_resolver": ComponentBuilder(_drift_baseline_resolver, ("previous_statistics",)),
    "data_gate": ComponentBuilder(_data_gate, ()),
    "span_window_resolver": ComponentBuilder(_span_window_resolver, ("training_examples",)),
    "warm_start_resolver": ComponentBuilder(_warm_start_resolver, ("warm_start_model",)),
    "trainer": ComponentBuilder(_trainer, ("model",)),
    "baseline_resolver": ComponentBuilder(_baseline_resolver, ("baseline_model",)),
    "evaluator": ComponentBuilder(_evaluator, ("blessing",)),
    "pusher": ComponentBuilder(_pusher, ("pushed_model",)),
}

KNOWN_TYPES = tuple(BUILDERS)


def build_nodes(spec: PipelineSpec, paths: RunPaths, span: int | None = None) -> list[Any]:
    """The TFX nodes of the spec's `components`, in order, wired by role; `span` pins the span
    ExampleGen ingests (None: all files, or the latest span)."""
    ctx = BuildContext(spec=spec, paths=paths, span=span)
    for component in spec.components:
        BUILDERS[component.type].build(ctx, component.id)
    return ctx.nodes
