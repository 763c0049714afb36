"""What finishes an orchestrated run, without the orchestrator.

Airflow's final task against a real SQLite ML Metadata store written the way TFX's Airflow
runner writes one (its legacy launcher: a `run` context named `<pipeline>.<Airflow run id>`,
executions with a `component_id` property, a failed task's execution left RUNNING), with the
DAG run's task states as Airflow would hand them: a failed night, a blocked night and a pushed
night each get the summary, report, alert and outcome record `conveyor run` gives them.

Kubeflow's exit handler with the final-status JSON KFP passes it, against a webhook on
127.0.0.1: a failed run alerts, a succeeded run does not. Its executor, run as KFP runs it
(`RunFinish_Executor.Do` with the compiled parameters), pushes every run's metrics to a real
Pushgateway (Debian's `prometheus-pushgateway`) on 127.0.0.1, read back from its /metrics.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd

from pipelines.core.metadata import connection_config
from pipelines.core.paths import REPORT_FILE, RUN_SUMMARY, RunPaths
from pipelines.ops.nightly import outcome_recorder
from pipelines.run.airflow import finish_dag_run
from pipelines.spec.loading import load_spec
from tests.conftest import recording_webhook, running_pushgateway

WEBHOOK_ENV = "CONVEYOR_TEST_WEBHOOK"
DAG_RUN_ID = "scheduled__2026-11-28T02:00:00+00:00"
NIGHT = "2026-11-28"
SPAN = 20785  # days from 1970-01-01 to NIGHT: TFX's number of that dated span
DATED = ["name=penguin_dated", 'data.span_pattern="{YYYY}-{MM}-{DD}/*.csv"']
TASKS = ["csv_example_gen", "statistics_gen", "data_gate", "trainer", "pusher"]


@pytest.fixture
def webhook(monkeypatch):
    """A server on 127.0.0.1 that records each alert POSTed to it; its URL is in $WEBHOOK_ENV."""
    with recording_webhook() as (url, received):
        monkeypatch.setenv(WEBHOOK_ENV, url)
        yield received


@pytest.fixture
def night(tmp_path):
    """A dated penguin spec (alerting to $WEBHOOK_ENV) with the night's input in place."""
    loaded = load_spec(
        "penguin", env="ci", overrides=[*DATED, f"runtime.alert_webhook_env={WEBHOOK_ENV}"]
    )
    paths = RunPaths(workdir=tmp_path.resolve(), spec=loaded.spec)
    (paths.input_dir / NIGHT).mkdir(parents=True)
    (paths.input_dir / NIGHT / "penguins.csv").write_text("species,island\nAdelie,Biscoe\n")
    return loaded.spec, paths


class LegacyStore:
    """Writes one DAG run into a SQLite store as TFX's Airflow runner (legacy launcher) does."""

    def __init__(self, spec, paths: RunPaths, dag_run_id: str):
        self.store = metadata_store.MetadataStore(connection_config(spec, paths.metadata_path))
        self.paths = paths
        self.pipeline = spec.name
        self.dag_run_id = dag_run_id
        pipeline_type = self._context_type("pipeline", ["pipeline_name"])
        run_type = self._context_type("run", ["pipeline_name", "run_id"])
        self.component_type = self._context_type(
            "component_run", ["pipeline_name", "run_id", "component_id"]
        )
        self.pipeline_context = self._context(pipeline_type, spec.name)
        self.run_context = self._context(run_type, f"{spec.name}.{dag_run_id}")

    def _context_type(self, name: str, properties: list[str]) -> int:
        context_type = mlmd.ContextType(name=name)
        for key in properties:
            context_type.properties[key] = mlmd.STRING
        return self.store.put_context_type(context_type)

    def _context(self, type_id: int, name: str) -> mlmd.Context:
        [context_id] = self.store.put_contexts([mlmd.Context(type_id=type_id, name=name)])
        return self.store.get_contexts_by_id([context_id])[0]

    def execution(
        self, component_id: str, state: str, outputs: dict[str, mlmd.Artifact] | None = None
    ) -> int:
        """One component's execution: state `complete`, `cached` or `new` (what a failed one
        stays at), with its output artifacts."""
        execution_type = mlmd.ExecutionType(name=f"tfx.components.{component_id}")
        for key in ("state", "component_id", "run_id", "pipeline_name", "pipeline_root"):
            execution_type.properties[key] = mlmd.STRING
        type_id = self.store.put_execution_type(
            execution_type, can_add_fields=True, can_omit_fields=True
        )
        execution = mlmd.Execution(type_id=type_id)
        for key, value in {
            "state": state,
            "component_id": component_id,
            "run_id": self.dag_run_id,
            "pipeline_name": self.pipeline,
            "pipeline_root": str(self.paths.pipeline_root),
        }.items():
            execution.properties[key].string_value = value
        execution.last_known_state = {
            "complete": mlmd.Execution.COMPLETE,
            "cached": mlmd.Execution.CACHED,
            "new": mlmd.Execution.RUNNING,
        }[state]
        component = self._context(
            self.component_type, f"{self.pipeline}.{self.dag_run_id}.{component_id}"
        )
        contexts = [self.pipeline_context, self.run_context, component]
        artifacts_and_events = []
        for key, artifact in (outputs or {}).items():
            event = mlmd.Event(type=mlmd.Event.OUTPUT)
            event.path.steps.add().key = key
            artifacts_and_events.append((artifact, event))
        execution_id, _, _ = self.store.put_execution(execution, artifacts_and_events, contexts)
        return execution_id

    def artifact(self, type_name: str, uri: str, **custom) -> mlmd.Artifact:
        type_id = self.store.put_artifact_type(mlmd.ArtifactType(name=type_name))
        artifact = mlmd.Artifact(type_id=type_id, uri=uri, state=mlmd.Artifact.LIVE)
        for key, value in custom.items():
            if isinstance(value, int):
                artifact.custom_properties[key].int_value = value
            else:
                artifact.custom_properties[key].string_value = value
        return artifact

    def examples(self) -> int:
        uri = str(self.paths.pipeline_root / "csv_example_gen" / "examples" / "1")
        return self.execution(
            "csv_example_gen", "complete", {"examples": self.artifact("Examples", uri, span=SPAN)}
        )


def _dag_run(states: dict[str, str]):
    """What Airflow hands the final task: the DAG run, with each task instance's state."""
    instances = [SimpleNamespace(task_id=t, state=s) for t, s in states.items()]
    instances.append(SimpleNamespace(task_id="conveyor_finish", state="running"))
    return SimpleNamespace(run_id=DAG_RUN_ID, get_task_instances=lambda: instances)


def _finish(spec, paths, states: dict[str, str]):
    lines: list[str] = []
    result = finish_dag_run(
        spec.to_yaml_dict(),
        str(paths.workdir),
        _dag_run(states),
        ds=NIGHT,
        echo=lines.append,
        final_task_id="conveyor_finish",
        record_outcome=outcome_recorder,
    )
    return result, lines


def test_a_failed_night_gets_its_summary_report_and_alert_and_no_outcome_record(night, webhook):
    spec, paths = night
    store = LegacyStore(spec, paths, DAG_RUN_ID)
    store.examples()
    store.execution("statistics_gen", "complete")
    store.execution("data_gate", "complete")
    store.execution("trainer", "new")  # it raised: TFX's Airflow runner never marks it failed
    states = dict.fromkeys(TASKS, "success") | {"trainer": "failed", "pusher": "upstream_failed"}

    result, lines = _finish(spec, paths, states)

    run_id = f"penguin_dated.{DAG_RUN_ID}"
    assert result.run_id == run_id and result.outcome == "failed"
    assert result.message == (
        f"task trainer failed in Airflow DAG run {DAG_RUN_ID}; its log says why"
    )
    assert result.span == SPAN and result.night == NIGHT
    nodes = {n.node_id: n.state for n in result.nodes}
    assert nodes == {
        "csv_example_gen": "executed",
        "statistics_gen": "executed",
        "data_gate": "executed",
        "trainer": "running",
    }
    run_dir = paths.run_dir(run_id)
    summary = json.loads((run_dir / RUN_SUMMARY).read_text())
    assert summary["outcome"] == "failed" and summary["message"] == result.message
    assert (run_dir / REPORT_FILE).is_file() and f"report: {run_dir / REPORT_FILE}" in lines
    [alert] = webhook
    assert alert["outcome"] == "failed" and alert["run_id"] == run_id
    assert alert["night"] == NIGHT and alert["report"] == str(run_dir / REPORT_FILE)
    assert not paths.outcome_record(SPAN).exists()  # a failure is retried


def test_a_night_the_data_gate_refused_is_blocked_with_its_findings_and_recorded(night, webhook):
    spec, paths = night
    store = LegacyStore(spec, paths, DAG_RUN_ID)
    store.examples()
    store.execution("statistics_gen", "complete")
    gate = store.execution("data_gate", "new")
    findings = {
        "passed": False,
        "anomalies": [{"column": "island", "split": "train", "description": "Unexpected value"}],
        "drift": [],
        "skew": [],
        "drift_against": None,
        "notes": [],
    }
    # Where the gate writes before it raises: <pipeline root>/<node>/<output key>/<execution>.
    folder = paths.pipeline_root / "data_gate" / "findings" / str(gate)
    folder.mkdir(parents=True)
    (folder / "findings.json").write_text(json.dumps(findings))
    # An earlier run's findings must not be taken for this run's.
    stale = paths.pipeline_root / "data_gate" / "findings" / str(gate + 100)
    stale.mkdir(parents=True)
    (stale / "findings.json").write_text(json.dumps({**findings, "anomalies": []}))
    states = dict.fromkeys(TASKS, "success") | {
        "data_gate": "failed",
        "trainer": "upstream_failed",
        "pusher": "upstream_failed",
    }

    result, _ = _finish(spec, paths, states)

    assert result.outcome == "blocked"
    assert result.message.startswith(f"Data gate: the data in {paths.input_dir} ({NIGHT} (span")
    assert result.message.endswith("1 problem: island (train split): Unexpected value")
    assert result.data_gate == findings
    [alert] = webhook
    assert alert["outcome"] == "blocked" and alert["data_gate"] == findings
    # Blocked is final: the same night with the same data would be blocked again.
    recorded = json.loads(paths.outcome_record(SPAN).read_text())
    assert recorded["outcome"] == "blocked" and recorded["run_id"] == result.run_id


def test_a_pushed_night_is_recorded_and_sends_no_alert(night, webhook):
    spec, paths = night
    store = LegacyStore(spec, paths, DAG_RUN_ID)
    store.examples()
    for component in ("statistics_gen", "data_gate", "trainer"):
        store.execution(component, "cached" if component == "statistics_gen" else "complete")
    pushed = store.artifact(
        "PushedModel",
        str(paths.pipeline_root / "pusher" / "pushed_model" / "9"),
        pushed=1,
        pushed_version="3",
    )
    store.execution("pusher", "complete", {"pushed_model": pushed})

    result, _ = _finish(spec, paths, dict.fromkeys(TASKS, "success"))

    assert result.outcome == "pushed" and result.pushed_version == "3"
    assert result.message == f"pushed version 3 to {paths.serving_dir / '3'}"
    assert {n.node_id: n.state for n in result.nodes}["statistics_gen"] == "cached"
    assert webhook == []
    recorded = json.loads(paths.outcome_record(SPAN).read_text())
    assert recorded["outcome"] == "pushed"
    assert recorded["run_id"] == f"penguin_dated.{DAG_RUN_ID}"


def test_a_night_whose_tasks_did_not_run_through_is_failed_not_recorded(night, webhook):
    spec, paths = night  # no store at all: nothing ran
    result, _ = _finish(spec, paths, dict.fromkeys(TASKS, "success") | {"pusher": "skipped"})
    assert result.outcome == "failed"
    assert result.message == (
        f"tasks did not run through in Airflow DAG run {DAG_RUN_ID}: pusher (skipped)"
    )
    assert [a["outcome"] for a in webhook] == ["failed"]
    assert not paths.outcome_record(SPAN).exists()


# --- Kubeflow's exit handler -------------------------------------------------------------------

FAILED_STATUS = {
    "state": "FAILED",
    "error": {
        "code": 9,
        "message": "The DAG failed because some tasks failed. The failed tasks are: [trainer].",
    },
    "pipelineJobResourceName": "projects/7/locations/europe-west4/pipelineJobs/penguin-20261128",
    "pipelineTaskName": "tfx-dag",
}


@pytest.fixture
def resolved_spec():
    spec = load_spec(
        "penguin", env="kubeflow", overrides=[f"runtime.alert_webhook_env={WEBHOOK_ENV}"]
    ).spec
    return json.dumps(spec.to_yaml_dict())


def test_the_exit_handler_reports_and_alerts_a_failed_kubeflow_run(
    resolved_spec, webhook, tmp_path
):
    from components.run_finish.component import alert_final_status

    said = alert_final_status(json.dumps(FAILED_STATUS), resolved_spec, str(tmp_path))

    job = FAILED_STATUS["pipelineJobResourceName"]
    message = f"the Kubeflow run {job} ended FAILED: {FAILED_STATUS['error']['message']}"
    assert said.startswith(f"penguin: FAILED: {message}; alert sent (failed) to the webhook")
    # The report is where `conveyor report penguin-20261128 --workdir W` looks for it.
    report = tmp_path / "runs" / "penguin" / "penguin-20261128" / "report.html"
    assert said.endswith(f"; report: {report}")
    page = report.read_text()
    assert "penguin" in page and "FAILED" in page.upper()
    assert "The failed tasks are: [trainer]." in page
    [alert] = webhook
    assert alert["pipeline"] == "penguin" and alert["outcome"] == "failed"
    assert alert["run_id"] == job and alert["reason"] == message
    assert alert["report"] == str(report)
    from pipelines.cli import main

    assert main(["report", "penguin-20261128", "--workdir", str(tmp_path)]) == 0


def test_the_exit_handler_alerts_even_when_the_report_cannot_be_written(
    resolved_spec, webhook, tmp_path
):
    from components.run_finish.component import alert_final_status

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the workdir should be")
    said = alert_final_status(json.dumps(FAILED_STATUS), resolved_spec, str(blocked))

    assert "alert sent (failed)" in said and "; no report written: " in said
    [alert] = webhook
    assert alert["report"] is None


def test_the_exit_handler_sends_nothing_for_a_succeeded_run(resolved_spec, webhook):
    from components.run_finish.component import alert_final_status

    succeeded = {"state": "SUCCEEDED", "pipelineJobResourceName": "jobs/penguin-1"}
    said = alert_final_status(json.dumps(succeeded), resolved_spec)

    assert said == "penguin: the run succeeded; no alert"
    assert webhook == []


def test_the_exit_handler_reads_a_cancelled_run_without_an_error_as_failed():
    from components.run_finish.component import final_status_result

    result = final_status_result(json.dumps({"state": "CANCELLED"}), "penguin")
    assert result.outcome == "failed" and result.run_id is None
    assert result.message == (
        "the Kubeflow run (unnamed) ended CANCELLED (KFP gave no error message)"
    )


def test_the_exit_handler_refuses_text_that_is_not_a_final_status():
    from google.protobuf import json_format

    from components.run_finish.component import final_status_result

    with pytest.raises(json_format.ParseError):
        final_status_result('{"state": ["not", "a", "string"]}', "penguin")
    with pytest.raises(json_format.ParseError):
        final_status_result("not json", "penguin")


# --- Kubeflow's exit handler: the run's metrics -----------------------------------------------

GATEWAY_ENV = "CONVEYOR_TEST_PUSHGATEWAY"
CREATED = "2026-11-28T02:00:00.123456789Z"  # KFP's {{$.pipeline_job_create_time_utc}}
CREATED_SECONDS = 1795831200.123456


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory):
    with running_pushgateway(tmp_path_factory.mktemp("pushgateway")) as url:
        yield url


@pytest.fixture
def kubeflow_job(tmp_path, monkeypatch, pushgateway):
    """The kubeflow penguin spec pushing to the Pushgateway and writing a textfile under the
    workdir; returns a function running the exit handler's executor as KFP does."""
    monkeypatch.setenv(GATEWAY_ENV, pushgateway)
    overrides = [
        f"runtime.metrics.pushgateway_url_env={GATEWAY_ENV}",
        "runtime.metrics.textfile_dir=metrics",
    ]
    spec = load_spec("penguin", env="kubeflow", overrides=overrides).spec
    paths = RunPaths(workdir=tmp_path.resolve(), spec=spec)

    def run_exit_handler(final_status: dict, created_at: str = CREATED) -> None:
        from components.run_finish.component import RunFinish_Executor

        RunFinish_Executor().Do(
            {},
            {},
            {
                "final_status": json.dumps(final_status),
                "resolved_spec": json.dumps(spec.to_yaml_dict()),
                "workdir": str(paths.workdir),
                "job_created_at": created_at,
            },
        )

    return paths, run_exit_handler


def _gateway_samples(url: str) -> dict:
    """(name, labels without job and instance) -> value of every Conveyor sample pushed."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("conveyor_"):
                assert sample.labels.pop("job") == "conveyor"
                sample.labels.pop("instance", None)
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def _labels(**labels) -> frozenset:
    return frozenset({"pipeline": "penguin", **labels}.items())


def _publish(paths: RunPaths, version: int, pushed_at: str) -> None:
    """A version in the serving folder with the push record the Pusher writes beside it."""
    from pipelines.serving_state.versions import PUSH_RECORD

    folder = paths.serving_dir / str(version)
    folder.mkdir(parents=True)
    (folder / PUSH_RECORD).write_text(json.dumps({"version": version, "pushed_at": pushed_at}))


def test_a_failed_kubeflow_run_exports_its_outcome_and_duration(kubeflow_job, pushgateway):
    paths, run_exit_handler = kubeflow_job
    _publish(paths, 4, "2026-11-27T02:40:00Z")  # last night's push, not this run's

    run_exit_handler(FAILED_STATUS)

    samples = _gateway_samples(pushgateway)
    outcomes = {
        dict(labels)["outcome"]: value
        for (name, labels), value in samples.items()
        if name == "conveyor_run_outcome"
    }
    assert outcomes == {"failed": 1, "pushed": 0, "not_pushed": 0, "blocked": 0}
    finished = samples[("conveyor_run_finished_timestamp_seconds", _labels())]
    duration = samples[("conveyor_run_duration_seconds", _labels())]
    assert duration == pytest.approx(finished - CREATED_SECONDS)
    assert samples[("conveyor_model_pushed_version", _labels())] == 4
    last_push = samples[("conveyor_model_last_push_timestamp_seconds", _labels())]
    assert last_push == int(CREATED_SECONDS) - 24 * 3600 + 40 * 60
    # What KFP's ML Metadata holds is absent rather than invented.
    read_from_the_store = {
        "conveyor_component_duration_seconds",
        "conveyor_data_rows",
        "conveyor_evaluation_metric",
        "conveyor_model_blessed",
        "conveyor_run_span",
    }
    assert not read_from_the_store & {name for name, _ in samples}
    # The textfile went under the workdir, the storage every task of the job sees.
    textfile = paths.workdir / "metrics" / "penguin.prom"
    assert 'conveyor_run_outcome{outcome="failed",pipeline="penguin"} 1.0' in textfile.read_text()


def test_a_kubeflow_run_that_pushed_replaces_the_group_with_pushed(kubeflow_job, pushgateway):
    paths, run_exit_handler = kubeflow_job
    _publish(paths, 4, "2026-11-27T02:40:00Z")
    run_exit_handler(FAILED_STATUS)
    _publish(paths, 5, "2026-11-28T02:31:07Z")  # pushed by this job, after its creation

    run_exit_handler({"state": "SUCCEEDED", "pipelineJobResourceName": "jobs/penguin-2"})

    samples = _gateway_samples(pushgateway)
    assert samples[("conveyor_run_outcome", _labels(outcome="pushed"))] == 1
    assert samples[("conveyor_run_outcome", _labels(outcome="failed"))] == 0
    assert samples[("conveyor_model_pushed_version", _labels())] == 5
    pushed_at = samples[("conveyor_model_last_push_timestamp_seconds", _labels())]
    assert pushed_at == int(CREATED_SECONDS) + 31 * 60 + 7


def test_a_succeeded_kubeflow_run_that_pushed_nothing_is_not_pushed(kubeflow_job, pushgateway):
    paths, run_exit_handler = kubeflow_job
    _publish(paths, 4, "2026-11-27T02:40:00Z")  # the newest push is older than the job

    run_exit_handler({"state": "SUCCEEDED", "pipelineJobResourceName": "jobs/penguin-3"})

    samples = _gateway_samples(pushgateway)
    assert samples[("conveyor_run_outcome", _labels(outcome="not_pushed"))] == 1
    assert samples[("conveyor_run_outcome", _labels(outcome="pushed"))] == 0
    assert samples[("conveyor_model_pushed_version", _labels())] == 4


def test_without_the_creation_time_a_succeeded_run_claims_no_push_outcome(
    kubeflow_job, pushgateway
):
    paths, run_exit_handler = kubeflow_job
    _publish(paths, 4, "2026-11-28T02:31:07Z")
    unresolved = "{{$.pipeline_job_create_time_utc}}"  # a KFP backend that does not fill it

    run_exit_handler({"state": "SUCCEEDED"}, created_at=unresolved)

    samples = _gateway_samples(pushgateway)
    outcomes = {
        dict(labels)["outcome"]: value
        for (name, labels), value in samples.items()
        if name == "conveyor_run_outcome"
    }
    assert outcomes == {"failed": 0, "blocked": 0}  # it got through; whether it pushed: unknown
    assert ("conveyor_run_duration_seconds", _labels()) not in samples
    assert samples[("conveyor_model_pushed_version", _labels())] == 4


def test_a_kubeflow_profile_refuses_a_textfile_inside_the_pod():
    from pipelines.spec.checks import ProfileError, check_profile

    loaded = load_spec(
        "penguin", env="kubeflow", overrides=["runtime.metrics.textfile_dir=/var/lib/textfile"]
    )
    with pytest.raises(ProfileError, match=r"runtime\.metrics\.textfile_dir: /var/lib/textfile"):
        check_profile(loaded)
    relative = load_spec("penguin", env="kubeflow", overrides=["runtime.metrics.textfile_dir=m"])
    check_profile(relative)  # under the workdir: shared storage


def test_the_report_reads_an_airflow_run_back(night):
    """The report and `find_run` find a run TFX's Airflow runner recorded (no `node` contexts)."""
    from pipelines.core.metadata import find_run, open_store, read_run_artifacts

    spec, paths = night
    store = LegacyStore(spec, paths, DAG_RUN_ID)
    store.examples()
    run_id = f"penguin_dated.{DAG_RUN_ID}"
    record = find_run(open_store(spec, paths.metadata_path), run_id)
    assert record.span == SPAN and [n.node_id for n in record.nodes] == ["csv_example_gen"]
    nodes = read_run_artifacts(open_store(spec, paths.metadata_path), run_id)
    assert nodes["csv_example_gen"].output("examples").get("span") == SPAN
    assert Path(nodes["csv_example_gen"].output("examples").uri).name == "1"


# --- one contract: the same facts give the same record, whoever ran the run ------------------

REFUSED_FINDINGS = {
    "passed": False,
    "reason": "data_gate_blocked",
    "anomalies": [{"column": "island", "split": "train", "description": "Unexpected value"}],
    "drift": [],
    "skew": [],
    "drift_against": None,
    "notes": [],
}
COMPARED = ("outcome", "reason", "message", "data_gate", "pushed_version", "span", "night")


def _facts(spec, paths, run_id, **kwargs):
    from pipelines.finish.contract import RunFacts, compiled_spec

    return RunFacts(compiled_spec(spec), paths, run_id, span=SPAN, night=NIGHT, **kwargs)


def _recorded(paths) -> dict:
    record = json.loads(paths.outcome_record(SPAN).read_text())
    return {key: record[key] for key in ("outcome", "reason")}


def _same(summaries: list[dict]) -> list[dict]:
    return [{key: summary[key] for key in COMPARED} for summary in summaries]


def test_a_blocked_night_records_the_same_on_every_orchestrator(night, webhook):
    from components.data_gate.component import DataGateError
    from pipelines.finish.contract import finish_run, stop_of

    spec, paths = night
    store = LegacyStore(spec, paths, DAG_RUN_ID)
    store.examples()
    gate = store.execution("data_gate", "new")
    folder = paths.pipeline_root / "data_gate" / "findings" / str(gate)
    folder.mkdir(parents=True)
    (folder / "findings.json").write_text(json.dumps(REFUSED_FINDINGS))
    states = dict.fromkeys(TASKS, "success") | {
        "data_gate": "failed",
        "trainer": "upstream_failed",
        "pusher": "upstream_failed",
    }
    run_id = f"penguin_dated.{DAG_RUN_ID}"

    # Airflow: the DAG run's task states, the findings where the gate wrote them.
    airflow, _ = _finish(spec, paths, states)
    airflow_record = _recorded(paths)
    paths.outcome_record(SPAN).unlink()
    # The local runner: what LocalDagRunner raised (the gate's own error, in the gate's words).
    raised = DataGateError(airflow.message, REFUSED_FINDINGS)
    local_facts = _facts(spec, paths, run_id, stop=stop_of(raised))
    local_facts.record_outcome = outcome_recorder(paths, SPAN)
    local = finish_run(local_facts, lambda _: None)
    local_record = _recorded(paths)
    # A Kubeflow-shaped run: told, not read back (its store is KFP's); the exit handler adds
    # the outcome record itself (tests/unit/test_kubeflow_start.py).
    told = finish_run(
        _facts(spec, paths, "jobs/penguin-1", stop=stop_of(raised), in_store=False, folder="k"),
        lambda _: None,
    )

    results = [local, airflow, told]
    assert {r.outcome for r in results} == {"blocked"}
    assert {r.reason for r in results} == {"data_gate_blocked"}
    summaries = [json.loads((Path(r.run_dir) / RUN_SUMMARY).read_text()) for r in results]
    assert _same(summaries) == [_same(summaries)[0]] * 3
    assert summaries[0]["data_gate"] == REFUSED_FINDINGS
    assert local_record == airflow_record == {"outcome": "blocked", "reason": "data_gate_blocked"}
    alerts = [(a["outcome"], a["reason_code"], a["reason"], a["data_gate"]) for a in webhook]
    assert alerts == [alerts[0]] * 3 and alerts[0][:2] == ("blocked", "data_gate_blocked")


def test_an_infra_refusal_records_the_same_and_alerts_on_every_orchestrator(night, webhook):
    from pipelines.core.outcome import Reason
    from pipelines.finish.contract import finish_run

    spec, paths = night
    store = LegacyStore(spec, paths, DAG_RUN_ID)
    store.examples()
    for component in ("statistics_gen", "data_gate", "trainer"):
        store.execution(component, "complete")
    words = "the infra validator did not bless the model: p99 80.1 ms over the budget 50 ms"
    refused = store.artifact(
        "PushedModel",
        str(paths.pipeline_root / "pusher" / "pushed_model" / "9"),
        pushed=0,
        conveyor_reason=words,
        conveyor_reason_code="infra_refused",
    )
    store.execution("pusher", "complete", {"pushed_model": refused})
    run_id = f"penguin_dated.{DAG_RUN_ID}"

    airflow, _ = _finish(spec, paths, dict.fromkeys(TASKS, "success"))
    airflow_record = _recorded(paths)
    paths.outcome_record(SPAN).unlink()
    local_facts = _facts(spec, paths, run_id, record_outcome=outcome_recorder(paths, SPAN))
    local = finish_run(local_facts, lambda _: None)
    local_record = _recorded(paths)
    told_facts = _facts(
        spec, paths, "jobs/penguin-1", in_store=False, folder="k", outcome=airflow.outcome
    )
    told_facts.reason = Reason.INFRA_REFUSED
    told = finish_run(told_facts, lambda _: None)

    assert {(r.outcome, r.reason) for r in (local, airflow)} == {("not_pushed", "infra_refused")}
    assert local.message == airflow.message == f"nothing pushed: {words}"
    assert (told.outcome, told.reason) == ("not_pushed", "infra_refused")
    assert local_record == airflow_record == {"outcome": "not_pushed", "reason": "infra_refused"}
    # It alerts although it is NOT_PUSHED: the code says the model cannot be served.
    assert [(a["outcome"], a["reason_code"]) for a in webhook] == [
        ("not_pushed", "infra_refused")
    ] * 3
    page = (Path(local.run_dir) / REPORT_FILE).read_text()
    assert '<span class="badge bad">NOT PUSHED</span>' in page
    assert "<td>reason</td><td>infra_refused</td>" in page


def test_a_push_the_model_gate_held_back_is_quiet_whatever_its_words_say(night, webhook):
    from pipelines.finish.contract import finish_run

    spec, paths = night
    store = LegacyStore(spec, paths, DAG_RUN_ID)
    store.examples()
    # Words that once made a run alert; the code says the Evaluator held the model back.
    misleading = "the infra validator did not bless the model (quoted by a custom evaluator)"
    held = store.artifact(
        "PushedModel",
        str(paths.pipeline_root / "pusher" / "pushed_model" / "9"),
        pushed=0,
        conveyor_reason=misleading,
        conveyor_reason_code="model_not_blessed",
    )
    store.execution("pusher", "complete", {"pushed_model": held})

    result = finish_run(_facts(spec, paths, f"penguin_dated.{DAG_RUN_ID}"), lambda _: None)

    assert (result.outcome, result.reason) == ("not_pushed", "model_not_blessed")
    assert not result.alerts and webhook == []


def test_what_the_exit_handler_can_tell_of_a_run_that_pushed_nothing(resolved_spec):
    from components.run_finish.component import final_status_facts
    from pipelines.finish.contract import read_result

    succeeded = json.dumps({"state": "SUCCEEDED", "pipelineJobResourceName": "jobs/penguin-4"})
    facts = final_status_facts(succeeded, resolved_spec, "", CREATED)
    result = read_result(facts)
    # KFP's store is out of reach: why nothing was pushed is unknown, and says so.
    assert (result.outcome, result.reason) == ("not_pushed", "unknown")
    assert not result.alerts


def test_the_exit_handler_names_the_version_a_kubeflow_run_pushed(resolved_spec, tmp_path):
    from components.run_finish.component import final_status_facts
    from pipelines.finish.contract import read_result

    succeeded = json.dumps({"state": "SUCCEEDED", "pipelineJobResourceName": "jobs/penguin-5"})
    facts = final_status_facts(succeeded, resolved_spec, str(tmp_path), CREATED)
    _publish(facts.paths, 5, "2026-11-28T02:31:07Z")  # pushed by this job, after its creation
    facts = final_status_facts(succeeded, resolved_spec, str(tmp_path), CREATED)
    result = read_result(facts)
    assert (result.outcome, result.reason) == ("pushed", "pushed")
    assert result.pushed_version == "5"
    assert result.message == f"pushed version 5 to {facts.paths.serving_dir / '5'}"


def test_the_exit_handler_of_a_kubeflow_run_that_pushed_retires_old_versions(
    resolved_spec, tmp_path
):
    # As `conveyor run` does after a push: versions beyond push.keep_versions go, oldest
    # first, and a version a label points to stays whatever its age.
    from components.run_finish.component import finish_final_status
    from pipelines.serving_state.config_files import ServedModel, write_serving_configs
    from pipelines.serving_state.versions import served_versions

    spec = json.loads(resolved_spec)
    spec["push"] = {**spec.get("push", {}), "keep_versions": 2}
    resolved = json.dumps(spec)
    paths = RunPaths(workdir=tmp_path, spec=load_spec("penguin", env="kubeflow").spec)
    for version, night in ((1, 24), (2, 25), (3, 26), (4, 27)):
        _publish(paths, version, f"2026-11-{night}T02:40:00Z")
    labelled = ServedModel(paths.spec.push.model_name, str(paths.serving_dir), labels={"old": 1})
    write_serving_configs(paths.serving_config_dir, [labelled], paths.spec.push)
    failed = json.dumps(FAILED_STATUS)
    succeeded = json.dumps({"state": "SUCCEEDED", "pipelineJobResourceName": "jobs/penguin-6"})

    # A failed run, and a succeeded one that pushed nothing, change nothing in serving.
    finish_final_status(failed, resolved, str(tmp_path), CREATED, echo=lambda _: None)
    finish_final_status(succeeded, resolved, str(tmp_path), CREATED, echo=lambda _: None)
    assert served_versions(str(paths.serving_dir)) == [1, 2, 3, 4]

    _publish(paths, 5, "2026-11-28T02:31:07Z")  # pushed by this job, after its creation
    said = []
    line = finish_final_status(succeeded, resolved, str(tmp_path), CREATED, echo=said.append)
    assert line == "penguin: the run succeeded; no alert"
    assert served_versions(str(paths.serving_dir)) == [1, 4, 5]
    assert "serving: retired versions [2, 3] (push.keep_versions: 2)" in said
