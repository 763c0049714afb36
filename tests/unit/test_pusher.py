"""Publishing to TF Serving's layout: integer versions, atomic rename, nothing half-copied."""

import json
import os

from pipelines.serving_state import versions


def _fake_model(path, payload: bytes) -> str:
    os.makedirs(os.path.join(path, "variables"), exist_ok=True)
    with open(os.path.join(path, "saved_model.pb"), "wb") as handle:
        handle.write(payload)
    with open(os.path.join(path, "variables", "variables.index"), "wb") as handle:
        handle.write(b"index")
    return str(path)


def test_versions_count_up_and_each_is_complete(tmp_path):
    base = str(tmp_path / "serving" / "penguin")
    first = _fake_model(tmp_path / "m1", b"one")
    second = _fake_model(tmp_path / "m2", b"two")

    assert versions.publish(first, base, {"model_digest": "a"})[0] == 1
    version, target = versions.publish(second, base, {"model_digest": "b"})

    assert version == 2 and target == os.path.join(base, "2")
    assert sorted(os.listdir(base)) == ["1", "2"]  # no staging directory left behind
    with open(os.path.join(target, "saved_model.pb"), "rb") as handle:
        assert handle.read() == b"two"
    with open(os.path.join(target, versions.PUSH_RECORD)) as handle:
        assert json.load(handle) == {"model_digest": "b", "version": 2}


def test_a_staging_directory_is_never_taken_for_a_version(tmp_path):
    base = tmp_path / "serving"
    (base / ".incoming-3-99").mkdir(parents=True)  # a push killed mid-copy
    (base / "1").mkdir()
    assert versions.served_versions(str(base)) == [1]


def test_digest_identifies_identical_models(tmp_path):
    one = _fake_model(tmp_path / "a", b"same")
    two = _fake_model(tmp_path / "b", b"same")
    other = _fake_model(tmp_path / "c", b"different")
    assert versions.model_digest(one) == versions.model_digest(two)
    assert versions.model_digest(one) != versions.model_digest(other)


def test_retention_keeps_the_newest_versions_and_numbers_keep_counting_up(tmp_path):
    base = str(tmp_path / "serving" / "taxi")
    for payload in (b"1", b"2", b"3"):
        versions.publish(_fake_model(tmp_path / payload.decode(), payload), base, {})

    assert versions.retire_old_versions(base, keep=2) == [1]
    assert sorted(os.listdir(base)) == ["2", "3"]  # nothing hidden left behind either
    assert versions.publish(_fake_model(tmp_path / "4", b"4"), base, {})[0] == 4
    assert versions.retire_old_versions(base, keep=0) == []  # 0: keep everything
    assert versions.retire_old_versions(base, keep=5) == []
    assert sorted(os.listdir(base)) == ["2", "3", "4"]


def test_retention_never_removes_a_protected_version(tmp_path):
    base = str(tmp_path / "serving" / "taxi")
    for payload in (b"1", b"2", b"3"):
        versions.publish(_fake_model(tmp_path / payload.decode(), payload), base, {})
    assert versions.retire_old_versions(base, keep=1, protected={1}) == [2]
    assert sorted(os.listdir(base)) == ["1", "3"]


def test_leftovers_are_only_hidden_folders_directly_under_the_base(tmp_path):
    base = tmp_path / "serving"
    for name in (".incoming-4-12", ".retired-1-12", "2", ".quarantined-3-x"):
        (base / name).mkdir(parents=True)
    (base / ".incoming-file").write_text("not a folder")
    assert versions.leftovers(str(base)) == [".incoming-4-12", ".retired-1-12"]
    for name in versions.leftovers(str(base)):
        versions.remove_leftover(str(base), name)
    assert sorted(os.listdir(base)) == [".incoming-file", ".quarantined-3-x", "2"]
