"""The generic trainer: TFX's `run_fn` entry point and the training loop behind it.

The Trainer component calls `run_fn(fn_args)`; everything it needs comes from the spec (passed in
`custom_config["trainer"]`), the schema, and the training split's statistics (whose path the
Conveyor Trainer's executor adds as `custom_config["statistics_path"]`, together with a
checkpoint directory that survives a crashed execution).

Distribution is a spec setting: `default` (one device), `mirrored` (all local GPUs, or the
devices the spec names; CPU devices are split into logical devices when needed) and
`multi_worker` (MultiWorkerMirroredStrategy from TF_CONFIG; the chief alone exports). The batch
size is global. Training runs in chunks of `checkpoint_every_steps`, each ending in a
checkpoint (Keras BackupAndRestore), so a killed trainer re-run resumes where it stopped.

Keras' TensorBoard callback writes the training summary into TFX's ModelRun folder
(`fn_args.model_run_dir`): the batch loss and metrics, the validation after each chunk, and,
for `trainer.profile_steps`, a profiler trace of those steps (see docs/monitoring.md).
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

import numpy as np
import tensorflow as tf
import tf_keras as keras
from absl import logging as absl_logging
from tensorflow_metadata.proto.v0 import statistics_pb2

from components.trainer import model as model_lib
from components.trainer.autograph import leave_tf_keras_unconverted
from components.trainer.features import (
    UNSEEN_LABELS_FILE,
    DType,
    FeatureSet,
    TrainerConfigError,
    describe,
    label_counts,
)
from components.trainer.hyperparameters import with_tuned
from components.trainer.parsing import MISSING_INT, MISSING_STRING, parse_examples
from pipelines.core.artifact_files import TRAINING_SUMMARY_FILE
from pipelines.core.failpoints import failpoint

log = logging.getLogger(__name__)

PROGRESS_FILE = "progress.json"  # steps completed, next to the BackupAndRestore checkpoints
LOSS_CURVE_POINTS = 100  # about how many times a training writes its batch loss to the summary


def prepare_devices(trainer: Mapping[str, Any]) -> None:
    """Splits the CPU into the logical devices a mirrored spec names, if it names CPUs.

    Possible only before TensorFlow initialises its devices: a process that trains on several
    CPU devices calls this first.
    """
    count = len([d for d in trainer.get("devices", ()) if "cpu" in d.lower()])
    if count > 1:
        _ensure_cpu_devices(count)


def _ensure_cpu_devices(count: int) -> None:
    cpus = tf.config.list_physical_devices("CPU")  # listing physical devices initialises nothing
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError:
        if len(tf.config.list_logical_devices("CPU")) >= count:
            return  # split already, by an earlier call in this process
        raise TrainerConfigError(
            f"trainer.devices names {count} CPU devices, but TensorFlow was already initialised "
            "with fewer; split the CPU before anything else uses TensorFlow (a fresh process)"
        ) from None


def make_strategy(
    name: str, devices: Sequence[str] = (), jit_compile: bool = False
) -> tf.distribute.Strategy:
    """The tf.distribute strategy a spec names, refusing combinations that cannot work."""
    if name == "default":
        strategy = tf.distribute.get_strategy()
    elif name == "mirrored":
        cpu_devices = [d for d in devices if "cpu" in d.lower()]
        if cpu_devices:
            _ensure_cpu_devices(len(cpu_devices))
        strategy = tf.distribute.MirroredStrategy(devices=list(devices) or None)
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


def precision_policy(mixed_precision: bool) -> str:
    """The Keras dtype policy for training: float32, or mixed precision when asked for.

    Mixed precision is float16 where a GPU is visible and bfloat16 elsewhere, the half type
    that hardware computes fast.
    """
    if not mixed_precision:
        return "float32"
    return "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16"


def make_dataset(
    file_patterns: Sequence[str],
    features: FeatureSet,
    preprocessor: model_lib.Preprocessor,
    batch_size: int,
    seed: int,
    shuffle: bool,
    cache: bool = False,
) -> tf.data.Dataset:
    """Batches of (input vector, target, weight) of one fixed shape from TFX's TFRecords.

    Every batch has the same shape (full batches; a row with a missing or unknown label gets
    weight 0 rather than being dropped, and count_unseen_labels reports those rows), so the
    training step is traced once.
    """
    files = tf.data.Dataset.list_files(list(file_patterns), shuffle=False)
    records = tf.data.TFRecordDataset(
        files, compression_type="GZIP", num_parallel_reads=tf.data.AUTOTUNE
    )
    if cache:
        records = records.cache()
    if shuffle:
        records = records.shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
    label_name = features.label.name
    classification = features.label.task == "classification"

    # Conveyor's own parsing and preprocessing, written for graph mode (no Python branch on a
    # tensor): AutoGraph's rewrite of it through `ast` would only cost time. A team's network
    # is not called here.
    @tf.autograph.experimental.do_not_convert
    def to_training_triple(serialized: tf.Tensor):
        parsed = parse_examples(serialized, features, with_label=True)
        target = preprocessor.encode_label(parsed.pop(label_name))
        vector = preprocessor.vectorize(parsed)
        if classification:
            known = target >= 0
            return vector, tf.where(known, target, 0), tf.cast(known, tf.float32)
        known = tf.logical_not(tf.math.is_nan(target))
        return vector, tf.where(known, target, 0.0), tf.cast(known, tf.float32)

    options = tf.data.Options()
    # Workers split the data by record: TFX may write a single file per split.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # Batch before parsing: one vectorised parse per batch instead of one per row.
    return (
        records.repeat()
        .batch(batch_size, drop_remainder=True)
        .map(to_training_triple, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )


def count_unseen_labels(
    files_by_split: Mapping[str, Sequence[str]],
    features: FeatureSet,
    preprocessor: model_lib.Preprocessor,
    statistics: Mapping[str, statistics_pb2.DatasetFeatureStatisticsList] | None = None,
    batch_size: int = 4096,
) -> dict[str, dict[str, Any]]:
    """Per split: its rows, those without a label, and by value those whose label the model's
    classes do not include. Both kinds weigh 0 in training and in the Trainer's evaluation
    (see make_dataset), so they are counted and reported, never silently dropped.

    The classes come from the training statistics (or a curated schema's domain, or the
    warm-start model's classes): a value first seen in the evaluation split, or tonight's
    values a warm-started model never had, are unseen. A split with `statistics` is counted
    from them (free, whatever the data's size; see features.label_counts); the examples are
    read only where those cannot say (an integer label outside its classes) or for a split
    without statistics. Regression has no classes: {}.
    """
    label = features.label
    if label.task != "classification":
        return {}
    only_label = FeatureSet(features=(), label=label)
    string_label = label.dtype is DType.STRING
    missing_value = MISSING_STRING if string_label else MISSING_INT

    @tf.autograph.experimental.do_not_convert  # graph-mode code: see make_dataset
    def label_and_class(serialized: tf.Tensor):
        raw = parse_examples(serialized, only_label, with_label=True)[label.name]
        return raw, preprocessor.encode_label(raw)

    counts: dict[str, dict[str, Any]] = {}
    for split, patterns in files_by_split.items():
        if statistics and split in statistics:
            from_statistics = label_counts(label, statistics[split])
            if from_statistics is not None:
                counts[split] = from_statistics
                continue
        # A pass over the split's examples, parsing the label only (3.3 s for 150,000 taxi rows
        # on 2 cores, 2026-12-01): only where the statistics cannot say.
        files = tf.data.Dataset.list_files(list(patterns), shuffle=False)
        batches = (
            tf.data.TFRecordDataset(
                files, compression_type="GZIP", num_parallel_reads=tf.data.AUTOTUNE
            )
            .batch(batch_size)
            .map(label_and_class, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        )
        rows = without_label = 0
        unseen: dict[str, int] = {}
        for raw, encoded in batches.as_numpy_iterator():
            rows += len(raw)
            absent = raw == missing_value
            without_label += int(absent.sum())
            values, times = np.unique(raw[(encoded < 0) & ~absent], return_counts=True)
            for value, n in zip(values.tolist(), times.tolist(), strict=True):
                name = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                unseen[name] = unseen.get(name, 0) + n
        counts[split] = {
            "rows": rows,
            "without_label": without_label,
            "unseen": dict(sorted(unseen.items(), key=lambda item: (-item[1], item[0]))),
        }
    return counts


def _report_unseen_labels(label: str, counts: Mapping[str, Mapping[str, Any]]) -> None:
    # Through absl: the runners capture absl's log into the run's log file.
    for split, count in counts.items():
        if count["unseen"]:
            listed = ", ".join(f"{value!r} ({n})" for value, n in count["unseen"].items())
            absl_logging.warning(
                "label %r: %d rows of the %s split have a value the model's classes do not "
                "include, and weigh 0 in training and evaluation: %s",
                label,
                sum(count["unseen"].values()),
                split,
                listed,
            )
        if count["without_label"]:
            absl_logging.warning(
                "label %r: %d rows of the %s split have no label and weigh 0",
                label,
                count["without_label"],
                split,
            )


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process keeps the results: exports the model, writes the summary, clears
    the finished checkpoints (the other workers only join the collective save).

    True without a cluster (one process), for the `chief` task, and for worker 0 of a cluster
    that has no chief task (TensorFlow's convention for multi-worker training).
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in (resolver.cluster_spec().as_dict() or {})
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def summary_every(train_steps: int) -> int:
    """How often (in steps) the training summary records the batch metrics: about
    LOSS_CURVE_POINTS points per training, every step for a short one."""
    return max(1, train_steps // LOSS_CURVE_POINTS)


def profile_batches(profile_steps: Sequence[int] | None, resumed_from: int) -> tuple[int, int]:
    """Keras' `profile_batch` for `trainer.profile_steps` (training steps counted from 1).

    Keras counts the batches of this `fit` from 1, and a resumed training's fit starts after
    `resumed_from` steps: the range is shifted by them, cut where it began before the resume,
    and (0, 0) (no profiling) when it ended before.
    """
    if not profile_steps:
        return (0, 0)
    start, end = (int(step) - resumed_from for step in profile_steps)
    if end < 1:
        return (0, 0)
    return (max(start, 1), end)


def tensorboard_callback(
    model_run_dir: str, train_steps: int, profile: tuple[int, int]
) -> keras.callbacks.TensorBoard:
    """Keras' TensorBoard callback writing the training summary into TFX's ModelRun folder.

    The batch loss and metrics (and steps per second) every `summary_every` steps in `train/`,
    the validation after each chunk in `validation/`, and a profiler trace of the batches
    `profile` (Keras' `profile_batch`; (0, 0): none) under `plugins/profile/`.
    `write_steps_per_second` is also what makes tf_keras call the callback after each batch:
    without it, batch-level summaries are never written.
    """
    return keras.callbacks.TensorBoard(
        log_dir=model_run_dir,
        update_freq=summary_every(train_steps),
        write_steps_per_second=True,
        profile_batch=profile,
    )


def profile_traces(model_run_dir: str) -> list[str]:
    """The profiler traces (`*.xplane.pb`) under a ModelRun folder, oldest first."""
    pattern = os.path.join(model_run_dir, "plugins", "profile", "*", "*.xplane.pb")
    return sorted(tf.io.gfile.glob(pattern))


def warm_start_steps(train_steps: int, trainer: Mapping[str, Any]) -> int:
    """The steps a warm-started training runs: `trainer.warm_start_step_fraction` of
    `train_steps`, at least one."""
    fraction = float(trainer.get("warm_start_step_fraction", 1.0))
    return max(1, round(train_steps * fraction))


def chunk_steps(train_steps: int, checkpoint_every: int) -> int:
    """The largest step count <= checkpoint_every that divides train_steps exactly."""
    for steps in range(min(checkpoint_every, train_steps), 0, -1):
        if train_steps % steps == 0:
            return steps
    return train_steps


class _ProgressRecorder(keras.callbacks.Callback):
    """Writes the steps completed after each checkpointed chunk, so a resume can report it."""

    def __init__(self, path: str, steps_per_chunk: int):
        super().__init__()
        self._path, self._steps = path, steps_per_chunk

    def on_epoch_end(self, epoch, logs=None):
        partial = self._path + ".partial"
        with tf.io.gfile.GFile(partial, "w") as handle:
            handle.write(json.dumps({"steps_done": (epoch + 1) * self._steps}))
        tf.io.gfile.rename(partial, self._path, overwrite=True)
        # The chunk's checkpoint and its step count are both on disk: a kill here is the
        # one a re-run must resume from (tests/faults/test_kill_resume.py).
        failpoint("trainer:after_checkpoint")


def _steps_already_done(checkpoint_dir: str | None) -> int:
    if not checkpoint_dir:
        return 0
    path = os.path.join(checkpoint_dir, PROGRESS_FILE)
    if not tf.io.gfile.exists(path) or not tf.io.gfile.exists(
        os.path.join(checkpoint_dir, "backup")
    ):
        return 0
    with tf.io.gfile.GFile(path) as handle:
        return int(json.loads(handle.read())["steps_done"])


def train(
    trainer: Mapping[str, Any],
    features: FeatureSet,
    train_files: Sequence[str],
    eval_files: Sequence[str],
    serving_model_dir: str,
    model_run_dir: str,
    train_steps: int,
    eval_steps: int,
    checkpoint_dir: str | None = None,
    base_model_dir: str | None = None,
    statistics: Mapping[str, statistics_pb2.DatasetFeatureStatisticsList] | None = None,
) -> dict[str, Any]:
    """Trains the spec's model and exports it; returns the training summary.

    `statistics` (split name -> tonight's statistics of it, "train" and "eval") count the rows
    whose label the model does not know (count_unseen_labels); without them the examples are
    read for it.

    Raises:
      TrainerConfigError: before any training, when the spec cannot be honoured.
    """
    leave_tf_keras_unconverted()  # before anything is traced: see components/trainer/autograph.py
    seed = int(trainer.get("seed", 42))
    keras.utils.set_random_seed(seed)
    jit_compile = bool(trainer.get("jit_compile", False))
    strategy = make_strategy(
        trainer.get("distribution", "default"), tuple(trainer.get("devices", ())), jit_compile
    )
    replicas = strategy.num_replicas_in_sync
    batch_size = int(trainer["batch_size"])
    if batch_size % replicas:
        raise TrainerConfigError(
            f"trainer.batch_size {batch_size} is the global batch and must divide evenly over "
            f"{replicas} replicas"
        )
    learning_rate = float(trainer["learning_rate"])
    if trainer.get("scale_learning_rate"):
        learning_rate *= replicas  # linear scaling: the global batch grew with the replicas
    policy = precision_policy(bool(trainer.get("mixed_precision", False)))
    log.info(
        "strategy %s, %d replica(s), global batch %d, per-replica batch %d, learning rate %g, "
        "precision %s, XLA %s",
        type(strategy).__name__,
        replicas,
        batch_size,
        batch_size // replicas,
        learning_rate,
        policy,
        jit_compile,
    )
    warm_weights = None
    if base_model_dir and trainer.get("warm_start"):
        features, warm_weights = model_lib.read_warm_start(base_model_dir, features, trainer)
        # Decided before the checkpoint chunks are: a resumed run makes the same choice.
        train_steps = warm_start_steps(train_steps, trainer)

    preprocessor = model_lib.Preprocessor(features)
    counted = count_unseen_labels(
        {"train": train_files, "eval": eval_files}, features, preprocessor, statistics
    )
    _report_unseen_labels(features.label.name, counted)
    cache = bool(trainer.get("cache_dataset", False))
    train_ds = make_dataset(
        train_files, features, preprocessor, batch_size, seed, shuffle=True, cache=cache
    )
    eval_ds = make_dataset(
        eval_files, features, preprocessor, batch_size, seed, shuffle=False, cache=cache
    )
    keras.mixed_precision.set_global_policy(policy)
    try:
        with strategy.scope():
            network = compiled_network(trainer, features, preprocessor, learning_rate, jit_compile)
        if warm_weights is not None:
            network.set_weights(warm_weights)
        initial_loss = float(network.evaluate(eval_ds, steps=eval_steps, verbose=0)[0])

        steps_per_chunk = chunk_steps(train_steps, int(trainer.get("checkpoint_every_steps", 100)))
        callbacks: list[keras.callbacks.Callback] = []
        resumed_from = _steps_already_done(checkpoint_dir)
        if checkpoint_dir:
            callbacks += [
                keras.callbacks.BackupAndRestore(os.path.join(checkpoint_dir, "backup")),
                _ProgressRecorder(os.path.join(checkpoint_dir, PROGRESS_FILE), steps_per_chunk),
            ]
        if resumed_from:
            # Through absl: the runners capture absl's log into the run's log file.
            absl_logging.info("resuming from the checkpoint after step %d", resumed_from)
        profile = (0, 0)
        if model_run_dir:
            # Only the chief profiles: every worker of a cluster on one host would write the
            # same trace file.
            if is_chief(strategy):
                profile = profile_batches(trainer.get("profile_steps"), resumed_from)
            callbacks.append(tensorboard_callback(model_run_dir, train_steps, profile))
        start = time.perf_counter()
        history = network.fit(
            train_ds,
            steps_per_epoch=steps_per_chunk,
            epochs=train_steps // steps_per_chunk,
            validation_data=eval_ds,
            validation_steps=eval_steps,
            callbacks=callbacks,
            verbose=0,
        )
        seconds = time.perf_counter() - start
    finally:
        keras.mixed_precision.set_global_policy("float32")

    # The chunks this fit ran (Keras' history lists each epoch it ran, none it restored), so
    # a resumed training shows the steps it trained, not the steps it was asked for.
    trained_steps = len(history.epoch) * steps_per_chunk
    summary = {
        "steps": train_steps,
        "resumed_from_step": resumed_from,
        "trained_steps": trained_steps,
        "examples_per_second": round(trained_steps * batch_size / max(seconds, 1e-9), 1),
        "seconds": round(seconds, 2),
        "strategy": type(strategy).__name__,
        "replicas": replicas,
        "global_batch_size": batch_size,
        "per_replica_batch_size": batch_size // replicas,
        "learning_rate": learning_rate,
        "precision": policy,
        "jit_compile": jit_compile,
        "warm_started": warm_weights is not None,
        "initial_loss": initial_loss,
        "metrics": {k: float(v[-1]) for k, v in history.history.items()},
        # Per split, label value -> rows; the counts in full are in UNSEEN_LABELS_FILE.
        "unseen_labels": {split: count["unseen"] for split, count in counted.items()},
    }
    if profile != (0, 0):
        traces = profile_traces(model_run_dir)
        summary["profile_steps"] = list(trainer["profile_steps"])
        summary["profile_trace"] = traces[-1] if traces else None
        log.info("profiler trace of steps %s: %s", trainer.get("profile_steps"), traces)
    log.info("training summary: %s", summary)

    module = model_lib.ServingModule(features, preprocessor, network)
    if is_chief(strategy):
        model_lib.export(module, serving_model_dir, trainer)
    else:
        # Saving is a collective every worker must join, but only the chief's copy is the
        # model: the others write to a temporary directory that is then removed.
        scratch = tempfile.mkdtemp(prefix="conveyor-worker-export-")
        try:
            model_lib.export(module, scratch, trainer)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if checkpoint_dir and is_chief(strategy):
        shutil.rmtree(checkpoint_dir, ignore_errors=True)  # finished: nothing to resume
    if model_run_dir and is_chief(strategy):
        tf.io.gfile.makedirs(model_run_dir)
        with tf.io.gfile.GFile(os.path.join(model_run_dir, TRAINING_SUMMARY_FILE), "w") as handle:
            handle.write(json.dumps(summary, indent=2))
        with tf.io.gfile.GFile(os.path.join(model_run_dir, UNSEEN_LABELS_FILE), "w") as handle:
            record = {
                "label": features.label.name,
                "classes": list(features.label.classes),
                "splits": counted,
            }
            handle.write(json.dumps(record, indent=2))
    return summary


def _read_statistics(path: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    with tf.io.gfile.GFile(path, "rb") as handle:
        stats.ParseFromString(handle.read())
    return stats


def compiled_network(
    trainer: Mapping[str, Any],
    features: FeatureSet,
    preprocessor: model_lib.Preprocessor,
    learning_rate: float,
    jit_compile: bool,
):
    """The trainer block's network, compiled: the dense stack of `hidden_units` and `dropout`,
    or the team's `build_model` hook in its place when `trainer.module` names one. What the
    Trainer trains and what each of the Tuner's trials trains (components/tuner/generic.py)."""
    body = spec = None
    if trainer.get("module"):
        from pipelines.spec.models import TrainerSpec

        body = model_lib.load_build_model(trainer["module"])
        spec = TrainerSpec.model_validate(trainer)
    network = model_lib.build_network(
        preprocessor.width,
        features.label,
        tuple(trainer.get("hidden_units", (32, 16))),
        float(trainer.get("dropout", 0.0)),
        body=body,
        spec=spec,
    )
    model_lib.compile_network(
        network, features.label, learning_rate, jit_compile, trainer.get("gradient_clip_norm")
    )
    return network


def read_features(fn_args: Any) -> FeatureSet:
    """The features the spec's trainer block describes, from the schema and the train split's
    statistics (`custom_config["statistics_path"]`): what the Trainer and the Tuner's trials
    build their inputs from."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.utils import io_utils

    config = fn_args.custom_config or {}
    if not fn_args.schema_path:
        raise TrainerConfigError("the Trainer was given no schema")
    schema = io_utils.parse_pbtxt_file(fn_args.schema_path, schema_pb2.Schema())
    return describe(config["trainer"], schema, _read_statistics(config["statistics_path"]))


def run_fn(fn_args: Any) -> None:
    """TFX Trainer entry point (`run_fn="components.trainer.run.run_fn"`).

    With a Tuner's (or the last tuned) hyperparameters (`fn_args.hyperparameters`, a
    KerasTuner HyperParameters config), their values replace the spec's."""
    features = read_features(fn_args)
    config = fn_args.custom_config
    trainer = config["trainer"]
    if fn_args.hyperparameters:
        values = fn_args.hyperparameters.get("values", {})
        trainer = with_tuned(trainer, values)
        absl_logging.info("training with the tuned hyperparameters %s", values)
    train(
        trainer=trainer,
        features=features,
        train_files=fn_args.train_files,
        eval_files=fn_args.eval_files,
        serving_model_dir=fn_args.serving_model_dir,
        model_run_dir=fn_args.model_run_dir,
        train_steps=fn_args.train_steps,
        eval_steps=fn_args.eval_steps,
        checkpoint_dir=config.get("checkpoint_dir"),
        base_model_dir=fn_args.base_model,
        statistics={
            split: _read_statistics(path)
            for split, path in config.get("statistics_paths", {}).items()
            if split in ("train", "eval")
        },
    )
