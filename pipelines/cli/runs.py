"""`conveyor run`, `backfill`, `schedule`, `submit`, `runs` and `report`: running a pipeline's
nights, here or on Kubeflow Pipelines, and reading back what they did.

`runs` and `report` never import TensorFlow or TFX; each handler imports what it needs when it
runs.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys

from pipelines.cli.options import add_common_options, add_log_format, load, workdir_of
from pipelines.core.object_path import as_path
from pipelines.core.outcome import EXIT_FAILED, Outcome, worst_exit_code


def register(sub) -> None:
    """Adds `run`, `backfill`, `schedule`, `submit`, `runs` and `report` to the `conveyor`
    parser."""
    p = sub.add_parser("run", help="run a pipeline locally (LocalDagRunner)")
    p.add_argument("pipeline")
    p.add_argument(
        "--force",
        action="store_true",
        help="run through TFX even when nothing changed since the last run with a final outcome",
    )
    p.add_argument(
        "--date",
        help="the night to process: YYYY-MM-DD, today or yesterday (dated spans; default: the "
        "latest span with data)",
    )
    p.add_argument("--span", type=int, help="the span to process ({SPAN} patterns)")
    add_log_format(p)
    add_common_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("backfill", help="run the nights from --from to --to in order")
    p.add_argument("pipeline")
    p.add_argument("--from", dest="start", required=True, metavar="DATE")
    p.add_argument("--to", dest="end", required=True, metavar="DATE")
    add_log_format(p)
    add_common_options(p)
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser("schedule", help="install (or --print) the nightly crontab entry")
    p.add_argument("pipeline")
    p.add_argument("--cron", help="cron expression (default: the spec's schedule.cron)")
    p.add_argument("--print", action="store_true", help="print the line, install nothing")
    add_common_options(p)
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser(
        "submit",
        help="create a run (or --schedule the nightly recurring run) on Kubeflow Pipelines",
        description="Compiles the pipeline as `conveyor compile` does (or takes --job) and "
        "creates a run of it through the KFP API, or with --schedule the recurring run of the "
        "spec's schedule. A bearer token comes from the variable runtime.kubeflow.token_env "
        "names.",
    )
    p.add_argument("pipeline")
    p.add_argument("--host", help="the KFP API's URL (default: runtime.kubeflow.host)")
    p.add_argument(
        "--schedule",
        action="store_true",
        help="create the nightly recurring run from the spec's schedule instead of one run now",
    )
    p.add_argument(
        "--job", metavar="FILE", help="submit this compiled job (compile's output), not a new one"
    )
    p.add_argument(
        "--date",
        help="the night the run reads: YYYY-MM-DD, today or yesterday (dated spans; a backfill; "
        "default: the newest span in the input folder)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="run the night even when its data, spec, schema and code are unchanged since its "
        "last final outcome (one run; every task runs, KFP's cache answering what it can)",
    )
    add_common_options(p, profile_default="kubeflow")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("runs", help="recent runs from the metadata store")
    p.add_argument("pipeline")
    p.add_argument("--limit", type=int, default=10)
    add_common_options(p)
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser(
        "report",
        help="print (or --open) the HTML report of a run, or write a pipeline's --history page",
    )
    p.add_argument(
        "target",
        metavar="RUN_ID|NAME",
        help="a run id, e.g. penguin-20261129T155717.645324Z; with --history a pipeline name",
    )
    p.add_argument("--open", action="store_true", help="open it in a web browser")
    p.add_argument(
        "--history",
        action="store_true",
        help="write <workdir>/runs/NAME/history.html: the pipeline's last runs from ML Metadata",
    )
    p.add_argument(
        "--nights", type=int, default=30, metavar="N", help="--history: the last N runs (30)"
    )
    add_common_options(p)
    p.set_defaults(func=cmd_report)


def _event_log(args: argparse.Namespace, loaded):
    """Where a run's progress goes: `print` for text, a JSON log (secrets masked) for
    `--log-format json` or the profile's `runtime.log_format: json`."""
    chosen = args.log_format or loaded.spec.runtime.log_format.value
    if chosen != "json":
        return print
    from pipelines.core.events import JsonLog
    from pipelines.finish.run_folder import redact

    return JsonLog(redact=lambda text: redact(text, loaded.spec))


def cmd_run(args: argparse.Namespace) -> int:
    """`conveyor run`: runs one night of a pipeline locally and prints its verdict line.

    The run goes through `nightly.run_night` in a supervised child process, so an unchanged
    night answers from its fingerprint (unless `--force`) and a run killed by a signal still
    ends FAILED with its summary and alert. A night whose data is missing is alerted as failed.

    Exit code: the outcome's (0 pushed or not pushed, 2 blocked by a gate, 1 failed, also when
    the input is missing); 75 when another run holds the workdir's lock.
    """
    from pipelines.builder import spans
    from pipelines.ops import nightly
    from pipelines.run.plan import Run
    from pipelines.spec import loading

    loaded = load(args, args.pipeline)
    workdir = workdir_of(args)
    zone = loaded.spec.schedule.timezone  # "yesterday" where the cron line fires
    night = spans.parse_night(args.date, zone=zone) if args.date else None
    try:
        planned = Run.plan(loaded, workdir, night, args.span)
    except spans.SpanError as err:
        wanted = args.span if night is None else spans.span_of_date(night)
        if loaded.spec.data.span_pattern and wanted is not None:
            # The night's data never landed: a scheduled run fails, and says so to the webhook.
            if sent := nightly.alert_missing_night(loaded.spec, wanted, str(err)):
                print(sent, file=sys.stderr)
        raise
    input_dir = planned.paths.input_dir  # the one Run of this command: spec, paths, span
    if not loaded.spec.data.span_pattern and not loading.has_input_files(loaded.spec, input_dir):
        data_format = loaded.spec.data.format.value
        prepare = f"Prepare them with `conveyor data {loaded.spec.name} --workdir {workdir}` or "
        print(
            f"error: no {data_format} files in {input_dir}. "
            f"{prepare if data_format == 'csv' else ''}put your own there.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    # Supervised: the pipeline runs in a child process, so that a run killed by a signal (the
    # out-of-memory killer's SIGKILL, a scheduler's SIGTERM) still ends FAILED, with its summary
    # and alert. A busy workdir (PipelineBusy) is answered in main().
    echo = _event_log(args, loaded)
    outcome = nightly.run_night(planned, force=args.force, supervised=True, echo=echo)
    prefix = "UNCHANGED" if outcome.unchanged else Outcome(outcome.outcome).verdict
    if echo is not print:
        _verdict_event(echo, outcome, prefix)
        return outcome.exit_code
    print(f"{prefix}: {outcome.message}")
    if outcome.run_dir:
        print(f"run record: {outcome.run_dir}")
    return outcome.exit_code


def _verdict_event(echo, outcome, prefix: str, night: str | None = None) -> None:
    from pipelines.core.events import emit

    run_id = as_path(outcome.run_dir).name if outcome.run_dir else None  # none when unchanged
    emit(echo, "verdict", f"{prefix}: {outcome.message}", verdict=prefix,
         outcome=Outcome(outcome.outcome).value, unchanged=outcome.unchanged, run_id=run_id,
         span=outcome.span, night=night, run_dir=outcome.run_dir or None,
         exit_code=outcome.exit_code)  # fmt: skip


def cmd_backfill(args: argparse.Namespace) -> int:
    """`conveyor backfill`: runs the nights from `--from` to `--to` in order and prints a table
    of their outcomes (see `nightly.backfill` for which nights run and when it stops).

    Exit code: the worst of the nights' (1 failed, else 2 blocked, else 0); 75 when another
    run holds the workdir's lock; 1 (through `main`) on bad dates or undated spans.
    """
    from pipelines.builder import spans
    from pipelines.ops import nightly

    loaded = load(args, args.pipeline)
    zone = loaded.spec.schedule.timezone
    echo = _event_log(args, loaded)
    done = nightly.backfill(
        loaded,
        workdir_of(args),
        spans.parse_night(args.start, zone=zone),
        spans.parse_night(args.end, zone=zone),
        echo=echo,
        supervised=True,  # each night in a child process, as `conveyor run`
    )
    if echo is not print:
        for night, outcome in done:
            prefix = "UNCHANGED" if outcome.unchanged else Outcome(outcome.outcome).verdict
            _verdict_event(echo, outcome, prefix, night.isoformat())
        return worst_exit_code(outcome.exit_code for _, outcome in done)
    print(f"{'night':<12} {'outcome':<11} {'ran?':<5} run record")
    for night, outcome in done:
        ran = "no" if outcome.unchanged else "yes"
        verdict = Outcome(outcome.outcome).value
        print(f"{night.isoformat():<12} {verdict:<11} {ran:<5} {outcome.run_dir or '-'}")
    return worst_exit_code(outcome.exit_code for _, outcome in done)


def cmd_schedule(args: argparse.Namespace) -> int:
    """`conveyor schedule`: installs the nightly crontab entry that runs the pipeline, or with
    `--print` only prints it. `--cron` replaces the spec's `schedule.cron`.

    Exit code: 0 when installed or printed; 1 for an invalid `--cron` or a crontab error.
    """
    from pipelines.ops import nightly
    from pipelines.spec.models import ScheduleSpec

    loaded = load(args, args.pipeline)
    try:
        cron = ScheduleSpec(cron=args.cron).cron if args.cron else loaded.spec.schedule.cron
    except ValueError as err:
        print(f"error: --cron: {err.errors()[0]['msg']}", file=sys.stderr)  # type: ignore[attr-defined]
        return EXIT_FAILED
    entry = nightly.cron_entry(
        loaded.spec.name,
        cron,
        args.profile,
        workdir_of(args),
        timezone=loaded.spec.schedule.timezone,
        overrides=args.set,
    )
    try:
        if args.print:
            print(entry.render(), end="")
            return 0
        nightly.install_crontab(entry)
    except nightly.CrontabError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"installed in the crontab:\n{entry.render()}", end="")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    """`conveyor submit`: creates a run of the pipeline on Kubeflow Pipelines, or with
    `--schedule` its nightly recurring run, from the job `conveyor compile` writes (compiled
    here unless `--job` names one).

    The host, the token's variable and the schedule are checked before anything is compiled,
    so a missing one fails in seconds.

    Exit code: 0 when KFP created it; 1 for a spec or profile error, no host, an unset token
    variable, a schedule KFP cannot keep, or what the API answered instead.
    """
    from pathlib import Path

    from pipelines.run import compile as orchestration
    from pipelines.run import submit
    from pipelines.spec import checks, loading
    from pipelines.spec.models import Orchestrator

    loaded = loading.load_spec(args.pipeline, env=args.profile, overrides=args.set)
    spec = loaded.spec
    try:
        host = submit.api_host(spec, args.host)
        submit.api_token(spec)
        if args.schedule:
            submit.recurring_run_cron(spec)
        night = submit.night_of(spec, args.date, args.schedule)
        submit.check_force(args.force, args.schedule)
        if args.job:
            job_file = Path(args.job)
        else:
            # The profile's working directory (where the pods see the data), as compile takes it.
            runtime_workdir = spec.runtime.workdir
            workdir = runtime_workdir if runtime_workdir and not args.workdir else None
            workdir = workdir or str(workdir_of(args))
            target = Orchestrator.KUBEFLOW
            job_file = orchestration.default_output(spec, target, workdir_of(args))
            checks.check_profile(loaded, target)  # before TensorFlow is imported
            for path in orchestration.compile_pipeline(
                loaded, target, workdir, job_file, tuple(args.set)
            ):
                print(f"wrote {path}")
        submitted = submit.submit(
            spec, job_file, host, schedule=args.schedule, night=night, force=args.force
        )
    except submit.SubmitError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"created {submitted.kind} {submitted.display_name!r} ({submitted.id}) in experiment "
        f"{submit.experiment_name(spec)!r}: {submitted.link}"
    )
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    """`conveyor runs`: prints the pipeline's latest `--limit` runs from ML Metadata, with
    their start time, state and pushed version.

    Exit code: 0, also when no run is recorded.
    """
    from pipelines.core.metadata import list_runs, open_store
    from pipelines.core.paths import RunPaths

    loaded = load(args, args.pipeline)
    paths = RunPaths(workdir=workdir_of(args), spec=loaded.spec)
    store = open_store(loaded.spec, paths.metadata_path)
    runs = list_runs(store, loaded.spec.name, args.limit) if store else []
    if not runs:
        print(f"no runs of {loaded.spec.name} recorded in {paths.metadata_path}")
        return 0
    print(f"{'run id':<40} {'started (UTC)':<20} {'state':<10} pushed")
    for run in runs:
        started = datetime.datetime.fromtimestamp(
            run.started_ms / 1000, tz=datetime.timezone.utc
        ).strftime("%Y-%m-%d %H:%M:%S")
        pushed = f"version {run.pushed_version}" if run.pushed_version else "-"
        print(f"{run.run_id:<40} {started:<20} {run.state:<10} {pushed}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """`conveyor report`: prints the path of a run's HTML report, and with `--open` opens it;
    with `--history` the argument names a pipeline, whose history page is written first.

    The run id must be one folder name (no separators, `..` or wildcards), so it cannot reach
    files outside the runs folder. When the report is missing the error lists recent run ids.

    Exit code: 0 when found (or written); 1 for an invalid run id or no report.
    """
    from pipelines.core.paths import REPORT_FILE, find_run_dirs, runs_root
    from pipelines.finish.report import find_report, recent_run_ids
    from pipelines.spec import loading

    if args.history:
        from pipelines.core.paths import RunPaths
        from pipelines.ops.history import write_history

        if args.nights < 1:
            print(f"error: --nights {args.nights}: give 1 or more runs", file=sys.stderr)
            return EXIT_FAILED
        loaded = load(args, args.target)
        report = write_history(RunPaths(workdir=workdir_of(args), spec=loaded.spec), args.nights)
        print(report)
        if args.open:
            import webbrowser

            webbrowser.open(report.as_uri())
        return 0
    args.run_id = args.target

    # A run id is one folder's name: a path or a glob would reach other folders' files.
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.:+-]*", args.run_id) or ".." in args.run_id:
        print(
            f"error: {args.run_id!r} is not a run id (e.g. penguin-20261129T155717.645324Z): "
            "no path separators, '..' or wildcards",
            file=sys.stderr,
        )
        return EXIT_FAILED
    workdir = workdir_of(args)
    report = find_report(workdir, args.run_id)
    if report is None:
        known = find_run_dirs(workdir, args.run_id)
        recent = recent_run_ids(workdir)
        why = (
            f"run {args.run_id} has no {REPORT_FILE}"
            if known
            else f"no run {args.run_id} under {runs_root(workdir)}"
        )
        listing = ("; recent runs: " + ", ".join(recent)) if recent else "; no runs recorded there"
        if args.run_id in loading.list_pipelines():
            listing += f"; for the pipeline's history: conveyor report {args.run_id} --history"
        print(f"error: {why}{listing}", file=sys.stderr)
        return EXIT_FAILED
    print(report)
    if args.open:
        import webbrowser

        webbrowser.open(report.as_uri())
    return 0
