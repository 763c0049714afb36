"""TF Serving's Classify and Regress signatures for the exported model.

TF Serving answers `:classify` and `:regress` only from a signature shaped for them
(`tensorflow_serving/servables/tensorflow/classifier.cc` and `regressor.cc`):

- Classify (`PreProcessClassification`, `PostProcessClassificationResult`): exactly one input,
  `inputs`, a batch of serialized tf.Examples (DT_STRING); one or two outputs, `classes`
  (DT_STRING) and/or `scores` (DT_FLOAT), each [batch_size, num_classes], of equal widths;
- Regress (`PreProcessRegression`, `PostProcessRegressionResult`): exactly one input,
  `inputs` (DT_STRING), and exactly one output, `outputs` (DT_FLOAT), [batch_size] or
  [batch_size, 1];
- with `--enable_signature_method_name_check` the SignatureDef's method_name must also be
  `tensorflow/serving/classify` or `tensorflow/serving/regress`.

TF2's `tf.saved_model.save` writes every signature with method_name
`tensorflow/serving/predict` and has no argument to change it (tensorflow/tensorflow#38081,
tensorflow/serving#1512). The standard TF2 answer, from those threads and
tensorflow/tensorflow#34968 and #43233, is to rewrite the method names in saved_model.pb after
saving with TF's own `MethodNameUpdater` (`tf.compat.v1.saved_model.signature_def_utils`),
which parses saved_model.pb as a `saved_model_pb2.SavedModel`, sets `method_name` and writes
it back. TensorFlow's loader ignores method_name, so the model loads and answers as before.

A classifier gets `classification` (classes: the label's class names, scores: the class
probabilities, in the order of `serving_default`'s `probabilities`; a binary model's one
sigmoid becomes two columns, [1 - p, p]); a regressor gets `regression` (outputs: the
prediction). `serving_default` stays the raw-column predict signature TF Serving's clients
call, so a client asks for `"signature_name": "classification"` (or `"regression"`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import tensorflow as tf

from components.trainer.parsing import parse_examples

if TYPE_CHECKING:  # only for annotations: the model module exports with these signatures
    from components.trainer.model import ServingModule

CLASSIFICATION_SIGNATURE = "classification"
REGRESSION_SIGNATURE = "regression"
# tensorflow/python/saved_model/signature_constants.py (tf.saved_model.*_METHOD_NAME).
CLASSIFY_METHOD_NAME = tf.saved_model.CLASSIFY_METHOD_NAME  # "tensorflow/serving/classify"
REGRESS_METHOD_NAME = tf.saved_model.REGRESS_METHOD_NAME  # "tensorflow/serving/regress"
INPUTS = "inputs"  # the tf.Example input both methods require (kClassifyInputs, kRegressInputs)


class TfServingSignatures(tf.Module):
    """The classify or regress function over a `ServingModule`'s preprocessing and network."""

    def __init__(self, module: ServingModule):
        super().__init__(name="tf_serving_signatures")
        self.module = module

    def _outputs(self, serialized: tf.Tensor) -> tf.Tensor:
        raw = parse_examples(serialized, self.module.features, with_label=False)
        network = self.module.network
        return network(self.module.preprocessor.vectorize(raw), training=False)

    @tf.function
    def classify(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """`classification`: serialized tf.Examples -> every class name and its probability."""
        probabilities = tf.cast(self._outputs(inputs), tf.float32)
        if self.module.features.label.is_binary:
            probabilities = tf.concat([1.0 - probabilities, probabilities], axis=1)
        names = self.module.preprocessor.classes
        classes = tf.tile(names[tf.newaxis, :], [tf.shape(probabilities)[0], 1])
        return {"classes": classes, "scores": probabilities}

    @tf.function
    def regress(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """`regression`: serialized tf.Examples -> one predicted value each, [batch, 1]."""
        return {"outputs": tf.cast(self._outputs(inputs), tf.float32)}

    def signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        """{"classification": ...} for a classifier, {"regression": ...} for a regressor."""
        examples = tf.TensorSpec([None], tf.string, name=INPUTS)
        if self.module.features.label.task == "regression":
            return {REGRESSION_SIGNATURE: self.regress.get_concrete_function(examples)}
        return {CLASSIFICATION_SIGNATURE: self.classify.get_concrete_function(examples)}


def method_names(signatures: dict) -> dict[str, str]:
    """The TF Serving method name each of `signatures` must carry, by signature name."""
    names = {
        CLASSIFICATION_SIGNATURE: CLASSIFY_METHOD_NAME,
        REGRESSION_SIGNATURE: REGRESS_METHOD_NAME,
    }
    return {name: names[name] for name in signatures if name in names}


def set_method_names(export_dir: str, names: dict[str, str]) -> None:
    """Rewrites saved_model.pb in `export_dir` so each named signature carries its method name
    (TF's MethodNameUpdater: parse, set, write back)."""
    if not names:
        return
    updater = tf.compat.v1.saved_model.signature_def_utils.MethodNameUpdater(export_dir)
    for signature, method in names.items():
        updater.replace_method_name(signature, method, tags=[tf.saved_model.SERVING])
    updater.save()
