"""TFX's Trainer, also given the training statistics, so the model normalises from them.

TFX's Trainer has no statistics input: a model that standardises numeric columns would otherwise
need Transform (a full Beam analysis pass) or a second pass over the data in the trainer. The
StatisticsGen output already holds each column's mean, standard deviation and value counts; this
component adds it as an input and its executor hands the training split's path to `run_fn` as
`custom_config["statistics_path"]` (and every split's as `custom_config["statistics_paths"]`,
which count the rows whose label the model does not know). Training and export are TFX's
GenericExecutor unchanged.

`UserModuleTrainer` is TFX's Trainer for a team's `run_fn` module (`trainer.module`): the same
executor and FnArgs TFX gives any run_fn, plus two execution properties it ignores, the code
version (so an edited module re-trains) and the module's name and digest (lineage).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from tfx import types
from tfx.components.statistics_gen import stats_artifact_utils
from tfx.components.trainer import executor as tfx_trainer_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.dsl.io import fileio
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ExecutionParameter
from tfx.utils import json_utils

from components.baseline.served import without_empty_models
from components.spans.accepted import TRAINED_SPANS_PROPERTY, blessed_window, examples_span
from components.trainer.cluster import CLUSTER_KEY
from pipelines.core.artifact_files import TRAINING_SUMMARY_FILE
from pipelines.core.metadata.told_push import TRAINED_FROM_PROPERTY

STATISTICS_KEY = "statistics"
STATISTICS_PATH_KEY = "statistics_path"
STATISTICS_PATHS_KEY = "statistics_paths"
CHECKPOINT_DIR_KEY = "checkpoint_dir"
# In custom_config on Kubeflow, which resolves no training window: {"dir": the record of
# accepted spans, "num_spans": data.window_spans} (components/spans/accepted.py).
WINDOW_KEY = "accepted_spans_window"
# Execution properties TFX's executor ignores: they key the cache and name the user code.
CODE_VERSION_KEY = "code_version"
USER_CODE_KEY = "user_code"
_CODE_PARAMETERS = {
    CODE_VERSION_KEY: ExecutionParameter(type=str, optional=True),
    USER_CODE_KEY: ExecutionParameter(type=str, optional=True),
}


class TrainerWithStatisticsSpec(standard_component_specs.TrainerSpec):
    """TFX's TrainerSpec plus a `statistics` input: StatisticsGen's ExampleStatistics."""

    INPUTS = {
        **standard_component_specs.TrainerSpec.INPUTS,
        STATISTICS_KEY: ChannelParameter(type=standard_artifacts.ExampleStatistics),
    }
    PARAMETERS = {**standard_component_specs.TrainerSpec.PARAMETERS, **_CODE_PARAMETERS}


class UserModuleTrainerSpec(standard_component_specs.TrainerSpec):
    """TFX's TrainerSpec plus the code version and the user code's name and digest."""

    PARAMETERS = {**standard_component_specs.TrainerSpec.PARAMETERS, **_CODE_PARAMETERS}


def record_user_code(output_dict, exec_properties) -> None:
    """Names the user code (module and digest) on the Model artifact, for lineage."""
    user_code = exec_properties.get(USER_CODE_KEY)
    if not user_code:
        return
    model = artifact_utils.get_single_instance(output_dict[standard_component_specs.MODEL_KEY])
    model.set_string_custom_property("conveyor_user_code", user_code)


def checkpoint_dir(input_dict, output_dict, custom_config: dict[str, Any]) -> str:
    """Where this training's checkpoints live: the same for a re-run of a crashed execution.

    TFX gives every execution a new model_run directory, so checkpoints there would be lost
    to a retry. This one is keyed by the input artifacts and the trainer spec instead, under
    the Trainer node's own folder of the pipeline root.
    """
    model = artifact_utils.get_single_instance(output_dict[standard_component_specs.MODEL_KEY])
    node_root = os.path.dirname(os.path.dirname(model.uri))
    inputs = sorted((key, a.id) for key, artifacts in input_dict.items() for a in artifacts)
    identity = [inputs, custom_config.get("trainer"), custom_config.get("code_version")]
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(node_root, "checkpoints", key)


def with_window(input_dict, exec_properties) -> tuple[dict, dict]:
    """On Kubeflow (WINDOW_KEY in custom_config): `input_dict` with the blessed spans of the
    window before tonight's added to its examples, as the window resolver gives them locally,
    and the key taken out of custom_config (run_fn is not told of it). Elsewhere both as they
    are."""
    config_json = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    config = json_utils.loads(config_json or "null")
    if not isinstance(config, dict) or WINDOW_KEY not in config:
        return input_dict, exec_properties
    window = config.pop(WINDOW_KEY)
    tonight = input_dict[standard_component_specs.EXAMPLES_KEY]
    span = max((examples_span(a) for a in tonight), default=None, key=lambda s: s or 0)
    earlier = blessed_window(window["dir"], span, int(window["num_spans"]))
    input_dict = {**input_dict, standard_component_specs.EXAMPLES_KEY: earlier + list(tonight)}
    exec_properties = {
        **exec_properties,
        standard_component_specs.CUSTOM_CONFIG_KEY: json_utils.dumps(config),
    }
    return input_dict, exec_properties


def record_trained_inputs(input_dict, output_dict, exec_properties) -> None:
    """Names on the Model what it learned from: the spans (TRAINED_SPANS_PROPERTY), what the
    Pusher records the blessing of on Kubeflow, and the examples with their spans, the schema
    and the code (TRAINED_FROM_PROPERTY), which a Kubeflow run's Pusher hands on for the run's
    lineage in Conveyor's store (pipelines/core/metadata/told_push.py)."""
    examples = input_dict[standard_component_specs.EXAMPLES_KEY]
    spans = sorted({s for s in map(examples_span, examples) if s})
    model = artifact_utils.get_single_instance(output_dict[standard_component_specs.MODEL_KEY])
    model.set_string_custom_property(TRAINED_SPANS_PROPERTY, json.dumps(spans))
    schema = input_dict.get(standard_component_specs.SCHEMA_KEY) or []
    trained_from = {
        "examples": [{"uri": a.uri, "span": examples_span(a) or 0} for a in examples],
        "schema": schema[0].uri if schema else None,
        "code_version": exec_properties.get(CODE_VERSION_KEY),
        "user_code": exec_properties.get(USER_CODE_KEY),
    }
    model.set_string_custom_property(TRAINED_FROM_PROPERTY, json.dumps(trained_from))


def record_summary(output_dict, model_run_uri: str | None = None) -> None:
    """Copies the training summary onto the Model artifact, so ML Metadata answers for it.

    `model_run_uri`: where the chief wrote the ModelRun when it is not the artifact's own URI
    (a cluster job's replicas write to the bucket behind KFP's `/gcs/` folder).
    """
    model = artifact_utils.get_single_instance(output_dict[standard_component_specs.MODEL_KEY])
    model_run = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.MODEL_RUN_KEY]
    )
    path = os.path.join(model_run_uri or model_run.uri, TRAINING_SUMMARY_FILE)
    if not fileio.exists(path):
        return  # only the chief writes one
    with fileio.open(path) as handle:
        summary = json.loads(handle.read())
    model.set_string_custom_property("conveyor_training_summary", json.dumps(summary))
    for key in ("steps", "replicas", "global_batch_size", "resumed_from_step"):
        model.set_int_custom_property(f"conveyor_{key}", int(summary[key]))
    model.set_float_custom_property(
        "conveyor_examples_per_second", float(summary["examples_per_second"])
    )
    model.set_string_custom_property("conveyor_strategy", summary["strategy"])
    # Rows of any split whose label the model's classes do not include (they weighed 0).
    unseen = summary.get("unseen_labels", {})
    model.set_int_custom_property(
        "conveyor_unseen_label_rows", sum(sum(by_value.values()) for by_value in unseen.values())
    )
    for name, value in summary["metrics"].items():
        model.set_float_custom_property(f"conveyor_final_{name}", value)


def statistics_path(statistics, split: str) -> str:
    """A split's statistics file in an ExampleStatistics artifact (what run.py reads)."""
    return os.path.join(
        artifact_utils.get_split_uri([statistics], split),
        stats_artifact_utils.BINARY_PB_BASENAME,
    )


def without_statistics(
    input_dict: dict[str, Any], exec_properties: dict[str, Any], custom_config: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What TFX's executor is handed once the statistics' paths are in `custom_config`: the
    inputs without the statistics (TFX's FnArgs do not know them) and the execution properties
    with that `custom_config`. The Trainer's and the Tuner's executors both pass it on so."""
    inputs = {k: v for k, v in input_dict.items() if k != STATISTICS_KEY}
    config = json_utils.dumps(custom_config)
    return inputs, {**exec_properties, standard_component_specs.CUSTOM_CONFIG_KEY: config}


class Executor(tfx_trainer_executor.GenericExecutor):
    """TFX's GenericExecutor, told where the statistics and this training's checkpoints are."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Passes the statistics' paths and the checkpoint folder to `run_fn`, then trains.

        The paths go into `custom_config` (STATISTICS_PATH_KEY for the train split,
        STATISTICS_PATHS_KEY for every split that has statistics, CHECKPOINT_DIR_KEY), the
        statistics input is dropped (GenericExecutor does not know it), and after TFX's
        training and export the training summary is copied onto the Model artifact.

        With a cluster launcher in `custom_config` (components/trainer/cluster.py), this task
        launches the replicas, each running this executor without it, and waits for them.
        A base model that holds no model (Kubeflow's served model before anything is served)
        is no base model: the model trains from scratch. On Kubeflow the window's earlier
        spans come from the record of accepted spans (`with_window`).
        """
        input_dict = without_empty_models(input_dict, standard_component_specs.BASE_MODEL_KEY)
        input_dict, exec_properties = with_window(input_dict, exec_properties)
        record_trained_inputs(input_dict, output_dict, exec_properties)
        config_json = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
        if CLUSTER_KEY in (json_utils.loads(config_json or "null") or {}):
            from components.trainer.cluster import train_on_cluster

            written = train_on_cluster(input_dict, output_dict, exec_properties)
            record_summary(output_dict, written.get(standard_component_specs.MODEL_RUN_KEY))
            record_user_code(output_dict, exec_properties)
            return
        statistics = artifact_utils.get_single_instance(input_dict[STATISTICS_KEY])
        custom_config = json_utils.loads(config_json or "null") or {}
        custom_config[STATISTICS_PATH_KEY] = statistics_path(statistics, "train")
        # Every split's, for counting the rows whose label the model does not know (run.py).
        split_paths = {
            split: statistics_path(statistics, split)
            for split in artifact_utils.decode_split_names(statistics.split_names)
        }
        custom_config[STATISTICS_PATHS_KEY] = {
            split: split_path
            for split, split_path in split_paths.items()
            if fileio.exists(split_path)
        }
        custom_config[CHECKPOINT_DIR_KEY] = checkpoint_dir(input_dict, output_dict, custom_config)
        inputs, exec_properties = without_statistics(input_dict, exec_properties, custom_config)
        super().Do(inputs, output_dict, exec_properties)
        record_summary(output_dict)
        record_user_code(output_dict, exec_properties)


class UserModuleExecutor(tfx_trainer_executor.GenericExecutor):
    """TFX's GenericExecutor: the team's run_fn gets TFX's FnArgs unchanged."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Runs TFX's training (the user's `run_fn`), then names the user code on the Model.

        The module is imported here first, so a module that does not import or has no `run_fn`
        (and a run_fn that raises) fails with one paragraph naming trainer.module. A base
        model that holds no model is left out, as in `Executor.Do`.
        """
        input_dict = without_empty_models(input_dict, standard_component_specs.BASE_MODEL_KEY)
        record_trained_inputs(input_dict, output_dict, exec_properties)
        from components.trainer.autograph import leave_tf_keras_unconverted
        from components.user_code import UserCodeFailure, entry_point, failure

        module = exec_properties[standard_component_specs.RUN_FN_KEY].rpartition(".")[0]
        entry_point("trainer.module", module, "run_fn")
        # tf-keras' internals as Keras 2's always were: unconverted (the module's own code is
        # still converted). See components/trainer/autograph.py.
        leave_tf_keras_unconverted()
        try:
            super().Do(input_dict, output_dict, exec_properties)
        except UserCodeFailure:
            raise
        except Exception as err:  # the team's run_fn may raise anything
            raise failure("trainer.module", module, "run_fn", err) from None
        record_user_code(output_dict, exec_properties)


def _trainer_arguments(
    examples: types.BaseChannel,
    schema: types.BaseChannel,
    base_model: types.BaseChannel | None,
    run_fn: str,
    train_args: trainer_pb2.TrainArgs,
    eval_args: trainer_pb2.EvalArgs,
    custom_config: dict[str, Any],
    hyperparameters: types.BaseChannel | None = None,
) -> dict[str, Any]:
    """The arguments both trainers give TFX's TrainerSpec, with their Model and ModelRun
    outputs; each component adds its own inputs and execution properties. `hyperparameters`:
    a Tuner's best (or the last tuned), which TFX hands run_fn as `fn_args.hyperparameters`."""
    return {
        "examples": examples,
        "hyperparameters": hyperparameters,
        "schema": schema,
        "base_model": base_model,
        "run_fn": run_fn,
        "train_args": train_args,
        "eval_args": eval_args,
        "custom_config": json_utils.dumps(custom_config),  # may hold the code version
        "model": types.Channel(type=standard_artifacts.Model),
        "model_run": types.Channel(type=standard_artifacts.ModelRun),
    }


class Trainer(base_component.BaseComponent):
    """Trainer(examples, schema, statistics, run_fn, train_args, eval_args, custom_config,
    hyperparameters)."""

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
        user_code: str = "",
        hyperparameters: types.BaseChannel | None = None,
    ):
        super().__init__(
            spec=TrainerWithStatisticsSpec(
                statistics=statistics,
                user_code=user_code or None,
                **_trainer_arguments(
                    examples,
                    schema,
                    base_model,
                    run_fn,
                    train_args,
                    eval_args,
                    custom_config,
                    hyperparameters,
                ),
            )
        )


class UserModuleTrainer(base_component.BaseComponent):
    """TFX's Trainer running a team's `run_fn` (`run_fn="package.module.run_fn"`), with the code
    version and the user code as execution properties."""

    SPEC_CLASS = UserModuleTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(UserModuleExecutor)

    def __init__(
        self,
        *,
        examples: types.BaseChannel,
        schema: types.BaseChannel,
        run_fn: str,
        train_args: trainer_pb2.TrainArgs,
        eval_args: trainer_pb2.EvalArgs,
        custom_config: dict[str, Any],
        code_version: str,
        user_code: str,
        transform_graph: types.BaseChannel | None = None,
        base_model: types.BaseChannel | None = None,
        hyperparameters: types.BaseChannel | None = None,
    ):
        super().__init__(
            spec=UserModuleTrainerSpec(
                transform_graph=transform_graph,
                code_version=code_version,
                user_code=user_code,
                **_trainer_arguments(
                    examples,
                    schema,
                    base_model,
                    run_fn,
                    train_args,
                    eval_args,
                    custom_config,
                    hyperparameters,
                ),
            )
        )
