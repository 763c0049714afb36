"""The input check both CSV readers run first: the same input gets the same verdict, in the same
words, whichever reader the spec or the input's size picks.

TFX's CsvExampleGen and the Arrow reader fail on bad input in their own ways, some of them far
from the input: TFX's reader turns an empty file into a run that fails at the Trainer ("feature
column ... has no statistics"), ends on bytes that are not UTF-8 in a raw UnicodeDecodeError,
and names neither file nor line for a field too long for its parser. So every ExampleGen
executor of Conveyor (components/csv_example_gen for TFX's reader, components/arrow_example_gen
for Arrow's) calls `check_inputs` before it reads anything, and the first problem stops the run
with one paragraph that names the file, the line and, where it is known, the column.

The check is one pass over each file's bytes: lines decoded as strict UTF-8 and parsed by
Python's csv module with the dialect TFX's reader parses with (tfx_bsl's csv_decoder: commas,
`"` quotes, doubled quotes as escapes, not strict). A `"` inside an unquoted field (`55" TV`)
is text there, as it is for pyarrow's parser; `csv_records` splits a file into records the same
way, for the TFX reader, whose own splitter counts quotes per line and fails on such a file.

Cost, for 150,000 taxi rows (18 MB, `python -m pipelines.datasets.taxi 150000 OUT --seed 0`),
measured 2026-12-01 on 2 busy cores: the full check 0.45 s (median of 4; 0.39 to 0.66 s).
TFX's reader, which `data.reader: auto` picks below 32 MB, took about 80 s for that file (its
executor's `Do`, in-process), so there the check is under 1%; splitting records with the csv
module adds 0.16 s more. The Arrow reader's `write_splits` took 2.4 s (median of 4), where the
check would be 18%: so the Arrow reader runs `check_headers` (one line a file) and
`needs_full_check` (a byte scan, 30 to 60 ms), and the full check only when that scan or its
own parser finds something. Without quotes, bytes that are not UTF-8, NULs or bare carriage
returns both parsers cut the same records and fields, so the verdict and its words are still
this module's; with them, the full check always runs first.

No TFX or TensorFlow here: files are opened through a callable, so a reader on another
filesystem passes its own (TFX's fileio for gs:// inputs).
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from pipelines.core.outcome import Reason

# The longest field, in characters: Python's csv module's default `field_size_limit`. TFX's
# reader parses every record with that module at its default, so a longer field fails there;
# refusing it here, by file, line and column, gives both readers the same verdict.
FIELD_LIMIT = 131_072
PREVIEW_CHARS = 120  # of a malformed row, quoted in the message
_SCAN_BYTES = 4 << 20  # read at a time by needs_full_check

Opener = Callable[[str], IO[bytes]]


class CsvInputError(ValueError):
    """The CSV input cannot be read as the spec says; the message names file and line."""

    reason = Reason.INPUT_INVALID  # what the run that raised it records (pipelines.finish)


def _open_local(path: str) -> IO[bytes]:
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


@dataclass
class InputSummary:
    """What the check learned: the header (the same in every file) and the well-formed rows."""

    columns: list[str]
    rows: int = 0
    malformed_rows: int = 0  # rows with the wrong number of fields, when they are skipped


class _NotUtf8(Exception):
    def __init__(self, line: int, offset: int, byte: int):
        super().__init__(line, offset, byte)
        self.line, self.offset, self.byte = line, offset, byte


class _Lines:
    """A file's lines, decoded as strict UTF-8, for a csv reader to pull from.

    It counts lines and bytes so that a record's first line and byte offset are known, says
    when the file ran out (a record the reader returns after that is an unclosed quote), and
    with `keep` holds the lines of the current record (see `csv_records`).
    """

    def __init__(self, handle: IO[bytes], keep: bool = False):
        self._handle = handle
        self.number = 0  # lines handed out so far
        self.offset = 0  # bytes handed out so far
        self.exhausted = False
        self.kept: list[str] | None = [] if keep else None

    def __iter__(self) -> Iterator[str]:
        kept = self.kept
        for raw in self._handle:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise _NotUtf8(self.number + 1, self.offset + err.start, raw[err.start]) from None
            self.number += 1
            self.offset += len(raw)
            if kept is not None:
                kept.append(line)
            yield line
        self.exhausted = True


@contextlib.contextmanager
def _field_limit(limit: int):
    # The limit is the csv module's, for the whole process: set for the check, then restored.
    previous = csv.field_size_limit(limit)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _record_text(opener: Opener, path: str, start: int, end: int) -> str:
    """The raw text of bytes [start, end) of a file: a record, for a message."""
    with opener(path) as handle:
        handle.seek(start)
        return handle.read(end - start).decode("utf-8", errors="replace")


def _long_field(opener: Opener, path: str, start: int) -> tuple[int, int]:
    """(column index, length) of the longest field of the record starting at byte `start`."""
    with opener(path) as handle, _field_limit(sys.maxsize):
        handle.seek(start)
        row = next(csv.reader(line.decode("utf-8", errors="replace") for line in handle))
    lengths = [len(field) for field in row]
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    return longest, lengths[longest]


def _header_problem(
    path: str,
    header: list[str],
    columns: list[str] | None,
    first: str,
    required: Mapping[str, str],
) -> str | None:
    if not header or header == [""]:
        return f"{path}, line 1: the first line is blank; it must be the header (the column names)"
    if columns is not None:
        if header != columns:
            return (
                f"{path}: its header {header} differs from {first}'s {columns}; every file of "
                "one input needs the same header line"
            )
        return None  # the first file's header was checked already
    seen: dict[str, int] = {}
    for number, name in enumerate(header, start=1):
        if name in seen:
            return (
                f"{path}, line 1: the header names column {name!r} twice "
                f"(columns {seen[name]} and {number}); column names must be unique"
            )
        seen[name] = number
    for name, needed_by in required.items():
        if name not in seen:
            return (
                f"{path}, line 1: the header has no column {name!r}, which {needed_by} names "
                f"(columns: {', '.join(header)})"
            )
    return None


def _check_file(
    path: str,
    summary: InputSummary | None,
    first: str,
    required: Mapping[str, str],
    skip_bad_rows: bool,
    opener: Opener,
    header_only: bool = False,
) -> InputSummary | str:
    """One file's first problem (a message), or the summary with its rows added."""
    with opener(path) as handle:
        if not handle.read(1):
            return f"{path} is empty: expected a header line and rows (the file has 0 bytes)"
        handle.seek(0)
        lines = _Lines(handle)
        reader = csv.reader(lines)
        start_line, start_offset = 1, 0
        rows = malformed = 0
        try:
            for row in reader:
                if lines.exhausted:  # the reader wanted more lines in the middle of a record
                    return (
                        f"{path}, line {start_line}: a quoted field is never closed: the quote "
                        "that opens on this line runs to the end of the file"
                    )
                if summary is None or start_line == 1:
                    problem = _header_problem(
                        path, row, summary.columns if summary else None, first, required
                    )
                    if problem:
                        return problem
                    summary = summary or InputSummary(columns=row)
                    if header_only:
                        return summary
                elif len(row) == len(summary.columns):
                    rows += 1
                elif row:  # a blank line is no row, for every reader
                    if not skip_bad_rows:
                        text = _record_text(opener, path, start_offset, lines.offset)
                        preview = text.rstrip("\r\n")[:PREVIEW_CHARS]
                        return (
                            f"{path}, line {start_line}: expected {len(summary.columns)} fields, "
                            f"found {len(row)}: {preview!r} (data.bad_rows is 'fail')"
                        )
                    malformed += 1
                start_line, start_offset = lines.number + 1, lines.offset
        except _NotUtf8 as err:
            return (
                f"{path}, line {err.line}: bytes that are not UTF-8 (byte 0x{err.byte:02x} at "
                f"offset {err.offset} of the file); save the file as UTF-8"
            )
        except csv.Error as err:
            if "field larger than field limit" in str(err):
                index, length = _long_field(opener, path, start_offset)
                names = summary.columns if summary else []
                column = f"column {index + 1}" + (
                    f" ({names[index]!r})" if index < len(names) else ""
                )
                return (
                    f"{path}, line {start_line}, {column}: a field of {length:,} characters, "
                    f"over the {FIELD_LIMIT:,}-character limit of the CSV parser (Python's csv "
                    "module, which TFX's reader uses)"
                )
            if "NUL" in str(err):
                return f"{path}, line {lines.number}: a NUL byte (0x00), which CSV text cannot hold"
            return f"{path}, line {lines.number}: not readable as CSV ({err})"
    if summary is None:  # bytes, but no record: blank lines only
        return f"{path}, line 1: the first line is blank; it must be the header (the column names)"
    summary.rows += rows
    summary.malformed_rows += malformed
    return summary


def no_rows_message(paths: Sequence[str], skipped: int = 0) -> str:
    """The message for an input with a header but no row to read (`skipped`: malformed rows
    the spec said to skip)."""
    because = f" ({skipped} rows with the wrong number of fields were skipped)" if skipped else ""
    return f"{', '.join(paths)}: a header but no rows to read{because}"


def _survey(
    paths: Sequence[str],
    required: Mapping[str, str] | None,
    skip_bad_rows: bool,
    opener: Opener,
    header_only: bool = False,
) -> InputSummary | str:
    if not paths:
        return "no CSV files to read"
    summary: InputSummary | None = None
    with _field_limit(FIELD_LIMIT):
        for path in paths:
            checked = _check_file(
                path, summary, paths[0], required or {}, skip_bad_rows, opener, header_only
            )
            if isinstance(checked, str):
                return checked
            summary = checked
    assert summary is not None
    if summary.rows == 0 and not header_only:
        return no_rows_message(paths, summary.malformed_rows)
    return summary


def first_problem(
    paths: Sequence[str],
    required: Mapping[str, str] | None = None,
    skip_bad_rows: bool = False,
    opener: Opener = _open_local,
) -> str | None:
    """The first problem of the input `paths` (one run's CSVs) as a one-paragraph message that
    names the file and line (and column where known), or None when there is none.

    Args:
      paths: the CSV files one ExampleGen reads, in its order.
      required: column -> what in the spec names it ("data.split_key"): a header without it is
        a problem.
      skip_bad_rows: rows with the wrong number of fields are skipped by the reader (the spec's
        `data.bad_rows: skip`), so they are counted, not a problem; what spoils a whole file
        (its bytes, an unclosed quote, a field too long, the header, no rows at all) still is.
      opener: opens a path for reading bytes (default: the local filesystem).
    """
    checked = _survey(paths, required, skip_bad_rows, opener)
    return checked if isinstance(checked, str) else None


def check_inputs(
    paths: Sequence[str],
    required: Mapping[str, str] | None = None,
    skip_bad_rows: bool = False,
    opener: Opener = _open_local,
) -> InputSummary:
    """`first_problem`, raised: what the check learned, or CsvInputError with the message.

    Both readers' executors call this before reading, so that the run fails at ExampleGen, in
    the same words whichever reader runs.
    """
    checked = _survey(paths, required, skip_bad_rows, opener)
    if isinstance(checked, str):
        raise CsvInputError(checked)
    return checked


def check_headers(
    paths: Sequence[str], required: Mapping[str, str] | None = None, opener: Opener = _open_local
) -> list[str]:
    """The header's problems only (each file's first line: empty file, blank, duplicate or
    missing columns, files that differ), raised as `check_inputs` would; returns the columns.

    For a reader that finds the rest itself (see `needs_full_check`): it costs one line a file.
    """
    checked = _survey(paths, required, False, opener, header_only=True)
    if isinstance(checked, str):
        raise CsvInputError(checked)
    return checked.columns


def needs_full_check(path: str, opener: Opener = _open_local) -> bool:
    """Whether the file has anything a fast CSV parser such as pyarrow's may read otherwise
    than Python's csv module, or not flag at all: a quote character, bytes that are not UTF-8,
    a NUL byte, or a carriage return that does not end a line.

    Without any of these, records are lines and fields are split at commas by every parser, so
    a reader that reports malformed rows and long fields itself (the Arrow reader) needs only
    `check_headers` and the full check when it finds something. A scan of bytes at C speed:
    30 to 60 ms for the 18 MB of 150,000 taxi rows (`pipelines.datasets.taxi`, 2026-12-01).
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    carried = b""  # a chunk's last byte: a "\r" there may end a line in the next chunk
    with opener(path) as handle:
        while chunk := handle.read(_SCAN_BYTES):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError:
                return True
            if b'"' in chunk or b"\0" in chunk:
                return True
            scanned = carried + chunk
            if scanned.count(b"\r") != scanned.count(b"\r\n") + scanned.endswith(b"\r"):
                return True
            carried = scanned[-1:]
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return True
    return False


def csv_records(lines: Iterable[bytes]) -> Iterator[str]:
    """The records after the header of a CSV file's `lines`, each as its raw text (a record
    may span lines: a quoted field may hold newlines), split where Python's csv module ends
    them; a blank line is a record of its own, as in TFX's reader.

    TFX's reader splits records by counting `"` per line, so a quote inside an unquoted field
    (`55" TV`) joins lines that are separate records and fails the file. On CSV whose quotes
    are only around fields (and doubled inside them) both splitters cut the same records.
    """
    source = _Lines(lines, keep=True)  # type: ignore[arg-type]
    reader = csv.reader(source)
    header = True
    kept = source.kept
    assert kept is not None
    for _ in reader:
        # The reader pulls no line beyond the record it returns: what is kept is that record.
        text = "".join(kept)
        kept.clear()
        if header:
            header = False
            continue
        yield text
