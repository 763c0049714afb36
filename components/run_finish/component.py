"""Kubeflow's exit handler: after every task of a run, report and alert when it did not succeed,
and export the run's metrics.

Kubeflow Pipelines (and Vertex AI) run an exit handler once the pipeline's tasks are done,
whatever their state, and hand it the run's final status: a JSON `PipelineTaskFinalStatus`
(kfp-pipeline-spec) with the state (`SUCCEEDED`, `FAILED`, `CANCELLED`...) and the error. This
component parses it and, for a run that did not succeed, writes the run's report where
`conveyor report RUN_ID --workdir W` finds it (`<workdir>/runs/<pipeline>/<job>/report.html`;
on Vertex AI the workdir is a `/gcs/BUCKET/...` path, which every task sees as a mounted file
system), then POSTs the same alert `conveyor run` sends (`pipelines.ops.alerts`), naming the
report, to the webhook in `runtime.alert_webhook_env`, which the container's environment must
hold.

For every run, whatever its state, it then exports the run's Prometheus metrics to the sinks
in `runtime.metrics` (`pipelines.ops.metrics`: the same names and labels `conveyor run`
exports, pushed as the group `{job, pipeline}`):

- `conveyor_run_outcome`: `failed` for a run that did not succeed; for one that did, `pushed`
  when the newest version in the serving folder was pushed after the job was created, else
  `not_pushed`. Without the job's creation time (`job_created_at`, which KFP fills from
  `{{$.pipeline_job_create_time_utc}}`; a backend that does not resolve it leaves the
  placeholder) pushed and not_pushed cannot be told apart: only `failed` and `blocked` are
  exported, as 0.
- `conveyor_run_finished_timestamp_seconds`: when the exit handler ran;
  `conveyor_run_duration_seconds`: from the job's creation to then (queueing included), when
  the creation time is known.
- `conveyor_model_pushed_version` and `conveyor_model_last_push_timestamp_seconds`: the newest
  version in the serving folder and its push record's time (the Pusher writes both into the
  workdir, which every task sees).
- `conveyor_evaluation_lower_bound`: the spec's floors.

What it cannot do, and why: KFP records the run in its own ML Metadata, which a task cannot
read, so the report and the alert carry the run, its state and KFP's error (which names the
failed task) but no node details, no data gate findings and no evaluation; a data gate that
refused the data shows as a failed run. For the same reason the metrics read from a run's
store are absent: component durations and cache hits, rows, anomalies, drift and skew, the
evaluation's values, the blessings and the span. The outcome record exists only for
`conveyor run` and Airflow, whose store Conveyor reads.
"""

from tfx.dsl.component.experimental.annotations import Parameter
from tfx.dsl.component.experimental.decorators import component

SUCCEEDED = "SUCCEEDED"


def parse_final_status(final_status: str):
    """KFP's final status JSON as a `PipelineTaskFinalStatus` proto.

    Raises:
      google.protobuf.json_format.ParseError: the text is not a final status.
    """
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    status = pipeline_spec_pb2.PipelineTaskFinalStatus()
    # Unknown fields are kept out rather than refused: a newer KFP may send more.
    json_format.Parse(final_status, status, ignore_unknown_fields=True)
    return status


def final_status_result(final_status: str, pipeline: str):
    """The run's result as the final status tells it: None for a run that succeeded (nothing
    to alert), else a FAILED `RunResult` whose message is KFP's state and error.

    Args:
      final_status: the JSON KFP passes (a `PipelineTaskFinalStatus`).
      pipeline: the pipeline's name.

    Raises:
      google.protobuf.json_format.ParseError: the text is not a final status.
    """
    from pipelines.core.outcome import Outcome, RunResult

    status = parse_final_status(final_status)
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

    from pipelines.core.paths import RunPaths
    from pipelines.ops import report

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


def utc_seconds(stamp: str) -> float | None:
    """An RFC 3339 time (`2026-11-28T02:00:00.123456789Z`, as KFP and the push record write
    them) as Unix seconds; None for text that is not one (an unresolved placeholder, "")."""
    import datetime
    import re

    # fromisoformat (Python 3.10) takes neither `Z` nor more than six fractional digits.
    text = re.sub(r"(\.\d{6})\d+", r"\1", stamp.strip()).replace("Z", "+00:00")
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def newest_push(serving_dir: str) -> tuple[int, float] | None:
    """The newest version in a model base path and when it was pushed (its push record), or
    None when there is none or its record has no time."""
    import os

    from pipelines.serving_state.versions import read_push_record, served_versions

    versions = served_versions(serving_dir)
    if not versions:
        return None
    record = read_push_record(os.path.join(serving_dir, str(versions[-1])))
    pushed_at = utc_seconds(str(record.get("pushed_at") or ""))
    return None if pushed_at is None else (versions[-1], pushed_at)


def final_status_metrics(
    final_status: str, spec, workdir: str, job_created_at: str = "", now: float | None = None
):
    """The run's Prometheus metrics as far as an exit handler can know them (module doc).

    Args:
      final_status: the JSON KFP passes.
      spec: the compiled `PipelineSpec`.
      workdir: the job's working directory (its serving folder); "": no push is read.
      job_created_at: when KFP created the job (RFC 3339); "" or an unresolved placeholder:
        unknown.
      now: when the run ended (Unix seconds); None: now.

    Returns:
      The registry, for `pipelines.ops.metrics.send_run_metrics`.
    """
    import time
    from pathlib import Path

    from pipelines.core.outcome import Outcome, RunResult
    from pipelines.core.paths import RunPaths
    from pipelines.ops.metrics import result_metrics, set_last_push

    now = time.time() if now is None else now
    status = parse_final_status(final_status)
    created = utc_seconds(job_created_at)
    pushed = newest_push(str(RunPaths(Path(workdir), spec).serving_dir)) if workdir else None
    if (status.state.upper() or "UNKNOWN") != SUCCEEDED:
        possible = [Outcome.FAILED]
    elif created is None:
        possible = [Outcome.PUSHED, Outcome.NOT_PUSHED]
    else:  # the push record has whole seconds; the creation time has fractions
        pushed_now = pushed is not None and pushed[1] >= int(created)
        possible = [Outcome.PUSHED if pushed_now else Outcome.NOT_PUSHED]
    result = RunResult(
        run_id=status.pipeline_job_resource_name or status.pipeline_job_name or None,
        pipeline=spec.name,
        outcome=possible[0],
        message="",
        pipeline_seconds=None if created is None else max(0.0, now - created),
    )
    metrics = result_metrics(result, spec, now, possible_outcomes=possible)
    if pushed is not None:
        set_last_push(metrics, spec.name, pushed[0], pushed[1])
    return metrics.registry


def export_final_status_metrics(
    final_status: str,
    resolved_spec: str,
    workdir: str,
    job_created_at: str = "",
    echo=print,
) -> None:
    """Sends the run's metrics to the sinks the spec names (`runtime.metrics`); a sink that
    fails is a warning line, never an exception, as for `conveyor run`."""
    import json
    from pathlib import Path

    from pipelines.ops.metrics import has_sink, send_run_metrics
    from pipelines.spec.models import PipelineSpec

    spec = PipelineSpec.model_validate(json.loads(resolved_spec))
    if not has_sink(spec):
        return
    try:
        registry = final_status_metrics(final_status, spec, workdir, job_created_at)
    except Exception as err:  # noqa: BLE001 - metrics are news of the run, never its failure
        echo(f"warning: no metrics exported: {type(err).__name__}: {err}")
        return
    send_run_metrics(registry, spec, Path(workdir), echo)


@component
def RunFinish(  # noqa: N802 - TFX names components like classes
    final_status: Parameter[str],
    resolved_spec: Parameter[str],
    workdir: Parameter[str],
    job_created_at: Parameter[str],
) -> None:
    """The exit handler: reports and alerts a run that did not succeed (see
    `alert_final_status`), then exports every run's metrics (`export_final_status_metrics`).

    Its instance takes `final_status=FinalStatusStr()`, which KFP fills with the final status,
    and `job_created_at` KFP's `{{$.pipeline_job_create_time_utc}}` placeholder.
    """
    print(alert_final_status(final_status, resolved_spec, workdir))
    export_final_status_metrics(final_status, resolved_spec, workdir, job_created_at)
