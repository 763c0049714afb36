"""`conveyor submit`: the compiled job reaches Kubeflow Pipelines through KFP's SDK client, as a
run or as the recurring run of the spec's schedule, tested to the client's boundary against a
server on 127.0.0.1 that answers the v2beta1 REST calls from the API's published specification
(tests/data/kfp_api) and records every request."""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from google.protobuf import json_format

from pipelines import cli

SWAGGER = json.loads(
    (Path(__file__).parents[1] / "data" / "kfp_api" / "v2beta1.swagger.json").read_text()
)
TOKEN = "kfp-token-for-the-test"  # noqa: S105 - a made-up token the fake API expects
ALERT_SECRET_ENV = [
    "--set",
    "runtime.alert_webhook_env=CONVEYOR_ALERT_URL",
    "--set",
    "runtime.container.secret_env={CONVEYOR_ALERT_URL: {secret: conveyor-alerts, key: url}}",
    "--set",
    "runtime.kubeflow.token_env=KFP_TEST_TOKEN",
]


def _strict(node):
    """The published schema as the API server applies it: grpc-gateway parses a body with
    protobuf's JSON parser, which refuses fields the message does not declare and takes an
    int64 as a number or a string."""
    if isinstance(node, dict):
        node = {key: _strict(value) for key, value in node.items()}
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        if node.get("format") == "int64" and node.get("type") == "string":
            node["type"] = ["string", "integer"]
        return node
    if isinstance(node, list):
        return [_strict(value) for value in node]
    return node


def _validator(schema_ref: str):
    import jsonschema

    schema = {"definitions": _strict(SWAGGER["definitions"]), "$ref": schema_ref}
    return jsonschema.Draft4Validator(schema)


class FakeKfpApi:
    """Answers the operations in the trimmed specification from an in-memory store; records
    each request (method, path, query, headers, body) and every way one broke the schema."""

    def __init__(self):
        self.requests: list[dict] = []
        self.violations: list[str] = []
        self.experiments: dict[str, dict] = {}
        self.recurring_runs: dict[str, dict] = {}
        self.refuse: dict[tuple[str, str], tuple[int, str]] = {}

    def answer(self, method: str, url: str, headers, body: bytes) -> tuple[int, dict]:
        parts = urlsplit(url)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        payload = json.loads(body) if body else None
        self.requests.append(
            {
                "method": method,
                "path": parts.path,
                "query": query,
                "authorization": headers.get("Authorization"),
                "body": payload,
            }
        )
        operation = SWAGGER["paths"].get(parts.path, {}).get(method.lower())
        if operation is None:
            return self._status(404, f"no operation {method} {parts.path}")
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        for name in set(query) - declared:
            self.violations.append(f"{method} {parts.path}: undeclared query parameter {name}")
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "body":
                for error in _validator(parameter["schema"]["$ref"]).iter_errors(payload):
                    self.violations.append(f"{method} {parts.path}: {error.message}")
        if (method, parts.path) in self.refuse:
            return self._status(*self.refuse[(method, parts.path)])
        answer = getattr(self, operation["operationId"])(query, payload)
        for error in _validator(operation["responses"]["200"]["schema"]["$ref"]).iter_errors(
            answer
        ):
            self.violations.append(f"answer to {method} {parts.path}: {error.message}")
        return 200, answer

    def _status(self, status: int, message: str) -> tuple[int, dict]:
        code = {400: 3, 404: 5}.get(status, 2)  # google.rpc.Code: INVALID_ARGUMENT, NOT_FOUND
        return status, {"code": code, "message": message, "details": []}

    @staticmethod
    def _named(items, query):
        """The items a `display_name` EQUALS filter (KFP's filter.proto as JSON) selects."""
        if not query.get("filter"):
            return list(items)
        wanted = [
            p["stringValue"]
            for p in json.loads(query["filter"])["predicates"]
            if p["key"] == "display_name" and p["operation"] in ("EQUALS", 1)
        ]
        return [item for item in items if item["display_name"] in wanted]

    def HealthzService_GetHealthz(self, query, body):
        return {"multi_user": False, "pipeline_store": "database"}

    def ExperimentService_ListExperiments(self, query, body):
        found = self._named(self.experiments.values(), query)
        return {"experiments": found, "total_size": len(found), "next_page_token": ""}

    def ExperimentService_CreateExperiment(self, query, body):
        experiment = {
            **body,
            "experiment_id": str(uuid.uuid4()),
            "created_at": "2026-12-02T10:00:00Z",
            "storage_state": "AVAILABLE",
        }
        self.experiments[experiment["experiment_id"]] = experiment
        return experiment

    def RunService_CreateRun(self, query, body):
        return {
            **body,
            "run_id": str(uuid.uuid4()),
            "state": "PENDING",
            "storage_state": "AVAILABLE",
            "created_at": "2026-12-02T10:00:01Z",
        }

    def RecurringRunService_ListRecurringRuns(self, query, body):
        runs = [
            r
            for r in self.recurring_runs.values()
            if r["experiment_id"] == query.get("experiment_id", r["experiment_id"])
        ]
        found = self._named(runs, query)
        return {"recurringRuns": found, "total_size": len(found), "next_page_token": ""}

    def RecurringRunService_CreateRecurringRun(self, query, body):
        recurring_run = {
            **body,
            "recurring_run_id": str(uuid.uuid4()),
            "status": "ENABLED",
            "created_at": "2026-12-02T10:00:01Z",
            "updated_at": "2026-12-02T10:00:01Z",
        }
        self.recurring_runs[recurring_run["recurring_run_id"]] = recurring_run
        return recurring_run

    def calls(self) -> list[tuple[str, str]]:
        return [(r["method"], r["path"]) for r in self.requests]

    def bodies(self, method: str, path: str) -> list[dict]:
        return [r["body"] for r in self.requests if (r["method"], r["path"]) == (method, path)]


@pytest.fixture
def kfp_api():
    api = FakeKfpApi()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            status, answer = api.answer(
                self.command, self.path, self.headers, self.rfile.read(length)
            )
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, *args):  # the test reads the record, not the log
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield api
    server.shutdown()
    server.server_close()
    assert api.violations == []


@pytest.fixture(autouse=True)
def isolated_client(monkeypatch, tmp_path):
    """No kfp context file of the machine's user, no KFP variables of its shell, the token the
    fake API expects, and the compiled job under a workdir of the test's own."""
    from kfp.client import client

    monkeypatch.setattr(client.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    for variable in (
        "KF_PIPELINES_ENDPOINT",
        "KF_PIPELINES_UI_ENDPOINT",
        "KF_PIPELINES_DEFAULT_EXPERIMENT_NAME",
        "KF_PIPELINES_OVERRIDE_EXPERIMENT_NAME",
        "KF_PIPELINES_IAP_OAUTH2_CLIENT_ID",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("KFP_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("CONVEYOR_WORKDIR", str(tmp_path / "workdir"))


def _job_file(tmp_path: Path) -> Path:
    return tmp_path / "workdir" / "compiled" / "kubeflow" / "penguin.json"


def _same_pipeline(uploaded: dict, job: dict) -> None:
    """The client sends the package re-encoded from its protos: compare as protos."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    def parsed(document, message):
        return json_format.ParseDict(document, message, ignore_unknown_fields=False)

    assert set(uploaded) == {"pipeline_spec", "platform_spec"}
    assert parsed(uploaded["pipeline_spec"], pipeline_spec_pb2.PipelineSpec()) == parsed(
        job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec()
    )
    assert parsed(uploaded["platform_spec"], pipeline_spec_pb2.PlatformSpec()) == parsed(
        job["platformSpec"], pipeline_spec_pb2.PlatformSpec()
    )


@pytest.fixture
def submitted_run(kfp_api, tmp_path, capsys):
    """`conveyor submit penguin --profile kubeflow` against the fake API: compiled, then run."""
    argv = ["submit", "penguin", "--profile", "kubeflow", "--host", kfp_api.url, *ALERT_SECRET_ENV]
    assert cli.main(argv) == 0
    return kfp_api, json.loads(_job_file(tmp_path).read_text()), capsys.readouterr().out


def test_submit_compiles_the_job_and_creates_one_run_of_it(submitted_run):
    api, job, out = submitted_run
    experiments, runs = "/apis/v2beta1/experiments", "/apis/v2beta1/runs"
    assert api.calls() == [
        ("GET", "/apis/v2beta1/healthz"),
        ("GET", experiments),  # the experiment is looked up by name, then made
        ("POST", experiments),
        ("POST", runs),
    ]
    assert all(r["authorization"] == f"Bearer {TOKEN}" for r in api.requests)
    lookup = json.loads(api.requests[1]["query"]["filter"])["predicates"]
    assert [(p["key"], p["stringValue"]) for p in lookup] == [("display_name", "penguin")]
    (experiment,) = api.bodies("POST", experiments)
    assert experiment["display_name"] == "penguin"  # runtime.kubeflow.experiment: unset
    (run,) = api.bodies("POST", runs)
    created = next(iter(api.experiments))
    assert run["experiment_id"] == created
    assert re.fullmatch(r"penguin-20\d{6}T\d{6}Z", run["display_name"])  # as a local run id
    # The pipeline and platform spec uploaded are the compiled ones; the run's parameters are
    # the job's (none) under the job's own output directory.
    _same_pipeline(run["pipeline_spec"], job)
    assert run["runtime_config"] == {
        "parameters": {},
        "pipeline_root": "gs://conveyor-pipelines/conveyor/pipeline_root/penguin",
    }
    assert job["runtimeConfig"]["gcsOutputDirectory"] == run["runtime_config"]["pipeline_root"]
    assert "recurring_run_id" not in run and "trigger" not in run
    assert f"created run {run['display_name']!r} (" in out
    assert f"{api.url}/#/runs/details/" in out
    # The token went to the API only: the compiled job names its variable, not its value.
    assert TOKEN not in json.dumps(job)


def test_schedule_creates_the_recurring_run_of_the_specs_schedule(submitted_run, tmp_path, capsys):
    api, job, _ = submitted_run
    job_file = _handed_on(job, tmp_path)
    before = len(api.requests)
    argv = [
        "submit",
        "penguin",
        "--profile",
        "kubeflow",
        "--host",
        api.url,
        "--schedule",
        "--job",
        str(job_file),
        "--set",
        "schedule.cron=30 3 * * 1-5",
        *ALERT_SECRET_ENV,
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    recurring = "/apis/v2beta1/recurringruns"
    assert api.calls()[before:] == [
        ("GET", "/apis/v2beta1/healthz"),
        ("GET", "/apis/v2beta1/experiments"),  # found this time: not made again
        ("GET", recurring),  # no recurring run of that name yet
        ("POST", recurring),
    ]
    assert len(api.experiments) == 1
    (created,) = api.bodies("POST", recurring)
    assert created["experiment_id"] == next(iter(api.experiments))
    assert created["display_name"] == "penguin-nightly"
    # The spec's cron with KFP's seconds field, from the kubeflow profile's start date, one
    # night at a time, missed nights not caught up (schedule.catchup: false).
    assert created["trigger"] == {
        "cron_schedule": {"cron": "0 30 3 * * 1-5", "start_time": "2026-12-01T00:00:00Z"}
    }
    assert int(created["max_concurrency"]) == 1
    assert created["no_catchup"] is True
    assert created["mode"] == "ENABLE"
    _same_pipeline(created["pipeline_spec"], job)
    assert created["runtime_config"]["pipeline_root"] == job["runtimeConfig"]["gcsOutputDirectory"]
    assert "created recurring run 'penguin-nightly'" in out

    # Twice would run every night twice: the second is refused before anything is created.
    before = len(api.requests)
    assert cli.main(argv) == 1
    assert "already has the recurring run 'penguin-nightly'" in capsys.readouterr().err
    assert ("POST", recurring) not in api.calls()[before:]
    assert len(api.recurring_runs) == 1


def _handed_on(job: dict, folder: Path) -> Path:
    """The compiled job as a CI step hands it on to `submit --job`."""
    path = folder / "handed-on" / "penguin.json"
    path.parent.mkdir()
    path.write_text(json.dumps(job))
    return path


def test_an_api_refusal_is_one_error_line(submitted_run, tmp_path, capsys):
    api, job, _ = submitted_run
    api.refuse[("POST", "/apis/v2beta1/runs")] = (400, "KFP only supports schema version 2.1.0")
    job_file = _handed_on(job, tmp_path)
    argv = ["submit", "penguin", "--host", api.url, "--job", str(job_file), *ALERT_SECRET_ENV]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        f"error: {api.url} answered 400 Bad Request: KFP only supports schema version 2.1.0"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "no Kubeflow Pipelines API to submit to"),
        (
            [
                "--host",
                "http://127.0.0.1:1",
                "--set",
                "schedule.timezone=Europe/Berlin",
                "--schedule",
            ],
            "KFP's recurring runs fire in UTC",
        ),
        (
            ["--host", "http://127.0.0.1:1", "--set", "runtime.kubeflow.token_env=UNSET_KFP_TOKEN"],
            "'UNSET_KFP_TOKEN', which is unset or empty",
        ),
        (["--host", "http://user:password@127.0.0.1:1"], "--host: host"),
        (
            ["--host", "http://127.0.0.1:1", "--date", "2026-11-25"],
            "penguin's data.span_pattern has no {YYYY}-{MM}-{DD}",
        ),
        (
            ["--host", "http://127.0.0.1:1", "--schedule", "--date", "2026-11-25"],
            "a recurring run takes no --date",
        ),
        (
            ["--host", "http://127.0.0.1:1", "--schedule", "--force"],
            "a recurring run takes no --force",
        ),
    ],
)
def test_what_cannot_be_submitted_fails_before_compiling(extra, message, tmp_path, capsys):
    assert cli.main(["submit", "penguin", *extra]) == 1
    assert message in capsys.readouterr().err
    assert not _job_file(tmp_path).exists()


def test_a_job_of_another_pipeline_is_refused(kfp_api, tmp_path, capsys):
    other = tmp_path / "taxi.json"
    other.write_text(json.dumps({"pipelineSpec": {"pipelineInfo": {"name": "taxi"}}}))
    argv = ["submit", "penguin", "--host", kfp_api.url, "--job", str(other)]
    assert cli.main(argv) == 1
    assert "is pipeline 'taxi''s job, not 'penguin''s" in capsys.readouterr().err
    assert kfp_api.requests == []


def test_a_backfill_run_reads_the_night_it_names(kfp_api, tmp_path, capsys):
    # Taxi's nights are dated spans: the compiled job's ExampleGen reads the newest span unless
    # the run's range_config parameter names one; --date sets it to that night's span.
    argv = ["submit", "taxi", "--profile", "kubeflow", "--host", kfp_api.url, *ALERT_SECRET_ENV]
    assert cli.main([*argv, "--date", "2026-11-25"]) == 0, capsys.readouterr().err
    job = json.loads((tmp_path / "workdir" / "compiled" / "kubeflow" / "taxi.json").read_text())
    root = job["pipelineSpec"]["root"]["inputDefinitions"]["parameters"]
    assert root["range_config"] == {
        "defaultValue": "",
        "isOptional": True,
        "parameterType": "STRING",
    }
    (run,) = kfp_api.bodies("POST", "/apis/v2beta1/runs")
    span = 20782  # days from 1970-01-01 to 2026-11-25
    range_config = json.loads(run["runtime_config"]["parameters"]["range_config"])
    assert range_config == {"static_range": {"start_span_number": span, "end_span_number": span}}


def test_force_runs_the_night_whatever_its_record_says(kfp_api, tmp_path, capsys):
    # The job's first task skips an unchanged night unless the run's `force` parameter is set
    # (pipelines/run/kubeflow_start.py); --force sets it, as `conveyor run --force` runs one.
    argv = ["submit", "penguin", "--host", kfp_api.url, *ALERT_SECRET_ENV, "--force"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    job = json.loads(_job_file(tmp_path).read_text())
    root = job["pipelineSpec"]["root"]["inputDefinitions"]["parameters"]
    assert root["force"] == {"defaultValue": "", "isOptional": True, "parameterType": "STRING"}
    (run,) = kfp_api.bodies("POST", "/apis/v2beta1/runs")
    assert run["runtime_config"]["parameters"]["force"] == "true"
