"""A finished run's Prometheus metrics (pipelines/finish/metrics.py), from a RunResult and a small
SQLite ML Metadata store written here the way TFX records a run: what the node-exporter
textfile holds (parsed with prometheus_client's own parser), what a real Pushgateway
(Debian's `prometheus-pushgateway`, on 127.0.0.1) serves after a push, that a push replaces the
pipeline's group, and that a sink that fails is a warning which never shows the URL."""

import importlib.util
import socket
import sys
import urllib.request
from pathlib import Path

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipelines.core.metadata import NodeRecord, connection_config
from pipelines.core.outcome import Outcome, Reason, RunResult
from pipelines.core.paths import RunPaths
from pipelines.finish import artifacts, metrics
from pipelines.finish.contract import RunFacts, Stop, finish_run
from pipelines.spec.loading import LoadedSpec, load_spec
from tests.conftest import running_pushgateway

RUN_ID = "penguin-20261129T020000.000000Z"
EARLIER_RUN_ID = "penguin-20261128T020000.000000Z"
URL_ENV = "CONVEYOR_TEST_PUSHGATEWAY"
FINDINGS = {
    "passed": False,
    "anomalies": [
        {"column": "body_mass_g", "split": "train", "description": "Unexpected data type"},
        {"column": "island", "split": "train", "description": "Unexpected string values"},
        {"column": "island", "split": "eval", "description": "Unexpected string values"},
    ],
    "drift": [
        {
            "column": "island",
            "measure": "L-infinity",
            "distance": 0.31,
            "threshold": 0.2,
            "breached": True,
            "against": EARLIER_RUN_ID,
        }
    ],
    "skew": [],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def paths(tmp_path) -> RunPaths:
    overrides = [
        "runtime.metrics.textfile_dir=textfile",
        f"runtime.metrics.pushgateway_url_env={URL_ENV}",
    ]
    spec = load_spec("penguin", env="ci", overrides=overrides).spec
    return RunPaths(workdir=tmp_path.resolve(), spec=spec)


def _statistics(uri: Path, rows: dict[str, int]) -> None:
    for split, count in rows.items():
        statistics = statistics_pb2.DatasetFeatureStatisticsList()
        statistics.datasets.add(num_examples=count)
        (uri / f"Split-{split}").mkdir(parents=True)
        (uri / f"Split-{split}" / "FeatureStats.pb").write_bytes(statistics.SerializeToString())


class Recorder:
    """Writes runs into a SQLite ML Metadata store as TFX does: each execution attributed to
    the `pipeline`, its `pipeline_run` and its `node` context, each output event keyed."""

    def __init__(self, paths: RunPaths):
        self.store = metadata_store.MetadataStore(
            connection_config(paths.spec, paths.metadata_path)
        )
        self.context_types = {
            name: self.store.put_context_type(mlmd.ContextType(name=name))
            for name in ("pipeline", "pipeline_run", "node")
        }
        self.execution_type = self.store.put_execution_type(mlmd.ExecutionType(name="Component"))
        self.pipeline = self.context("pipeline", "penguin")
        self.nodes: dict[str, mlmd.Context] = {}

    def context(self, kind: str, name: str) -> mlmd.Context:
        [found] = self.store.put_contexts(
            [mlmd.Context(type_id=self.context_types[kind], name=name)]
        )
        return self.store.get_contexts_by_id([found])[0]

    def artifact(self, type_name: str, uri: str, **values) -> mlmd.Artifact:
        artifact_type = mlmd.ArtifactType(name=type_name)
        artifact_type.properties["split_names"] = mlmd.STRING
        made = mlmd.Artifact(type_id=self.store.put_artifact_type(artifact_type), uri=uri)
        for key, value in values.items():
            field = "int_value" if isinstance(value, int) else "string_value"
            target = made.properties if key == "split_names" else made.custom_properties
            setattr(target[key], field, value)
        return made

    def execute(self, run: mlmd.Context, node: str, state, outputs: dict | None = None) -> None:
        if node not in self.nodes:
            self.nodes[node] = self.context("node", f"penguin.{node}")
        pairs = []
        for key, made in (outputs or {}).items():
            event = mlmd.Event(type=mlmd.Event.OUTPUT)
            event.path.steps.add().key = key
            pairs.append((made, event))
        execution = mlmd.Execution(type_id=self.execution_type, last_known_state=state)
        self.store.put_execution(execution, pairs, [self.pipeline, run, self.nodes[node]])


@pytest.fixture
def recorded(paths) -> tuple[Recorder, mlmd.Context]:
    """The store after two runs: an earlier one pushed version 4; this one (RUN_ID) computed
    statistics of 230 train and 114 eval rows and was blocked at the data gate. Returns the
    recorder and this run's context."""
    record = Recorder(paths)
    earlier, run = (
        record.context("pipeline_run", EARLIER_RUN_ID),
        record.context("pipeline_run", RUN_ID),
    )
    pushed = record.artifact("PushedModel", "/pusher/pushed_model/3", pushed=1, pushed_version="4")
    record.execute(earlier, "pusher", mlmd.Execution.COMPLETE, {"pushed_model": pushed})
    uri = paths.pipeline_root / "statistics_gen" / "statistics" / "7"
    _statistics(uri, {"train": 230, "eval": 114})
    statistics = record.artifact("ExampleStatistics", str(uri), split_names='["train", "eval"]')
    record.execute(run, "statistics_gen", mlmd.Execution.COMPLETE, {"statistics": statistics})
    record.execute(run, "data_gate", mlmd.Execution.FAILED)
    return record, run


def _blocked(paths: RunPaths, findings: dict = FINDINGS) -> RunResult:
    return RunResult(
        run_id=RUN_ID,
        pipeline="penguin",
        outcome=Outcome.BLOCKED,
        message="Data gate: ...",
        reason=Reason.DATA_GATE_BLOCKED,
        nodes=[
            NodeRecord("csv_example_gen", "cached", 0.4),
            NodeRecord("statistics_gen", "executed", 3.25),
            NodeRecord("data_gate", "failed", 1.5),
        ],
        run_dir=str(paths.run_dir(RUN_ID)),
        span=20785,
        data_gate=findings,
        pipeline_seconds=6.5,
    )


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    """(name, labels) -> value of every sample in Prometheus' text format."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples, name: str, **labels) -> float:
    return samples[(name, frozenset({"pipeline": "penguin", **labels}.items()))]


def test_a_blocked_run_writes_its_metrics_to_the_textfile(paths, recorded, monkeypatch):
    monkeypatch.delenv(URL_ENV, raising=False)
    lines: list[str] = []

    metrics.export_run_metrics(_blocked(paths), paths, lines.append)

    textfile = paths.workdir / "textfile" / "penguin.prom"
    assert lines == [f"metrics: {textfile}"]
    assert [p.name for p in textfile.parent.iterdir()] == ["penguin.prom"]  # no temporary left
    samples = _samples(textfile.read_text())
    assert _value(samples, "conveyor_run_outcome", outcome="blocked") == 1
    assert _value(samples, "conveyor_run_outcome", outcome="pushed") == 0
    # The reason code, one series per code: 1 for this run's, 0 for the others.
    reasons = {
        dict(labels)["reason"]: value
        for (name, labels), value in samples.items()
        if name == "conveyor_run_reason"
    }
    assert reasons == {reason.value: float(reason is Reason.DATA_GATE_BLOCKED) for reason in Reason}
    assert _value(samples, "conveyor_run_duration_seconds") == 6.5
    assert _value(samples, "conveyor_run_span") == 20785
    assert (
        _value(samples, "conveyor_component_duration_seconds", component="statistics_gen") == 3.25
    )
    assert _value(samples, "conveyor_component_cached", component="csv_example_gen") == 1
    assert _value(samples, "conveyor_component_cached", component="data_gate") == 0
    assert _value(samples, "conveyor_data_rows", split="train") == 230
    assert _value(samples, "conveyor_data_rows", split="eval") == 114
    assert _value(samples, "conveyor_data_anomalies", split="train") == 2
    assert _value(samples, "conveyor_data_anomalies", split="eval") == 1
    drift = {"column": "island", "measure": "L-infinity"}
    assert _value(samples, "conveyor_data_drift_distance", **drift) == 0.31
    assert _value(samples, "conveyor_data_drift_threshold", **drift) == 0.2
    # The push of an earlier run: still the pipeline's last push, with its time.
    assert _value(samples, "conveyor_model_pushed_version") == 4
    [push] = recorded[0].store.get_artifacts_by_type("PushedModel")
    pushed_at = push.create_time_since_epoch / 1000  # ML Metadata's clock, in milliseconds
    assert _value(samples, "conveyor_model_last_push_timestamp_seconds") == pushed_at
    # The spec's floor: penguin's SparseCategoricalAccuracy >= 0.8.
    assert (
        _value(samples, "conveyor_evaluation_lower_bound", metric="sparse_categorical_accuracy")
        == 0.8
    )
    # Blocked before training: no evaluation, no blessing, no skew was measured.
    names = {name for name, _ in samples}
    assert not names & {
        "conveyor_evaluation_metric",
        "conveyor_model_blessed",
        "conveyor_data_skew_distance",
    }
    assert names <= metrics.run_metric_names()
    # No run id, night or version in any label: they are values, not series.
    label_values = {value for _, labels in samples for _, value in labels}
    assert not {RUN_ID, EARLIER_RUN_ID, "20785", "4"} & label_values


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory):
    """A real Pushgateway on 127.0.0.1 on a free port; yields its URL."""
    with running_pushgateway(tmp_path_factory.mktemp("pushgateway")) as url:
        yield url


def _pushed(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        samples = _samples(response.read().decode())
    return {k: v for k, v in samples.items() if k[0].startswith("conveyor_")}


def test_a_run_pushes_its_group_and_the_next_run_replaces_it(
    paths, recorded, pushgateway, monkeypatch
):
    monkeypatch.setenv(URL_ENV, pushgateway)
    lines: list[str] = []

    metrics.export_run_metrics(_blocked(paths), paths, lines.append)

    assert lines[-1] == f"metrics: pushed to the Pushgateway in ${URL_ENV}"
    samples = _pushed(pushgateway)
    group = {"job": "conveyor", "instance": ""}
    blocked = frozenset({"pipeline": "penguin", "outcome": "blocked", **group}.items())
    assert samples[("conveyor_run_outcome", blocked)] == 1
    drift = frozenset(
        {"pipeline": "penguin", "column": "island", "measure": "L-infinity", **group}.items()
    )
    assert samples[("conveyor_data_drift_distance", drift)] == 0.31

    # The next night passes the gate with no drift: the island series is gone, not stale.
    passed = {"passed": True, "anomalies": [], "drift": [], "skew": []}
    metrics.export_run_metrics(_blocked(paths, passed), paths, lines.append)
    samples = _pushed(pushgateway)
    assert ("conveyor_data_drift_distance", drift) not in samples
    train = frozenset({"pipeline": "penguin", "split": "train", **group}.items())
    assert samples[("conveyor_data_anomalies", train)] == 0


def test_an_unreachable_pushgateway_is_a_warning_that_never_shows_its_url(
    paths, recorded, monkeypatch
):
    secret = f"http://user:s3cret@127.0.0.1:{_free_port()}/"
    monkeypatch.setenv(URL_ENV, secret)
    lines: list[str] = []
    blocked = _blocked(paths)
    stop = Stop(Reason.DATA_GATE_BLOCKED, blocked.message, blocked.data_gate)
    facts = RunFacts(LoadedSpec(paths.spec, "ci", ("test",)), paths, RUN_ID, stop=stop)

    result = finish_run(facts, lines.append)  # the run finishes: nothing raised

    [warning] = [line for line in lines if "Pushgateway" in line]
    assert warning.startswith(f"warning: metrics not pushed to the Pushgateway in ${URL_ENV}: ")
    assert "s3cret" not in "\n".join(lines)
    assert (paths.workdir / "textfile" / "penguin.prom").is_file()  # the other sink still wrote
    assert result.outcome == Outcome.BLOCKED


def test_a_spec_without_sinks_reads_and_writes_nothing(tmp_path):
    spec = load_spec("penguin", env="ci").spec
    paths = RunPaths(workdir=tmp_path, spec=spec)
    assert metrics.export_run_metrics(_blocked(paths), paths, print) is None
    assert list(tmp_path.iterdir()) == []


def _metrics_for_slice_pb2():
    """TFMA's MetricsForSlice protos, loaded from their file without importing TFMA's package
    (which imports TensorFlow: 20 s), under their own module name, so that a later `import
    tensorflow_model_analysis` reuses this module rather than registering the protos twice."""
    name = "tensorflow_model_analysis.proto.metrics_for_slice_pb2"
    if name not in sys.modules:
        [root] = importlib.util.find_spec("tensorflow_model_analysis").submodule_search_locations
        spec = importlib.util.spec_from_file_location(
            name, Path(root) / "proto" / "metrics_for_slice_pb2.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_the_evaluation_is_exported_per_slice_for_candidate_and_baseline(
    paths, recorded, monkeypatch
):
    pb2 = _metrics_for_slice_pb2()

    def per_slice(slice_keys: dict, values: dict):
        found = pb2.MetricsForSlice()
        for column, value in slice_keys.items():
            found.slice_key.single_slice_keys.add(column=column, bytes_value=value)
        for (name, model, is_diff), number in values.items():
            item = found.metric_keys_and_values.add()
            item.key.name, item.key.model_name, item.key.is_diff = name, model, is_diff
            item.value.double_value.value = number
        return found

    accuracy = "sparse_categorical_accuracy"
    overall = {
        (accuracy, "candidate", False): 0.97,
        (accuracy, "baseline", False): 0.95,
        (accuracy, "candidate", True): 0.02,  # the difference: not a sample of its own
    }
    evaluation = [
        per_slice({}, overall),
        per_slice({"island": b"Biscoe"}, {(accuracy, "candidate", False): 0.99}),
    ]
    # TFMA's reader of the Evaluator's files, on real protos (reading them needs TensorFlow).
    read = []
    monkeypatch.setattr(
        artifacts, "load_evaluation", lambda uri: (read.append(uri), (evaluation, None))[1]
    )
    record, run = recorded
    record.execute(
        run,
        "evaluator",
        mlmd.Execution.COMPLETE,
        {
            "evaluation": record.artifact("ModelEvaluation", "/evaluator/evaluation/5"),
            "blessing": record.artifact("ModelBlessing", "/evaluator/blessing/6", blessed=1),
        },
    )
    result = _blocked(paths)
    result.outcome = Outcome.NOT_PUSHED

    samples = _samples(generate_latest(metrics.collect_run_metrics(result, paths)).decode())

    assert read == ["/evaluator/evaluation/5"]
    evaluated = {
        (labels["metric"], labels["slice"], labels["model"]): value
        for (name, label_set), value in samples.items()
        if name == "conveyor_evaluation_metric"
        for labels in [dict(label_set)]
    }
    assert evaluated == {
        (accuracy, "overall", "candidate"): 0.97,
        (accuracy, "overall", "baseline"): 0.95,
        (accuracy, "island=Biscoe", "candidate"): 0.99,
    }
    assert _value(samples, "conveyor_model_blessed") == 1
