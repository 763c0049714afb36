"""ObjectPath's names, as pathlib gives them, without a store (the store's side is in
tests/e2e/test_storage_emulators.py and test_bucket_run.py)."""

import os
from pathlib import Path

import pytest

from pipelines.core.object_path import ObjectPath, _match, as_path, under
from pipelines.core.storage import StorageError


def test_names_split_and_join_as_pathlib_does():
    model = ObjectPath("s3://team-bucket/work/serving/penguin/")
    assert str(model) == "s3://team-bucket/work/serving/penguin"  # no trailing slash kept
    version = model / "3" / "saved_model.pb"
    assert str(version) == "s3://team-bucket/work/serving/penguin/3/saved_model.pb"
    assert (version.name, version.stem, version.suffix) == ("saved_model.pb", "saved_model", ".pb")
    assert version.parent.parent == model
    assert version.parts[:3] == ("s3://team-bucket", "work", "serving")
    assert version.parts[3:] == ("penguin", "3", "saved_model.pb")
    assert version.with_suffix(".pbtxt").name == "saved_model.pbtxt"
    assert str(version.relative_to(model)) == "3/saved_model.pb"
    assert version.is_relative_to("s3://team-bucket/work") and not version.is_relative_to(
        "s3://team-bucket/wor"
    )
    assert ObjectPath("gs://team-bucket").parent == ObjectPath("gs://team-bucket")
    assert model / "gs://other-bucket/x" == ObjectPath("gs://other-bucket/x")


def test_builtin_open_and_os_refuse_an_object_path_instead_of_reading_a_local_file():
    with pytest.raises(TypeError):
        open(ObjectPath("gs://team-bucket/a.csv"))  # noqa: SIM115 - the refusal is the point
    with pytest.raises(TypeError):
        os.path.exists(ObjectPath("gs://team-bucket/a.csv"))


def test_as_path_and_under_keep_local_paths_local():
    assert isinstance(as_path("/srv/models"), Path)
    assert isinstance(as_path("gs://team-bucket/models"), ObjectPath)
    with pytest.raises(StorageError, match="not a valid bucket name"):
        as_path("s3://B/models")
    workdir = as_path("s3://team-bucket/work")
    assert under(workdir, "serving") == ObjectPath("s3://team-bucket/work/serving")
    assert under(workdir, "gs://input-bucket/taxi") == ObjectPath("gs://input-bucket/taxi")
    assert under(workdir, "/srv/models") == Path("/srv/models")  # never folded into the bucket
    assert under(Path("/w"), "serving") == Path("/w/serving")


@pytest.mark.parametrize(
    ("path", "pattern", "matches"),
    [
        ("2025-11-10/taxi.csv", "*/taxi.csv", True),
        ("a/b/taxi.csv", "*/taxi.csv", False),
        ("a/b/taxi.csv", "**/taxi.csv", True),
        ("taxi.csv", "**/taxi.csv", True),
        ("a/b", "a/?", True),
    ],
)
def test_glob_patterns_match_part_by_part(path, pattern, matches):
    assert _match(path, pattern) is matches
