"""`conveyor`: validate, list, prepare data for, run, serve and inspect pipelines.

One module per group of commands, each wired the same way: `register(sub)` adds its subcommands,
each with `set_defaults(func=cmd_...)`, and `main` runs the one named.
- `specs`: list, validate, compile, data, schema
- `runs`: run, backfill, schedule, submit, runs, report
- `models`: bless, lineage, models, promote, rollback
- `serving`: serve, deploy render
- `project`: init
- `infer`: infer

`--help`, `list`, `validate` and `runs` never import TensorFlow or TFX (seconds of imports): every
module here imports only the standard library and the floor at module level, and each handler
imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pipelines.cli import infer, models, project, runs, serving, specs
from pipelines.cli.options import add_project_option, apply_project
from pipelines.core.outcome import EXIT_FAILED, PipelineBusy

# 128 + SIGPIPE: how a shell reports a command whose output pipe was closed.
EXIT_BROKEN_PIPE = 141

COMMAND_GROUPS = (specs, runs, models, serving, project, infer)


def build_parser() -> argparse.ArgumentParser:
    """The `conveyor` argument parser: each group's subcommands, each set as `args.func`."""
    parser = argparse.ArgumentParser(
        prog="conveyor",
        description="Declarative TFX pipelines: validate, run and inspect them.",
    )
    add_project_option(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the `conveyor` subcommand named in `argv` (default: the command line).

    `--project DIR` is put in $CONVEYOR_PROJECT (absolute) before the subcommand runs, so that
    the processes it starts find the same project.

    Returns:
      The subcommand's exit code; 1 for a spec, span or storage error or an object store that
      did not answer (one `error:` line, no traceback); 75 when another run holds the workdir's
      lock; 141, as a shell reports SIGPIPE, when stdout's reader went away.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    apply_project(args)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, where it can be caught, not at exit
        return code
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
    except ValueError as err:
        if not _is_spec_or_span_error(err):
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as err:
        # An object store that did not answer outside a run (a run's own failures end in its
        # outcome): one line naming the object, not a traceback.
        from pipelines.core.storage import StoreFailed

        if not isinstance(err, StoreFailed):
            raise
        print(f"error: an object store did not answer: {err} (docs/storage.md)", file=sys.stderr)
        return EXIT_FAILED


def _is_spec_or_span_error(err: Exception) -> bool:
    """A spec or span error, or a store that did not answer before anything ran, answered with
    one line. Their modules (pydantic and the spec models) load only once a command has raised
    one, keeping `--help` fast."""
    from pipelines.builder.spans import SpanError
    from pipelines.core.storage import StorageError
    from pipelines.spec.loading import SpecError

    return isinstance(err, SpecError | SpanError | StorageError)
