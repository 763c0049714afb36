"""CSV -> tf.Example without TFX's row-by-row Python conversion, in memory that does not grow.

TFX's CsvExampleGen builds every tf.Example in Python, one cell at a time (about 4,000 rows/s
here), and its Beam pipeline holds the data in memory. This executor streams each CSV in blocks
with pyarrow's reader, encodes a whole block at once with tfx_bsl's C++ RecordBatch -> tf.Example
encoder, assigns splits with vectorised hashing, and appends gzipped TFRecords per split.
Memory is one block, whatever the file size.

The input is read in work units (ranges.py): byte ranges of the files, cut on the driver where
records end, about SHARD_BYTES each. A first pass types each unit's columns; the units' types
combine into the input's; a second pass encodes and writes each unit as shard `i` of every split.
On a distributed Beam runner (and the DirectRunner's multi-threading or multi-processing modes)
these are Beam stages: Create + Reshuffle of the units, a Map that types them, gathered into one
survey that the encoding Map takes as a side input, and the units' reports brought back to the
driver. On the DirectRunner in memory, where Beam would run the units one after another in this
process anyway, the same functions run without it, as they do for an input of one unit: Beam's
own cost is up to a second a run in memory, a large share of this reader's time on 150,000
rows. Either way each split holds the same examples.
The input is listed, checked and read through Beam's FileSystems (files.py), in process and in
every worker, and the output written through TensorFlow's: input and pipeline root may be on
`gs://` or any other filesystem those know.

It keeps TFX's contracts, so every downstream component reads its output unchanged:
- the same columns, types and values as CsvExampleGen: a column is INT if every non-empty cell
  is an integer, FLOAT if every one is a number, else STRING (BYTES), decided over the whole
  input (a first streaming pass); an empty cell is a feature with no values, a column with no
  values at all a feature with no kind;
- Split-<name>/data_tfrecord-*.gz under the Examples artifact, split names, payload format;
- splits by `partition_feature_name` hash exactly as TFX's (same rows in the same split);
  without one, by a stable hash of each row's values (TFX hashes its own serialisation, which
  the encoder does not reproduce byte for byte; the proportions are the same).
Bad input gets the verdict, in the same words, that TFX's reader gets from Conveyor's
(components/csv_input/checks.py): malformed rows (a wrong number of fields) are reported with
file and line and either stop the run or are skipped and counted, as the spec says; an empty or
header-only file, a quote never closed, bytes that are not UTF-8 or a field too long stop it.

Beside the TFRecords it writes the same rows as Parquet (`conveyor_columnar/Split-<name>/`,
outside every `Split-*` pattern, so no TFX reader sees it), in exactly the Arrow layout tfx_bsl's
tf.Example decoder produces. Decoding tf.Examples back into Arrow is most of what StatisticsGen
costs; Conveyor's StatisticsGen (components/statistics_gen) reads this copy instead, through
TFX's own Parquet TFXIO. The tf.Examples stay the artifact's payload for every other consumer.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import pickle
import posixpath
import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from absl import logging
from tfx.dsl.components.base import base_beam_executor

from components.arrow_example_gen import files, placement, ranges, splits
from components.csv_input import checks
from components.csv_input.checks import CsvInputError

# pyarrow parses this much at a time. Its streaming CSV reader also reads up to 32 blocks ahead
# of the parser (Arrow's background generator; no option sets that), so memory grows with the
# input until 32 blocks are held: with 16 MB blocks the reader alone peaked at 1.4 GB for 1.5M
# rows and 1.6 GB for 3M. With 4 MB blocks it is 1.07 and 1.09 GB, about 5% slower.
BLOCK_BYTES = 4 << 20
SHARD_BYTES = placement.UNIT_BYTES  # input bytes per work unit: per output file of a split
MAX_SHARDS = 8
SKIPPED_ROWS_PROPERTY = "conveyor_skipped_rows"
BAD_ROWS_OPTION = "bad_rows"
REQUIRED_COLUMNS_OPTION = "required_columns"  # column -> what in the spec names it


# The type lattice TFX's CSV decoder uses: a column takes the widest type any of its cells needs.
UNKNOWN, INT, FLOAT, STRING = 0, 1, 2, 3
_ARROW_TYPES = {INT: pa.int64(), FLOAT: pa.float32(), STRING: pa.binary()}
# What tfx_bsl's ExamplesToRecordBatchDecoder gives each kind of feature; a feature with no kind
# (a column with no value anywhere) decodes to a null column.
_DECODED_TYPES = {
    INT: pa.large_list(pa.int64()),
    FLOAT: pa.large_list(pa.float32()),
    STRING: pa.large_list(pa.large_binary()),
    UNKNOWN: pa.null(),
}


def _widest_type(values: pa.Array, known: int = UNKNOWN) -> int:
    """The widest type the column needs: `known` (what earlier blocks needed) or what the
    non-empty cells of this block of it need, whichever is wider."""
    present = pc.drop_null(values)
    if known == STRING or len(present) == 0:
        return known
    # A column already known to be FLOAT cannot become INT: skip the integer cast, which is
    # slow to fail (about 20 times a float cast: 4 of the 5.5 s typing 1.5M rows took).
    if known < FLOAT:
        try:
            pc.cast(present, pa.int64())
            return max(known, INT)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    try:
        pc.cast(present, pa.float64())
        return FLOAT
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return STRING


@dataclass
class CsvSurvey:
    """What a first pass over the input learns: header, column types, rows, bad rows, and what
    this reader's parser found that stops the run (`refusal`, in its own words)."""

    columns: list[str]
    types: dict[str, int]
    rows: int = 0
    skipped: list[str] = field(default_factory=list)
    refusal: str | None = None


def _open(
    piece: ranges.ByteRange,
    columns: list[str],
    column_types: dict[str, pa.DataType] | None,
    on_invalid,
    threads: bool,
):
    """pyarrow's streaming reader over one piece of a file (on any filesystem Beam knows:
    files.open_range), parsed with the header's names."""
    return pacsv.open_csv(
        files.open_range(piece.path, piece.start, piece.end),
        read_options=pacsv.ReadOptions(
            block_size=BLOCK_BYTES, use_threads=threads, column_names=columns
        ),
        parse_options=pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=on_invalid),
        convert_options=pacsv.ConvertOptions(
            column_types=column_types,
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            null_values=[""],
            # Read text as binary: an invalid UTF-8 byte must not fail parsing silently later.
            check_utf8=True,
        ),
    )


def _refuse(
    paths: list[str], required: dict[str, str] | None, skip_bad_rows: bool, found: str
) -> CsvInputError:
    """The error for input this reader's parser refused (`found`, its own words): the check's
    message, which names file and line as TFX's reader would be told (checks.py)."""
    problem = checks.first_problem(paths, required, skip_bad_rows, opener=files.open_bytes)
    # The check finding nothing where pyarrow did is a parser difference: say what pyarrow saw.
    return CsvInputError(problem or found)


def check_input(paths: list[str], required: dict[str, str] | None, skip_bad_rows: bool) -> list:
    """What is checked before any work unit is read: every header (and `required` columns,
    column -> what in the spec names it), and the whole check when the byte scan finds what
    pyarrow may read otherwise than Python's csv module. Returns the header's columns.

    Bad input is refused by components/csv_input/checks.py, in the words TFX's reader gets.
    """
    if not paths:
        raise CsvInputError("no CSV files to read")
    columns = checks.check_headers(paths, required, opener=files.open_bytes)
    if any(checks.needs_full_check(path, opener=files.open_bytes) for path in paths):
        checks.check_inputs(paths, required, skip_bad_rows, opener=files.open_bytes)
    return columns


def survey_unit(unit: ranges.WorkUnit, columns: list[str], skip_bad_rows: bool) -> CsvSurvey:
    """First pass over one work unit: each column's type over its rows, its rows, its
    malformed rows (named by file and line in the file), and whether its parser refused it."""
    types = dict.fromkeys(columns, UNKNOWN)
    result = CsvSurvey(columns=columns, types=types)
    as_text = dict.fromkeys(columns, pa.string())
    for piece in unit.pieces:
        problems: list[str] = []

        def on_invalid(row, piece=piece, problems=problems):
            # Raising here would reach the caller as a bare parse error: collect instead.
            line = piece.first_line + row.number - 1 if row.number > 0 else None
            where = f"{piece.path}, line {line}" if line else piece.path
            problems.append(
                f"{where}: expected {row.expected_columns} fields, found {row.actual_columns}: "
                f"{row.text[:120]!r}"
            )
            return "skip"

        try:
            # One thread: pyarrow numbers rows only when it parses in order.
            reader = _open(piece, columns, as_text, on_invalid, threads=False)
            for batch in reader:
                if problems and not skip_bad_rows:
                    break
                result.rows += batch.num_rows
                for name, values in zip(batch.schema.names, batch.columns, strict=True):
                    # Bytes bound characters from above, and are 20 times faster to count.
                    longest = pc.max(pc.binary_length(values)).as_py() or 0
                    if longest > checks.FIELD_LIMIT:
                        longest = pc.max(pc.utf8_length(values)).as_py()
                    if longest > checks.FIELD_LIMIT:
                        result.refusal = (
                            f"{piece.path}: a field of column {name!r} has {longest:,} "
                            f"characters, over the {checks.FIELD_LIMIT:,}-character limit"
                        )
                        return result
                    if types[name] != STRING:
                        types[name] = _widest_type(values, types[name])
        except pa.ArrowInvalid as err:
            result.refusal = f"{piece.path}: {str(err).splitlines()[0]}"
            return result
        if problems and not skip_bad_rows:
            result.refusal = problems[0] + " (data.bad_rows is 'fail')"
            return result
        result.skipped += problems
    return result


def merge_surveys(columns: list[str], surveys: list[tuple[int, CsvSurvey]]) -> CsvSurvey:
    """The input's survey from its units' ((unit index, survey), in any order): each column's
    widest type, all rows, the skipped rows and the first refusal in input order."""
    merged = CsvSurvey(columns=columns, types=dict.fromkeys(columns, UNKNOWN))
    for _, unit in sorted(surveys, key=lambda indexed: indexed[0]):
        for name, kind in unit.types.items():
            merged.types[name] = max(merged.types[name], kind)
        merged.rows += unit.rows
        merged.skipped += unit.skipped
        merged.refusal = merged.refusal or unit.refusal
    return merged


def survey(
    paths: list[str], skip_bad_rows: bool, required: dict[str, str] | None = None
) -> CsvSurvey:
    """First pass in this process: the header, each column's type over all rows, and the
    malformed rows, or the refusal of bad input in the words TFX's reader gets (check_input,
    then the check's message for what this reader's parser refuses)."""
    columns = check_input(paths, required, skip_bad_rows)
    plan = survey_units(ranges.plan_units(paths, SHARD_BYTES), columns, skip_bad_rows)
    _refuse_if_unreadable(plan, paths, required, skip_bad_rows)
    return plan


def survey_units(
    units: list[ranges.WorkUnit], columns: list[str], skip_bad_rows: bool
) -> CsvSurvey:
    """The input's survey from its units, surveyed in this process one per core at a time.

    A unit's survey parses on one thread (pyarrow numbers rows only then), and pyarrow parses
    without Python's lock: on 2 cores two units at once took 3.5 s where one after another took
    5.8 s (six units of the 10M-row bench night). Each reader holds its own blocks read ahead
    (see BLOCK_BYTES), so memory grows by one reader's per extra core, not with the input.
    """
    from concurrent.futures import ThreadPoolExecutor

    def surveyed(unit: ranges.WorkUnit) -> tuple[int, CsvSurvey]:
        return unit.index, survey_unit(unit, columns, skip_bad_rows)

    workers = max(1, min(len(units), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers, thread_name_prefix="arrow-example-gen-survey") as pool:
        return merge_surveys(columns, list(pool.map(surveyed, units)))


def _refuse_if_unreadable(
    plan: CsvSurvey, paths: list[str], required: dict[str, str] | None, skip_bad_rows: bool
) -> None:
    if plan.refusal:
        raise _refuse(paths, required, skip_bad_rows, plan.refusal)
    if plan.rows == 0:
        raise CsvInputError(checks.no_rows_message(paths, len(plan.skipped)))


def _as_lists(typed: pa.Array, column_type: int) -> pa.Array:
    """One list per row, as TFX writes features: [value], or [] for an empty cell. `typed` is
    the column cast to its type (_ARROW_TYPES)."""
    if column_type == UNKNOWN:
        # No value anywhere: TFX writes a feature with no kind, which a null list encodes.
        return pa.nulls(len(typed), pa.list_(pa.int64()))
    present = pc.is_valid(typed)
    offsets = np.zeros(len(typed) + 1, dtype=np.int32)
    np.cumsum(present.to_numpy(zero_copy_only=False), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pc.drop_null(typed))


def tfx_partition_keys(values: pa.Array, column_type: int) -> list[bytes]:
    """What TFX hashes for `partition_feature_name`: the feature's deterministic serialisation."""
    import tensorflow as tf  # only here: the rest of the module needs no TensorFlow

    cache: dict[Any, bytes] = {}
    keys = []
    for value in values.to_pylist():
        if value not in cache:
            if column_type == INT:
                kind = {"int64_list": tf.train.Int64List(value=[] if value is None else [value])}
            elif column_type == STRING:
                kind = {"bytes_list": tf.train.BytesList(value=[] if value is None else [value])}
            else:
                raise CsvInputError(
                    "data.split_key must be an integer or text column (as TFX requires)"
                )
            cache[value] = tf.train.Feature(**kind).SerializeToString(deterministic=True)
        keys.append(cache[value])
    return keys


def assign_splits(
    batch: pa.RecordBatch,
    typed: dict[str, pa.Array],
    types: dict[str, int],
    buckets: list[int],
    split_key: str | None,
) -> np.ndarray:
    """Split index per row, from hash buckets as TFX's `_PartitionFn` computes them."""
    total = buckets[-1]
    if split_key:
        # Hash each distinct key once: keys repeat (a timestamp, a user id), rows are many.
        encoded = typed[split_key].dictionary_encode()
        keys = tfx_partition_keys(encoded.dictionary, types[split_key])
        keys += tfx_partition_keys(pa.array([None], encoded.dictionary.type), types[split_key])
        split_of_key = np.array(
            [bisect.bisect(buckets, int(hashlib.sha256(k).hexdigest(), 16) % total) for k in keys]
        )
        missing = len(keys) - 1
        indices = encoded.indices.fill_null(missing).to_numpy(zero_copy_only=False)
        return split_of_key[indices]
    import pandas as pd

    # A stable hash of every value in the row (pandas' fixed-key SipHash), not the encoder's
    # bytes: the encoder's feature order is not part of its contract.
    hashed = pd.util.hash_pandas_object(batch.to_pandas(), index=False).to_numpy()
    return np.searchsorted(np.asarray(buckets), hashed % np.uint64(total), side="right")


def decoded_schema(plan: CsvSurvey) -> pa.Schema:
    """The Arrow schema tfx_bsl's decoder gives these tf.Examples: columns sorted by name (the
    order of a tf.Example's feature map), lists as large lists, text as large binary."""
    return pa.schema([(name, _DECODED_TYPES[plan.types[name]]) for name in sorted(plan.columns)])


def encode_blocks(
    pieces: tuple[ranges.ByteRange, ...], plan: CsvSurvey, skip_bad_rows: bool
) -> Iterator[tuple[pa.RecordBatch, dict[str, pa.Array], pa.RecordBatch, list[bytes]]]:
    """Second pass over a unit's pieces: per block, the typed columns, the per-row lists and
    the serialised tf.Examples."""
    from concurrent.futures import ThreadPoolExecutor

    from tfx_bsl.coders import example_coder

    # tfx_bsl's encoder is most of this pass and runs without Python's lock: each core
    # encodes a slice of the block (3.7 s instead of 6.9 s for 1.5M rows on 2 cores).
    workers = os.cpu_count() or 1
    encoders = [example_coder.RecordBatchToExamplesEncoder() for _ in range(workers)]
    as_text = dict.fromkeys(plan.columns, pa.string())
    with ThreadPoolExecutor(workers, thread_name_prefix="arrow-example-gen-encode") as pool:

        def encode(lists: pa.RecordBatch) -> list[bytes]:
            size = -(-lists.num_rows // workers)
            slices = [
                pool.submit(encoder.encode, lists.slice(i * size, size))
                for i, encoder in enumerate(encoders)
            ]
            return [record for part in slices for record in part.result()]

        for piece in pieces:
            # Bad rows were reported (or refused) by the survey; here they are only skipped.
            on_invalid = (lambda row: "skip") if skip_bad_rows else None
            for batch in _open(piece, plan.columns, as_text, on_invalid, True):
                typed = {
                    name: pc.cast(batch.column(i), _ARROW_TYPES.get(plan.types[name], pa.string()))
                    for i, name in enumerate(plan.columns)
                }
                lists = pa.RecordBatch.from_arrays(
                    [_as_lists(typed[n], plan.types[n]) for n in plan.columns], plan.columns
                )
                yield batch, typed, lists, encode(lists)


_Block = TypeVar("_Block")


def read_ahead(blocks: Iterator[_Block]) -> Iterator[_Block]:
    """Yields what `blocks` yields, while a second thread already makes the next one.

    Reading, casting and encoding a block run in pyarrow's and tfx_bsl's C++ without Python's
    lock; writing one runs a Python loop of TFRecord writes. Overlapped, the two use two cores.
    Besides the caller's block, at most one waits and one is being made: memory stays bounded
    by blocks, not rows. An error in the reading thread is raised here, in the caller's; a
    caller that stops early stops the reading thread, which closes `blocks`.
    """
    ready: queue.Queue = queue.Queue(maxsize=1)
    stopped = threading.Event()
    finished = object()

    def offer(item) -> bool:
        while not stopped.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for block in blocks:
                if not offer((block, None)):
                    return
            offer((finished, None))
        except BaseException as err:  # handed to the caller's thread, raised there
            offer((None, err))
        finally:
            close = getattr(blocks, "close", None)  # a generator's own cleanup, now
            if close is not None:
                close()

    producer = threading.Thread(target=produce, name="arrow-example-gen-read", daemon=True)
    producer.start()
    try:
        while True:
            block, error = ready.get()
            if error is not None:
                raise error
            if block is finished:
                return
            yield block
    finally:
        stopped.set()
        producer.join()


def shard_count(paths: list[str]) -> int:
    """Output files per split: one per SHARD_BYTES of input, at most MAX_SHARDS."""
    size = sum(files.size(p) for p in paths)  # a path may be gs:// or s3://
    return max(1, min(MAX_SHARDS, -(-size // SHARD_BYTES)))


@dataclass(frozen=True)
class SplitTargets:
    """Where and how every work unit writes its rows: TFX's splits and their Parquet copies."""

    split_dirs: list[str]
    buckets: list[int]  # cumulative hash buckets, one per split
    split_key: str | None
    skip_bad_rows: bool
    units: int  # work units in all: each writes shard `index` of this many in every split
    columnar_dirs: list[str] | None = None
    compression_level: int = 1


@dataclass(frozen=True)
class UnitReport:
    """What one work unit wrote: rows per split, and the process that wrote them."""

    unit: int
    counts: list[int]
    process: int


def write_unit(unit: ranges.WorkUnit, plan: CsvSurvey, targets: SplitTargets) -> UnitReport:
    """Second pass over one work unit: its rows as tf.Examples into shard `unit.index` of
    every split (and of its Parquet copy), split by TFX's hash buckets. Writes nothing when the
    survey refused the input (the driver then raises the refusal)."""
    if plan.refusal or plan.rows == 0:
        return UnitReport(unit.index, [0] * len(targets.split_dirs), os.getpid())
    blocks = (
        (
            assign_splits(batch, typed, plan.types, targets.buckets, targets.split_key),
            records,
            lists,
        )
        for batch, typed, lists, records in read_ahead(
            encode_blocks(unit.pieces, plan, targets.skip_bad_rows)
        )
    )
    counts = splits.write_blocks(
        blocks,
        targets.split_dirs,
        1,
        decoded_schema(plan),
        targets.columnar_dirs,
        targets.compression_level,
        shard_number=unit.index,
        shard_total=targets.units,
    )
    return UnitReport(unit.index, counts, os.getpid())


@dataclass
class Reading:
    """What reading the input did: rows per split, the survey, and each work unit's report."""

    counts: list[int]
    plan: CsvSurvey
    units: list[UnitReport]


def read_csv_splits(
    paths: list[str],
    split_dirs: list[str],
    buckets: list[int],
    split_key: str | None,
    skip_bad_rows: bool,
    compression_level: int = 1,
    columnar_dirs: list[str] | None = None,
    required: dict[str, str] | None = None,
    make_pipeline: Callable[[], Any] | None = None,
    unit_bytes: int | None = None,
) -> Reading:
    """Reads the CSVs in work units of about `unit_bytes` (SHARD_BYTES) and writes each split's
    gzipped TFRecord shards, one per unit, and with `columnar_dirs` the same rows as Parquet.

    With `make_pipeline` (it makes a Beam pipeline, not yet run) and more than one unit, the
    units are Beam work: typed per unit, the types combined into a side input, then encoded and
    written per unit, spread over the runner's workers. Otherwise the same functions run one
    unit after another in this process (one unit has nothing to spread, and a Beam job would
    only add its start). Either way the examples of each split are the same. Bad input is
    refused before anything is written, or, for what only the survey finds, after the
    pipeline, with nothing written.

    Raises:
      CsvInputError: bad input, named by file and line (see check_input and survey).
    """
    columns = check_input(paths, required, skip_bad_rows)
    if split_key and split_key not in columns:
        raise CsvInputError(
            f"data.split_key: column {split_key!r} is not in {paths[0]} "
            f"(columns: {', '.join(columns)})"
        )
    units = ranges.plan_units(paths, unit_bytes or SHARD_BYTES)
    if not units:
        raise CsvInputError(checks.no_rows_message(paths))
    targets = SplitTargets(
        split_dirs, buckets, split_key, skip_bad_rows, len(units), columnar_dirs, compression_level
    )
    if make_pipeline is None or len(units) == 1:
        plan = survey_units(units, columns, skip_bad_rows)
        _refuse_if_unreadable(plan, paths, required, skip_bad_rows)
        reports = [write_unit(unit, plan, targets) for unit in units]
    else:
        plan, reports = _run_beam(make_pipeline(), units, columns, targets)
        _refuse_if_unreadable(plan, paths, required, skip_bad_rows)
    reports.sort(key=lambda report: report.unit)
    counts = [sum(column) for column in zip(*(r.counts for r in reports), strict=True)]
    return Reading(counts, plan, reports)


def _run_beam(
    pipeline, units: list[ranges.WorkUnit], columns: list[str], targets: SplitTargets
) -> tuple[CsvSurvey, list[UnitReport]]:
    """Runs the read as Beam stages and brings the survey and the units' reports back."""
    import apache_beam as beam
    import tensorflow as tf

    # Where the last stage leaves what the driver needs: beside the output (on the pipeline
    # root's filesystem, through tf.io.gfile as TFX writes there), which every worker of a
    # distributed runner can reach; removed once read.
    parent = posixpath.dirname(targets.split_dirs[0].rstrip("/")) or "."
    handoff = f"{parent}/.conveyor-units-{uuid.uuid4().hex}"
    tf.io.gfile.makedirs(handoff)
    outcome_path = f"{handoff}/outcome.pickle"
    try:
        work = (
            pipeline
            | "PlanUnits" >> beam.Create(units)
            # A fusion break: each unit can go to another worker.
            | "SpreadUnits" >> beam.Reshuffle()
        )
        plan = (
            work
            | "TypeColumns"
            >> beam.Map(lambda u: (u.index, survey_unit(u, columns, targets.skip_bad_rows)))
            | "GatherTypes" >> beam.combiners.ToList()
            | "CombineTypes" >> beam.Map(lambda surveys: merge_surveys(columns, surveys))
        )
        reports = work | "EncodeAndWrite" >> beam.Map(
            write_unit, beam.pvalue.AsSingleton(plan), targets
        )
        _ = (
            reports
            | "GatherReports" >> beam.combiners.ToList()
            | "HandBack" >> beam.Map(_save_outcome, beam.pvalue.AsSingleton(plan), outcome_path)
        )
        pipeline.run().wait_until_finish()
        with tf.io.gfile.GFile(outcome_path, "rb") as handle:
            return pickle.load(handle)
    finally:
        if tf.io.gfile.exists(handoff):
            tf.io.gfile.rmtree(handoff)


def _save_outcome(reports: list[UnitReport], plan: CsvSurvey, path: str) -> None:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "wb") as handle:
        pickle.dump((plan, reports), handle)


def write_splits(*args: Any, **kwargs: Any) -> tuple[list[int], CsvSurvey]:
    """`read_csv_splits` (the same arguments), answering only the rows per split and the survey.

    gzip level 1: at the default level compression alone took as long as everything else
    together here, for files about 15% smaller. `required`: columns the header must have
    (column -> what in the spec names it).
    """
    reading = read_csv_splits(*args, **kwargs)
    return reading.counts, reading.plan


class Executor(base_beam_executor.BaseBeamExecutor):
    """ExampleGen executor: TFX's exec properties in, TFX's Examples artifact out."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Reads the input CSVs and writes each output split as tf.Examples and Parquet.

        One input pattern is split by hash buckets (or `partition_feature_name`) into the
        output config's splits. The Examples artifact records how many malformed rows were
        skipped and, set last so a half-written copy is never read, where the Parquet copy is.

        Raises:
          CsvInputError: for more than one input split, no output splits, no matching files,
            a missing required column or `split_key`, or a malformed row not skipped.
        """
        self._log_startup(input_dict, output_dict, exec_properties)
        from apache_beam.io.filesystems import FileSystems
        from apache_beam.options.pipeline_options import PipelineOptions

        # This process reads through Beam's filesystems outside any pipeline, where they have no
        # options and Beam's S3 filesystem makes no client ("Must provide one of client or
        # options"): give them the component's Beam options, as a pipeline gives its workers.
        FileSystems.set_options(PipelineOptions(self._beam_pipeline_args))
        output = splits.split_output(output_dict, exec_properties, "the Arrow CSV reader")
        in_process = placement.reads_in_process(self._beam_pipeline_args)
        logging.info("Arrow CSV reader: %s", placement.describe(self._beam_pipeline_args))
        reading = read_csv_splits(
            splits.matching_files(output.input_base, output.pattern),
            output.split_dirs,
            output.buckets,
            output.split_key,
            skip_bad_rows=output.options.get(BAD_ROWS_OPTION) == "skip",
            columnar_dirs=output.columnar_dirs,
            required=output.options.get(REQUIRED_COLUMNS_OPTION) or None,
            make_pipeline=None if in_process else self._make_beam_pipeline,
        )
        logging.info(
            "read %d work units in %d processes",
            len(reading.units),
            len({report.process for report in reading.units}),
        )
        for problem in reading.plan.skipped:
            logging.warning("skipped a malformed row: %s", problem)
        output.examples.set_int_custom_property(SKIPPED_ROWS_PROPERTY, len(reading.plan.skipped))
        output.publish(reading.counts)
