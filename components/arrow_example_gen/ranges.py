"""Work units for the Arrow CSV reader: byte ranges of the input files, planned on the driver.

A Beam runner spreads the reader over workers only if the input is cut into pieces a worker can
read alone. A CSV file can be cut at a newline that ends a record: in RFC 4180 CSV a position is
inside a quoted field exactly when an odd number of `"` come before it (a quote in a field is
written doubled, so escapes come in pairs). `plan_units` scans each file's bytes with numpy (a
few comparisons per 16 MiB chunk read, at memory speed) for such newlines near every multiple of the
unit size, counts the lines before each cut (so that a worker names a bad row by its line in the
file), and groups the pieces into units of about that size: a big file gives several units, many
small files share one.

Where the quotes are not where RFC 4180 puts them (a `"` inside an unquoted field, as in `55"
TV`, which every parser here reads as text), counting them says nothing about records: such a
file is never cut. The header line ends at the first newline outside quotes; every piece starts
after it and is parsed with the header's names.

Files are read through Beam's FileSystems (files.py), so an input on any filesystem Beam knows
is planned the same way. No TensorFlow or TFX here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.arrow_example_gen import files

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


def _misplaced_quotes(
    chunk: np.ndarray, quotes: np.ndarray, quotes_before: int, before: int, after: int
) -> bool:
    """Whether a quote of `quotes` (offsets in `chunk`) is where RFC 4180 has none: one that
    opens (even count before it) must follow a field edge, the file's start or the quote it
    escapes; one that closes (odd) must precede a field edge, the file's end or its escaped
    partner. `before` and `after` are the bytes around the chunk (a newline at the file's
    start and end: an edge too)."""
    opening = (quotes_before + np.arange(len(quotes))) % 2 == 0
    opens, closes = quotes[opening], quotes[~opening]
    preceding = np.where(opens > 0, chunk[np.maximum(opens - 1, 0)], before)
    opens_ok = np.isin(preceding, _FIELD_EDGES) | (preceding == _QUOTE)
    last = len(chunk) - 1
    following = np.where(closes < last, chunk[np.minimum(closes + 1, last)], after)
    closes_ok = np.isin(following, _FIELD_EDGES) | (following == _QUOTE)
    return not (opens_ok.all() and closes_ok.all())


def _scan(path: str, size: int, wanted: list[int]) -> _Scan:
    """The first record end at or after each of the sorted offsets `wanted` in the file `path`
    of `size` bytes, read in chunks through its filesystem (files.py). Stops early when the cuts
    are found and no later quote could spoil them (`whole`: the file is read to its end whenever
    it is to be cut, as a misplaced quote anywhere forbids cutting it)."""
    found = _Scan(cuts=[])
    if size == 0:
        return found
    quotes_seen = lines_seen = 0
    pending = list(wanted)
    whole = len(wanted) > 1  # more than the header's end: the file will be cut
    start, step = 0, FIRST_SCAN_BYTES
    before = _NEWLINE  # the byte before the chunk: the file's start counts as a line's end
    with files.open_bytes(path) as handle:
        # One byte past each chunk is read with it (whether a quote closes a field may depend
        # on the byte after it) and starts the next chunk. Read into one buffer, no copies.
        buffer = bytearray(SCAN_BYTES + 1)
        view = memoryview(buffer)
        have = _fill(handle, view[: step + 1])
        while have:
            chunk = np.frombuffer(buffer, dtype=np.uint8, count=min(step, have))
            after = buffer[step] if have > step else _NEWLINE
            is_quote = chunk == _QUOTE
            quote_count = int(np.count_nonzero(is_quote))
            if quote_count and whole:
                if _misplaced_quotes(chunk, np.flatnonzero(is_quote), quotes_seen, before, after):
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
            before = int(chunk[-1])
            if have <= step:
                break  # the file's end
            buffer[0] = buffer[step]
            step = min(2 * step, SCAN_BYTES)
            have = 1 + _fill(handle, view[1 : step + 1])
    return found


def _fill(handle, into: memoryview) -> int:
    """Reads from `handle` until `into` is full or the file ends; returns the bytes read."""
    filled = 0
    while filled < len(into):
        got = handle.readinto(into[filled:])
        if not got:
            break
        filled += got
    return filled


def file_pieces(path: str, piece_bytes: int) -> list[ByteRange]:
    """A file's records after its header, as byte ranges of about `piece_bytes` (one range
    when the file is no bigger, or when its quotes forbid cutting it); none when the file has
    a header only."""
    size = files.size(path)
    wanted = [1] + list(range(piece_bytes, size, piece_bytes))
    scan = _scan(path, size, wanted)
    if not scan.rfc_quotes:  # cannot be cut: one piece, and the header's end found alone
        scan = _scan(path, size, [1])
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
