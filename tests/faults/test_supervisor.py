"""`conveyor run` supervises its pipeline process: killed by a signal, the run still ends
FAILED, with a summary, a report and an alert, from the parent that held the lock.

The first tests fork this test process with a stand-in for the pipeline (no TensorFlow), so
each takes a fraction of a second; the last kills a real `conveyor run penguin` with SIGTERM,
as a scheduler stopping it would (about a minute, marked e2e).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.builder.spans import SpanError
from pipelines.core.outcome import EXIT_FAILED, Outcome, RunResult
from pipelines.core.paths import FRAMEWORK_ROOT, REPORT_FILE, RUN_SUMMARY, RunPaths
from pipelines.ops import nightly
from pipelines.run.plan import Run
from pipelines.spec.loading import load_spec
from tests.conftest import recording_webhook

WEBHOOK_ENV = "CONVEYOR_TEST_WEBHOOK"
REAL_FORK_IS_SAFE = nightly.fork_is_safe  # before any test replaces it
CONVEYOR = str(Path(sys.executable).with_name("conveyor"))


@pytest.fixture
def webhook(monkeypatch):
    """A server on 127.0.0.1 that records each alert POSTed to it; its URL is in $WEBHOOK_ENV."""
    with recording_webhook() as (url, received):
        monkeypatch.setenv(WEBHOOK_ENV, url)
        yield url, received


@pytest.fixture(autouse=True)
def fork_allowed(monkeypatch):
    """The stand-ins below never touch TensorFlow, so forking is safe here whatever else this
    test process imported (`nightly.fork_is_safe` answers for a real pipeline child)."""
    monkeypatch.setattr(nightly, "fork_is_safe", lambda: True)


@pytest.fixture
def planned(tmp_path):
    """Penguin under the ci profile, alerting to $WEBHOOK_ENV, with its input in place."""
    loaded = load_spec("penguin", env="ci", overrides=[f"runtime.alert_webhook_env={WEBHOOK_ENV}"])
    paths = RunPaths(workdir=tmp_path.resolve(), spec=loaded.spec)
    paths.input_dir.mkdir(parents=True)
    (paths.input_dir / "penguins.csv").write_text("species,island\nAdelie,Biscoe\n")
    return Run(loaded, paths, None)


def _lock_is_free(paths: RunPaths) -> bool:
    from filelock import FileLock, Timeout

    lock = FileLock(paths.lock_file)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    lock.release()
    return True


def test_a_child_killed_by_sigkill_ends_failed_with_a_summary_and_an_alert(
    planned, webhook, monkeypatch
):
    _, alerts = webhook
    parent = os.getpid()

    def killed(planned, inputs_fingerprint, echo, run_id):
        echo("  statistics_gen         executed     0.1s")
        os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does

    monkeypatch.setattr(nightly, "execute_and_finish", killed)
    lines: list[str] = []
    result = nightly.run_planned(planned, echo=lines.append, supervised=True)

    assert os.getpid() == parent
    assert result.outcome == Outcome.FAILED
    assert result.message.startswith(
        "the run was killed by SIGKILL (out of memory?) before the pipeline started"
    )
    assert "  statistics_gen         executed     0.1s" in lines  # relayed by the parent
    run_dir = Path(result.run_dir)
    assert run_dir.parent == planned.paths.runs_dir
    summary = json.loads((run_dir / RUN_SUMMARY).read_text())
    assert summary["outcome"] == "failed" and summary["message"] == result.message
    [alert] = alerts
    assert alert["outcome"] == "failed" and alert["reason"] == result.message
    assert alert["run_id"] == run_dir.name
    # A failure is retried: no outcome recorded; and the parent released the lock.
    assert not planned.paths.outcome_record(None).exists()
    assert _lock_is_free(planned.paths)


LOCK_PROBE = """
import sys
from filelock import FileLock, Timeout
try:
    FileLock(sys.argv[1]).acquire(timeout=0)
except Timeout:
    print("busy")
else:
    print("free")
"""


def _lock_seen_from_elsewhere(paths: RunPaths) -> str:
    """'busy' or 'free': what another process finds when it tries the pipeline's lock."""
    probe = [sys.executable, "-c", LOCK_PROBE, str(paths.lock_file)]
    return subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()


def test_the_parent_holds_the_lock_while_the_child_runs_and_after_it_is_killed(
    planned, monkeypatch
):
    def killed(planned, inputs_fingerprint, echo, run_id):
        echo(f"from the child: {_lock_seen_from_elsewhere(planned.paths)}")
        os.kill(os.getpid(), signal.SIGKILL)

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("  pipeline "):  # the parent's line once the child is dead
            lines.append(f"after the kill: {_lock_seen_from_elsewhere(planned.paths)}")

    monkeypatch.setattr(nightly, "execute_and_finish", killed)
    lines: list[str] = []
    nightly.run_planned(planned, echo=echo, supervised=True)

    assert "from the child: busy" in lines
    assert "after the kill: busy" in lines  # the child's death released nothing
    assert _lock_seen_from_elsewhere(planned.paths) == "free"  # the parent's end did


def test_sigterm_to_the_parent_is_passed_on_and_the_run_ends_failed(planned, webhook, monkeypatch):
    _, alerts = webhook

    def stopped(planned, inputs_fingerprint, echo, run_id):
        echo("started")
        time.sleep(60)  # until the parent passes the SIGTERM on
        raise AssertionError("the SIGTERM never came")

    def echo(line: str) -> None:
        lines.append(line)
        if line == "started":  # the parent's forwarding handler is in place by now
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(nightly, "execute_and_finish", stopped)
    lines: list[str] = []
    started = time.monotonic()
    result = nightly.run_planned(planned, echo=echo, supervised=True)

    assert time.monotonic() - started < 30
    assert result.outcome == Outcome.FAILED
    assert result.message.startswith("the run was killed by SIGTERM before the pipeline started")
    assert "  SIGTERM received: passed on to the pipeline process" in lines
    assert [a["outcome"] for a in alerts] == ["failed"]
    # This process's own SIGTERM handler is back.
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_finished_childs_result_and_lines_come_back_as_they_were(planned, monkeypatch):
    def finished(planned, inputs_fingerprint, echo, run_id):
        echo("one")
        echo("two")
        return RunResult(run_id, "penguin", Outcome.NOT_PUSHED, f"nothing pushed ({os.getpid()})")

    monkeypatch.setattr(nightly, "execute_and_finish", finished)
    lines: list[str] = []
    result = nightly.run_planned(planned, echo=lines.append, supervised=True)

    assert lines == ["one", "two"]
    assert result.outcome == Outcome.NOT_PUSHED
    assert result.run_id.startswith("penguin-")
    assert result.message != f"nothing pushed ({os.getpid()})"  # it ran in another process


def test_a_process_that_imported_tensorflow_runs_the_pipeline_itself(planned, monkeypatch):
    def finished(planned, inputs_fingerprint, echo):
        return RunResult("r", "penguin", Outcome.NOT_PUSHED, f"nothing pushed ({os.getpid()})")

    monkeypatch.setattr(nightly, "execute_and_finish", finished)
    monkeypatch.setattr(nightly, "fork_is_safe", REAL_FORK_IS_SAFE)
    monkeypatch.setitem(sys.modules, "tensorflow", sys.modules.get("tensorflow", object()))
    result = nightly.run_planned(planned, echo=lambda _: None, supervised=True)

    assert result.message == f"nothing pushed ({os.getpid()})"  # no fork: this process ran it


def test_an_error_before_the_run_is_raised_again_in_the_parent(planned, monkeypatch):
    def refused(planned, inputs_fingerprint, echo, run_id):
        raise SpanError("no data for span 7")

    monkeypatch.setattr(nightly, "execute_and_finish", refused)
    with pytest.raises(SpanError, match="no data for span 7"):
        nightly.run_planned(planned, echo=lambda _: None, supervised=True)
    assert _lock_is_free(planned.paths)


@pytest.mark.e2e
def test_conveyor_run_stopped_by_sigterm_ends_failed_and_alerts(tmp_path, webhook):
    url, alerts = webhook
    workdir = tmp_path / "work"
    prepared = subprocess.run(
        [CONVEYOR, "data", "penguin", "--workdir", str(workdir)],
        cwd=FRAMEWORK_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert prepared.returncode == 0, prepared.stderr
    argv = [CONVEYOR, "run", "penguin", "--env", "ci", "--workdir", str(workdir)]
    argv += ["--set", f"runtime.alert_webhook_env={WEBHOOK_ENV}"]
    # Unbuffered: the progress lines arrive as they are printed, so the kill lands mid-run.
    env = {**os.environ, WEBHOOK_ENV: url, "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(
        argv, cwd=FRAMEWORK_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    seen = []
    for line in run.stdout:
        seen.append(line)
        if line.strip().startswith("data_gate"):  # the trainer, and its spare server, start
            break
    # The kill lands while the infra validator's spare server waits (it starts with the
    # trainer): it must not outlive the run (Linux kills it when the run's process dies, and it
    # ends by itself when its stdin closes).
    spare = _wait_for_spare_server(run)
    run.send_signal(signal.SIGTERM)  # to `conveyor` itself, as a scheduler would
    out = "".join(seen) + run.stdout.read()
    err = run.stderr.read()
    assert run.wait(timeout=120) == EXIT_FAILED, out + err
    assert _gone(spare), f"the spare model server {spare} outlived the run"

    verdict = next(line for line in out.splitlines() if line.startswith("FAILED: "))
    assert verdict.startswith("FAILED: the run was killed by SIGTERM "), out
    assert " during " in verdict or " after " in verdict
    run_dir = Path(next(line for line in out.splitlines() if line.startswith("run record: "))[12:])
    summary = json.loads((run_dir / RUN_SUMMARY).read_text())
    assert summary["outcome"] == "failed" and summary["message"] in verdict
    assert any(node["node_id"] == "data_gate" for node in summary["nodes"])
    assert (run_dir / REPORT_FILE).is_file()
    [alert] = alerts
    assert alert["outcome"] == "failed" and alert["run_id"] == run_dir.name
    assert alert["reason"] == summary["message"]
    spec = load_spec("penguin", env="ci").spec
    paths = RunPaths(workdir=workdir.resolve(), spec=spec)
    # Serving untouched (nothing was ever pushed there), no outcome recorded, lock free, and
    # no pipeline process left behind holding it.
    assert not paths.serving_dir.exists() or not any(paths.serving_dir.iterdir())
    assert not paths.outcome_record(None).exists()
    assert _lock_is_free(paths)


def _processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line) of every process, from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # ended while being read
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        found[int(entry.name)] = (int(ppid), state, cmdline)
    return found


def _wait_for_spare_server(run: subprocess.Popen, deadline_seconds: float = 180) -> int:
    """The pid of the spare model server the run under `run` started (spare.SPARE_PROGRAM,
    whose first argument is the pid of the process that started it, the run's child)."""
    from components.infra_validator.spare import SPARE_PROGRAM

    marker = SPARE_PROGRAM.splitlines()[-1][:40]
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline and run.poll() is None:
        processes = _processes()
        children = {pid for pid, (ppid, _, _) in processes.items() if ppid == run.pid}
        for pid, (ppid, _, cmdline) in processes.items():
            if ppid in children and marker in cmdline:
                return pid
        time.sleep(0.2)
    raise AssertionError(f"no spare model server appeared under the run (pid {run.pid})")


def _gone(pid: int, deadline_seconds: float = 30) -> bool:
    """Whether the process ended (a zombie nobody reaped has ended too) within the deadline."""
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        state = _processes().get(pid)
        if state is None or state[1] in ("Z", "X"):
            return True
        time.sleep(0.2)
    return False
