"""The unchanged-run check sees every change that matters and nothing else."""

import os
import shutil

import pytest
import yaml

from pipelines.core.paths import FRAMEWORK_LOCK, RunPaths, framework_version
from pipelines.core.project import MARKER, PROJECT_ENV, find_project
from pipelines.finish import outcome_record
from pipelines.run import fingerprint
from pipelines.spec.loading import load_spec


@pytest.fixture
def paths(tmp_path):
    paths = RunPaths(workdir=tmp_path, spec=load_spec("penguin", env="ci").spec)
    paths.input_dir.mkdir(parents=True)
    (paths.input_dir / "penguins.csv").write_text("species\nAdelie\n")
    (paths.serving_dir / "1").mkdir(parents=True)
    paths.metadata_path.write_bytes(b"")
    outcome_record.record_outcome(paths, "penguin-1", "pushed", fingerprint.compute(paths))
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


def test_a_same_size_rewrite_with_its_old_mtime_is_a_change(paths):
    csv = paths.input_dir / "penguins.csv"
    before = csv.stat()
    csv.write_text("species\nGentoo\n")  # as long as "Adelie"
    os.utime(csv, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert csv.stat().st_size == before.st_size
    assert csv.stat().st_mtime_ns == before.st_mtime_ns
    assert fingerprint.unchanged_since(paths) is None


def test_a_touched_input_with_the_same_bytes_is_no_change(paths):
    os.utime(paths.input_dir / "penguins.csv", ns=(10**18, 10**18))
    assert fingerprint.unchanged_since(paths)["run_id"] == "penguin-1"


# The taxi nightly layout: `{YYYY}-{MM}-{DD}/*.csv`, a 3-span window, drift measured.
NIGHTS = {"2026-11-25": 20782, "2026-11-26": 20783, "2026-11-27": 20784, "2026-11-28": 20785}
TONIGHT = 20785


def taxi_paths(workdir, overrides=()):
    spec = load_spec("taxi", env="ci", overrides=list(overrides)).spec
    return RunPaths(workdir=workdir, spec=spec)


def recorded_night(workdir, overrides=(), nights=NIGHTS):
    """Writes the nights' CSVs, one served version, and a pushed record for tonight."""
    paths = taxi_paths(workdir, overrides)
    for night in nights:
        (paths.input_dir / night).mkdir(parents=True)
        (paths.input_dir / night / "taxi.csv").write_text(f"fare,company\n1.5,{night}\n")
    (paths.serving_dir / "1").mkdir(parents=True)
    paths.metadata_path.write_bytes(b"")
    outcome_record.record_outcome(
        paths, "taxi-1", "pushed", fingerprint.compute(paths, TONIGHT), TONIGHT
    )
    assert fingerprint.unchanged_since(paths, TONIGHT)["run_id"] == "taxi-1"
    return paths


def rewrite_keeping_size_and_mtime(csv):
    before = csv.stat()
    text = csv.read_text()
    csv.write_text(text.replace("1.5", "9.5"))
    os.utime(csv, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert csv.stat().st_size == before.st_size


def test_a_spanned_night_reads_its_window_and_drift_reference(tmp_path):
    paths = recorded_night(tmp_path)
    read = {str(p.relative_to(paths.input_dir)) for p in fingerprint.input_files(paths, TONIGHT)}
    # Tonight and the two nights before it (window_spans: 3); 2026-11-25 is outside the window
    # and the drift reference is the newest earlier night, already in it.
    assert read == {f"{night}/taxi.csv" for night in ("2026-11-26", "2026-11-27", "2026-11-28")}


def test_an_earlier_window_span_changing_is_a_change(tmp_path):
    # No drift: only the window reads the night two before tonight.
    paths = recorded_night(tmp_path, ["data.drift={}"])
    rewrite_keeping_size_and_mtime(paths.input_dir / "2026-11-26" / "taxi.csv")
    assert fingerprint.unchanged_since(paths, TONIGHT) is None


def test_a_span_outside_the_window_changing_is_no_change(tmp_path):
    paths = recorded_night(tmp_path)
    rewrite_keeping_size_and_mtime(paths.input_dir / "2026-11-25" / "taxi.csv")
    assert fingerprint.unchanged_since(paths, TONIGHT)["run_id"] == "taxi-1"


def test_the_drift_reference_changing_is_a_change(tmp_path):
    # No window, and the night before tonight missing: drift is measured from 2026-11-26.
    nights = {night: span for night, span in NIGHTS.items() if night != "2026-11-27"}
    paths = recorded_night(tmp_path, ["data.window_spans=1"], nights=nights)
    assert fingerprint.window_spans(paths, TONIGHT) == [20783]
    rewrite_keeping_size_and_mtime(paths.input_dir / "2026-11-26" / "taxi.csv")
    assert fingerprint.unchanged_since(paths, TONIGHT) is None


def test_without_drift_or_window_earlier_spans_are_not_read(tmp_path):
    paths = recorded_night(tmp_path, ["data.window_spans=1", "data.drift={}"])
    rewrite_keeping_size_and_mtime(paths.input_dir / "2026-11-27" / "taxi.csv")
    assert fingerprint.unchanged_since(paths, TONIGHT)["run_id"] == "taxi-1"


SKEW = ["data.skew={fare: 0.2}", "data.serving_data_dir=serving_logs"]


@pytest.mark.parametrize("change", ["rewrite", "new file"])
def test_the_serving_logs_changing_is_a_change(tmp_path, change):
    logs = tmp_path / "serving_logs"
    logs.mkdir()
    (logs / "requests-1.csv").write_text("fare,company\n1.5,a\n")
    paths = recorded_night(tmp_path, SKEW)
    if change == "rewrite":
        rewrite_keeping_size_and_mtime(logs / "requests-1.csv")
    else:
        (logs / "requests-2.csv").write_text("fare,company\n2.5,b\n")
    assert fingerprint.unchanged_since(paths, TONIGHT) is None


def test_serving_logs_are_not_read_without_skew(tmp_path):
    logs = tmp_path / "serving_logs"
    logs.mkdir()
    (logs / "requests-1.csv").write_text("fare,company\n1.5,a\n")
    paths = recorded_night(tmp_path, ["data.serving_data_dir=serving_logs"])
    (logs / "requests-2.csv").write_text("fare,company\n2.5,b\n")
    assert fingerprint.unchanged_since(paths, TONIGHT)["run_id"] == "taxi-1"


def test_a_deleted_serving_folder_makes_a_night_stale(tmp_path):
    paths = recorded_night(tmp_path)
    shutil.rmtree(tmp_path / paths.spec.push.base_dir)
    assert fingerprint.unchanged_since(paths, TONIGHT) is None


def test_a_rolled_back_version_makes_a_night_stale(tmp_path):
    paths = recorded_night(tmp_path)
    (paths.serving_dir / "2").mkdir()
    outcome_record.record_outcome(
        paths, "taxi-2", "pushed", fingerprint.compute(paths, TONIGHT), TONIGHT
    )
    (paths.serving_dir / "2").rmdir()  # version 1 is served again
    assert fingerprint.unchanged_since(paths, TONIGHT) is None


def test_later_nights_pushes_and_retention_keep_a_night_done(tmp_path):
    paths = recorded_night(tmp_path)
    (paths.serving_dir / "2").mkdir()
    (paths.serving_dir / "1").rmdir()  # a later night pushed 2; retention removed 1
    assert fingerprint.unchanged_since(paths, TONIGHT)["run_id"] == "taxi-1"


def test_a_blocked_night_does_not_depend_on_serving(tmp_path):
    paths = recorded_night(tmp_path)
    outcome_record.record_outcome(
        paths, "taxi-2", "blocked", fingerprint.compute(paths, TONIGHT), TONIGHT
    )
    shutil.rmtree(paths.serving_dir)
    assert fingerprint.unchanged_since(paths, TONIGHT)["run_id"] == "taxi-2"


# What the fingerprint covers is this pipeline's files, Conveyor's version and the lock: a team's
# project with penguin (its trainer module in the team's package) and a layer over `ci`.
TEAM_MODEL = """import tf_keras as keras


def build_model(inputs, spec):
    return keras.layers.Dense(8, activation="relu")(inputs)
"""


@pytest.fixture
def team(tmp_path, monkeypatch):
    """(project root, recorded penguin paths): one run of penguin recorded as pushed."""
    example = find_project().root
    root = tmp_path / "team"
    (root / "specs").mkdir(parents=True)
    (root / MARKER).write_text("")
    spec = yaml.safe_load((example / "specs" / "penguin.yaml").read_text())
    spec["trainer"].pop("hidden_units")
    spec["trainer"]["module"] = "team_models.penguin"
    (root / "specs" / "penguin.yaml").write_text(yaml.safe_dump(spec))
    shutil.copytree(example / "schemas" / "penguin", root / "schemas" / "penguin")
    (root / "team_models").mkdir()
    (root / "team_models" / "__init__.py").write_text("")
    (root / "team_models" / "penguin.py").write_text(TEAM_MODEL)
    (root / "configs").mkdir()
    (root / "configs" / "ci.yaml").write_text(
        "pipelines: {penguin: {trainer: {train_steps: 50}}}\n"
    )
    monkeypatch.setenv(PROJECT_ENV, str(root))
    paths = penguin_paths(tmp_path / "work")
    paths.input_dir.mkdir(parents=True)
    (paths.input_dir / "penguins.csv").write_text("species\nAdelie\n")
    (paths.serving_dir / "1").mkdir(parents=True)
    paths.metadata_path.write_bytes(b"")
    outcome_record.record_outcome(paths, "penguin-1", "pushed", fingerprint.compute(paths))
    return root, paths


def penguin_paths(workdir):
    """penguin's paths as a new `conveyor run` loads it: from the files as they are now."""
    return RunPaths(workdir=workdir, spec=load_spec("penguin", env="ci").spec)


def test_the_fingerprint_names_conveyors_version_the_lock_and_the_teams_modules(team):
    _, paths = team
    taken = fingerprint.compute(paths)
    assert taken["conveyor"] == framework_version()
    # Run from this checkout (installed editable): the version is the source's digest.
    assert taken["conveyor"].startswith("source:")
    assert list(taken["modules"]) == ["team_models.penguin"]
    assert fingerprint.lock_file() == FRAMEWORK_LOCK  # the team keeps no lock of its own


def test_another_spec_and_unrelated_files_leave_a_pipeline_unchanged(team):
    root, paths = team
    other = (root / "specs" / "penguin.yaml").read_text().replace("name: penguin", "name: other")
    (root / "specs" / "other.yaml").write_text(other)
    (root / "schemas" / "other").mkdir()
    (root / "schemas" / "other" / "schema.pbtxt").write_text("")
    (root / "team_models" / "other.py").write_text(TEAM_MODEL + "# another network\n")
    (root / "configs" / "ci.yaml").write_text(
        "pipelines: {penguin: {trainer: {train_steps: 50}}, other: {trainer: {train_steps: 9}}}\n"
    )
    (root / "README.md").write_text("notes\n")
    assert fingerprint.unchanged_since(penguin_paths(paths.workdir))["run_id"] == "penguin-1"


def test_its_own_spec_file_changing_is_a_change(team):
    root, paths = team
    spec = root / "specs" / "penguin.yaml"
    spec.write_text(spec.read_text().replace("learning_rate: 0.02", "learning_rate: 0.05"))
    assert fingerprint.unchanged_since(penguin_paths(paths.workdir)) is None


def test_its_profile_layer_changing_is_a_change(team):
    root, paths = team
    (root / "configs" / "ci.yaml").write_text(
        "pipelines: {penguin: {trainer: {train_steps: 60}}}\n"
    )
    assert fingerprint.unchanged_since(penguin_paths(paths.workdir)) is None


def test_its_schema_changing_is_a_change(team):
    root, paths = team
    schema = root / "schemas" / "penguin" / "schema.pbtxt"
    schema.write_text(schema.read_text() + "# reviewed again\n")
    assert fingerprint.unchanged_since(penguin_paths(paths.workdir)) is None


def test_its_trainer_module_changing_is_a_change(team):
    root, paths = team
    module = root / "team_models" / "penguin.py"
    module.write_text(module.read_text().replace("Dense(8", "Dense(16"))
    assert fingerprint.unchanged_since(penguin_paths(paths.workdir)) is None


def test_a_lock_of_the_projects_own_is_a_change(team):
    root, paths = team
    (root / "requirements.lock").write_text("tfx==1.16.0\n")
    assert fingerprint.lock_file() == root / "requirements.lock"
    assert fingerprint.unchanged_since(penguin_paths(paths.workdir)) is None
