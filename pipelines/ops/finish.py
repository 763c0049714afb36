"""What follows every run, whoever ran it: retention, the run report, the alert, the run's
Prometheus metrics, the outcome record.

Kept apart from the runner so that the runner only runs the pipeline: `conveyor run`, the
process that supervises it (when the pipeline process is killed), and Airflow's final task all
finish a run the same way. `finish` takes the runner's answer; `finish_from_metadata` reads the
answer back from ML Metadata first, for a run whose runner cannot answer (an orchestrator's
tasks, a killed process).

Kubeflow is not finished here: KFP keeps its own ML Metadata, which its exit handler cannot
read; `components.run_finish` reports and alerts from the final status KFP hands it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pipelines.core.metadata import node_context_type_id, node_id_of, open_store, run_context
from pipelines.core.outcome import Outcome, RunResult
from pipelines.core.paths import RunPaths
from pipelines.ops import alerts, fingerprint, metrics, report, serving_state
from pipelines.run import local
from pipelines.run.events import emit, structured
from pipelines.run.plan import Run
from pipelines.spec.loading import LoadedSpec
from pipelines.spec.models import PipelineSpec

DATA_GATE_TYPE = "data_gate"
GATE_FINDINGS_KEY = "findings"  # the data gate's output key (components.data_gate.component)


def finish(
    planned: Run,
    result: RunResult,
    inputs_fingerprint: dict,
    echo: Callable[[str], None] = print,
    alert_first: bool = False,
) -> None:
    """Writes the run's report, sends its alert, exports its metrics (`runtime.metrics`) and
    records a final outcome; no report, alert or metrics sink that fails can stop the record,
    nor change the run's outcome.

    Args:
      planned: the run as planned (spec, paths, span).
      result: what the runner answered.
      inputs_fingerprint: the inputs' fingerprint taken before the run started (an input that
        changed while it ran must not be recorded as what this run consumed).
      echo: where progress lines go.
      alert_first: send the alert before writing the report, for a process that may itself be
        killed soon (a SIGTERM's grace period): the report may import TensorFlow Model
        Analysis (seconds), and the alert must not wait for it. The alert then names no report.
    """
    if Outcome(result.outcome).ok:
        # After the push is in ML Metadata, never before (see serving_state); a failed run
        # changes nothing in serving.
        try:
            serving_state.retain(planned.paths, echo)
        except OSError as err:  # the new version is served either way: the outcome stands
            echo(f"warning: old versions not retired: {err}")
    try:
        if not alert_first:
            _write_report(planned, result, echo)
        _send_alert(planned, result, echo)
        if alert_first:
            _write_report(planned, result, echo)
        _log_decisions(planned, result, echo)
        _export_metrics(planned, result, echo)
    finally:
        # Recorded whatever the alert did: a night whose record is lost runs again and again.
        if Outcome(result.outcome).final:
            fingerprint.record_outcome(
                planned.paths, result.run_id, result.outcome, inputs_fingerprint, planned.span
            )


def _write_report(planned: Run, result: RunResult, echo: Callable[[str], None]) -> None:
    try:
        written = report.write_report(result, planned.paths)
        emit(echo, "report", f"report: {written}", run_id=result.run_id, path=str(written))
    except Exception as err:  # the report is a view of the run, never a reason to fail it
        echo(f"warning: no run report written: {type(err).__name__}: {err}")


def _log_decisions(planned: Run, result: RunResult, echo: Callable[[str], None]) -> None:
    """A JSON log's `gate` events (data gate, model, infra validation, TF Lite) and `push`
    event; a text log has the report for them."""
    if not structured(echo):
        return
    try:
        decided = report.gate_decisions(result, planned.paths)
    except Exception as err:  # a log line, never the run's outcome
        echo(f"warning: gate decisions not logged: {type(err).__name__}: {err}")
        return
    gates = (("data_gate", decided.data_gate), ("model", decided.model))
    for gate, badge in (*gates, ("infra_validation", decided.infra), ("tflite", decided.tflite)):
        if badge is not None:
            emit(echo, "gate", run_id=result.run_id, gate=gate, decision=badge.text,
                 note=badge.note)  # fmt: skip
    emit(echo, "push", run_id=result.run_id, decision=decided.push.text,
         pushed_version=result.pushed_version, note=decided.push.note)  # fmt: skip


def _export_metrics(planned: Run, result: RunResult, echo: Callable[[str], None]) -> None:
    try:
        metrics.export_run_metrics(result, planned.paths, echo)
    except Exception as err:  # metrics are news of the run, never its outcome
        echo(f"warning: run metrics not exported: {type(err).__name__}: {err}")


def _send_alert(planned: Run, result: RunResult, echo: Callable[[str], None]) -> None:
    try:
        alerted = alerts.send_alert(planned.spec, result)
        if alerted:
            echo(alerted)
    except Exception as err:  # an alert is news of the run, never its outcome
        # Its type only: the text of an error about the webhook may quote its (secret) URL.
        echo(f"alert not delivered: {type(err).__name__} while sending it")


def finish_read_back(
    planned: Run,
    result: RunResult,
    inputs_fingerprint: dict | None = None,
    echo: Callable[[str], None] = print,
    alert_first: bool = False,
) -> RunResult:
    """Finishes a run whose result was read back from ML Metadata (`local.summarise`) rather
    than answered by a runner in this process: writes its folder (resolved spec, summary.json),
    then `finish`es it.

    Args:
      planned: the run as planned (spec, paths, span).
      result: the summarised run; its `run_id` names its folder.
      inputs_fingerprint: the inputs' fingerprint taken before the run; None computes it now,
        which only a final outcome needs (an orchestrator's run has no "before" here).
      echo: where progress lines go.
      alert_first: see `finish`.
    """
    run_dir = planned.paths.run_dir(str(result.run_id))
    if not run_dir.is_dir():
        local.open_run_dir(planned, str(result.run_id))
    local.complete_result(result, planned.spec, planned.span, run_dir)
    # A failure's text goes to the summary, the report and the alert: no secret in it.
    result.message = local.redact(result.message, planned.spec)
    local.write_summary(run_dir, result)
    if inputs_fingerprint is None:
        final = Outcome(result.outcome).final
        inputs_fingerprint = fingerprint.compute(planned.paths, planned.span) if final else {}
    finish(planned, result, inputs_fingerprint, echo, alert_first)
    return result


def compiled_run(spec: PipelineSpec, workdir: str | Path, span: int | None) -> Run:
    """A `Run` for a spec an orchestrator runs from its compiled, resolved form (the Airflow
    DAG file holds the resolved spec, not its profile and layers)."""
    loaded = LoadedSpec(spec, spec.runtime.orchestrator.value, ("the compiled, resolved spec",))
    return Run(loaded, RunPaths(workdir=Path(workdir).resolve(), spec=spec), span)


def finish_from_metadata(
    spec: PipelineSpec,
    workdir: str | Path,
    run_id: str,
    span: int | None,
    echo: Callable[[str], None] = print,
    failure: BaseException | str | None = None,
) -> RunResult:
    """Reads the run `run_id` back from ML Metadata and finishes it: summary, report, alert, and
    the outcome record of a final outcome.

    What an orchestrator's final step calls, once every task of the run is done: the result is
    built the way the local runner builds its own (`local.summarise`).

    Args:
      spec: the resolved spec the run ran.
      workdir: the working directory it ran in (its store, serving, runs folders).
      run_id: the name of the run's context in ML Metadata.
      span: the span the run ingested (None: unspanned data, or read from its Examples).
      echo: where progress lines go.
      failure: what stopped the run, when something did (see `local.summarise`).

    Returns:
      The run's result, as written to its summary.
    """
    planned = compiled_run(spec, workdir, span)
    result = local.summarise(spec.name, run_id, planned.paths, failure)
    return finish_read_back(planned, result, None, echo)


# --- Airflow's final task ----------------------------------------------------------------------


def airflow_run_id(pipeline: str, dag_run_id: str) -> str:
    """The name TFX's Airflow runner gives a DAG run's context in ML Metadata (its legacy
    launcher's `<pipeline>.<run id>`), which is also the run's id and folder name here."""
    return f"{pipeline}.{dag_run_id}"


def gate_findings(paths: RunPaths, run_id: str, gate_id: str) -> dict | None:
    """The findings a data gate wrote in the run `run_id` before it refused the data, or None.

    A failed execution publishes no artifact, but the gate writes its findings into its output
    folder first; TFX names that folder `<pipeline root>/<node>/<output key>/<execution id>`, so
    the gate's own execution in this run (from ML Metadata) finds this run's file, never an
    earlier run's.
    """
    import json

    store = open_store(paths.spec, paths.metadata_path)
    context = run_context(store, run_id) if store is not None else None
    if context is None:
        return None
    node_type = node_context_type_id(store)
    mine = [
        e.id
        for e in store.get_executions_by_context(context.id)
        if node_id_of(store, e, node_type) == gate_id
    ]
    for execution_id in sorted(mine, reverse=True):  # a retried gate: its latest execution
        found = paths.pipeline_root / gate_id / GATE_FINDINGS_KEY / str(execution_id)
        if (found / local.GATE_FINDINGS_FILE).is_file():
            return json.loads((found / local.GATE_FINDINGS_FILE).read_text())
    return None


def orchestrated_failure(
    planned: Run, run_id: str, failed_tasks: Iterable[str], where: str
) -> BaseException | str | None:
    """Why an orchestrated run stopped, from the tasks that failed in it: a data gate that
    refused the data (a `DataGateError` with its findings: the run is BLOCKED), or the failed
    tasks named (FAILED). None when no task failed.

    Args:
      planned: the run (spec, paths, span).
      run_id: the run's context name in ML Metadata.
      failed_tasks: the node ids of the tasks that failed (not those skipped after them).
      where: what holds the tasks' logs, for the message ("Airflow DAG run manual__...").
    """
    from pipelines.builder import spans

    failed = sorted(failed_tasks)
    if not failed:
        return None
    spec = planned.spec
    gates = {c.id for c in spec.components if c.type == DATA_GATE_TYPE}
    for gate in sorted(gates & set(failed)):
        findings = gate_findings(planned.paths, run_id, gate)
        if findings is not None and findings.get("passed") is False:
            from components.data_gate.component import DataGateError, problems_of

            problems = problems_of(findings)
            # The words the gate's own error uses (its text stays in the task's log).
            return DataGateError(
                f"Data gate: the data in {planned.paths.input_dir} "
                f"({spans.describe(spec, planned.span)}) is not fit to train on, so the run "
                f"stopped before training and nothing was pushed. {len(problems)} "
                f"problem{'' if len(problems) == 1 else 's'}: " + " | ".join(problems),
                findings,
            )
    several = len(failed) > 1
    return (
        f"task{'s' if several else ''} {', '.join(failed)} failed in {where}; "
        f"{'their logs say' if several else 'its log says'} why"
    )


def finish_dag_run(
    resolved_spec: dict[str, Any],
    workdir: str,
    dag_run,
    ds: str | None = None,
    echo: Callable[[str], None] = print,
    final_task_id: str | None = None,
) -> RunResult:
    """Finishes one Airflow DAG run of a Conveyor pipeline: reads it back from ML Metadata,
    writes its summary and report, alerts when it was blocked or failed, and records a final
    outcome. The failed tasks come from Airflow (TFX's Airflow runner leaves a failed task's
    execution RUNNING in ML Metadata, so the store cannot tell a failure from a crash).

    Args:
      resolved_spec: the spec as the DAG file holds it.
      workdir: the run's working directory.
      dag_run: Airflow's DagRun (its `run_id` and task instances).
      ds: the run's logical date (YYYY-MM-DD): a spec with dated spans ingested that night.
      echo: where progress lines go (the task's log).
      final_task_id: this task's own id, left out of the failed tasks.
    """
    from pipelines.builder import spans

    spec = PipelineSpec.model_validate(resolved_spec)
    span = None
    if spec.data.dated_spans and ds:
        span = spans.span_of_date(datetime.date.fromisoformat(ds))
    planned = compiled_run(spec, workdir, span)
    run_id = airflow_run_id(spec.name, dag_run.run_id)
    where = f"Airflow DAG run {dag_run.run_id}"
    states = {
        ti.task_id: str(ti.state)
        for ti in dag_run.get_task_instances()
        if ti.task_id != final_task_id
    }
    failed = [task for task, state in states.items() if state == "failed"]
    failure = orchestrated_failure(planned, run_id, failed, where)
    # A task neither succeeded nor failed nor skipped for a failure (someone marked it, or the
    # run was stopped): the night did not run through, so it is no outcome to record either.
    unfinished = sorted(
        f"{task} ({state})"
        for task, state in states.items()
        if state not in ("success", "failed", "upstream_failed")
    )
    if failure is None and unfinished:
        failure = f"tasks did not run through in {where}: {', '.join(unfinished)}"
    return finish_from_metadata(spec, workdir, run_id, span, echo, failure)


def prepare_airflow_run(resolved_spec: dict[str, Any], workdir: str, **_context: Any) -> str:
    """The callable of the first task Conveyor adds to an Airflow DAG (`pipelines.run.airflow`):
    reconciles serving with ML Metadata before the night's TFX tasks run, as `conveyor run`
    does before each run.

    Returns:
      What reconcile did, for the task's log and XCom.
    """
    from pipelines.spec.models import PipelineSpec

    spec = PipelineSpec.model_validate(resolved_spec)
    done = serving_state.reconcile(RunPaths(workdir=Path(workdir).resolve(), spec=spec), print)
    return done.describe() if (done.changed or done.unknown_kept) else "serving: in step"


def finish_airflow_run(
    resolved_spec: dict[str, Any],
    workdir: str,
    final_task_id: str,
    dag_run=None,
    ds: str | None = None,
    **_context: Any,
) -> str:
    """The callable of the final task Conveyor adds to an Airflow DAG (`pipelines.run.airflow`):
    finishes the DAG run (`finish_dag_run`) and fails the task when the run was blocked or
    failed, so that Airflow marks the DAG run failed (the final task is the DAG's only leaf:
    its state is the run's state).

    Returns:
      The verdict line, for the task's log and XCom.

    Raises:
      AirflowFailException: the run was blocked or failed (after its report and alert).
    """
    result = finish_dag_run(resolved_spec, workdir, dag_run, ds, final_task_id=final_task_id)
    verdict = f"{Outcome(result.outcome).verdict}: {result.message}"
    print(verdict)
    if Outcome(result.outcome).alerts:
        from airflow.exceptions import AirflowFailException

        raise AirflowFailException(verdict)
    return verdict
