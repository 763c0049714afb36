"""TFX's Evaluator executor, then change thresholds judged with TFMA's confidence intervals.

TFX's executor runs TFMA unchanged: metrics, intervals (`evaluation.confidence` turns them on in
the EvalConfig), TFMA's validation result and TFX's blessing. TFMA's validator judges a change
threshold on the point value of candidate minus baseline only (`float()` of its t-distribution
value). Afterwards this executor reads TFMA's `*_diff` metrics with their intervals and, when
the validation failed only on change thresholds whose interval does not lie wholly beyond the
allowed change (a regression that is not significant at `confidence_level`), rewrites the
blessing to BLESSED exactly as TFX writes it. TFMA's validations file is left as TFMA wrote
it; the judgement goes next to it, in `confidence_gate.json`.

`evaluation.engine` picks what computes the metrics: TFX's executor with TFMA, or the vectorized
engine (vectorized.py), which writes the same EvalResult and blessing from TFMA's own
combiners, derived computations, validator and writers with the per-example work done over
whole batches; `auto` takes it only where it computes the whole EvalConfig on a big split.
"""

from __future__ import annotations

import json
import os
import types

from absl import logging
from tfx.components.evaluator import constants
from tfx.components.evaluator import executor as tfx_evaluator_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

from components.baseline.served import without_empty_models
from components.evaluator.gate import HIGHER_IS_BETTER, LOWER_IS_BETTER, interval, judge_change

CONFIDENCE_LEVEL_KEY = "confidence_level"
JUDGEMENT_FILE = "confidence_gate.json"
# On the blessing: why the gate blessed a model TFMA did not (absent otherwise).
GATE_PROPERTY = "conveyor_confidence_gate"
# On the evaluation: which engine computed the metrics ("tfma" or "vectorized").
ENGINE_PROPERTY = "conveyor_evaluation_engine"
# On the evaluation: the whole evaluation set's metrics (pipelines.core.metadata reads them back).
METRIC_PREFIX = "conveyor_metric_"
BASELINE_METRIC_PREFIX = "conveyor_baseline_metric_"


class Executor(tfx_evaluator_executor.Executor):
    """TFX's Evaluator executor; with `confidence_level` set, change thresholds that fail only
    on the noise of the evaluation split no longer block the blessing."""

    # Which engine computes the metrics: "tfma" (TFX's Evaluator as it is), "auto" or
    # "vectorized" (components/evaluator/vectorized.py); the subclasses below set it.
    ENGINE = "tfma"

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Runs TFX's Evaluator (or the vectorized engine, which writes the same artifacts),
        then judges its change thresholds with the intervals, and records the overall metrics
        on the evaluation artifact. A baseline Model that holds no model (Kubeflow's served
        model before anything is served) is no baseline."""
        input_dict = without_empty_models(input_dict, standard_component_specs.BASELINE_MODEL_KEY)
        engine, why = choose_engine(self.ENGINE, input_dict, exec_properties)
        logging.info("Evaluation engine: %s (%s).", engine, why)
        if engine == "vectorized":
            self.evaluate_vectorized(input_dict, output_dict, exec_properties)
        else:
            super().Do(input_dict, output_dict, exec_properties)
        evaluation = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.EVALUATION_KEY]
        )
        evaluation.set_string_custom_property(ENGINE_PROPERTY, engine)
        self.apply_confidence_gate(input_dict, output_dict, exec_properties)
        try:
            record_overall_metrics(output_dict)
        except Exception as err:  # a record for pages, never a reason to fail the evaluation
            logging.warning("overall metrics not recorded on the evaluation: %s", err)

    def apply_confidence_gate(self, input_dict, output_dict, exec_properties) -> dict | None:
        """After TFX's Evaluator: judges the change thresholds on TFMA's output with the
        intervals, writes `confidence_gate.json` into the evaluation, rewrites a NOT_BLESSED
        blessing that failed only on noise, and returns the record (None when TFX validated
        nothing or no level is set)."""
        level = exec_properties.get(CONFIDENCE_LEVEL_KEY)
        if not level or not output_dict.get(standard_component_specs.BLESSING_KEY):
            return None
        blessing = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.BLESSING_KEY]
        )
        if not blessing.has_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY):
            return None  # TFX validated nothing (no thresholds): there is nothing to judge
        evaluation_uri = artifact_utils.get_single_uri(
            output_dict[standard_component_specs.EVALUATION_KEY]
        )
        has_baseline = bool(input_dict.get(standard_component_specs.BASELINE_MODEL_KEY))
        record = judge_evaluation(
            evaluation_uri, _eval_config(exec_properties, has_baseline), float(level)
        )
        io_utils.write_string_file(
            os.path.join(evaluation_uri, JUDGEMENT_FILE), json.dumps(record, indent=2) + "\n"
        )
        if record["rebless"]:
            bless(blessing, record["decision"])
        for item in record["change_thresholds"]:
            logging.info(
                "Confidence gate: %s on %s: diff %+.4f, %.0f%% interval [%s, %s], threshold "
                "%s %+g: TFMA %s, gate %s (%s).",
                item["metric"],
                item["slice"],
                item["diff"],
                100 * level,
                _fmt(item["interval"][0]),
                _fmt(item["interval"][1]),
                item["direction"],
                item["absolute"],
                item["tfma"],
                item["decision"],
                item["reason"],
            )
        logging.info("Confidence gate: %s", record["decision"])
        return record

    def evaluate_vectorized(self, input_dict, output_dict, exec_properties) -> None:
        """What TFX's `Do` does, with the vectorized engine in TFMA's place: the same
        EvalConfig defaults, models, EvalResult files and blessing (files and properties)."""
        import tensorflow_model_analysis as tfma

        from components.evaluator import vectorized

        eval_config = defaulted_eval_config(input_dict, exec_properties)
        model_paths = _model_paths(input_dict, eval_config)
        output_uri = artifact_utils.get_single_uri(
            output_dict[standard_component_specs.EVALUATION_KEY]
        )
        patterns = vectorized.file_patterns(_split_uris(input_dict, exec_properties))
        with self._make_beam_pipeline() as pipeline:
            vectorized.evaluate(pipeline, patterns, eval_config, model_paths, output_uri)
        logging.info("Evaluation complete. Results written to %s.", output_uri)
        if not tfma.metrics.metric_thresholds_from_metrics_specs(
            eval_config.metrics_specs, eval_config=eval_config
        ):
            logging.info("No threshold configured, will not validate model.")
            return
        write_blessing(input_dict, output_dict, exec_properties, output_uri)


class AutoEngineExecutor(Executor):
    """The vectorized engine where it computes the whole EvalConfig and the split is big
    (`vectorized.MIN_EXAMPLES`); TFX's Evaluator with TFMA otherwise."""

    ENGINE = "auto"


class VectorizedEngineExecutor(Executor):
    """The vectorized engine always (`evaluation.engine: vectorized`); an EvalConfig it cannot
    compute is an error."""

    ENGINE = "vectorized"


def defaulted_eval_config(input_dict, exec_properties):
    """The EvalConfig as TFX's executor makes it: TFMA's defaults for the models given."""
    import tensorflow_model_analysis as tfma

    eval_config = tfma.EvalConfig()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.EVAL_CONFIG_KEY], eval_config
    )
    eval_config = tfma.utils.update_eval_config_with_defaults(
        eval_config,
        has_baseline=bool(input_dict.get(standard_component_specs.BASELINE_MODEL_KEY)),
        rubber_stamp=True,
    )
    tfma.utils.verify_eval_config(eval_config)
    return eval_config


def _model_paths(input_dict, eval_config) -> dict[str, str]:
    """Each model spec's name -> its serving SavedModel, as TFX's executor finds it."""
    from tfx.utils import path_utils

    paths = {}
    for spec in eval_config.model_specs:
        key = (
            standard_component_specs.BASELINE_MODEL_KEY
            if spec.is_baseline
            else standard_component_specs.MODEL_KEY
        )
        model = artifact_utils.get_single_instance(input_dict[key])
        paths[spec.name] = path_utils.serving_model_path(
            model.uri, path_utils.is_old_model_artifact(model)
        )
    return paths


def _split_uris(input_dict, exec_properties) -> list[str]:
    """The folders of the splits evaluated (`example_splits`, TFX's default `eval`)."""
    from tfx.utils import json_utils

    splits = json_utils.loads(
        exec_properties.get(standard_component_specs.EXAMPLE_SPLITS_KEY, "null") or "null"
    ) or ["eval"]
    examples = input_dict[standard_component_specs.EXAMPLES_KEY]
    return [uri for split in splits for uri in artifact_utils.get_split_uris(examples, split)]


def choose_engine(engine: str, input_dict, exec_properties) -> tuple[str, str]:
    """("tfma" or "vectorized", why) for the configured `engine`. `auto` takes the vectorized
    engine when it computes the whole EvalConfig and the split has at least
    `vectorized.MIN_EXAMPLES` examples; `vectorized` raises when it cannot compute it."""
    if engine == "tfma":
        return "tfma", "evaluation.engine is tfma"
    import tensorflow_model_analysis as tfma
    from tfx.components.util import examples_utils
    from tfx.proto import example_gen_pb2

    from components.evaluator import vectorized

    reasons = []
    if not exec_properties.get(standard_component_specs.EVAL_CONFIG_KEY):
        reasons.append("no eval_config (TFX's legacy feature_slicing_spec)")
    if exec_properties.get(standard_component_specs.MODULE_PATH_KEY) or exec_properties.get(
        standard_component_specs.MODULE_FILE_KEY
    ):
        reasons.append("a module with custom extractors or models")
    if standard_component_specs.MODEL_KEY not in input_dict:
        reasons.append("no model (predictions read from the examples)")
    for examples in input_dict.get(standard_component_specs.EXAMPLES_KEY, []):
        if examples_utils.get_payload_format(examples) != example_gen_pb2.FORMAT_TF_EXAMPLE:
            reasons.append("examples that are not tf.Examples")
    if not reasons:
        eval_config = defaulted_eval_config(input_dict, exec_properties)
        paths = _model_paths(input_dict, eval_config)
        types = {
            spec.name: tfma.utils.get_model_type(spec, paths[spec.name])
            for spec in eval_config.model_specs
        }
        reasons = vectorized.unsupported(eval_config, types)
    if reasons:
        if engine == "vectorized":
            raise ValueError(
                "evaluation.engine is vectorized, but the vectorized engine cannot compute "
                f"this evaluation: {'; '.join(reasons)}. Set evaluation.engine to auto or tfma."
            )
        return "tfma", "the vectorized engine cannot compute " + "; ".join(reasons)
    if engine == "vectorized":
        return "vectorized", "evaluation.engine is vectorized"
    count = vectorized.count_examples(
        _split_uris(input_dict, exec_properties), vectorized.MIN_EXAMPLES
    )
    if count < vectorized.MIN_EXAMPLES:
        return "tfma", f"{count} examples, under {vectorized.MIN_EXAMPLES}"
    return "vectorized", f"at least {vectorized.MIN_EXAMPLES} examples"


def write_blessing(input_dict, output_dict, exec_properties, evaluation_uri: str) -> None:
    """Writes the ModelBlessing as TFX's Evaluator executor does after TFMA: the models'
    URIs and ids, the component id, and BLESSED or NOT_BLESSED (file and `blessed`) from
    TFMA's validation result in `evaluation_uri`."""
    import tensorflow_model_analysis as tfma

    blessing = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.BLESSING_KEY]
    )
    model = input_dict[standard_component_specs.MODEL_KEY][0]
    blessing.set_string_custom_property(
        constants.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY, model.uri
    )
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY, model.id)
    if input_dict.get(standard_component_specs.BASELINE_MODEL_KEY):
        baseline = input_dict[standard_component_specs.BASELINE_MODEL_KEY][0]
        blessing.set_string_custom_property(
            constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY, baseline.uri
        )
        blessing.set_int_custom_property(
            constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY, baseline.id
        )
    if "current_component_id" in exec_properties:
        blessing.set_string_custom_property("component_id", exec_properties["current_component_id"])
    validation = tfma.load_validation_result(evaluation_uri)
    if validation.validation_ok:
        name, value = constants.BLESSED_FILE_NAME, constants.BLESSED_VALUE
    else:
        name, value = constants.NOT_BLESSED_FILE_NAME, constants.NOT_BLESSED_VALUE
    io_utils.write_string_file(os.path.join(blessing.uri, name), "")
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY, value)
    logging.info("Blessing result %s written to %s.", validation.validation_ok, blessing.uri)


def record_overall_metrics(output_dict) -> dict[str, float]:
    """Copies the metrics of the whole evaluation set (TFMA's overall slice) onto the
    ModelEvaluation artifact as float custom properties (`conveyor_metric_<name>`, and
    `conveyor_baseline_metric_<name>` for the baseline), so that ML Metadata answers for them
    without TFMA: the pipeline's history page reads them for every night. Returns them."""
    import tensorflow_model_analysis as tfma

    evaluation = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.EVALUATION_KEY]
    )
    recorded = {}
    for per_slice in tfma.load_metrics(evaluation.uri):
        if per_slice.HasField("cross_slice_key") or per_slice.slice_key.single_slice_keys:
            continue
        for item in per_slice.metric_keys_and_values:
            key = item.key
            if key.is_diff or not item.value.HasField("double_value"):
                continue
            prefix = BASELINE_METRIC_PREFIX if key.model_name == "baseline" else METRIC_PREFIX
            name = prefix + key.name + (f"_{key.output_name}" if key.output_name else "")
            recorded[name] = float(item.value.double_value.value)
    for name, value in recorded.items():
        evaluation.set_float_custom_property(name, value)
    return recorded


def bless(blessing, reason: str) -> None:
    """Marks a blessing BLESSED the way TFX's Evaluator does (the BLESSED file in its folder and
    `blessed` = 1), removing TFX's NOT_BLESSED file, and records why on the artifact."""
    not_blessed = os.path.join(blessing.uri, constants.NOT_BLESSED_FILE_NAME)
    if fileio.exists(not_blessed):
        fileio.remove(not_blessed)
    io_utils.write_string_file(os.path.join(blessing.uri, constants.BLESSED_FILE_NAME), "")
    blessing.set_int_custom_property(
        constants.ARTIFACT_PROPERTY_BLESSED_KEY, constants.BLESSED_VALUE
    )
    blessing.set_string_custom_property(GATE_PROPERTY, reason)


def judge_evaluation(evaluation_uri: str, eval_config, level: float) -> dict:
    """Judges every change threshold of `eval_config` on the metrics TFMA wrote to
    `evaluation_uri`, and decides whether TFMA's failed validation is only noise.

    Returns the record written to `confidence_gate.json`: each change threshold (slice, metric,
    diff, interval, threshold, TFMA's decision and the gate's), TFMA's failures the gate does
    not judge (value thresholds, missing metrics or slices), `rebless` and `decision`.
    """
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.metrics import metric_types
    from tensorflow_model_analysis.proto import config_pb2
    from tensorflow_model_analysis.slicer import slicer_lib as slicer
    from tensorflow_model_analysis.utils import model_util

    validation = tfma.load_validation_result(evaluation_uri)
    slices = []
    for per_slice in tfma.load_metrics(evaluation_uri):
        if per_slice.HasField("cross_slice_key"):
            continue
        values = {
            metric_types.MetricKey.from_proto(kv.key): kv for kv in per_slice.metric_keys_and_values
        }
        slices.append((slicer.deserialize_slice_key(per_slice.slice_key), values))

    thresholds = tfma.metrics.metric_thresholds_from_metrics_specs(
        eval_config.metrics_specs, eval_config=eval_config
    )
    baseline = model_util.get_baseline_model_spec(eval_config)
    judged = []  # (slice key, metric key, threshold, entry)
    for key, per_slice_thresholds in thresholds.items():
        # TFMA's validator skips the baseline's own thresholds; so does the gate.
        if not key.is_diff or (baseline is not None and key.model_name == baseline.name):
            continue
        for slicing_spec, threshold in per_slice_thresholds:
            if not isinstance(threshold, config_pb2.GenericChangeThreshold):
                continue
            if threshold.HasField("relative"):
                continue  # refused by the spec; TFMA's judgement stands
            for slice_key, values in slices:
                if key not in values or not _applies(slicer, slicing_spec, slice_key):
                    continue
                entry = _judge_one(
                    key, slicer.stringify_slice_key(slice_key), values[key], threshold, level
                )
                judged.append((slice_key, key, threshold, entry))

    others = []
    for per_slice in validation.metric_validations_per_slice:
        if per_slice.HasField("cross_slice_key"):
            others.extend(_other(f, "cross slice") for f in per_slice.failures)
            continue
        slice_key = slicer.deserialize_slice_key(per_slice.slice_key)
        for failure in per_slice.failures:
            key = metric_types.MetricKey.from_proto(failure.metric_key)
            match = next(
                (
                    entry
                    for s, k, t, entry in judged
                    if s == slice_key
                    and k == key
                    and failure.metric_threshold.HasField("change_threshold")
                    and failure.metric_threshold.change_threshold == t
                ),
                None,
            )
            if match is None or match["decision"] != "pass":
                others.append(_other(failure, slicer.stringify_slice_key(slice_key)))
    if validation.missing_slices or validation.missing_cross_slices:
        others.append({"slice": "", "metric": "", "message": "slices TFMA found no examples of"})
    if validation.missing_thresholds:
        others.append({"slice": "", "metric": "", "message": "thresholds TFMA could not check"})

    entries = [entry for *_, entry in judged]
    overruled = [e for e in entries if e["tfma"] == "fail" and e["decision"] == "pass"]
    rebless = not validation.validation_ok and not others and bool(overruled)
    if validation.validation_ok:
        decision = "blessed by TFMA: every threshold passed on its point value"
    elif rebless:
        names = ", ".join(f"{e['metric']} ({e['slice']})" for e in overruled)
        decision = (
            f"blessed: TFMA failed only change thresholds on {names}, and no regression is "
            f"significant at the {level:.0%} level"
        )
    else:
        decision = "not blessed: " + "; ".join(
            f"{o['metric'] or 'validation'} ({o['slice'] or 'all slices'}): {o['message']}"
            for o in others
        )
    return {
        "confidence_level": level,
        "method": config_pb2.ConfidenceIntervalOptions.ConfidenceIntervalMethod.Name(
            eval_config.options.confidence_intervals.method
        ).lower(),
        "tfma_validation_ok": bool(validation.validation_ok),
        "blessed": bool(validation.validation_ok or rebless),
        "rebless": rebless,
        "decision": decision,
        "change_thresholds": entries,
        "other_failures": others,
    }


def t_value_of(key_and_value):
    """A t-distribution value (TFMA's `ValueWithTDistribution` fields) from a metric TFMA wrote
    with its interval; None when it wrote none. TFMA stores the 95% bounds around the sample
    mean, the standard error and the degrees of freedom: the mean is the bounds' midpoint."""
    if not key_and_value.HasField("confidence_interval"):
        return None
    ci = key_and_value.confidence_interval
    if not (ci.lower_bound.HasField("double_value") and ci.upper_bound.HasField("double_value")):
        return None
    return types.SimpleNamespace(
        sample_mean=(ci.lower_bound.double_value.value + ci.upper_bound.double_value.value) / 2,
        sample_standard_deviation=ci.standard_error.double_value.value,
        sample_degrees_of_freedom=ci.degrees_of_freedom.value,
        unsampled_value=key_and_value.value.double_value.value,
    )


def _judge_one(key, slice_name: str, key_and_value, threshold, level: float) -> dict:
    from tensorflow_model_analysis.proto import config_pb2

    direction = (
        LOWER_IS_BETTER
        if threshold.direction == config_pb2.MetricDirection.LOWER_IS_BETTER
        else HIGHER_IS_BETTER
    )
    absolute = threshold.absolute.value if threshold.HasField("absolute") else None
    value = key_and_value.value.double_value.value
    t_value = t_value_of(key_and_value)
    span = interval(t_value, level) if t_value is not None else None
    if absolute is None:
        judgement = None
    else:
        judgement = judge_change(value, span, direction, absolute)
    return {
        "slice": slice_name,
        "metric": key.name,
        "model": key.model_name,
        "diff": value,
        "interval": [span.lower, span.upper] if span else [None, None],
        "standard_error": t_value.sample_standard_deviation if t_value else None,
        "direction": direction,
        "absolute": absolute,
        "tfma": "pass" if judgement is None or judgement.passed_point else "fail",
        "decision": "pass" if judgement is None or judgement.passed else "fail",
        "reason": judgement.reason if judgement else "no absolute change threshold",
    }


def _other(failure, slice_name: str) -> dict:
    threshold = failure.metric_threshold
    kind = "change" if threshold.HasField("change_threshold") else "value"
    value = failure.metric_value.double_value.value
    message = failure.message.strip() or f"{kind} threshold not met (value {value:+.4f})"
    return {"slice": slice_name, "metric": failure.metric_key.name, "message": message}


def _applies(slicer, slicing_spec, slice_key) -> bool:
    if slicing_spec is None:
        return True
    return slicer.SingleSliceSpec(spec=slicing_spec).is_slice_applicable(slice_key)


def _eval_config(exec_properties: dict, has_baseline: bool):
    """The EvalConfig TFX's executor validated with: the spec's, with TFMA's defaults (model
    names `candidate` and `baseline`) filled in the same way."""
    import tensorflow_model_analysis as tfma

    eval_config = tfma.EvalConfig()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.EVAL_CONFIG_KEY], eval_config
    )
    return tfma.utils.update_eval_config_with_defaults(
        eval_config, has_baseline=has_baseline, rubber_stamp=True
    )


def _fmt(number) -> str:
    return "-" if number is None else f"{number:+.4f}"
