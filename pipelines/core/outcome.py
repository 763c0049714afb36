"""How a run ended: the four outcomes, their exit codes and the words every surface uses.

One enum, so the command line, the nightly loop, the fingerprint, alerts and the report cannot
disagree on what an outcome is called, which exit code it gives, or whether it repeats.
Outcomes are `str` values ("pushed", ...), so summaries and alert bodies stay plain JSON.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: reading MLMD is not needed to name an outcome
    from pipelines.core.metadata import NodeRecord


class Outcome(str, enum.Enum):
    """The outcome of one pipeline run (or of a night that never ran)."""

    PUSHED = "pushed"  # a new version is served
    NOT_PUSHED = "not_pushed"  # the run succeeded; the model gate or nothing new kept serving as is
    BLOCKED = "blocked"  # the data gate stopped the run before training
    FAILED = "failed"  # a component, the input or the environment failed

    def __str__(self) -> str:
        return self.value

    @property
    def exit_code(self) -> int:
        """0 for a run that did its job, 2 when a gate blocked it, 1 when it failed."""
        return {Outcome.BLOCKED: EXIT_BLOCKED, Outcome.FAILED: EXIT_FAILED}.get(self, EXIT_OK)

    @property
    def ok(self) -> bool:
        """The run did its job: it pushed, or its model gate decided not to push (a blocked or
        failed run is not ok)."""
        return self in (Outcome.PUSHED, Outcome.NOT_PUSHED)

    @property
    def final(self) -> bool:
        """A re-run of the same inputs would end the same way (a failure is always retried)."""
        return self is not Outcome.FAILED

    @property
    def alerts(self) -> bool:
        """Operators are told of it (the webhook, the exit code of a scheduled run)."""
        return self in (Outcome.BLOCKED, Outcome.FAILED)

    @property
    def verdict(self) -> str:
        """The first word of the verdict line `conveyor run` prints: PUSHED, NOT_PUSHED, ..."""
        return self.value.upper()

    @property
    def label(self) -> str:
        """The outcome as a page shows it: PUSHED, NOT PUSHED, BLOCKED, FAILED."""
        return self.verdict.replace("_", " ")

    @property
    def past_tense(self) -> str:
        """What a run with this outcome did, for 'run X, which ...'."""
        return {
            Outcome.PUSHED: "pushed",
            Outcome.NOT_PUSHED: "pushed nothing",
            Outcome.BLOCKED: "was blocked by the data gate",
            Outcome.FAILED: "failed",
        }[self]


EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BLOCKED = 2  # a gate stopped the run: the data or the model was not good enough
EXIT_BUSY = 75
"""Another run of the same pipeline held the workdir's lock, so this one ran nothing: try again
later. 75 is EX_TEMPFAIL in sysexits.h, the code schedulers and mail systems read as "retry";
it is no outcome of a run (nothing ran), so no outcome maps to it and no record is written."""


class PipelineBusy(RuntimeError):
    """Another run of the pipeline holds its lock under this workdir, so nothing was run. The
    message names the holder and the `runtime.concurrency` key that decides what happens."""

    exit_code = EXIT_BUSY


def worst_exit_code(codes) -> int:
    """The exit code of several runs (a backfill): failed beats blocked beats ok."""
    codes = set(codes)
    return EXIT_FAILED if EXIT_FAILED in codes else EXIT_BLOCKED if EXIT_BLOCKED in codes else 0


# How the Pusher words a model the infra validator refused (components/infra_validator), which
# alerts although the run is NOT_PUSHED (`RunResult.alerts`).
INFRA_REFUSAL = "the infra validator did not bless the model"
# How it words a model held back because its TF Lite conversion failed or drifted while
# `push.tflite.required` is true (components/tflite); it alerts as an infra refusal does.
TFLITE_REFUSAL = "the TF Lite model did not pass"


@dataclass
class RunResult:
    """What one run did, as `summary.json`, the report, alerts and the verdict line tell it."""

    run_id: str | None  # None: the run never started (a night whose data is missing)
    pipeline: str
    outcome: Outcome
    message: str
    pushed_version: str | None = None
    pushed_path: str | None = None
    nodes: list[NodeRecord] = field(default_factory=list)
    run_dir: str = ""
    # The night this run processed (ISO date) and its span number; None for unspanned data.
    night: str | None = None
    span: int | None = None
    # What the data gate found: {"passed": bool, "anomalies": [{"column", "split",
    # "description"}], "drift": [{"column", "measure", "distance", "threshold", "breached",
    # "against"}], "skew": [same keys]}; None when the gate did not run.
    data_gate: dict | None = None
    # Seconds LocalDagRunner took for the whole pipeline (every component, TFX's own
    # bookkeeping between them included; not Python's start-up or the imports).
    pipeline_seconds: float | None = None

    @property
    def ok(self) -> bool:
        """The run did its job (`Outcome.ok` of its outcome)."""
        return Outcome(self.outcome).ok

    @property
    def alerts(self) -> bool:
        """Operators are told of it: a blocked or failed run, and also a model the Evaluator
        blessed that the infra validator refused (or whose required TF Lite model did not
        pass). That run is NOT_PUSHED (serving is as it was, a re-run ends the same way) but a
        model that cannot be served is the operators' problem, unlike a model the gate found
        worse."""
        return Outcome(self.outcome).alerts or (
            Outcome(self.outcome) is Outcome.NOT_PUSHED
            and (INFRA_REFUSAL in self.message or TFLITE_REFUSAL in self.message)
        )
