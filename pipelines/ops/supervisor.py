"""`conveyor run` as a supervising parent: the pipeline runs in a child process, so that a run
killed by a signal (SIGTERM from a scheduler or a shell, SIGKILL from the out-of-memory killer)
still ends with a FAILED verdict, a summary, a report and an alert, from the parent.

The parent does everything that needs no TensorFlow first (the lock, the unchanged check, the
reconciliation of serving, the inputs' fingerprint), then forks: the child imports TFX, runs the
pipeline and finishes it as an unsupervised run does (`pipelines.ops.nightly.run_planned`), and
sends its progress lines and its result back through a pipe. The parent prints the lines as they
come, so the output is the same as without a child. When the child dies without a result, the
parent reads the run back from ML Metadata (the run id is chosen before the fork, so it knows
which run to read), names the node that was running, and finishes the run as FAILED: summary,
report, alert; no outcome is recorded, so the next run retries it.

Why fork, and why after the lock: a forked child needs nothing re-imported or pickled, and the
parent has imported no TensorFlow yet (no threads to copy half-way). The lock stays the parent's
alone: filelock closes its descriptor in a forked child and lets only the process that took the
lock release it, so nothing the child does or suffers releases it early; a bucket's lease lock
(pipelines/core/lease_lock.py) is renewed and released by the parent's threads only, which a
forked child does not have. The child dies with
the parent (Linux's PR_SET_PDEATHSIG): a killed parent frees the lock, and must not leave a
pipeline running without it.

SIGTERM and SIGINT sent to the parent are passed on to the child, which dies of them (their
default action: no Python handler runs in the child), and the parent then reports.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipelines.core.outcome import RunResult
from pipelines.core.paths import RUN_SUMMARY, RunPaths
from pipelines.run.plan import Run

FORWARDED = (signal.SIGTERM, signal.SIGINT)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_SECONDS = 0.5

# The work a child does: (planned, inputs fingerprint, echo, run id) -> the finished result.
Work = Callable[[Run, dict, Callable[[str], None], str], RunResult]


def supervise(
    planned: Run,
    inputs_fingerprint: dict,
    work: Work,
    echo: Callable[[str], None] = print,
) -> RunResult:
    """Runs `work` (the pipeline and what follows it) in a forked child and waits for it.

    Args:
      planned: the run as planned.
      inputs_fingerprint: the inputs' fingerprint taken before the run (the child records it
        with a final outcome).
      work: what the child runs; it returns the run's finished result.
      echo: where progress lines go (the child's lines come through the parent).

    Returns:
      The child's result, or, when the child died without one, a FAILED result that says by
      which signal and during which node; that run is finished here (summary, report, alert).

    Raises:
      What `work` raised in the child (an error before the run started), raised again here.
    """
    from pipelines.run.local import new_run_id

    run_id = new_run_id(planned.spec.name)
    reader, writer = multiprocessing.Pipe(duplex=False)
    parent = os.getpid()
    # Flushed before the fork: the child's copy of a buffer would print it a second time.
    sys.stdout.flush()
    sys.stderr.flush()
    # Blocked across the fork: a signal lands in the parent's forwarding handler, or in the
    # child once its default action is back, never in a half-set-up process.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's frames (and their locks)
            json_log = bool(getattr(echo, "structured", False))  # pipelines.core.events
            _child_main(
                planned, inputs_fingerprint, work, run_id, reader, writer, parent, mask, json_log
            )
        writer.close()
        received: list[int] = []

        def forward(signum, _frame) -> None:
            received.append(signum)
            try:
                os.kill(pid, signum)
            except ProcessLookupError:  # it has just ended
                pass

        # Python runs signal handlers in the main thread only; elsewhere the signals keep
        # their own handlers (the default ends this process, and the child with it).
        in_main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, forward) for sig in FORWARDED} if in_main else {}
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        answer, exit_code = _wait(pid, reader, echo)
    except BaseException:
        # This process is leaving with an error of its own, and the lock with it: the pipeline
        # must not go on without the lock.
        with contextlib.suppress(ProcessLookupError, ChildProcessError):  # it had ended
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        reader.close()
    kind, value = answer
    if kind == "error":
        raise value
    if kind == "result" and exit_code == 0:
        return value
    return _finish_killed(planned, run_id, inputs_fingerprint, exit_code, received, echo)


def _child_main(
    planned, inputs_fingerprint, work, run_id, reader, writer, parent, mask, structured=False
) -> None:
    code = 1
    try:
        reader.close()
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _die_with(parent)
        code = _child(planned, inputs_fingerprint, work, run_id, writer, structured)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed pipe: nothing more to say
                pass
        os._exit(code)


def _die_with(parent: int) -> None:
    """Asks Linux to SIGKILL this process when its parent dies (elsewhere: nothing to ask)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)


def _child(
    planned: Run, inputs_fingerprint: dict, work: Work, run_id: str, writer, structured=False
) -> int:
    listening = True

    def echo(line: str) -> None:
        nonlocal listening
        if listening:
            try:
                # An Event (pipelines.core.events) is a str that pickles with its fields.
                writer.send(("echo", line if isinstance(line, str) else str(line)))
            except OSError:  # the parent is gone (and this process with it, on Linux)
                listening = False

    echo.structured = structured  # the parent's echo logs JSON: send the events without text

    try:
        result = work(planned, inputs_fingerprint, echo, run_id)
    except BaseException as err:  # raised again in the parent, as without a child
        _send(writer, ("error", err))
        return 1
    _send(writer, ("result", result))
    return 0


def _send(writer, message: tuple[str, Any]) -> None:
    try:
        writer.send(message)
    except OSError:  # the parent is gone
        pass
    except Exception:  # an exception that does not pickle: its type and text still do
        kind, value = message
        writer.send((kind, RuntimeError(f"{type(value).__name__}: {value}")))


def _wait(pid: int, reader, echo: Callable[[str], None]) -> tuple[tuple[str, Any], int]:
    """Relays the child's lines until it ends; returns its last answer and its exit code
    (negative: the signal that killed it)."""
    answer: tuple[str, Any] = ("none", None)
    echoing = True
    status = None

    def handle(message) -> None:
        nonlocal answer, echoing
        kind, value = message
        if kind != "echo":
            answer = message
        elif echoing:
            try:
                echo(value)
            except BrokenPipeError:  # no one reads the output: the run goes on regardless
                echoing = False

    while status is None:
        # Polled rather than read to the end: a process the child started may hold the pipe
        # open after the child itself has died.
        if reader.poll(POLL_SECONDS):
            try:
                handle(reader.recv())
            except EOFError:
                status = os.waitpid(pid, 0)[1]
            continue
        ended, found = os.waitpid(pid, os.WNOHANG)
        if ended:
            status = found
    while True:  # what the child sent just before it ended
        try:
            if not reader.poll(0):
                break
            handle(reader.recv())
        except (EOFError, OSError):
            break
    return answer, os.waitstatus_to_exitcode(status)


def how_it_ended(exit_code: int) -> str:
    """How a child that sent no result ended, as the start of the run's message: 'the run was
    killed by SIGKILL (out of memory?)', '... by SIGTERM', 'the pipeline process exited with
    code 3 without a result'."""
    if exit_code >= 0:
        return f"the pipeline process exited with code {exit_code} without a result"
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    # The out-of-memory killer sends SIGKILL, the usual reason for one nobody sent by hand.
    oom = " (out of memory?)" if -exit_code == signal.SIGKILL else ""
    return f"the run was killed by {name}{oom}"


def where_it_ended(result: RunResult, run_dir: Path) -> str:
    """Where in the run the child died, from what ML Metadata and its folder hold."""
    import json

    running = [n.node_id for n in result.nodes if n.state in ("running", "new")]
    if running:
        return f"during {', '.join(running)}"
    summary = run_dir / RUN_SUMMARY
    try:
        pipeline_ended = summary.is_file()  # the pipeline ended; what follows it did not
    except OSError:  # a store that stopped answering (what may have stopped the run): unknown
        pipeline_ended = False
    if pipeline_ended:
        try:
            ended = json.loads(summary.read_text())["message"]
        except (OSError, ValueError, KeyError, TypeError):
            ended = "its summary is unreadable"
        return f"after the pipeline had ended ({ended}), before the run's report and record"
    if result.nodes:
        return f"after {result.nodes[-1].node_id}"
    return "before the pipeline started"


def _finish_killed(
    planned: Run,
    run_id: str,
    inputs_fingerprint: dict,
    exit_code: int,
    received: list[int],
    echo: Callable[[str], None],
) -> RunResult:
    from pipelines.builder import spans
    from pipelines.core import failpoints
    from pipelines.core.outcome import Reason
    from pipelines.finish.contract import (
        RunFacts,
        Stop,
        finish_run,
        read_result,
        silent_store_stop,
    )

    # A failpoint armed for the run belongs to the child that ran it: this parent finishes the
    # killed run through the same contract and must not stop where its child was stopped.
    os.environ.pop(failpoints.ENV, None)
    how = how_it_ended(exit_code)
    if received:
        sent = ", ".join(signal.Signals(s).name for s in dict.fromkeys(received))
        echo(f"  {sent} received: passed on to the pipeline process")
    echo(f"  {'pipeline':<22} {'killed' if exit_code < 0 else 'ended'}")
    span = planned.span
    dated = span is not None and planned.spec.data.dated_spans
    facts = RunFacts(
        planned.loaded,
        planned.paths,
        run_id,
        span=span,
        night=spans.date_of_span(span).isoformat() if dated else None,
        stop=Stop(Reason.KILLED, how),
        # The alert first: a parent stopped by SIGTERM may have seconds left before a SIGKILL.
        alert_first=True,
    )
    where = where_it_ended(read_result(facts), planned.paths.run_dir(run_id))
    # Not a final outcome: nothing is recorded, so the next run of these inputs runs again.
    retried = "no outcome recorded: the next run retries it"
    facts.stop = Stop(Reason.KILLED, f"{how} {where}; {retried}")
    silent_store = _lock_lost_to_a_silent_store(planned.paths)
    if silent_store is not None:
        # Stopped because its lock's store stopped answering: that store is what failed, as
        # when a component's own request to it fails first.
        bucket, error = silent_store
        unanswered = (
            "no renewal of the lock of one run at a time was answered for a lease, last "
            f"{type(error).__name__}: {error}"
        )
        stop = silent_store_stop([bucket], unanswered)
        facts.stop = Stop(stop.reason, f"{stop.message}; the run was stopped {where}; {retried}")
    return finish_run(facts, echo)


def _lock_lost_to_a_silent_store(paths: RunPaths) -> tuple[str, Exception] | None:
    """The bucket and the last unanswered request, when this process held the workdir's lock
    in a bucket and lost it because the store answered no renewal for a lease."""
    if not paths.remote:
        return None
    from pipelines.core import lease_lock

    lock_object = paths.lock_object
    lock = lease_lock.held(str(lock_object))
    if lock is None or lock.unanswered is None:
        return None
    return f"{lock_object.scheme}://{lock_object.bucket}", lock.unanswered
