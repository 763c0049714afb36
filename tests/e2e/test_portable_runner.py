"""The `portable` profile: every Beam stage of a run through Beam's PortableRunner, against
Beam's own job service, with SDK workers in separate processes started by a worker pool
(tests/beam_portable.py), reading and writing the S3 emulator's bucket. The pre-flight a team
runs before paying for Dataflow, Flink or Spark (docs/data-at-scale.md).

One stack for the module; on it, one taxi night whole (ci sizes), also run with the DirectRunner
in memory in the same profile (only `runtime.beam_args` differ), and compared. Taxi rather than
penguin: the same Beam stages (ExampleGen, StatisticsGen, the Evaluator) on nine times the rows,
a dated span folder listed in the bucket and sliced metrics; penguin's own bucket runs are
tests/e2e/test_bucket_run.py's.

- every Beam stage ran in a worker process that registered s3:// through the plugin the profile
  names, and the run's outputs are in the bucket only;
- the same examples in the same splits, record for record;
- the same statistics (means and deviations up to the order of addition);
- the same evaluation: every metric of every slice, and the same validation;
- Conveyor's own Beam stage, the Arrow reader's work units (Beam work only beyond 64 MiB of
  input, so called here with small units), read the bucket and write it through TensorFlow in
  the workers, which only the plugin's s3:// lets them do, and write what one process writes.
"""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format

from pipelines.core import storage
from pipelines.core.paths import FRAMEWORK_ROOT
from pipelines.spec.loading import load_spec
from pipelines.spec.models import parse_beam_args
from tests.beam_portable import WORKER_PLUGIN, PortableBeam, portable_beam
from tests.conftest import assert_same_up_to_float_sums
from tests.storage_emulators import S3_BUCKET

pytestmark = pytest.mark.e2e

RUN_SECONDS = 600
DIRECT_IN_MEMORY = 'runtime.beam_args=["--direct_running_mode=in_memory", "--direct_num_workers=1"]'
TAXI_NIGHT = "2026-11-28"
# The stages that run on Beam, one Beam job (and one SDK worker) each.
BEAM_STAGES = ("csv_example_gen", "statistics_gen", "evaluator")


def _portable_args(stack: PortableBeam) -> list[str]:
    """The `portable` profile's own Beam arguments, with its endpoints pointed at `stack`."""
    profile = yaml.safe_load((FRAMEWORK_ROOT / "pipelines/profiles/portable.yaml").read_text())
    endpoints = {"job_endpoint": stack.job_endpoint, "environment_config": stack.worker_pool}
    args = []
    for arg in profile["runtime"]["beam_args"]:
        key = arg[2:].partition("=")[0]
        args.append(f"--{key}={endpoints[key]}" if key in endpoints else arg)
    return args


def _beam_args_override(args: list[str]) -> str:
    return "runtime.beam_args=[" + ", ".join(f'"{arg}"' for arg in args) + "]"


@dataclass
class Run:
    """One `conveyor run` on a workdir in the bucket."""

    pipeline: str
    workdir: str
    process: subprocess.CompletedProcess
    state_dir: Path

    @property
    def root(self) -> str:
        return f"{self.workdir}/pipeline_root/{self.pipeline}"

    def out(self) -> str:
        output = f"{self.process.stdout[-3000:]}\n{self.process.stderr[-3000:]}"
        return f"exit {self.process.returncode}\n{output}"


def _conveyor(argv: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *argv],
        cwd=FRAMEWORK_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )


def _run(spec: str, pipeline: str, label: str, overrides: list[str], data: list[str],
         emulators, tmp: Path) -> Run:  # fmt: skip
    """`conveyor data` then `conveyor run` of `spec` under the `portable` profile, in a workdir
    of its own in the bucket, with only the metadata and lock local."""
    workdir = f"s3://{S3_BUCKET}/{pipeline}-{label}-{uuid.uuid4().hex[:8]}"
    state_dir = tmp / f"{pipeline}-{label}-state"
    environ = {**emulators.environment(), "CONVEYOR_STATE_DIR": str(state_dir)}
    bucket = ["--workdir", workdir, *emulators.s3_settings()]
    prepared = _conveyor(["data", pipeline, "--profile", "ci", *bucket, *data], environ)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    sets = [arg for override in overrides for arg in ("--set", override)]
    process = _conveyor(["run", spec, "--profile", "portable", *bucket, *sets, *data], environ)
    return Run(pipeline, workdir, process, state_dir)


@pytest.fixture(scope="module")
def stack(storage_emulators, tmp_path_factory):
    """Beam's job service and worker pool, with the bucket's endpoint and credentials."""
    with portable_beam(storage_emulators.environment(), tmp_path_factory.mktemp("beam")) as beam:
        yield beam


@dataclass
class Runs:
    """The module's runs by (pipeline, "portable" or "direct"), and the SDK workers they had."""

    by_key: dict[tuple[str, str], Run]
    worker_pids: set[int]  # those that logged the plugin's registration
    workers_started: int  # as the pool counts them

    def __getitem__(self, key: tuple[str, str]) -> Run:
        return self.by_key[key]


@pytest.fixture(scope="module")
def runs(stack, storage_emulators, tmp_path_factory) -> Runs:
    tmp = tmp_path_factory.mktemp("portable-runs")
    portable = [_beam_args_override(_portable_args(stack))]
    taxi_night = ["--date", TAXI_NIGHT]
    found = {}
    for label, beam in (("portable", portable), ("direct", [DIRECT_IN_MEMORY])):
        found["taxi", label] = _run("taxi", "taxi", label, beam, taxi_night, storage_emulators, tmp)
    started = stack.log("worker_pool").count("Starting worker with command")
    return Runs(found, stack.worker_pids(), started)


def _states(run: Run) -> dict[str, str]:
    """{node: state} from the run's table (`  node   state   seconds`)."""
    states = {}
    for line in run.process.stdout.splitlines():
        parts = line.split()
        if line.startswith("  ") and len(parts) == 3 and parts[0] != "pipeline":
            states[parts[0]] = parts[1]
    return states


def test_the_profile_is_the_portable_runner_with_external_workers_and_the_plugin(stack):
    loaded = load_spec("penguin", env="portable")
    options = parse_beam_args(loaded.spec.runtime.beam_args)
    assert loaded.spec.runtime.beam_runner == "PortableRunner"
    assert options["environment_type"] == ["EXTERNAL"]
    assert options["beam_plugins"] == [WORKER_PLUGIN]
    pointed = load_spec(
        "penguin", env="portable", overrides=[_beam_args_override(_portable_args(stack))]
    )
    assert parse_beam_args(pointed.spec.runtime.beam_args)["job_endpoint"] == [stack.job_endpoint]


def test_both_runs_succeed_and_every_beam_stage_ran_in_a_worker_process(runs, stack):
    for label in ("portable", "direct"):
        run = runs["taxi", label]
        assert run.process.returncode == 0, run.out()
        states = _states(run)
        assert all(states.get(stage) == "executed" for stage in BEAM_STAGES), run.out()
    assert "PUSHED: " in runs["taxi", "portable"].process.stdout
    # One SDK worker per Beam job, each a process of its own that imported the plugin.
    jobs = len(BEAM_STAGES)
    table = "\n".join(run.process.stdout for run in runs.by_key.values())
    assert len(runs.worker_pids) == runs.workers_started == jobs, table
    # ... and exited cleanly: tensorflow-io's S3 plugin aborts a process at exit once used
    # (tensorflow/io#2039), which the plugin's registration prevents (docs/storage.md).
    assert "pure virtual method called" not in stack.log("worker_pool")


def test_the_portable_runs_outputs_are_in_the_bucket_only(runs):
    run = runs["taxi", "portable"]
    assert storage.glob(f"{run.root}/statistics_gen/statistics/*/Split-*/FeatureStats.pb")
    local = [str(p.relative_to(run.state_dir)) for p in run.state_dir.rglob("*")]
    assert not [name for name in local if "pipeline_root" in name], local
    assert storage.glob(f"{run.root}/evaluator/evaluation/*/metrics*")


def _tfrecords(data: bytes) -> list[bytes]:
    """The records of one TFRecord file's bytes (length, its CRC, record, its CRC)."""
    records, at = [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        records.append(data[at + 12 : at + 12 + length])
        at += 12 + length + 4
    return records


def _examples(run: Run) -> dict[str, list[bytes]]:
    return _examples_under(f"{run.root}/csv_example_gen/examples/*")


def _examples_under(folder: str) -> dict[str, list[bytes]]:
    """{split: its tf.Examples in a canonical serialisation, sorted}."""
    from tensorflow.core.example import example_pb2

    found: dict[str, list[bytes]] = {}
    for path in storage.glob(f"{folder}/Split-*/*.gz"):
        split = path.split("/")[-2]
        for record in _tfrecords(gzip.decompress(storage.read_bytes(path))):
            example = example_pb2.Example.FromString(record)
            found.setdefault(split, []).append(example.SerializeToString(deterministic=True))
    return {split: sorted(records) for split, records in found.items()}


def test_the_examples_are_the_direct_runners(runs):
    portable = _examples(runs["taxi", "portable"])
    direct = _examples(runs["taxi", "direct"])
    assert sorted(direct) == ["Split-eval", "Split-train"]
    assert {s: len(r) for s, r in portable.items()} == {s: len(r) for s, r in direct.items()}
    assert portable == direct
    assert sum(len(records) for records in direct.values()) == 3000  # ci's rows of the sample


def _statistics(run: Run) -> dict[str, dict]:
    from tensorflow_metadata.proto.v0 import statistics_pb2

    found = {}
    pattern = f"{run.root}/statistics_gen/statistics/*/Split-*/FeatureStats.pb"
    for path in storage.glob(pattern):
        stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(storage.read_bytes(path))
        dataset = json_format.MessageToDict(stats)["datasets"][0]
        # Features come in the order the workers finished them: key them by column.
        dataset["features"] = {"/".join(f["path"]["step"]): f for f in dataset["features"]}
        found[path.split("/")[-2]] = dataset
    return found


def test_the_statistics_are_the_direct_runners(runs):
    portable = _statistics(runs["taxi", "portable"])
    direct = _statistics(runs["taxi", "direct"])
    assert sorted(direct) == ["Split-eval", "Split-train"]
    assert_same_up_to_float_sums(portable, direct)


def _evaluation(run: Run) -> tuple[dict[str, dict], dict]:
    """({slice: metrics}, validation) of the run's Evaluator output, read from the bucket."""
    from pipelines.finish.artifacts import load_evaluation

    storage.register_tensorflow_filesystems()
    (uri,) = {path.rsplit("/", 1)[0] for path in
              storage.glob(f"{run.root}/evaluator/evaluation/*/metrics*")}  # fmt: skip
    metrics, validation = load_evaluation(uri)
    by_slice = {}
    for per_slice in metrics:
        found = json_format.MessageToDict(per_slice)
        by_slice[json.dumps(found.pop("sliceKey", {}), sort_keys=True)] = found
    return by_slice, json_format.MessageToDict(validation)


def test_the_evaluation_is_the_direct_runners(runs):
    portable, portable_validation = _evaluation(runs["taxi", "portable"])
    direct, direct_validation = _evaluation(runs["taxi", "direct"])
    assert len(direct) > 1  # the whole set and each payment type
    assert_same_up_to_float_sums(portable, direct, "metrics")
    assert portable_validation == direct_validation
    assert direct_validation["validationOk"] is True


def test_the_arrow_readers_work_units_run_in_the_workers_on_the_bucket(stack, tmp_path):
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from components.arrow_example_gen import executor, splits
    from pipelines.datasets import taxi

    base = f"s3://{S3_BUCKET}/arrow-{uuid.uuid4().hex[:8]}"
    taxi.write_rows(5_000, tmp_path / "a.csv", seed=3)
    storage.write_bytes(f"{base}/span/a.csv", (tmp_path / "a.csv").read_bytes())
    options = PipelineOptions(_portable_args(stack))
    FileSystems.set_options(options)  # Beam's S3 filesystem outside a pipeline needs options
    storage.register_tensorflow_filesystems()  # this process writes the in-process read
    paths = splits.matching_files(f"{base}/span", "*.csv")

    def read(out: str, make_pipeline=None) -> executor.Reading:
        return executor.read_csv_splits(
            paths,
            [f"{out}/Split-{name}" for name in ("train", "eval")],
            [2, 1],
            None,
            skip_bad_rows=False,
            columnar_dirs=[f"{out}/columnar/Split-{name}" for name in ("train", "eval")],
            make_pipeline=make_pipeline,
            unit_bytes=128 << 10,  # about five units of these 5,000 rows
        )

    workers_before = stack.worker_pids()
    in_process = read(f"{base}/in-process")
    spread = read(f"{base}/spread", lambda: beam.Pipeline(options=options))
    processes = {report.process for report in spread.units}
    assert len(spread.units) >= 3
    assert processes and processes <= stack.worker_pids() - workers_before, processes
    assert spread.counts == in_process.counts and sum(spread.counts) == 5_000
    assert _examples_under(f"{base}/spread") == _examples_under(f"{base}/in-process")
    assert storage.glob(f"{base}/spread/columnar/Split-train/*.parquet")
