"""What the data gate is told on each target, and the record of accepted spans it keeps on
Kubeflow: there no resolver finds the last accepted span (KFP runs only its own strategies), so
the gate records each span it accepts in the workdir and measures drift from the newest one
recorded before tonight's; it names the data as the newest span, which ExampleGen's driver
takes (it said "all input files")."""

import json

from tfx.types import standard_artifacts

from components.data_gate.component import last_accepted_before, record_accepted_span
from pipelines.builder.pipeline import build_pipeline
from pipelines.core.artifact_files import ACCEPTED_SPANS_FOLDER
from pipelines.core.paths import RunPaths
from pipelines.spec.loading import load_spec
from pipelines.spec.models import Orchestrator


def _gate_properties(target: Orchestrator, tmp_path, **build) -> dict:
    spec = load_spec("taxi", env="ci").spec
    pipeline = build_pipeline(spec, tmp_path, target=target, **build)
    (gate,) = [node for node in pipeline.components if node.id == "data_gate"]
    return gate.exec_properties


def test_on_kubeflow_the_gate_keeps_its_record_in_the_workdir_and_reads_the_newest_span(tmp_path):
    properties = _gate_properties(Orchestrator.KUBEFLOW, tmp_path)
    limits = json.loads(properties["thresholds"])
    assert limits["drift"] == {"fare": 0.25, "payment_type": 0.1, "company": 0.1}
    runs_dir = RunPaths(tmp_path, load_spec("taxi", env="ci").spec).runs_dir
    assert properties["accepted_spans_dir"] == str(runs_dir / ACCEPTED_SPANS_FOLDER)
    assert properties["data_description"] == "the newest span"


def test_locally_the_gate_has_its_drift_baseline_and_the_night_it_reads(tmp_path):
    properties = _gate_properties(Orchestrator.LOCAL, tmp_path, span=20780)
    assert properties.get("accepted_spans_dir") is None  # the resolver finds the baseline
    assert properties["data_description"] == "2026-11-23 (span 20780)"


def _accepted(tmp_path, span: int | None):
    """The statistics and examples a gate accepted for `span` (None: data without spans)."""
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(tmp_path / f"statistics-{span}")
    statistics.split_names = '["train", "eval"]'
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / f"examples-{span}")
    examples.split_names = '["train", "eval"]'
    if span is not None:
        examples.set_int_custom_property("span", span)  # as FileBasedExampleGen's driver sets it
    return statistics, examples


def test_the_baseline_is_the_newest_span_accepted_before_tonights(tmp_path):
    record_dir = str(tmp_path / ACCEPTED_SPANS_FOLDER)
    assert last_accepted_before(record_dir, 20781) == (None, None)  # nothing recorded yet
    for span in (20780, 20782, 20778):  # a backfill records an older span later
        assert record_accepted_span(record_dir, *_accepted(tmp_path, span))
    statistics, examples = last_accepted_before(record_dir, 20782)
    assert statistics.uri == str(tmp_path / "statistics-20780")
    assert statistics.split_names == '["train", "eval"]'
    assert examples.get_int_custom_property("span") == 20780
    # A re-run of a night measures from the span before it, not from itself or a later one.
    statistics, _ = last_accepted_before(record_dir, 20780)
    assert statistics.uri == str(tmp_path / "statistics-20778")
    assert last_accepted_before(record_dir, 20778) == (None, None)


def test_data_without_spans_is_not_recorded(tmp_path):
    record_dir = tmp_path / ACCEPTED_SPANS_FOLDER
    assert record_accepted_span(str(record_dir), *_accepted(tmp_path, None)) is None
    assert not record_dir.exists()
