"""Airflow 2: the built pipeline as a DAG (TFX's AirflowDagRunner), one DAG run a night.

`conveyor compile NAME --profile airflow` writes a small DAG file holding the resolved spec and the
working directory; when Airflow imports it, `airflow_dag` validates the spec again and builds
the pipeline with `pipelines.builder.pipeline.build_pipeline`, the same one `conveyor run` runs.

The night: a DAG is built once, when Airflow parses the file, so the night cannot be a
`build_pipeline(night=...)` argument there. Built for Airflow, ExampleGen's `range_config` of a
spec with dated spans is an Airflow template of the DAG run's logical date instead
(`pipelines.builder.nodes.example_gen`), so each night's run ingests exactly that date's span.

What precedes a run: a first task, `conveyor_prepare`, which every TFX task waits for, puts
serving back in step with ML Metadata (`prepare_airflow_run`). The DAG runs
one night at a time (`max_active_runs: 1`); a `conveyor run` of the same workdir is not locked
out by Airflow (the lock is a process's, and a DAG run is many processes).

What follows a run: the DAG file gives `airflow_dag` a final step, which becomes one more task,
`conveyor_finish`, downstream of every TFX task with trigger rule `all_done`: it runs whether
the night pushed, was blocked or failed, and hands the run-finish contract
(`pipelines.finish.contract.finish_run`, which every orchestrator calls) what only Airflow
knows: the DAG run's id and which tasks failed or did not run through (`finish_airflow_run`).
The contract reads the run back from ML Metadata, writes its summary and report, alerts, and
records a final outcome through the recorder the DAG file passes in (the nightly loop's: the
run layer imports no operations). Being the DAG's only leaf, its state is the DAG run's, so it
fails when the night was blocked or failed.
"""

from __future__ import annotations

import datetime
import os
import pprint
import zoneinfo
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.core.object_path import as_path
from pipelines.core.outcome import Outcome, RunResult
from pipelines.core.project import find_project
from pipelines.spec.loading import LoadedSpec
from pipelines.spec.models import Orchestrator, PipelineSpec

if TYPE_CHECKING:  # the run-finish contract is imported by the final task alone
    from pipelines.finish.contract import RunFacts, Stop

FIRST_TASK_ID = "conveyor_prepare"
FINAL_TASK_ID = "conveyor_finish"

_DAG_FILE = '''"""Airflow DAG of the Conveyor pipeline {name!r}: written by `{command}`.

Do not edit: change the spec or the profile and compile again. Airflow imports this file from
its DAG folder; Conveyor must be installed, and the project at CONVEYOR_PROJECT, where the
scheduler and workers run.
"""

import os
import sys

# TFMA and TFX's Keras paths need Keras 2 (tf-keras); set before TensorFlow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The project whose spec this is (its schemas, its modules), found as `conveyor` finds it; its
# modules are imported by the names the spec gives.
os.environ.setdefault("CONVEYOR_PROJECT", {project!r})
sys.path.insert(0, os.environ["CONVEYOR_PROJECT"])

import functools  # noqa: E402

from pipelines.ops.nightly import outcome_recorder  # noqa: E402
from pipelines.run.airflow import (  # noqa: E402
    airflow_dag,
    finish_airflow_run,
    prepare_airflow_run,
)

WORKDIR = {workdir!r}
RESOLVED_SPEC = {spec}

dag = airflow_dag(
    RESOLVED_SPEC,
    WORKDIR,
    first_step=prepare_airflow_run,
    final_step=functools.partial(finish_airflow_run, record_outcome=outcome_recorder),
)
'''


def dag_config(spec: PipelineSpec) -> dict[str, Any]:
    """What AirflowDagRunner passes to `airflow.models.DAG(...)`: the spec's schedule."""
    schedule = spec.schedule
    start = schedule.start_date or datetime.date.today()
    return {
        "schedule": schedule.cron,
        # Airflow fires the cron expression in the start date's zone: the spec's schedule zone.
        "start_date": datetime.datetime(
            start.year, start.month, start.day, tzinfo=zoneinfo.ZoneInfo(schedule.timezone)
        ),
        "catchup": schedule.catchup,
        # One night at a time: a night's run reads the models and spans earlier nights wrote.
        "max_active_runs": 1,
        "description": spec.description,
        "tags": ["conveyor"],
    }


def airflow_dag(
    resolved_spec: dict[str, Any],
    workdir: str,
    final_step: Callable[..., Any] | None = None,
    first_step: Callable[..., Any] | None = None,
):
    """The Airflow DAG of a resolved spec (what the compiled DAG file calls).

    Args:
      resolved_spec: the spec as the DAG file holds it.
      workdir: the working directory the pipeline runs in.
      final_step: what the final task calls once every TFX task is done (see
        `add_final_task`); None builds the TFX tasks alone.
      first_step: what a first task calls before any TFX task starts (see `add_first_task`);
        None adds no first task.
    """
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from tfx.orchestration.airflow.airflow_dag_runner import (
        AirflowDagRunner,
        AirflowPipelineConfig,
    )

    from pipelines.builder.pipeline import build_pipeline
    from pipelines.core.metadata import connection_config
    from pipelines.core.paths import RunPaths

    spec = PipelineSpec.model_validate(resolved_spec)
    paths = RunPaths(workdir=as_path(workdir).resolve(), spec=spec)
    if paths.uses_object_storage:
        # Airflow runs each task in a process that imports the DAG file, which calls this:
        # every task's Beam pipeline then shares its s3:// clients, as a local run's does.
        from pipelines.core import storage

        storage.share_beam_s3_clients()
    pipeline = build_pipeline(
        spec,
        paths.workdir,
        target=Orchestrator.AIRFLOW,
        metadata_connection_config=connection_config(spec, paths.metadata_path),
    )
    runner = AirflowDagRunner(AirflowPipelineConfig(airflow_dag_config=dag_config(spec)))
    dag = runner.run(pipeline)
    if first_step is not None:
        add_first_task(dag, first_step, resolved_spec, str(paths.workdir))
    if final_step is not None:
        add_final_task(dag, final_step, resolved_spec, str(paths.workdir))
    return dag


def add_first_task(
    dag, first_step: Callable[..., Any], resolved_spec: dict[str, Any], workdir: str
):
    """Adds the task every TFX task waits for: `first_step(resolved_spec, workdir, **context)`
    puts serving back in step with ML Metadata (a push killed mid-way) before the night runs.

    Returns:
      The first task (a PythonOperator).
    """
    import functools

    from airflow.operators.python import PythonOperator

    roots = [task for task in dag.tasks if not task.upstream_task_ids]
    first = PythonOperator(
        task_id=FIRST_TASK_ID,
        python_callable=functools.partial(first_step, resolved_spec, workdir),
        retries=0,
        dag=dag,
    )
    first.set_downstream(roots)
    return first


def add_final_task(
    dag, final_step: Callable[..., Any], resolved_spec: dict[str, Any], workdir: str
):
    """Adds the task that finishes each DAG run: downstream of every task already in `dag`, run
    when they are all done, whatever their state (trigger rule `all_done`).

    `final_step(resolved_spec, workdir, final_task_id, **context)` gets Airflow's task context
    (`dag_run`, `ds`...). The spec is bound to it rather than passed as `op_kwargs`, which Airflow
    renders as Jinja templates: a spec's text is data, not a template.

    Returns:
      The final task (a PythonOperator).
    """
    import functools

    from airflow.operators.python import PythonOperator
    from airflow.utils.trigger_rule import TriggerRule

    upstream = list(dag.tasks)
    final = PythonOperator(
        task_id=FINAL_TASK_ID,
        python_callable=functools.partial(final_step, resolved_spec, workdir, FINAL_TASK_ID),
        trigger_rule=TriggerRule.ALL_DONE,
        # A failed or blocked night fails this task on purpose; running it again changes
        # nothing about the night.
        retries=0,
        dag=dag,
    )
    final.set_upstream(upstream)
    return final


def write_dag_file(
    loaded: LoadedSpec, workdir: str, output: Path, overrides: tuple[str, ...] = ()
) -> Path:
    """Writes the DAG file for `loaded` (checked first: it must build) and returns its path."""
    spec = loaded.spec
    command = f"conveyor compile {spec.name} --profile {loaded.env}" + "".join(
        f" --set {o}" for o in overrides
    )
    source = _DAG_FILE.format(
        name=spec.name,
        command=command,
        project=str(find_project().root),
        workdir=str(as_path(workdir).resolve()),
        spec=pprint.pformat(spec.to_yaml_dict(), width=96, sort_dicts=False),
    )
    compile(source, str(output), "exec")  # a DAG file that is not Python fails here, not in Airflow
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(source)
    return output


# --- the first and the final task ---------------------------------------------------------------


def prepare_airflow_run(resolved_spec: dict[str, Any], workdir: str, **_context: Any) -> str:
    """The callable of the first task Conveyor adds to an Airflow DAG: reconciles serving with
    ML Metadata before the night's TFX tasks run, as `conveyor run` does before each run.

    Returns:
      What reconcile did, for the task's log and XCom.
    """
    from pipelines import serving_state
    from pipelines.core.paths import RunPaths

    spec = PipelineSpec.model_validate(resolved_spec)
    done = serving_state.reconcile(RunPaths(workdir=as_path(workdir).resolve(), spec=spec), print)
    return done.describe() if (done.changed or done.unknown_kept) else "serving: in step"


def airflow_run_id(pipeline: str, dag_run_id: str) -> str:
    """The name TFX's Airflow runner gives a DAG run's context in ML Metadata (its legacy
    launcher's `<pipeline>.<run id>`), which is also the run's id and folder name here."""
    return f"{pipeline}.{dag_run_id}"


def airflow_stop(facts: RunFacts, states: dict[str, str], where: str) -> Stop | None:
    """What stopped a DAG run, from its tasks' states: a data gate that refused the data (its
    findings, read from where the gate wrote them: the run is BLOCKED), the failed tasks named
    (COMPONENT_FAILED), or tasks that neither succeeded nor failed (someone marked them, or the
    run was stopped: INTERRUPTED, no outcome to record either). None when every task succeeded.

    TFX's Airflow runner leaves a failed task's execution RUNNING in ML Metadata, so the store
    cannot tell a failure from a crash: Airflow's states can.

    Args:
      facts: the run's facts so far (spec, paths, run id, span).
      states: task id -> Airflow's state of each TFX task (the final task left out).
      where: what holds the tasks' logs, for the message ("Airflow DAG run manual__...").
    """
    from components.data_gate.component import problems_of
    from pipelines.builder import spans
    from pipelines.core.artifact_files import DATA_GATE_TYPE
    from pipelines.core.outcome import Reason
    from pipelines.finish.artifacts import refused_gate_findings
    from pipelines.finish.contract import Stop

    spec = facts.spec
    failed = sorted(task for task, state in states.items() if state == "failed")
    gates = {c.id for c in spec.components if c.type == DATA_GATE_TYPE}
    for gate in sorted(gates & set(failed)):
        findings = refused_gate_findings(facts.paths, str(facts.run_id), gate)
        if findings is not None and _refused(findings):
            problems = problems_of(findings)
            # The words the gate's own error uses (its text stays in the task's log).
            return Stop(
                Reason.DATA_GATE_BLOCKED,
                f"Data gate: the data in {facts.paths.input_dir} "
                f"({spans.describe(spec, facts.span)}) is not fit to train on, so the run "
                f"stopped before training and nothing was pushed. {len(problems)} "
                f"problem{'' if len(problems) == 1 else 's'}: " + " | ".join(problems),
                findings,
            )
    if failed:
        several = len(failed) > 1
        return Stop(
            Reason.COMPONENT_FAILED,
            f"task{'s' if several else ''} {', '.join(failed)} failed in {where}; "
            f"{'their logs say' if several else 'its log says'} why",
        )
    unfinished = sorted(
        f"{task} ({state})"
        for task, state in states.items()
        if state not in ("success", "failed", "upstream_failed")
    )
    if unfinished:
        return Stop(
            Reason.INTERRUPTED, f"tasks did not run through in {where}: {', '.join(unfinished)}"
        )
    return None


def _refused(findings: dict) -> bool:
    """The gate's findings say it refused the data: by their reason code, or (findings written
    before gates recorded one) by `passed`."""
    from pipelines.core.outcome import Reason

    if "reason" in findings:
        return findings["reason"] == Reason.DATA_GATE_BLOCKED.value
    return findings.get("passed") is False


def finish_dag_run(
    resolved_spec: dict[str, Any],
    workdir: str,
    dag_run,
    ds: str | None = None,
    echo: Callable[[str], None] = print,
    final_task_id: str | None = None,
    record_outcome: Callable[..., Callable[[RunResult], None]] | None = None,
) -> RunResult:
    """Finishes one Airflow DAG run of a Conveyor pipeline through the run-finish contract,
    with what only Airflow knows: the DAG run's id (its context in ML Metadata) and its tasks'
    states (`airflow_stop`).

    Args:
      resolved_spec: the spec as the DAG file holds it.
      workdir: the run's working directory.
      dag_run: Airflow's DagRun (its `run_id` and task instances).
      ds: the run's logical date (YYYY-MM-DD): a spec with dated spans ingested that night.
      echo: where progress lines go (the task's log).
      final_task_id: this task's own id, left out of the task states.
      record_outcome: `(paths, span)` -> what records a final outcome (the nightly loop's
        `outcome_recorder`); None records none.
    """
    from pipelines.builder import spans
    from pipelines.core.paths import RunPaths
    from pipelines.finish.contract import RunFacts, compiled_spec, finish_run

    spec = PipelineSpec.model_validate(resolved_spec)
    span = night = None
    if spec.data.dated_spans and ds:
        span = spans.span_of_date(datetime.date.fromisoformat(ds))
        night = spans.date_of_span(span).isoformat()
    paths = RunPaths(workdir=as_path(workdir).resolve(), spec=spec)
    facts = RunFacts(
        compiled_spec(spec),
        paths,
        airflow_run_id(spec.name, dag_run.run_id),
        span=span,
        night=night,
        record_outcome=record_outcome(paths, span) if record_outcome is not None else None,
    )
    states = {
        ti.task_id: str(ti.state)
        for ti in dag_run.get_task_instances()
        if ti.task_id != final_task_id
    }
    facts.stop = airflow_stop(facts, states, f"Airflow DAG run {dag_run.run_id}")
    return finish_run(facts, echo)


def finish_airflow_run(
    resolved_spec: dict[str, Any],
    workdir: str,
    final_task_id: str,
    dag_run=None,
    ds: str | None = None,
    record_outcome: Callable[..., Callable[[RunResult], None]] | None = None,
    **_context: Any,
) -> str:
    """The callable of the final task Conveyor adds to an Airflow DAG: finishes the DAG run
    (`finish_dag_run`) and fails the task when the run alerts (blocked or failed), so that
    Airflow marks the DAG run failed (the final task is the DAG's only leaf: its state is the
    run's state).

    Returns:
      The verdict line, for the task's log and XCom.

    Raises:
      AirflowFailException: the run was blocked or failed (after its report and alert).
    """
    result = finish_dag_run(
        resolved_spec,
        workdir,
        dag_run,
        ds,
        final_task_id=final_task_id,
        record_outcome=record_outcome,
    )
    verdict = f"{Outcome(result.outcome).verdict}: {result.message}"
    print(verdict)
    if Outcome(result.outcome).alerts:
        from airflow.exceptions import AirflowFailException

        raise AirflowFailException(verdict)
    return verdict
