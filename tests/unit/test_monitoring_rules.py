"""The alert rules in monitoring/rules/ through the real `promtool` (Debian's `prometheus`
package, installed on demand): the file is valid, its unit tests pass (each alert fires in one
case and stays quiet in another), and every metric the rules read is one Conveyor exports or,
for the `tf-serving` group, one TF Serving exports (the cited list in
pipelines/finish/metrics.py)."""

import subprocess

import pytest
import yaml

from pipelines.core.paths import FRAMEWORK_ROOT
from pipelines.finish import metrics
from tests import system_packages

RULES_DIR = FRAMEWORK_ROOT / "monitoring" / "rules"
RULES = RULES_DIR / "conveyor.rules.yml"
RULE_TESTS = RULES_DIR / "conveyor.rules.test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    return system_packages.require({"prometheus": "promtool"})["promtool"]


def _promtool(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [promtool, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120
    )


def test_the_rule_file_is_valid(promtool):
    done = _promtool(promtool, "check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 10 rules found" in done.stdout


def test_each_alert_fires_and_stays_quiet_where_it_should(promtool):
    done = _promtool(promtool, "test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_rule_test_that_expects_the_wrong_alert_fails(promtool, tmp_path):
    # The tests can fail: the first case (blocked and failed nights) alone, with the blocked
    # night expected on penguin instead of taxi.
    cases = yaml.safe_load(RULE_TESTS.read_text())
    cases["rule_files"] = [str(RULES)]
    cases["tests"] = cases["tests"][:1]
    [firing] = [t for t in cases["tests"][0]["alert_rule_test"] if t["exp_alerts"]][:1]
    assert firing["exp_alerts"][0]["exp_labels"]["pipeline"] == "taxi"
    firing["exp_alerts"][0]["exp_labels"]["pipeline"] = "penguin"
    wrong = tmp_path / "wrong.test.yml"
    wrong.write_text(yaml.safe_dump(cases))
    done = _promtool(promtool, "test", "rules", str(wrong))
    assert done.returncode != 0
    assert 'pipeline="taxi"' in done.stdout + done.stderr


def test_a_tf_serving_rule_test_that_expects_the_wrong_model_fails(promtool, tmp_path):
    cases = yaml.safe_load(RULE_TESTS.read_text())
    cases["rule_files"] = [str(RULES)]
    [no_version] = [
        case
        for case in cases["tests"]
        if any(t["alertname"] == "TFServingNoVersionAvailable" for t in case["alert_rule_test"])
    ]
    cases["tests"] = [no_version]
    [firing] = [t for t in no_version["alert_rule_test"] if t["exp_alerts"]]
    firing["exp_alerts"][0]["exp_labels"]["model_name"] = "penguin"
    wrong = tmp_path / "wrong.test.yml"
    wrong.write_text(yaml.safe_dump(cases))
    done = _promtool(promtool, "test", "rules", str(wrong))
    assert done.returncode != 0
    assert 'model_name="taxi"' in done.stdout + done.stderr


def test_every_metric_the_rules_read_is_exported():
    from pipelines.serving.model_server.metrics import ServerMetrics

    conveyor = metrics.run_metric_names() | metrics.exported_names(ServerMetrics().registry)
    groups = {group["name"]: group for group in yaml.safe_load(RULES.read_text())["groups"]}
    read = {}
    for name, group in groups.items():
        read[name] = set()
        for rule in group["rules"]:
            read[name] |= metrics.metric_names_in(rule["expr"])
    conveyor_read = read["conveyor-pipelines"] | read["conveyor-serving"]
    assert conveyor_read <= conveyor, sorted(conveyor_read - conveyor)
    assert {"conveyor_run_outcome", "conveyor_serving_requests_total"} <= conveyor_read
    # TF Serving's group reads TF Serving's names only, each from the list citing its source.
    tf_serving = metrics.tf_serving_metric_names()
    assert read["tf-serving"] <= tf_serving, sorted(read["tf-serving"] - tf_serving)
    assert {
        ":tensorflow:serving:request_count",
        ":tensorflow:serving:request_latency_bucket",
    } <= read["tf-serving"]


def test_tf_serving_names_are_rendered_as_its_exporter_renders_them():
    # prometheus_exporter.cc: every character outside [a-zA-Z0-9_] becomes ':'.
    assert (
        metrics.tf_serving_prometheus_name("/tensorflow/serving/request_count")
        == ":tensorflow:serving:request_count"
    )
    assert metrics.tf_serving_prometheus_name("9/x-y") == "_9:x:y"
    assert ":tensorflow:serving:request_count_total" not in metrics.tf_serving_metric_names()
    assert metrics.metric_names_in(
        'rate(:tensorflow:serving:request_count{job=":tensorflow:x"}[5m:1m])'
    ) == {":tensorflow:serving:request_count"}
