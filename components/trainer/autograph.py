"""Keeps AutoGraph from rewriting tf-keras' own code, as TensorFlow already does for Keras.

AutoGraph converts every Python function a `tf.function` calls, unless a rule in
`tensorflow.python.autograph.core.config.CONVERSION_RULES` says to call it as it is. That list
has `DoNotConvert('keras')`: Keras 2 is written for graph mode (tf.cond and tf.while_loop where
it needs them) and never needed converting. TFX 1.16 needs Keras 2 as the `tf_keras` package,
which the rule's `keras` prefix does not match, so the first `evaluate` or `fit` of a model
rewrites tf-keras' training step, losses, metrics and layer calls through Python's `ast`: most
of the Trainer's time in a cold penguin run, for a model of three Dense layers. The rule added
here is the one Keras had; a team's own layers and `build_model` code live in their own
modules and are converted as before (tf-keras' Layer calls `autograph.tf_convert` on each
layer's `call`).
"""

from __future__ import annotations

TF_KERAS_MODULE = "tf_keras"


def leave_tf_keras_unconverted() -> None:
    """Adds `DoNotConvert('tf_keras')` to AutoGraph's rules, first, once per process.

    AutoGraph reads the rules on every conversion, so this holds for everything traced after
    the call; calling it again changes nothing.
    """
    from tensorflow.python.autograph.core import config

    rules = tuple(config.CONVERSION_RULES)
    if any(
        isinstance(rule, config.DoNotConvert) and rule.matches(TF_KERAS_MODULE) for rule in rules
    ):
        return
    config.CONVERSION_RULES = (config.DoNotConvert(TF_KERAS_MODULE), *rules)
