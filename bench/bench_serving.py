"""Benchmark: the local model server's :predict against the in-process SavedModel call.

For the penguin model (raw rows, the `serving_default` signature), at batch 1 and 64 rows and
with 1 and 8 concurrent clients, it measures latency (p50, p99) and requests per second of:

    savedmodel  the issue's reference, calling the SavedModel in-process: N Python threads of
                this process calling `tf.saved_model.load(...).signatures["serving_default"]`
                with keyword arguments, TensorFlow's API, on tensors built once
    in-process  N Python threads calling the same signature through the very call the server
                makes (`Signature.prepared_call`: the function as one op on the calling thread,
                or its flat call), with no HTTP, JSON or conversion: a server with zero overhead,
                a stricter reference than the issue's
    server      `python -m pipelines.serving.model_server` on 127.0.0.1, driven by wrk (Debian's
                `wrk`, C, one thread with N keep-alive connections) POSTing the row-format JSON
                body of the same rows; with `--workers 1 2`, a server of one worker process
                and one of two (`--workers 2`: two processes on one port), each a side of its
                own (`server` and `server x2`)

With `--enable-batching` each server runs with TF Serving's server-side batching (the model server's
`--enable-batching`, with `--batching-parameters-file` when given, else TF Serving's defaults);
`--batching off on` measures each server both ways, as sides of their own (`server+b`, `server
x2+b` for the batching ones).

It prints the server's figures as ratios to both in-process references, with the issue's floors
against each: p50 at batch 1 within 3x the in-process call, and requests/s with 8 clients at
least 60% of the in-process limit. Each cell is measured `--repeats` times (default 3), the
sides alternating which goes first, and the table shows medians with min-max. The load generator
runs on the same machine as the server, so on a small machine they share the cores.

wrk must be installed (`scripts/ensure_system_packages.sh wrk`). The model is
`--model-base-path` (default: .conveyor/serving/penguin, what `make pipeline-local` pushes);
when there is none, the penguin pipeline is run once with the `ci` profile under the output
directory first (about two minutes).

    .venv/bin/python bench/bench_serving.py [--seconds S] [--repeats N] [--workers N [N ...]]
                                            [--server-threads INTRA INTER]
                                            [--enable-batching | --batching off on]
                                            [--batching-parameters-file PATH]
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


class InProcess:
    """The limit: the newest version loaded and warmed as the server loads it, its
    `serving_default` signature run on tensors made once per batch size."""

    def __init__(self, base_path: Path):
        import tensorflow as tf

        from pipelines.serving.model_server.servable import Servable

        version = _newest_version(base_path)
        servable = Servable.load("penguin", int(version.name), version)
        servable.warm_up()
        self._servable = servable  # keeps the variables the signature captures alive
        self._signature = servable.signature("")
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
        return _drive(clients, seconds, self._signature.prepared_call(self.tensors[batch]))


class SavedModelCall:
    """The issue's reference: the newest version loaded with `tf.saved_model.load` and its
    `serving_default` signature called as TensorFlow's API offers it (keyword arguments), on
    tensors made once per batch size: calling the SavedModel in-process."""

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


# The two in-process references, each a side of the table, and what the ratios are taken to.
LIMITS = {
    "savedmodel": "the SavedModel's serving_default called through TensorFlow's API "
    "(tf.saved_model.load(...).signatures[...](**tensors)), N threads, tensors made once",
    "in_process": "the server's own call of the same signature (Signature.prepared_call: the "
    "function as one op on the calling thread), N threads, tensors made once: a server with no "
    "HTTP, JSON or conversion",
}


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
    ):
        """`batching`: the model server's batching flags (None: no batching)."""
        out_root = out_root / f"server-{workers}{'-batching' if batching is not None else ''}"
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
        self._script = out_root / "post.lua"
        self._script.write_text(WRK_LUA)
        self._bodies = {}
        for batch in BATCHES:
            body = out_root / f"body-{batch}.json"
            body.write_text(json.dumps({"instances": [ROW] * batch}))
            self._bodies[batch] = body

    def measure(self, batch: int, clients: int, seconds: float) -> dict:
        """One cell: wrk with `clients` connections for `seconds`."""
        return self._wrk(batch, clients, seconds)

    def warm_up(self) -> None:
        """A short run per batch size before anything is counted."""
        for batch in BATCHES:
            self._wrk(batch, max(CLIENTS), WARM_UP_SECONDS)

    def _wrk(self, batch: int, clients: int, seconds: float) -> dict:
        command = [
            "wrk",
            *("-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--latency"),
            *("-s", str(self._script), self.url),
        ]
        env = {**os.environ, "BENCH_BODY": str(self._bodies[batch])}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()}")
        return _wrk_figures(done.stdout)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()


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
        for side in (*LIMITS, *cell["servers"]):
            figures = cell[side]
            lines.append(
                f"{cell['batch']:>5} {cell['clients']:>7} | {side.replace('_', '-'):<15} | "
                f"{_spread(figures['p50_ms'], 2):>20} | {_spread(figures['p99_ms'], 2):>20} | "
                f"{_spread(figures['requests_per_s'], 0):>17}"
            )
        for limit in LIMITS:
            for side in cell["servers"]:
                ratios = cell["ratios"][limit][side]
                label = f"/{limit.replace('_', '-')}" + side[len("server") :]
                lines.append(
                    f"{'':>5} {'':>7} | {label:<15} | {ratios['p50']:>19.2f}x | "
                    f"{ratios['p99']:>19.2f}x | {ratios['requests_per_s']:>16.2f}x"
                )
    lines.append("")
    lines.append(
        "medians (min-max) of "
        f"{result['repeats']} runs of {result['seconds']:g} s per cell, the in-process sides and "
        "the server(s) alternating which goes first; ratios are server / each in-process side "
        "(/savedmodel, /in-process), of the medians"
    )
    lines.append(f"load generator: {result['load_generator']}")
    for limit, what in result["limits"].items():
        lines.append(f"{limit.replace('_', '-')}: {what}")
    for floor in result["floors"]:
        verdict = "met" if floor["met"] else "MISSED"
        lines.append(f"floor: {floor['what']}: {floor['value']:.2f} -> {verdict}")
    return "\n".join(lines)


def _floors(cells: list[dict]) -> list[dict]:
    """The issue's floors, each against both in-process references (LIMITS)."""
    floors = []
    for cell in cells:
        for limit in LIMITS:
            for side in cell["servers"]:
                ratios = cell["ratios"][limit][side]
                versus = f"{side} / {limit.replace('_', '-')}"
                if cell["batch"] == 1:
                    floors.append(
                        {
                            "what": f"p50 at batch 1, {cell['clients']} client(s), {versus} "
                            f"<= {P50_FLOOR:g}",
                            "limit": limit,
                            "value": ratios["p50"],
                            "met": ratios["p50"] <= P50_FLOOR,
                        }
                    )
                if cell["clients"] == max(CLIENTS):
                    floors.append(
                        {
                            "what": f"req/s at batch {cell['batch']}, {cell['clients']} clients, "
                            f"{versus} >= {THROUGHPUT_FLOOR:g}",
                            "limit": limit,
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
        (batch, clients): {side: [] for side in (*LIMITS, *servers)}
        for batch in BATCHES
        for clients in CLIENTS
    }
    started: list[Server] = []
    try:
        base_path = _ensure_model(args, out_root)
        print(f"model: {base_path}", flush=True)
        in_process = InProcess(base_path)
        sides = {
            "savedmodel": SavedModelCall(base_path, in_process.tensors),
            "in_process": in_process,
        }
        for (workers, batched), side in zip(configurations, servers, strict=True):
            sides[side] = Server(
                base_path,
                out_root,
                workers,
                tuple(args.server_threads),
                batching_flags if batched else None,
            )
            started.append(sides[side])
        for server in started:
            server.warm_up()
        for repeat in range(args.repeats):
            order = (*LIMITS, *servers)
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
    except (RuntimeError, subprocess.CalledProcessError) as err:
        print(f"error: {err} (outputs kept under {out_root})", file=sys.stderr)
        return 1
    finally:
        for server in started:
            server.stop()
    cells = []
    for (batch, clients), cell in runs.items():
        figures = {"batch": batch, "clients": clients, "servers": servers}
        for limit in LIMITS:
            figures[limit] = _cell_figures(cell[limit])
        figures["ratios"] = {limit: {} for limit in LIMITS}
        for side in servers:
            served = figures[side] = _cell_figures(cell[side])
            for limit in LIMITS:
                figures["ratios"][limit][side] = {
                    key: served[name]["median"] / figures[limit][name]["median"]
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
        "limits": LIMITS,
        "cells": cells,
        "floors": _floors(cells),
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
    settings["batching_parameters_file"] = results_file.relative(args.batching_parameters_file)
    settings["model"] = "the penguin model (serving_default, raw rows)"
    figures = {
        "load_generator": result["load_generator"],
        "limits": result["limits"],
        "cells": [{key: value for key, value in cell.items() if key != "runs"} for cell in cells],
        "floors": result["floors"],
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
