"""Writing a prediction table with Beam, from PredictionLogs (see rows.py for its columns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import tensorflow as tf

from components.bulk_inferrer.rows import TABLE_PREFIX, TableLayout


def first_prediction_log(files: Sequence[str]) -> Any | None:
    """The first PredictionLog in the gzipped TFRecord `files` (None: they hold none)."""
    from tensorflow_serving.apis import prediction_log_pb2

    for path in files:
        for record in tf.data.TFRecordDataset([path], compression_type="GZIP").take(1):
            return prediction_log_pb2.PredictionLog.FromString(record.numpy())
    return None


def write_table(
    logs: beam.PCollection, first_log: Any, columns: Sequence[str], table_format: str, folder: str
) -> TableLayout:
    """Adds to `logs`' pipeline the writing of the table of `columns` and every output into
    `folder` as `predictions-*.csv` (a header line in each file) or `.parquet`; returns its
    layout. `first_log` is any one of `logs`: the columns and Parquet types come from it."""
    layout = TableLayout.of(first_log, columns)
    prefix = f"{folder.rstrip('/')}/{TABLE_PREFIX}"
    if table_format == "csv":
        header = layout.header_line()
        _ = (
            logs
            | "TableCsvLines" >> beam.Map(layout.csv_line)
            | "WriteTableCsv" >> beam.io.WriteToText(prefix, file_name_suffix=".csv", header=header)
        )
    elif table_format == "parquet":
        schema = layout.arrow_schema(first_log)
        _ = (
            logs
            | "TableRecords" >> beam.Map(layout.record, schema)
            | "WriteTableParquet"
            >> beam.io.WriteToParquet(prefix, schema, file_name_suffix=".parquet")
        )
    else:
        raise ValueError(f"output_format {table_format!r}: csv or parquet")
    return layout


METRICS_NAMESPACE = "conveyor_infer"


def counting(name: str) -> beam.PTransform:
    """A pass-through step that counts its elements in the Beam counter `name`."""
    counter = beam.metrics.Metrics.counter(METRICS_NAMESPACE, name)

    def count(element):
        counter.inc()
        return element

    return beam.Map(count)


def counter_value(result: Any, name: str) -> int:
    """The committed value of the Beam counter `name` once `result`'s pipeline has finished (0
    when nothing was counted)."""
    from apache_beam.metrics.metric import MetricsFilter

    result.wait_until_finish()
    found = result.metrics().query(
        MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name(name)
    )
    return int(sum(c.committed or 0 for c in found["counters"]))
