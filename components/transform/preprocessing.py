"""The `preprocessing_fn` Conveyor gives TFX's Transform: the team's, called unchanged.

TFX's Transform is told `components.transform.preprocessing.preprocessing_fn`, with the team's
module in its custom_config. This function imports that module at run time (never when the
spec is validated or built) and returns what its `preprocessing_fn(inputs)` returns, so a
module written for TFX runs as it would in TFX. What this adds is the error: a module that does
not import, lacks `preprocessing_fn`, or raises while Transform traces it stops the run with
one paragraph naming `transform.module` and the module.
"""

from __future__ import annotations

import inspect
from typing import Any

from components.user_code import UserCodeFailure, entry_point, failure

# custom_config keys set by pipelines/builder/nodes/transform.py.
MODULE_KEY = "module"
USER_CONFIG_KEY = "config"
SPEC_KEY = "transform.module"


def preprocessing_fn(inputs: dict[str, Any], custom_config: dict[str, Any]) -> dict[str, Any]:
    """Calls `<custom_config["module"]>.preprocessing_fn(inputs)` (with `custom_config` too
    when it takes one, as TFX does), naming the module when it fails."""
    module = custom_config[MODULE_KEY]
    user_fn = entry_point(SPEC_KEY, module, "preprocessing_fn")
    kwargs = {}
    if "custom_config" in inspect.signature(user_fn).parameters:
        kwargs["custom_config"] = custom_config.get(USER_CONFIG_KEY) or {}
    try:
        return user_fn(inputs, **kwargs)
    except UserCodeFailure:
        raise
    except Exception as err:  # the team's code may raise anything
        raise failure(SPEC_KEY, module, "preprocessing_fn", err) from None
