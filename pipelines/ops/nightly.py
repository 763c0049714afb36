"""The nightly loop around the local runner: one night, a backfill of nights, the crontab entry.

A night is one span of the spec's `data.span_pattern`. Running a night first compares its
fingerprint (spec, code, lock, schema, and the bytes of every input file it reads: the span's,
the window's earlier spans, the drift reference, the serving logs) with the last final outcome
recorded for the span, so a night already done answers at once without importing TFX; only a
changed or failed night goes through the pipeline (where unchanged components are cache hits).

One run of a pipeline at a time per workdir: a run, a night (its unchanged check included) and a
whole backfill hold `<workdir>/runs/<pipeline>/.lock`, so two runs cannot pick the same served
version or interleave fingerprints and checkpoints. What a second run does meanwhile is
`runtime.concurrency`'s: wait, or refuse with exit 75.

Around each run, under that lock: `serving_state.reconcile` first puts serving back in step with
ML Metadata (a run killed mid-push), and after the run the run-finish contract
(`pipelines.finish.contract.finish_run`) retires old versions, writes the summary and report,
alerts and records the outcome. `conveyor run` runs the pipeline and its `finish` in a
child process it supervises (`pipelines.ops.supervisor`): a run killed by a signal still ends
FAILED, with its summary and alert.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

from pipelines.builder import spans
from pipelines.core import storage
from pipelines.core.events import emit
from pipelines.core.object_path import ObjectPath, as_path
from pipelines.core.outcome import EXIT_BUSY, Outcome, PipelineBusy, Reason, RunResult
from pipelines.core.paths import CRON_LOG, RunPaths, runs_root
from pipelines.core.project import find_project
from pipelines.finish import outcome_record
from pipelines.run import fingerprint
from pipelines.run.plan import Run
from pipelines.spec.loading import LoadedSpec
from pipelines.spec.models import WhenBusy

if TYPE_CHECKING:
    from crontab import CronTab


@dataclass
class NightOutcome:
    """How one night ended: its span, outcome and verdict message, and whether it ran.

    `unchanged` nights were answered from the fingerprint of an earlier final outcome, so they
    have no run folder of their own (`run_dir` is None).
    """

    span: int | None
    outcome: Outcome
    message: str
    unchanged: bool  # answered from the recorded fingerprint: nothing executed
    run_dir: str | None = None

    @property
    def exit_code(self) -> int:
        """The process exit code of this night's outcome (0 ok, 2 blocked, 1 failed)."""
        return Outcome(self.outcome).exit_code


def owner_file(lock_file: Path) -> Path:
    """The sidecar in which the lock's holder says who it is (pid, host, start, command)."""
    return lock_file.with_name(lock_file.name + ".owner")


def lock_holder(lock: Path | ObjectPath) -> str:
    """Who holds `lock`, as its owner file (or, in a bucket, the lock object) tells it, for
    'waiting for ...' and errors."""
    if isinstance(lock, ObjectPath):
        from pipelines.core.lease_lock import read_holder

        try:
            holder = read_holder(str(lock))
        except OSError as err:
            return f"another run (its lock object could not be read: {err})"
        if holder is None:
            return "another run (which has just released it)"
        return _described(holder.owner, f"no owner recorded in {lock.name}")
    try:
        owner = json.loads(owner_file(lock).read_text())
    except (OSError, ValueError):
        owner = {}
    # Without one, the holder has just taken the lock and not yet written its owner file.
    return _described(owner, f"no owner recorded in {owner_file(lock).name} yet")


def _described(owner: object, missing: str) -> str:
    try:
        return (
            f"{owner['what']} (pid {owner['pid']} on {owner['host']}, started "
            f"{owner['started']}: `{owner['command']}`)"
        )
    except (KeyError, TypeError):
        return f"another run ({missing})"


def _owner(what: str) -> dict:
    return {
        "what": what,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }


def _write_owner(lock_file: Path, what: str) -> None:
    target = owner_file(lock_file)
    partial = target.with_name(target.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(_owner(what), out)
    partial.replace(target)


def lock_location(paths: RunPaths) -> Path | ObjectPath:
    """The pipeline's lock: a local file, or, when the workdir is a bucket, an object in it."""
    return paths.lock_object if paths.remote else paths.lock_file


def _busy_message(paths: RunPaths, holder: str, waited: int | None) -> str:
    concurrency = paths.spec.runtime.concurrency
    key = "runtime.concurrency"
    if waited is None:
        advice = (
            f"{key}.when_busy is 'refuse'; with 'wait' (--set {key}.when_busy=wait) a run waits "
            f"up to {key}.wait_seconds for the lock instead."
        )
    else:
        advice = (
            f"{key}.wait_seconds ({concurrency.wait_seconds}) is how long a run waits; raise it "
            f"(--set {key}.wait_seconds=N) to wait longer."
        )
    return (
        f"{paths.spec.name} is busy: {holder} holds {lock_location(paths)}"
        + (f", still after {waited} s of waiting" if waited is not None else "")
        + f". Nothing was run; try again when it ends (exit {EXIT_BUSY}). {advice}"
    )


@contextlib.contextmanager
def pipeline_lock(paths: RunPaths, what: str, echo: Callable[[str], None] = print):
    """Holds the pipeline's lock under the workdir for the block (one run at a time).

    Re-entrant within a process: a backfill holds it, and each of its nights takes it again at no
    cost. A busy lock is waited for or refused as `runtime.concurrency` says.

    A local workdir's lock is a file the operating system releases when its holder exits, killed
    or not. A workdir in a bucket keeps its lock in the bucket, `<workdir>/runs/<pipeline>/.lock`,
    held by a lease of `runtime.concurrency.lease_seconds` (`pipelines.core.lease_lock`): a
    holder killed outright is judged gone once its lease has passed without a renewal. A holder
    that loses its lock (its renewals refused, or none possible for a lease) says so on `echo`
    and on stderr, and stops its run with SIGTERM, as an operator would: the supervised
    pipeline ends FAILED with its summary and alert, and is retried by the next run.

    Args:
      paths: the pipeline's paths (its spec's `runtime.concurrency` applies).
      what: what the holder is doing, for the others' messages ("taxi's run of 2026-11-28").
      echo: where the one 'waiting for ...' line goes (and a lost lock's).

    Raises:
      PipelineBusy: the lock was busy and `when_busy` is refuse, or the wait timed out.
      storage.StorageError: the bucket holding the lock did not answer; nothing was run.
    """
    if paths.remote:
        with _bucket_lock(paths, what, echo):
            yield
        return
    lock_file = paths.lock_file
    # One lock object per path in the process (filelock's singleton): its count makes it
    # re-entrant, where a second object would wait on the first (flock is per open file).
    lock = FileLock(lock_file, mode=0o600, is_singleton=True)
    if lock.is_locked:
        with lock:
            yield
        return
    concurrency = paths.spec.runtime.concurrency
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if concurrency.when_busy is WhenBusy.REFUSE:
            raise PipelineBusy(_busy_message(paths, lock_holder(lock_file), None)) from None
        echo(f"waiting for {lock_holder(lock_file)} to finish; lock {lock_file}")
        try:
            lock.acquire(timeout=concurrency.wait_seconds)
        except Timeout:
            message = _busy_message(paths, lock_holder(lock_file), concurrency.wait_seconds)
            raise PipelineBusy(message) from None
    try:
        _write_owner(lock_file, what)
        yield
    finally:
        # Removed while still held: once released, the next holder writes its own.
        owner_file(lock_file).unlink(missing_ok=True)
        lock.release()


@contextlib.contextmanager
def _bucket_lock(paths: RunPaths, what: str, echo: Callable[[str], None]):
    from pipelines.core import lease_lock

    lock_object = paths.lock_object
    if lease_lock.held(str(lock_object)) is not None:
        yield  # taken by this process (or the one it was forked from): its holder releases it
        return
    concurrency = paths.spec.runtime.concurrency

    def stop_the_run(why: str) -> None:
        text = (
            f"LOCK LOST: {why}. Stopping this run (SIGTERM): two runs of {paths.spec.name} "
            "must not write the same workdir at once."
        )
        emit(echo, "lock_lost", text, lock=str(lock_object), reason=why)
        print(f"error: {text}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    lock = lease_lock.LeaseLock(
        str(lock_object), concurrency.lease_seconds, _owner(what), stop_the_run
    )
    try:
        if concurrency.when_busy is WhenBusy.REFUSE:
            if not lock.acquire(timeout=0):
                raise PipelineBusy(_busy_message(paths, lock_holder(lock_object), None))
        else:

            def waiting() -> None:
                echo(f"waiting for {lock_holder(lock_object)} to finish; lock {lock_object}")

            if not lock.acquire(concurrency.wait_seconds, waiting):
                message = _busy_message(paths, lock_holder(lock_object), concurrency.wait_seconds)
                raise PipelineBusy(message)
    except OSError as error:
        # Before anything ran: no outcome to record, one paragraph instead of a traceback.
        raise storage.StorageError(
            f"{paths.spec.name}: the object store holding {lock_object} did not answer when "
            f"taking the lock of one run at a time ({type(error).__name__}: {error}). Nothing "
            "was run; run again once the store answers (docs/storage.md)."
        ) from None
    if lock.expired is not None:
        expired = _described(lock.expired.owner, "no owner recorded")
        lease = lease_lock.lease_of(lock.expired.owner, lock.lease_seconds)
        emit(
            echo,
            "lock_expired",
            f"took over the lock {lock_object} from {expired}: no renewal of its {lease:g} s "
            "lease was seen for longer than that, so its holder is taken for dead",
            lock=str(lock_object),
        )
    try:
        yield
    finally:
        if (problem := lock.release()) is not None:
            emit(echo, "lock_release_failed", f"the lock {lock_object} was {problem}")


def _run_of(planned: Run) -> str:
    return f"{planned.spec.name}'s run of {spans.describe(planned.spec, planned.span)}"


def run_night(
    planned: Run,
    force: bool = False,
    echo: Callable[[str], None] = print,
    supervised: bool = False,
) -> NightOutcome:
    """Runs one planned span (None: a spec without spans) unless it is already done and
    unchanged since its last final outcome.

    `supervised` runs the pipeline in a child process (see run_planned); the unchanged check
    stays in this one, so an unchanged night starts no process.

    Raises:
      PipelineBusy: another run of the pipeline holds the workdir's lock (see pipeline_lock).
    """
    # The unchanged check is under the lock too: two runs that both found the night changed
    # would both run it.
    with pipeline_lock(planned.paths, _run_of(planned), echo):
        return _run_night_locked(planned, force, echo, supervised)


def _run_night_locked(
    planned: Run, force: bool, echo: Callable[[str], None], supervised: bool = False
) -> NightOutcome:
    paths, span = planned.paths, planned.span
    previous = None if force else fingerprint.unchanged_since(paths, span)
    if previous is not None:
        return NightOutcome(
            span,
            Outcome(previous["outcome"]),
            # What is served now, not when the record was written.
            f"{outcome_record.unchanged_words(paths, previous)}. --force runs the pipeline "
            "anyway (every component would be a cache hit).",
            unchanged=True,
        )
    result = run_planned(planned, echo=echo, supervised=supervised)
    return NightOutcome(span, result.outcome, result.message, False, result.run_dir)


def run(
    loaded: LoadedSpec,
    workdir: Path,
    echo: Callable[[str], None] = print,
    night: datetime.date | None = None,
    span: int | None = None,
) -> RunResult:
    """Runs the spec's pipeline locally under `workdir`, whether or not anything changed.

    For a spec with spans, `night` or `span` picks the span (default: the latest with data);
    spans.SpanError says when it has no data, PipelineBusy when another run of the pipeline
    holds the workdir's lock. Never raises for a failed component: the result says what failed.
    """
    return run_planned(Run.plan(loaded, workdir, night, span), echo)


def run_planned(
    planned: Run, echo: Callable[[str], None] = print, supervised: bool = False
) -> RunResult:
    """One local run of a planned span, with what follows it (report, alert, outcome record).

    Supervised (what `conveyor run` asks for), the pipeline and what follows it run in a child
    process while this one holds the lock and waits (`pipelines.ops.supervisor`): a child
    killed by a signal (SIGTERM, or SIGKILL from the out-of-memory killer) still gives a FAILED
    result, a summary and an alert. Unsupervised, everything runs in this process, as a test or
    a program that already imported TensorFlow needs (a fork would copy its threads' locks).

    Raises:
      PipelineBusy: another run of the pipeline holds the workdir's lock (see pipeline_lock).
    """
    # Taken before TFX is imported: a refused run answers in a fraction of a second.
    with pipeline_lock(planned.paths, _run_of(planned), echo):
        from pipelines import serving_state

        # A run killed mid-push left serving ahead of ML Metadata: put them in step first.
        serving_state.reconcile(planned.paths, echo)
        # Taken before the run: an input file that changes while it runs must not be recorded
        # as the input this run consumed.
        inputs_fingerprint = fingerprint.compute(planned.paths, planned.span)
        if supervised and fork_is_safe():
            from pipelines.ops.supervisor import supervise

            return supervise(planned, inputs_fingerprint, execute_and_finish, echo)
        return execute_and_finish(planned, inputs_fingerprint, echo)


def fork_is_safe() -> bool:
    """Whether this process may fork the supervised pipeline child: not once it has imported
    TensorFlow. TensorFlow's threads (tf.data workers, thread pools) do not survive a fork, and
    a child that later joins one (as its garbage collector may) hangs for ever. `conveyor run`
    forks before importing it; a program (or a test) that already trained or loaded a model
    runs the pipeline in its own process, unsupervised."""
    return "tensorflow" not in sys.modules


def execute_and_finish(
    planned: Run,
    inputs_fingerprint: dict,
    echo: Callable[[str], None] = print,
    run_id: str | None = None,
) -> RunResult:
    """Runs the pipeline (`local.execute`), then finishes it (`finish_run`, the run-finish
    contract every orchestrator calls): the part of a run that imports TensorFlow, and the part
    a supervised run puts in its child process."""
    from pipelines.finish.contract import finish_run
    from pipelines.run import local

    facts = local.execute(planned, echo=echo, run_id=run_id)
    facts.record_outcome = outcome_recorder(planned.paths, planned.span, inputs_fingerprint)
    return finish_run(facts, echo)


def outcome_recorder(
    paths: RunPaths, span: int | None, inputs_fingerprint: dict | None = None
) -> Callable[[RunResult], None]:
    """How a run's final outcome is recorded, so that a re-run of unchanged inputs answers at
    once (`fingerprint.unchanged_since`): what `RunFacts.record_outcome` of a local run and of
    an Airflow DAG run calls.

    Args:
      paths: the pipeline's paths.
      span: the span the run ingested.
      inputs_fingerprint: the inputs' fingerprint taken before the run started (an input that
        changed while it ran must not be recorded as what this run consumed); None takes it
        when the outcome is recorded (an orchestrator's run has no "before" here).
    """

    def record(result: RunResult) -> None:
        taken = inputs_fingerprint
        if taken is None:
            taken = fingerprint.compute(paths, span)
        outcome_record.record_outcome(
            paths, str(result.run_id), result.outcome, taken, span, reason=result.reason
        )

    return record


def alert_missing_night(spec, span: int, message: str) -> str | None:
    """A night whose data never landed is a failed night: the webhook hears about it too."""
    from pipelines.finish.alerts import send_alert

    night = spans.date_of_span(span).isoformat() if spec.data.dated_spans else None
    missing = RunResult(
        run_id=None,
        pipeline=spec.name,
        outcome=Outcome.FAILED,
        message=message,
        reason=Reason.MISSING_INPUT,
        night=night,
        span=span,
    )
    return send_alert(spec, missing)


def nights_between(start: datetime.date, end: datetime.date) -> list[datetime.date]:
    """Every night from `start` to `end`, both included, in order.

    Raises:
      SpanError: when `end` is before `start` (named as `--from` and `--to`).
    """
    if end < start:
        raise spans.SpanError(f"--from {start} is after --to {end}")
    return [start + datetime.timedelta(days=d) for d in range((end - start).days + 1)]


def backfill(
    loaded: LoadedSpec,
    workdir: Path,
    start: datetime.date,
    end: datetime.date,
    echo: Callable[[str], None] = print,
    supervised: bool = False,
) -> list[tuple[datetime.date, NightOutcome]]:
    """Runs the nights from `start` to `end` in order, skipping those already done.

    A blocked night is done (its data was judged); a failed night, or one with no data, stops
    the backfill: the nights after it would train on a window with a hole in it. The
    pipeline's lock is held for the whole backfill: no scheduled night runs in between.
    `supervised` runs each night's pipeline in a child process, as `conveyor run` does, so a
    night killed by a signal still ends FAILED with its summary and alert (and stops the
    backfill); this process itself never imports TensorFlow then.

    Raises:
      PipelineBusy: another run of the pipeline holds the workdir's lock (see pipeline_lock).
    """
    spec = loaded.spec
    if not spec.data.dated_spans:
        raise spans.SpanError(
            f"{spec.name}: backfill needs dated spans ({{YYYY}}{{MM}}{{DD}} in data.span_pattern)"
        )
    paths = RunPaths(workdir=as_path(workdir).resolve(), spec=spec)
    nights = nights_between(start, end)
    what = f"{spec.name}'s backfill of {start.isoformat()} to {end.isoformat()}"
    with pipeline_lock(paths, what, echo):
        return _backfill_locked(loaded, paths, nights, echo, supervised)


def _backfill_locked(
    loaded: LoadedSpec,
    paths: RunPaths,
    nights: list[datetime.date],
    echo: Callable[[str], None],
    supervised: bool = False,
) -> list[tuple[datetime.date, NightOutcome]]:
    spec = loaded.spec
    done: list[tuple[datetime.date, NightOutcome]] = []
    for night in nights:
        span = spans.span_of_date(night)
        if not spans.span_files(spec, paths.input_dir, span):
            outcome = NightOutcome(
                span,
                Outcome.FAILED,
                f"no data for {spans.describe(spec, span)}: nothing matches "
                f"{spans.span_glob(spec, paths.input_dir, span)}",
                unchanged=False,
            )
            if sent := alert_missing_night(spec, span, outcome.message):
                echo(sent)
        else:
            echo(f"night {night.isoformat()}:")
            outcome = run_night(Run(loaded, paths, span), echo=echo, supervised=supervised)
        echo(
            f"night {night.isoformat()}: {Outcome(outcome.outcome).verdict}"
            + (" (already done, skipped)" if outcome.unchanged else "")
            + f": {outcome.message}"
        )
        done.append((night, outcome))
        if outcome.outcome == Outcome.FAILED:
            echo(f"backfill stopped at {night.isoformat()}: the later nights were not run")
            break
    return done


class CrontabError(RuntimeError):
    """The local crontab could not be read or written, or cannot hold the entry."""


@dataclass(frozen=True)
class CronEntry:
    """Conveyor's crontab entry for one pipeline: when, in which time zone, and what it runs.

    The line is preceded by `CRON_TZ=<zone>`, which cronie (Fedora, RHEL) and other Vixie-cron
    descendants read as the zone of the lines after it; a cron that ignores it (Debian's) fires
    in the system's zone, and the command still computes "yesterday" in the spec's zone. Like
    any crontab variable, it also applies to lines added below it later.
    """

    pipeline: str
    cron: str
    command: str
    timezone: str = "UTC"

    @property
    def comment(self) -> str:
        """What identifies the entry in a crontab: `# conveyor:<pipeline>` ends its line."""
        return f"conveyor:{self.pipeline}"

    def add_to(self, table: CronTab) -> None:
        """Appends the entry to a python-crontab `CronTab` (which escapes `%` for cron)."""
        job = table.new(command=self.command, comment=self.comment)
        try:
            job.setall(self.cron)
        except (ValueError, KeyError) as err:
            raise CrontabError(f"python-crontab cannot write cron {self.cron!r}: {err}") from None
        job.env["CRON_TZ"] = self.timezone

    def render(self) -> str:
        """The entry as crontab text: the `CRON_TZ` line, then the job line."""
        from crontab import CronTab

        table = CronTab()
        self.add_to(table)
        return table.render()


def cron_entry(
    spec_name: str,
    cron: str,
    profile: str | None,
    workdir: Path,
    timezone: str = "UTC",
    overrides: Sequence[str] = (),
    conveyor: str | None = None,
) -> CronEntry:
    """The entry that runs last night's span of `spec_name` at `cron` in `timezone`, logging to a
    file under the workdir. The `--set` overrides travel with it, so the nightly run loads the
    spec that was scheduled (its time zone included)."""
    executable = conveyor or str(Path(sys.executable).with_name("conveyor"))
    command = [executable, "run", spec_name, "--date", "yesterday", "--workdir", str(workdir)]
    if profile:
        command += ["--profile", profile]
    for override in overrides:
        command += ["--set", override]
    log = runs_root(workdir) / spec_name / CRON_LOG
    shell = (
        f"cd {shlex.quote(str(find_project().root))} && mkdir -p {shlex.quote(str(log.parent))} && "
        f"{shlex.join(command)} >> {shlex.quote(str(log))} 2>&1"
    )
    return CronEntry(spec_name, cron, shell, timezone)


def install_crontab(entry: CronEntry, crontab: str = "crontab") -> str:
    """Installs `entry` in the user's crontab with python-crontab, replacing only Conveyor's
    earlier entry for the same pipeline; returns the resulting crontab.

    Raises CrontabError, writing nothing, when the crontab cannot be read (other than "no crontab
    for <user>") or holds a line python-crontab cannot parse (it would write it back disabled).
    The table is read here rather than by `CronTab(user=True)`: python-crontab looks only at
    `crontab -l`'s stderr, so a failure without a message would read as an empty table and the
    write would replace every entry.
    """
    from crontab import CronTab

    if shutil.which(crontab) is None:
        raise CrontabError(
            f"`{crontab}` is not installed here (Debian: apt-get install cron); "
            "`conveyor schedule --print` prints the entry to install elsewhere"
        )
    listed = subprocess.run([crontab, "-l"], capture_output=True, text=True, check=False)
    if listed.returncode != 0 and "no crontab for" not in listed.stderr:
        why = listed.stderr.strip() or f"exit status {listed.returncode}"
        raise CrontabError(f"`{crontab} -l` failed ({why}); the crontab was left as it is")
    current = listed.stdout.rstrip("\n") if listed.returncode == 0 else ""
    table = CronTab(tab=current) if current else CronTab()  # tab="" would start with a blank
    unparsed = [
        line
        for line in table.lines
        if isinstance(line, str) and line.strip() and not line.lstrip().startswith("#")
    ]
    if unparsed:
        raise CrontabError(
            f"python-crontab cannot parse {unparsed[0]!r} in the crontab and would disable it; "
            "the crontab was left as it is (`conveyor schedule --print` prints the entry)"
        )
    table.remove_all(comment=entry.comment)
    entry.add_to(table)
    table.cron_command = crontab
    try:
        table.write_to_user(user=True)
    except OSError as err:
        raise CrontabError(f"writing the crontab failed: {err}") from None
    return table.render()
