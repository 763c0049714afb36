"""The benchmarks stand alone: their raw-TFX references live in bench/reference/, and the tests
import nothing from bench/.

bench/reference/ holds Conveyor's own copies of the raw-TFX reference pipelines kept in the shared
benchmark folder beside the repository (`../shared/bench/`). Each copy's header docstring says
what it is; below it the code must stay the original's, so that a figure measured with either is
a figure of the same program. Where the shared folder is not beside the checkout, the comparison
is skipped.
"""

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from pipelines.core.paths import FRAMEWORK_ROOT

BENCH = FRAMEWORK_ROOT / "bench"
REFERENCES = BENCH / "reference"
SHARED_BENCH = FRAMEWORK_ROOT.parent / "shared" / "bench"
REFERENCE_NAMES = [
    "raw_tfx_penguin.py",
    "raw_tfx_datapath.py",
    "raw_tfx_nightly.py",
    "raw_tfx_taxi_module.py",
]


def _code_without_docstring(path: Path) -> str:
    """The file's syntax tree with its module docstring removed, dumped (line numbers left out)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_each_reference_copy_says_what_it_is(name):
    docstring = ast.get_docstring(ast.parse((REFERENCES / name).read_text()))
    assert docstring is not None and docstring.startswith("Conveyor's own copy of the raw-TFX")
    assert f"bench/{name}" in docstring  # names the shared original it was taken from


@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_each_reference_copy_is_the_shared_original_below_its_docstring(name):
    original = SHARED_BENCH / name
    if not original.is_file():
        pytest.skip(f"no shared benchmark folder beside the checkout ({original} is missing)")
    ours = REFERENCES / name
    assert _code_without_docstring(ours) == _code_without_docstring(original), (
        f"{ours.relative_to(FRAMEWORK_ROOT)} is no longer the same program as {original}: "
        "copy the original's code again (only the header docstring may differ)"
    )


def test_docstring_stripping_keeps_every_difference_in_the_code(tmp_path):
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text('"""One docstring."""\nSTEPS = 100\n')
    second.write_text('"""Another, longer\ndocstring."""\n\nSTEPS = 100\n')
    assert _code_without_docstring(first) == _code_without_docstring(second)
    second.write_text('"""One docstring."""\nSTEPS = 101\n')
    assert _code_without_docstring(first) != _code_without_docstring(second)


@pytest.mark.parametrize("script", ["bench_penguin", "bench_datapath"])
def test_benchmarks_run_the_reference_copy_in_the_repository_by_default(script, monkeypatch):
    # The scripts import their sibling `measure`, as they do when run as `python bench/X.py`.
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_{script}_under_test", BENCH / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    siblings = [name for name in ("measure", "results_file") if name not in sys.modules]
    try:
        spec.loader.exec_module(module)
    finally:
        for name in siblings:  # bench's sibling modules, not ones for other tests
            sys.modules.pop(name, None)
    default = module.parse_args([]).raw_script
    assert default.is_file()
    assert default.parent == REFERENCES


def test_no_test_imports_a_bench_module():
    # bench/ itself, and its scripts as top-level modules (what `pythonpath = ["bench"]` allowed).
    bench = {"bench", *(path.stem for path in BENCH.rglob("*.py"))}
    offenders = []
    for path in sorted((FRAMEWORK_ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            offenders += [f"{path.relative_to(FRAMEWORK_ROOT)}: {r}" for r in roots if r in bench]
    assert offenders == []
