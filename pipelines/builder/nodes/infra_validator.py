"""infra_validator: serves the blessed candidate in a fresh model server before the Pusher may
push it (components/infra_validator)."""

from __future__ import annotations

from pipelines.builder.context import BuildContext


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds the InfraValidator over the candidate, its blessing and the examples (canary requests
    come from their `eval` split), with the spec's `push` settings, and publishes its
    `infra_blessing` for the Pusher. It builds the same for every orchestrator; the model server
    is the one `push.infra_server` names (by default Conveyor's own, a child process of the
    component's executor: no Docker, and on Kubeflow in the component's container)."""
    from components.infra_validator.component import InfraValidator

    push = ctx.spec.push
    node = InfraValidator(
        model=ctx.need("model", node_id),
        model_blessing=ctx.need("blessing", node_id),
        examples=ctx.need("examples", node_id),
        model_name=push.model_name,
        latency_budget_ms=push.latency_budget_ms,
        canary_requests=push.canary_requests,
        start_timeout_seconds=push.infra_start_timeout_seconds,
        infra_server=server_choice(ctx.spec).to_json(),
    ).with_id(node_id)
    ctx.add(node)
    ctx.provide("infra_blessing", node.outputs["blessing"])


def server_choice(spec):
    """The `ServerChoice` of `push.infra_server`; for `kubernetes`, with the image and resources
    `conveyor deploy render` serves with (`push.deploy`)."""
    from components.infra_validator.runners.base import KUBERNETES, ServerChoice

    server, deploy = spec.push.infra_server, spec.push.deploy
    if server.kind.value != KUBERNETES:
        return ServerChoice(kind=server.kind.value, binary_path=server.binary_path)
    return ServerChoice(
        kind=KUBERNETES,
        namespace=server.namespace,
        image=deploy.image,
        cpu=deploy.resources.cpu,
        memory=deploy.resources.memory,
        gpu=deploy.resources.gpu,
    )
