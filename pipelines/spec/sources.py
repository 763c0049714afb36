"""Where a module named in a spec lives, found without importing it (a spec never runs code).

Kept apart from `pipelines.core.paths` and the models on purpose: the spec models check trainer
modules and custom components through this, so it imports nothing of Conveyor's.
"""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path

from pipelines.core.project import ProjectNotFound, find_project


class SourceNotFound(ValueError):
    """The module is not on the path, or it has no Python source file."""


def search_path() -> list[str]:
    """The project root first, then `sys.path`: `conveyor` may be started from anywhere, and
    the team's packages in its project must be found as the run will find them (the loader
    puts the root on the import path). Without a project, `sys.path` alone."""
    try:
        root = str(find_project().root)
    except ProjectNotFound:
        return [p for p in sys.path if p]
    return [root, *(p for p in sys.path if p and p != root)]


def _find_spec(name: str, locations: list[str]) -> importlib.machinery.ModuleSpec | None:
    """PathFinder's spec for `name` in `locations`, also inside a namespace package (a folder
    without `__init__.py`): PathFinder then looks the parent up in sys.modules, which holds
    nothing here because nothing is imported, so its folders are searched by hand."""
    try:
        return importlib.machinery.PathFinder.find_spec(name, locations)
    except KeyError:
        pass
    leaf = name.rpartition(".")[2]
    portions = []
    for location in locations:
        folder = Path(location) / leaf
        for candidate in (folder / "__init__.py", Path(location) / f"{leaf}.py"):
            if candidate.is_file():
                is_package = candidate.name == "__init__.py"
                spec = importlib.machinery.ModuleSpec(name, None, origin=str(candidate))
                spec.submodule_search_locations = [str(folder)] if is_package else None
                return spec
        if folder.is_dir():
            portions.append(str(folder))
    if not portions:
        return None
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = portions
    return spec


def find_source(dotted: str) -> Path:
    """The source file of module `dotted`, found without importing it or its packages.

    Raises:
      SourceNotFound: no such module on the path, or it has no Python source.
    """
    source = module_source(dotted)
    if source is None:
        raise SourceNotFound(f"module {dotted!r} has no Python source file (found a namespace)")
    return source


def module_source(dotted: str) -> Path | None:
    """Like `find_source`, but a namespace package (a folder without `__init__.py`, which has no
    source to run) is None rather than an error."""
    locations: list[str] | None = search_path()
    parts = dotted.split(".")
    spec = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        spec = _find_spec(name, list(locations or ()))
        if spec is None:
            where = "on the Python path" if depth == 1 else f"in package {parts[depth - 2]!r}"
            raise SourceNotFound(f"no module {name!r} {where}")
        if depth < len(parts):
            locations = spec.submodule_search_locations
            if locations is None:
                raise SourceNotFound(f"{name!r} is a module, not a package")
    origin = spec.origin if spec is not None else None
    if (
        spec is not None
        and spec.submodule_search_locations is not None
        and not (origin and origin.endswith(".py"))
    ):
        return None
    if not origin or not origin.endswith(".py"):
        raise SourceNotFound(f"module {dotted!r} has no Python source file (found {origin})")
    return Path(origin)
