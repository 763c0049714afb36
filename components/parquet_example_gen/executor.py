"""Parquet -> tf.Example with Arrow: TFX's examples, splits and layout, without its Beam loop.

TFX ships a Parquet ExampleGen executor (`tfx.components.example_gen.custom_executors.
parquet_executor`). It is not used here, for two reasons measured on 2026-12-01:
- it is wrong for zeros: its `dict_to_example` writes a feature with no values for every falsy
  cell, so a `0`, `0.0` or `""` is read as missing (a label of 0 included);
- it converts row by row in Python: 150,000 taxi rows took 160 s (66 s of CPU) where this
  executor took the figure in docs/inputs.md.

This executor reads each file in record batches with pyarrow, encodes a whole batch at once with
tfx_bsl's C++ RecordBatch -> tf.Example encoder (the one the Arrow CSV reader uses), and keeps
TFX's contracts, so every downstream component reads its output unchanged:
- integer and boolean columns become int64 features, floating and decimal ones float features,
  text and binary ones bytes features; list columns become features with several values; a null
  cell is a feature with no values, as TFX's CSV reader writes an empty cell;
- splits are TFX's: by `partition_feature_name` exactly as TFX hashes it, else by the SHA-256 of
  each example's deterministic serialisation, which is what TFX's `_PartitionFn` hashes. So a
  Parquet file written from a CSV puts each row in the split TFX's CSV reader puts it in;
- Split-<name>/data_tfrecord-*.gz, the payload format, and (as the Arrow CSV reader does) a
  Parquet copy in tfx_bsl's decoded layout for Conveyor's StatisticsGen.
A column of a type tf.Example cannot hold (a timestamp, a struct) or files whose columns differ
stop the run with one paragraph naming the file and column.
"""

from __future__ import annotations

import bisect
import hashlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tfx.dsl.components.base import base_beam_executor

from components.arrow_example_gen import splits
from components.arrow_example_gen.executor import (
    FLOAT,
    INT,
    REQUIRED_COLUMNS_OPTION,
    STRING,
    UNKNOWN,
    CsvSurvey,
    decoded_schema,
    read_ahead,
    shard_count,
    tfx_partition_keys,
)
from components.csv_input.checks import CsvInputError

BATCH_ROWS = 65536  # rows per record batch read: memory is a few batches, whatever the file
_KIND_NAMES = {INT: "integer", FLOAT: "float", STRING: "text", UNKNOWN: "all null"}
_TARGET_TYPES = {INT: pa.int64(), FLOAT: pa.float32(), STRING: pa.binary()}


class ParquetInputError(CsvInputError):
    """The Parquet input cannot be read as the spec says; the message names file and column.

    A CsvInputError, so the runner reports it as it reports a bad CSV: the message alone, as
    the run's FAILED line, no traceback.
    """


def _kind_of(data_type: pa.DataType) -> int | None:
    """The tf.Example kind a scalar Arrow type becomes, or None when it has none."""
    if pa.types.is_dictionary(data_type):
        return _kind_of(data_type.value_type)
    if pa.types.is_integer(data_type) or pa.types.is_boolean(data_type):
        return INT
    if pa.types.is_floating(data_type) or pa.types.is_decimal(data_type):
        return FLOAT
    if (
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
    ):
        return STRING
    if pa.types.is_null(data_type):
        return UNKNOWN
    return None


def _is_list(data_type: pa.DataType) -> bool:
    return pa.types.is_list(data_type) or pa.types.is_large_list(data_type)


@dataclass(frozen=True)
class ParquetColumns:
    """The columns the input files share: name -> tf.Example kind, and which hold lists."""

    kinds: dict[str, int]
    lists: frozenset[str]

    @property
    def decoded(self) -> pa.Schema:
        """The Arrow schema tfx_bsl's decoder gives these tf.Examples (the columnar copy's)."""
        return decoded_schema(CsvSurvey(columns=list(self.kinds), types=self.kinds))


def read_columns(paths: list[str], required: dict[str, str] | None = None) -> ParquetColumns:
    """Each file's schema (its footer only): one set of columns with kinds tf.Example can hold.

    Raises:
      ParquetInputError: a file that is not Parquet, files whose columns or kinds differ, a
        column of a type tf.Example cannot hold, or a `required` column (column -> what in the
        spec names it) missing.
    """
    first: ParquetColumns | None = None
    for path in paths:
        try:
            schema = pq.read_schema(path)
        except (pa.ArrowInvalid, OSError) as err:
            raise ParquetInputError(f"{path}: not a readable Parquet file: {err}") from None
        kinds, lists = {}, set()
        for field_ in schema:
            data_type = field_.type
            if _is_list(data_type):
                lists.add(field_.name)
                data_type = data_type.value_type
            kind = _kind_of(data_type)
            if kind is None:
                raise ParquetInputError(
                    f"{path}: column {field_.name!r} is {field_.type}, which a tf.Example cannot "
                    "hold: write it as integers, floats or text (a timestamp as epoch seconds, "
                    "say), or leave it out of the file."
                )
            kinds[field_.name] = kind
        found = ParquetColumns(kinds, frozenset(lists))
        if first is None:
            first = found
        elif found != first:
            raise ParquetInputError(
                f"{path}: its columns differ from {paths[0]}'s: {_describe(found)} against "
                f"{_describe(first)}; every file of an input must have the same columns."
            )
    assert first is not None  # splits.matching_files never returns an empty list
    for column, key in (required or {}).items():
        if column not in first.kinds:
            raise ParquetInputError(
                f"{key}: column {column!r} is not in {paths[0]} "
                f"(columns: {', '.join(first.kinds)})."
            )
    return first


def _describe(columns: ParquetColumns) -> str:
    return ", ".join(
        f"{name} ({_KIND_NAMES[kind]}{' list' if name in columns.lists else ''})"
        for name, kind in columns.kinds.items()
    )


def feature_lists(values: pa.Array, kind: int, is_list: bool, name: str, path: str) -> pa.Array:
    """One list of values per row, as a tf.Example feature holds them: [value] or [] for a
    scalar column (null: []), the row's values for a list column (null: [])."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if kind == UNKNOWN:
        # No value anywhere: a feature with no kind, which a null list encodes.
        return pa.nulls(len(values), pa.list_(pa.int64()))
    target = _TARGET_TYPES[kind]
    if is_list:
        lengths = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(values)  # null lists contribute nothing
        if flat.null_count:
            raise ParquetInputError(
                f"{path}: column {name!r} holds a null inside a list; a tf.Example feature "
                "cannot hold one (leave it out of the list)."
            )
    else:
        present = pc.is_valid(values).to_numpy(zero_copy_only=False)
        lengths = present.astype(np.int32)
        flat = pc.drop_null(values)
    if pa.types.is_dictionary(flat.type):
        flat = flat.dictionary_decode()
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pc.cast(flat, target))


def _field_body(record: bytes) -> bytes:
    """A one-feature tf.Example's `features` field body: its map entry, tag included."""
    if not record:
        return b""
    # Skip the `features` tag (one byte) and its length (a varint of 1 to 3 bytes here).
    start = 2 if record[1] < 0x80 else 3 if record[2] < 0x80 else 4
    return record[start:]


def _length_prefix(size: int) -> bytes:
    """The protobuf varint of `size`."""
    out = bytearray()
    while size >= 0x80:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)


def deterministic_examples(per_column: list[list[bytes]]) -> list[bytes]:
    """Whole tf.Examples in protobuf's deterministic serialisation, from the one-feature
    examples of each column (columns sorted by name).

    Deterministic serialisation writes a map's entries sorted by key; a tf.Example is one map
    (`features.feature`), so it is the entries of its features in name order. Building the
    bytes from per-column encodings costs a join per row, where parsing and serialising each
    example again (what TFX's partitioning does) took 20 s for 150,000 taxi rows.
    """
    bodies = [[_field_body(r) for r in column] for column in per_column]
    examples = []
    for parts in zip(*bodies, strict=True):
        body = b"".join(parts)
        examples.append(b"\x0a" + _length_prefix(len(body)) + body if body else b"")
    return examples


def tfx_split_of(records: list[bytes], buckets: list[int]) -> np.ndarray:
    """Split index per deterministically serialised tf.Example, as TFX's `_PartitionFn`
    assigns it without a partition feature: the SHA-256 of those bytes."""
    total = buckets[-1]
    return np.fromiter(
        (bisect.bisect(buckets, int(hashlib.sha256(r).hexdigest(), 16) % total) for r in records),
        dtype=np.int64,
        count=len(records),
    )


def encode_batches(
    paths: list[str], columns: ParquetColumns
) -> Iterator[tuple[pa.RecordBatch, list[bytes]]]:
    """Per record batch of each file: the feature lists (columns sorted by name) and the
    tf.Examples, in deterministic serialisation (see `deterministic_examples`)."""
    from tfx_bsl.coders import example_coder

    names = sorted(columns.kinds)
    # tfx_bsl's encoder runs without Python's lock: the cores encode columns in parallel.
    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(workers, thread_name_prefix="parquet-example-gen-encode") as pool:
        for path in paths:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=names):
                lists = pa.RecordBatch.from_arrays(
                    [
                        feature_lists(
                            batch.column(name),
                            columns.kinds[name],
                            name in columns.lists,
                            name,
                            path,
                        )
                        for name in names
                    ],
                    names,
                )
                per_column = pool.map(
                    lambda i, lists=lists: example_coder.RecordBatchToExamplesEncoder().encode(
                        pa.RecordBatch.from_arrays([lists.column(i)], [names[i]])
                    ),
                    range(len(names)),
                )
                yield lists, deterministic_examples(list(per_column))


def split_of_rows(
    lists: pa.RecordBatch,
    records: list[bytes],
    columns: ParquetColumns,
    buckets: list[int],
    split_key: str | None,
) -> np.ndarray:
    """Split index per row: by `split_key` as TFX's `partition_feature_name`, else by TFX's
    hash of the whole example."""
    if not split_key:
        return tfx_split_of(records, buckets)
    kind = columns.kinds[split_key]
    if split_key in columns.lists or kind not in (INT, STRING):
        raise ParquetInputError(
            f"data.split_key: column {split_key!r} must hold one integer or text value per row "
            "(as TFX requires)"
        )
    # The key's value per row, null where the row has none: what TFX would hash.
    column = lists.column(split_key)
    present = pc.greater(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    positions = np.cumsum(present) - 1
    values = pc.list_flatten(column).take(pa.array(positions, mask=~present))
    encoded = values.dictionary_encode()
    keys = tfx_partition_keys(encoded.dictionary, kind)
    keys += tfx_partition_keys(pa.array([None], encoded.dictionary.type), kind)
    total = buckets[-1]
    split_of_key = np.array(
        [bisect.bisect(buckets, int(hashlib.sha256(k).hexdigest(), 16) % total) for k in keys]
    )
    indices = encoded.indices.fill_null(len(keys) - 1).to_numpy(zero_copy_only=False)
    return split_of_key[indices]


def write_splits(
    paths: list[str],
    split_dirs: list[str],
    buckets: list[int],
    split_key: str | None,
    columnar_dirs: list[str] | None = None,
    required: dict[str, str] | None = None,
    compression_level: int = 1,
) -> list[int]:
    """Reads the Parquet files and writes each split's gzipped TFRecord shards (and, with
    `columnar_dirs`, their Parquet copy in the decoder's layout); returns rows per split."""
    columns = read_columns(paths, required)
    if split_key and split_key not in columns.kinds:
        raise ParquetInputError(
            f"data.split_key: column {split_key!r} is not in {paths[0]} "
            f"(columns: {', '.join(columns.kinds)})"
        )
    blocks = (
        (split_of_rows(lists, records, columns, buckets, split_key), records, lists)
        for lists, records in read_ahead(encode_batches(paths, columns))
    )
    counts = splits.write_blocks(
        blocks, split_dirs, shard_count(paths), columns.decoded, columnar_dirs, compression_level
    )
    if not sum(counts):
        raise ParquetInputError(f"{', '.join(paths)}: no rows")
    return counts


class Executor(base_beam_executor.BaseBeamExecutor):
    """ExampleGen executor: TFX's exec properties in, TFX's Examples artifact out."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Reads the input Parquet files and writes each output split as tf.Examples, and a
        Parquet copy in the decoder's layout (recorded on the artifact last, once complete).

        Raises:
          ParquetInputError: for more than one input split, no output splits, no matching
            files, files a tf.Example cannot hold, a missing required column or `split_key`.
        """
        self._log_startup(input_dict, output_dict, exec_properties)
        output = splits.split_output(
            output_dict, exec_properties, "the Parquet reader", ParquetInputError
        )
        counts = write_splits(
            splits.matching_files(output.input_base, output.pattern, ParquetInputError),
            output.split_dirs,
            output.buckets,
            output.split_key,
            columnar_dirs=output.columnar_dirs,
            required=output.options.get(REQUIRED_COLUMNS_OPTION) or None,
        )
        output.publish(counts)
