"""A Kubeflow run's first task, `run_start`: takes the pipeline's lock, reconciles serving, and
decides whether the run's inputs changed since the last final outcome, as `conveyor run` does
before it imports TFX.

1. The lock of one run at a time (`pipelines.core.job_lock`), which the run's exit handler
   releases (`components.run_finish`): a second run of the pipeline on the same workdir (a
   run started by hand, a backfill, while the nightly runs) waits for the first, or with
   `runtime.concurrency.when_busy: refuse` fails at once naming the run that holds it, before
   it reads data or touches serving.
2. Serving put back in step with the record the exit handlers keep in `runtime.metadata`
   (`serving_state.reconcile`), as `conveyor run` and Airflow's first task do.
3. The night's inputs: the span the run reads (the job's `range_config`, else for dated spans
   the night before KFP's schedule time, else the newest span; `pipelines.run.kubeflow_driver`
   decides it for ExampleGen the same way), their fingerprint (`pipelines.run.fingerprint`:
   the data, the spec, the schema the run imports, the code), and whether the last final run of
   that span recorded the same (`fingerprint.unchanged_since`). It writes what it found into the
   run's folder (`RUN_INPUTS_FILE`), where the exit handler reads it, and gives its output
   artifact the custom property `inputs`: `changed` or `unchanged`.

Every other task of the job runs after it and under the condition `inputs == "changed"`
(`pipelines.builder.pipeline.build_pipeline`'s `first`, given `run_start_node` by
`pipelines.run.kubeflow`): an unchanged night's tasks are skipped, nothing reads data or
touches serving, and the exit handler says UNCHANGED naming the run it repeats, as a local
night does. A changed night's exit handler records its outcome with the fingerprint taken
here, before the run read anything (`pipelines.finish.outcome_record`).

The job's runtime parameter `force` (`FORCE_PARAMETER`, set to `true` by `conveyor submit
--force`) runs the night whatever the record says, as `conveyor run --force` does.

KFP's cache is off for this task: holding the lock, and what the workdir holds now, are not
results to reuse.
"""

import json

from tfx.dsl.component.experimental.annotations import OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact

from pipelines.core.artifact_files import (
    ACCEPTED_SCHEMA_FILE,
    FORCE_PARAMETER,
    INPUTS_CHANGED,
    INPUTS_PROPERTY,
    INPUTS_UNCHANGED,
    RUN_INPUTS_FILE,
)

POLL_SECONDS = 30
RUN_START_ID = "run_start"
INPUTS_KEY = "inputs"  # the output's key


class RunInputs(artifact.Artifact):
    """Whether a Kubeflow run's inputs changed since the last final outcome: the custom
    property `inputs` (`changed`, `unchanged`) the other tasks' condition reads."""

    # `namespace.Name`: the form Kubeflow Pipelines requires of artifact types.
    TYPE_NAME = "conveyor.RunInputs"


class PipelineBusy(RuntimeError):
    """Another Kubeflow run of the pipeline holds the lock."""


def take_or_wait(
    lock: str,
    job: str,
    hold_seconds: int,
    when_busy: str,
    wait_seconds: int,
    sleep=None,
    clock=None,
) -> None:
    """Takes the lock for `job`, waiting for it up to `wait_seconds` under `when_busy: wait`.

    Raises:
      PipelineBusy: it is held by another run (refuse), or still after the wait.
    """
    import time

    from pipelines.core import job_lock

    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    deadline = clock() + (wait_seconds if when_busy == "wait" else 0)
    while True:
        holder = job_lock.take(lock, job, hold_seconds)
        if holder is None:
            print(f"conveyor: run {job} holds {lock}", flush=True)
            return
        left = deadline - clock()
        if left <= 0:
            key = "runtime.concurrency"
            how = (
                f"{key}.when_busy is 'refuse'"
                if when_busy != "wait"
                else f"waited {wait_seconds} s ({key}.wait_seconds)"
            )
            raise PipelineBusy(
                f"the pipeline is busy: {holder.describe()} holds {lock}; {how}. Its exit "
                "handler releases it when that run ends."
            )
        print(f"conveyor: waiting for {lock}: {holder.describe()}", flush=True)
        sleep(min(POLL_SECONDS, left))


def run_paths(resolved_spec: str, workdir: str):
    """The run's paths from the spec the job was compiled with (JSON) and its workdir."""
    from pipelines.core.object_path import as_path
    from pipelines.core.paths import RunPaths
    from pipelines.spec.models import PipelineSpec

    spec = PipelineSpec.model_validate(json.loads(resolved_spec))
    return RunPaths(as_path(workdir), spec)


def chosen_span(paths, range_config: str, scheduled_at: str, zone: str) -> int | None:
    """The span the run's ExampleGen reads, decided as its driver decides it
    (`kubeflow_driver.decide_range`): the job's `range_config`, else for dated spans the night
    before `scheduled_at` in `zone`, else the newest span on disk; None for a spec without
    spans, or when no span has data (ExampleGen then fails on its own).

    Raises:
      ValueError: `range_config` is not a RangeConfig with a static range.
    """
    from google.protobuf import json_format
    from tfx.proto import range_config_pb2

    from pipelines.builder.spans import available_spans
    from pipelines.run import kubeflow_driver

    data = paths.spec.data
    if not data.span_pattern:
        return None
    parameters = {kubeflow_driver.RANGE_CONFIG: range_config}
    if data.dated_spans:
        parameters[kubeflow_driver.SCHEDULED_AT] = scheduled_at
    decided = kubeflow_driver.decide_range(parameters, zone).get(kubeflow_driver.RANGE_CONFIG)
    if decided:
        config = json_format.Parse(decided, range_config_pb2.RangeConfig())
        if not config.HasField("static_range"):
            raise ValueError(f"range_config {decided!r} names no static_range")
        return config.static_range.start_span_number
    found = available_spans(paths.spec, paths.input_dir)
    return found[-1] if found else None


def kept_schema(paths):
    """For an inferring spec, the file in which Kubeflow's data gate keeps the last accepted
    run's schema (what this run imports); None for a curated schema."""
    from pipelines.spec.models import SchemaSource

    if paths.spec.schema_.source is not SchemaSource.INFER:
        return None
    return paths.runs_dir / ACCEPTED_SCHEMA_FILE


def forced(value: str) -> bool:
    """Whether the job's `force` parameter asks to run an unchanged night."""
    return str(value).strip().lower() in ("true", "1", "yes")


def decide_inputs(paths, folder, span: int | None, force: bool = False) -> dict:
    """The run's inputs (its span, their fingerprint) and the record of the last final run of
    that span when nothing changed since (else None; always None when `force`d), written as
    `RUN_INPUTS_FILE` into the run's folder (None: KFP named no job, and nothing is written)
    for the exit handler."""
    from pipelines.core import storage
    from pipelines.run import fingerprint

    schema = kept_schema(paths)
    found = {
        "span": span,
        "fingerprint": fingerprint.compute(paths, span, schema),
        "unchanged": None if force else fingerprint.unchanged_since(paths, span, schema),
        "forced": force,
    }
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        storage.write_text(str(folder / RUN_INPUTS_FILE), json.dumps(found, indent=2))
    return found


@component
def RunStart(  # noqa: N802 - TFX names components like classes
    lock: Parameter[str],
    job_name: Parameter[str],
    job_resource_name: Parameter[str],
    hold_seconds: Parameter[int],
    when_busy: Parameter[str],
    wait_seconds: Parameter[int],
    resolved_spec: Parameter[str],
    workdir: Parameter[str],
    range_config: Parameter[str],
    scheduled_at: Parameter[str],
    timezone: Parameter[str],
    force: Parameter[str],
    inputs: OutputArtifact[RunInputs],
) -> None:
    """Takes the lock for this run (named as the exit handler names it, from KFP's job name
    placeholders), or waits, or fails naming the run that holds it (`take_or_wait`); then,
    holding it, reconciles serving and decides whether the inputs changed (module docstring)."""
    from components.run_finish.component import kubeflow_run_folder, report_run_id
    from pipelines import serving_state

    paths = run_paths(resolved_spec, workdir)
    resolved = [n for n in (job_resource_name, job_name) if n and not n.startswith("{{")]
    if not resolved:
        print("conveyor: KFP named no job: the run takes no lock and runs", flush=True)
    else:
        take_or_wait(lock, report_run_id(resolved[0]), hold_seconds, when_busy, wait_seconds)
    serving_state.reconcile(paths, lambda line: print(line, flush=True))
    span = chosen_span(paths, range_config, scheduled_at, timezone)
    folder = kubeflow_run_folder(str(paths.runs_dir), job_name, job_resource_name)
    found = decide_inputs(
        paths, None if folder is None else paths.runs_dir / folder, span, forced(force)
    )
    previous = found["unchanged"] if folder is not None else None
    inputs.set_string_custom_property(
        INPUTS_PROPERTY, INPUTS_UNCHANGED if previous else INPUTS_CHANGED
    )
    reads = "no spans" if span is None else f"span {span}"
    if previous:
        print(
            f"conveyor: {reads}: same data, spec, schema and code as run {previous['run_id']}; "
            "the run's tasks are skipped",
            flush=True,
        )
    elif found["forced"]:
        print(f"conveyor: {reads}: runs whatever changed (force)", flush=True)
    else:
        print(f"conveyor: {reads}: inputs changed since the last final outcome", flush=True)


def run_start_node(spec, paths):
    """The RunStart node of a Kubeflow build and the condition every other node runs under
    (`spec.runtime.concurrency` says how long it holds the lock and whether a busy run waits).
    """
    from tfx.orchestration import data_types

    from pipelines.builder.nodes.example_gen import night_parameter
    from pipelines.core import job_lock

    concurrency = spec.runtime.concurrency
    node = RunStart(
        lock=job_lock.lock_uri(str(paths.runs_dir)),
        resolved_spec=json.dumps(spec.to_yaml_dict()),
        workdir=str(paths.workdir),
        job_name="{{$.pipeline_job_name}}",
        job_resource_name="{{$.pipeline_job_resource_name}}",
        hold_seconds=concurrency.hold_seconds,
        when_busy=concurrency.when_busy.value,
        wait_seconds=concurrency.wait_seconds,
        # The same runtime parameter as ExampleGen's, so both read the same night.
        range_config=night_parameter() if spec.data.span_pattern else "",
        scheduled_at="{{$.pipeline_job_schedule_time_utc}}",
        timezone=spec.schedule.timezone,
        force=data_types.RuntimeParameter(name=FORCE_PARAMETER, ptype=str, default=""),
    ).with_id(RUN_START_ID)
    changed = node.outputs[INPUTS_KEY].future()[0].custom_property(INPUTS_PROPERTY)
    return node, changed == INPUTS_CHANGED
