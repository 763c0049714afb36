"""Runs the model server: the repository's polling thread and uvicorn serving the application,
until SIGINT or SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipelines.serving.config import ServedModel
from pipelines.serving.runtime.app import DEFAULT_MONITORING_PATH

log = logging.getLogger("conveyor.serving")


@dataclass(frozen=True)
class ServerOptions:
    """How to run the server: which models (one base path, or a models.config re-read every
    poll), where to listen, how often to poll, where to announce readiness."""

    model_name: str | None = None
    model_base_path: str | None = None
    model_config_file: str | None = None
    host: str = "127.0.0.1"
    port: int = 8501
    poll_seconds: float = 1.0
    ready_file: str | None = None
    monitoring_path: str = DEFAULT_MONITORING_PATH

    def sources(self) -> Callable[[], Sequence[ServedModel]]:
        """What the repository polls: the config file's models, or the one model named."""
        if self.model_config_file:
            from pipelines.serving.config import served_models

            path = self.model_config_file
            return lambda: served_models(path)
        model = ServedModel(
            name=self.model_name or "",
            base_path=str(Path(self.model_base_path or "").resolve()),
            policy="latest",
        )
        return lambda: [model]


def write_ready_file(path: str | os.PathLike, port: int) -> None:
    """Writes {"port": N, "pid": PID} to `path` atomically (a reader sees all or nothing)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(handle, "w") as out:
        json.dump({"port": port, "pid": os.getpid()}, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, target)


def serve(options: ServerOptions) -> int:
    """Serves until interrupted; returns the exit code (0 after SIGINT or SIGTERM).

    The config is read once before the port is opened, so a models.config that TF Serving
    would refuse stops the server at once (ServingConfigError, naming the file and the
    problem); versions then load in the background while the server answers (status shows
    them LOADING) and the ready file is written once every model has one available.
    """
    import uvicorn

    from pipelines.serving.runtime.app import build_app
    from pipelines.serving.runtime.metrics import ServerMetrics
    from pipelines.serving.runtime.repository import ModelRepository

    metrics = ServerMetrics()
    repository = ModelRepository(options.sources(), metrics, options.poll_seconds)
    # Read the sources once up front: a bad config is an error before anything listens.
    options.sources()()

    # IPPROTO_TCP named explicitly: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # sockets whose proto says TCP, and with it on every answer waited ~40 ms for an ACK.
    family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((options.host, options.port))
    except OSError as err:
        listener.close()
        raise OSError(f"cannot listen on {options.host}:{options.port}: {err.strerror}") from None
    port = listener.getsockname()[1]

    app = build_app(repository, metrics, options.monitoring_path)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
        # Clients talk to the server directly: no X-Forwarded-* headers to interpret, and no
        # middleware to pass each request through.
        proxy_headers=False,
        # httptools and uvloop where installed; the pure-Python h11 and asyncio otherwise.
        http="auto",
        loop="auto",
    )
    server = uvicorn.Server(config)

    def announce() -> None:
        # Ready = the port accepts connections and every model has a warmed version.
        while not server.should_exit:
            if server.started and repository.ready.wait(0.05):
                break
            threading.Event().wait(0.02)
        if server.should_exit:
            return
        log.info("serving: ready on http://%s:%d", options.host, port)
        if options.ready_file:
            write_ready_file(options.ready_file, port)

    repository.start()
    threading.Thread(target=announce, name="ready-file", daemon=True).start()
    log.info(
        "serving: listening on http://%s:%d (models load in the background)", options.host, port
    )
    try:
        server.run(sockets=[listener])
    finally:
        repository.stop()
    return 0


def configure_logging() -> None:
    """One line per event on stderr: loads, unloads, label moves, errors."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")


def run_server(options: ServerOptions) -> int:
    """Serves `options` with logging on stderr; a config TF Serving would refuse or a port
    that cannot be opened is one `error:` line and exit code 1, no traceback."""
    from pipelines.serving.config import ServingConfigError

    # What the project's Makefile exports for every TensorFlow process: quiet C++ logs.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    configure_logging()
    try:
        return serve(options)
    except (ServingConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
