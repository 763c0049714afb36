"""Object stores for tests, on this machine: Google Cloud Storage through `gcp-storage-emulator`
and S3 through moto's server, both from requirements.lock, started as real processes on
127.0.0.1 on free ports, each with one bucket made, and stopped at the end of the test session.

GCS is reached two ways. `environment()` is what a profile with `runtime.storage.gcs.endpoint`
gives (tensorflow-io's gs:// plugin, pointed at the emulator). `real_gcs_environment()` is what
a process has against real GCS, no endpoint anywhere: TensorFlow's built-in gs:// asks Google's
hosts, which tests/gcs_tls_proxy.py serves from the emulator, and google-cloud-storage (Beam's
gs://, the storage layer's listings and stat) goes to the emulator by `STORAGE_EMULATOR_HOST`.

A test that asks for them and cannot have them fails, naming which and why: a skip would hide
that nothing reached a store.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipelines.core import storage
from pipelines.spec.models import GcsStorageSpec, S3StorageSpec, StorageSpec
from tests.gcs_tls_proxy import GcsTlsProxy

GCS_BUCKET = "conveyor-test"
S3_BUCKET = "conveyor-test"
# moto accepts any key pair; boto3 and tensorflow-io's plugin sign with whatever the environment
# holds, so the tests give them one (Conveyor itself never sets credentials).
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
S3_REGION = "us-east-1"
_START_SECONDS = 60


@dataclass(frozen=True)
class StorageEmulators:
    """The two running emulators: their endpoints, buckets and the logs they write."""

    gcs_endpoint: str
    s3_endpoint: str
    logs: Path
    google_hosts: GcsTlsProxy  # Google's storage hosts, served from the GCS emulator

    @property
    def settings(self) -> StorageSpec:
        """The profile section (`runtime.storage`) that points a run at both emulators."""
        return StorageSpec(
            gcs=GcsStorageSpec(endpoint=self.gcs_endpoint),
            s3=S3StorageSpec(endpoint=self.s3_endpoint, region=S3_REGION, path_style=True),
        )

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (this process's environment by default) configured for both emulators, with
        the S3 credentials moto takes: the environment of a process that only calls
        `configure`, as a Beam worker's would be."""
        environ = dict(os.environ if base is None else base)
        environ.update(S3_CREDENTIALS)
        storage.configure(self.settings, environ)
        return environ

    def real_gcs_environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (this process's environment by default) as a process has it against real
        GCS: nothing `configure` sets for a gcs endpoint, so TensorFlow's gs:// is its built-in
        one, which reaches the emulator through Google's hosts on the proxy; google-cloud-storage
        reaches it by `STORAGE_EMULATOR_HOST`, with the placeholder credentials `configure`
        writes for an emulator. S3 is configured as in `environment()`."""
        for_endpoint = storage.configure(
            StorageSpec(gcs=GcsStorageSpec(endpoint=self.gcs_endpoint)), {}
        )
        environ = {
            name: value
            for name, value in (os.environ if base is None else base).items()
            if name not in for_endpoint
        }
        environ.update(S3_CREDENTIALS)
        storage.configure(StorageSpec(s3=self.settings.s3), environ)
        environ.update(self.google_hosts.environment())
        environ["STORAGE_EMULATOR_HOST"] = self.gcs_endpoint
        environ["GOOGLE_APPLICATION_CREDENTIALS"] = for_endpoint["GOOGLE_APPLICATION_CREDENTIALS"]
        return environ

    def s3_settings(self, endpoint: str | None = None) -> list[str]:
        """The `--set` arguments that point a `conveyor` command at the S3 emulator (or at
        `endpoint`, a proxy in front of it)."""
        return [
            "--set", f"runtime.storage.s3.endpoint={endpoint or self.s3_endpoint}",
            "--set", f"runtime.storage.s3.region={S3_REGION}",
            "--set", "runtime.storage.s3.path_style=true",
        ]  # fmt: skip

    def root(self, scheme: str) -> str:
        """The bucket's URI on one store: gs://conveyor-test or s3://conveyor-test."""
        return f"{scheme}://{GCS_BUCKET if scheme == 'gs' else S3_BUCKET}"

    def log_tail(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start(name: str, command: list[str], logs: Path) -> subprocess.Popen:
    with (logs / f"{name}.log").open("w") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def _wait_until_answering(name: str, url: str, process: subprocess.Popen, logs: Path) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers (an error status is still an answer)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                log = (logs / f"{name}.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"{name} did not start (exit {process.poll()}): {log}")
            time.sleep(0.1)


def _make_s3_bucket(endpoint: str) -> None:
    import boto3

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=S3_REGION,
        aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=S3_BUCKET)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="session")
def storage_emulators(tmp_path_factory) -> Iterator[StorageEmulators]:
    """Both emulators for the whole test session, with this process's environment configured
    for them (and the S3 credentials moto takes); the environment is restored afterwards."""
    logs = tmp_path_factory.mktemp("storage-emulators")
    bin_dir = Path(sys.executable).parent
    gcs_port, s3_port = _free_port(), _free_port()
    gcs_endpoint, s3_endpoint = f"http://127.0.0.1:{gcs_port}", f"http://127.0.0.1:{s3_port}"
    processes: list[subprocess.Popen] = []
    google_hosts = None
    saved = dict(os.environ)
    try:
        processes.append(
            _start(
                "gcp-storage-emulator",
                # The emulator with its empty-upload fix (tests/gcs_emulator.py).
                [sys.executable, "-m", "tests.gcs_emulator", "start", "--host=127.0.0.1",
                 f"--port={gcs_port}", "--in-memory", f"--default-bucket={GCS_BUCKET}"],
                logs,
            )
        )  # fmt: skip
        processes.append(
            _start(
                "moto_server",
                [str(bin_dir / "moto_server"), "-H", "127.0.0.1", "-p", str(s3_port)],
                logs,
            )
        )
        _wait_until_answering(
            "gcp-storage-emulator", f"{gcs_endpoint}/storage/v1/b", processes[0], logs
        )
        _wait_until_answering("moto_server", f"{s3_endpoint}/", processes[1], logs)
        _make_s3_bucket(s3_endpoint)
        google_hosts = GcsTlsProxy(gcs_endpoint, logs)
        emulators = StorageEmulators(gcs_endpoint, s3_endpoint, logs, google_hosts)
        os.environ.update(S3_CREDENTIALS)
        storage.configure(emulators.settings)
        yield emulators
    finally:
        if google_hosts is not None:
            google_hosts.close()
        for process in processes:
            _stop(process)
        os.environ.clear()
        os.environ.update(saved)
