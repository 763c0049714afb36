"""Tuned hyperparameters in the trainer's terms: what the Tuner's trials and the Trainer both
read, so a value means the same in a trial as in the training it chose.

Kept apart from the trainer and the tuner_fn (no TensorFlow here): each imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The spelling of hidden_units is the spec's, which the report reads too.
from pipelines.spec.models import LAYERS_SEPARATOR, encode_layers

__all__ = ["LAYERS_SEPARATOR", "encode_layers", "with_tuned"]


def with_tuned(trainer: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer block with the tuned `values` (a HyperParameters config's `values`) in place
    of the spec's; names the trainer does not tune are ignored."""
    tuned = dict(trainer)
    for name, value in values.items():
        if name == "hidden_units":
            tuned[name] = [int(u) for u in str(value).split(LAYERS_SEPARATOR) if u]
        elif name in ("learning_rate", "dropout"):
            tuned[name] = float(value)
    return tuned
