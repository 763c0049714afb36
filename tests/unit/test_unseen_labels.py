"""A label value the model's classes do not include weighs 0: it is counted and reported, by
split and by value, never silently dropped."""

import json

import numpy as np
import tensorflow as tf

from components.trainer import features as features_lib
from components.trainer import model as model_lib
from components.trainer import run as run_lib
from components.trainer.features import (
    UNSEEN_LABELS_FILE,
    DType,
    FeatureInfo,
    FeatureSet,
    LabelInfo,
)
from tests import toy
from tests.toy import SPECIES

MASS = FeatureInfo("mass", "numeric", DType.FLOAT, mean=4500.0, std=900.0)


def _species_features() -> FeatureSet:
    return FeatureSet((MASS,), LabelInfo("species", "classification", DType.STRING, SPECIES))


def _write(tmp_path, name, data) -> str:
    path = str(tmp_path / name)
    toy.write_examples(data, path)
    return path


def test_unseen_and_missing_text_labels_are_counted_by_split_and_value(tmp_path):
    train = toy.frame(48)[["species", "mass"]]
    evaluation = toy.frame(30)[["species", "mass"]].astype(object)
    evaluation.loc[[2, 5, 9], "species"] = "Emperor"
    evaluation.loc[[11], "species"] = "Macaroni"
    evaluation.loc[[13, 17], "species"] = None  # no label at all: weighs 0 too
    features = _species_features()
    counts = run_lib.count_unseen_labels(
        {
            "train": [_write(tmp_path, "train.gz", train)],
            "eval": [_write(tmp_path, "e.gz", evaluation)],
        },
        features,
        model_lib.Preprocessor(features),
        batch_size=8,  # several batches, one of them partial
    )
    assert counts == {
        "train": {"rows": 48, "without_label": 0, "unseen": {}},
        "eval": {"rows": 30, "without_label": 2, "unseen": {"Emperor": 3, "Macaroni": 1}},
    }


def test_an_integer_label_outside_the_classes_is_unknown_and_counted(tmp_path):
    import pandas as pd

    label = LabelInfo("tier", "classification", DType.INT, ("0", "1", "2"))
    features = FeatureSet((MASS,), label)
    preprocessor = model_lib.Preprocessor(features)
    encoded = preprocessor.encode_label(tf.constant([0, 2, 3, 7, -1], tf.int64))
    assert encoded.numpy().tolist() == [0, 2, -1, -1, -1]  # weighs 0, never indexes past 2

    data = pd.DataFrame({"tier": [0, 1, 2, 3, 7, 7, 1], "mass": np.linspace(3000, 5000, 7)})
    counts = run_lib.count_unseen_labels(
        {"eval": [_write(tmp_path, "eval.gz", data)]}, features, preprocessor
    )
    assert counts == {"eval": {"rows": 7, "without_label": 0, "unseen": {"7": 2, "3": 1}}}


def test_regression_has_no_classes_to_miss(tmp_path):
    label = LabelInfo("mass", "regression", DType.FLOAT)
    features = FeatureSet((), label)
    data = toy.frame(10)[["mass"]]
    assert (
        run_lib.count_unseen_labels(
            {"eval": [_write(tmp_path, "eval.gz", data)]},
            features,
            model_lib.Preprocessor(features),
        )
        == {}
    )


def test_training_writes_the_counts_beside_its_summary_and_logs_them(tmp_path, caplog):
    train = toy.frame(64)[["species", "mass"]]
    evaluation = toy.frame(32)[["species", "mass"]].astype(object)
    evaluation.loc[[1, 4], "species"] = "Emperor"
    run_dir = tmp_path / "run"
    with caplog.at_level("WARNING", logger="absl"):
        summary = run_lib.train(
            trainer={**toy.TRAINER, "features": [{"name": "mass", "kind": "numeric"}]},
            features=_species_features(),
            train_files=[_write(tmp_path, "train.gz", train)],
            eval_files=[_write(tmp_path, "eval.gz", evaluation)],
            serving_model_dir=str(tmp_path / "model"),
            model_run_dir=str(run_dir),
            train_steps=2,
            eval_steps=1,
        )
    assert summary["unseen_labels"] == {"train": {}, "eval": {"Emperor": 2}}
    written = json.loads((run_dir / UNSEEN_LABELS_FILE).read_text())
    assert written == {
        "label": "species",
        "classes": list(SPECIES),
        "splits": {
            "train": {"rows": 64, "without_label": 0, "unseen": {}},
            "eval": {"rows": 32, "without_label": 0, "unseen": {"Emperor": 2}},
        },
    }
    assert "2 rows of the eval split have a value the model's classes do not include" in (
        caplog.text
    )
    assert "'Emperor' (2)" in caplog.text


def test_the_statistics_count_text_labels_without_reading_the_examples(tmp_path):
    import tensorflow_data_validation as tfdv

    evaluation = toy.frame(30)[["species", "mass"]].astype(object)
    evaluation.loc[[2, 5, 9], "species"] = "Emperor"
    evaluation.loc[[13, 17], "species"] = None
    statistics = {"eval": tfdv.generate_statistics_from_dataframe(evaluation)}
    features = _species_features()
    expected = {"eval": {"rows": 30, "without_label": 2, "unseen": {"Emperor": 3}}}
    counted = run_lib.count_unseen_labels(
        {"eval": [str(tmp_path / "never-read-*.gz")]},  # no such files: the statistics answer
        features,
        model_lib.Preprocessor(features),
        statistics,
    )
    assert counted == expected
    # The examples, read, say the same.
    read = run_lib.count_unseen_labels(
        {"eval": [_write(tmp_path, "eval.gz", evaluation)]},
        features,
        model_lib.Preprocessor(features),
    )
    assert read == expected


def test_integer_labels_outside_the_classes_are_counted_from_the_examples(tmp_path):
    import pandas as pd
    import tensorflow_data_validation as tfdv

    features = FeatureSet((MASS,), LabelInfo("tier", "classification", DType.INT, ("0", "1")))
    inside = pd.DataFrame({"tier": [0, 1, 1, 0], "mass": [1.0, 2.0, 3.0, 4.0]})
    outside = pd.DataFrame({"tier": [0, 1, 4, 4], "mass": [1.0, 2.0, 3.0, 4.0]})
    assert features_lib.label_counts(
        features.label, tfdv.generate_statistics_from_dataframe(inside)
    ) == {"rows": 4, "without_label": 0, "unseen": {}}
    # The statistics know a value lies outside, not how many rows hold which: the files do.
    assert (
        features_lib.label_counts(features.label, tfdv.generate_statistics_from_dataframe(outside))
        is None
    )
    counted = run_lib.count_unseen_labels(
        {"train": [_write(tmp_path, "train.gz", outside)]},
        features,
        model_lib.Preprocessor(features),
        {"train": tfdv.generate_statistics_from_dataframe(outside)},
    )
    assert counted == {"train": {"rows": 4, "without_label": 0, "unseen": {"4": 2}}}
