"""A team's TFX components, named in a spec's `components` by import path, read without running.

A `components[]` entry may name a component class or an `@component` function
(`component: my_team.components.FilterExamples`). Validating a spec never runs the team's code,
so this module finds the module's source (importlib's path finders, as for `trainer.module`:
no package `__init__` runs), parses it with `ast` and reads the component's inputs, outputs and
parameters, with their types, from what TFX itself reads:

- an `@component` function: its arguments annotated `InputArtifact[X]` (optional with a default
  of None), `OutputArtifact[X]`, `Parameter[T]` (optional with a default); `int`, `float`,
  `str`, `bytes`, `bool` (and `Optional[...]`) are input values (TFX's Integer, Float...);
  `OutputDict(name=T)` as the return annotation adds output values;
- a class: its `SPEC_CLASS`'s `INPUTS`, `OUTPUTS` and `PARAMETERS` dicts of
  `ChannelParameter(type=X)` and `ExecutionParameter(type=T)`; where the class defines
  `__init__`, its arguments are what a spec passes (as TFX's own components take them).

An artifact type is known by name: TFX's standard artifacts (`standard_artifacts.Examples`...)
and classes with a `TYPE_NAME` found in the module or modules it imports from. Where the source
cannot say (a type built at run time, say), the type is left unknown and TFX checks it when the
pipeline is built; where it cannot say what the inputs are at all, the error says so.

Only the builder imports the component, when it builds the pipeline (run, compile). The
module's digest keys the node's cache (see pipelines/builder/custom.py).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.spec import sources
from pipelines.spec.components import Port, Signature

# tfx.types.standard_artifacts' classes; each one's TYPE_NAME is its class name.
STANDARD_ARTIFACTS = frozenset(
    {
        "Boolean",
        "Bytes",
        "Config",
        "DataView",
        "ExampleAnomalies",
        "ExampleStatistics",
        "ExampleValidationMetrics",
        "Examples",
        "ExamplesDiff",
        "ExternalArtifact",
        "Float",
        "HyperParameters",
        "InferenceResult",
        "InfraBlessing",
        "Integer",
        "JsonValue",
        "Model",
        "ModelBlessing",
        "ModelEvaluation",
        "ModelRun",
        "PushedModel",
        "Schema",
        "String",
        "TransformCache",
        "TransformGraph",
        "TunerResults",
    }
)
# A function component's plain annotation: a value passed as an artifact (TFX's function_parser).
PRIMITIVE_ARTIFACTS = {
    "int": "Integer",
    "float": "Float",
    "str": "String",
    "bytes": "Bytes",
    "bool": "Boolean",
}
_JSON_CONTAINERS = {"Dict", "List", "dict", "list"}
# How far `from x import Name` is followed to find a definition.
_MAX_HOPS = 4


class ComponentReadError(ValueError):
    """A named component cannot be found, or its source does not say what it takes and gives."""


def find_source(dotted: str) -> Path:
    """The source file of module `dotted`, found without importing it or its packages
    (`pipelines.spec.sources`, as trainer modules are found).

    Raises:
      ComponentReadError: no such module on the path, or it has no Python source.
    """
    try:
        return sources.find_source(dotted)
    except sources.SourceNotFound as err:
        raise ComponentReadError(str(err)) from None


def _last_name(node: ast.expr) -> str | None:
    """`c` of `a.b.c` or `c`; None for anything else."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


class _Module:
    """One module's source, parsed: its top-level definitions, constants and imports."""

    def __init__(self, dotted: str):
        self.source: Path = find_source(dotted)
        try:
            tree = ast.parse(self.source.read_text(encoding="utf-8"), filename=str(self.source))
        except SyntaxError as err:
            raise ComponentReadError(
                f"{self.source.name} line {err.lineno}: syntax error: {err.msg}"
            ) from None
        self.dotted = dotted
        self.definitions: dict[str, ast.stmt] = {}
        self.values: dict[str, ast.expr] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}  # local name -> (module, name)
        package = dotted if self.source.name == "__init__.py" else dotted.rpartition(".")[0]
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.definitions[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.values[target.id] = node.value
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parent, *([base] if base else [])])
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = (alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = (top, None)

    def imported_module(self, name: str) -> str | None:
        """The module a local `name` stands for (`from pkg import mod`, `import a.b as m`)."""
        if name not in self.imports:
            return None
        module, attribute = self.imports[name]
        return module if attribute is None else f"{module}.{attribute}"


def _load(dotted: str) -> _Module | None:
    try:
        return _Module(dotted)
    except ComponentReadError:
        return None


def _definition(module: _Module, name: str, hops: int = 0) -> tuple[_Module, ast.stmt] | None:
    """Where `name` (as `module` sees it) is defined, following `from x import name`."""
    if name in module.definitions:
        return module, module.definitions[name]
    if name in module.imports and hops < _MAX_HOPS:
        source, attribute = module.imports[name]
        other = _load(source) if attribute is not None else None
        if other is not None:
            return _definition(other, attribute, hops + 1)
    return None


def _resolve(module: _Module, node: ast.expr) -> tuple[_Module, ast.stmt] | None:
    """The class or function an expression (`Name` or `mod.Name`) names, wherever defined."""
    if isinstance(node, ast.Name):
        return _definition(module, node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        dotted = module.imported_module(node.value.id)
        other = _load(dotted) if dotted else None
        if other is not None:
            return _definition(other, node.attr)
    return None


def _string(module: _Module, node: ast.expr, hops: int = 0) -> str | None:
    """A string constant, also by name (`KEY`, `executor.KEY`, imported ones)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if hops >= _MAX_HOPS:
        return None
    if isinstance(node, ast.Name):
        if node.id in module.values:
            return _string(module, module.values[node.id], hops + 1)
        if node.id in module.imports:
            source, attribute = module.imports[node.id]
            other = _load(source) if attribute is not None else None
            if other is not None:
                return _string(other, ast.Name(id=attribute), hops + 1)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        dotted = module.imported_module(node.value.id)
        other = _load(dotted) if dotted else None
        if other is not None:
            return _string(other, ast.Name(id=node.attr), hops + 1)
    return None


def artifact_type(module: _Module, node: ast.expr) -> str | None:
    """The TYPE_NAME of an artifact class expression, or None when the source does not say.

    A class defined in reach (the module, or one it imports the class from) is read for its
    `TYPE_NAME`; otherwise a standard artifact's name stands for itself.
    """
    found = _resolve(module, node)
    if found is not None and isinstance(found[1], ast.ClassDef):
        owner, cls = found
        for statement in cls.body:
            if isinstance(statement, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "TYPE_NAME" for t in statement.targets
            ):
                return _string(owner, statement.value)
        return None
    name = _last_name(node)
    return name if name in STANDARD_ARTIFACTS else None


def _unwrap_optional(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.Subscript) and _last_name(node.value) == "Optional":
        return node.slice
    return node


def _function_signature(module: _Module, function: ast.FunctionDef, path: str) -> Signature:
    """Inputs, outputs and parameters of an `@component` function, as TFX's function_parser
    reads them from its annotations."""
    decorated = any(
        _last_name(d.func if isinstance(d, ast.Call) else d) == "component"
        for d in function.decorator_list
    )
    if not decorated:
        raise ComponentReadError(
            f"{path} is a function without TFX's @component decorator "
            "(tfx.dsl.component.experimental.decorators.component)"
        )
    if function.args.kwonlyargs or function.args.vararg or function.args.kwarg:
        raise ComponentReadError(
            f"{path}: TFX's @component takes plain arguments only (no *args, keyword-only "
            "arguments or **kwargs)"
        )
    arguments = function.args.args
    defaults = {a.arg for a in arguments[len(arguments) - len(function.args.defaults) :]}
    inputs: dict[str, Port] = {}
    outputs: dict[str, Port] = {}
    parameters: dict[str, Port] = {}
    for argument in arguments:
        name, optional = argument.arg, argument.arg in defaults
        if argument.annotation is None:
            raise ComponentReadError(
                f"{path}: argument {name!r} has no annotation; TFX's @component needs "
                "InputArtifact[...], OutputArtifact[...], Parameter[...] or a primitive type"
            )
        annotation = _unwrap_optional(argument.annotation)
        kind = _last_name(annotation.value if isinstance(annotation, ast.Subscript) else annotation)
        inner = annotation.slice if isinstance(annotation, ast.Subscript) else None
        if kind == "InputArtifact" and inner is not None:
            if isinstance(inner, ast.Subscript) and _last_name(inner.value) in {"List", "list"}:
                inner = inner.slice
            inputs[name] = Port(artifact_type(module, inner), optional)
        elif kind in {"OutputArtifact", "AsyncOutputArtifact"} and inner is not None:
            outputs[name] = Port(artifact_type(module, inner))
        elif kind == "Parameter" and inner is not None:
            parameters[name] = Port(_last_name(_unwrap_optional(inner)), optional)
        elif kind == "BeamComponentParameter":
            continue  # TFX passes the Beam pipeline itself
        elif kind in PRIMITIVE_ARTIFACTS and inner is None:
            inputs[name] = Port(PRIMITIVE_ARTIFACTS[kind], optional)
        elif kind in _JSON_CONTAINERS:
            inputs[name] = Port("JsonValue", optional)
        else:
            raise ComponentReadError(
                f"{path}: cannot tell from the source whether argument {name!r} is an input, "
                f"an output or a parameter: its annotation `{ast.unparse(argument.annotation)}` "
                "is none of InputArtifact[...], OutputArtifact[...], Parameter[...] or a "
                "primitive type written out (an alias is only resolved by running the code, "
                "which validation does not do)"
            )
    returns = function.returns
    if isinstance(returns, ast.Call) and _last_name(returns.func) == "OutputDict":
        for keyword in returns.keywords:
            hint = _last_name(_unwrap_optional(keyword.value))
            kind = PRIMITIVE_ARTIFACTS.get(hint or "", "JsonValue")
            outputs[str(keyword.arg)] = Port(kind)
    elif returns is not None and not (isinstance(returns, ast.Constant) and returns.value is None):
        raise ComponentReadError(
            f"{path}: cannot read its return annotation `{ast.unparse(returns)}` from the "
            "source; write the outputs it returns as OutputDict(name=type, ...)"
        )
    return Signature(inputs, outputs, parameters)


_SPEC_DICTS = ("INPUTS", "OUTPUTS", "PARAMETERS")
# name -> (the module it is written in, its type expression, optional)
Entries = dict[str, tuple[_Module, ast.expr | None, bool]]


def _entries(module: _Module, node: ast.expr, label: str, path: str, depth: int) -> Entries:
    """The entries of a spec dict written out in the source: `{KEY: ChannelParameter(type=X,
    optional=True)}`, following `**OtherSpec.INPUTS` and `**NAME` spreads."""
    if isinstance(node, ast.Name) and node.id in module.values and depth < _MAX_HOPS:
        return _entries(module, module.values[node.id], label, path, depth + 1)
    if isinstance(node, ast.Attribute) and node.attr in _SPEC_DICTS and depth < _MAX_HOPS:
        found = _resolve(module, node.value)
        if found is not None and isinstance(found[1], ast.ClassDef):
            return _spec_dicts(found[0], found[1], path, depth + 1)[node.attr]
    if not isinstance(node, ast.Dict):
        raise ComponentReadError(
            f"{path}: {label} is not a dict written out in the source "
            f"(`{ast.unparse(node)[:60]}`), so its entries cannot be read without running the code"
        )
    read: Entries = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None:  # `**spread`
            read.update(_entries(module, value, label, path, depth + 1))
            continue
        name = _string(module, key)
        if name is None:
            raise ComponentReadError(
                f"{path}: {label} has a key `{ast.unparse(key)}` whose value the source does "
                "not give (a string, or a constant assigned one)"
            )
        type_node, optional = None, False
        if isinstance(value, ast.Call):
            type_node = value.args[0] if value.args else None
            for keyword in value.keywords:
                if keyword.arg == "type":
                    type_node = keyword.value
                elif keyword.arg == "optional":
                    optional = isinstance(keyword.value, ast.Constant) and bool(keyword.value.value)
        read[name] = (module, type_node, optional)
    return read


def _spec_dicts(
    module: _Module, spec_class: ast.ClassDef, path: str, depth: int = 0
) -> dict[str, Entries]:
    """The INPUTS, OUTPUTS, PARAMETERS of a ComponentSpec class, each read from its own body or
    else inherited from a base class the source leads to (TFX's ComponentSpec: empty)."""
    read: dict[str, Entries] = {}
    for statement in spec_class.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name) and target.id in _SPEC_DICTS:
                    label = f"{spec_class.name}.{target.id}"
                    read[target.id] = _entries(module, statement.value, label, path, depth)
    for kind in _SPEC_DICTS:
        if kind in read:
            continue
        read[kind] = {}
        for base in spec_class.bases:
            found = _resolve(module, base) if depth < _MAX_HOPS else None
            if found is not None and isinstance(found[1], ast.ClassDef):
                read[kind] = _spec_dicts(found[0], found[1], path, depth + 1)[kind]
                break
    return read


def _class_signature(module: _Module, cls: ast.ClassDef, path: str) -> Signature:
    """Inputs, outputs and parameters of a component class, from its SPEC_CLASS (and, where it
    defines one, its `__init__`, which is what a spec's names are passed to)."""
    spec_node = next(
        (
            s.value
            for s in cls.body
            if isinstance(s, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "SPEC_CLASS" for t in s.targets)
        ),
        None,
    )
    if spec_node is None:
        raise ComponentReadError(
            f"{path} sets no SPEC_CLASS in its own body (it may inherit one, which the source "
            "alone does not show): Conveyor reads a class component's inputs, outputs and "
            "parameters from its SPEC_CLASS"
        )
    found = _resolve(module, spec_node)
    if found is None or not isinstance(found[1], ast.ClassDef):
        raise ComponentReadError(
            f"{path}: its SPEC_CLASS `{ast.unparse(spec_node)}` is not a class defined in its "
            "module or one it imports it from"
        )
    owner, spec_class = found
    read = _spec_dicts(owner, spec_class, path)

    def ports(kind: str, types: str) -> dict[str, Port]:
        made = {}
        for name, (written_in, type_node, optional) in read[kind].items():
            if type_node is None:
                made[name] = Port(None, optional)
            elif types == "artifact":
                made[name] = Port(artifact_type(written_in, type_node), optional)
            else:
                made[name] = Port(_last_name(type_node), optional)
        return made

    inputs, outputs = ports("INPUTS", "artifact"), ports("OUTPUTS", "artifact")
    parameters = ports("PARAMETERS", "python")
    init = next(
        (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
    )
    if init is None or init.args.kwarg is not None:
        return Signature(inputs, outputs, parameters)
    # TFX's own components take their spec's names through `__init__` (its outputs it makes
    # itself); an argument outside the spec is a parameter the class turns into spec values.
    arguments = [*init.args.args[1:], *init.args.kwonlyargs]
    positional_defaults = len(init.args.defaults)
    with_default = {a.arg for a in init.args.args[len(init.args.args) - positional_defaults :]}
    with_default |= {
        a.arg for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults, strict=True) if d
    }
    taken_inputs, taken_parameters = {}, {}
    for argument in arguments:
        name, optional = argument.arg, argument.arg in with_default
        if name in inputs:
            taken_inputs[name] = Port(inputs[name].type, optional)
        elif name not in outputs:
            # The class may turn the value into the spec's (a dict into JSON): the annotation of
            # `__init__` says what it takes.
            hint = (
                _last_name(_unwrap_optional(argument.annotation)) if argument.annotation else None
            )
            taken_parameters[name] = Port(hint if hint in PRIMITIVE_ARTIFACTS else None, optional)
    return Signature(taken_inputs, outputs, taken_parameters)


def read_signature(path: str) -> Signature:
    """The inputs, outputs and parameters of the component at import path `path`
    (`package.module.Name`), read from its source without importing it.

    Raises:
      ComponentReadError: the module or name is not found, or the source does not say.
    """
    module_name, _, name = path.rpartition(".")
    module = _Module(module_name)
    found = _definition(module, name)
    if found is None:
        raise ComponentReadError(
            f"module {module_name!r} defines no class or function {name!r} at its top level"
        )
    owner, node = found
    if isinstance(node, ast.ClassDef):
        return _class_signature(owner, node, path)
    if isinstance(node, ast.FunctionDef):
        return _function_signature(owner, node, path)
    raise ComponentReadError(f"{path} is an async function, not a TFX component")


def signatures_of(components: Sequence[Any]) -> tuple[dict[str, Signature], str | None]:
    """The signature of each entry that names a team's `component`, by node id, and the first
    problem reading one (naming the entry), or None."""
    signatures: dict[str, Signature] = {}
    for index, entry in enumerate(components):
        if getattr(entry, "component", None) is None:
            continue
        try:
            signatures[entry.id] = read_signature(entry.component)
        except ComponentReadError as err:
            return signatures, (
                f"components[{index}] ({entry.id}): component {entry.component!r}: {err}; "
                "see docs/user-code.md#custom-components"
            )
    return signatures, None
