"""What a Beam SDK worker in another process needs before it runs Conveyor's stages, imported by
Beam as a plugin: `--beam_plugins=pipelines.core.beam_worker_setup` in `runtime.beam_args`.

Beam's worker (`sdk_worker_main`, which Beam's container boot starts on Dataflow, Flink and Spark,
and `pipelines.core.beam_worker_boot` in a local worker pool) imports every module
`--beam_plugins` names before it takes work. This one registers tensorflow-io's s3:// in the
worker's TensorFlow (`storage.register_tensorflow_filesystems`), so that a stage writing s3://
through TensorFlow (the Arrow reader's work units, TFT, TFMA loading a model) finds it whatever
its own imports are: TFMA and TFT import tensorflow-io themselves, and TFX's executors import
TFT, but a DoFn of a module that imports neither would find no s3://. With it comes the
registration's clean exit: without it a worker that used the S3 plugin aborts as it exits
("pure virtual method called", tensorflow/io#2039), and one boto3 client per configuration for
Beam's own s3:// (`storage.share_beam_s3_clients`), where Beam makes one per call.

The worker's endpoints and region come from its environment (`storage.configure` in the process
that started it, or the cluster's settings), its credentials from its own identity
(docs/data-at-scale.md, "The portable runner").
"""

from __future__ import annotations

import logging
import os

from pipelines.core import storage

storage.register_tensorflow_filesystems()
storage.share_beam_s3_clients()
logging.getLogger(__name__).info(
    "Conveyor: s3:// registered in TensorFlow in Beam SDK worker process %d", os.getpid()
)
