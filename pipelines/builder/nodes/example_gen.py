"""csv_example_gen: the ExampleGen for the spec's `data.format`, over its input files.

- `csv`: TFX's CsvExampleGen, or the streaming Arrow reader. Both check the input first, in the
  same words (components/csv_input/checks.py): TFX's through Conveyor's subclass of it
  (components/csv_example_gen), same outputs and properties.
- `tfrecord`: TFX's ImportExampleGen (tf.Example records, gzipped or not).
- `parquet`: Conveyor's Arrow Parquet reader (components/parquet_example_gen).
- `bigquery`: TFX's BigQueryExampleGen over `data.query` (built for Kubeflow; a local run is
  refused before building).
Every file format reads the same span patterns through TFX's FileBasedDriver, and writes the
same splits; the node id and its `examples` output are the same whatever the format.
"""

from __future__ import annotations

from typing import Any

from pipelines.builder.context import BuildContext, code_version, use_arrow_reader
from pipelines.spec.components import Orchestrator
from pipelines.spec.models import DataFormat, PipelineSpec


def required_columns(spec: PipelineSpec) -> dict[str, str]:
    """The columns ExampleGen's input check requires in the header, each with what in the spec
    names it.

    The split key always (ExampleGen itself hashes it). The trainer's label and features only
    when no data gate follows: a data gate names a missing column itself, with every other
    problem of the data, as a blocked run rather than a failed one.
    """
    required = {}
    if spec.data.split_key:
        required[spec.data.split_key] = "data.split_key"
    types = {c.type for c in spec.components}
    if "trainer" in types and "data_gate" not in types:
        required[spec.trainer.label] = "trainer.label"
        for feature in spec.trainer.features:
            required.setdefault(feature.name, "trainer.features")
    return required


def night_parameter():
    """ExampleGen's `range_config` on Kubeflow: the job's runtime parameter
    `spans.RANGE_PARAMETER`, empty by default (the driver reads the newest span) and set to one
    night's range by `conveyor submit NAME --date D` (`spans.range_config_json`)."""
    from tfx.orchestration import data_types

    from pipelines.builder.spans import RANGE_PARAMETER

    return data_types.RuntimeParameter(name=RANGE_PARAMETER, ptype=str, default="")


def build(ctx: BuildContext, node_id: str) -> None:
    """Adds the ExampleGen that reads the input into `data.splits`, and publishes its
    `examples`.

    The ExampleGen is `data.format`'s (see the module's docstring); for CSV, the streaming Arrow
    reader or TFX's, as `data.reader` resolves for this input (`use_arrow_reader`). The Arrow
    readers (CSV and Parquet) also write a columnar copy the later readers use. With
    `data.span_pattern` it reads one span: this run's, or for Airflow the DAG run's night.
    """
    from tfx.proto import example_gen_pb2, range_config_pb2

    data = ctx.spec.data
    splits = [
        example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=buckets)
        for name, buckets in data.splits.items()
    ]
    split_config = example_gen_pb2.SplitConfig(splits=splits)
    if data.split_key:  # even an empty name would count as set in the proto
        split_config.partition_feature_name = data.split_key
    output_config = example_gen_pb2.Output(split_config=split_config)
    spanned: dict[str, Any] = {}
    if data.span_pattern:
        # One input split read from the span's files; ExampleGen's driver substitutes the span
        # and records it (and the files' fingerprint) on the Examples artifact.
        spanned["input_config"] = example_gen_pb2.Input(
            splits=[example_gen_pb2.Input.Split(name="single_split", pattern=data.span_pattern)]
        )
        # Built for Airflow, the range is the DAG run's night (templated below).
        span = 0 if ctx.target is Orchestrator.AIRFLOW and data.dated_spans else ctx.span
        if ctx.target is Orchestrator.KUBEFLOW and span is None:
            spanned["range_config"] = night_parameter()
        elif span is not None:
            spanned["range_config"] = range_config_pb2.RangeConfig(
                static_range=range_config_pb2.StaticRange(
                    start_span_number=span, end_span_number=span
                )
            )
    if data.format is DataFormat.BIGQUERY:
        from tfx.extensions.google_cloud_big_query.example_gen.component import (
            BigQueryExampleGen,
        )

        node = BigQueryExampleGen(query=data.query, output_config=output_config)
        ctx.note(node_id, "TFX's BigQueryExampleGen over data.query")
    elif data.format is DataFormat.TFRECORD:
        from tfx.components import ImportExampleGen

        node = ImportExampleGen(
            input_base=str(ctx.paths.input_dir),
            output_config=output_config,
            **spanned,
        )
    elif data.format is DataFormat.PARQUET:
        from components.parquet_example_gen.component import ParquetExampleGen

        node = ParquetExampleGen(
            input_base=str(ctx.paths.input_dir),
            output_config=output_config,
            required_columns=required_columns(ctx.spec),
            code_version=code_version(),
            **spanned,
        )
    elif use_arrow_reader(ctx.spec, ctx.paths.input_dir, ctx.span):
        from components.arrow_example_gen.component import ArrowCsvExampleGen

        node = ArrowCsvExampleGen(
            input_base=str(ctx.paths.input_dir),
            output_config=output_config,
            bad_rows=data.bad_rows.value,
            required_columns=required_columns(ctx.spec),
            code_version=code_version(),
            **spanned,
        )
    else:
        from components.csv_example_gen.component import CsvExampleGen

        node = CsvExampleGen(
            input_base=str(ctx.paths.input_dir),
            output_config=output_config,
            required_columns=required_columns(ctx.spec),
            code_version=code_version(),
            **spanned,
        )
    if ctx.target is Orchestrator.AIRFLOW and data.dated_spans:
        from pipelines.builder.spans import RANGE_CONFIG_TEMPLATE

        # A placeholder range above makes the component carry the key; Airflow renders the
        # template with the DAG run's night (see pipelines.builder.spans).
        node.exec_properties["range_config"] = RANGE_CONFIG_TEMPLATE
        ctx.note(node_id, "range_config: the span of the DAG run's logical date")
    node = ctx.add(node.with_id(node_id))
    ctx.provide("examples", node.outputs["examples"])
