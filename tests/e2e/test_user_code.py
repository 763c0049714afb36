"""Team code through the pipeline: TFX's own penguin module (the one the tfx wheel ships, with
its preprocessing_fn and run_fn) runs unchanged through Transform and TFX's Trainer and pushes
a model that answers raw rows; a preprocessing_fn that raises stops the run with one paragraph
naming `transform.module`, and nothing is pushed."""

import textwrap

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf
import yaml

from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec

PENGUIN_TFX = "tfx.examples.penguin.penguin_utils_keras"
FEATURES = ["culmen_length_mm", "culmen_depth_mm", "flipper_length_mm", "body_mass_g"]
COMPONENTS = [
    "csv_example_gen",
    "statistics_gen",
    "schema_gen",
    "example_validator",
    "data_gate",
    "transform",
    "trainer",
    "evaluator",
    # serving_default takes serialized tf.Examples here: canaries are sent as base64 bytes.
    "infra_validator",
    "pusher",
]


def tfx_penguin_frame() -> pd.DataFrame:
    """The palmerpenguins rows in the columns TFX's penguin example reads (its processed CSV:
    measurements renamed, no missing values, species as 0, 1, 2)."""
    import importlib.resources

    source = importlib.resources.files("palmerpenguins") / "data" / "penguins.csv"
    frame = pd.read_csv(source).dropna(subset=["bill_length_mm", "body_mass_g"])
    frame = frame.rename(
        columns={"bill_length_mm": "culmen_length_mm", "bill_depth_mm": "culmen_depth_mm"}
    )
    frame["species"] = frame["species"].map({"Adelie": 0, "Chinstrap": 1, "Gentoo": 2})
    return frame[["species", *FEATURES]]


def write_pipeline(workdir, transform_module: str) -> str:
    """A spec for the TFX module, with its data, under `workdir`; returns the spec's path."""
    data_dir = workdir / "data" / "penguin_tfx"
    data_dir.mkdir(parents=True)
    tfx_penguin_frame().to_csv(data_dir / "penguins.csv", index=False)
    spec = {
        "name": "penguin_tfx",
        "data": {"input_dir": "data/penguin_tfx", "splits": {"train": 2, "eval": 1}},
        "schema": {"source": "infer"},
        "transform": {"module": transform_module},
        "trainer": {
            "module": PENGUIN_TFX,
            "label": "species",
            "features": [{"name": f, "kind": "numeric"} for f in FEATURES],
            "train_steps": 200,
            "eval_steps": 5,
        },
        "evaluation": {
            "metrics": [{"name": "SparseCategoricalAccuracy", "lower_bound": 0.6}],
            "first_run": "bless_on_value_thresholds",
        },
        "push": {"base_dir": "serving", "model_name": "penguin_tfx"},
        "components": [{"type": t} for t in COMPONENTS],
    }
    path = workdir / "penguin_tfx.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(path)


def serialized(rows: pd.DataFrame) -> list[bytes]:
    """Raw rows as the tf.Examples TFX's serving signature parses (no label)."""
    return [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    f: tf.train.Feature(float_list=tf.train.FloatList(value=[float(row[f])]))
                    for f in FEATURES
                }
            )
        ).SerializeToString()
        for _, row in rows.iterrows()
    ]


@pytest.fixture(scope="module")
def tfx_module_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("user_code")
    loaded = load_spec(write_pipeline(workdir, PENGUIN_TFX), env="ci", workdir=workdir)
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    return loaded, RunPaths(workdir=workdir, spec=loaded.spec), result


def test_tfx_penguin_module_with_transform_pushes_a_model(tfx_module_run):
    _, paths, result = tfx_module_run
    assert result.outcome == "pushed", result.message
    states = {n.node_id: n.state for n in result.nodes}
    assert states["transform"] == "executed" and states["trainer"] == "executed"
    assert states["infra_validator"] == "executed"  # and blessed it: the model was pushed
    assert (paths.serving_dir / "1" / "saved_model.pb").is_file()


def test_pushed_model_applies_the_transform_to_raw_rows(tfx_module_run):
    _, paths, _ = tfx_module_run
    loaded = tf.saved_model.load(str(paths.serving_dir / "1"))
    # TFX's convention, as the module writes it: serialized raw tf.Examples in, logits out.
    assert set(loaded.signatures) == {"serving_default", "transform_features"}
    serve = loaded.signatures["serving_default"]
    assert list(serve.structured_input_signature[1]) == ["examples"]
    rows = tfx_penguin_frame().sample(60, random_state=1)
    logits = serve(examples=tf.constant(serialized(rows)))["outputs"].numpy()
    accuracy = float(np.mean(logits.argmax(axis=1) == rows["species"].to_numpy()))
    assert accuracy >= 0.8, accuracy


def test_lineage_names_the_module_and_its_digest(tfx_module_run):
    loaded, paths, _ = tfx_module_run
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    (push,) = metadata.pushed_lineage(store, "penguin_tfx")
    assert push.user_code and push.user_code.startswith(f"{PENGUIN_TFX}@")
    assert push.code_version and f"user code {push.user_code}" in push.describe()


def test_a_preprocessing_fn_that_raises_stops_the_run_naming_the_module(tmp_path, monkeypatch):
    package = tmp_path / "team_prep"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text(
        textwrap.dedent(
            """
            def preprocessing_fn(inputs):
                raise KeyError("culmen_width_mm")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    workdir = tmp_path / "work"
    loaded = load_spec(write_pipeline(workdir, "team_prep.broken"), env="ci", workdir=workdir)
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    assert result.outcome == "failed"
    assert "transform.module 'team_prep.broken': preprocessing_fn raised KeyError" in (
        result.message
    )
    assert "Nothing was pushed" in result.message
    paths = RunPaths(workdir=workdir, spec=loaded.spec)
    assert not paths.serving_dir.exists() or not any(paths.serving_dir.iterdir())
