"""Airflow 2: the built pipeline as a DAG (TFX's AirflowDagRunner), one DAG run a night.

`conveyor compile NAME --profile airflow` writes a small DAG file holding the resolved spec and the
working directory; when Airflow imports it, `airflow_dag` validates the spec again and builds
the pipeline with `pipelines.builder.pipeline.build_pipeline`, the same one `conveyor run` runs.

The night: a DAG is built once, when Airflow parses the file, so the night cannot be a
`build_pipeline(night=...)` argument there. Built for Airflow, ExampleGen's `range_config` of a
spec with dated spans is an Airflow template of the DAG run's logical date instead
(`pipelines.builder.nodes.example_gen`), so each night's run ingests exactly that date's span.

What precedes a run: a first task, `conveyor_prepare`, which every TFX task waits for, puts
serving back in step with ML Metadata (`pipelines.ops.finish.prepare_airflow_run`). The DAG runs
one night at a time (`max_active_runs: 1`); a `conveyor run` of the same workdir is not locked
out by Airflow (the lock is a process's, and a DAG run is many processes).

What follows a run: the DAG file gives `airflow_dag` a final step, which becomes one more task,
`conveyor_finish`, downstream of every TFX task with trigger rule `all_done`: it runs whether
the night pushed, was blocked or failed, reads the DAG run back from ML Metadata and writes its
summary and report, alerts, and records a final outcome (`pipelines.ops.finish.
finish_airflow_run`, passed in by the DAG file: the run layer imports no operations). Being the
DAG's only leaf, its state is the DAG run's, so it fails when the night was blocked or failed.
"""

from __future__ import annotations

import datetime
import os
import pprint
import zoneinfo
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipelines.spec.loading import LoadedSpec
from pipelines.spec.models import Orchestrator, PipelineSpec

FIRST_TASK_ID = "conveyor_prepare"
FINAL_TASK_ID = "conveyor_finish"

_DAG_FILE = '''"""Airflow DAG of the Conveyor pipeline {name!r}: written by `{command}`.

Do not edit: change the spec or the profile and compile again. Airflow imports this file from
its DAG folder; the Conveyor project must be installed where the scheduler and workers run.
"""

import os

# TFMA and TFX's Keras paths need Keras 2 (tf-keras); set before TensorFlow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from pipelines.ops.finish import finish_airflow_run, prepare_airflow_run  # noqa: E402
from pipelines.run.airflow import airflow_dag  # noqa: E402

WORKDIR = {workdir!r}
RESOLVED_SPEC = {spec}

dag = airflow_dag(
    RESOLVED_SPEC, WORKDIR, first_step=prepare_airflow_run, final_step=finish_airflow_run
)
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


def airflow_dag(
    resolved_spec: dict[str, Any],
    workdir: str,
    final_step: Callable[..., Any] | None = None,
    first_step: Callable[..., Any] | None = None,
):
    """The Airflow DAG of a resolved spec (what the compiled DAG file calls).

    Args:
      resolved_spec: the spec as the DAG file holds it.
      workdir: the working directory the pipeline runs in.
      final_step: what the final task calls once every TFX task is done (see
        `add_final_task`); None builds the TFX tasks alone.
      first_step: what a first task calls before any TFX task starts (see `add_first_task`);
        None adds no first task.
    """
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from tfx.orchestration.airflow.airflow_dag_runner import (
        AirflowDagRunner,
        AirflowPipelineConfig,
    )

    from pipelines.builder.pipeline import build_pipeline
    from pipelines.core.metadata import connection_config
    from pipelines.core.paths import RunPaths

    spec = PipelineSpec.model_validate(resolved_spec)
    paths = RunPaths(workdir=Path(workdir).resolve(), spec=spec)
    pipeline = build_pipeline(
        spec,
        paths.workdir,
        target=Orchestrator.AIRFLOW,
        metadata_connection_config=connection_config(spec, paths.metadata_path),
    )
    runner = AirflowDagRunner(AirflowPipelineConfig(airflow_dag_config=dag_config(spec)))
    dag = runner.run(pipeline)
    if first_step is not None:
        add_first_task(dag, first_step, resolved_spec, str(paths.workdir))
    if final_step is not None:
        add_final_task(dag, final_step, resolved_spec, str(paths.workdir))
    return dag


def add_first_task(
    dag, first_step: Callable[..., Any], resolved_spec: dict[str, Any], workdir: str
):
    """Adds the task every TFX task waits for: `first_step(resolved_spec, workdir, **context)`
    puts serving back in step with ML Metadata (a push killed mid-way) before the night runs.

    Returns:
      The first task (a PythonOperator).
    """
    import functools

    from airflow.operators.python import PythonOperator

    roots = [task for task in dag.tasks if not task.upstream_task_ids]
    first = PythonOperator(
        task_id=FIRST_TASK_ID,
        python_callable=functools.partial(first_step, resolved_spec, workdir),
        retries=0,
        dag=dag,
    )
    first.set_downstream(roots)
    return first


def add_final_task(
    dag, final_step: Callable[..., Any], resolved_spec: dict[str, Any], workdir: str
):
    """Adds the task that finishes each DAG run: downstream of every task already in `dag`, run
    when they are all done, whatever their state (trigger rule `all_done`).

    `final_step(resolved_spec, workdir, final_task_id, **context)` gets Airflow's task context
    (`dag_run`, `ds`...). The spec is bound to it rather than passed as `op_kwargs`, which Airflow
    renders as Jinja templates: a spec's text is data, not a template.

    Returns:
      The final task (a PythonOperator).
    """
    import functools

    from airflow.operators.python import PythonOperator
    from airflow.utils.trigger_rule import TriggerRule

    upstream = list(dag.tasks)
    final = PythonOperator(
        task_id=FINAL_TASK_ID,
        python_callable=functools.partial(final_step, resolved_spec, workdir, FINAL_TASK_ID),
        trigger_rule=TriggerRule.ALL_DONE,
        # A failed or blocked night fails this task on purpose; running it again changes
        # nothing about the night.
        retries=0,
        dag=dag,
    )
    final.set_upstream(upstream)
    return final


def write_dag_file(
    loaded: LoadedSpec, workdir: str, output: Path, overrides: tuple[str, ...] = ()
) -> Path:
    """Writes the DAG file for `loaded` (checked first: it must build) and returns its path."""
    spec = loaded.spec
    command = f"conveyor compile {spec.name} --profile {loaded.env}" + "".join(
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
