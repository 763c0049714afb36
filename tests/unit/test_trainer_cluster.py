"""The Trainer's replicas launched as a cluster job (components/trainer/cluster.py).

No cluster here: the TFJob manifest is checked against the Training Operator's published CRD
schema (tests/data/training_operator), the Vertex AI job against aiplatform_v1's own types, and
launching and waiting go through the real clients (kubernetes' CustomObjectsApi, aiplatform's
JobServiceClient over REST) to a stand-in API on 127.0.0.1 that answers as the services do.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest

from components.trainer import cluster
from pipelines import cli
from pipelines.spec import checks
from pipelines.spec.loading import load_spec

SCHEMA_FILE = Path(__file__).parents[1] / "data" / "training_operator" / "tfjob-v1.openapi.json"
MULTI_WORKER = ("trainer.distribution=multi_worker",)
GPU_TFJOB = (
    *MULTI_WORKER,
    "runtime.training.launcher=tfjob",
    "runtime.training.workers=3",
    "runtime.training.timeout_seconds=7200",
    "runtime.container.resources.trainer={cpu: 8, memory: 32Gi, gpu: 2, gpu_type: NVIDIA_L4}",
    "runtime.training.tfjob.node_selector={cloud.google.com/gke-accelerator: nvidia-l4}",
    "runtime.training.tfjob.tolerations=[{key: nvidia.com/gpu, operator: Exists, "
    "effect: NoSchedule}]",
)
GPU_VERTEX = (
    *MULTI_WORKER,
    "runtime.training.launcher=vertex",
    "runtime.training.workers=2",
    "runtime.training.vertex={project: conveyor-prod, region: europe-west4, "
    "machine_type: g2-standard-8}",
    "runtime.container.resources.trainer={gpu: 1, gpu_type: NVIDIA_L4}",
)
IMAGE = "europe-west4-docker.pkg.dev/conveyor-prod/pipelines/conveyor:0.1.0"  # configs/kubeflow
COMMAND = ["python", "-m", "tfx.scripts.run_executor", "--executor_class_path", "X"]


def _closed(schema):
    """The schema with unknown fields refused: the API server silently prunes a field its
    structural schema does not list, so a misspelt one would be lost, never reported."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    if (
        "properties" in closed
        and "additionalProperties" not in closed
        and not closed.get("x-kubernetes-preserve-unknown-fields")
    ):
        closed["additionalProperties"] = False
    return closed


@pytest.fixture(scope="module")
def tfjob_schema():
    return jsonschema.Draft7Validator(_closed(json.loads(SCHEMA_FILE.read_text())))


def _config(*overrides: str, env: str = "kubeflow") -> dict:
    spec = load_spec("penguin", env=env, overrides=overrides).spec
    return cluster.launch_config(spec, "trainer")


# --- manifests --------------------------------------------------------------------------------


def test_tfjob_of_a_gpu_profile_is_valid_for_the_operator(tfjob_schema):
    config = _config(*GPU_TFJOB)
    manifest = cluster.build_tfjob(config, "penguin-trainer-1a2b", "ml", COMMAND)
    tfjob_schema.validate(manifest)

    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert {role: spec["replicas"] for role, spec in replicas.items()} == {"Chief": 1, "Worker": 3}
    pod = replicas["Worker"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "tensorflow"  # the container the operator gives TF_CONFIG
    assert container["image"] == IMAGE
    assert container["command"] == COMMAND
    assert container["resources"]["limits"] == {
        "cpu": 8,
        "memory": "32Gi",
        "nvidia.com/gpu": 2,
    }
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 7200
    assert manifest["metadata"]["namespace"] == "ml"


def test_the_crd_schema_refuses_what_the_operator_would(tfjob_schema):
    manifest = cluster.build_tfjob(_config(*GPU_TFJOB), "penguin-trainer-1a2b", "ml", COMMAND)
    misspelt = json.loads(json.dumps(manifest))
    misspelt["spec"]["tfReplicaSpec"] = misspelt["spec"].pop("tfReplicaSpecs")
    wrong_type = json.loads(json.dumps(manifest))
    wrong_type["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "three"
    unknown_pod_field = json.loads(json.dumps(manifest))
    unknown_pod_field["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["nodeSelectors"] = {}
    for broken in (misspelt, wrong_type, unknown_pod_field):
        assert not tfjob_schema.is_valid(broken)


def test_vertex_job_of_a_gpu_profile_is_built_from_the_api_types():
    from google.cloud import aiplatform_v1 as vertex

    config = _config(*GPU_VERTEX)
    spec = cluster.build_vertex_custom_job(config, COMMAND)
    # A round trip through the API's JSON form: what the service would be sent.
    sent = vertex.CustomJobSpec.from_json(vertex.CustomJobSpec.to_json(spec))
    chief, workers = sent.worker_pool_specs
    assert (chief.replica_count, workers.replica_count) == (1, 2)
    for pool in (chief, workers):
        assert pool.machine_spec.machine_type == "g2-standard-8"
        assert pool.machine_spec.accelerator_type == vertex.AcceleratorType.NVIDIA_L4
        assert pool.machine_spec.accelerator_count == 1
        assert list(pool.container_spec.command) == COMMAND
        assert pool.container_spec.image_uri.endswith("/conveyor:0.1.0")


def test_vertex_refuses_an_accelerator_it_does_not_know():
    config = _config(*GPU_VERTEX)
    config["resources"]["gpu_type"] = "NVIDIA_L44"
    with pytest.raises(KeyError, match="NVIDIA_L44"):
        cluster.build_vertex_custom_job(config, COMMAND)


def test_vertex_launcher_needs_its_project_and_region():
    from pipelines.spec.loading import SpecError

    with pytest.raises(SpecError, match="vertex.project and vertex.region"):
        _config(*MULTI_WORKER, "runtime.training.launcher=vertex")


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "overrides", "expected"),
    [
        ("local", (*MULTI_WORKER, "runtime.training.launcher=tfjob"), "on local"),
        ("airflow", (*MULTI_WORKER, "runtime.training.launcher=tfjob"), "on airflow"),
        ("kubeflow", ("runtime.training.launcher=tfjob",), "'multi_worker' (it is 'default')"),
        ("kubeflow", MULTI_WORKER, "needs the workers launched"),
    ],
)
def test_validation_refuses_a_launcher_that_cannot_work(env, overrides, expected):
    loaded = load_spec("penguin", env=env, overrides=overrides)
    with pytest.raises(checks.ProfileError, match="runtime.training.launcher") as err:
        checks.check_profile(loaded)
    assert expected in str(err.value)


def test_validate_command_names_the_key(capsys):
    argv = ["validate", "penguin", "--set", "trainer.distribution=multi_worker"]
    assert cli.main([*argv, "--set", "runtime.training.launcher=tfjob"]) != 0
    assert "runtime.training.launcher" in capsys.readouterr().err


def test_local_training_launches_nothing():
    assert _config() is None
    assert _config(*MULTI_WORKER, env="local") is None


# --- the replicas' command ----------------------------------------------------------------------


def _artifacts(tmp_path: Path, root: str = "") -> tuple[dict, dict]:
    from tfx.types import standard_artifacts

    def artifact(kind, name):
        made = kind()
        made.uri = root + str(tmp_path / name)
        return made

    inputs = {
        "examples": [artifact(standard_artifacts.Examples, "examples")],
        "schema": [artifact(standard_artifacts.Schema, "schema")],
        "statistics": [artifact(standard_artifacts.ExampleStatistics, "statistics")],
    }
    outputs = {
        "model": [artifact(standard_artifacts.Model, "model")],
        "model_run": [artifact(standard_artifacts.ModelRun, "model_run")],
    }
    return inputs, outputs


def _exec_properties(config: dict) -> dict:
    custom = {"trainer": {"label": "species"}, "code_version": "v1", cluster.CLUSTER_KEY: config}
    return {"custom_config": json.dumps(custom), "run_fn": "components.trainer.run.run_fn"}


def test_replica_command_runs_this_executor_without_launching_again(tmp_path):
    from tfx.scripts import run_executor
    from tfx.types import artifact_utils

    inputs, outputs = _artifacts(tmp_path, root="/gcs")
    properties = _exec_properties(_config(*GPU_TFJOB))
    command = cluster.replica_command(inputs, outputs, properties, cluster.replica_uri)

    assert command[:3] == cluster.RUN_EXECUTOR
    args, _ = run_executor.parse_flags(["run_executor", *command[3:]])
    assert args.executor_class_path == "components.trainer.component.Executor"
    replica_properties = json.loads(args.exec_properties)
    replica_config = json.loads(replica_properties["custom_config"])
    assert cluster.CLUSTER_KEY not in replica_config
    assert replica_config["trainer"] == {"label": "species"}
    model = artifact_utils.parse_artifact_dict(args.outputs)["model"][0]
    assert model.uri == "gs:/" + str(tmp_path / "model")  # the bucket behind KFP's /gcs/ folder
    assert artifact_utils.parse_artifact_dict(args.inputs).keys() == inputs.keys()


# --- launch and wait, to the client boundary ----------------------------------------------------


class _StandIn(BaseHTTPRequestHandler):
    """Answers requests from `self.server.answer(method, path, body) -> (status, json)` and
    records them in `self.server.requests`."""

    def _handle(self, method: str):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.requests.append((method, self.path.split("?")[0], body))
        status, answer = self.server.answer(method, self.path.split("?")[0], body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server's name
        self._handle("GET")

    def do_POST(self):  # noqa: N802 - http.server's name
        self._handle("POST")

    def do_DELETE(self):  # noqa: N802 - http.server's name
        self._handle("DELETE")

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in():
    servers = []

    def start(answer: Callable) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
        server.answer, server.requests = answer, []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _condition(kind: str, reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": "True", "reason": reason, "message": message}


def _kubernetes_api(tfjob_schema, states: list[list[dict]], on_success=None):
    """A Kubernetes API answering TFJob create (validated as the API server validates it), get
    (the next of `states`' condition lists, the last one repeated) and delete."""
    jobs: dict[str, dict] = {}
    gets = {"count": 0}
    prefix = "/apis/kubeflow.org/v1/namespaces/ml/tfjobs"

    def answer(method, path, body):
        if method == "POST" and path == prefix:
            errors = [e.message for e in tfjob_schema.iter_errors(body)]
            if errors:
                return 422, {"kind": "Status", "status": "Failure", "message": errors[0]}
            jobs[body["metadata"]["name"]] = body
            return 201, body
        name = path.rsplit("/", 1)[-1]
        if path != f"{prefix}/{name}" or name not in jobs:
            return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound"}
        if method == "DELETE":
            del jobs[name]
            return 200, {"kind": "Status", "status": "Success"}
        conditions = states[min(gets["count"], len(states) - 1)]
        gets["count"] += 1
        if on_success and conditions and conditions[-1]["type"] == "Succeeded":
            on_success(jobs[name])
        return 200, {**jobs[name], "status": {"conditions": conditions}}

    return answer


def _client(server):
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    return client.CustomObjectsApi(client.ApiClient(configuration))


CREATED = [_condition("Created", "TFJobCreated")]
RUNNING = [*CREATED, _condition("Running", "TFJobRunning")]


def test_tfjob_is_created_and_waited_for_until_it_succeeds(stand_in, tfjob_schema):
    succeeded = [*RUNNING, _condition("Succeeded", "TFJobSucceeded")]
    server = stand_in(_kubernetes_api(tfjob_schema, [CREATED, RUNNING, RUNNING, succeeded]))
    config = {**_config(*GPU_TFJOB), "poll_seconds": 0.5}
    manifest = cluster.build_tfjob(config, "penguin-trainer-1a2b", "ml", COMMAND)
    sleeps = []
    finished = cluster.run_tfjob(manifest, config, _client(server), sleeps.append)

    assert cluster.tfjob_condition(finished)["type"] == "Succeeded"
    methods = [(method, path.rsplit("/", 1)[-1]) for method, path, _ in server.requests]
    assert methods == [("POST", "tfjobs")] + [("GET", "penguin-trainer-1a2b")] * 4
    assert server.requests[0][2] == manifest  # what the operator gets is what was built
    assert sleeps == [0.5] * 3


def test_a_failed_tfjob_fails_the_task_with_the_operators_reason(stand_in, tfjob_schema):
    message = "TFJob ml/penguin-trainer-1a2b has failed because 1 Worker replica(s) failed."
    failed = [*RUNNING, _condition("Failed", "TFJobFailed", message)]
    server = stand_in(_kubernetes_api(tfjob_schema, [CREATED, RUNNING, failed]))
    config = {**_config(*GPU_TFJOB), "poll_seconds": 0.01}
    manifest = cluster.build_tfjob(config, "penguin-trainer-1a2b", "ml", COMMAND)
    with pytest.raises(cluster.ClusterTrainingFailed) as err:
        cluster.run_tfjob(manifest, config, _client(server), lambda _: None)
    assert str(err.value) == f"TFJob ml/penguin-trainer-1a2b failed: TFJobFailed: {message}"


def test_a_tfjob_past_its_timeout_is_deleted(stand_in, tfjob_schema, monkeypatch):
    server = stand_in(_kubernetes_api(tfjob_schema, [CREATED, RUNNING]))
    config = {**_config(*GPU_TFJOB), "poll_seconds": 0.01, "timeout_seconds": 60}
    clock = iter(range(0, 10_000, 45))
    monkeypatch.setattr(cluster.time, "monotonic", lambda: next(clock))
    manifest = cluster.build_tfjob(config, "penguin-trainer-1a2b", "ml", COMMAND)
    with pytest.raises(cluster.ClusterTrainingFailed, match="timeout_seconds \\(60\\)"):
        cluster.run_tfjob(manifest, config, _client(server), lambda _: None)
    assert server.requests[-1][0] == "DELETE"


def test_an_invalid_manifest_is_refused_by_the_api(stand_in, tfjob_schema):
    from kubernetes.client.exceptions import ApiException

    server = stand_in(_kubernetes_api(tfjob_schema, [CREATED]))
    manifest = cluster.build_tfjob(_config(*GPU_TFJOB), "penguin-trainer-1a2b", "ml", COMMAND)
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "three"
    with pytest.raises(ApiException) as err:
        cluster.run_tfjob(manifest, _config(*GPU_TFJOB), _client(server), lambda _: None)
    assert err.value.status == 422


def test_trainer_task_launches_its_replicas_and_records_the_chiefs_summary(
    stand_in, tfjob_schema, tmp_path, monkeypatch
):
    """The Trainer executor's hook: with a launcher in custom_config it creates the TFJob whose
    replicas run the executor without it, waits, and puts the chief's summary on the Model."""
    from components.trainer.component import Executor
    from pipelines.core.artifact_files import TRAINING_SUMMARY_FILE

    summary = {
        "steps": 500,
        "replicas": 4,
        "global_batch_size": 256,
        "resumed_from_step": 0,
        "examples_per_second": 1234.5,
        "strategy": "MultiWorkerMirroredStrategy",
        "metrics": {"loss": 0.25},
    }

    def chief_exports(job):  # what the chief does before the operator reports success
        (model_run,) = json.loads(_flag(job, "--outputs"))["model_run"]
        folder = Path(model_run["artifact"]["uri"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / TRAINING_SUMMARY_FILE).write_text(json.dumps(summary))

    succeeded = [*RUNNING, _condition("Succeeded", "TFJobSucceeded")]
    server = stand_in(_kubernetes_api(tfjob_schema, [CREATED, succeeded], chief_exports))
    monkeypatch.setattr(cluster, "kubernetes_api", lambda: _client(server))
    config = {**_config(*GPU_TFJOB, "runtime.training.tfjob.namespace=ml"), "poll_seconds": 0.01}
    inputs, outputs = _artifacts(tmp_path)

    Executor().Do(inputs, outputs, _exec_properties(config))

    created = server.requests[0][2]
    assert created["metadata"]["name"].startswith("penguin-trainer-")
    replica_config = json.loads(json.loads(_flag(created, "--exec-properties"))["custom_config"])
    assert cluster.CLUSTER_KEY not in replica_config
    model = outputs["model"][0]
    assert model.get_int_custom_property("conveyor_replicas") == 4
    assert model.get_string_custom_property("conveyor_strategy") == "MultiWorkerMirroredStrategy"


def _flag(job: dict, flag: str) -> str:
    command = job["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["command"]
    return command[command.index(flag) + 1]


def _vertex_api(states: list[dict]):
    """Vertex AI's REST API for custom jobs: create, get (the next of `states`), cancel."""
    gets = {"count": 0}
    parent = "projects/conveyor-prod/locations/europe-west4"
    name = f"{parent}/customJobs/42"

    def answer(method, path, body):
        if method == "POST" and path == f"/v1/{parent}/customJobs":
            return 200, {**body, "name": name, "state": "JOB_STATE_QUEUED"}
        if method == "POST" and path == f"/v1/{name}:cancel":
            return 200, {}
        if method == "GET" and path == f"/v1/{name}":
            state = states[min(gets["count"], len(states) - 1)]
            gets["count"] += 1
            return 200, {"name": name, **state}
        return 404, {"error": {"code": 404, "message": "not found"}}

    return answer


def _vertex_client(server):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1 as vertex

    return vertex.JobServiceClient(
        transport="rest",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": f"http://127.0.0.1:{server.server_address[1]}"},
    )


def test_vertex_job_is_created_and_waited_for_until_it_succeeds(stand_in):
    states = [{"state": s} for s in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING")]
    server = stand_in(_vertex_api([*states, {"state": "JOB_STATE_SUCCEEDED"}]))
    config = {**_config(*GPU_VERTEX), "poll_seconds": 0.01}
    spec = cluster.build_vertex_custom_job(config, COMMAND)
    job = cluster.run_vertex_job(spec, "penguin-trainer-1a2b", config, _vertex_client(server))

    assert job.state.name == "JOB_STATE_SUCCEEDED"
    method, path, body = server.requests[0]
    assert (method, body["displayName"]) == ("POST", "penguin-trainer-1a2b")
    pools = body["jobSpec"]["workerPoolSpecs"]
    assert [int(pool["replicaCount"]) for pool in pools] == [1, 2]


def test_a_failed_vertex_job_fails_the_task_with_its_error(stand_in):
    error = {"code": 3, "message": "The replica workerpool1-0 exited with a non-zero status of 1."}
    server = stand_in(_vertex_api([{"state": "JOB_STATE_FAILED", "error": error}]))
    config = {**_config(*GPU_VERTEX), "poll_seconds": 0.01}
    spec = cluster.build_vertex_custom_job(config, COMMAND)
    with pytest.raises(cluster.ClusterTrainingFailed, match="workerpool1-0 exited") as err:
        cluster.run_vertex_job(spec, "penguin-trainer-1a2b", config, _vertex_client(server))
    assert "JOB_STATE_FAILED" in str(err.value)


# --- compile ------------------------------------------------------------------------------------


def _trainer_custom_config(job: dict) -> dict:
    from pipelines.run.kubeflow import job_tasks

    task = job_tasks(job["pipelineSpec"])["trainer"]
    parameter = task["inputs"]["parameters"]["custom_config"]["runtimeValue"]["constant"]
    return json.loads(parameter)


def test_compiled_multi_worker_job_carries_what_the_trainer_launches(tmp_path, tfjob_schema):
    output = tmp_path / "penguin.json"
    sets = [arg for override in GPU_TFJOB for arg in ("--set", override)]
    argv = ["compile", "penguin", "--env", "kubeflow", "--output", str(output), *sets]
    assert cli.main(argv) == 0

    config = _trainer_custom_config(json.loads(output.read_text()))[cluster.CLUSTER_KEY]
    assert config["launcher"] == "tfjob"
    assert config["workers"] == 3
    assert config["image"] == IMAGE
    assert config["resources"] == {"cpu": 8, "memory": "32Gi", "gpu": 2, "gpu_type": "NVIDIA_L4"}
    # What the trainer task will create from it is a TFJob the operator accepts.
    tfjob_schema.validate(cluster.build_tfjob(config, "penguin-trainer-1a2b", "ml", COMMAND))


def test_compile_refuses_an_accelerator_vertex_ai_does_not_have(tmp_path, capsys):
    output = tmp_path / "penguin.json"
    bad = "runtime.container.resources.trainer={gpu: 1, gpu_type: NVIDIA_L44}"
    sets = [arg for override in (*GPU_VERTEX, bad) for arg in ("--set", override)]
    argv = ["compile", "penguin", "--env", "kubeflow", "--output", str(output), *sets]
    assert cli.main(argv) != 0
    assert "runtime.container.resources.trainer.gpu_type" in capsys.readouterr().err
    assert not output.exists()
