"""transform: TFX's Transform with the team's `preprocessing_fn` (`transform.module`)."""

from __future__ import annotations

from pipelines.builder.context import BuildContext, code_version, user_code

# Transform runs Conveyor's wrapper, which imports the team's module at run time and calls its
# preprocessing_fn unchanged, naming the module when it fails.
PREPROCESSING_FN = "components.transform.preprocessing.preprocessing_fn"
# custom_config is part of the execution's properties: the code version in it means a changed
# module is not a cache hit.
CODE_VERSION_KEY = "code_version"


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds TFX's Transform over the examples and schema, running
    `<transform.module>.preprocessing_fn` (through PREPROCESSING_FN), and publishes
    `transform_graph` and `transformed_examples` for the Trainer.

    The module is imported by Transform's executor at run time, not here. Its digest joins the
    node's custom config, so an edit to the module re-runs Transform (and, through its outputs,
    the Trainer); an unchanged module stays a cache hit.
    """
    from tfx.components import Transform

    spec = ctx.spec
    assert spec.transform is not None  # the spec requires it with a transform component
    node = Transform(
        examples=ctx.need("examples", node_id),
        schema=ctx.need("schema", node_id),
        preprocessing_fn=PREPROCESSING_FN,
        custom_config={
            "module": spec.transform.module,
            CODE_VERSION_KEY: code_version(user_code(spec, "transform")),
        },
    ).with_id(node_id)
    for gate in ctx.gates:  # a blocked run never runs the team's code
        node.add_upstream_node(gate)
    ctx.add(node)
    ctx.provide("transform_graph", node.outputs["transform_graph"])
    ctx.provide("transformed_examples", node.outputs["transformed_examples"])
