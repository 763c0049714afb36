"""A/B and canary traffic in what `conveyor deploy render` writes.

The split between `stable` and `canary` follows the labels of models.config, moved here by the
real pushes, `rollback` and `promote` on a SQLite ML Metadata store (test_labels.py's
`Pipeline`); the rendered objects are then read as the cluster would: which version each
variant's server loads, where the HTTPRoute sends a request (resolved by Gateway API's match
precedence), and what KServe's predictor names. The HTTPRoute is validated against the
published CRD schema of Gateway API v1.6.1 (tests/data/gateway_api/).
"""

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from pipelines import cli, serving_state
from pipelines.serving import manifests
from pipelines.serving_state.config_files import MODELS_CONFIG, ServedModel, current_entry
from tests.unit.test_labels import Pipeline, _paths
from tests.unit.test_manifests import _as_model, _check_inference_service, _config_map_files

SCHEMA = Path(__file__).parents[1] / "data" / "gateway_api" / "httproute.v1.schema.json"
MODEL_PATH = "/v1/models/penguin"


def _strict(schema):
    """`schema` with every object that declares its properties refusing any other, as the API
    server's strict field validation (`kubectl apply --validate=strict`) does; the CRD alone
    would only prune them."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {
        key: ({k: _strict(v) for k, v in value.items()} if key == "properties" else _strict(value))
        for key, value in schema.items()
    }
    if "properties" in strict and "additionalProperties" not in strict:
        if not strict.get("x-kubernetes-preserve-unknown-fields"):
            strict["additionalProperties"] = False
    return strict


@pytest.fixture(scope="module")
def route_schema() -> dict:
    return _strict(json.loads(SCHEMA.read_text()))


def _cel_problems(route: dict) -> list[str]:
    """The CRD's CEL rules (`x-kubernetes-validations`, which jsonschema does not run) that
    the rendered route relies on, checked by hand; their messages are the CRD's."""
    problems = []
    rules = route["spec"]["rules"]
    if sum(len(rule.get("matches", [])) for rule in rules) > 128:
        problems.append("the total number of matches across all rules must be less than 128")
    for rule in rules:
        for flt in rule.get("filters", []):
            path = flt.get("urlRewrite", {}).get("path", {})
            key = {"ReplaceFullPath": "replaceFullPath", "ReplacePrefixMatch": "replacePrefixMatch"}
            if path and key[path["type"]] not in path:
                problems.append(f"{key[path['type']]} must be specified when type is set")
            if path.get("type") == "ReplacePrefixMatch":
                matches = rule.get("matches", [])
                if len(matches) != 1 or matches[0]["path"]["type"] != "PathPrefix":
                    problems.append(
                        "When using URLRewrite filter with path.replacePrefixMatch, exactly one "
                        "PathPrefix match must be specified"
                    )
        for ref in rule.get("backendRefs", []):
            if ref.get("kind", "Service") == "Service" and "port" not in ref:
                problems.append("Must have port for Service reference")
    return problems


def _check_route(route: dict, schema: dict) -> None:
    jsonschema.validate(route, schema)
    assert _cel_problems(route) == []
    _as_model(route["metadata"], "V1ObjectMeta")


def _resolve(route: dict, path: str) -> tuple[dict[str, int], str]:
    """Where the route sends a request for `path`: {backend Service: weight} and the path the
    backend sees. Gateway API's precedence: an Exact match first, then the longest PathPrefix
    (matched whole segment by segment)."""
    candidates = []
    for rule in route["spec"]["rules"]:
        for match in rule["matches"]:
            kind, value = match["path"]["type"], match["path"]["value"]
            if kind == "Exact" and path == value:
                candidates.append(((1, len(value)), rule, value))
            elif kind == "PathPrefix" and (
                value == "/" or path == value or path.startswith(value.rstrip("/") + "/")
            ):
                candidates.append(((0, len(value)), rule, value))
    _, rule, matched = max(candidates, key=lambda c: c[0])
    seen = path
    for flt in rule.get("filters", []):
        rewrite = flt["urlRewrite"]["path"]
        if rewrite["type"] == "ReplaceFullPath":
            seen = rewrite["replaceFullPath"]
        else:
            seen = rewrite["replacePrefixMatch"] + path[len(matched) :]
    return {ref["name"]: ref.get("weight", 1) for ref in rule["backendRefs"]}, seen


def _rendered(paths, target: str, tmp_path) -> dict[str, dict]:
    """Renders as `conveyor deploy render` does, from the workdir's models.config."""
    current = current_entry(paths.serving_config_dir, paths.spec.push.model_name)
    out = tmp_path / f"render-{target}"
    written = manifests.write_manifests(paths.spec, target, out, current)
    return {path.name: yaml.safe_load(path.read_text()) for path in written}


def _variant_versions(files: dict[str, dict], tmp_path) -> dict[str, tuple[int, ...]]:
    """The versions each variant's server loads, read from its ConfigMap as TF Serving would;
    and the server has no labels."""
    loaded = {}
    for variant in manifests.VARIANTS:
        config = _config_map_files(tmp_path, files[f"configmap-{variant}.yaml"])[MODELS_CONFIG]
        [entry] = serving_state.config_files.served_models(config)
        assert entry.labels == {} and entry.policy == "labelled"
        loaded[variant] = entry.versions
    return loaded


def _split(files: dict[str, dict]) -> dict[str, int]:
    weights, _ = _resolve(files["httproute.yaml"], f"{MODEL_PATH}:predict")
    return weights


def _kserve(paths, tmp_path) -> tuple[dict, dict[str, str]]:
    """The predictor, and the models.config of each rendered ConfigMap by name."""
    files = _rendered(paths, "kserve", tmp_path)
    service = files.pop("inferenceservice.yaml")
    _check_inference_service(service)
    configs = {obj["metadata"]["name"]: obj["data"][MODELS_CONFIG] for obj in files.values()}
    return service["spec"]["predictor"], configs


STABLE, CANARY = "penguin-tf-serving-stable", "penguin-tf-serving-canary"


def test_pushes_rollback_and_promote_move_the_split(tmp_path, route_schema):
    pipeline = Pipeline(_paths(tmp_path, "push.deploy.canary_traffic_percent=25"))
    paths = pipeline.paths
    quiet = {"echo": lambda _: None}

    # Two unheld pushes: both labels on version 2, which gets every request.
    pipeline.push(), pipeline.push()
    files = _rendered(paths, "tf-serving", tmp_path)
    _check_route(files["httproute.yaml"], route_schema)
    assert _variant_versions(files, tmp_path) == {"stable": (2,), "canary": (2,)}
    assert _split(files) == {STABLE: 100, CANARY: 0}
    predictor, configs = _kserve(paths, tmp_path)
    assert "canaryTrafficPercent" not in predictor
    assert predictor["annotations"] == {"conveyor/model-version": "2"}

    # A rollback puts both labels on 1 and holds stable there: still no split.
    serving_state.rollback(paths, None, "ana", "2 answers slowly", **quiet)
    files = _rendered(paths, "tf-serving", tmp_path)
    assert _variant_versions(files, tmp_path) == {"stable": (1,), "canary": (1,)}
    assert _split(files) == {STABLE: 100, CANARY: 0}
    predictor, _ = _kserve(paths, tmp_path)
    assert "canaryTrafficPercent" not in predictor
    assert predictor["annotations"] == {"conveyor/model-version": "1"}

    # A push while held moves canary only: the canary gets the spec's 25%.
    assert pipeline.push() == 3
    files = _rendered(paths, "tf-serving", tmp_path)
    _check_route(files["httproute.yaml"], route_schema)
    assert _variant_versions(files, tmp_path) == {"stable": (1,), "canary": (3,)}
    assert _split(files) == {STABLE: 75, CANARY: 25}
    predictor, configs = _kserve(paths, tmp_path)
    assert predictor["canaryTrafficPercent"] == 25
    assert predictor["annotations"] == {"conveyor/model-version": "3"}
    assert predictor["volumes"] == [
        {"name": "conveyor-config", "configMap": {"name": "penguin-kserve-v3"}}
    ]
    # The ConfigMap of the stable revision's version is rendered too, so it outlives a prune.
    assert sorted(configs) == ["penguin-kserve-v1", "penguin-kserve-v3"]

    # Promoting the canary's version to stable ends the split: version 3 gets everything.
    serving_state.promote(paths, 3, "stable", "ana", "3 looked good", **quiet)
    files = _rendered(paths, "tf-serving", tmp_path)
    assert _variant_versions(files, tmp_path) == {"stable": (3,), "canary": (3,)}
    assert _split(files) == {STABLE: 100, CANARY: 0}
    predictor, _ = _kserve(paths, tmp_path)
    assert "canaryTrafficPercent" not in predictor
    assert predictor["annotations"] == {"conveyor/model-version": "3"}

    # Promoting an older version to canary splits again, the other way round.
    serving_state.promote(paths, 1, "canary", "ana", "compare with 1", **quiet)
    files = _rendered(paths, "tf-serving", tmp_path)
    assert _variant_versions(files, tmp_path) == {"stable": (3,), "canary": (1,)}
    assert _split(files) == {STABLE: 75, CANARY: 25}


def test_requests_by_label_and_version_reach_the_variant_that_serves_them(tmp_path, route_schema):
    spec = _paths(tmp_path).spec
    current = ServedModel("penguin", "/srv/penguin", labels={"stable": 4, "canary": 7})
    route = manifests.render(spec, "tf-serving", current)["httproute.yaml"]
    _check_route(route, route_schema)
    assert route["spec"]["parentRefs"] == [
        {"group": "", "kind": "Service", "name": "penguin-tf-serving", "port": 8501}
    ]
    for verb in ("predict", "classify", "regress"):
        # By label: to that variant, with the label taken out (its server has none).
        assert _resolve(route, f"{MODEL_PATH}/labels/canary:{verb}") == (
            {CANARY: 1},
            f"{MODEL_PATH}:{verb}",
        )
        assert _resolve(route, f"{MODEL_PATH}/labels/stable:{verb}") == (
            {STABLE: 1},
            f"{MODEL_PATH}:{verb}",
        )
        # By version: as asked, to the variant that loads it.
        assert _resolve(route, f"{MODEL_PATH}/versions/7:{verb}") == (
            {CANARY: 1},
            f"{MODEL_PATH}/versions/7:{verb}",
        )
        assert _resolve(route, f"{MODEL_PATH}/versions/4:{verb}")[0] == {STABLE: 1}
        # Neither: split by the weights, as asked.
        assert _resolve(route, f"{MODEL_PATH}:{verb}") == (
            {STABLE: 90, CANARY: 10},
            f"{MODEL_PATH}:{verb}",
        )
    # Status and metadata by label.
    assert _resolve(route, f"{MODEL_PATH}/labels/canary") == ({CANARY: 1}, MODEL_PATH)
    assert _resolve(route, f"{MODEL_PATH}/labels/stable/metadata") == (
        {STABLE: 1},
        f"{MODEL_PATH}/metadata",
    )
    assert _resolve(route, f"{MODEL_PATH}/versions/4/metadata") == (
        {STABLE: 1},
        f"{MODEL_PATH}/versions/4/metadata",
    )


def test_nothing_labelled_yet_serves_the_newest_version_on_stable(tmp_path, route_schema):
    spec = _paths(tmp_path).spec
    files = manifests.render(spec, "tf-serving", None)
    _check_route(files["httproute.yaml"], route_schema)
    assert _split(files) == {STABLE: 100, CANARY: 0}
    for variant in manifests.VARIANTS:
        config = files[f"configmap-{variant}.yaml"]["data"][MODELS_CONFIG]
        assert "latest" in config and "specific" not in config
    # No version rule: there is no version to name.
    paths = [
        m["path"]["value"] for r in files["httproute.yaml"]["spec"]["rules"] for m in r["matches"]
    ]
    assert not any("/versions/" in p for p in paths)


def test_the_schema_and_the_cel_checks_refuse_what_the_api_server_would(tmp_path, route_schema):
    spec = _paths(tmp_path).spec
    current = ServedModel("penguin", "/srv/penguin", labels={"stable": 4, "canary": 7})
    good = manifests.render(spec, "tf-serving", current)["httproute.yaml"]
    _check_route(good, route_schema)

    def broken(change) -> dict:
        route = copy.deepcopy(good)
        change(route)
        return route

    default_rule = -1
    for change in [
        lambda r: r["spec"]["rules"][default_rule]["backendRefs"][1].update(weight=-1),
        lambda r: r["spec"]["rules"][default_rule]["backendRefs"][1].update(wieght=10),
        lambda r: r["spec"]["rules"][0]["matches"][0]["path"].update(type="Regex"),
        lambda r: r["spec"].update(parentRef=r["spec"]["parentRefs"]),
        lambda r: r["spec"]["rules"].extend(r["spec"]["rules"]),  # 22 rules, 16 at most
    ]:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken(change), route_schema)

    prefix_rewrite = next(
        i
        for i, rule in enumerate(good["spec"]["rules"])
        if rule.get("filters")
        and rule["filters"][0]["urlRewrite"]["path"]["type"] == "ReplacePrefixMatch"
    )

    def exact_match(route):
        route["spec"]["rules"][prefix_rewrite]["matches"][0]["path"]["type"] = "Exact"

    assert "exactly one PathPrefix match" in " ".join(_cel_problems(broken(exact_match)))

    def portless(route):
        del route["spec"]["rules"][default_rule]["backendRefs"][0]["port"]

    assert _cel_problems(broken(portless)) == ["Must have port for Service reference"]


def test_variant_pods_carry_their_variant_and_version(tmp_path):
    spec = _paths(tmp_path, "push.deploy.replicas=4", "push.deploy.canary_traffic_percent=60").spec
    current = ServedModel("penguin", "/srv/penguin", labels={"stable": 4, "canary": 7})
    files = manifests.render(spec, "tf-serving", current)
    for variant, version, replicas in (("stable", "4", 4), ("canary", "7", 3)):
        deployment = _as_model(files[f"deployment-{variant}.yaml"], "V1Deployment")
        pod = deployment.spec.template.metadata
        assert pod.labels["conveyor/variant"] == variant
        assert pod.annotations["conveyor/model-version"] == version
        assert deployment.spec.replicas == replicas  # the canary: 60% of 4, rounded up
        assert deployment.spec.selector.match_labels["conveyor/variant"] == variant


def test_kserves_revision_serves_only_the_version_it_names(tmp_path):
    spec = _paths(tmp_path, "push.model_name=Penguin_Model").spec
    current = ServedModel("Penguin_Model", "/srv/p", labels={"stable": 2, "canary": 5})
    files = manifests.render(spec, "kserve", current)
    predictor = files["inferenceservice.yaml"]["spec"]["predictor"]
    _check_inference_service(files["inferenceservice.yaml"])
    [flag] = predictor["tensorflow"]["args"]
    [mount] = predictor["tensorflow"]["volumeMounts"]
    [volume] = predictor["volumes"]
    assert mount["name"] == volume["name"]
    assert flag == f"--model_config_file={mount['mountPath']}/{MODELS_CONFIG}"
    config_map = files["configmap-v5.yaml"]
    assert (
        config_map["metadata"]["name"] == volume["configMap"]["name"] == "penguin-model-kserve-v5"
    )
    folder = tmp_path / "kserve"
    [entry] = _served(folder, config_map["data"][MODELS_CONFIG])
    # The model under the InferenceService's name (KServe's URLs and its --model_name), from
    # the folder its storage initializer fills, version 5 only.
    assert entry == ServedModel("penguin-model", "/mnt/models", "labelled", versions=(5,))


def _served(folder: Path, text: str) -> list[ServedModel]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MODELS_CONFIG).write_text(text)
    return serving_state.config_files.served_models(folder / MODELS_CONFIG)


def test_the_command_renders_the_split_of_the_workdir(tmp_path):
    pipeline = Pipeline(_paths(tmp_path))
    pipeline.push(), pipeline.push()
    serving_state.rollback(pipeline.paths, None, "ana", "slow", echo=lambda _: None)
    pipeline.push()  # held: canary 3, stable 1
    out = tmp_path / "out"
    for target in manifests.TARGETS:
        argv = ["deploy", "render", "penguin", "--target", target, "--workdir", str(tmp_path)]
        assert cli.main([*argv, "--output", str(out / target)]) == 0
    route = yaml.safe_load((out / "tf-serving" / "httproute.yaml").read_text())
    assert _split({"httproute.yaml": route}) == {STABLE: 90, CANARY: 10}
    service = yaml.safe_load((out / "kserve" / "inferenceservice.yaml").read_text())
    assert service["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert service["spec"]["predictor"]["annotations"] == {"conveyor/model-version": "3"}
