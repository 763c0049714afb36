"""Benchmark: the penguin run and a taxi night in an S3 bucket, beside the same runs on local disk.

The bucket is moto's S3 server (`moto_server` from requirements.lock), started by this script on
127.0.0.1, which keeps every object in memory. A bucket run puts the whole workdir there: the
input, the pipeline root, serving and the run records (`s3://BUCKET/PREFIX` as `--workdir`, the
emulator named with `--set runtime.storage.s3.*`); only what cannot live in a bucket stays local
(the SQLite metadata and the lock, under CONVEYOR_STATE_DIR). The reference is the same command
with a local workdir, in the same repetition.

For each pipeline and repetition both stores get a fresh workdir and a cold run, the order of the
two alternating between repetitions so that the machine's drift falls on both alike. Preparing
the data is outside the timed run on both sides: penguin's with `conveyor data penguin`, the
taxi night's CSV (`pipelines/datasets/taxi_nights.py`, a normal night, seed 1) written once and
linked into each local workdir or uploaded into each bucket workdir's span folder. Every timed
run is one process under GNU time (/usr/bin/time, Debian package `time`): wall time and peak
memory of the whole process, imports included; the machine's pauses by its host are taken out of
the wall time (measure.TimedRun). After a bucket run its objects are deleted, so the emulator's
memory does not grow from one run to the next.

The floor: a bucket run takes at most 1.5 times the local run's wall time (ratio of the medians),
per pipeline. The emulator runs on the same machine, so what this measures is the cost of going
through S3's API (requests, listings, copies instead of renames, the emulator's own CPU), not a
network.

    .venv/bin/python bench/bench_bucket.py [--repeats 3] [--taxi-rows 1000000]
        [--only penguin|taxi] [--json PATH] [--out-dir DIR] [--keep]

This is a benchmark, not a test: it asserts nothing about speed, and exits non-zero only when a
run fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

# bench/ is first on sys.path when this runs as `python bench/bench_bucket.py`.
import results_file
from measure import (
    GNU_TIME,
    BenchError,
    log_tail,
    run_benchmark,
    run_with_gnu_time,
    subprocess_env,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
CONVEYOR = REPO_ROOT / ".venv/bin/conveyor"
MOTO_SERVER = REPO_ROOT / ".venv/bin/moto_server"

PIPELINES = ("penguin", "taxi")
# The profiles the other benchmarks run these pipelines with: bench_penguin's `local`, and
# bench_nightly's `large` for a big taxi night (the Arrow reader, streaming objects through
# Beam's filesystems, and its Parquet copy for StatisticsGen).
PROFILES = {"penguin": "local", "taxi": "large"}
DEFAULT_REPEATS = 3
DEFAULT_TAXI_ROWS = 1_000_000
TAXI_NIGHT = datetime.date(2026, 11, 23)
TAXI_SEED = 1
BUCKET = "conveyor-bench"
REGION = "us-east-1"
# moto accepts any key pair; Conveyor's S3 clients sign with what the environment holds.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
# Environment that would point the runs' S3 clients elsewhere than the emulator's key pair.
CLEARED_ENV = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE")
EMULATOR_START_SECONDS = 60
STORES = ("local", "bucket")
# The floor: a bucket run at most this many times the local run's wall time (of the medians).
BUCKET_RATIO_FLOOR = 1.5
OUTCOMES = ("PUSHED:", "NOT_PUSHED:", "BLOCKED:", "FAILED:", "UNCHANGED:")
# One line of moto's request log: `127.0.0.1 - - [date] "GET /bucket/key HTTP/1.1" 200 -`.
REQUEST_LINE = re.compile(r'"([A-Z]+) \S+ HTTP/[\d.]+"')


# --- the emulated bucket -------------------------------------------------------------------------


@dataclass
class Emulator:
    """moto's S3 server on 127.0.0.1, with BUCKET made, and a client for preparing and clearing
    workdirs in it (the benchmark's own requests, never timed)."""

    process: subprocess.Popen
    endpoint: str
    log: Path

    def client(self):
        import boto3  # Only the benchmark process pays for boto3.

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def storage_overrides(self) -> list[str]:
        """`--set` arguments that point a run's S3 clients at the emulator."""
        overrides = [
            f"runtime.storage.s3.endpoint={self.endpoint}",
            f"runtime.storage.s3.region={REGION}",
            "runtime.storage.s3.path_style=true",
        ]
        return [item for override in overrides for item in ("--set", override)]

    def upload(self, source: Path, key: str) -> None:
        self.client().upload_file(str(source), BUCKET, key)

    def read_text(self, key: str) -> str:
        return self.client().get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()

    def delete_prefix(self, prefix: str) -> int:
        """Deletes every object under `prefix`/; returns how many there were."""
        client, deleted = self.client(), 0
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/")
        for page in pages:
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys, "Quiet": True})
                deleted += len(keys)
        return deleted

    def log_offset(self) -> int:
        return self.log.stat().st_size

    def requests_since(self, offset: int) -> dict[str, int]:
        """The requests the emulator has answered since its log was `offset` bytes long, by
        HTTP method, with their total."""
        with self.log.open("rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
        counts: dict[str, int] = {}
        for method in REQUEST_LINE.findall(text):
            counts[method] = counts.get(method, 0) + 1
        return {**dict(sorted(counts.items())), "total": sum(counts.values())}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_emulator(log: Path) -> Emulator:
    """Starts moto's S3 server on a free port of 127.0.0.1, waits until it answers and makes
    BUCKET (as tests/storage_emulators.py starts it for the tests).

    Raises:
        BenchError: `moto_server` is missing, exited or did not answer in time.
    """
    if not MOTO_SERVER.is_file():
        raise BenchError(f"no {MOTO_SERVER}: run `make setup` (moto is in requirements.lock)")
    endpoint = f"http://127.0.0.1:{_free_port()}"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as output:
        process = subprocess.Popen(
            [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", endpoint.rsplit(":", 1)[1]],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    emulator = Emulator(process, endpoint, log)
    deadline = time.monotonic() + EMULATOR_START_SECONDS
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/", timeout=2):
                break
        except urllib.error.HTTPError:
            break  # an error status is still an answer
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                emulator.stop()
                raise BenchError(
                    f"moto_server did not start (exit {process.poll()}):\n{log_tail(log)}"
                ) from None
            time.sleep(0.1)
    emulator.client().create_bucket(Bucket=BUCKET)
    return emulator


# --- one cold run --------------------------------------------------------------------------------


def run_environment(state_dir: Path) -> dict[str, str]:
    """A measured run's environment: quiet TensorFlow, the emulator's key pair, and the local
    state of a bucket workdir under `state_dir`."""
    env = subprocess_env()
    for name in CLEARED_ENV:
        env.pop(name, None)
    return {**env, **CREDENTIALS, "CONVEYOR_STATE_DIR": str(state_dir)}


def conveyor_command(
    command: str, pipeline: str, workdir: str, emulator: Emulator | None
) -> list[str]:
    """`conveyor COMMAND PIPELINE` on `workdir`; with an emulator, pointed at it."""
    argv = [str(CONVEYOR), command, pipeline, "--profile", PROFILES[pipeline]]
    argv += ["--workdir", workdir]
    if pipeline == "taxi":
        argv += ["--date", TAXI_NIGHT.isoformat()]
    return argv + (emulator.storage_overrides() if emulator else [])


def taxi_csv(out_root: Path, rows: int) -> Path:
    """The taxi night's CSV, written once per output folder and size (reused with --out-dir)."""
    from pipelines.datasets.taxi_nights import write_night

    target = out_root / "taxi-data" / f"rows-{rows}" / TAXI_NIGHT.isoformat() / "taxi.csv"
    done = target.with_name("taxi.csv.done")
    if not done.exists():
        print(f"writing the taxi night's {rows:,} rows to {target}", flush=True)
        write_night(target, rows, seed=TAXI_SEED)
        done.touch()
    return target


def prepare(
    pipeline: str,
    store: str,
    workdir: str,
    emulator: Emulator,
    env: dict[str, str],
    csv: Path | None,
    log: Path,
) -> None:
    """Puts the pipeline's input in place in a fresh workdir (not timed).

    Penguin's comes from `conveyor data penguin` on that workdir; the taxi night's CSV is
    linked into a local workdir's span folder or uploaded into the bucket's.
    """
    if pipeline == "taxi":
        span = f"data/taxi/{TAXI_NIGHT.isoformat()}/taxi.csv"
        if store == "bucket":
            emulator.upload(csv, f"{workdir.removeprefix(f's3://{BUCKET}/')}/{span}")
        else:
            target = Path(workdir) / span
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(csv)
        return
    command = conveyor_command("data", pipeline, workdir, emulator if store == "bucket" else None)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as output:
        done = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(command)} exited {done.returncode}:\n{log_tail(log)}")


def read_summary(run_dir: str, emulator: Emulator) -> dict:
    """The run's summary.json, from local disk or from the bucket."""
    if run_dir.startswith("s3://"):
        key = run_dir.removeprefix(f"s3://{BUCKET}/")
        return json.loads(emulator.read_text(f"{key}/summary.json"))
    return json.loads((Path(run_dir) / "summary.json").read_text())


def measure_run(
    pipeline: str,
    store: str,
    repetition: int,
    rep_dir: Path,
    emulator: Emulator,
    csv: Path | None,
) -> dict:
    """Prepares a fresh workdir on `store` and times one cold run of `pipeline` there.

    Raises:
        BenchError: preparing failed, the run exited non-zero or printed no outcome.
    """
    name = f"{pipeline}-{store}"
    state_dir = rep_dir / "state" / name
    env = run_environment(state_dir)
    if store == "bucket":
        prefix = f"rep{repetition + 1}-{name}-{uuid.uuid4().hex[:8]}"
        workdir = f"s3://{BUCKET}/{prefix}"
    else:
        prefix, workdir = None, str(rep_dir / name)
    logs = rep_dir / "logs"
    prepare(pipeline, store, workdir, emulator, env, csv, logs / f"{name}-data.log")
    command = conveyor_command("run", pipeline, workdir, emulator if store == "bucket" else None)
    log = logs / f"{name}-run.log"
    offset = emulator.log_offset()
    run = run_with_gnu_time(command, log, env)
    requests = emulator.requests_since(offset) if store == "bucket" else None
    output = log.read_text(errors="replace")
    lines = reversed(output.splitlines())
    outcome = next((line for line in lines if line.startswith(OUTCOMES)), "")
    if run.returncode != 0 or not outcome or "run record: " not in output:
        raise BenchError(
            f"{pipeline} on {store} (repetition {repetition + 1}) exited {run.returncode}: "
            f"{' '.join(command)}\n--- last lines of {log} ---\n{log_tail(log)}"
        )
    wall, peak = run.figures()  # without the machine's pauses (measure.TimedRun)
    run_dir = output.split("run record: ")[-1].split()[0]
    summary = read_summary(run_dir, emulator)
    steps = {node["node_id"]: node["seconds"] for node in summary["nodes"] if node["seconds"]}
    if prefix is not None:
        emulator.delete_prefix(prefix)  # keeps the emulator's memory flat across runs
    return {
        "repetition": repetition + 1,
        "store": store,
        "command": command,
        "log": str(log),
        "outcome": outcome.split(":", 1)[0],
        "wall_seconds": round(wall, 2),
        "paused_seconds": run.paused_seconds,
        "peak_rss_mib": round(peak),
        "pipeline_seconds": round(sum(steps.values()), 1),
        "steps": steps,
        "s3_requests": requests,
    }


# --- the benchmark -------------------------------------------------------------------------------


def benchmark(args: argparse.Namespace, out_root: Path, created: list[Path]) -> dict:
    pipelines = [args.only] if args.only else list(PIPELINES)
    csv = taxi_csv(out_root, args.taxi_rows) if "taxi" in pipelines else None
    if csv is not None:
        created.append(out_root / "taxi-data")
    created.append(out_root / "emulator")
    emulator = start_emulator(out_root / "emulator" / "moto_server.log")
    print(f"moto_server at {emulator.endpoint}, bucket {BUCKET}", flush=True)
    runs: dict[str, dict[str, list[dict]]] = {p: {s: [] for s in STORES} for p in pipelines}
    try:
        for repetition in range(args.repeats):
            rep_dir = out_root / f"rep{repetition + 1}"
            created.append(rep_dir)
            # Alternating which store goes first: the machine's drift falls on both alike.
            order = STORES if repetition % 2 == 0 else STORES[::-1]
            for pipeline in pipelines:
                for store in order:
                    measured = measure_run(pipeline, store, repetition, rep_dir, emulator, csv)
                    runs[pipeline][store].append(measured)
                    paused = measured["paused_seconds"]
                    print(
                        f"  repetition {repetition + 1}, {pipeline:<7} {store:<6} "
                        f"{measured['wall_seconds']:7.1f} s"
                        + (f" ({paused} s more, the machine paused by its host)" if paused else "")
                        + f" {measured['peak_rss_mib']:6} MiB {measured['outcome']}",
                        flush=True,
                    )
    finally:
        emulator.stop()
    return {
        "repeats": args.repeats,
        "taxi_rows": args.taxi_rows if csv is not None else None,
        "taxi_night": TAXI_NIGHT.isoformat(),
        "profiles": {pipeline: PROFILES[pipeline] for pipeline in pipelines},
        "emulator": f"moto_server {_moto_version()} on 127.0.0.1",
        "measured_with": f"{GNU_TIME} -v",
        "floor": BUCKET_RATIO_FLOOR,
        "runs": runs,
    }


def _moto_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("moto")
    except PackageNotFoundError:
        return "(version unknown)"


def _label(pipeline: str, result: dict) -> str:
    if pipeline == "taxi":
        return f"taxi night, {result['taxi_rows']:,} rows"
    return pipeline


def _store_figures(runs: list[dict]) -> dict:
    steps = list(dict.fromkeys(step for run in runs for step in run["steps"]))
    return {
        **{
            key: results_file.spread(run[key] for run in runs)
            for key in ("wall_seconds", "peak_rss_mib", "pipeline_seconds")
        },
        "steps": {
            step: results_file.spread(run["steps"].get(step, 0.0) for run in runs) for step in steps
        },
        "outcomes": [run["outcome"] for run in runs],
        "paused_seconds": [run["paused_seconds"] for run in runs],
        "s3_requests": (
            results_file.spread(run["s3_requests"]["total"] for run in runs)
            if all(run["s3_requests"] for run in runs)
            else None
        ),
    }


def results_figures(result: dict) -> tuple[dict, dict]:
    """Per pipeline: each store's medians with min-max, the bucket / local ratio of the wall
    time's medians, and the floor met or not."""
    settings = {
        key: result[key]
        for key in ("repeats", "taxi_rows", "taxi_night", "profiles", "emulator", "floor")
    }
    pipelines, aims = {}, []
    for pipeline, stores in result["runs"].items():
        figures = {store: _store_figures(runs) for store, runs in stores.items()}
        local, bucket = (figures[store]["wall_seconds"]["median"] for store in STORES)
        ratio = bucket / local
        label = _label(pipeline, result)
        pipelines[pipeline] = {"label": label, **figures, "wall_ratio": ratio}
        aims.append(
            {
                "what": f"{label}: the bucket run at most {BUCKET_RATIO_FLOOR:g}x the local "
                "run's wall time",
                "value": ratio,
                "met": ratio <= BUCKET_RATIO_FLOOR,
            }
        )
    return settings, {"pipelines": pipelines, "aims": aims}


def report(result: dict) -> str:
    """The table printed after the run: per pipeline and step, local beside bucket."""
    _, figures = results_figures(result)
    lines = [
        f"{result['emulator']}; seconds unless noted; medians of {result['repeats']} "
        "repetition(s), min-max in brackets; ratio bucket / local of the medians"
    ]
    width = 28

    def cell(figure: dict, digits: int = 1) -> str:
        text = f"{figure['median']:.{digits}f}"
        if figure["min"] != figure["max"]:
            text += f" ({figure['min']:.{digits}f}-{figure['max']:.{digits}f})"
        return f"{text:>{width}}"

    for row in figures["pipelines"].values():
        local, bucket = row["local"], row["bucket"]
        lines += ["", f"{row['label']:<{width}}{'local':>{width}}{'bucket':>{width}}{'ratio':>8}"]
        steps = list(dict.fromkeys([*local["steps"], *bucket["steps"]]))
        for step in steps:
            zero = {"median": 0.0, "min": 0.0, "max": 0.0}
            a, b = local["steps"].get(step, zero), bucket["steps"].get(step, zero)
            ratio = f"{b['median'] / a['median']:>7.2f}x" if a["median"] else ""
            lines.append(f"{'  ' + step:<{width}}{cell(a)}{cell(b)}{ratio}")
        for key, label, digits in (
            ("pipeline_seconds", "pipeline (components)", 1),
            ("wall_seconds", "whole process (wall)", 1),
            ("peak_rss_mib", "peak memory (MiB)", 0),
        ):
            ratio = bucket[key]["median"] / local[key]["median"]
            lines.append(
                f"{label:<{width}}{cell(local[key], digits)}{cell(bucket[key], digits)}"
                f"{ratio:>7.2f}x"
            )
        lines.append(
            f"{'S3 requests (bucket)':<{width}}{'':>{width}}{cell(bucket['s3_requests'], 0)}"
        )
        lines.append(f"outcomes: local {', '.join(local['outcomes'])}; "
                     f"bucket {', '.join(bucket['outcomes'])}")  # fmt: skip
    lines.append("")
    lines += [
        f"{aim['what']}: {aim['value']:.2f}, {'met' if aim['met'] else 'MISSED'}"
        for aim in figures["aims"]
    ]
    return "\n".join(lines)


# --- entry point ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"cold runs of each pipeline on each store (default {DEFAULT_REPEATS})",
    )
    parser.add_argument(
        "--taxi-rows",
        type=int,
        default=DEFAULT_TAXI_ROWS,
        help=f"rows of the taxi night (default {DEFAULT_TAXI_ROWS:,})",
    )
    parser.add_argument("--only", choices=PIPELINES, help="run one pipeline only")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    results_file.add_arguments(parser, "bucket")
    parser.add_argument("--out-dir", type=Path, help="work here instead of a temporary dir")
    parser.add_argument("--keep", action="store_true", help="keep the workdirs and logs")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    if args.taxi_rows < 1:
        parser.error("--taxi-rows: at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pipelines = [args.only] if args.only else list(PIPELINES)
    described = ", ".join(
        f"taxi night of {args.taxi_rows:,} rows" if p == "taxi" else p for p in pipelines
    )
    return run_benchmark(
        args,
        "bench-bucket-",
        benchmark,
        report,
        preamble=[
            f"{described}; local disk beside an emulated S3 bucket; {args.repeats} repetition(s)"
        ],
        contents="working directories",
        results=("bucket", results_figures),
    )


if __name__ == "__main__":
    sys.exit(main())
