"""`conveyor compile NAME --profile kubeflow`: every spec compiles with KubeflowV2DagRunner to a
PipelineJob that parses strictly into kfp-pipeline-spec's protos, whose task graph is the spec's,
whose image, commands, Beam arguments and resources are the profile's, and whose exit handler
gets the run's final status after every task. No cluster needed."""

import importlib
import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from pipelines import cli
from pipelines.builder.pipeline import build_pipeline
from pipelines.core.project import find_project
from pipelines.run.kubeflow import (
    EXECUTOR_COMMAND,
    EXIT_HANDLER_ID,
    PIPELINE_DAG,
    executor_command,
    job_tasks,
)
from pipelines.run.kubeflow_entrypoint import split_arguments
from pipelines.run.kubeflow_start import RUN_START_ID
from pipelines.spec import loading as config
from pipelines.spec.loading import load_spec
from tests.kfp_executor import type_title

# Served-model resolvers are Conveyor's ServedModel tasks on Kubeflow (they read the serving
# folder: no inputs, so no upstream task); the span resolvers are no task.
SERVED_MODEL_RESOLVERS = {"baseline_resolver", "warm_start_resolver"}
BYPASSED_RESOLVERS = {"span_window_resolver", "drift_baseline_resolver"}


def _compile(tmp_path: Path, name: str, *extra: str) -> tuple[dict, dict]:
    output = tmp_path / f"{name}.json"
    argv = ["compile", name, "--env", "kubeflow", "--output", str(output), *extra]
    assert cli.main(argv) == 0
    schedule = output.with_name(f"{name}.schedule.json")
    return json.loads(output.read_text()), json.loads(schedule.read_text())


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kubeflow")
    return {name: _compile(tmp, name) for name in config.list_pipelines()}


def _executors(job: dict) -> dict[str, dict]:
    """Task name -> its container spec (a resolver task would have none)."""
    pipeline = job["pipelineSpec"]
    executors = pipeline["deploymentSpec"]["executors"]
    containers = {}
    for task, spec in job_tasks(pipeline).items():
        label = pipeline["components"][spec["componentRef"]["name"]]["executorLabel"]
        if "container" in executors[label]:
            containers[task] = executors[label]["container"]
    return containers


def _expected_dependencies(name: str, tmp_path: Path) -> dict[str, set[str]]:
    """The spec's edges as TFX builds them locally, with the resolvers as KFP has them: a
    served-model resolver is a task of its own, a bypassed one passes its anchors through."""
    pipeline = build_pipeline(load_spec(name, env="local").spec, tmp_path)
    expected = {}
    for node in pipeline.components:
        if node.id in BYPASSED_RESOLVERS:
            continue
        if node.id in SERVED_MODEL_RESOLVERS:
            expected[node.id] = set()
            continue
        upstream = set()
        for parent in node.upstream_nodes:
            if parent.id in BYPASSED_RESOLVERS:
                upstream |= {p.id for p in parent.upstream_nodes}
            else:
                upstream.add(parent.id)
        expected[node.id] = upstream
    return expected


@pytest.mark.parametrize("name", config.list_pipelines())
def test_the_job_parses_strictly_into_kfp_pipeline_spec(compiled, name):
    from kfp.pipeline_spec import pipeline_spec_pb2

    job, _ = compiled[name]
    strict = pipeline_spec_pb2.PipelineJob()
    json_format.ParseDict(job, strict, ignore_unknown_fields=False)
    spec = pipeline_spec_pb2.PipelineSpec()
    json_format.ParseDict(job["pipelineSpec"], spec, ignore_unknown_fields=False)
    assert spec.pipeline_info.name == name
    assert strict.display_name == name
    # Open-source KFP's API server refuses any other ("KFP only supports schema version 2.1.0").
    assert spec.schema_version == "2.1.0"
    # Vertex AI mounts gs://BUCKET at /gcs/BUCKET: outputs go to the bucket itself.
    root = strict.runtime_config.gcs_output_directory
    assert root == f"gs://conveyor-pipelines/conveyor/pipeline_root/{name}"


@pytest.mark.parametrize("name", config.list_pipelines())
def test_the_task_graph_is_the_specs(compiled, name, tmp_path):
    job, _ = compiled[name]
    tasks = job_tasks(job["pipelineSpec"])
    graph = {task: set(spec.get("dependentTasks", [])) for task, spec in tasks.items()}
    assert graph.pop(EXIT_HANDLER_ID) == {PIPELINE_DAG}  # after the pipeline's own tasks
    # Every task runs after the one that takes the pipeline's lock and decides whether the
    # inputs changed (pipelines/run/kubeflow_start.py), and only when they did.
    assert graph.pop(RUN_START_ID) == set()
    assert all(RUN_START_ID in upstream for upstream in graph.values())
    changed = (
        f"(inputs.artifacts['_{RUN_START_ID}.inputs'].artifacts[0].metadata['inputs'] == 'changed')"
    )
    for task in graph:
        assert tasks[task]["triggerPolicy"] == {"condition": changed}, task
    graph = {task: upstream - {RUN_START_ID} for task, upstream in graph.items()}
    assert graph == _expected_dependencies(name, tmp_path)
    # The data gate still stops training: the trainer waits for it.
    assert "data_gate" in graph["trainer"]


@pytest.mark.parametrize("name", config.list_pipelines())
def test_image_commands_beam_args_and_resources_are_the_profiles(compiled, name):
    job, _ = compiled[name]
    runtime = load_spec(name, env="kubeflow").spec.runtime
    containers = _executors(job)
    assert set(containers) == {c.id for c in load_spec(name).spec.components} - (
        BYPASSED_RESOLVERS
    ) | {EXIT_HANDLER_ID, RUN_START_ID}
    for task, container in containers.items():
        assert container["image"] == runtime.container.image, task
        assert container["command"] == executor_command(_custom_types(job)), task
        args = container["args"]
        assert args[-len(runtime.beam_args) :] == list(runtime.beam_args), task
        expected = runtime.container.resources.get(task) or runtime.container.resources["default"]
        assert container["resources"]["cpuLimit"] == expected.cpu, task
        assert container["resources"]["memoryLimit"] == pytest.approx(expected.memory_gb), task
        assert "accelerator" not in container["resources"], task
        # Conveyor's own executors (data gate, trainer, pusher, Arrow reader) are importable
        # from the installed project, as they are in the image.
        executor = args[args.index("--executor_class_path") + 1]
        module, _, attribute = executor.rpartition(".")
        assert hasattr(importlib.import_module(module), attribute), executor


def _custom_types(job: dict) -> dict[str, str]:
    """Each custom artifact type's title in the job -> its class's import path."""
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    titles = {
        type_title(definition["artifactType"])
        for component in job["pipelineSpec"]["components"].values()
        for side in ("inputDefinitions", "outputDefinitions")
        for definition in component.get(side, {}).get("artifacts", {}).values()
    } - set(compiler_utils.TITLE_TO_CLASS_PATH)
    known = {
        "conveyor.DataGateFindings": "components.data_gate.component.DataGateFindings",
        "conveyor.TFLiteModel": "components.tflite.artifact.TFLiteModel",
        "conveyor.RunInputs": "pipelines.run.kubeflow_start.RunInputs",
    }
    return {title: known[title] for title in titles}


@pytest.mark.parametrize("name", config.list_pipelines())
def test_every_custom_artifact_type_is_named_to_the_entry_point_with_its_class(compiled, name):
    # TFX's entry point imports a custom type's schema title as a class path; KFP's titles
    # (`conveyor.DataGateFindings`) are not one, so the command tells it each type's class.
    from tfx.utils.import_utils import import_class_by_path

    job, _ = compiled[name]
    command = _executors(job)["data_gate"]["command"]
    assert command[: len(EXECUTOR_COMMAND)] == EXECUTOR_COMMAND
    types, rest = split_arguments(command[len(EXECUTOR_COMMAND) :])
    assert rest == []
    assert "conveyor.DataGateFindings" in types
    for title, class_path in types.items():
        artifact_class = import_class_by_path(class_path)
        assert title in (artifact_class.TYPE_NAME, "conveyor." + artifact_class.TYPE_NAME)


def test_project_files_point_into_the_image(compiled):
    job, _ = compiled["penguin"]
    text = json.dumps(job)
    assert "/conveyor/schemas/penguin/schema.pbtxt" in text
    assert str(find_project().root) + "/" not in text


@pytest.mark.parametrize("name", config.list_pipelines())
def test_the_nightly_schedule_is_described_for_kfp_and_vertex(compiled, name):
    import kfp_server_api

    _, schedule = compiled[name]
    spec = load_spec(name, env="kubeflow").spec
    recurring = schedule["kfp_recurring_run"]
    assert set(recurring) <= set(kfp_server_api.V2beta1RecurringRun.attribute_map)
    assert set(recurring["trigger"]) <= set(kfp_server_api.V2beta1Trigger.attribute_map)
    cron = recurring["trigger"]["cron_schedule"]
    assert set(cron) <= set(kfp_server_api.V2beta1CronSchedule.attribute_map)
    assert cron["cron"] == "0 " + spec.schedule.cron  # KFP's cron has seconds first
    assert cron["start_time"] == f"{spec.schedule.start_date}T00:00:00Z"
    assert recurring["no_catchup"] is (not spec.schedule.catchup)
    assert schedule["vertex_schedule"]["cron"] == f"TZ=UTC {spec.schedule.cron}"
    assert schedule["job_file"] == f"{name}.json"


def test_the_gpu_profile_gives_the_trainer_a_gpu(tmp_path):
    job, _ = _compile(tmp_path, "taxi", "--env", "gpu", "--target", "kubeflow")
    containers = _executors(job)
    trainer = containers.pop("trainer")["resources"]
    assert trainer["accelerator"] == {"type": "NVIDIA_L4", "count": "1"}
    assert trainer["cpuLimit"] == 8
    gpu_image = load_spec("taxi", env="gpu").spec.runtime.container.image
    for task, container in containers.items():
        assert "accelerator" not in container["resources"], task
        assert container["image"] == gpu_image


@pytest.mark.parametrize("name", config.list_pipelines())
def test_the_exit_handler_gets_the_final_status_after_every_task(compiled, name):
    from kfp.pipeline_spec import pipeline_spec_pb2

    job, _ = compiled[name]
    spec = pipeline_spec_pb2.PipelineSpec()
    json_format.ParseDict(job["pipelineSpec"], spec, ignore_unknown_fields=False)
    root = spec.root.dag.tasks
    assert set(root) == {PIPELINE_DAG, EXIT_HANDLER_ID}
    handler = root[EXIT_HANDLER_ID]
    # Run once the pipeline's sub-DAG is done, whatever its state, and told that state.
    assert list(handler.dependent_tasks) == [PIPELINE_DAG]
    completed = pipeline_spec_pb2.PipelineTaskSpec.TriggerPolicy.ALL_UPSTREAM_TASKS_COMPLETED
    assert handler.trigger_policy.strategy == completed
    final_status = handler.inputs.parameters["final_status"]
    assert final_status.task_final_status.producer_task == PIPELINE_DAG
    # The spec it alerts for is the one compiled (its name and webhook variable).
    resolved = handler.inputs.parameters["resolved_spec"].runtime_value.constant.string_value
    resolved = resolved or (
        handler.inputs.parameters["resolved_spec"].runtime_value.constant_value.string_value
    )
    assert json.loads(resolved) == load_spec(name, env="kubeflow").spec.to_yaml_dict()
    # Its report goes under the profile's workdir, a Cloud Storage mount every task sees.
    workdir = handler.inputs.parameters["workdir"].runtime_value
    assert (workdir.constant.string_value or workdir.constant_value.string_value).startswith(
        "/gcs/"
    )
    # KFP fills in the job's creation time: the run's duration and whether it pushed.
    created = handler.inputs.parameters["job_created_at"].runtime_value
    assert (created.constant.string_value or created.constant_value.string_value) == (
        "{{$.pipeline_job_create_time_utc}}"
    )
    # Every parameter RunFinish takes is given (KFP would fail the task on a missing one).
    from components.run_finish.component import RunFinish

    assert set(handler.inputs.parameters) == set(RunFinish.SPEC_CLASS.PARAMETERS)
    # The pipeline's own tasks are all inside the sub-DAG.
    assert set(spec.components[PIPELINE_DAG].dag.tasks) == set(job_tasks(job["pipelineSpec"])) - {
        EXIT_HANDLER_ID
    }
    executor = _executors(job)[EXIT_HANDLER_ID]
    assert executor["args"][executor["args"].index("--executor_class_path") + 1] == (
        "components.run_finish.component.RunFinish_Executor"
    )


@pytest.mark.parametrize("name", config.list_pipelines())
def test_the_served_model_and_data_gate_tasks_never_come_from_the_cache(compiled, name):
    # Their answer is what the serving folder holds when they run: a cache hit from an earlier
    # night would hand the Trainer and the model gate a model no longer served.
    job, _ = compiled[name]
    spec = load_spec(name, env="kubeflow").spec
    tasks = job_tasks(job["pipelineSpec"])
    served = SERVED_MODEL_RESOLVERS & {c.id for c in spec.components}
    assert served, "every example pipeline compares with the served model"
    # Where the Pusher publishes versions is where they look.
    pusher = tasks["pusher"]["inputs"]["parameters"]["custom_config"]["runtimeValue"]
    serving_dir = json.loads(pusher["constant"])["serving_base_dir"]
    assert serving_dir.startswith("/gcs/")
    for task in served:
        assert tasks[task]["cachingOptions"] == {"enableCache": False}, task
        value = tasks[task]["inputs"]["parameters"]["serving_dir"]["runtimeValue"]["constant"]
        assert value == serving_dir, task
    # Nor a data gate that measures drift: its baseline is the last span accepted before it.
    if spec.data.drift:
        assert tasks["data_gate"]["cachingOptions"] == {"enableCache": False}
        served = served | {"data_gate"}
    # Nor the first task's: holding the lock, and the workdir's state, are not results to reuse.
    assert tasks[RUN_START_ID]["cachingOptions"] == {"enableCache": False}
    cached = spec.runtime.enable_cache
    for task in set(tasks) - served - {EXIT_HANDLER_ID, RUN_START_ID}:
        assert tasks[task].get("cachingOptions", {}).get("enableCache", False) is cached, task
