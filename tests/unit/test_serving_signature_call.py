"""How the model server runs a signature: as one `StatefulPartitionedCall` op on the calling
thread when that answers as the `tf.function` call does, checked on the first call, and the
`tf.function` call otherwise (servable.py). Small real SavedModels, saved in a tmp dir and loaded
as the server loads them; answers compared with the loaded signature's own structured call."""

import numpy as np
import pytest
import tensorflow as tf

from pipelines.serving.model_server.errors import ServingError
from pipelines.serving.model_server.servable import Servable


class Scorer(tf.Module):
    """A float and a string input, a variable, three outputs of three dtypes."""

    def __init__(self):
        super().__init__()
        self.weight = tf.Variable([[0.5, -1.0], [2.0, 0.25]])

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, 2], tf.float32, name="x"),
            tf.TensorSpec([None], tf.string, name="word"),
        ]
    )
    def score(self, x, word):
        logits = tf.matmul(x, self.weight)
        return {
            "logits": logits,
            "best": tf.argmax(logits, axis=1),
            # Pairs each row with its word: rows and words must be as many.
            "tagged": tf.strings.join([tf.strings.as_string(logits[:, 0]), word], "/"),
        }


class Counter(tf.Module):
    """Answers with how many times it has been called: no two calls answer alike."""

    def __init__(self):
        super().__init__()
        self.calls = tf.Variable(0, dtype=tf.int64)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def count(self, x):
        return {"calls": self.calls.assign_add(1) + tf.zeros_like(x, dtype=tf.int64)}


def _save(module, function, path):
    tf.saved_model.save(module, str(path), signatures={"serving_default": function})
    return path


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    module = Scorer()
    path = _save(module, module.score, tmp_path_factory.mktemp("scorer") / "1")
    servable = Servable.load("scorer", 1, path)
    servable.warm_up()
    return servable


def _feeds(rows: int) -> dict:
    return {
        "x": np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) / 3,
        "word": np.array([f"w{i}".encode() for i in range(rows)], dtype=object),
    }


@pytest.mark.parametrize("rows", [1, 3, 64])
def test_a_signature_runs_as_one_op_and_answers_as_its_structured_call(scorer, rows):
    signature = scorer.signature("")
    assert signature.runs_as_one_op  # kept by the warm-up's call
    feeds = _feeds(rows)
    expected = scorer._loaded.signatures["serving_default"](
        x=tf.constant(feeds["x"]), word=tf.constant(feeds["word"])
    )
    answer = signature.call(feeds)
    assert set(answer) == {"logits", "best", "tagged"}
    for name, tensor in expected.items():
        assert answer[name].dtype == tensor.numpy().dtype
        np.testing.assert_array_equal(answer[name], tensor.numpy())


def test_a_request_the_op_fails_has_the_structured_calls_error(scorer):
    feeds = _feeds(2)
    feeds["word"] = feeds["word"][:1]  # one word for two rows: the join inside fails
    with pytest.raises(tf.errors.InvalidArgumentError) as structured:
        scorer._loaded.signatures["serving_default"](
            x=tf.constant(feeds["x"]), word=tf.constant(feeds["word"])
        )
    with pytest.raises(ServingError) as served:
        scorer.signature("").call(feeds)
    assert served.value.code == "INVALID_ARGUMENT"
    assert served.value.message == structured.value.message
    assert "StatefulPartitionedCall" not in served.value.message
    assert scorer.signature("").runs_as_one_op  # one failed request changes nothing


def test_a_signature_the_op_runs_differently_keeps_the_tf_function_call(tmp_path):
    module = Counter()
    servable = Servable.load("counter", 1, _save(module, module.count, tmp_path / "1"))
    signature = servable.signature("")
    assert not signature.runs_as_one_op  # not decided before the first call
    first = signature.call({"x": np.zeros(2, dtype=np.float32)})
    # The first call made both calls (1, then 2) and answers with the tf.function call's.
    np.testing.assert_array_equal(first["calls"], [1, 1])
    assert not signature.runs_as_one_op
    np.testing.assert_array_equal(signature.call({"x": np.zeros(1, np.float32)})["calls"], [3])
