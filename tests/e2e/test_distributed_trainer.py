"""Distribution, precision, XLA, checkpoints and warm start of the generic trainer, on CPU.

Strategies that need logical devices or a cluster run in processes of their own
(tests/trainer_harness.py); the rest run here.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from components.trainer import run as run_lib
from components.trainer.features import TrainerConfigError
from tests import toy

REPO = Path(__file__).resolve().parents[2]
MIRRORED_2CPU = {"distribution": "mirrored", "devices": ["/cpu:0", "/cpu:1"]}


def harness(tmp_path: Path, overrides: dict, name: str = "run", env=None, wait=True):
    toy.make(tmp_path / "data")  # here, once: the harness processes only read it
    command = [
        sys.executable,
        "-m",
        "tests.trainer_harness",
        str(tmp_path / "data"),
        str(tmp_path / name),
        json.dumps(overrides),
    ]
    process = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if not wait:
        return process
    out, err = process.communicate(timeout=300)
    return process.returncode, out, err


def summary_of(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    return root, *toy.make(root)


def _train(data, tmp_path, name="model", steps=40, **overrides):
    root, features, train_files, eval_files = data
    summary = run_lib.train(
        trainer={**toy.TRAINER, **overrides},
        features=features,
        train_files=train_files,
        eval_files=eval_files,
        serving_model_dir=str(tmp_path / name),
        model_run_dir="",
        train_steps=steps,
        eval_steps=2,
        checkpoint_dir=overrides.get("checkpoint_dir"),
        base_model_dir=overrides.get("base_model_dir"),
    )
    return summary, str(tmp_path / name)


def test_mirrored_on_two_cpu_devices_matches_one_device_with_the_same_global_batch(tmp_path):
    code, out, err = harness(tmp_path, {**MIRRORED_2CPU, "batch_size": 32}, "mirrored")
    assert code == 0, err[-2000:]
    mirrored = summary_of(out)
    code, out, err = harness(tmp_path, {"batch_size": 32}, "single")
    assert code == 0, err[-2000:]
    single = summary_of(out)

    assert mirrored["strategy"] == "MirroredStrategy" and mirrored["replicas"] == 2
    assert mirrored["per_replica_batch_size"] == 16 and mirrored["global_batch_size"] == 32
    assert (tmp_path / "mirrored" / "saved_model.pb").is_file()
    loss_m, loss_s = mirrored["metrics"]["loss"], single["metrics"]["loss"]
    assert abs(loss_m - loss_s) <= 0.05 * loss_s + 0.02, (loss_m, loss_s)


def test_batch_not_divisible_by_replicas_fails_before_training(tmp_path):
    code, out, _ = harness(tmp_path, {**MIRRORED_2CPU, "batch_size": 33})
    assert code == 3
    assert out.strip() == (
        "ERROR: trainer.batch_size 33 is the global batch and must divide evenly over 2 replicas"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_workers_train_one_model_and_only_the_chief_exports(tmp_path):
    cluster = {"worker": [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]}
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    workers = [
        harness(
            tmp_path,
            {"distribution": "multi_worker", "batch_size": 32},
            "export",
            env={
                "TF_CONFIG": json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": i}}
                ),
                "TMPDIR": str(scratch),
            },
            wait=False,
        )
        for i in (0, 1)
    ]
    results = [w.communicate(timeout=300) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [e[-2000:] for _, e in results]
    summaries = [summary_of(out) for out, _ in results]
    assert {s["replicas"] for s in summaries} == {2}
    assert {round(s["metrics"]["loss"], 5) for s in summaries} == {
        round(summaries[0]["metrics"]["loss"], 5)
    }  # one model, trained together
    exported = [p for p in tmp_path.rglob("saved_model.pb")]
    assert exported == [tmp_path / "export" / "saved_model.pb"]
    assert not [p for p in scratch.iterdir() if p.name.startswith("conveyor-worker-export-")]


def test_multi_worker_without_tf_config_fails_before_training(tmp_path, monkeypatch, data):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(TrainerConfigError, match="TF_CONFIG is not set"):
        _train(data, tmp_path, distribution="multi_worker")


def _predict(model_dir: str) -> np.ndarray:
    serve = tf.saved_model.load(model_dir).signatures["serving_default"]
    return serve(
        island=tf.constant(["Biscoe", "Dream", ""]),
        mass=tf.constant([3000.0, 4500.0, 6000.0]),
        flipper=tf.constant([180.0, 195.0, 210.0]),
        year=tf.constant([2008, 2009, 2007], tf.int64),
    )["probabilities"].numpy()


def test_xla_predictions_match_the_plain_model(tmp_path, data):
    _, plain = _train(data, tmp_path, "plain", jit_compile=False)
    summary, xla = _train(data, tmp_path, "xla", jit_compile=True)
    assert summary["jit_compile"] is True
    np.testing.assert_allclose(_predict(xla), _predict(plain), atol=2e-3)


def test_mixed_bfloat16_on_cpu_trains_and_exports_float32(tmp_path, data):
    summary, exported = _train(data, tmp_path, mixed_precision=True, gradient_clip_norm=1.0)
    assert summary["precision"] == "mixed_bfloat16"
    assert tf.keras.mixed_precision.global_policy().name == "float32"  # restored afterwards
    outputs = _predict(exported)
    assert outputs.dtype == np.float32
    np.testing.assert_allclose(outputs.sum(axis=1), 1.0, rtol=1e-3)


def test_a_killed_training_resumes_from_its_last_checkpoint(tmp_path):
    overrides = {
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "checkpoint_every_steps": 10,
        "train_steps": 300,
    }
    first = harness(tmp_path, overrides, "model", wait=False)
    progress = tmp_path / "ckpt" / run_lib.PROGRESS_FILE
    deadline = time.monotonic() + 240
    while not progress.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    assert progress.exists(), "the first run never reached a checkpoint"
    assert not (tmp_path / "model" / "saved_model.pb").exists()

    code, out, err = harness(tmp_path, overrides, "model")
    assert code == 0, err[-2000:]
    summary = summary_of(out)
    assert 0 < summary["resumed_from_step"] < 300
    assert summary["steps"] == 300
    assert (tmp_path / "model" / "saved_model.pb").is_file()
    assert not (tmp_path / "ckpt").exists()  # finished: nothing left to resume


def test_warm_start_begins_with_a_lower_loss_than_a_cold_start(tmp_path, data):
    _, first = _train(data, tmp_path, "first", steps=100)
    cold, _ = _train(data, tmp_path, "cold", steps=5)
    warm, _ = _train(data, tmp_path, "warm", steps=5, warm_start=True, base_model_dir=first)
    assert warm["warm_started"] and not cold["warm_started"]
    assert warm["initial_loss"] < cold["initial_loss"]


def test_warm_start_refuses_a_changed_feature_set(tmp_path, data):
    _, first = _train(data, tmp_path, "first", steps=5)
    with pytest.raises(
        TrainerConfigError,
        match=r"warm start refused: .*hidden_units \[16\] -> "
        r"\[8\]",
    ):
        _train(
            data,
            tmp_path,
            "second",
            steps=5,
            hidden_units=[8],
            warm_start=True,
            base_model_dir=first,
        )
