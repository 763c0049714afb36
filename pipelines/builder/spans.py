"""Dated and numbered spans: which files are one night's data, without importing TFX.

A spec's `data.span_pattern` names one span's files under `data.input_dir`, with TFX's
ExampleGen placeholders: `{YYYY}`, `{MM}`, `{DD}` for a dated span or `{SPAN}` for a numbered
one. A dated span's number is TFX's: days since 1970-01-01, so the pipeline, ML Metadata and the
command line agree on what "the night of 2026-11-28" is (span 20785).
"""

from __future__ import annotations

import datetime
import os
import re
import zoneinfo

from pipelines.core import storage
from pipelines.core.object_path import AnyPath, as_path
from pipelines.spec.models import PipelineSpec

EPOCH = datetime.date(1970, 1, 1)  # tfx.components.example_gen.utils.UNIX_EPOCH_DATE


# Built for Airflow, a DAG is made once, when Airflow parses its file, so the night cannot be a
# build argument there. ExampleGen's `range_config` (and the data gate's description) become
# Airflow templates of the DAG run's logical date (`ds`) instead: Airflow renders them when the
# task runs (AirflowComponent passes exec properties as PythonOperator's templated `op_kwargs`,
# which is also how TFX's AirflowDagRunner handles RuntimeParameters), so each night's run
# ingests exactly that date's span, the StaticRange `conveyor run --date` sets.
# Days since 1970-01-01 of the DAG run's logical date: TFX's span number of a dated span.
SPAN_OF_LOGICAL_DATE = (
    '(macros.datetime.strptime(ds, "%Y-%m-%d") - macros.datetime(1970, 1, 1)).days'
)
RANGE_CONFIG_TEMPLATE = (
    "{% set span = " + SPAN_OF_LOGICAL_DATE + " %}"
    '{"static_range": {"start_span_number": {{ span }}, "end_span_number": {{ span }}}}'
)
DATA_DESCRIPTION_TEMPLATE = "{{ ds }} (span {{ " + SPAN_OF_LOGICAL_DATE + " }})"


# Built for Kubeflow, a job is compiled once and its tasks cannot read the schedule: ExampleGen's
# `range_config` is a runtime parameter of the job (this name), empty for the newest span, which
# `conveyor submit --date` sets to that night's StaticRange (`range_config_json`).
RANGE_PARAMETER = "range_config"


def range_config_json(span: int) -> str:
    """One span's RangeConfig as ExampleGen's driver reads it from a runtime parameter."""
    import json

    return json.dumps({"static_range": {"start_span_number": span, "end_span_number": span}})


class SpanError(ValueError):
    """A night or span the command line was given does not fit the spec or the data."""


def span_of_date(night: datetime.date) -> int:
    """The span number of a dated span: days since 1970-01-01, as TFX's ExampleGen numbers it."""
    return (night - EPOCH).days


def date_of_span(span: int) -> datetime.date:
    """The night a dated span's number stands for: the inverse of `span_of_date`."""
    return EPOCH + datetime.timedelta(days=span)


def parse_night(
    text: str,
    today: datetime.date | None = None,
    zone: str = "UTC",
    now: datetime.datetime | None = None,
) -> datetime.date:
    """`YYYY-MM-DD`, `today` or `yesterday`: the forms `--date` takes.

    `today` and `yesterday` are the dates in `zone` (the spec's `schedule.timezone`), where the
    cron line fires: at 00:30 in Berlin (UTC+1) the UTC date is still the day before. `now` (an
    aware datetime, default the current time) and `today` are for tests.
    """
    if today is None:
        moment = now or datetime.datetime.now(datetime.timezone.utc)
        today = moment.astimezone(zoneinfo.ZoneInfo(zone)).date()
    if text == "today":
        return today
    if text == "yesterday":
        return today - datetime.timedelta(days=1)
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise SpanError(f"--date {text!r}: expected YYYY-MM-DD, 'today' or 'yesterday'") from None


def describe(spec: PipelineSpec, span: int | None) -> str:
    """'2026-11-28 (span 20785)' for a dated span, 'span 7' for a numbered one, 'all input
    files' for no span: how reports and the data gate name the data a run read."""
    if span is None:
        return "all input files"
    if spec.data.dated_spans:
        return f"{date_of_span(span).isoformat()} (span {span})"
    return f"span {span}"


def _substitute(pattern: str, span: int, dated: bool) -> str:
    if not dated:
        return pattern.replace("{SPAN}", str(span))
    night = date_of_span(span)
    return (
        pattern.replace("{YYYY}", f"{night.year:04d}")
        .replace("{MM}", f"{night.month:02d}")
        .replace("{DD}", f"{night.day:02d}")
    )


def span_glob(spec: PipelineSpec, input_dir: AnyPath, span: int) -> str:
    """The glob (absolute) of one span's files."""
    pattern = str(spec.data.span_pattern)
    return str(input_dir / _substitute(pattern, span, spec.data.dated_spans))


def span_files(spec: PipelineSpec, input_dir: AnyPath, span: int) -> list[AnyPath]:
    """The files of one span under `input_dir` (a folder, or a prefix in a bucket), sorted:
    what ExampleGen ingests for it, and so what the reader choice sizes and the run fingerprint
    digests (none: no data that night)."""
    return [as_path(p) for p in _files(span_glob(spec, input_dir, span))]


def _files(pattern: str) -> list[str]:
    """The files matching `pattern`, sorted. In a bucket everything a glob answers is an
    object, so a file (no stat each); on disk a folder that matches is dropped."""
    return [p for p in storage.glob(pattern) if storage.is_remote(p) or os.path.isfile(p)]


def available_spans(spec: PipelineSpec, input_dir: AnyPath) -> list[int]:
    """Span numbers that have at least one file, ascending (what ExampleGen would find)."""
    pattern = str(spec.data.span_pattern)
    dated = spec.data.dated_spans
    regex = re.escape(str(input_dir / pattern))
    for placeholder, group in (
        ("{YYYY}", r"(?P<y>\d{4})"),
        ("{MM}", r"(?P<m>\d{2})"),
        ("{DD}", r"(?P<d>\d{2})"),
        ("{SPAN}", r"(?P<span>\d+)"),
    ):
        regex = regex.replace(re.escape(placeholder), group)
    regex = regex.replace(r"\*", r"[^/]*").replace(r"\?", r"[^/]")
    wildcard = pattern
    for placeholder in ("{YYYY}", "{MM}", "{DD}", "{SPAN}"):
        wildcard = wildcard.replace(placeholder, "*")
    spans = set()
    for path in _files(str(input_dir / wildcard)):
        match = re.fullmatch(regex, path)
        if not match:
            continue
        if dated:
            try:
                night = datetime.date(int(match["y"]), int(match["m"]), int(match["d"]))
            except ValueError:
                continue  # not a calendar date: ExampleGen would reject it too
            spans.add(span_of_date(night))
        else:
            spans.add(int(match["span"]))
    return sorted(spans)


def prepared_file(spec: PipelineSpec, input_dir: AnyPath, span: int, filename: str) -> AnyPath:
    """Where `conveyor data` writes a span's file: the pattern's file, or `filename` in its
    directory when the pattern's last part is a wildcard."""
    substituted = as_path(span_glob(spec, input_dir, span))
    if any(c in substituted.name for c in "*?["):
        return substituted.parent / filename
    return substituted


def resolve_span(
    spec: PipelineSpec, input_dir: AnyPath, night: datetime.date | None, span: int | None
) -> int | None:
    """The span a run processes: the night's, the one given, or the latest with data.

    Returns None for a spec without spans (every input file is the data). Raises SpanError
    naming the files looked for when the span has no data.
    """
    if spec.data.span_pattern is None:
        if night is not None or span is not None:
            raise SpanError(
                f"{spec.name}: --date/--span need data.span_pattern in the spec (its input is "
                f"every file in {spec.data.input_dir})"
            )
        return None
    if night is not None and span is not None:
        raise SpanError("give --date or --span, not both")
    if night is not None:
        if not spec.data.dated_spans:
            raise SpanError(
                f"{spec.name}: data.span_pattern {spec.data.span_pattern!r} numbers its spans "
                "with {SPAN}; use --span N"
            )
        span = span_of_date(night)
    if span is None:
        found = available_spans(spec, input_dir)
        if not found:
            raise SpanError(
                f"{spec.name}: no span's files under {input_dir} match data.span_pattern "
                f"{spec.data.span_pattern!r}"
            )
        return found[-1]
    if not span_files(spec, input_dir, span):
        raise SpanError(
            f"{spec.name}: no data for {describe(spec, span)}: nothing matches "
            f"{span_glob(spec, input_dir, span)}"
        )
    return span
