"""TFX's file-based ExampleGen with the Arrow CSV executor: same driver, outputs and caching."""

from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2
from tfx.components.example_gen import component as example_gen_component
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2

from components.arrow_example_gen import executor


class ReaderExampleGen(example_gen_component.FileBasedExampleGen):
    """A file-based ExampleGen whose executor is one of Conveyor's readers (a subclass sets
    EXECUTOR_SPEC): its options travel packed in ExampleGen's CustomConfig.

    TFX's FileBasedDriver still resolves spans and versions and fingerprints the input files,
    so caching, span patterns and ML Metadata registration are those of any ExampleGen.
    `required_columns` (column -> what in the spec names it) must be in the input; `options`
    are the reader's own (splits.executor_options reads them all back).
    """

    def __init__(
        self,
        *,
        input_base: str,
        output_config: example_gen_pb2.Output,
        required_columns: Mapping[str, str] | None = None,
        code_version: str = "",
        input_config: example_gen_pb2.Input | None = None,
        range_config=None,
        options: Mapping[str, Any] | None = None,
    ):
        packed = struct_pb2.Struct()
        # The code version is part of the exec properties so that a change to this reader
        # invalidates cached outputs it produced (TFX's cache key ignores executor code).
        packed.update(
            {
                **(options or {}),
                executor.REQUIRED_COLUMNS_OPTION: dict(required_columns or {}),
                "code_version": code_version,
            }
        )
        custom_config = example_gen_pb2.CustomConfig()
        custom_config.custom_config.Pack(packed)
        # Named rather than super(): TFX's CsvExampleGen, a base of Conveyor's, takes no
        # custom_config; this base class of it does.
        example_gen_component.FileBasedExampleGen.__init__(
            self,
            input_base=input_base,
            input_config=input_config,
            output_config=output_config,
            custom_config=custom_config,
            range_config=range_config,
        )


class ArrowCsvExampleGen(ReaderExampleGen):
    """A CsvExampleGen whose executor streams with pyarrow (see executor.py).

    `required_columns` (column -> what in the spec names it) must be in the header; `bad_rows`
    ("fail" or "skip") says what a malformed row does.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, *, bad_rows: str = "fail", **kwargs):
        super().__init__(options={executor.BAD_ROWS_OPTION: bad_rows}, **kwargs)
