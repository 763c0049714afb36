"""Every public function, class and method of pipelines/ and components/ has a docstring.

Public: a module-level function or class (also under a module-level `if` or `try`) whose name
does not start with `_`, and the methods, properties and nested classes of a public class whose
names do not. Dunder methods (`__init__`...) and functions nested in functions are left out: the
class docstring says how to build one, and a nested function is not an API. TFX-mandated names
(an executor's `Do`, a resolver strategy's `resolve_artifacts`) are public and documented too.
"""

import ast
from pathlib import Path

from pipelines.core.paths import FRAMEWORK_ROOT

PACKAGES = ("pipelines", "components")

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _top_level(body: list[ast.stmt]):
    """The definitions of a module or class body, looking inside `if` and `try` blocks."""
    for node in body:
        if isinstance(node, _DEFINITIONS):
            yield node
        elif isinstance(node, (ast.If, ast.Try)):
            yield from _top_level(node.body)
            for handler in getattr(node, "handlers", []):
                yield from _top_level(handler.body)
            yield from _top_level(node.orelse)
            yield from _top_level(getattr(node, "finalbody", []))


def undocumented(source: str) -> list[tuple[int, str]]:
    """(line, qualified name) of each public definition in `source` without a docstring."""
    missing = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in _top_level(body):
            if node.name.startswith("_"):
                continue
            name = prefix + node.name
            if not (ast.get_docstring(node) or "").strip():
                missing.append((node.lineno, name))
            if isinstance(node, ast.ClassDef):
                visit(node.body, name + ".")

    visit(ast.parse(source).body, "")
    return missing


def _sources() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (FRAMEWORK_ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def test_every_public_definition_has_a_docstring():
    missing = [
        f"{path.relative_to(FRAMEWORK_ROOT)}:{line} {name}"
        for path in _sources()
        for line, name in undocumented(path.read_text())
    ]
    assert missing == [], "public definitions without a docstring:\n" + "\n".join(missing)


def test_the_walk_covers_both_packages():
    # A wrong root or pattern would find nothing and pass the test above vacuously.
    found = {path.relative_to(FRAMEWORK_ROOT).as_posix() for path in _sources()}
    assert {"pipelines/builder/pipeline.py", "components/pusher/executor.py"} <= found


def test_undocumented_finds_what_it_should_and_only_that():
    source = '''
"""Module docstring."""
import typing

def public(): pass

def _private(): pass

def documented():
    """Yes."""
    def nested(): pass

async def coroutine(): pass

def blank():
    """ """

if typing.TYPE_CHECKING:
    class Guarded: pass

class Shown:
    """Yes."""

    def __init__(self): pass

    def method(self): pass

    @property
    def value(self): pass

    def _helper(self): pass

    class Inner:
        def deep(self): pass

class _Hidden:
    def method(self): pass
'''
    assert undocumented(source) == [
        (5, "public"),
        (13, "coroutine"),
        (15, "blank"),
        (19, "Guarded"),
        (26, "Shown.method"),
        (29, "Shown.value"),
        (33, "Shown.Inner"),
        (34, "Shown.Inner.deep"),
    ]
