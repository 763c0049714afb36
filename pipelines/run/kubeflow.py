"""Kubeflow Pipelines v2 / Vertex AI: the pipeline built for Kubeflow, compiled to a PipelineJob.

The builder builds for the Kubeflow target (`target=Orchestrator.KUBEFLOW`), given a first task,
`run_start` (`pipelines.run.kubeflow_start`): it takes the pipeline's lock of one run at a time,
which the exit handler releases, reconciles serving, and decides whether the night's inputs
changed since the last final outcome; every other task runs after it, under the condition that
they did. Each node's build function decides what it is
there (the served-model resolvers become Conveyor's ServedModel component, which reads the
serving folder; the span resolvers are no node at all; the curated schema is read from the
image; see `pipelines.spec.components`). This module adds only what
KFP itself needs:

- each node's container gets the profile's resources (`runtime.container.resources`: `default`,
  then the node's own entry), GPUs included;
- custom artifact types whose names KFP's schema titles reject get a `conveyor.Name` title,
  and every container's command is Conveyor's entry point (`pipelines.run.kubeflow_entrypoint`)
  told each custom title's class, in front of TFX's, which imports a custom title as a class
  path and so could not read a `conveyor.Name` artifact;
- KFP's cache off for the served-model tasks, the kept schema and the data gate, whose answers
  depend on the serving folder and on the spans and schema accepted before (kept in the
  workdir);
- the job's output directory and the nightly schedule for KFP and Vertex AI;
- PipelineSpec schema 2.1.0, the only one open-source KFP's API server accepts;
- the job's runtime parameters (ExampleGen's `range_config`: which night a run reads) handed
  down to the sub-DAG that holds the pipeline's tasks, each optional; for dated spans,
  ExampleGen's driver hook runs Conveyor's driver first (`pipelines.run.kubeflow_driver`),
  given KFP's schedule time, so a scheduled run reads its night's span;
- every task's environment from Kubernetes secrets (`runtime.container.secret_env`), as KFP's
  kubernetes platform spec (`platformSpec` beside the job's `pipelineSpec`) that open-source
  KFP's driver reads: names of secrets and keys only, never a value;
- an exit handler (`components.run_finish`), which KFP runs after every task, whatever their
  state: it hands the run-finish contract every orchestrator calls
  (`pipelines.finish.contract.finish_run`) KFP's final status, and the contract writes the
  run's summary and report under the workdir, alerts when the run did not succeed and exports
  the run's metrics it can know (docs/monitoring.md, Kubeflow runs).
  With it, KFP nests the pipeline's tasks in a `tfx-dag` sub-DAG, and the root DAG holds that
  and the exit handler.

KFP records lineage in its own ML Metadata, which no task can read: the exit handler cannot read
the run back. A Kubeflow run's report carries KFP's final state and error, the data gate's
refusal and the Pusher's decision (each written into the run's folder) but no node details
(`conveyor run` and Airflow's final task write them in full); the outcome record is written
with the fingerprint the first task took. The Pusher's decision is recorded in
`runtime.metadata` by the exit handler (`pipelines.core.metadata.told_push`), where `conveyor
lineage`, `models`, `rollback` and `bless` read it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pipelines.core.object_path import as_path
from pipelines.spec import checks
from pipelines.spec.loading import LoadedSpec
from pipelines.spec.models import Orchestrator, PipelineSpec, ResourcesSpec

# Every executor container's command: TFX's own entry point (KubeflowV2DagRunnerConfig's
# default) behind Conveyor's, which first tells it the class of each custom artifact type (the
# compiled command adds one `--artifact_type` flag per type; see `pipelines.run.
# kubeflow_entrypoint`).
EXECUTOR_COMMAND = ["python", "-m", "pipelines.run.kubeflow_entrypoint"]


EXIT_HANDLER_ID = "run_finish"
PIPELINE_DAG = "tfx-dag"  # the sub-DAG KFP puts the pipeline's tasks in when it has an exit handler

# KFP's schema title for a custom artifact type (compiler_utils._SCHEMA_TITLE_RE in TFX 1.16).
_KFP_TYPE_TITLE = re.compile(r"^[a-z][a-z0-9-_]{2,20}[.][A-Z][a-zA-Z0-9-_]{2,49}$")


def _kfp_artifact_types(pipeline) -> tuple[list[str], dict[str, str]]:
    """Gives custom artifact types whose names KFP rejects a `conveyor.Name` title on KFP;
    returns what was renamed, and the class of every custom type's title (what the task's
    entry point imports it from: KFP's titles are not import paths).

    KFP encodes a custom artifact type as a schema title `namespace.Name`; locally the type
    keeps its ML Metadata name, so existing stores are unaffected.
    """
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    standard = compiler_utils._SUPPORTED_STANDARD_ARTIFACT_TYPES
    renamed: dict[type, type] = {}
    classes: dict[str, str] = {}
    notes = []
    for node in pipeline.components:
        for channel in node.outputs.values():
            original = channel.type
            if original in standard or original in renamed.values():
                continue
            if not _KFP_TYPE_TITLE.fullmatch(original.TYPE_NAME):
                if original not in renamed:
                    title = "conveyor." + re.sub(r"^Conveyor", "", original.TYPE_NAME)
                    renamed[original] = type(original.__name__, (original,), {"TYPE_NAME": title})
                    notes.append(f"{original.TYPE_NAME} -> {title}")
                channel.type = renamed[original]
            classes[channel.type.TYPE_NAME] = f"{original.__module__}.{original.__qualname__}"
    return notes, classes


def executor_command(artifact_classes: dict[str, str]) -> list[str]:
    """The command of every executor container: Conveyor's entry point, told the class of each
    custom artifact type's title, in front of TFX's."""
    from pipelines.run.kubeflow_entrypoint import artifact_type_flag

    flags = [artifact_type_flag(t, c) for t, c in sorted(artifact_classes.items())]
    return [*EXECUTOR_COMMAND, *flags]


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


def attach_resources(pipeline, spec: PipelineSpec) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Gives each node's container the profile's resources and KFP-valid artifact type titles;
    returns what changed, per node, and the class of each custom artifact type's title."""
    changes: dict[str, list[str]] = {}
    for node in pipeline.components:
        resources = _merged_resources(spec, node.id)
        if resources is not None and hasattr(node, "with_platform_config"):
            node.with_platform_config(resource_spec(resources))
            changes.setdefault(node.id, []).append(
                f"resources {resources.model_dump(exclude_defaults=True)}"
            )
    renamed, classes = _kfp_artifact_types(pipeline)
    if renamed:
        changes["artifact types"] = renamed
    return changes, classes


def job_tasks(pipeline_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Task name -> task spec of every task that runs a container or a resolver: the root DAG's
    and those of the sub-DAGs it runs (the pipeline's own `tfx-dag`, with an exit handler)."""
    components = pipeline_spec["components"]
    tasks: dict[str, dict[str, Any]] = {}
    pending = [pipeline_spec["root"]["dag"]["tasks"]]
    while pending:
        for task, task_spec in pending.pop().items():
            component = components.get(task_spec["componentRef"]["name"], {})
            if "dag" in component:
                pending.append(component["dag"]["tasks"])
            else:
                tasks[task] = task_spec
    return tasks


def _fill_missing_resources(job: dict[str, Any], spec: PipelineSpec) -> list[str]:
    """TFX 1.16 drops platform_config for FileBasedExampleGen (its driver + executor container)
    and for the exit handler: gives such containers their resources in the compiled job."""
    from google.protobuf import json_format

    pipeline = job["pipelineSpec"]
    executors = pipeline["deploymentSpec"]["executors"]
    filled = []
    for task, task_spec in job_tasks(pipeline).items():
        label = pipeline["components"][task_spec["componentRef"]["name"]]["executorLabel"]
        container = executors[label].get("container")
        resources = _merged_resources(spec, task)
        if container is None or resources is None or "resources" in container:
            continue
        container["resources"] = json_format.MessageToDict(resource_spec(resources))
        filled.append(task)
    return filled


def _never_cached(job: dict[str, Any], pipeline) -> list[str]:
    """Turns KFP's cache off for the tasks whose result depends on more than their inputs:
    the served model (`components.baseline.served`) is what the serving folder holds when the
    task runs, the kept schema (`components.accepted_schema`) the one last accepted, and the
    data gate measures drift from the last span accepted before it and keeps those records (in
    the workdir); a cache hit from an earlier run would answer for another state of any of
    them. Returns those tasks."""
    from components.accepted_schema.component import AcceptedSchemaGen
    from components.baseline.served import ServedModel
    from components.data_gate.component import DataGate
    from pipelines.run.kubeflow_start import RunStart

    def records(node) -> bool:
        keys = ("accepted_spans_dir", "accepted_schema_file")
        return isinstance(node, DataGate) and any(node.exec_properties.get(k) for k in keys)

    stateful = {
        node.id
        for node in pipeline.components
        if isinstance(node, (ServedModel, AcceptedSchemaGen, RunStart)) or records(node)
    }
    uncached = []
    for task, task_spec in job_tasks(job["pipelineSpec"]).items():
        if task in stateful:
            task_spec["cachingOptions"] = {"enableCache": False}
            uncached.append(task)
    return uncached


def _wire_runtime_parameters(job: dict[str, Any]) -> list[str]:
    """Hands the job's runtime parameters (ExampleGen's `range_config`, see
    `pipelines.builder.spans.RANGE_PARAMETER`) down to the tasks that read them, and makes
    each optional with its default.

    With an exit handler TFX 1.16 nests the pipeline's tasks in the `tfx-dag` sub-DAG but
    declares the parameters on the root only, so KFP could not resolve a task's
    `componentInputParameter`; and it leaves out a default of "" (a falsy value), so KFP would
    require one at every submission. Returns the parameters wired."""
    pipeline = job["pipelineSpec"]
    parameters = pipeline["root"].get("inputDefinitions", {}).get("parameters", {})
    for definition in parameters.values():
        definition.setdefault("defaultValue", "")
        definition["isOptional"] = True
    dag_task = pipeline["root"]["dag"]["tasks"].get(PIPELINE_DAG)
    if parameters and dag_task is not None:
        component = pipeline["components"][dag_task["componentRef"]["name"]]
        declared = component.setdefault("inputDefinitions", {}).setdefault("parameters", {})
        passed = dag_task.setdefault("inputs", {}).setdefault("parameters", {})
        for name, definition in parameters.items():
            declared[name] = {"parameterType": definition["parameterType"], "isOptional": True}
            passed[name] = {"componentInputParameter": name}
    return sorted(parameters)


def _drive_example_gen(job: dict[str, Any], spec: PipelineSpec) -> list[str]:
    """For dated spans: ExampleGen's driver hook runs Conveyor's driver first
    (`pipelines.run.kubeflow_driver`), told the spec's zone, and the task gets KFP's schedule
    time as `scheduled_at`, so a scheduled run reads its night's span. Returns those tasks."""
    from pipelines.run import kubeflow_driver

    if not spec.data.dated_spans:
        return []
    pipeline = job["pipelineSpec"]
    executors = pipeline["deploymentSpec"]["executors"]
    driven = []
    for task, task_spec in job_tasks(pipeline).items():
        component = pipeline["components"][task_spec["componentRef"]["name"]]
        container = executors[component["executorLabel"]].get("container", {})
        hook = container.get("lifecycle", {}).get("preCacheCheck")
        if hook is None or hook.get("command", [])[-1:] != [kubeflow_driver.TFX_DRIVER]:
            continue
        hook["command"] = [
            "python",
            "-m",
            kubeflow_driver.__name__,
            f"{kubeflow_driver.TIMEZONE_FLAG}{spec.schedule.timezone}",
        ]
        declared = component.setdefault("inputDefinitions", {}).setdefault("parameters", {})
        declared[kubeflow_driver.SCHEDULED_AT] = {"parameterType": "STRING", "isOptional": True}
        passed = task_spec.setdefault("inputs", {}).setdefault("parameters", {})
        passed[kubeflow_driver.SCHEDULED_AT] = {
            "runtimeValue": {"constant": "{{$.pipeline_job_schedule_time_utc}}"}
        }
        driven.append(task)
    return driven


def kubernetes_platform_spec(job: dict[str, Any], spec: PipelineSpec) -> dict[str, Any]:
    """KFP's kubernetes platform spec giving every container task the profile's secret env,
    encoded as kfp-kubernetes's `use_secret_as_env` encodes it (one `secretAsEnv` per secret,
    its name both in the field KFP 2.0's driver reads and in the parameter later drivers read).
    Empty when the profile names no secret env."""
    by_secret: dict[str, list[dict[str, str]]] = {}
    for variable, ref in sorted(spec.runtime.container.secret_env.items()):
        by_secret.setdefault(ref.secret, []).append({"envVar": variable, "secretKey": ref.key})
    if not by_secret:
        return {}
    secret_as_env = [
        {
            "secretName": secret,
            "secretNameParameter": {"runtimeValue": {"constant": secret}},
            "keyToEnv": key_to_env,
            "optional": False,
        }
        for secret, key_to_env in sorted(by_secret.items())
    ]
    executors = job["pipelineSpec"]["deploymentSpec"]["executors"]
    configs = {
        label: {"secretAsEnv": secret_as_env}
        for label, executor in sorted(executors.items())
        if "container" in executor  # resolver tasks are ML Metadata queries, not pods
    }
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": configs}}}}


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
        "cron": f"TZ={schedule.timezone} {cron}",  # Vertex AI fires in the spec's zone
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


def exit_handler(spec: PipelineSpec, workdir: str):
    """The exit handler node: `components.run_finish`'s RunFinish, given the final status KFP
    fills in, the resolved spec (the pipeline's name, its webhook's variable and metrics
    sinks), the workdir its report goes under, and the job's creation time, which KFP
    substitutes for its placeholder (the run's duration, and whether it pushed)."""
    from kfp.dsl import PIPELINE_JOB_CREATE_TIME_UTC_PLACEHOLDER
    from tfx.orchestration.kubeflow.decorators import FinalStatusStr

    from components.run_finish.component import RunFinish

    return RunFinish(
        final_status=FinalStatusStr(),
        resolved_spec=json.dumps(spec.to_yaml_dict()),
        workdir=str(workdir),
        job_created_at=PIPELINE_JOB_CREATE_TIME_UTC_PLACEHOLDER,
    ).with_id(EXIT_HANDLER_ID)


def compile_pipeline(loaded: LoadedSpec, workdir: str, output: Path) -> list[Path]:
    """Writes the PipelineJob JSON to `output` (with the `platformSpec` of the profile's secret
    env, when it names any) and its schedule next to it; returns both."""
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as kfp_runner

    from pipelines.builder.pipeline import build_pipeline
    from pipelines.run.kubeflow_start import run_start_node

    checks.check_task_environment(loaded)  # before TFX is imported (validate checks it too)
    spec = loaded.spec
    pipeline = build_pipeline(
        spec, as_path(workdir), target=Orchestrator.KUBEFLOW, first=run_start_node
    )
    _, artifact_classes = attach_resources(pipeline, spec)
    runner = kfp_runner.KubeflowV2DagRunner(
        config=kfp_runner.KubeflowV2DagRunnerConfig(
            display_name=spec.name,
            default_image=spec.runtime.container.image,
            default_commands=executor_command(artifact_classes),
            # Open-source KFP's API server accepts PipelineSpec schema 2.1.0 only (TFX's
            # default is 2.0.0); Vertex AI runs both.
            use_pipeline_spec_2_1=True,
        ),
    )
    runner.set_exit_handler(exit_handler(spec, workdir))
    job = runner.run(pipeline, write_out=False)
    _fill_missing_resources(job, spec)
    _never_cached(job, pipeline)
    _wire_runtime_parameters(job)
    _drive_example_gen(job, spec)
    runtime_config = job.setdefault("runtimeConfig", {})
    runtime_config["gcsOutputDirectory"] = _gcs_uri(
        runtime_config.get(
            "gcsOutputDirectory", str(as_path(workdir) / "pipeline_root" / spec.name)
        )
    )
    platform_spec = kubernetes_platform_spec(job, spec)
    if platform_spec:
        job["platformSpec"] = platform_spec
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(job, indent=2, sort_keys=True) + "\n")
    schedule_file = output.with_name(output.stem + ".schedule.json")
    schedule_file.write_text(
        json.dumps(schedule_description(spec, output.name), indent=2, sort_keys=True) + "\n"
    )
    return [output, schedule_file]
