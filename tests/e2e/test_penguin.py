"""The penguin pipeline for real: TFX components, Beam, SQLite ML Metadata, a served SavedModel.

One working directory through the module, in order: a cold run that pushes version 1, an
unchanged re-run that executes and pushes nothing, then two kinds of bad data that stop at the
data gate while version 1 keeps serving.
"""

import shutil
from pathlib import Path

import pandas as pd
import pytest
import tensorflow as tf

from pipelines import cli
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.serving_state.versions import model_digest
from pipelines.spec.loading import load_spec
from pipelines.spec.models import DEFAULT_COMPONENTS
from tests.conftest import copy_fixture, run_artifacts

# Every node of the default chain but the resolver, which only resolves inputs.
TRAINED_NODES = set(DEFAULT_COMPONENTS) - {"baseline_resolver"}


@pytest.fixture(scope="module")
def penguin(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("penguin")
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    loaded = load_spec("penguin", env="ci", workdir=workdir)
    paths = RunPaths(workdir=workdir, spec=loaded.spec)
    shutil.copytree(paths.input_dir, workdir / "good-data")
    progress: list[str] = []
    first = nightly.run(loaded, workdir, echo=progress.append)
    return loaded, paths, first, progress


def _states(result):
    return {n.node_id: n.state for n in result.nodes}


def test_cold_run_executes_every_component_once_and_pushes_version_1(penguin):
    _, paths, first, progress = penguin
    assert first.outcome == "pushed", first.message
    assert first.pushed_version == "1"
    states = _states(first)
    assert {n: states.get(n) for n in TRAINED_NODES} == {n: "executed" for n in TRAINED_NODES}
    assert len([n for n in first.nodes if n.node_id == "trainer"]) == 1
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]
    assert (paths.serving_dir / "1" / "saved_model.pb").is_file()
    assert any(line.split()[:2] == ["trainer", "executed"] for line in progress)
    assert (paths.runs_dir / first.run_id / "resolved_spec.yaml").is_file()


def test_pushed_model_classifies_raw_rows(penguin):
    _, paths, _, _ = penguin
    serve = tf.saved_model.load(str(paths.serving_dir / "1")).signatures["serving_default"]
    outputs = serve(
        island=tf.constant(["Torgersen", "Biscoe", "Dream"]),
        sex=tf.constant(["male", "female", ""]),  # "" is a missing value
        bill_length_mm=tf.constant([39.1, 46.5, 50.0]),
        bill_depth_mm=tf.constant([18.7, 14.5, 19.3]),
        flipper_length_mm=tf.constant([181.0, 213.0, 197.0]),
        body_mass_g=tf.constant([3750.0, 4800.0, float("nan")]),
    )
    assert [c.decode() for c in outputs["classes"].numpy()] == ["Adelie", "Gentoo", "Chinstrap"]


def test_metadata_holds_the_run_and_its_push(penguin):
    loaded, paths, first, _ = penguin
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    record = metadata.find_run(store, first.run_id)
    assert record.state == "succeeded"
    assert record.pushed_version == "1"
    assert [r.run_id for r in metadata.list_runs(store, "penguin")] == [first.run_id]


def test_version_1_has_a_model_card_from_its_lineage_and_run(penguin, capsys):
    import json

    import tensorflow_model_analysis as tfma
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from pipelines.serving_state import current_entry
    from pipelines.serving_state.models_table import model_card_files
    from tests.unit.test_model_card import assert_valid_card

    loaded, paths, first, _ = penguin
    card_file, page_file = model_card_files(paths.serving_config_dir, "penguin", 1)
    card = json.loads(card_file.read_text())
    assert_valid_card(card)
    details = card["model_details"]
    assert details["name"] == "penguin" and details["version"]["name"] == "1"
    assert details["path"] == str(paths.serving_dir / "1")

    store = metadata.open_store(loaded.spec, paths.metadata_path)
    (examples,) = run_artifacts(store, first.run_id, "Examples")
    span = examples.custom_properties["span"].int_value
    assert details["version"]["diff"] == f"trained on spans {span}"
    (statistics,) = run_artifacts(store, first.run_id, "ExampleStatistics")
    rows = {}
    for split in ("train", "eval"):
        counted = statistics_pb2.DatasetFeatureStatisticsList()
        counted.ParseFromString(
            (Path(statistics.uri) / f"Split-{split}" / "FeatureStats.pb").read_bytes()
        )
        rows[split] = counted.datasets[0].num_examples
    assert sum(rows.values()) == 344  # every row of palmerpenguins
    assert [d["description"] for d in card["model_parameters"]["data"]] == [
        f"{rows[split]} rows of span {span} (Examples artifact {examples.uri})"
        for split in ("train", "eval")
    ]
    assert {m["key"] for m in card["model_parameters"]["input_format_map"]} == {
        "island", "sex", "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"
    }  # fmt: skip

    (evaluation,) = run_artifacts(store, first.run_id, "ModelEvaluation")
    recorded = {
        (tuple(k.column for k in m.slice_key.single_slice_keys), i.key.name): i.value
        for m in tfma.load_metrics(evaluation.uri)
        for i in m.metric_keys_and_values
    }
    accuracy = recorded[((), "sparse_categorical_accuracy")].double_value.value
    shown = {
        (m["slice"], m["type"]): float(m["value"])
        for m in card["quantitative_analysis"]["performance_metrics"]
    }
    assert shown[("all examples", "sparse_categorical_accuracy")] == accuracy
    assert {s for s, _ in shown} >= {"all examples", "island = Biscoe", "island = Dream"}

    (infra,) = run_artifacts(store, first.run_id, "InfraBlessing")
    server = infra.custom_properties["conveyor_infra_server_description"].string_value
    lines = details["documentation"].splitlines()
    assert "Gate data gate: passed." in lines
    assert any(line.startswith("Gate model gate: blessed") for line in lines)
    assert any(
        line.startswith("Gate infra validation: blessed") and f"checked on {server}" in line
        for line in lines
    )
    entry = current_entry(paths.serving_config_dir, "penguin")
    labels = sorted(label for label, version in entry.labels.items() if version == 1)
    assert "stable" in labels and f"Labels: {', '.join(labels)}." in lines

    page = page_file.read_text()
    assert "<h1>Model card: penguin version 1</h1>" in page
    report = (paths.runs_dir / first.run_id / "report.html").read_text()
    assert f">{page_file}</a>" in report
    assert cli.main(["models", "penguin", "--env", "ci", "--workdir", str(paths.workdir)]) == 0
    printed = capsys.readouterr().out
    assert "1.html" in printed and f"model cards in {page_file.parent}" in printed


def test_unchanged_rerun_executes_nothing_and_pushes_nothing(penguin):
    loaded, paths, first, _ = penguin
    before = model_digest(str(paths.serving_dir / "1"))
    again = nightly.run(loaded, paths.workdir, echo=lambda _: None)
    assert again.outcome == "not_pushed", again.message
    states = _states(again)
    assert {n: states.get(n) for n in TRAINED_NODES} == {n: "cached" for n in TRAINED_NODES}
    assert "cache hit" in again.message
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]
    assert model_digest(str(paths.serving_dir / "1")) == before


def test_cli_rerun_answers_unchanged_without_running_anything(penguin, capsys):
    loaded, paths, _, _ = penguin
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    runs_before = len(metadata.list_runs(store, "penguin"))
    argv = ["run", "penguin", "--env", "ci", "--workdir", str(paths.workdir)]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.startswith("UNCHANGED: same data, spec, schema and code")
    assert len(metadata.list_runs(store, "penguin")) == runs_before
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]


@pytest.mark.parametrize(
    ("fixture", "column", "problem"),
    [
        ("penguins_text_in_numeric.csv", "body_mass_g", "Unexpected data type"),
        ("penguins_missing_column.csv", "flipper_length_mm", "Column dropped"),
    ],
)
def test_bad_data_stops_at_the_data_gate_and_serving_is_untouched(
    penguin, fixture, column, problem
):
    loaded, paths, _, _ = penguin
    served_before = model_digest(str(paths.serving_dir / "1"))
    copy_fixture(fixture, paths.input_dir, "penguins.csv")
    try:
        result = nightly.run(loaded, paths.workdir, echo=lambda _: None)
    finally:
        copy_fixture(paths.workdir / "good-data" / "penguins.csv", paths.input_dir, "penguins.csv")
    assert result.outcome == "blocked"
    assert result.message.startswith(f"Data gate: the data in {paths.input_dir}")
    assert f"{column} (train split): {problem}" in result.message
    states = _states(result)
    assert states["data_gate"] == "failed"
    assert "trainer" not in states and "pusher" not in states
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]
    assert model_digest(str(paths.serving_dir / "1")) == served_before
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    assert metadata.find_run(store, result.run_id).state == "failed"


def test_a_worse_model_on_new_data_is_compared_with_the_served_one_and_not_pushed(penguin):
    loaded, paths, first, _ = penguin
    served_before = model_digest(str(paths.serving_dir / "1"))
    csv = paths.input_dir / "penguins.csv"
    pd.read_csv(paths.workdir / "good-data" / "penguins.csv").sample(
        frac=0.9, random_state=7
    ).to_csv(csv, index=False)
    barely_trained = load_spec(
        "penguin",
        env="ci",
        overrides=["trainer.train_steps=1", "trainer.learning_rate=0.0001"],
        workdir=paths.workdir,
    )
    result = nightly.run(barely_trained, paths.workdir, echo=lambda _: None)

    assert result.outcome == "not_pushed", result.message
    assert "did not pass the evaluation thresholds" in result.message
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]
    assert model_digest(str(paths.serving_dir / "1")) == served_before
    # The Evaluator compared it with the model serving as version 1.
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    (blessing,) = run_artifacts(store, result.run_id, "ModelBlessing")
    assert blessing.custom_properties["blessed"].int_value == 0
    (served,) = run_artifacts(store, first.run_id, "Model")
    assert blessing.custom_properties["baseline_model_id"].int_value == served.id
