"""Conveyor's StatisticsGen: TFX's component with an executor that reads the Arrow reader's
Parquet copy of the examples and computes small splits without a Beam pipeline."""

from tfx.components.statistics_gen import component as statistics_gen_component
from tfx.dsl.components.base import executor_spec

from components.statistics_gen import executor


class StatisticsGen(statistics_gen_component.StatisticsGen):
    """TFX's StatisticsGen with Conveyor's executor (see executor.py and in_process.py).

    Same inputs, outputs, options and caching as TFX's; the statistics are TFDV's either way.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)
