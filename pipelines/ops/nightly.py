"""The nightly loop around the local runner: one night, a backfill of nights, the crontab entry.

A night is one span of the spec's `data.span_pattern`. Running a night first compares its
fingerprint (spec, code, lock, schema and that span's files) with the last final outcome
recorded for the span, so a night already done answers at once without importing TFX; only a
changed or failed night goes through the pipeline (where unchanged components are cache hits).
"""

from __future__ import annotations

import datetime
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipelines.build import spans
from pipelines.ops import fingerprint
from pipelines.outcome import Outcome, RunResult
from pipelines.paths import CRON_LOG, PROJECT_ROOT, RunPaths, runs_root
from pipelines.run.plan import Run
from pipelines.spec.loading import LoadedSpec

CRON_MARKER = "# conveyor:"  # ends every crontab line Conveyor installs: `# conveyor:<pipeline>`


@dataclass
class NightOutcome:
    span: int | None
    outcome: Outcome
    message: str
    unchanged: bool  # answered from the recorded fingerprint: nothing executed
    run_dir: str | None = None

    @property
    def exit_code(self) -> int:
        return Outcome(self.outcome).exit_code


def run_night(
    planned: Run,
    force: bool = False,
    echo: Callable[[str], None] = print,
) -> NightOutcome:
    """Runs one planned span (None: a spec without spans) unless it is already done and
    unchanged since its last final outcome."""
    paths, span = planned.paths, planned.span
    previous = None if force else fingerprint.unchanged_since(paths, span)
    if previous is not None:
        served = previous["served_versions"]
        serving = f"version {served[-1]}" if served else "nothing"
        outcome = Outcome(previous["outcome"])
        what = outcome.past_tense
        return NightOutcome(
            span,
            outcome,
            f"same data, spec, schema and code as run {previous['run_id']}, which {what}; "
            f"nothing executed, nothing pushed (serving {serving}). --force runs the pipeline "
            "anyway (every component would be a cache hit).",
            unchanged=True,
        )
    result = run_planned(planned, echo=echo)
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
    spans.SpanError says when it has no data. Never raises for a failed component: the result
    says what failed.
    """
    return run_planned(Run.plan(loaded, workdir, night, span), echo)


def run_planned(planned: Run, echo: Callable[[str], None] = print) -> RunResult:
    """One local run of a planned span, with what follows it (report, alert, outcome record)."""
    from pipelines.ops.finish import finish
    from pipelines.run import local

    # Taken before the run: an input file that changes while it runs must not be recorded as
    # the input this run consumed.
    inputs_fingerprint = fingerprint.compute(planned.paths, planned.span)
    result = local.execute(planned, echo=echo)
    finish(planned, result, inputs_fingerprint, echo)
    return result


def alert_missing_night(spec, span: int, message: str) -> str | None:
    """A night whose data never landed is a failed night: the webhook hears about it too."""
    from pipelines.ops.alerts import send_alert

    night = spans.date_of_span(span).isoformat() if spec.data.dated_spans else None
    missing = RunResult(
        run_id=None,
        pipeline=spec.name,
        outcome=Outcome.FAILED,
        message=message,
        night=night,
        span=span,
    )
    return send_alert(spec, missing)


def nights_between(start: datetime.date, end: datetime.date) -> list[datetime.date]:
    if end < start:
        raise spans.SpanError(f"--from {start} is after --to {end}")
    return [start + datetime.timedelta(days=d) for d in range((end - start).days + 1)]


def backfill(
    loaded: LoadedSpec,
    workdir: Path,
    start: datetime.date,
    end: datetime.date,
    echo: Callable[[str], None] = print,
) -> list[tuple[datetime.date, NightOutcome]]:
    """Runs the nights from `start` to `end` in order, skipping those already done.

    A blocked night is done (its data was judged); a failed night, or one with no data, stops
    the backfill: the nights after it would train on a window with a hole in it.
    """
    spec = loaded.spec
    if not spec.data.dated_spans:
        raise spans.SpanError(
            f"{spec.name}: backfill needs dated spans ({{YYYY}}{{MM}}{{DD}} in data.span_pattern)"
        )
    paths = RunPaths(workdir=Path(workdir).resolve(), spec=spec)
    done: list[tuple[datetime.date, NightOutcome]] = []
    for night in nights_between(start, end):
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
            outcome = run_night(Run(loaded, paths, span), echo=echo)
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


def cron_line(
    spec_name: str,
    cron: str,
    env: str | None,
    workdir: Path,
    conveyor: str | None = None,
) -> str:
    """The crontab line that runs last night's span of `spec_name` at `cron`, logging to a
    file under the workdir. `%` is escaped: cron would read it as a newline."""
    executable = conveyor or str(Path(sys.executable).with_name("conveyor"))
    command = [executable, "run", spec_name, "--date", "yesterday", "--workdir", str(workdir)]
    if env:
        command += ["--env", env]
    log = runs_root(workdir) / spec_name / CRON_LOG
    shell = (
        f"cd {shlex.quote(str(PROJECT_ROOT))} && mkdir -p {shlex.quote(str(log.parent))} && "
        f"{shlex.join(command)} >> {shlex.quote(str(log))} 2>&1"
    )
    return f"{cron} {shell.replace('%', chr(92) + '%')} {CRON_MARKER}{spec_name}"


class CrontabError(RuntimeError):
    """The local crontab could not be read or written."""


def install_crontab(line: str, spec_name: str, crontab: str = "crontab") -> str:
    """Installs `line` in the user's crontab, replacing an earlier Conveyor line for the same
    pipeline; returns the resulting crontab."""
    if shutil.which(crontab) is None:
        raise CrontabError(
            f"`{crontab}` is not installed here (Debian: apt-get install cron); "
            "`conveyor schedule --print` prints the line to install elsewhere"
        )
    listed = subprocess.run([crontab, "-l"], capture_output=True, text=True, check=False)
    # `crontab -l` exits 1 with "no crontab for <user>" when there is none yet.
    current = listed.stdout.splitlines() if listed.returncode == 0 else []
    kept = [entry for entry in current if not entry.endswith(f"{CRON_MARKER}{spec_name}")]
    content = "\n".join([*kept, line]) + "\n"
    written = subprocess.run(
        [crontab, "-"], input=content, capture_output=True, text=True, check=False
    )
    if written.returncode != 0:
        raise CrontabError(f"`{crontab} -` failed: {written.stderr.strip() or written.returncode}")
    return content
