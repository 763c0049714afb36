"""TFX's CsvExampleGen, with Conveyor's input check first (see executor.py).

Same driver, spec, outputs and properties as `tfx.components.CsvExampleGen`: spans, versions,
input fingerprints, caching and ML Metadata registration are TFX's. Only the executor differs.
"""

from tfx.components import CsvExampleGen as TfxCsvExampleGen
from tfx.dsl.components.base import executor_spec

from components.arrow_example_gen.component import ReaderExampleGen
from components.csv_example_gen import executor


class CsvExampleGen(ReaderExampleGen, TfxCsvExampleGen):
    """TFX's CsvExampleGen whose executor refuses bad input first, naming file and line, in
    the words the Arrow reader uses (components/csv_input/checks.py).

    `required_columns` (column -> what in the spec names it) must be in the header.
    `code_version` is part of the exec properties so that a change to the check or the reader
    invalidates cached outputs (TFX's cache key ignores executor code). TFX's CsvExampleGen
    takes no custom_config; its base class does (ReaderExampleGen calls it), and TFX's CSV
    executor never reads it, so it carries the check's options.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)
