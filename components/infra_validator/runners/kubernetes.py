"""The runner for the Kubeflow target: TF Serving's image as a Kubernetes Job beside the
validator's own pod, as TFX's kubernetes_runner.py starts a Pod.

The Job's container is the one `conveyor deploy render --target tf-serving` renders for
production (pipelines/serving/manifests.py): the same image (`push.deploy.image`), command,
ports, readiness probe and resources (`push.deploy.resources`), serving the candidate by
`--model_name` and `--model_base_path` instead of the ConfigMap's models.config. It is built
here with the Kubernetes client's models because executors sit below the serving layer;
tests/unit/test_infra_validator_runners.py holds the two containers side by side so they cannot
drift apart. Its pods carry labels of their own, so the production Service (which selects
`app.kubernetes.io/name` and `app.kubernetes.io/instance`) never sends them traffic.

The candidate must be where the Job's pod reads it itself: a gs:// or s3:// base path (the
executor stages it beside the InfraBlessing, under the pipeline root). The Job is owned by the
validator's pod when the runner can read that pod (so it goes when the pod goes), runs once
(no restarts: a server that dies fails the validation), ends by itself after
`ACTIVE_DEADLINE_SECONDS`, and `stop` deletes it with its pod.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from absl import logging

from components.infra_validator.runners.base import (
    KUBERNETES,
    InfraValidationError,
    ModelServerRunner,
    RunnerSetupError,
    ServerChoice,
    wait_until_available,
)

DEFAULT_IMAGE = "tensorflow/serving:2.16.1"
CONTAINER_NAME = "tf-serving"
GRPC_PORT = 8500
REST_PORT = 8501
GPU_RESOURCE = "nvidia.com/gpu"
JOB_NAME_PREFIX = "conveyor-infra-validation-"
# A hard end for a Job whose validator died without deleting it (owner references aside).
ACTIVE_DEADLINE_SECONDS = 3600
TTL_SECONDS_AFTER_FINISHED = 600
POD_POLL_SECONDS = 2.0
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Schemes TF Serving's file systems read directly as a base path.
DIRECT_SCHEMES = ("gs://", "s3://", "hdfs://")


class KubernetesRunner(ModelServerRunner):
    """TF Serving's image as a Kubernetes Job, reached at its pod's IP."""

    kind = KUBERNETES

    def __init__(
        self,
        choice: ServerChoice,
        model_name: str,
        base_path: str,
        *,
        namespace: str,
        batch_api: Any,
        core_api: Any,
        owner: Any = None,
        rest_port: int = REST_PORT,
    ):
        """Serves `base_path` (a URI holding numbered versions) as `model_name` in `namespace`,
        through the Kubernetes client's `BatchV1Api` and `CoreV1Api`; `owner` (a
        `V1OwnerReference`) is the validator's pod. Use `in_cluster` inside a pod."""
        if not base_path.startswith(DIRECT_SCHEMES):
            raise RunnerSetupError(
                f"the candidate is staged at {base_path}, which a TF Serving pod cannot read: "
                f"the kubernetes infra server needs a pipeline root on "
                f"{', '.join(DIRECT_SCHEMES)}"
            )
        self.choice = choice
        self.model_name = model_name
        self.base_path = base_path
        self.namespace = namespace
        self.batch_api = batch_api
        self.core_api = core_api
        self.owner = owner
        self.rest_port = rest_port
        self.image = choice.image or DEFAULT_IMAGE
        self.job_name: str | None = None
        self.pod_name: str | None = None
        self.pod_ip: str | None = None
        self.started = 0.0

    @classmethod
    def in_cluster(cls, choice: ServerChoice, model_name: str, base_path: str) -> KubernetesRunner:
        """The runner inside a pod: the client configured from the pod's service account, the
        namespace from `push.infra_server.namespace` or the pod's own, the pod as the Job's
        owner when it can be read."""
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException as err:
            raise RunnerSetupError(
                f"push.infra_server.kind is {KUBERNETES}, which runs inside a Kubernetes pod "
                f"(the Kubeflow target), and this is not one: {err}"
            ) from None
        own_namespace = _own_namespace()
        namespace = choice.namespace or own_namespace
        core_api = client.CoreV1Api()
        owner = _own_pod(core_api, own_namespace) if namespace == own_namespace else None
        return cls(
            choice,
            model_name,
            base_path,
            namespace=namespace,
            batch_api=client.BatchV1Api(),
            core_api=core_api,
            owner=owner,
        )

    def describe(self) -> str:
        """Names the image and where it ran, for the InfraBlessing."""
        where = f"job {self.job_name}" if self.job_name else "a job"
        return f"{self.image} on Kubernetes ({where} in namespace {self.namespace})"

    def job_manifest(self) -> Any:
        """The Job (a `kubernetes.client.V1Job`) that serves the candidate."""
        from kubernetes import client

        instance = _label_value(f"{self.model_name}-infra-validation")
        labels = {
            "app.kubernetes.io/name": "tf-serving",
            "app.kubernetes.io/instance": instance,
            "app.kubernetes.io/component": "infra-validation",
            "app.kubernetes.io/managed-by": "conveyor",
        }
        container = client.V1Container(
            name=CONTAINER_NAME,
            image=self.image,
            command=["tensorflow_model_server"],
            args=[
                f"--port={GRPC_PORT}",
                f"--rest_api_port={self.rest_port}",
                f"--model_name={self.model_name}",
                f"--model_base_path={self.base_path}",
            ],
            ports=[
                client.V1ContainerPort(name="grpc", container_port=GRPC_PORT, protocol="TCP"),
                client.V1ContainerPort(name="http", container_port=self.rest_port, protocol="TCP"),
            ],
            readiness_probe=client.V1Probe(
                http_get=client.V1HTTPGetAction(
                    path=f"/v1/models/{self.model_name}", port=self.rest_port
                ),
                initial_delay_seconds=5,
                period_seconds=10,
                failure_threshold=3,
            ),
            resources=client.V1ResourceRequirements(**container_resources(self.choice)),
        )
        return client.V1Job(
            api_version="batch/v1",
            kind="Job",
            metadata=client.V1ObjectMeta(
                generate_name=JOB_NAME_PREFIX,
                labels=labels,
                owner_references=[self.owner] if self.owner is not None else None,
            ),
            spec=client.V1JobSpec(
                backoff_limit=0,  # a server that dies fails the validation; no second try
                active_deadline_seconds=ACTIVE_DEADLINE_SECONDS,
                ttl_seconds_after_finished=TTL_SECONDS_AFTER_FINISHED,
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(containers=[container], restart_policy="Never"),
                ),
            ),
        )

    def start(self) -> None:
        """Creates the Job; its pod is scheduled later."""
        self.started = time.monotonic()
        job = self.batch_api.create_namespaced_job(
            namespace=self.namespace, body=self.job_manifest()
        )
        self.job_name = job.metadata.name
        logging.info("Infra validation: created %s", self.describe())

    def wait_until_running(self, timeout_seconds: float) -> None:
        """Waits for the Job's pod to run with an IP, then for TF Serving to report the model
        AVAILABLE there."""
        deadline = self.started + timeout_seconds

        def late() -> InfraValidationError:
            return InfraValidationError(
                f"the model server was not ready within {timeout_seconds:g} s: {self._pod_state()}"
            )

        while self.pod_ip is None:
            pod = self._find_pod()
            if pod is not None:
                self._check_pod(pod)
                if pod.status.phase == "Running" and pod.status.pod_ip:
                    self.pod_ip = pod.status.pod_ip
                    break
            if time.monotonic() > deadline:
                raise late()
            time.sleep(POD_POLL_SECONDS)
        last_look = [time.monotonic()]

        def still_starting() -> None:
            if time.monotonic() - last_look[0] >= POD_POLL_SECONDS:
                last_look[0] = time.monotonic()
                pod = self._find_pod()
                if pod is not None:
                    self._check_pod(pod)

        wait_until_available(self.get_endpoint(), self.model_name, deadline, still_starting, late)

    def get_endpoint(self) -> str:
        """`http://POD_IP:8501`, once the pod runs."""
        if self.pod_ip is None:
            raise RuntimeError("the model server is not running: call wait_until_running first")
        return f"http://{self.pod_ip}:{self.rest_port}"

    def stop(self) -> None:
        """Deletes the Job and its pod; a failure is logged with the command that cleans up."""
        if self.job_name is None:
            return
        from kubernetes.client.rest import ApiException

        try:
            self.batch_api.delete_namespaced_job(
                name=self.job_name, namespace=self.namespace, propagation_policy="Background"
            )
        except ApiException as err:
            if err.status != 404:
                logging.warning(
                    "Infra validation: could not delete job %s (%s); clean up with: kubectl "
                    "delete job --namespace %s %s",
                    self.job_name,
                    err.reason,
                    self.namespace,
                    self.job_name,
                )

    def _find_pod(self) -> Any:
        pods = self.core_api.list_namespaced_pod(
            namespace=self.namespace, label_selector=f"job-name={self.job_name}"
        ).items
        if not pods:
            return None
        self.pod_name = pods[0].metadata.name
        return pods[0]

    def _check_pod(self, pod: Any) -> None:
        """Raises when the pod has ended (a Job's pod that ends was a server that exited)."""
        if pod.status.phase in ("Failed", "Succeeded"):
            raise InfraValidationError(
                f"the model server's pod {pod.metadata.name} ended ({pod.status.phase}) before "
                f"it was ready: {self._logs_tail()}"
            )

    def _pod_state(self) -> str:
        if self.pod_name is None:
            return f"no pod was scheduled for job {self.job_name}"
        return f"pod {self.pod_name}: {self._logs_tail()}"

    def _logs_tail(self, lines: int = 8) -> str:
        from kubernetes.client.rest import ApiException

        try:
            text = self.core_api.read_namespaced_pod_log(
                name=self.pod_name, namespace=self.namespace, tail_lines=lines
            )
        except ApiException as err:
            return f"(no logs: {err.reason})"
        kept = [line.strip() for line in str(text).splitlines() if line.strip()]
        return " | ".join(kept)[-1500:] or "(no output)"


def container_resources(choice: ServerChoice) -> dict[str, dict[str, str]]:
    """Requests and limits as `conveyor deploy render` gives them (requests equal limits: the
    Guaranteed QoS class, and the only way Kubernetes takes GPUs)."""
    quantities: dict[str, str] = {}
    if choice.cpu is not None:
        cpu = float(choice.cpu)
        quantities["cpu"] = str(int(cpu)) if cpu.is_integer() else f"{round(cpu * 1000)}m"
    if choice.memory is not None:
        quantities["memory"] = choice.memory
    if choice.gpu:
        quantities[GPU_RESOURCE] = str(choice.gpu)
    if not quantities:
        return {}
    return {"requests": dict(quantities), "limits": dict(quantities)}


def _label_value(text: str) -> str:
    """`text` as a Kubernetes label value: at most 63 characters, alphanumeric at both ends."""
    return text[:63].strip("-_.")


def _own_namespace() -> str:
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip()
    except OSError:
        return "default"


def _own_pod(core_api: Any, namespace: str) -> Any:
    """The validator's pod as an owner reference; None (a warning) when it cannot be read."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = os.environ.get("HOSTNAME", "")
    try:
        pod = core_api.read_namespaced_pod(name=name, namespace=namespace)
    except ApiException as err:
        logging.warning(
            "Infra validation: cannot read this pod (%s): the job is not owned by it", err.reason
        )
        return None
    return client.V1OwnerReference(
        api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid
    )
