"""A `Run`: the spec, its paths and the span one command works on, resolved once.

The command line builds one `Run` per pipeline run (a backfill, one per night) and hands it to
the nightly loop and the local runner, so the span is resolved and the paths derived once, and
every step of the command agrees on them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from pipelines.builder import spans
from pipelines.core.object_path import as_path
from pipelines.core.paths import RunPaths
from pipelines.spec.checks import check_job_service_reachable
from pipelines.spec.loading import LoadedSpec, SpecError
from pipelines.spec.models import DataFormat, PipelineSpec


@dataclass(frozen=True)
class Run:
    """One run to make: which spec (under which profile), where, and which span."""

    loaded: LoadedSpec
    paths: RunPaths
    # The span ExampleGen ingests; None for a spec without spans (every input file is the data).
    span: int | None

    @classmethod
    def plan(
        cls,
        loaded: LoadedSpec,
        workdir: Path,
        night: datetime.date | None = None,
        span: int | None = None,
    ) -> Run:
        """Resolves the span (the night's, the one given, or the latest with data).

        Raises:
          spans.SpanError: the span has no data, or the spec has no spans to pick from.
          SpecError: the spec reads a BigQuery query, which only an orchestrator can run, or
            its portable runner's Beam job service does not answer.
        """
        if loaded.spec.data.format is DataFormat.BIGQUERY:
            raise SpecError(
                f"{loaded.spec.name}: data.format 'bigquery' cannot run here (no BigQuery to "
                f"reach); compile it instead: `conveyor compile {loaded.spec.name} --profile "
                "kubeflow`. To run locally, export the query's rows to Parquet and set "
                "data.format: parquet (docs/inputs.md)."
            )
        check_job_service_reachable(loaded.spec)  # a portable runner's job service answers
        paths = RunPaths(workdir=as_path(workdir).resolve(), spec=loaded.spec)
        return cls(loaded, paths, spans.resolve_span(loaded.spec, paths.input_dir, night, span))

    @property
    def spec(self) -> PipelineSpec:
        """The resolved spec (profile and `--set` overrides applied) this run builds."""
        return self.loaded.spec

    @property
    def night(self) -> datetime.date | None:
        """The night of a dated span (None otherwise)."""
        if self.span is None or not self.spec.data.dated_spans:
            return None
        return spans.date_of_span(self.span)
