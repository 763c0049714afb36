"""The Arrow CSV reader: TFX's typing rules, and bad input named by file and line."""

import pytest
import tensorflow as tf

from components.arrow_example_gen import executor
from components.arrow_example_gen.executor import CsvInputError


def _write(tmp_path, text: bytes | str, name="data.csv"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def _read_all(directory):
    files = [str(p) for p in directory.glob("*.gz")]
    return [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(files, "GZIP")]


def test_types_follow_tfx_rules_and_empty_cells_are_features_without_values(tmp_path):
    path = _write(tmp_path, 'i,f,s,e\n1,1.5,a,\n2,,"b, quoted",\n,3,7,\n')
    counts, plan = executor.write_splits(
        [path], [str(tmp_path / "all")], [1], split_key=None, skip_bad_rows=False
    )
    assert counts == [3]
    assert plan.types == {
        "i": executor.INT,
        "f": executor.FLOAT,
        "s": executor.STRING,
        "e": executor.UNKNOWN,
    }
    examples = sorted(_read_all(tmp_path / "all"), key=lambda e: str(e))
    features = {
        tuple(e.features.feature["s"].bytes_list.value): e.features.feature for e in examples
    }
    first = features[(b"a",)]
    assert list(first["i"].int64_list.value) == [1]
    assert list(first["f"].float_list.value) == [1.5]
    assert not first["e"].HasField("kind")  # a column with no value anywhere
    second = features[(b"b, quoted",)]
    assert second["f"].HasField("float_list") and not second["f"].float_list.value
    assert list(features[(b"7",)]["i"].int64_list.value) == []


def test_a_row_with_the_wrong_number_of_fields_stops_the_run_naming_file_and_line(tmp_path):
    path = _write(tmp_path, "a,b\n1,2\n3,4,5\n6,7\n")
    with pytest.raises(CsvInputError) as raised:
        executor.write_splits([path], [str(tmp_path / "o")], [1], None, skip_bad_rows=False)
    assert str(raised.value) == (
        f"{path}, line 3: expected 2 fields, found 3: '3,4,5' (data.bad_rows is 'fail')"
    )


def test_skipped_rows_are_counted_and_named_never_silent(tmp_path):
    path = _write(tmp_path, "a,b\n1,2\n3,4,5\n6,7\n8\n")
    counts, plan = executor.write_splits(
        [path], [str(tmp_path / "o")], [1], None, skip_bad_rows=True
    )
    assert counts == [2]
    assert plan.skipped == [
        f"{path}, line 3: expected 2 fields, found 3: '3,4,5'",
        f"{path}, line 5: expected 2 fields, found 1: '8'",
    ]


def test_an_unterminated_quote_names_the_line_it_opens_on(tmp_path):
    path = _write(tmp_path, 'a,b\n1,2\n3,"never closed\n4,5\n')
    with pytest.raises(CsvInputError, match=rf"{path}, line 3: a quoted field is never closed"):
        executor.write_splits([path], [str(tmp_path / "o")], [1], None, skip_bad_rows=False)


def test_bytes_that_are_not_utf8_name_the_line(tmp_path):
    path = _write(tmp_path, b"a,b\n1,2\n3,caf\xe9\n")
    with pytest.raises(CsvInputError, match=rf"{path}, line 3: bytes that are not UTF-8"):
        executor.write_splits([path], [str(tmp_path / "o")], [1], None, skip_bad_rows=False)


def test_empty_and_header_only_files_are_refused_clearly(tmp_path):
    empty = _write(tmp_path, "", "empty.csv")
    with pytest.raises(CsvInputError, match=rf"{empty} is empty: expected a header line and rows"):
        executor.survey([empty], skip_bad_rows=False)
    header_only = _write(tmp_path, "a,b\n", "header.csv")
    with pytest.raises(CsvInputError, match=rf"{header_only}: a header but no rows"):
        executor.survey([header_only], skip_bad_rows=False)


def test_files_with_different_headers_are_refused(tmp_path):
    one = _write(tmp_path, "a,b\n1,2\n", "1.csv")
    two = _write(tmp_path, "a,c\n1,2\n", "2.csv")
    with pytest.raises(CsvInputError, match=r"2\.csv: its header \['a', 'c'\] differs"):
        executor.survey([one, two], skip_bad_rows=False)


def test_split_key_hashes_like_tfx(tmp_path):
    import bisect
    import hashlib

    path = _write(tmp_path, "k,v\n" + "".join(f"{i},{i * 2}\n" for i in range(200)))
    counts, _ = executor.write_splits(
        [path], [str(tmp_path / "a"), str(tmp_path / "b")], [2, 3], "k", skip_bad_rows=False
    )
    expected = [0, 0]
    for i in range(200):  # TFX's _PartitionFn on the key feature's deterministic bytes
        key = tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))
        bucket = int(hashlib.sha256(key.SerializeToString(deterministic=True)).hexdigest(), 16)
        expected[bisect.bisect([2, 3], bucket % 3)] += 1
    assert counts == expected


def test_the_parquet_copy_holds_what_the_tf_examples_decode_to(tmp_path, monkeypatch):
    """Shard by shard, the copy is the decoder's RecordBatch of the TFRecords: same layout,
    same rows in the same order, empty cells as empty lists, a value-less column as nulls."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tfx_bsl.coders import example_coder

    # Small blocks and shards, so that rows spread over several of each.
    monkeypatch.setattr(executor, "BLOCK_BYTES", 512)
    monkeypatch.setattr(executor, "SHARD_BYTES", 2048)
    rows = "".join(
        f"{i},{'' if i % 7 == 0 else i / 4},{'' if i % 5 == 0 else f'w{i % 3}'},\n"
        for i in range(400)
    )
    path = _write(tmp_path, "z_int,a_float,m_text,empty\n" + rows)
    splits = [tmp_path / "train", tmp_path / "eval"]
    copies = [tmp_path / "copy-train", tmp_path / "copy-eval"]
    counts, _ = executor.write_splits(
        [path],
        [str(d) for d in splits],
        [2, 3],
        None,
        skip_bad_rows=False,
        columnar_dirs=[str(d) for d in copies],
    )
    assert sum(counts) == 400 and min(counts) > 0
    decoder = example_coder.ExamplesToRecordBatchDecoder()
    for split_dir, copy_dir, count in zip(splits, copies, counts, strict=True):
        shards = sorted(split_dir.glob("*.gz"))
        parquet_shards = sorted(copy_dir.glob("*.parquet"))
        assert len(shards) == len(parquet_shards) > 1
        copied_rows = 0
        for shard, parquet_shard in zip(shards, parquet_shards, strict=True):
            records = [r.numpy() for r in tf.data.TFRecordDataset([str(shard)], "GZIP")]
            decoded = pa.Table.from_batches([decoder.DecodeBatch(records)])
            copied = pq.read_table(parquet_shard)
            assert copied.schema == decoded.schema
            assert copied.equals(decoded)
            copied_rows += copied.num_rows
        assert copied_rows == count
    assert decoded.schema.names == ["a_float", "empty", "m_text", "z_int"]
    assert decoded.schema.field("empty").type == pa.null()


def test_types_widen_over_all_blocks_as_tfx_decides_over_the_whole_input(tmp_path, monkeypatch):
    # Blocks of a few rows: `f` is integral in the first blocks, fractional later, and text in
    # the last; `n` is integral throughout; `g` turns fractional and then integral again.
    monkeypatch.setattr(executor, "BLOCK_BYTES", 64)
    rows = [f"{i},{i},{i}" for i in range(20)]
    rows += [f"{i}.5,{i},{i}.25" for i in range(20)]
    rows += [f"{i},{i},{i}" for i in range(20)]
    rows += ["text,1,2"]
    path = _write(tmp_path, "f,n,g\n" + "\n".join(rows) + "\n")
    plan = executor.survey([path], skip_bad_rows=False)
    assert plan.rows == 61
    assert plan.types == {"f": executor.STRING, "n": executor.INT, "g": executor.FLOAT}


def test_the_examples_do_not_depend_on_how_many_cores_encode_them(tmp_path, monkeypatch):
    rows = "".join(f"{i},{'' if i % 7 == 0 else i / 4},w{i % 3}\n" for i in range(301))
    path = _write(tmp_path, "i,f,s\n" + rows)
    written = {}
    for cores in (1, 2, 3):
        monkeypatch.setattr(executor.os, "cpu_count", lambda cores=cores: cores)
        out = tmp_path / f"cores-{cores}"
        executor.write_splits([path], [str(out)], [1], None, skip_bad_rows=False)
        (shard,) = out.glob("*.gz")
        # The encoder writes a feature map in its own hash order, even between two encoders in
        # one process: compare the examples, in the canonical (deterministic) serialisation.
        written[cores] = [
            tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
            for r in tf.data.TFRecordDataset([str(shard)], "GZIP")
        ]
    assert len(written[1]) == 301
    assert written[1] == written[2] == written[3]


def test_read_ahead_keeps_order_and_raises_the_readers_error_in_the_caller():
    assert list(executor.read_ahead(iter(range(50)))) == list(range(50))

    def failing():
        yield 1
        raise executor.CsvInputError("data.csv, line 3: expected 2 fields, found 3")

    blocks = executor.read_ahead(failing())
    assert next(blocks) == 1
    with pytest.raises(CsvInputError, match="line 3"):
        next(blocks)


def test_a_caller_that_stops_early_stops_the_reading_thread():
    import threading

    produced, closed = [], []

    def endless():
        try:
            while True:
                produced.append(len(produced))
                yield produced[-1]
        finally:
            closed.append(True)  # e.g. encode_blocks shutting its encoding threads down

    blocks = executor.read_ahead(endless())
    assert [next(blocks) for _ in range(3)] == [0, 1, 2]
    blocks.close()  # what a `for` loop left by an exception does
    assert not any(t.name == "arrow-example-gen-read" for t in threading.enumerate())
    assert len(produced) <= 5  # the three taken, one waiting, at most one being offered
    assert closed == [True]


def test_a_quote_inside_an_unquoted_field_is_text_not_an_open_quote(tmp_path):
    # An odd number of quotes in the file: refused before, though every CSV parser reads it.
    path = _write(tmp_path, 'n,tv\n1,55" TV\n2,"32"" TV"\n')
    counts, plan = executor.write_splits([path], [str(tmp_path / "o")], [1], None, False)
    assert counts == [2] and plan.types == {"n": executor.INT, "tv": executor.STRING}
    values = sorted(e.features.feature["tv"].bytes_list.value[0] for e in _read_all(tmp_path / "o"))
    assert values == [b'32" TV', b'55" TV']


def test_a_field_longer_than_pyarrows_block_is_refused_in_the_checks_words(tmp_path, monkeypatch):
    from components.csv_input.checks import FIELD_LIMIT

    monkeypatch.setattr(executor, "BLOCK_BYTES", 4096)  # pyarrow fails on a row over a block
    path = _write(tmp_path, "a,b\n1,2\n3," + "x" * (FIELD_LIMIT + 1) + "\n")
    with pytest.raises(CsvInputError) as raised:
        executor.survey([path], skip_bad_rows=False)
    assert str(raised.value).startswith(
        f"{path}, line 3, column 2 ('b'): a field of 131,073 characters, over the 131,072"
    )


def test_skipping_rows_of_a_quoted_file_counts_them_and_keeps_the_rest(tmp_path):
    path = _write(tmp_path, 'a,b\n1,"x, y"\n2,"z",3\n4,w\n')
    counts, plan = executor.write_splits([path], [str(tmp_path / "o")], [1], None, True)
    assert counts == [2]
    assert [p.split(": expected")[0] for p in plan.skipped] == [f"{path}, line 3"]


def test_a_column_the_spec_names_must_be_in_the_header(tmp_path):
    path = _write(tmp_path, "a,b\n1,2\n")
    with pytest.raises(CsvInputError) as raised:
        executor.write_splits(
            [path], [str(tmp_path / "o")], [1], None, False, required={"k": "data.split_key"}
        )
    assert str(raised.value) == (
        f"{path}, line 1: the header has no column 'k', which data.split_key names (columns: a, b)"
    )
