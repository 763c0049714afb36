"""What the data gate is told on each target: on Kubeflow, where no resolver finds the last
accepted span (KFP runs only its own strategies), where the record of accepted spans it keeps
lies (tests/unit/test_accepted_spans.py), and that it names the span of the examples it
judges, which the run's range decides (it said "all input files")."""

import json

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
    assert properties["data_description"] == ""  # the gate names the span it judges


def test_locally_the_gate_has_its_drift_baseline_and_the_night_it_reads(tmp_path):
    properties = _gate_properties(Orchestrator.LOCAL, tmp_path, span=20780)
    assert properties.get("accepted_spans_dir") is None  # the resolver finds the baseline
    assert properties["data_description"] == "2026-11-23 (span 20780)"
