"""AutoGraph leaves tf-keras' own code as it is (as TensorFlow's rules leave Keras 2's), and still
converts a team's layer whose `call` branches on a tensor with Python's `if`."""

import numpy as np
import tensorflow as tf
import tf_keras as keras
from tensorflow.python.autograph.core import config
from tensorflow.python.autograph.impl import conversion

from components.trainer.autograph import TF_KERAS_MODULE, leave_tf_keras_unconverted


class SignFlip(keras.layers.Layer):
    """Negates a batch whose sum is negative: a Python `if` on a tensor, which only runs in a
    graph once AutoGraph has converted it (unconverted, TensorFlow refuses the `if`)."""

    def call(self, inputs):
        if tf.reduce_sum(inputs) < 0:
            return -inputs
        return inputs


def _tf_keras_rules() -> int:
    return sum(
        isinstance(rule, config.DoNotConvert) and rule.matches(TF_KERAS_MODULE)
        for rule in config.CONVERSION_RULES
    )


def test_tf_keras_is_left_unconverted_once_however_often_asked():
    leave_tf_keras_unconverted()
    leave_tf_keras_unconverted()
    assert _tf_keras_rules() == 1
    assert conversion.is_allowlisted(keras.Model.train_step)
    assert conversion.is_allowlisted(keras.losses.SparseCategoricalCrossentropy.call)
    assert not conversion.is_allowlisted(SignFlip.call)


def test_a_teams_layer_is_still_converted_and_the_model_trains():
    leave_tf_keras_unconverted()
    inputs = keras.Input((2,))
    outputs = keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)(SignFlip()(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse")
    # predict traces the layer in a tf.function: both branches of its `if` are taken.
    negative = np.array([[-1.0, -2.0]], dtype=np.float32)
    positive = np.array([[1.0, 2.0]], dtype=np.float32)
    assert model.predict(negative, verbose=0).tolist() == [[3.0]]
    assert model.predict(positive, verbose=0).tolist() == [[3.0]]
    history = model.fit(positive, np.array([[1.0]]), epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
