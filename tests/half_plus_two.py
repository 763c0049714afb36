"""TF Serving's `half_plus_two` test model, written at test time.

A port of `tensorflow_serving/servables/tensorflow/testdata/saved_model_half_plus_two.py`
(Apache 2.0, The TensorFlow Authors) to `tf.compat.v1`, keeping its graph and signatures: a
TF1-style SavedModel whose variables are a=0.5, b=2, c=3 and which computes y = a*x + b,
y2 = a*x + c and y3 = a*x2 + c from tf.Examples with float features `x` and `x2`. Its
signatures are the ones TF Serving's own REST tests and REST documentation call:

- `serving_default` (predict): input `x`, output `y`;
- `classify_x_to_y` (classify): serialized tf.Examples -> `scores` = y;
- `regress_x_to_y`, `regress_x_to_y2` (regress): serialized tf.Examples -> y, y2;
- `regress_x2_to_y3` (regress): input `x2` (a float tensor, not tf.Examples) -> y3.

`offset` changes b and c (half plus three, four, ...) so that two versions answer differently.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_half_plus_two(export_dir: str | os.PathLike, offset: float = 0.0) -> Path:
    """Writes the SavedModel into `export_dir` (which must not exist) and returns its path.

    The graph is built in a graph of its own, so the caller's TensorFlow state is untouched.
    """
    import tensorflow.compat.v1 as tf

    export_dir = Path(export_dir)
    builder = tf.saved_model.builder.SavedModelBuilder(str(export_dir))
    with tf.Session(graph=tf.Graph()) as sess:
        a = tf.Variable(0.5, name="a")
        b = tf.Variable(2.0 + offset, name="b")
        c = tf.Variable(3.0 + offset, name="c")
        serialized_tf_example = tf.placeholder(tf.string, name="tf_example", shape=[None])
        feature_configs = {
            "x": tf.FixedLenFeature([1], dtype=tf.float32),
            "x2": tf.FixedLenFeature([1], dtype=tf.float32, default_value=[0.0]),
        }
        tf_example = tf.parse_example(serialized_tf_example, feature_configs)
        x = tf.identity(tf_example["x"], name="x")
        y = tf.identity(tf.add(tf.multiply(a, x), b), name="y")
        y2 = tf.identity(tf.add(tf.multiply(a, x), c), name="y2")
        x2 = tf.identity(tf_example["x2"], name="x2")
        # Separate variables for the x2 path, as the original keeps optimizers from fusing it.
        a2 = tf.Variable(0.5, name="a2")
        c2 = tf.Variable(3.0 + offset, name="c2")
        y3 = tf.identity(tf.add(tf.multiply(a2, x2), c2), name="y3")

        info = tf.saved_model.utils.build_tensor_info
        constants = tf.saved_model.signature_constants

        def regression(inputs, outputs):
            return tf.saved_model.signature_def_utils.build_signature_def(
                {constants.REGRESS_INPUTS: info(inputs)},
                {constants.REGRESS_OUTPUTS: info(outputs)},
                constants.REGRESS_METHOD_NAME,
            )

        signatures = {
            "regress_x_to_y": regression(serialized_tf_example, y),
            "regress_x_to_y2": regression(serialized_tf_example, y2),
            "regress_x2_to_y3": regression(x2, y3),
            "classify_x_to_y": tf.saved_model.signature_def_utils.build_signature_def(
                {constants.CLASSIFY_INPUTS: info(serialized_tf_example)},
                {constants.CLASSIFY_OUTPUT_SCORES: info(y)},
                constants.CLASSIFY_METHOD_NAME,
            ),
            constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY: (
                tf.saved_model.signature_def_utils.build_signature_def(
                    {"x": info(x)}, {"y": info(y)}, constants.PREDICT_METHOD_NAME
                )
            ),
        }
        sess.run(tf.global_variables_initializer())
        builder.add_meta_graph_and_variables(
            sess, [tf.saved_model.tag_constants.SERVING], signature_def_map=signatures
        )
    builder.save()
    return export_dir
