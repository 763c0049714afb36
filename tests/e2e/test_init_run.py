"""Specs `conveyor init` writes from three CSVs of different shapes run, unedited, to a pushed
model that answers raw rows (ci profile, fewer steps):

- penguins: the palmerpenguins CSV, three classes of text, categories and measurements;
- trips: taxi-like rows classifying `big_tipper`, with an id column, a leaky column and a
  free-text column, which init leaves out, each with a comment saying why;
- fares: generated taxi rows regressing the fare, with missing values.

Each pushed SavedModel is then called on raw rows of its CSV through `serving_default`, one
tensor per column by name, as a client would.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec
from tests.unit.test_init_command import penguins_csv, run_init, taxi_fares_csv, taxi_like_csv

SERVED_ROWS = 200  # raw rows each pushed model answers


@dataclass(frozen=True)
class Shape:
    """One CSV shape: how to write it, its label, what init must leave out, and the steps."""

    name: str
    write: Callable[[Path], Path]
    label: str
    left_out: tuple[str, ...] = ()
    train_steps: int = 100


SHAPES = [
    Shape("penguins", penguins_csv, "species", train_steps=150),
    Shape(
        "trips",
        taxi_like_csv,
        "big_tipper",
        left_out=(
            "trip_id: id-like: a distinct value in every row",
            "tip_share: leaky:",
            "rider_note: free text",
        ),
    ),
    Shape("fares", taxi_fares_csv, "fare"),
]


def raw_inputs(serve, rows: pd.DataFrame) -> dict[str, tf.Tensor]:
    """The signature's inputs from CSV rows: each column as the dtype the signature takes, a
    missing value as Conveyor's model reads it (NaN, -1, the empty string)."""
    inputs = {}
    for name, spec in serve.structured_input_signature[1].items():
        column = rows[name]
        if spec.dtype == tf.string:
            inputs[name] = tf.constant(column.fillna("").astype(str).tolist())
        elif spec.dtype.is_integer:
            inputs[name] = tf.constant(column.fillna(-1).astype("int64").to_numpy())
        else:
            inputs[name] = tf.constant(column.astype("float32").to_numpy())
    return inputs


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_init_spec_runs_to_a_pushed_model_that_answers_raw_rows(tmp_path, shape):
    code, spec, workdir = run_init(tmp_path, shape.name, shape.write(tmp_path), shape.label)
    assert code == 0
    text = spec.read_text()
    for reason in shape.left_out:
        assert f"  # - {reason}" in text

    overrides = [f"trainer.train_steps={shape.train_steps}"]
    loaded = load_spec(str(spec), env="ci", overrides=overrides, workdir=workdir)
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    assert result.outcome == "pushed", result.message

    serving = RunPaths(workdir, loaded.spec).serving_dir / "1"
    serve = tf.saved_model.load(str(serving)).signatures["serving_default"]
    taken = set(serve.structured_input_signature[1])
    assert taken == {f.name for f in loaded.spec.trainer.features}
    assert shape.label not in taken and not any(r.split(":")[0] in taken for r in shape.left_out)
    frame = pd.read_csv(
        next((workdir / "data" / shape.name).glob("*.csv")), keep_default_na=False, na_values=[""]
    )
    rows = frame.sample(SERVED_ROWS, random_state=0)
    outputs = serve(**raw_inputs(serve, rows))
    truth = rows[shape.label]
    if loaded.spec.trainer.task == "regression":
        predictions = outputs["predictions"].numpy()[:, 0]
        # Sensible: far better than always answering the mean, the bound init set.
        assert np.mean((predictions - truth.to_numpy()) ** 2) < 0.5 * truth.var(ddof=0)
    else:
        answered = [c.decode() for c in outputs["classes"].numpy()]
        accuracy = float(np.mean([a == str(t) for a, t in zip(answered, truth, strict=True)]))
        majority = float(truth.value_counts(normalize=True).iloc[0])
        assert accuracy > majority + 0.1, (accuracy, majority)
