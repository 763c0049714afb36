"""The house's shape, checked: the packages read spec -> build -> run -> serving -> ops, with no
module importing a later layer, and no import cycles, lazy imports inside functions included."""

import ast
from pathlib import Path

from pipelines.paths import PROJECT_ROOT

# Each layer may import itself and the layers before it (and the shared modules below).
LAYERS = ["spec", "build", "run", "serving", "ops"]
SHARED = {"pipelines.paths", "pipelines.outcome", "pipelines.metadata"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the Conveyor modules it imports anywhere in its body (lazy imports too)."""
    graph = {}
    for path in sorted((PROJECT_ROOT / "pipelines").rglob("*.py")):
        name = _module_name(path)
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                base = node.module
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    if (PROJECT_ROOT / Path(*candidate.split("."))).with_suffix(".py").exists():
                        found.add(candidate)
                    else:
                        found.add(base)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {m for m in found if m.startswith("pipelines")} - {name}
    return graph


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return None


def test_no_module_imports_a_later_layer():
    wrong = []
    for module, imported in _imports().items():
        own = _layer(module)
        if own is None:
            continue
        for other in imported:
            theirs = _layer(other)
            if theirs is not None and theirs > own:
                wrong.append(f"{module} imports {other}")
    assert wrong == []


def test_shared_modules_import_no_layer_but_the_spec():
    graph = _imports()
    for module in SHARED:
        later = [m for m in graph[module] if (_layer(m) or 0) > 0]
        assert later == [], module


def test_no_import_cycles():
    graph = _imports()
    state: dict[str, int] = {}
    cycles = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        for other in sorted(graph.get(module, ())):
            if other not in graph:
                continue
            if state.get(other) == 1:
                cycles.append(stack[stack.index(other) :] + [other])
            elif other not in state:
                visit(other, [*stack, other])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_cli_imports_no_heavy_library_at_module_level():
    tree = ast.parse((PROJECT_ROOT / "pipelines" / "cli.py").read_text())
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in names if m.split(".")[0] in {"tensorflow", "tfx", "apache_beam"}}
