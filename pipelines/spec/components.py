"""The component table: every component type a spec's `components` list may name, with what it
needs, what it provides, where its build function lives and how each orchestrator gets it.

This is the one place a component type is declared. It imports no TFX (nor any other Conveyor
module), so the spec validates its `components` list against it in well under a second, and the
builder imports only the build functions of the types a spec uses. It lives with the spec, not
the builder, because it is the vocabulary of the spec's `components` list: the spec depends on
it, and the builder on the spec, never the other way round.

Adding a component: there is one path, whether the component is Conveyor's or a team's.
  1. write it as a TFX component: a class (ComponentSpec + executor) or an `@component`
     function, under `components/<name>/` for Conveyor's own, anywhere importable for a team;
  2. a team's component is then ready: a `components[]` entry names it by import path
     (`component: my_team.components.FilterExamples`) with its `params`, its `inputs` as
     `node_id.output_name` (or a role) and the roles it `provides`; `check_wiring` reads its
     inputs, outputs and parameters from its source, without running it
     (pipelines/spec/custom_components.py);
  3. to make it a built-in type that specs name by `type:` and that wires itself by role, also
     write its build function, `build(ctx, node_id)`, in `pipelines/builder/nodes/<name>.py`: it
     reads the channels it needs from `ctx.need(role)`, adds its node with `ctx.add(...)` and
     publishes its outputs by role with `ctx.provide(...)`; `ctx.target` says which orchestrator
     it builds for (where it builds differently there, or no node at all, it says so with
     `ctx.note(node_id, why)`); then add a `ComponentType` row below (and any new role to
     ROLE_TYPES). Validation, the builder, the generated spec reference and the orchestrators
     pick it up from here.

Roles are the names channels travel under between nodes ("examples", "schema", "model"...).
A node may only need roles that a node listed before it provides; `check_wiring` says which
component to add otherwise. A built-in's outputs are named after the roles it provides
(`csv_example_gen.examples`, `trainer.model`), so any entry's `inputs` can name them too.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
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
class WarmUp:
    """Start-up work a component asks the local runner to begin early, beside the node that
    produces its input `after_input`, so that it is done by the time the component runs (the
    infra validator's spare model server imports TensorFlow while the trainer trains).

    The local runner calls `start` when that node executes (a cache hit starts nothing) and
    `discard` once the run ends, whether or not the component took what was started.
    """

    after_input: str
    start: Callable[[], None]
    discard: Callable[[], None]


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
    # "module:attribute" of the component's `WarmUp` for a local run, imported by the local
    # runner only for a spec that uses the type; None: nothing to begin early.
    warm_up: str | None = None

    def required_roles(self, spec: Any) -> list[tuple[str, str | None]]:
        """(role, spec key that asks for it or None) for `spec`."""
        wanted: list[tuple[str, str | None]] = [(role, None) for role in self.needs]
        wanted += [(n.role, n.key) for n in self.needs_when if n.applies(spec)]
        return wanted


_NODES = "pipelines.builder.nodes"
# Kubeflow runs no resolver strategy of ours: the served model is read by a task instead.
_SERVED_MODEL_ON_KUBEFLOW = (
    "Conveyor's ServedModel task: the version served (models.config's `stable` label, else "
    "the newest), read from the serving folder into a Model artifact (never from KFP's cache)"
)

COMPONENT_TYPES: dict[str, ComponentType] = {
    t.name: t
    for t in (
        ComponentType(
            "csv_example_gen",
            "Reads the input (or one span of it) into train/eval tf.Examples, as `data.format` "
            "says: CSV through TFX's CsvExampleGen or the streaming Arrow reader (`data.reader`), "
            "TFRecord through TFX's ImportExampleGen, Parquet through the Arrow Parquet reader, "
            "a BigQuery query through TFX's BigQueryExampleGen (compile only).",
            f"{_NODES}.example_gen:build",
            provides=("examples",),
        ),
        ComponentType(
            "statistics_gen",
            "TFDV statistics per split (from the Arrow reader's Parquet copy when there is one; "
            "small splits without a Beam pipeline on the DirectRunner in memory).",
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
                "project root; `infer`: a task keeps the schema the data gate last accepted "
                "data against (its record in the workdir), inferring before there is one"
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
                Orchestrator.KUBEFLOW: "no node: Kubeflow runs only its own resolver strategies; "
                "the data gate records each span it accepts in the workdir and measures drift "
                "from the last one recorded"
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
                Orchestrator.KUBEFLOW: "no node: Conveyor's Trainer adds the window's earlier "
                "blessed spans from the record of accepted spans the data gate keeps in the "
                "workdir; a team's run_fn reads tonight's span only",
            },
        ),
        ComponentType(
            "warm_start_resolver",
            "The served model not trained on this run's examples: what the Trainer starts from.",
            f"{_NODES}.resolvers:build_warm_start",
            provides=("warm_start_model",),
            needs=("examples",),
            on_target={Orchestrator.KUBEFLOW: _SERVED_MODEL_ON_KUBEFLOW},
        ),
        ComponentType(
            "transform",
            "TFX's Transform with the team's `preprocessing_fn` (`transform.module`): the "
            "transformed examples and the transform graph the Trainer reads.",
            f"{_NODES}.transform:build",
            provides=("transform_graph", "transformed_examples"),
            needs=("examples", "schema"),
        ),
        ComponentType(
            "tuner",
            "TFX's Tuner with KerasTuner: Conveyor's `tuner_fn` searches `tuning.search_space` "
            "over Conveyor's trainer (the spec's own setting first), or the `tuner_fn` of a "
            "run_fn `trainer.module`, unchanged. A night tunes when `tuning.retune` says so, "
            "when no search completed yet, or when the schema changed since the last; any "
            "other runs no Tuner: a resolver hands the Trainer the last tuned hyperparameters.",
            f"{_NODES}.tuner:build",
            provides=("hyperparameters",),
            needs=("examples", "schema", "statistics"),
            needs_when=(
                ConditionalNeed(
                    "transform_graph", "transform.module", lambda s: s.transform is not None
                ),
            ),
            on_target={
                Orchestrator.AIRFLOW: "`retune: weekly` builds as `reuse`: the DAG is built "
                "once, not per night",
                Orchestrator.KUBEFLOW: "`retune: weekly` compiles as `reuse` (TFX's "
                "LatestArtifactStrategy), and neither tunes a first search or a changed schema: "
                "the pipeline is compiled once, not per night, without ML Metadata; that "
                "resolver task runs on Vertex AI, not on open-source KFP",
            },
        ),
        ComponentType(
            "trainer",
            "Conveyor's Keras trainer (distribution, XLA, warm start, the serving signatures), "
            "or TFX's own with the team's `run_fn` (`trainer.module`).",
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
                ConditionalNeed(
                    "transform_graph", "transform.module", lambda s: s.transform is not None
                ),
                ConditionalNeed("hyperparameters", "tuning", lambda s: s.tuning is not None),
            ),
        ),
        ComponentType(
            "baseline_resolver",
            "The served model other than the candidate: what the Evaluator compares against.",
            f"{_NODES}.resolvers:build_baseline",
            provides=("baseline_model",),
            needs=("model",),
            on_target={Orchestrator.KUBEFLOW: _SERVED_MODEL_ON_KUBEFLOW},
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
            "infra_validator",
            "Serves the blessed candidate in a fresh model server (no Docker) and sends it canary "
            "requests from the evaluation split: answers well-formed, finite, equal to the "
            "SavedModel's in process, p99 within `push.latency_budget_ms`. The Pusher refuses a "
            "model it does not bless.",
            f"{_NODES}.infra_validator:build",
            provides=("infra_blessing",),
            needs=("model", "blessing", "examples"),
            warm_up="components.infra_validator.spare:WARM_UP",
            on_target={
                Orchestrator.KUBEFLOW: "the model server runs inside the component's own "
                "container (the pipeline image), as a child process: no Docker, no cluster access"
            },
        ),
        ComponentType(
            "tflite_converter",
            "Converts the blessed candidate's `serving_default` to TF Lite (`push.tflite`) and "
            "checks it against the SavedModel on evaluation rows: outputs within "
            "`push.tflite.tolerance`. The Pusher puts a passing `model.tflite` in the version.",
            f"{_NODES}.tflite:build",
            provides=("tflite_model",),
            needs=("model", "blessing", "examples"),
        ),
        ComponentType(
            "pusher",
            "Publishes a blessed model as the next TF Serving version, atomically (and only "
            "an infra-validated one when an infra validator runs before it), with the TF Lite "
            "model inside when a `tflite_converter` before it passed.",
            f"{_NODES}.pusher:build",
            provides=("pushed_model",),
            needs=("model", "blessing"),
            needs_when=(
                ConditionalNeed(
                    "tflite_model", "push.tflite.enabled", lambda s: s.push.tflite.enabled
                ),
            ),
        ),
        ComponentType(
            "bulk_inferrer",
            "TFX's BulkInferrer: this run's blessed candidate over the span's examples "
            "(`inference.splits`), written as PredictionLog TFRecords (an InferenceResult); with "
            "`inference.output_columns`, a second node writes those input columns beside each "
            "prediction as CSV or Parquet (`inference.output_format`).",
            f"{_NODES}.bulk_inferrer:build",
            provides=("inference_result",),
            needs=("examples", "model", "blessing"),
        ),
    )
}

KNOWN_TYPES = tuple(COMPONENT_TYPES)


def providers_of(role: str) -> list[str]:
    """The component types that provide `role`, for messages."""
    return sorted(t.name for t in COMPONENT_TYPES.values() if role in t.provides)


# The artifact type (TFX's TYPE_NAME) each role carries: what a team's component must take or
# give to consume a role, or to provide one that the built-ins after it read.
ROLE_TYPES: dict[str, str] = {
    "examples": "Examples",
    "statistics": "ExampleStatistics",
    "schema": "Schema",
    "anomalies": "ExampleAnomalies",
    "previous_statistics": "ExampleStatistics",
    "previous_examples": "Examples",
    "training_examples": "Examples",
    "warm_start_model": "Model",
    "transform_graph": "TransformGraph",
    "transformed_examples": "Examples",
    "hyperparameters": "HyperParameters",
    "model": "Model",
    "baseline_model": "Model",
    "blessing": "ModelBlessing",
    "infra_blessing": "InfraBlessing",
    "tflite_model": "TFLiteModel",
    "pushed_model": "PushedModel",
    "inference_result": "InferenceResult",
}


@dataclass(frozen=True)
class Port:
    """One input, output or parameter of a component, as the wiring check sees it."""

    # Inputs and outputs: the artifact type (TYPE_NAME); parameters: the Python type's name.
    # None where the source does not say without running it (TFX still checks when building).
    type: str | None
    optional: bool = False


@dataclass(frozen=True)
class Signature:
    """What a team's component takes and gives, by name, as read from its source."""

    inputs: Mapping[str, Port]
    outputs: Mapping[str, Port]
    parameters: Mapping[str, Port]


def accepted_roles(row: ComponentType) -> tuple[str, ...]:
    """Every role a built-in may read (always or because of a spec key): what its `inputs` may
    map."""
    return (*row.needs, *(n.role for n in row.needs_when if n.role not in row.needs))


class _Miswired(Exception):
    """One wiring problem, already worded; `check_wiring` returns its message."""


def _names(names: Sequence[str] | Mapping[str, Any]) -> str:
    return ", ".join(names) or "none"


def _reference_type(
    reference: str, index: int, components: Sequence[Any], outputs: Mapping, provided: Mapping
) -> str | None:
    """The artifact type `reference` (`node_id.output_name`, or a role) carries at entry
    `index`; raises _Miswired naming what is wrong with it."""
    node, dot, output = reference.partition(".")
    if not dot:
        if reference not in provided:
            raise _Miswired(
                f"no earlier component provides the role {reference!r} (roles so far: "
                f"{_names(list(provided))}); name an output as node_id.output_name"
            )
        return provided[reference]
    if node not in outputs:
        ids = [c.id for c in components]
        if node == ids[index]:
            raise _Miswired(f"{reference!r} is this node's own output: that would be a cycle")
        if node in ids:
            raise _Miswired(
                f"{reference!r} refers to components[{ids.index(node)}] ({node}), which comes "
                "after it: a node consumes only the outputs of nodes listed before it (which "
                "also rules out cycles), so move it"
            )
        raise _Miswired(
            f"{reference!r}: unknown node {node!r} (nodes before it: {_names(ids[:index])})"
        )
    if output not in outputs[node]:
        raise _Miswired(
            f"{reference!r}: node {node!r} has no output {output!r} (its outputs: "
            f"{_names(outputs[node])})"
        )
    return outputs[node][output].type


def _fits(wanted: str | None, value: Any) -> bool:
    """Whether a YAML value suits a parameter of Python type `wanted` (None: not known)."""
    checks = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
    }
    return wanted not in checks or checks[wanted](value)


def _check_entry(
    index: int,
    components: Sequence[Any],
    spec: Any,
    signature: Signature | None,
    outputs: dict[str, Mapping[str, Port]],
    provided: dict[str, str | None],
) -> None:
    """Checks entry `index` against what the entries before it produced, then records what it
    produces; raises _Miswired."""
    entry = components[index]
    custom = getattr(entry, "component", None)
    row = None if custom else COMPONENT_TYPES[entry.type]
    if row is not None:
        takes = {role: Port(ROLE_TYPES.get(role)) for role in accepted_roles(row)}
        what = f"a {row.name}"
    else:
        assert signature is not None  # read for every custom entry before the check
        takes = dict(signature.inputs)
        what = custom
    for name, reference in getattr(entry, "inputs", {}).items():
        if name not in takes:
            raise _Miswired(
                f"inputs.{name}: {what} has no input {name!r} (inputs: {_names(takes)})"
            )
        try:
            carried = _reference_type(reference, index, components, outputs, provided)
        except _Miswired as err:
            raise _Miswired(f"inputs.{name}: {err}") from None
        wanted = takes[name].type
        if wanted and carried and wanted != carried:
            raise _Miswired(
                f"inputs.{name}: {reference!r} carries {carried}, but input {name!r} takes {wanted}"
            )
    if row is not None:
        for role, key in row.required_roles(spec):
            if role in provided or role in getattr(entry, "inputs", {}):
                continue
            why = f" (because of {key})" if key else ""
            raise _Miswired(
                f"needs {role!r}{why}, which no earlier component provides; list one of "
                f"{providers_of(role)} before it"
            )
        provided.update({role: ROLE_TYPES.get(role) for role in row.provides})
        outputs[entry.id] = {role: Port(ROLE_TYPES.get(role)) for role in row.provides}
        return
    missing = [n for n, port in takes.items() if not port.optional and n not in entry.inputs]
    if missing:
        raise _Miswired(
            f"{custom} needs input {_names(missing)}: map each under `inputs` to "
            "node_id.output_name (or a role)"
        )
    for name, value in entry.params.items():
        if name not in signature.parameters:
            raise _Miswired(
                f"params.{name}: {custom} has no parameter {name!r} (parameters: "
                f"{_names(signature.parameters)})"
            )
        wanted = signature.parameters[name].type
        if not _fits(wanted, value):
            raise _Miswired(f"params.{name}: {value!r} is not {wanted}")
    absent = [
        n for n, p in signature.parameters.items() if not p.optional and n not in entry.params
    ]
    if absent:
        raise _Miswired(f"{custom} needs parameter {_names(absent)} under `params`")
    for role, output in entry.provides.items():
        if output not in signature.outputs:
            raise _Miswired(
                f"provides.{role}: {custom} has no output {output!r} (outputs: "
                f"{_names(signature.outputs)})"
            )
        carried, wanted = signature.outputs[output].type, ROLE_TYPES.get(role)
        if wanted and carried and wanted != carried:
            raise _Miswired(
                f"provides.{role}: output {output!r} is {carried}, but the role {role!r} carries "
                f"{wanted} (what the components that need it read)"
            )
        provided[role] = carried or wanted
    outputs[entry.id] = signature.outputs


def check_wiring(
    components: Sequence[Any], spec: Any, signatures: Mapping[str, Signature] | None = None
) -> str | None:
    """Walks the spec's `components` in order; returns the first wiring problem, or None.

    A built-in gets what it needs by role (from the last earlier node providing it) unless its
    `inputs` name a channel; a team's component gets exactly its `inputs`. Every reference
    points back to an earlier node, so the graph has no cycle.

    Args:
      components: the spec's `components` entries (each with `.id`, and `.type` or
        `.component`, `.inputs`, `.params`, `.provides`).
      spec: the spec, for needs that depend on a key (`data.drift` needs a drift baseline).
      signatures: node id -> the signature of each entry naming a team's `component`.
    """
    provided: dict[str, str | None] = {}
    outputs: dict[str, Mapping[str, Port]] = {}
    for index, entry in enumerate(components):
        signature = (signatures or {}).get(entry.id)
        try:
            _check_entry(index, components, spec, signature, outputs, provided)
        except _Miswired as err:
            return f"components[{index}] ({entry.id}): {err}"
    return None
