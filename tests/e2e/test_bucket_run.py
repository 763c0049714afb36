"""Penguin with everything in a bucket: the input, the pipeline root, the serving folder and the
run records, and the lock of one run at a time. Only what cannot live in a bucket is local: the
SQLite metadata and the live log.

On S3 (moto's server on 127.0.0.1, reached through a proxy the fault test can cut):
- a cold run pushes version 1 into the bucket, with its graph and push record, models.config
  beside it and the run's folder (summary, report, log, resolved spec) in the bucket;
- an unchanged re-run answers UNCHANGED from the objects' metadata;
- `conveyor serve` serves version 1 from the bucket;
- the store going away mid-push fails the run naming the bucket, leaves version 1 served and
  nothing half-published, and the next run repairs and pushes.

On GCS (gcp-storage-emulator) through exactly what real GCS uses: no gcs endpoint in the
profile, so TensorFlow's built-in gs:// asks Google's hosts, which tests/gcs_tls_proxy.py serves
from the emulator (google-cloud-storage, under Beam and the storage layer's listings, reaches it
by STORAGE_EMULATOR_HOST): a cold run pushes version 1, `conveyor serve` serves it from the
bucket, an unchanged re-run answers UNCHANGED, and the store going away mid-push (a cut proxy in
front of the emulator, which both clients go through) fails the run naming the bucket, version 1
still served, and the next run repairs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import uuid
from pathlib import Path

import pytest

from pipelines.core import storage
from pipelines.core.failpoints import ENV as FAILPOINT
from pipelines.core.failpoints import PAUSE_ENV
from pipelines.core.paths import FRAMEWORK_ROOT
from tests.cut_proxy import CutProxy
from tests.e2e.test_bulk_inferrer import PENGUIN_ROWS
from tests.gcs_tls_proxy import GcsTlsProxy
from tests.serving_server import serving, wait_for
from tests.storage_emulators import GCS_BUCKET, S3_BUCKET

pytestmark = pytest.mark.e2e

RUN_SECONDS = 600


class BucketRuns:
    """`conveyor` commands on one workdir in a bucket, with the profile settings `settings`
    (`--set KEY=VALUE` pairs) and the environment `environ`."""

    def __init__(self, workdir: str, settings: list[str], environ: dict[str, str], state_dir: Path):
        self.workdir, self.settings, self.state_dir = workdir, settings, state_dir
        self.environ = {**environ, "CONVEYOR_STATE_DIR": str(state_dir)}

    def argv(self, command: str, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "pipelines.cli", command, "penguin", "--profile", "ci",
            "--workdir", self.workdir, *self.settings, *extra,
        ]  # fmt: skip

    def run(self, command: str, *extra: str, env: dict[str, str] | None = None):
        return subprocess.run(
            self.argv(command, *extra),
            cwd=FRAMEWORK_ROOT,
            env={**self.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
        )


@pytest.fixture(scope="module")
def proxy(storage_emulators):
    s3_port = int(storage_emulators.s3_endpoint.rsplit(":", 1)[1])
    cut_proxy = CutProxy(s3_port)
    yield cut_proxy
    cut_proxy.close()


@pytest.fixture(scope="module")
def bucket_night(storage_emulators, proxy, tmp_path_factory):
    """Penguin's data written into the bucket and one cold run, all through the proxy."""
    workdir = f"s3://{S3_BUCKET}/penguin-{uuid.uuid4().hex[:8]}"
    settings = storage_emulators.s3_settings(proxy.endpoint)
    runs = BucketRuns(
        workdir, settings, storage_emulators.environment(), tmp_path_factory.mktemp("local-state")
    )
    prepared = runs.run("data")
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    first = runs.run("run")
    return runs, first


def _out(result) -> str:
    return f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def test_a_cold_run_pushes_version_1_into_the_bucket(bucket_night):
    runs, first = bucket_night
    assert first.returncode == 0, _out(first)
    assert "PUSHED: " in first.stdout, _out(first)
    serving_dir = f"{runs.workdir}/serving/penguin"
    assert storage.exists(f"{serving_dir}/1/saved_model.pb")
    record = json.loads(storage.read_text(f"{serving_dir}/1/conveyor_push.json"))
    assert record["version"] == 1
    assert storage.listdir(serving_dir) == ["1"]  # no staging prefix left
    config = storage.read_text(f"{runs.workdir}/serving/models.config")
    assert f'base_path: "{serving_dir}"' in config
    # The pipeline root is in the bucket: the trainer's model among TFX's outputs.
    assert storage.glob(f"{runs.workdir}/pipeline_root/penguin/trainer/model/*/Format-Serving/*.pb")


def test_the_run_record_is_in_the_bucket_and_only_metadata_is_local(bucket_night):
    runs, first = bucket_night
    (run_dir,) = [line.split(": ", 1)[1] for line in first.stdout.splitlines() if
                  line.startswith("run record: ")]  # fmt: skip
    assert run_dir.startswith(f"{runs.workdir}/runs/penguin/penguin-")
    names = storage.listdir(run_dir)
    assert {"summary.json", "report.html", "run.log", "resolved_spec.yaml"} <= set(names), names
    summary = json.loads(storage.read_text(f"{run_dir}/summary.json"))
    assert summary["outcome"] == "pushed" and summary["pushed_version"] == "1"
    assert "csv_example_gen" in storage.read_text(f"{run_dir}/run.log")
    local = sorted(str(p.relative_to(runs.state_dir)) for p in runs.state_dir.rglob("*"))
    assert any(name.endswith("metadata.sqlite") for name in local), local
    assert not [name for name in local if "pipeline_root" in name or "serving" in name], local
    # The lock was the bucket's while the run held it, and is gone with the run.
    assert not storage.exists(f"{runs.workdir}/runs/penguin/.lock")
    assert not [name for name in local if name.endswith(".lock")], local


def test_conveyor_infer_predicts_the_buckets_rows_into_the_bucket(bucket_night):
    # Batch inference on a workdir in a bucket: the served version read from it, the rows
    # read from it, the PredictionLogs and bad_rows.csv written into it.
    runs, _ = bucket_night
    inferred = runs.run("infer")
    assert inferred.returncode == 0, _out(inferred)
    (output,) = storage.listdir(f"{runs.workdir}/inference/penguin")
    written = storage.list_files(f"{runs.workdir}/inference/penguin/{output}")
    assert [name for name in written if name.startswith("prediction_logs")], written
    assert f"predicted {PENGUIN_ROWS} rows of all input files with version 1" in (
        inferred.stdout
    ), _out(inferred)


def test_an_unchanged_rerun_answers_from_the_objects_metadata(bucket_night):
    runs, _ = bucket_night
    again = runs.run("run")
    assert again.returncode == 0, _out(again)
    assert "UNCHANGED: " in again.stdout, _out(again)
    assert "serving version 1" in again.stdout


# What `conveyor run` does to a workdir in a bucket before it forks its supervised pipeline:
# read the last outcome record, list and read the served versions, take the lock.
_BEFORE_THE_FORK = """
import sys
from pipelines.core.paths import RunPaths
from pipelines.core.object_path import as_path
from pipelines.ops import nightly
from pipelines.finish import outcome_record
from pipelines.spec.loading import load_spec

loaded = load_spec("penguin", env="ci", overrides=sys.argv[2:])
paths = RunPaths(as_path(sys.argv[1]), loaded.spec)
paths.configure_storage()
with nightly.pipeline_lock(paths, "a check"):
    served = outcome_record.served_versions(paths)
    assert "model_config_list" in (paths.serving_config_dir / "models.config").read_text()
    print(served, nightly.fork_is_safe(), flush=True)
"""


def test_what_a_run_reads_before_its_fork_leaves_it_free_to_fork(bucket_night):
    # Through TensorFlow, the records read before the pipeline's fork imported it, and a run
    # that has imported TensorFlow cannot fork: it ran unsupervised once something was served.
    runs, _ = bucket_night
    overrides = runs.settings[1::2]  # the values of its --set pairs
    done = subprocess.run(
        [sys.executable, "-c", _BEFORE_THE_FORK, runs.workdir, *overrides],
        cwd=FRAMEWORK_ROOT, env=runs.environ, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "True", done.stdout


def _serves_version_1(runs: BucketRuns, tmp_path: Path, monkeypatch) -> None:
    """`conveyor serve` on the workdir answers with version 1, loaded from the bucket."""
    for name in set(os.environ) - set(runs.environ):  # the server process inherits them
        monkeypatch.delenv(name)
    for name, value in runs.environ.items():
        monkeypatch.setenv(name, value)
    with serving([], tmp_path, command=runs.argv("serve")) as server:
        status = server.get("/v1/models/penguin").json()
        assert status["model_version_status"][0]["version"] == "1"
        answer = server.post(
            "/v1/models/penguin:predict",
            {
                "instances": [
                    {
                        "island": "Biscoe",
                        "sex": "female",
                        "bill_length_mm": 46.5,
                        "bill_depth_mm": 14.5,
                        "flipper_length_mm": 213.0,
                        "body_mass_g": 4800.0,
                    }
                ]
            },  # fmt: skip
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["predictions"][0]["classes"] == "Gentoo"


def test_conveyor_serve_serves_version_1_from_the_bucket(bucket_night, tmp_path, monkeypatch):
    runs, _ = bucket_night
    _serves_version_1(runs, tmp_path, monkeypatch)


def test_the_store_gone_mid_push_fails_naming_it_and_the_next_run_repairs(
    bucket_night, proxy, tmp_path
):
    runs, _ = bucket_night
    _store_gone_mid_push(runs, proxy, tmp_path, f"s3://{S3_BUCKET}")


def _store_gone_mid_push(
    runs: BucketRuns, proxy: CutProxy, tmp_path: Path, bucket: str, lease_seconds: int = 15
) -> None:
    """A run whose store goes away (`proxy` cut) once version 2 is staged fails naming the
    bucket, with version 1 still served and version 2 nowhere a server would load it from; the
    next run takes over the lock the failed run could not delete, repairs and pushes."""
    # Another trainer setting: a new model, which the gate lets through (within 0.02). A short
    # lease: the failed run cannot delete its lock from the store that is gone, so the repair
    # run takes it over once the lease has passed without a renewal. Which comes first depends
    # on the store's client: the push's own request failing (S3's plugin gives up in seconds),
    # or the lock lost for want of a renewal (TensorFlow's gs:// retries each request for
    # longer than this lease), which stops the run; either way the verdict names the store.
    lease = f"runtime.concurrency.lease_seconds={lease_seconds}"
    retrain = ("--set", "trainer.train_steps=160", "--set", lease)
    config_before = storage.read_text(f"{runs.workdir}/serving/models.config")
    pause = {FAILPOINT: "push:copied", PAUSE_ENV: str(tmp_path)}
    process = subprocess.Popen(
        runs.argv("run", *retrain),
        cwd=FRAMEWORK_ROOT,
        env={**runs.environ, **pause, "PYTHONUNBUFFERED": "1"},  # nothing lost if it is killed
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Version 2 is staged in the bucket; the store goes away before it is published.
        wait_for(lambda: (tmp_path / "push:copied.reached").exists() or process.poll() is not None,
                 RUN_SECONDS, "the push to reach its staged copy")  # fmt: skip
        assert process.poll() is None, process.stdout.read()
        proxy.cut()
        (tmp_path / "push:copied.go").touch()
        output, _ = process.communicate(timeout=RUN_SECONDS)
    finally:
        proxy.restore()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, output[-3000:]
    failed = [line for line in output.splitlines() if line.startswith("FAILED: ")]
    assert failed, output[-3000:]
    expected = f"FAILED: the object store holding {bucket} did not answer ("
    assert failed[0].startswith(expected), failed[0]
    serving_dir = f"{runs.workdir}/serving/penguin"
    # Version 1 is still what is served; version 2 is nowhere a server would load it from.
    assert storage.read_text(f"{runs.workdir}/serving/models.config") == config_before
    assert not storage.exists(f"{serving_dir}/2/saved_model.pb")

    repaired = runs.run("run", *retrain)
    assert repaired.returncode == 0, _out(repaired)
    assert f"took over the lock {runs.workdir}/runs/penguin/.lock" in repaired.stdout
    assert "PUSHED: " in repaired.stdout, _out(repaired)
    assert storage.listdir(serving_dir) == ["1", "2"]  # the staged copy was removed
    assert json.loads(storage.read_text(f"{serving_dir}/2/conveyor_push.json"))["version"] == 2


# ---------------------------------------------------------------------------------------------
# GCS, through TensorFlow's built-in gs:// as with real GCS


@pytest.fixture(scope="module")
def gcs_night(storage_emulators, tmp_path_factory):
    """Penguin's data written into the GCS emulator's bucket and one cold run, with no gcs
    endpoint in the profile: what a run against real GCS has."""
    workdir = f"gs://{GCS_BUCKET}/penguin-{uuid.uuid4().hex[:8]}"
    runs = BucketRuns(
        workdir,
        [],
        storage_emulators.real_gcs_environment(),
        tmp_path_factory.mktemp("gcs-local-state"),
    )
    prepared = runs.run("data")
    assert prepared.returncode == 0, _out(prepared)
    first = runs.run("run")
    return runs, first


def _gcs_objects(storage_emulators, workdir: str) -> dict:
    """The workdir's objects, name relative to the workdir -> blob, from the emulator itself."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    client = gcs.Client(
        project="conveyor-test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": storage_emulators.gcs_endpoint},
    )
    prefix = workdir.removeprefix(f"gs://{GCS_BUCKET}/") + "/"
    return {
        blob.name.removeprefix(prefix): blob
        for blob in client.list_blobs(GCS_BUCKET, prefix=prefix)
    }


def _through_google_hosts(storage_emulators, workdir: str) -> list[str]:
    """The requests for the workdir's objects that came through Google's hosts (TensorFlow's
    built-in gs://), as "METHOD HOST PATH -> STATUS"."""
    quoted = urllib.parse.quote(workdir.removeprefix(f"gs://{GCS_BUCKET}/") + "/", safe="")
    return [line for line in storage_emulators.google_hosts.requests if quoted in line]


def test_on_gcs_a_cold_run_pushes_version_1_through_tensorflows_own_gs(
    gcs_night, storage_emulators
):
    runs, first = gcs_night
    assert first.returncode == 0, _out(first)
    assert "PUSHED: " in first.stdout, _out(first)
    objects = _gcs_objects(storage_emulators, runs.workdir)
    assert "serving/penguin/1/saved_model.pb" in objects, sorted(objects)
    record = json.loads(objects["serving/penguin/1/conveyor_push.json"].download_as_text())
    assert record["version"] == 1
    assert not [name for name in objects if name.startswith("serving/penguin/.incoming")]
    config = objects["serving/models.config"].download_as_text()
    assert f'base_path: "{runs.workdir}/serving/penguin"' in config
    assert any(n.startswith("pipeline_root/penguin/trainer/model/") for n in objects)
    # TensorFlow wrote and read them through Google's hosts, as it does real GCS: uploads to
    # www.googleapis.com, reads from storage.googleapis.com.
    requests = _through_google_hosts(storage_emulators, runs.workdir)
    uploads = [r for r in requests if r.startswith("PUT www.googleapis.com/upload/")]
    reads = [r for r in requests if r.startswith("GET storage.googleapis.com/")]
    assert uploads and reads, requests[-20:]
    assert all(not r.endswith(("-> 500", "-> 501", "-> 502")) for r in requests), requests


def test_on_gcs_conveyor_serve_serves_version_1_from_the_bucket(
    gcs_night, storage_emulators, tmp_path, monkeypatch
):
    runs, first = gcs_night
    assert first.returncode == 0, _out(first)
    before = len(storage_emulators.google_hosts.requests)
    _serves_version_1(runs, tmp_path, monkeypatch)
    served = storage_emulators.google_hosts.requests[before:]
    assert any(
        "saved_model.pb" in r and r.startswith("GET storage.googleapis.com/") for r in served
    ), served[-20:]


def test_on_gcs_an_unchanged_rerun_answers_unchanged(gcs_night):
    runs, first = gcs_night
    assert first.returncode == 0, _out(first)
    again = runs.run("run")
    assert again.returncode == 0, _out(again)
    assert "UNCHANGED: " in again.stdout, _out(again)
    assert "serving version 1" in again.stdout


@pytest.fixture
def gcs_through_cut_proxy(storage_emulators, tmp_path_factory):
    """The GCS emulator behind a proxy the test can cut, reached through it both ways a run
    reaches GCS: TensorFlow's built-in gs:// (Google's hosts, tunnelled to the cut proxy) and
    google-cloud-storage (STORAGE_EMULATOR_HOST)."""
    gcs_port = int(storage_emulators.gcs_endpoint.rsplit(":", 1)[1])
    cut_proxy = CutProxy(gcs_port)
    google_hosts = GcsTlsProxy(cut_proxy.endpoint, tmp_path_factory.mktemp("gcs-cut-hosts"))
    environ = storage_emulators.real_gcs_environment()
    environ.update(google_hosts.environment())
    environ["STORAGE_EMULATOR_HOST"] = cut_proxy.endpoint
    yield cut_proxy, environ
    google_hosts.close()
    cut_proxy.close()


def test_on_gcs_the_store_gone_mid_push_fails_naming_it_and_the_next_run_repairs(
    gcs_night, gcs_through_cut_proxy, tmp_path
):
    night, first = gcs_night
    assert first.returncode == 0, _out(first)
    cut_proxy, environ = gcs_through_cut_proxy
    runs = BucketRuns(night.workdir, night.settings, environ, night.state_dir)
    _store_gone_mid_push(runs, cut_proxy, tmp_path, f"gs://{GCS_BUCKET}")
