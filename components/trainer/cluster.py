"""The Trainer's replicas launched as a cluster job, by an operator that already does it well.

With `runtime.training.launcher` `tfjob` or `vertex` (and `trainer.distribution: multi_worker`),
the Trainer task does not train: it creates a job whose every replica runs this same Trainer
executor through TFX's `tfx.scripts.run_executor`, as TFX's own Vertex training extension does
(tfx/extensions/google_cloud_ai_platform), waits for it, and fails with the job's reason.

- `tfjob`: Kubeflow's Training Operator TFJob (kubeflow.org/v1), one `Chief` and
  `runtime.training.workers` `Worker` replicas; the operator sets each pod's TF_CONFIG.
- `vertex`: a Vertex AI custom job, worker pool 0 the chief and pool 1 the workers; Vertex AI sets
  TF_CONFIG the same way.

The chief exports the model and writes the training summary (components/trainer/run.py); the
task then records the summary on the Model artifact as a local training does. Each replica gets
the trainer's image and `runtime.container.resources` entry (GPUs included), and on a TFJob the
node selector and tolerations of `runtime.training.tfjob`.

What the task needs travels in the Trainer's custom_config under CLUSTER_KEY (see
`launch_config`), written when the pipeline is compiled; the replicas get the same custom_config
without it, so they train instead of launching again. Clients are imported only when launching.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

CLUSTER_KEY = "cluster"  # custom_config key: how to launch the replicas (absent in a replica)
EXECUTOR_CLASS = "components.trainer.component.Executor"
# TFX's entry point for running one executor from serialized artifacts (what TFX's Vertex
# training extension gives every worker pool).
RUN_EXECUTOR = ["python", "-m", "tfx.scripts.run_executor"]

TFJOB_GROUP, TFJOB_VERSION, TFJOB_PLURAL = "kubeflow.org", "v1", "tfjobs"
TFJOB_CONTAINER = "tensorflow"  # the container the Training Operator gives TF_CONFIG and ports
GPU_RESOURCE = "nvidia.com/gpu"
# The namespace of the pod this runs in, as Kubernetes mounts it into every pod.
POD_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

_VERTEX_FAILED = ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED")


class ClusterTrainingFailed(RuntimeError):
    """The cluster job did not succeed; the message names the job and the reason it gave."""


def merged_resources(spec, node_id: str) -> dict[str, Any]:
    """The trainer node's `runtime.container.resources`: its own entry over `default`."""
    table = spec.runtime.container.resources
    merged: dict[str, Any] = {}
    for key in ("default", node_id):
        if key in table:
            merged |= table[key].model_dump(mode="json", exclude_unset=True)
    return merged


def launch_config(spec, node_id: str) -> dict[str, Any] | None:
    """What the Trainer task needs to launch its replicas (JSON-able), or None when the spec
    trains in the task itself (`runtime.training.launcher: local`)."""
    training = spec.runtime.training
    if training.launcher.value == "local":
        return None
    return {
        "launcher": training.launcher.value,
        "name": f"{spec.name}-{node_id}",
        "image": spec.runtime.container.image,
        "workers": training.workers,
        "timeout_seconds": training.timeout_seconds,
        "poll_seconds": training.poll_seconds,
        "resources": merged_resources(spec, node_id),
        "tfjob": training.tfjob.model_dump(mode="json", exclude_none=True),
        "vertex": training.vertex.model_dump(mode="json"),
    }


def check_launch(config: Mapping[str, Any], node_id: str) -> None:
    """Builds the job once with a stand-in command, so what its API would refuse is found
    when the pipeline is compiled rather than in the Trainer task.

    Raises:
      ValueError: naming the profile key at fault.
    """
    if config["launcher"] == "vertex":
        gpu_type = config.get("resources", {}).get("gpu_type")
        try:
            build_vertex_custom_job(config, ["true"])
        except KeyError:
            raise ValueError(
                f"runtime.container.resources.{node_id}.gpu_type: Vertex AI has no accelerator "
                f"{gpu_type!r} (its AcceleratorType names, e.g. NVIDIA_L4, NVIDIA_TESLA_T4)"
            ) from None
    else:
        build_tfjob(config, job_name(config["name"]), "default", ["true"])


def job_name(prefix: str) -> str:
    """A unique job name from `prefix`: a Kubernetes name (lowercase, `-`, at most 63)."""
    cleaned = "".join(c if c.isalnum() else "-" for c in prefix.lower()).strip("-")
    return f"{cleaned[:54].rstrip('-')}-{secrets.token_hex(4)}"


def replica_uri(uri: str) -> str:
    """Where a replica reaches an artifact: KFP's `/gcs/BUCKET/...` is a folder of the task's pod
    (downloaded or uploaded by KFP's launcher, or a FUSE mount), so a TFJob's pods use the
    bucket itself."""
    return "gs://" + uri[len("/gcs/") :] if uri.startswith("/gcs/") else uri


def replica_command(
    input_dict: Mapping[str, list],
    output_dict: Mapping[str, list],
    exec_properties: Mapping[str, Any],
    rewrite_uri: Callable[[str], str] = lambda uri: uri,
) -> list[str]:
    """Each replica's command: this Trainer's executor through TFX's run_executor, given the
    task's artifacts (URIs through `rewrite_uri`) and execution properties without CLUSTER_KEY,
    so the replica trains."""
    from tfx.types import artifact_utils
    from tfx.utils import json_utils

    def artifacts_json(artifacts: Mapping[str, list]) -> str:
        encoded = json.loads(artifact_utils.jsonify_artifact_dict(artifacts))
        for entries in encoded.values():
            for entry in entries:
                entry["artifact"]["uri"] = rewrite_uri(entry["artifact"].get("uri", ""))
        return json.dumps(encoded, sort_keys=True)

    properties = dict(exec_properties)
    config = json_utils.loads(properties.get("custom_config") or "null") or {}
    config.pop(CLUSTER_KEY, None)
    properties["custom_config"] = json_utils.dumps(config)
    return [
        *RUN_EXECUTOR,
        "--executor_class_path",
        EXECUTOR_CLASS,
        "--inputs",
        artifacts_json(input_dict),
        "--outputs",
        artifacts_json(output_dict),
        "--exec-properties",
        json.dumps(properties, sort_keys=True),
    ]


def _quantity(value: float) -> int | str:
    return int(value) if float(value).is_integer() else str(value)


def container_resources(resources: Mapping[str, Any]) -> dict[str, Any]:
    """A Kubernetes container's resources from a `ResourcesSpec` dump: cpu, memory and GPUs as
    limits (and the same requests, so the scheduler places the pod where they fit)."""
    limits: dict[str, Any] = {}
    if resources.get("cpu") is not None:
        limits["cpu"] = _quantity(resources["cpu"])
    if resources.get("memory") is not None:
        limits["memory"] = resources["memory"]
    if resources.get("gpu"):
        limits[GPU_RESOURCE] = int(resources["gpu"])
    return {"limits": limits, "requests": dict(limits)} if limits else {}


def build_tfjob(
    config: Mapping[str, Any], name: str, namespace: str, command: list[str]
) -> dict[str, Any]:
    """The TFJob manifest (kubeflow.org/v1) of one training: a Chief and `workers` Workers, each
    running `command` in the trainer's image with its resources, node selector and tolerations.

    A replica that exits with a code the operator counts as retryable (killed, preempted) is
    restarted and resumes from the trainer's checkpoints; any other failure fails the job.
    """
    tfjob = config.get("tfjob", {})
    container: dict[str, Any] = {
        "name": TFJOB_CONTAINER,
        "image": config["image"],
        "command": list(command),
    }
    resources = container_resources(config.get("resources", {}))
    if resources:
        container["resources"] = resources
    pod: dict[str, Any] = {"containers": [container]}
    if tfjob.get("node_selector"):
        pod["nodeSelector"] = dict(tfjob["node_selector"])
    if tfjob.get("tolerations"):
        pod["tolerations"] = [
            {k: v for k, v in toleration.items() if v is not None}
            for toleration in tfjob["tolerations"]
        ]

    def replicas(count: int) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": "ExitCode", "template": {"spec": pod}}

    run_policy: dict[str, Any] = {"backoffLimit": 3, "cleanPodPolicy": "Running"}
    if config.get("timeout_seconds"):
        run_policy["activeDeadlineSeconds"] = int(config["timeout_seconds"])
    return {
        "apiVersion": f"{TFJOB_GROUP}/{TFJOB_VERSION}",
        "kind": "TFJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "conveyor"},
        },
        "spec": {
            "runPolicy": run_policy,
            "tfReplicaSpecs": {"Chief": replicas(1), "Worker": replicas(int(config["workers"]))},
        },
    }


def build_vertex_custom_job(config: Mapping[str, Any], command: list[str]):
    """The Vertex AI CustomJobSpec of one training: worker pool 0 the chief, pool 1 the
    `workers`, each running `command` in the trainer's image on `vertex.machine_type` with the
    trainer's GPUs. Built as aiplatform_v1's proto messages, which refuse an unknown field or
    accelerator type."""
    from google.cloud import aiplatform_v1 as vertex
    from google.protobuf import duration_pb2

    resources = config.get("resources", {})
    machine = vertex.MachineSpec(machine_type=config["vertex"]["machine_type"])
    if resources.get("gpu"):
        machine.accelerator_type = vertex.AcceleratorType[resources["gpu_type"]]
        machine.accelerator_count = int(resources["gpu"])
    container = vertex.ContainerSpec(image_uri=config["image"], command=list(command))

    def pool(count: int):
        return vertex.WorkerPoolSpec(
            replica_count=count, machine_spec=machine, container_spec=container
        )

    spec = vertex.CustomJobSpec(worker_pool_specs=[pool(1), pool(int(config["workers"]))])
    if config.get("timeout_seconds"):
        spec.scheduling = vertex.Scheduling(
            timeout=duration_pb2.Duration(seconds=int(config["timeout_seconds"]))
        )
    return spec


def tfjob_condition(job: Mapping[str, Any]) -> dict[str, Any]:
    """The TFJob's current condition (the last whose status is True), or {} before any."""
    conditions = (job.get("status") or {}).get("conditions") or []
    current = [c for c in conditions if c.get("status") == "True"]
    return current[-1] if current else {}


def _wait(
    describe: str,
    poll: Callable[[], tuple[str, str | None]],
    stop: Callable[[], None],
    config: Mapping[str, Any],
    sleep: Callable[[float], None],
) -> None:
    """Polls until the job succeeds; raises ClusterTrainingFailed with its reason when it fails,
    or when it runs past `timeout_seconds` (stopping it first)."""
    timeout = config.get("timeout_seconds")
    started = time.monotonic()
    last = None
    while True:
        state, failure = poll()
        if state != last:
            log.info("%s: %s", describe, state)
            last = state
        if failure is not None:
            raise ClusterTrainingFailed(f"{describe} failed: {failure}")
        if state == "succeeded":
            return
        if timeout and time.monotonic() - started > timeout:
            stop()
            raise ClusterTrainingFailed(
                f"{describe} did not finish within runtime.training.timeout_seconds "
                f"({timeout}); it was stopped"
            )
        sleep(float(config.get("poll_seconds", 30)))


def kubernetes_api():
    """The Kubernetes API as the Trainer's pod reaches it (its service account), else the
    local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi()


def task_namespace() -> str:
    """The namespace of the pod this runs in (`default` outside a pod)."""
    if os.path.exists(POD_NAMESPACE_FILE):
        with open(POD_NAMESPACE_FILE) as handle:
            return handle.read().strip()
    return "default"


def run_tfjob(
    manifest: Mapping[str, Any],
    config: Mapping[str, Any],
    api=None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Creates the TFJob and waits for it; returns its last state. Raises ClusterTrainingFailed
    with the operator's reason and message when it fails (the job is kept for its logs), and
    deletes it when it outlives the timeout."""
    api = api or kubernetes_api()
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    where = (TFJOB_GROUP, TFJOB_VERSION, namespace, TFJOB_PLURAL)
    api.create_namespaced_custom_object(*where, manifest)
    seen: dict[str, Any] = {}

    def poll() -> tuple[str, str | None]:
        seen.clear()
        seen.update(api.get_namespaced_custom_object(*where, name))
        condition = tfjob_condition(seen)
        kind = condition.get("type", "Pending")
        if kind == "Failed":
            reason = condition.get("reason") or "no reason given"
            return "failed", f"{reason}: {condition.get('message') or 'no message'}"
        return kind.lower(), None

    def stop() -> None:
        api.delete_namespaced_custom_object(*where, name)

    _wait(f"TFJob {namespace}/{name}", poll, stop, config, sleep)
    return seen


def vertex_client(region: str):
    """Vertex AI's JobServiceClient for `region` (Google's application default credentials)."""
    from google.cloud import aiplatform_v1 as vertex

    return vertex.JobServiceClient(
        client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"}
    )


def run_vertex_job(
    job_spec,
    display_name: str,
    config: Mapping[str, Any],
    client=None,
    sleep: Callable[[float], None] = time.sleep,
):
    """Creates the Vertex AI custom job and waits for it; returns the finished CustomJob.
    Raises ClusterTrainingFailed with Vertex AI's error when it fails or is cancelled, and
    cancels it when it outlives the timeout."""
    from google.cloud import aiplatform_v1 as vertex

    place = config["vertex"]
    client = client or vertex_client(place["region"])
    parent = f"projects/{place['project']}/locations/{place['region']}"
    created = client.create_custom_job(
        parent=parent,
        custom_job=vertex.CustomJob(
            display_name=display_name,
            job_spec=job_spec,
            labels={"managed-by": "conveyor"},
        ),
    )
    last: dict[str, Any] = {}

    def poll() -> tuple[str, str | None]:
        job = client.get_custom_job(name=created.name)
        last["job"] = job
        state = vertex.JobState(job.state).name
        if state in _VERTEX_FAILED:
            return state, f"{state}: {job.error.message or 'no message'}"
        if state == "JOB_STATE_SUCCEEDED":
            return "succeeded", None
        return state, None

    def stop() -> None:
        client.cancel_custom_job(name=created.name)

    _wait(f"Vertex AI custom job {created.name}", poll, stop, config, sleep)
    return last["job"]


def train_on_cluster(
    input_dict: Mapping[str, list],
    output_dict: Mapping[str, list],
    exec_properties: Mapping[str, Any],
    api=None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str]:
    """Launches the replicas the custom_config's CLUSTER_KEY describes and waits for them.

    Returns output name -> the URI the replicas wrote it to (a TFJob's pods write `/gcs/`
    artifacts to the bucket itself), for the task to read the chief's summary from. `api` is
    the launcher's client (CustomObjectsApi or JobServiceClient); made when not given.

    Raises:
      ClusterTrainingFailed: the job failed, was cancelled or timed out; the message says why.
    """
    from tfx.utils import json_utils

    custom_config = json_utils.loads(exec_properties.get("custom_config") or "null") or {}
    config = custom_config[CLUSTER_KEY]
    name = job_name(config["name"])
    rewrite = replica_uri if config["launcher"] == "tfjob" else (lambda uri: uri)
    command = replica_command(input_dict, output_dict, exec_properties, rewrite)
    if config["launcher"] == "tfjob":
        namespace = config.get("tfjob", {}).get("namespace") or task_namespace()
        run_tfjob(build_tfjob(config, name, namespace, command), config, api, sleep)
    elif config["launcher"] == "vertex":
        run_vertex_job(build_vertex_custom_job(config, command), name, config, api, sleep)
    else:
        raise ValueError(f"runtime.training.launcher {config['launcher']!r} launches nothing")
    return {key: rewrite(artifacts[0].uri) for key, artifacts in output_dict.items() if artifacts}
