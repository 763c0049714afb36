"""The alert rules in monitoring/rules/ through the real `promtool` (Debian's `prometheus`
package, installed on demand): the file is valid, its unit tests pass (each alert fires in one
case and stays quiet in another), and every metric the rules read is one Conveyor exports."""

import subprocess

import pytest
import yaml

from pipelines.ops import metrics
from pipelines.paths import PROJECT_ROOT
from tests import system_packages

RULES_DIR = PROJECT_ROOT / "monitoring" / "rules"
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
    assert "SUCCESS: 6 rules found" in done.stdout


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


def test_every_metric_the_rules_read_is_exported():
    from pipelines.serving.runtime.metrics import ServerMetrics

    exported = metrics.run_metric_names() | metrics.exported_names(ServerMetrics().registry)
    groups = yaml.safe_load(RULES.read_text())["groups"]
    read = set()
    for rule in (rule for group in groups for rule in group["rules"]):
        read |= metrics.metric_names_in(rule["expr"])
    assert read <= exported, sorted(read - exported)
    assert {"conveyor_run_outcome", "conveyor_serving_requests_total"} <= read
