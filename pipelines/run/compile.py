"""`conveyor compile`: what Kubeflow Pipelines v2 / Vertex AI or Airflow runs, after the profile
checks (`pipelines.spec.checks`) pass.

The pipeline is always the one `pipelines.builder.pipeline.build_pipeline` builds; `pipelines.run.
kubeflow` and `pipelines.run.airflow` add only orchestrator concerns. This module imports no
TensorFlow or TFX until it compiles.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.core.paths import RunPaths
from pipelines.spec.checks import (
    ProfileError,
    check_beam_options,
    check_metadata_reachable,
    check_profile,
    profile_file,
)
from pipelines.spec.loading import LoadedSpec
from pipelines.spec.models import Orchestrator, PipelineSpec


def default_output(spec: PipelineSpec, target: Orchestrator, workdir: Path) -> Path:
    """Where `conveyor compile` writes when `--output` is not given."""
    return RunPaths(workdir=workdir, spec=spec).compiled_output(target.value)


def compile_pipeline(
    loaded: LoadedSpec,
    target: Orchestrator,
    workdir: str,
    output: Path,
    overrides: tuple[str, ...] = (),
) -> list[Path]:
    """Checks the profile, then writes what the orchestrator runs; returns the files written.

    Args:
      loaded: the validated spec under its profile.
      target: kubeflow or airflow.
      workdir: the working directory the compiled pipeline uses (its data, outputs, serving).
      output: the PipelineJob JSON or the DAG file to write.
      overrides: the `--set` values, recorded in the DAG file's header.
    """
    if target is Orchestrator.LOCAL:
        raise ProfileError(
            f"{profile_file(loaded)}: runtime.orchestrator is 'local': `conveyor run` runs it; "
            "compile needs a profile for kubeflow or airflow, or --target."
        )
    check_profile(loaded, target)
    if target is Orchestrator.AIRFLOW:  # KFP keeps its own metadata store
        check_metadata_reachable(loaded.spec)
    check_beam_options(loaded.spec)
    if target is Orchestrator.KUBEFLOW:
        from pipelines.run import kubeflow

        return kubeflow.compile_pipeline(loaded, workdir, output)
    from pipelines.run import airflow

    return [airflow.write_dag_file(loaded, workdir, output, overrides)]
