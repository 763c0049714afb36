"""TFRecord and Parquet input give the examples the CSV they came from gives: the same tf.Examples
in the same splits, through each format's ExampleGen in a real pipeline run; and a penguin run
from Parquet goes all the way to a pushed model.

The test writes the other formats from the penguin CSV itself, typed as TFX types CSV columns:
a column is an integer if every non-empty cell is one, a float if every one is a number, else
text; an empty cell is a feature with no values.
"""

import csv
import glob
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from components.arrow_example_gen.splits import COLUMNAR_PROPERTY
from pipelines import cli
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec

DATA_PATH_ONLY = ["components=[{type: csv_example_gen}, {type: statistics_gen}]"]


def _tfx_kind(cells: list[str]) -> str:
    present = [c for c in cells if c]

    def all_parse(kind) -> bool:
        try:
            for cell in present:
                kind(cell)
        except ValueError:
            return False
        return True

    if present and all_parse(int):
        return "int"
    if present and all_parse(float):
        return "float"
    return "bytes"


def write_tfrecord(csv_path: Path, target: Path) -> None:
    """The CSV's rows as gzipped tf.Examples, built cell by cell with TFX's typing."""
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    kinds = {name: _tfx_kind([r[name] for r in rows]) for name in rows[0]}
    convert = {"int": int, "float": float, "bytes": str.encode}
    with tf.io.TFRecordWriter(str(target), "GZIP") as writer:
        for row in rows:
            features = {}
            for name, cell in row.items():
                values = [convert[kinds[name]](cell)] if cell else []
                kind = kinds[name]
                if kind == "int":
                    features[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
                elif kind == "float":
                    features[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
                else:
                    features[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
            example = tf.train.Example(features=tf.train.Features(feature=features))
            # Deterministic bytes: ImportExampleGen hashes each record's bytes as they are.
            writer.write(example.SerializeToString(deterministic=True))


def write_parquet(csv_path: Path, target: Path) -> None:
    """The CSV as Parquet: int64, double and string columns, an empty cell a null."""
    table = pacsv.read_csv(
        csv_path,
        convert_options=pacsv.ConvertOptions(
            null_values=[""], strings_can_be_null=True, true_values=["\0"], false_values=["\0"]
        ),
    )
    assert {str(t) for t in table.schema.types} <= {"int64", "double", "string"}
    pq.write_table(table, target)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, RunPaths]:
    prepared = tmp_path_factory.mktemp("prepared")
    assert cli.main(["data", "penguin", "--workdir", str(prepared)]) == 0
    source = prepared / "data" / "penguin" / "penguins.csv"
    runs = {}
    for data_format, write in (
        ("csv", shutil.copy),
        ("tfrecord", write_tfrecord),
        ("parquet", write_parquet),
    ):
        workdir = tmp_path_factory.mktemp(data_format)
        input_dir = workdir / "data" / "penguin"
        input_dir.mkdir(parents=True)
        suffix = {"csv": ".csv", "tfrecord": ".tfrecord.gz", "parquet": ".parquet"}[data_format]
        write(source, input_dir / f"penguins{suffix}")
        overrides = [f"data.format={data_format}", *DATA_PATH_ONLY]
        if data_format == "csv":
            overrides.append("data.reader=tfx")  # TFX's CsvExampleGen is the reference
        loaded = load_spec("penguin", env="ci", overrides=overrides)
        result = nightly.run(loaded, workdir, echo=lambda _: None)
        assert result.ok, f"{data_format}: {result.message}"
        runs[data_format] = RunPaths(workdir, loaded.spec)
    return runs


def _examples(root: Path, split: str) -> list[bytes]:
    files = glob.glob(str(root / "csv_example_gen" / "examples" / "*" / f"Split-{split}" / "*"))
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return sorted(
        tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
        for r in records
    )


@pytest.mark.parametrize("data_format", ["tfrecord", "parquet"])
@pytest.mark.parametrize("split", ["train", "eval"])
def test_same_examples_in_the_same_split_as_the_csv(runs, data_format, split):
    from_csv = _examples(runs["csv"].pipeline_root, split)
    assert len(from_csv) > 80  # 344 rows, split 2:1
    assert _examples(runs[data_format].pipeline_root, split) == from_csv
    # A missing value (sex) is a feature without values, in every format.
    parsed = [tf.train.Example.FromString(e) for e in from_csv]
    assert any(not e.features.feature["sex"].bytes_list.value for e in parsed)


def test_parquet_statistics_are_computed_from_the_columnar_copy(runs):
    from components.statistics_gen.executor import READ_FROM_PROPERTY, READ_PARQUET

    run = runs["parquet"]
    store = metadata.open_store(run.spec, run.metadata_path)
    [examples] = store.get_artifacts_by_type("Examples")
    assert COLUMNAR_PROPERTY in examples.custom_properties
    [statistics] = store.get_artifacts_by_type("ExampleStatistics")
    assert metadata.custom_property(statistics, READ_FROM_PROPERTY) == READ_PARQUET


def test_a_changed_parquet_file_changes_the_run_fingerprint(runs, tmp_path):
    from pipelines.run import fingerprint

    run = runs["parquet"]
    before = fingerprint.compute(run)
    path = next(run.input_dir.glob("*.parquet"))
    table = pq.read_table(path)
    changed = table.set_column(
        table.schema.get_field_index("body_mass_g"),
        "body_mass_g",
        pa.compute.add(table["body_mass_g"], 1.0),
    )
    saved = tmp_path / "saved.parquet"
    shutil.copy(path, saved)
    try:
        pq.write_table(changed, path)
        assert fingerprint.compute(run)["inputs"] != before["inputs"]
    finally:
        shutil.copy(saved, path)
    assert fingerprint.compute(run)["inputs"] == before["inputs"]


def test_penguin_from_parquet_pushes_a_model(tmp_path):
    prepared = tmp_path / "prepared"
    assert cli.main(["data", "penguin", "--workdir", str(prepared)]) == 0
    workdir = tmp_path / "work"
    (workdir / "data" / "penguin").mkdir(parents=True)
    write_parquet(
        prepared / "data" / "penguin" / "penguins.csv",
        workdir / "data" / "penguin" / "penguins.parquet",
    )
    loaded = load_spec("penguin", env="ci", overrides=["data.format=parquet"], workdir=workdir)
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    assert result.outcome == "pushed", result.message
    paths = RunPaths(workdir, loaded.spec)
    serve = tf.saved_model.load(str(paths.serving_dir / "1")).signatures["serving_default"]
    outputs = serve(
        island=tf.constant(["Torgersen", "Biscoe"]),
        sex=tf.constant(["male", "female"]),
        bill_length_mm=tf.constant([39.1, 46.5]),
        bill_depth_mm=tf.constant([18.7, 14.5]),
        flipper_length_mm=tf.constant([181.0, 213.0]),
        body_mass_g=tf.constant([3750.0, 4800.0]),
    )
    assert [c.decode() for c in outputs["classes"].numpy()] == ["Adelie", "Gentoo"]
