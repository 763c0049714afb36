"""`data.format`: what each format accepts and refuses at validation and at `conveyor run`, and
the Parquet reader's conversion on small files (real pyarrow files, real tf.Examples)."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
import yaml

from components.parquet_example_gen import executor
from pipelines import cli
from pipelines.core.project import find_project
from pipelines.spec.loading import SpecError, load_spec
from pipelines.spec.models import DataFormat

QUERY = "data.query=SELECT * FROM `project.dataset.penguins`"


def test_csv_is_the_default_format():
    assert load_spec("penguin").spec.data.format is DataFormat.CSV


@pytest.mark.parametrize("key", ["data.bad_rows=skip", "data.reader=tfx"])
def test_csv_reader_keys_are_refused_for_parquet(key):
    with pytest.raises(SpecError) as err:
        load_spec("penguin", overrides=["data.format=parquet", key])
    name = key.split("=")[0]
    assert f"--set {key}: {name}: only the CSV readers read it" in str(err.value)
    assert "data.format is 'parquet'" in str(err.value)


def test_csv_reader_keys_in_the_spec_file_are_refused_naming_it(tmp_path):
    spec = yaml.safe_load((find_project().specs_dir / "penguin.yaml").read_text())
    spec["data"].update({"format": "tfrecord", "bad_rows": "skip"})
    path = tmp_path / "penguin_tfrecord.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match=r"penguin_tfrecord.yaml: data.bad_rows: only the CSV"):
        load_spec(str(path))


def test_a_profiles_reader_choice_does_not_refuse_a_parquet_spec():
    # configs/large.yaml sets data.reader for every pipeline: a preference for CSV input.
    loaded = load_spec("penguin", env="large", overrides=["data.format=parquet"])
    assert loaded.spec.data.format is DataFormat.PARQUET


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.format=bigquery"], "data.format 'bigquery' needs data.query"),
        ([QUERY], "data.query is for data.format 'bigquery'; this spec reads csv"),
        (
            ["data.format=bigquery", QUERY, "data.span_pattern='{SPAN}/*'"],
            "data.span_pattern names files; data.format 'bigquery' reads a query",
        ),
        (
            ["data.format=tfrecord", "data.split_key=island"],
            "data.split_key cannot split TFRecord input",
        ),
    ],
)
def test_format_specific_keys_are_checked(overrides, message):
    with pytest.raises(SpecError, match=message):
        load_spec("penguin", overrides=overrides)


def test_run_of_a_bigquery_spec_is_refused_with_what_to_do(tmp_path, capsys):
    argv = ["run", "penguin", "--set", "data.format=bigquery", "--set", QUERY]
    assert cli.main([*argv, "--workdir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "data.format 'bigquery' cannot run here" in err
    assert "conveyor compile penguin --profile kubeflow" in err


def test_run_without_parquet_files_names_the_folder(tmp_path, capsys):
    argv = ["run", "penguin", "--set", "data.format=parquet", "--workdir", str(tmp_path)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert f"no parquet files in {tmp_path / 'data' / 'penguin'}" in err
    assert "conveyor data" not in err  # it writes CSV


def _write(path: Path, columns: dict) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def _read(folder: Path) -> list[tf.train.Example]:
    records = tf.data.TFRecordDataset([str(p) for p in folder.glob("*.gz")], "GZIP")
    return [tf.train.Example.FromString(r.numpy()) for r in records]


def test_zeros_nulls_lists_and_categories_become_tfx_features(tmp_path):
    source = _write(
        tmp_path / "in.parquet",
        {
            "label": pa.array([0, 1, 0], pa.int8()),
            "amount": pa.array([0.0, None, 2.5]),
            "flag": pa.array([False, True, None]),
            "tags": pa.array([["a", "b"], None, []]),
            "city": pa.array(["x", "", None]).dictionary_encode(),
        },
    )
    counts = executor.write_splits([str(source)], [str(tmp_path / "all")], [1], None)
    assert counts == [3]
    [first, second, third] = sorted(
        _read(tmp_path / "all"), key=lambda e: list(e.features.feature["amount"].float_list.value)
    )
    # A zero is a value (TFX's own Parquet executor drops it), a null is no value.
    assert list(first.features.feature["label"].int64_list.value) in ([0], [1])
    assert list(second.features.feature["amount"].float_list.value) == [0.0]
    assert list(second.features.feature["label"].int64_list.value) == [0]
    assert list(second.features.feature["flag"].int64_list.value) == [0]
    assert list(second.features.feature["tags"].bytes_list.value) == [b"a", b"b"]
    assert list(first.features.feature["amount"].float_list.value) == []
    assert list(first.features.feature["tags"].bytes_list.value) == []
    assert list(first.features.feature["city"].bytes_list.value) == [b""]
    assert list(third.features.feature["city"].bytes_list.value) == []


def test_records_are_protobufs_deterministic_serialisation(tmp_path):
    source = _write(
        tmp_path / "in.parquet",
        {"b": list(range(300)), "a": [f"v{i % 7}" for i in range(300)], "c": [0.5] * 300},
    )
    columns = executor.read_columns([str(source)])
    [(_, records)] = list(executor.encode_batches([str(source)], columns))
    assert len(records) == 300
    for record in records:
        assert record == tf.train.Example.FromString(record).SerializeToString(deterministic=True)


def test_a_timestamp_column_is_refused_naming_file_and_column(tmp_path):
    # Parquet has no second unit: pyarrow writes seconds as milliseconds.
    source = _write(tmp_path / "t.parquet", {"when": pa.array([1, 2], pa.timestamp("s"))})
    with pytest.raises(executor.ParquetInputError) as err:
        executor.read_columns([str(source)])
    assert f"{source}: column 'when' is timestamp[ms], which a tf.Example cannot hold" in str(
        err.value
    )


def test_files_with_different_columns_are_refused(tmp_path):
    first = _write(tmp_path / "a.parquet", {"x": [1], "y": ["a"]})
    second = _write(tmp_path / "b.parquet", {"x": [1.5], "y": ["a"]})
    with pytest.raises(executor.ParquetInputError, match="its columns differ from"):
        executor.read_columns([str(first), str(second)])


def test_a_missing_required_column_names_the_spec_key(tmp_path):
    source = _write(tmp_path / "a.parquet", {"x": [1]})
    with pytest.raises(executor.ParquetInputError, match=r"trainer.label: column 'species'"):
        executor.read_columns([str(source)], {"species": "trainer.label"})
