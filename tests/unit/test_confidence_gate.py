"""The confidence gate: change thresholds judged with TFMA's interval of candidate minus
baseline (`evaluation.confidence`), the EvalConfig it sets, and the spec key's validation."""

from __future__ import annotations

import json
import os

import pytest

from components.evaluator.gate import (
    HIGHER_IS_BETTER,
    LOWER_IS_BETTER,
    interval,
    judge_change,
)
from pipelines.spec.loading import SpecError, load_spec

CONFIDENCE = "evaluation.confidence={level: 0.95, method: jackknife}"


def _t(diff: float, standard_error: float, freedom: int = 19, mean: float | None = None):
    """A TFMA t-distribution value, as its jackknife (20 buckets) writes it."""
    from tensorflow_model_analysis.api.types import ValueWithTDistribution

    return ValueWithTDistribution(
        sample_mean=diff if mean is None else mean,
        sample_standard_deviation=standard_error,
        sample_degrees_of_freedom=freedom,
        unsampled_value=diff,
    )


def _judge(value, direction=HIGHER_IS_BETTER, absolute=-0.01, level=0.95):
    return judge_change(float(value), interval(value, level), direction, absolute)


# --- the decision ------------------------------------------------------------------------------


def test_interval_is_tfmas_own_95_percent_interval():
    from tensorflow_model_analysis.utils import math_util

    value = _t(-0.0102, 0.004, mean=-0.0098)
    _, lower, upper = math_util.calculate_confidence_interval(value)
    span = interval(value, 0.95)
    assert span.lower == pytest.approx(lower)
    assert span.upper == pytest.approx(upper)
    assert span.value == -0.0102  # the point value TFMA's validator judges


def test_a_significant_regression_fails():
    # -0.03 +- 2.093 * 0.005: the upper end -0.0195 is below -0.01.
    judgement = _judge(_t(-0.03, 0.005))
    assert not judgement.passed
    assert not judgement.passed_point
    assert "significant" in judgement.reason


def test_a_regression_within_the_noise_passes():
    # The night-two case: -0.0102 against -0.01, interval about [-0.0186, -0.0018].
    judgement = _judge(_t(-0.0102, 0.004))
    assert judgement.passed
    assert not judgement.passed_point  # TFMA alone would block it
    assert "noise" in judgement.reason


def test_an_improvement_passes():
    judgement = _judge(_t(0.02, 0.004))
    assert judgement.passed and judgement.passed_point


def test_lower_is_better_is_the_mirror_image():
    # A loss allowed to grow by 0.01: fails only when the interval's lower end is above it.
    assert not _judge(_t(0.03, 0.005), LOWER_IS_BETTER, 0.01).passed
    within = _judge(_t(0.0102, 0.004), LOWER_IS_BETTER, 0.01)
    assert within.passed and not within.passed_point
    assert _judge(_t(-0.02, 0.004), LOWER_IS_BETTER, 0.01).passed


def test_the_level_sets_how_sure_the_gate_must_be():
    # -0.02 +- t * 0.005: the 50% interval ends at -0.0166 (fail), the 99% one at -0.0057.
    value = _t(-0.02, 0.005)
    assert not _judge(value, level=0.5).passed
    assert _judge(value, level=0.99).passed


def test_without_an_interval_tfmas_judgement_stands():
    no_interval = _t(-0.0102, float("nan"))
    assert interval(no_interval, 0.95) is None
    assert not _judge(no_interval).passed
    assert _judge(_t(0.0, float("nan"))).passed


def test_a_point_value_tfma_passes_is_never_failed():
    # The interval is centred on the sample mean; a mean far below the point value must not
    # turn TFMA's pass into a fail: the gate only relaxes TFMA's change check.
    assert _judge(_t(-0.005, 0.001, mean=-0.03)).passed


# --- the spec key and the EvalConfig -----------------------------------------------------------


def test_confidence_is_off_by_default_and_the_evalconfig_unchanged():
    from pipelines.builder.nodes.evaluator import eval_config

    spec = load_spec("taxi").spec
    assert spec.evaluation.confidence is None
    assert not eval_config(spec).HasField("options")


@pytest.mark.parametrize(
    ("method", "tfma_method"), [("jackknife", "JACKKNIFE"), ("bootstrap", "POISSON_BOOTSTRAP")]
)
def test_the_evalconfig_computes_intervals_with_the_chosen_method(method, tfma_method):
    import tensorflow_model_analysis as tfma

    from pipelines.builder.nodes.evaluator import eval_config

    spec = load_spec("taxi", overrides=[f"evaluation.confidence={{method: {method}}}"]).spec
    assert spec.evaluation.confidence.level == 0.95
    options = eval_config(spec).options
    assert options.compute_confidence_intervals.value is True
    assert options.confidence_intervals.method == getattr(
        tfma.ConfidenceIntervalOptions, tfma_method
    )


def test_relative_change_thresholds_are_refused_with_confidence():
    relative = "evaluation.metrics=[{name: AUC, change: {relative: -0.05}}]"
    with pytest.raises(SpecError, match=r"evaluation\.confidence.*'AUC'.*change\.relative"):
        load_spec("taxi", overrides=[relative, CONFIDENCE])
    # Without the key the same thresholds stay TFMA's to judge.
    assert load_spec("taxi", overrides=[relative]).spec.evaluation.confidence is None


@pytest.mark.parametrize("bad", ["{level: 1.0}", "{level: 0.3}", "{method: bayes}", "{alpha: 1}"])
def test_the_confidence_key_is_validated(bad):
    with pytest.raises(SpecError, match=r"evaluation\.confidence"):
        load_spec("taxi", overrides=[f"evaluation.confidence={bad}"])


def test_the_build_swaps_in_the_gate_under_the_same_id_and_outputs(tmp_path):
    from tfx.components import Evaluator as TfxEvaluator

    from components.evaluator.component import Evaluator
    from pipelines.builder.pipeline import build_pipeline

    def evaluator(overrides):
        pipeline = build_pipeline(load_spec("taxi", overrides=overrides).spec, tmp_path)
        return next(node for node in pipeline.components if node.id == "evaluator")

    plain, gated = evaluator([]), evaluator([CONFIDENCE])
    assert type(plain) is TfxEvaluator
    assert isinstance(gated, Evaluator)
    assert type(gated).__name__ == "Evaluator"  # lineage finds evaluators by type name
    assert set(gated.outputs) == set(plain.outputs) == {"evaluation", "blessing"}
    assert gated.exec_properties["confidence_level"] == 0.95
    assert set(gated.inputs) == set(plain.inputs)


# --- the executor on TFMA's own output ----------------------------------------------------------


def _write_evaluation(uri, spec, values: dict) -> None:
    """Writes what TFMA writes for one overall slice: its metrics (with intervals) and its
    validation result, both made by TFMA's own writer and validator from `values`, a
    t-distribution value per metric name, `<name>_diff` for candidate minus baseline."""
    import tensorflow as tf
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.evaluators import metrics_validator
    from tensorflow_model_analysis.writers import metrics_plots_and_validations_writer as writer

    from pipelines.builder.nodes.evaluator import eval_config

    config = tfma.utils.update_eval_config_with_defaults(
        eval_config(spec), has_baseline=True, rubber_stamp=True
    )
    keys = tfma.metrics.metric_thresholds_from_metrics_specs(
        config.metrics_specs, eval_config=config
    )
    metrics = {
        key: values[key.name + ("_diff" if key.is_diff else "")]
        for key in keys
        if key.model_name == "candidate"  # TFMA's names; the baseline's thresholds are skipped
    }
    validation = metrics_validator.validate_metrics(((), metrics), config)
    os.makedirs(uri, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(uri, "metrics.tfrecord")) as out:
        out.write(writer.convert_slice_metrics_to_proto(((), metrics), None).SerializeToString())
    with tf.io.TFRecordWriter(os.path.join(uri, "validations.tfrecord")) as out:
        out.write(validation.SerializeToString())


def _gate(tmp_path, values: dict, blessed_by_tfma: bool):
    from tfx.types import standard_artifacts
    from tfx.utils import proto_utils

    from components.evaluator.executor import Executor
    from pipelines.builder.nodes.evaluator import eval_config

    spec = load_spec("taxi", overrides=[CONFIDENCE]).spec
    evaluation = standard_artifacts.ModelEvaluation()
    evaluation.uri = str(tmp_path / "evaluation")
    _write_evaluation(evaluation.uri, spec, values)
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / "blessing")
    os.makedirs(blessing.uri)
    name = "BLESSED" if blessed_by_tfma else "NOT_BLESSED"  # what TFX's executor leaves
    (tmp_path / "blessing" / name).write_text("")
    blessing.set_int_custom_property("blessed", int(blessed_by_tfma))
    validations = (tmp_path / "evaluation" / "validations.tfrecord").read_bytes()
    record = Executor().apply_confidence_gate(
        {"baseline_model": [standard_artifacts.Model()]},
        {"evaluation": [evaluation], "blessing": [blessing]},
        {
            "eval_config": proto_utils.proto_to_json(eval_config(spec)),
            "confidence_level": 0.95,
        },
    )
    # TFMA's own validation result is never rewritten.
    assert (tmp_path / "evaluation" / "validations.tfrecord").read_bytes() == validations
    written = json.loads((tmp_path / "evaluation" / "confidence_gate.json").read_text())
    assert written == json.loads(json.dumps(record))
    return record, blessing


def test_the_overall_metrics_are_recorded_on_the_evaluation(tmp_path):
    """What the history page reads from ML Metadata: TFMA's overall metrics on the artifact,
    the candidate's and the baseline's apart; and every Evaluator runs this executor."""
    from tfx.types import standard_artifacts

    from components.evaluator.executor import Executor, record_overall_metrics
    from pipelines.builder.pipeline import build_pipeline

    evaluation = standard_artifacts.ModelEvaluation()
    evaluation.uri = str(tmp_path / "evaluation")
    spec = load_spec("taxi", overrides=[CONFIDENCE]).spec
    _write_evaluation(evaluation.uri, spec, _night(0.01, 0.002, accuracy=0.87, auc=0.91))
    recorded = record_overall_metrics({"evaluation": [evaluation]})
    assert recorded["conveyor_metric_binary_accuracy"] == pytest.approx(0.87)
    assert recorded["conveyor_metric_auc"] == pytest.approx(0.91)
    assert not any("diff" in name for name in recorded)
    assert evaluation.get_float_custom_property("conveyor_metric_auc") == pytest.approx(0.91)
    pipeline = build_pipeline(load_spec("taxi").spec, tmp_path)
    plain = next(node for node in pipeline.components if node.id == "evaluator")
    assert issubclass(plain.executor_spec.executor_class, Executor)


def _night(diff, standard_error, accuracy=0.85, auc=0.9):
    return {
        "binary_accuracy": _t(accuracy, 0.003),
        "binary_accuracy_diff": _t(diff, standard_error),
        "auc": _t(auc, 0.003),
    }


def test_a_failure_within_the_noise_is_reblessed_as_tfx_would_bless(tmp_path):
    record, blessing = _gate(tmp_path, _night(-0.0102, 0.004), blessed_by_tfma=False)
    assert record["tfma_validation_ok"] is False
    assert record["blessed"] is True
    assert blessing.get_int_custom_property("blessed") == 1
    assert (tmp_path / "blessing" / "BLESSED").exists()
    assert not (tmp_path / "blessing" / "NOT_BLESSED").exists()
    assert "significant" in blessing.get_string_custom_property("conveyor_confidence_gate")
    [item] = record["change_thresholds"]
    assert item["metric"] == "binary_accuracy" and item["slice"] == "Overall"
    assert item["diff"] == pytest.approx(-0.0102)
    assert item["interval"][0] < -0.01 < item["interval"][1]
    assert (item["tfma"], item["decision"], item["absolute"]) == ("fail", "pass", -0.01)


def test_a_significant_regression_stays_not_blessed(tmp_path):
    record, blessing = _gate(tmp_path, _night(-0.03, 0.005), blessed_by_tfma=False)
    assert record["blessed"] is False
    assert blessing.get_int_custom_property("blessed") == 0
    assert (tmp_path / "blessing" / "NOT_BLESSED").exists()
    assert not (tmp_path / "blessing" / "BLESSED").exists()
    assert record["change_thresholds"][0]["decision"] == "fail"
    assert "binary_accuracy" in record["decision"]


def test_a_value_threshold_failure_is_never_overruled(tmp_path):
    # Accuracy below the spec's lower bound 0.6, the change within the noise: still blocked.
    record, blessing = _gate(tmp_path, _night(-0.0102, 0.004, accuracy=0.55), False)
    assert record["blessed"] is False
    assert blessing.get_int_custom_property("blessed") == 0
    assert [o["metric"] for o in record["other_failures"]] == ["binary_accuracy"]


def test_a_model_tfma_blessed_stays_blessed_and_is_recorded(tmp_path):
    record, blessing = _gate(tmp_path, _night(0.004, 0.004), blessed_by_tfma=True)
    assert record["tfma_validation_ok"] is True and record["rebless"] is False
    assert blessing.get_int_custom_property("blessed") == 1
    assert not blessing.has_custom_property("conveyor_confidence_gate")
    assert record["change_thresholds"][0]["decision"] == "pass"
