"""`conveyor new` and `conveyor init`: the commands that make a project's files (a new project
from Conveyor's template in pipelines/ops/new_project.py; a spec inferred from a CSV in
pipelines/ops/init_command.py).

Nothing heavy at module level: pandas, TFDV and TensorFlow load only when `init` runs.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.cli.options import add_common_options


def register(sub) -> None:
    """Adds `new` and `init` to the `conveyor` parser."""
    p = sub.add_parser(
        "new",
        help="write a new project: a starter spec, profile layers, schemas, tests, a Makefile",
        description="Writes a Conveyor project into DIR (new or empty): conveyor.yaml, a "
        "penguin spec whose data comes from the palmerpenguins package, configs/ layers over "
        "Conveyor's profiles, its schema, a package for the team's modules, tests, a README "
        "and a Makefile (`make pipeline-local`, `make test`).",
    )
    p.add_argument("dir", help="the project folder to create (or an empty one)")
    p.set_defaults(func=cmd_new)

    p = sub.add_parser(
        "init",
        help="write a working spec from a CSV (features inferred with TFDV)",
        description="Infers the features of a CSV with TFDV (numeric, categorical; ids, free "
        "text and leaky columns left out with a comment saying why), writes "
        "specs/NAME.yaml, copies the CSV into the workdir's data/NAME/, validates the "
        "spec and prints the next two commands.",
    )
    p.add_argument("name", help="the pipeline's name (letters, digits, _)")
    p.add_argument("--csv", required=True, help="the CSV to learn from (header row first)")
    p.add_argument("--label", required=True, help="the column to predict")
    p.add_argument(
        "--task",
        choices=("classification", "regression"),
        help="default: classification for text or a few small integers, else regression",
    )
    p.add_argument("--output", help="the spec to write (default: specs/NAME.yaml)")
    p.add_argument("--force", action="store_true", help="replace an existing spec and input files")
    # --profile: validate under that profile only (default: every profile, as `validate` does).
    add_common_options(p, profile_default=None)
    p.set_defaults(func=cmd_init)


def cmd_new(args: argparse.Namespace) -> int:
    """`conveyor new DIR`: writes a project and prints what to run next.

    Exit code: 0 when written; 1 when DIR is a file or a folder that is not empty.
    """
    from pipelines.ops.new_project import NewProjectError, write_project

    try:
        project = write_project(args.dir)
    except NewProjectError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote the project {project.root} ({len(project.files)} files):")
    for name in project.files:
        print(f"  {name}")
    print("next:")
    print(f"  cd {project.root}")
    print("  make pipeline-local   # the penguin pipeline, to a pushed model")
    print("  make test             # every spec validated, and run under the ci profile")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    """`conveyor init`: writes a spec from a CSV, copies the CSV where the spec reads it,
    validates the spec and prints the next two commands.

    Exit code: 0 when written and valid; 1 when the CSV, the arguments or the result are not.
    """
    from pipelines.ops.init_command import InitError, init_spec

    try:
        written = init_spec(args)
    except InitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0 if written else 1
