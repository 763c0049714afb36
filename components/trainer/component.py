"""TFX's Trainer, also given the training statistics, so the model normalises from them.

TFX's Trainer has no statistics input: a model that standardises numeric columns would otherwise
need Transform (a full Beam analysis pass) or a second pass over the data in the trainer. The
StatisticsGen output already holds each column's mean, standard deviation and value counts; this
component adds it as an input and its executor hands the training split's path to `run_fn` as
`custom_config["statistics_path"]`. Training and export are TFX's GenericExecutor unchanged.
"""

from __future__ import annotations

import os
from typing import Any

from tfx import types
from tfx.components.statistics_gen import stats_artifact_utils
from tfx.components.trainer import executor as tfx_trainer_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter
from tfx.utils import json_utils

STATISTICS_KEY = "statistics"
STATISTICS_PATH_KEY = "statistics_path"


class TrainerWithStatisticsSpec(standard_component_specs.TrainerSpec):
    INPUTS = {
        **standard_component_specs.TrainerSpec.INPUTS,
        STATISTICS_KEY: ChannelParameter(type=standard_artifacts.ExampleStatistics),
    }


class Executor(tfx_trainer_executor.GenericExecutor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        statistics = artifact_utils.get_single_instance(input_dict[STATISTICS_KEY])
        path = os.path.join(
            artifact_utils.get_split_uri([statistics], "train"),
            stats_artifact_utils.BINARY_PB_BASENAME,
        )
        custom_config = (
            json_utils.loads(
                exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "null"
            )
            or {}
        )
        custom_config[STATISTICS_PATH_KEY] = path
        exec_properties = {
            **exec_properties,
            standard_component_specs.CUSTOM_CONFIG_KEY: json_utils.dumps(custom_config),
        }
        inputs = {k: v for k, v in input_dict.items() if k != STATISTICS_KEY}
        super().Do(inputs, output_dict, exec_properties)


class Trainer(base_component.BaseComponent):
    """Trainer(examples, schema, statistics, run_fn, train_args, eval_args, custom_config)."""

    SPEC_CLASS = TrainerWithStatisticsSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        *,
        examples: types.BaseChannel,
        schema: types.BaseChannel,
        statistics: types.BaseChannel,
        run_fn: str,
        train_args: trainer_pb2.TrainArgs,
        eval_args: trainer_pb2.EvalArgs,
        custom_config: dict[str, Any],
        base_model: types.BaseChannel | None = None,
    ):
        super().__init__(
            spec=TrainerWithStatisticsSpec(
                examples=examples,
                schema=schema,
                statistics=statistics,
                base_model=base_model,
                run_fn=run_fn,
                train_args=train_args,
                eval_args=eval_args,
                custom_config=json_utils.dumps(custom_config),
                model=types.Channel(type=standard_artifacts.Model),
                model_run=types.Channel(type=standard_artifacts.ModelRun),
            )
        )
