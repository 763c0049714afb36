"""A push killed at each of its phases, with real `conveyor run` processes on penguin: serving
never loses its good version, and the next run repairs what the killed one left so that ML
Metadata and serving agree again.

The phases, in the order a push goes through them (pipelines/core/failpoints.py kills the pipeline
process with SIGKILL at each, as the OOM killer would; `conveyor run`, its supervising parent,
survives and reports the run FAILED, naming the signal):
  push:copied        the new version is copied and flushed, not yet renamed into place;
  push:renamed       the version is served, ML Metadata has not recorded the push;
  retain:hidden      after the run, an old version is half-retired (renamed, not deleted);
  run:before_finish  the pipeline finished, nothing after it (report, retention, record) ran.
The last test kills `push:copied` again, in a push that carries `model.tflite` (`push.tflite`).

One working directory, in order. Every run trains a few steps more than the one before, so
each has a new model to push; thresholds are lowered so that any model may be pushed.
"""

import os
from pathlib import Path

import pytest

from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.serving_state import versions
from pipelines.serving_state.records import recorded_pushes
from pipelines.spec.loading import load_spec
from pipelines.spec.models import TFLITE_DEFAULT_TOLERANCE, TfLiteQuantization
from tests.faults.killed_runs import (
    ANY_MODEL,
    assert_killed,
    run_penguin,
    write_penguin_data,
)

pytestmark = pytest.mark.e2e


def _run(workdir: Path, steps: int, *extra: str, failpoint: str | None = None):
    return run_penguin(workdir, f"trainer.train_steps={steps}", *extra, failpoint=failpoint)


class Serving:
    """What a model server would see, and what ML Metadata says was pushed."""

    def __init__(self, workdir: Path):
        spec = load_spec("penguin", env="ci", overrides=ANY_MODEL).spec
        self.paths = RunPaths(workdir=workdir.resolve(), spec=spec)
        self.base = str(self.paths.serving_dir)

    def versions(self) -> list[int]:
        return versions.served_versions(self.base)

    def recorded(self) -> set[int]:
        return recorded_pushes(self.paths)[1]

    def digests(self) -> dict[int, str]:
        return {v: versions.model_digest(os.path.join(self.base, str(v))) for v in self.versions()}

    def leftovers(self) -> list[str]:
        return versions.leftovers(self.base)

    def quarantined(self) -> list[str]:
        return [n for n in os.listdir(self.base) if n.startswith(versions.QUARANTINE_PREFIX)]

    def in_step(self) -> bool:
        """Every version served is one ML Metadata recorded, and nothing half-done is left."""
        return set(self.versions()) <= self.recorded() and not self.leftovers()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("push-faults")
    write_penguin_data(workdir)
    first = _run(workdir, 20)
    assert first.returncode == 0 and "PUSHED: pushed version 1" in first.stdout, first.stderr
    return workdir


def test_killed_while_copying_serving_keeps_version_1_and_the_next_run_cleans_up(workdir):
    serving = Serving(workdir)
    before = serving.digests()

    killed = _run(workdir, 21, failpoint="push:copied")

    assert_killed(killed, "during pusher")
    assert serving.versions() == [1] and serving.digests() == before
    assert [n for n in serving.leftovers() if n.startswith(versions.INCOMING_PREFIX)]
    assert serving.recorded() == {1}

    again = _run(workdir, 21)
    assert again.returncode == 0 and "PUSHED: pushed version 2" in again.stdout, again.stdout
    assert "removed leftovers .incoming-" in again.stdout
    assert serving.versions() == [1, 2] and serving.in_step()


def test_killed_after_the_rename_before_the_record_the_unknown_version_is_quarantined(workdir):
    serving = Serving(workdir)
    before = serving.digests()

    killed = _run(workdir, 22, failpoint="push:renamed")

    assert_killed(killed, "during pusher")
    # The new version is visible, but ML Metadata never heard of it: out of step.
    assert serving.versions() == [1, 2, 3] and serving.recorded() == {1, 2}
    assert {v: d for v, d in serving.digests().items() if v < 3} == before

    again = _run(workdir, 22)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "quarantined versions ML Metadata never recorded" in again.stdout
    # Serving fell back to version 2 before this run; this run then pushed its model (the
    # killed run's Trainer and Evaluator were cache hits) as version 3, recorded this time.
    assert "PUSHED: pushed version 3" in again.stdout
    assert serving.versions() == [1, 2, 3] and serving.in_step()
    [hidden] = serving.quarantined()
    assert versions.read_push_record(os.path.join(serving.base, hidden))["version"] == 3
    assert {v: d for v, d in serving.digests().items() if v < 3} == before


def test_killed_while_retiring_the_newest_version_stays_and_the_next_run_finishes(workdir):
    serving = Serving(workdir)

    killed = _run(workdir, 23, "push.keep_versions=1", failpoint="retain:hidden")

    assert_killed(killed, "after the pipeline had ended (pushed version 4 ")
    # Version 4 was pushed and recorded; retention died after hiding version 1.
    assert 4 in serving.versions() and 4 in serving.recorded()
    assert [n for n in serving.leftovers() if n.startswith(versions.RETIRED_PREFIX)]
    newest = serving.digests()[4]

    again = _run(workdir, 23, "push.keep_versions=1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "NOT_PUSHED" in again.stdout  # the same model: every component a cache hit
    assert serving.versions() == [4] and serving.digests()[4] == newest
    assert serving.in_step()


def test_killed_after_the_pipeline_before_its_report_and_record(workdir):
    serving = Serving(workdir)

    killed = _run(workdir, 24, "push.keep_versions=1", failpoint="run:before_finish")

    assert_killed(killed, "after the pipeline had ended (pushed version 5 ")
    # The push itself is complete and recorded; only what follows a run is missing.
    assert serving.versions()[-1] == 5 and 5 in serving.recorded()

    again = _run(workdir, 24, "push.keep_versions=1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "UNCHANGED" not in again.stdout  # no outcome was recorded: the run goes again
    assert serving.versions() == [5] and serving.in_step()
    assert (serving.paths.runs_dir / "serving_reconcile.jsonl").is_file()


TFLITE = ["push.tflite.enabled=true", "push.tflite.quantization=none"]  # float32: tolerance 1e-4


def _files_named(base: str, wanted: str) -> list[str]:
    """Every file called `wanted` under the base path, relative to it (hidden folders too)."""
    return sorted(
        os.path.relpath(os.path.join(folder, name), base)
        for folder, _, files in os.walk(base)
        for name in files
        if name == wanted
    )


def test_killed_while_copying_a_version_with_model_tflite_serving_sees_none_of_it(workdir):
    # TFX and TensorFlow come in here, not when the module is collected.
    from components.pusher.executor import TFLITE_PROPERTY
    from components.tflite.artifact import TFLITE_FILE
    from tests.tflite_check import largest_difference

    serving = Serving(workdir)
    before, recorded = serving.digests(), serving.recorded()
    models_config = (serving.paths.serving_config_dir / "models.config").read_bytes()
    shown_before = _files_named(serving.base, TFLITE_FILE)

    killed = _run(workdir, 25, *TFLITE, failpoint="push:copied")

    assert_killed(killed, "during pusher")
    # The staged copy held the flatbuffer beside the SavedModel, out of TF Serving's sight.
    [staging] = [n for n in serving.leftovers() if n.startswith(versions.INCOMING_PREFIX)]
    staged = Path(serving.base, staging)
    assert (staged / "saved_model.pb").is_file() and (staged / TFLITE_FILE).is_file()
    assert _files_named(serving.base, TFLITE_FILE) == sorted(
        [*shown_before, f"{staging}/{TFLITE_FILE}"]
    )
    assert serving.digests() == before and serving.recorded() == recorded
    assert (serving.paths.serving_config_dir / "models.config").read_bytes() == models_config

    again = _run(workdir, 25, *TFLITE)
    new = max(before) + 1
    assert again.returncode == 0, again.stdout + again.stderr
    assert "removed leftovers .incoming-" in again.stdout
    assert f"PUSHED: pushed version {new} " in again.stdout, again.stdout
    assert serving.versions() == [*before, new] and serving.in_step()
    assert _files_named(serving.base, TFLITE_FILE) == sorted(
        [*shown_before, f"{new}/{TFLITE_FILE}"]
    )
    # The version is whole: its model.tflite answers the penguin rows as its SavedModel does.
    version = Path(serving.base, str(new))
    worst, rows = largest_difference(version, workdir / "data" / "penguin" / "penguins.csv")
    assert rows == 344 and worst <= TFLITE_DEFAULT_TOLERANCE[TfLiteQuantization.NONE]
    store = metadata.open_store(serving.paths.spec, serving.paths.metadata_path)
    pushed = max(store.get_artifacts_by_type("PushedModel"), key=lambda a: a.id)
    assert metadata.custom_property(pushed, TFLITE_PROPERTY) == f"with {TFLITE_FILE}"
