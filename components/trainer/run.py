"""The generic trainer: TFX's `run_fn` entry point and the training loop behind it.

The Trainer component calls `run_fn(fn_args)`; everything it needs comes from the spec (passed in
`custom_config["trainer"]`), the schema, and the training split's statistics (whose path the
Conveyor Trainer's executor adds as `custom_config["statistics_path"]`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras as keras

from components.trainer import model as model_lib
from components.trainer.features import FeatureSet, TrainerConfigError, describe

log = logging.getLogger(__name__)

SUMMARY_FILE = "training_summary.json"


def make_strategy(name: str, jit_compile: bool) -> tf.distribute.Strategy:
    """The tf.distribute strategy a spec names, refusing combinations that cannot work."""
    if name == "default":
        strategy = tf.distribute.get_strategy()
    elif name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    elif name == "multi_worker":
        if not os.environ.get("TF_CONFIG"):
            raise TrainerConfigError(
                "trainer.distribution is 'multi_worker' but TF_CONFIG is not set: each worker "
                "needs TF_CONFIG naming the cluster and its own task"
            )
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        raise TrainerConfigError(
            f"trainer.distribution {name!r} is unknown (known: default, mirrored, multi_worker)"
        )
    replicas = strategy.num_replicas_in_sync
    if jit_compile and replicas > 1 and not tf.config.list_physical_devices("GPU"):
        raise TrainerConfigError(
            f"trainer.jit_compile with {replicas} replicas needs GPUs: XLA has no cross-device "
            "collectives on CPU. Turn jit_compile off or train on one device."
        )
    return strategy


def make_dataset(
    file_patterns: Sequence[str],
    features: FeatureSet,
    preprocessor: model_lib.Preprocessor,
    batch_size: int,
    seed: int,
    shuffle: bool,
) -> tf.data.Dataset:
    """Batches of (network input vector, encoded label) from TFX's gzipped TFRecords."""
    files = tf.data.Dataset.list_files(list(file_patterns), shuffle=False)
    records = tf.data.TFRecordDataset(
        files, compression_type="GZIP", num_parallel_reads=tf.data.AUTOTUNE
    )
    if shuffle:
        records = records.shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
    label_name = features.label.name

    def to_training_pair(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        parsed = model_lib.parse_examples(serialized, features, with_label=True)
        target = preprocessor.encode_label(parsed.pop(label_name))
        vector = preprocessor.vectorize(parsed)
        if features.label.task == "classification":
            known = target >= 0  # rows whose label is missing or unknown teach nothing
            return tf.boolean_mask(vector, known), tf.boolean_mask(target, known)
        return vector, target

    # Batch before parsing: one vectorised parse per batch instead of one per row.
    return (
        records.repeat()
        .batch(batch_size, drop_remainder=True)
        .map(to_training_pair, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in (resolver.cluster_spec().as_dict() or {})
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def train(
    trainer: Mapping[str, Any],
    features: FeatureSet,
    train_files: Sequence[str],
    eval_files: Sequence[str],
    serving_model_dir: str,
    model_run_dir: str,
    train_steps: int,
    eval_steps: int,
) -> dict[str, Any]:
    """Trains the spec's model and exports it; returns the training summary."""
    keras.utils.set_random_seed(int(trainer.get("seed", 42)))
    jit_compile = bool(trainer.get("jit_compile", False))
    strategy = make_strategy(trainer.get("distribution", "default"), jit_compile)
    replicas = strategy.num_replicas_in_sync
    batch_size = int(trainer["batch_size"])
    if batch_size % replicas:
        raise TrainerConfigError(
            f"trainer.batch_size {batch_size} is the global batch and must divide evenly over "
            f"{replicas} replicas"
        )
    log.info(
        "strategy %s, %d replica(s), global batch %d, per-replica batch %d",
        type(strategy).__name__,
        replicas,
        batch_size,
        batch_size // replicas,
    )
    preprocessor = model_lib.Preprocessor(features)
    seed = int(trainer.get("seed", 42))
    train_ds = make_dataset(train_files, features, preprocessor, batch_size, seed, shuffle=True)
    eval_ds = make_dataset(eval_files, features, preprocessor, batch_size, seed, shuffle=False)
    with strategy.scope():
        network = model_lib.build_network(
            preprocessor.width,
            features.label,
            tuple(trainer.get("hidden_units", (32, 16))),
            float(trainer.get("dropout", 0.0)),
        )
        model_lib.compile_network(
            network, features.label, float(trainer["learning_rate"]), jit_compile
        )
    start = time.perf_counter()
    history = network.fit(
        train_ds,
        steps_per_epoch=train_steps,
        epochs=1,
        validation_data=eval_ds,
        validation_steps=eval_steps,
        callbacks=[keras.callbacks.TensorBoard(log_dir=model_run_dir)] if model_run_dir else [],
        verbose=0,
    )
    seconds = time.perf_counter() - start
    metrics = {k: float(v[-1]) for k, v in history.history.items()}
    summary = {
        "steps": train_steps,
        "examples_per_second": round(train_steps * batch_size / seconds, 1),
        "seconds": round(seconds, 2),
        "strategy": type(strategy).__name__,
        "replicas": replicas,
        "global_batch_size": batch_size,
        "metrics": metrics,
    }
    log.info("training summary: %s", summary)

    module = model_lib.ServingModule(features, preprocessor, network)
    if _is_chief(strategy):
        model_lib.export(module, serving_model_dir)
    else:
        # Every worker must take part in saving (it is a collective), but only the chief's
        # copy is the model: the others write to a temporary directory that is then removed.
        scratch = tempfile.mkdtemp(prefix="conveyor-worker-export-")
        try:
            model_lib.export(module, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if model_run_dir:
        tf.io.gfile.makedirs(model_run_dir)
        with tf.io.gfile.GFile(os.path.join(model_run_dir, SUMMARY_FILE), "w") as handle:
            handle.write(json.dumps(summary, indent=2))
    return summary


def _read_inputs(fn_args: Any) -> FeatureSet:
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2
    from tfx.utils import io_utils

    config = fn_args.custom_config or {}
    if not fn_args.schema_path:
        raise TrainerConfigError("the Trainer was given no schema")
    schema = io_utils.parse_pbtxt_file(fn_args.schema_path, schema_pb2.Schema())
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    with tf.io.gfile.GFile(config["statistics_path"], "rb") as handle:
        stats.ParseFromString(handle.read())
    return describe(config["trainer"], schema, stats)


def run_fn(fn_args: Any) -> None:
    """TFX Trainer entry point (`run_fn="components.trainer.run.run_fn"`)."""
    features = _read_inputs(fn_args)
    train(
        trainer=fn_args.custom_config["trainer"],
        features=features,
        train_files=fn_args.train_files,
        eval_files=fn_args.eval_files,
        serving_model_dir=fn_args.serving_model_dir,
        model_run_dir=fn_args.model_run_dir,
        train_steps=fn_args.train_steps,
        eval_steps=fn_args.eval_steps,
    )
