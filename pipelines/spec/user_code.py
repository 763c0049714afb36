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

from pipelines.core.project import find_project
from pipelines.spec import sources


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


def _imported_names(source: Path, dotted: str) -> set[str]:
    """Absolute names of the modules `source` (module `dotted`) imports, at any depth of its code
    (a lazy import inside a function counts), relative imports resolved. `from a import b`
    yields both `a` and `a.b`, since `b` may be a submodule; names that are not modules are
    dropped by the caller when no source is found for them."""
    try:
        tree = ast.parse(source.read_bytes(), filename=str(source))
    except (SyntaxError, ValueError):
        return set()  # its bytes are still digested; there is nothing to follow
    package = dotted if source.name == "__init__.py" else dotted.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                module = f"{base}.{node.module}" if node.module and base else node.module or base
            else:
                module = node.module or ""
            if module:
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _module_files(dotted: str) -> dict[str, Path]:
    """The source files a run of module `dotted` executes from its own top package, by module
    name: the module, the modules of that package it imports (transitively), and the
    `__init__.py` of every package on the way, which an import runs too.

    Modules of other top packages are not followed: an installed library is pinned by the
    environment (tfx and tensorflow by the lock), and a project's other packages are named
    in the spec themselves when they are user code. A module loaded by a computed name
    (importlib.import_module(variable)) cannot be seen and is not covered.
    """
    top = dotted.split(".")[0]
    found: dict[str, Path] = {}
    pending = [dotted]
    while pending:
        name = pending.pop()
        parts = name.split(".")
        # The packages on the way first: `import a.b.c` runs a/__init__.py and a/b/__init__.py.
        for depth in range(1, len(parts) + 1):
            prefix = ".".join(parts[:depth])
            if prefix in found:
                continue
            try:
                path = sources.module_source(prefix)
            except sources.SourceNotFound:
                break  # not a module (an attribute of one) or not on the path
            if path is None:
                continue  # a namespace package: a folder, no code of its own
            found[prefix] = path
            pending.extend(n for n in _imported_names(path, prefix) if n.split(".")[0] == top)
    return found


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
    """SHA-256 (hex) over the source files a run of module `dotted` executes, by name and bytes.

    For a module of the project (or any folder on the path): the module, and the modules of its
    own top package that it imports, directly or through each other (see `_module_files`), so an
    edit to a helper it imports re-trains while an edit elsewhere in the package does not. For a
    module inside an installed distribution: its own file and the distribution's version.
    """
    source = find_source(dotted)
    installed = bool({"site-packages", "dist-packages"} & set(source.parts))
    # An installed distribution's version pins the rest of it; its imports are not followed.
    files = {dotted: source} if installed else _module_files(dotted)
    digest = hashlib.sha256(dotted.encode())
    for name in sorted(files):
        digest.update(name.encode())
        digest.update(files[name].read_bytes())
    if installed:
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
    return path if path.is_absolute() else find_project().root / path


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
        if contract is Contract.TFX_RUN_FN and spec.trainer.profile_steps is not None:
            return "trainer.profile_steps", (
                f"trainer.profile_steps: trainer.module {trainer_module!r} is a run_fn module, "
                "which runs its own fit; profile there instead (keras.callbacks.TensorBoard("
                "fn_args.model_run_dir, profile_batch=(start, end)) in its callbacks)."
            )
        tuning_problem = _tuning_problem(spec, trainer_module, contract)
        if tuning_problem:
            return tuning_problem
        if spec.transform is not None and contract is Contract.CONVEYOR_HOOK:
            return "trainer.module", (
                f"trainer.module {trainer_module!r} is a build_model hook, and the spec sets "
                f"`transform` ({spec.transform.module!r}): the two cannot be combined. The hook "
                "builds only the network on top of Conveyor's feature layer, which encodes the "
                "raw columns from the statistics; a preprocessing_fn is a feature layer of its "
                "own, and what it outputs (any names, dtypes and shapes, integers that may be "
                "vocabulary ids, buckets or counts, the label renamed or encoded) is known only "
                "to its code, so Conveyor cannot turn it into the hook's input vector or find "
                "the label in it. Either drop `transform` (the hook's network then sits on "
                "Conveyor's feature layer), or make trainer.module a TFX run_fn module that "
                "builds its network over Transform's output, as TFX's penguin module "
                "(tfx.examples.penguin.penguin_utils_keras) does."
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


def _tuning_problem(spec, module: str, contract: Contract) -> tuple[str, str] | None:
    """With a `tuner` component and a trainer module: a run_fn module must bind `tuner_fn`
    (TFX's Tuner runs it unchanged, with its own search space), and a build_model hook builds
    the network, so only the learning rate is Conveyor's to search."""
    if spec.tuning is None:
        return None
    space = spec.tuning.search_space
    if contract is Contract.TFX_RUN_FN:
        if "tuner_fn" not in top_level_names(find_source(module)):
            return "trainer.module", (
                f"trainer.module {module!r} defines no `tuner_fn` at its top level, which a "
                "`tuner` component runs for a run_fn module (TFX's contract: tuner_fn(fn_args) "
                "returning a TunerFnResult); add one, or remove the `tuner` component."
            )
        if space:
            return "tuning.search_space", (
                f"tuning.search_space: trainer.module {module!r} is a run_fn module whose "
                "tuner_fn defines its own search space; leave tuning.search_space empty."
            )
    else:
        extra = sorted(set(space) - {"learning_rate"})
        if extra:
            return "tuning.search_space", (
                f"tuning.search_space: {extra} shape Conveyor's dense stack, which trainer.module "
                f"{module!r} (a build_model hook) replaces; search learning_rate only."
            )
    return None
