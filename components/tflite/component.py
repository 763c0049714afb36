"""The TF Lite converter: a TF Lite copy of the blessed candidate, checked against it.

TFX 1.16 ships no TF Lite component. Its `TFLiteRewriter` (tfx/components/trainer/rewriting) is
a library a `run_fn` calls to replace its own export with the conversion, before any evaluation;
it removes the SavedModel's assets/ before converting (a lookup that reads its vocabulary file
from assets/, as Transform's do, then fails) and cannot add TF ops (`SELECT_TF_OPS`) for what TF
Lite has no kernel of its own for. This component calls TF's `tf.lite.TFLiteConverter` itself,
after the Evaluator and the infra
validator, and writes a `TFLiteModel` artifact of its own type (never a `Model`, which the
baseline and warm-start resolvers would take for a candidate); the Pusher reads its verdict (see
executor.py and artifact.py).
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.tflite import executor
from components.tflite.artifact import TFLITE_MODEL_KEY, TFLiteModel


class TfLiteConverterSpec(ComponentSpec):
    """Inputs, output and parameters of the TF Lite converter."""

    PARAMETERS = {
        executor.QUANTIZATION_KEY: ExecutionParameter(type=str),
        executor.TOLERANCE_KEY: ExecutionParameter(type=float),
        executor.PARITY_ROWS_KEY: ExecutionParameter(type=int),
        executor.METRIC_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        "model": ChannelParameter(type=standard_artifacts.Model),
        "model_blessing": ChannelParameter(type=standard_artifacts.ModelBlessing),
        "infra_blessing": ChannelParameter(type=standard_artifacts.InfraBlessing, optional=True),
        "examples": ChannelParameter(type=standard_artifacts.Examples),
    }
    OUTPUTS = {TFLITE_MODEL_KEY: ChannelParameter(type=TFLiteModel)}


class TfLiteConverter(base_component.BaseComponent):
    """Converts a blessed candidate's `serving_default` to TF Lite and passes it when its
    outputs on evaluation rows stay within the tolerance of the SavedModel's."""

    SPEC_CLASS = TfLiteConverterSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(
        self,
        model: types.BaseChannel,
        model_blessing: types.BaseChannel,
        examples: types.BaseChannel,
        quantization: str,
        tolerance: float,
        parity_rows: int,
        metric: str = "",
        infra_blessing: types.BaseChannel | None = None,
    ):
        """Builds the spec.

        Args:
          model: the candidate (its Format-Serving SavedModel is converted).
          model_blessing: the Evaluator's blessing; a model it did not bless is not converted.
          examples: Examples whose `eval` split the parity rows come from.
          quantization: `none`, `dynamic` or `float16`.
          tolerance: the largest absolute difference allowed between the two models' outputs.
          parity_rows: how many evaluation rows both models answer.
          metric: the metric compared for both (the spec's first; accuracy or mean absolute
            error when Keras does not know it).
          infra_blessing: the infra validator's blessing, when one runs: also required, and it
            orders the conversion after infra validation.
        """
        spec = TfLiteConverterSpec(
            model=model,
            model_blessing=model_blessing,
            infra_blessing=infra_blessing,
            examples=examples,
            quantization=quantization,
            tolerance=float(tolerance),
            parity_rows=int(parity_rows),
            metric=metric,
            **{TFLITE_MODEL_KEY: types.Channel(type=TFLiteModel)},
        )
        super().__init__(spec=spec)
