"""The unchanged-run check sees every change that matters and nothing else."""

import os

import pytest

from pipelines.ops import fingerprint
from pipelines.paths import RunPaths
from pipelines.spec.loading import load_spec


@pytest.fixture
def paths(tmp_path):
    paths = RunPaths(workdir=tmp_path, spec=load_spec("penguin", env="ci").spec)
    paths.input_dir.mkdir(parents=True)
    (paths.input_dir / "penguins.csv").write_text("species\nAdelie\n")
    (paths.serving_dir / "1").mkdir(parents=True)
    paths.metadata_path.write_bytes(b"")
    fingerprint.record_outcome(paths, "penguin-1", "pushed", fingerprint.compute(paths))
    return paths


def test_nothing_changed_is_recognised(paths):
    assert fingerprint.unchanged_since(paths)["run_id"] == "penguin-1"


def test_new_input_data_is_a_change(paths):
    csv = paths.input_dir / "penguins.csv"
    csv.write_text("species\nGentoo\n")
    os.utime(csv, ns=(1, 1))
    assert fingerprint.unchanged_since(paths) is None


def test_a_different_spec_is_a_change(paths):
    other = RunPaths(
        workdir=paths.workdir,
        spec=load_spec("penguin", env="ci", overrides=["trainer.train_steps=3"]).spec,
    )
    assert fingerprint.unchanged_since(other) is None


def test_a_removed_served_version_is_a_change(paths):
    (paths.serving_dir / "1").rmdir()
    assert fingerprint.unchanged_since(paths) is None


def test_a_lost_metadata_store_is_a_change(paths):
    paths.metadata_path.unlink()
    assert fingerprint.unchanged_since(paths) is None
