"""A team's `@component` between the data gate and the trainer, named in the spec by import
path: it drops the penguin rows without a `sex`, the trainer trains on what it kept (ML
Metadata shows the trainer's examples are its output) and the run pushes a model."""

import pytest
import tensorflow as tf
import yaml

from pipelines import cli
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.core.project import find_project
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec

COMPONENTS = [
    "csv_example_gen",
    "statistics_gen",
    "schema_gen",
    "example_validator",
    "data_gate",
    {
        "id": "drop_missing_sex",
        "component": "tests.user_code.components.DropMissing",
        "params": {"column": "sex", "min_rows": 10},
        "inputs": {"examples": "csv_example_gen.examples"},
        "provides": {"examples": "kept"},
    },
    "trainer",
    "evaluator",
    "pusher",
]


def _rows(split_uri: str) -> list[tf.train.Example]:
    files = sorted(tf.io.gfile.glob(f"{split_uri}/*"))
    assert files, split_uri
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return [tf.train.Example.FromString(r.numpy()) for r in records]


@pytest.fixture(scope="module")
def custom_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("custom_component")
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    data = yaml.safe_load((find_project().specs_dir / "penguin.yaml").read_text())
    data["components"] = [{"type": c} if isinstance(c, str) else c for c in COMPONENTS]
    path = workdir / "penguin_custom.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    loaded = load_spec(str(path), env="ci", workdir=workdir)
    paths = RunPaths(workdir=workdir, spec=loaded.spec)
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    return loaded, paths, result


def test_the_trainer_trains_on_the_custom_node_s_output_and_the_run_pushes(custom_run):
    loaded, paths, result = custom_run
    assert result.outcome == "pushed", result.message
    states = {n.node_id: n.state for n in result.nodes}
    assert states["drop_missing_sex"] == "executed" and states["trainer"] == "executed"
    assert (paths.serving_dir / "1" / "saved_model.pb").is_file()

    store = metadata.open_store(loaded.spec, paths.metadata_path)
    nodes = metadata.read_run_artifacts(store, result.run_id)
    kept = nodes["drop_missing_sex"].output("kept")
    assert nodes["trainer"].input("examples").id == kept.id
    assert nodes["drop_missing_sex"].input("examples").id == (
        nodes["csv_example_gen"].output("examples").id
    )
    # What it kept has a sex in every row; what it dropped is the rest of ExampleGen's rows.
    read = {split: _rows(f"{kept.uri}/Split-{split}") for split in kept.split_names()}
    original = nodes["csv_example_gen"].output("examples")
    before = sum(len(_rows(f"{original.uri}/Split-{s}")) for s in original.split_names())
    after = sum(len(rows) for rows in read.values())
    assert set(read) == {"train", "eval"}
    assert all(r.features.feature["sex"].bytes_list.value for rows in read.values() for r in rows)
    dropped = nodes["drop_missing_sex"].output("dropped")
    assert 0 < before - after == int(tf.io.read_file(dropped.uri).numpy())
