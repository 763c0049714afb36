"""Building a spec's `components[]` entries beyond the table's plain case: a team's TFX
component named by import path (`component:`), and any entry's `inputs` that name a channel
(`node_id.output_name`, or a role) instead of taking its roles from the nodes before it.

The spec checked the wiring when it was validated, from the team's source, without running it
(`pipelines.spec.custom_components`); here the component is imported and built, so a failure
here is the team's code failing to import or refusing what the spec passes, named by entry.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

from pipelines.builder.context import BuildContext, BuildError

# The flag that carries the team's code digest in the node's executor spec, which TFX's cache
# key includes: an edited component re-runs, an unchanged one stays a cache hit.
CODE_VERSION_FLAG = "--conveyor_code_version"


def _where(index: int, entry: Any) -> str:
    return f"components[{index}] ({entry.id})"


def channel_of(ctx: BuildContext, index: int, entry: Any, reference: str) -> Any:
    """The channel `reference` (`node_id.output_name`, or a role) names for entry `index`."""
    node, dot, output = reference.partition(".")
    if not dot:
        return ctx.need(reference, entry.id)
    built = ctx.outputs.get(node)
    if not built:  # a resolver Kubeflow builds no node for, say
        how = ctx.notes.get(node, "it built no node")
        raise BuildError(
            f"{_where(index, entry)}: input {reference!r}: node {node!r} has no outputs for "
            f"{ctx.target.value} ({how})."
        )
    if output not in built:
        raise BuildError(
            f"{_where(index, entry)}: input {reference!r}: node {node!r} published no "
            f"{output!r} for {ctx.target.value} (it published {', '.join(built) or 'nothing'})."
        )
    return built[output]


@contextlib.contextmanager
def inputs_overlay(ctx: BuildContext, index: int, entry: Any) -> Iterator[None]:
    """While a built-in builds, the roles its `inputs` map read the channels they name; after
    it, the roles are as before unless the built-in published them itself."""
    overlay = {role: channel_of(ctx, index, entry, ref) for role, ref in entry.inputs.items()}
    before = {role: ctx.channels.get(role) for role in overlay}
    ctx.channels.update(overlay)
    try:
        yield
    finally:
        for role, channel in overlay.items():
            if ctx.channels.get(role) is not channel:
                continue  # published anew by the built-in
            if before[role] is None:
                ctx.channels.pop(role, None)
            else:
                ctx.channels[role] = before[role]


def _import(index: int, entry: Any) -> Any:
    """The component class or `@component` function the entry names, imported now."""
    module_name, _, name = entry.component.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # the team's code may raise anything while importing
        raise BuildError(
            f"{_where(index, entry)}: component {entry.component!r}: module {module_name!r} "
            f"failed to import: {type(err).__name__}: {' '.join(str(err).split())[:600]}. "
            "Nothing was run; fix the module (code in the team's repository) and run again."
        ) from None
    found = getattr(module, name, None)
    if found is None:
        raise BuildError(f"{_where(index, entry)}: module {module_name!r} has no {name!r}.")
    return found


def _instantiate(factory: Any, arguments: dict[str, Any]) -> Any:
    """`factory(**arguments)`; a class that keeps BaseComponent's `__init__(spec)` gets its
    SPEC_CLASS built from them, with an output channel per OUTPUTS entry."""
    from tfx.dsl.components.base import base_component
    from tfx.types import Channel

    own_init = None
    if isinstance(factory, type):
        own_init = next((c for c in factory.__mro__ if "__init__" in vars(c)), None)
    if own_init is not None and own_init.__module__.startswith("tfx.dsl.components.base."):
        assert issubclass(factory, base_component.BaseComponent)
        spec_class = factory.SPEC_CLASS
        outputs = {key: Channel(type=p.type) for key, p in spec_class.OUTPUTS.items()}
        return factory(spec=spec_class(**arguments, **outputs))
    return factory(**arguments)


def build_custom(ctx: BuildContext, index: int, entry: Any) -> None:
    """Adds the team's component of entry `index`: its `inputs` as channels, its `params`, after
    every gate built before it (a blocked run never runs the team's code), keyed for TFX's cache
    by its module's digest; records its outputs and publishes those it `provides` by role."""
    from pipelines.spec.user_code import code_digest

    factory = _import(index, entry)
    arguments = {name: channel_of(ctx, index, entry, ref) for name, ref in entry.inputs.items()}
    arguments.update(entry.params)
    try:
        node = _instantiate(factory, arguments)
    except Exception as err:  # TFX's own checks of the inputs' types and parameters' values
        raise BuildError(
            f"{_where(index, entry)}: component {entry.component!r} refused its inputs or "
            f"params: {' '.join(str(err).split())}"
        ) from None
    node = node.with_id(entry.id)
    module_name = entry.component.rpartition(".")[0]
    if hasattr(node.executor_spec, "add_extra_flags"):
        node.executor_spec.add_extra_flags([f"{CODE_VERSION_FLAG}={code_digest(module_name)[:16]}"])
    for gate in ctx.gates:
        node.add_upstream_node(gate)
    ctx.add(node)
    ctx.outputs[entry.id] = dict(node.outputs)
    for role, output in entry.provides.items():
        ctx.provide(role, node.outputs[output])
