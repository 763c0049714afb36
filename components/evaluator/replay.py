"""Conveyor's Evaluator executor run again in this process, outside a pipeline, on the inputs
ML Metadata recorded for an Evaluator execution, with either engine.

This is how the engines are compared on the same artifacts: the benchmark
(bench/bench_evaluator.py) times them, and the parity test
(tests/e2e/test_vectorized_evaluator.py) compares what they write. It lives beside the executor
rather than under tests/ because the benchmark runs as a script that can import only the
installed packages (`pipelines`, `components`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ENGINES = ("tfma", "vectorized")


def recorded_inputs(store) -> dict[str, list]:
    """The input artifacts (TFX types, by input key) of the latest Evaluator execution in
    `store` (an ML Metadata store); ValueError when the store has none."""
    from ml_metadata.proto import metadata_store_pb2
    from tfx.types import artifact_utils

    types = {t.id: t for t in store.get_artifact_types()}
    evaluators = [
        t for t in store.get_execution_types() if t.name.rsplit(".", 1)[-1] == "Evaluator"
    ]
    executions = [e for t in evaluators for e in store.get_executions_by_type(t.name)]
    if not executions:
        raise ValueError("no Evaluator execution in this ML Metadata store")
    execution = max(executions, key=lambda e: e.id)
    inputs: dict[str, list] = {}
    for event in store.get_events_by_execution_ids([execution.id]):
        if event.type != metadata_store_pb2.Event.INPUT:
            continue
        [artifact] = store.get_artifacts_by_id([event.artifact_id])
        tfx_artifact = artifact_utils.deserialize_artifact(types[artifact.type_id], artifact)
        inputs.setdefault(event.path.steps[0].key, []).append(tfx_artifact)
    return inputs


def executor_properties(eval_config) -> dict[str, str]:
    """The exec_properties TFX's Evaluator component hands its executor for an EvalConfig
    (pipelines.builder.nodes.evaluator.eval_config), with every split and no fairness
    thresholds, as the pipeline's Evaluator node sets them."""
    from google.protobuf import json_format

    return {
        "eval_config": json_format.MessageToJson(eval_config),
        "example_splits": "null",
        "fairness_indicator_thresholds": "null",
    }


def evaluate(
    engine: str, inputs: dict[str, list], properties: dict, beam_args: list[str], out: Path
):
    """Runs the Evaluator executor of `engine` ("tfma" or "vectorized") as TFX would, writing
    under `out` (emptied first); returns its (ModelEvaluation, ModelBlessing) artifacts."""
    from tfx.dsl.components.base import base_beam_executor
    from tfx.types import standard_artifacts

    from components.evaluator.executor import Executor, VectorizedEngineExecutor

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
    shutil.rmtree(out, ignore_errors=True)
    evaluation = standard_artifacts.ModelEvaluation()
    evaluation.uri = str(out / "evaluation")
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(out / "blessing")
    os.makedirs(evaluation.uri)
    os.makedirs(blessing.uri)
    context = base_beam_executor.BaseBeamExecutor.Context(
        beam_pipeline_args=beam_args, tmp_dir=str(out / "tmp"), unique_id=engine
    )
    executor = (Executor if engine == "tfma" else VectorizedEngineExecutor)(context)
    executor.Do(inputs, {"evaluation": [evaluation], "blessing": [blessing]}, properties)
    return evaluation, blessing
