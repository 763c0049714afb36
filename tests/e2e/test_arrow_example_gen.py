"""The Arrow reader and TFX's CsvExampleGen agree on the shipped taxi sample: the same examples
in the same splits (missing values included), and the same statistics downstream, which for the
Arrow reader Conveyor's StatisticsGen computes from its Parquet copy."""

import glob
import shutil

import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import statistics_pb2

from components.statistics_gen.executor import READ_FROM_PROPERTY, READ_PARQUET, READ_TF_EXAMPLE
from pipelines import cli
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec

# Only the data path of the taxi spec: no gate, window or warm start to wire.
DATA_PATH_ONLY = [
    "components=[{type: csv_example_gen}, {type: statistics_gen}]",
    "data.drift={}",
    "data.window_spans=1",
    "trainer.warm_start=false",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, RunPaths]:
    prepared = tmp_path_factory.mktemp("prepared")
    assert cli.main(["data", "taxi", "--workdir", str(prepared)]) == 0  # all 15,002 rows
    runs = {}
    for reader in ("tfx", "arrow"):
        workdir = tmp_path_factory.mktemp(reader)
        shutil.copytree(prepared / "data", workdir / "data")
        loaded = load_spec("taxi", overrides=[f"data.reader={reader}", *DATA_PATH_ONLY])
        result = nightly.run(loaded, workdir, echo=lambda _: None)
        assert result.ok, result.message
        runs[reader] = RunPaths(workdir, loaded.spec)
    return runs


def _examples(root, split) -> list[bytes]:
    files = glob.glob(str(root / "csv_example_gen" / "examples" / "*" / f"Split-{split}" / "*"))
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return sorted(
        tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
        for r in records
    )


@pytest.mark.parametrize("split", ["train", "eval"])
def test_same_examples_in_the_same_split(runs, split):
    from_tfx = _examples(runs["tfx"].pipeline_root, split)
    from_arrow = _examples(runs["arrow"].pipeline_root, split)
    assert len(from_tfx) > 1000
    assert len(from_arrow) == len(from_tfx)
    assert from_arrow == from_tfx
    # Missing values survive as features without values, e.g. pickup_community_area.
    parsed = [tf.train.Example.FromString(e) for e in from_arrow[:500]]
    assert any(not e.features.feature["pickup_community_area"].int64_list.value for e in parsed)


def _rounded(value):
    """Floats to 10 significant digits: sums in another order differ in the last ones."""
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _statistics(root, split) -> dict:
    """The whole statistics proto (counts, histograms, quantiles, top values...) as a dict."""
    from google.protobuf import json_format

    path = glob.glob(str(root / "statistics_gen" / "statistics" / "*" / f"Split-{split}" / "*.pb"))
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(open(path[0], "rb").read())
    return _rounded(json_format.MessageToDict(stats))


def _read_from(run: RunPaths) -> list[str]:
    """What each statistics artifact in the run's metadata says TFDV read."""
    from pipelines.core.metadata import custom_property, open_store

    store = open_store(run.spec, run.metadata_path)
    return [
        custom_property(a, READ_FROM_PROPERTY)
        for a in store.get_artifacts_by_type("ExampleStatistics")
    ]


@pytest.mark.parametrize("split", ["train", "eval"])
def test_same_statistics(runs, split):
    from_tfx = _statistics(runs["tfx"].pipeline_root, split)
    assert int(from_tfx["datasets"][0]["numExamples"]) > 1000  # int64s are JSON strings
    assert len(from_tfx["datasets"][0]["features"]) == 16  # every column of the sample
    assert _statistics(runs["arrow"].pipeline_root, split) == from_tfx


def test_statistics_of_arrow_examples_are_computed_from_the_parquet_copy(runs):
    assert _read_from(runs["arrow"]) == [READ_PARQUET]
    # TFX's CsvExampleGen leaves no Parquet copy: its tf.Examples are read.
    assert _read_from(runs["tfx"]) == [READ_TF_EXAMPLE]
