"""Spans: TFX's date-to-span rule, finding a night's files, and the errors for a missing night."""

import datetime
from pathlib import Path

import pytest

from pipelines.builder import spans
from pipelines.spec.loading import load_spec


@pytest.fixture
def taxi():
    return load_spec("taxi").spec


def test_dated_spans_count_days_since_the_epoch_like_tfx():
    from tfx.components.example_gen import utils

    night = datetime.date(2026, 11, 28)
    assert spans.span_of_date(night) == utils.date_to_span_number(2026, 11, 28)
    assert spans.date_of_span(spans.span_of_date(night)) == night


def test_parse_night_accepts_dates_and_relative_words():
    today = datetime.date(2026, 11, 29)
    assert spans.parse_night("yesterday", today) == datetime.date(2026, 11, 28)
    assert spans.parse_night("today", today) == today
    assert spans.parse_night("2026-01-02", today) == datetime.date(2026, 1, 2)
    with pytest.raises(spans.SpanError, match="--date '28/11/2026'"):
        spans.parse_night("28/11/2026", today)


def test_available_spans_and_the_latest_is_the_default(taxi, tmp_path):
    for day in ("2026-11-26", "2026-11-28"):
        (tmp_path / day).mkdir()
        (tmp_path / day / "taxi.csv").write_text("fare\n1\n")
    (tmp_path / "2026-11-27").mkdir()  # a night with no file yet
    (tmp_path / "notes").mkdir()
    expected = [spans.span_of_date(datetime.date(2026, 11, d)) for d in (26, 28)]

    assert spans.available_spans(taxi, tmp_path) == expected
    assert spans.resolve_span(taxi, tmp_path, None, None) == expected[-1]
    assert spans.resolve_span(taxi, tmp_path, datetime.date(2026, 11, 26), None) == expected[0]
    with pytest.raises(spans.SpanError, match=r"no data for 2026-11-27 \(span 20784\)"):
        spans.resolve_span(taxi, tmp_path, datetime.date(2026, 11, 27), None)


def test_prepared_file_goes_into_the_nights_directory(taxi, tmp_path):
    span = spans.span_of_date(datetime.date(2026, 11, 28))
    assert spans.prepared_file(taxi, tmp_path, span, "taxi.csv") == (
        tmp_path / "2026-11-28" / "taxi.csv"
    )


def test_a_spec_without_spans_refuses_a_date():
    penguin = load_spec("penguin").spec
    with pytest.raises(spans.SpanError, match="need data.span_pattern"):
        spans.resolve_span(penguin, Path("."), datetime.date(2026, 1, 1), None)
