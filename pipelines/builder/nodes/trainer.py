"""trainer: Conveyor's Keras trainer over the examples (or the span window), or TFX's Trainer
running the team's own `run_fn` module (`trainer.module`)."""

from __future__ import annotations

from components.trainer.cluster import CLUSTER_KEY, check_launch, launch_config
from pipelines.builder.context import BuildContext, code_version, user_code
from pipelines.spec.checks import ProfileError
from pipelines.spec.models import Orchestrator

TRAINER_RUN_FN = "components.trainer.run.run_fn"


def _user_code_label(found: dict[str, str]) -> str:
    """`module@digest` entries, comma-separated: what lineage shows for the user code."""
    return ",".join(f"{name}@{digest}" for name, digest in sorted(found.items()))


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds the Trainer and publishes its `model`.

    Without `trainer.module`, or with a `build_model` hook module, it is Conveyor's Trainer
    (`components.trainer.run.run_fn`): it trains on the span window when a resolver provides
    `training_examples`, else on the examples, and warm-starts from `warm_start_model` when
    `trainer.warm_start` is set. With a `run_fn` module it is TFX's Trainer running that
    `run_fn` with TFX's FnArgs (`trainer.config` as its custom_config; Transform's examples and
    graph when a transform node runs). Either way it runs after every gate, so a blocked run
    never trains, and the code version (Conveyor's components plus the user code's digest)
    keys its cache, so an edit re-trains and an unchanged module stays a cache hit. On
    Kubeflow with `runtime.training.launcher` tfjob or vertex, Conveyor's Trainer task launches
    its replicas as that job (its custom_config carries what the launch needs). With a `tuner`
    before it, either trainer reads `hyperparameters` (the Tuner's best, or the last tuned):
    Conveyor's trains with their values, a run_fn gets them as `fn_args.hyperparameters`.
    """
    from tfx.proto import trainer_pb2

    from pipelines.spec.user_code import Contract, trainer_contract

    trainer = ctx.spec.trainer
    found = user_code(ctx.spec, "trainer")
    version = code_version(found)
    train_args = trainer_pb2.TrainArgs(num_steps=trainer.train_steps)
    eval_args = trainer_pb2.EvalArgs(num_steps=trainer.eval_steps)
    base_model = ctx.need("warm_start_model", node_id) if trainer.warm_start else None
    # A tuner node's best (or, on a night that does not tune, the last tuned) hyperparameters.
    hyperparameters = ctx.need("hyperparameters", node_id) if ctx.has("hyperparameters") else None
    # On Kubeflow, the replicas a cluster launcher starts (components/trainer/cluster.py).
    cluster = launch_config(ctx.spec, node_id) if ctx.target is Orchestrator.KUBEFLOW else None
    if cluster:
        try:
            check_launch(cluster, node_id)
        except ValueError as err:
            raise ProfileError(str(err)) from None
    if trainer.module is not None and trainer_contract(trainer.module) is Contract.TFX_RUN_FN:
        from components.trainer.component import UserModuleTrainer

        if cluster:
            raise ProfileError(
                f"runtime.training.launcher {cluster['launcher']!r} launches Conveyor's trainer; "
                f"trainer.module {trainer.module!r} has its own run_fn, which TFX's Trainer runs "
                "in its task: set runtime.training.launcher to 'local'."
            )

        with_transform = ctx.has("transformed_examples")
        if with_transform:
            examples = ctx.need("transformed_examples", node_id)
        elif ctx.has("training_examples"):
            examples = ctx.need("training_examples", node_id)
        else:
            examples = ctx.need("examples", node_id)
        node = UserModuleTrainer(
            examples=examples,
            schema=ctx.need("schema", node_id),
            transform_graph=ctx.need("transform_graph", node_id) if with_transform else None,
            run_fn=f"{trainer.module}.run_fn",
            train_args=train_args,
            eval_args=eval_args,
            custom_config=dict(trainer.config),
            code_version=version,
            user_code=_user_code_label(found),
            base_model=base_model,
            hyperparameters=hyperparameters,
        ).with_id(node_id)
    else:
        from components.trainer.component import Trainer

        examples_role = "training_examples" if ctx.has("training_examples") else "examples"
        node = Trainer(
            examples=ctx.need(examples_role, node_id),
            schema=ctx.need("schema", node_id),
            statistics=ctx.need("statistics", node_id),
            run_fn=TRAINER_RUN_FN,
            train_args=train_args,
            eval_args=eval_args,
            custom_config={
                "trainer": trainer.model_dump(mode="json"),
                "code_version": version,
                **({CLUSTER_KEY: cluster} if cluster else {}),
                **_window_from_records(ctx),
            },
            base_model=base_model,
            user_code=_user_code_label(found),
            hyperparameters=hyperparameters,
        ).with_id(node_id)
    for gate in ctx.gates:  # a gate that fails stops the run before any training
        node.add_upstream_node(gate)
    ctx.add(node)
    ctx.provide("model", node.outputs["model"])


def _window_from_records(ctx: BuildContext) -> dict:
    """On Kubeflow, which resolves no window: where Conveyor's Trainer finds the window's
    earlier spans (the record of accepted spans, components/spans/accepted.py)."""
    from components.trainer.component import WINDOW_KEY
    from pipelines.builder.nodes.data_gate import accepted_spans_dir

    window = ctx.spec.data.window_spans
    if ctx.target is not Orchestrator.KUBEFLOW or window <= 1:
        return {}
    return {WINDOW_KEY: {"dir": accepted_spans_dir(ctx), "num_spans": window}}
