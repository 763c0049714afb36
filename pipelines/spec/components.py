"""The component table: every component type a spec's `components` list may name, with what it
needs, what it provides, where its build function lives and how each orchestrator gets it.

This is the one place a component type is declared. It imports no TFX (nor any other Conveyor
module), so the spec validates its `components` list against it in well under a second, and the
builder imports only the build functions of the types a spec uses. It lives with the spec, not
the builder, because it is the vocabulary of the spec's `components` list: the spec depends on
it, and the builder on the spec, never the other way round.

Adding a component type:
  1. write its TFX component under `components/<name>/` (component.py, executor.py), unless it
     is one of TFX's own;
  2. write its build function, `build(ctx, node_id)`, in `pipelines/build/nodes/<name>.py`: it
     reads the channels it needs from `ctx.need(role)`, adds its node with `ctx.add(...)` and
     publishes its outputs by role with `ctx.provide(...)`; `ctx.target` says which orchestrator
     it builds for (where it builds differently there, or no node at all, it says so with
     `ctx.note(node_id, why)`);
  3. add a `ComponentType` row below. Validation, the builder, the generated spec reference and
     the orchestrators pick it up from here.

Roles are the names channels travel under between nodes ("examples", "schema", "model"...).
A node may only need roles that a node listed before it provides; `check_wiring` says which
component to add otherwise.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


class Orchestrator(str, enum.Enum):
    """What runs the pipeline: `conveyor run` (local) or what `conveyor compile` writes for.

    The builder builds for one of these (its target), node by node.
    """

    LOCAL = "local"
    KUBEFLOW = "kubeflow"
    AIRFLOW = "airflow"


@dataclass(frozen=True)
class ConditionalNeed:
    """A role a component needs only when a spec key asks for it (`data.drift`, say)."""

    role: str
    key: str  # the spec key that asks, for the message
    applies: Callable[[Any], bool]  # spec -> bool


@dataclass(frozen=True)
class ComponentType:
    """One row of the table."""

    name: str
    summary: str
    build: str  # "module:function", imported only when a spec uses the type
    provides: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    needs_when: tuple[ConditionalNeed, ...] = ()
    # How the node is built on an orchestrator where it differs from local (documentation and
    # `conveyor compile`'s notes); a type missing for a target builds as it does locally.
    on_target: dict[Orchestrator, str] = field(default_factory=dict)

    def required_roles(self, spec: Any) -> list[tuple[str, str | None]]:
        """(role, spec key that asks for it or None) for `spec`."""
        wanted: list[tuple[str, str | None]] = [(role, None) for role in self.needs]
        wanted += [(n.role, n.key) for n in self.needs_when if n.applies(spec)]
        return wanted


_NODES = "pipelines.build.nodes"

COMPONENT_TYPES: dict[str, ComponentType] = {
    t.name: t
    for t in (
        ComponentType(
            "csv_example_gen",
            "Reads the CSVs (or one span of them) into train/eval tf.Examples: TFX's "
            "CsvExampleGen, or the streaming Arrow reader (`data.reader`).",
            f"{_NODES}.example_gen:build",
            provides=("examples",),
        ),
        ComponentType(
            "statistics_gen",
            "TFDV statistics per split (from the Arrow reader's Parquet copy when there is one).",
            f"{_NODES}.statistics_gen:build",
            provides=("statistics",),
            needs=("examples",),
        ),
        ComponentType(
            "schema_gen",
            "The schema: the curated file (`schema.source: file`), or (`infer`) inferred by the "
            "first run and then the last accepted run's, imported (see docs/schema.md).",
            f"{_NODES}.schema_gen:build",
            provides=("schema",),
            needs_when=(
                ConditionalNeed(
                    "statistics",
                    "schema.source: infer",
                    lambda s: s.schema_.source.value == "infer",
                ),
            ),
            on_target={
                Orchestrator.KUBEFLOW: "`file`: the curated schema is read from the image's "
                "project root; `infer`: SchemaGen infers it on every run, as the build cannot "
                "read Kubeflow's ML Metadata for the last accepted run's schema"
            },
        ),
        ComponentType(
            "example_validator",
            "TFDV anomalies of the statistics against the schema.",
            f"{_NODES}.example_validator:build",
            provides=("anomalies",),
            needs=("statistics", "schema"),
        ),
        ComponentType(
            "drift_baseline_resolver",
            "The statistics and examples of the last span that passed the data gate: what drift "
            "is measured from.",
            f"{_NODES}.resolvers:build_drift_baseline",
            provides=("previous_statistics", "previous_examples"),
            needs=("statistics",),
            on_target={
                Orchestrator.KUBEFLOW: "no node: Kubeflow runs only its own resolver strategies, "
                "so the data gate checks the schema and anomalies, not drift"
            },
        ),
        ComponentType(
            "data_gate",
            "Stops the run before training on anomalies, drift or skew over their thresholds.",
            f"{_NODES}.data_gate:build",
            needs=("anomalies", "statistics", "schema", "examples"),
            needs_when=(
                ConditionalNeed("previous_statistics", "data.drift", lambda s: bool(s.data.drift)),
            ),
        ),
        ComponentType(
            "span_window_resolver",
            "This span and the accepted spans before it (`data.window_spans`): what the Trainer "
            "learns from.",
            f"{_NODES}.resolvers:build_span_window",
            provides=("training_examples",),
            needs=("examples",),
            on_target={
                Orchestrator.KUBEFLOW: "no node: the Trainer reads tonight's span only",
            },
        ),
        ComponentType(
            "warm_start_resolver",
            "The served model not trained on this run's examples: what the Trainer starts from.",
            f"{_NODES}.resolvers:build_warm_start",
            provides=("warm_start_model",),
            needs=("examples",),
            on_target={Orchestrator.KUBEFLOW: "TFX's LatestBlessedModelStrategy"},
        ),
        ComponentType(
            "trainer",
            "Conveyor's Keras trainer (distribution, XLA, warm start, the serving signatures).",
            f"{_NODES}.trainer:build",
            provides=("model",),
            needs=("examples", "schema", "statistics"),
            needs_when=(
                ConditionalNeed(
                    "warm_start_model", "trainer.warm_start", lambda s: bool(s.trainer.warm_start)
                ),
                ConditionalNeed(
                    "training_examples",
                    "data.window_spans above 1",
                    lambda s: s.data.window_spans > 1,
                ),
            ),
        ),
        ComponentType(
            "baseline_resolver",
            "The served model other than the candidate: what the Evaluator compares against.",
            f"{_NODES}.resolvers:build_baseline",
            provides=("baseline_model",),
            needs=("model",),
            on_target={Orchestrator.KUBEFLOW: "TFX's LatestBlessedModelStrategy"},
        ),
        ComponentType(
            "evaluator",
            "TFMA over the evaluation split, candidate against baseline, with the spec's "
            "thresholds: the model gate.",
            f"{_NODES}.evaluator:build",
            provides=("blessing",),
            needs=("examples", "model"),
        ),
        ComponentType(
            "pusher",
            "Publishes a blessed model as the next TF Serving version, atomically.",
            f"{_NODES}.pusher:build",
            provides=("pushed_model",),
            needs=("model", "blessing"),
        ),
    )
}

KNOWN_TYPES = tuple(COMPONENT_TYPES)


def providers_of(role: str) -> list[str]:
    """The component types that provide `role`, for messages."""
    return sorted(t.name for t in COMPONENT_TYPES.values() if role in t.provides)


def check_wiring(components: Sequence[Any], spec: Any) -> str | None:
    """Walks the spec's `components` in order; returns the first wiring problem, or None.

    Args:
      components: the spec's `components` entries (each with `.type` and `.id`).
      spec: the spec, for needs that depend on a key (`data.drift` needs a drift baseline).
    """
    provided: set[str] = set()
    for index, entry in enumerate(components):
        row = COMPONENT_TYPES[entry.type]
        for role, key in row.required_roles(spec):
            if role in provided:
                continue
            why = f" (because of {key})" if key else ""
            return (
                f"components[{index}] ({entry.id}): needs {role!r}{why}, which no earlier "
                f"component provides; list one of {providers_of(role)} before it"
            )
        provided.update(row.provides)
    return None
