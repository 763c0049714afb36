"""Beam's portable stack on this machine, as a team runs it before paying for a cluster: Beam's
own job service (`local_job_service_main`) and a worker pool (`worker_pool_main`) whose SDK
workers are separate processes started through Conveyor's worker boot
(`pipelines/core/beam_worker_boot.py`, what Beam's SDK container does), both real processes on
127.0.0.1 on free ports, with the environment the test gives them (the S3 emulator's endpoint
and credentials), stopped at the end.

A stack that does not start fails the test with its log: a skip would hide that no stage ran on
the portable runner.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipelines.core.paths import FRAMEWORK_ROOT

_START_SECONDS = 60
WORKER_PLUGIN = "pipelines.core.beam_worker_setup"
# What the plugin logs in each worker it is imported in (the job service receives the workers'
# logs over Beam's logging API and prints them).
REGISTERED = "Conveyor: s3:// registered in TensorFlow in Beam SDK worker process "


@dataclass(frozen=True)
class PortableBeam:
    """The running job service and worker pool: their endpoints (a profile's
    `--job_endpoint` and `--environment_config`) and logs."""

    job_endpoint: str
    worker_pool: str
    logs: Path

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def worker_pids(self) -> set[int]:
        """The processes the plugin registered s3:// in, as the workers logged it."""
        job_log = self.log("job_service")
        return {
            int(line.split(REGISTERED, 1)[1].split()[0].strip("\"'"))
            for line in job_log.splitlines()
            if REGISTERED in line
        }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(name: str, port: int, process: subprocess.Popen, logs: Path) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                log = (logs / f"{name}.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"{name} did not start (exit {process.poll()}): {log}")
            time.sleep(0.2)


@contextmanager
def portable_beam(environ: dict[str, str], logs: Path) -> Iterator[PortableBeam]:
    """Beam's job service and a worker pool of separate SDK worker processes, each with
    `environ` (their workers inherit it)."""
    logs.mkdir(parents=True, exist_ok=True)
    boot = logs / "beam_worker_boot"
    boot.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pipelines.core.beam_worker_boot "$@"\n')
    boot.chmod(0o755)
    job_port, pool_port = _free_port(), _free_port()
    commands = {
        "job_service": [sys.executable, "-m",
                        "apache_beam.runners.portability.local_job_service_main",
                        f"--port={job_port}"],
        "worker_pool": [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                        f"--service_port={pool_port}", f"--container_executable={boot}"],
    }  # fmt: skip
    processes: dict[str, subprocess.Popen] = {}
    try:
        for name, command in commands.items():
            with (logs / f"{name}.log").open("w") as log:
                processes[name] = subprocess.Popen(
                    command,
                    cwd=FRAMEWORK_ROOT,
                    env={**environ, "PYTHONUNBUFFERED": "1"},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # stopped with the workers it started
                )
        _wait_for_port("job_service", job_port, processes["job_service"], logs)
        _wait_for_port("worker_pool", pool_port, processes["worker_pool"], logs)
        yield PortableBeam(f"127.0.0.1:{job_port}", f"127.0.0.1:{pool_port}", logs)
    finally:
        for process in processes.values():
            _stop_group(process)


def _stop_group(process: subprocess.Popen) -> None:
    """Stops the process and what it started (the pool's workers): its own process group."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    try:
        os.killpg(process.pid, signal.SIGKILL)  # workers left behind by a stopped pool
    except ProcessLookupError:
        pass
