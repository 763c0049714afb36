"""Kubeflow Pipelines v2 / Vertex AI: the built pipeline compiled to a PipelineJob JSON.

The pipeline is the one `pipelines.builder.build_pipeline` builds for `conveyor run`; this module
only adds what KFP needs, as a pass over the built nodes (`adapt_for_kubeflow`):

- Conveyor's resolvers use custom strategies, which KubeflowV2DagRunner cannot compile (it
  knows LatestArtifact and LatestBlessedModel only, as ML Metadata queries run by the platform):
  the served-model and warm-start resolvers become LatestBlessedModelStrategy over the
  pipeline's Models and ModelBlessings (same node id and output key); the training window
  resolver is bypassed (the Trainer reads tonight's span only); the drift baseline resolver is
  dropped (the data gate checks the schema and the anomalies, not drift from the last span).
- Paths inside the project (the curated schema ImportSchemaGen reads) point into the image
  (`runtime.container.project_root`), where the Dockerfile puts the project.
- Each node's container gets the profile's resources (`runtime.container.resources`: `default`,
  then the node's own entry), GPUs included.

KFP records lineage in its own ML Metadata, so `runtime.metadata` is not part of a PipelineJob.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

from pipelines.config import PROJECT_ROOT, LoadedSpec
from pipelines.orchestration import ProfileError
from pipelines.spec import MetadataSpec, PipelineSpec, ResourcesSpec

# TFX's own entry point for every executor container (KubeflowV2DagRunnerConfig's default).
EXECUTOR_COMMAND = [
    "python",
    "-m",
    "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",
]


def _kfp_strategies() -> tuple[type, ...]:
    from tfx.dsl.input_resolution.strategies.latest_artifact_strategy import (
        LatestArtifactStrategy,
    )
    from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import (
        LatestBlessedModelStrategy,
    )

    return (LatestArtifactStrategy, LatestBlessedModelStrategy)


def _served_model_strategies() -> tuple[type, ...]:
    from components.baseline import strategy

    return (strategy.ServedModelStrategy, strategy.WarmStartModelStrategy)


def _to_latest_blessed_model(node) -> None:
    """Turns a Conveyor resolver into a LatestBlessedModelStrategy resolver, in place.

    In place, because the Evaluator's and Trainer's input channels hold this very node as their
    producer: its id and its `model` output channel stay, its strategy and inputs change.
    """
    from tfx import types
    from tfx.dsl.components.common.resolver import Resolver
    from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import (
        LatestBlessedModelStrategy,
    )
    from tfx.types import standard_artifacts
    from tfx.types.channel import Channel

    from components.baseline.strategy import MODEL_KEY

    fresh = Resolver(
        strategy_class=LatestBlessedModelStrategy,
        **{
            MODEL_KEY: Channel(type=standard_artifacts.Model),
            "model_blessing": Channel(type=standard_artifacts.ModelBlessing),
        },
    )
    # Resolver keeps these in private attributes; tests/e2e/test_kubeflow_compile.py checks the
    # compiled result, so a TFX upgrade that changes them fails there, not on a cluster.
    node._strategy_class = fresh._strategy_class
    node._config = fresh._config
    node._raw_inputs = fresh._raw_inputs
    node._input_dict = fresh._input_dict
    outputs = dict(node._output_dict)
    for key, channel in fresh.outputs.items():
        if key not in outputs:
            outputs[key] = types.OutputChannel(channel.type, node, key)
    node._output_dict = outputs


def _bypass(pipeline, resolver, keep_anchor: bool) -> list[str]:
    """Removes a resolver; its consumers read its anchor channel instead (or lose the input)."""
    notes = []
    for node in pipeline.components:
        if node is resolver or not hasattr(node, "spec"):
            continue
        for key, channel in list(node.inputs.items()):
            if getattr(channel, "producer_component", None) is not resolver:
                continue
            if keep_anchor:
                node.inputs[key] = resolver.raw_inputs[channel.output_key]
                notes.append(f"{node.id}.{key} reads {node.inputs[key].producer_component_id}")
            else:
                del node.inputs[key]
                notes.append(f"{node.id}.{key} dropped")
        if resolver in node.upstream_nodes:
            node.remove_upstream_node(resolver)
    for upstream in list(resolver.upstream_nodes):
        resolver.remove_upstream_node(upstream)
    pipeline.components = [n for n in pipeline.components if n is not resolver]
    return notes


# KFP's schema title for a custom artifact type (compiler_utils._SCHEMA_TITLE_RE in TFX 1.16).
_KFP_TYPE_TITLE = re.compile(r"^[a-z][a-z0-9-_]{2,20}[.][A-Z][a-zA-Z0-9-_]{2,49}$")


def _kfp_artifact_types(pipeline) -> list[str]:
    """Gives custom artifact types whose names KFP rejects a `conveyor.Name` title on KFP.

    KFP encodes a custom artifact type as a schema title `namespace.Name`; locally the type
    keeps its ML Metadata name, so existing stores are unaffected.
    """
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    standard = compiler_utils._SUPPORTED_STANDARD_ARTIFACT_TYPES
    renamed: dict[type, type] = {}
    notes = []
    for node in pipeline.components:
        for channel in node.outputs.values():
            original = channel.type
            if original in standard or _KFP_TYPE_TITLE.fullmatch(original.TYPE_NAME):
                continue
            if original not in renamed:
                title = "conveyor." + re.sub(r"^Conveyor", "", original.TYPE_NAME)
                renamed[original] = type(original.__name__, (original,), {"TYPE_NAME": title})
                notes.append(f"{original.TYPE_NAME} -> {title}")
            channel.type = renamed[original]
    return notes


def resource_spec(resources: ResourcesSpec):
    """The KFP ResourceSpec proto for a node's `ResourcesSpec`."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec()
    if resources.cpu is not None:
        spec.cpu_limit = resources.cpu
    if resources.memory_gb is not None:
        spec.memory_limit = resources.memory_gb
    if resources.gpu:
        spec.accelerator.type = str(resources.gpu_type)
        spec.accelerator.count = resources.gpu
    return spec


def _merged_resources(spec: PipelineSpec, node_id: str) -> ResourcesSpec | None:
    table = spec.runtime.container.resources
    default, own = table.get("default"), table.get(node_id)
    if default is None or own is None:
        return own or default
    merged = default.model_dump(exclude_unset=True) | own.model_dump(exclude_unset=True)
    return ResourcesSpec(**merged)


def adapt_for_kubeflow(pipeline, spec: PipelineSpec) -> dict[str, list[str]]:
    """Applies the KFP substitutions to a built pipeline; returns what changed, per node."""
    from tfx.dsl.components.common.resolver import Resolver

    from components.spans import strategy as spans

    changes: dict[str, list[str]] = {}
    project = str(PROJECT_ROOT) + "/"
    image_root = spec.runtime.container.project_root.rstrip("/") + "/"
    for node in list(pipeline.components):
        notes = changes.setdefault(node.id, [])
        if isinstance(node, Resolver):
            strategy = node._strategy_class
            if strategy in _served_model_strategies():
                notes.append(f"{strategy.__name__} -> LatestBlessedModelStrategy")
                _to_latest_blessed_model(node)
            elif strategy is spans.TrainingWindowStrategy:
                notes.append("bypassed: " + "; ".join(_bypass(pipeline, node, keep_anchor=True)))
            elif strategy is spans.AcceptedPreviousStatisticsStrategy:
                notes.append("dropped: " + "; ".join(_bypass(pipeline, node, keep_anchor=False)))
            elif strategy not in _kfp_strategies():
                raise ProfileError(
                    f"components: {node.id} resolves with {strategy.__name__}, which Kubeflow "
                    "cannot run (it runs LatestArtifactStrategy and LatestBlessedModelStrategy "
                    "only); add its substitution to pipelines/runners/kubeflow.py."
                )
            continue
        for key, value in list(node.exec_properties.items()):
            if isinstance(value, str) and value.startswith(project):
                node.exec_properties[key] = image_root + value[len(project) :]
                notes.append(f"{key} -> {node.exec_properties[key]}")
        resources = _merged_resources(spec, node.id)
        if resources is not None:
            node.with_platform_config(resource_spec(resources))
            notes.append(f"resources {resources.model_dump(exclude_defaults=True)}")
    renamed = _kfp_artifact_types(pipeline)
    if renamed:
        changes["artifact types"] = renamed
    return {k: v for k, v in changes.items() if v}


def _fill_missing_resources(job: dict[str, Any], spec: PipelineSpec) -> list[str]:
    """TFX 1.16 drops platform_config for FileBasedExampleGen (its driver + executor container):
    gives such containers their resources in the compiled job."""
    from google.protobuf import json_format

    pipeline = job["pipelineSpec"]
    executors = pipeline["deploymentSpec"]["executors"]
    filled = []
    for task, task_spec in pipeline["root"]["dag"]["tasks"].items():
        label = pipeline["components"][task_spec["componentRef"]["name"]]["executorLabel"]
        container = executors[label].get("container")
        resources = _merged_resources(spec, task)
        if container is None or resources is None or "resources" in container:
            continue
        container["resources"] = json_format.MessageToDict(resource_spec(resources))
        filled.append(task)
    return filled


def _gcs_uri(path: str) -> str:
    """Vertex AI mounts gs://BUCKET at /gcs/BUCKET; the job's output directory is the URI."""
    return "gs://" + path[len("/gcs/") :] if path.startswith("/gcs/") else path


def _five_field_cron(cron: str) -> str:
    aliases = {
        "@hourly": "0 * * * *",
        "@daily": "0 0 * * *",
        "@weekly": "0 0 * * 0",
        "@monthly": "0 0 1 * *",
        "@yearly": "0 0 1 1 *",
    }
    return aliases.get(cron, cron)


def schedule_description(spec: PipelineSpec, job_file: str) -> dict[str, Any]:
    """The nightly recurring run, for KFP's API (RecurringRun, cron with seconds) and for
    Vertex AI's (Schedule, five-field cron): create one of them with the compiled job."""
    schedule = spec.schedule
    cron = _five_field_cron(schedule.cron)
    start = (
        f"{schedule.start_date.isoformat()}T00:00:00Z" if schedule.start_date is not None else None
    )
    kfp_trigger: dict[str, Any] = {"cron": "0 " + cron}
    vertex: dict[str, Any] = {
        "display_name": f"{spec.name}-nightly",
        "cron": f"TZ=UTC {cron}",
        "max_concurrent_run_count": 1,
        "catch_up": schedule.catchup,
        "pipeline_job_file": job_file,
    }
    if start:
        kfp_trigger["start_time"] = start
        vertex["start_time"] = start
    return {
        "pipeline": spec.name,
        "job_file": job_file,
        "kfp_recurring_run": {
            "display_name": f"{spec.name}-nightly",
            "description": f"{spec.name}: one run a night ({schedule.cron}, UTC)",
            "mode": "ENABLE",
            "max_concurrency": "1",
            "no_catchup": not schedule.catchup,
            "trigger": {"cron_schedule": kfp_trigger},
        },
        "vertex_schedule": vertex,
    }


def compile_pipeline(loaded: LoadedSpec, workdir: str, output: Path) -> list[Path]:
    """Writes the PipelineJob JSON to `output` and its schedule next to it; returns both."""
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as kfp_runner

    from pipelines.builder import build_pipeline

    spec = loaded.spec
    with tempfile.TemporaryDirectory() as unused:
        # The builder wants a metadata config; KFP keeps its own, so point it somewhere harmless.
        build_spec = spec.model_copy(
            update={
                "runtime": spec.runtime.model_copy(
                    update={"metadata": MetadataSpec(path=str(Path(unused) / "unused.sqlite"))}
                )
            }
        )
        pipeline = build_pipeline(build_spec, Path(workdir))
    adapt_for_kubeflow(pipeline, spec)
    runner = kfp_runner.KubeflowV2DagRunner(
        config=kfp_runner.KubeflowV2DagRunnerConfig(
            display_name=spec.name,
            default_image=spec.runtime.container.image,
            default_commands=EXECUTOR_COMMAND,
        ),
    )
    job = runner.run(pipeline, write_out=False)
    _fill_missing_resources(job, spec)
    runtime_config = job.setdefault("runtimeConfig", {})
    runtime_config["gcsOutputDirectory"] = _gcs_uri(
        runtime_config.get("gcsOutputDirectory", str(Path(workdir) / "pipeline_root" / spec.name))
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(job, indent=2, sort_keys=True) + "\n")
    schedule_file = output.with_name(output.stem + ".schedule.json")
    schedule_file.write_text(
        json.dumps(schedule_description(spec, output.name), indent=2, sort_keys=True) + "\n"
    )
    return [output, schedule_file]
