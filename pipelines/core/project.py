"""A team's project: the directory holding its specs, profile layers, schemas and modules.

Conveyor (the framework) is installed as a package; a project is any directory with a marker
file, `conveyor.yaml`, at its root:

    conveyor.yaml      the marker (its content is for the team: a comment is enough)
    specs/NAME.yaml    one pipeline each
    configs/ENV.yaml   profile layers over Conveyor's own profile of the same name, or new ones
    schemas/           curated schemas the specs name (`schema.path`, relative to the root)
    <packages>/        the team's modules (trainer modules, custom components): the root is put
                       on the import path, so a spec names them by import path
    requirements.lock  optional: the team's pinned environment, part of every fingerprint

The project is found when a command needs it, never at import: `$CONVEYOR_PROJECT` (which the
command line's `--project DIR` sets) names it, else the nearest `conveyor.yaml` from the current
directory upwards. The Airflow DAG file and the pipeline image set `CONVEYOR_PROJECT` too, so
every orchestrator finds the project the same way.

This module imports nothing of Conveyor's: every layer, executors included, may use it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MARKER = "conveyor.yaml"
PROJECT_ENV = "CONVEYOR_PROJECT"


class ProjectNotFound(ValueError):
    """No project where the command looked; the message says where it looked and what to do."""


@dataclass(frozen=True)
class Project:
    """One project's root and the folders Conveyor reads in it."""

    root: Path

    @property
    def marker(self) -> Path:
        """`<root>/conveyor.yaml`, whose presence makes the folder a project."""
        return self.root / MARKER

    @property
    def specs_dir(self) -> Path:
        """`<root>/specs`: one `NAME.yaml` per pipeline."""
        return self.root / "specs"

    @property
    def configs_dir(self) -> Path:
        """`<root>/configs`: the project's profile layers, `ENV.yaml` each."""
        return self.root / "configs"

    @property
    def schemas_dir(self) -> Path:
        """`<root>/schemas`: the curated schemas its specs name."""
        return self.root / "schemas"

    @property
    def lock_file(self) -> Path:
        """`<root>/requirements.lock`: the team's pinned environment, when it keeps one."""
        return self.root / "requirements.lock"

    def file(self, relative: str | os.PathLike) -> Path:
        """A path a spec gives relative to the project (a curated schema, say), made absolute;
        an absolute path stays as it is."""
        return self.root / str(relative)

    def relative(self, path: str | os.PathLike) -> str:
        """`path` written relative to the project root when it lies inside it (for messages)."""
        try:
            return str(Path(path).resolve().relative_to(self.root))
        except ValueError:
            return str(path)

    def put_on_import_path(self) -> None:
        """Makes the team's modules importable by the names its specs give: the root goes first
        on `sys.path` (once), so the run imports the modules `conveyor validate` read."""
        root = str(self.root)
        if root not in sys.path:
            sys.path.insert(0, root)


def find_project(
    start: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None
) -> Project:
    """The project a command works on: `$CONVEYOR_PROJECT` when set, else the nearest folder
    holding `conveyor.yaml` from `start` (default: the current directory) upwards.

    Raises:
      ProjectNotFound: `$CONVEYOR_PROJECT` names no project, or no `conveyor.yaml` is found;
        one paragraph saying where Conveyor looked and how to make or name a project.
    """
    environ = os.environ if environ is None else environ
    named = environ.get(PROJECT_ENV)
    if named:
        root = Path(named).expanduser().resolve()
        if not (root / MARKER).is_file():
            raise ProjectNotFound(
                f"{PROJECT_ENV}={named} (set by --project, or in the environment) is not a "
                f"Conveyor project: {root / MARKER} does not exist. Name a folder holding "
                f"{MARKER}, or create a project with `conveyor new DIR`."
            )
        return Project(root)
    here = Path(start if start is not None else os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MARKER).is_file():
            return Project(folder)
    raise ProjectNotFound(
        f"no Conveyor project here: no {MARKER} in {here} or any folder above it, and "
        f"{PROJECT_ENV} is not set. Run the command inside a project, name one with "
        f"`conveyor --project DIR ...` (or {PROJECT_ENV}=DIR), or create one with "
        "`conveyor new DIR`."
    )
