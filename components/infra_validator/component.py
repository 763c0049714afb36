"""The infra validator: serves the candidate in a fresh model server before the Pusher may push it.

TFX's InfraValidator does the same job by starting TF Serving in Docker or Kubernetes, which a
Kubeflow V2 (Vertex AI) task cannot do and a laptop may not have. This one starts, through a
runner as TFX's does (runners/), Conveyor's own model server (`python -m
pipelines.serving.model_server`) as a child process of its own executor, in the same image (the
default); or a `tensorflow_model_server` binary; or TF Serving's image as a Kubernetes Job; and
sends it canary requests built from the evaluation split (see executor.py). Its output is TFX's
standard `InfraBlessing`, marked as TFX marks it, so TFX's Pusher refuses a model it did not
bless.
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.infra_validator import executor

MODEL_KEY = "model"
MODEL_BLESSING_KEY = "model_blessing"
EXAMPLES_KEY = "examples"
BLESSING_KEY = "blessing"


class InfraValidatorSpec(ComponentSpec):
    """Inputs, output and parameters of the infra validator."""

    PARAMETERS = {
        executor.MODEL_NAME_KEY: ExecutionParameter(type=str),
        executor.LATENCY_BUDGET_KEY: ExecutionParameter(type=float),
        executor.CANARY_REQUESTS_KEY: ExecutionParameter(type=int),
        executor.START_TIMEOUT_KEY: ExecutionParameter(type=float),
        executor.SERVER_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        MODEL_BLESSING_KEY: ChannelParameter(type=standard_artifacts.ModelBlessing, optional=True),
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
    }
    OUTPUTS = {BLESSING_KEY: ChannelParameter(type=standard_artifacts.InfraBlessing)}


class InfraValidator(base_component.BaseComponent):
    """Serves the candidate in a fresh model server and blesses it when every canary request is
    answered well-formed, finite, as the SavedModel answers in process, and within the latency
    budget."""

    SPEC_CLASS = InfraValidatorSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(
        self,
        model: types.BaseChannel,
        examples: types.BaseChannel,
        model_name: str,
        latency_budget_ms: float,
        canary_requests: int,
        start_timeout_seconds: float,
        model_blessing: types.BaseChannel | None = None,
        infra_server: str | None = None,
    ):
        """Builds the spec.

        Args:
          model: the candidate (its Format-Serving SavedModel is served).
          examples: Examples whose `eval` split the canary requests are built from.
          model_name: the name the model is served under (`push.model_name`).
          latency_budget_ms: the p99 latency the canary requests must stay within.
          canary_requests: how many evaluation rows are sent, each in every request format.
          start_timeout_seconds: how long the model server may take to load the candidate.
          model_blessing: the Evaluator's blessing; a model it did not bless is not served.
          infra_server: the model server to validate with, a `runners.base.ServerChoice` as
            JSON (unset: Conveyor's own).
        """
        spec = InfraValidatorSpec(
            model=model,
            model_blessing=model_blessing,
            examples=examples,
            model_name=model_name,
            latency_budget_ms=float(latency_budget_ms),
            canary_requests=int(canary_requests),
            start_timeout_seconds=float(start_timeout_seconds),
            infra_server=infra_server,
            blessing=types.Channel(type=standard_artifacts.InfraBlessing),
        )
        super().__init__(spec=spec)
