"""The vectorized evaluation engine: TFMA's metrics accumulated over whole batches.

TFMA 0.47 feeds its metric combiners one example at a time, and on a big evaluation split that
is nearly all of the Evaluator's time (docs/model-gate.md, "Where the evaluation's time goes").
Two of TFMA's combiners accumulate nothing but counts: the calibration histogram (three weighted
sums per bucket of the prediction), from which TFMA derives AUC, the precision-recall AUC and the
calibration and confusion-matrix plots, and binary confusion matrices at fixed thresholds (four
counts per threshold), from which it derives accuracy, precision, recall and the rest. This
engine computes those accumulators, in TFMA's own accumulator types, over whole batches with
numpy, and leaves everything else to TFMA: its combiners merge the accumulators, its derived
computations turn them into metrics, its code adds the candidate-minus-baseline diffs, its
validator judges the thresholds and its writers write the EvalResult. The blessing is written
as TFX's Evaluator writes it.

It runs as one Beam pipeline: list the split's files, spread them over the workers, read each
in batches with tf.data, run every model's signatures over each batch (models loaded once per
worker, in `DoFn.setup`), parse only the slicing columns (and labels the models do not output)
from the examples, hold each slice's sums over the bundle, `CombinePerKey` over the slices, then
TFMA's stages. `unsupported(...)` names what of an EvalConfig the engine cannot compute; the
executor then runs TFMA itself.
"""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np

# Below this many evaluation examples `engine: auto` keeps TFMA: TFMA's own time is then a few
# seconds, under the engine's fixed cost of tracing both models' signatures, and small splits
# are where TFMA's every option (and the tests of the whole pipeline) keep meeting TFMA itself.
MIN_EXAMPLES = 10_000
# Examples per batch: large enough that numpy and the models' signatures, not Python, do the
# work; small enough that a worker holds a batch's predictions for every slice with ease.
BATCH_SIZE = 2_048
# Slices whose sums one worker holds before handing them on as TFMA's accumulators: a slicing
# column with many values costs at most this many slices' sums (AUC's histogram, 10,002 buckets
# of three sums, is 240 kB per slice and model) on top of the batch.
MAX_HELD_SLICES = 256
ENGINES = ("auto", "tfma", "vectorized")

_HISTOGRAM = "_CalibrationHistogramCombiner"
_CONFUSION = "_BinaryConfusionMatrixCombiner"


def unsupported(eval_config, model_types: dict[str, str] | None = None) -> list[str]:
    """What of `eval_config` (after TFMA's defaults) this engine cannot compute, one phrase
    each; empty when it computes all of it. `model_types` maps model names to TFMA's model type,
    whose Keras models add their compiled metrics unless `include_default_metrics` is off."""
    from tensorflow_model_analysis import constants
    from tensorflow_model_analysis.metrics import metric_specs, metric_types, metric_util

    reasons = []
    options = eval_config.options
    if options.compute_confidence_intervals.value:
        reasons.append("confidence intervals (evaluation.confidence; TFMA resamples examples)")
    if options.min_slice_size.value > 1:
        reasons.append("options.min_slice_size")
    if eval_config.cross_slicing_specs:
        reasons.append("cross slicing")
    for slicing in eval_config.slicing_specs:
        if slicing.feature_values or slicing.slice_keys_sql or len(slicing.feature_keys) > 1:
            reasons.append(f"the slice {list(slicing.feature_keys)} (one column or overall only)")
    for spec in eval_config.model_specs:
        if not spec.label_key or spec.label_keys:
            reasons.append(f"model {spec.name!r} without one label_key")
        if not spec.prediction_key or spec.prediction_keys:
            reasons.append(f"model {spec.name!r} without one prediction_key")
        if not spec.signature_name:
            reasons.append(f"model {spec.name!r} without a signature_name")
        if spec.example_weight_key or spec.example_weight_keys:
            reasons.append("example weights")
    defaults_on = (
        not options.HasField("include_default_metrics") or options.include_default_metrics.value
    )
    for name, model_type in (model_types or {}).items():
        if model_type == constants.TF_KERAS and defaults_on:
            reasons.append(f"model {name!r} is a Keras model, whose compiled metrics TFMA adds")
    for spec in eval_config.metrics_specs:
        if spec.query_key:
            reasons.append("query_key")
        if spec.HasField("binarize") or spec.HasField("aggregate"):
            reasons.append("binarize/aggregate")
    if reasons:
        return sorted(set(reasons))
    for computation in metric_specs.to_computations(
        eval_config.metrics_specs, eval_config=eval_config
    ):
        if type(computation) is metric_types.MetricComputation:
            combiner = computation.combiner
            kind = type(combiner).__name__
            name = computation.keys[0].name
            if kind not in (_HISTOGRAM, _CONFUSION):
                reasons.append(f"the metric computation {name} ({kind})")
            elif (
                combiner._class_weights
                or combiner._example_weighted
                or combiner._aggregation_type is not None
                or combiner._key.sub_key is not None
                or combiner._key.output_name
            ):
                reasons.append(f"{name} weighted, aggregated or per output")
            elif kind == _CONFUSION and (
                combiner._example_id_key
                or combiner._extract_label_prediction_and_weight
                is not metric_util.to_label_prediction_example_weight
            ):
                reasons.append(f"{name} with example ids or its own label extraction")
        elif not isinstance(computation, metric_types.DerivedMetricComputation):
            reasons.append(f"the metric computation {type(computation).__name__}")
    return sorted(set(reasons))


def histogram_sums(combiner, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """The sums TFMA's calibration histogram keeps per bucket, over a batch: rows weighted
    labels, weighted predictions and examples, one column per bucket id (unit weights), as
    `_CalibrationHistogramCombiner.add_input` adds them example by example."""
    if combiner._fractional_labels and ((labels < 0) | (labels > 1)).any():
        raise ValueError("fractional labels must be within [0, 1], as TFMA requires")
    buckets = combiner._num_buckets
    value = predictions if combiner._prediction_based_bucketing else labels
    raw = (value - combiner._left) / combiner._range * buckets + 1
    index = np.where(raw < 0, 0, np.where(raw >= buckets + 1, buckets + 1, raw)).astype(np.int64)
    size = buckets + 2
    # A label l splits into (1, p, weight l) and (0, p, weight 1 - l) under fractional labels:
    # the bucket's sums are the same as for the unsplit example.
    return np.stack(
        [
            np.bincount(index, labels, size),
            np.bincount(index, predictions, size),
            np.bincount(index, minlength=size).astype(np.float64),
        ]
    )


def histogram_from_sums(sums: np.ndarray) -> dict:
    """TFMA's calibration-histogram accumulator ({bucket id: Bucket}) of `histogram_sums`."""
    from tensorflow_model_analysis.metrics import calibration_histogram

    weighted_labels, weighted_predictions, examples = sums.tolist()
    return {
        i: calibration_histogram.Bucket(i, weighted_labels[i], weighted_predictions[i], examples[i])
        for i in np.nonzero(sums[2])[0].tolist()
    }


def confusion_counts(combiner, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """The counts TFMA's binary confusion matrices keep, over a batch: one row (tp, tn, fp,
    fn) per threshold, in the combiner's order (unit weights)."""
    matrices = combiner._binary_confusion_matrices
    fractional = matrices._enable_fractional_labels
    if fractional and ((labels < 0) | (labels > 1)).any():
        raise ValueError("fractional labels must be within [0, 1], as TFMA requires")
    counts = np.zeros((len(matrices._thresholds), 4))
    for row, threshold in enumerate(matrices._thresholds):
        above = predictions > threshold
        # Fractional labels: label l counts l as a positive and 1 - l as a negative.
        positive = labels if fractional else (labels > threshold).astype(np.float64)
        negative = 1.0 - positive
        counts[row] = (
            positive[above].sum(),
            negative[~above].sum(),
            negative[above].sum(),
            positive[~above].sum(),
        )
    return counts


def confusion_from_counts(combiner, counts: np.ndarray) -> dict:
    """TFMA's binary confusion-matrix accumulator ({threshold: entry}) of `confusion_counts`."""
    from tensorflow_model_analysis.contrib.aggregates import binary_confusion_matrices as bcm

    matrices = combiner._binary_confusion_matrices
    # TFMA's own empty entries (its public extract_output on an empty accumulator), so that the
    # entry type, private to TFMA, is never named here; only the counts are replaced.
    accumulator = matrices.extract_output({})
    for threshold, (tp, tn, fp, fn) in zip(matrices._thresholds, counts.tolist(), strict=True):
        accumulator[threshold] = accumulator[threshold]._replace(
            matrix=bcm.Matrix(tp=tp, tn=tn, fp=fp, fn=fn)
        )
    return accumulator


def batch_sums(combiner, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """What one of the combiners this engine knows accumulates over a batch, as an array
    (`histogram_sums` or `confusion_counts`): sums of batches are the sums of their union."""
    if type(combiner).__name__ == _HISTOGRAM:
        return histogram_sums(combiner, labels, predictions)
    return confusion_counts(combiner, labels, predictions)


def accumulator_from_sums(combiner, sums: np.ndarray):
    """TFMA's accumulator of `combiner` holding `batch_sums` (or their sum over batches)."""
    if type(combiner).__name__ == _HISTOGRAM:
        return histogram_from_sums(sums)
    return confusion_from_counts(combiner, sums)


def list_files(pattern: str) -> list[str]:
    """The files matching `pattern` (TensorFlow's file systems, which TFX's artifacts use);
    ValueError when none do, as Beam's TFRecord source raises."""
    import tensorflow as tf

    paths = sorted(tf.io.gfile.glob(pattern))
    if not paths:
        raise ValueError(f"no files match {pattern}")
    return paths


class ReadRecordBatches(beam.DoFn):
    """A TFRecord file -> arrays of up to `BATCH_SIZE` serialized records, read by tf.data.

    Beam's TFRecord source yields one element per record, and at a few hundred thousand
    records its per-record Python (framing, checksums, one Beam element each) cost more than
    both models together; tf.data reads, checks and batches the records in C++. A file is the
    unit of work, as it is for Beam's source on gzip files, which cannot be split."""

    def process(self, path: str):
        """Yields the file's records in batches (numpy arrays of bytes)."""
        import tensorflow as tf

        compression = "GZIP" if path.endswith(".gz") else ""
        dataset = tf.data.TFRecordDataset(path, compression_type=compression)
        yield from dataset.batch(BATCH_SIZE).as_numpy_iterator()


class AccumulateBatches(beam.DoFn):
    """Batches of serialized tf.Examples -> (slice key, [TFMA accumulator per computation]).

    Every model's signature runs once per batch (its label from its preprocessing functions
    where they output it, else from the example); slices are TFMA's keys for each value of a
    slicing column, found with TFMA's own slicer. The sums of a bundle's batches are held per
    slice (`batch_sums`) and handed on as TFMA's accumulators once per slice, when the bundle
    ends or when `MAX_HELD_SLICES` are held, rather than once per batch: building TFMA's
    accumulators, merging and encoding them cost more than the sums themselves."""

    def __init__(self, eval_config, model_paths: dict[str, str], computations):
        """`model_paths` maps each model spec's name to its SavedModel directory."""
        self._eval_config = eval_config
        self._model_paths = model_paths
        self._computations = computations
        self._models = None
        self._slice_keys = {}
        self._held = {}

    def setup(self):
        """Loads every model once per worker; finds the columns read from the examples."""
        import tensorflow as tf
        from tfx_bsl.coders import example_coder

        self._models = {name: tf.saved_model.load(p) for name, p in self._model_paths.items()}
        self._columns = set()
        for spec in self._eval_config.slicing_specs:
            self._columns.update(spec.feature_keys)
        for spec in self._eval_config.model_specs:
            signatures = self._models[spec.name].signatures
            preprocessed = set()
            for name in spec.preprocessing_function_names:
                preprocessed.update(signatures[name].structured_outputs)
            if spec.label_key not in preprocessed:
                self._columns.add(spec.label_key)
        # TFX's decoder until the first batch has shown the columns' types; then TensorFlow's
        # example parser for those columns alone (`_parse_columns`).
        self._decoder = example_coder.ExamplesToRecordBatchDecoder()
        self._parser = None

    def start_bundle(self):
        """Starts holding sums afresh."""
        self._held = {}

    def process(self, batch):
        """Adds the batch's sums to its slices'; yields TFMA's accumulators of every held
        slice when more than `MAX_HELD_SLICES` are held. `batch` is an array of serialized
        tf.Examples (ReadRecordBatches)."""
        import tensorflow as tf

        size = len(batch)
        records = tf.constant(batch)
        columns = self._example_columns(batch, records)
        labels, predictions = {}, {}
        for spec in self._eval_config.model_specs:
            model = self._models[spec.name]
            transformed = {}
            for name in spec.preprocessing_function_names:
                transformed.update(_call(model.signatures[name], records))
            if spec.label_key in transformed:
                label = transformed[spec.label_key]
            else:
                label = _column(columns, spec.label_key, size)
            labels[spec.name] = _one_per_example(label, "label", spec, size)
            outputs = _call(model.signatures[spec.signature_name], records)
            if spec.prediction_key not in outputs:
                raise ValueError(
                    f"model {spec.name!r}: signature {spec.signature_name!r} has no output "
                    f"{spec.prediction_key!r} (it has {sorted(outputs)})"
                )
            predictions[spec.name] = _one_per_example(
                outputs[spec.prediction_key], "prediction", spec, size
            )
        for slice_key, mask in self._slices(columns, size):
            sums = [
                batch_sums(
                    c.combiner,
                    labels[c.combiner._key.model_name][mask],
                    predictions[c.combiner._key.model_name][mask],
                )
                for c in self._computations
            ]
            held = self._held.get(slice_key)
            if held is None:
                self._held[slice_key] = sums
            else:
                for total, more in zip(held, sums, strict=True):
                    total += more
        if len(self._held) > MAX_HELD_SLICES:
            yield from self._release()

    def finish_bundle(self):
        """Yields TFMA's accumulators of every slice still held (global window, as every
        element of this pipeline)."""
        from apache_beam.transforms import window
        from apache_beam.utils.timestamp import MIN_TIMESTAMP
        from apache_beam.utils.windowed_value import WindowedValue

        for element in self._release():
            yield WindowedValue(element, MIN_TIMESTAMP, [window.GlobalWindow()])

    def _release(self):
        """(slice key, [TFMA accumulator per computation]) of every held slice; holds none."""
        held, self._held = self._held, {}
        for slice_key, sums in held.items():
            yield (
                slice_key,
                [
                    accumulator_from_sums(c.combiner, total)
                    for c, total in zip(self._computations, sums, strict=True)
                ],
            )

    def _example_columns(self, batch, records) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{column: (its values, the index of each value's example)} of the columns read
        from the examples, for the columns the batch has."""
        if not self._columns:
            return {}
        if self._parser is not None:
            return {
                name: (values.numpy(), parents.numpy())
                for name, (values, parents) in self._parser(records).items()
            }
        import pyarrow.compute as pc

        features = self._decoder.DecodeBatch(list(batch))
        columns, types = {}, {}
        for name in self._columns:
            position = features.schema.get_field_index(name)
            if position < 0:
                continue
            values = features.column(position)
            columns[name] = (
                pc.list_flatten(values).to_numpy(zero_copy_only=False),
                np.asarray(pc.list_parent_indices(values)),
            )
            types[name] = _tensorflow_type(features.schema.field(position).type.value_type)
        if set(types) == self._columns and None not in types.values():
            self._parser = _parse_columns(types)
        return columns

    def _slices(self, columns, size: int):
        """(TFMA's slice key, mask of the batch's examples in it) for every slice spec."""
        from tensorflow_model_analysis.slicer import slice_accessor
        from tensorflow_model_analysis.slicer import slicer_lib as slicer

        masks = {}
        specs = self._eval_config.slicing_specs or [None]
        for index, spec in enumerate(specs):
            if spec is None or not spec.feature_keys:
                masks[()] = np.ones(size, bool)
                continue
            [column] = spec.feature_keys
            if column not in columns:
                continue
            flat, parents = columns[column]
            for value in np.unique(flat):
                memo = (index, value)
                if memo not in self._slice_keys:
                    single = slicer.SingleSliceSpec(spec=spec)
                    accessor = slice_accessor.SliceAccessor([], {column: np.array([value])})
                    self._slice_keys[memo] = list(single.generate_slices(accessor))
                for slice_key in self._slice_keys[memo]:
                    mask = masks.setdefault(slice_key, np.zeros(size, bool))
                    mask[parents[flat == value]] = True
        return masks.items()


def _tensorflow_type(value_type):
    """The TensorFlow dtype a tf.Example feature decoded into Arrow as `value_type` has (None
    for a column of nulls, whose kind the examples never showed)."""
    import pyarrow as pa
    import tensorflow as tf

    if pa.types.is_integer(value_type):
        return tf.int64
    if pa.types.is_floating(value_type):
        return tf.float32
    if pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type):
        return tf.string
    return None


def _parse_columns(types: dict):
    """A function of serialized tf.Examples -> {column: (values, index of each value's
    example)} for these columns alone. TFX's decoder parses every feature of every example,
    which on the taxi examples took longer than both models' signatures together;
    TensorFlow's example parser reads only the features asked for."""
    import tensorflow as tf

    features = {
        name: tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64) for name, dtype in types.items()
    }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def parse(records):
        parsed = tf.io.parse_example(records, features)
        return {name: (t.flat_values, t.value_rowids()) for name, t in parsed.items()}

    return parse


def _call(signature, records) -> dict[str, np.ndarray]:
    """Calls a signature that takes serialized tf.Examples; returns its outputs as arrays."""
    _, inputs = signature.structured_input_signature
    if len(inputs) != 1:
        raise ValueError(f"signature takes {sorted(inputs)}, not one tensor of tf.Examples")
    [name] = inputs
    return {k: v.numpy() for k, v in signature(**{name: records}).items()}


def _column(columns, name: str, size: int) -> np.ndarray:
    """A raw feature with one value per example, from the batch's columns."""
    if name not in columns:
        raise ValueError(f"the examples have no feature {name!r}")
    values, parents = columns[name]
    if len(values) != size or (parents != np.arange(size)).any():
        raise ValueError(f"feature {name!r} does not have one value in every example")
    return values


def _one_per_example(values, what: str, spec, size: int) -> np.ndarray:
    """Values as float64, one per example, as TFMA converts a scalar label or prediction."""
    array = np.asarray(values)
    if array.shape[0] != size or array.size != size:
        raise ValueError(
            f"model {spec.name!r}: the {what} has shape {array.shape} for {size} examples; the "
            "vectorized engine needs one value per example (set evaluation.engine: tfma)"
        )
    return array.reshape(size).astype(np.float64)


class MergeAccumulators(beam.CombineFn):
    """Merges per-batch accumulators with TFMA's own combiners (each computation's
    `merge_accumulators`), and extracts TFMA's outputs: the combine step of TFMA's
    `_ComputationsCombineFn`, fed whole batches instead of examples."""

    def __init__(self, computations):
        """`computations`: TFMA's non-derived metric computations, in the order accumulated."""
        self._computations = computations

    def setup(self):
        """Sets up TFMA's combiners, as TFMA does before using them."""
        for computation in self._computations:
            computation.combiner.setup()

    def create_accumulator(self):
        """An empty accumulator (None until a batch arrives)."""
        return None

    def get_accumulator_coder(self):
        """Pickles each accumulator whole. Beam's default coder pickles every object it does
        not know on its own: each of a histogram's 10,002 buckets, a call each."""
        return beam.coders.PickleCoder()

    def add_input(self, accumulator, element):
        """Adds one batch's accumulators."""
        return self.merge_accumulators([accumulator, element])

    def merge_accumulators(self, accumulators):
        """Merges accumulators computation by computation, with TFMA's combiners."""
        present = [a for a in accumulators if a is not None]
        if not present:
            return None
        if len(present) == 1:
            return present[0]
        return [
            c.combiner.merge_accumulators([a[i] for a in present])
            for i, c in enumerate(self._computations)
        ]

    def extract_output(self, accumulator):
        """TFMA's metrics dict of the slice, from every combiner's `extract_output`."""
        result = {}
        for i, computation in enumerate(self._computations):
            state = computation.combiner.create_accumulator() if accumulator is None else None
            result.update(
                computation.combiner.extract_output(accumulator[i] if state is None else state)
            )
        return result


def evaluate(pipeline, file_patterns: list[str], eval_config, model_paths, output_path) -> None:
    """Adds the whole evaluation to `pipeline`: read `file_patterns` (gzip or plain
    TFRecords of tf.Examples), accumulate, combine per slice, derive, diff and validate with
    TFMA, and write TFMA's EvalResult (metrics, plots, attributions, validations and
    eval_config.json) to `output_path`. `eval_config` has TFMA's defaults applied (TFX's
    executor applies them), and `unsupported(eval_config)` is empty."""
    import tensorflow_model_analysis as tfma

    # TFMA 0.47.1 (pinned in requirements.lock) has no public form of these `mpv._` stages (its
    # evaluator is one opaque PTransform from extracts); tests/e2e/test_vectorized_evaluator.py
    # checks every metric, plot, validation and blessing against TFMA's own run, so an upgrade
    # that changes them fails there.
    from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as mpv
    from tensorflow_model_analysis.evaluators import metrics_validator
    from tensorflow_model_analysis.metrics import metric_specs, metric_types
    from tensorflow_model_analysis.utils import model_util

    separated = mpv._filter_and_separate_computations(
        metric_specs.to_computations(eval_config.metrics_specs, eval_config=eval_config)
    )
    computations = separated.non_derived_computations
    baseline = model_util.get_baseline_model_spec(eval_config)
    sliced = (
        pipeline
        | "FilePatterns" >> beam.Create(file_patterns)
        | "ListFiles" >> beam.FlatMap(list_files)
        # One file per element from here: spread over the workers, as a source's splits are.
        | "SpreadFiles" >> beam.Reshuffle()
        | "ReadBatches" >> beam.ParDo(ReadRecordBatches())
        | "AccumulateBatches"
        >> beam.ParDo(AccumulateBatches(eval_config, model_paths, computations))
        | "CombinePerSlice" >> beam.CombinePerKey(MergeAccumulators(computations))
        # TFMA's own stages from here on, as its MetricsPlotsAndValidationsEvaluator runs them.
        | "AddDerivedCrossSliceAndDiffMetrics"
        >> mpv._AddDerivedCrossSliceAndDiffMetrics(  # pylint: disable=no-value-for-parameter
            separated.derived_computations,
            separated.cross_slice_computations,
            list(eval_config.cross_slicing_specs),
            baseline.name if baseline else None,
        )
        | "AddCIDerivedMetrics"
        >> beam.Map(mpv._add_ci_derived_metrics, separated.ci_derived_computations)
        | "RemovePrivateMetrics" >> beam.MapTuple(mpv._remove_private_metrics)
    )
    metrics = sliced | "FilterByMetrics" >> beam.Map(
        mpv._filter_by_key_type, metric_types.MetricKey
    )
    evaluation = {
        tfma.METRICS_KEY: metrics,
        tfma.PLOTS_KEY: sliced
        | "FilterByPlots" >> beam.Map(mpv._filter_by_key_type, metric_types.PlotKey),
        tfma.ATTRIBUTIONS_KEY: sliced
        | "FilterByAttributions" >> beam.Map(mpv._filter_by_key_type, metric_types.AttributionsKey),
        tfma.VALIDATIONS_KEY: metrics
        | "ValidateMetrics" >> beam.Map(metrics_validator.validate_metrics, eval_config),
    }
    shared_models = [
        tfma.default_eval_shared_model(
            eval_saved_model_path=path, model_name=name, eval_config=eval_config
        )
        for name, path in model_paths.items()
    ]
    writers = tfma.default_writers(
        output_path=output_path,
        eval_shared_model=shared_models[0] if len(shared_models) == 1 else shared_models,
        eval_config=eval_config,
    )
    _ = evaluation | "WriteResults" >> tfma.WriteResults(writers=writers)


def file_patterns(split_uris: list[str]) -> list[str]:
    """TFX's pattern for all the files of each split folder."""
    from tfx.utils import io_utils

    return [io_utils.all_files_pattern(uri) for uri in split_uris]


def count_examples(split_uris: list[str], stop_at: int) -> int:
    """The number of tf.Examples in the splits' TFRecord files, counting no further than
    `stop_at` (enough to decide which engine to use)."""
    import tensorflow as tf

    total = 0
    for uri in split_uris:
        for path in sorted(tf.io.gfile.glob(os.path.join(uri, "*"))):
            gzip = path.endswith(".gz")
            dataset = tf.data.TFRecordDataset(path, compression_type="GZIP" if gzip else "")
            for batch in dataset.batch(4096):
                total += int(batch.shape[0])
                if total >= stop_at:
                    return total
    return total
