"""Conveyor's trainer with team code: a `build_model` hook trains mirrored on two logical CPUs
and keeps the raw-value serving signature; a text column is embedded by a local SavedModel that
the export carries along; a hook that fails is named."""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from components.trainer import model as model_lib
from components.trainer import run as run_lib
from components.trainer.features import TrainerConfigError
from tests import toy
from tests.user_code import bag_of_chars

REPO = Path(__file__).resolve().parents[2]
HOOK = "tests.user_code.residual"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    toy.make(root)
    return root


def test_build_model_hook_trains_mirrored_on_two_cpus_and_serves_raw_rows(data, tmp_path):
    overrides = {
        "module": HOOK,
        "config": {"width": 12},
        "distribution": "mirrored",
        "devices": ["/cpu:0", "/cpu:1"],
        "train_steps": 30,
    }
    export = tmp_path / "model"
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.trainer_harness",
            str(data),
            str(export),
            json.dumps(overrides),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    summary = json.loads(process.stdout.strip().splitlines()[-1])
    assert summary["replicas"] == 2 and summary["strategy"] == "MirroredStrategy"
    assert summary["metrics"]["loss"] < summary["initial_loss"]

    weights = np.load(export / "assets.extra" / model_lib.WEIGHTS_FILE)
    shapes = [weights[f"arr_{i}"].shape for i in range(len(weights.files))]
    # The team's residual block of width 12 (two dense layers), then Conveyor's 3-class head.
    assert [s[-1] for s in shapes] == [12, 12, 12, 12, 3, 3]
    loaded = tf.saved_model.load(str(export))
    outputs = loaded.signatures["serving_default"](
        island=tf.constant(["Biscoe", "Torgersen"]),
        mass=tf.constant([3000.0, 6000.0]),
        flipper=tf.constant([180.0, 210.0]),
        year=tf.constant([2008, 2009], tf.int64),
    )
    assert [c.decode() for c in outputs["classes"].numpy()] == ["Adelie", "Gentoo"]
    record = json.loads((export / "assets.extra" / model_lib.ARCHITECTURE_FILE).read_text())
    assert record["module"] == HOOK  # a warm start from another network is refused


def test_text_column_is_embedded_by_a_local_module_the_export_carries(data, tmp_path):
    module_dir = bag_of_chars.save(str(tmp_path / "embedding"))
    trainer = {
        **toy.TRAINER,
        "features": [
            {"name": "island", "kind": "text", "embedding": {"module": module_dir}},
            {"name": "flipper", "kind": "numeric"},
        ],
    }
    features, train_files, eval_files = toy.load(data, trainer)
    assert features.features[0].kind == "text"
    export = tmp_path / "model"
    summary = run_lib.train(
        trainer=trainer,
        features=features,
        train_files=train_files,
        eval_files=eval_files,
        serving_model_dir=str(export),
        model_run_dir="",
        train_steps=40,
        eval_steps=2,
    )
    assert summary["metrics"]["accuracy"] > 0.6
    shutil.rmtree(module_dir)  # served without the module's folder: the export holds it
    serve = tf.saved_model.load(str(export)).signatures["serving_default"]
    outputs = serve(island=tf.constant(["Biscoe", "Dream", ""]), flipper=tf.constant([180.0] * 3))
    probabilities = outputs["probabilities"].numpy()
    assert probabilities.shape == (3, 3) and np.allclose(probabilities.sum(axis=1), 1.0)
    # Same flipper, different text: the embedding reaches the prediction.
    assert not np.allclose(probabilities[0], probabilities[1])


def test_a_text_feature_over_numbers_is_refused(data, tmp_path):
    trainer = {
        **toy.TRAINER,
        "features": [{"name": "mass", "kind": "text", "embedding": {"module": str(tmp_path)}}],
    }
    with pytest.raises(TrainerConfigError, match="'mass' is declared text"):
        toy.load(data, trainer)


def test_a_hook_that_fails_is_named(data, tmp_path, monkeypatch):
    (tmp_path / "team_hooks.py").write_text(
        textwrap.dedent(
            """
            def build_model(inputs, spec):
                raise ValueError("width must be even")
            """
        )
    )
    (tmp_path / "team_broken.py").write_text("import not_installed_anywhere\n")
    (tmp_path / "team_scalar.py").write_text("def build_model(inputs, spec):\n    return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    described = toy.load(data)[0].label
    with pytest.raises(TrainerConfigError, match="trainer.module 'team_broken' failed to import"):
        model_lib.load_build_model("team_broken")
    with pytest.raises(TrainerConfigError, match="build_model raised ValueError: width must"):
        model_lib.build_network(4, described, (), 0.0, model_lib.load_build_model("team_hooks"))
    with pytest.raises(TrainerConfigError, match=r"must return a \[batch, units\] Keras tensor"):
        model_lib.build_network(4, described, (), 0.0, model_lib.load_build_model("team_scalar"))
