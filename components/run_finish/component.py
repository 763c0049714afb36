"""Kubeflow's exit handler: after every task of a run, alert when the run did not succeed.

Kubeflow Pipelines (and Vertex AI) run an exit handler once the pipeline's tasks are done,
whatever their state, and hand it the run's final status: a JSON `PipelineTaskFinalStatus`
(kfp-pipeline-spec) with the state (`SUCCEEDED`, `FAILED`, `CANCELLED`...) and the error. This
component parses it and, for a run that did not succeed, POSTs the same alert `conveyor run`
sends (`pipelines.ops.alerts`) to the webhook in `runtime.alert_webhook_env`, which the
container's environment must hold.

What it cannot do, and why: KFP records the run in its own ML Metadata, which a task cannot
read, so the alert names the run and KFP's error but no node, no data gate findings and no
report; a data gate that refused the data shows as a failed run (KFP's error names the failed
task). The run report and the outcome record exist only for `conveyor run` and Airflow, whose
store Conveyor reads.
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


def alert_final_status(final_status: str, resolved_spec: str) -> str:
    """Sends the alert of a run that did not succeed; returns what happened, in one line.

    Args:
      final_status: the JSON KFP passes.
      resolved_spec: the spec the job was compiled from, as JSON (its name, and the variable
        that names the webhook).
    """
    import json

    from pipelines.ops.alerts import send_alert
    from pipelines.spec.models import PipelineSpec

    spec = PipelineSpec.model_validate(json.loads(resolved_spec))
    result = final_status_result(final_status, spec.name)
    if result is None:
        return f"{spec.name}: the run succeeded; no alert"
    sent = send_alert(spec, result)
    if sent is None:
        variable = spec.runtime.alert_webhook_env
        sent = f"no alert sent: ${variable} is empty" if variable else "no webhook configured"
    return f"{spec.name}: FAILED: {result.message}; {sent}"


@component
def RunFinish(  # noqa: N802 - TFX names components like classes
    final_status: Parameter[str],
    resolved_spec: Parameter[str],
) -> None:
    """The exit handler: alerts for a run that did not succeed (see `alert_final_status`).

    Its instance takes `final_status=FinalStatusStr()`, which KFP fills with the final status.
    """
    print(alert_final_status(final_status, resolved_spec))
