"""Production orchestration: the checks a profile must pass before anything is compiled, built
or scheduled, and `conveyor compile` (Kubeflow Pipelines v2 / Vertex AI, or Airflow).

The pipeline is always the one `pipelines.builder.build_pipeline` builds; `pipelines.runners.
kubeflow` and `pipelines.runners.airflow` add only orchestrator concerns. This module imports no
TensorFlow or TFX: `conveyor validate` runs `check_profile` for every pipeline and profile.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pipelines.config import CONFIGS_DIR, LoadedSpec, SpecError
from pipelines.spec import MetadataKind, Orchestrator, PipelineSpec


class ProfileError(SpecError):
    """A profile cannot be compiled or run as asked; the message names the key and why."""


def _where(loaded: LoadedSpec) -> str:
    return f"configs/{loaded.env}.yaml" if (CONFIGS_DIR / f"{loaded.env}.yaml").exists() else ""


def target_of(loaded: LoadedSpec, target: str | None = None) -> Orchestrator:
    """The orchestrator `compile` writes for: `--target`, else the profile's."""
    if target is not None:
        try:
            return Orchestrator(target)
        except ValueError:
            known = ", ".join(o.value for o in Orchestrator if o is not Orchestrator.LOCAL)
            message = f"--target {target!r}: unknown orchestrator (known: {known})."
            raise ProfileError(message) from None
    return loaded.spec.runtime.orchestrator


def check_profile(loaded: LoadedSpec, target: Orchestrator | None = None) -> None:
    """Cheap checks across spec sections that the pydantic models cannot make on their own.

    Raises:
      ProfileError: naming the profile file and key.
    """
    spec = loaded.spec
    where = _where(loaded)
    prefix = f"{where}: " if where else ""
    target = target or spec.runtime.orchestrator
    nodes = [c.id for c in spec.components]
    for key in spec.runtime.container.resources:
        if key != "default" and key not in nodes:
            raise ProfileError(
                f"{prefix}runtime.container.resources.{key}: no node {key!r} in components "
                f"(nodes: {', '.join(nodes)}; `default` applies to every node)."
            )
    if target is Orchestrator.KUBEFLOW and not spec.runtime.container.image:
        raise ProfileError(
            f"{prefix}runtime.container.image: Kubeflow needs the pipeline image (built from the "
            "Dockerfile); the profile names none."
        )
    if target is Orchestrator.AIRFLOW and spec.schedule.start_date is None:
        raise ProfileError(
            f"{prefix}schedule.start_date: Airflow needs a start date for the nightly DAG."
        )


def check_beam_options(spec: PipelineSpec) -> None:
    """Every Beam argument is one Beam knows (it ignores misspelt ones with a warning)."""
    import warnings

    with warnings.catch_warnings():  # google-api-core's notices about Python 3.10
        warnings.simplefilter("ignore", FutureWarning)
        from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(list(spec.runtime.beam_args))
    known = options.get_all_options(retain_unknown_options=False)
    unknown = sorted(set(options.get_all_options(retain_unknown_options=True)) - set(known))
    if unknown:
        raise ProfileError(
            f"runtime.beam_args: Beam does not know {', '.join('--' + u for u in unknown)}."
        )


def check_metadata_reachable(spec: PipelineSpec, timeout: float = 3.0) -> None:
    """A MySQL metadata store answers on its host and port, and its password is in the
    environment; a SQLite one needs nothing."""
    metadata = spec.runtime.metadata
    if metadata.kind is not MetadataKind.MYSQL:
        return
    if metadata.password_env and metadata.password_env not in os.environ:
        raise ProfileError(
            f"runtime.metadata.password_env: the environment variable {metadata.password_env!r} "
            "is not set (it holds the metadata database's password)."
        )
    try:
        with socket.create_connection((str(metadata.host), int(metadata.port)), timeout=timeout):
            pass
    except OSError as err:
        raise ProfileError(
            f"runtime.metadata: cannot reach the MySQL metadata database at "
            f"{metadata.host}:{metadata.port} ({err.strerror or err}); start it or fix "
            "runtime.metadata.host/port."
        ) from None


def default_output(spec: PipelineSpec, target: Orchestrator, workdir: Path) -> Path:
    if target is Orchestrator.KUBEFLOW:
        return workdir / "compiled" / "kubeflow" / f"{spec.name}.json"
    return workdir / "compiled" / "airflow" / f"{spec.name}_dag.py"


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
            f"{_where(loaded)}: runtime.orchestrator is 'local': `conveyor run` runs it; "
            "compile needs a profile for kubeflow or airflow, or --target."
        )
    check_profile(loaded, target)
    if target is Orchestrator.AIRFLOW:  # KFP keeps its own metadata store
        check_metadata_reachable(loaded.spec)
    check_beam_options(loaded.spec)
    if target is Orchestrator.KUBEFLOW:
        from pipelines.runners import kubeflow

        return kubeflow.compile_pipeline(loaded, workdir, output)
    from pipelines.runners import airflow

    return [airflow.write_dag_file(loaded, workdir, output, overrides)]
