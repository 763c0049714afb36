"""TF Serving's config files: models.config, monitoring.config and batching.config are written
with TF Serving's protos, read back with text_format, and a file the model server would refuse
is refused here too, naming the file."""

import os
import stat
import subprocess
import sys

import pytest
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from pipelines.serving_state.config_files import (
    BATCHING_CONFIG,
    MODELS_CONFIG,
    MONITORING_CONFIG,
    ServedModel,
    ServingConfigError,
    batching_parameters,
    models_config,
    read_batching_config,
    read_models_config,
    read_monitoring_config,
    served_models,
    write_serving_configs,
)
from pipelines.serving_state.durable_files import write_atomically
from pipelines.spec.models import BatchingSpec, PushSpec


def _push(**overrides) -> PushSpec:
    return PushSpec(base_dir="serving", model_name="penguin", **overrides)


def _write(tmp_path, text: str, name: str = MODELS_CONFIG):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_models_config_round_trips_every_policy(tmp_path):
    models = [
        ServedModel("penguin", str(tmp_path / "penguin"), "labelled", labels={"stable": 3}),
        ServedModel("taxi", "gs://bucket/taxi", "all", labels={"stable": 1, "canary": 2}),
        ServedModel("other", "/models/other", "latest"),
    ]
    written = write_serving_configs(tmp_path, models, _push())
    assert [p.name for p in written] == [MODELS_CONFIG, MONITORING_CONFIG]

    # Parsed with TF Serving's own ModelServerConfig, independently of this module's reader.
    config = text_format.Parse(
        (tmp_path / MODELS_CONFIG).read_text(), model_server_config_pb2.ModelServerConfig()
    )
    penguin, taxi, other = config.model_config_list.config
    assert penguin.model_platform == "tensorflow"
    assert list(penguin.model_version_policy.specific.versions) == [3]
    assert dict(penguin.version_labels) == {"stable": 3}
    assert taxi.model_version_policy.WhichOneof("policy_choice") == "all"
    assert other.model_version_policy.latest.num_versions == 1

    assert served_models(tmp_path / MODELS_CONFIG) == models
    assert read_models_config(tmp_path / MODELS_CONFIG) == models_config(models)


def test_labelled_policy_loads_listed_and_labelled_versions():
    model = ServedModel("m", "/m", "labelled", versions=(5, 4), labels={"stable": 2, "canary": 4})
    assert model.versions == (2, 4, 5)
    entry = models_config([model]).model_config_list.config[0]
    assert list(entry.model_version_policy.specific.versions) == [2, 4, 5]


def test_served_model_refuses_an_unknown_policy_and_versions_without_labelled():
    with pytest.raises(ValueError, match="policy 'newest'"):
        ServedModel("m", "/m", "newest")
    with pytest.raises(ValueError, match="only with policy `labelled`"):
        ServedModel("m", "/m", "all", versions=(1,))


def test_monitoring_and_batching_round_trip(tmp_path):
    push = _push(
        batching=BatchingSpec(max_batch_size=32, num_batch_threads=2), monitoring_path="/metrics"
    )
    written = write_serving_configs(tmp_path, [ServedModel("m", "/m", "latest")], push)
    assert [p.name for p in written] == [MODELS_CONFIG, MONITORING_CONFIG, BATCHING_CONFIG]

    monitoring = read_monitoring_config(tmp_path / MONITORING_CONFIG)
    assert monitoring.DESCRIPTOR.full_name == "tensorflow.serving.MonitoringConfig"
    assert monitoring.prometheus_config.enable is True
    assert monitoring.prometheus_config.path == "/metrics"

    batching = read_batching_config(tmp_path / BATCHING_CONFIG)
    assert batching.DESCRIPTOR.full_name == "tensorflow.serving.BatchingParameters"
    assert batching.max_batch_size.value == 32
    assert batching.batch_timeout_micros.value == 1000
    assert batching.max_enqueued_batches.value == 100
    assert batching.num_batch_threads.value == 2
    # The wrappers are written as TF Serving's docs show them: `max_batch_size { value: 32 }`.
    assert "max_batch_size {\n  value: 32\n}" in (tmp_path / BATCHING_CONFIG).read_text()
    assert batching == batching_parameters(push.batching)


def test_batching_file_is_removed_when_batching_is_turned_off(tmp_path):
    model = [ServedModel("m", "/m", "latest")]
    write_serving_configs(tmp_path, model, _push(batching=BatchingSpec()))
    assert (tmp_path / BATCHING_CONFIG).exists()
    written = write_serving_configs(tmp_path, model, _push())
    assert BATCHING_CONFIG not in [p.name for p in written]
    assert not (tmp_path / BATCHING_CONFIG).exists()


def test_monitoring_messages_match_tf_serving_field_numbers():
    # The wire format is what makes a hand-declared message TF Serving's: enable = 1 (varint),
    # path = 2 (bytes) inside prometheus_config = 1.
    from pipelines.serving_state.config_files import monitoring_config

    wire = monitoring_config("/p").SerializeToString()
    assert wire == b"\x0a\x06\x08\x01\x12\x02/p"
    batching = batching_parameters(
        BatchingSpec(
            max_batch_size=3, batch_timeout_micros=0, max_enqueued_batches=1, num_batch_threads=1
        )
    )
    # max_batch_size = 1 holding Int64Value{value = 1: 3}; batch_timeout_micros = 2 is set
    # (a present wrapper holding 0), which is what the server reads as "0 microseconds".
    assert batching.SerializeToString().startswith(b"\x0a\x02\x08\x03\x12\x00")


REFUSED = {
    "unparsable": ("model_config_list { config { name: 'm' ", "not a valid ModelServerConfig"),
    "unknown field": (
        "model_config_list { config { name: 'm' base_path: '/m' colour: 'red' } }",
        'no field named "colour"',
    ),
    "no name": (
        "model_config_list { config { base_path: '/m' model_platform: 'tensorflow' } }",
        "config entry 1 has no name",
    ),
    "no base path": (
        "model_config_list { config { name: 'm' model_platform: 'tensorflow' } }",
        "model 'm' has no base_path",
    ),
    "relative base path": (
        "model_config_list { config { name: 'm' base_path: 'models/m' "
        "model_platform: 'tensorflow' } }",
        "relative",
    ),
    "no platform": (
        "model_config_list { config { name: 'm' base_path: '/m' } }",
        "sets no model_platform",
    ),
    "other platform": (
        "model_config_list { config { name: 'm' base_path: '/m' model_platform: 'onnx' } }",
        "platform 'onnx'",
    ),
    "duplicate name": (
        "model_config_list { config { name: 'm' base_path: '/m' model_platform: 'tensorflow' }"
        " config { name: 'm' base_path: '/n' model_platform: 'tensorflow' } }",
        "listed more than once",
    ),
    "label on a version not loaded": (
        "model_config_list { config { name: 'm' base_path: '/m' model_platform: 'tensorflow' "
        "model_version_policy { specific { versions: 1 } } "
        "version_labels { key: 'canary' value: 2 } } }",
        "labels version 2 'canary'",
    ),
    "non-positive version": (
        "model_config_list { config { name: 'm' base_path: '/m' model_platform: 'tensorflow' "
        "model_version_policy { specific { versions: 0 } } } }",
        r"version\(s\) \[0\]",
    ),
    "non-positive label": (
        "model_config_list { config { name: 'm' base_path: '/m' model_platform: 'tensorflow' "
        "model_version_policy { all {} } version_labels { key: 'stable' value: -1 } } }",
        "labels version -1",
    ),
    "specific with no versions": (
        "model_config_list { config { name: 'm' base_path: '/m' model_platform: 'tensorflow' "
        "model_version_policy { specific { } } } }",
        "listing no versions",
    ),
    "custom config": ("custom_model_config { }", "custom_model_config is not supported"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_file_tf_serving_would_refuse_is_refused_naming_the_file(tmp_path, case):
    text, problem = REFUSED[case]
    path = _write(tmp_path, text)
    with pytest.raises(ServingConfigError, match=problem) as raised:
        read_models_config(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    with pytest.raises(ServingConfigError):
        served_models(path)


def test_accepted_files_tf_serving_accepts(tmp_path):
    # No policy is TF Serving's default (latest); a URI base path; labels with `all`.
    path = _write(
        tmp_path,
        "model_config_list { config { name: 'a' base_path: 's3://b/a' model_platform: "
        "'tensorflow' } config { name: 'b' base_path: '/b' model_platform: 'tensorflow' "
        "model_version_policy { all {} } version_labels { key: 'stable' value: 7 } } }",
    )
    assert served_models(path) == [
        ServedModel("a", "s3://b/a", "latest"),
        ServedModel("b", "/b", "all", labels={"stable": 7}),
    ]


def test_missing_and_undecodable_files_are_refused_naming_them(tmp_path):
    with pytest.raises(ServingConfigError, match="cannot read it") as raised:
        read_models_config(tmp_path / "absent.config")
    assert str(tmp_path / "absent.config") in str(raised.value)
    path = tmp_path / MODELS_CONFIG
    path.write_bytes(b"\xff\xfe model_config_list")
    with pytest.raises(ServingConfigError, match="cannot read it"):
        read_models_config(path)


def test_writing_a_config_tf_serving_would_refuse_writes_nothing(tmp_path):
    bad = [ServedModel("m", "relative/m", "latest")]
    with pytest.raises(ServingConfigError, match="relative"):
        write_serving_configs(tmp_path, bad, _push())
    assert list(tmp_path.iterdir()) == []
    twice = [ServedModel("m", "/m", "latest"), ServedModel("m", "/n", "latest")]
    with pytest.raises(ServingConfigError, match="more than once"):
        models_config(twice)


def test_bad_monitoring_and_batching_files_are_refused(tmp_path):
    path = _write(tmp_path, "prometheus_config { enable: maybe }", MONITORING_CONFIG)
    with pytest.raises(ServingConfigError, match=f"{path}: not a valid MonitoringConfig"):
        read_monitoring_config(path)
    path = _write(tmp_path, "max_batch_size: 64", BATCHING_CONFIG)  # a wrapper, not a number
    with pytest.raises(ServingConfigError, match="not a valid BatchingParameters"):
        read_batching_config(path)
    path = _write(
        tmp_path,
        "max_batch_size { value: 8 } num_batch_threads { value: 0 } "
        "allowed_batch_sizes: 4 allowed_batch_sizes: 2",
        BATCHING_CONFIG,
    )
    with pytest.raises(ServingConfigError) as raised:
        read_batching_config(path)
    assert "num_batch_threads must be at least 1" in str(raised.value)
    assert "not increasing" in str(raised.value)
    assert "must equal max_batch_size" in str(raised.value)


def test_atomic_write_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    target = tmp_path / MODELS_CONFIG
    target.write_text("old")
    write_atomically(target, "new contents")
    assert target.read_text() == "new contents"
    assert [p.name for p in tmp_path.iterdir()] == [MODELS_CONFIG]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644

    # A write that fails part way leaves the old file and no temporary behind.
    with pytest.raises(TypeError):
        write_atomically(target, b"bytes are not text")  # type: ignore[arg-type]
    assert target.read_text() == "new contents"
    assert [p.name for p in tmp_path.iterdir()] == [MODELS_CONFIG]


def test_importing_the_module_imports_no_tensorflow():
    code = (
        "import sys, pipelines.serving_state.config_files as c; c.monitoring_config(); "
        "print(any(m == 'tensorflow' or m.startswith('tensorflow.') for m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
