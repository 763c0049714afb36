"""Benchmark: the generic trainer's throughput on the Chicago taxi data, as ratios to one device.

The taxi data is prepared once (the spec's `data.prepare` recipe, then gzipped TFRecords of
tf.Examples as TFX writes them, split 80/20, with TFDV statistics and an inferred schema saved as
files). Each configuration then trains the taxi spec's model in processes of its own, because
logical CPU devices and multi-worker clusters can only be set up before TensorFlow initialises:

    baseline   one device, XLA off
    xla        one device, XLA on (jit_compile)
    mirrored   MirroredStrategy over 2 logical CPU devices, XLA off
    multi      MultiWorkerMirroredStrategy, 2 worker processes on 127.0.0.1 (TF_CONFIG)

Every configuration uses the spec's global batch (128). Examples/s is what the trainer itself
reports: it times `fit` only, so process start-up, imports, data setup, the initial evaluation
and the export are excluded (the first step's tracing or XLA compilation, and the short
validation after each checkpoint chunk, are included). Peak memory is the whole process's
maximum resident set size from GNU time (/usr/bin/time, Debian package `time`); for the
multi-worker configuration it is the larger of the two workers. All configurations run on the
CPU: GPUs are hidden from the measured processes so that the ratios compare like with like.

    .venv/bin/python bench/bench_trainer.py [--steps N] [--repeats N] [--json PATH]
                                            [--out-dir DIR] [--keep]

This is a benchmark, not a test: it asserts nothing about speed, and exits non-zero only when a
run fails (printing the end of its log).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# bench/ is first on sys.path when this runs as `python bench/bench_trainer.py` (so also in the
# --worker processes, which run this script the same way).
import results_file
from measure import (
    GNU_TIME,
    BenchError,
    log_tail,
    parse_gnu_time_report,
    quiet_tf_env,
    run_benchmark,
    start_with_gnu_time,
    subprocess_env,
)

REPO_ROOT = Path(__file__).resolve().parents[1]

PIPELINE = "taxi"
SPEC_ENV = "local"
TRAIN_FILE = "train.gz"
EVAL_FILE = "eval.gz"
STATS_FILE = "stats.pb"
SCHEMA_FILE = "schema.pbtxt"
TRAINER_FILE = "trainer.json"
EVAL_EVERY = 5  # row i goes to eval when i % 5 == 4: ~80/20, the spec's {train: 4, eval: 1}
DEFAULT_STEPS = 300
EVAL_STEPS = 5
DEFAULT_TIMEOUT_S = 1200
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Configuration:
    """One way of training: trainer-spec overrides, and how many worker processes share it."""

    key: str
    label: str
    overrides: dict[str, Any]
    replicas: int = 1  # what the trainer must report, or the run measured something else
    workers: int = 1


CONFIGURATIONS = (
    Configuration("baseline", "1 device, XLA off (baseline)", {"jit_compile": False}),
    Configuration("xla", "1 device, XLA on", {"jit_compile": True}),
    Configuration(
        "mirrored",
        "mirrored, 2 logical CPU devices",
        {"distribution": "mirrored", "devices": ["/cpu:0", "/cpu:1"], "jit_compile": False},
        replicas=2,
    ),
    Configuration(
        "multi_worker",
        "multi-worker, 2 processes",
        {"distribution": "multi_worker", "jit_compile": False},
        replicas=2,
        workers=2,
    ),
)
BASELINE = CONFIGURATIONS[0].key
LABEL_WIDTH = max(len(c.label) for c in CONFIGURATIONS)


@dataclass
class Measurement:
    """What one configuration's run reported and cost (the chief's figures for multi-worker)."""

    configuration: str
    repetition: int
    examples_per_second: float
    fit_seconds: float
    peak_rss_mib: float
    final_loss: float
    strategy: str
    replicas: int
    global_batch_size: int
    process_seconds: float
    logs: list[str] = field(default_factory=list)


# --- preparing the data (once, in this process; never measured) ---------------------------------


def load_trainer_spec() -> tuple[Any, dict[str, Any]]:
    """Loads the taxi spec; returns it and its trainer section as plain JSON-ready data."""
    from pipelines.spec.loading import load_spec

    spec = load_spec(PIPELINE, env=SPEC_ENV).spec
    return spec, spec.trainer.model_dump(mode="json")


def split_rows(frame: Any) -> tuple[Any, Any]:
    """Splits a DataFrame ~80/20 by row position, so every run gets the same rows."""
    is_eval = [i % EVAL_EVERY == EVAL_EVERY - 1 for i in range(len(frame))]
    keep = [not flag for flag in is_eval]
    return frame[keep].reset_index(drop=True), frame[is_eval].reset_index(drop=True)


def feature_writers(frame: Any) -> dict[str, Any]:
    """Picks, per column, a function turning one value into a tf.train.Feature.

    The column's pandas dtype decides the type, as it decided how the prepared CSV was written:
    an int column with a missing value is read (and written back by `prepare`) as floats, which
    is also what TFX's CSV decoding makes of it. A missing value is a feature with no values.
    """
    import pandas as pd
    import tensorflow as tf

    def int_feature(value: Any) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))

    def float_feature(value: Any) -> tf.train.Feature:
        if math.isnan(value):
            return tf.train.Feature()
        return tf.train.Feature(float_list=tf.train.FloatList(value=[float(value)]))

    def bytes_feature(value: Any) -> tf.train.Feature:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return tf.train.Feature()
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[str(value).encode()]))

    writers = {}
    for name, dtype in frame.dtypes.items():
        if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_integer_dtype(dtype):
            writers[name] = int_feature
        elif pd.api.types.is_float_dtype(dtype):
            writers[name] = float_feature
        else:
            writers[name] = bytes_feature
    return writers


def write_examples(frame: Any, path: Path) -> None:
    """Writes a DataFrame as gzipped TFRecords of tf.Examples, as TFX's ExampleGen does."""
    import tensorflow as tf

    writers = feature_writers(frame)
    columns = list(frame.columns)
    partial = path.with_name(f".{path.name}.partial")
    with tf.io.TFRecordWriter(str(partial), options="GZIP") as writer:
        for row in frame.astype(object).itertuples(index=False):
            features = {
                name: writers[name](value) for name, value in zip(columns, row, strict=True)
            }
            example = tf.train.Example(features=tf.train.Features(feature=features))
            writer.write(example.SerializeToString())
    partial.replace(path)  # a reader never sees half a file


def write_statistics_and_schema(train_frame: Any, data_dir: Path) -> None:
    """Saves the training split's TFDV statistics and the schema inferred from them.

    They are saved as plain protos so the measured processes can read them without importing
    TFDV (or Beam), which would only add noise to their memory figures.
    """
    import tensorflow_data_validation as tfdv

    stats = tfdv.generate_statistics_from_dataframe(train_frame)
    (data_dir / SCHEMA_FILE).write_text(str(tfdv.infer_schema(stats)))
    (data_dir / STATS_FILE).write_bytes(stats.SerializeToString())


def load_feature_set(data_dir: Path, trainer: dict[str, Any]) -> Any:
    """Describes the saved data for a trainer spec, reading protos only (no TFDV)."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

    from components.trainer.features import describe

    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(
        (data_dir / STATS_FILE).read_bytes()
    )
    schema = text_format.Parse((data_dir / SCHEMA_FILE).read_text(), schema_pb2.Schema())
    return describe(trainer, schema, stats)


def check_feature_set(data_dir: Path, trainer: dict[str, Any]) -> None:
    """Fails before any measured run when the spec and the data disagree or the stats are bad.

    Raises:
        BenchError: a numeric feature's mean or standard deviation is not finite (a missing value
            counted as NaN would make every normalised input NaN).
    """
    feature_set = load_feature_set(data_dir, trainer)
    for info in feature_set.features:
        if info.kind == "numeric" and not (math.isfinite(info.mean) and math.isfinite(info.std)):
            raise BenchError(f"statistics for {info.name!r} are not finite: {info}")


def prepare_data(data_dir: Path) -> dict[str, Any]:
    """Writes everything the measured processes read into `data_dir`.

    Returns:
        Row counts and where the data came from, for the report.
    """
    import pandas as pd

    from pipelines.datasets.prepare import prepare

    spec, trainer = load_trainer_spec()
    data_dir.mkdir(parents=True, exist_ok=True)
    csv_path = prepare(spec, data_dir)
    frame = pd.read_csv(csv_path)
    train_frame, eval_frame = split_rows(frame)
    write_examples(train_frame, data_dir / TRAIN_FILE)
    write_examples(eval_frame, data_dir / EVAL_FILE)
    write_statistics_and_schema(train_frame, data_dir)
    (data_dir / TRAINER_FILE).write_text(json.dumps(trainer, indent=2) + "\n")
    check_feature_set(data_dir, trainer)
    return {
        "csv": str(csv_path),
        "rows": len(frame),
        "train_rows": len(train_frame),
        "eval_rows": len(eval_frame),
    }


# --- the worker: one measured training process ---------------------------------------------------


def run_worker(data_dir: Path, overrides_json: str, export_dir: Path | None) -> int:
    """Trains once and prints the trainer's summary as JSON on the last line of stdout.

    Args:
        data_dir: what prepare_data wrote.
        overrides_json: trainer-spec keys layered over the taxi spec's trainer section,
            including `train_steps` and `eval_steps`.
        export_dir: where the model is exported (default: a temporary directory, removed).

    Returns:
        The process's exit code.
    """
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)  # the strategy line, in the log
    trainer = {**json.loads((data_dir / TRAINER_FILE).read_text()), **json.loads(overrides_json)}

    from components.trainer.run import prepare_devices, train

    # Logical CPU devices can only be made before anything initialises TensorFlow: first.
    prepare_devices(trainer)
    features = load_feature_set(data_dir, trainer)
    scratch = None if export_dir else Path(tempfile.mkdtemp(prefix="bench-trainer-export-"))
    try:
        summary = train(
            trainer=trainer,
            features=features,
            train_files=[str(data_dir / TRAIN_FILE)],
            eval_files=[str(data_dir / EVAL_FILE)],
            serving_model_dir=str(export_dir or scratch),
            model_run_dir="",  # no TensorBoard logs: their writing is not what is measured
            train_steps=int(trainer["train_steps"]),
            eval_steps=int(trainer["eval_steps"]),
        )
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(summary), flush=True)
    return 0


# --- measuring processes -------------------------------------------------------------------------


@dataclass
class Child:
    """A measured process, started under GNU time in a session of its own."""

    name: str
    process: subprocess.Popen
    stdout_path: Path
    stderr_path: Path
    time_path: Path


def child_env(run_dir: Path, tf_config: dict[str, Any] | None = None) -> dict[str, str]:
    """Returns the environment of one measured process.

    Args:
        run_dir: the run's directory; temporary files (a non-chief's export) go under it.
        tf_config: the cluster and task of a multi-worker process, else None.
    """
    env = subprocess_env(override=True)  # quiet TensorFlow and Keras 2, whatever the caller set
    env["CUDA_VISIBLE_DEVICES"] = "-1"  # every configuration on the CPU, so ratios compare alike
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    tmp_dir = run_dir / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmp_dir)
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


def start_child(name: str, command: list[str], run_dir: Path, env: dict[str, str]) -> Child:
    """Starts `command` under `/usr/bin/time -v`, its output in files under `run_dir`."""
    stdout_path, stderr_path = run_dir / f"{name}.out", run_dir / f"{name}.log"
    time_path = run_dir / f"{name}.time"
    with stdout_path.open("w") as stdout, stderr_path.open("w") as stderr:
        process = start_with_gnu_time(
            command,
            time_path,
            stdout=stdout,
            stderr=stderr,
            env=env,
            cwd=REPO_ROOT,
            start_new_session=True,  # its own process group: a kill reaches Python under time
        )
    return Child(name, process, stdout_path, stderr_path, time_path)


def stop_child(child: Child) -> None:
    """Kills a child still running (GNU time and the Python under it), then reaps it."""
    if child.process.poll() is None:
        try:
            os.killpg(child.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    child.process.wait()


def failure_report(child: Child, reason: str) -> str:
    """Describes a failed child with the ends of its stdout and log."""
    return (
        f"{child.name} {reason}: {shlex.join(child.process.args)}\n"
        f"--- last lines of {child.stderr_path} ---\n{log_tail(child.stderr_path)}\n"
        f"--- last lines of {child.stdout_path} ---\n{log_tail(child.stdout_path, 5)}"
    )


def wait_for_children(children: list[Child], timeout_s: float) -> None:
    """Waits until every child has exited; on the first failure, stops the others.

    A multi-worker process whose peer died would wait for it in a collective forever, so a
    failure or a timeout ends the whole group.

    Raises:
        BenchError: a child exited non-zero or the group ran past `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            running = [child for child in children if child.process.poll() is None]
            failed = [child for child in children if child.process.returncode not in (None, 0)]
            if failed:
                child = failed[0]
                raise BenchError(failure_report(child, f"exited {child.process.returncode}"))
            if not running:
                return
            if time.monotonic() > deadline:
                raise BenchError(failure_report(running[0], f"ran past {timeout_s:.0f} s"))
            time.sleep(POLL_SECONDS)
    finally:
        for child in children:
            stop_child(child)


def read_summary(child: Child) -> dict[str, Any]:
    """Parses the training summary a worker printed as the last line of its stdout.

    Raises:
        BenchError: the last line is not a JSON object.
    """
    lines = [line for line in child.stdout_path.read_text().splitlines() if line.strip()]
    try:
        summary = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        summary = None
    if not isinstance(summary, dict):
        raise BenchError(failure_report(child, "printed no JSON summary on its last line"))
    return summary


def free_ports(count: int) -> list[int]:
    """Returns `count` distinct free TCP ports on 127.0.0.1 (held together, so never equal)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def worker_command(data_dir: Path, overrides: dict[str, Any], export_dir: Path) -> list[str]:
    """The command line of one measured training process (this script's worker mode)."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        str(data_dir),
        json.dumps(overrides),
        "--export-dir",
        str(export_dir),
    ]


def run_configuration(
    config: Configuration,
    repetition: int,
    data_dir: Path,
    runs_dir: Path,
    steps: int,
    timeout_s: float,
) -> Measurement:
    """Trains one configuration once, in `config.workers` processes, and measures it.

    Returns:
        The chief's (worker 0's) throughput, fit time and loss; the largest peak RSS of all.

    Raises:
        BenchError: a process failed, or the run is not the configuration it claims to be.
    """
    run_dir = runs_dir / f"rep{repetition}-{config.key}"
    run_dir.mkdir(parents=True, exist_ok=True)
    overrides = {**config.overrides, "train_steps": steps, "eval_steps": EVAL_STEPS}
    cluster = None
    if config.workers > 1:
        ports = free_ports(config.workers)
        cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    children: list[Child] = []
    try:
        for index in range(config.workers):
            tf_config = None
            if cluster:
                tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            name = f"worker{index}"
            command = worker_command(data_dir, overrides, run_dir / f"export-{name}")
            children.append(start_child(name, command, run_dir, child_env(run_dir, tf_config)))
    except BaseException:
        for child in children:  # a worker whose peer never started would wait for it forever
            stop_child(child)
        raise
    wait_for_children(children, timeout_s)
    summaries = [read_summary(child) for child in children]
    reports = [parse_gnu_time_report(child.time_path.read_text()) for child in children]
    chief = summaries[0]
    if chief["replicas"] != config.replicas:
        raise BenchError(
            f"{config.label}: trained on {chief['replicas']} replica(s), "
            f"expected {config.replicas} (log: {children[0].stderr_path})"
        )
    return Measurement(
        configuration=config.key,
        repetition=repetition,
        examples_per_second=float(chief["examples_per_second"]),
        fit_seconds=float(chief["seconds"]),
        peak_rss_mib=max(peak for _, peak in reports),
        final_loss=float(chief["metrics"]["loss"]),
        strategy=chief["strategy"],
        replicas=int(chief["replicas"]),
        global_batch_size=int(chief["global_batch_size"]),
        process_seconds=max(seconds for seconds, _ in reports),
        logs=[str(child.stderr_path) for child in children],
    )


def report_progress(result: Measurement) -> None:
    """Prints one finished run, so a long benchmark shows where it is."""
    print(
        f"  rep {result.repetition} {result.configuration:<12} "
        f"{result.examples_per_second:9.1f} ex/s  fit {result.fit_seconds:6.1f} s  "
        f"process {result.process_seconds:6.1f} s  {result.peak_rss_mib:6.0f} MiB  "
        f"loss {result.final_loss:.4f}  {result.strategy} x{result.replicas}",
        flush=True,
    )


# --- reporting -----------------------------------------------------------------------------------


def summarize(results: list[Measurement]) -> dict[str, dict[str, Any]]:
    """Reduces the runs to medians per configuration and ratios to the baseline's median."""
    medians = {}
    for config in CONFIGURATIONS:
        runs = [r for r in results if r.configuration == config.key]
        medians[config.key] = {
            "label": config.label,
            "overrides": config.overrides,
            "processes": config.workers,
            "strategy": runs[0].strategy,
            "replicas": runs[0].replicas,
            "global_batch_size": runs[0].global_batch_size,
            "examples_per_second_range": [
                min(r.examples_per_second for r in runs),
                max(r.examples_per_second for r in runs),
            ],
            **{
                name: statistics.median(getattr(r, name) for r in runs)
                for name in (
                    "examples_per_second",
                    "fit_seconds",
                    "peak_rss_mib",
                    "final_loss",
                    "process_seconds",
                )
            },
        }
    baseline = medians[BASELINE]["examples_per_second"]
    for row in medians.values():
        row["ratio_vs_baseline"] = row["examples_per_second"] / baseline
    return medians


def format_table(configurations: dict[str, dict[str, Any]]) -> str:
    """Renders the per-configuration medians as the plain-text table the benchmark prints."""
    header = (
        f"{'configuration':<{LABEL_WIDTH}} | {'examples/s':>10} | {'ratio vs baseline':>17} | "
        f"{'peak RSS MiB':>12} | {'final loss':>10}"
    )
    lines = [header, "-" * len(header)]
    for config in CONFIGURATIONS:
        row = configurations[config.key]
        lines.append(
            f"{config.label:<{LABEL_WIDTH}} | {row['examples_per_second']:>10.1f} | "
            f"{row['ratio_vs_baseline']:>17.2f} | {row['peak_rss_mib']:>12.0f} | "
            f"{row['final_loss']:>10.4f}"
        )
    return "\n".join(lines)


def format_notes(result: dict[str, Any]) -> str:
    """Says what the table's figures are, so nobody reads them as end-to-end times."""
    return "\n".join(
        [
            f"global batch {result['global_batch_size']} in every configuration; "
            f"{result['steps']} steps, eval_steps {result['eval_steps']}; "
            f"median of {result['repeats']} repetition(s); {result['cpu_count']} CPU core(s).",
            "examples/s is the trainer's own figure over `fit` only: process start-up, imports, "
            "data setup,",
            "the initial evaluation and the export are excluded; first-step tracing/XLA "
            "compilation and the",
            "validation after each checkpoint chunk are included. multi-worker: the chief's "
            "examples/s,",
            "the larger peak RSS of its two processes. Peak RSS is the whole process (GNU time).",
        ]
    )


# --- entry point ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="training steps per run")
    parser.add_argument("--repeats", type=int, default=1, help="repetitions of each configuration")
    parser.add_argument(
        "--out-dir", type=Path, help="where data and run directories go (default: a new temp dir)"
    )
    parser.add_argument("--keep", action="store_true", help="keep data, run directories and logs")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    results_file.add_arguments(parser, "trainer")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds one configuration's run may take (default {DEFAULT_TIMEOUT_S})",
    )
    parser.add_argument(
        "--worker",
        nargs=2,
        metavar=("DATA_DIR", "OVERRIDES_JSON"),
        help=argparse.SUPPRESS,  # internal: one measured training process
    )
    parser.add_argument("--export-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    return args


def benchmark(args: argparse.Namespace, out_root: Path, created: list[Path]) -> dict[str, Any]:
    """Prepares the data, runs every configuration `--repeats` times; returns the JSON result."""
    # Read when TensorFlow is first imported (by the data preparation): quiet, and Keras 2.
    quiet_tf_env(os.environ)
    data_dir, runs_dir = out_root / "data", out_root / "runs"
    created += [data_dir, runs_dir]
    print(f"preparing the {PIPELINE} data in {data_dir} ...", flush=True)
    with warnings.catch_warnings():
        # TFDV's imports warn about its dependencies' futures: noise above the benchmark's output.
        warnings.simplefilter("ignore")
        data = prepare_data(data_dir)
    print(
        f"  {data['rows']} rows: {data['train_rows']} train, {data['eval_rows']} eval", flush=True
    )
    results: list[Measurement] = []
    for repetition in range(args.repeats):
        # Configurations alternate within a repetition so machine noise falls on all alike.
        for config in CONFIGURATIONS:
            results.append(
                run_configuration(config, repetition, data_dir, runs_dir, args.steps, args.timeout)
            )
            report_progress(results[-1])
    configurations = summarize(results)
    return {
        "command": shlex.join(sys.orig_argv),
        "steps": args.steps,
        "eval_steps": EVAL_STEPS,
        "repeats": args.repeats,
        "global_batch_size": configurations[BASELINE]["global_batch_size"],
        "cpu_count": os.cpu_count(),
        "measured_with": f"{GNU_TIME} -v",
        "examples_per_second_covers": "the trainer's fit() only (imports, data setup excluded)",
        "data": data,
        "configurations": configurations,
        "runs": [asdict(r) for r in results],
    }


def results_figures(result: dict[str, Any]) -> tuple[dict, dict]:
    """Splits the result into the results file's settings and figures (runs left out)."""
    settings = {key: result[key] for key in ("steps", "eval_steps", "repeats", "global_batch_size")}
    figures = {
        "examples_per_second_covers": result["examples_per_second_covers"],
        "data": {key: result["data"][key] for key in ("rows", "train_rows", "eval_rows")},
        "configurations": result["configurations"],
    }
    return settings, figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return run_worker(Path(args.worker[0]), args.worker[1], args.export_dir)
    return run_benchmark(
        args,
        "bench-trainer-",
        benchmark,
        lambda result: f"{format_table(result['configurations'])}\n\n{format_notes(result)}",
        contents="data and run directories",
        results=("trainer", results_figures),
    )


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))  # the project's packages, even without the editable install
    sys.exit(main())
