"""The infra validator's model server runners (components/infra_validator/runners/), without
starting a model server: the choice as the spec makes it and the executor reads it, how the
binary runner finds and starts `tensorflow_model_server`, the model server's own acceptance of
TF Serving's flags, and the Kubernetes runner's Job, held against the container `conveyor
deploy render` writes and driven through a stand-in of the Kubernetes API up to the HTTP wait
(no cluster exists here). tests/e2e/test_infra_validation.py serves real models through them.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from components.infra_validator import blessing, runners
from components.infra_validator.runners import kubernetes as kube
from components.infra_validator.runners import local
from components.infra_validator.runners.base import (
    InfraValidationError,
    RunnerSetupError,
    ServerChoice,
)
from pipelines.builder.nodes.infra_validator import server_choice
from pipelines.core.metadata.artifacts import ArtifactRecord, NodeArtifacts
from pipelines.finish import report
from pipelines.spec.loading import SpecError, load_spec

MODEL = "penguin"


def _spec(*overrides: str):
    return load_spec("penguin", env="local", overrides=list(overrides)).spec


# --- the choice ------------------------------------------------------------------------------


def test_conveyor_s_server_is_the_default_and_travels_as_json():
    choice = server_choice(_spec())
    assert choice == ServerChoice(kind="conveyor")
    assert ServerChoice.from_json(choice.to_json()) == choice
    # A pipeline compiled before the choice existed gets no parameter: Conveyor's server.
    assert ServerChoice.from_json(None) == ServerChoice()


def test_the_binary_choice_carries_its_path_and_kubernetes_the_deploy_image():
    binary = server_choice(
        _spec(
            "push.infra_server.kind=tensorflow_model_server",
            "push.infra_server.binary_path=/opt/tfs/bin/tensorflow_model_server",
        )
    )
    assert binary == ServerChoice(
        kind="tensorflow_model_server", binary_path="/opt/tfs/bin/tensorflow_model_server"
    )
    spec = _spec("push.infra_server.kind=kubernetes", "push.infra_server.namespace=ml")
    choice = server_choice(spec)
    deploy = spec.push.deploy
    assert (choice.kind, choice.namespace, choice.image) == ("kubernetes", "ml", deploy.image)
    assert (choice.cpu, choice.memory) == (deploy.resources.cpu, deploy.resources.memory)
    assert ServerChoice.from_json(choice.to_json()) == choice


def test_the_built_validator_carries_the_choice(tmp_path):
    from components.infra_validator import executor
    from pipelines.builder.pipeline import build_pipeline

    def validator(*overrides: str):
        spec = load_spec("penguin", env="ci", overrides=list(overrides)).spec
        pipeline = build_pipeline(spec, tmp_path / str(len(overrides)))
        [node] = [n for n in pipeline.components if n.id == "infra_validator"]
        return ServerChoice.from_json(node.exec_properties[executor.SERVER_KEY])

    assert validator() == ServerChoice(kind="conveyor")
    chosen = validator(
        "push.infra_server.kind=tensorflow_model_server", "push.infra_server.binary_path=/b/tfs"
    )
    assert chosen == ServerChoice(kind="tensorflow_model_server", binary_path="/b/tfs")


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["push.infra_server.binary_path=/usr/bin/x"], "binary_path is for kind"),
        (
            ["push.infra_server.kind=tensorflow_model_server", "push.infra_server.namespace=ml"],
            "namespace is for kind kubernetes",
        ),
        (["push.infra_server.kind=docker"], "push.infra_server.kind"),
    ],
)
def test_a_setting_of_another_kind_is_refused_naming_the_key(overrides, named):
    with pytest.raises(SpecError) as raised:
        _spec(*overrides)
    assert named in str(raised.value)


def test_an_unknown_kind_in_the_parameter_is_refused():
    with pytest.raises(RunnerSetupError, match="unknown infra validation server 'docker'"):
        ServerChoice.from_json('{"kind": "docker"}')


# --- the binary runner -------------------------------------------------------------------------


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_the_binary_is_the_named_path_or_else_the_one_on_path(tmp_path, monkeypatch):
    named = _executable(tmp_path / "named" / "tensorflow_model_server")
    on_path = _executable(tmp_path / "bin" / "tensorflow_model_server")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert local.find_binary(str(named)) == str(named)
    assert local.find_binary(None) == str(on_path)

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RunnerSetupError, match="no tensorflow_model_server is on PATH"):
        local.find_binary(None)
    (tmp_path / "plain").write_text("not a program")
    with pytest.raises(RunnerSetupError, match="is not an executable file"):
        local.find_binary(str(tmp_path / "plain"))


def test_a_missing_binary_fails_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RunnerSetupError):
        runners.make_runner(
            ServerChoice(kind="tensorflow_model_server"), MODEL, str(tmp_path / "m"), tmp_path
        )


def test_the_binary_gets_tf_serving_s_own_flags_and_two_free_ports(tmp_path):
    runner = local.BinaryRunner("/bin/tfs", MODEL, tmp_path / "models" / MODEL, tmp_path)
    grpc, rest = local.free_ports(2)
    assert grpc != rest
    assert runner.command(grpc, rest) == [
        "/bin/tfs",
        f"--port={grpc}",
        f"--rest_api_port={rest}",
        f"--model_name={MODEL}",
        f"--model_base_path={tmp_path / 'models' / MODEL}",
    ]
    assert runner.describe() == "tensorflow_model_server (/bin/tfs)"


def test_conveyor_s_server_takes_tf_serving_s_command_line():
    from pipelines.serving.model_server.__main__ import build_parser, options_from_args

    parser = build_parser()
    args = parser.parse_args(
        ["--port=8500", "--rest_api_port=9001", "--model_name=m", "--model_base_path=/models/m"]
    )
    options = options_from_args(args, parser)
    # --port is TF Serving's gRPC port there: the REST port is --rest_api_port.
    assert (options.port, options.model_name, options.model_base_path) == (9001, "m", "/models/m")
    args = parser.parse_args(["--rest_api_port", "9002", "--model_config_file", "/c/models.config"])
    assert options_from_args(args, parser).model_config_file == "/c/models.config"
    # Its own spelling is unchanged: --port is the REST port.
    args = parser.parse_args(["--model-name", "m", "--model-base-path", "/m", "--port", "8600"])
    assert options_from_args(args, parser).port == 8600


def test_rest_api_port_0_is_refused_as_tf_serving_s_rest_off(capsys):
    from pipelines.serving.model_server.__main__ import build_parser, options_from_args

    parser = build_parser()
    args = parser.parse_args(["--rest_api_port=0", "--model_name=m", "--model_base_path=/m"])
    with pytest.raises(SystemExit):
        options_from_args(args, parser)
    assert "serves only the REST API" in capsys.readouterr().err


# --- the Kubernetes runner ---------------------------------------------------------------------


def _rendered_container(spec) -> tuple[dict, dict]:
    """`deploy render`'s tf-serving container and the selector its Service uses."""
    from pipelines.serving import manifests

    for obj in manifests.render(spec, "tf-serving").values():
        if obj.get("kind") == "Deployment":
            [container] = obj["spec"]["template"]["spec"]["containers"]
            service_selector = obj["spec"]["selector"]["matchLabels"]
            return container, service_selector
    raise AssertionError("deploy render wrote no Deployment")


def _job(runner) -> dict:
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(runner.job_manifest())


def _runner(spec, **kwargs) -> kube.KubernetesRunner:
    kwargs.setdefault("batch_api", None)
    kwargs.setdefault("core_api", None)
    return kube.KubernetesRunner(
        server_choice(spec),
        spec.push.model_name,
        f"gs://bucket/root/infra/.candidate/models/{spec.push.model_name}",
        namespace="ml",
        **kwargs,
    )


@pytest.mark.parametrize(
    "overrides",
    [(), ("push.deploy.resources.cpu=0.5", "push.deploy.resources.memory=3Gi")],
)
def test_the_job_serves_with_deploy_render_s_container(overrides):
    spec = _spec("push.infra_server.kind=kubernetes", *overrides)
    rendered, selector = _rendered_container(spec)
    job = _job(_runner(spec))
    [container] = job["spec"]["template"]["spec"]["containers"]
    for key in ("name", "image", "command", "ports", "readinessProbe", "resources"):
        assert container[key] == rendered[key], key
    # The same ports by the same flags; the candidate by name and base path, not the ConfigMap.
    assert container["args"][:2] == rendered["args"][:2] == ["--port=8500", "--rest_api_port=8501"]
    assert container["args"][2:] == [
        f"--model_name={spec.push.model_name}",
        f"--model_base_path=gs://bucket/root/infra/.candidate/models/{spec.push.model_name}",
    ]
    # Its pod is never one the production Service sends traffic to.
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert any(labels.get(k) != v for k, v in selector.items())


def test_the_job_runs_once_ends_by_itself_and_belongs_to_the_validator_s_pod():
    from kubernetes import client

    owner = client.V1OwnerReference(api_version="v1", kind="Pod", name="iv-pod", uid="u-1")
    job = _job(_runner(_spec("push.infra_server.kind=kubernetes"), owner=owner))
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"]["generateName"] == kube.JOB_NAME_PREFIX
    assert job["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "iv-pod", "uid": "u-1"}
    ]
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] == kube.ACTIVE_DEADLINE_SECONDS
    assert job["spec"]["ttlSecondsAfterFinished"] == kube.TTL_SECONDS_AFTER_FINISHED


def test_a_candidate_on_local_disk_is_refused_for_kubernetes(tmp_path):
    with pytest.raises(RunnerSetupError, match="a TF Serving pod cannot read"):
        kube.KubernetesRunner(
            ServerChoice(kind="kubernetes"),
            MODEL,
            str(tmp_path / "models" / MODEL),
            namespace="ml",
            batch_api=None,
            core_api=None,
        )


def test_outside_a_cluster_the_kubernetes_runner_says_so(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(RunnerSetupError, match="runs inside a Kubernetes pod"):
        runners.make_runner(ServerChoice(kind="kubernetes"), MODEL, "gs://b/m", Path("."))


class _Cluster:
    """The two Kubernetes APIs the runner calls, answering as a cluster would: the Job's pod is
    Pending, then Running at `pod_ip` (or `Failed`, with a log)."""

    def __init__(self, phases: list[str], pod_ip: str = "127.0.0.1"):
        self.phases = list(phases)
        self.pod_ip = pod_ip
        self.calls: list[tuple] = []

    # BatchV1Api
    def create_namespaced_job(self, namespace, body):
        self.calls.append(("create", namespace, body.metadata.generate_name))
        return SimpleNamespace(metadata=SimpleNamespace(name=body.metadata.generate_name + "x1"))

    def delete_namespaced_job(self, name, namespace, propagation_policy):
        self.calls.append(("delete", namespace, name, propagation_policy))

    # CoreV1Api
    def list_namespaced_pod(self, namespace, label_selector):
        self.calls.append(("list", namespace, label_selector))
        if not self.phases:
            return SimpleNamespace(items=[])
        phase = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
        ip = self.pod_ip if phase == "Running" else None
        pod = SimpleNamespace(
            metadata=SimpleNamespace(name="job-pod"), status=SimpleNamespace(phase=phase, pod_ip=ip)
        )
        return SimpleNamespace(items=[pod])

    def read_namespaced_pod_log(self, name, namespace, tail_lines):
        return "Loading servable\nNot found: Could not find base path gs://b/m\n"


class _StatusServer:
    """`GET /v1/models/M` as TF Serving answers once the model is loaded, on a free port."""

    def __enter__(self):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body = json.dumps(
                    {"model_version_status": [{"version": "1", "state": "AVAILABLE"}]}
                ).encode()
                self.send_response(200 if self.path == f"/v1/models/{MODEL}" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.server.server_address[1]

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_the_runner_creates_waits_for_and_deletes_the_job(monkeypatch):
    monkeypatch.setattr(kube, "POD_POLL_SECONDS", 0.01)
    cluster = _Cluster(["Pending", "Pending", "Running"])
    spec = _spec("push.infra_server.kind=kubernetes")
    with _StatusServer() as port:
        runner = _runner(spec, batch_api=cluster, core_api=cluster, rest_port=port)
        runner.start()
        runner.wait_until_running(30)
        assert runner.get_endpoint() == f"http://127.0.0.1:{port}"
        runner.stop()
    job = kube.JOB_NAME_PREFIX + "x1"
    assert cluster.calls[0] == ("create", "ml", kube.JOB_NAME_PREFIX)
    assert ("list", "ml", f"job-name={job}") in cluster.calls
    assert cluster.calls[-1] == ("delete", "ml", job, "Background")
    assert runner.describe().endswith(f"on Kubernetes (job {job} in namespace ml)")


def test_a_pod_that_ends_before_it_is_ready_is_quoted(monkeypatch):
    monkeypatch.setattr(kube, "POD_POLL_SECONDS", 0.01)
    cluster = _Cluster(["Pending", "Failed"])
    runner = _runner(
        _spec("push.infra_server.kind=kubernetes"), batch_api=cluster, core_api=cluster
    )
    runner.start()
    with pytest.raises(InfraValidationError) as raised:
        runner.wait_until_running(30)
    runner.stop()
    assert str(raised.value).startswith("the model server's pod job-pod ended (Failed) before")
    assert "Could not find base path" in str(raised.value)
    assert cluster.calls[-1][0] == "delete"


def test_a_pod_never_scheduled_times_out_naming_the_job(monkeypatch):
    monkeypatch.setattr(kube, "POD_POLL_SECONDS", 0.01)
    cluster = _Cluster([])
    runner = _runner(
        _spec("push.infra_server.kind=kubernetes"), batch_api=cluster, core_api=cluster
    )
    runner.start()
    with pytest.raises(InfraValidationError, match="not ready within 0.05 s: no pod was scheduled"):
        runner.wait_until_running(0.05)


# --- what the blessing and the report say ------------------------------------------------------


def test_the_report_reads_the_server_the_blessing_records():
    assert report.INFRA_SERVER_PROPERTY == blessing.SERVER_PROPERTY
    assert report.INFRA_SERVER_DESCRIPTION_PROPERTY == blessing.SERVER_DESCRIPTION_PROPERTY
    described = ArtifactRecord(
        1,
        "InfraBlessing",
        "/x",
        custom_properties={
            "blessed": 1,
            blessing.SERVER_PROPERTY: "tensorflow_model_server",
            blessing.SERVER_DESCRIPTION_PROPERTY: "tensorflow_model_server (/opt/tfs)",
        },
    )
    node = NodeArtifacts("infra_validator", "executed", outputs={"blessing": [described]})
    assert report._infra_server({"infra_validator": node}) == "tensorflow_model_server (/opt/tfs)"
    not_served = ArtifactRecord(2, "InfraBlessing", "/y", custom_properties={"blessed": 0})
    node = NodeArtifacts("infra_validator", "executed", outputs={"blessing": [not_served]})
    assert report._infra_server({"infra_validator": node}) is None
    assert report._infra_server({}) is None


def test_the_blessing_records_the_server_and_nothing_when_none_ran(tmp_path):
    from tfx.types import standard_artifacts

    served = standard_artifacts.InfraBlessing()
    served.uri = str(tmp_path)
    blessing.mark_server(served, "conveyor", "Conveyor's model server")
    assert served.get_string_custom_property(blessing.SERVER_PROPERTY) == "conveyor"
    unserved = standard_artifacts.InfraBlessing()
    unserved.uri = os.fspath(tmp_path)
    blessing.mark_server(unserved, None, None)
    assert not unserved.has_custom_property(blessing.SERVER_PROPERTY)
