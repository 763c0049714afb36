"""The webhook alert against a real HTTP server on 127.0.0.1, and what a bad webhook URL must
never do: show the URL, change a run's exit code or lose its outcome record."""

import json
import socket
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from pipelines import cli
from pipelines.core.outcome import EXIT_BLOCKED, Reason, RunResult
from pipelines.core.paths import RunPaths
from pipelines.finish import alerts
from pipelines.finish.alerts import send_alert
from pipelines.finish.contract import RunFacts, Stop
from pipelines.spec.loading import load_spec
from tests.conftest import recording_webhook

WEBHOOK_ENV = "CONVEYOR_TEST_WEBHOOK"
GATE = {
    "passed": False,
    "anomalies": [
        {"column": "body_mass_g", "split": "train", "description": "Unexpected data type"}
    ],
    "drift": [],
    "skew": [],
}


@pytest.fixture
def spec():
    return load_spec(
        "penguin", env="ci", overrides=[f"runtime.alert_webhook_env={WEBHOOK_ENV}"]
    ).spec


@pytest.fixture
def webhook():
    """A local server that records each POST (path, content type, body) and answers 204."""

    def entry(handler, body):
        return {"path": handler.path, "content_type": handler.headers["Content-Type"], "body": body}

    with recording_webhook(entry) as served:
        yield served


REASONS = {"blocked": Reason.DATA_GATE_BLOCKED, "failed": Reason.COMPONENT_FAILED}


def _result(
    outcome: str, tmp_path, message: str = "Data gate: bad data", reason: Reason | None = None
) -> RunResult:
    run_dir = tmp_path / "runs" / "penguin" / "penguin-20261129T020000.000000Z"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.html").write_text("<html></html>")
    return RunResult(
        run_id=run_dir.name,
        pipeline="penguin",
        outcome=outcome,
        message=message,
        reason=reason or REASONS.get(outcome, Reason.MODEL_NOT_BLESSED),
        run_dir=str(run_dir),
        night="2026-11-28",
        span=3,
        data_gate=GATE if outcome == "blocked" else None,
    )


def test_a_blocked_night_is_posted_with_its_reason(spec, webhook, tmp_path, monkeypatch):
    url, received = webhook
    monkeypatch.setenv(WEBHOOK_ENV, url)
    result = _result("blocked", tmp_path)

    line = send_alert(spec, result)

    assert line == f"alert sent (blocked) to the webhook in ${WEBHOOK_ENV}: HTTP 204"
    (request,) = received
    assert request["path"] == "/hooks/nightly"
    assert request["content_type"] == "application/json"
    assert request["body"] == {
        "pipeline": "penguin",
        "run_id": "penguin-20261129T020000.000000Z",
        "outcome": "blocked",
        "reason": "Data gate: bad data",
        "reason_code": "data_gate_blocked",
        "night": "2026-11-28",
        "span": 3,
        "report": str(tmp_path / "runs/penguin/penguin-20261129T020000.000000Z/report.html"),
        "data_gate": GATE,
    }


def test_a_failed_night_is_posted_too(spec, webhook, tmp_path, monkeypatch):
    url, received = webhook
    monkeypatch.setenv(WEBHOOK_ENV, url)
    send_alert(spec, _result("failed", tmp_path, message="RuntimeError: trainer died"))
    assert [r["body"]["outcome"] for r in received] == ["failed"]
    assert received[0]["body"]["reason"] == "RuntimeError: trainer died"


@pytest.mark.parametrize("outcome", ["pushed", "not_pushed"])
def test_nothing_is_sent_for_a_good_night(spec, webhook, tmp_path, monkeypatch, outcome):
    url, received = webhook
    monkeypatch.setenv(WEBHOOK_ENV, url)
    assert send_alert(spec, _result(outcome, tmp_path)) is None
    assert received == []


def test_nothing_is_sent_without_a_url(spec, tmp_path, monkeypatch):
    blocked = _result("blocked", tmp_path)
    monkeypatch.setenv(WEBHOOK_ENV, "")
    assert send_alert(spec, blocked) is None
    monkeypatch.delenv(WEBHOOK_ENV)
    assert send_alert(spec, blocked) is None
    unset = load_spec("penguin", env="ci").spec  # no alert_webhook_env at all
    assert send_alert(unset, blocked) is None


def test_an_unreachable_webhook_is_reported_not_raised(spec, tmp_path, monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(WEBHOOK_ENV, f"http://127.0.0.1:{port}/hook")
    line = send_alert(spec, _result("blocked", tmp_path), timeout=2)
    assert line.startswith(f"alert not delivered to the webhook in ${WEBHOOK_ENV}: ")
    assert "refused" in line.lower()


def test_a_webhook_error_status_is_reported(spec, tmp_path, monkeypatch):
    class Refusing(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    # A handler without do_POST: http.server answers the POST with 501.
    server = HTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv(WEBHOOK_ENV, f"http://127.0.0.1:{server.server_port}/")
        line = send_alert(spec, _result("failed", tmp_path))
    finally:
        server.shutdown()
        server.server_close()
    assert line == f"alert not delivered: the webhook in ${WEBHOOK_ENV} answered HTTP 501"


SCHEMELESS = "hooks.example.com/services/sentinel-webhook-token"


@pytest.mark.parametrize("url", [SCHEMELESS, "file:///etc/hostname", "ftp://sentinel.example/x"])
def test_a_url_that_is_not_http_is_reported_in_one_line_without_the_url(
    spec, tmp_path, monkeypatch, url
):
    monkeypatch.setenv(WEBHOOK_ENV, url)
    line = send_alert(spec, _result("blocked", tmp_path))
    assert line == (
        f"alert not delivered: the webhook in ${WEBHOOK_ENV} is not an http(s) URL "
        "(it needs the scheme, e.g. https://)"
    )


def test_a_reason_that_quotes_the_url_is_masked(spec, tmp_path, monkeypatch):
    url = "http://127.0.0.1:1/sentinel-webhook-token"

    def refuse(request, timeout):
        raise urllib.error.URLError(f"no route to {request.full_url}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setenv(WEBHOOK_ENV, url)
    line = send_alert(spec, _result("failed", tmp_path))
    assert line == f"alert not delivered to the webhook in ${WEBHOOK_ENV}: no route to ***"


def _blocked_run(tmp_path, monkeypatch):
    """`conveyor run penguin` whose pipeline run (faked: no TFX here) is blocked by the gate."""
    from pipelines.run import local

    loaded = load_spec("penguin", env="ci")
    csv = RunPaths(workdir=tmp_path, spec=loaded.spec).input_dir / "penguins.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("species,island\nAdelie,Biscoe\n")

    def blocked(planned, echo=print, run_id=None):
        stop = Stop(Reason.DATA_GATE_BLOCKED, "Data gate: bad data", GATE)
        return RunFacts(planned.loaded, planned.paths, "penguin-20261201T020000.000000Z", stop=stop)

    monkeypatch.setattr(local, "execute", blocked)
    argv = ["run", "penguin", "--env", "ci", "--workdir", str(tmp_path)]
    return cli.main([*argv, "--set", f"runtime.alert_webhook_env={WEBHOOK_ENV}"])


def test_a_bad_webhook_url_leaves_a_blocked_nights_exit_code_and_record(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(WEBHOOK_ENV, SCHEMELESS)
    assert _blocked_run(tmp_path, monkeypatch) == EXIT_BLOCKED
    out, err = capsys.readouterr()
    assert f"alert not delivered: the webhook in ${WEBHOOK_ENV} is not an http(s) URL" in out
    assert "sentinel" not in out + err
    record = json.loads((tmp_path / "runs" / "penguin" / "latest_outcome.json").read_text())
    assert record["outcome"] == "blocked"
    assert record["run_id"] == "penguin-20261201T020000.000000Z"


def test_an_alert_that_raises_cannot_stop_the_outcome_record(tmp_path, monkeypatch, capsys):
    def broken(spec, result, timeout=10.0):
        raise RuntimeError(f"cannot post to {SCHEMELESS}")

    monkeypatch.setattr(alerts, "send_alert", broken)
    monkeypatch.setenv(WEBHOOK_ENV, "https://hooks.example.com/x")
    assert _blocked_run(tmp_path, monkeypatch) == EXIT_BLOCKED
    out, err = capsys.readouterr()
    assert "alert not delivered: RuntimeError while sending it" in out
    assert "sentinel" not in out + err
    assert (tmp_path / "runs" / "penguin" / "latest_outcome.json").is_file()


def test_a_slow_webhook_times_out_without_holding_the_run(spec, tmp_path, monkeypatch):
    import time

    release = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            release.wait(10)  # answers long after the alert's timeout
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv(WEBHOOK_ENV, f"http://127.0.0.1:{server.server_port}/hook")
        started = time.monotonic()
        line = send_alert(spec, _result("failed", tmp_path), timeout=1)
        waited = time.monotonic() - started
    finally:
        release.set()
        server.shutdown()
        server.server_close()
    assert line.startswith(f"alert not delivered to the webhook in ${WEBHOOK_ENV}: ")
    assert "timed out" in line.lower()
    assert waited < 5  # the alert's own timeout, not the server's pace


@pytest.mark.parametrize(
    ("reason", "alerts"),
    [
        (Reason.INFRA_REFUSED, True),
        (Reason.TFLITE_REFUSED, True),
        (Reason.MODEL_NOT_BLESSED, False),
        (Reason.IDENTICAL_TO_SERVED, False),
        (Reason.NOTHING_NEW, False),
    ],
)
def test_a_not_pushed_night_alerts_by_its_reason_code_not_its_words(
    spec, webhook, tmp_path, monkeypatch, reason, alerts
):
    url, received = webhook
    monkeypatch.setenv(WEBHOOK_ENV, url)
    # Words that once decided it are gone from the decision: the code alone says.
    words = {
        True: "nothing pushed: the model did not pass the evaluation thresholds",
        False: "nothing pushed: the infra validator did not bless the model: p99 too slow",
    }[alerts]
    result = _result("not_pushed", tmp_path, message=words, reason=reason)

    line = send_alert(spec, result)

    assert result.alerts is alerts
    assert (line is not None) is alerts
    assert [r["body"]["reason_code"] for r in received] == ([reason.value] if alerts else [])
