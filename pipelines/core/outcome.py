"""How a run ended: the four outcomes, their exit codes and the words every surface uses, and
the reason codes that say why.

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


class Reason(str, enum.Enum):
    """Why a run ended as it did: one code per way an outcome is decided, recorded where the
    decision is made (the Pusher's ModelPushPath, the infra validator's InfraBlessing, the data
    gate's findings) and carried by `RunResult.reason` into summary.json, the outcome record,
    alerts, the report and the metrics. Control flow switches on the code; the message beside
    it is for people and may say anything."""

    # PUSHED
    PUSHED = "pushed"  # a new version is served
    # NOT_PUSHED: the run did its job and serving stays as it was
    MODEL_NOT_BLESSED = "model_not_blessed"  # the Evaluator found the candidate not good enough
    INFRA_REFUSED = "infra_refused"  # the infra validator could not serve the candidate
    TFLITE_REFUSED = "tflite_refused"  # push.tflite.required and the TF Lite model did not pass
    AWAITING_MANUAL_BLESS = "awaiting_manual_bless"  # a first model under require_manual_bless
    IDENTICAL_TO_SERVED = "identical_to_served"  # the same files as the version served
    NOTHING_NEW = "nothing_new"  # every component was a cache hit
    PUSHER_NOT_RUN = "pusher_not_run"  # the run succeeded without the Pusher executing
    # BLOCKED
    DATA_GATE_BLOCKED = "data_gate_blocked"  # anomalies, drift or skew above their thresholds
    # FAILED
    INPUT_INVALID = "input_invalid"  # an input file the run cannot read as its spec says
    MISSING_INPUT = "missing_input"  # a night whose data never landed
    COMPONENT_FAILED = "component_failed"  # a component (or its task) raised
    STORAGE_FAILED = "storage_failed"  # a bucket the run reads or writes did not answer
    KILLED = "killed"  # the pipeline process died of a signal or without a result
    INTERRUPTED = "interrupted"  # an orchestrator stopped the run, or a task did not run through
    STORE_UNREADABLE = "store_unreadable"  # the run's record could not be read back
    # Any outcome: the run's record is out of Conveyor's reach (Kubeflow keeps its own store)
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    @property
    def alerts(self) -> bool:
        """Operators are told of a run with this reason whatever its outcome: every reason of a
        blocked or failed run, and a candidate the Evaluator blessed that cannot be served (the
        infra validator refused it, or its required TF Lite model did not pass). Such a run is
        NOT_PUSHED (serving is as it was, a re-run ends the same way), but a model that cannot
        be served is the operators' problem, unlike a model the gate found worse."""
        return self not in _QUIET

    @property
    def label(self) -> str:
        """The reason as a page shows it: 'infra refused', 'nothing new'..."""
        return self.value.replace("_", " ")


_QUIET = frozenset(
    {
        Reason.PUSHED,
        Reason.MODEL_NOT_BLESSED,
        Reason.AWAITING_MANUAL_BLESS,
        Reason.IDENTICAL_TO_SERVED,
        Reason.NOTHING_NEW,
        Reason.PUSHER_NOT_RUN,
        Reason.UNKNOWN,
    }
)

# The custom properties an artifact records its decision in: the code (a `Reason` value) and
# the words for people. The Pusher's ModelPushPath and the infra validator's InfraBlessing carry
# both; ML Metadata, `conveyor runs` and `conveyor bless` read the words.
REASON_CODE_PROPERTY = "conveyor_reason_code"
REASON_PROPERTY = "conveyor_reason"


@dataclass
class RunResult:
    """What one run did, as `summary.json`, the report, alerts and the verdict line tell it."""

    run_id: str | None  # None: the run never started (a night whose data is missing)
    pipeline: str
    outcome: Outcome
    message: str
    # Why it ended so (a `Reason` value); what alerts, badges and metrics switch on.
    reason: Reason = Reason.UNKNOWN
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
        """Operators are told of it: a blocked or failed run, and a run whose reason alerts
        (`Reason.alerts`: a blessed model that cannot be served)."""
        return Outcome(self.outcome).alerts or Reason(self.reason).alerts
