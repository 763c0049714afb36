"""TFX's CsvExampleGen, with Conveyor's input check first (see executor.py).

Same driver, spec, outputs and properties as `tfx.components.CsvExampleGen`: spans, versions,
input fingerprints, caching and ML Metadata registration are TFX's. Only the executor differs.
"""

from collections.abc import Mapping

from google.protobuf import struct_pb2
from tfx.components import CsvExampleGen as TfxCsvExampleGen
from tfx.components.example_gen import component as example_gen_component
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2

from components.csv_example_gen import executor


class CsvExampleGen(TfxCsvExampleGen):
    """TFX's CsvExampleGen whose executor refuses bad input first, naming file and line, in
    the words the Arrow reader uses (components/csv_input/checks.py).

    `required_columns` (column -> what in the spec names it) must be in the header.
    `code_version` is part of the exec properties so that a change to the check or the reader
    invalidates cached outputs (TFX's cache key ignores executor code).
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
        options.update(
            {
                executor.REQUIRED_COLUMNS_OPTION: dict(required_columns or {}),
                "code_version": code_version,
            }
        )
        custom_config = example_gen_pb2.CustomConfig()
        custom_config.custom_config.Pack(options)
        # TFX's CsvExampleGen takes no custom_config; its base class does, and TFX's CSV
        # executor never reads it, so it carries the check's options.
        example_gen_component.FileBasedExampleGen.__init__(
            self,
            input_base=input_base,
            input_config=input_config,
            output_config=output_config,
            custom_config=custom_config,
            range_config=range_config,
        )
