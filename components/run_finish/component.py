"""Kubeflow's exit handler: after every task of a run, hand the run-finish contract what KFP says
of the run.

Kubeflow Pipelines (and Vertex AI) run an exit handler once the pipeline's tasks are done,
whatever their state, and hand it the run's final status: a JSON `PipelineTaskFinalStatus`
(kfp-pipeline-spec) with the state (Vertex AI's `SUCCEEDED`, `FAILED`, `CANCELLED`, or open-source
KFP's `COMPLETE`, `FAILED`, `CANCELED`) and the error. This
component turns it into the facts only KFP knows (`final_status_facts`) and calls the contract
every orchestrator calls (`pipelines.finish.contract.finish_run`), which writes the run's
summary and report where `conveyor report RUN_ID --workdir W` finds them
(`<workdir>/runs/<pipeline>/<job>/`; on Vertex AI the workdir is a `/gcs/BUCKET/...` path,
which every task sees as a mounted file system), POSTs the alert of a run that did not succeed
to the webhook in `runtime.alert_webhook_env` (which the container's environment must hold),
and exports the run's Prometheus metrics to the sinks in `runtime.metrics`, with the same names
and labels as every run's (pushed as the group `{job, pipeline}`):

- `conveyor_run_outcome`: `blocked` for a night the data gate refused, `failed` for any other
  run that did not succeed; for one that did, what its Pusher decided (`pushed` or
  `not_pushed`, from the decision it wrote into the run's folder,
  `components.pusher.executor.write_push_decision`). A run whose Pusher wrote none (a spec
  without a Pusher) is `pushed` when the newest version in the serving folder was pushed after
  the job was created, else `not_pushed`; without the job's creation time (`job_created_at`,
  which KFP fills from `{{$.pipeline_job_create_time_utc}}`; a backend that does not resolve
  it leaves the placeholder) those two cannot be told apart: only `failed` and `blocked` are
  exported, as 0. `conveyor_run_reason`: `data_gate_blocked`, `component_failed` (`interrupted`
  for a cancelled run), `pushed`, the Pusher's reason code for a model held back
  (`model_not_blessed`, `identical_to_served`, ...), or `unknown`.
- `conveyor_run_finished_timestamp_seconds`: when the exit handler ran;
  `conveyor_run_duration_seconds`: from the job's creation to then (queueing included), when
  the creation time is known.
- `conveyor_model_pushed_version` and `conveyor_model_last_push_timestamp_seconds`: the newest
  version in the serving folder and its push record's time (the Pusher writes both into the
  workdir, which every task sees).
- `conveyor_evaluation_lower_bound`: the spec's floors.

The Pusher's decision is also recorded in the ML Metadata store the spec names
(`runtime.metadata`; `pipelines.core.metadata.told_push`): the run's Trainer with the examples,
spans, schema and code it learned from, and its Pusher with the Model, blessing and push, so
`conveyor lineage`, `models`, `rollback` and `bless` answer for the run as for a local one.
After a run that pushed, the contract retires the versions beyond `push.keep_versions` (never
a labelled one): those recorded as pushed, or with no store to record in, every complete
version folder (`serving_state.retain`).

What it cannot do, and why: KFP records the run in its own ML Metadata, which a task cannot
read, so the report and the alert carry the run, its state, KFP's error (which names the
failed task) and the Pusher's decision, but no node details and no evaluation. A data gate
that refused the data wrote its verdict into the run's folder
(`components.data_gate.component.write_verdict`): the run is BLOCKED with the gate's message
and findings (`gate_verdict_stop`), as a local night. For the same reason the metrics read
from a run's store are absent: component durations and cache hits, rows, anomalies, drift and
skew, the evaluation's values, the blessings and the span.

The run's first task (`pipelines.run.kubeflow_start`) wrote what it found of the run's inputs
into the run's folder: their fingerprint, and whether the last final run of the same span had
the same. A night it found unchanged had its tasks skipped: the handler says UNCHANGED, naming
that run, as `conveyor run` does, releases the lock and writes nothing else. Any other run
with a final outcome is recorded with that fingerprint (`pipelines.finish.outcome_record`),
so the next night with the same inputs is the unchanged one; a run whose outcome is unknown
(pushed or not, without the job's creation time) is not.
"""

from tfx.dsl.component.experimental.annotations import Parameter
from tfx.dsl.component.experimental.decorators import component

from pipelines.core.object_path import as_path

# How the run ended, in either vocabulary: Vertex AI gives a pipeline task's state (`SUCCEEDED`,
# `CANCELLED`), open-source KFP's driver the state of the DAG's ML Metadata execution
# (`COMPLETE`, `CANCELED`; backend/src/v2/driver/resolve.go).
SUCCEEDED_STATES = frozenset({"SUCCEEDED", "COMPLETE"})
CANCELLED_STATES = frozenset({"CANCELLED", "CANCELED"})


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


def _job(status) -> str | None:
    return status.pipeline_job_resource_name or status.pipeline_job_name or None


def final_status_stop(status):
    """What stopped the run, as the final status tells it: None for a run that succeeded, else
    a `Stop` whose message is KFP's state and error (reason `interrupted` for a cancelled run,
    `component_failed` for any other)."""
    from pipelines.core.outcome import Reason
    from pipelines.finish.contract import Stop

    state = status.state.upper() or "UNKNOWN"
    if state in SUCCEEDED_STATES:
        return None
    error = status.error.message.strip()
    message = f"the Kubeflow run {_job(status) or '(unnamed)'} ended {state}" + (
        f": {error}" if error else " (KFP gave no error message)"
    )
    reason = Reason.INTERRUPTED if state in CANCELLED_STATES else Reason.COMPONENT_FAILED
    return Stop(reason, message)


def final_status_result(final_status: str, pipeline: str):
    """The run's result as the final status tells it: None for a run that succeeded (nothing
    to alert), else a FAILED `RunResult` with KFP's state and error.

    Args:
      final_status: the JSON KFP passes (a `PipelineTaskFinalStatus`).
      pipeline: the pipeline's name.

    Raises:
      google.protobuf.json_format.ParseError: the text is not a final status.
    """
    from pipelines.core.outcome import RunResult

    status = parse_final_status(final_status)
    stop = final_status_stop(status)
    if stop is None:
        return None
    return RunResult(
        run_id=_job(status),
        pipeline=pipeline,
        outcome=stop.outcome,
        message=stop.message,
        reason=stop.reason,
    )


def report_run_id(job: str | None) -> str:
    """The folder name of a Kubeflow run: the last part of KFP's job name (a Vertex resource
    name is `projects/P/locations/L/pipelineJobs/JOB`), or `unnamed-<UTC time>`."""
    import datetime

    if job:
        return job.rstrip("/").rsplit("/", 1)[-1]
    return "unnamed-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def kubeflow_run_folder(
    runs_dir: str, job_name: str | None, job_resource_name: str | None
) -> str | None:
    """The run's folder under `runs_dir` as the exit handler names it (`report_run_id`), for a
    task told KFP's job name placeholders (`{{$.pipeline_job_name}}`,
    `{{$.pipeline_job_resource_name}}`); None when KFP resolved neither (no name to meet the
    exit handler by)."""
    import os

    resolved = [n for n in (job_resource_name, job_name) if n and not n.startswith("{{")]
    return os.path.join(runs_dir, report_run_id(resolved[0])) if resolved else None


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


def gate_verdict_stop(paths, folder: str):
    """The data gate's refusal of this run, as the gate wrote it into the run's folder
    (`components.data_gate.component.write_verdict`), as a BLOCKED `Stop` with its findings;
    None when the gate refused nothing (or its verdict cannot be read: the run stays FAILED)."""
    import json

    from pipelines.core import storage
    from pipelines.core.artifact_files import GATE_VERDICT_FILE
    from pipelines.core.outcome import Reason
    from pipelines.finish.contract import Stop

    try:
        verdict = json.loads(storage.read_text(str(paths.run_dir(folder) / GATE_VERDICT_FILE)))
        reason = Reason(verdict["reason"])
        return Stop(reason, str(verdict["message"]), verdict.get("findings"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def told_push_decision(paths, folder: str) -> dict | None:
    """The decision the run's Pusher wrote into its folder (`components.pusher.executor.
    write_push_decision`), or None when it wrote none (the Pusher did not run) or it cannot
    be read."""
    import json

    from pipelines.core import storage
    from pipelines.core.artifact_files import PUSH_DECISION_FILE

    try:
        decision = json.loads(storage.read_text(str(paths.run_dir(folder) / PUSH_DECISION_FILE)))
    except (OSError, ValueError):
        return None
    return decision if isinstance(decision, dict) and "push" in decision else None


def told_inputs(paths, folder: str) -> dict | None:
    """What the run's first task found of its inputs (`pipelines.run.kubeflow_start`, written
    into the run's folder): {span, fingerprint, unchanged}; None when it wrote nothing (it
    failed first, or KFP named no job) or it cannot be read."""
    import json

    from pipelines.core import storage
    from pipelines.core.artifact_files import RUN_INPUTS_FILE

    try:
        found = json.loads(storage.read_text(str(paths.run_dir(folder) / RUN_INPUTS_FILE)))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and "fingerprint" in found else None


def _outcome_recorder(paths, folder: str, inputs: dict):
    """Records the run's final outcome with the fingerprint its first task took before the
    run read anything (`pipelines.finish.outcome_record`), as `conveyor run` does."""
    from pipelines.finish.outcome_record import record_outcome

    def record(result) -> None:
        record_outcome(
            paths, folder, result.outcome, inputs["fingerprint"], inputs.get("span"),
            reason=result.reason,
        )  # fmt: skip

    return record


def _told_outcome(facts, decision: dict, pushed: tuple[int, float] | None, now: float) -> None:
    """The outcome of a run that succeeded, as its Pusher's decision tells it: PUSHED with
    the version, or NOT_PUSHED with the Pusher's reason code and words (held back as not
    blessed, identical to the one served, awaiting a manual bless...)."""
    from pipelines.core.outcome import REASON_CODE_PROPERTY, REASON_PROPERTY, Outcome, Reason

    told = decision["push"].get("custom", {})
    version = str(told.get("pushed_version") or "")
    if told.get("pushed") and version.isdigit():
        facts.outcome, facts.reason = Outcome.PUSHED, Reason.PUSHED
        same = pushed is not None and pushed[0] == int(version)
        facts.last_push = (int(version), pushed[1] if same else now)
        return
    facts.outcome = Outcome.NOT_PUSHED
    try:
        facts.reason = Reason(told.get(REASON_CODE_PROPERTY))
    except ValueError:
        facts.reason = Reason.UNKNOWN
    facts.said = f"nothing pushed: {told.get(REASON_PROPERTY) or 'the Pusher gave no reason'}"


def final_status_facts(
    final_status: str,
    resolved_spec: str,
    workdir: str = "",
    job_created_at: str = "",
    now: float | None = None,
):
    """What KFP alone knows of the run, as the contract's `RunFacts`: its job, how it ended,
    when it was created and ended, and (read from the serving folder every task sees) the
    newest push. A run that succeeded pushed when that push is newer than the job; without the
    job's creation time pushed and not pushed cannot be told apart (module docstring).

    Args:
      final_status: the JSON KFP passes.
      resolved_spec: the spec the job was compiled from, as JSON.
      workdir: the working directory the job was compiled for; "": no folder, report or push.
      job_created_at: when KFP created the job (RFC 3339); "" or an unresolved placeholder:
        unknown.
      now: when the run ended (Unix seconds); None: now.

    Raises:
      google.protobuf.json_format.ParseError: the text is not a final status.
    """
    import json
    import time

    from pipelines.core.outcome import Outcome, Reason
    from pipelines.core.paths import RunPaths
    from pipelines.finish.contract import RunFacts, compiled_spec
    from pipelines.spec.models import PipelineSpec

    spec = PipelineSpec.model_validate(json.loads(resolved_spec))
    status = parse_final_status(final_status)
    stop = final_status_stop(status)
    now = time.time() if now is None else now
    created = utc_seconds(job_created_at)
    paths = RunPaths(as_path(workdir or "."), spec)
    pushed = newest_push(str(paths.serving_dir)) if workdir else None
    folder = report_run_id(_job(status)) if workdir else ""
    if stop is not None and workdir:
        stop = gate_verdict_stop(paths, folder) or stop
    decision = told_push_decision(paths, folder) if workdir else None
    facts = RunFacts(
        compiled_spec(spec),
        paths,
        _job(status),
        stop=stop,
        pipeline_seconds=None if created is None else max(0.0, now - created),
        folder=folder,
        in_store=False,
        finished_at=now,
        last_push=pushed,
        told_push=decision,
    )
    inputs = told_inputs(paths, folder) if workdir else None
    if inputs is not None and not inputs.get("unchanged"):
        # Unchanged, the run's tasks were skipped (finish_final_status): nothing to record.
        facts.record_outcome = _outcome_recorder(paths, folder, inputs)
    if stop is not None:
        return facts
    if decision is not None:
        _told_outcome(facts, decision, pushed, now)
        return facts
    if created is None:
        facts.outcome = Outcome.NOT_PUSHED
        facts.possible_outcomes = (Outcome.PUSHED, Outcome.NOT_PUSHED)
        facts.record_outcome = None  # which of the two is unknown: the next night runs
    elif pushed is not None and pushed[1] >= int(created):  # a push record has whole seconds
        facts.outcome, facts.reason = Outcome.PUSHED, Reason.PUSHED
    else:
        facts.outcome = Outcome.NOT_PUSHED
    return facts


def finish_final_status(
    final_status: str, resolved_spec: str, workdir: str = "", job_created_at: str = "", echo=print
) -> str:
    """Finishes the run through the run-finish contract; returns what happened, in one line
    (the verdict, the alert, the report).

    Args:
      final_status: the JSON KFP passes.
      resolved_spec: the spec the job was compiled from, as JSON (its name, the variable that
        names the webhook, its metrics sinks).
      workdir: the working directory the job was compiled for (where its folder goes); empty:
        no folder, no report.
      job_created_at: KFP's `{{$.pipeline_job_create_time_utc}}`.
      echo: where the contract's progress lines go (the task's log).
    """
    from pipelines.finish.contract import finish_run

    facts = final_status_facts(final_status, resolved_spec, workdir, job_created_at)
    said: list[str] = []

    def heard(line: str) -> None:
        said.append(str(line))
        echo(line)

    from pipelines.finish import outcome_record

    inputs = told_inputs(facts.paths, facts.folder) if workdir else None
    if facts.stop is None and inputs is not None and inputs.get("unchanged"):
        # The first task found the night unchanged and the run's tasks were skipped: as a
        # local unchanged night, no report, alert, metrics or record; the lock is released.
        said_again = outcome_record.unchanged_words(facts.paths, inputs["unchanged"])
        words = f"{facts.spec.name}: UNCHANGED: {said_again}"
        if facts.run_id:
            _release_lock(facts, heard)
        return words
    try:
        result = finish_run(facts, heard)
    finally:  # whatever the report and the alert did: a lock left held stops the next nights
        if workdir and facts.run_id:
            _release_lock(facts, heard)
    name = facts.spec.name
    if not result.alerts:
        return f"{name}: the run succeeded; no alert"
    sent = next((line for line in said if line.startswith("alert ")), None)
    if sent is None:
        variable = facts.spec.runtime.alert_webhook_env
        sent = f"no alert sent: ${variable} is empty" if variable else "no webhook configured"
    written = ""
    if workdir:
        report = next((line for line in said if line.startswith("report: ")), None)
        missed = next((line for line in said if line.startswith("warning: no run ")), None)
        if report is not None:
            written = f"; {report}"
        elif missed is not None:  # "warning: no run folder|report written: <why>"
            written = "; no report written: " + missed.split(" written: ", 1)[-1]
    return f"{name}: {result.outcome.verdict}: {result.message}; {sent}{written}"


def _release_lock(facts, echo) -> None:
    """Releases the pipeline's lock the run's first task took (`pipelines.run.kubeflow_start`), if
    this run holds it; a lock that cannot be released is said (it expires after
    `runtime.concurrency.hold_seconds`)."""
    from pipelines.core import job_lock

    lock = job_lock.lock_uri(str(facts.paths.runs_dir))
    try:
        if job_lock.release(lock, report_run_id(facts.run_id)):
            echo(f"lock: released {lock}")
    except OSError as err:
        echo(f"warning: {lock} not released ({err}); it expires after hold_seconds")


def alert_final_status(final_status: str, resolved_spec: str, workdir: str = "") -> str:
    """`finish_final_status` without the job's creation time: what happened, in one line."""
    return finish_final_status(final_status, resolved_spec, workdir, echo=lambda _: None)


@component
def RunFinish(  # noqa: N802 - TFX names components like classes
    final_status: Parameter[str],
    resolved_spec: Parameter[str],
    workdir: Parameter[str],
    job_created_at: Parameter[str],
) -> None:
    """The exit handler: finishes the run through the run-finish contract (see
    `finish_final_status`).

    Its instance takes `final_status=FinalStatusStr()`, which KFP fills with the final status,
    and `job_created_at` KFP's `{{$.pipeline_job_create_time_utc}}` placeholder.
    """
    print(finish_final_status(final_status, resolved_spec, workdir, job_created_at))
