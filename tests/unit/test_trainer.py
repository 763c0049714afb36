"""The generic trainer builds from spec + schema + statistics, trains, and exports a SavedModel
whose signatures predict from raw values and from serialized tf.Examples."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv

from components.trainer import features as features_lib
from components.trainer import run as run_lib
from tests import toy as toy_data
from tests.toy import SPECIES, TRAINER


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainer")
    described, _, _ = toy_data.make(root)
    return root, described


def test_features_come_from_the_statistics_and_schema(toy):
    _, described = toy
    by_name = {f.name: f for f in described.features}
    assert by_name["mass"].kind == "numeric"
    assert 3000 < by_name["mass"].mean < 6000 and by_name["mass"].std > 100
    assert set(by_name["island"].vocabulary) == {"Biscoe", "Dream", "Torgersen"}
    assert by_name["year"].dtype is features_lib.DType.INT and by_name["year"].hash_buckets == 8
    assert described.label.classes == SPECIES


def test_a_numeric_feature_holding_text_is_refused_naming_it(toy):
    _, described = toy
    frame = toy_data.frame(30)
    stats = tfdv.generate_statistics_from_dataframe(frame)
    schema = tfdv.infer_schema(stats)
    bad = {**TRAINER, "features": [{"name": "island", "kind": "numeric"}]}
    with pytest.raises(features_lib.TrainerConfigError, match="'island' is declared numeric"):
        features_lib.describe(bad, schema, stats)


def test_trains_and_exports_a_model_that_predicts_from_raw_values(toy, tmp_path):
    root, described = toy
    export_dir = str(tmp_path / "model")
    summary = run_lib.train(
        trainer=TRAINER,
        features=described,
        train_files=[str(root / "train.gz")],
        eval_files=[str(root / "eval.gz")],
        serving_model_dir=export_dir,
        model_run_dir=str(tmp_path / "run"),
        train_steps=120,
        eval_steps=3,
    )
    assert summary["replicas"] == 1 and summary["steps"] == 120
    assert summary["metrics"]["val_accuracy"] > 0.9

    loaded = tf.saved_model.load(export_dir)
    serve = loaded.signatures["serving_default"]
    outputs = serve(
        island=tf.constant(["Biscoe", "Dream", ""]),  # "" is a missing value
        mass=tf.constant([3000.0, 4500.0, float("nan")]),
        flipper=tf.constant([180.0, 195.0, 210.0]),
        year=tf.constant([2008, 2009, 2007], tf.int64),
    )
    assert [c.decode() for c in outputs["classes"].numpy()] == list(SPECIES)
    assert outputs["probabilities"].shape == (3, 3)
    np.testing.assert_allclose(outputs["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)

    serialized = [r.numpy() for r in tf.data.TFRecordDataset(str(root / "eval.gz"), "GZIP").take(4)]
    by_example = loaded.signatures["serving_examples"](examples=tf.constant(serialized))
    assert by_example["probabilities"].shape == (4, 3)
    labels = loaded.signatures["transform_features"](examples=tf.constant(serialized))
    parsed = [tf.train.Example.FromString(s) for s in serialized]
    expected = [
        SPECIES.index(p.features.feature["species"].bytes_list.value[0].decode()) for p in parsed
    ]
    assert labels["species_encoded"].numpy().tolist() == expected


def test_unknown_strategy_and_uneven_batch_fail_before_training(toy, tmp_path):
    root, described = toy
    common = dict(
        features=described,
        train_files=[str(root / "train.gz")],
        eval_files=[str(root / "eval.gz")],
        serving_model_dir=str(tmp_path / "m"),
        model_run_dir="",
        train_steps=1,
        eval_steps=1,
    )
    with pytest.raises(features_lib.TrainerConfigError, match="'parameter_servers' is unknown"):
        run_lib.train(trainer={**TRAINER, "distribution": "parameter_servers"}, **common)
    with pytest.raises(features_lib.TrainerConfigError, match="TF_CONFIG is not set"):
        run_lib.train(trainer={**TRAINER, "distribution": "multi_worker"}, **common)
