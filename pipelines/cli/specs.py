"""`conveyor list`, `validate`, `compile`, `data` and `schema`: what a spec is, what it
compiles to, the data it reads and the schema it holds the data to.

`list` and `validate` never import TensorFlow or TFX; each handler imports what it needs when it
runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipelines.cli.options import add_common_options, add_project_option, load, workdir_of
from pipelines.core.outcome import EXIT_FAILED


def register(sub) -> None:
    """Adds `list`, `validate`, `compile`, `data` and `schema` to the `conveyor` parser."""
    p = sub.add_parser("list", help="list pipelines and profiles")
    add_project_option(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("validate", help="load and validate specs (all pipelines x profiles)")
    p.add_argument("pipelines", nargs="*", help="pipeline names or spec paths")
    add_common_options(p, workdir=False, profile_default=None)  # no --profile: every profile
    p.add_argument("--print", action="store_true", help="print the resolved spec")
    p.add_argument(
        "--connect", action="store_true", help="also check that a MySQL metadata store answers"
    )
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("compile", help="write a Kubeflow PipelineJob or an Airflow DAG file")
    p.add_argument("pipeline")
    add_common_options(p, profile_default="kubeflow")
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


def cmd_list(args: argparse.Namespace) -> int:
    """`conveyor list`: prints each pipeline with its description, then the profiles.

    Exit code: 0; 1 (through `main`) when a spec does not load.
    """
    from pipelines.spec import loading

    names = loading.list_pipelines()  # outside a project: the error alone, no header first
    print("pipelines:")
    for name in names:
        spec = loading.load_spec(name, env="local").spec
        print(f"  {name:<12} {spec.description}")
    print("profiles: " + ", ".join(loading.list_profiles()))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """`conveyor validate`: loads and checks the named pipelines (default: all) under
    `--profile` (default: every profile), so a broken spec or profile is found before a run.

    With `--connect` it also checks that the MySQL metadata store answers; with `--print` it
    prints each resolved spec. Every failure is reported, not only the first.

    Exit code: 0 when all load and check, 1 when any fails.
    """
    from pipelines.spec import checks, guarantees, loading

    names = args.pipelines or loading.list_pipelines()
    profiles = [args.profile] if args.profile else loading.list_profiles()
    failures = 0
    for name in names:
        for profile in profiles:
            try:
                loaded = loading.load_spec(name, env=profile, overrides=args.set)
                checks.check_profile(loaded)
                if args.connect:
                    checks.check_metadata_reachable(loaded.spec)
            except loading.SpecError as err:
                failures += 1
                print(f"FAIL {name} [{profile}]: {err}", file=sys.stderr)
                continue
            print(f"ok   {name} [{profile}]: {len(loaded.spec.components)} components")
            reader = _csv_reader_line(loaded.spec)
            if reader:
                print(f"     reader: {reader}")
            target = loaded.spec.runtime.orchestrator
            for gap in guarantees.gaps(loaded.spec, target):
                print(f"     {gap.line(target)}")
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
    from pipelines.spec import checks, guarantees, loading

    loaded = loading.load_spec(args.pipeline, env=args.profile, overrides=args.set)
    target = checks.target_of(loaded, args.target)
    # The profile's working directory (where the orchestrator's pods see the data), else ours.
    runtime_workdir = loaded.spec.runtime.workdir
    workdir = runtime_workdir if runtime_workdir and not args.workdir else str(workdir_of(args))
    output = Path(args.output) if args.output else None
    output = output or orchestration.default_output(loaded.spec, target, workdir_of(args))
    checks.check_profile(loaded, target)  # before TensorFlow is imported
    written = orchestration.compile_pipeline(loaded, target, workdir, output, tuple(args.set))
    for path in written:
        print(f"wrote {path}")
    for gap in guarantees.gaps(loaded.spec, target):
        print(gap.line(target))
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    """`conveyor data`: writes a pipeline's input CSV from its packaged data into the workdir.

    For a spec with dated spans it writes the span of `--date` (default: yesterday, in the
    schedule's timezone); a spec with undated spans is refused.

    Exit code: 0 when written, 1 when the data cannot be prepared.
    """
    from pipelines.core.paths import RunPaths
    from pipelines.datasets.prepare import DataPreparationError, prepare

    loaded = load(args, args.pipeline)
    spec = loaded.spec
    paths = RunPaths(workdir=workdir_of(args), spec=spec)
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


def cmd_schema(args: argparse.Namespace) -> int:
    """`conveyor schema diff|accept`: compares the curated schema with the latest statistics,
    or updates the curated schema to fit them for a person to review and commit.

    Exit code: `diff` 0 when they match, 3 when they differ; `accept` 0; 1 on an error.
    """
    from pipelines.core.paths import RunPaths
    from pipelines.ops import schema_review as schema_tools

    loaded = load(args, args.pipeline)
    spec = loaded.spec
    paths = RunPaths(workdir=workdir_of(args), spec=spec)
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
