"""The house's shape, checked over every package: one order of layers, no module importing a
later layer, no import cycles (lazy imports inside functions included), and executors that
never reach up into operations, runners or the command line.

The order, lowest first (docs/architecture.md says what each holds):

    pipelines.core             paths, outcomes and reason codes, ML Metadata access
    pipelines.spec             what a pipeline is: the strict, frozen spec
    pipelines.datasets         packaged and generated data (`conveyor data`)
    pipelines.serving_state    serving state: versions, models.config, labels, hold, reconcile
    pipelines.finish           the end of a run: outcome record, summary, report, metrics, alert
    components                 TFX components: executors run inside any orchestrator's task
    pipelines.builder          spec -> tfx.dsl.Pipeline
    pipelines.run              orchestrators: local, Airflow, Kubeflow, compile
    pipelines.serving          the model server and serving manifests
    pipelines.ops              what surrounds runs: the nightly loop, the end of a run, reports
    pipelines.cli              the `conveyor` command
    monitoring, bench          generated dashboards and benchmarks, on top of everything

Imports inside `if TYPE_CHECKING:` are annotations only and do not count.
"""

import ast
from pathlib import Path

from pipelines.core.paths import FRAMEWORK_ROOT

LAYERS = [
    "pipelines.core",
    "pipelines.spec",
    "pipelines.datasets",
    "pipelines.serving_state",
    "pipelines.finish",
    "components",
    "pipelines.builder",
    "pipelines.run",
    "pipelines.serving",
    "pipelines.ops",
    "pipelines.cli",
    "monitoring",
    "bench",
]
PACKAGES = ("pipelines", "components", "monitoring", "bench")
# What no executor (anything under components/) may import, even lazily.
ABOVE_EXECUTORS = ("pipelines.ops", "pipelines.run", "pipelines.cli", "pipelines.serving")


def _module_name(path: Path) -> str:
    parts = path.relative_to(FRAMEWORK_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _imports() -> dict[str, set[str]]:
    """Module -> the Conveyor modules it imports anywhere in its body (lazy imports too)."""
    graph = {}
    for package in PACKAGES:
        for path in sorted((FRAMEWORK_ROOT / package).rglob("*.py")):
            name = _module_name(path)
            tree = ast.parse(path.read_text())
            skipped = _type_checking_nodes(tree)
            found = set()
            for node in ast.walk(tree):
                if id(node) in skipped:
                    continue
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    base = node.module
                    for alias in node.names:
                        candidate = f"{base}.{alias.name}"
                        as_file = FRAMEWORK_ROOT / Path(*candidate.split("."))
                        if as_file.with_suffix(".py").exists() or as_file.is_dir():
                            found.add(candidate)
                        else:
                            found.add(base)
                elif isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
            graph[name] = {m for m in found if m.split(".")[0] in PACKAGES} - {name}
    return graph


def _layer(module: str) -> int | None:
    for index, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return index
    return None


def test_every_module_has_a_layer():
    assert [m for m in _imports() if _layer(m) is None and m not in PACKAGES] == []


def test_no_module_imports_a_later_layer():
    wrong = []
    for module, imported in _imports().items():
        own = _layer(module)
        for other in imported:
            theirs = _layer(other)
            if own is not None and theirs is not None and theirs > own:
                wrong.append(f"{module} imports {other}")
    assert sorted(wrong) == []


def test_no_executor_imports_operations_runners_or_the_cli():
    wrong = [
        f"{module} imports {other}"
        for module, imported in _imports().items()
        if module.startswith("components.")
        for other in imported
        # By whole package names: pipelines.serving_state is not pipelines.serving.
        if any(other == above or other.startswith(above + ".") for above in ABOVE_EXECUTORS)
    ]
    assert wrong == []


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
    modules = sorted((FRAMEWORK_ROOT / "pipelines" / "cli").rglob("*.py"))
    assert len(modules) > 1  # the package, not one file
    heavy = []
    for path in modules:
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
        heavy += [
            f"{_module_name(path)} imports {m}"
            for m in sorted(names)
            if m.split(".")[0] in {"tensorflow", "tfx", "apache_beam"}
        ]
    assert heavy == []
