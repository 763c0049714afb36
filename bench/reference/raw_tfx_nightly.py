"""Conveyor's own copy of the raw-TFX nightly reference: one night of taxi retraining in raw TFX.

Written the way TFX's examples write pipelines (tfx/examples/penguin/penguin_pipeline_local.py):
one `create_pipeline` factory over the `tfx.v1` API, run by LocalDagRunner. It is the raw-TFX
counterpart of one night of `conveyor run taxi`, to run on the same CSV and the same machine.
One night is one span directory of CSV files as pipelines/datasets/taxi.py writes them
(big_tipper 0/1 label, missing values as empty fields). The pipeline: CsvExampleGen (train:eval
= 4:1 by hash of trip_start_timestamp), StatisticsGen, SchemaGen, ExampleValidator, Trainer
(module raw_tfx_taxi_module.py beside this file: Keras DNN [32, 16] with its preprocessing inside
the model; no Transform, as Conveyor has none), a LatestBlessedModelStrategy Resolver for the
baseline, Evaluator (BinaryAccuracy >= 0.6 and not more than 0.01 below the baseline, AUC >= 0.7,
gated on the overall slice; also sliced by payment_type) and Pusher to OUT_DIR/serving.

  python raw_tfx_nightly.py OUT_DIR --span-dir NIGHT1_DIR   # night one: no baseline
  python raw_tfx_nightly.py OUT_DIR --span-dir NIGHT2_DIR   # night two: the Evaluator compares
                                                           # with the model blessed on night one
  options: --train-steps 400 --batch-size 128

The same OUT_DIR keeps the pipeline's ML Metadata (OUT_DIR/metadata.sqlite) and artifacts, so a
later night resolves the latest blessed model of the earlier nights as its baseline. The same
--span-dir again takes ExampleGen to Trainer from the cache, but the Resolver now returns that
night's own blessed model, so the Evaluator runs again (the model against itself) and the Pusher
pushes the same model as one more version. Run with TF_USE_LEGACY_KERAS=1 (set here if unset).
Prints 'pipeline_seconds S' (runner time, imports excluded) and 'pushed_versions N' (model
versions in OUT_DIR/serving).

The code below this docstring is that of `bench/raw_tfx_nightly.py` in the shared folder beside
the repository, kept here so that a clone has its references; bench/README.md says why the two
agree and tests/unit/test_bench_references.py checks that they stay the same program.
"""
import argparse
import os
import time

os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')  # TFMA 0.47 evaluates tf_keras models

PIPELINE_NAME = 'taxi_nightly_raw_tfx'
MODULE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'raw_tfx_taxi_module.py')


def create_pipeline(root, span_dir, train_steps=400, batch_size=128):
    import tensorflow_model_analysis as tfma
    from tfx import v1 as tfx

    example_gen = tfx.components.CsvExampleGen(
        input_base=span_dir,
        output_config=tfx.proto.Output(split_config=tfx.proto.SplitConfig(
            splits=[tfx.proto.SplitConfig.Split(name='train', hash_buckets=4),
                    tfx.proto.SplitConfig.Split(name='eval', hash_buckets=1)],
            partition_feature_name='trip_start_timestamp')))
    stats = tfx.components.StatisticsGen(examples=example_gen.outputs['examples'])
    # No feature shapes: every column may be empty on some night, so all are read as sparse and
    # the module fills in missing values.
    schema = tfx.components.SchemaGen(statistics=stats.outputs['statistics'],
                                      infer_feature_shape=False)
    validator = tfx.components.ExampleValidator(statistics=stats.outputs['statistics'],
                                                schema=schema.outputs['schema'])
    trainer = tfx.components.Trainer(
        module_file=MODULE_FILE, examples=example_gen.outputs['examples'],
        schema=schema.outputs['schema'],
        train_args=tfx.proto.TrainArgs(num_steps=train_steps),
        eval_args=tfx.proto.EvalArgs(num_steps=20),
        custom_config={'batch_size': batch_size})
    resolver = tfx.dsl.Resolver(
        strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id('latest_blessed_model_resolver')
    # Thresholds gate the overall slice only (a MetricConfig.threshold would be checked on every
    # payment_type slice too, and a slice of a few rows would block pushes by chance). The change
    # threshold is ignored on the first night, when there is no baseline.
    accuracy = tfma.MetricThreshold(
        value_threshold=tfma.GenericValueThreshold(lower_bound={'value': 0.6}),
        change_threshold=tfma.GenericChangeThreshold(
            direction=tfma.MetricDirection.HIGHER_IS_BETTER, absolute={'value': -0.01}))
    auc = tfma.MetricThreshold(
        value_threshold=tfma.GenericValueThreshold(lower_bound={'value': 0.7}))
    overall = [tfma.SlicingSpec()]
    eval_config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name='serving_default', label_key='big_tipper')],
        slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=['payment_type'])],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            tfma.MetricConfig(class_name='ExampleCount'),
            tfma.MetricConfig(class_name='BinaryAccuracy', per_slice_thresholds=[
                tfma.PerSliceMetricThreshold(slicing_specs=overall, threshold=accuracy)]),
            tfma.MetricConfig(class_name='AUC', per_slice_thresholds=[
                tfma.PerSliceMetricThreshold(slicing_specs=overall, threshold=auc)]),
        ])])
    evaluator = tfx.components.Evaluator(examples=example_gen.outputs['examples'],
                                         model=trainer.outputs['model'],
                                         baseline_model=resolver.outputs['model'],
                                         eval_config=eval_config)
    pusher = tfx.components.Pusher(
        model=trainer.outputs['model'], model_blessing=evaluator.outputs['blessing'],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(
                base_directory=os.path.join(root, 'serving'))))
    return tfx.dsl.Pipeline(
        pipeline_name=PIPELINE_NAME, pipeline_root=os.path.join(root, 'pipeline_root'),
        components=[example_gen, stats, schema, validator, trainer, resolver, evaluator,
                    pusher],
        enable_cache=True,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(root, 'metadata.sqlite')),
        beam_pipeline_args=['--direct_num_workers=1'])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out_dir', metavar='OUT_DIR')
    parser.add_argument('--span-dir', required=True, help="the night's CSV directory")
    parser.add_argument('--train-steps', type=int, default=400)
    parser.add_argument('--batch-size', type=int, default=128)
    args = parser.parse_args()
    root = os.path.abspath(args.out_dir)
    span_dir = os.path.abspath(args.span_dir)
    from tfx import v1 as tfx

    pipeline = create_pipeline(root, span_dir, args.train_steps, args.batch_size)
    start = time.perf_counter()
    tfx.orchestration.LocalDagRunner().run(pipeline)
    print(f'pipeline_seconds {time.perf_counter() - start:.1f}')
    serving = os.path.join(root, 'serving')
    print(f'pushed_versions {len(os.listdir(serving)) if os.path.isdir(serving) else 0}')


if __name__ == '__main__':
    main()
