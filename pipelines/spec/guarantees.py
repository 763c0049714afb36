"""What a local night guarantees that a pipeline compiled for an orchestrator does not, one line
per guarantee, for `conveyor validate` and `conveyor compile` to say before anything runs.

A local night (`conveyor run`) keeps every promise of the README. A compiled pipeline keeps
those its orchestrator can: the builder builds some nodes differently there (the `on_target`
column of the component table, `pipelines.spec.components`), and some promises belong to what
`conveyor run` does around the pipeline (the lock, reconcile, the outcome record), which an
orchestrator's last step does only in part (docs/orchestration.md, "What follows a run"). Each
gap carries a code naming the guarantee, so callers and tests switch on it, not on the words.

Standard library and the spec's own modules only: `validate` stays fast.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from pipelines.spec.components import COMPONENT_TYPES, Orchestrator


class Guarantee(str, enum.Enum):
    """A promise of a local night that a target may not keep."""

    ACCEPTED_SCHEMA = "accepted_schema"  # an inferred schema is the last accepted run's
    TRAINING_WINDOW = "training_window"  # the Trainer learns from the spec's window of spans
    UNCHANGED_NIGHT = "unchanged_night"  # unchanged inputs answer UNCHANGED from a record
    ONE_RUN_AT_A_TIME = "one_run_at_a_time"  # the workdir's lock, and reconcile before a run
    OPERATIONS_SEE_RUNS = "operations_see_runs"  # bless/rollback/lineage read the run's record

    def __str__(self) -> str:
        return self.value


# Which guarantee a component's `on_target` difference takes away. The served-model and drift
# baseline resolvers are built differently on Kubeflow (a task reads the serving folder, the
# data gate its record of accepted spans) but keep their promises, so they are not here; the
# window is kept by Conveyor's Trainer, not by a team's run_fn (`gaps`).
_COMPONENT_GUARANTEES = {
    "schema_gen": Guarantee.ACCEPTED_SCHEMA,
    "span_window_resolver": Guarantee.TRAINING_WINDOW,
}

# What follows a run, per orchestrator: the gaps that do not depend on the spec's components.
_RUN_GAPS: dict[Orchestrator, tuple[tuple[Guarantee, str], ...]] = {
    Orchestrator.KUBEFLOW: (
        (
            Guarantee.ONE_RUN_AT_A_TIME,
            "the run's first task takes a lock of its own (released by the exit handler) and "
            "reconciles; a `conveyor run` of the same workdir does not share that lock",
        ),
    ),
    Orchestrator.AIRFLOW: (
        (
            Guarantee.UNCHANGED_NIGHT,
            "no UNCHANGED short circuit: every task of an unchanged night runs, TFX's cache "
            "making most of them cache hits",
        ),
        (
            Guarantee.ONE_RUN_AT_A_TIME,
            "one night at a time by the DAG's max_active_runs of 1; a conveyor run of the same "
            "workdir meanwhile is not locked out",
        ),
    ),
}


def _trains_with_own_run_fn(spec: Any) -> bool:
    """Whether TFX's Trainer runs the team's `run_fn` (`trainer.module`), which gets tonight's
    examples only on Kubeflow; Conveyor's Trainer adds the window's earlier spans itself.
    Reads the module's source, never runs it."""
    from pipelines.spec.user_code import Contract, UserCodeError, trainer_contract

    if spec.trainer.module is None:
        return False
    try:
        return trainer_contract(spec.trainer.module) is Contract.TFX_RUN_FN
    except UserCodeError:  # validate says what is wrong with the module
        return True


@dataclass(frozen=True)
class Gap:
    """A guarantee the target does not keep, and how it falls short, in one line."""

    guarantee: Guarantee
    what: str  # the component or "run" it belongs to
    how: str

    def line(self, target: Orchestrator) -> str:
        """The line `validate` and `compile` print: `differs on TARGET: CODE: WHAT: HOW`."""
        return f"differs on {target.value}: {self.guarantee}: {self.what}: {self.how}"


def gaps(spec: Any, target: Orchestrator) -> list[Gap]:
    """The guarantees of a local night that `spec` compiled for `target` does not keep, in the
    order of its components, then the run's."""
    if target is Orchestrator.LOCAL:
        return []
    found = []
    for component in spec.components:
        if component.type is None:  # a team's own component: built alike everywhere
            continue
        how = COMPONENT_TYPES[component.type].on_target.get(target)
        guarantee = _COMPONENT_GUARANTEES.get(component.type)
        if how is None or guarantee is None:
            continue
        if guarantee is Guarantee.ACCEPTED_SCHEMA:
            if spec.schema_.source.value != "infer":
                continue  # a curated schema is the same file on every target
            if any(c.type == "data_gate" for c in spec.components):
                continue  # the gate records the schema it accepted data against
            how = "no data gate records the schema of accepted data: inferred anew each run"
        if guarantee is Guarantee.TRAINING_WINDOW:
            if spec.data.window_spans <= 1 or not _trains_with_own_run_fn(spec):
                continue  # Conveyor's Trainer reads the window from the record of spans
            how = "no node: the team's run_fn reads tonight's span only"
        found.append(Gap(guarantee, component.id, how))
    found += [Gap(guarantee, "run", how) for guarantee, how in _RUN_GAPS.get(target, ())]
    if target is Orchestrator.KUBEFLOW and spec.runtime.metadata.kind.value == "sqlite":
        found.append(
            Gap(
                Guarantee.OPERATIONS_SEE_RUNS,
                "run",
                "the exit handler records each run's push in the SQLite file under the workdir "
                "the pods mount, which conveyor bless, rollback, lineage and models open only "
                "through that same folder; a MySQL-compatible runtime.metadata is seen from "
                "anywhere",
            )
        )
    return found
