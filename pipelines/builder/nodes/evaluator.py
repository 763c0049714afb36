"""evaluator: TFMA over the evaluation split, candidate against baseline: the model gate."""

from __future__ import annotations

from pipelines.builder.context import BuildContext
from pipelines.spec.models import PipelineSpec


def eval_config(spec: PipelineSpec):
    """The TFMA EvalConfig the spec's `evaluation` section describes; with
    `evaluation.confidence`, TFMA also computes confidence intervals by the chosen method."""
    import tensorflow_model_analysis as tfma

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
    options = None
    confidence = spec.evaluation.confidence
    if confidence is not None:
        from google.protobuf import wrappers_pb2

        method = tfma.ConfidenceIntervalOptions
        options = tfma.Options(
            compute_confidence_intervals=wrappers_pb2.BoolValue(value=True),
            confidence_intervals=method(
                method=method.JACKKNIFE
                if confidence.method.value == "jackknife"
                else method.POISSON_BOOTSTRAP
            ),
        )
    return tfma.EvalConfig(
        model_specs=[_model_spec(spec)],
        slicing_specs=[tfma.SlicingSpec(feature_keys=list(s)) for s in spec.evaluation.slices],
        metrics_specs=[tfma.MetricsSpec(metrics=metrics)],
        options=options,
    )


def _model_spec(spec: PipelineSpec):
    """How TFMA calls the model. Conveyor's trainer exports `serving_examples` and a label
    encoder; a TFX `run_fn` module follows TFX's convention instead: `serving_default` takes
    serialized tf.Examples, the label is the raw column, and with Transform the module exports
    `transform_features` (TFMA evaluates raw examples through it)."""
    import tensorflow_model_analysis as tfma

    from components.trainer.model import LABEL_SUFFIX, PREDICTION_KEY
    from pipelines.spec.user_code import Contract, trainer_contract

    module = spec.trainer.module
    if module is not None and trainer_contract(module) is Contract.TFX_RUN_FN:
        return tfma.ModelSpec(
            signature_name="serving_default",
            label_key=spec.trainer.label,
            preprocessing_function_names=["transform_features"] if spec.transform else [],
        )
    return tfma.ModelSpec(
        signature_name="serving_examples",
        label_key=spec.trainer.label + LABEL_SUFFIX,
        prediction_key=PREDICTION_KEY[spec.trainer.task.value],
        preprocessing_function_names=["transform_features"],
    )


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds TFX's Evaluator with the spec's `eval_config`, against the baseline model when a
    baseline resolver provides one, and publishes its `blessing` for the Pusher. With
    `evaluation.confidence` set, Conveyor's Evaluator (TFX's, plus change thresholds judged with
    TFMA's confidence intervals) takes its place under the same id and outputs (TFMA computes
    intervals, so `evaluation.engine` does not apply there)."""
    inputs = {
        "examples": ctx.need("examples", node_id),
        "model": ctx.need("model", node_id),
        "baseline_model": ctx.channels.get("baseline_model"),
        "eval_config": eval_config(ctx.spec),
    }
    confidence = ctx.spec.evaluation.confidence
    if confidence is None:
        from tfx.components import Evaluator
        from tfx.dsl.components.base import executor_spec

        from components.evaluator.executor import (
            AutoEngineExecutor,
            Executor,
            VectorizedEngineExecutor,
        )

        node = Evaluator(**inputs).with_id(node_id)
        # Conveyor's executor: TFX's (or the vectorized engine, per `evaluation.engine`), then
        # the overall metrics recorded on the evaluation for the history page (with no
        # confidence level it judges nothing).
        executor = {
            "tfma": Executor,
            "auto": AutoEngineExecutor,
            "vectorized": VectorizedEngineExecutor,
        }[ctx.spec.evaluation.engine.value]
        node.executor_spec = executor_spec.BeamExecutorSpec(executor)
    else:
        from components.evaluator.component import Evaluator

        node = Evaluator(**inputs, confidence_level=confidence.level).with_id(node_id)
    ctx.add(node)
    ctx.provide("blessing", node.outputs["blessing"])
