"""Two runs of one pipeline on one workdir in a bucket, with real processes and real stores (the
emulators of tests/storage_emulators.py): the lock lives in the bucket, held by a lease.

The holder is a small Python process that takes the pipeline's lock through
`nightly.pipeline_lock` (as `conveyor run` does) with a lease of a few seconds and keeps it until
its stdin closes. A holder killed by SIGKILL stops renewing: a waiting run takes the lock once it
has seen no renewal for a lease, not before; a refusing run is refused naming the holder. A live
holder renews its lease, so a run that waits more than two leases never gets it. A holder
stopped for longer than its lease finds, when it runs again, that its lock was taken, says so
and stops its run.
"""

import json
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

from pipelines.core import storage
from pipelines.core.object_path import as_path
from pipelines.core.outcome import EXIT_BUSY
from pipelines.core.paths import FRAMEWORK_ROOT, RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec

LEASE = 3  # seconds: short for the tests, long enough for a loaded machine's renewals

HOLDER = """
import sys

from pipelines.core.object_path import as_path
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec

workdir, lease, what = sys.argv[1:4]
spec = load_spec("penguin", env="ci", overrides=[f"runtime.concurrency.lease_seconds={lease}"])
with nightly.pipeline_lock(RunPaths(as_path(workdir), spec.spec), what):
    print("holding", flush=True)
    sys.stdin.readline()  # until the test closes stdin (or kills this process)
print("released", flush=True)
"""


@pytest.fixture(params=("s3", "gs"))
def workdir(request, storage_emulators) -> str:
    """A fresh workdir in one store's bucket."""
    return f"{storage_emulators.root(request.param)}/lock-{uuid.uuid4().hex[:8]}"


def _spawn_holder(workdir: str, what: str = "penguin's run of all input files"):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, workdir, str(LEASE), what],
        cwd=FRAMEWORK_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = holder.stdout.readline().strip()
    assert line == "holding", holder.stderr.read() if holder.poll() is not None else line
    return holder


def _end(holder: subprocess.Popen) -> None:
    if holder.poll() is None:
        holder.kill()
    holder.wait(timeout=10)


def _paths(workdir: str, *settings: str) -> RunPaths:
    spec = load_spec("penguin", env="ci", overrides=[f"runtime.concurrency.{s}" for s in settings])
    return RunPaths(as_path(workdir), spec.spec)


def _owner(paths: RunPaths) -> dict:
    return json.loads(storage.read_bytes(str(paths.lock_object)))


def test_a_killed_holder_is_refused_by_name_then_waited_out_after_its_lease(workdir):
    holder = _spawn_holder(workdir)
    refusing = _paths(workdir, "when_busy=refuse")
    lock = f"{workdir}/runs/penguin/.lock"
    try:
        assert str(refusing.lock_object) == lock
        assert _owner(refusing)["pid"] == holder.pid
        with pytest.raises(nightly.PipelineBusy) as busy:
            with nightly.pipeline_lock(refusing, "this test"):
                pass
        message = str(busy.value)
        assert message.startswith("penguin is busy: penguin's run of all input files (pid ")
        assert f"(pid {holder.pid} on " in message
        assert f"holds {lock}. Nothing was run; try again when it ends (exit 75)." in message

        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=10) == -signal.SIGKILL
    finally:
        _end(holder)
    # Its object stays, no longer renewed. A refusing run does not wait to judge it.
    with pytest.raises(nightly.PipelineBusy, match=f"pid {holder.pid} on "):
        with nightly.pipeline_lock(refusing, "this test"):
            pass

    waiting = _paths(workdir, "when_busy=wait", "wait_seconds=30", f"lease_seconds={LEASE}")
    lines: list[str] = []
    started = time.monotonic()
    with nightly.pipeline_lock(waiting, "this test", echo=lines.append):
        waited = time.monotonic() - started
        assert _owner(waiting)["what"] == "this test"
    assert LEASE <= waited < LEASE + 6  # after the lease (by this process's clock), not before
    assert lines[0].startswith(f"waiting for penguin's run of all input files (pid {holder.pid} ")
    assert lines[0].endswith(f"to finish; lock {lock}")
    assert lines[1].startswith(
        f"took over the lock {lock} from penguin's run of all input files (pid {holder.pid} "
    )
    assert f"no renewal of its {LEASE} s lease was seen for longer than that" in lines[1]
    assert not storage.exists(lock)  # released


def test_a_live_holder_keeps_its_lock_past_two_leases_and_frees_it_when_done(workdir):
    holder = _spawn_holder(workdir)
    waiting = _paths(workdir, "when_busy=wait", f"wait_seconds={2 * LEASE + 2}")
    try:
        first = _owner(waiting)
        started = time.monotonic()
        with pytest.raises(nightly.PipelineBusy, match=f"still after {2 * LEASE + 2} s of waiting"):
            with nightly.pipeline_lock(waiting, "this test", echo=lambda line: None):
                pass
        assert time.monotonic() - started >= 2 * LEASE + 2  # more than two leases
        assert holder.poll() is None
        renewed = _owner(waiting)
        assert renewed["token"] == first["token"] and renewed["renewals"] >= 6  # every lease/3
        holder.stdin.close()
        assert holder.stdout.readline().strip() == "released"
        assert holder.wait(timeout=10) == 0
    finally:
        _end(holder)
    assert not storage.exists(str(waiting.lock_object))
    # Free: taken at once, and again inside (a backfill's nights) at no cost.
    started = time.monotonic()
    with nightly.pipeline_lock(waiting, "a backfill"):
        with nightly.pipeline_lock(waiting, "one of its nights"):
            assert _owner(waiting)["what"] == "a backfill"
    assert time.monotonic() - started < 2
    assert not storage.exists(str(waiting.lock_object))


def test_a_holder_stalled_past_its_lease_loses_the_lock_and_stops_its_run(workdir):
    holder = _spawn_holder(workdir)
    waiting = _paths(workdir, "when_busy=wait", "wait_seconds=30")
    try:
        holder.send_signal(signal.SIGSTOP)  # a process that stalls: no renewal, and no exit
        with nightly.pipeline_lock(waiting, "this test", echo=lambda line: None):
            holder.send_signal(signal.SIGCONT)
            assert holder.wait(timeout=10) == -signal.SIGTERM  # it stopped its own run
            stderr = holder.stderr.read()
            assert f"error: LOCK LOST: the lock {waiting.lock_object} was lost: " in stderr
            assert "Stopping this run (SIGTERM)" in stderr
            assert _owner(waiting)["what"] == "this test"  # untouched by the stalled holder
    finally:
        if holder.poll() is None:
            holder.send_signal(signal.SIGCONT)
        _end(holder)


@pytest.mark.parametrize("workdir", ["s3"], indirect=True)
def test_conveyor_run_on_a_busy_bucket_exits_75_naming_the_holder(workdir):
    input_csv = str(_paths(workdir).input_dir / "penguins.csv")
    storage.create_if_absent(input_csv, b"species,island\nAdelie,Biscoe\n")  # no TensorFlow
    holder = _spawn_holder(workdir)
    try:
        argv = [sys.executable, "-m", "pipelines.cli", "run", "penguin", "--env", "ci"]
        argv += ["--workdir", workdir, "--set", "runtime.concurrency.when_busy=refuse"]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=FRAMEWORK_ROOT, capture_output=True, text=True, timeout=60)
        seconds = time.monotonic() - started
    finally:
        _end(holder)
    assert done.returncode == EXIT_BUSY, done.stderr
    assert seconds < 10  # no wait, and TensorFlow never imported
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("error: penguin is busy: penguin's run of all input files ")
    assert f"(pid {holder.pid} on " in done.stderr
    assert f"holds {workdir}/runs/penguin/.lock. Nothing was run" in done.stderr


@pytest.mark.parametrize("workdir", ["s3"], indirect=True)
def test_a_store_that_does_not_answer_before_the_run_is_one_error_line_and_nothing_runs(workdir):
    with socket.socket() as probe:  # a port nothing listens on: the store is gone
        probe.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{probe.getsockname()[1]}"
    argv = [sys.executable, "-m", "pipelines.cli", "run", "penguin", "--env", "ci"]
    argv += ["--workdir", workdir, "--set", f"runtime.storage.s3.endpoint={gone}"]
    done = subprocess.run(argv, cwd=FRAMEWORK_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(
        f"error: an object store did not answer: [Errno 5] {workdir}/data/penguin/"
    ), done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("workdir", ["s3"], indirect=True)
def test_a_store_that_does_not_answer_at_the_lock_is_one_paragraph_and_nothing_runs(workdir):
    paths = _paths(workdir)
    gone = _paths(workdir, "lease_seconds=2")  # the same lock object, another spec value
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)  # the storage layer's client's
        with pytest.raises(storage.StorageError) as raised:
            with nightly.pipeline_lock(gone, "a test"):
                pytest.fail("the lock was taken from a store that is gone")
    message = str(raised.value)
    assert message.startswith(
        f"penguin: the object store holding {paths.lock_object} did not answer when taking "
        "the lock of one run at a time ("
    ), message
    assert message.endswith("Nothing was run; run again once the store answers (docs/storage.md).")
