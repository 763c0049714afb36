"""Kubernetes manifests for a pipeline's model server (`conveyor deploy render`).

Two targets:

- `tf-serving`: the stock `tensorflow/serving` image (`push.deploy.image`) as a Deployment, a
  Service and a ConfigMap holding the same TF Serving config files the pusher writes
  (models.config with the current version labels, monitoring.config, batching.config), with
  base paths rewritten to where the pod sees the models.
- `kserve`: a KServe `serving.kserve.io/v1beta1` InferenceService with a `tensorflow`
  predictor; KServe runs TF Serving itself, and splits traffic between revisions with
  `canaryTrafficPercent` instead of version labels.

Rendering reads the spec (and, when there is one, the workdir's models.config for the current
labels) and writes YAML; it imports no TensorFlow and talks to no cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.serving_state import config_files
from pipelines.serving_state.durable_files import write_atomically

if TYPE_CHECKING:  # annotations only: rendering needs the loaded spec, not the spec module
    from pipelines.spec.models import PipelineSpec, ResourcesSpec

TARGETS = ("tf-serving", "kserve")
GRPC_PORT = 8500
REST_PORT = 8501
# Where the pod sees its files: the ConfigMap's config files, and each model's base path.
CONFIG_MOUNT = "/etc/tf-serving"
MODELS_MOUNT = "/models"
# How often the server re-reads models.config: a label moved in the ConfigMap reaches the
# mounted file within the kubelet's sync period, then the server within this many seconds.
CONFIG_POLL_SECONDS = 60
# Schemes TF Serving's file systems read directly as a base path (no volume needed).
DIRECT_SCHEMES = ("gs://", "s3://", "hdfs://")
# KServe's SupportedStorageURIPrefixList (pkg/apis/serving/v1beta1, inference_service_validation).
KSERVE_STORAGE_SCHEMES = ("gs://", "s3://", "pvc://", "file://", "https://", "http://")
GPU_RESOURCE = "nvidia.com/gpu"
MANAGED_BY = "conveyor"


class DeployError(ValueError):
    """A spec whose manifests cannot be rendered; the message names the key."""


def resource_name(model_name: str) -> str:
    """A Kubernetes object name for `model_name`: lowercase, `_` as `-`, starting with a letter
    (DNS-1123 labels, and KServe's InferenceService name rule)."""
    name = re.sub(r"[^a-z0-9-]+", "-", model_name.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"model-{name}".rstrip("-")
    return name[:63].rstrip("-")


def default_output(workdir: Path, pipeline: str, target: str) -> Path:
    """Where `conveyor deploy render` writes by default: `<workdir>/deploy/<pipeline>/<target>`."""
    return Path(workdir) / "deploy" / pipeline / target


def render(
    spec: PipelineSpec, target: str, current: config_files.ServedModel | None = None
) -> dict[str, dict[str, Any]]:
    """File name -> Kubernetes object for `target`; `current` is the model as the workdir's
    models.config has it (None: the spec's version policy, with no labels yet).

    Raises `DeployError` for a target or `push.deploy` setting that cannot be rendered."""
    if target == "tf-serving":
        return _tf_serving(spec, current)
    if target == "kserve":
        return _kserve(spec)
    raise DeployError(f"unknown deploy target {target!r}; known: {', '.join(TARGETS)}")


def to_yaml(obj: Mapping[str, Any]) -> str:
    """`obj` as YAML, multi-line strings (the config files) as literal blocks."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            """Writes a repeated mapping out again: no `&id001` anchors in a manifest."""
            return True

    def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _text)
    return yaml.dump(dict(obj), Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def write_manifests(
    spec: PipelineSpec,
    target: str,
    output_dir: Path,
    current: config_files.ServedModel | None = None,
) -> list[Path]:
    """Renders the manifests for `target` and writes one YAML file per object into
    `output_dir` (each atomically); returns the paths written."""
    objects = render(spec, target, current)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    return [write_atomically(output_dir / name, to_yaml(obj)) for name, obj in objects.items()]


# ----------------------------------------------------------------------------- tf-serving


def _tf_serving(
    spec: PipelineSpec, current: config_files.ServedModel | None
) -> dict[str, dict[str, Any]]:
    push, deploy = spec.push, spec.push.deploy
    name = resource_name(push.model_name)
    server = f"{name}-tf-serving"
    config_map = f"{server}-config"
    _check_gpu_image(spec, strict=False)
    base_path, volume, mount = _model_storage(spec, name)
    model = _container_model(spec, base_path, current)
    files = config_files.serving_config_texts([model], push)

    labels = _labels(spec, name)
    selector = {k: labels[k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}
    scrape = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(REST_PORT),
        "prometheus.io/path": push.monitoring_path,
    }
    args = [
        f"--port={GRPC_PORT}",
        f"--rest_api_port={REST_PORT}",
        f"--model_config_file={CONFIG_MOUNT}/{config_files.MODELS_CONFIG}",
        f"--model_config_file_poll_wait_seconds={CONFIG_POLL_SECONDS}",
        # Every label is new to a server that has just started, and TF Serving refuses a label
        # on a version that has not loaded yet unless this is set; moving an existing label to
        # an unloaded version stays refused (server_core.cc, UpdateModelVersionLabelMap).
        "--allow_version_labels_for_unavailable_models=true",
        f"--monitoring_config_file={CONFIG_MOUNT}/{config_files.MONITORING_CONFIG}",
    ]
    if config_files.BATCHING_CONFIG in files:
        args += [
            "--enable_batching=true",
            f"--batching_parameters_file={CONFIG_MOUNT}/{config_files.BATCHING_CONFIG}",
        ]
    volumes = [{"name": "config", "configMap": {"name": config_map}}]
    mounts = [{"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True}]
    if volume is not None:
        volumes.append(volume)
        mounts.append(mount)
    container = {
        "name": "tf-serving",
        "image": deploy.image,
        "command": ["tensorflow_model_server"],
        "args": args,
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": REST_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "httpGet": {"path": f"/v1/models/{push.model_name}", "port": REST_PORT},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "resources": container_resources(deploy.resources),
        "volumeMounts": mounts,
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": server, "labels": labels},
        "spec": {
            "replicas": deploy.replicas,
            "selector": {"matchLabels": selector},
            # A rollout never drops below the serving replicas.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {"labels": labels, "annotations": scrape},
                "spec": {"containers": [container], "volumes": volumes},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": server, "labels": labels, "annotations": scrape},
        "spec": {
            "selector": selector,
            "ports": [
                {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                {"name": "http", "port": REST_PORT, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_map, "labels": labels},
        "data": files,
    }
    return {
        "configmap.yaml": configmap,
        "deployment.yaml": deployment,
        "service.yaml": service,
    }


def _container_model(
    spec: PipelineSpec, base_path: str, current: config_files.ServedModel | None
) -> config_files.ServedModel:
    """The model as the pod serves it: the workdir's versions and labels when known, else the
    spec's policy; `labelled` with nothing labelled yet serves the latest version."""
    push = spec.push
    if current is not None:
        return replace(current, base_path=base_path)
    policy = push.version_policy.value
    if policy == "labelled":
        policy = "latest"  # nothing pushed yet: no label to load; the first push gets `stable`
    return config_files.ServedModel(push.model_name, base_path, policy)


def _model_storage(spec: PipelineSpec, name: str) -> tuple[str, dict | None, dict | None]:
    """(base path in models.config, pod volume, container mount) for the model's versions."""
    uri = spec.push.deploy.storage_uri
    mount_path = f"{MODELS_MOUNT}/{spec.push.model_name}"
    mount = {"name": "models", "mountPath": mount_path, "readOnly": True}
    if uri is None:
        claim = f"{name}-models"
        return mount_path, _claim_volume(claim), mount
    if uri.startswith("pvc://"):
        claim, _, sub_path = uri[len("pvc://") :].partition("/")
        if not claim:
            raise DeployError(f"push.deploy.storage_uri {uri!r} names no claim (pvc://CLAIM/PATH)")
        if sub_path.strip("/"):
            mount["subPath"] = sub_path.strip("/")
        return mount_path, _claim_volume(claim), mount
    if uri.startswith(DIRECT_SCHEMES):
        return uri.rstrip("/"), None, None
    raise DeployError(
        f"push.deploy.storage_uri {uri!r}: expected pvc://CLAIM[/PATH] or a URI TF Serving "
        f"reads itself ({', '.join(DIRECT_SCHEMES)})"
    )


def _claim_volume(claim: str) -> dict[str, Any]:
    return {"name": "models", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}


def container_resources(resources: ResourcesSpec) -> dict[str, dict[str, Any]]:
    """Kubernetes requests and limits for `push.deploy.resources`: requests equal limits, so
    the pod is in the Guaranteed QoS class (and GPUs, which Kubernetes only takes as limits
    equal to requests, fit the same rule)."""
    quantities: dict[str, Any] = {}
    if resources.cpu is not None:
        cpu = resources.cpu
        quantities["cpu"] = str(int(cpu)) if float(cpu).is_integer() else f"{round(cpu * 1000)}m"
    if resources.memory is not None:
        quantities["memory"] = resources.memory
    if resources.gpu:
        quantities[GPU_RESOURCE] = str(resources.gpu)
    if not quantities:
        return {}
    return {"requests": dict(quantities), "limits": dict(quantities)}


def _labels(spec: PipelineSpec, name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "tf-serving",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/part-of": resource_name(spec.name),
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def _check_gpu_image(spec: PipelineSpec, strict: bool) -> None:
    """GPUs need TF Serving's GPU build (a `-gpu` tag); with `strict` (KServe), a GPU build
    also needs GPUs."""
    deploy = spec.push.deploy
    gpu_build = _image_tag(deploy.image).endswith("-gpu")
    if deploy.resources.gpu and not gpu_build:
        raise DeployError(
            f"push.deploy.resources.gpu is {deploy.resources.gpu} but push.deploy.image "
            f"{deploy.image!r} is not a GPU build of TF Serving (a tag ending in -gpu, e.g. "
            "tensorflow/serving:2.16.1-gpu)"
        )
    if strict and gpu_build and not deploy.resources.gpu:
        raise DeployError(
            f"push.deploy.image {deploy.image!r} is a GPU build but push.deploy.resources.gpu "
            "is 0: KServe refuses a -gpu TF Serving runtime without GPUs"
        )


def _image_tag(image: str) -> str:
    """The tag of `image` ('' when it has none or is pinned by digest only)."""
    if "@" in image:
        return ""
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


# ----------------------------------------------------------------------------- kserve


def _kserve(spec: PipelineSpec) -> dict[str, dict[str, Any]]:
    push, deploy = spec.push, spec.push.deploy
    name = resource_name(push.model_name)
    storage_uri = deploy.storage_uri or f"pvc://{name}-models"
    if not storage_uri.startswith(KSERVE_STORAGE_SCHEMES):
        raise DeployError(
            f"push.deploy.storage_uri {storage_uri!r}: KServe's storage initializer reads "
            f"only {', '.join(KSERVE_STORAGE_SCHEMES)}"
        )
    predictor: dict[str, Any] = {"storageUri": storage_uri}
    # KServe's TFServingSpec.validateGPU: a `-gpu` runtime exactly when GPUs are requested.
    _check_gpu_image(spec, strict=True)
    version = _image_tag(deploy.image)
    if version:
        predictor["runtimeVersion"] = version
    resources = container_resources(deploy.resources)
    if resources:
        predictor["resources"] = resources
    inference_service = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "labels": _labels(spec, name)},
        "spec": {
            "predictor": {
                "minReplicas": deploy.replicas,
                "canaryTrafficPercent": deploy.canary_traffic_percent,
                "tensorflow": predictor,
            }
        },
    }
    return {"inferenceservice.yaml": inference_service}
