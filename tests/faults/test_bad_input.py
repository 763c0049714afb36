"""Bad input, for real, through penguin under both CSV readers: the same input gets the same
verdict in the same words whichever reader runs, naming the file (and the line, where the
problem is one line's), and serving keeps version 1 byte for byte.

One working directory through the module: a good run pushes version 1, then each bad input
replaces the CSV for one run under `data.reader=tfx` and one under `data.reader=arrow`, and the
good CSV goes back. A problem the input check finds (components/csv_input/checks.py) fails the
run at ExampleGen, before any other component; a wrong type or a missing column is the data
gate's to find (as in tests/e2e/test_penguin.py): the run is blocked there.
"""

from collections.abc import Callable
from pathlib import Path

import pytest

from components.csv_input import checks
from pipelines import cli
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.serving_state.versions import model_digest
from pipelines.spec.loading import load_spec
from tests.conftest import DATA_DIR

pytestmark = pytest.mark.e2e

READERS = ("tfx", "arrow")
CSV_NAME = "penguins.csv"


@pytest.fixture(scope="module")
def penguin(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bad-input")
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    loaded = load_spec("penguin", env="ci", workdir=workdir)
    paths = RunPaths(workdir=workdir, spec=loaded.spec)
    good = (paths.input_dir / CSV_NAME).read_bytes()
    first = nightly.run(loaded, workdir, echo=lambda _: None)
    assert first.outcome == "pushed", first.message
    return paths, good, model_digest(str(paths.serving_dir / "1"))


def _lines(good: bytes) -> list[bytes]:
    return good.splitlines(keepends=True)


def _with_row(good: bytes, number: int, row: bytes) -> bytes:
    """The good CSV with its line `number` (1 is the header) replaced by `row`."""
    lines = _lines(good)
    lines[number - 1] = row
    return b"".join(lines)


def _cells(good: bytes, number: int) -> list[bytes]:
    return _lines(good)[number - 1].rstrip(b"\r\n").split(b",")


def _island(good: bytes, number: int, island: bytes) -> bytes:
    cells = _cells(good, number)
    cells[1] = island  # species,island,...
    return _with_row(good, number, b",".join(cells) + b"\n")


# case -> (the bad CSV from the good one's bytes, outcome, the line the message names or None,
# what the message says): a line-level problem names its line; a file-level one the file only.
CASES: dict[str, tuple[Callable[[bytes], bytes], str, int | None, str]] = {
    "empty file": (lambda good: b"", "failed", None, "is empty"),
    "header only": (lambda good: _lines(good)[0], "failed", None, "a header but no rows"),
    "bytes not UTF-8": (
        lambda good: _island(good, 12, b"Torg\xe9rsen"),
        "failed",
        12,
        "bytes that are not UTF-8",
    ),
    "10 MB field": (
        lambda good: _island(good, 30, b"x" * (10 << 20)),
        "failed",
        30,
        "column 2 ('island'): a field of 10,485,760 characters",
    ),
    "quote never closed": (
        lambda good: _island(good, 40, b'"Torgersen'),
        "failed",
        40,
        "a quoted field is never closed",
    ),
    "extra field": (
        lambda good: _with_row(good, 50, _lines(good)[49].rstrip(b"\r\n") + b",1\n"),
        "failed",
        50,
        "expected 8 fields, found 9",
    ),
    "wrong type": (
        lambda good: (DATA_DIR / "penguins_text_in_numeric.csv").read_bytes(),
        "blocked",
        None,
        "body_mass_g (train split): Unexpected data type",
    ),
    "missing column": (
        lambda good: (DATA_DIR / "penguins_missing_column.csv").read_bytes(),
        "blocked",
        None,
        "flipper_length_mm (train split): Column dropped",
    ),
}


def _run_with(paths: RunPaths, reader: str, data: bytes):
    csv_path = paths.input_dir / CSV_NAME
    csv_path.write_bytes(data)
    loaded = load_spec(
        "penguin", env="ci", overrides=[f"data.reader={reader}"], workdir=paths.workdir
    )
    return nightly.run(loaded, paths.workdir, echo=lambda _: None)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_gets_the_same_verdict_from_both_readers_and_serving_is_untouched(
    penguin, case, capfd
):
    paths, good, served = penguin
    make, outcome, line, says = CASES[case]
    csv_path = paths.input_dir / CSV_NAME
    bad = make(good)
    results = {}
    try:
        for reader in READERS:
            results[reader] = _run_with(paths, reader, bad)
    finally:
        csv_path.write_bytes(good)

    messages = {reader: result.message for reader, result in results.items()}
    assert messages["arrow"] == messages["tfx"]  # the same words, whichever reader ran
    for reader, result in results.items():
        assert result.outcome == outcome, (reader, result.message)
        assert says in result.message, reader
        states = {n.node_id: n.state for n in result.nodes}
        assert "trainer" not in states and "pusher" not in states, reader
        if outcome == "failed":
            assert states.get("csv_example_gen") == "failed", (reader, states)
            # One paragraph, the input check's own: it names the file, and the line if any.
            (csv_path.parent / "bad.csv").write_bytes(bad)
            try:
                expected = checks.first_problem([str(csv_path.parent / "bad.csv")])
            finally:
                (csv_path.parent / "bad.csv").unlink()
            assert expected is not None
            expected = expected.replace(str(csv_path.parent / "bad.csv"), str(csv_path))
            assert result.message.endswith(expected), reader
            assert "\n" not in result.message
            assert str(csv_path) in result.message
            if line is not None:
                assert f"{csv_path}, line {line}" in result.message
        else:
            assert states.get("data_gate") == "failed", (reader, states)
            assert result.message.startswith(f"Data gate: the data in {paths.input_dir}")
    assert "Traceback" not in capfd.readouterr().err  # no traceback on the user's terminal
    # Serving keeps version 1, byte for byte, and holds versions only.
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]
    assert model_digest(str(paths.serving_dir / "1")) == served


def test_the_good_data_still_runs_after_the_bad(penguin):
    """The bad inputs left nothing behind that stops the next run: with the good CSV back, the
    run goes through, version 1 is still byte for byte what it was, and every version served is
    one ML Metadata recorded. (TFX fingerprints input files by modification time, so the
    restored file is ingested again and may train a new, equally good model: pushing it is
    allowed; breaking on the bad runs' leftovers is not.)"""
    from pipelines.serving_state.records import recorded_pushes

    paths, good, served = penguin
    assert (paths.input_dir / CSV_NAME).read_bytes() == good
    assert sorted(Path(p).name for p in paths.input_dir.iterdir()) == [CSV_NAME]
    result = nightly.run(
        load_spec("penguin", env="ci", workdir=paths.workdir), paths.workdir, lambda _: None
    )
    assert result.outcome in ("pushed", "not_pushed"), result.message
    assert model_digest(str(paths.serving_dir / "1")) == served
    versions = {int(p.name) for p in paths.serving_dir.iterdir()}
    assert versions <= recorded_pushes(paths)[1]
