"""An Arrow ExampleGen's output splits: what TFX's configs ask for, and writing them.

The Arrow CSV reader (executor.py) and the Parquet reader (components/parquet_example_gen) read
and encode rows differently, but lay out the Examples artifact the same way: each split's
gzipped TFRecord shards under `Split-<name>/`, TFX's payload format, and a Parquet copy in
tfx_bsl's decoded layout under `conveyor_columnar/Split-<name>/`, recorded on the artifact last.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from absl import logging
from google.protobuf import json_format, struct_pb2
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from components.arrow_example_gen import files
from components.csv_input.checks import CsvInputError

FILE_PREFIX = "data_tfrecord"  # as TFX's write_split names ExampleGen output
COLUMNAR_DIR = "conveyor_columnar"  # under the Examples artifact's uri
COLUMNAR_PREFIX = "data_parquet"
# Set on the Examples artifact when the Parquet copy is complete: the relative pattern of each
# split's files, as JSON (the form of TFX's own custom split patterns).
COLUMNAR_PROPERTY = "conveyor_columnar_split_patterns"


def matching_files(
    input_base: str, pattern: str, error: type[CsvInputError] = CsvInputError
) -> list[str]:
    """The files matching `pattern` under `input_base`, sorted so every run reads one order,
    on any filesystem Beam knows (files.py; `input_base` may be `gs://bucket/dir`).

    Raises:
      CsvInputError (`error`): when nothing matches, naming the pattern, before any output is
        written.
    """
    full = files.join(input_base, pattern)
    paths = [path for path, _ in files.match(full)]
    if not paths:
        raise error(f"no files match {full}")
    return paths


def as_decoded(lists: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A block's per-row lists in the decoder's layout (see executor.decoded_schema)."""
    columns = [
        pa.nulls(lists.num_rows)
        if field_.type == pa.null()
        else lists.column(field_.name).cast(field_.type)
        for field_ in schema
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def write_blocks(
    blocks: Iterable[tuple[np.ndarray, list[bytes], pa.RecordBatch]],
    split_dirs: list[str],
    shards: int,
    schema: pa.Schema,
    columnar_dirs: list[str] | None = None,
    compression_level: int = 1,
    shard_number: int = 0,
    shard_total: int | None = None,
) -> list[int]:
    """Writes each block's tf.Examples to gzipped TFRecord shards per split; returns rows per
    split.

    A block is (split index per row, the rows' serialised tf.Examples, their per-row feature
    lists). Block n goes whole to shard n % `shards` of every split: deterministic for the same
    input. With `columnar_dirs` (one per split) the same rows also go, as `schema` (tfx_bsl's
    decoded layout), to the Parquet shard of the same number there, one row group per block.
    A writer of part of the input (one work unit of the Arrow CSV reader) writes its `shards`
    as numbers `shard_number`... of `shard_total` (default: its own shards only).

    Both are written through TensorFlow's filesystems, as TFX writes its artifacts: the
    pipeline root may be on any of them (`gs://` among them; files.create_output).
    """
    import pyarrow.parquet as pq
    import tensorflow as tf

    options = tf.io.TFRecordOptions(compression_type="GZIP", compression_level=compression_level)
    counts = [0] * len(split_dirs)
    total = shard_total or shards
    writers, parquet_writers = [], []
    for directory in split_dirs:
        tf.io.gfile.makedirs(directory)
        writers.append(
            [
                tf.io.TFRecordWriter(
                    os.path.join(
                        directory, f"{FILE_PREFIX}-{shard_number + i:05d}-of-{total:05d}.gz"
                    ),
                    options,
                )
                for i in range(shards)
            ]
        )
    parquet_files = []  # the writers write to these; closed after them
    for directory in columnar_dirs or []:
        tf.io.gfile.makedirs(directory)
        names = [
            os.path.join(
                directory, f"{COLUMNAR_PREFIX}-{shard_number + i:05d}-of-{total:05d}.parquet"
            )
            for i in range(shards)
        ]
        sinks = [files.create_output(name) for name in names]
        parquet_files += [sink for sink in sinks if not isinstance(sink, str)]
        parquet_writers.append(
            [pq.ParquetWriter(sink, schema, compression="snappy") for sink in sinks]
        )
    try:
        for block, (split_of_row, records, lists) in enumerate(blocks):
            shard = block % shards
            for split, record in zip(split_of_row.tolist(), records, strict=True):
                writers[split][shard].write(record)
            if parquet_writers:
                decoded = as_decoded(lists, schema)
                for split, split_writers in enumerate(parquet_writers):
                    rows = decoded.filter(pa.array(split_of_row == split))
                    if rows.num_rows:  # each block is one row group: one unit for a reader
                        split_writers[shard].write_batch(rows)
            per_split = np.bincount(split_of_row, minlength=len(writers))
            counts = [c + int(n) for c, n in zip(counts, per_split, strict=True)]
    finally:
        for split_writers in [*writers, *parquet_writers]:
            for writer in split_writers:
                writer.close()
        for handle in parquet_files:
            handle.close()
    return counts


def executor_options(custom_config_json: str | None) -> dict[str, Any]:
    """The reader options the component packed into ExampleGen's CustomConfig (a Struct)."""
    if not custom_config_json:
        return {}
    custom_config = example_gen_pb2.CustomConfig()
    proto_utils.json_to_proto(custom_config_json, custom_config)
    options = struct_pb2.Struct()
    if not custom_config.custom_config.Unpack(options):
        return {}
    return json_format.MessageToDict(options)


@dataclass(frozen=True)
class SplitOutput:
    """What an ExampleGen executor's exec properties ask of it, and where its output goes."""

    examples: Any  # the Examples artifact
    input_base: str
    pattern: str  # the one input pattern, relative to input_base
    names: list[str]  # output split names, in the output config's order
    buckets: list[int]  # cumulative hash buckets, one per split
    split_key: str | None  # the output config's partition_feature_name
    options: dict[str, Any]  # the reader options (executor_options)

    @property
    def split_dirs(self) -> list[str]:
        """Each split's folder for its TFRecord shards (TFX's `Split-<name>`)."""
        return [artifact_utils.get_split_uri([self.examples], name) for name in self.names]

    @property
    def columnar(self) -> dict[str, str]:
        """Each split's folder for its Parquet copy, relative to the artifact's uri."""
        return {name: os.path.join(COLUMNAR_DIR, f"Split-{name}") for name in self.names}

    @property
    def columnar_dirs(self) -> list[str]:
        """Each split's folder for its Parquet copy, in split order."""
        return [os.path.join(self.examples.uri, path) for path in self.columnar.values()]

    def publish(self, counts: list[int]) -> None:
        """Sets the payload format and, last, where the Parquet copy is: only a copy written to
        the end is ever read in place of the tf.Examples."""
        examples_utils.set_payload_format(self.examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
        self.examples.set_string_custom_property(
            COLUMNAR_PROPERTY,
            json.dumps({name: os.path.join(path, "*") for name, path in self.columnar.items()}),
        )
        logging.info("wrote %s examples to splits %s", counts, self.names)


def split_output(
    output_dict, exec_properties, reader: str, error: type[CsvInputError] = CsvInputError
) -> SplitOutput:
    """Reads TFX's input and output configs and names the Examples artifact's splits.

    Raises:
      CsvInputError (`error`): for more than one input split or no output splits (`reader`,
        as "the Parquet reader", names what refuses them).
    """
    input_config = example_gen_pb2.Input()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.INPUT_CONFIG_KEY], input_config
    )
    output_config = example_gen_pb2.Output()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY], output_config
    )
    if len(input_config.splits) != 1 or not output_config.split_config.splits:
        raise error(f"{reader} takes one input pattern and hash-bucket output splits")
    options = executor_options(exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY))
    examples = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.EXAMPLES_KEY]
    )
    split_config = output_config.split_config
    names = [s.name for s in split_config.splits]
    examples.split_names = artifact_utils.encode_split_names(names)
    return SplitOutput(
        examples=examples,
        input_base=exec_properties[standard_component_specs.INPUT_BASE_KEY],
        pattern=input_config.splits[0].pattern,
        names=names,
        buckets=list(np.cumsum([s.hash_buckets for s in split_config.splits])),
        split_key=split_config.partition_feature_name or None,
        options=options,
    )
