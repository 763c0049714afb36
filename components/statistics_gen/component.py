"""TFX's StatisticsGen with the executor that reads the Arrow reader's Parquet copy."""

from tfx.components.statistics_gen import component as statistics_gen_component
from tfx.dsl.components.base import executor_spec

from components.statistics_gen import executor


class ColumnarStatisticsGen(statistics_gen_component.StatisticsGen):
    """A StatisticsGen that reads a Parquet copy of its examples when they carry one.

    Same inputs, outputs, options and caching as TFX's; see executor.py for what it reads.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)
