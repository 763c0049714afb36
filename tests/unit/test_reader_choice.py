"""`reader: auto` sizes the input ExampleGen will read: the span's files in the nightly layout."""

import datetime

import pytest

from pipelines.builder.context import use_arrow_reader
from pipelines.builder.spans import span_of_date
from pipelines.core.paths import RunPaths
from pipelines.spec.loading import load_spec

# 10 KiB: one night's file below, the other above.
THRESHOLD = ["data.arrow_above_megabytes=0.01"]
SMALL, BIG = 1_000, 20_000
HEADER = b"fare,company\n"


def write_night(input_dir, night: str, size: int) -> None:
    """One span in the taxi spec's layout (`{YYYY}-{MM}-{DD}/*.csv`), `size` bytes of CSV."""
    folder = input_dir / night
    folder.mkdir(parents=True)
    row = b"12.5,Flash Cab\n"
    (folder / "taxi.csv").write_bytes(HEADER + row * ((size - len(HEADER)) // len(row)))


def span(night: str) -> int:
    return span_of_date(datetime.date.fromisoformat(night))


@pytest.fixture
def taxi(tmp_path):
    """The taxi spec's input folder holding a small night and, after it, a big one."""
    paths = RunPaths(workdir=tmp_path, spec=load_spec("taxi", overrides=THRESHOLD).spec)
    write_night(paths.input_dir, "2026-11-27", SMALL)
    write_night(paths.input_dir, "2026-11-28", BIG)
    assert not [p for p in paths.input_dir.glob("*") if p.is_file()]  # only dated folders
    return paths


def test_a_big_night_is_read_with_arrow(taxi):
    assert use_arrow_reader(taxi.spec, taxi.input_dir, span("2026-11-28")) is True


def test_a_small_night_is_read_with_tfx_whatever_the_other_nights(taxi):
    assert use_arrow_reader(taxi.spec, taxi.input_dir, span("2026-11-27")) is False


def test_no_span_sizes_the_latest_night(taxi):
    assert use_arrow_reader(taxi.spec, taxi.input_dir, None) is True
    write_night(taxi.input_dir, "2026-11-29", SMALL)  # the latest is small now
    assert use_arrow_reader(taxi.spec, taxi.input_dir, None) is False


def test_no_night_on_disk_takes_tfx(tmp_path):
    spec = load_spec("taxi", overrides=["data.arrow_above_megabytes=0"]).spec
    assert use_arrow_reader(spec, tmp_path / "data" / "taxi", None) is False


def test_a_spec_without_spans_sizes_the_files_in_its_input_dir(tmp_path):
    spec = load_spec("penguin", overrides=THRESHOLD).spec
    (tmp_path / "penguins.csv").write_bytes(HEADER + b"1.0,a\n" * 3_000)
    write_night(tmp_path, "2026-11-28", BIG)  # a folder is not ExampleGen's input here
    assert use_arrow_reader(spec, tmp_path, None) is True
    (tmp_path / "penguins.csv").write_bytes(HEADER)
    assert use_arrow_reader(spec, tmp_path, None) is False


def test_the_built_example_gen_reads_a_big_night_with_arrow(taxi):
    from pipelines.builder.pipeline import build_nodes

    def example_gen(night):
        ctx = build_nodes(taxi.spec, taxi, "local", span(night))
        return type(ctx.nodes[0]).__name__

    assert example_gen("2026-11-28") == "ArrowCsvExampleGen"
    assert example_gen("2026-11-27") == "CsvExampleGen"
