"""The Arrow CSV reader as a Beam pipeline: on the multi-processing DirectRunner its work units
are read in more than one worker process, and what it writes is the single-process run's; its
input may be on any filesystem Beam has registered (here a plugin scheme backed by a folder,
tests/temp_dir_filesystem.py), read to what the same files give by local path."""

import os
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions

from components.arrow_example_gen import executor, ranges, splits
from pipelines.datasets import taxi

SPLITS = ("train", "eval")
UNIT_BYTES = 256 << 10  # 20,000 taxi rows are about 2.4 MB: about ten units


def _read(paths: list[str], out: Path, make_pipeline=None, unit_bytes=None) -> executor.Reading:
    return executor.read_csv_splits(
        paths,
        [str(out / f"Split-{name}") for name in SPLITS],
        [2, 3],
        None,
        skip_bad_rows=False,
        columnar_dirs=[str(out / "columnar" / f"Split-{name}") for name in SPLITS],
        make_pipeline=make_pipeline,
        unit_bytes=unit_bytes,
    )


def _canonical_examples(path: Path) -> list[bytes]:
    """A shard's tf.Examples in order, in canonical serialisation (an encoder's feature-map
    order is its own). Read with TF's record iterator: tf.data takes 40 times longer here."""
    records = tf.compat.v1.io.tf_record_iterator(
        str(path), tf.io.TFRecordOptions(compression_type="GZIP")
    )
    return [tf.train.Example.FromString(r).SerializeToString(deterministic=True) for r in records]


def _examples(out: Path, split: str) -> list[bytes]:
    """The split's tf.Examples, sorted: the set of examples, whatever shard holds them."""
    shards = sorted((out / f"Split-{split}").glob("data_tfrecord-*.gz"))
    return sorted(example for shard in shards for example in _canonical_examples(shard))


def _copy_rows(out: Path, split: str) -> tuple[object, list]:
    """The split's Parquet copy: its schema and its rows, sorted."""
    table = pq.read_table(str(out / "columnar" / f"Split-{split}"))
    return table.schema, sorted(table.to_pylist(), key=repr)


def _output_files(out: Path) -> dict[str, object]:
    """Every file a read wrote, by its path under `out`: a Parquet file's bytes, a TFRecord
    shard's examples in order (canonically serialised: protobuf writes a feature map in an
    order of its own process)."""
    found: dict[str, object] = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        if path.suffix == ".gz":
            found[str(path.relative_to(out))] = _canonical_examples(path)
        else:
            found[str(path.relative_to(out))] = path.read_bytes()
    return found


def test_units_spread_over_worker_processes_and_the_output_is_the_single_process_runs(
    tmp_path, monkeypatch
):
    """One span of two files (one with quoted commas, quotes and newlines), behind the plugin
    scheme `conveyortest://`: listed, planned, checked and read through Beam's FileSystems,
    in this process and over two worker processes, it gives shard by shard the examples and,
    byte for byte, the Parquet copy of the same files read by local path; and over the workers
    the examples of reading the files in one unit."""
    from tests import temp_dir_filesystem

    root = tmp_path / "store"
    span = root / "bucket" / "span-1"
    span.mkdir(parents=True)
    monkeypatch.setenv(temp_dir_filesystem.ROOT_VARIABLE, str(root))
    taxi.write_rows(20_000, span / "a.csv", seed=3)
    lines = (span / "a.csv").read_text().splitlines(keepends=True)
    quoted = [line.rsplit(",", 1)[0] + ',"Cab, ""Co""\nNorth"\n' for line in lines[1:400]]
    (span / "b.csv").write_text(lines[0] + "".join(quoted))

    local = splits.matching_files(str(span), "*.csv")
    remote = splits.matching_files("conveyortest://bucket/span-1", "*.csv")
    assert remote == ["conveyortest://bucket/span-1/a.csv", "conveyortest://bucket/span-1/b.csv"]
    assert len(ranges.plan_units(remote, UNIT_BYTES)) >= 6

    single = _read(local, tmp_path / "single")  # in this process, the whole span one unit
    assert len(single.units) == 1 and single.units[0].process == os.getpid()
    by_path = _read(local, tmp_path / "by-path", unit_bytes=UNIT_BYTES)
    in_process = _read(remote, tmp_path / "in-process", unit_bytes=UNIT_BYTES)

    options = PipelineOptions(
        [
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=2",
            # How a worker process finds the scheme: it imports the plugin's module.
            f"--beam_plugins={temp_dir_filesystem.__name__}.TempDirFileSystem",
        ]
    )
    spread = _read(remote, tmp_path / "spread", lambda: beam.Pipeline(options=options), UNIT_BYTES)

    processes = {report.process for report in spread.units}
    assert len(spread.units) >= 6
    assert len(processes) > 1 and os.getpid() not in processes
    assert spread.counts == in_process.counts == by_path.counts == single.counts
    assert sum(single.counts) == 20_000 + 399
    assert spread.plan.types == single.plan.types
    for split in SPLITS:
        assert _examples(tmp_path / "spread", split) == _examples(tmp_path / "single", split)
        assert _copy_rows(tmp_path / "spread", split) == _copy_rows(tmp_path / "single", split)
    expected = _output_files(tmp_path / "by-path")
    assert any(name.endswith(".parquet") for name in expected)
    assert _output_files(tmp_path / "in-process") == expected
    assert _output_files(tmp_path / "spread") == expected
    # One TFRecord and one Parquet shard per unit in every split, numbered of the units.
    shards = sorted(p.name for p in (tmp_path / "spread" / "Split-train").iterdir())
    assert shards == [
        f"data_tfrecord-{i:05d}-of-{len(spread.units):05d}.gz" for i in range(len(spread.units))
    ]
    assert not list((tmp_path / "spread").glob(".conveyor-units-*"))  # the hand-off is removed
