"""Task environment on Kubeflow comes from Kubernetes secrets the profile names
(`runtime.container.secret_env`): the compiled job gives every container task each variable as
KFP's kubernetes platform spec encodes it, and holds no secret's value anywhere."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from google.protobuf import json_format

from pipelines import cli
from pipelines.run.kubeflow import EXIT_HANDLER_ID, job_tasks, kubernetes_platform_spec
from pipelines.spec.loading import SpecError, load_spec
from tests.conftest import MYSQL_METADATA

# What the variables hold on the machine that compiles: values that must never be compiled in.
VALUES = {
    "CONVEYOR_ALERT_URL": "https://hooks.example.com/services/T000/B000/alert-secret-value",
    "CONVEYOR_PUSHGATEWAY_URL": "https://metrics:pushgateway-secret-value@push.example.com",
    "TEAM_API_TOKEN": "team-token-secret-value",
}
SECRET_ENV = (
    "runtime.container.secret_env={"
    "CONVEYOR_ALERT_URL: {secret: conveyor-alerts, key: webhook-url}, "
    "CONVEYOR_PUSHGATEWAY_URL: {secret: conveyor-metrics, key: pushgateway.url}, "
    "TEAM_API_TOKEN: {secret: conveyor-alerts, key: team-token}}"
)
OVERRIDES = [
    "runtime.alert_webhook_env=CONVEYOR_ALERT_URL",
    "runtime.metrics.pushgateway_url_env=CONVEYOR_PUSHGATEWAY_URL",
    SECRET_ENV,
]
# kfp-kubernetes's `use_secret_as_env` encoding (kubeflow/pipelines,
# kubernetes_platform/python/test/snapshot/data/secret_as_env.yaml): one entry per secret, its
# name in `secretName` (KFP 2.0's driver) and `secretNameParameter` (later drivers).
EXPECTED_SECRET_AS_ENV = [
    {
        "secretName": "conveyor-alerts",
        "secretNameParameter": {"runtimeValue": {"constant": "conveyor-alerts"}},
        "keyToEnv": [
            {"envVar": "CONVEYOR_ALERT_URL", "secretKey": "webhook-url"},
            {"envVar": "TEAM_API_TOKEN", "secretKey": "team-token"},
        ],
        "optional": False,
    },
    {
        "secretName": "conveyor-metrics",
        "secretNameParameter": {"runtimeValue": {"constant": "conveyor-metrics"}},
        "keyToEnv": [{"envVar": "CONVEYOR_PUSHGATEWAY_URL", "secretKey": "pushgateway.url"}],
        "optional": False,
    },
]


def _set_args(overrides: list[str]) -> list[str]:
    return [arg for value in overrides for arg in ("--set", value)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[Path, dict]:
    """penguin compiled for Kubeflow while the variables hold their values here."""
    output = tmp_path_factory.mktemp("secrets") / "penguin.json"
    saved = {name: os.environ.get(name) for name in VALUES}
    os.environ.update(VALUES)
    try:
        argv = ["compile", "penguin", "--profile", "kubeflow", "--output", str(output)]
        assert cli.main([*argv, *_set_args(OVERRIDES)]) == 0
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return output, json.loads(output.read_text())


def _container_executors(job: dict) -> dict[str, str]:
    """Task -> the label of its executor, for every task that runs a container."""
    pipeline = job["pipelineSpec"]
    executors = pipeline["deploymentSpec"]["executors"]
    labels = {}
    for task, spec in job_tasks(pipeline).items():
        label = pipeline["components"][spec["componentRef"]["name"]]["executorLabel"]
        if "container" in executors[label]:
            labels[task] = label
    return labels


def test_every_container_task_gets_each_variable_from_its_secret(compiled):
    _, job = compiled
    configs = job["platformSpec"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    labels = _container_executors(job)
    assert {"trainer", "data_gate", "pusher", EXIT_HANDLER_ID} <= set(labels)
    assert set(configs) == set(labels.values())  # resolver tasks run no pod: none there
    for task, label in labels.items():
        assert configs[label] == {"secretAsEnv": EXPECTED_SECRET_AS_ENV}, task


def test_the_platform_spec_parses_into_kfps_protos(compiled):
    from kfp.pipeline_spec import pipeline_spec_pb2

    _, job = compiled
    platform = pipeline_spec_pb2.PlatformSpec()
    json_format.ParseDict(job["platformSpec"], platform, ignore_unknown_fields=False)
    executors = platform.platforms["kubernetes"].deployment_spec.executors
    assert set(executors) == set(_container_executors(job).values())
    # Beside it the job is still the PipelineJob Vertex AI and the e2e compile test parse.
    vertex_job = {key: value for key, value in job.items() if key != "platformSpec"}
    json_format.ParseDict(vertex_job, pipeline_spec_pb2.PipelineJob(), ignore_unknown_fields=False)


def test_no_secret_value_is_anywhere_in_what_compile_writes(compiled):
    output, job = compiled
    written = [output, output.with_name("penguin.schedule.json")]
    assert all(path.exists() for path in written)
    for path in written:
        text = path.read_text()
        for name, value in VALUES.items():
            assert value not in text, (path.name, name)
    # The exit handler's resolved spec, which it alerts from, names the variable only.
    assert '\\"alert_webhook_env\\": \\"CONVEYOR_ALERT_URL\\"' in output.read_text()


def test_a_variable_a_task_reads_without_a_secret_is_refused(tmp_path, capsys):
    output = tmp_path / "penguin.json"
    argv = ["compile", "penguin", "--profile", "kubeflow", "--output", str(output)]
    overrides = ["runtime.alert_webhook_env=CONVEYOR_ALERT_URL"]
    assert cli.main([*argv, *_set_args(overrides)]) == 1
    err = capsys.readouterr().err
    assert "runtime.alert_webhook_env is 'CONVEYOR_ALERT_URL', which no Kubeflow task has" in err
    assert "configs/kubeflow.yaml" in err and "runtime.container.secret_env" in err
    assert not output.exists()
    # validate says the same, before anyone compiles.
    validate = ["validate", "penguin", "--profile", "kubeflow", *_set_args(overrides)]
    assert cli.main(validate) == 1
    err = capsys.readouterr().err
    assert "FAIL penguin [kubeflow]: configs/kubeflow.yaml: runtime.alert_webhook_env is" in err


def test_without_secret_env_the_job_has_no_platform_spec(compiled):
    _, job = compiled
    spec = load_spec("penguin", env="kubeflow").spec
    assert spec.runtime.container.secret_env == {}
    assert kubernetes_platform_spec(job, spec) == {}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{ALERT_URL: {secret: conveyor-alerts, key: url, value: https://x}}", "unknown key"),
        ("{ALERT_URL: {secret: Conveyor_Alerts, key: url}}", "secret: String should match"),
        ("{ALERT_URL: {secret: conveyor-alerts, key: 'a/b'}}", "key: String should match"),
        ("{1ALERT: {secret: conveyor-alerts, key: url}}", "String should match"),
        ("{ALERT_URL: https://hooks.example.com/x}", "ALERT_URL"),
    ],
)
def test_secret_env_takes_references_never_values(value, problem):
    with pytest.raises(SpecError) as raised:
        load_spec("penguin", env="kubeflow", overrides=[f"runtime.container.secret_env={value}"])
    assert "runtime.container.secret_env" in str(raised.value)
    assert problem in str(raised.value)


def test_a_mysql_store_s_password_must_come_from_a_secret_on_kubeflow(capsys):
    # The exit handler records the run's push in runtime.metadata: on Kubeflow the password
    # reaches it only from a Kubernetes secret.
    mysql = [*MYSQL_METADATA, "runtime.metadata.password_env=CONVEYOR_MYSQL_PASSWORD"]
    validate = ["validate", "penguin", "--profile", "kubeflow", *_set_args(mysql)]
    assert cli.main(validate) == 1
    err = capsys.readouterr().err
    assert "runtime.metadata.password_env is 'CONVEYOR_MYSQL_PASSWORD', which no Kubeflow" in err
    secret = 'runtime.container.secret_env={"CONVEYOR_MYSQL_PASSWORD": {secret: mlmd, key: pw}}'
    assert cli.main([*validate, *_set_args([secret])]) == 0
