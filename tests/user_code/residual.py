"""A `build_model` hook: a residual block of `spec.config["width"]` units on Conveyor's feature
vector (Conveyor adds the output head)."""

import tf_keras as keras


def build_model(inputs, spec):
    """Returns the network's last hidden layer, [batch, width], from the feature vector."""
    width = int(spec.config.get("width", 16))
    hidden = keras.layers.Dense(width, activation="relu", name="residual_in")(inputs)
    block = keras.layers.Dense(width, activation="relu", name="residual_block")(hidden)
    return keras.layers.Add(name="residual_out")([hidden, block])
