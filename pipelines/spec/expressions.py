"""The expressions of `data.prepare.derive`: checked when a spec loads, evaluated per column.

A derived column is one expression over the source CSV's columns: literals, column names,
arithmetic (+ - * / // % **), comparisons, `and`/`or`/`not`/`&`/`|` (element-wise), and the
functions in `FUNCTIONS`. Anything else (attributes, subscripts, other calls, lambdas,
comprehensions, pandas' `@local` references, dunder names) is refused when the spec is
validated, so a spec, a profile or a `--set` can describe a column but never run code.

The whitelist is written by hand (parse with `ast`, walk an allowed set of nodes) rather than
taken from a library: `pandas.eval` / `DataFrame.eval` (and numexpr behind them) resolve
attributes and `@` locals, which is how a spec could reach `os.system`, and simpleeval evaluates
one scalar at a time and permits attribute access. Evaluation works on whole pandas Series, so
a derived column costs what the same pandas expression costs.

This module imports no TensorFlow or TFX; pandas and numpy only when an expression is evaluated.
"""

from __future__ import annotations

import ast
import functools
import operator
from typing import Any

# Function name -> number of arguments it takes (round: the value, then optional digits).
FUNCTIONS = {
    "abs": (1,),
    "round": (1, 2),
    "log": (1,),
    "sqrt": (1,),
    "exp": (1,),
    "where": (3,),
    "isnull": (1,),
    "notnull": (1,),
}
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_UNARY = (ast.USub, ast.UAdd, ast.Not)
# The operator and context nodes under an allowed node (the operator itself is checked there).
_PARTS = (ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)
# Readable names for what is refused; any other node is named by its class.
_CONSTRUCTS = {
    ast.Subscript: "a subscript",
    ast.Lambda: "a lambda",
    ast.ListComp: "a comprehension",
    ast.SetComp: "a comprehension",
    ast.DictComp: "a comprehension",
    ast.GeneratorExp: "a comprehension",
    ast.JoinedStr: "an f-string",
    ast.NamedExpr: "an assignment (:=)",
    ast.IfExp: "`a if c else b` (use where(c, a, b))",
}


class ExpressionError(ValueError):
    """An expression uses something outside the whitelist, or cannot be evaluated."""


def check(expression: str) -> ast.expr:
    """Parses `expression` and refuses any construct outside the whitelist; returns its tree."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as err:
        if "@" in expression:
            raise ExpressionError("`@name` (a pandas local variable) is not allowed") from None
        raise ExpressionError(f"not a valid expression ({err.msg})") from None
    for node in ast.walk(tree):
        _check_node(node)
    return tree


def _check_node(node: ast.AST) -> None:
    if isinstance(node, ast.Constant):
        if type(node.value) not in (int, float, str, bool):
            raise ExpressionError(f"the literal {node.value!r} is not allowed")
    elif isinstance(node, ast.Name):
        if node.id.startswith("__"):
            raise ExpressionError(f"the dunder name {node.id!r} is not allowed")
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name):
            return  # x.f(), f()(), (lambda: 0)(): the walk refuses what is called
        name = node.func.id
        if name not in FUNCTIONS:
            raise ExpressionError(
                f"calling {name!r} is not allowed (functions: {', '.join(FUNCTIONS)})"
            )
        if node.keywords or len(node.args) not in FUNCTIONS[name]:
            counts = " or ".join(str(n) for n in FUNCTIONS[name])
            raise ExpressionError(f"{name}() takes {counts} positional argument(s)")
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise ExpressionError("*arguments are not allowed")
    elif isinstance(node, ast.BinOp | ast.UnaryOp | ast.Compare | ast.BoolOp):
        ops = node.ops if isinstance(node, ast.Compare) else [node.op]
        for op in ops:
            if type(op) not in (*_BINARY, *_COMPARE, *_UNARY, ast.And, ast.Or):
                raise ExpressionError(f"the operator {type(op).__name__} is not allowed")
    elif isinstance(node, ast.Attribute):
        raise ExpressionError(f"attribute access (.{node.attr}) is not allowed")
    elif not isinstance(node, _PARTS):
        what = _CONSTRUCTS.get(type(node), f"a {type(node).__name__} node")
        raise ExpressionError(f"{what} is not allowed")


def evaluate(expression: str, frame: Any) -> Any:
    """The column `expression` gives over the pandas DataFrame `frame`, as a Series."""
    import pandas as pd

    try:
        result = _evaluate(check(expression), frame)
    except ExpressionError:
        raise
    except Exception as err:  # numpy and pandas raise many kinds for a bad combination
        raise ExpressionError(f"cannot evaluate {expression!r}: {err}") from None
    if not isinstance(result, pd.Series):
        result = pd.Series(result, index=frame.index)  # a constant, or numpy's where()
    return result


def _evaluate(node: ast.expr, frame: Any) -> Any:
    import numpy as np
    import pandas as pd

    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in frame.columns:
            raise ExpressionError(f"no column {node.id!r} (columns: {', '.join(frame.columns)})")
        return frame[node.id]
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, frame)
        if isinstance(node.op, ast.Not):
            return np.logical_not(operand)
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, frame), _evaluate(node.right, frame)
        if isinstance(left, str) or isinstance(right, str):
            if not isinstance(node.op, ast.Add):
                raise ExpressionError("text takes only + and comparisons")
        elif isinstance(node.op, ast.Pow) and not isinstance(left, pd.Series | np.ndarray):
            left = float(left)  # a float power overflows at once; an int one can run for hours
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.BoolOp):
        combine = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
        return functools.reduce(combine, [_evaluate(value, frame) for value in node.values])
    if isinstance(node, ast.Compare):  # a < b < c means (a < b) & (b < c), as in pandas
        operands = [_evaluate(n, frame) for n in (node.left, *node.comparators)]
        results = [
            _COMPARE[type(op)](left, right)
            for op, left, right in zip(node.ops, operands[:-1], operands[1:], strict=True)
        ]
        return functools.reduce(np.logical_and, results)
    assert isinstance(node, ast.Call), ast.dump(node)  # check() allowed nothing else
    args = [_evaluate(arg, frame) for arg in node.args]
    name = node.func.id
    if name == "where":
        return np.where(*args)
    if name == "round":
        return np.round(args[0], int(args[1]) if len(args) > 1 else 0)
    if name in ("isnull", "notnull"):
        return getattr(pd, name)(*args)
    return getattr(np, name)(*args)  # abs, log, sqrt, exp: element-wise ufuncs
