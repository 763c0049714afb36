"""The prediction table's executor: TFX BulkInferrer's PredictionLogs back as table rows, on the
pipeline's Beam runner (see component.py)."""

from __future__ import annotations

import json
import os
from typing import Any

import apache_beam as beam
import tensorflow as tf
from absl import logging
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils

from components.bulk_inferrer.rows import PREDICTION_LOGS_GLOB
from components.bulk_inferrer.table import (
    counter_value,
    counting,
    first_prediction_log,
    write_table,
)

INFERENCE_RESULT_KEY = "inference_result"
COLUMNS_KEY = "columns"
FORMAT_KEY = "table_format"
ROWS_PROPERTY = "rows"  # on the table: how many predictions it holds
TABLE_ROWS = "table_rows"  # the Beam counter of the rows written


class Executor(base_beam_executor.BaseBeamExecutor):
    """Writes `predictions-*.csv` (or `.parquet`) from the InferenceResult's PredictionLogs."""

    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list],
        output_dict: dict[str, list],
        exec_properties: dict[str, Any],
    ) -> None:
        """Reads `inference_result`'s PredictionLogs and writes the table (nothing, with `rows`
        0, when the BulkInferrer predicted nothing: a model the Evaluator did not bless)."""
        from tensorflow_serving.apis import prediction_log_pb2

        result = artifact_utils.get_single_instance(input_dict[INFERENCE_RESULT_KEY])
        table = artifact_utils.get_single_instance(output_dict["table"])
        files = sorted(tf.io.gfile.glob(os.path.join(result.uri, PREDICTION_LOGS_GLOB)))
        first = first_prediction_log(files)
        if first is None:
            # TFX's BulkInferrer writes nothing for a model the Evaluator did not bless.
            logging.info("no PredictionLogs in %s: an empty table", result.uri)
            table.set_int_custom_property(ROWS_PROPERTY, 0)
            return
        columns = json.loads(exec_properties[COLUMNS_KEY])
        pipeline = self._make_beam_pipeline()
        logs = pipeline | "ReadPredictionLogs" >> beam.io.ReadFromTFRecord(
            os.path.join(result.uri, PREDICTION_LOGS_GLOB),
            coder=beam.coders.ProtoCoder(prediction_log_pb2.PredictionLog),
        )
        write_table(
            logs | "CountRows" >> counting(TABLE_ROWS),
            first,
            columns,
            exec_properties[FORMAT_KEY],
            table.uri,
        )
        rows = counter_value(pipeline.run(), TABLE_ROWS)
        table.set_int_custom_property(ROWS_PROPERTY, rows)
        logging.info("prediction table of %d rows in %s", rows, table.uri)
