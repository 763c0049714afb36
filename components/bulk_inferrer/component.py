"""PredictionTable: the input columns a team names beside each prediction of TFX's BulkInferrer,
as CSV or Parquet.

TFX's BulkInferrer writes PredictionLog TFRecords (an InferenceResult) and, optionally, the
examples with predictions added (OutputExampleSpec): neither is a table a team's tools read.
This node reads the InferenceResult the BulkInferrer wrote and writes `predictions-*.csv` (or
`.parquet`) into an artifact of its own type, `conveyor.PredictionTable`, so the BulkInferrer
stays TFX's own and its output is never written twice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import artifact, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.bulk_inferrer import executor

TABLE_KEY = "table"


class PredictionTableArtifact(artifact.Artifact):
    """`predictions-*.csv` or `.parquet`: input columns and predictions, one row per example."""

    TYPE_NAME = "conveyor.PredictionTable"


class PredictionTableSpec(ComponentSpec):
    """Input, output and parameters of the prediction table."""

    PARAMETERS = {
        executor.COLUMNS_KEY: ExecutionParameter(type=str),
        executor.FORMAT_KEY: ExecutionParameter(type=str),
    }
    INPUTS = {
        executor.INFERENCE_RESULT_KEY: ChannelParameter(type=standard_artifacts.InferenceResult)
    }
    OUTPUTS = {TABLE_KEY: ChannelParameter(type=PredictionTableArtifact)}


class PredictionTable(base_beam_component.BaseBeamComponent):
    """Writes the named input columns and every model output of an InferenceResult's
    PredictionLogs as one table."""

    SPEC_CLASS = PredictionTableSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(
        self, inference_result: types.BaseChannel, columns: Sequence[str], table_format: str
    ):
        """Builds the spec.

        Args:
          inference_result: TFX BulkInferrer's output.
          columns: the input columns written before the outputs (`inference.output_columns`).
          table_format: `csv` or `parquet` (`inference.output_format`).
        """
        spec = PredictionTableSpec(
            inference_result=inference_result,
            columns=json.dumps(list(columns)),
            table_format=table_format,
            table=types.Channel(type=PredictionTableArtifact),
        )
        super().__init__(spec=spec)
