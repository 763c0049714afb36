"""`conveyor new DIR`: writes a team's project, ready for `make pipeline-local` and `make test`.

The project (see `pipelines.core.project`) is written from the template that ships with Conveyor
(`pipelines/ops/project_template/`, package data): the `conveyor.yaml` marker, a starter spec
(penguin, whose data `conveyor data` prepares from the palmerpenguins package, and whose network
is a `build_model` hook in the team's package), the curated schema it names, a `ci` layer with
few steps, a `kubeflow` layer naming the team's image, a test that validates every spec under
every profile and runs each under `ci`, a README and a Makefile. Names in the template are
filled in: `{{name}}` (the folder's name) and `{{package}}` (the team's Python package).

Nothing is overwritten: a folder that exists and is not empty is refused.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent / "project_template"
# Template files named without their dot (package data tools skip dotfiles), and the folder
# "package" is the team's package, named after the project folder.
_RENAMES = {"gitignore": ".gitignore", "dockerignore": ".dockerignore"}
_SUFFIX = ".tmpl"  # Python files in the template are not Conveyor's modules: kept out of its code


class NewProjectError(ValueError):
    """The project cannot be written where asked; the message says why and what to do."""


@dataclass(frozen=True)
class NewProject:
    """What `write_project` wrote: the project's root and the files, relative to it."""

    root: Path
    package: str
    files: tuple[str, ...]


def package_name(folder: Path) -> str:
    """The team's package name from the project folder's name: lower case, `_` for anything not
    a letter or digit, `_` first if it would start with a digit or be a keyword (`my-team` ->
    `my_team`, `2026 models` -> `_2026_models`)."""
    name = re.sub(r"[^0-9a-zA-Z]+", "_", folder.name).strip("_").lower() or "team"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = "_" + name
    # Names a project already uses for something else, or that would shadow Conveyor's own.
    if name in {"specs", "configs", "schemas", "tests", "pipelines", "components", "data"}:
        name += "_modules"
    return name


def write_project(target: str | Path) -> NewProject:
    """Writes a new project into `target` (created; it may exist only if empty).

    Raises:
      NewProjectError: `target` is a file, or a folder that is not empty.
    """
    root = Path(target).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise NewProjectError(f"{root} is a file; `conveyor new` writes a project into a folder.")
    if root.is_dir() and any(root.iterdir()):
        raise NewProjectError(
            f"{root} is not empty, and `conveyor new` writes only into a new or empty folder, "
            "so that nothing there is overwritten. Name a new folder, or, to add a pipeline to "
            "an existing project, run `conveyor init NAME --csv FILE --label COLUMN` inside it."
        )
    package = package_name(root)
    values = {
        "{{name}}": root.name,
        "{{package}}": package,
        "{{pad}}": " " * max(0, 15 - len(package)),
    }
    written = []
    for source in sorted(p for p in TEMPLATE_DIR.rglob("*") if p.is_file()):
        if "__pycache__" in source.parts:
            continue
        relative = source.relative_to(TEMPLATE_DIR)
        parts = [package if part == "package" else part for part in relative.parts]
        parts[-1] = _RENAMES.get(parts[-1], parts[-1]).removesuffix(_SUFFIX)
        destination = root.joinpath(*parts)
        text = source.read_text()
        for token, value in values.items():
            text = text.replace(token, value)
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(text)
        written.append(str(destination.relative_to(root)))
    return NewProject(root=root, package=package, files=tuple(written))
