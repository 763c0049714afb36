"""TFX's CSV ExampleGen executor, after Conveyor's input check, with csv-module record splitting.

Two differences from `tfx.components.example_gen.csv_example_gen.executor.Executor`, whose
work it delegates to:
- before any Beam work, `components.csv_input.checks.check_inputs` reads each input split's
  files once and stops the run on the first problem with one paragraph naming file and line,
  the words the Arrow reader uses for the same input;
- records are cut where Python's csv module ends them (`checks.csv_records`), not where a
  line's count of `"` is even: TFX's splitter joins a line holding an unquoted `55" TV` to the
  next and fails the file, which Python's csv module, pyarrow and the check read as text.
Everything after the split (the csv parse, type inference, tf.Example encoding, the split
hashing and writing) is TFX's own code.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import apache_beam as beam
from tfx.components.example_gen.csv_example_gen import executor as tfx_csv_executor
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import io_utils, proto_utils
from tfx_bsl.coders import csv_decoder

from components.arrow_example_gen.executor import REQUIRED_COLUMNS_OPTION
from components.arrow_example_gen.splits import executor_options
from components.csv_input import checks
from components.csv_input.checks import CsvInputError
from pipelines.core.failpoints import failpoint

__all__ = ["REQUIRED_COLUMNS_OPTION", "CsvInputError", "Executor"]


def open_bytes(path: str):
    """Opens a local path with Python (fast line iteration), any other through TFX's fileio."""
    if "://" in path:
        return fileio.open(path, "rb")
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


def input_files(input_base: str, pattern: str) -> list[str]:
    """The files of one input split, sorted (the order the check reports problems in)."""
    full = os.path.join(input_base, pattern)
    paths = sorted(p for p in fileio.glob(full) if not fileio.isdir(p))
    if not paths:
        raise CsvInputError(f"no files match {full}")
    return paths


@beam.typehints.with_input_types(str)
@beam.typehints.with_output_types(str)
class _ReadCsvRecords(beam.DoFn):
    """TFX's _ReadCsvRecordsFromTextFile, with records cut by Python's csv module."""

    def process(self, csv_filepath: str) -> Iterable[str]:
        with beam.io.filesystems.FileSystems.open(csv_filepath) as handle:
            yield from checks.csv_records(handle)


@beam.typehints.with_input_types(beam.Pipeline)
class _CsvToExample(tfx_csv_executor._CsvToExample):  # noqa: SLF001 - TFX's transform, reused
    """TFX 1.16's _CsvToExample.expand, with `_ReadCsvRecords` as its record reader."""

    def expand(self, pipeline: beam.Pipeline):
        csv_files = fileio.glob(self._csv_pattern)
        if not csv_files:
            raise RuntimeError(f"Split pattern {self._csv_pattern} does not match any files.")
        column_names = io_utils.load_csv_column_names(csv_files[0])
        parsed_csv_lines = (
            pipeline
            | "CreateFilenames" >> beam.Create(csv_files)
            | "ReadFromText" >> beam.ParDo(_ReadCsvRecords())
            | "ParseCSVLine" >> beam.ParDo(csv_decoder.ParseCSVLine(delimiter=","))
            | "ExtractParsedCSVLines" >> beam.Keys()
        )
        column_infos = beam.pvalue.AsSingleton(
            parsed_csv_lines
            | "InferColumnTypes"
            >> beam.CombineGlobally(
                csv_decoder.ColumnTypeInferrer(column_names, skip_blank_lines=True)
            )
        )
        return parsed_csv_lines | "ToTFExample" >> beam.ParDo(
            tfx_csv_executor._ParsedCsvToTfExample(),  # noqa: SLF001
            column_infos,
        )


class Executor(tfx_csv_executor.Executor):
    """Checks every input split's files, then runs TFX's CSV ExampleGen on them."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Checks each input split's files, then hands the run to TFX's CSV ExampleGen.

        The check comes first so a bad file stops the run with one message naming file and
        line, before Beam starts.

        Raises:
          CsvInputError: when a split matches no file, lacks a required column or holds a
            malformed row (TFX's reader skips none).
        """
        input_config = example_gen_pb2.Input()
        proto_utils.json_to_proto(
            exec_properties[standard_component_specs.INPUT_CONFIG_KEY], input_config
        )
        config = executor_options(exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY))
        required = config.get(REQUIRED_COLUMNS_OPTION) or None
        for split in input_config.splits:
            paths = input_files(
                exec_properties[standard_component_specs.INPUT_BASE_KEY], split.pattern
            )
            # TFX's reader skips no row: a malformed one is always a problem here.
            checks.check_inputs(paths, required, skip_bad_rows=False, opener=open_bytes)
        super().Do(input_dict, output_dict, exec_properties)
        # The splits are written into this execution's folder, and ML Metadata has not heard
        # of them: a kill here leaves examples no run may use (tests/faults/test_kill_resume.py).
        failpoint("example_gen:mid")

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:  # noqa: N802 - TFX's name
        """TFX's CSV-to-tf.Example transform, with records cut by Python's csv module."""
        return _CsvToExample
