"""`conveyor infer`: batch inference of a served (or named) version over one span, on Beam
(pipelines/ops/infer.py).

The handler imports what it needs when it runs: `conveyor --help` never imports TensorFlow,
TFX or Beam.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.cli.options import add_common_options, load, workdir_of
from pipelines.core.outcome import EXIT_FAILED


def register(sub) -> None:
    """Adds `infer` to the `conveyor` parser."""
    p = sub.add_parser(
        "infer",
        help="predict a span's rows with a served (or named) version, on Beam",
        description="Reads the span's input files, runs the model version on every row in "
        "batches on the profile's Beam runner and writes PredictionLog TFRecords (those TFX's "
        "BulkInferrer writes), the table of `inference.output_columns` beside the "
        "predictions (CSV or Parquet) and bad_rows.csv, naming each row that could not be "
        "read by file and line. Recorded in ML Metadata with the version used. Exits 1 when "
        "any row was bad (the others are still predicted).",
    )
    p.add_argument("pipeline")
    p.add_argument(
        "--date", help="the night: YYYY-MM-DD, today or yesterday (default: the latest span)"
    )
    p.add_argument("--span", type=int, help="the span ({SPAN} patterns)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--version", type=int, help="the version to run (default: the served one)")
    which.add_argument(
        "--label", help="the version a models.config label points to (stable, canary)"
    )
    p.add_argument(
        "--output", metavar="DIR", help="where to write (default: <workdir>/inference/NAME/...)"
    )
    add_common_options(p)
    p.set_defaults(func=cmd_infer)


def cmd_infer(args: argparse.Namespace) -> int:
    """`conveyor infer`: predicts one span's rows with the served version (or `--version`,
    `--label`) and records it.

    Exit code: 0 when every row was predicted; 1 when some rows were bad (each named in
    bad_rows.csv, the first on stderr), or the version, span or model cannot be used.
    """
    from pipelines.builder import spans
    from pipelines.core.paths import RunPaths
    from pipelines.ops.infer import InferError, chosen_version, infer

    loaded = load(args, args.pipeline)
    paths = RunPaths(workdir=workdir_of(args), spec=loaded.spec)
    night = spans.parse_night(args.date, zone=loaded.spec.schedule.timezone) if args.date else None
    try:
        span = spans.resolve_span(loaded.spec, paths.input_dir, night, args.span)
        version = chosen_version(paths, args.version, args.label)
        inferred = infer(paths, span, version, output_dir=args.output)
    except InferError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    what = spans.describe(loaded.spec, span)
    print(
        f"predicted {inferred.rows} rows of {what} with version {inferred.version} in "
        f"{inferred.seconds:.1f}s"
    )
    print(f"prediction logs: {inferred.output_dir}")
    for table in inferred.table_files:
        print(f"table: {table}")
    if not inferred.bad_rows:
        return 0
    print(
        f"BAD ROWS: {inferred.bad_rows} rows could not be read and were not predicted "
        f"(all in {inferred.output_dir}/bad_rows.csv):",
        file=sys.stderr,
    )
    for bad in inferred.first_bad:
        print(f"  {bad.describe()}", file=sys.stderr)
    return EXIT_FAILED
