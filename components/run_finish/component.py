"""Kubeflow's exit handler: after every task of a run, report and alert when it did not succeed.

Kubeflow Pipelines (and Vertex AI) run an exit handler once the pipeline's tasks are done,
whatever their state, and hand it the run's final status: a JSON `PipelineTaskFinalStatus`
(kfp-pipeline-spec) with the state (`SUCCEEDED`, `FAILED`, `CANCELLED`...) and the error. This
component parses it and, for a run that did not succeed, writes the run's report where
`conveyor report RUN_ID --workdir W` finds it (`<workdir>/runs/<pipeline>/<job>/report.html`;
on Vertex AI the workdir is a `/gcs/BUCKET/...` path, which every task sees as a mounted file
system), then POSTs the same alert `conveyor run` sends (`pipelines.ops.alerts`), naming the
report, to the webhook in `runtime.alert_webhook_env`, which the container's environment must
hold.

What it cannot do, and why: KFP records the run in its own ML Metadata, which a task cannot
read, so the report and the alert carry the run, its state and KFP's error (which names the
failed task) but no node details, no data gate findings and no evaluation; a data gate that
refused the data shows as a failed run. The outcome record exists only for `conveyor run` and
Airflow, whose store Conveyor reads.
"""

from tfx.dsl.component.experimental.annotations import Parameter
from tfx.dsl.component.experimental.decorators import component

SUCCEEDED = "SUCCEEDED"


def final_status_result(final_status: str, pipeline: str):
    """The run's result as the final status tells it: None for a run that succeeded (nothing
    to alert), else a FAILED `RunResult` whose message is KFP's state and error.

    Args:
      final_status: the JSON KFP passes (a `PipelineTaskFinalStatus`).
      pipeline: the pipeline's name.

    Raises:
      google.protobuf.json_format.ParseError: the text is not a final status.
    """
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    from pipelines.outcome import Outcome, RunResult

    status = pipeline_spec_pb2.PipelineTaskFinalStatus()
    # Unknown fields are kept out rather than refused: a newer KFP may send more.
    json_format.Parse(final_status, status, ignore_unknown_fields=True)
    state = status.state.upper() or "UNKNOWN"
    if state == SUCCEEDED:
        return None
    job = status.pipeline_job_resource_name or status.pipeline_job_name or None
    error = status.error.message.strip()
    message = f"the Kubeflow run {job or '(unnamed)'} ended {state}" + (
        f": {error}" if error else " (KFP gave no error message)"
    )
    return RunResult(run_id=job, pipeline=pipeline, outcome=Outcome.FAILED, message=message)


def report_run_id(result) -> str:
    """The folder name of a Kubeflow run's report: the last part of KFP's job name (a Vertex
    resource name is `projects/P/locations/L/pipelineJobs/JOB`), or `unnamed-<UTC time>`."""
    import datetime

    if result.run_id:
        return result.run_id.rstrip("/").rsplit("/", 1)[-1]
    return "unnamed-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def write_final_status_report(result, spec, workdir: str) -> str:
    """Writes the report of a run that did not succeed under `workdir`; returns its path.

    The report carries what the final status says (state, error, failed task); KFP's own ML
    Metadata, which holds the node details, is not readable from a task.
    """
    from pathlib import Path

    from pipelines.ops import report
    from pipelines.paths import RunPaths

    paths = RunPaths(Path(workdir), spec)
    run_dir = paths.run_dir(report_run_id(result))
    run_dir.mkdir(parents=True, exist_ok=True)
    result.run_dir = str(run_dir)
    target = run_dir / report.REPORT_FILE
    partial = target.with_name(report.REPORT_FILE + ".partial")
    partial.write_text(report.render_report(result, paths, {}), encoding="utf-8")
    partial.replace(target)
    return str(target)


def alert_final_status(final_status: str, resolved_spec: str, workdir: str = "") -> str:
    """Writes the report and sends the alert of a run that did not succeed; returns what
    happened, in one line.

    Args:
      final_status: the JSON KFP passes.
      resolved_spec: the spec the job was compiled from, as JSON (its name, and the variable
        that names the webhook).
      workdir: the working directory the job was compiled for (where its report goes); empty:
        no report.
    """
    import json

    from pipelines.ops.alerts import send_alert
    from pipelines.spec.models import PipelineSpec

    spec = PipelineSpec.model_validate(json.loads(resolved_spec))
    result = final_status_result(final_status, spec.name)
    if result is None:
        return f"{spec.name}: the run succeeded; no alert"
    written = ""
    if workdir:
        try:
            written = f"; report: {write_final_status_report(result, spec, workdir)}"
        except Exception as err:  # the alert must go out even when the report cannot be written
            written = f"; no report written: {type(err).__name__}: {err}"
    sent = send_alert(spec, result)
    if sent is None:
        variable = spec.runtime.alert_webhook_env
        sent = f"no alert sent: ${variable} is empty" if variable else "no webhook configured"
    return f"{spec.name}: FAILED: {result.message}; {sent}{written}"


@component
def RunFinish(  # noqa: N802 - TFX names components like classes
    final_status: Parameter[str],
    resolved_spec: Parameter[str],
    workdir: Parameter[str],
) -> None:
    """The exit handler: reports and alerts a run that did not succeed (see
    `alert_final_status`).

    Its instance takes `final_status=FinalStatusStr()`, which KFP fills with the final status.
    """
    print(alert_final_status(final_status, resolved_spec, workdir))
