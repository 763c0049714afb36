"""The one builder: a validated, frozen spec and a target -> `tfx.dsl.Pipeline`.

Every orchestrator gets its pipeline here; each node's build function (looked up in the
component table, `pipelines.spec.components`) decides what it builds for the target. Runners
add only orchestrator concerns: the metadata connection (local and Airflow; Kubeflow keeps its
own), the run id, containers and schedules.
"""

from __future__ import annotations

import datetime
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipelines.builder.context import BuildContext
from pipelines.core.object_path import as_path
from pipelines.core.paths import RunPaths
from pipelines.spec.components import COMPONENT_TYPES, Orchestrator
from pipelines.spec.models import PipelineSpec, runner_beam_args

# An orchestrator's first node and the condition the others run under (`build_pipeline`).
FirstNode = Callable[[PipelineSpec, RunPaths], tuple[Any, Any]]


def build_function(component_type: str) -> Callable[[BuildContext, str], None]:
    """The build function of a component type, imported from where the table says."""
    module, _, name = COMPONENT_TYPES[component_type].build.partition(":")
    return getattr(importlib.import_module(module), name)


def build_nodes(
    spec: PipelineSpec,
    paths: RunPaths,
    target: Orchestrator = Orchestrator.LOCAL,
    span: int | None = None,
) -> BuildContext:
    """Builds the nodes of the spec's `components`, in order, wired by role.

    Returns the build context: its `nodes`, and its `notes` on what was built differently for
    the target.
    """
    ctx = BuildContext(spec=spec, paths=paths, target=Orchestrator(target), span=span)
    from pipelines.builder import custom

    for index, component in enumerate(spec.components):
        if component.component is not None:  # a team's component, by import path
            custom.build_custom(ctx, index, component)
            continue
        before = dict(ctx.channels)
        with custom.inputs_overlay(ctx, index, component):
            build_function(component.type)(ctx, component.id)
        # A built-in's outputs are named after the roles it provided.
        ctx.outputs[component.id] = {
            role: channel
            for role, channel in ctx.channels.items()
            if role in COMPONENT_TYPES[component.type].provides and before.get(role) is not channel
        }
    return ctx


def build_pipeline(
    spec: PipelineSpec,
    workdir: Path,
    *,
    target: Orchestrator = Orchestrator.LOCAL,
    night: datetime.date | None = None,
    span: int | None = None,
    metadata_connection_config: Any = None,
    first: FirstNode | None = None,
):
    """Builds the TFX pipeline for `spec` with every path under `workdir`.

    Args:
      spec: the validated spec.
      workdir: where data, pipeline outputs and serving live (as the target's workers see it).
      target: the orchestrator the pipeline is built for.
      night: for dated spans, pins the span ExampleGen ingests (as `span` does); with neither,
        ExampleGen takes the latest span it finds.
      span: the span number to ingest.
      metadata_connection_config: the ML Metadata connection the runner chose (None: the
        orchestrator keeps its own, as Kubeflow does).
      first: an orchestrator's first node and the condition every other node runs under, made
        from the spec and its paths; every other node runs after it (Kubeflow's `run_start`,
        `pipelines.run.kubeflow_start`: no process lives through a Kubeflow run to hold its
        lock or to skip an unchanged night, as `conveyor run` does).
    """
    from tfx.orchestration.pipeline import Pipeline

    from pipelines.builder import spans

    if night is not None:
        span = spans.span_of_date(night)
    paths = RunPaths(workdir=as_path(workdir).resolve(), spec=spec)
    if first is None:
        nodes = list(build_nodes(spec, paths, target, span).nodes)
    else:
        # tfx.dsl.Cond from its own module: `tfx.v1` imports Vertex AI's client (about 4 s).
        from tfx.dsl.experimental.conditionals.conditional import Cond

        start, condition = first(spec, paths)
        # TFX attaches a condition to the nodes created inside its block.
        with Cond(condition):
            nodes = list(build_nodes(spec, paths, target, span).nodes)
        for node in nodes:
            node.add_upstream_node(start)
        nodes.insert(0, start)
    return Pipeline(
        pipeline_name=spec.name,
        pipeline_root=str(paths.pipeline_root),
        components=nodes,
        enable_cache=spec.runtime.enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=runner_beam_args(spec.runtime.beam_args),
    )
