"""csv_example_gen: TFX's CsvExampleGen, or the streaming Arrow reader, over the input CSVs."""

from __future__ import annotations

from typing import Any

from pipelines.build.context import BuildContext, code_version, use_arrow_reader
from pipelines.spec.components import Orchestrator


def build(ctx: BuildContext, node_id: str) -> None:
    from tfx.components import CsvExampleGen
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
        if span is not None:
            spanned["range_config"] = range_config_pb2.RangeConfig(
                static_range=range_config_pb2.StaticRange(
                    start_span_number=span, end_span_number=span
                )
            )
    if use_arrow_reader(ctx.spec, ctx.paths.input_dir, ctx.span):
        from components.arrow_example_gen.component import ArrowCsvExampleGen

        node = ArrowCsvExampleGen(
            input_base=str(ctx.paths.input_dir),
            output_config=output_config,
            bad_rows=data.bad_rows.value,
            code_version=code_version(),
            **spanned,
        )
        ctx.columnar_examples = True
    else:
        node = CsvExampleGen(
            input_base=str(ctx.paths.input_dir), output_config=output_config, **spanned
        )
    if ctx.target is Orchestrator.AIRFLOW and data.dated_spans:
        from pipelines.build.spans import RANGE_CONFIG_TEMPLATE

        # A placeholder range above makes the component carry the key; Airflow renders the
        # template with the DAG run's night (see pipelines.build.spans).
        node.exec_properties["range_config"] = RANGE_CONFIG_TEMPLATE
        ctx.note(node_id, "range_config: the span of the DAG run's logical date")
    node = ctx.add(node.with_id(node_id))
    ctx.provide("examples", node.outputs["examples"])
