"""The Arrow CSV reader's work units: cut where records end, numbered by their lines, read to
the same examples however the input is cut; and which reader `validate` says a profile gets."""

import pytest
import tensorflow as tf

from components.arrow_example_gen import executor, placement, ranges
from components.arrow_example_gen.executor import CsvInputError
from pipelines import cli


def _write(tmp_path, text: str, name="data.csv"):
    path = tmp_path / name
    path.write_bytes(text.encode())
    return str(path)


def _examples(directory) -> list[bytes]:
    files = sorted(str(p) for p in directory.glob("*.gz"))
    return sorted(
        tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
        for r in tf.data.TFRecordDataset(files, "GZIP")
    )


QUOTED_ROWS = [
    "plain",
    '"with, a comma"',
    '"over\ntwo lines"',
    '"a ""quote"""',
    "",
]


def _quoted_csv(tmp_path, rows=600):
    lines = ['id,"na""me",v\n']
    lines += [f"{i},{QUOTED_ROWS[i % 5]},{i / 4 if i % 3 else i}\n" for i in range(rows)]
    return _write(tmp_path, "".join(lines)), "".join(lines).encode()


def test_pieces_end_where_records_end_and_know_their_first_line(tmp_path):
    path, data = _quoted_csv(tmp_path)
    pieces = [piece for unit in ranges.plan_units([path], 700) for piece in unit.pieces]
    assert len(pieces) > 5
    assert pieces[0].start == data.index(b"\n") + 1 and pieces[-1].end == len(data)
    for before, after in zip(pieces, pieces[1:], strict=False):
        assert before.end == after.start
    for piece in pieces:
        assert data[piece.start - 1 : piece.start] == b"\n"
        assert piece.first_line == data[: piece.start].count(b"\n") + 1
        # Never inside a quoted field: an even number of quotes before the cut.
        assert data[: piece.start].count(b'"') % 2 == 0


def test_a_quote_inside_an_unquoted_field_keeps_the_file_whole(tmp_path):
    path = _write(tmp_path, "n,tv\n" + "".join(f'{i},55" TV\n' for i in range(300)))
    (unit,) = ranges.plan_units([path], 200)
    assert len(unit.pieces) == 1


def test_small_files_share_a_unit(tmp_path):
    paths = [_write(tmp_path, "a,b\n1,2\n3,4\n", f"{i}.csv") for i in range(5)]
    (unit,) = ranges.plan_units(paths, 1 << 20)
    assert [piece.path for piece in unit.pieces] == paths


def test_the_examples_do_not_depend_on_how_the_input_is_cut(tmp_path):
    path, _ = _quoted_csv(tmp_path)
    written = {}
    for unit_bytes in (None, 700, 3000):
        out = tmp_path / f"units-{unit_bytes}"
        reading = executor.read_csv_splits(
            [path], [str(out / "a"), str(out / "b")], [2, 3], None, False, unit_bytes=unit_bytes
        )
        written[unit_bytes] = (reading.counts, _examples(out / "a"), _examples(out / "b"))
        assert reading.plan.types == {"id": executor.INT, 'na"me': executor.STRING, "v": 2}
    assert written[None] == written[700] == written[3000]
    assert sum(written[None][0]) == 600


def test_bad_rows_in_later_units_are_named_by_their_line_in_the_file(tmp_path):
    rows = [f"{i},{i}" if i % 97 else f"{i},{i},x" for i in range(1, 1000)]
    path = _write(tmp_path, "a,b\n" + "\n".join(rows) + "\n")
    reading = executor.read_csv_splits(
        [path], [str(tmp_path / "o")], [1], None, True, unit_bytes=500
    )
    assert len(reading.units) > 10 and reading.counts == [989]
    assert reading.plan.skipped[-1] == f"{path}, line 971: expected 2 fields, found 3: '970,970,x'"
    with pytest.raises(CsvInputError) as raised:
        executor.read_csv_splits([path], [str(tmp_path / "f")], [1], None, False, unit_bytes=500)
    assert str(raised.value) == (
        f"{path}, line 98: expected 2 fields, found 3: '97,97,x' (data.bad_rows is 'fail')"
    )


@pytest.mark.parametrize(
    ("beam_args", "in_process"),
    [
        ([], True),
        (["--direct_running_mode=in_memory", "--direct_num_workers=1"], True),
        (["--direct_running_mode=multi_processing", "--direct_num_workers=0"], False),
        (["--direct_running_mode", "multi_threading"], False),
        (["--runner=DataflowRunner", "--direct_running_mode=in_memory"], False),
        (["--runner", "FlinkRunner"], False),
    ],
)
def test_only_the_in_memory_direct_runner_reads_in_process(beam_args, in_process):
    assert placement.reads_in_process(beam_args) is in_process


def test_validate_says_which_reader_each_profile_gets(capsys):
    assert cli.main(["validate", "taxi", "--env", "dataflow"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "     reader: auto: TFX's CsvExampleGen up to 32 MiB of input, then Arrow, in process up "
        "to 64 MiB, beyond as Beam work over DataflowRunner's workers"
    )
    assert cli.main(["validate", "taxi", "--env", "large"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "     reader: Arrow, in process (DirectRunner in memory) (data.reader: arrow)"
    )


def test_as_beam_work_bad_rows_get_the_same_verdict_and_nothing_is_written(tmp_path):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    def make_pipeline():
        return beam.Pipeline(options=PipelineOptions(["--direct_running_mode=in_memory"]))

    rows = [f"{i},{i}" if i % 97 else f"{i},{i},x" for i in range(1, 1000)]
    path = _write(tmp_path, "a,b\n" + "\n".join(rows) + "\n")
    skipped = executor.read_csv_splits(
        [path], [str(tmp_path / "s")], [1], None, True, make_pipeline=make_pipeline, unit_bytes=500
    )
    in_process = executor.read_csv_splits(
        [path], [str(tmp_path / "p")], [1], None, True, unit_bytes=500
    )
    assert skipped.plan.skipped == in_process.plan.skipped and skipped.counts == [989]
    assert _examples(tmp_path / "s") == _examples(tmp_path / "p")
    with pytest.raises(CsvInputError) as raised:
        executor.read_csv_splits(
            [path],
            [str(tmp_path / "f")],
            [1],
            None,
            False,
            make_pipeline=make_pipeline,
            unit_bytes=500,
        )
    assert str(raised.value) == (
        f"{path}, line 98: expected 2 fields, found 3: '97,97,x' (data.bad_rows is 'fail')"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "p", "s"]


def test_outputs_go_through_tensorflows_filesystems_to_a_pipeline_root_that_is_not_local(
    tmp_path,
):
    """A pipeline root on another filesystem (here TensorFlow's `ram://`; `gs://` on a cloud)
    gets the same examples, shard by shard, and Parquet copy, byte for byte, as a local one."""
    path, _ = _quoted_csv(tmp_path)
    roots = {"local": str(tmp_path / "out"), "ram": f"ram://{tmp_path.name}/out"}
    for root in roots.values():
        executor.write_splits(
            [path],
            [f"{root}/Split-train", f"{root}/Split-eval"],
            [2, 3],
            None,
            skip_bad_rows=False,
            columnar_dirs=[f"{root}/columnar/Split-train", f"{root}/columnar/Split-eval"],
        )

    def written(root: str) -> dict[str, object]:
        """Each file's bytes; a TFRecord shard's examples in order, canonically serialised (the
        encoder writes a feature map in an order of its own)."""
        found: dict[str, object] = {}
        for folder, _, names in tf.io.gfile.walk(root):
            for name in names:
                file = f"{folder}/{name}"
                if name.endswith(".gz"):
                    found[file[len(root) :]] = [
                        tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
                        for r in tf.data.TFRecordDataset([file], "GZIP")
                    ]
                else:
                    with tf.io.gfile.GFile(file, "rb") as handle:
                        found[file[len(root) :]] = handle.read()
        return found

    local = written(roots["local"])
    assert sum(name.endswith(".parquet") for name in local) == 2
    assert sum(name.endswith(".gz") for name in local) == 2
    assert written(roots["ram"]) == local


@pytest.mark.parametrize(("first", "scan"), [(7, 13), (64, 100)])
def test_cuts_are_right_whatever_the_scan_reads_at_a_time(tmp_path, monkeypatch, first, scan):
    """The byte scan reads its file in chunks: quotes and newlines on a chunk's edges still
    cut the file only between records, count its lines, and a misplaced quote there still
    forbids cutting."""
    monkeypatch.setattr(ranges, "FIRST_SCAN_BYTES", first)
    monkeypatch.setattr(ranges, "SCAN_BYTES", scan)
    path, text = _quoted_csv(tmp_path)
    header = text.index(b"\n") + 1
    pieces = [piece for unit in ranges.plan_units([path], 997) for piece in unit.pieces]
    assert len(pieces) > 5
    assert b"".join(text[p.start : p.end] for p in pieces) == text[header:]
    for piece in pieces:
        assert text[: piece.start].count(b'"') % 2 == 0
        assert piece.first_line == text[: piece.start].count(b"\n") + 1
    misplaced = _write(tmp_path, text.decode().replace("\n300,plain,", '\n300,55" TV,'), "b.csv")
    assert len([p for unit in ranges.plan_units([misplaced], 997) for p in unit.pieces]) == 1
