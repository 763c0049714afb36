"""The record of accepted spans a Kubeflow run keeps in its workdir: what its drift gate and
its training window read where a local run asks ML Metadata (components/spans/strategy.py).

Kubeflow Pipelines runs a resolver as a query of its own ML Metadata that knows only TFX's
strategies, and no task can read that store. So on Kubeflow Conveyor's own components keep the
record, in the workdir every task reaches (`<runs dir>/accepted_spans/`, a bucket or Vertex
AI's `/gcs/` mount), one `<span>.json` per span:
- the data gate writes it when it accepts a span (`record_accepted_span`): the span's
  statistics and examples, their URIs, splits and custom properties;
- the Pusher adds `model_blessed` (`record_blessing`): whether the Evaluator blessed the model
  trained on that night, as the local window asks of ML Metadata;
- the next night's data gate measures drift from the newest span recorded before its own
  (`last_accepted_before`), and the Trainer adds the blessed spans of the window before its
  own to its examples (`blessed_window`).

A local run learns also from a span blessed in a later night's model; here a span counts as
blessed by its own night's model only.
"""

import json
import os

from tfx.dsl.io import fileio
from tfx.types import standard_artifacts

from components.spans import strategy

BLESSED_KEY = "model_blessed"
# In the Pusher's custom_config on Kubeflow: the record's folder.
ACCEPTED_SPANS_KEY = "accepted_spans_dir"
# On the Model (components.trainer): the spans of the examples it learned from, a JSON list.
TRAINED_SPANS_PROPERTY = "conveyor_trained_spans"


def examples_span(examples) -> int | None:
    """The span on ExampleGen's Examples (`strategy.examples_span`, what the local resolvers
    read), or None for data without spans (span 0) or no Examples."""
    return (strategy.examples_span(examples) or None) if examples is not None else None


def _described(artifact) -> dict:
    """What restores an artifact: URI, splits and its int and string custom properties (the
    span, the payload and file formats TFX's readers go by)."""
    custom = {}
    for name, value in artifact.mlmd_artifact.custom_properties.items():
        kind = value.WhichOneof("value")
        if kind in ("int_value", "string_value"):
            custom[name] = getattr(value, kind)
    return {"uri": artifact.uri, "split_names": artifact.split_names, "custom": custom}


def _restored(artifact_class, described: dict, span: int):
    """The artifact a record describes, with its span as an int custom property whatever type
    the orchestrator gave it (KFP's metadata holds numbers as doubles)."""
    restored = artifact_class()
    restored.uri = described["uri"]
    restored.split_names = described["split_names"]
    for name, value in described.get("custom", {}).items():
        if isinstance(value, int):
            restored.set_int_custom_property(name, value)
        else:
            restored.set_string_custom_property(name, str(value))
    restored.set_int_custom_property("span", span)
    return restored


def _record_path(accepted_dir: str, span: int) -> str:
    return os.path.join(accepted_dir, f"{span}.json")


def _read(accepted_dir: str, span: int) -> dict:
    with fileio.open(_record_path(accepted_dir, span)) as handle:
        return json.loads(handle.read())


def _write(accepted_dir: str, record: dict) -> str:
    fileio.makedirs(accepted_dir)
    target = _record_path(accepted_dir, record["span"])
    with fileio.open(target, "w") as handle:
        handle.write(json.dumps(record, indent=2))
    return target


def recorded_spans(accepted_dir: str) -> list[int]:
    """The spans recorded as accepted, ascending."""
    if not fileio.exists(accepted_dir):
        return []
    return sorted(
        int(name[: -len(".json")])
        for name in fileio.listdir(accepted_dir)
        if name.endswith(".json") and name[: -len(".json")].isdigit()
    )


def record_accepted_span(accepted_dir: str, statistics, examples) -> str | None:
    """Records that the data gate accepted this span (its statistics and examples); returns
    the record, or None for data without spans (no later span drifts from it or learns from
    it). A re-run of the span with new examples replaces the record, blessing unknown again;
    with the same examples (KFP's cache gave them, and may give the Pusher's answer too, which
    then records nothing) the blessing stays."""
    span = examples_span(examples)
    if span is None:
        return None
    record = {"span": span, "statistics": _described(statistics), "examples": _described(examples)}
    if span in recorded_spans(accepted_dir):
        before = _read(accepted_dir, span)
        if before["examples"]["uri"] == examples.uri and BLESSED_KEY in before:
            record[BLESSED_KEY] = before[BLESSED_KEY]
    return _write(accepted_dir, record)


def record_blessing(accepted_dir: str, span: int | None, blessed: bool) -> str | None:
    """Adds whether the Evaluator blessed the model trained on `span`'s night to its record;
    None (nothing written) when the span has no record."""
    if span is None or span not in recorded_spans(accepted_dir):
        return None
    return _write(accepted_dir, {**_read(accepted_dir, span), BLESSED_KEY: bool(blessed)})


def last_accepted_before(accepted_dir: str, span: int | None):
    """(statistics, examples) artifacts of the newest span before `span` that a data gate
    accepted; (None, None) when there is none."""
    earlier = [s for s in recorded_spans(accepted_dir) if span is not None and s < span]
    if not earlier:
        return None, None
    record = _read(accepted_dir, earlier[-1])
    return (
        _restored(standard_artifacts.ExampleStatistics, record["statistics"], record["span"]),
        _restored(standard_artifacts.Examples, record["examples"], record["span"]),
    )


def blessed_window(accepted_dir: str, span: int | None, num_spans: int) -> list:
    """The Examples of the spans among the `num_spans - 1` before `span` that a data gate
    accepted and whose night's model was blessed, oldest first: what the Trainer learns from
    besides tonight's span (the training window of `TrainingWindowStrategy`)."""
    if span is None:
        return []
    earliest = span - num_spans + 1
    window = []
    for earlier in recorded_spans(accepted_dir):
        if earliest <= earlier < span:
            record = _read(accepted_dir, earlier)
            if record.get(BLESSED_KEY):
                window.append(_restored(standard_artifacts.Examples, record["examples"], earlier))
    return window
