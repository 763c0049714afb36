"""Batch inference's rows: CSV rows into tf.Examples typed as the model's columns, each bad row
named by file and line; PredictionLogs back into table rows; the version `conveyor infer`
chooses; and `conveyor infer --help` without TensorFlow."""

import io
import subprocess
import sys

import pytest
from tensorflow.core.example import example_pb2
from tensorflow_serving.apis import prediction_log_pb2

from components.bulk_inferrer.rows import TableLayout, tensor_values
from pipelines.core.paths import FRAMEWORK_ROOT, RunPaths
from pipelines.ops.infer import InferError, RowReader, chosen_version
from pipelines.spec.loading import load_spec

COLUMNS = {"island": "string", "bill_length_mm": "float", "body_mass_g": "int"}


def _read(text: bytes, keep=()) -> tuple[list, list]:
    parsed, bad = [], []
    for tag, value in RowReader(COLUMNS, keep).examples("in.csv", io.BytesIO(text)):
        if tag == "parsed":
            parsed.append(example_pb2.Example.FromString(value))
        else:
            bad.append(value)
    return parsed, bad


def test_rows_become_examples_typed_as_the_models_columns():
    parsed, bad = _read(
        b"species,island,bill_length_mm,body_mass_g\n"
        b"Adelie,Torgersen,39.1,3750\n"
        b'Gentoo,"Biscoe",,\n',
        keep=("species",),
    )
    assert bad == []
    first, second = (e.features.feature for e in parsed)
    assert first["island"].bytes_list.value == [b"Torgersen"]
    assert first["bill_length_mm"].float_list.value == pytest.approx([39.1])
    assert first["body_mass_g"].int64_list.value == [3750]
    assert first["species"].bytes_list.value == [b"Adelie"]
    # An empty field is a feature with no values (as TFX's CSV reading writes it), of its type.
    assert second["bill_length_mm"].WhichOneof("kind") == "float_list"
    assert list(second["bill_length_mm"].float_list.value) == []
    assert second["body_mass_g"].WhichOneof("kind") == "int64_list"


def test_each_bad_row_is_named_by_line_and_the_good_rows_still_come_through():
    parsed, bad = _read(
        b"island,bill_length_mm,body_mass_g\n"
        b"Torgersen,39.1,3750\n"
        b"Torgersen,long,3750\n"
        b"Torgersen,39.1,3750.5\n"
        b"Torgersen,39.1\n"
        b"\xff\xfe,1,2\n"
        b'"Dream\n'
        b'Island",40,4000\n'
        b"Biscoe,41,4100\n"
    )
    assert len(parsed) == 3  # lines 2, 7-8 (a quoted field over two lines) and 9
    assert [(b.file, b.line) for b in bad] == [
        ("in.csv", 3),
        ("in.csv", 4),
        ("in.csv", 5),
        ("in.csv", 6),
    ]
    assert bad[0].reason == "column bill_length_mm: 'long' is not a number"
    assert bad[1].reason == "column body_mass_g: '3750.5' is not an integer"
    assert bad[2].reason == "2 fields where the header has 3"
    assert "cannot be read" in bad[3].reason
    assert bad[0].describe() == "in.csv:3: column bill_length_mm: 'long' is not a number"


def test_a_file_without_a_model_column_names_each_of_its_rows():
    parsed, bad = _read(b"island,bill_length_mm\nTorgersen,39.1\nBiscoe,40\n")
    assert parsed == []
    assert [(b.line, b.reason) for b in bad] == [
        (2, "no column body_mass_g (a model input)"),
        (3, "no column body_mass_g (a model input)"),
    ]


def _predict_log(island: str, probabilities: list[float], class_id: int):
    import tensorflow as tf

    example = example_pb2.Example()
    example.features.feature["island"].bytes_list.value.append(island.encode())
    log = prediction_log_pb2.PredictionLog()
    request = log.predict_log.request.inputs["examples"]
    request.dtype = tf.string.as_datatype_enum
    request.string_val.append(example.SerializeToString())
    outputs = log.predict_log.response.outputs
    outputs["probabilities"].CopyFrom(tf.make_tensor_proto([probabilities], dtype=tf.float32))
    outputs["class_ids"].CopyFrom(tf.make_tensor_proto([class_id], dtype=tf.int64))
    return log


def test_a_prediction_log_becomes_one_row_of_the_named_columns_and_every_output():
    log = _predict_log("Dream", [0.25, 0.5, 0.25], 1)
    layout = TableLayout.of(log, ["island", "sex"])
    assert layout.header == [
        "island",
        "sex",
        "class_ids",
        "probabilities_0",
        "probabilities_1",
        "probabilities_2",
    ]
    assert layout.row(log) == ["Dream", None, 1, 0.25, 0.5, 0.25]
    assert layout.csv_line(log) == "Dream,,1,0.25,0.5,0.25"
    schema = layout.arrow_schema(log)
    assert [str(f.type) for f in schema] == [
        "string",
        "string",
        "int64",
        "double",
        "double",
        "double",
    ]
    assert layout.record(log, schema)["probabilities_1"] == 0.5


def test_an_input_column_named_like_an_output_is_refused():
    with pytest.raises(ValueError, match="names of model outputs"):
        TableLayout.of(_predict_log("Dream", [1.0], 0), ["class_ids"])


def test_tensor_values_read_packed_and_repeated_protos():
    import tensorflow as tf

    assert tensor_values(tf.make_tensor_proto([[1.5, 2.5]], dtype=tf.float32)) == [1.5, 2.5]
    assert tensor_values(tf.make_tensor_proto([b"a", b"b"])) == ["a", "b"]
    assert tensor_values(tf.make_tensor_proto(7, dtype=tf.int64, shape=[3])) == [7, 7, 7]


def test_the_served_version_is_stables_else_the_newest_and_a_named_one_must_exist(tmp_path):
    paths = RunPaths(workdir=tmp_path, spec=load_spec("penguin", workdir=tmp_path).spec)
    with pytest.raises(InferError, match="no version of penguin is served"):
        chosen_version(paths, None, None)
    for version in (1, 2):
        (paths.serving_dir / str(version)).mkdir(parents=True)
    assert chosen_version(paths, None, None) == 2
    assert chosen_version(paths, 1, None) == 1
    with pytest.raises(InferError, match=r"no version 3 .*\(versions: 1, 2\)"):
        chosen_version(paths, 3, None)
    with pytest.raises(InferError, match="no label 'canary'"):
        chosen_version(paths, None, "canary")


def test_infer_help_imports_no_tensorflow(tmp_path):
    probe = (
        "import sys\nfrom pipelines import cli\n"
        "try:\n    cli.main(['infer', '--help'])\n"
        "except SystemExit as done:\n    code = done.code\n"
        "heavy = sorted(m for m in ('tensorflow', 'tfx', 'apache_beam') if m in sys.modules)\n"
        "print('HEAVY', heavy)\nsys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"CONVEYOR_PROJECT": str(FRAMEWORK_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert "--version VERSION | --label LABEL" in done.stdout
    assert "HEAVY []" in done.stdout


def test_batches_encode_the_same_examples_as_one_row_at_a_time():
    text = (
        b"species,island,bill_length_mm,body_mass_g\n"
        b"Adelie,Torgersen,39.1,3750\n"
        b"Gentoo,,,\n"
        b"Chinstrap,Dream,x,1\n"
        b"Adelie,Biscoe,40.5,4000\n"
    )
    reader = RowReader(COLUMNS, ("species",))
    one_by_one = [v for t, v in reader.examples("in.csv", io.BytesIO(text)) if t == "parsed"]
    batched = list(reader.batches("in.csv", io.BytesIO(text), 2))
    assert [t for t, _ in batched] == ["parsed", "bad", "parsed"]
    assert batched[1][1].line == 4
    examples = [e for t, batch in batched if t == "parsed" for e in batch]
    assert [example_pb2.Example.FromString(e) for e in examples] == [
        example_pb2.Example.FromString(e) for e in one_by_one
    ]


def _parquet(table) -> io.BytesIO:
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=2)  # several row groups: read batch by batch
    buffer.seek(0)
    return buffer


def test_parquet_rows_are_the_same_examples_as_the_same_csv_rows():
    import pyarrow as pa

    text = (
        b"species,island,bill_length_mm,body_mass_g\n"
        b"Adelie,Torgersen,39.1,3750\n"
        b"Gentoo,,,\n"
        b"Adelie,Biscoe,40.5,4000\n"
    )
    table = pa.table(
        {
            "species": ["Adelie", "Gentoo", "Adelie"],
            "island": ["Torgersen", None, "Biscoe"],
            "bill_length_mm": [39.1, None, 40.5],
            "body_mass_g": pa.array([3750, None, 4000], pa.int64()),
        }
    )
    from_csv = [v for t, v in RowReader(COLUMNS, ("species",)).examples("in.csv", io.BytesIO(text))]
    reader = RowReader(COLUMNS, ("species",), file_format="parquet")
    from_parquet = [v for t, v in reader.examples("in.parquet", _parquet(table))]
    assert len(from_parquet) == 3
    assert [example_pb2.Example.FromString(e) for e in from_parquet] == [
        example_pb2.Example.FromString(e) for e in from_csv
    ]
    batched = [e for t, b in reader.batches("in.parquet", _parquet(table), 2) for e in b]
    assert [example_pb2.Example.FromString(e) for e in batched] == [
        example_pb2.Example.FromString(e) for e in from_csv
    ]


def test_a_parquet_column_the_model_cannot_take_names_each_row_and_both_types():
    import pyarrow as pa

    table = pa.table(
        {
            "island": ["Torgersen", "Biscoe"],
            "bill_length_mm": ["long", "39.1"],  # text where the model takes a number
            "body_mass_g": pa.array([3750.5, 4000.0], pa.float64()),
        }
    )
    reader = RowReader(COLUMNS, file_format="parquet")
    bad = [v for t, v in reader.examples("in.parquet", _parquet(table)) if t == "bad"]
    assert [(b.file, b.line) for b in bad] == [("in.parquet", 1), ("in.parquet", 2)]
    assert bad[0].reason == ("column bill_length_mm holds string, where the model takes numbers")
    without_mass = pa.table({"island": ["Dream"], "bill_length_mm": [40.0]})
    (missing,) = [v for _, v in reader.examples("in.parquet", _parquet(without_mass))]
    assert missing.reason == "no column body_mass_g (a model input)"
    (unreadable,) = [v for _, v in reader.examples("x.parquet", io.BytesIO(b"a,b\n1,2\n"))]
    assert unreadable.line == 1 and unreadable.reason.startswith("not a Parquet file: ")
