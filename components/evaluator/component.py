"""TFX's Evaluator run by Conveyor's executor, which judges change thresholds with TFMA's
confidence intervals (see executor.py). Used when the spec sets `evaluation.confidence`."""

from __future__ import annotations

from tfx import types
from tfx.components.evaluator import component as evaluator_component
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import json_utils

from components.evaluator import executor
from components.evaluator.executor import CONFIDENCE_LEVEL_KEY


class EvaluatorSpec(standard_component_specs.EvaluatorSpec):
    """TFX's EvaluatorSpec plus the confidence level change thresholds are judged at."""

    PARAMETERS = {
        **standard_component_specs.EvaluatorSpec.PARAMETERS,
        CONFIDENCE_LEVEL_KEY: ExecutionParameter(type=float),
    }


class Evaluator(evaluator_component.Evaluator):
    """TFX's Evaluator (same inputs and outputs: `evaluation`, `blessing`) with a
    `confidence_level`: a change threshold fails only on a significant regression."""

    SPEC_CLASS = EvaluatorSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        model: types.BaseChannel,
        eval_config,
        confidence_level: float,
        baseline_model: types.BaseChannel | None = None,
    ):
        """Builds the spec as TFX's Evaluator does for an `eval_config`, plus the level.

        Args:
          examples: the Examples to evaluate on (their `eval` split).
          model: the candidate model.
          eval_config: the tfma.EvalConfig; it must compute confidence intervals.
          confidence_level: two-sided level of the interval of candidate minus baseline.
          baseline_model: the served model, when there is one.
        """
        if not eval_config.options.compute_confidence_intervals.value:
            raise ValueError(
                "the eval_config computes no confidence intervals: nothing to judge with"
            )
        spec = EvaluatorSpec(
            examples=examples,
            model=model,
            baseline_model=baseline_model,
            fairness_indicator_thresholds=json_utils.dumps(None),
            example_splits=json_utils.dumps(None),
            eval_config=eval_config,
            confidence_level=float(confidence_level),
            evaluation=types.Channel(type=standard_artifacts.ModelEvaluation),
            blessing=types.Channel(type=standard_artifacts.ModelBlessing),
        )
        # TFX's Evaluator.__init__ builds its own EvaluatorSpec; the base class takes ours.
        base_beam_component.BaseBeamComponent.__init__(self, spec=spec)
