"""Benchmark: the local model server's :predict against the in-process SavedModel call.

For the penguin model (raw rows, the `serving_default` signature), at batch 1 and 64 rows and
with 1 and 8 concurrent clients, it measures latency (p50, p99) and requests per second of:

    in-process  N Python threads calling the loaded signature on ready-made tensors
    server      N Python threads, each with its own httpx.Client (keep-alive), POSTing the
                row-format JSON body to `python -m pipelines.serving.runtime` on 127.0.0.1

and prints the server's figures as ratios to the in-process ones. The load generator is this
process (httpx clients in threads) on the same machine as the server, so on a small machine the
two share the cores: the figures are what one machine does, client included.

The model is `--model-base-path` (default: .conveyor/serving/penguin, what `make
pipeline-local` pushes); when there is none, the penguin pipeline is run once with the `ci`
profile under the output directory first (about two minutes).

    .venv/bin/python bench/bench_serving.py [--seconds S] [--model-base-path DIR] [--json PATH]
                                            [--out-dir DIR] [--keep]

This is a benchmark, not a test: it asserts nothing about speed, and exits non-zero only when a
run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

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


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _drive(clients: int, seconds: float, make_call) -> dict:
    """Runs `clients` threads, each repeating its call (from `make_call()`) for `seconds` after
    a short warm-up; returns p50/p99 in ms and requests per second."""
    latencies: list[float] = []
    lock = threading.Lock()
    start_at = time.monotonic() + 0.5  # the warm-up: calls before it are not counted
    stop_at = start_at + seconds
    errors: list[BaseException] = []

    def worker() -> None:
        call = make_call()
        mine = []
        try:
            while True:
                sent = time.monotonic()
                if sent >= stop_at:
                    break
                call()
                if sent >= start_at:
                    mine.append(time.monotonic() - sent)
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
        [*conveyor, "run", "penguin", "--env", "ci", "--workdir", str(workdir)],
    ):
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return workdir / "serving" / "penguin"


def _in_process(base_path: Path, seconds: float) -> dict:
    import tensorflow as tf

    version = max((p for p in base_path.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    signature = tf.saved_model.load(str(version)).signatures["serving_default"]
    results = {}
    for batch in BATCHES:
        tensors = {
            name: tf.constant([value] * batch, tf.string if name in STRING_FEATURES else tf.float32)
            for name, value in ROW.items()
        }
        signature(**tensors)
        for clients in CLIENTS:
            results[(batch, clients)] = _drive(
                clients, seconds, lambda t=tensors: lambda: signature(**t)
            )
    return results


def _server(base_path: Path, seconds: float, out_root: Path) -> dict:
    import httpx

    ready = out_root / "ready.json"
    log_path = out_root / "server.log"
    command = [
        sys.executable,
        "-m",
        "pipelines.serving.runtime",
        "--model-name",
        "penguin",
        "--model-base-path",
        str(base_path),
        "--port",
        "0",
        "--ready-file",
        str(ready),
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while not ready.is_file():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start; see {log_path}")
            time.sleep(0.1)
        port = json.loads(ready.read_text())["port"]
        url = f"http://127.0.0.1:{port}/v1/models/penguin:predict"
        results = {}
        for batch in BATCHES:
            body = json.dumps({"instances": [ROW] * batch}).encode()
            for clients in CLIENTS:

                def make_call(body=body):
                    http = httpx.Client(timeout=60)

                    def call() -> None:
                        response = http.post(
                            url, content=body, headers={"content-type": "application/json"}
                        )
                        response.raise_for_status()

                    return call

                results[(batch, clients)] = _drive(clients, seconds, make_call)
        return results
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _report(result: dict) -> str:
    lines = [
        f"{'batch':>5} {'clients':>7} | {'in-process p50/p99 ms':>22} {'req/s':>8} | "
        f"{'server p50/p99 ms':>18} {'req/s':>8} | {'p50 x':>6} {'p99 x':>6} {'req/s x':>7}"
    ]
    for cell in result["cells"]:
        inside, server = cell["in_process"], cell["server"]
        p50, p99 = server["p50_ms"] / inside["p50_ms"], server["p99_ms"] / inside["p99_ms"]
        rate = server["requests_per_s"] / inside["requests_per_s"]
        lines.append(
            f"{cell['batch']:>5} {cell['clients']:>7} | "
            f"{inside['p50_ms']:>10.2f}/{inside['p99_ms']:<11.2f} "
            f"{inside['requests_per_s']:>8.0f} | "
            f"{server['p50_ms']:>8.2f}/{server['p99_ms']:<9.2f} "
            f"{server['requests_per_s']:>8.0f} | {p50:>6.1f} {p99:>6.1f} {rate:>7.2f}"
        )
    lines.append(
        "ratios: server / in-process (latency above 1 is slower; req/s below 1 is fewer). "
        f"Load generator: httpx clients in threads of the benchmark process; "
        f"{result['seconds']:g} s per cell."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints its table; 1 when a run fails."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per cell")
    parser.add_argument("--model-base-path", help="a penguin model base path to serve")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--out-dir", type=Path, help="work here instead of a temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep the output folder")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    print(f"command: {shlex.join(sys.orig_argv)}", flush=True)
    out_root = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-serving-"))
    out_root.mkdir(parents=True, exist_ok=True)
    try:
        base_path = _ensure_model(args, out_root)
        print(f"model: {base_path}", flush=True)
        server = _server(base_path, args.seconds, out_root)
        inside = _in_process(base_path, args.seconds)
    except (RuntimeError, subprocess.CalledProcessError) as err:
        print(f"error: {err} (outputs kept under {out_root})", file=sys.stderr)
        return 1
    result = {
        "seconds": args.seconds,
        "model": str(base_path),
        "load_generator": "httpx.Client per thread, in the benchmark process",
        "cells": [
            {
                "batch": batch,
                "clients": clients,
                "in_process": inside[(batch, clients)],
                "server": server[(batch, clients)],
            }
            for batch in BATCHES
            for clients in CLIENTS
        ],
    }
    print()
    print(_report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nJSON written to {args.json}")
    if not args.keep and args.out_dir is None:
        shutil.rmtree(out_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
