"""Kubernetes manifests for a pipeline's model server (`conveyor deploy render`).

Two targets:

- `tf-serving`: the stock `tensorflow/serving` image (`push.deploy.image`) as Deployments,
  Services and ConfigMaps holding the same TF Serving config files the pusher writes
  (models.config, monitoring.config, batching.config), with base paths rewritten to where the
  pod sees the models. With `version_policy: labelled` and both `stable` and `canary` in
  `push.labels`, each label is a variant: a Deployment serving the version the label points
  to, and a Gateway API HTTPRoute on the model's Service that splits requests between the two
  by `push.deploy.canary_traffic_percent` and sends requests by label or version to the
  variant that has it. Otherwise one Deployment serves the versions and labels of models.config.
- `kserve`: a KServe `serving.kserve.io/v1beta1` InferenceService with a `tensorflow`
  predictor. KServe runs TF Serving itself, and makes a new revision (a canary, when
  `canaryTrafficPercent` is set) only when the predictor's pod changes, so the predictor names
  the version it serves (an annotation, and a models.config in a ConfigMap per version).

Both follow the labels of the workdir's models.config (`traffic_split`): `stable` and `canary`
on one version send it every request; on two, the canary gets `canary_traffic_percent`. A push,
`conveyor promote` or `conveyor rollback` moves the labels, and rendering again moves the
traffic. Rendering reads the spec and that models.config and writes YAML; it imports no
TensorFlow and talks to no cluster.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
STABLE, CANARY = "stable", "canary"
VARIANTS = (STABLE, CANARY)
# The pod label naming a variant (Prometheus' PodMonitor can copy it onto every series with
# podTargetLabels), and the annotation naming the version a pod serves.
VARIANT_LABEL = "conveyor/variant"
VERSION_ANNOTATION = "conveyor/model-version"
# TF Serving's REST inference verbs (`/v1/models/M[/labels/L|/versions/V]:VERB`).
REST_VERBS = ("predict", "classify", "regress")
# Where KServe's TF Serving runtime finds the model (its `--model_base_path`), and where the
# rendered predictor mounts the models.config that names the version.
KSERVE_MODEL_DIR = "/mnt/models"
KSERVE_CONFIG_MOUNT = "/etc/conveyor"


class DeployError(ValueError):
    """A spec whose manifests cannot be rendered; the message names the key."""


@dataclass(frozen=True)
class TrafficSplit:
    """The version each variant serves (None: nothing labelled yet) and its share of
    requests in percent (the two add up to 100)."""

    versions: dict[str, int | None]
    weights: dict[str, int]

    @property
    def splits(self) -> bool:
        """Whether the canary serves another version than stable, with a share of requests."""
        return self.versions[CANARY] != self.versions[STABLE]


def traffic_split(spec: PipelineSpec, current: config_files.ServedModel | None) -> TrafficSplit:
    """Where `stable` and `canary` point in `current` (the workdir's models.config entry) and
    the share each gets: the canary `push.deploy.canary_traffic_percent` while it points
    elsewhere than stable, none while both point to one version (after an unheld push, a
    rollback, or promoting the canary's version to stable). A label not set yet follows the
    other one."""
    labels = dict(current.labels) if current is not None else {}
    stable = labels.get(STABLE, labels.get(CANARY))
    canary = labels.get(CANARY, stable)
    percent = spec.push.deploy.canary_traffic_percent if canary != stable else 0
    return TrafficSplit(
        versions={STABLE: stable, CANARY: canary},
        weights={STABLE: 100 - percent, CANARY: percent},
    )


def splits_by_variant(spec: PipelineSpec) -> bool:
    """Whether `--target tf-serving` renders a Deployment per variant and the route between
    them: `version_policy: labelled` with both `stable` and `canary` in `push.labels`. (`all`
    keeps every version loaded on one server, and `latest` has no labels.)"""
    push = spec.push
    return push.version_policy.value == "labelled" and set(VARIANTS) <= set(push.labels)


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
        return _kserve(spec, current)
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
    name = resource_name(spec.push.model_name)
    server = f"{name}-tf-serving"
    _check_gpu_image(spec, strict=False)
    base_path, volume, mount = _model_storage(spec, name)
    storage = (base_path, volume, mount)
    labels = _labels(spec, name)
    selector = {k: labels[k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}
    if not splits_by_variant(spec):
        model = _container_model(spec, base_path, current)
        config_map, deployment = _server(spec, server, model, spec.push.deploy.replicas, storage)
        return {
            "configmap.yaml": config_map,
            "deployment.yaml": deployment,
            "service.yaml": _service(spec, server, labels, selector),
        }
    split = traffic_split(spec, current)
    objects: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        version = split.versions[variant]
        # A variant's server has no labels: the route turns a request by label into one to
        # its variant, so moving a label changes which version a server loads, which TF
        # Serving does in place, where moving a label onto a version it has not loaded yet
        # would be refused (docs/serving.md, "Label moves on a server that loads before it
        # labels").
        if version is None:
            model = config_files.ServedModel(spec.push.model_name, base_path, "latest")
        else:
            model = config_files.ServedModel(
                spec.push.model_name, base_path, "labelled", versions=(version,)
            )
        config_map, deployment = _server(
            spec,
            f"{server}-{variant}",
            model,
            _variant_replicas(spec, variant),
            storage,
            variant=variant,
        )
        objects[f"configmap-{variant}.yaml"] = config_map
        objects[f"deployment-{variant}.yaml"] = deployment
    # The model's Service selects both variants' pods: without a mesh that honours the route,
    # requests spread over the pods as replicas do.
    objects["service.yaml"] = _service(spec, server, labels, selector)
    for variant in VARIANTS:
        objects[f"service-{variant}.yaml"] = _service(
            spec,
            f"{server}-{variant}",
            {**labels, VARIANT_LABEL: variant},
            {**selector, VARIANT_LABEL: variant},
        )
    objects["httproute.yaml"] = _http_route(spec, server, labels, split)
    return objects


def _variant_replicas(spec: PipelineSpec, variant: str) -> int:
    """`push.deploy.replicas` for stable; for the canary, its share of them, at least one (a
    canary with no pod would fail its share of requests when the split starts)."""
    deploy = spec.push.deploy
    if variant == STABLE:
        return deploy.replicas
    return max(1, math.ceil(deploy.replicas * deploy.canary_traffic_percent / 100))


def _server(
    spec: PipelineSpec,
    server: str,
    model: config_files.ServedModel,
    replicas: int,
    storage: tuple[str, dict | None, dict | None],
    variant: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ConfigMap and Deployment of one TF Serving server named `server` serving `model`;
    `variant` labels its pods."""
    push, deploy = spec.push, spec.push.deploy
    name = resource_name(push.model_name)
    config_map = f"{server}-config"
    _, volume, mount = storage
    files = config_files.serving_config_texts([model], push)
    labels = _labels(spec, name)
    selector = {k: labels[k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}
    if variant is not None:
        labels[VARIANT_LABEL] = variant
        selector[VARIANT_LABEL] = variant
    pod_annotations = _scrape_annotations(spec)
    if model.policy == "labelled" and len(model.versions) == 1:
        pod_annotations[VERSION_ANNOTATION] = str(model.versions[0])
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
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            # A rollout never drops below the serving replicas.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {"labels": labels, "annotations": pod_annotations},
                "spec": {"containers": [container], "volumes": volumes},
            },
        },
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_map, "labels": labels},
        "data": files,
    }
    return configmap, deployment


def _scrape_annotations(spec: PipelineSpec) -> dict[str, str]:
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(REST_PORT),
        "prometheus.io/path": spec.push.monitoring_path,
    }


def _service(
    spec: PipelineSpec, name: str, labels: dict[str, str], selector: dict[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels, "annotations": _scrape_annotations(spec)},
        "spec": {
            "selector": selector,
            "ports": [
                {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                {"name": "http", "port": REST_PORT, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    }


def _http_route(
    spec: PipelineSpec, server: str, labels: dict[str, str], split: TrafficSplit
) -> dict[str, Any]:
    """A Gateway API HTTPRoute attached to the model's Service (the GAMMA way, for a service
    mesh): requests by label go to that label's variant (the label taken out of the path, since
    the variant's server has none), requests by version to the variant serving it, and every
    other request to stable or canary by their weights."""
    model_path = f"/v1/models/{spec.push.model_name}"

    def backend(variant: str, weight: int | None = None) -> dict[str, Any]:
        ref: dict[str, Any] = {"name": f"{server}-{variant}", "port": REST_PORT}
        if weight is not None:
            ref["weight"] = weight
        return ref

    def exact(path: str) -> dict[str, Any]:
        return {"path": {"type": "Exact", "value": path}}

    def rewrite(kind: str, path: str) -> list[dict[str, Any]]:
        key = "replaceFullPath" if kind == "ReplaceFullPath" else "replacePrefixMatch"
        return [{"type": "URLRewrite", "urlRewrite": {"path": {"type": kind, key: path}}}]

    rules: list[dict[str, Any]] = []
    for variant in VARIANTS:
        by_label = f"{model_path}/labels/{variant}"
        # An Exact match per verb: `:predict` is part of the path's last segment, which a
        # PathPrefix match (segment by segment) does not reach.
        for verb in REST_VERBS:
            rules.append(
                {
                    "matches": [exact(f"{by_label}:{verb}")],
                    "filters": rewrite("ReplaceFullPath", f"{model_path}:{verb}"),
                    "backendRefs": [backend(variant)],
                }
            )
        rules.append(
            {
                "matches": [{"path": {"type": "PathPrefix", "value": by_label}}],
                "filters": rewrite("ReplacePrefixMatch", model_path),
                "backendRefs": [backend(variant)],
            }
        )
    served: dict[int, str] = {}
    for variant in VARIANTS:
        version = split.versions[variant]
        if version is not None:
            served.setdefault(version, variant)
    for version, variant in sorted(served.items()):
        by_version = f"{model_path}/versions/{version}"
        rules.append(
            {
                "matches": [
                    *(exact(f"{by_version}:{verb}") for verb in REST_VERBS),
                    {"path": {"type": "PathPrefix", "value": by_version}},
                ],
                "backendRefs": [backend(variant)],
            }
        )
    rules.append(
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": [backend(variant, split.weights[variant]) for variant in VARIANTS],
        }
    )
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": server, "labels": labels},
        "spec": {
            # gRPC (port 8500) is not an HTTPRoute's: it reaches the Service's pods as is.
            "parentRefs": [{"group": "", "kind": "Service", "name": server, "port": REST_PORT}],
            "rules": rules,
        },
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


def _kserve(
    spec: PipelineSpec, current: config_files.ServedModel | None
) -> dict[str, dict[str, Any]]:
    push, deploy = spec.push, spec.push.deploy
    name = resource_name(push.model_name)
    storage_uri = deploy.storage_uri or f"pvc://{name}-models"
    if not storage_uri.startswith(KSERVE_STORAGE_SCHEMES):
        raise DeployError(
            f"push.deploy.storage_uri {storage_uri!r}: KServe's storage initializer reads "
            f"only {', '.join(KSERVE_STORAGE_SCHEMES)}"
        )
    tensorflow: dict[str, Any] = {"storageUri": storage_uri}
    # KServe's TFServingSpec.validateGPU: a `-gpu` runtime exactly when GPUs are requested.
    _check_gpu_image(spec, strict=True)
    runtime_version = _image_tag(deploy.image)
    if runtime_version:
        tensorflow["runtimeVersion"] = runtime_version
    resources = container_resources(deploy.resources)
    if resources:
        tensorflow["resources"] = resources
    predictor: dict[str, Any] = {}
    objects: dict[str, dict[str, Any]] = {}
    split = traffic_split(spec, current)
    version = split.versions[CANARY]
    if version is not None:
        # KServe's TF Serving serves the newest version under storageUri (a claim is mounted
        # live, so an older revision would load a newer version too), and makes a revision
        # only when the predictor's pod changes. So the predictor names its version: a
        # models.config loading only that version (TF Serving reads --model_config_file
        # instead of the runtime's --model_base_path; KServe appends these args to the
        # runtime's) in a ConfigMap of that version's own, so the older revision keeps its.
        config_map = f"{name}-kserve-v{version}"
        predictor["annotations"] = {VERSION_ANNOTATION: str(version)}
        tensorflow["args"] = [
            f"--model_config_file={KSERVE_CONFIG_MOUNT}/{config_files.MODELS_CONFIG}"
        ]
        tensorflow["volumeMounts"] = [
            {"name": "conveyor-config", "mountPath": KSERVE_CONFIG_MOUNT, "readOnly": True}
        ]
        predictor["volumes"] = [{"name": "conveyor-config", "configMap": {"name": config_map}}]
        for variant_version in sorted({v for v in split.versions.values() if v is not None}):
            objects[f"configmap-v{variant_version}.yaml"] = _kserve_config_map(
                spec, name, variant_version
            )
    if split.splits:
        # The new revision (the canary's version) gets this share; KServe gives the rest to
        # the last revision that had every request (stable's, rendered when it was alone).
        predictor = {"canaryTrafficPercent": split.weights[CANARY], **predictor}
    predictor = {"minReplicas": deploy.replicas, **predictor, "tensorflow": tensorflow}
    inference_service = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "labels": _labels(spec, name)},
        "spec": {"predictor": predictor},
    }
    return {"inferenceservice.yaml": inference_service, **objects}


def _kserve_config_map(spec: PipelineSpec, name: str, version: int) -> dict[str, Any]:
    """The models.config of the revision serving `version`: the model under the
    InferenceService's name (the name in KServe's URLs), `version` only, from KServe's model
    folder."""
    model = config_files.ServedModel(name, KSERVE_MODEL_DIR, "labelled", versions=(version,))
    text = config_files.serving_config_texts([model], spec.push)[config_files.MODELS_CONFIG]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-kserve-v{version}", "labels": _labels(spec, name)},
        "data": {config_files.MODELS_CONFIG: text},
    }
