"""The outcome record: the end of a run's step 5 (`pipelines.finish.contract`).

After a run with a final outcome (pushed, not pushed, blocked: what the same inputs would give
again) whoever ran it records the run's fingerprint (`pipelines.run.fingerprint`), its outcome
and reason code, and the versions it left served. The next run with the same fingerprint reads
it to stop before doing anything (`pipelines.run.fingerprint.unchanged_since`). Written here,
below the runners and the Kubeflow exit handler, so each writes the same record.
"""

from __future__ import annotations

import json

from pipelines.core import storage
from pipelines.core.paths import RunPaths


def served_versions(paths: RunPaths) -> list[str]:
    """The version directories under the spec's serving directory, in ascending numeric order
    ([] when nothing is served). An outcome record keeps them, so a skipped re-run can tell
    when a served version was added or lost since."""
    from pipelines.serving_state.versions import served_versions as versions_on_disk

    return [str(v) for v in versions_on_disk(str(paths.serving_dir))]


def record_outcome(
    paths: RunPaths,
    run_id: str,
    outcome: str,
    fingerprint: dict,
    span: int | None = None,
    reason: str | None = None,
) -> None:
    """Records a run whose outcome a re-run of the same inputs would repeat, with its reason
    code (`pipelines.core.outcome.Reason`)."""
    target = paths.outcome_record(span)
    target.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "run_id": run_id,
        "outcome": outcome,
        "reason": reason,
        "fingerprint": fingerprint,
        "served_versions": served_versions(paths),
        "metadata": str(paths.metadata_path),
    }
    # Whole or not at all: a temporary file renamed over it, or an object replaced whole.
    storage.write_text(str(target), json.dumps(record, indent=2))


def unchanged_words(paths, previous: dict) -> str:
    """An unchanged night's words, as `conveyor run` says them: the run it repeats, what that
    run did, and what is served now."""
    from pipelines.core.outcome import Outcome

    served = served_versions(paths)
    serving = f"version {served[-1]}" if served else "nothing"
    what = Outcome(previous["outcome"]).past_tense
    return (
        f"same data, spec, schema and code as run {previous['run_id']}, which {what}; nothing "
        f"executed, nothing pushed (serving {serving})"
    )
