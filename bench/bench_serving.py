"""Benchmark: the local model server's :predict against the signature's own call, its limit.

For the penguin model (raw rows, the `serving_default` signature), at batch 1 and 64 rows and
with 1 and 8 concurrent clients, it measures latency (p50, p99) and requests per second of:

    signature   the limit: N Python threads of this process calling the signature through the
                very call the server makes (`Signature.prepared_call`: the function as one op
                on the calling thread), on tensors made once, with no HTTP, JSON or conversion:
                what a server with no overhead at all (a C++ one approaches it) would answer
    tf-api      N Python threads calling `tf.saved_model.load(...).signatures["serving_default"]`
                with keyword arguments, TensorFlow's API, on tensors made once: what a Python
                program pays to call the model itself, kept beside the limit (the server
                already beats it at batch 1)
    server      `python -m pipelines.serving.model_server` on 127.0.0.1, driven by wrk (Debian's
                `wrk`, C, one thread with N keep-alive connections) POSTing the row-format JSON
                body of the same rows; with `--workers 1 2`, a server of one worker process
                and one of two (`--workers 2`: two processes on one port), each a side of its
                own (`server` and `server x2`)

With `--enable-batching` each server runs with TF Serving's server-side batching (the model server's
`--enable-batching`, with `--batching-parameters-file` when given, else TF Serving's defaults);
`--batching off on` measures each server both ways, as sides of their own (`server+b`, `server
x2+b` for the batching ones).

It prints the server's figures as ratios to both in-process sides and judges the issue's floors
against the limit only: p50 at batch 1 with one client at most 3x the signature's call, and
requests/s with 8 clients at least 60% of its requests/s, at batch 1 and 64, for the server
with as many workers as cores. Each cell is measured `--repeats` times (default 3), the
sides alternating which goes first, and the table shows medians with min-max. The load generator
runs on the same machine as the server, so on a small machine they share the cores.

It also breaks one request down into what it costs inside the server (`--breakdown-calls`):
this process serves the model as the server does (its repository, REST handler and ASGI
application) and times, on the benchmark's own bodies, each step a :predict request takes,
each through the server's own function (JSON parse, JSON values to arrays, arrays to tensors,
the signature call, outputs to arrays, the answer built and encoded, the metrics), then the whole
handler and the whole application; what the server's p50 with one client adds to that is
HTTP, the socket and wrk.

wrk must be installed (`scripts/ensure_system_packages.sh wrk`). The model is
`--model-base-path` (default: .conveyor/serving/penguin, what `make pipeline-local` pushes);
when there is none, the penguin pipeline is run once with the `ci` profile under the output
directory first (about two minutes).

    .venv/bin/python bench/bench_serving.py [--seconds S] [--repeats N] [--workers N [N ...]]
                                            [--server-threads INTRA INTER]
                                            [--enable-batching | --batching off on]
                                            [--batching-parameters-file PATH]
                                            [--breakdown-calls N]
                                            [--model-base-path DIR] [--json PATH]
                                            [--out-dir DIR] [--keep]

This is a benchmark, not a test: it asserts nothing about speed, and exits non-zero only when a
run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# bench/ is first on sys.path when this runs as `python bench/bench_serving.py`.
import results_file

ROOT = Path(__file__).resolve().parent.parent
BATCHES = (1, 64)
CLIENTS = (1, 8)
ROW = {
    "island": "Biscoe",
    "sex": "female",
    "bill_length_mm": 46.5,
    "bill_depth_mm": 14.5,
    "flipper_length_mm": 213.0,
    "body_mass_g": 4800.0,
}
STRING_FEATURES = ("island", "sex")
WARM_UP_SECONDS = 1.0
P50_FLOOR = 3.0  # server p50 at batch 1 at most this many times the in-process p50
THROUGHPUT_FLOOR = 0.60  # server requests/s with 8 clients at least this share of in-process
WRK_LUA = """\
local f = io.open(os.getenv("BENCH_BODY"), "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
"""
LOAD_GENERATOR = "wrk 4.1 (Debian), 1 thread, N keep-alive connections"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _drive(clients: int, seconds: float, call) -> dict:
    """Runs `clients` threads, each repeating `call` for `seconds` after a short warm-up;
    returns p50/p99 in ms and requests per second."""
    latencies: list[float] = []
    lock = threading.Lock()
    start_at = time.perf_counter() + 0.5  # the warm-up: calls before it are not counted
    stop_at = start_at + seconds
    errors: list[BaseException] = []

    def worker() -> None:
        mine = []
        try:
            while True:
                sent = time.perf_counter()
                if sent >= stop_at:
                    break
                call()
                if sent >= start_at:
                    mine.append(time.perf_counter() - sent)
        except BaseException as err:  # reported after the threads end
            errors.append(err)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"a call failed: {errors[0]!r}")
    return {
        "requests": len(latencies),
        "p50_ms": _percentile(latencies, 50) * 1000,
        "p99_ms": _percentile(latencies, 99) * 1000,
        "requests_per_s": len(latencies) / seconds,
    }


def _ensure_model(args: argparse.Namespace, out_root: Path) -> Path:
    if args.model_base_path:
        return Path(args.model_base_path).resolve()
    default = ROOT / ".conveyor" / "serving" / "penguin"
    if default.is_dir() and any(p.name.isdigit() for p in default.iterdir()):
        return default
    workdir = out_root / "penguin-workdir"
    print(f"no pushed penguin model: running the penguin pipeline (ci) in {workdir}", flush=True)
    conveyor = [sys.executable, "-m", "pipelines.cli"]
    for command in (
        [*conveyor, "data", "penguin", "--workdir", str(workdir)],
        [*conveyor, "run", "penguin", "--profile", "ci", "--workdir", str(workdir)],
    ):
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return workdir / "serving" / "penguin"


def _newest_version(base_path: Path) -> Path:
    return max((p for p in base_path.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


class SignatureCall:
    """The limit: the newest version loaded and warmed as the server loads it, its
    `serving_default` signature run through the server's own call on tensors made once per
    batch size."""

    def __init__(self, base_path: Path):
        import tensorflow as tf

        from pipelines.serving.model_server.servable import Servable

        version = _newest_version(base_path)
        servable = Servable.load("penguin", int(version.name), version)
        servable.warm_up()
        self._servable = servable  # keeps the variables the signature captures alive
        self.signature = servable.signature("")
        self.tensors = {
            batch: {
                name: tf.constant(
                    [value] * batch, tf.string if name in STRING_FEATURES else tf.float32
                )
                for name, value in ROW.items()
            }
            for batch in BATCHES
        }

    def measure(self, batch: int, clients: int, seconds: float) -> dict:
        """One cell: `clients` threads calling the signature for `seconds`."""
        return _drive(clients, seconds, self.signature.prepared_call(self.tensors[batch]))


class TfApiCall:
    """TensorFlow's API: the newest version loaded with `tf.saved_model.load` and its
    `serving_default` signature called as TensorFlow offers it (keyword arguments), on tensors
    made once per batch size: what a Python program pays to call the SavedModel itself."""

    def __init__(self, base_path: Path, tensors: dict):
        import tensorflow as tf

        self._loaded = tf.saved_model.load(str(_newest_version(base_path)))
        self._function = self._loaded.signatures["serving_default"]
        self._tensors = tensors
        for batch in BATCHES:
            self._function(**tensors[batch])  # traced and warm before anything is measured

    def measure(self, batch: int, clients: int, seconds: float) -> dict:
        """One cell: `clients` threads calling the signature for `seconds`."""
        function, tensors = self._function, self._tensors[batch]
        return _drive(clients, seconds, lambda: function(**tensors))


# The two in-process sides, each a column of the table and a reference the ratios are taken
# to; the floors are judged against LIMIT alone.
LIMIT = "signature"
REFERENCES = {
    LIMIT: "the server's own call of the serving_default signature "
    "(Signature.prepared_call: the function as one op on the calling thread), N threads, "
    "tensors made once; a server with no HTTP, JSON or conversion",
    "tf_api": "TensorFlow's API: the SavedModel's serving_default called as "
    "tf.saved_model.load(...).signatures[...](**tensors), N threads, tensors made once",
}


# --- where a request's time goes -----------------------------------------------------------------

PREDICT_PATH = "/v1/models/penguin:predict"
BREAKDOWN_ROUNDS = 7  # each step timed this many times over --breakdown-calls calls; the median
IDLE_GAP_SECONDS = 0.0005  # the pause before each call of the idle-gap signature figure
APP_REQUESTS = 100  # requests per run of the event loop when timing the ASGI application


def _per_call_us(calls: dict, count: int) -> dict[str, float]:
    """Microseconds per call of each of `calls` (name -> (call, calls it makes per call)): the
    median of BREAKDOWN_ROUNDS rounds of `count` calls each. The calls take turns within each
    round, so the machine's other work weighs on all of them alike; a tenth as many unmeasured
    calls of each go first."""
    for call, _ in calls.values():
        for _ in range(max(1, count // 10)):
            call()
    rounds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(BREAKDOWN_ROUNDS):
        for name, (call, inner) in calls.items():
            repeats = max(1, count // inner)
            started = time.perf_counter()
            for _ in range(repeats):
                call()
            rounds[name].append((time.perf_counter() - started) / (repeats * inner) * 1e6)
    return {name: statistics.median(times) for name, times in rounds.items()}


def _after_idle_gap_us(call, calls: int) -> float:
    """Median microseconds of one call of `call` made IDLE_GAP_SECONDS after the one before: a
    server with one client calls the signature on a core that has just waited for a request."""
    durations = []
    for _ in range(calls):
        time.sleep(IDLE_GAP_SECONDS)
        started = time.perf_counter()
        call()
        durations.append(time.perf_counter() - started)
    return statistics.median(durations) * 1e6


def request_breakdown(
    base_path: Path, signature_call: SignatureCall, count: int
) -> tuple[dict, dict[int, bytes]]:
    """Where a :predict request's time goes inside the server, per batch size, in microseconds
    per request: each step through the server's own function, alone on the benchmark's body
    (`steps_us`) and all in turn (`steps_in_turn_us`), the whole REST handler and
    the whole ASGI application (in-memory receive and send), and the limit's call alone on
    tensors of the same rows, back to back and after an idle gap.

    The model is served here as the server serves it: its repository, handler and
    application, with metrics of their own. Returns the figures by batch size (as text) and
    the server's answer (its bytes) by batch size."""
    import asyncio

    from pipelines.serving.model_server import json_tensor
    from pipelines.serving.model_server.app import RestHandler, build_app
    from pipelines.serving.model_server.metrics import ServerMetrics
    from pipelines.serving.model_server.repository import ModelRepository
    from pipelines.serving.model_server.servable import output_arrays
    from pipelines.serving_state.config_files import ServedModel

    metrics = ServerMetrics()
    model = ServedModel(name="penguin", base_path=str(base_path), policy="latest")
    repository = ModelRepository(lambda: [model], metrics, 1.0, "available")
    repository.read_sources()
    repository.start()
    try:
        if not repository.ready.wait(180):
            raise RuntimeError("the breakdown's repository did not load the model")
        servable = repository.resolve("penguin", None, None)
        signature = servable.signature("")
        handler = RestHandler(repository, metrics)
        app = build_app(repository, metrics)
        try:
            import uvloop  # what the server's event loop is, where installed

            loop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        version = str(servable.version)
        steps = {
            "JSON parse": json_tensor.parse_body,
            "JSON values to arrays": lambda doc: json_tensor.predict_inputs(
                doc, signature.input_dtypes, ""
            ),
            "arrays to tensors": lambda given: (signature.input_tensors(given[0]), given[1]),
            "signature call": lambda given: (signature.call_flat(given[0]), given[1]),
            "outputs to arrays": lambda given: (output_arrays(given[0]), given[1]),
            "answer built": lambda given: json_tensor.predict_answer(*given, arrays=True),
            "answer encoded": json_tensor.dumps,
            "metrics": lambda payload: metrics.observe_request(
                "penguin", version, "serving_default", "predict", 200, 0.001
            ),
        }
        breakdown, answers = {}, {}
        for batch in BATCHES:
            body = json.dumps({"instances": [ROW] * batch}).encode()
            # Each step alone on what the step before it answered, then all of them in turn:
            # alone, a step finds its caches warm; in turn, each leaves them cold for the next.
            given, calls = body, {}
            for name, step in steps.items():
                calls[name] = (lambda step=step, given=given: step(given), 1)
                given = step(given)
            calls["in turn"] = (_steps_in_turn(list(steps.values()), body), 1)
            calls["handler"] = (lambda body=body: handler.handle("POST", PREDICT_PATH, body), 1)
            calls["app"] = (_app_requests(app, loop, body, APP_REQUESTS), APP_REQUESTS)
            limit_call = signature_call.signature.prepared_call(signature_call.tensors[batch])
            calls["limit"] = (limit_call, 1)
            timed = _per_call_us(calls, count)
            answers[batch] = handler.handle("POST", PREDICT_PATH, body)[1]
            breakdown[str(batch)] = {
                "steps_us": {name: timed[name] for name in steps},
                "steps_in_turn_us": timed["in turn"],
                "handler_us": timed["handler"],
                "app_us": timed["app"],
                "limit_us": timed["limit"],
                "limit_after_idle_gap_us": _after_idle_gap_us(limit_call, count // 4),
            }
        loop.close()
        return breakdown, answers
    finally:
        repository.stop()


def _steps_in_turn(steps: list, body: bytes):
    """A call that runs `steps` in turn on `body`, each on what the one before returned."""

    def run() -> None:
        given = body
        for step in steps:
            given = step(given)

    return run


def _app_requests(app, loop, body: bytes, count: int):
    """A call that runs `count` :predict requests of `body` through the ASGI application on
    `loop`, with an in-memory receive and send (no socket, no HTTP parser)."""
    scope = {
        "type": "http",
        "method": "POST",
        "path": PREDICT_PATH,
        "raw_path": PREDICT_PATH.encode(),
        "headers": [(b"content-type", b"application/json")],
    }
    request = {"type": "http.request", "body": body, "more_body": False}

    async def receive() -> dict:
        return request

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start" and message["status"] != 200:
            raise RuntimeError(f"the application answered {message['status']}")

    async def requests() -> None:
        for _ in range(count):
            await app(scope, receive, send)

    return lambda: loop.run_until_complete(requests())


# A server of HTTP alone: uvicorn with the model server's settings (server.py), answering a
# POST to /BATCH with the model server's answer for that batch, read from ANSWERS/BATCH.json,
# after reading the body; no JSON, no model. argv: ANSWERS, the file to write the port to.
HTTP_ONLY_SERVER = """\
import json, socket, sys
from pathlib import Path
import uvicorn
answers_dir, port_file = Path(sys.argv[1]), Path(sys.argv[2])
answers = {f"/{p.stem}": p.read_bytes() for p in answers_dir.glob("*.json")}
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    payload = answers[scope["path"]]
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
listener.bind(("127.0.0.1", 0))
port_file.write_text(json.dumps({"port": listener.getsockname()[1]}))
config = uvicorn.Config(app, log_level="warning", access_log=False, proxy_headers=False,
                        http="auto", loop="auto", lifespan="off")
uvicorn.Server(config).run(sockets=[listener])
"""


class HttpOnly:
    """uvicorn alone on 127.0.0.1 (HTTP_ONLY_SERVER), driven by wrk as the model server is:
    what HTTP, the loopback socket and wrk cost a request without JSON or a model."""

    def __init__(self, out_root: Path, answers: dict[int, bytes]):
        out_root = out_root / "http-only"
        out_root.mkdir(parents=True, exist_ok=True)
        for batch, payload in answers.items():
            (out_root / f"{batch}.json").write_bytes(payload)
        ready = out_root / "port.json"
        self.log_path = out_root / "server.log"
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-c", HTTP_ONLY_SERVER, str(out_root), str(ready)],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not ready.is_file():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the HTTP-only server did not start; see {self.log_path}")
            time.sleep(0.05)
        time.sleep(0.5)  # the port is written before uvicorn listens
        self._port = json.loads(ready.read_text())["port"]
        self._script, self._bodies = write_wrk_inputs(out_root, answers)

    def p50_us(self, batch: int, seconds: float) -> float:
        """wrk's p50 in microseconds with one connection for `seconds`."""
        url = f"http://127.0.0.1:{self._port}/{batch}"
        return run_wrk(self._script, url, self._bodies[batch], 1, seconds)["p50_ms"] * 1000

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()


def _breakdown_with_server(
    breakdown: dict, cells: list[dict], http_only_p50: dict, polling: dict
) -> dict:
    """The breakdown with the server's p50 with one client (one worker, no batching), what it
    adds to the application's time (HTTP, the loopback socket, wrk, and a core that waited for
    the request), HTTP alone's p50 (`http_only_p50`: batch -> the runs' p50s, us) and the
    server's p50 with busy polling on and off, measured in turn (`polling`: "on"/"off" ->
    the same)."""
    measured_p50s = (
        ("http_only_p50_us", http_only_p50),
        ("busy_poll_on_p50_us", polling["on"]),
        ("busy_poll_off_p50_us", polling["off"]),
    )
    for key, measured in measured_p50s:
        for batch, runs in measured.items():
            if runs and str(batch) in breakdown:
                breakdown[str(batch)][key] = _summary([{"p50": p} for p in runs], "p50")
    side = _side_name(1)
    for cell in cells:
        figures = breakdown.get(str(cell["batch"]))
        if figures is None or cell["clients"] != 1 or side not in cell:
            continue
        p50_us = cell[side]["p50_ms"]["median"] * 1000
        figures["server_p50_us"] = p50_us
        figures["http_socket_and_wrk_us"] = p50_us - figures["app_us"]
        handler = [run.get("handler_mean_us") for run in cell["runs"][side]]
        if all(handler):
            figures["server_handler_mean_us"] = statistics.median(handler)
    for figures in breakdown.values():
        figures["rows"] = _breakdown_rows(figures)  # what bench/report.py renders
    return breakdown


def _side_name(workers: int, batching: bool = False) -> str:
    """A server's side in the table: `server` for one worker process, `server xN` for N;
    `+b` when it batches."""
    return ("server" if workers == 1 else f"server x{workers}") + ("+b" if batching else "")


class Server:
    """The model server in a process of its own (with `workers` above 1, that many processes
    on one port), serving the base path on a free port."""

    def __init__(
        self,
        base_path: Path,
        out_root: Path,
        workers: int = 1,
        threads: tuple[int, int] = (0, 0),
        batching: list[str] | None = None,
        busy_poll_us: int | None = None,
    ):
        """`batching`: the model server's batching flags (None: no batching); `busy_poll_us`:
        its `--busy-poll-us` (None: the server's default)."""
        out_root = out_root / (
            f"server-{workers}{'-batching' if batching is not None else ''}"
            + ("" if busy_poll_us is None else f"-busy-poll-{busy_poll_us}")
        )
        out_root.mkdir(parents=True, exist_ok=True)
        self._out_root = out_root
        ready = out_root / "ready.json"
        self.log_path = out_root / "server.log"
        command = [
            sys.executable,
            *("-m", "pipelines.serving.model_server", "--model-name", "penguin"),
            *("--model-base-path", str(base_path), "--port", "0", "--ready-file", str(ready)),
            *("--workers", str(workers)),
            *("--tensorflow-intra-op-parallelism", str(threads[0])),
            *("--tensorflow-inter-op-parallelism", str(threads[1])),
            *(batching or []),
            *(() if busy_poll_us is None else ("--busy-poll-us", str(busy_poll_us))),
        ]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1"}
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + 180
        while not ready.is_file():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start; see {self.log_path}")
            time.sleep(0.1)
        port = json.loads(ready.read_text())["port"]
        self.url = f"http://127.0.0.1:{port}/v1/models/penguin:predict"
        self._metrics_url = f"http://127.0.0.1:{port}/monitoring/prometheus/metrics"
        self._script, self._bodies = write_wrk_inputs(out_root, BATCHES)

    def measure(self, batch: int, clients: int, seconds: float) -> dict:
        """One cell: wrk with `clients` connections for `seconds`; with one client, also the
        server's own mean time per :predict from its body read to its answer ready (its
        latency histogram's sum over count, read before and after)."""
        before = self._handler_seconds() if clients == 1 else None
        figures = self._wrk(batch, clients, seconds)
        if before is not None:
            total, count = (a - b for a, b in zip(self._handler_seconds(), before, strict=True))
            figures["handler_mean_us"] = total / count * 1e6 if count else None
        return figures

    def _handler_seconds(self) -> tuple[float, int]:
        """(seconds, requests) the server's latency histogram holds for :predict so far."""
        import urllib.request

        with urllib.request.urlopen(self._metrics_url, timeout=10) as answer:
            text = answer.read().decode()
        figures = {"sum": 0.0, "count": 0}
        pattern = r'^conveyor_serving_request_latency_seconds_(sum|count)\{[^}]*method="predict"'
        for found in re.finditer(pattern + r"[^}]*\} (\S+)$", text, re.MULTILINE):
            figures[found.group(1)] += float(found.group(2))
        return figures["sum"], int(figures["count"])

    def p50_us(self, batch: int, seconds: float) -> float:
        """wrk's p50 in microseconds with one client for `seconds`."""
        return self._wrk(batch, 1, seconds)["p50_ms"] * 1000

    def warm_up(self) -> None:
        """A short run per batch size before anything is counted."""
        for batch in BATCHES:
            self._wrk(batch, max(CLIENTS), WARM_UP_SECONDS)

    def _wrk(self, batch: int, clients: int, seconds: float) -> dict:
        return run_wrk(self._script, self.url, self._bodies[batch], clients, seconds)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()


def write_wrk_inputs(folder: Path, batches) -> tuple[Path, dict[int, Path]]:
    """wrk's POST script and the row-format body of each batch size, written into `folder`."""
    script = folder / "post.lua"
    script.write_text(WRK_LUA)
    bodies = {}
    for batch in batches:
        bodies[batch] = folder / f"body-{batch}.json"
        bodies[batch].write_text(json.dumps({"instances": [ROW] * batch}))
    return script, bodies


def run_wrk(script: Path, url: str, body: Path, clients: int, seconds: float) -> dict:
    """wrk (one thread, `clients` keep-alive connections) POSTing `body` to `url` for
    `seconds`; its figures (`_wrk_figures`)."""
    command = [
        "wrk",
        *("-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--latency"),
        *("-s", str(script), url),
    ]
    env = {**os.environ, "BENCH_BODY": str(body)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()}")
    return _wrk_figures(done.stdout)


def _wrk_figures(report: str) -> dict:
    """p50/p99 (ms), requests and requests/s from wrk's `--latency` report; a non-2xx answer
    or a socket error is a failed run."""
    problems = re.search(r"Non-2xx or 3xx responses: (\d+)", report)
    if problems:
        raise RuntimeError(f"the server answered {problems.group(1)} requests with an error")
    errors = re.search(r"Socket errors: (.*)", report)
    if errors:
        raise RuntimeError(f"wrk: socket errors: {errors.group(1)}")
    units = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}

    def latency(percent: str) -> float:
        found = re.search(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s|m)\s*$", report, re.MULTILINE)
        if not found:
            raise RuntimeError(f"no {percent}% line in wrk's report:\n{report}")
        return float(found.group(1)) * units[found.group(2)]

    requests = re.search(r"(\d+) requests in", report)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", report)
    if not requests or not rate:
        raise RuntimeError(f"cannot read wrk's report:\n{report}")
    return {
        "requests": int(requests.group(1)),
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
        "requests_per_s": float(rate.group(1)),
    }


def _summary(runs: list[dict], key: str) -> dict:
    values = [run[key] for run in runs]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _cell_figures(runs: list[dict]) -> dict:
    return {key: _summary(runs, key) for key in ("p50_ms", "p99_ms", "requests_per_s")}


def _spread(figure: dict, digits: int) -> str:
    return f"{figure['median']:.{digits}f} ({figure['min']:.{digits}f}-{figure['max']:.{digits}f})"


def _report(result: dict) -> str:
    lines = [
        f"{'batch':>5} {'clients':>7} | {'side':<15} | {'p50 ms':>20} | {'p99 ms':>20} | "
        f"{'req/s':>17}",
    ]
    for cell in result["cells"]:
        for side in (*REFERENCES, *cell["servers"]):
            figures = cell[side]
            lines.append(
                f"{cell['batch']:>5} {cell['clients']:>7} | {side.replace('_', '-'):<15} | "
                f"{_spread(figures['p50_ms'], 2):>20} | {_spread(figures['p99_ms'], 2):>20} | "
                f"{_spread(figures['requests_per_s'], 0):>17}"
            )
        for reference in REFERENCES:
            for side in cell["servers"]:
                ratios = cell["ratios"][reference][side]
                label = f"/{reference.replace('_', '-')}" + side[len("server") :]
                lines.append(
                    f"{'':>5} {'':>7} | {label:<15} | {ratios['p50']:>19.2f}x | "
                    f"{ratios['p99']:>19.2f}x | {ratios['requests_per_s']:>16.2f}x"
                )
    lines.append("")
    lines.append(
        "medians (min-max) of "
        f"{result['repeats']} runs of {result['seconds']:g} s per cell, the in-process sides and "
        "the server(s) alternating which goes first; ratios are server / each in-process side "
        f"(/{LIMIT}: the limit, /tf-api), of the medians"
    )
    lines.append(f"load generator: {result['load_generator']}")
    for reference, what in result["references"].items():
        lines.append(f"{reference.replace('_', '-')}: {what}")
    for floor in result["floors"]:
        verdict = "met" if floor["met"] else "MISSED"
        lines.append(f"floor: {floor['what']}: {floor['value']:.2f} -> {verdict}")
    for batch, figures in result["breakdown"].items():
        lines.append(f"one request at batch {batch}, microseconds:")
        for step, micros in _breakdown_rows(figures):
            lines.append(f"  {step:<52} {micros:>9.1f}")
    return "\n".join(lines)


def _breakdown_rows(figures: dict) -> list[tuple[str, float]]:
    """(what, microseconds) of one batch size's breakdown, in the order a request takes them."""
    rows = list(figures["steps_us"].items())
    rows += [
        ("+ caches the steps leave cold for each other", _cold_caches_us(figures)),
        ("= the steps in turn", figures["steps_in_turn_us"]),
        ("+ routing, model lookup, glue: the whole handler", figures["handler_us"]),
        ("+ ASGI: the whole application", figures["app_us"]),
    ]
    if "server_p50_us" in figures:
        rows += [
            (
                "+ the rest of the server's p50 (HTTP, socket, wrk, cold caches)",
                figures["http_socket_and_wrk_us"],
            ),
            ("= server p50, 1 client", figures["server_p50_us"]),
        ]
    if "busy_poll_off_p50_us" in figures:
        rows += [
            (
                "server p50, 1 client, busy polling on (in turn with off)",
                figures["busy_poll_on_p50_us"]["median"],
            ),
            (
                "server p50, 1 client, busy polling off (--busy-poll-us 0)",
                figures["busy_poll_off_p50_us"]["median"],
            ),
        ]
    if "server_handler_mean_us" in figures:
        rows.append(
            ("the handler inside the server, 1 client (mean)", figures["server_handler_mean_us"])
        )
    if "http_only_p50_us" in figures:
        rows.append(
            (
                "HTTP alone: uvicorn answering the same bytes, 1 client (p50)",
                figures["http_only_p50_us"]["median"],
            )
        )
    rows += [
        ("the limit's call alone, back to back", figures["limit_us"]),
        ("the limit's call alone, after an idle gap", figures["limit_after_idle_gap_us"]),
    ]
    return rows


def _cold_caches_us(figures: dict) -> float:
    """What running a request's steps in turn costs beyond the sum of each timed alone."""
    return figures["steps_in_turn_us"] - sum(figures["steps_us"].values())


def _floors(cells: list[dict], workers: dict[str, int]) -> list[dict]:
    """The issue's floors, judged against the limit (the signature's own call): p50 at batch 1
    with one client, for every server side; requests/s with the most clients at each batch
    size, for the sides with as many workers as cores (`workers`: side -> worker processes;
    every side when none has)."""
    cores = os.cpu_count()
    widest = [side for side, count in workers.items() if count == cores] or list(workers)
    floors = []
    for cell in cells:
        for side in cell["servers"]:
            ratios = cell["ratios"][LIMIT][side]
            versus = f"{side} / {LIMIT}"
            common = {"side": side, "reference": LIMIT, "batch": cell["batch"]}
            common["clients"] = cell["clients"]
            if cell["batch"] == 1 and cell["clients"] == 1:
                floors.append(
                    {
                        "what": f"p50 at batch 1, 1 client, {versus} <= {P50_FLOOR:g}",
                        **common,
                        "figure": "p50",
                        "value": ratios["p50"],
                        "met": ratios["p50"] <= P50_FLOOR,
                    }
                )
            if cell["clients"] == max(CLIENTS) and side in widest:
                floors.append(
                    {
                        "what": f"req/s at batch {cell['batch']}, {cell['clients']} clients, "
                        f"{versus} >= {THROUGHPUT_FLOOR:g}",
                        **common,
                        "figure": "requests_per_s",
                        "value": ratios["requests_per_s"],
                        "met": ratios["requests_per_s"] >= THROUGHPUT_FLOOR,
                    }
                )
    return floors


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints its table; 1 when a run fails."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per cell")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell and side")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1],
        help="server worker processes; one server (and table rows) per count given, e.g. 1 2",
    )
    parser.add_argument(
        "--server-threads",
        type=int,
        nargs=2,
        default=[0, 0],
        metavar=("INTRA", "INTER"),
        help="the servers' TensorFlow thread pools (--tensorflow-intra-op-parallelism and "
        "--tensorflow-inter-op-parallelism; 0 0: TensorFlow's choice, the default)",
    )
    batching = parser.add_mutually_exclusive_group()
    batching.add_argument(
        "--enable-batching",
        action="store_const",
        const=["on"],
        dest="batching",
        help="the servers batch concurrent requests (the model server's --enable-batching)",
    )
    batching.add_argument(
        "--batching",
        nargs="+",
        choices=("off", "on"),
        help="measure each server without and/or with batching, e.g. off on (default: off)",
    )
    parser.add_argument(
        "--batching-parameters-file",
        help="the batching servers' --batching-parameters-file (default: TF Serving's defaults)",
    )
    parser.add_argument(
        "--busy-poll-us",
        type=int,
        help="the servers' --busy-poll-us (default: the server's own default)",
    )
    parser.add_argument(
        "--breakdown-calls",
        type=int,
        default=1000,
        help="calls per round when timing the steps of one request (at least 400)",
    )
    parser.add_argument("--model-base-path", help="a penguin model base path to serve")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    results_file.add_arguments(parser, "serving")
    parser.add_argument("--out-dir", type=Path, help="work here instead of a temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep the output folder")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    if shutil.which("wrk") is None:
        print(
            "error: wrk is not installed (scripts/ensure_system_packages.sh wrk)", file=sys.stderr
        )
        return 1
    print(f"command: {shlex.join(sys.orig_argv)}", flush=True)
    print(f"cores: {os.cpu_count()}; load average at start: {os.getloadavg()}", flush=True)
    print(f"server TensorFlow threads (intra, inter; 0: auto): {args.server_threads}", flush=True)
    out_root = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-serving-"))
    out_root.mkdir(parents=True, exist_ok=True)
    if min(args.workers) < 1:
        parser.error("--workers must be at least 1")
    if args.breakdown_calls < 400:
        parser.error("--breakdown-calls must be at least 400")
    modes = list(dict.fromkeys(args.batching or ["off"]))
    batching_flags = ["--enable-batching"]
    if args.batching_parameters_file:
        batching_flags += [
            "--batching-parameters-file",
            str(Path(args.batching_parameters_file).resolve()),
        ]
    print(
        f"batching: {' and '.join(modes)} {batching_flags[1:] if 'on' in modes else ''}", flush=True
    )
    configurations = [
        (workers, mode == "on") for mode in modes for workers in dict.fromkeys(args.workers)
    ]
    servers = [_side_name(workers, batched) for workers, batched in configurations]
    runs: dict[tuple, dict[str, list[dict]]] = {
        (batch, clients): {side: [] for side in (*REFERENCES, *servers)}
        for batch in BATCHES
        for clients in CLIENTS
    }
    started: list[Server] = []
    try:
        base_path = _ensure_model(args, out_root)
        print(f"model: {base_path}", flush=True)
        signature_call = SignatureCall(base_path)
        sides = {
            LIMIT: signature_call,
            "tf_api": TfApiCall(base_path, signature_call.tensors),
        }
        # Timed before any server starts, on a machine with nothing else of this benchmark's
        # running.
        print("timing the steps of one request in this process", flush=True)
        breakdown, answers = request_breakdown(base_path, signature_call, args.breakdown_calls)
        for (workers, batched), side in zip(configurations, servers, strict=True):
            sides[side] = Server(
                base_path,
                out_root,
                workers,
                tuple(args.server_threads),
                batching_flags if batched else None,
                args.busy_poll_us,
            )
            started.append(sides[side])
        for server in started:
            server.warm_up()
        for repeat in range(args.repeats):
            order = (*REFERENCES, *servers)
            if repeat % 2:
                order = order[::-1]
            for (batch, clients), cell in runs.items():
                for side in order:
                    figures = sides[side].measure(batch, clients, args.seconds)
                    cell[side].append(figures)
                    print(
                        f"run {repeat + 1}: batch {batch:>2}, {clients} client(s), "
                        f"{side:<12}: p50 {figures['p50_ms']:.2f} ms, "
                        f"{figures['requests_per_s']:.0f} req/s",
                        flush=True,
                    )
        # Busy polling's effect: the one-worker server's 1-client p50 beside the same server
        # with it off, alternating.
        polling = {"on": {batch: [] for batch in BATCHES}, "off": {batch: [] for batch in BATCHES}}
        single = sides.get(_side_name(1))
        if single is not None and args.busy_poll_us != 0:
            polling_off = Server(
                base_path, out_root, 1, tuple(args.server_threads), None, busy_poll_us=0
            )
            started.append(polling_off)
            polling_off.warm_up()
            for repeat in range(args.repeats):
                pair = (("on", single), ("off", polling_off))
                for batch in BATCHES:
                    for mode, server in pair if repeat % 2 == 0 else pair[::-1]:
                        polling[mode][batch].append(server.p50_us(batch, args.seconds))
                        print(
                            f"run {repeat + 1}: batch {batch:>2}, 1 client, server, busy polling "
                            f"{mode}: p50 {polling[mode][batch][-1]:.0f} us",
                            flush=True,
                        )
        for server in started:  # the model servers leave the cores to HTTP alone
            server.stop()
        started.clear()
        http_only = HttpOnly(out_root, answers)
        started.append(http_only)
        http_only_p50 = {batch: [] for batch in BATCHES}
        for repeat in range(args.repeats):
            for batch in BATCHES:
                http_only_p50[batch].append(http_only.p50_us(batch, args.seconds))
                print(
                    f"run {repeat + 1}: batch {batch:>2}, 1 client, http only : p50 "
                    f"{http_only_p50[batch][-1]:.0f} us",
                    flush=True,
                )
    except (RuntimeError, subprocess.CalledProcessError) as err:
        print(f"error: {err} (outputs kept under {out_root})", file=sys.stderr)
        return 1
    finally:
        for server in started:
            server.stop()
    cells = []
    for (batch, clients), cell in runs.items():
        figures = {"batch": batch, "clients": clients, "servers": servers}
        for reference in REFERENCES:
            figures[reference] = _cell_figures(cell[reference])
        figures["ratios"] = {reference: {} for reference in REFERENCES}
        for side in servers:
            served = figures[side] = _cell_figures(cell[side])
            for reference in REFERENCES:
                figures["ratios"][reference][side] = {
                    key: served[name]["median"] / figures[reference][name]["median"]
                    for key, name in (
                        ("p50", "p50_ms"),
                        ("p99", "p99_ms"),
                        ("requests_per_s", "requests_per_s"),
                    )
                }
        figures["runs"] = cell
        cells.append(figures)
    result = {
        "seconds": args.seconds,
        "repeats": args.repeats,
        "model": str(base_path),
        "load_average_at_end": os.getloadavg(),
        "load_generator": LOAD_GENERATOR,
        "batching": modes,
        "batching_parameters_file": args.batching_parameters_file,
        "server_tensorflow_threads": {
            "intra": args.server_threads[0],
            "inter": args.server_threads[1],
        },
        "limit": LIMIT,
        "references": REFERENCES,
        "cells": cells,
        "floors": _floors(
            cells, {side: count for side, (count, _) in zip(servers, configurations, strict=True)}
        ),
        "busy_poll_us": args.busy_poll_us,
        "breakdown": _breakdown_with_server(breakdown, cells, http_only_p50, polling),
    }
    print()
    print(_report(result))
    print(f"load average at end: {result['load_average_at_end']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nJSON written to {args.json}")
    settings = {
        key: result[key] for key in ("seconds", "repeats", "batching", "server_tensorflow_threads")
    }
    settings["workers"] = list(dict.fromkeys(args.workers))
    settings["busy_poll_us"] = args.busy_poll_us if args.busy_poll_us is not None else "default"
    settings["batching_parameters_file"] = results_file.relative(args.batching_parameters_file)
    settings["model"] = "the penguin model (serving_default, raw rows)"
    figures = {
        "load_generator": result["load_generator"],
        "limit": result["limit"],
        "references": result["references"],
        "cells": [{key: value for key, value in cell.items() if key != "runs"} for cell in cells],
        "floors": result["floors"],
        "breakdown": result["breakdown"],
    }
    placeholders = {str(base_path): "MODEL_BASE_PATH"}
    if args.model_base_path:
        placeholders[args.model_base_path] = "MODEL_BASE_PATH"
    if args.out_dir is not None:
        placeholders[str(args.out_dir)] = "OUT_DIR"
    results_file.write_from_args(
        args, "serving", settings=settings, figures=figures, placeholders=placeholders
    )
    if not args.keep and args.out_dir is None:
        shutil.rmtree(out_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
