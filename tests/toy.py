"""A tiny, well separated three-class dataset written as TFX writes examples (gzipped
TFRecords, a missing value as a feature with no values), with its TFDV statistics and schema."""

from pathlib import Path

import numpy as np
import pandas as pd

SPECIES = ("Adelie", "Chinstrap", "Gentoo")
STATS = "stats.pb"
SCHEMA = "schema.pbtxt"
TRAINER = {
    "label": "species",
    "task": "classification",
    "features": [
        {"name": "island", "kind": "categorical"},
        {"name": "mass", "kind": "numeric"},
        {"name": "flipper", "kind": "numeric"},
        {"name": "year", "kind": "categorical", "hash_buckets": 8},
    ],
    "hidden_units": [16],
    "batch_size": 16,
    "learning_rate": 0.05,
    "seed": 3,
}


def frame(rows: int = 240) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    label = rng.integers(0, 3, rows)
    data = pd.DataFrame(
        {
            "species": [SPECIES[i] for i in label],
            "island": [("Biscoe", "Dream", "Torgersen")[i] for i in label],
            "mass": 3000.0 + 1500.0 * label + rng.normal(0, 150, rows),
            "flipper": 180.0 + 15.0 * label + rng.normal(0, 3, rows),
            "year": rng.integers(2007, 2010, rows),
        }
    )
    data.loc[::7, "mass"] = np.nan
    data.loc[::11, "island"] = None
    return data


def write_examples(data: pd.DataFrame, path: str) -> None:
    import tensorflow as tf

    def feature(value) -> tf.train.Feature:
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return tf.train.Feature()  # present with no value, as CsvExampleGen writes it
        if isinstance(value, str):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))
        if isinstance(value, (int, np.integer)):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))
        return tf.train.Feature(float_list=tf.train.FloatList(value=[float(value)]))

    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for row in data.astype(object).itertuples(index=False):
            values = zip(data.columns, row, strict=True)
            example = tf.train.Example(
                features=tf.train.Features(feature={name: feature(v) for name, v in values})
            )
            writer.write(example.SerializeToString())


def make(root: Path, trainer: dict | None = None):
    """Writes the examples, statistics and schema under root (unless there) and describes them.

    Returns (FeatureSet, train files, eval files).
    """
    import tensorflow_data_validation as tfdv

    data = frame()
    root.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.gz", data), ("eval.gz", data.iloc[:60])):
        if not (root / name).exists():  # processes sharing the data reuse it as written
            write_examples(rows, str(root / f".{name}.partial"))
            (root / f".{name}.partial").rename(root / name)
    if not (root / STATS).exists():
        stats = tfdv.generate_statistics_from_dataframe(data)
        (root / SCHEMA).write_text(str(tfdv.infer_schema(stats)))
        (root / STATS).write_bytes(stats.SerializeToString())
    return load(root, trainer)


def load(root: Path, trainer: dict | None = None):
    """Describes data that make() wrote, reading protos only (no TFDV, no Beam: fast)."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

    from components.trainer.features import describe

    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString((root / STATS).read_bytes())
    schema = text_format.Parse((root / SCHEMA).read_text(), schema_pb2.Schema())
    described = describe(trainer or TRAINER, schema, stats)
    return described, [str(root / "train.gz")], [str(root / "eval.gz")]
