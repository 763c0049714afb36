"""What the data gate is told on each target: on Kubeflow, which builds no drift baseline and
pins no span, the gate says why it measured no drift and names the data as the newest span
(it said "no earlier span has passed this gate yet" on every night, and "all input files")."""

import json

from pipelines.builder.pipeline import build_pipeline
from pipelines.spec.loading import load_spec
from pipelines.spec.models import Orchestrator


def _gate_properties(target: Orchestrator, tmp_path, **build) -> dict:
    spec = load_spec("taxi", env="ci").spec
    pipeline = build_pipeline(spec, tmp_path, target=target, **build)
    (gate,) = [node for node in pipeline.components if node.id == "data_gate"]
    return gate.exec_properties


def test_on_kubeflow_the_gate_says_why_no_drift_is_measured_and_reads_the_newest_span(tmp_path):
    properties = _gate_properties(Orchestrator.KUBEFLOW, tmp_path)
    limits = json.loads(properties["thresholds"])
    assert limits["drift"] == {"fare": 0.25, "payment_type": 0.1, "company": 0.1}
    assert limits["drift_unmeasured"] == "the kubeflow build resolves no earlier span"
    assert properties["data_description"] == "the newest span"


def test_locally_the_gate_has_its_drift_baseline_and_the_night_it_reads(tmp_path):
    properties = _gate_properties(Orchestrator.LOCAL, tmp_path, span=20780)
    assert "drift_unmeasured" not in json.loads(properties["thresholds"])
    assert properties["data_description"] == "2026-11-23 (span 20780)"
