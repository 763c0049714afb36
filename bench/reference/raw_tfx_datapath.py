"""Conveyor's own copy of the raw-TFX data-path reference, written the way TFX's examples write it.

`make bench-data` (bench/bench_datapath.py) runs this beside `conveyor run taxi` cut to the same
four components, on the same generated CSV and the same machine. It is TFX's data path as TFX
users run it: CsvExampleGen, StatisticsGen, SchemaGen (schema inferred) and ExampleValidator on
one CSV directory, through the `tfx.v1` API and LocalDagRunner, ML Metadata in
OUT_DIR/metadata.sqlite, caching off (every run executes every component), one Beam worker.

  python raw_tfx_datapath.py CSV_DIR OUT_DIR

Prints 'pipeline_seconds S' (runner time, imports excluded).

The code below this docstring is that of `bench/raw_tfx_datapath.py` in the shared folder beside
the repository, kept here so that a clone runs its benchmarks alone; bench/README.md says why the
two agree and tests/unit/test_bench_references.py checks that they stay the same program.
"""
import sys
import time

from tfx import v1 as tfx


def main():
    data, root = sys.argv[1], sys.argv[2]
    example_gen = tfx.components.CsvExampleGen(input_base=data)
    stats = tfx.components.StatisticsGen(examples=example_gen.outputs['examples'])
    schema = tfx.components.SchemaGen(statistics=stats.outputs['statistics'])
    validator = tfx.components.ExampleValidator(statistics=stats.outputs['statistics'],
                                                schema=schema.outputs['schema'])
    pipeline = tfx.dsl.Pipeline(
        pipeline_name='raw_tfx_datapath', pipeline_root=root + '/pipeline_root',
        components=[example_gen, stats, schema, validator], enable_cache=False,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            root + '/metadata.sqlite'),
        beam_pipeline_args=['--direct_num_workers=1'])
    start = time.perf_counter()
    tfx.orchestration.LocalDagRunner().run(pipeline)
    print(f'pipeline_seconds {time.perf_counter() - start:.1f}')


if __name__ == '__main__':
    main()
