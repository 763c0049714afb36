"""Work units for the Arrow CSV reader: byte ranges of the input files, planned on the driver.

A Beam runner spreads the reader over workers only if the input is cut into pieces a worker can
read alone. A CSV file can be cut at a newline that ends a record: in RFC 4180 CSV a position is
inside a quoted field exactly when an odd number of `"` come before it (a quote in a field is
written doubled, so escapes come in pairs). `plan_units` scans each file's bytes with numpy (a
few comparisons per 16 MiB chunk, at memory speed) for such newlines near every multiple of the
unit size, counts the lines before each cut (so that a worker names a bad row by its line in the
file), and groups the pieces into units of about that size: a big file gives several units, many
small files share one.

Where the quotes are not where RFC 4180 puts them (a `"` inside an unquoted field, as in `55"
TV`, which every parser here reads as text), counting them says nothing about records: such a
file is never cut. The header line ends at the first newline outside quotes; every piece starts
after it and is parsed with the header's names.

No TensorFlow, TFX or Beam here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

SCAN_BYTES = 16 << 20  # compared at a time by the scan
FIRST_SCAN_BYTES = 64 << 10  # the first chunk: the header's end is near, in most files
_NEWLINE, _QUOTE = ord("\n"), ord('"')
# What may come before a quote that opens a field, and after one that closes it.
_FIELD_EDGES = np.array([ord(","), ord("\n"), ord("\r")], dtype=np.uint8)


@dataclass(frozen=True)
class ByteRange:
    """Bytes [start, end) of one CSV file, whole records, the first on line `first_line`."""

    path: str
    start: int
    end: int
    first_line: int


@dataclass(frozen=True)
class WorkUnit:
    """What one worker reads: byte ranges in input order. `index` numbers its output shards."""

    index: int
    pieces: tuple[ByteRange, ...]

    @property
    def size(self) -> int:
        """Bytes of CSV this unit reads."""
        return sum(piece.end - piece.start for piece in self.pieces)


@dataclass
class _Scan:
    """Where a file may be cut: record ends found at or after each wanted position."""

    cuts: list[tuple[int, int]]  # (byte offset, lines before it)
    rfc_quotes: bool = True  # every quote where RFC 4180 puts one, so parity finds records


def _misplaced_quotes(data: np.ndarray, quotes: np.ndarray, quotes_before: int) -> bool:
    """Whether a quote of `quotes` (offsets in `data`, the whole file) is where RFC 4180 has
    none: one that opens (even count before it) must follow a field edge, the file's start or
    the quote it escapes; one that closes (odd) must precede a field edge, the file's end or
    its escaped partner."""
    opening = (quotes_before + np.arange(len(quotes))) % 2 == 0
    opens, closes = quotes[opening], quotes[~opening]
    before = data[np.maximum(opens - 1, 0)]
    opens_ok = (opens == 0) | np.isin(before, _FIELD_EDGES) | (before == _QUOTE)
    after = data[np.minimum(closes + 1, len(data) - 1)]
    closes_ok = (closes + 1 == len(data)) | np.isin(after, _FIELD_EDGES) | (after == _QUOTE)
    return not (opens_ok.all() and closes_ok.all())


def _scan(path: str, wanted: list[int]) -> _Scan:
    """The first record end at or after each of the sorted offsets `wanted`. Stops early when
    the cuts are found and no later quote could spoil them (`whole`: the file is read to its
    end whenever it is to be cut, as a misplaced quote anywhere forbids cutting it)."""
    found = _Scan(cuts=[])
    size = os.path.getsize(path)
    if size == 0:
        return found
    data = np.memmap(path, dtype=np.uint8, mode="r")
    quotes_seen = lines_seen = 0
    pending = list(wanted)
    whole = len(wanted) > 1  # more than the header's end: the file will be cut
    start, step = 0, FIRST_SCAN_BYTES
    try:
        while start < size:
            chunk = data[start : start + step]
            is_quote = chunk == _QUOTE
            quote_count = int(np.count_nonzero(is_quote))
            if quote_count and whole:
                quotes = np.flatnonzero(is_quote) + start
                if _misplaced_quotes(data, quotes, quotes_seen):
                    return _Scan(cuts=[], rfc_quotes=False)
            if pending and pending[0] < start + len(chunk):
                newlines = np.flatnonzero(chunk == _NEWLINE)
                if quote_count:
                    quotes = np.flatnonzero(is_quote)
                    parity = (quotes_seen + np.searchsorted(quotes, newlines)) % 2
                    ends = newlines[parity == 0]
                    lines_before_end = np.flatnonzero(parity == 0) + 1
                else:
                    ends, lines_before_end = newlines, np.arange(1, len(newlines) + 1)
                ends = ends + start + 1  # a record ends after its newline
                while pending and pending[0] < start + len(chunk):
                    at = int(np.searchsorted(ends, pending[0]))
                    if at == len(ends):
                        break  # the record goes on in the next chunk
                    found.cuts.append((int(ends[at]), lines_seen + int(lines_before_end[at])))
                    while pending and pending[0] <= ends[at]:
                        pending.pop(0)
                lines_seen += len(newlines)
            else:
                lines_seen += int(np.count_nonzero(chunk == _NEWLINE))
            quotes_seen += quote_count
            if not pending and not whole:
                break
            start += len(chunk)
            step = min(2 * step, SCAN_BYTES)
    finally:
        del data  # unmaps the file
    return found


def file_pieces(path: str, piece_bytes: int) -> list[ByteRange]:
    """A file's records after its header, as byte ranges of about `piece_bytes` (one range
    when the file is no bigger, or when its quotes forbid cutting it); none when the file has
    a header only."""
    size = os.path.getsize(path)
    wanted = [1] + list(range(piece_bytes, size, piece_bytes))
    scan = _scan(path, wanted)
    if not scan.rfc_quotes:  # cannot be cut: one piece, and the header's end found alone
        scan = _scan(path, [1])
    if not scan.cuts:  # no newline outside quotes: the header runs to the end of the file
        return []
    (header_end, header_lines), *inner = scan.cuts
    bounds = [(header_end, header_lines + 1)]
    bounds += [(cut, lines + 1) for cut, lines in inner if cut < size]
    ends = [cut for cut, _ in bounds[1:]] + [size]
    return [
        ByteRange(path, start, end, first_line)
        for (start, first_line), end in zip(bounds, ends, strict=True)
        if end > start
    ]


def plan_units(paths: list[str], unit_bytes: int) -> list[WorkUnit]:
    """The input's records as work units of about `unit_bytes` each, in input order: every
    file cut into pieces of about that size, and consecutive small pieces grouped."""
    units: list[WorkUnit] = []
    group: list[ByteRange] = []
    grouped = 0
    for path in paths:
        for piece in file_pieces(path, unit_bytes):
            if group and grouped + piece.end - piece.start > unit_bytes:
                units.append(WorkUnit(len(units), tuple(group)))
                group, grouped = [], 0
            group.append(piece)
            grouped += piece.end - piece.start
    if group:
        units.append(WorkUnit(len(units), tuple(group)))
    return units
