"""The model gate for real, in one penguin working directory, in order:

1. `evaluation.first_run: require_manual_bless`: the first candidate passes its value bound but
   is held, nothing is served;
2. `conveyor bless` pushes that held candidate as version 1, recorded in ML Metadata with who
   and why; lineage names it; blessing it again is refused;
3. a candidate that passes its value bound (set to 0 here) but is worse than the served model by
   more than the change threshold ends NOT_PUSHED, judged against the blessed version 1, which
   keeps serving byte for byte.
"""

import json
import shutil
from pathlib import Path

import pytest

from pipelines import cli, serving_state
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.serving_state.records import recorded_pushes
from pipelines.serving_state.versions import model_digest
from pipelines.spec.loading import load_spec
from tests.conftest import run_artifacts

HELD = ["evaluation.first_run=require_manual_bless"]
# Any accuracy passes the value bound; only the change threshold can stop a candidate.
CHANGE_ONLY = [
    "evaluation.metrics=[{name: SparseCategoricalAccuracy, lower_bound: 0.0, "
    "change: {direction: higher_is_better, absolute: -0.02}}]"
]


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("gates")
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    loaded = load_spec("penguin", env="ci", overrides=HELD + CHANGE_ONLY, workdir=workdir)
    paths = RunPaths(workdir=workdir, spec=loaded.spec)
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    return loaded, paths, result


def test_the_first_candidate_is_held_for_review(held):
    _, paths, result = held
    assert result.outcome == "not_pushed", result.message
    assert "require_manual_bless" in result.message and "conveyor bless" in result.message
    assert not paths.serving_dir.exists() or not any(paths.serving_dir.iterdir())


def test_bless_pushes_the_held_candidate_and_records_who_and_why(held, capsys):
    loaded, paths, result = held
    argv = ["bless", "penguin", "--run", result.run_id, "--workdir", str(paths.workdir)]
    argv += ["--env", "ci", "--reason", "accuracy 0.97 on the report", "--by", "reviewer"]
    argv += [f"--set={o}" for o in HELD + CHANGE_ONLY]
    assert cli.main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "\nPUSHED: version 1" in out, out
    # Its model card, as a run's push writes one, says who blessed it and why.
    [page] = [
        line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("model card: ")
    ]
    card = json.loads(Path(page).with_suffix(".json").read_text())
    documented = card["model_details"]["documentation"]
    assert "Gate manual bless: reviewer (accuracy 0.97 on the report)." in documented
    assert f"by run {result.run_id}" in documented
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]

    store = metadata.open_store(loaded.spec, paths.metadata_path)
    [execution] = store.get_executions_by_type("conveyor.ManualBless")
    assert metadata.custom_property(execution, "blessed_by") == "reviewer"
    assert metadata.custom_property(execution, "reason") == "accuracy 0.97 on the report"
    # The push is one ML Metadata knows, so reconcile keeps it and lineage traces it.
    assert recorded_pushes(paths) == (True, {1})
    assert not serving_state.reconcile(paths, print).changed
    [lineage] = metadata.pushed_lineage(store, "penguin")
    assert (lineage.version, lineage.run_id) == ("1", result.run_id)
    assert lineage.spans == [] or lineage.examples_uris

    # The same candidate again: refused, nothing new served.
    assert cli.main(argv) == 1
    assert "already blessed by reviewer" in capsys.readouterr().err
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]


def test_a_candidate_within_its_value_bound_but_worse_than_served_is_not_pushed(held):
    import tensorflow_model_analysis as tfma

    loaded, paths, first = held
    served_before = model_digest(str(paths.serving_dir / "1"))
    csv = next(paths.input_dir.glob("*.csv"))
    shutil.copy(csv, paths.workdir / "penguins.bak")
    lines = csv.read_text().splitlines()
    csv.write_text("\n".join(lines[: int(len(lines) * 0.9)]) + "\n")  # new data: a retrain
    barely_trained = load_spec(
        "penguin",
        env="ci",
        overrides=HELD + CHANGE_ONLY + ["trainer.train_steps=1", "trainer.learning_rate=0.0001"],
        workdir=paths.workdir,
    )
    result = nightly.run(barely_trained, paths.workdir, echo=lambda _: None)

    assert result.outcome == "not_pushed", result.message
    assert "did not pass the evaluation thresholds" in result.message
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]
    assert model_digest(str(paths.serving_dir / "1")) == served_before
    # What stopped it is the change threshold against the blessed model, not the value bound.
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    [evaluation] = run_artifacts(store, result.run_id, "ModelEvaluation")
    [blessing] = run_artifacts(store, result.run_id, "ModelBlessing")
    [held_model] = run_artifacts(store, first.run_id, "Model")
    assert blessing.custom_properties["baseline_model_id"].int_value == held_model.id
    validation = tfma.load_validation_result(evaluation.uri)
    assert not validation.validation_ok
    failures = [f for s in validation.metric_validations_per_slice for f in s.failures]
    assert failures and all(f.metric_threshold.HasField("change_threshold") for f in failures)
    assert not any(f.metric_threshold.HasField("value_threshold") for f in failures)
