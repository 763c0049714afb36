"""A tiny text embedding, built and saved by the tests (nothing is downloaded): a string's
vector is its letter counts a-z, scaled; what a TF Hub text module does, in miniature."""

import tensorflow as tf

ALPHABET = "abcdefghijklmnopqrstuvwxyz"


class BagOfChars(tf.Module):
    """Maps a [batch] string tensor to [batch, 26] float32 letter frequencies."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, text):
        """Letter frequencies of each lower-cased string (0 for an empty one)."""
        chars = tf.strings.unicode_split(tf.strings.lower(text), "UTF-8")
        letters = tf.constant(list(ALPHABET))
        hits = tf.ragged.map_flat_values(
            lambda c: tf.cast(tf.equal(c[:, None], letters[None, :]), tf.float32), chars
        )
        counts = tf.reduce_sum(hits, axis=1)
        return counts / tf.maximum(tf.reduce_sum(counts, axis=1, keepdims=True), 1.0)


def save(path: str) -> str:
    """Saves the module as a SavedModel at `path`; returns the path."""
    tf.saved_model.save(BagOfChars(), path)
    return path
