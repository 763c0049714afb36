"""Airflow 2: the built pipeline as a DAG (TFX's AirflowDagRunner), one DAG run a night.

`conveyor compile NAME --env airflow` writes a small DAG file holding the resolved spec and the
working directory; when Airflow imports it, `airflow_dag` validates the spec again and builds
the pipeline with `pipelines.build.builder.build_pipeline`, the same one `conveyor run` runs.

The night: a DAG is built once, when Airflow parses the file, so the night cannot be a
`build_pipeline(night=...)` argument there. Built for Airflow, ExampleGen's `range_config` of a
spec with dated spans is an Airflow template of the DAG run's logical date instead
(`pipelines.build.nodes.example_gen`), so each night's run ingests exactly that date's span.
"""

from __future__ import annotations

import datetime
import os
import pprint
import zoneinfo
from pathlib import Path
from typing import Any

from pipelines.spec.loading import LoadedSpec
from pipelines.spec.models import Orchestrator, PipelineSpec

_DAG_FILE = '''"""Airflow DAG of the Conveyor pipeline {name!r}: written by `{command}`.

Do not edit: change the spec or the profile and compile again. Airflow imports this file from
its DAG folder; the Conveyor project must be installed where the scheduler and workers run.
"""

import os

# TFMA and TFX's Keras paths need Keras 2 (tf-keras); set before TensorFlow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from pipelines.run.airflow import airflow_dag  # noqa: E402

WORKDIR = {workdir!r}
RESOLVED_SPEC = {spec}

dag = airflow_dag(RESOLVED_SPEC, WORKDIR)
'''


def dag_config(spec: PipelineSpec) -> dict[str, Any]:
    """What AirflowDagRunner passes to `airflow.models.DAG(...)`: the spec's schedule."""
    schedule = spec.schedule
    start = schedule.start_date or datetime.date.today()
    return {
        "schedule": schedule.cron,
        # Airflow fires the cron expression in the start date's zone: the spec's schedule zone.
        "start_date": datetime.datetime(
            start.year, start.month, start.day, tzinfo=zoneinfo.ZoneInfo(schedule.timezone)
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

    from pipelines.build.builder import build_pipeline
    from pipelines.metadata import connection_config
    from pipelines.paths import RunPaths

    spec = PipelineSpec.model_validate(resolved_spec)
    paths = RunPaths(workdir=Path(workdir).resolve(), spec=spec)
    pipeline = build_pipeline(
        spec,
        paths.workdir,
        target=Orchestrator.AIRFLOW,
        metadata_connection_config=connection_config(spec, paths.metadata_path),
    )
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
