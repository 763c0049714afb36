"""The input check both CSV readers run first: each problem named by file and line (and column
where known), in the same words through TFX's reader and the Arrow reader."""

import glob
import os

import pytest

from components.csv_input import checks
from components.csv_input.checks import FIELD_LIMIT, CsvInputError


def _write(directory, text: bytes | str, name="data.csv") -> str:
    path = directory / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


# Each bad input, and what its message must say; `{path}` is the file's path.
BAD_INPUTS = {
    "empty": (b"", "{path} is empty: expected a header line and rows (the file has 0 bytes)"),
    "header only": (b"a,b\n", "{path}: a header but no rows to read"),
    "blank first line": (
        b"\na,b\n1,2\n",
        "{path}, line 1: the first line is blank; it must be the header (the column names)",
    ),
    "not utf-8": (
        b"a,b\n1,2\n3,caf\xe9\n",
        "{path}, line 3: bytes that are not UTF-8 (byte 0xe9 at offset 13 of the file); "
        "save the file as UTF-8",
    ),
    "field too long": (
        b"a,b\n1,2\n3," + b"x" * (FIELD_LIMIT + 1) + b"\n",
        "{path}, line 3, column 2 ('b'): a field of 131,073 characters, over the "
        "131,072-character limit of the CSV parser (Python's csv module, which TFX's reader "
        "uses)",
    ),
    "extra field": (
        b"a,b\n1,2\n3,4,5\n6,7\n",
        "{path}, line 3: expected 2 fields, found 3: '3,4,5' (data.bad_rows is 'fail')",
    ),
    "missing field": (
        b"a,b\n1,2\n3\n",
        "{path}, line 3: expected 2 fields, found 1: '3' (data.bad_rows is 'fail')",
    ),
    "open quote": (
        b'a,b\n1,2\n3,"never closed\n4,5\n',
        "{path}, line 3: a quoted field is never closed: the quote that opens on this line "
        "runs to the end of the file",
    ),
    "duplicate column": (
        b"a,b,a\n1,2,3\n",
        "{path}, line 1: the header names column 'a' twice (columns 1 and 3); column names "
        "must be unique",
    ),
    "NUL byte": (
        b"a,b\n1,2\n3,\x004\n",
        "{path}, line 3: a NUL byte (0x00), which CSV text cannot hold",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_each_problem_is_named_by_file_and_line(tmp_path, case):
    text, message = BAD_INPUTS[case]
    path = _write(tmp_path, text)
    assert checks.first_problem([path]) == message.format(path=path)
    with pytest.raises(CsvInputError) as raised:
        checks.check_inputs([path])
    assert str(raised.value) == message.format(path=path)


def test_lines_are_counted_in_the_file_past_quoted_newlines(tmp_path):
    path = _write(tmp_path, 'a,b\n1,"two\nlines"\n2,"and\r\nthree\nlines"\n3,4,5\n')
    assert checks.first_problem([path]) == (
        f"{path}, line 7: expected 2 fields, found 3: '3,4,5' (data.bad_rows is 'fail')"
    )


def test_a_quote_inside_an_unquoted_field_is_text(tmp_path):
    text = 'n,tv\n1,55" TV\n2,"32"" TV"\n3,x""y\n4,"a, b"\n'
    path = _write(tmp_path, text)
    summary = checks.check_inputs([path])
    assert (summary.columns, summary.rows) == (["n", "tv"], 4)
    with open(path, "rb") as handle:
        assert list(checks.csv_records(handle)) == [
            '1,55" TV\n',
            '2,"32"" TV"\n',
            '3,x""y\n',
            '4,"a, b"\n',
        ]


def test_records_keep_quoted_newlines_and_blank_lines_as_tfx_cuts_them(tmp_path):
    path = _write(tmp_path, 'a,b\n1,"x\ny"\n\n2,z')
    with open(path, "rb") as handle:
        assert list(checks.csv_records(handle)) == ['1,"x\ny"\n', "\n", "2,z"]


def test_the_header_must_hold_the_columns_the_spec_names(tmp_path):
    path = _write(tmp_path, "a,b\n1,2\n")
    assert checks.first_problem([path], {"b": "trainer.label", "c": "data.split_key"}) == (
        f"{path}, line 1: the header has no column 'c', which data.split_key names (columns: a, b)"
    )
    assert checks.first_problem([path], {"a": "trainer.features"}) is None


def test_every_file_of_an_input_has_the_first_ones_header(tmp_path):
    one = _write(tmp_path, "a,b\n1,2\n", "1.csv")
    two = _write(tmp_path, "a,c\n1,2\n", "2.csv")
    assert checks.first_problem([one, two]) == (
        f"{two}: its header ['a', 'c'] differs from {one}'s ['a', 'b']; every file of one "
        "input needs the same header line"
    )


def test_several_header_only_files_are_one_input_without_rows(tmp_path):
    one = _write(tmp_path, "a,b\n", "1.csv")
    two = _write(tmp_path, "a,b\n\n", "2.csv")
    assert checks.first_problem([one, two]) == f"{one}, {two}: a header but no rows to read"
    three = _write(tmp_path, "a,b\n5,6\n", "3.csv")
    assert checks.first_problem([one, two, three]) is None  # some file has rows


def test_rows_the_spec_skips_are_counted_not_refused(tmp_path):
    path = _write(tmp_path, "a,b\n1,2\n3,4,5\n6\n7,8\n")
    summary = checks.check_inputs([path], skip_bad_rows=True)
    assert (summary.rows, summary.malformed_rows) == (2, 2)
    # A whole-file problem still fails, skipping or not.
    bad = _write(tmp_path, b"a,b\n1,2\n3,4,5\n\xff,1\n", "bad.csv")
    assert checks.first_problem([bad], skip_bad_rows=True).startswith(
        f"{bad}, line 4: bytes that are not UTF-8"
    )
    only_bad = _write(tmp_path, "a,b\n1,2,3\n", "only_bad.csv")
    assert checks.first_problem([only_bad], skip_bad_rows=True) == (
        f"{only_bad}: a header but no rows to read (1 rows with the wrong number of fields "
        "were skipped)"
    )


def test_the_field_limit_is_restored_after_the_check(tmp_path):
    import csv

    before = csv.field_size_limit()
    checks.first_problem([_write(tmp_path, "a\n" + "x" * (FIELD_LIMIT + 5) + "\n")])
    assert csv.field_size_limit() == before


@pytest.mark.parametrize(
    ("text", "full"),
    [
        (b"a,b\n1,2\r\n3,4\n", False),
        (b"a,b\n1,2\n", False),
        (b'a,b\n1,"2"\n', True),
        (b"a,b\n1,caf\xc3\xa9\n", False),  # valid UTF-8
        (b"a,b\n1,caf\xe9\n", True),
        (b"a,b\n1,\x002\n", True),
        (b"a,b\n1,2\r3,4\n", True),  # a carriage return that ends no line
    ],
)
def test_the_byte_scan_flags_what_a_fast_parser_may_read_otherwise(tmp_path, text, full):
    assert checks.needs_full_check(_write(tmp_path, text)) is full


def test_the_byte_scan_sees_a_line_end_split_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(checks, "_SCAN_BYTES", 4)
    assert checks.needs_full_check(_write(tmp_path, b"a,b\r\n1,2\r\n", "crlf.csv")) is False
    assert checks.needs_full_check(_write(tmp_path, b"a,b\r1,2\r\n", "cr.csv")) is True


# Through the executors of both readers, as a run calls them (no pipeline: Do, directly).


def _do(executor_cls, input_dir, out_dir, options=None):
    import tensorflow as tf
    from google.protobuf import struct_pb2
    from tfx.proto import example_gen_pb2
    from tfx.types import standard_artifacts
    from tfx.types import standard_component_specs as keys
    from tfx.utils import proto_utils

    examples = standard_artifacts.Examples()
    examples.uri = str(out_dir)
    single = example_gen_pb2.Input.Split(name="single_split", pattern="*")
    splits = [example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=1)]
    packed = struct_pb2.Struct()
    packed.update(options or {})
    custom_config = example_gen_pb2.CustomConfig()
    custom_config.custom_config.Pack(packed)
    exec_properties = {
        keys.INPUT_BASE_KEY: str(input_dir),
        keys.INPUT_CONFIG_KEY: proto_utils.proto_to_json(example_gen_pb2.Input(splits=[single])),
        keys.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(
            example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=splits))
        ),
        keys.CUSTOM_CONFIG_KEY: proto_utils.proto_to_json(custom_config),
        keys.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_TF_EXAMPLE,
        keys.OUTPUT_FILE_FORMAT_KEY: example_gen_pb2.FORMAT_TFRECORDS_GZIP,
    }
    executor_cls().Do({}, {keys.EXAMPLES_KEY: [examples]}, exec_properties)
    files = glob.glob(os.path.join(out_dir, "Split-train", "*.gz"))
    return sorted(
        tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
        for r in tf.data.TFRecordDataset(files, "GZIP")
    )


def _readers():
    from components.arrow_example_gen.executor import Executor as ArrowExecutor
    from components.csv_example_gen.executor import Executor as TfxExecutor

    return {"tfx": TfxExecutor, "arrow": ArrowExecutor}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_both_readers_refuse_bad_input_in_the_same_words(tmp_path, case):
    text, message = BAD_INPUTS[case]
    (tmp_path / "in").mkdir()
    path = _write(tmp_path / "in", text)
    for reader, executor in _readers().items():
        with pytest.raises(CsvInputError) as raised:
            _do(executor, tmp_path / "in", tmp_path / reader)
        assert str(raised.value) == message.format(path=path), reader


def test_both_readers_refuse_a_missing_column_the_spec_names(tmp_path):
    (tmp_path / "in").mkdir()
    path = _write(tmp_path / "in", "a,b\n1,2\n")
    options = {"required_columns": {"c": "trainer.label"}}
    for reader, executor in _readers().items():
        with pytest.raises(CsvInputError) as raised:
            _do(executor, tmp_path / "in", tmp_path / reader, options)
        assert str(raised.value) == (
            f"{path}, line 1: the header has no column 'c', which trainer.label names "
            "(columns: a, b)"
        ), reader


def test_a_quote_inside_an_unquoted_field_reads_the_same_through_both_readers(tmp_path):
    from tfx.components.example_gen.csv_example_gen.executor import Executor as PlainTfx

    (tmp_path / "in").mkdir()
    _write(tmp_path / "in", 'n,tv,note\n1,55" TV,"a, b"\n2,32" TV,"two\nlines"\n3,plain,\n')
    read = {
        reader: _do(executor, tmp_path / "in", tmp_path / reader)
        for reader, executor in _readers().items()
    }
    assert len(read["tfx"]) == 3
    assert read["arrow"] == read["tfx"]
    import tensorflow as tf

    values = sorted(
        tf.train.Example.FromString(e).features.feature["tv"].bytes_list.value[0]
        for e in read["tfx"]
    )
    assert values == [b'32" TV', b'55" TV', b"plain"]
    # TFX's own executor pairs quotes per line and fails this file: hence Conveyor's splitter.
    with pytest.raises(Exception, match="new-line character seen in unquoted field"):
        _do(PlainTfx, tmp_path / "in", tmp_path / "plain")
