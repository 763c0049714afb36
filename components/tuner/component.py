"""TFX's Tuner, also given the training statistics, for Conveyor's generic `tuner_fn`.

Conveyor's trainer standardises numeric columns and builds vocabularies from StatisticsGen's
output (components/trainer/component.py); its trials must see the same features, so this
component adds the statistics input that TFX's Tuner lacks. Its executor hands the train
split's statistics path to `tuner_fn` as `custom_config["statistics_path"]`, then runs TFX's
Tuner executor unchanged: the search, `best_hyperparameters.txt` and `tuner_results.json`
(every completed trial's hyperparameters and score) are TFX's own.
"""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components.tuner import executor as tfx_tuner_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter
from tfx.utils import json_utils

# The statistics input, the key run.read_features reads its path from, and how the Trainer
# hands both to TFX's executor: the Tuner's trials read the statistics as the Trainer does.
from components.trainer.component import (
    STATISTICS_KEY,
    STATISTICS_PATH_KEY,
    statistics_path,
    without_statistics,
)


class TunerWithStatisticsSpec(standard_component_specs.TunerSpec):
    """TFX's TunerSpec plus a `statistics` input: StatisticsGen's ExampleStatistics."""

    INPUTS = {
        **standard_component_specs.TunerSpec.INPUTS,
        STATISTICS_KEY: ChannelParameter(type=standard_artifacts.ExampleStatistics),
    }


class Executor(tfx_tuner_executor.Executor):
    """TFX's Tuner executor, told where the train split's statistics are."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Adds the train split's statistics path to `custom_config`, drops the statistics
        input (TFX's FnArgs do not know it) and searches as TFX's Tuner does."""
        statistics = artifact_utils.get_single_instance(input_dict[STATISTICS_KEY])
        config_json = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
        custom_config = json_utils.loads(config_json or "null") or {}
        custom_config[STATISTICS_PATH_KEY] = statistics_path(statistics, "train")
        inputs, exec_properties = without_statistics(input_dict, exec_properties, custom_config)
        super().Do(inputs, output_dict, exec_properties)


class Tuner(base_component.BaseComponent):
    """Tuner(examples, schema, statistics, tuner_fn, train_args, eval_args, custom_config)."""

    SPEC_CLASS = TunerWithStatisticsSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        *,
        examples: types.BaseChannel,
        schema: types.BaseChannel,
        statistics: types.BaseChannel,
        tuner_fn: str,
        train_args: trainer_pb2.TrainArgs,
        eval_args: trainer_pb2.EvalArgs,
        custom_config: dict[str, Any],
    ):
        super().__init__(
            spec=TunerWithStatisticsSpec(
                examples=examples,
                schema=schema,
                statistics=statistics,
                tuner_fn=tuner_fn,
                train_args=train_args,
                eval_args=eval_args,
                custom_config=json_utils.dumps(custom_config),
                best_hyperparameters=types.Channel(type=standard_artifacts.HyperParameters),
                tuner_results=types.Channel(type=standard_artifacts.TunerResults),
            )
        )
