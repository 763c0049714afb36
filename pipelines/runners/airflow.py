"""Airflow 2: the built pipeline as a DAG (TFX's AirflowDagRunner), one DAG run a night.

`conveyor compile NAME --env airflow` writes a small DAG file holding the resolved spec and the
working directory; when Airflow imports it, `airflow_dag` validates the spec again and builds
the pipeline with `pipelines.builder.build_pipeline`, the same one `conveyor run` runs.

The night: a DAG is built once, when Airflow parses the file, so the night cannot be a
`build_pipeline(night=...)` argument there. For a spec with dated spans (`data.span_pattern`
with {YYYY}{MM}{DD}), ExampleGen's `range_config` exec property becomes an Airflow template of
the DAG run's logical date (`ds`): Airflow renders it when the task runs (AirflowComponent passes
exec properties as PythonOperator's templated `op_kwargs`, which is also how TFX's
AirflowDagRunner handles RuntimeParameters), so each night's run ingests exactly that date's
span, the same StaticRange `build_pipeline(night=ds)` sets for `conveyor run --date`.
"""

from __future__ import annotations

import datetime
import os
import pprint
from pathlib import Path
from typing import Any

from pipelines.config import LoadedSpec
from pipelines.spec import PipelineSpec

# Days since 1970-01-01 of the DAG run's logical date: TFX's span number of a dated span.
SPAN_OF_LOGICAL_DATE = (
    '(macros.datetime.strptime(ds, "%Y-%m-%d") - macros.datetime(1970, 1, 1)).days'
)
RANGE_CONFIG_TEMPLATE = (
    "{% set span = " + SPAN_OF_LOGICAL_DATE + " %}"
    '{"static_range": {"start_span_number": {{ span }}, "end_span_number": {{ span }}}}'
)
DATA_DESCRIPTION_TEMPLATE = "{{ ds }} (span {{ " + SPAN_OF_LOGICAL_DATE + " }})"

_DAG_FILE = '''"""Airflow DAG of the Conveyor pipeline {name!r}: written by `{command}`.

Do not edit: change the spec or the profile and compile again. Airflow imports this file from
its DAG folder; the Conveyor project must be installed where the scheduler and workers run.
"""

import os

# TFMA and TFX's Keras paths need Keras 2 (tf-keras); set before TensorFlow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from pipelines.runners.airflow import airflow_dag  # noqa: E402

WORKDIR = {workdir!r}
RESOLVED_SPEC = {spec}

dag = airflow_dag(RESOLVED_SPEC, WORKDIR)
'''


def template_the_night(pipeline) -> list[str]:
    """Makes ExampleGen ingest the span of the DAG run's logical date; returns the node ids."""
    templated = []
    for node in pipeline.components:
        properties = getattr(node, "exec_properties", {})
        if "input_config" in properties and "range_config" in properties:
            properties["range_config"] = RANGE_CONFIG_TEMPLATE
            templated.append(node.id)
        if "data_description" in properties:
            properties["data_description"] = DATA_DESCRIPTION_TEMPLATE
    return templated


def dag_config(spec: PipelineSpec) -> dict[str, Any]:
    """What AirflowDagRunner passes to `airflow.models.DAG(...)`: the spec's schedule."""
    schedule = spec.schedule
    start = schedule.start_date or datetime.date.today()
    return {
        "schedule": schedule.cron,
        "start_date": datetime.datetime(
            start.year, start.month, start.day, tzinfo=datetime.timezone.utc
        ),
        "catchup": schedule.catchup,
        # One night at a time: a night's run reads the models and spans earlier nights wrote.
        "max_active_runs": 1,
        "description": spec.description,
        "tags": ["conveyor"],
    }


def airflow_dag(resolved_spec: dict[str, Any], workdir: str):
    """The Airflow DAG of a resolved spec (what the compiled DAG file calls)."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from tfx.orchestration.airflow.airflow_dag_runner import (
        AirflowDagRunner,
        AirflowPipelineConfig,
    )

    from pipelines.builder import build_pipeline

    spec = PipelineSpec.model_validate(resolved_spec)
    pipeline = build_pipeline(spec, Path(workdir))
    if spec.data.dated_spans:
        template_the_night(pipeline)
    runner = AirflowDagRunner(AirflowPipelineConfig(airflow_dag_config=dag_config(spec)))
    return runner.run(pipeline)


def write_dag_file(
    loaded: LoadedSpec, workdir: str, output: Path, overrides: tuple[str, ...] = ()
) -> Path:
    """Writes the DAG file for `loaded` (checked first: it must build) and returns its path."""
    spec = loaded.spec
    command = f"conveyor compile {spec.name} --env {loaded.env}" + "".join(
        f" --set {o}" for o in overrides
    )
    source = _DAG_FILE.format(
        name=spec.name,
        command=command,
        workdir=str(Path(workdir).resolve()),
        spec=pprint.pformat(spec.to_yaml_dict(), width=96, sort_dicts=False),
    )
    compile(source, str(output), "exec")  # a DAG file that is not Python fails here, not in Airflow
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(source)
    return output
