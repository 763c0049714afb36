"""Two nights of taxi with everything in a bucket, on GCS as real GCS is reached (the GCS
emulator behind Google's hostnames, through TensorFlow's built-in gs://): the dated spans, the
pipeline root, serving and the run records. Taxi is what penguin is not: dated span folders
found by listing the bucket, an inferred schema, a drift gate against the last accepted span, a
training window of spans and a warm start from the served model, each resolved
from what the first night left in the bucket.

- night 1 pushes version 1 into the bucket;
- night 2 reads its own span, is judged for drift against night 1's statistics, trains on both
  spans starting from the model of version 1, is compared with that model by the model gate, and
  pushes version 2 beside version 1, or holds it back.

One store: GCS, whose path (TensorFlow's own gs:// and google-cloud-storage, no endpoint in the
profile) is the stricter. On S3 a taxi night runs whole in tests/e2e/test_portable_runner.py,
the Arrow reader's work units read the bucket there too, and penguin's bucket runs
(tests/e2e/test_bucket_run.py) push, serve and re-run from it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from components.arrow_example_gen.splits import COLUMNAR_PROPERTY
from pipelines.core import metadata, storage
from pipelines.core.metadata.artifacts import read_run_artifacts
from pipelines.core.paths import FRAMEWORK_ROOT, RunPaths
from pipelines.ops import bless
from pipelines.spec.loading import load_spec

pytestmark = pytest.mark.e2e

NIGHTS = ("2026-11-27", "2026-11-28")
RUN_SECONDS = 900


@pytest.fixture(scope="module")
def two_nights(storage_emulators, tmp_path_factory):
    """Both nights' data written into the GCS bucket, then each night run in order, as with
    real GCS: no gcs endpoint, TensorFlow's built-in gs:// (through Google's hostnames, served
    from the emulator)."""
    workdir = f"{storage_emulators.root('gs')}/taxi-{uuid.uuid4().hex[:8]}"
    environ, store = storage_emulators.real_gcs_environment(), []
    environ["CONVEYOR_STATE_DIR"] = str(tmp_path_factory.mktemp("local-state"))

    def conveyor(command: str, *extra: str) -> subprocess.CompletedProcess:
        argv = [
            sys.executable, "-m", "pipelines.cli", command, "taxi", "--profile", "ci",
            "--workdir", workdir, *store,
            # Conveyor's Arrow reader, streaming objects through Beam's filesystems (penguin's
            # bucket run reads with TFX's reader) and writing a Parquet copy StatisticsGen reads.
            "--set", "data.reader=arrow",
            *extra,
        ]  # fmt: skip
        return subprocess.run(
            argv, cwd=FRAMEWORK_ROOT, env=environ, capture_output=True, text=True,
            timeout=RUN_SECONDS,
        )  # fmt: skip

    for night in NIGHTS:
        prepared = conveyor("data", "--date", night)
        assert prepared.returncode == 0, _out(prepared)
    nights = [conveyor("run", "--date", night) for night in NIGHTS]

    def nodes_of(summary: dict) -> dict:
        """The run's nodes and the artifacts each read and wrote, from the local metadata."""
        monkeypatch = pytest.MonkeyPatch()
        monkeypatch.setenv("CONVEYOR_STATE_DIR", environ["CONVEYOR_STATE_DIR"])
        try:
            loaded = load_spec("taxi", env="ci")
            paths = RunPaths(workdir=workdir, spec=loaded.spec)
            store = metadata.open_store(loaded.spec, paths.metadata_path)
            return read_run_artifacts(store, summary["run_id"])
        finally:
            monkeypatch.undo()

    return workdir, nights, nodes_of


def _out(result) -> str:
    return f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def _summary(workdir: str, result) -> dict:
    (run_dir,) = [line.split(": ", 1)[1] for line in result.stdout.splitlines() if
                  line.startswith("run record: ")]  # fmt: skip
    assert run_dir.startswith(f"{workdir}/runs/taxi/"), run_dir
    return json.loads(storage.read_text(f"{run_dir}/summary.json"))


def test_night_1_pushes_version_1_into_the_bucket(two_nights):
    workdir, (first, _), _ = two_nights
    assert first.returncode == 0, _out(first)
    assert "PUSHED: " in first.stdout, _out(first)
    summary = _summary(workdir, first)
    assert summary["outcome"] == "pushed" and summary["pushed_version"] == "1", summary
    assert summary["span"] == 20784  # 2026-11-27, days since 1970-01-01
    assert storage.exists(f"{workdir}/serving/taxi/1/saved_model.pb")


def test_night_2_is_judged_against_night_1_and_learns_from_both_spans(two_nights):
    workdir, (first, second), nodes_of = two_nights
    assert second.returncode == 0, _out(second)
    summary = _summary(workdir, second)
    assert summary["span"] == 20785, summary
    assert summary["outcome"] in ("pushed", "not_pushed"), summary
    night_1, night_2 = nodes_of(_summary(workdir, first)), nodes_of(summary)

    def output(nodes, node_id, key):
        return nodes[node_id].output(key).uri

    # Tonight's examples are night 2's span, read from the bucket's dated folder.
    tonight = night_2["csv_example_gen"].output("examples")
    assert tonight.get("span") == 20785 and tonight.uri.startswith(f"{workdir}/pipeline_root/")
    patterns = json.loads(tonight.get(COLUMNAR_PROPERTY))
    assert all(storage.glob(f"{tonight.uri}/{pattern}") for pattern in patterns.values())
    # The drift gate compares tonight's statistics with night 1's, the last accepted span.
    gate = night_2["data_gate"]
    assert gate.input("previous_statistics").uri == output(night_1, "statistics_gen", "statistics")
    # The window: both nights' examples; the warm start and the model gate's baseline: the
    # model night 1 pushed.
    trainer = night_2["trainer"]
    assert sorted(e.get("span") for e in trainer.inputs["examples"]) == [20784, 20785]
    served_model = output(night_1, "trainer", "model")
    assert trainer.input("base_model").uri == served_model
    assert night_2["evaluator"].input("baseline_model").uri == served_model
    assert storage.exists(f"{workdir}/serving/taxi/1/saved_model.pb")  # still there, served
    if summary["outcome"] == "pushed":
        assert summary["pushed_version"] == "2"
        assert storage.exists(f"{workdir}/serving/taxi/2/saved_model.pb")
    else:
        assert not storage.exists(f"{workdir}/serving/taxi/2/saved_model.pb")


def test_a_manual_bless_finds_the_savedmodel_of_a_model_in_the_bucket(two_nights):
    workdir, (first, _), nodes_of = two_nights
    model_uri = nodes_of(_summary(workdir, first))["trainer"].output("model").uri
    # TFX's Trainer exports under Format-Serving; a bless publishes that folder, as the Pusher.
    assert bless.serving_model_dir(model_uri) == f"{model_uri}/Format-Serving"
