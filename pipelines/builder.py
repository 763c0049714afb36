"""The one builder: a validated, frozen spec -> `tfx.dsl.Pipeline`.

Runners (local, and later Kubeflow and Airflow) call this and add only orchestrator concerns.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from pipelines.registry import RunPaths, build_nodes
from pipelines.spec import MetadataKind, PipelineSpec


class MetadataConfigError(ValueError):
    """The profile's metadata settings cannot produce a connection config."""


def metadata_connection_config(spec: PipelineSpec, paths: RunPaths):
    import os

    from tfx.orchestration import metadata as tfx_metadata

    metadata = spec.runtime.metadata
    if metadata.kind is MetadataKind.SQLITE:
        paths.metadata_path.parent.mkdir(parents=True, exist_ok=True)
        return tfx_metadata.sqlite_metadata_connection_config(str(paths.metadata_path))
    password = ""
    if metadata.password_env:
        if metadata.password_env not in os.environ:
            raise MetadataConfigError(
                f"runtime.metadata.password_env names {metadata.password_env!r}, "
                "which is not set in the environment"
            )
        password = os.environ[metadata.password_env]
    return tfx_metadata.mysql_metadata_connection_config(
        host=metadata.host,
        port=metadata.port,
        database=metadata.database,
        username=metadata.user,
        password=password,
    )


def build_pipeline(
    spec: PipelineSpec,
    workdir: Path,
    night: datetime.date | None = None,
    span: int | None = None,
):
    """Builds the TFX pipeline for `spec` with every path under `workdir`.

    For a spec with `data.span_pattern`, `night` (a dated span) or `span` pins the span that
    ExampleGen ingests; with neither, ExampleGen takes the latest span it finds.
    """
    from tfx.orchestration.pipeline import Pipeline

    from pipelines import spans

    if night is not None:
        span = spans.span_of_date(night)
    paths = RunPaths(workdir=Path(workdir).resolve(), spec=spec)
    return Pipeline(
        pipeline_name=spec.name,
        pipeline_root=str(paths.pipeline_root),
        components=build_nodes(spec, paths, span=span),
        enable_cache=spec.runtime.enable_cache,
        metadata_connection_config=metadata_connection_config(spec, paths),
        beam_pipeline_args=list(spec.runtime.beam_args),
    )
