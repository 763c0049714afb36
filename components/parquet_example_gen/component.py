"""TFX's file-based ExampleGen with the Arrow Parquet executor: same driver, outputs, caching."""

from collections.abc import Mapping

from google.protobuf import struct_pb2
from tfx.components.example_gen import component as example_gen_component
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2

from components.parquet_example_gen import executor


class ParquetExampleGen(example_gen_component.FileBasedExampleGen):
    """An ExampleGen over Parquet files whose executor encodes with Arrow (see executor.py).

    TFX's FileBasedDriver still resolves spans and versions and fingerprints the input files,
    so caching, span patterns and ML Metadata registration are those of any ExampleGen.
    `required_columns` (column -> what in the spec names it) must be in every file.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(
        self,
        *,
        input_base: str,
        output_config: example_gen_pb2.Output,
        required_columns: Mapping[str, str] | None = None,
        code_version: str = "",
        input_config: example_gen_pb2.Input | None = None,
        range_config=None,
    ):
        options = struct_pb2.Struct()
        # The code version is part of the exec properties so that a change to this reader
        # invalidates cached outputs it produced (TFX's cache key ignores executor code).
        options.update(
            {
                executor.REQUIRED_COLUMNS_OPTION: dict(required_columns or {}),
                "code_version": code_version,
            }
        )
        custom_config = example_gen_pb2.CustomConfig()
        custom_config.custom_config.Pack(options)
        super().__init__(
            input_base=input_base,
            input_config=input_config,
            output_config=output_config,
            custom_config=custom_config,
            range_config=range_config,
        )
