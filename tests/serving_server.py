"""Starts real `python -m pipelines.serving.model_server` processes on 127.0.0.1 for the serving
tests, and talks to them over HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from pipelines.core.paths import FRAMEWORK_ROOT

STARTUP_SECONDS = 90


@dataclass
class RunningServer:
    """A server process that announced itself ready: its port, process and log file."""

    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        """What the server printed so far."""
        return self.log_path.read_text(errors="replace")

    def get(self, path: str) -> httpx.Response:
        """GET `path` on the server."""
        return httpx.get(self.url + path, timeout=30)

    def post(self, path: str, body: object) -> httpx.Response:
        """POST `body` as JSON (a str or bytes is sent as it is) to `path` on the server."""
        content = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return httpx.post(self.url + path, content=content, timeout=30)


def wait_for(predicate, seconds: float, what: str, interval: float = 0.1):
    """Polls `predicate` until it returns something truthy (returned) or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


@contextlib.contextmanager
def serving(
    args: Sequence[str], workdir: Path, command: Sequence[str] | None = None
) -> Iterator[RunningServer]:
    """Runs the server with `args` (plus --port 0 and a --ready-file) until the block ends,
    then stops it with SIGTERM. `command` replaces `python -m pipelines.serving.model_server`."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / f"ready-{time.monotonic_ns()}.json"
    log_path = ready.with_suffix(".log")
    argv = [*(command or [sys.executable, "-m", "pipelines.serving.model_server"]), *args]
    argv += ["--port", "0", "--ready-file", str(ready)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv, cwd=FRAMEWORK_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env
        )
    try:

        def announced():
            if process.poll() is not None:
                raise AssertionError(f"server exited {process.returncode}:\n{log_path.read_text()}")
            return ready.is_file() and json.loads(ready.read_text())

        info = wait_for(announced, STARTUP_SECONDS, "the server's ready file")
        assert info["pid"] == process.pid
        yield RunningServer(process, info["port"], log_path)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
