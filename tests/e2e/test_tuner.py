"""Tuning through the real pipeline on penguin (ci profile), two nights in one workdir, both
with `tuning.retune: reuse`: the first tunes, as ML Metadata holds no search yet (TFX's Tuner,
Conveyor's tuner_fn, four trials, the spec's own setting first), and the Trainer trains with
the best, which beats the spec's setting; the second, on new rows under the same schema, runs
no Tuner and its Trainer reuses the first night's HyperParameters from ML Metadata. Both
reports say so."""

import json
from pathlib import Path

import pandas as pd
import pytest

from pipelines import cli
from pipelines.core import metadata
from pipelines.core.metadata import read_run_artifacts
from pipelines.core.paths import REPORT_FILE, RunPaths
from pipelines.finish.artifacts import read_hyperparameters, read_tuner_trials
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec
from pipelines.spec.models import DEFAULT_COMPONENTS

_TYPES = [t for c in DEFAULT_COMPONENTS for t in (["tuner", c] if c == "trainer" else [c])]
COMPONENTS = "components=[" + ", ".join(f"{{type: {t}}}" for t in _TYPES) + "]"
# penguin's own setting is learning_rate 0.02 with [16, 8]: 15 steps of it leave the loss well
# above what a larger rate or a wider network reaches in as many, so every other setting here
# may beat it (the search picks three of the five at random, seeded).
TUNING = (
    "tuning={search_space: {learning_rate: {choices: [0.02, 0.05, 0.1]}, "
    "hidden_units: {choices: [[16, 8], [32, 16]]}}, objective: val_loss, max_trials: 4, "
    "trial_steps: 15}"
)
SPEC_SETTING = {"learning_rate": 0.02, "hidden_units": "16,8"}


def _spec(workdir: Path, retune: str):
    overrides = [COMPONENTS, TUNING, f"tuning.retune={retune}"]
    return load_spec("penguin", env="ci", overrides=overrides, workdir=workdir)


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tuner")
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    first_spec = _spec(workdir, "reuse")  # nothing tuned yet: tunes
    first = nightly.run(first_spec, workdir, echo=lambda _: None)
    paths = RunPaths(workdir=workdir, spec=first_spec.spec)
    # The next night: fewer rows, so the Trainer trains again rather than being a cache hit.
    csv = paths.input_dir / "penguins.csv"
    pd.read_csv(csv).sample(frac=0.9, random_state=1).to_csv(csv, index=False)
    second = nightly.run(_spec(workdir, "reuse"), workdir, echo=lambda _: None)
    store = metadata.open_store(first_spec.spec, paths.metadata_path)
    return {
        "first": (first, read_run_artifacts(store, first.run_id)),
        "second": (second, read_run_artifacts(store, second.run_id)),
    }


def test_the_first_night_tunes_and_beats_the_specs_own_setting(nights):
    result, nodes = nights["first"]
    assert result.outcome in ("pushed", "not_pushed"), result.message
    assert nodes["tuner"].state == "executed"
    trials = read_tuner_trials(nodes["tuner"].output("tuner_results").uri)
    assert len(trials) == 4
    spec_setting = [t for t in trials if all(t[k] == v for k, v in SPEC_SETTING.items())]
    assert len(spec_setting) == 1, trials  # the first trial is the spec's own setting
    best = trials[0]  # TFX writes the trials best first
    assert best["score"] == min(t["score"] for t in trials)
    assert best["score"] < spec_setting[0]["score"], trials

    # The Trainer trained with the best: the Tuner's artifact, and its values in the summary.
    tuned = nodes["tuner"].output("best_hyperparameters")
    assert nodes["trainer"].state == "executed"
    assert nodes["trainer"].input("hyperparameters").id == tuned.id
    values = read_hyperparameters(tuned.uri)
    assert values["learning_rate"] == best["learning_rate"]
    summary = json.loads(nodes["trainer"].output("model").get("conveyor_training_summary"))
    assert summary["learning_rate"] == pytest.approx(best["learning_rate"])

    report = (Path(result.run_dir) / REPORT_FILE).read_text()
    assert "<h2>Tuning</h2>" in report
    assert "4 trials scored by val_loss (min)" in report
    assert "best" in report and "the spec&#39;s setting" in report


def test_the_second_night_reuses_the_first_nights_hyperparameters_without_tuning(nights):
    _, first = nights["first"]
    result, nodes = nights["second"]
    assert result.outcome in ("pushed", "not_pushed"), result.message
    assert "tuner" not in nodes  # no Tuner execution at all: the resolver ran instead
    assert not any(n.output("tuner_results") for n in nodes.values())
    assert nodes["trainer"].state == "executed"
    tuned = first["tuner"].output("best_hyperparameters")
    assert nodes["trainer"].input("hyperparameters").id == tuned.id

    report = (Path(result.run_dir) / REPORT_FILE).read_text()
    assert "This run did not tune (tuning.retune: reuse)" in report
    assert f"artifact {tuned.id}" in report
