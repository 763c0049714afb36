"""Each pushed version's model card: what the model is, what it learned from, how it scored and
which gates let it through, written when a run pushes it.

A card is JSON in the Model Card Toolkit's schema (`model_card.schema.json`, version 0.0.2) and
an HTML page of the same facts, in the serving config folder beside models.config:
`model_cards/<model name>/<version>.json` and `.html`
(`pipelines.serving_state.models_table.model_card_files`). Conveyor writes the JSON itself rather
than through the toolkit: model-card-toolkit 2.0.0, its latest release, requires
tensorflow-model-analysis<0.42 and jsonschema<4, where TFX 1.16 requires TFMA 0.47 and Apache
Beam jsonschema>=4 (docs/serving.md). The card keeps to the schema's own fields, so the toolkit's
`ModelCard.from_json` reads it back; what the schema has no field for (the gates, the labels,
the training configuration) is in `model_details.documentation` as lines of text, and in the
page as tables.

Filled from lineage and the run (`gather`): the version's push in ML Metadata (spans, schema,
the trainer's code version, `pipelines.core.metadata.pushed_lineage`), the run's statistics
(rows per split), the schema's features and types, the resolved spec's trainer section, the
Evaluator's metrics per slice, the gate decisions as the run report reads them (the data gate,
the model gate, the infra validator and the server that checked the model), and the labels
models.config gives the version. `card_json` and `card_page` build the card from those facts
alone; `write_model_card` writes both files through `pipelines.core.storage`, so a serving
folder in a bucket gets them too. `finish_run` calls it after a push; a card that cannot be
written is a warning, never the run's outcome.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

from pipelines.core import storage
from pipelines.core.metadata import (
    NodeArtifacts,
    PushLineage,
    find_output,
    open_store,
    pushed_lineage,
    read_run_artifacts,
)
from pipelines.core.metadata.schemas import SCHEMA_FILE
from pipelines.core.object_path import AnyPath, as_path
from pipelines.core.outcome import RunResult
from pipelines.core.paths import REPORT_FILE, RunPaths
from pipelines.finish import artifacts, report
from pipelines.serving_state.config_files import current_entry
from pipelines.serving_state.models_table import model_card_files

SCHEMA_VERSION = "0.0.2"  # the Model Card Toolkit's JSON schema the card follows
TEMPLATE = "model_card.html.j2"


@dataclass(frozen=True)
class SplitData:
    """One split of the data the run's statistics describe: its rows and the spans in it."""

    name: str
    rows: int | None  # None: StatisticsGen wrote no statistics for the split
    spans: tuple[int, ...]
    uri: str  # the Examples artifact the statistics were computed over ("" when unknown)

    def describe(self) -> str:
        """The split in words: `150 rows of span 0 (Examples artifact <uri>)`."""
        words = f"{self.rows} rows" if self.rows is not None else "no statistics"
        if self.spans:
            words += f" of span {', '.join(map(str, self.spans))}"
        return words + (f" (Examples artifact {self.uri})" if self.uri else "")


@dataclass(frozen=True)
class Feature:
    """One feature of the schema the model was trained with, its type and what the model does
    with it."""

    name: str
    type: str  # the schema's type: INT, FLOAT, BYTES, STRUCT
    role: str = "input"  # input, label (what the model predicts), or unused (in the data only)


@dataclass(frozen=True)
class SliceMetric:
    """One metric of the candidate on one slice, as the Evaluator recorded it."""

    metric: str
    slice: str
    value: float
    lower_bound: float | None = None  # its confidence interval, when the Evaluator drew one
    upper_bound: float | None = None


@dataclass(frozen=True)
class Gate:
    """One gate the version went through and its decision (`passed`, `blessed`...)."""

    name: str
    decision: str
    note: str = ""


@dataclass
class CardFacts:
    """Everything a card says, gathered from lineage and the run; the JSON and the page are
    built from these alone."""

    model_name: str
    pipeline: str
    overview: str
    version: str
    pushed_at: datetime.datetime
    run_id: str
    serving_path: str
    labels: list[str] = field(default_factory=list)
    spans: list[int] = field(default_factory=list)  # the spans the model learned from
    splits: list[SplitData] = field(default_factory=list)
    statistics_uri: str = ""
    features: list[Feature] = field(default_factory=list)
    schema_uri: str = ""
    task: str = ""
    training: dict[str, Any] = field(default_factory=dict)  # the resolved spec's trainer
    code_version: str = ""
    user_code: str = ""
    model_uri: str = ""
    trainer_run_id: str = ""
    metrics: list[SliceMetric] = field(default_factory=list)
    evaluation_uri: str = ""
    gates: list[Gate] = field(default_factory=list)
    report: str = ""  # the run report page of the run that pushed it

    @property
    def label(self) -> str:
        """The column the model predicts, "" when the schema does not say."""
        return next((f.name for f in self.features if f.role == "label"), "")

    def documentation(self) -> list[str]:
        """The card's facts the toolkit's schema has no field for, one line each."""
        lines = [
            f"Pushed as version {self.version} of {self.model_name} by run {self.run_id} of "
            f"pipeline {self.pipeline} at {self.pushed_at:%Y-%m-%d %H:%M:%S} UTC, "
            f"to {self.serving_path}.",
            f"Labels: {', '.join(self.labels) or 'none'}.",
            f"Trained on spans: {', '.join(map(str, self.spans)) or 'unknown'}.",
        ]
        lines += [
            f"Gate {gate.name}: {gate.decision}" + (f" ({gate.note})" if gate.note else "") + "."
            for gate in self.gates
        ]
        lines.append(f"Code version: {self.code_version or 'unknown'}.")
        if self.user_code:
            lines.append(f"User code: {self.user_code}.")
        lines.append(f"Training configuration: {json.dumps(self.training, sort_keys=True)}")
        if self.report:
            lines.append(f"Run report: {self.report}")
        return lines


# --- the card ------------------------------------------------------------------------------------


def card_json(facts: CardFacts) -> dict[str, Any]:
    """The card as the Model Card Toolkit's JSON schema (v0.0.2) describes it: only the
    schema's fields, so the toolkit's own reader takes it."""
    data = [
        {"name": f"{split.name} split", "description": split.describe()} for split in facts.splits
    ]
    metrics = []
    for metric in facts.metrics:
        entry: dict[str, Any] = {
            "type": metric.metric,
            "value": _number(metric.value),
            "slice": metric.slice,
        }
        if metric.lower_bound is not None and metric.upper_bound is not None:
            entry["confidence_interval"] = {
                "lower_bound": _number(metric.lower_bound),
                "upper_bound": _number(metric.upper_bound),
            }
        metrics.append(entry)
    inputs = [f for f in facts.features if f.role == "input"]
    parameters: dict[str, Any] = {
        "model_architecture": _architecture(facts),
        "data": data,
        "input_format": "raw feature columns, as the schema types them: "
        + ", ".join(f"{f.name} ({f.type})" for f in inputs),
        "input_format_map": [{"key": f.name, "value": f.type} for f in inputs],
    }
    if facts.label:
        parameters["output_format"] = f"{facts.task or 'prediction'} of {facts.label}"
    return {
        "schema_version": SCHEMA_VERSION,
        "model_details": {
            "name": facts.model_name,
            "overview": facts.overview or f"The model the {facts.pipeline} pipeline trains.",
            "documentation": "\n".join(facts.documentation()),
            "version": {
                "name": facts.version,
                "date": facts.pushed_at.date().isoformat(),
                "diff": f"trained on spans {', '.join(map(str, facts.spans)) or 'unknown'}",
            },
            "path": facts.serving_path,
        },
        "model_parameters": parameters,
        "quantitative_analysis": {"performance_metrics": metrics},
    }


def _architecture(facts: CardFacts) -> str:
    """The trainer's model in a line: Conveyor's trainer's layers, or the team's module."""
    training = facts.training
    if training.get("hidden_units"):
        units = ", ".join(map(str, training["hidden_units"]))
        return f"Keras DNN ({facts.task or 'model'}), hidden units {units}"
    return f"the team's trainer module ({facts.user_code or 'run_fn'})"


def _number(value: float) -> str:
    """A metric as the schema wants it (a string), with all the digits the Evaluator kept."""
    return repr(float(value))


def card_page(facts: CardFacts) -> str:
    """The card as one self-contained HTML page (the run report's style, no scripts): every
    value is escaped, so a column name or a message is text, never markup."""
    return (
        report.templates().get_template(TEMPLATE).render(card=facts, schema_version=SCHEMA_VERSION)
    )


# --- the facts, from lineage and the run ---------------------------------------------------------


def gather(result: RunResult, paths: RunPaths) -> CardFacts:
    """The card's facts for the version `result` pushed, read from ML Metadata, the run's
    artifacts and models.config.

    Raises:
      LookupError: ML Metadata holds no push of that version.
    """
    spec, version = paths.spec, str(result.pushed_version)
    store = open_store(spec, paths.metadata_path)
    pushes = [p for p in pushed_lineage(store, spec.name) if p.version == version] if store else []
    if not pushes:
        raise LookupError(f"ML Metadata holds no push of version {version} of {spec.name}")
    push: PushLineage = pushes[-1]  # a version number reused after a retirement: the latest
    nodes = read_run_artifacts(store, push.run_id)
    facts = CardFacts(
        model_name=spec.push.model_name,
        pipeline=spec.name,
        overview=spec.description,
        version=version,
        pushed_at=datetime.datetime.fromtimestamp(
            push.pushed_at_ms / 1000, tz=datetime.timezone.utc
        ),
        run_id=push.run_id,
        serving_path=result.pushed_path or str(paths.serving_dir / version),
        spans=list(push.spans),
        schema_uri=push.schema_uri or "",
        task=spec.trainer.task.value,
        training=spec.trainer.model_dump(mode="json"),
        code_version=push.code_version or "",
        user_code=push.user_code or "",
        model_uri=push.model_uri,
        trainer_run_id=push.trainer_run_id,
        report=str(as_path(result.run_dir) / REPORT_FILE) if result.run_dir else "",
    )
    facts.splits, facts.statistics_uri = _splits(nodes)
    inputs = {f.name for f in spec.trainer.features}
    facts.features = _features(facts.schema_uri, spec.trainer.label, inputs)
    facts.metrics, facts.evaluation_uri = _metrics(nodes)
    facts.gates = _gates(result, paths, nodes)
    entry = current_entry(paths.serving_config_dir, facts.model_name)
    if entry is not None:
        facts.labels = sorted(k for k, v in entry.labels.items() if str(v) == version)
    return facts


def _splits(nodes: dict[str, NodeArtifacts]) -> tuple[list[SplitData], str]:
    """The run's splits, with the rows StatisticsGen counted and the spans of its examples."""
    node, statistics = find_output(nodes, "ExampleStatistics")
    if statistics is None:
        return [], ""
    examples = node.input("examples") if node is not None else None
    span = examples.get("span") if examples is not None else None
    spans = (int(span),) if span is not None else ()
    rows = artifacts.split_rows(statistics)
    splits = [
        SplitData(name, rows.get(name), spans, examples.uri if examples is not None else "")
        for name in artifacts.split_names(statistics)
    ]
    return splits, statistics.uri


def _features(schema_uri: str, label: str, inputs: set[str]) -> list[Feature]:
    """The schema's features and their types, each with its role: the label, one of the
    trainer's `inputs` (every other feature when the spec names none), or unused."""
    if not schema_uri:
        return []
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    text_format.Parse(storage.read_text(str(as_path(schema_uri) / SCHEMA_FILE)), schema)
    return [
        Feature(f.name, schema_pb2.FeatureType.Name(f.type), _role(f.name, label, inputs))
        for f in schema.feature
    ]


def _role(name: str, label: str, inputs: set[str]) -> str:
    if name == label:
        return "label"
    return "input" if not inputs or name in inputs else "unused"


def _metrics(nodes: dict[str, NodeArtifacts]) -> tuple[list[SliceMetric], str]:
    """The candidate's metrics per slice, as the Evaluator recorded them (the overall slice
    first); the baseline's and the differences are the run report's business."""
    _, evaluation = find_output(nodes, "ModelEvaluation")
    if evaluation is None:
        return [], ""
    per_slice, _ = artifacts.load_evaluation(evaluation.uri)
    found = []
    for metrics in per_slice:
        slice_name = artifacts.slice_name(metrics.slice_key)
        for item in metrics.metric_keys_and_values:
            key = item.key
            if key.is_diff or key.model_name not in ("", "candidate"):
                continue
            if not item.value.HasField("double_value"):
                continue  # matrices and plots are not one number
            name = key.name + (f" [{key.output_name}]" if key.output_name else "")
            interval = item.confidence_interval if item.HasField("confidence_interval") else None
            low = high = None
            if interval is not None and interval.lower_bound.HasField("double_value"):
                low = interval.lower_bound.double_value.value
                high = interval.upper_bound.double_value.value
            found.append(SliceMetric(name, slice_name, item.value.double_value.value, low, high))
    found.sort(key=lambda m: (m.slice != "all examples", m.slice, m.metric))
    return found, evaluation.uri


def _gates(result: RunResult, paths: RunPaths, nodes: dict[str, NodeArtifacts]) -> list[Gate]:
    """The gates the run's decisions name, in the run report's words."""
    decided = report.gate_decisions(result, paths, nodes)
    gates = [
        Gate("data gate", decided.data_gate.text, decided.data_gate.note),
        Gate("model gate", decided.model.text, decided.model.note),
    ]
    if decided.infra is not None:
        server = f"checked on {decided.infra_server}" if decided.infra_server else ""
        note = "; ".join(n for n in (decided.infra.note, server) if n)
        gates.append(Gate("infra validation", decided.infra.text, note))
    if decided.tflite is not None:
        gates.append(Gate("TF Lite conversion", decided.tflite.text, decided.tflite.note))
    return gates


# --- writing -------------------------------------------------------------------------------------


def write_model_card(
    result: RunResult, paths: RunPaths, also: tuple[Gate, ...] = ()
) -> tuple[AnyPath, AnyPath]:
    """Writes the model card of the version `result` pushed, JSON then page, each whole, and
    returns their paths. `also`: gates passed after the run (a person's bless), listed last."""
    facts = gather(result, paths)
    facts.gates.extend(also)
    card, page = model_card_files(paths.serving_config_dir, facts.model_name, facts.version)
    storage.makedirs(str(card.parent))
    storage.write_text(str(card), json.dumps(card_json(facts), indent=2) + "\n")
    storage.write_text(str(page), card_page(facts))
    return card, page
