"""Conveyor's own copy of the raw-TFX penguin reference, written the way TFX's examples write it.

`make bench` (bench/bench_penguin.py) runs this beside `conveyor run penguin` on the same rows and
the same machine, so that its figures are ratios measured in one run. It is TFX's penguin
pipeline as tfx/examples/penguin/penguin_pipeline_local.py builds it with its defaults (no
Tuner): one `create_pipeline` factory over the `tfx.v1` API; CsvExampleGen, StatisticsGen,
SchemaGen, ExampleValidator, Transform and Trainer with the model module the tfx wheel ships
(tfx/examples/penguin/penguin_utils_keras.py, 100 training steps), a LatestBlessedModelStrategy
Resolver, an Evaluator (SparseCategoricalAccuracy at least 0.6 and not below the baseline) and a
Pusher to OUT_DIR/serving; ML Metadata in OUT_DIR/metadata.sqlite, caching on, one Beam worker.
The data is the palmerpenguins CSV without the rows missing a measurement (342 rows).

  python raw_tfx_penguin.py OUT_DIR            # runs the pipeline under OUT_DIR
  python raw_tfx_penguin.py OUT_DIR --reuse    # same OUT_DIR again: an unchanged re-run

Prints 'pipeline_seconds S' (runner time, imports excluded) and 'pushed_versions N'.

The code below this docstring is that of `bench/raw_tfx_penguin.py` in the shared folder beside
the repository, kept here so that a clone runs its benchmarks alone; bench/README.md says why the
two agree and tests/unit/test_bench_references.py checks that they stay the same program.
"""
import os
import sys
import time


def prepare_data(data_dir):
    """Writes the palmerpenguins rows in the columns TFX's penguin module expects."""
    import pandas as pd
    import palmerpenguins

    src = os.path.join(os.path.dirname(palmerpenguins.__file__), 'data', 'penguins.csv')
    df = pd.read_csv(src).dropna(
        subset=['bill_length_mm', 'bill_depth_mm', 'flipper_length_mm', 'body_mass_g'])
    out = pd.DataFrame({
        'species': df['species'].map({'Adelie': 0, 'Chinstrap': 1, 'Gentoo': 2}),
        'culmen_length_mm': df['bill_length_mm'],
        'culmen_depth_mm': df['bill_depth_mm'],
        'flipper_length_mm': df['flipper_length_mm'].astype(float),
        'body_mass_g': df['body_mass_g'].astype(float),
    })
    os.makedirs(data_dir, exist_ok=True)
    out.to_csv(os.path.join(data_dir, 'penguins_processed.csv'), index=False)


def create_pipeline(root, data_dir):
    import tensorflow_model_analysis as tfma
    from tfx import v1 as tfx
    from tfx.examples.penguin import penguin_utils_keras

    module = penguin_utils_keras.__file__
    example_gen = tfx.components.CsvExampleGen(input_base=data_dir)
    stats = tfx.components.StatisticsGen(examples=example_gen.outputs['examples'])
    schema = tfx.components.SchemaGen(statistics=stats.outputs['statistics'],
                                      infer_feature_shape=True)
    validator = tfx.components.ExampleValidator(statistics=stats.outputs['statistics'],
                                                schema=schema.outputs['schema'])
    transform = tfx.components.Transform(examples=example_gen.outputs['examples'],
                                         schema=schema.outputs['schema'], module_file=module)
    trainer = tfx.components.Trainer(
        module_file=module, examples=transform.outputs['transformed_examples'],
        transform_graph=transform.outputs['transform_graph'], schema=schema.outputs['schema'],
        train_args=tfx.proto.TrainArgs(num_steps=100), eval_args=tfx.proto.EvalArgs(num_steps=5))
    resolver = tfx.dsl.Resolver(
        strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id('latest_blessed_model_resolver')
    accuracy = tfma.MetricConfig(
        class_name='SparseCategoricalAccuracy',
        threshold=tfma.MetricThreshold(
            value_threshold=tfma.GenericValueThreshold(lower_bound={'value': 0.6}),
            change_threshold=tfma.GenericChangeThreshold(
                direction=tfma.MetricDirection.HIGHER_IS_BETTER, absolute={'value': -1e-10})))
    eval_config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name='serving_default', label_key='species_xf',
                                    preprocessing_function_names=['transform_features'])],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[accuracy])])
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
        pipeline_name='penguin_raw_tfx', pipeline_root=os.path.join(root, 'pipeline_root'),
        components=[example_gen, stats, schema, validator, transform, trainer, resolver,
                    evaluator, pusher],
        enable_cache=True,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(root, 'metadata.sqlite')),
        beam_pipeline_args=['--direct_num_workers=1'])


def main():
    root = os.path.abspath(sys.argv[1])
    data_dir = os.path.join(root, 'data')
    if '--reuse' not in sys.argv or not os.path.exists(data_dir):
        prepare_data(data_dir)
    from tfx import v1 as tfx

    start = time.perf_counter()
    tfx.orchestration.LocalDagRunner().run(create_pipeline(root, data_dir))
    print(f'pipeline_seconds {time.perf_counter() - start:.1f}')
    serving = os.path.join(root, 'serving')
    print(f'pushed_versions {len(os.listdir(serving)) if os.path.isdir(serving) else 0}')


if __name__ == '__main__':
    main()
