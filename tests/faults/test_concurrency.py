"""Two runs of one pipeline on one workdir, with real processes: the second waits or refuses
(exit 75) naming the first, and a holder that dies, even by SIGKILL, leaves the lock free.

The holder is a small Python process that takes the pipeline's lock through
`nightly.pipeline_lock` (as `conveyor run` does) and keeps it until its stdin closes; the
contender is a real `conveyor run`, which asks for the lock before importing TensorFlow, so
every case here takes about a second.
"""

import datetime
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines import cli
from pipelines.core.outcome import EXIT_BUSY, Outcome
from pipelines.core.paths import FRAMEWORK_ROOT, RunPaths
from pipelines.finish.contract import RunFacts
from pipelines.ops import nightly
from pipelines.run.plan import Run
from pipelines.spec.loading import load_spec

HOLDER = """
import sys
from pathlib import Path

from pipelines.ops import nightly
from pipelines.core.paths import RunPaths
from pipelines.spec.loading import load_spec

spec = load_spec(sys.argv[1], env="ci").spec
with nightly.pipeline_lock(RunPaths(Path(sys.argv[2]).resolve(), spec), sys.argv[3]):
    print("holding", flush=True)
    sys.stdin.readline()  # until the test closes stdin (or kills this process)
"""


def _spawn_holder(pipeline: str, workdir, what: str) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pipeline, str(workdir), what],
        cwd=FRAMEWORK_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "holding"
    return holder


def _release(holder: subprocess.Popen) -> None:
    if holder.poll() is None:
        holder.stdin.close()
        holder.wait(timeout=10)


@pytest.fixture
def penguin_workdir(tmp_path):
    """A workdir whose input is in place: `conveyor run penguin` would run it."""
    paths = RunPaths(workdir=tmp_path, spec=load_spec("penguin", env="ci").spec)
    paths.input_dir.mkdir(parents=True)
    (paths.input_dir / "penguins.csv").write_text("species,island\nAdelie,Biscoe\n")
    return tmp_path


@pytest.fixture
def penguin_held(penguin_workdir):
    holder = _spawn_holder("penguin", penguin_workdir, "penguin's run of all input files")
    try:
        yield penguin_workdir, holder
    finally:
        _release(holder)


def _conveyor_run(workdir, *settings: str) -> tuple[subprocess.CompletedProcess, float]:
    argv = [sys.executable, "-m", "pipelines.cli", "run", "penguin", "--env", "ci"]
    argv += ["--workdir", str(workdir)]
    for setting in settings:
        argv += ["--set", setting]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=FRAMEWORK_ROOT, capture_output=True, text=True, timeout=60)
    return done, time.monotonic() - started


def test_a_second_run_that_refuses_exits_75_at_once_naming_the_holder(penguin_held):
    workdir, holder = penguin_held
    done, seconds = _conveyor_run(workdir, "runtime.concurrency.when_busy=refuse")

    assert done.returncode == EXIT_BUSY, done.stderr
    assert seconds < 10  # no wait, and TensorFlow never imported
    lock = workdir / "runs" / "penguin" / ".lock"
    assert done.stderr.startswith("error: penguin is busy: penguin's run of all input files ")
    assert f"(pid {holder.pid} on " in done.stderr
    assert f"holds {lock}. Nothing was run; try again when it ends (exit 75)." in done.stderr
    assert "runtime.concurrency.when_busy is 'refuse'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (workdir / "runs" / "penguin" / "latest_outcome.json").exists()
    assert holder.poll() is None  # the holder is untouched


def test_a_second_run_that_waits_gives_up_after_wait_seconds(penguin_held):
    workdir, holder = penguin_held
    done, seconds = _conveyor_run(workdir, "runtime.concurrency.wait_seconds=2")

    assert done.returncode == EXIT_BUSY, done.stderr
    assert 2 <= seconds < 12
    lock = workdir / "runs" / "penguin" / ".lock"
    (waiting,) = [line for line in done.stdout.splitlines() if line.startswith("waiting")]
    assert waiting.startswith(f"waiting for penguin's run of all input files (pid {holder.pid} ")
    assert waiting.endswith(f") to finish; lock {lock}")
    assert "still after 2 s of waiting" in done.stderr
    assert "raise it (--set runtime.concurrency.wait_seconds=N)" in done.stderr


def test_the_lock_is_free_once_its_holder_ends_or_is_killed(penguin_workdir):
    spec = load_spec("penguin", env="ci", overrides=["runtime.concurrency.when_busy=refuse"]).spec
    paths = RunPaths(workdir=penguin_workdir.resolve(), spec=spec)
    for end in ("exits", "is killed"):
        holder = _spawn_holder("penguin", penguin_workdir, "a holder")
        with pytest.raises(nightly.PipelineBusy):
            with nightly.pipeline_lock(paths, "this test"):
                pass
        if end == "exits":
            _release(holder)
            assert not nightly.owner_file(paths.lock_file).exists()  # it cleaned up
        else:
            holder.send_signal(signal.SIGKILL)
            assert holder.wait(timeout=10) == -signal.SIGKILL
            assert nightly.owner_file(paths.lock_file).exists()  # stale: no chance to clean up
        # The operating system released the lock with the process: no wait, no refusal.
        with nightly.pipeline_lock(paths, "this test"):
            owner = json.loads(nightly.owner_file(paths.lock_file).read_text())
            assert (owner["pid"], owner["what"]) == (os.getpid(), "this test")


def test_a_backfill_holds_the_lock_for_all_its_nights_without_deadlock(tmp_path, monkeypatch):
    from pipelines.run import local

    loaded = load_spec("taxi", env="ci", workdir=tmp_path)
    paths = RunPaths(workdir=tmp_path.resolve(), spec=loaded.spec)
    nights = [datetime.date(2026, 11, 1), datetime.date(2026, 11, 2)]
    for night in nights:
        folder = paths.input_dir / night.isoformat()
        folder.mkdir(parents=True)
        (folder / "taxi.csv").write_text("fare,tips\n1.0,0.0\n")
    holders = []

    def pushed(planned: Run, echo=print, run_id=None) -> RunFacts:
        holders.append(json.loads(nightly.owner_file(paths.lock_file).read_text())["what"])
        # What the local runner tells the run-finish contract of a run that pushed nothing.
        return RunFacts(
            planned.loaded,
            planned.paths,
            None,
            span=planned.span,
            folder="",
            in_store=False,
            outcome=Outcome.NOT_PUSHED,
        )

    monkeypatch.setattr(local, "execute", pushed)
    done = nightly.backfill(loaded, tmp_path, nights[0], nights[-1], echo=lambda line: None)

    assert [outcome.outcome for _, outcome in done] == [Outcome.NOT_PUSHED] * 2
    assert holders == ["taxi's backfill of 2026-11-01 to 2026-11-02"] * 2
    assert not nightly.owner_file(paths.lock_file).exists()  # released after the last night


def test_a_backfill_refused_by_a_busy_pipeline_exits_75(tmp_path, capsys):
    holder = _spawn_holder("taxi", tmp_path, "taxi's run of 2026-11-30 (span 20787)")
    try:
        argv = ["backfill", "taxi", "--env", "ci", "--workdir", str(tmp_path)]
        argv += ["--from", "2026-11-01", "--to", "2026-11-02"]
        assert cli.main([*argv, "--set", "runtime.concurrency.when_busy=refuse"]) == EXIT_BUSY
    finally:
        _release(holder)
    err = capsys.readouterr().err
    assert err.startswith("error: taxi is busy: taxi's run of 2026-11-30 (span 20787) (pid ")


def test_the_unchanged_check_runs_under_the_lock(penguin_workdir, monkeypatch):
    # Two runs that both found the night changed would both run it.
    from pipelines.run import fingerprint

    loaded = load_spec("penguin", env="ci")
    planned = Run.plan(loaded, penguin_workdir)
    seen = []

    def unchanged_since(paths, span=None):
        seen.append(json.loads(nightly.owner_file(paths.lock_file).read_text())["pid"])
        return {"run_id": "penguin-1", "outcome": "pushed", "served_versions": ["1"]}

    monkeypatch.setattr(fingerprint, "unchanged_since", unchanged_since)
    outcome = nightly.run_night(planned, echo=lambda line: None)
    assert outcome.unchanged and seen == [os.getpid()]
