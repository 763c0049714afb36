"""The Keras model Conveyor trains, and the serving module it exports.

Preprocessing lives in the exported SavedModel, so serving needs no code of ours: numeric columns
are standardised with the training statistics (a missing value becomes the mean plus a
"missing" indicator), categorical strings are looked up in their vocabulary (unknown and
missing values share one out-of-vocabulary slot), categorical integers are hashed, and text is
embedded by a pretrained SavedModel (frozen), which the export carries along.

The network on top of that feature vector is Conveyor's dense stack, or the team's own
(`trainer.module` with `build_model(inputs, spec)`): either way Conveyor adds the output head.
"""

from __future__ import annotations

import importlib
import io
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras

from components.trainer.features import (
    DType,
    FeatureSet,
    LabelInfo,
    TrainerConfigError,
)
from components.trainer.parsing import MISSING_INT, parse_examples, raw_input_signature
from components.trainer.signatures import TfServingSignatures, method_names, set_method_names

# Output keys of the exported signatures (TFMA reads PREDICTION_KEY; the label encoder's key is
# the label name with this suffix).
PREDICTION_KEY = {"classification": "probabilities", "regression": "predictions"}
LABEL_SUFFIX = "_encoded"

# TF Serving ignores assets.extra/ (bar its warm-up requests file): a safe place for what a later
# run needs to warm start from this model.
WARM_START_DIR = "assets.extra"
ARCHITECTURE_FILE = "conveyor_architecture.json"
WEIGHTS_FILE = "conveyor_weights.npz"


def load_embedding(path: str) -> Callable[[tf.Tensor], tf.Tensor]:
    """The text embedding module at `path` (relative paths are under the project root): a
    loaded SavedModel, called on a [batch] string tensor for a [batch, dim] one.

    Raises:
      TrainerConfigError: when there is no SavedModel there, or calling it fails.
    """
    from pipelines.core.project import find_project

    folder = path if os.path.isabs(path) else str(find_project().file(path))
    try:
        module = tf.saved_model.load(folder)
    except (OSError, ValueError, tf.errors.OpError) as err:
        raise TrainerConfigError(f"embedding module {path!r} cannot be loaded: {err}") from None
    if not callable(module):
        raise TrainerConfigError(
            f"embedding module {path!r} is not callable: save a tf.Module whose __call__ "
            "takes a batch of strings"
        )
    return module


def _string_table(values: tuple[str, ...]) -> tf.lookup.StaticHashTable:
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(values, tf.string), tf.range(len(values), dtype=tf.int64)
        ),
        default_value=-1,
    )


class Preprocessor(tf.Module):
    """Turns raw feature columns into the network's dense input vector, and labels into targets."""

    def __init__(self, features: FeatureSet):
        super().__init__(name="preprocessor")
        self._features = features
        self._tables = {
            f.name: _string_table(f.vocabulary)
            for f in features.features
            if f.kind == "categorical" and f.dtype is DType.STRING
        }
        label = features.label
        self._label_table = (
            _string_table(label.classes)
            if label.task == "classification" and label.dtype is DType.STRING
            else None
        )
        self.classes = tf.constant(label.classes or ("",), tf.string)
        # Tracked here, so the exported SavedModel carries the embedding modules too.
        self.embeddings = {
            f.name: load_embedding(f.embedding) for f in features.features if f.kind == "text"
        }
        self._embedding_widths = {}
        for name, module in self.embeddings.items():
            sample = module(tf.constant(["a"]))
            if sample.shape.rank != 2:
                raise TrainerConfigError(
                    f"embedding module of feature {name!r} returns shape {sample.shape}; it must "
                    "map a [batch] string tensor to [batch, dim]"
                )
            self._embedding_widths[name] = int(sample.shape[1])

    @property
    def width(self) -> int:
        """Length of the vector `vectorize` returns."""
        width = 0
        for f in self._features.features:
            if f.kind == "numeric":
                width += 2  # standardised value and a missing-value indicator
            elif f.kind == "text":
                width += self._embedding_widths[f.name]
            elif f.dtype is DType.STRING:
                width += len(f.vocabulary) + 1  # one slot for unknown or missing
            else:
                width += f.hash_buckets
        return width

    def vectorize(self, raw: Mapping[str, tf.Tensor]) -> tf.Tensor:
        """The [batch, width] float32 network input from raw columns (column name -> values).

        Per feature, in order: numeric -> standardised value (a missing one is the mean) and a
        missing indicator; categorical text -> one-hot over the vocabulary plus an
        unknown-or-missing slot; integer categorical -> one-hot of its hash bucket; text -> its
        embedding (a missing value embeds "").
        """
        parts = []
        for f in self._features.features:
            value = raw[f.name]
            if f.kind == "numeric":
                value = tf.cast(value, tf.float32)
                missing = tf.math.is_nan(value)
                if f.dtype is DType.INT:
                    missing = tf.logical_or(missing, tf.equal(raw[f.name], MISSING_INT))
                filled = tf.where(missing, tf.cast(f.mean, tf.float32), value)
                parts.append(((filled - f.mean) / f.std)[:, None])
                parts.append(tf.cast(missing, tf.float32)[:, None])
            elif f.kind == "text":
                parts.append(tf.cast(self.embeddings[f.name](value), tf.float32))
            elif f.dtype is DType.STRING:
                index = self._tables[f.name].lookup(value)
                oov = len(f.vocabulary)
                index = tf.where(index < 0, tf.cast(oov, tf.int64), index)
                parts.append(tf.one_hot(index, oov + 1, dtype=tf.float32))
            else:
                bucket = tf.strings.to_hash_bucket_fast(tf.strings.as_string(value), f.hash_buckets)
                parts.append(tf.one_hot(bucket, f.hash_buckets, dtype=tf.float32))
        return tf.concat(parts, axis=1)

    def encode_label(self, label: tf.Tensor) -> tf.Tensor:
        """Class index (int64, -1 when unknown or missing) or regression target (float32)."""
        info = self._features.label
        if info.task == "regression":
            return tf.cast(label, tf.float32)
        if self._label_table is not None:
            return self._label_table.lookup(label)
        # Integer classes are 0..len(classes)-1: any other value is unknown too (-1), so it
        # weighs 0 like an unknown text label, rather than indexing past the model's outputs.
        ids = tf.cast(label, tf.int64)
        known = tf.logical_and(ids >= 0, ids < len(info.classes))
        return tf.where(known, ids, tf.constant(-1, tf.int64))


BuildModel = Callable[[Any, Any], Any]  # build_model(inputs, spec) -> keras tensor


def load_build_model(module: str) -> BuildModel:
    """The `build_model` hook of the team's trainer module, imported (executed) here.

    Raises:
      TrainerConfigError: one paragraph naming trainer.module, when the module does not import
        or has no callable `build_model`.
    """
    try:
        imported = importlib.import_module(module)
    except Exception as err:  # the team's code may raise anything while importing
        raise TrainerConfigError(
            f"trainer.module {module!r} failed to import: {type(err).__name__}: {err}"
        ) from None
    hook = getattr(imported, "build_model", None)
    if not callable(hook):
        raise TrainerConfigError(f"trainer.module {module!r} has no callable `build_model`")
    return hook


def _is_keras_tensor(value: Any) -> bool:
    try:
        return keras.backend.is_keras_tensor(value)
    except ValueError:  # not a tensor at all
        return False


def build_network(
    input_width: int,
    label: LabelInfo,
    hidden_units: tuple[int, ...],
    dropout: float,
    body: BuildModel | None = None,
    spec: Any = None,
) -> keras.Model:
    """A network from the preprocessed vector to the label's output.

    The body is a dense ReLU stack (`hidden_units`, `dropout`), or `body(inputs, spec)` (the
    team's `build_model` hook) given the [batch, input_width] feature vector and the trainer
    spec, returning a [batch, units] tensor. The output head is added here: sigmoid for binary,
    softmax for several classes and linear for regression, computed in float32 even under a
    mixed-precision policy.

    Raises:
      TrainerConfigError: when the hook fails or returns something that is not a 2-D tensor.
    """
    inputs = keras.Input(shape=(input_width,), name="features")
    x = inputs
    if body is not None:
        try:
            x = body(inputs, spec)
        except Exception as err:  # the team's code: name it, not our stack
            raise TrainerConfigError(
                f"trainer.module's build_model raised {type(err).__name__}: {err}"
            ) from None
        if not (_is_keras_tensor(x) and x.shape.rank == 2):
            raise TrainerConfigError(
                "trainer.module's build_model must return a [batch, units] Keras tensor built "
                f"from its inputs, not {type(x).__name__} {getattr(x, 'shape', '')}"
            )
    for units in hidden_units if body is None else ():
        x = keras.layers.Dense(units, activation="relu")(x)
        if dropout:
            x = keras.layers.Dropout(dropout)(x)
    x = keras.layers.Dense(label.output_units, name="head")(x)
    # The head's activation stays float32 so mixed-precision training exports float32 outputs.
    if label.task == "regression":
        activation = "linear"
    else:
        activation = "sigmoid" if label.is_binary else "softmax"
    outputs = keras.layers.Activation(activation, dtype="float32", name="output")(x)
    return keras.Model(inputs, outputs)


def compile_network(
    network: keras.Model,
    label: LabelInfo,
    learning_rate: float,
    jit_compile: bool,
    gradient_clip_norm: float | None = None,
) -> None:
    """Compiles `network` with Adam and the loss and metrics that fit the label's task.

    Regression: mean squared error. Binary: binary cross-entropy, accuracy and AUC. Several
    classes: sparse categorical cross-entropy and accuracy. `gradient_clip_norm` clips the
    global gradient norm; `jit_compile` turns on XLA.
    """
    if label.task == "regression":
        loss, metrics = keras.losses.MeanSquaredError(), [keras.metrics.MeanSquaredError()]
    elif label.is_binary:
        loss = keras.losses.BinaryCrossentropy()
        metrics = [keras.metrics.BinaryAccuracy(name="accuracy"), keras.metrics.AUC(name="auc")]
    else:
        loss = keras.losses.SparseCategoricalCrossentropy()
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    network.compile(
        optimizer=keras.optimizers.Adam(learning_rate, global_clipnorm=gradient_clip_norm),
        loss=loss,
        metrics=metrics,
        jit_compile=jit_compile,
    )


class ServingModule(tf.Module):
    """What is exported: preprocessing, the network, and the three signatures."""

    def __init__(self, features: FeatureSet, preprocessor: Preprocessor, network: keras.Model):
        super().__init__(name="conveyor_model")
        self._features = features
        self.preprocessor = preprocessor
        self.network = network

    @property
    def features(self) -> FeatureSet:
        """The encodings the module was built with (export records them for warm starts)."""
        return self._features

    def _predict(self, raw: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        output = self.network(self.preprocessor.vectorize(raw), training=False)
        label = self._features.label
        if label.task == "regression":
            return {"predictions": output}
        if label.is_binary:
            class_ids = tf.cast(output[:, 0] > 0.5, tf.int64)
        else:
            class_ids = tf.argmax(output, axis=1)
        return {
            "probabilities": output,
            "class_ids": class_ids,
            "classes": tf.gather(self.preprocessor.classes, class_ids),
        }

    @tf.function
    def serve_raw(self, **raw: tf.Tensor) -> dict[str, tf.Tensor]:
        """`serving_default`: predictions from raw columns, one tensor per feature by name."""
        return self._predict(raw)

    @tf.function
    def serve_examples(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        """`serving_examples`: predictions from serialized tf.Examples, numeric outputs only."""
        raw = parse_examples(examples, self._features, with_label=False)
        outputs = self._predict(raw)
        outputs.pop("classes", None)  # TFMA reads numeric outputs only.
        return outputs

    @tf.function
    def transform_features(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        """TFMA's preprocessing function: the encoded label, read as the evaluation label."""
        label = self._features.label
        only_label = FeatureSet(features=(), label=label)
        parsed = parse_examples(examples, only_label, with_label=True)
        return {label.name + LABEL_SUFFIX: self.preprocessor.encode_label(parsed[label.name])}

    def signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        """The signatures the SavedModel is exported with, by name.

        `serving_default` (raw columns, for TF Serving's clients), `serving_examples`
        (tf.Examples, for TFMA) and `transform_features` (TFMA's label encoding).
        """
        examples = tf.TensorSpec([None], tf.string, name="examples")
        return {
            "serving_default": self.serve_raw.get_concrete_function(
                **raw_input_signature(self._features)
            ),
            "serving_examples": self.serve_examples.get_concrete_function(examples),
            "transform_features": self.transform_features.get_concrete_function(examples),
        }


def _architecture(features: FeatureSet, trainer: Mapping[str, Any]) -> dict[str, Any]:
    """What must match for weights to carry over: columns, their kinds and the network shape.

    Vocabularies and normalisation are not compared: a warm-started model adopts its base
    model's (see read_warm_start), so tonight's statistics cannot make the weights meaningless.
    """
    described = features.to_dict()
    for feature in described["features"]:
        for learned in ("mean", "std", "vocabulary"):
            feature.pop(learned)
    architecture = {
        "features": described,
        "hidden_units": list(trainer.get("hidden_units", ())),
    }
    if trainer.get("module"):  # the team's network: its weights fit only the same module
        architecture["module"] = trainer["module"]
    return architecture


def export(module: ServingModule, path: str, trainer: Mapping[str, Any]) -> None:
    """Saves the SavedModel, plus what a later warm start needs under assets.extra/.

    Beside the module's own signatures it carries TF Serving's `classification` or
    `regression` signature, with the method name TF Serving's Classify or Regress expects
    (components/trainer/signatures.py)."""
    tf_serving = TfServingSignatures(module).signatures()
    tf.saved_model.save(module, path, signatures={**module.signatures(), **tf_serving})
    set_method_names(path, method_names(tf_serving))
    extra = os.path.join(path, WARM_START_DIR)
    tf.io.gfile.makedirs(extra)
    with tf.io.gfile.GFile(os.path.join(extra, ARCHITECTURE_FILE), "w") as handle:
        record = {
            **_architecture(module.features, trainer),
            "feature_set": module.features.to_dict(),
        }
        handle.write(json.dumps(record, indent=2, sort_keys=True))
    buffer = io.BytesIO()  # np.savez seeks, which GFile (any filesystem) does not allow
    np.savez(buffer, *module.network.get_weights())
    with tf.io.gfile.GFile(os.path.join(extra, WEIGHTS_FILE), "wb") as handle:
        handle.write(buffer.getvalue())


def read_warm_start(
    model_dir: str, features: FeatureSet, trainer: Mapping[str, Any]
) -> tuple[FeatureSet, list[np.ndarray]]:
    """The encodings and weights of an earlier model, if its columns and network match.

    The returned FeatureSet is the earlier model's (its vocabularies and normalisation): the
    weights were learned on those encodings, so the warm-started model keeps them. A column's
    vocabulary therefore grows only when a model is trained from scratch.

    Raises:
      TrainerConfigError: naming what differs, when the weights cannot carry over.
    """
    extra = os.path.join(model_dir, WARM_START_DIR)
    try:
        with tf.io.gfile.GFile(os.path.join(extra, ARCHITECTURE_FILE)) as handle:
            previous = json.loads(handle.read())
    except tf.errors.NotFoundError:
        raise TrainerConfigError(
            f"warm start refused: {model_dir} was not exported by Conveyor's trainer"
        ) from None
    if "feature_set" not in previous:
        raise TrainerConfigError(
            f"warm start refused: {model_dir} was exported by an older Conveyor that did not "
            "record its encodings; train from scratch once (trainer.warm_start: false)"
        )
    base_features = FeatureSet.from_dict(previous.pop("feature_set"))
    current = json.loads(json.dumps(_architecture(features, trainer), sort_keys=True))
    if previous != current:  # what is left of the record is the base model's _architecture
        differences = _differences(previous, current)
        raise TrainerConfigError(
            "warm start refused: the feature set or network changed since the served model "
            f"({'; '.join(differences)}); train from scratch (trainer.warm_start: false)"
        )
    with tf.io.gfile.GFile(os.path.join(extra, WEIGHTS_FILE), "rb") as handle:
        weights = np.load(io.BytesIO(handle.read()))
        return base_features, [weights[f"arr_{i}"] for i in range(len(weights.files))]


def _differences(previous: dict, current: dict) -> list[str]:
    before = {f["name"]: f for f in previous["features"]["features"]}
    after = {f["name"]: f for f in current["features"]["features"]}
    notes = [f"column {n!r} added" for n in sorted(set(after) - set(before))]
    notes += [f"column {n!r} removed" for n in sorted(set(before) - set(after))]
    notes += [
        f"column {n!r} encoded differently"
        for n in sorted(set(before) & set(after))
        if before[n] != after[n]
    ]
    if previous["features"]["label"] != current["features"]["label"]:
        notes.append("label classes differ")
    if previous.get("module") != current.get("module"):
        notes.append(f"trainer.module {previous.get('module')} -> {current.get('module')}")
    if previous["hidden_units"] != current["hidden_units"]:
        notes.append(f"hidden_units {previous['hidden_units']} -> {current['hidden_units']}")
    return notes or ["column order differs"]
