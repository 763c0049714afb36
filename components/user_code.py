"""Running the team's code (`trainer.module`, `transform.module`) inside a component, with a
failure reported as one paragraph naming the spec key and the module, not a stack of ours."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


class UserCodeFailure(RuntimeError):
    """The team's module failed to import, lacks its entry point, or raised while running."""


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    if len(text) > 600:  # TensorFlow puts its stack first and the cause last: keep both ends
        text = f"{text[:150]} ... {text[-450:]}"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def entry_point(key: str, module: str, name: str) -> Callable[..., Any]:
    """`module.name`, imported (executed) now.

    Raises:
      UserCodeFailure: naming `key` and `module`, when the import fails or `name` is missing.
    """
    try:
        imported = importlib.import_module(module)
    except Exception as err:  # the team's code may raise anything while importing
        raise UserCodeFailure(
            f"{key} {module!r} failed to import: {_one_line(err)}. Nothing was pushed; fix the "
            "module (it is code in the team's repository) and run again."
        ) from None
    found = getattr(imported, name, None)
    if not callable(found):
        raise UserCodeFailure(
            f"{key} {module!r} has no callable `{name}`. Nothing was pushed."
        ) from None
    return found


def failure(key: str, module: str, name: str, err: BaseException) -> UserCodeFailure:
    """The one-paragraph error for `module.name` (the spec's `key`) raising `err`."""
    return UserCodeFailure(
        f"{key} {module!r}: {name} raised {_one_line(err)}. Nothing was pushed; the error is "
        "in the team's module, not in Conveyor."
    )
