"""TFX's file-based ExampleGen with the Arrow Parquet executor: same driver, outputs, caching."""

from tfx.dsl.components.base import executor_spec

from components.arrow_example_gen.component import ReaderExampleGen
from components.parquet_example_gen import executor


class ParquetExampleGen(ReaderExampleGen):
    """An ExampleGen over Parquet files whose executor encodes with Arrow (see executor.py).

    TFX's FileBasedDriver still resolves spans and versions and fingerprints the input files,
    so caching, span patterns and ML Metadata registration are those of any ExampleGen.
    `required_columns` (column -> what in the spec names it) must be in every file.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)
