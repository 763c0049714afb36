"""The Arrow reader and TFX's CsvExampleGen agree on the shipped taxi sample: the same examples
in the same splits (missing values included), and the same statistics downstream."""

import glob
import shutil

import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipelines import cli
from pipelines.config import load_spec
from pipelines.runners import local

# Only the data path of the taxi spec: no gate, window or warm start to wire.
DATA_PATH_ONLY = [
    "components=[{type: csv_example_gen}, {type: statistics_gen}]",
    "data.drift={}",
    "data.window_spans=1",
    "trainer.warm_start=false",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    prepared = tmp_path_factory.mktemp("prepared")
    assert cli.main(["data", "taxi", "--workdir", str(prepared)]) == 0  # all 15,002 rows
    roots = {}
    for reader in ("tfx", "arrow"):
        workdir = tmp_path_factory.mktemp(reader)
        shutil.copytree(prepared / "data", workdir / "data")
        loaded = load_spec("taxi", overrides=[f"data.reader={reader}", *DATA_PATH_ONLY])
        result = local.run(loaded, workdir, echo=lambda _: None)
        assert result.ok, result.message
        roots[reader] = workdir / "pipeline_root" / "taxi"
    return roots


def _examples(root, split) -> list[bytes]:
    files = glob.glob(str(root / "csv_example_gen" / "examples" / "*" / f"Split-{split}" / "*"))
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return sorted(
        tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
        for r in records
    )


@pytest.mark.parametrize("split", ["train", "eval"])
def test_same_examples_in_the_same_split(runs, split):
    from_tfx, from_arrow = _examples(runs["tfx"], split), _examples(runs["arrow"], split)
    assert len(from_tfx) > 1000
    assert len(from_arrow) == len(from_tfx)
    assert from_arrow == from_tfx
    # Missing values survive as features without values, e.g. pickup_community_area.
    parsed = [tf.train.Example.FromString(e) for e in from_arrow[:500]]
    assert any(not e.features.feature["pickup_community_area"].int64_list.value for e in parsed)


def _statistics(root, split) -> dict:
    path = glob.glob(str(root / "statistics_gen" / "statistics" / "*" / f"Split-{split}" / "*.pb"))
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(open(path[0], "rb").read())
    dataset = stats.datasets[0]
    summary = {"num_examples": dataset.num_examples}
    for feature in dataset.features:
        name = feature.path.step[0]
        if feature.HasField("num_stats"):
            n = feature.num_stats
            summary[name] = (
                n.common_stats.num_non_missing,
                n.common_stats.num_missing,
                n.min,
                n.max,
                round(n.mean, 6),
                round(n.std_dev, 6),
                n.num_zeros,
            )
        else:
            s = feature.string_stats
            summary[name] = (
                s.common_stats.num_non_missing,
                s.common_stats.num_missing,
                s.unique,
                [(v.value, v.frequency) for v in s.top_values],
            )
    return summary


@pytest.mark.parametrize("split", ["train", "eval"])
def test_same_statistics(runs, split):
    assert _statistics(runs["arrow"], split) == _statistics(runs["tfx"], split)
