"""What follows every run, whoever ran it: retention, the run report, the alert, the outcome
record.

Kept apart from the runner so that the runner only runs the pipeline: the local runner, a
scheduled night and (later) an orchestrator's final step all finish a run the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from pipelines.ops import alerts, fingerprint, report, serving_state
from pipelines.outcome import Outcome, RunResult
from pipelines.run.plan import Run


def finish(
    planned: Run,
    result: RunResult,
    inputs_fingerprint: dict,
    echo: Callable[[str], None] = print,
) -> None:
    """Writes the run's report, sends its alert and records a final outcome; neither a report
    nor an alert that fails can stop the record, nor change the run's outcome.

    Args:
      planned: the run as planned (spec, paths, span).
      result: what the runner answered.
      inputs_fingerprint: the inputs' fingerprint taken before the run started (an input that
        changed while it ran must not be recorded as what this run consumed).
      echo: where progress lines go.
    """
    if Outcome(result.outcome).ok:
        # After the push is in ML Metadata, never before (see serving_state); a failed run
        # changes nothing in serving.
        try:
            serving_state.retain(planned.paths, echo)
        except OSError as err:  # the new version is served either way: the outcome stands
            echo(f"warning: old versions not retired: {err}")
    try:
        echo(f"report: {report.write_report(result, planned.paths)}")
    except Exception as err:  # the report is a view of the run, never a reason to fail it
        echo(f"warning: no run report written: {type(err).__name__}: {err}")
    try:
        alerted = alerts.send_alert(planned.spec, result)
        if alerted:
            echo(alerted)
    except Exception as err:  # an alert is news of the run, never its outcome
        # Its type only: the text of an error about the webhook may quote its (secret) URL.
        echo(f"alert not delivered: {type(err).__name__} while sending it")
    finally:
        # Recorded whatever the alert did: a night whose record is lost runs again and again.
        if Outcome(result.outcome).final:
            fingerprint.record_outcome(
                planned.paths, result.run_id, result.outcome, inputs_fingerprint, planned.span
            )
