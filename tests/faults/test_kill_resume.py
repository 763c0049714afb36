"""Real `conveyor run` processes on penguin killed with SIGKILL inside a component, then run
again: nothing the killed run half-made is published or used, the Trainer resumes from its
last checkpoint, and ML Metadata and serving agree.

The points (pipelines/core/failpoints.py kills the pipeline process there, as the OOM killer
would; `conveyor run`, its supervising parent, survives and reports the run FAILED):
  example_gen:mid           ExampleGen has written the splits into its execution's folder, and
                            ML Metadata has not recorded them;
  trainer:after_checkpoint  the Trainer has checkpointed its first chunk and recorded its step
                            count (progress.json), with more chunks to train.

One working directory, in order, with version 1 served before the first kill, so that each
kill can be seen to leave serving as it was. Thresholds are lowered so that any model may be
pushed.
"""

import csv
import gzip
import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.serving_state import versions
from pipelines.serving_state.records import recorded_pushes
from pipelines.spec.loading import load_spec
from tests.faults.killed_runs import (
    ANY_MODEL,
    assert_killed,
    run_penguin,
    write_penguin_data,
)

pytestmark = pytest.mark.e2e

# The Trainer's kill: 4 chunks of 10 steps, killed after the first one's checkpoint.
TRAIN_STEPS, CHUNK = 40, 10
CHUNKED = [f"trainer.train_steps={TRAIN_STEPS}", f"trainer.checkpoint_every_steps={CHUNK}"]
ADDED_ROWS = 16  # appended to the input before the ExampleGen kill, so that ExampleGen runs


def _run_log(run: subprocess.CompletedProcess) -> str:
    """The run.log of a finished `conveyor run`, found through the run folder it printed."""
    [line] = [x for x in run.stdout.splitlines() if x.startswith("run record: ")]
    return (Path(line.removeprefix("run record: ")) / "run.log").read_text()


def _tfrecords(path: Path) -> int:
    """How many records a gzipped TFRecord file holds (read by its framing, without TF: a
    length, its checksum, the record, the record's checksum)."""
    count = 0
    with gzip.open(path, "rb") as handle:
        while header := handle.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            handle.seek(length + 4, os.SEEK_CUR)
            count += 1
    return count


def _examples_rows(uri: str) -> int:
    """The rows of an Examples artifact's folder, all splits together."""
    return sum(_tfrecords(p) for p in Path(uri).glob("Split-*/*.gz"))


class Pipeline:
    """What a model server would see, and what ML Metadata holds, for the penguin workdir."""

    def __init__(self, workdir: Path):
        spec = load_spec("penguin", env="ci", overrides=ANY_MODEL).spec
        self.paths = RunPaths(workdir=workdir.resolve(), spec=spec)
        self.base = str(self.paths.serving_dir)
        self.models_config = self.paths.serving_config_dir / "models.config"

    def store(self):
        return metadata.open_store(self.paths.spec, self.paths.metadata_path)

    def served(self) -> dict[int, dict]:
        """Each served version's push record (the model it is, by ML Metadata's URI)."""
        return {
            v: versions.read_push_record(os.path.join(self.base, str(v)))
            for v in versions.served_versions(self.base)
        }

    def uris(self, type_name: str) -> set[str]:
        """The folders of every artifact of the type ML Metadata holds."""
        return {a.uri for a in self.store().get_artifacts_by_type(type_name)}

    def lineage(self) -> dict[int, metadata.PushLineage]:
        return {int(p.version): p for p in metadata.pushed_lineage(self.store(), "penguin")}

    def assert_in_step(self) -> None:
        """Serving holds exactly the versions ML Metadata recorded as pushed, each the model
        ML Metadata says was pushed as it, and nothing half-done beside them."""
        served, lineage = self.served(), self.lineage()
        assert set(served) == recorded_pushes(self.paths)[1] == set(lineage)
        assert {v: r["model_uri"] for v, r in served.items()} == {
            v: p.model_uri for v, p in lineage.items()
        }
        assert versions.leftovers(self.base) == []


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kill-resume")
    write_penguin_data(workdir)
    first = run_penguin(workdir, "trainer.train_steps=20")
    assert first.returncode == 0 and "PUSHED: pushed version 1" in first.stdout, first.stderr
    return workdir


def _append_rows(csv_path: Path, count: int) -> int:
    """Appends copies of the first `count` data rows to the CSV; returns its data rows."""
    with csv_path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    with csv_path.open("a", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows[1 : 1 + count])
    return len(rows) - 1 + count


def test_killed_in_example_gen_nothing_is_used_and_the_next_run_reads_every_row(workdir):
    pipeline = Pipeline(workdir)
    rows = _append_rows(pipeline.paths.input_dir / "penguins.csv", ADDED_ROWS)
    served, config = pipeline.served(), pipeline.models_config.read_bytes()
    recorded_examples = pipeline.uris("Examples")

    killed = run_penguin(workdir, "trainer.train_steps=20", failpoint="example_gen:mid")

    assert_killed(killed, "during csv_example_gen;")
    # The killed execution wrote its splits, but ML Metadata never recorded them.
    examples_root = pipeline.paths.pipeline_root / "csv_example_gen" / "examples"
    [written] = {str(p) for p in examples_root.iterdir()} - recorded_examples
    assert _examples_rows(written) == rows
    assert pipeline.uris("Examples") == recorded_examples
    assert pipeline.served() == served and pipeline.models_config.read_bytes() == config
    pipeline.assert_in_step()

    again = run_penguin(workdir, "trainer.train_steps=20")
    assert again.returncode == 0 and "PUSHED: pushed version 2" in again.stdout, again.stdout
    # Version 2 learned from examples ExampleGen wrote again, whole, in a recorded execution.
    [examples] = pipeline.lineage()[2].examples_uris
    assert examples not in (written, *recorded_examples)
    assert examples in pipeline.uris("Examples")
    assert _examples_rows(examples) == rows
    assert sorted(pipeline.served()) == [1, 2]
    pipeline.assert_in_step()


def test_killed_in_the_trainer_the_next_run_resumes_from_its_checkpoint(workdir):
    pipeline = Pipeline(workdir)
    served, config = pipeline.served(), pipeline.models_config.read_bytes()
    recorded_models = pipeline.uris("Model")

    killed = run_penguin(workdir, *CHUNKED, failpoint="trainer:after_checkpoint")

    assert_killed(killed, "during trainer;")
    checkpoints = pipeline.paths.pipeline_root / "trainer" / "checkpoints"
    [progress] = checkpoints.glob("*/progress.json")
    assert json.loads(progress.read_text()) == {"steps_done": CHUNK}
    assert pipeline.uris("Model") == recorded_models  # no model of the killed training
    assert pipeline.served() == served and pipeline.models_config.read_bytes() == config
    pipeline.assert_in_step()

    again = run_penguin(workdir, *CHUNKED)
    assert again.returncode == 0 and "PUSHED: pushed version 3" in again.stdout, again.stdout
    assert f"resuming from the checkpoint after step {CHUNK}" in _run_log(again)
    # The pushed model is the resumed training's: it trained the 30 steps left, not 40 again.
    model = next(
        m
        for m in pipeline.store().get_artifacts_by_type("Model")
        if m.uri == pipeline.lineage()[3].model_uri
    )
    summary = json.loads(metadata.custom_property(model, "conveyor_training_summary"))
    assert metadata.custom_property(model, "conveyor_resumed_from_step") == CHUNK
    assert metadata.custom_property(model, "conveyor_steps") == TRAIN_STEPS
    assert summary["trained_steps"] == TRAIN_STEPS - CHUNK
    assert not list(checkpoints.glob("*/progress.json"))  # finished: nothing left to resume
    assert sorted(pipeline.served()) == [1, 2, 3]
    pipeline.assert_in_step()
