"""data_gate: stops the run before training on anomalies, drift or skew over the thresholds."""

from __future__ import annotations

import json

from pipelines.builder.context import BuildContext
from pipelines.core.artifact_files import ACCEPTED_SCHEMA_FILE, ACCEPTED_SPANS_FOLDER
from pipelines.spec.components import Orchestrator
from pipelines.spec.models import PipelineSpec, ServingDataFormat


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds the DataGate over the anomalies, statistics and examples, and registers it as a gate
    that the Trainer waits on, so a failed check stops the run before any training.

    The drift baseline (`previous_statistics`) is wired where `data.drift` is set and an
    earlier resolver provides it; on Kubeflow, which builds no such resolver, the gate finds it
    in the record of accepted spans it keeps in the workdir.
    """
    from components.data_gate.component import DataGate

    data = ctx.spec.data
    serving_dir = ctx.paths.serving_data_dir
    # Drift is measured from the last accepted span: the resolver's, or on Kubeflow the gate's
    # own record of the spans it accepted, in the workdir every task reaches
    # (components/data_gate/component.py).
    drift_from = data.drift and ctx.has("previous_statistics")
    kubeflow = ctx.target is Orchestrator.KUBEFLOW
    records = accepted_spans_dir(ctx)
    limits = {
        "drift": data.drift,
        "skew": data.skew,
        "serving_data_dir": str(serving_dir) if serving_dir else None,
    }
    if data.serving_data_format is not ServingDataFormat.CSV:
        # Only when not CSV, so that the gate's properties (and TFX's cache) stay as they were.
        limits["serving_data_format"] = data.serving_data_format.value
    # On Kubeflow the gate's refusal is written where the exit handler finds it by the job's
    # name (KFP fills the placeholders), so that the run ends BLOCKED with its findings.
    node = DataGate(
        accepted_spans_dir=records if kubeflow and kubeflow_keeps_records(ctx.spec) else None,
        accepted_schema_file=accepted_schema_file(ctx) if kubeflow_keeps_schema(ctx) else None,
        runs_dir=str(ctx.paths.runs_dir) if kubeflow else None,
        job_name="{{$.pipeline_job_name}}" if kubeflow else None,
        job_resource_name="{{$.pipeline_job_resource_name}}" if kubeflow else None,
        anomalies=ctx.need("anomalies", node_id),
        statistics=ctx.need("statistics", node_id),
        schema=ctx.need("schema", node_id),
        examples=ctx.need("examples", node_id),
        previous_statistics=ctx.need("previous_statistics", node_id) if drift_from else None,
        previous_examples=ctx.need("previous_examples", node_id) if drift_from else None,
        input_base=str(ctx.paths.input_dir),
        data_description=_data_description(ctx),
        thresholds=json.dumps(limits, sort_keys=True),
    ).with_id(node_id)
    ctx.add(node)
    ctx.gates.append(node)


def _data_description(ctx: BuildContext) -> str:
    """How the gate's error names the data: the DAG run's night (Airflow), the pinned span, or,
    for spans with none pinned (Kubeflow, whose ExampleGen reads the newest span or the one the
    run's range_config names), "": the gate names the span of the examples it judges."""
    from pipelines.builder import spans

    data = ctx.spec.data
    if ctx.target is Orchestrator.AIRFLOW and data.dated_spans:
        return spans.DATA_DESCRIPTION_TEMPLATE
    if data.span_pattern and ctx.span is None:
        return ""
    return spans.describe(ctx.spec, ctx.span)


def kubeflow_keeps_records(spec: PipelineSpec) -> bool:
    """Whether a Kubeflow build keeps the record of accepted spans: when the data gate measures
    drift or the Trainer learns from a window of spans, which read it
    (components/spans/accepted.py)."""
    return bool(spec.data.drift) or spec.data.window_spans > 1


def accepted_spans_dir(ctx: BuildContext) -> str:
    """Where a Kubeflow build keeps the record of accepted spans: under the pipeline's runs
    folder in the workdir, which every task reaches."""
    return str(ctx.paths.runs_dir / ACCEPTED_SPANS_FOLDER)


def kubeflow_keeps_schema(ctx: BuildContext) -> bool:
    """Whether a build keeps the record of the last accepted run's schema: on Kubeflow, for
    `schema.source: infer`, whose schema_gen keeps it (components/accepted_schema)."""
    from pipelines.spec.models import SchemaSource

    return ctx.target is Orchestrator.KUBEFLOW and ctx.spec.schema_.source is SchemaSource.INFER


def accepted_schema_file(ctx: BuildContext) -> str:
    """Where a Kubeflow build records the last accepted run's schema: beside the record of
    accepted spans, in the workdir every task reaches."""
    return str(ctx.paths.runs_dir / ACCEPTED_SCHEMA_FILE)
