"""Conveyor's own copy of the raw-TFX taxi Trainer module, used by raw_tfx_nightly.py beside it.

TFX's generic Trainer `run_fn` for the taxi rows, written after the examples in the tfx wheel
(tfx/examples/chicago_taxi_pipeline/taxi_utils_native_keras.py, tfx/examples/penguin/
penguin_utils_*.py) and in their style (two-space indents), minus Transform: the Trainer reads
the raw tf.Examples through `fn_args.data_accessor.tf_dataset_factory` with SchemaGen's schema,
and all preprocessing lives in the Keras model, so the exported model needs nothing else at
serving time.

- Label: `big_tipper` (0/1 int). A missing label is read as 0, as TFX's `_fill_in_missing` does.
- Missing values (empty CSV fields, which CsvExampleGen writes as a feature with no values) are
  filled in by `_fill_in_missing`: numeric columns with NaN, integer categoricals with -1,
  strings with ''. In the model a missing numeric value becomes the mean (0 after
  standardisation) plus a 0/1 "missing" input; -1 is hashed like any other integer; '' is not in
  any vocabulary, so missing and unknown strings share the out-of-vocabulary index.
- Numeric columns: one Keras Normalization over the 7 of them, with the mean and variance of a
  sample of training batches (missing values left out). payment_type and company: StringLookup
  adapted on the same sample (company capped at 100 terms). Hour, day, month and community
  areas: Hashing into 24, 8, 12, 80, 80 bins.
- Network: Dense 32 and 16 (ReLU), one sigmoid output; Adam, learning rate 0.005.
- Export: 'serving_default' takes serialized tf.Examples (parsed as VarLenFeatures, so empty
  fields are accepted whatever the night's schema says) and returns {'outputs': probability}.

The code below this docstring is that of `bench/raw_tfx_taxi_module.py` in the shared folder
beside the repository; tests/unit/test_bench_references.py checks that they stay the same program.
"""
from typing import Dict, List

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow import keras

from tensorflow_metadata.proto.v0 import schema_pb2
from tensorflow_transform.tf_metadata import schema_utils
from tfx import v1 as tfx
from tfx_bsl.public import tfxio

_LABEL_KEY = 'big_tipper'

_NUMERIC_FEATURE_KEYS = [
    'fare', 'trip_miles', 'trip_seconds', 'pickup_latitude', 'pickup_longitude',
    'dropoff_latitude', 'dropoff_longitude'
]
# Integer categoricals -> hash bins (community areas are written as floats, e.g. '24.0').
_HASHED_FEATURE_BUCKETS = {
    'trip_start_hour': 24,
    'trip_start_day': 8,
    'trip_start_month': 12,
    'pickup_community_area': 80,
    'dropoff_community_area': 80,
}
# String categoricals -> vocabulary size cap (None: no cap).
_VOCAB_FEATURE_MAX_TOKENS = {'payment_type': None, 'company': 100}

_HIDDEN_UNITS = [32, 16]
_LEARNING_RATE = 0.005
_DEFAULT_BATCH_SIZE = 128
_ADAPT_ROWS = 10000  # rows of training data the preprocessing layers are adapted on


def _feature_dtypes() -> Dict[str, tf.DType]:
  dtypes = {key: tf.float32 for key in _NUMERIC_FEATURE_KEYS}
  dtypes.update({key: tf.int64 for key in _HASHED_FEATURE_BUCKETS})
  dtypes.update({key: tf.string for key in _VOCAB_FEATURE_MAX_TOKENS})
  return dtypes


def _fill_in_missing(x, default_value):
  """A [batch, 1] dense tensor from a sparse (or dense) one; missing values -> default_value."""
  if not isinstance(x, tf.sparse.SparseTensor):
    return tf.reshape(x, [-1, 1])
  return tf.sparse.to_dense(
      tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]),
      tf.cast(default_value, x.dtype))


def _model_inputs(features):
  """Raw parsed features (sparse or dense) -> the model's dense [batch, 1] inputs."""
  inputs = {}
  for key in _NUMERIC_FEATURE_KEYS:
    inputs[key] = tf.cast(_fill_in_missing(features[key], float('nan')), tf.float32)
  for key in _HASHED_FEATURE_BUCKETS:
    inputs[key] = tf.cast(_fill_in_missing(features[key], -1), tf.int64)
  for key in _VOCAB_FEATURE_MAX_TOKENS:
    inputs[key] = _fill_in_missing(features[key], '')
  return inputs


def _input_fn(file_pattern: List[str],
              data_accessor: tfx.components.DataAccessor,
              schema: schema_pb2.Schema,
              batch_size: int) -> tf.data.Dataset:
  """Generates (features, label) batches for training and evaluation, as TFX examples do."""
  dataset = data_accessor.tf_dataset_factory(
      file_pattern,
      tfxio.TensorFlowDatasetOptions(batch_size=batch_size, label_key=_LABEL_KEY),
      schema)
  return dataset.map(
      lambda features, label: (_model_inputs(features), _fill_in_missing(label, 0)),
      num_parallel_calls=tf.data.AUTOTUNE).repeat()


def _sample(dataset: tf.data.Dataset, batches: int) -> Dict[str, np.ndarray]:
  """The first `batches` batches of a dataset, one flat array per feature."""
  columns = {key: [] for key in _feature_dtypes()}
  for features, _ in dataset.take(batches):
    for key in columns:
      columns[key].append(features[key].numpy().reshape(-1))
  return {key: np.concatenate(values) for key, values in columns.items()}


def _build_keras_model(sample: Dict[str, np.ndarray]) -> keras.Model:
  """The DNN, preprocessing layers included, adapted on `sample`."""
  inputs = {
      key: keras.layers.Input(shape=(1,), name=key, dtype=dtype)
      for key, dtype in _feature_dtypes().items()
  }
  # Numeric columns as one [batch, 7] block: standardised with the sample's mean and variance
  # (missing values left out), then a missing value becomes 0 (the mean) plus a 0/1 indicator.
  numeric = keras.layers.concatenate([inputs[key] for key in _NUMERIC_FEATURE_KEYS])
  values = np.stack([sample[key] for key in _NUMERIC_FEATURE_KEYS], axis=1)
  standardized = keras.layers.Normalization(
      mean=np.nanmean(values, axis=0), variance=np.nanvar(values, axis=0),
      name='numeric_norm')(numeric)
  missing = tf.math.is_nan(numeric)
  parts = [tf.where(missing, tf.zeros_like(standardized), standardized),
           tf.cast(missing, tf.float32)]
  for key, bins in _HASHED_FEATURE_BUCKETS.items():
    parts.append(keras.layers.Hashing(num_bins=bins, output_mode='one_hot',
                                      name=f'{key}_hash')(inputs[key]))
  for key, max_tokens in _VOCAB_FEATURE_MAX_TOKENS.items():
    lookup = keras.layers.StringLookup(max_tokens=max_tokens, num_oov_indices=1,
                                       output_mode='one_hot', name=f'{key}_lookup')
    values = sample[key]
    lookup.adapt(values[values != b''])
    parts.append(lookup(inputs[key]))

  x = keras.layers.concatenate(parts)
  for units in _HIDDEN_UNITS:
    x = keras.layers.Dense(units, activation='relu')(x)
  output = keras.layers.Dense(1, activation='sigmoid')(x)

  model = keras.Model(inputs=inputs, outputs=output)
  model.compile(
      optimizer=keras.optimizers.Adam(learning_rate=_LEARNING_RATE),
      loss=keras.losses.BinaryCrossentropy(),
      metrics=[keras.metrics.BinaryAccuracy(), keras.metrics.AUC()])
  model.summary(print_fn=logging.info)
  return model


def _get_tf_examples_serving_signature(model, schema: schema_pb2.Schema):
  """Returns a serving signature that accepts serialized `tensorflow.Example`s."""
  schema_spec = schema_utils.schema_as_feature_spec(schema).feature_spec
  # Every feature as a VarLenFeature: an empty CSV field is a feature with no values, which a
  # FixedLenFeature refuses even with a default; and tonight's model must also read a later
  # night's rows (TFMA evaluates it as the baseline) whatever that night's schema says.
  feature_spec = {
      key: tf.io.VarLenFeature(schema_spec[key].dtype) for key in _feature_dtypes()
  }

  @tf.function(input_signature=[
      tf.TensorSpec(shape=[None], dtype=tf.string, name='examples')
  ])
  def serve_tf_examples_fn(serialized_tf_example):
    """Returns the output to be used in the serving signature."""
    raw_features = tf.io.parse_example(serialized_tf_example, feature_spec)
    return {'outputs': model(_model_inputs(raw_features))}

  return serve_tf_examples_fn


# TFX Trainer will call this function.
def run_fn(fn_args: tfx.components.FnArgs):
  """Train the model based on given args.

  Args:
    fn_args: Holds args used to train the model as name/value pairs. custom_config may hold
      'batch_size'.
  """
  schema = tfx.utils.parse_pbtxt_file(fn_args.schema_path, schema_pb2.Schema())
  batch_size = int((fn_args.custom_config or {}).get('batch_size', _DEFAULT_BATCH_SIZE))

  train_dataset = _input_fn(fn_args.train_files, fn_args.data_accessor, schema, batch_size)
  eval_dataset = _input_fn(fn_args.eval_files, fn_args.data_accessor, schema, batch_size)

  model = _build_keras_model(_sample(train_dataset, max(1, _ADAPT_ROWS // batch_size)))

  # Write logs to path
  tensorboard_callback = keras.callbacks.TensorBoard(
      log_dir=fn_args.model_run_dir, update_freq='epoch')

  model.fit(
      train_dataset,
      steps_per_epoch=fn_args.train_steps,
      validation_data=eval_dataset,
      validation_steps=fn_args.eval_steps,
      callbacks=[tensorboard_callback])

  signatures = {
      'serving_default': _get_tf_examples_serving_signature(model, schema),
  }
  tf.saved_model.save(model, fn_args.serving_model_dir, signatures=signatures)
