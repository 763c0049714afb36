"""The pipeline's history page from a synthetic ML Metadata store of 100 nights, recorded through
ml_metadata's API the way TFX records runs (a `pipeline_run` and a `node` context per
execution, OUTPUT events keyed by output name), with the files the runs leave beside it
(statistics, the data gate's findings, some runs' summary.json): what the page says, how fast
it is read and drawn, and `conveyor report NAME --history`."""

import datetime
import json
import re
from pathlib import Path

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipelines import cli
from pipelines.core.metadata import connection_config, run_history
from pipelines.core.paths import RunPaths
from pipelines.ops import history
from pipelines.spec.loading import load_spec

NIGHTS = 100
FIRST_NIGHT = datetime.date(2026, 8, 1)
EPOCH = datetime.date(1970, 1, 1)


def _run_id(night: int) -> str:
    return f"taxi-{(FIRST_NIGHT + datetime.timedelta(days=night)):%Y%m%d}T020000.000000Z"


def _outcome_of(night: int) -> str:
    """Every 10th night blocked at the data gate, every 7th failing in the Trainer, every 3rd
    not pushed, the others pushed."""
    if night % 10 == 9:
        return "blocked"
    if night % 7 == 6:
        return "failed"
    return "not_pushed" if night % 3 == 2 else "pushed"


class _Store:
    """Records runs into a SQLite ML Metadata store as TFX does."""

    def __init__(self, paths: RunPaths):
        self.store = metadata_store.MetadataStore(
            connection_config(paths.spec, paths.metadata_path)
        )
        self.root = paths.workdir / "pipeline_root"
        self.run_type = self.store.put_context_type(mlmd.ContextType(name="pipeline_run"))
        self.node_type = self.store.put_context_type(mlmd.ContextType(name="node"))
        self.execution_type = self.store.put_execution_type(mlmd.ExecutionType(name="Component"))
        self.types: dict[str, int] = {}
        self.nodes: dict[str, mlmd.Context] = {}
        self.ids = iter(range(1, 10**6))

    def artifact(self, type_name: str, **custom) -> mlmd.Artifact:
        if type_name not in self.types:
            self.types[type_name] = self.store.put_artifact_type(mlmd.ArtifactType(name=type_name))
        uri = self.root / type_name / str(next(self.ids))
        uri.mkdir(parents=True)
        artifact = mlmd.Artifact(type_id=self.types[type_name], uri=str(uri))
        for key, value in custom.items():
            kind = {int: "int_value", float: "double_value"}.get(type(value), "string_value")
            setattr(artifact.custom_properties[key], kind, value)
        [artifact.id] = self.store.put_artifacts([artifact])
        return artifact

    def execute(self, run, node: str, state, outputs=None) -> None:
        if node not in self.nodes:
            context = mlmd.Context(type_id=self.node_type, name=f"taxi.{node}")
            [context.id] = self.store.put_contexts([context])
            self.nodes[node] = context
        pairs = []
        for key, artifact in (outputs or {}).items():
            event = mlmd.Event(type=mlmd.Event.OUTPUT)
            event.path.steps.add().key = key
            pairs.append((artifact, event))
        execution = mlmd.Execution(type_id=self.execution_type, last_known_state=state)
        # MLMD stamps the times itself: these nodes take no time; summaries say how long runs did.
        self.store.put_execution(execution, pairs, [run, self.nodes[node]])


def _statistics(uri, rows: int) -> None:
    for split, share in (("train", 0.7), ("eval", 0.3)):
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        stats.datasets.add(num_examples=int(rows * share))
        folder = uri / f"Split-{split}"
        folder.mkdir()
        (folder / "FeatureStats.pb").write_bytes(stats.SerializeToString())


def _findings(night: int, passed: bool) -> dict:
    return {
        "passed": passed,
        "anomalies": [],
        "drift": [
            {
                "column": "fare",
                "measure": "jensen_shannon_divergence",
                "distance": 0.05 + 0.001 * night + (0.3 if not passed else 0.0),
                "threshold": 0.2,
                "breached": not passed,
                "against": "the night before",
            },
            {
                "column": "payment_type",
                "measure": "l_infinity",
                "distance": 0.02,
                "threshold": 0.1,
                "breached": False,
                "against": "the night before",
            },
        ],  # fmt: skip
        "skew": [],
    }


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """100 nights of the taxi pipeline in ML Metadata, with their files; the summaries of the
    even nights and the blocked ones but night 9 only (a run whose folder is gone is read from
    ML Metadata alone)."""
    workdir = tmp_path_factory.mktemp("history")
    paths = RunPaths(workdir=workdir, spec=load_spec("taxi", env="ci", workdir=workdir).spec)
    store = _Store(paths)
    complete, failed = mlmd.Execution.COMPLETE, mlmd.Execution.FAILED
    version = 0
    for night in range(NIGHTS):
        outcome = _outcome_of(night)
        run = mlmd.Context(type_id=store.run_type, name=_run_id(night))
        [run.id] = store.store.put_contexts([run])
        span = (FIRST_NIGHT + datetime.timedelta(days=night) - EPOCH).days
        examples = store.artifact("Examples", span=span)
        store.execute(run, "csv_example_gen", complete, {"examples": examples})
        statistics = store.artifact("ExampleStatistics")
        _statistics(Path(statistics.uri), 3000 + 10 * night)
        store.execute(run, "statistics_gen", complete, {"statistics": statistics})
        passed = outcome != "blocked"
        findings = _findings(night, passed)
        if passed:
            gate = store.artifact("conveyor.DataGateFindings")
            (Path(gate.uri) / "findings.json").write_text(json.dumps(findings))
            store.execute(run, "data_gate", complete, {"findings": gate})
        else:
            store.execute(run, "data_gate", failed)
        if outcome in ("pushed", "not_pushed"):
            model = store.artifact(
                "Model", conveyor_final_val_loss=0.5 - 0.001 * night, conveyor_steps=100
            )
            store.execute(run, "trainer", complete, {"model": model})
            evaluation = store.artifact(
                "ModelEvaluation",
                conveyor_metric_auc=0.70 + 0.001 * night,
                conveyor_metric_binary_accuracy=0.80 + 0.0005 * night,
                conveyor_baseline_metric_auc=0.7,
            )
            store.execute(run, "evaluator", complete, {"evaluation": evaluation})
            if outcome == "pushed":
                version += 1
                pushed = store.artifact(
                    "PushedModel", pushed=1, pushed_version=str(version), conveyor_reason="ok"
                )
            else:
                pushed = store.artifact("PushedModel", pushed=0, conveyor_reason="not blessed")
            store.execute(run, "pusher", complete, {"pushed_model": pushed})
        elif outcome == "failed":
            store.execute(run, "trainer", failed)
        if night % 2 == 0 or (outcome == "blocked" and night != 9):
            run_dir = paths.run_dir(_run_id(night))
            run_dir.mkdir(parents=True)
            night_date = (FIRST_NIGHT + datetime.timedelta(days=night)).isoformat()
            summary = {
                "run_id": _run_id(night),
                "outcome": outcome,
                "message": f"night {night}: <{outcome}> & done",
                "night": night_date,
                "pipeline_seconds": 60.0 + night,
                "data_gate": findings,
            }
            (run_dir / "summary.json").write_text(json.dumps(summary))
            (run_dir / "report.html").write_text("<p>a report</p>")
    return paths, version


def test_a_hundred_nights_are_read_back_in_order_with_what_each_did(recorded):
    paths, versions = recorded
    store = metadata_store.MetadataStore(connection_config(paths.spec, paths.metadata_path))
    runs = run_history(store, "taxi", limit=NIGHTS)
    assert [r.run_id for r in runs] == [_run_id(n) for n in range(NIGHTS)]
    assert [r.pushed_version for r in runs if r.pushed_version] == [
        str(v) for v in range(1, versions + 1)
    ]
    blocked = runs[9]
    assert blocked.failed_nodes == ["data_gate"] and blocked.state == "failed"
    assert runs[0].metrics == {"auc": pytest.approx(0.70), "binary_accuracy": pytest.approx(0.8)}
    assert runs[0].span == (FIRST_NIGHT - EPOCH).days
    assert runs[0].statistics_uri and runs[0].gate_findings_uri
    assert run_history(store, "taxi", limit=10)[0].run_id == _run_id(90)
    assert run_history(store, "penguin", limit=10) == []


def test_the_history_page_of_a_hundred_nights_draws_every_night(recorded):
    paths, _ = recorded
    # How long it takes is a figure for docs/operations.md, not an assertion (speed targets
    # live in benchmarks): this checks what the page holds.
    page = history.render_history(paths, NIGHTS)
    assert "<script" not in page and "http://" not in page and "https://" not in page
    # The timeline, the metrics of the pushed versions, drift, rows and durations.
    titles = re.findall(r'<svg class="chart" role="img" aria-label="([^"]+)"', page)
    assert titles == [
        "Outcome of each run",
        "Evaluation metrics of each pushed version (dashed: lower bounds)",
        "Drift distance per column (dashed: thresholds)",
        "Rows per run (all splits)",
        "Seconds per run (the whole pipeline)",
    ]
    assert len(set(re.findall(r'\bid="([^"]+)"', page))) == len(re.findall(r'\bid="', page))
    rows = re.findall(r"<tr><td>(\d{4}-\d\d-\d\d)</td>", page)
    assert len(rows) == NIGHTS and rows[0] == "2026-11-08" and rows[-1] == "2026-08-01"


def test_each_night_links_its_report_and_says_how_it_ended(recorded):
    paths, _ = recorded
    page = history.render_history(paths, NIGHTS)
    # Night 0 kept its folder (a summary and a report); night 1's is gone: no link, and its
    # outcome is read from ML Metadata alone.
    assert f'<a href="{_run_id(0)}/report.html">{_run_id(0)}</a>' in page
    assert f"<td>{_run_id(1)}</td>" in page
    row = re.search(r"<tr><td>2026-08-10</td>.*?</tr>", page).group(0)  # night 9, no summary
    assert ">BLOCKED</span>" in row  # its gate failed, so only its summary had the findings
    row = re.search(r"<tr><td>2026-08-20</td>.*?</tr>", page).group(0)  # night 19
    assert ">BLOCKED</span>" in row and "<td>fare (drift)</td>" in row
    row = re.search(r"<tr><td>2026-08-07</td>.*?</tr>", page).group(0)  # night 6
    assert ">FAILED</span>" in row
    # A summary's message is text, never markup.
    assert "night 0: &lt;pushed&gt; &amp; done" in page


def test_conveyor_report_history_writes_the_page_beside_the_runs(recorded, capsys):
    paths, _ = recorded
    argv = ["report", "taxi", "--history", "--nights", "10", "--env", "ci"]
    assert cli.main(argv + ["--workdir", str(paths.workdir)]) == 0
    written = paths.runs_dir / history.HISTORY_FILE
    assert capsys.readouterr().out.strip() == str(written)
    assert len(re.findall(r"<tr><td>\d{4}-", written.read_text())) == 10
    assert cli.main(["report", "taxi", "--history", "--nights", "0"]) == 1
    assert "--nights 0" in capsys.readouterr().err
    # Without --history the argument is a run id: a pipeline's name is pointed to the page.
    assert cli.main(["report", "taxi", "--workdir", str(paths.workdir)]) == 1
    assert "conveyor report taxi --history" in capsys.readouterr().err


def test_a_pipeline_with_no_runs_gets_a_page_that_says_so(tmp_path):
    paths = RunPaths(workdir=tmp_path, spec=load_spec("penguin", env="ci").spec)
    page = history.render_history(paths)
    assert "holds no run of penguin" in page
