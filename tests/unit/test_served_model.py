"""The served model a Kubeflow run warm-starts from and compares against
(components/baseline/served.py), read from a real serving folder that pushes, a rollback and
a label move wrote: the version served, not the newest blessed one, and an empty Model
artifact that the Trainer and the Evaluator treat as no model."""

from pathlib import Path

from tfx.types import standard_artifacts, standard_component_specs

from components.baseline.served import (
    SERVED_VERSION_PROPERTY,
    SERVING_MODEL_FOLDER,
    copy_served_model,
    holds_model,
    without_empty_models,
)
from pipelines.serving_state.config_files import ServedModel, write_serving_configs
from pipelines.serving_state.versions import PUSH_RECORD, hide_rolled_back, publish
from pipelines.spec.loading import load_spec

MODEL = "penguin"


def _saved_model(folder: Path, marker: str) -> str:
    """A model folder as the Trainer exports one (only what the copy must carry over)."""
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_text(marker)
    (folder / "variables" / "variables.index").write_text(marker)
    return str(folder)


def _model_artifact(tmp_path: Path, name: str):
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / name)
    return model


def _serving(tmp_path: Path, versions: int) -> tuple[str, str]:
    serving_dir, config_dir = tmp_path / "serving" / MODEL, tmp_path / "serving"
    for number in range(1, versions + 1):
        trained = _saved_model(tmp_path / f"trained-{number}", f"model {number}")
        publish(trained, str(serving_dir), {"run_id": f"run-{number}"})
    return str(serving_dir), str(config_dir)


def test_nothing_served_gives_an_empty_model_that_consumers_drop(tmp_path):
    model = _model_artifact(tmp_path, "served")
    assert copy_served_model(str(tmp_path / "none"), str(tmp_path), MODEL, model) == 0
    assert model.get_int_custom_property(SERVED_VERSION_PROPERTY) == 0
    assert not (tmp_path / "served").exists()
    assert not holds_model(model)
    trained = _model_artifact(tmp_path, "trained")  # a Trainer's Model has no such property
    assert holds_model(trained)
    key = standard_component_specs.BASELINE_MODEL_KEY
    kept = without_empty_models({key: [model], "model": [trained]}, key)
    assert kept == {key: [], "model": [trained]}


def test_the_newest_version_is_copied_whole_without_its_push_record(tmp_path):
    serving_dir, config_dir = _serving(tmp_path, versions=2)
    model = _model_artifact(tmp_path, "served")
    assert copy_served_model(serving_dir, config_dir, MODEL, model) == 2
    copied = Path(model.uri) / SERVING_MODEL_FOLDER
    assert (copied / "saved_model.pb").read_text() == "model 2"
    assert (copied / "variables" / "variables.index").read_text() == "model 2"
    assert not (copied / PUSH_RECORD).exists()
    assert model.get_int_custom_property(SERVED_VERSION_PROPERTY) == 2
    assert holds_model(model)


def test_after_a_rollback_under_latest_the_version_rolled_back_to_is_served(tmp_path):
    # TFX's LatestBlessedModelStrategy would answer version 2's model: blessed, and newest.
    serving_dir, config_dir = _serving(tmp_path, versions=2)
    hide_rolled_back(serving_dir, 2)
    model = _model_artifact(tmp_path, "served")
    assert copy_served_model(serving_dir, config_dir, MODEL, model) == 1
    assert (Path(model.uri) / SERVING_MODEL_FOLDER / "saved_model.pb").read_text() == "model 1"


def test_under_labels_the_stable_version_is_served_not_the_newest(tmp_path):
    serving_dir, config_dir = _serving(tmp_path, versions=3)
    push = load_spec(MODEL, overrides=["push.labels=[stable, canary]"]).spec.push
    entry = ServedModel(MODEL, serving_dir, labels={"stable": 2, "canary": 3})
    write_serving_configs(Path(config_dir), [entry], push)
    model = _model_artifact(tmp_path, "served")
    assert copy_served_model(serving_dir, config_dir, MODEL, model) == 2
    assert (Path(model.uri) / SERVING_MODEL_FOLDER / "saved_model.pb").read_text() == "model 2"
    assert model.get_int_custom_property(SERVED_VERSION_PROPERTY) == 2
