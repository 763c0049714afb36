"""`conveyor`: validate, list, prepare data for, run and inspect pipelines.

`--help`, `list`, `validate` and `runs` never import TensorFlow or TFX (seconds of imports); only
`run` and `data` pay for the libraries they use, and only when they are called.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from pipelines.builder.spans import SpanError
from pipelines.core.outcome import EXIT_FAILED, Outcome, PipelineBusy, worst_exit_code
from pipelines.spec import checks
from pipelines.spec import loading as config
from pipelines.spec.loading import SpecError

# 128 + SIGPIPE: how a shell reports a command whose output pipe was closed.
EXIT_BROKEN_PIPE = 141


def _workdir(args: argparse.Namespace) -> Path:
    from pipelines.core.paths import default_workdir

    return default_workdir(args.workdir)


def _load(args: argparse.Namespace, name: str) -> config.LoadedSpec:
    return config.load_spec(name, env=args.env, overrides=args.set, workdir=_workdir(args))


def cmd_list(args: argparse.Namespace) -> int:
    """`conveyor list`: prints each pipeline with its description, then the profiles.

    Exit code: 0; 1 (through `main`) when a spec does not load.
    """
    print("pipelines:")
    for name in config.list_pipelines():
        spec = config.load_spec(name, env="local").spec
        print(f"  {name:<12} {spec.description}")
    print("profiles: " + ", ".join(config.list_profiles()))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """`conveyor validate`: loads and checks the named pipelines (default: all) under `--env`
    (default: every profile), so a broken spec or profile is found before a run.

    With `--connect` it also checks that the MySQL metadata store answers; with `--print` it
    prints each resolved spec. Every failure is reported, not only the first.

    Exit code: 0 when all load and check, 1 when any fails.
    """
    names = args.pipelines or config.list_pipelines()
    envs = [args.env] if args.env else config.list_profiles()
    failures = 0
    for name in names:
        for env in envs:
            try:
                loaded = config.load_spec(name, env=env, overrides=args.set)
                checks.check_profile(loaded)
                if args.connect:
                    checks.check_metadata_reachable(loaded.spec)
            except SpecError as err:
                failures += 1
                print(f"FAIL {name} [{env}]: {err}", file=sys.stderr)
                continue
            print(f"ok   {name} [{env}]: {len(loaded.spec.components)} components")
            reader = _csv_reader_line(loaded.spec)
            if reader:
                print(f"     reader: {reader}")
            if args.print:
                import yaml

                print(yaml.safe_dump(loaded.spec.to_yaml_dict(), sort_keys=False))
    return 1 if failures else 0


def _csv_reader_line(spec) -> str | None:
    """Which CSV reader the spec gets under its profile and why (None for other formats)."""
    from components.arrow_example_gen import placement  # standard library only

    data = spec.data
    if data.format.value != "csv":
        return None
    return placement.reader_summary(
        data.reader.value, data.bad_rows.value, data.arrow_above_megabytes, spec.runtime.beam_args
    )


def cmd_compile(args: argparse.Namespace) -> int:
    """`conveyor compile`: writes a Kubeflow PipelineJob or an Airflow DAG file for a pipeline.

    The profile is checked for the target before TensorFlow is imported, so a wrong profile
    fails in seconds. The workdir written into the file is the profile's `runtime.workdir`
    (where the orchestrator's pods see the data) unless `--workdir` is given.

    Exit code: 0 when written; 1 (through `main`) on a spec or profile error.
    """
    from pipelines.run import compile as orchestration

    loaded = config.load_spec(args.pipeline, env=args.env, overrides=args.set)
    target = checks.target_of(loaded, args.target)
    # The profile's working directory (where the orchestrator's pods see the data), else ours.
    runtime_workdir = loaded.spec.runtime.workdir
    workdir = runtime_workdir if runtime_workdir and not args.workdir else str(_workdir(args))
    output = Path(args.output) if args.output else None
    output = output or orchestration.default_output(loaded.spec, target, _workdir(args))
    checks.check_profile(loaded, target)  # before TensorFlow is imported
    written = orchestration.compile_pipeline(loaded, target, workdir, output, tuple(args.set))
    for path in written:
        print(f"wrote {path}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    """`conveyor data`: writes a pipeline's input CSV from its packaged data into the workdir.

    For a spec with dated spans it writes the span of `--date` (default: yesterday, in the
    schedule's timezone); a spec with undated spans is refused.

    Exit code: 0 when written, 1 when the data cannot be prepared.
    """
    from pipelines.core.paths import RunPaths
    from pipelines.datasets.prepare import DataPreparationError, prepare

    loaded = _load(args, args.pipeline)
    spec = loaded.spec
    paths = RunPaths(workdir=_workdir(args), spec=spec)
    target = None
    if spec.data.span_pattern:
        from pipelines.builder import spans

        if not spec.data.dated_spans:
            print(f"error: {spec.name}: `data` writes dated spans only", file=sys.stderr)
            return EXIT_FAILED
        night = spans.parse_night(args.date or "yesterday", zone=spec.schedule.timezone)
        filename = spec.data.prepare.filename if spec.data.prepare else "data.csv"
        target = spans.prepared_file(spec, paths.input_dir, spans.span_of_date(night), filename)
    try:
        written = prepare(spec, paths.input_dir, target)
    except DataPreparationError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {written}")
    return 0


def _event_log(args: argparse.Namespace, loaded: config.LoadedSpec):
    """Where a run's progress goes: `print` for text, a JSON log (secrets masked) for
    `--log-format json` or the profile's `runtime.log_format: json`."""
    chosen = args.log_format or loaded.spec.runtime.log_format.value
    if chosen != "json":
        return print
    from pipelines.run import local
    from pipelines.run.events import JsonLog

    return JsonLog(redact=lambda text: local.redact(text, loaded.spec))


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

    loaded = _load(args, args.pipeline)
    workdir = _workdir(args)
    zone = loaded.spec.schedule.timezone  # "yesterday" where the cron line fires
    night = spans.parse_night(args.date, zone=zone) if args.date else None
    try:
        planned = Run.plan(loaded, workdir, night, args.span)
    except SpanError as err:
        wanted = args.span if night is None else spans.span_of_date(night)
        if loaded.spec.data.span_pattern and wanted is not None:
            # The night's data never landed: a scheduled run fails, and says so to the webhook.
            if sent := nightly.alert_missing_night(loaded.spec, wanted, str(err)):
                print(sent, file=sys.stderr)
        raise
    input_dir = planned.paths.input_dir  # the one Run of this command: spec, paths, span
    if not loaded.spec.data.span_pattern and not config.has_input_files(loaded.spec, input_dir):
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
    from pipelines.run.events import emit

    run_id = Path(outcome.run_dir).name if outcome.run_dir else None  # none when unchanged
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

    loaded = _load(args, args.pipeline)
    zone = loaded.spec.schedule.timezone
    echo = _event_log(args, loaded)
    done = nightly.backfill(
        loaded,
        _workdir(args),
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

    loaded = _load(args, args.pipeline)
    try:
        cron = ScheduleSpec(cron=args.cron).cron if args.cron else loaded.spec.schedule.cron
    except ValueError as err:
        print(f"error: --cron: {err.errors()[0]['msg']}", file=sys.stderr)  # type: ignore[attr-defined]
        return EXIT_FAILED
    entry = nightly.cron_entry(
        loaded.spec.name,
        cron,
        args.env,
        _workdir(args),
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


def cmd_bless(args: argparse.Namespace) -> int:
    """`conveyor bless`: pushes the candidate a run held for review
    (`evaluation.first_run: require_manual_bless`) and records who blessed it and why.

    Exit code: 0 when pushed, 1 when the run's candidate cannot be blessed.
    """
    import getpass

    from pipelines.core.paths import RunPaths
    from pipelines.ops.bless import BlessError, bless

    loaded = _load(args, args.pipeline)
    paths = RunPaths(workdir=_workdir(args), spec=loaded.spec)
    try:
        blessed = bless(paths, args.run, args.by or getpass.getuser(), args.reason)
    except BlessError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"PUSHED: version {blessed.version} to {blessed.target} (blessed run {args.run})")
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    """`conveyor lineage`: prints, for each pushed version (or only `--version`), the spans,
    schema and code that made it, and the label moves to it, as ML Metadata records them.

    Exit code: 0; 1 when the `--version` asked for is not recorded (no pushes at all is 0).
    """
    from pipelines.core.metadata import open_store, pushed_lineage
    from pipelines.core.paths import RunPaths

    loaded = _load(args, args.pipeline)
    paths = RunPaths(workdir=_workdir(args), spec=loaded.spec)
    store = open_store(loaded.spec, paths.metadata_path)
    pushes = pushed_lineage(store, loaded.spec.name) if store else []
    if args.version:
        pushes = [p for p in pushes if p.version == args.version]
    if not pushes:
        print(f"no pushed versions of {loaded.spec.name} recorded in {paths.metadata_path}")
        return EXIT_FAILED if args.version else 0
    from pipelines.ops.labels import moves_by_version

    moves = moves_by_version(store, loaded.spec.name)
    for push in pushes:
        print(push.describe())
        for move in moves.get(push.version, []):  # pushes, promotes, rollbacks to the version
            print(f"  labels    {move.describe()}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    """`conveyor runs`: prints the pipeline's latest `--limit` runs from ML Metadata, with
    their start time, state and pushed version.

    Exit code: 0, also when no run is recorded.
    """
    from pipelines.core.metadata import list_runs, open_store
    from pipelines.core.paths import RunPaths

    loaded = _load(args, args.pipeline)
    paths = RunPaths(workdir=_workdir(args), spec=loaded.spec)
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
    from pipelines.ops.report import find_report, recent_run_ids

    if args.history:
        from pipelines.core.paths import RunPaths
        from pipelines.ops.history import write_history

        if args.nights < 1:
            print(f"error: --nights {args.nights}: give 1 or more runs", file=sys.stderr)
            return EXIT_FAILED
        loaded = _load(args, args.target)
        report = write_history(RunPaths(workdir=_workdir(args), spec=loaded.spec), args.nights)
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
    workdir = _workdir(args)
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
        if args.run_id in config.list_pipelines():
            listing += f"; for the pipeline's history: conveyor report {args.run_id} --history"
        print(f"error: {why}{listing}", file=sys.stderr)
        return EXIT_FAILED
    print(report)
    if args.open:
        import webbrowser

        webbrowser.open(report.as_uri())
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    """`conveyor schema diff|accept`: compares the curated schema with the latest statistics,
    or updates the curated schema to fit them for a person to review and commit.

    Exit code: `diff` 0 when they match, 3 when they differ; `accept` 0; 1 on an error.
    """
    from pipelines.core.paths import RunPaths
    from pipelines.ops import schema_review as schema_tools

    loaded = _load(args, args.pipeline)
    spec = loaded.spec
    paths = RunPaths(workdir=_workdir(args), spec=spec)
    try:
        if args.action == "diff":
            found = schema_tools.diff(spec, paths)
            print("\n".join(schema_tools.format_diff(found, spec)))
            return schema_tools.EXIT_DIFFERENT if found.different else 0
        accepted = schema_tools.accept(spec, paths)
    except schema_tools.SchemaToolError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    changed = [c for c in accepted.columns if c.changes]
    print(f"statistics: {accepted.source.describe()}")
    if not changed:
        print(f"nothing to accept: {accepted.schema_path} already fits these statistics.")
        for column in accepted.columns:  # anomalies update_schema does not resolve
            for anomaly in column.anomalies:
                print(f"  still an anomaly: {column.column}: {anomaly}")
        return 0
    print(f"updated {accepted.schema_path}:")
    for column in changed:
        for change in column.changes:
            print(f"  {column.column}: {change}")
    print(
        "Review the change (e.g. `git diff` on that file) and commit it: the curated schema is "
        "what the data gate holds every night to."
    )
    return 0


def add_common_options(
    p: argparse.ArgumentParser, workdir: bool = True, env_default: str | None = "local"
) -> None:
    """Adds --env, --set and (unless workdir is False) --workdir to a subcommand."""
    p.add_argument("--env", default=env_default, help="environment profile in configs/")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a spec value (YAML); repeatable, applied last",
    )
    if workdir:
        p.add_argument(
            "--workdir",
            help="where data, pipeline outputs, metadata and serving models live "
            "(default: $CONVEYOR_WORKDIR or ./.conveyor)",
        )


def _add_log_format(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="text lines, or one JSON object per event on stdout for log aggregators "
        "(default: the profile's runtime.log_format, text)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `conveyor` argument parser: one subcommand per `cmd_*`, each set as `args.func`."""
    parser = argparse.ArgumentParser(
        prog="conveyor",
        description="Declarative TFX pipelines: validate, run and inspect them.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list pipelines and environment profiles")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("validate", help="load and validate specs (all pipelines x profiles)")
    p.add_argument("pipelines", nargs="*", help="pipeline names or spec paths")
    add_common_options(p, workdir=False, env_default=None)  # no --env: every profile
    p.add_argument("--print", action="store_true", help="print the resolved spec")
    p.add_argument(
        "--connect", action="store_true", help="also check that a MySQL metadata store answers"
    )
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("compile", help="write a Kubeflow PipelineJob or an Airflow DAG file")
    p.add_argument("pipeline")
    add_common_options(p, env_default="kubeflow")
    p.add_argument(
        "--target",
        choices=["kubeflow", "airflow"],
        help="orchestrator to compile for (default: the profile's runtime.orchestrator)",
    )
    p.add_argument(
        "--output",
        help="file to write (default: <workdir>/compiled/kubeflow/NAME.json or "
        "<workdir>/compiled/airflow/NAME_dag.py)",
    )
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("data", help="write a pipeline's input CSV from packaged data")
    p.add_argument("pipeline")
    p.add_argument("--date", help="dated spans: the night to write (default: yesterday)")
    add_common_options(p)
    p.set_defaults(func=cmd_data)

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
    _add_log_format(p)
    add_common_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("backfill", help="run the nights from --from to --to in order")
    p.add_argument("pipeline")
    p.add_argument("--from", dest="start", required=True, metavar="DATE")
    p.add_argument("--to", dest="end", required=True, metavar="DATE")
    _add_log_format(p)
    add_common_options(p)
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser("schedule", help="install (or --print) the nightly crontab entry")
    p.add_argument("pipeline")
    p.add_argument("--cron", help="cron expression (default: the spec's schedule.cron)")
    p.add_argument("--print", action="store_true", help="print the line, install nothing")
    add_common_options(p)
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser(
        "bless",
        help="push a candidate held by evaluation.first_run: require_manual_bless",
        description="Publishes the candidate a run held for review as the next served version "
        "and records in ML Metadata who blessed it and why.",
    )
    p.add_argument("pipeline")
    p.add_argument("--run", required=True, metavar="RUN_ID", help="the run whose candidate to push")
    p.add_argument("--reason", required=True, help="why the candidate may be served (recorded)")
    p.add_argument("--by", help="who blesses it (default: the user name)")
    add_common_options(p)
    p.set_defaults(func=cmd_bless)

    p = sub.add_parser("lineage", help="which spans, schema and code made each pushed version")
    p.add_argument("pipeline")
    p.add_argument("--version", help="one pushed version only")
    add_common_options(p)
    p.set_defaults(func=cmd_lineage)

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

    p = sub.add_parser(
        "schema",
        help="compare a curated schema with the latest statistics (diff), or update it (accept)",
        description="diff exits 0 when the latest statistics match the curated schema, 3 when "
        "they differ; accept writes the updated schema for you to review and commit.",
    )
    p.add_argument("action", choices=("diff", "accept"))
    p.add_argument("pipeline")
    add_common_options(p)
    p.set_defaults(func=cmd_schema)

    # Serving and model management commands live beside their code; each module adds its own
    # subcommands and imports nothing heavy until one runs.
    from pipelines.ops import init_command, models_command
    from pipelines.serving import deploy_command, serve_command

    for module in (serve_command, models_command, deploy_command, init_command):
        module.register(sub, add_common_options)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the `conveyor` subcommand named in `argv` (default: the command line).

    Returns:
      The subcommand's exit code; 1 for a spec or span error (printed as one `error:` line, no
      traceback); 75 when another run holds the workdir's lock; 141, as a shell reports SIGPIPE,
      when stdout's reader went away.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, where it can be caught, not at exit
        return code
    except (SpecError, SpanError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except PipelineBusy as err:  # another run holds the workdir (run, backfill, bless): later
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:
        # The reader went away (`conveyor runs NAME | head`): what Python's documentation
        # recommends (signal module, "Note on SIGPIPE"): point stdout at devnull so the flush at
        # exit cannot fail again, and leave quietly with the status a shell gives SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
