"""Conveyor's metrics in a real Prometheus (Debian's `prometheus` and `prometheus-pushgateway`,
installed on demand by scripts/ensure_system_packages.sh), all on 127.0.0.1 on free ports in
temporary folders:

- a Pushgateway, and the local model server (`python -m pipelines.serving.model_server`) serving
  TF Serving's half_plus_two, which answers a few predictions;
- one real penguin run (the `ci` profile) on a CSV with text in a numeric column: the data gate
  blocks it, and `finish` pushes its metrics to the Pushgateway (its URL in an environment
  variable, `runtime.metrics.pushgateway_url_env`) and writes the node-exporter textfile;
- Prometheus, scraping both every second with monitoring/rules/conveyor.rules.yml loaded.

The test reads everything back through Prometheus' HTTP API with PromQL: the blocked outcome,
rows and anomalies per split, component durations, a serving request counter and latency, and
the `ConveyorNightBlocked` alert firing.
"""

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipelines.core.paths import FRAMEWORK_ROOT, RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec
from tests import system_packages
from tests.conftest import copy_fixture

URL_ENV = "CONVEYOR_TEST_PUSHGATEWAY_URL"
RULES = FRAMEWORK_ROOT / "monitoring" / "rules" / "conveyor.rules.yml"
MONITORING_PATH = "/monitoring/prometheus/metrics"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def _wait(what: str, check, process: subprocess.Popen, log: Path, seconds: float = 60):
    """Polls `check()` until it returns something truthy; fails naming `what` and the log."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            found = check()
            if found:
                return found
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} (exit {process.poll()}): {log.read_text()[-3000:]}")
        time.sleep(0.2)


class Processes:
    """The servers this module starts, stopped at the end whatever happened."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.started: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.folder / f"{name}.log"
        with log.open("w") as output:
            process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)
        self.started.append(process)
        return process, log

    def stop(self) -> None:
        for process in reversed(self.started):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


@pytest.fixture(scope="module")
def observed(tmp_path_factory, monkeypatch_module):
    programs = system_packages.require(
        {"prometheus": "prometheus", "prometheus-pushgateway": "prometheus-pushgateway"}
    )
    base = tmp_path_factory.mktemp("prometheus")
    processes = Processes(base)
    try:
        # The Pushgateway, and the model server (it imports TensorFlow while the pipeline runs).
        gateway_port = _free_port()
        gateway, gateway_log = processes.start(
            "pushgateway",
            [programs["prometheus-pushgateway"], f"--web.listen-address=127.0.0.1:{gateway_port}"],
        )
        from tests.half_plus_two import write_half_plus_two

        models = base / "models" / "half_plus_two"
        write_half_plus_two(models / "1")
        ready = base / "server.ready"
        server, server_log = processes.start(
            "server",
            [sys.executable, "-m", "pipelines.serving.model_server"]
            + ["--model-name", "half_plus_two"]
            + ["--model-base-path", str(models), "--port", "0", "--ready-file", str(ready)]
            + ["--monitoring-path", MONITORING_PATH],
        )
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        _wait(
            "the Pushgateway did not start",
            lambda: _get(f"{gateway_url}/-/ready"),
            gateway,
            gateway_log,
        )

        # One blocked night: text in a numeric column.
        workdir = base / "work"
        monkeypatch_module.setenv(URL_ENV, gateway_url)
        overrides = [
            "runtime.metrics.textfile_dir=textfile",
            f"runtime.metrics.pushgateway_url_env={URL_ENV}",
        ]
        loaded = load_spec("penguin", env="ci", overrides=overrides, workdir=workdir)
        paths = RunPaths(workdir=workdir, spec=loaded.spec)
        copy_fixture("penguins_text_in_numeric.csv", paths.input_dir, "penguins.csv")
        lines: list[str] = []
        started = time.monotonic()
        result = nightly.run(loaded, workdir, echo=lines.append)
        run_seconds = time.monotonic() - started

        server_port = _wait(
            "the model server did not become ready",
            lambda: ready.is_file() and json.loads(ready.read_text())["port"],
            server,
            server_log,
            seconds=120,
        )
        served = f"http://127.0.0.1:{server_port}/v1/models/half_plus_two:predict"
        for x in (1.0, 2.0, 5.0):
            request = urllib.request.Request(
                served, data=json.dumps({"instances": [x]}).encode(), method="POST"
            )
            answer = json.loads(urllib.request.urlopen(request, timeout=10).read())
            assert answer == {"predictions": [x / 2 + 2]}

        # Prometheus, scraping both every second, with Conveyor's rules.
        config = base / "prometheus.yml"
        config.write_text(
            json.dumps(  # JSON is YAML
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {
                            "job_name": "pushgateway",
                            "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{gateway_port}"]}],
                        },
                        {
                            "job_name": "serving",
                            "metrics_path": MONITORING_PATH,
                            "static_configs": [{"targets": [f"127.0.0.1:{server_port}"]}],
                        },
                    ],
                }
            )
        )
        prometheus_port = _free_port()
        prometheus, prometheus_log = processes.start(
            "prometheus",
            [programs["prometheus"], f"--config.file={config}"]
            + [f"--storage.tsdb.path={base / 'tsdb'}"]
            + [f"--web.listen-address=127.0.0.1:{prometheus_port}"],
        )
        api = f"http://127.0.0.1:{prometheus_port}/api/v1"
        _wait(
            "Prometheus did not start",
            lambda: _get(f"{api}/status/buildinfo"),
            prometheus,
            prometheus_log,
        )
        yield {
            "result": result,
            "lines": lines,
            "paths": paths,
            "run_seconds": run_seconds,
            "query": lambda q: _wait(
                f"Prometheus never answered {q!r}",
                lambda: _query(api, q),
                prometheus,
                prometheus_log,
                seconds=30,
            ),
            "alerts": lambda: _wait(
                "no alert fired",
                lambda: [
                    a
                    for a in json.loads(_get(f"{api}/alerts"))["data"]["alerts"]
                    if a["state"] == "firing"
                ],
                prometheus,
                prometheus_log,
                seconds=30,
            ),
        }
    finally:
        processes.stop()


def _query(api: str, promql: str) -> list[dict]:
    """The instant vector of a PromQL query (empty until the series are scraped)."""
    answer = json.loads(_get(f"{api}/query?" + urllib.parse.urlencode({"query": promql})))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _by(results: list[dict], label: str) -> dict[str, float]:
    return {r["metric"][label]: float(r["value"][1]) for r in results}


def test_the_blocked_run_exported_its_metrics_to_both_sinks(observed):
    result, lines, paths = observed["result"], observed["lines"], observed["paths"]
    assert result.outcome == "blocked", result.message
    textfile = paths.workdir / "textfile" / "penguin.prom"
    assert f"metrics: {textfile}" in lines
    assert f"metrics: pushed to the Pushgateway in ${URL_ENV}" in lines
    names = {family.name for family in text_string_to_metric_families(textfile.read_text())}
    assert {"conveyor_run_outcome", "conveyor_data_rows", "conveyor_data_anomalies"} <= names
    print(f"blocked penguin run with its finish: {observed['run_seconds']:.1f} s")


def test_prometheus_reads_the_run_back_with_promql(observed):
    query = observed["query"]
    [outcome] = query('conveyor_run_outcome{job="conveyor", pipeline="penguin"} == 1')
    assert outcome["metric"]["outcome"] == "blocked"
    rows = _by(query('conveyor_data_rows{pipeline="penguin"}'), "split")
    assert rows.keys() == {"train", "eval"} and sum(rows.values()) == 344
    anomalies = _by(query('conveyor_data_anomalies{pipeline="penguin"}'), "split")
    assert anomalies["train"] >= 1  # body_mass_g holds text
    durations = _by(query('conveyor_component_duration_seconds{pipeline="penguin"}'), "component")
    assert {"statistics_gen", "data_gate"} <= durations.keys()
    assert "trainer" not in durations  # blocked before training
    assert query('absent(conveyor_evaluation_metric{pipeline="penguin"})')


def test_the_night_blocked_alert_fires(observed):
    firing = {a["labels"]["alertname"]: a for a in observed["alerts"]()}
    assert "ConveyorNightBlocked" in firing, firing
    alert = firing["ConveyorNightBlocked"]
    assert alert["labels"]["pipeline"] == "penguin" and alert["labels"]["severity"] == "warning"
    assert alert["annotations"]["summary"] == "penguin: the last run was blocked by the data gate"
    assert "ConveyorRunFailed" not in firing


def test_prometheus_scrapes_the_model_server(observed):
    query = observed["query"]
    requests = query(
        'sum by (status) (conveyor_serving_requests_total{job="serving", model="half_plus_two",'
        ' method="predict"})'
    )
    assert _by(requests, "status") == {"200": 3.0}
    [latency] = query(
        'conveyor_serving_request_latency_seconds_count{model="half_plus_two", method="predict"}'
    )
    assert float(latency["value"][1]) == 3.0
