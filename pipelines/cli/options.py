"""The options every `conveyor` subcommand shares, and what they resolve to.

Only the standard library at module level: `conveyor --help` imports this.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipelines.core.project import PROJECT_ENV


def add_project_option(p: argparse.ArgumentParser) -> None:
    """Adds `--project DIR`. Suppressed when absent, so the option given before the
    subcommand is not overwritten by the subcommand's default."""
    p.add_argument(
        "--project",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="the project directory, holding specs/, configs/ and schemas/ (sets "
        f"${PROJECT_ENV} for the command and the processes it starts)",
    )


def add_common_options(
    p: argparse.ArgumentParser, workdir: bool = True, profile_default: str | None = "local"
) -> None:
    """Adds --profile (alias --env), --set, --project and (unless workdir is False) --workdir
    to a subcommand."""
    p.add_argument(
        "--profile",
        "--env",
        dest="profile",
        default=profile_default,
        metavar="PROFILE",
        help="profile in configs/",
    )
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
    add_project_option(p)


def add_log_format(p: argparse.ArgumentParser) -> None:
    """Adds `--log-format` to a command that reports a run's progress."""
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="text lines, or one JSON object per event on stdout for log aggregators "
        "(default: the profile's runtime.log_format, text)",
    )


def apply_project(args: argparse.Namespace) -> None:
    """Sets $CONVEYOR_PROJECT to the absolute `--project` directory, when one was given, so
    that project discovery (`pipelines.core.project`), the supervised child process of a run
    and every subprocess find the same project."""
    project = getattr(args, "project", None)
    if project:
        os.environ[PROJECT_ENV] = str(Path(project).resolve())


def workdir_of(args: argparse.Namespace) -> Path:
    """The command's working directory: `--workdir`, else $CONVEYOR_WORKDIR, else ./.conveyor."""
    from pipelines.core.paths import default_workdir

    return default_workdir(args.workdir)


def load(args: argparse.Namespace, name: str):
    """The spec `name` under the command's `--profile` and `--set`, as a LoadedSpec."""
    from pipelines.core.paths import RunPaths
    from pipelines.spec import loading

    workdir = workdir_of(args)
    loaded = loading.load_spec(name, env=args.profile, overrides=args.set, workdir=workdir)
    # Before anything imports TensorFlow, which picks its gs:// filesystem at import.
    RunPaths(workdir, loaded.spec).configure_storage()
    return loaded
