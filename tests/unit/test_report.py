"""The run report and the ML Metadata reading behind it, on a small SQLite store populated here
the way TFX records a run: what the page says, that every text is escaped, that a run without
metadata or with an unreadable artifact still gets a page, and finding a report by run id."""

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipelines.core.metadata import (
    ArtifactRecord,
    NodeArtifacts,
    NodeRecord,
    connection_config,
    find_output,
    read_run_artifacts,
)
from pipelines.core.outcome import Outcome, RunResult
from pipelines.core.paths import RunPaths
from pipelines.finish import artifacts
from pipelines.finish.report import find_report, recent_run_ids, render_report, write_report
from pipelines.spec.loading import load_spec

RUN_ID = "penguin-20261129T020000.000000Z"
OTHER_RUN_ID = "penguin-20261128T020000.000000Z"


@pytest.fixture
def paths(tmp_path):
    return RunPaths(workdir=tmp_path, spec=load_spec("penguin", env="ci").spec)


def _result(paths: RunPaths, **fields) -> RunResult:
    run_dir = paths.run_dir(fields.get("run_id", RUN_ID))
    run_dir.mkdir(parents=True, exist_ok=True)
    values = {
        "run_id": RUN_ID,
        "pipeline": "penguin",
        "outcome": Outcome.PUSHED,
        "message": "pushed",
        "run_dir": str(run_dir),
    }
    return RunResult(**{**values, **fields})


class _Recorder:
    """Writes executions, artifacts and events into an ML Metadata store as TFX does: each
    execution is attributed to its `pipeline_run` context and its `node` context
    (`<pipeline>.<node>`), and each event's path starts with the input or output key."""

    def __init__(self, store):
        self.store = store
        self.types = {}
        self.run_type = store.put_context_type(mlmd.ContextType(name="pipeline_run"))
        self.node_type = store.put_context_type(mlmd.ContextType(name="node"))
        self.execution_type = store.put_execution_type(mlmd.ExecutionType(name="Component"))
        self.nodes = {}

    def run(self, run_id: str) -> mlmd.Context:
        [context_id] = self.store.put_contexts([mlmd.Context(type_id=self.run_type, name=run_id)])
        return self.store.get_contexts_by_id([context_id])[0]

    def artifact(self, type_name: str, uri: str, **custom) -> mlmd.Artifact:
        if type_name not in self.types:
            artifact_type = mlmd.ArtifactType(name=type_name)
            if type_name == "ExampleStatistics":
                artifact_type.properties["split_names"] = mlmd.STRING
            self.types[type_name] = self.store.put_artifact_type(artifact_type)
        artifact = mlmd.Artifact(type_id=self.types[type_name], uri=uri)
        for key, value in custom.items():
            field = "int_value" if isinstance(value, int) else "string_value"
            setattr(artifact.custom_properties[key], field, value)
        if type_name == "ExampleStatistics":
            artifact.properties["split_names"].string_value = '["train", "eval"]'
        [artifact_id] = self.store.put_artifacts([artifact])
        return self.store.get_artifacts_by_id([artifact_id])[0]

    def execute(self, run, node: str, state, inputs=None, outputs=None) -> None:
        if node not in self.nodes:
            [self.nodes[node]] = self.store.put_contexts(
                [mlmd.Context(type_id=self.node_type, name=f"penguin.{node}")]
            )
        node_context = self.store.get_contexts_by_id([self.nodes[node]])[0]
        pairs = []
        for kind, linked in ((mlmd.Event.INPUT, inputs), (mlmd.Event.OUTPUT, outputs)):
            for key, artifact in (linked or {}).items():
                event = mlmd.Event(type=kind)
                event.path.steps.add().key = key
                event.path.steps.add().index = 0
                pairs.append((artifact, event))
        execution = mlmd.Execution(type_id=self.execution_type, last_known_state=state)
        self.store.put_execution(execution, pairs, [run, node_context])


def _write_statistics(uri) -> None:
    """StatisticsGen's train split: a string and a numeric column, texts a page must escape."""
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = stats.datasets.add(num_examples=3)
    island = dataset.features.add(type=statistics_pb2.FeatureNameStatistics.STRING)
    island.path.step.append("island")
    island.string_stats.common_stats.num_non_missing = 3
    island.string_stats.common_stats.tot_num_values = 3
    island.string_stats.common_stats.max_num_values = 1
    island.string_stats.unique = 2
    island.string_stats.top_values.add(value="Biscoe", frequency=2)
    island.string_stats.top_values.add(value="<Dream & co>", frequency=1)
    mass = dataset.features.add(type=statistics_pb2.FeatureNameStatistics.FLOAT)
    mass.path.step.append("body_mass_g")
    mass.num_stats.common_stats.num_non_missing = 2
    mass.num_stats.common_stats.tot_num_values = 2
    mass.num_stats.common_stats.max_num_values = 1
    mass.num_stats.mean = 4000.0
    mass.num_stats.std_dev = 250.5
    mass.num_stats.min = 3750.0
    mass.num_stats.max = 4250.0
    split = uri / "Split-train"
    split.mkdir(parents=True)
    (split / "FeatureStats.pb").write_bytes(stats.SerializeToString())


@pytest.fixture
def recorded(paths, tmp_path):
    """A pushed run in the pipeline's SQLite store: StatisticsGen, the Trainer, a cached
    Evaluator's blessing and a Pusher that failed once and then pushed version 1; plus an
    earlier run whose execution must not show in this one. Returns the artifacts by name."""
    store = metadata_store.MetadataStore(connection_config(paths.spec, paths.metadata_path))
    record = _Recorder(store)
    earlier, run = record.run(OTHER_RUN_ID), record.run(RUN_ID)
    statistics_uri = tmp_path / "pipeline_root" / "StatisticsGen" / "statistics" / "7"
    _write_statistics(statistics_uri)
    artifacts = {
        "old_model": record.artifact("Model", "/old/model"),
        "statistics": record.artifact("ExampleStatistics", str(statistics_uri)),
        "model": record.artifact("Model", "/trainer/model/9"),
        "blessing": record.artifact("ModelBlessing", "/evaluator/blessing/4", blessed=1),
        "pushed": record.artifact(
            "PushedModel",
            "/pusher/pushed_model/11",
            pushed=1,
            pushed_version="1",
            pushed_destination=str(paths.serving_dir / "1"),
            conveyor_reason="pushed version 1: <b>better</b> & newer",
        ),
    }
    complete, cached, failed = (
        mlmd.Execution.COMPLETE,
        mlmd.Execution.CACHED,
        mlmd.Execution.FAILED,
    )
    record.execute(earlier, "trainer", complete, outputs={"model": artifacts["old_model"]})
    record.execute(run, "statistics_gen", complete, outputs={"statistics": artifacts["statistics"]})
    record.execute(run, "trainer", complete, outputs={"model": artifacts["model"]})
    record.execute(
        run,
        "evaluator",
        cached,
        inputs={"model": artifacts["model"]},
        outputs={"blessing": artifacts["blessing"]},
    )
    pusher_inputs = {"model": artifacts["model"], "model_blessing": artifacts["blessing"]}
    record.execute(run, "pusher", failed, inputs=pusher_inputs)
    record.execute(
        run, "pusher", complete, inputs=pusher_inputs, outputs={"pushed_model": artifacts["pushed"]}
    )
    return store, artifacts


def test_the_run_is_read_back_node_by_node_with_its_artifacts(recorded):
    store, artifacts = recorded

    nodes = read_run_artifacts(store, RUN_ID)

    assert list(nodes) == ["statistics_gen", "trainer", "evaluator", "pusher"]
    assert [n.state for n in nodes.values()] == ["executed", "executed", "cached", "executed"]
    assert nodes["evaluator"].cached and not nodes["trainer"].cached
    pusher = nodes["pusher"]  # the retry, not the failed first execution
    assert sorted(pusher.inputs) == ["model", "model_blessing"]
    assert pusher.input("model").id == artifacts["model"].id
    assert pusher.input("baseline_model") is None
    pushed = pusher.output("pushed_model")
    assert (pushed.type_name, pushed.uri) == ("PushedModel", "/pusher/pushed_model/11")
    assert (pushed.get("pushed"), pushed.get("pushed_version")) == (1, "1")
    statistics = nodes["statistics_gen"].output("statistics")
    assert statistics.split_names() == ["train", "eval"]
    assert statistics.properties == {"split_names": '["train", "eval"]'}
    assert nodes["trainer"].output("model").id == artifacts["model"].id  # not the earlier run's
    assert find_output(nodes, "ModelBlessing") == (
        nodes["evaluator"],
        nodes["evaluator"].output("blessing"),
    )
    assert find_output(nodes, "ModelEvaluation") == (None, None)
    assert list(read_run_artifacts(store, OTHER_RUN_ID)) == ["trainer"]
    assert read_run_artifacts(store, "penguin-nope") == {}


def test_the_report_of_a_recorded_run_shows_its_artifacts_escaped(recorded, paths):
    result = _result(
        paths,
        message='Pushed <script>alert("x")</script> & more',
        pushed_version="1",
        pushed_path=str(paths.serving_dir / "1"),
        nodes=[NodeRecord("statistics_gen", "executed", 1.25), NodeRecord("pusher", "executed", 2)],
    )

    page = write_report(result, paths).read_text()

    assert "<script" not in page and "http" not in page and "<link" not in page
    assert "Pushed &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; more" in page
    assert '<span class="badge ok">PUSHED</span>' in page
    assert "ML Metadata holds no record" not in page
    # Gate decisions: the cached Evaluator's blessing and the retried Pusher's push.
    assert '<td>data gate</td><td><span class="badge none">not run</span></td>' in page
    assert (
        "blessed</span> with no baseline (value thresholds only) (cached evaluation of an "
        "earlier run)</td>"
    ) in page
    assert '<td>push</td><td><span class="badge ok">pushed version 1</span></td>' in page
    assert '<td>pusher</td><td>executed</td><td class="num">2.0</td>' in page
    # Statistics: the recorded splits, one without a file; numbers and top values per column.
    assert "Split train: 3 examples</h3>" in page
    assert "Split eval: no statistics file." in page
    assert (
        '<td>body_mass_g</td><td>FLOAT</td><td class="num">2</td><td class="num">33.3%</td>'
        '<td class="num">4000</td><td class="num">250.5</td>'
    ) in page
    assert "<td>Biscoe (2), &lt;Dream &amp; co&gt; (1)</td>" in page
    # No Evaluator output and no gate findings: said, not guessed.
    assert "No evaluation: the pipeline has no Evaluator or it did not run." in page
    assert "ExampleValidator did not run: the data was not checked." in page
    # The push, with the Pusher's own reason escaped.
    assert "<td>version</td><td>1</td>" in page
    assert f"<td>destination</td><td>{paths.serving_dir / '1'}</td>" in page
    assert "<td>reason</td><td>pushed version 1: &lt;b&gt;better&lt;/b&gt; &amp; newer</td>" in page


def test_a_blocked_run_without_metadata_still_gets_a_report(paths):
    result = _result(
        paths,
        outcome=Outcome.BLOCKED,
        message="Data gate: <island> has 'Atlantis' & more",
        nodes=[NodeRecord("data_gate", "failed", 0.01)],
        night="2026-11-28",
        span=3,
        data_gate={
            "passed": False,
            "anomalies": [{"column": "island", "split": "train", "description": "<new value>"}],
            "drift": [
                {
                    "column": "body_mass_g",
                    "measure": "jensen_shannon_divergence",
                    "distance": 0.31,
                    "threshold": 0.1,
                    "breached": True,
                    "against": "span 2",
                }
            ],
            "skew": [],
        },
    )

    report = write_report(result, paths)

    assert report == paths.run_dir(RUN_ID) / "report.html"
    page = report.read_text()
    assert '<span class="badge bad">BLOCKED</span>' in page
    assert "Data gate: &lt;island&gt; has &#39;Atlantis&#39; &amp; more" in page
    assert "<new value>" not in page and "<td>&lt;new value&gt;</td>" in page
    assert (
        '<td>body_mass_g</td><td>jensen_shannon_divergence</td><td class="num">0.31</td>'
        '<td class="num">0.1</td><td><span class="badge bad">breached</span></td>'
    ) in page
    assert '<h3>Training/serving skew</h3>\n<p class="note">not checked</p>' in page
    assert "ML Metadata holds no record of this run" in page
    assert "No evaluation: the run was blocked at the data gate, before training." in page
    assert "The Pusher did not run: serving is unchanged." in page
    assert "<td>night</td><td>2026-11-28</td>" in page
    assert not list(report.parent.glob("*.partial"))


def test_an_unreadable_artifact_costs_its_section_only(paths, tmp_path):
    broken = tmp_path / "statistics"
    (broken / "Split-train").mkdir(parents=True)
    (broken / "Split-train" / "FeatureStats.pb").write_bytes(b"\xff not a proto")
    statistics = ArtifactRecord(1, "ExampleStatistics", str(broken))
    nodes = {"statistics_gen": NodeArtifacts("statistics_gen", "executed", {}, {"x": [statistics]})}
    result = _result(paths, outcome=Outcome.NOT_PUSHED, message="kept version 3")

    page = render_report(result, paths, nodes)

    assert '<span class="badge warn">NOT PUSHED</span> kept version 3' in page
    assert '<p class="note">This section could not be written: Error parsing message' in page
    assert "<h2>Data statistics</h2>" not in page
    assert "<h2>Push</h2>" in page and "<h2>Gate decisions</h2>" in page


def test_an_evaluation_names_its_models_and_a_damaged_one_is_said_so(paths, monkeypatch):
    def damaged(uri):
        raise ValueError(f"{uri}: <truncated> & unreadable")

    monkeypatch.setattr(artifacts, "load_evaluation", damaged)
    evaluator = NodeArtifacts(
        "evaluator",
        "cached",
        inputs={
            "model": [ArtifactRecord(4, "Model", "/trainer/model/4")],
            "baseline_model": [ArtifactRecord(3, "Model", "/trainer/model/3")],
        },
        outputs={"evaluation": [ArtifactRecord(5, "ModelEvaluation", "/evaluator/evaluation/5")]},
    )
    result = _result(paths, outcome=Outcome.NOT_PUSHED, message="kept version 1")

    page = render_report(result, paths, {"evaluator": evaluator})

    assert (
        '<p class="note">candidate model: artifact 4; baseline (the served model): artifact 3; '
        "cached: the evaluation of an earlier run of the same model and data.</p>"
    ) in page
    assert (
        "Could not read /evaluator/evaluation/5: /evaluator/evaluation/5: &lt;truncated&gt; "
        "&amp; unreadable</p>"
    ) in page
    assert "No evaluation" not in page


def test_reports_are_found_by_run_id_and_recent_runs_listed_newest_first(tmp_path):
    older = tmp_path / "runs" / "taxi" / "taxi-20261128T020000.000000Z"
    newer = tmp_path / "runs" / "penguin" / "penguin-20261129T020000.000000Z"
    for run_dir in (older, newer):
        run_dir.mkdir(parents=True)
    (newer / "report.html").write_text("<html></html>")
    assert find_report(tmp_path, newer.name) == newer / "report.html"
    assert find_report(tmp_path, older.name) is None  # a run from before reports existed
    assert find_report(tmp_path, "penguin-nope") is None
    assert recent_run_ids(tmp_path) == [newer.name, older.name]
