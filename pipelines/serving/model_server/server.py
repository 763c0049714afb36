"""Runs the model server: the repository's polling thread and uvicorn serving the application,
until SIGINT or SIGTERM; with `workers` above 1, that many such servers in processes of their
own on one listening socket (see `serve_workers`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipelines.serving.model_server.app import DEFAULT_MONITORING_PATH
from pipelines.serving.model_server.process_options import DEFAULT_BUSY_POLL_US
from pipelines.serving_state.config_files import ServedModel

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
    # What a version label may name (repository.VERSION_LABEL_POLICIES): TF Serving's default,
    # only an available version.
    version_labels: str = "available"
    # Server processes sharing the port (serve_workers); 1 serves in this process.
    workers: int = 1
    # Set by serve_workers for each of its workers: the listening socket's inherited file
    # descriptor, used instead of opening one.
    listen_fd: int | None = None
    # TensorFlow's thread pools, as TF Serving's --tensorflow_intra_op_parallelism and
    # --tensorflow_inter_op_parallelism: 0 leaves TensorFlow's choice (about one per core).
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    # Server-side batching (TF Serving's --enable_batching): the batching.BatchingOptions in
    # force, as a dict (the options travel to workers as JSON); None: one call per request.
    batching: dict | None = None
    # The request log (request_log.RequestLogOptions, as a dict, as `batching`); None: none.
    request_log: dict | None = None
    # After answering a request, poll for the next one this long before sleeping
    # (busy_poll.py); 0: never.
    busy_poll_us: int = DEFAULT_BUSY_POLL_US

    def sources(self) -> Callable[[], Sequence[ServedModel]]:
        """What the repository polls: the config file's models, or the one model named."""
        if self.model_config_file:
            from pipelines.serving_state.config_files import served_models

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

    from pipelines.serving.model_server.app import build_app
    from pipelines.serving.model_server.metrics import ServerMetrics
    from pipelines.serving.model_server.repository import ModelRepository

    if options.workers > 1:
        return serve_workers(options)
    worker = options.listen_fd is not None
    configure_tensorflow_threads(options)
    # A worker's metrics go to the files its parent gathers (prometheus_client's multiprocess
    # mode, switched on by the variable serve_workers sets).
    metrics = ServerMetrics(multiprocess_dir=os.environ.get(MULTIPROC_ENV) if worker else None)
    batcher = _batch_scheduler(options, metrics)
    repository = ModelRepository(
        options.sources(), metrics, options.poll_seconds, options.version_labels, batcher
    )
    # Read the sources once up front: a bad config (or, as in TF Serving, a label on a version
    # not loaded yet without the flag that allows it) is an error before anything listens.
    repository.read_sources()

    if worker:
        # The kernel reads the protocol off the descriptor: IPPROTO_TCP, as `_listen` opened it.
        listener = socket.socket(fileno=options.listen_fd)
    else:
        listener = _listen(options)
    port = listener.getsockname()[1]

    request_log = None
    if options.request_log:
        from pipelines.serving.model_server.request_log import RequestLog, RequestLogOptions

        request_log = RequestLog(
            RequestLogOptions(**options.request_log), observe=metrics.observe_logged
        )
    app = build_app(
        repository,
        metrics,
        options.monitoring_path,
        batching=batcher is not None,
        request_log=request_log,
        busy_poll_us=options.busy_poll_us,
    )
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
    if worker:
        threading.Thread(
            target=_stop_when_orphaned, args=(server,), name="parent-watch", daemon=True
        ).start()
    log.info(
        "serving: listening on http://%s:%d (models load in the background)", options.host, port
    )
    try:
        server.run(sockets=[listener])
    finally:
        repository.stop()
        if batcher is not None:
            batcher.stop()
    return 0


def _batch_scheduler(options: ServerOptions, metrics):
    """The process's batch scheduler when batching is on (else None), logged once."""
    if options.batching is None:
        return None
    from pipelines.serving.model_server.batching import BatchingOptions, BatchScheduler

    batching = BatchingOptions.from_dict(options.batching)
    log.info(
        "batching: max_batch_size %d, batch_timeout_micros %d, max_enqueued_batches %d, "
        "%d batch thread(s), allowed_batch_sizes %s",
        batching.max_batch_size,
        batching.batch_timeout_micros,
        batching.max_enqueued_batches,
        batching.threads,
        list(batching.allowed_batch_sizes) or "any",
    )
    return BatchScheduler(
        batching,
        run_batch=lambda signature, feeds: signature.call_alone(feeds),
        observe=lambda signature, requests, rows: metrics.observe_batch(
            signature.model, signature.name, requests, rows
        ),
    )


def _listen(options: ServerOptions, reuse_port: bool = False) -> socket.socket:
    """A socket bound to the options' host and port (not listening yet: uvicorn does that);
    with `reuse_port`, one of several bound to the same port (SO_REUSEPORT, see
    `serve_workers`)."""
    # IPPROTO_TCP named explicitly: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # sockets whose proto says TCP, and with it on every answer waited ~40 ms for an ACK.
    family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        listener.bind((options.host, options.port))
    except OSError as err:
        listener.close()
        raise OSError(f"cannot listen on {options.host}:{options.port}: {err.strerror}") from None
    return listener


def _stop_when_orphaned(server) -> None:
    """Stops a worker whose parent is gone (killed without passing the signal on), so no
    worker is left holding the port."""
    parent = os.getppid()
    while not server.should_exit:
        if os.getppid() != parent:
            log.error("serving: the parent process %d is gone; stopping", parent)
            server.should_exit = True
            return
        time.sleep(0.5)


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# How long the workers get to finish their requests after SIGTERM before they are killed.
WORKER_STOP_SECONDS = 20


def serve_workers(options: ServerOptions) -> int:
    """Serves `options` with `options.workers` server processes on one port; returns the exit
    code (0 after SIGINT or SIGTERM, 1 when a worker stops on its own).

    One Python process runs one request's Python (HTTP, JSON, conversion) at a time: the GIL.
    Here this process opens the port and starts the workers, `python -m
    pipelines.serving.model_server` each, each inheriting a listening socket of its own, all
    bound to the port with SO_REUSEPORT: the kernel hands each new connection to one of them
    by a hash of its addresses (a keep-alive connection stays with its worker). With one
    socket shared by all, the worker that woke first accepted every connection waiting, so a
    client opening its pool of connections at once often had them all on one worker, and the
    other idle (the serving benchmark's 8 connections, in about one run in five). Each worker
    polls the base paths and loads every served version itself, so memory grows with the
    workers: TensorFlow, the server's modules and the models, once per worker.

    Their metrics are written to files in a temporary folder of this server's
    (prometheus_client's multiprocess mode) and any worker's monitoring path serves them
    summed over the workers. The ready file is written, with this process's pid, once every
    worker has announced itself ready. SIGINT or SIGTERM is passed on to every worker; a worker
    that exits on its own stops the others and the server (a supervisor restarts it whole)."""
    from pipelines.serving.model_server.metrics import ServerMetrics
    from pipelines.serving.model_server.repository import ModelRepository

    # A config TF Serving would refuse stops the server before any worker starts.
    ModelRepository(
        options.sources(), ServerMetrics(), options.poll_seconds, options.version_labels
    ).read_sources()
    # A plain bind first: it fails when anything listens on the port, as one server's would.
    # Sockets bound with SO_REUSEPORT would join another server's on it (one of the same user,
    # workers of its own), and the two would share its connections.
    probe = _listen(options)
    port = probe.getsockname()[1]
    probe.close()
    bound = dataclasses.replace(options, port=port)  # the port the probe got, for port 0
    listeners = [_listen(bound, reuse_port=True) for _ in range(options.workers)]
    control = Path(tempfile.mkdtemp(prefix="conveyor-serving-"))
    metrics_dir = control / "metrics"
    metrics_dir.mkdir()
    environment = {**os.environ, MULTIPROC_ENV: str(metrics_dir)}
    stopping = threading.Event()
    workers: list[subprocess.Popen] = []

    def stop(signum, frame) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        for index, listener in enumerate(listeners):
            worker = dataclasses.replace(
                options,
                workers=1,
                listen_fd=listener.fileno(),
                ready_file=str(control / f"ready-{index}.json"),
            )
            argv = [sys.executable, "-m", "pipelines.serving.model_server"]
            argv += ["--worker-options", json.dumps(dataclasses.asdict(worker))]
            workers.append(subprocess.Popen(argv, env=environment, pass_fds=(listener.fileno(),)))
        log.info(
            "serving: %d workers on http://%s:%d (models load in the background)",
            options.workers,
            options.host,
            port,
        )
        announced = False
        while not stopping.wait(0.1):
            ended = [w for w in workers if w.poll() is not None]
            if ended:
                log.error(
                    "serving: worker %d exited with code %d; stopping the server",
                    ended[0].pid,
                    ended[0].returncode,
                )
                code = 1
                break
            if not announced and all(
                (control / f"ready-{i}.json").is_file() for i in range(len(workers))
            ):
                announced = True
                log.info("serving: all %d workers ready on port %d", len(workers), port)
                if options.ready_file:
                    write_ready_file(options.ready_file, port)
    finally:
        for listener in listeners:
            listener.close()
        _stop_workers(workers)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(control, ignore_errors=True)
    return code


def _stop_workers(workers: Sequence[subprocess.Popen]) -> None:
    """SIGTERM to every worker still running, then SIGKILL to those still running after
    WORKER_STOP_SECONDS."""
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + WORKER_STOP_SECONDS
    for worker in workers:
        try:
            worker.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def configure_logging() -> None:
    """One line per event on stderr: loads, unloads, label moves, errors."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")


def configure_tensorflow_threads(options: ServerOptions) -> None:
    """Sizes TensorFlow's thread pools before the first model loads (TensorFlow refuses once it
    has run an op), and logs what each pool got.

    Small requests gain from fewer threads: a batch-1 call is a handful of tiny kernels, and
    handing them to pool threads that sleep between requests costs more than running them.
    """
    import tensorflow as tf

    if options.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(options.intra_op_threads)
    if options.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(options.inter_op_threads)
    log.info(
        "TensorFlow threads: intra-op %s, inter-op %s",
        tf.config.threading.get_intra_op_parallelism_threads() or "auto",
        tf.config.threading.get_inter_op_parallelism_threads() or "auto",
    )


def run_server(options: ServerOptions) -> int:
    """Serves `options` with logging on stderr; a config TF Serving would refuse or a port
    that cannot be opened is one `error:` line and exit code 1, no traceback."""
    from pipelines.serving_state.config_files import ServingConfigError

    # What the project's Makefile exports for every TensorFlow process: quiet C++ logs.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    configure_logging()
    try:
        return serve(options)
    except (ServingConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
