"""`conveyor deploy render`: every Kubernetes object parses into the official client's models
with no field the API does not know, the ConfigMaps' config files are ones TF Serving reads,
and the KServe InferenceService matches a schema written from KServe's v1beta1 Go types. The
traffic split between `stable` and `canary` (the HTTPRoute against Gateway API's schema, and
how promote and rollback move it) is in tests/unit/test_traffic_split.py."""

import subprocess
import sys

import jsonschema
import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.utils import parse_quantity

from pipelines.core.paths import RunPaths
from pipelines.serving import manifests
from pipelines.serving_state.config_files import (
    BATCHING_CONFIG,
    MODELS_CONFIG,
    MONITORING_CONFIG,
    ServedModel,
    ServingConfigError,
    current_entry,
    read_batching_config,
    read_models_config,
    read_monitoring_config,
    served_models,
    write_serving_configs,
)
from pipelines.spec.loading import load_spec

KINDS = {
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Service"): "V1Service",
    ("apps/v1", "Deployment"): "V1Deployment",
}


def _spec(*overrides: str, env: str = "local"):
    return load_spec("penguin", env=env, overrides=list(overrides)).spec


def _unknown_fields(data, type_name: str, where: str = "") -> list[str]:
    """Every key of `data` that the kubernetes client's model `type_name` does not declare,
    walking nested models, lists and maps."""
    if data is None or type_name in ("str", "int", "bool", "float", "object", "datetime"):
        return []
    if type_name.startswith("list["):
        inner = type_name[5:-1]
        return [
            u for i, item in enumerate(data) for u in _unknown_fields(item, inner, f"{where}[{i}]")
        ]
    if type_name.startswith("dict("):
        inner = type_name[5:-1].split(", ", 1)[1]
        return [u for k, v in data.items() for u in _unknown_fields(v, inner, f"{where}.{k}")]
    model = getattr(k8s, type_name)
    by_key = {key: attribute for attribute, key in model.attribute_map.items()}
    unknown = []
    for key, value in data.items():
        if key not in by_key:
            unknown.append(f"{where}.{key} (not a field of {type_name})")
            continue
        unknown += _unknown_fields(value, model.openapi_types[by_key[key]], f"{where}.{key}")
    return unknown


def _as_model(obj: dict, type_name: str):
    """`obj` deserialised into the client's model (which checks required fields and types),
    after checking it has no unknown field anywhere."""
    assert _unknown_fields(obj, type_name) == []
    return k8s.ApiClient()._ApiClient__deserialize(obj, type_name)


def _render_files(tmp_path, spec, target, current=None) -> dict[str, dict]:
    written = manifests.write_manifests(spec, target, tmp_path / target, current)
    return {path.name: yaml.safe_load(path.read_text()) for path in written}


def _check_quantities(resources: dict) -> None:
    for quantities in resources.values():
        for value in quantities.values():
            assert isinstance(value, str)
            parse_quantity(value)  # raises on a quantity Kubernetes would refuse


def test_the_walk_finds_an_unknown_field():
    # The check the other tests rely on fails where it should.
    bad = {"metadata": {"name": "x"}, "spec": {"replicas": 1, "replica": 2}}
    assert _unknown_fields(bad, "V1Deployment") == [
        ".spec.replica (not a field of V1DeploymentSpec)"
    ]
    nested = {"spec": {"template": {"spec": {"containers": [{"name": "c", "imagee": "x"}]}}}}
    assert "imagee" in _unknown_fields(nested, "V1Deployment")[0]


VARIANT_FILES = [
    "configmap-canary.yaml",
    "configmap-stable.yaml",
    "deployment-canary.yaml",
    "deployment-stable.yaml",
    "httproute.yaml",
    "service-canary.yaml",
    "service-stable.yaml",
    "service.yaml",
]


def _check_kubernetes_objects(files: dict[str, dict]) -> None:
    """Every object of a core kind parses into the client's model (the HTTPRoute, a custom
    resource, is checked against its CRD's schema in test_traffic_split.py)."""
    for name, obj in files.items():
        if obj["kind"] == "HTTPRoute":
            continue
        model = _as_model(obj, KINDS[obj["apiVersion"], obj["kind"]])
        assert model.metadata.name.startswith("penguin-tf-serving"), name


def test_tf_serving_objects_parse_into_kubernetes_models(tmp_path):
    files = _render_files(tmp_path, _spec(), "tf-serving")
    # version_policy labelled with stable and canary: a server per variant and the route.
    assert sorted(files) == VARIANT_FILES
    _check_kubernetes_objects(files)

    deployment = _as_model(files["deployment-stable.yaml"], "V1Deployment")
    pod = deployment.spec.template.spec
    container = pod.containers[0]
    assert container.image == "tensorflow/serving:2.16.1"
    assert container.command == ["tensorflow_model_server"]
    assert {p.container_port: p.name for p in container.ports} == {8500: "grpc", 8501: "http"}
    assert container.readiness_probe.http_get.path == "/v1/models/penguin"
    assert container.readiness_probe.http_get.port == 8501
    assert (
        container.resources.requests == container.resources.limits == {"cpu": "1", "memory": "2Gi"}
    )
    _check_quantities(
        files["deployment-stable.yaml"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    )
    assert deployment.spec.replicas == 1
    assert (
        deployment.spec.selector.match_labels.items()
        <= deployment.spec.template.metadata.labels.items()
    )
    assert "--model_config_file_poll_wait_seconds=60" in container.args
    assert "--allow_version_labels_for_unavailable_models=true" in container.args
    assert not any(a.startswith("--enable_batching") for a in container.args)

    # Every file a flag names is a key of the ConfigMap mounted where the flag looks.
    config_map = _as_model(files["configmap-stable.yaml"], "V1ConfigMap")
    mounts = {m.name: m for m in container.volume_mounts}
    volumes = {v.name: v for v in pod.volumes}
    assert volumes["config"].config_map.name == config_map.metadata.name
    flags = dict(a.split("=", 1) for a in container.args if a.endswith(".config"))
    for flag, file_name in [
        ("--model_config_file", MODELS_CONFIG),
        ("--monitoring_config_file", MONITORING_CONFIG),
    ]:
        assert flags[flag] == f"{mounts['config'].mount_path}/{file_name}"
        assert file_name in config_map.data

    # The models volume is a claim named after the model, mounted at models.config's base path.
    assert volumes["models"].persistent_volume_claim.claim_name == "penguin-models"
    assert mounts["models"].mount_path == "/models/penguin"
    assert mounts["models"].read_only is True

    # The model's Service selects both variants' pods; each variant's Service only its own.
    service = _as_model(files["service.yaml"], "V1Service")
    assert {p.port: p.name for p in service.spec.ports} == {8500: "grpc", 8501: "http"}
    assert service.metadata.annotations["prometheus.io/path"] == "/monitoring/prometheus/metrics"
    assert service.metadata.annotations["prometheus.io/port"] == "8501"
    for variant in ("stable", "canary"):
        pods = _as_model(files[f"deployment-{variant}.yaml"], "V1Deployment").spec.template
        assert service.spec.selector.items() <= pods.metadata.labels.items()
        own = _as_model(files[f"service-{variant}.yaml"], "V1Service")
        assert own.spec.selector == {**service.spec.selector, "conveyor/variant": variant}
        assert own.spec.selector.items() <= pods.metadata.labels.items()


def _config_map_files(tmp_path, config_map: dict) -> dict:
    folder = tmp_path / "from-configmap"
    folder.mkdir(exist_ok=True)
    for name, text in config_map["data"].items():
        (folder / name).write_text(text)
    return {name: folder / name for name in config_map["data"]}


@pytest.mark.parametrize("variant", ["stable", "canary"])
def test_configmap_holds_config_files_tf_serving_reads(tmp_path, variant):
    files = _render_files(tmp_path, _spec(), "tf-serving")
    paths = _config_map_files(tmp_path, files[f"configmap-{variant}.yaml"])
    assert sorted(paths) == [MODELS_CONFIG, MONITORING_CONFIG]
    config = read_models_config(paths[MODELS_CONFIG])
    (entry,) = config.model_config_list.config
    assert (entry.name, entry.base_path, entry.model_platform) == (
        "penguin",
        "/models/penguin",
        "tensorflow",
    )
    # No models.config in the workdir yet: nothing is labelled, so the newest version serves.
    assert entry.model_version_policy.latest.num_versions == 1
    monitoring = read_monitoring_config(paths[MONITORING_CONFIG])
    assert monitoring.prometheus_config.enable
    assert monitoring.prometheus_config.path == "/monitoring/prometheus/metrics"


def test_version_policy_all_keeps_one_server_with_the_workdirs_labels(tmp_path):
    # `all` loads every version on one server and clients ask by label: no variants, no route.
    spec = _spec("push.version_policy=all")
    paths = RunPaths(workdir=tmp_path / "work", spec=spec)
    labelled = ServedModel(
        "penguin", str(paths.serving_dir), "all", labels={"stable": 1, "canary": 2}
    )
    write_serving_configs(paths.serving_config_dir, [labelled], spec.push)
    current = current_entry(paths.serving_config_dir, "penguin")
    assert current == labelled

    files = _render_files(tmp_path, spec, "tf-serving", current)
    assert sorted(files) == ["configmap.yaml", "deployment.yaml", "service.yaml"]
    _check_kubernetes_objects(files)
    in_pod = _config_map_files(tmp_path, files["configmap.yaml"])[MODELS_CONFIG]
    assert served_models(in_pod) == [
        ServedModel("penguin", "/models/penguin", "all", labels={"stable": 1, "canary": 2})
    ]
    deployment = _as_model(files["deployment.yaml"], "V1Deployment")
    service = _as_model(files["service.yaml"], "V1Service")
    assert service.spec.selector == deployment.spec.selector.match_labels


def test_batching_adds_its_file_and_flags(tmp_path):
    spec = _spec("push.batching={max_batch_size: 32, num_batch_threads: 2}")
    files = _render_files(tmp_path, spec, "tf-serving")
    container = _as_model(files["deployment-canary.yaml"], "V1Deployment").spec.template.spec
    container = container.containers[0]
    assert "--enable_batching=true" in container.args
    assert "--batching_parameters_file=/etc/tf-serving/batching.config" in container.args
    paths = _config_map_files(tmp_path, files["configmap-canary.yaml"])
    batching = read_batching_config(paths[BATCHING_CONFIG])
    assert (batching.max_batch_size.value, batching.num_batch_threads.value) == (32, 2)


def test_storage_uri_choices(tmp_path):
    files = _render_files(
        tmp_path, _spec("push.deploy.storage_uri=gs://bucket/models/penguin"), "tf-serving"
    )
    pod = _as_model(files["deployment-stable.yaml"], "V1Deployment").spec.template.spec
    assert [v.name for v in pod.volumes] == ["config"]  # TF Serving reads gs:// itself
    paths = _config_map_files(tmp_path, files["configmap-stable.yaml"])
    assert read_models_config(paths[MODELS_CONFIG]).model_config_list.config[0].base_path == (
        "gs://bucket/models/penguin"
    )

    files = _render_files(
        tmp_path, _spec("push.deploy.storage_uri=pvc://shared/serving/penguin"), "tf-serving"
    )
    pod = _as_model(files["deployment-canary.yaml"], "V1Deployment").spec.template.spec
    volume = {v.name: v for v in pod.volumes}["models"]
    mount = {m.name: m for m in pod.containers[0].volume_mounts}["models"]
    assert volume.persistent_volume_claim.claim_name == "shared"
    assert (mount.sub_path, mount.mount_path) == ("serving/penguin", "/models/penguin")

    with pytest.raises(manifests.DeployError, match="push.deploy.storage_uri 'ftp://x'"):
        manifests.render(_spec("push.deploy.storage_uri=ftp://x"), "tf-serving")


def test_gpu_needs_the_gpu_image(tmp_path):
    gpu = "push.deploy.resources={cpu: 4, memory: 16Gi, gpu: 1, gpu_type: NVIDIA_L4}"
    with pytest.raises(manifests.DeployError, match="not a GPU build"):
        manifests.render(_spec(gpu), "tf-serving")
    spec = _spec(gpu, "push.deploy.image=tensorflow/serving:2.16.1-gpu")
    files = _render_files(tmp_path, spec, "tf-serving")
    for variant in ("stable", "canary"):
        deployment = files[f"deployment-{variant}.yaml"]
        container = _as_model(deployment, "V1Deployment").spec.template.spec.containers[0]
        assert container.resources.limits == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
        _check_quantities(deployment["spec"]["template"]["spec"]["containers"][0]["resources"])


def test_profiles_override_deploy_settings(tmp_path):
    files = _render_files(tmp_path, _spec(env="kubeflow"), "tf-serving")
    deployment = _as_model(files["deployment-stable.yaml"], "V1Deployment")
    assert deployment.spec.replicas == 2
    assert deployment.spec.template.spec.containers[0].resources.limits == {
        "cpu": "2",
        "memory": "4Gi",
    }
    # The canary's share of the replicas (10% of 2), never none.
    assert _as_model(files["deployment-canary.yaml"], "V1Deployment").spec.replicas == 1


# KServe is not a dependency, so its InferenceService is checked against this schema of the
# fields Conveyor writes, transcribed from KServe's Go types in pkg/apis/serving/v1beta1:
# InferenceServiceSpec (inference_service.go: predictor, explainer, transformer), PredictorSpec
# (predictor.go: one framework key such as `tensorflow`, PodSpec inline (`volumes`), and
# ComponentExtensionSpec inline from component.go: minReplicas, maxReplicas,
# canaryTrafficPercent, annotations, ...), TFServingSpec (predictor_tfserving.go) =
# PredictorExtensionSpec (storageUri, runtimeVersion, protocolVersion, storage, and
# corev1.Container inline, whose `resources`, `args` and `volumeMounts` are checked with the
# kubernetes client's models below). The name rule is IsvcNameFmt and the storage schemes
# SupportedStorageURIPrefixList (inference_service_validation.go).
# Properties KServe has but Conveyor does not write are left out, so a typo fails.
KSERVE_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "serving.kserve.io/v1beta1"},
        "kind": {"const": "InferenceService"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$"}},
        },
        "spec": {
            "type": "object",
            "required": ["predictor"],
            "additionalProperties": False,
            "properties": {
                "predictor": {
                    "type": "object",
                    "required": ["tensorflow"],
                    "additionalProperties": False,
                    "properties": {
                        "minReplicas": {"type": "integer", "minimum": 0},
                        "maxReplicas": {"type": "integer", "minimum": 0},
                        "canaryTrafficPercent": {"type": "integer", "minimum": 0, "maximum": 100},
                        "annotations": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        },
                        "volumes": {"type": "array", "items": {"type": "object"}},
                        "tensorflow": {
                            "type": "object",
                            "required": ["storageUri"],
                            "additionalProperties": False,
                            "properties": {
                                "storageUri": {
                                    "type": "string",
                                    "pattern": "^(gs|s3|pvc|file|https?)://",
                                },
                                "runtimeVersion": {"type": "string"},
                                "protocolVersion": {"enum": ["v1", "v2", "grpc-v1", "grpc-v2"]},
                                "resources": {"type": "object"},
                                "args": {"type": "array", "items": {"type": "string"}},
                                "volumeMounts": {"type": "array", "items": {"type": "object"}},
                            },
                        },
                    },
                }
            },
        },
    },
}


def _check_inference_service(obj: dict) -> None:
    jsonschema.validate(obj, KSERVE_SCHEMA)
    _as_model(obj["metadata"], "V1ObjectMeta")
    predictor = obj["spec"]["predictor"]
    tensorflow = predictor["tensorflow"]
    if "resources" in tensorflow:
        _as_model(tensorflow["resources"], "V1ResourceRequirements")
        _check_quantities(tensorflow["resources"])
    for volume in predictor.get("volumes", []):
        _as_model(volume, "V1Volume")
    for mount in tensorflow.get("volumeMounts", []):
        _as_model(mount, "V1VolumeMount")


def test_kserve_inference_service_matches_kserves_types(tmp_path):
    files = _render_files(tmp_path, _spec(), "kserve")
    assert sorted(files) == ["inferenceservice.yaml"]
    service = files["inferenceservice.yaml"]
    _check_inference_service(service)
    predictor = service["spec"]["predictor"]
    # Nothing labelled yet: no version to name and no canary (test_traffic_split.py has both).
    assert "canaryTrafficPercent" not in predictor and "annotations" not in predictor
    assert predictor["minReplicas"] == 1
    assert predictor["tensorflow"] == {
        "storageUri": "pvc://penguin-models",
        "runtimeVersion": "2.16.1",
        "resources": {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"cpu": "1", "memory": "2Gi"},
        },
    }


def test_the_kserve_schema_refuses_what_kserve_would():
    files = manifests.render(_spec(), "kserve")
    good = files["inferenceservice.yaml"]
    for path, value in [
        (("spec", "predictor", "canaryTrafficPercent"), 150),
        (("spec", "predictor", "tensorflow", "storageUri"), "ftp://x"),
        (("spec", "predictor", "tensorflow", "storageURI"), "gs://x"),
        (("metadata", "name"), "Penguin_Model"),
    ]:
        bad = yaml.safe_load(yaml.safe_dump(good))
        target = bad
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, KSERVE_SCHEMA)


def test_kserve_gpu_runtime_and_storage(tmp_path):
    gpu = "push.deploy.resources={cpu: 4, memory: 16Gi, gpu: 1, gpu_type: NVIDIA_L4}"
    spec = _spec(
        gpu,
        "push.deploy.image=tensorflow/serving:2.16.1-gpu",
        "push.deploy.storage_uri=gs://bucket/penguin",
        "push.deploy.canary_traffic_percent=25",
    )
    current = ServedModel("penguin", "/srv/penguin", labels={"stable": 3, "canary": 4})
    service = _render_files(tmp_path, spec, "kserve", current)["inferenceservice.yaml"]
    _check_inference_service(service)
    predictor = service["spec"]["predictor"]
    assert predictor["canaryTrafficPercent"] == 25
    assert predictor["tensorflow"]["runtimeVersion"] == "2.16.1-gpu"
    assert predictor["tensorflow"]["storageUri"] == "gs://bucket/penguin"
    assert predictor["tensorflow"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # KServe's TFServingSpec.validateGPU refuses a -gpu runtime without GPUs, and the reverse.
    with pytest.raises(manifests.DeployError, match="GPU build but"):
        manifests.render(_spec("push.deploy.image=tensorflow/serving:2.16.1-gpu"), "kserve")
    with pytest.raises(manifests.DeployError, match="not a GPU build"):
        manifests.render(_spec(gpu), "kserve")
    with pytest.raises(manifests.DeployError, match="KServe's storage initializer"):
        manifests.render(_spec("push.deploy.storage_uri=hdfs://nn/penguin"), "kserve")


def test_resource_names_are_valid_kubernetes_names():
    assert manifests.resource_name("penguin") == "penguin"
    assert manifests.resource_name("Taxi_Tips_v2") == "taxi-tips-v2"
    assert manifests.resource_name("_private") == "private"
    assert manifests.resource_name("2fast") == "model-2fast"


def _conveyor(*argv: str, cwd) -> subprocess.CompletedProcess:
    code = (
        "import sys; from pipelines import cli; code = cli.main(sys.argv[1:]); "
        "heavy = [m for m in ('tensorflow', 'tfx') if m in sys.modules]; "
        "print('HEAVY', heavy, file=sys.stderr); sys.exit(code)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd, check=False
    )


def test_cli_renders_both_targets_without_tensorflow(tmp_path):
    done = _conveyor(
        "deploy", "render", "penguin", "--target", "tf-serving", "--workdir", "tmp", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "tmp" / "deploy" / "penguin" / "tf-serving"
    assert sorted(done.stdout.splitlines()) == [f"wrote {out / name}" for name in VARIANT_FILES]
    assert "HEAVY []" in done.stderr
    assert "no models.config for penguin" in done.stderr
    _check_kubernetes_objects(
        {name: yaml.safe_load((out / name).read_text()) for name in VARIANT_FILES}
    )

    done = _conveyor(
        "deploy",
        "render",
        "penguin",
        "--target",
        "kserve",
        "--workdir",
        "tmp",
        "--output",
        "isvc",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    _check_inference_service(
        yaml.safe_load((tmp_path / "isvc" / "inferenceservice.yaml").read_text())
    )


def test_cli_refuses_a_bad_target_and_a_bad_models_config(tmp_path):
    done = _conveyor("deploy", "render", "penguin", "--target", "docker", cwd=tmp_path)
    assert done.returncode != 0
    assert "invalid choice: 'docker' (choose from 'tf-serving', 'kserve')" in done.stderr

    broken = tmp_path / "work" / "serving" / MODELS_CONFIG
    broken.parent.mkdir(parents=True)
    broken.write_text("model_config_list { config { name: 'penguin' ")
    done = _conveyor(
        "deploy", "render", "penguin", "--target", "tf-serving", "--workdir", "work", cwd=tmp_path
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {broken}: not a valid ModelServerConfig")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "work" / "deploy").exists()

    done = _conveyor(
        "deploy",
        "render",
        "penguin",
        "--target",
        "kserve",
        "--set",
        "push.deploy.storage_uri=ftp://x",
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "error: push.deploy.storage_uri 'ftp://x'" in done.stderr


def test_a_bad_models_config_in_the_workdir_is_named(tmp_path):
    (tmp_path / MODELS_CONFIG).write_text(
        "model_config_list { config { name: 'penguin' base_path: 'rel' "
        "model_platform: 'tensorflow' } }"
    )
    with pytest.raises(ServingConfigError, match="relative"):
        current_entry(tmp_path, "penguin")
    assert current_entry(tmp_path / "absent", "penguin") is None


def test_the_command_offers_exactly_the_targets_the_renderer_knows():
    from pipelines.cli import serving
    from pipelines.serving import manifests

    assert serving.DEPLOY_TARGETS == manifests.TARGETS
