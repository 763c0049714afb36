"""The vectorized engine's accumulators are TFMA's, built over whole batches: the same buckets
and confusion matrices TFMA's own combiners build example by example; what the engine cannot
compute is named, at validate and at run time (tests/e2e/test_vectorized_evaluator.py runs it
against TFMA on real models)."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.spec.loading import SpecError, load_spec


def _computations(overrides=(), has_baseline=False):
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.metrics import metric_specs, metric_types

    from pipelines.builder.nodes.evaluator import eval_config

    config = tfma.utils.update_eval_config_with_defaults(
        eval_config(load_spec("taxi", overrides=list(overrides)).spec),
        has_baseline=has_baseline,
        rubber_stamp=True,
    )
    computations = metric_specs.to_computations(config.metrics_specs, eval_config=config)
    return config, [c for c in computations if type(c) is metric_types.MetricComputation]


def _tfma_accumulator(combiner, labels, predictions):
    """TFMA's own combiner, one example at a time, as its evaluator feeds it."""
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.metrics import metric_types

    accumulator = combiner.create_accumulator()
    assert combiner._key.model_name == ""  # one model: TFMA's inputs are not keyed by name
    for label, prediction in zip(labels, predictions, strict=True):
        accumulator = combiner.add_input(
            accumulator,
            metric_types.StandardMetricInputs(
                {
                    tfma.LABELS_KEY: np.array([label]),
                    tfma.PREDICTIONS_KEY: np.array([prediction]),
                    tfma.EXAMPLE_WEIGHTS_KEY: np.array([1.0]),
                }
            ),
        )
    return accumulator


@pytest.mark.parametrize("fractional", [False, True], ids=["binary-labels", "fractional-labels"])
def test_batch_accumulators_are_tfmas_example_by_example(fractional):
    from components.evaluator.vectorized import accumulator_from_sums, batch_sums

    overrides = ["evaluation.metrics=[{name: AUC, lower_bound: 0.5}, {name: BinaryAccuracy}]"]
    _, computations = _computations(overrides)
    rng = np.random.default_rng(7)
    labels = rng.random(500) if fractional else rng.integers(0, 2, 500).astype(np.float64)
    # Predictions at the edges too: below 0, above 1, exactly on the 0.5 threshold.
    predictions = (
        np.concatenate([rng.random(494), [-0.2, 0.0, 0.5, 0.5, 1.0, 1.3]])
        .astype(np.float32)
        .astype(np.float64)
    )
    assert {type(c.combiner).__name__ for c in computations} == {
        "_CalibrationHistogramCombiner",
        "_BinaryConfusionMatrixCombiner",
    }
    for computation in computations:
        combiner = computation.combiner
        _assert_same_accumulator(
            accumulator_from_sums(combiner, batch_sums(combiner, labels, predictions)),
            _tfma_accumulator(combiner, labels, predictions),
        )


def _assert_same_accumulator(ours, theirs) -> None:
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        a, b = ours[key], theirs[key]
        if hasattr(b, "matrix"):
            assert np.allclose(tuple(a.matrix), tuple(b.matrix), rtol=1e-12, atol=1e-12)
        else:
            assert a.bucket_id == b.bucket_id and a.weighted_examples == pytest.approx(
                b.weighted_examples, rel=1e-12
            )
            assert a.weighted_labels == pytest.approx(b.weighted_labels, rel=1e-12)
            assert a.weighted_predictions == pytest.approx(b.weighted_predictions, rel=1e-12)


def test_sums_held_over_batches_are_tfmas_accumulator_of_all_their_examples():
    """The engine holds one slice's sums over a bundle's batches and hands on TFMA's
    accumulator once: the sum of the batches' sums must be TFMA's accumulator of their union."""
    from components.evaluator.vectorized import accumulator_from_sums, batch_sums

    overrides = ["evaluation.metrics=[{name: AUC, lower_bound: 0.5}, {name: BinaryAccuracy}]"]
    _, computations = _computations(overrides)
    rng = np.random.default_rng(11)
    labels = rng.integers(0, 2, 700).astype(np.float64)
    predictions = rng.random(700).astype(np.float32).astype(np.float64)
    bounds = [0, 1, 250, 251, 600, 700]  # uneven batches, two of one example
    for computation in computations:
        combiner = computation.combiner
        total = sum(
            batch_sums(combiner, labels[start:end], predictions[start:end])
            for start, end in zip(bounds[:-1], bounds[1:], strict=True)
        )
        _assert_same_accumulator(
            accumulator_from_sums(combiner, total),
            _tfma_accumulator(combiner, labels, predictions),
        )


def test_the_column_parser_reads_the_columns_as_tfxs_decoder_does():
    """Slicing columns and labels are parsed with TensorFlow's example parser once the first
    batch has been decoded with TFX's: values and the example of each value must be the same,
    for every kind of feature, several values, an empty list and a missing feature."""
    import pyarrow.compute as pc
    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    from components.evaluator.vectorized import _parse_columns, _tensorflow_type

    def example(kind=None, hour=None, fare=None):
        message = tf.train.Example()
        features = message.features.feature
        for name, values, field in (
            ("kind", kind, "bytes_list"),
            ("hour", hour, "int64_list"),
            ("fare", fare, "float_list"),
        ):
            if values is not None:  # None: the feature is missing; []: an empty list
                getattr(features[name], field).value.extend(values)
        return message.SerializeToString()

    records = [
        example(kind=[b"Cash"], hour=[3], fare=[1.5]),
        example(kind=[b"Credit Card", b"Cash"], hour=[], fare=[2.25, 0.1]),
        example(hour=[23], fare=[]),
        example(kind=[b"Cash"], hour=[0, 7], fare=[1e30]),
    ]
    decoded = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(records)
    types = {
        name: _tensorflow_type(decoded.schema.field(name).type.value_type)
        for name in ("kind", "hour", "fare")
    }
    parsed = _parse_columns(types)(tf.constant(records))
    for name in types:
        column = decoded.column(decoded.schema.get_field_index(name))
        values, parents = (t.numpy() for t in parsed[name])
        expected = pc.list_flatten(column).to_numpy(zero_copy_only=False)
        assert values.dtype == expected.dtype and values.tolist() == expected.tolist(), name
        assert parents.tolist() == np.asarray(pc.list_parent_indices(column)).tolist(), name


def test_the_taxi_evaluation_is_one_the_engine_computes():
    from components.evaluator.vectorized import unsupported

    config, _ = _computations(has_baseline=True)
    assert unsupported(config) == []


def test_what_the_engine_cannot_compute_is_named():
    from components.evaluator.vectorized import unsupported

    config, _ = _computations(
        [
            "evaluation.metrics=[{name: ExampleCount}, {name: AUC, lower_bound: 0.5}]",
            "evaluation.slices=[[], [payment_type, company]]",
            "evaluation.confidence={level: 0.9}",
        ]
    )
    reasons = " | ".join(unsupported(config))
    assert "confidence intervals" in reasons
    assert "['payment_type', 'company']" in reasons
    # The spec checks metric names; the engine checks TFMA's computations themselves.
    config.options.ClearField("compute_confidence_intervals")
    del config.slicing_specs[1:]
    assert unsupported(config) == ["the metric computation example_count (_ExampleCountCombiner)"]
    assert "Keras" in unsupported(config, {"candidate": "tf_keras"})[-1]


@pytest.mark.parametrize(
    "override, named",
    [
        ("evaluation.confidence={level: 0.9}", "`confidence`"),
        ("evaluation.metrics=[{name: MeanLabel, lower_bound: 0.1}]", "['MeanLabel']"),
        ("evaluation.slices=[[payment_type, company]]", "[['payment_type', 'company']]"),
    ],
)
def test_engine_vectorized_refuses_at_validate_what_it_cannot_compute(override, named):
    with pytest.raises(SpecError) as error:
        load_spec("taxi", overrides=["evaluation.engine=vectorized", override])
    message = str(error.value)
    assert "evaluation.engine is vectorized" in message and named in message
    assert "Traceback" not in message


def test_the_engine_is_auto_by_default_and_picks_the_executor(tmp_path):
    from components.evaluator.executor import (
        AutoEngineExecutor,
        Executor,
        VectorizedEngineExecutor,
    )
    from pipelines.builder.pipeline import build_pipeline

    def evaluator_executor(overrides):
        pipeline = build_pipeline(load_spec("taxi", overrides=overrides).spec, tmp_path)
        node = next(node for node in pipeline.components if node.id == "evaluator")
        return node.executor_spec.executor_class

    assert load_spec("taxi").spec.evaluation.engine.value == "auto"
    assert evaluator_executor([]) is AutoEngineExecutor
    assert evaluator_executor(["evaluation.engine=tfma"]) is Executor
    assert evaluator_executor(["evaluation.engine=vectorized"]) is VectorizedEngineExecutor
