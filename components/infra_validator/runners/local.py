"""The two runners whose server is a child process of the validator's own executor.

- `ConveyorRunner`: Conveyor's model server, `python -m pipelines.serving.model_server` (in a
  local run, in the spare process started when the trainer started: spare.py), on a free port,
  ready once it writes its ready file.
- `BinaryRunner`: a `tensorflow_model_server` binary, started with TF Serving's own flags
  (`--port`, `--rest_api_port`, `--model_name`, `--model_base_path`) on two free ports, ready
  once `GET /v1/models/M` reports the model AVAILABLE (the binary writes no ready file).
  Conveyor's server takes the same flags, so what this runner starts is a path in the profile
  (`push.infra_server.binary_path`).

Either server dies with this process (PR_SET_PDEATHSIG) and runs in a process group of its own,
which `stop` ends (SIGTERM, then SIGKILL). Its output goes to a file (a pipe could fill up and
stall it), whose tail a reason quotes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from absl import logging

from components.infra_validator import spare
from components.infra_validator.runners.base import (
    CONVEYOR,
    TENSORFLOW_MODEL_SERVER,
    InfraValidationError,
    ModelServerRunner,
    RunnerSetupError,
    wait_until_available,
)
from pipelines.core.paths import FRAMEWORK_ROOT

RUNTIME_MODULE = "pipelines.serving.model_server"
BINARY_NAME = "tensorflow_model_server"
HOST = "127.0.0.1"
STOP_GRACE_SECONDS = 10.0

# Prepended to a server's command: the child asks Linux to SIGKILL it when this process dies
# (PR_SET_PDEATHSIG survives exec), then becomes the program named after this process's pid.
_DIE_WITH_PARENT = spare.DIE_WITH_PARENT + "os.execv(sys.argv[2], sys.argv[2:])\n"


class ServerProcess:
    """A server started as a child process, with its output file."""

    def __init__(self, process: subprocess.Popen, log_file: Path):
        """Wraps a started process; use `ServerProcess.start` or `spare.take`."""
        self.process = process
        self.log_file = log_file

    @classmethod
    def start(cls, argv: list[str], log_file: Path) -> ServerProcess:
        """Starts `argv` (a program and its arguments), its output to `log_file`, with
        Conveyor's packages on PYTHONPATH (so a source checkout serves too)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(FRAMEWORK_ROOT), env.get("PYTHONPATH")) if p
        )
        with open(log_file, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: stop() ends all of it
            )
        return cls(process, log_file)

    def output_tail(self, lines: int = 8, chars: int = 1500) -> str:
        """The last lines the server wrote, on one line (for a reason)."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no output)"
        kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        tail = " | ".join(kept)
        return (tail[-chars:] if len(tail) > chars else tail) or "(no output)"

    def check_running(self) -> None:
        """Raises `InfraValidationError`, quoting the server, when it has exited."""
        code = self.process.poll()
        if code is not None:
            raise InfraValidationError(
                f"the model server exited with code {code} before it was ready: "
                f"{self.output_tail()}"
            )

    def late(self, timeout_seconds: float) -> InfraValidationError:
        """The error for a server not ready within `timeout_seconds`, quoting it."""
        return InfraValidationError(
            f"the model server was not ready within {timeout_seconds:g} s: {self.output_tail()}"
        )

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL if it has not ended in time."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=STOP_GRACE_SECONDS)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                logging.warning("Infra validation: the model server ignored SIGTERM: killed")
        try:  # whatever the server left in its group goes with it
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()


class _LocalRunner(ModelServerRunner):
    """What both local runners share: the process, its start time, `stop`."""

    def __init__(self, model_name: str, base_path: Path, workdir: Path):
        """Serves `base_path` (numbered versions) as `model_name`; files go in `workdir`."""
        self.model_name = model_name
        self.base_path = base_path
        self.workdir = workdir
        self.log_file = workdir / "server.log"
        self.server: ServerProcess | None = None
        self.started = 0.0
        self.port: int | None = None

    @property
    def pid(self) -> int | None:
        """The server's process id (None before `start`)."""
        return self.server.process.pid if self.server is not None else None

    def get_endpoint(self) -> str:
        """`http://127.0.0.1:PORT`, once `wait_until_running` returned."""
        if self.port is None:
            raise RuntimeError("the model server is not running: call wait_until_running first")
        return f"http://{HOST}:{self.port}"

    def stop(self) -> None:
        """Ends the server's process group (nothing when it was never started)."""
        if self.server is not None:
            self.server.stop()


class ConveyorRunner(_LocalRunner):
    """Conveyor's model server as a child process (the default: no Docker, no binary)."""

    kind = CONVEYOR

    def describe(self) -> str:
        """Names the server for the InfraBlessing."""
        return "Conveyor's model server (python -m pipelines.serving.model_server)"

    def start(self) -> None:
        """Starts the server on a free port of 127.0.0.1, in the run's spare process if it has
        one (spare.py), else in a new one."""
        self.ready_file = self.workdir / "ready.json"
        arguments = [
            "--model-name",
            self.model_name,
            "--model-base-path",
            str(self.base_path),
            "--host",
            HOST,
            "--port",
            "0",
            "--ready-file",
            str(self.ready_file),
        ]
        self.started = time.monotonic()
        # A spare the run started early (spare.py) has its imports done already.
        process = spare.take(arguments, self.log_file)
        if process is not None:
            self.server = ServerProcess(process, self.log_file)
            logging.info("Infra validation: model server started in the spare pid %d", self.pid)
            return
        self.server = ServerProcess.start(
            [sys.executable, "-m", RUNTIME_MODULE, *arguments], self.log_file
        )
        logging.info("Infra validation: model server started, pid %d", self.pid)

    def wait_until_running(self, timeout_seconds: float) -> None:
        """Waits for the ready file, which the server writes once its model is warmed."""
        deadline = self.started + timeout_seconds
        while True:
            self.server.check_running()
            if self.ready_file.exists():
                try:
                    self.port = int(json.loads(self.ready_file.read_text())["port"])
                except (ValueError, KeyError, TypeError) as err:
                    raise InfraValidationError(
                        f"the model server's ready file is not {{'port': N, 'pid': PID}}: {err}"
                    ) from None
                return
            if time.monotonic() > deadline:
                raise self.server.late(timeout_seconds)
            time.sleep(0.05)


class BinaryRunner(_LocalRunner):
    """A `tensorflow_model_server` binary as a child process, given TF Serving's own flags."""

    kind = TENSORFLOW_MODEL_SERVER

    def __init__(self, binary: str, model_name: str, base_path: Path, workdir: Path):
        """Serves with `binary` (a path); see `find_binary`."""
        super().__init__(model_name, base_path, workdir)
        self.binary = binary

    def describe(self) -> str:
        """Names the binary for the InfraBlessing."""
        return f"{BINARY_NAME} ({self.binary})"

    def command(self, grpc_port: int, rest_port: int) -> list[str]:
        """The binary's command line: the flags TF Serving's own documentation starts it with."""
        return [
            self.binary,
            f"--port={grpc_port}",
            f"--rest_api_port={rest_port}",
            f"--model_name={self.model_name}",
            f"--model_base_path={self.base_path}",
        ]

    def start(self) -> None:
        """Starts the binary on two free ports of this machine (TF Serving always opens its gRPC
        port, and its default 8500 may be taken)."""
        grpc_port, rest_port = free_ports(2)
        self.started = time.monotonic()
        self.server = ServerProcess.start(self.command(grpc_port, rest_port), self.log_file)
        self.port = rest_port
        logging.info("Infra validation: %s started, pid %d", self.describe(), self.pid)

    def wait_until_running(self, timeout_seconds: float) -> None:
        """Waits until the binary reports the model AVAILABLE on its REST port."""
        wait_until_available(
            self.get_endpoint(),
            self.model_name,
            self.started + timeout_seconds,
            self.server.check_running,
            lambda: self.server.late(timeout_seconds),
        )


def find_binary(binary_path: str | None) -> str:
    """The binary to start: `binary_path` when given, else `tensorflow_model_server` on PATH;
    `RunnerSetupError` when there is none or it cannot be run."""
    if binary_path:
        found = shutil.which(binary_path)
        if found is None:
            raise RunnerSetupError(
                f"push.infra_server.binary_path {binary_path!r} is not an executable file"
            )
        return os.path.abspath(found)
    found = shutil.which(BINARY_NAME)
    if found is None:
        raise RunnerSetupError(
            f"push.infra_server.kind is {TENSORFLOW_MODEL_SERVER} but no {BINARY_NAME} is on "
            "PATH: install it, or name it in push.infra_server.binary_path"
        )
    return os.path.abspath(found)


def free_ports(count: int) -> list[int]:
    """`count` distinct ports nobody listens on now (held together while chosen, so they
    differ; another process could still take one before the server binds it)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
