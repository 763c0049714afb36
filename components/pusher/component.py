"""TFX's Pusher with Conveyor's executor (see executor.py for what it changes), plus one optional
input: the TF Lite converter's output, whose `model.tflite` goes inside the pushed version when
it passed (components/tflite)."""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components.pusher import component as pusher_component
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ExecutionParameter
from tfx.utils import json_utils

from components.pusher import executor
from components.tflite.artifact import TFLITE_MODEL_KEY, TFLiteModel


class PusherSpec(standard_component_specs.PusherSpec):
    """TFX's PusherSpec with the optional `tflite_model` input."""

    INPUTS = {
        **standard_component_specs.PusherSpec.INPUTS,
        TFLITE_MODEL_KEY: ChannelParameter(type=TFLiteModel, optional=True),
    }
    # On Kubeflow: where the decision goes (executor.write_push_decision).
    PARAMETERS = {
        **standard_component_specs.PusherSpec.PARAMETERS,
        executor.RUNS_DIR_KEY: ExecutionParameter(type=str, optional=True),
        executor.JOB_NAME_KEY: ExecutionParameter(type=str, optional=True),
        executor.JOB_RESOURCE_NAME_KEY: ExecutionParameter(type=str, optional=True),
    }


class Pusher(pusher_component.Pusher):
    """TFX's Pusher (same inputs, outputs and parameters, plus `tflite_model`) run by Conveyor's
    executor."""

    SPEC_CLASS = PusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(
        self,
        model: types.BaseChannel,
        model_blessing: types.BaseChannel,
        push_destination: pusher_pb2.PushDestination,
        custom_config: dict[str, Any] | None = None,
        infra_blessing: types.BaseChannel | None = None,
        tflite_model: types.BaseChannel | None = None,
        kubeflow_run: dict[str, str] | None = None,
    ):
        """Builds the spec as TFX's Pusher does, with `tflite_model` (the TF Lite converter's
        output, or None) and, on Kubeflow, `kubeflow_run` (the executor's RUNS_DIR_KEY and job
        name keys: where its decision goes). TFX's own __init__ is not called: it builds TFX's
        PusherSpec, which has no place for the extra input and parameters."""
        spec = PusherSpec(
            model=model,
            model_blessing=model_blessing,
            infra_blessing=infra_blessing,
            push_destination=push_destination,
            custom_config=json_utils.dumps(custom_config),
            pushed_model=types.Channel(type=standard_artifacts.PushedModel),
            **{TFLITE_MODEL_KEY: tflite_model},
            **(kubeflow_run or {}),
        )
        base_component.BaseComponent.__init__(self, spec=spec)
