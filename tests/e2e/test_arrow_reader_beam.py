"""The Arrow CSV reader as a Beam pipeline: on the multi-processing DirectRunner its work units
are read in more than one worker process, and what it writes is the single-process run's."""

import os
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions

from components.arrow_example_gen import executor, ranges
from pipelines.datasets import taxi

SPLITS = ("train", "eval")
UNIT_BYTES = 256 << 10  # 20,000 taxi rows are about 2.4 MB: about ten units


def _read(csv: Path, out: Path, make_pipeline=None, unit_bytes=None) -> executor.Reading:
    return executor.read_csv_splits(
        [str(csv)],
        [str(out / f"Split-{name}") for name in SPLITS],
        [2, 3],
        None,
        skip_bad_rows=False,
        columnar_dirs=[str(out / "columnar" / f"Split-{name}") for name in SPLITS],
        make_pipeline=make_pipeline,
        unit_bytes=unit_bytes,
    )


def _examples(out: Path, split: str) -> list[bytes]:
    """The split's tf.Examples in canonical serialisation (an encoder's feature-map order is
    its own), sorted: the set of examples, whatever shard holds them."""
    files = sorted(str(p) for p in (out / f"Split-{split}").glob("data_tfrecord-*.gz"))
    return sorted(
        tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
        for r in tf.data.TFRecordDataset(files, "GZIP")
    )


def _copy_rows(out: Path, split: str) -> tuple[object, list]:
    """The split's Parquet copy: its schema and its rows, sorted."""
    table = pq.read_table(str(out / "columnar" / f"Split-{split}"))
    return table.schema, sorted(table.to_pylist(), key=repr)


def test_units_spread_over_worker_processes_and_the_output_is_the_single_process_runs(
    tmp_path,
):
    csv = tmp_path / "taxi.csv"
    taxi.write_rows(20_000, csv, seed=3)
    assert len(ranges.plan_units([str(csv)], UNIT_BYTES)) >= 6

    single = _read(csv, tmp_path / "single")  # in this process, the whole file one unit
    assert len(single.units) == 1 and single.units[0].process == os.getpid()

    options = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    spread = _read(csv, tmp_path / "spread", lambda: beam.Pipeline(options=options), UNIT_BYTES)

    processes = {report.process for report in spread.units}
    assert len(spread.units) >= 6
    assert len(processes) > 1 and os.getpid() not in processes
    assert spread.counts == single.counts and sum(single.counts) == 20_000
    assert spread.plan.types == single.plan.types
    for split in SPLITS:
        assert _examples(tmp_path / "spread", split) == _examples(tmp_path / "single", split)
        assert _copy_rows(tmp_path / "spread", split) == _copy_rows(tmp_path / "single", split)
    # One TFRecord and one Parquet shard per unit in every split, numbered of the units.
    shards = sorted(p.name for p in (tmp_path / "spread" / "Split-train").iterdir())
    assert shards == [
        f"data_tfrecord-{i:05d}-of-{len(spread.units):05d}.gz" for i in range(len(spread.units))
    ]
    assert not list((tmp_path / "spread").glob(".conveyor-units-*"))  # the hand-off is removed
