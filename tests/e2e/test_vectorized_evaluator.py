"""The vectorized evaluation engine against TFMA on real taxi models: two ci nights in one
working directory (the second trains a different model and evaluates it against the first,
served one), then Conveyor's Evaluator executor run in-process on those artifacts with TFMA and
with the vectorized engine. Every metric of every slice and model (diffs included), every plot,
the validation result and the blessing must be TFMA's; `auto` keeps TFMA on small splits and on
what the engine cannot compute."""

from __future__ import annotations

import json
import math
import os
from types import SimpleNamespace

import pytest
from google.protobuf import json_format

from pipelines import cli
from pipelines.builder.nodes.evaluator import eval_config
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec
from tests.conftest import run_artifacts

# Relative tolerance on every number TFMA writes (counts, and every metric derived from them,
# come out exactly equal)...
RELATIVE = 1e-9
# ...but sums of the models' predictions (the calibration plot's `totalWeightedRefinedPrediction`):
# a model's float32 output for an example differs in its last bits with the size of the batch it
# runs in (1.9e-6 relative at most between batches of 1 and 64 on the taxi model), and TFMA's
# adaptive batching starts at batches of one example, the engine's batches are 2,048.
PREDICTION_SUMS = 1e-5
BEAM_ARGS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
# More of the family than the taxi spec computes, an integer slice column, plots, and
# thresholds that fail (a value bound and a change threshold): a NOT_BLESSED parity case.
WIDE = [
    "evaluation.metrics=[{name: BinaryAccuracy, lower_bound: 0.5, "
    "change: {direction: higher_is_better, absolute: 0.5}}, {name: AUC, lower_bound: 0.5}, "
    "{name: Precision, lower_bound: 0.99}, {name: Recall}, {name: AUCPrecisionRecall}, "
    "{name: F1Score}, {name: CalibrationPlot}, {name: ConfusionMatrixPlot}]",
    "evaluation.slices=[[], [payment_type], [trip_start_hour]]",
]


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Two taxi ci nights: the first pushes a model, the second trains another (fewer steps)
    and evaluates it against the first with TFX's Evaluator."""
    from components.evaluator.replay import recorded_inputs

    workdir = tmp_path_factory.mktemp("vectorized")
    assert cli.main(["data", "taxi", "--env", "ci", "--workdir", str(workdir)]) == 0
    loaded = load_spec("taxi", env="ci", workdir=workdir)
    first = nightly.run(loaded, workdir, echo=lambda _: None)
    assert first.outcome == "pushed", first.message
    second_spec = load_spec("taxi", env="ci", overrides=["trainer.train_steps=40"], workdir=workdir)
    second = nightly.run(second_spec, workdir, echo=lambda _: None)
    paths = RunPaths(workdir=workdir, spec=loaded.spec)
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    # What the second night's Evaluator read: its examples, its model and the first night's.
    inputs = recorded_inputs(store)
    baseline, candidate = sorted(store.get_artifacts_by_type("Model"), key=lambda a: a.id)
    assert [inputs["model"][0].id, inputs["baseline_model"][0].id] == [candidate.id, baseline.id]
    [evaluation] = run_artifacts(store, second.run_id, "ModelEvaluation")
    return SimpleNamespace(
        workdir=workdir,
        inputs=inputs,
        pipeline_engine=metadata.custom_property(evaluation, "conveyor_evaluation_engine"),
    )


def _properties(overrides) -> dict:
    from components.evaluator.replay import executor_properties

    return executor_properties(eval_config(load_spec("taxi", env="ci", overrides=overrides).spec))


def _evaluate(nights, engine: str, properties, name):
    """Runs `engine`'s executor as TFX would; returns the evaluation and blessing artifacts."""
    from components.evaluator.replay import evaluate

    return evaluate(
        engine, nights.inputs, properties, BEAM_ARGS, nights.workdir / "evaluations" / name
    )


def _close(a, b, where: str) -> None:
    """Equal JSON-like values, numbers within RELATIVE."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), where
        for key in a:
            _close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, (int, float)) and not isinstance(a, bool):
        assert isinstance(b, (int, float)), where
        tolerance = PREDICTION_SUMS if where.endswith("Prediction") else RELATIVE
        assert math.isclose(a, b, rel_tol=tolerance, abs_tol=0), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _by_slice_and_key(records, field: str) -> dict:
    """{(slice, key): value as a dict} of TFMA's per-slice metrics or plots records."""
    table = {}
    for record in records:
        slice_key = record.slice_key.SerializeToString(deterministic=True)
        for item in getattr(record, field):
            key = item.key.SerializeToString(deterministic=True)
            table[(slice_key, key)] = json_format.MessageToDict(item.value)
    return table


def _assert_same_evaluation(tfma_run, vectorized_run) -> None:
    import tensorflow_model_analysis as tfma

    (tfma_eval, tfma_blessing), (vec_eval, vec_blessing) = tfma_run, vectorized_run
    assert sorted(os.listdir(tfma_eval.uri)) == sorted(os.listdir(vec_eval.uri))
    from tensorflow_model_analysis.proto import metrics_for_slice_pb2

    metrics = _by_slice_and_key(tfma.load_metrics(tfma_eval.uri), "metric_keys_and_values")
    keys = [metrics_for_slice_pb2.MetricKey.FromString(key) for _, key in metrics]
    assert any(k.is_diff for k in keys), "no diffs: the comparison would not cover them"
    assert {k.model_name for k in keys} == {"candidate", "baseline"}
    _close(
        metrics,
        _by_slice_and_key(tfma.load_metrics(vec_eval.uri), "metric_keys_and_values"),
        "metrics",
    )
    _close(
        _by_slice_and_key(tfma.load_plots(tfma_eval.uri), "plot_keys_and_values"),
        _by_slice_and_key(tfma.load_plots(vec_eval.uri), "plot_keys_and_values"),
        "plots",
    )
    assert tfma.load_validation_result(tfma_eval.uri) == tfma.load_validation_result(vec_eval.uri)
    config = [
        json.loads(open(os.path.join(e.uri, "eval_config.json")).read())
        for e in (tfma_eval, vec_eval)
    ]
    _close(config[0], config[1], "eval_config.json")
    assert sorted(os.listdir(tfma_blessing.uri)) == sorted(os.listdir(vec_blessing.uri))
    assert tfma_blessing.mlmd_artifact.custom_properties == (
        vec_blessing.mlmd_artifact.custom_properties
    )
    assert tfma_eval.get_string_custom_property("conveyor_evaluation_engine") == "tfma"
    assert vec_eval.get_string_custom_property("conveyor_evaluation_engine") == "vectorized"
    for name, value in tfma_eval.mlmd_artifact.custom_properties.items():
        if name.startswith("conveyor_metric_") or name.startswith("conveyor_baseline_metric_"):
            other = vec_eval.mlmd_artifact.custom_properties[name].double_value
            assert math.isclose(value.double_value, other, rel_tol=RELATIVE)


@pytest.mark.parametrize(
    "overrides, blessed", [([], True), (WIDE, False)], ids=["taxi-spec", "wide-not-blessed"]
)
def test_the_vectorized_engine_writes_tfmas_evaluation_and_blessing(nights, overrides, blessed):
    properties = _properties(overrides)
    name = "wide" if overrides else "spec"
    tfma_run = _evaluate(nights, "tfma", properties, f"tfma-{name}")
    vectorized_run = _evaluate(nights, "vectorized", properties, f"vec-{name}")
    _assert_same_evaluation(tfma_run, vectorized_run)
    assert tfma_run[1].get_int_custom_property("blessed") == int(blessed)


def test_auto_keeps_tfma_on_small_splits_and_what_the_engine_cannot_compute(nights, monkeypatch):
    from components.evaluator import vectorized
    from components.evaluator.executor import choose_engine

    # The pipeline's own Evaluator (engine auto) on the ci split of about 1,000 examples.
    assert nights.pipeline_engine == "tfma"
    engine, why = choose_engine("auto", nights.inputs, _properties([]))
    assert engine == "tfma" and f"under {vectorized.MIN_EXAMPLES}" in why
    with monkeypatch.context() as patch:
        patch.setattr(vectorized, "MIN_EXAMPLES", 100)
        assert choose_engine("auto", nights.inputs, _properties([]))[0] == "vectorized"
        confidence = _properties(["evaluation.confidence={level: 0.9}"])
        engine, why = choose_engine("auto", nights.inputs, confidence)
        assert engine == "tfma" and "confidence intervals" in why
        with pytest.raises(ValueError, match="cannot compute this evaluation: confidence"):
            choose_engine("vectorized", nights.inputs, confidence)
