"""User code a spec names by import path: found, read and classified without running it.

A spec may name a team's own Python module (`trainer.module`, `transform.module`). The module is
code the team keeps in its repository (or an installed package), never in the spec: the spec
only says where it is. Validating a spec must not run that code, so this module finds the
module's source file with importlib's path finders (which read directories, not modules; the
parent packages' `__init__.py` files are not executed either), parses it with `ast`, and decides
from its top-level names which contract it follows:

- `run_fn`: TFX's contract. TFX's own Trainer (GenericExecutor) calls `run_fn(fn_args)`.
- `build_model`: Conveyor's hook. Conveyor's trainer calls `build_model(inputs, spec)` for the
  network between its feature layer and its output head.
- `preprocessing_fn`: TFX Transform's contract (`transform.module`).

Only the Trainer and Transform components import (execute) the module, at run time. Its digest
(see `code_digest`) joins the trained model's code version, so an edit re-trains and an
unchanged module stays a cache hit.

This module imports no TensorFlow or TFX.
"""

from __future__ import annotations

import ast
import enum
import hashlib
from pathlib import Path

from pipelines.spec import sources
from pipelines.spec.sources import PROJECT_ROOT


class UserCodeError(ValueError):
    """A module a spec names cannot be found, parsed, or does not follow a known contract."""


class Contract(str, enum.Enum):
    """What a `trainer.module` provides, and so which trainer runs it."""

    TFX_RUN_FN = "run_fn"
    CONVEYOR_HOOK = "build_model"


# Top-level name -> contract. A module defining both is ambiguous and refused.
TRAINER_ENTRY_POINTS = {"run_fn": Contract.TFX_RUN_FN, "build_model": Contract.CONVEYOR_HOOK}
TRANSFORM_ENTRY_POINT = "preprocessing_fn"


def find_source(dotted: str) -> Path:
    """The source file of module `dotted`, found without importing it or its packages.

    Raises:
      UserCodeError: when no such module is on the path, or it has no Python source.
    """
    try:
        return sources.find_source(dotted)
    except sources.SourceNotFound as err:
        raise UserCodeError(str(err)) from None


def top_level_names(source: Path) -> set[str]:
    """The names a module binds at its top level: functions, classes, assignments, imports.

    Raises:
      UserCodeError: when the file does not parse (the message gives the line).
    """
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except SyntaxError as err:
        raise UserCodeError(f"{source.name} line {err.lineno}: syntax error: {err.msg}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserCodeError(f"cannot read {source}: {err}") from None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def trainer_contract(dotted: str) -> Contract:
    """Which contract module `dotted` follows: it binds `run_fn` or `build_model`, not both.

    Raises:
      UserCodeError: not found, does not parse, neither or both entry points.
    """
    names = top_level_names(find_source(dotted))
    found = [contract for name, contract in TRAINER_ENTRY_POINTS.items() if name in names]
    if len(found) == 1:
        return found[0]
    if not found:
        raise UserCodeError(
            f"module {dotted!r} defines neither `run_fn` (TFX's Trainer contract: "
            "run_fn(fn_args)) nor `build_model` (Conveyor's hook: build_model(inputs, spec)) "
            "at its top level"
        )
    raise UserCodeError(
        f"module {dotted!r} defines both `run_fn` and `build_model`: keep one, so it is clear "
        "which trainer runs it"
    )


def check_transform_module(dotted: str) -> None:
    """Module `dotted` binds `preprocessing_fn` at its top level, as TFX's Transform needs.

    Raises:
      UserCodeError: not found, does not parse, or no `preprocessing_fn`.
    """
    if TRANSFORM_ENTRY_POINT not in top_level_names(find_source(dotted)):
        raise UserCodeError(
            f"module {dotted!r} defines no `preprocessing_fn` at its top level (TFX Transform "
            "calls preprocessing_fn(inputs))"
        )


def _package_files(source: Path, dotted: str) -> list[Path]:
    """The .py files that make up a user module: those of its top package, or only its own
    folder's for a module inside an installed distribution (whose version pins the rest)."""
    depth = dotted.count(".")
    if depth == 0:
        return [source]
    top = source.parents[depth - 1] if source.name != "__init__.py" else source.parents[depth]
    if {"site-packages", "dist-packages"} & set(top.parts):
        return sorted(source.parent.glob("*.py"))
    return sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts)


def _installed_version(dotted: str) -> str:
    from importlib import metadata

    top = dotted.split(".")[0]
    names = metadata.packages_distributions().get(top, [])
    versions = []
    for name in sorted(set(names)):
        try:
            versions.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ",".join(versions)


def code_digest(dotted: str) -> str:
    """SHA-256 (hex) over the source files of module `dotted`'s package, by path and bytes.

    For a module of the project (or any folder on the path): every .py file under its top
    package, so an edit to a helper it imports also re-trains. For a module inside an installed
    distribution: its own folder's .py files plus the distribution's version.
    """
    source = find_source(dotted)
    files = _package_files(source, dotted)
    digest = hashlib.sha256(dotted.encode())
    base = source.parents[dotted.count(".")] if dotted.count(".") else source.parent
    for path in files:
        try:
            relative = path.relative_to(base)
        except ValueError:
            relative = Path(path.name)
        digest.update(str(relative).encode())
        digest.update(path.read_bytes())
    if {"site-packages", "dist-packages"} & set(source.parts):
        digest.update(_installed_version(dotted).encode())
    return digest.hexdigest()


def saved_model_digest(path: Path) -> str:
    """SHA-256 (hex) over a SavedModel folder's files (an embedding module's graph and weights),
    so a replaced module re-trains like edited code."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def embedding_path(module: str) -> Path:
    """An `embedding.module` folder as a path: relative ones are under the project root."""
    path = Path(module)
    return path if path.is_absolute() else PROJECT_ROOT / path


def spec_problem(spec) -> tuple[str, str] | None:
    """The first user-code problem of a validated spec, as (spec key, one-paragraph message),
    or None: `trainer.module` and `transform.module` found, parsed and following their contract
    (neither is imported), and each text feature's embedding a SavedModel on disk."""
    trainer_module = spec.trainer.module
    if trainer_module is not None:
        try:
            contract = trainer_contract(trainer_module)
        except UserCodeError as err:
            return "trainer.module", f"trainer.module {trainer_module!r}: {err}."
        if spec.transform is not None and contract is Contract.CONVEYOR_HOOK:
            return "trainer.module", (
                f"trainer.module {trainer_module!r} is a build_model hook, which trains on "
                "Conveyor's feature layer over raw columns; with `transform` the trainer must "
                "be a TFX run_fn module that reads Transform's output."
            )
    if spec.transform is not None:
        try:
            check_transform_module(spec.transform.module)
        except UserCodeError as err:
            return "transform.module", f"transform.module {spec.transform.module!r}: {err}."
    for index, feature in enumerate(spec.trainer.features):
        if feature.embedding is None:
            continue
        folder = embedding_path(feature.embedding.module)
        if not (folder / "saved_model.pb").is_file():
            key = f"trainer.features[{index}].embedding.module"
            return key, (
                f"{key}: {feature.embedding.module!r} is not a SavedModel folder (no "
                f"saved_model.pb in {folder}); save the module there (tf.saved_model.save) "
                "or point at one on disk: nothing is downloaded."
            )
    return None
