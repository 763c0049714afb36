"""trainer: Conveyor's Keras trainer over the examples (or the span window)."""

from __future__ import annotations

from pipelines.build.context import BuildContext, code_version

TRAINER_RUN_FN = "components.trainer.run.run_fn"


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds Conveyor's Trainer (`components.trainer.run.run_fn`) and publishes its `model`.

    It trains on the span window when a resolver provides `training_examples`, else on the
    examples; warm-starts from `warm_start_model` when `trainer.warm_start` is set; and runs
    after every gate, so a blocked run never trains. `code_version` in its custom config makes
    a change to the trainer code invalidate the cached model.
    """
    from tfx.proto import trainer_pb2

    from components.trainer.component import Trainer

    trainer = ctx.spec.trainer
    examples_role = "training_examples" if ctx.has("training_examples") else "examples"
    node = Trainer(
        examples=ctx.need(examples_role, node_id),
        schema=ctx.need("schema", node_id),
        statistics=ctx.need("statistics", node_id),
        run_fn=TRAINER_RUN_FN,
        train_args=trainer_pb2.TrainArgs(num_steps=trainer.train_steps),
        eval_args=trainer_pb2.EvalArgs(num_steps=trainer.eval_steps),
        custom_config={
            "trainer": trainer.model_dump(mode="json"),
            "code_version": code_version(),
        },
        base_model=ctx.need("warm_start_model", node_id) if trainer.warm_start else None,
    ).with_id(node_id)
    for gate in ctx.gates:  # a gate that fails stops the run before any training
        node.add_upstream_node(gate)
    ctx.add(node)
    ctx.provide("model", node.outputs["model"])
