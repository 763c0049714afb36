"""Conveyor's StatisticsGen computes small splits in process with TFDV's in-memory API, and
writes exactly what TFX's executor writes through Beam: the same statistics files, the same
artifact properties. Where the in-memory sketches would not be exact, Beam computes them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import tensorflow as tf
from google.protobuf import json_format
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx.components.statistics_gen import executor as tfx_statistics_executor
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs

from components.statistics_gen import executor, in_process
from pipelines.datasets import taxi
from tests.conftest import assert_same_up_to_float_sums
from tests.unit.test_init_command import penguins_csv

SPLITS = ("train", "eval")
# Beam's DirectRunner with worker threads: TFX's own Beam path, never the in-process one.
THROUGH_BEAM = ["--direct_running_mode=multi_threading", "--direct_num_workers=1"]


def write_examples(frame: pd.DataFrame, root: Path) -> standard_artifacts.Examples:
    """The rows as a tf.Example Examples artifact, two thirds train and a third eval, in TFX's
    layout (gzipped TFRecords under Split-<name>/); a missing value is a missing feature."""
    for split in SPLITS:
        (root / f"Split-{split}").mkdir(parents=True)
    writers = {
        split: tf.io.TFRecordWriter(
            str(root / f"Split-{split}" / "data_tfrecord-00000-of-00001.gz"), options="GZIP"
        )
        for split in SPLITS
    }
    for index, row in enumerate(frame.itertuples(index=False)):
        features = {}
        for name, value in zip(frame.columns, row, strict=True):
            if isinstance(value, str):
                features[name] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[value.encode()])
                )
            elif isinstance(value, float):
                if not math.isnan(value):
                    features[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
            else:
                features[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))
        example = tf.train.Example(features=tf.train.Features(feature=features))
        writers["eval" if index % 3 == 2 else "train"].write(example.SerializeToString())
    for writer in writers.values():
        writer.close()
    examples = standard_artifacts.Examples()
    examples.uri = str(root)
    examples.split_names = artifact_utils.encode_split_names(list(SPLITS))
    examples.span = 7
    examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
    return examples


def run_statistics_gen(examples, out: Path, beam_args: list[str]):
    """Runs Conveyor's StatisticsGen executor; returns (artifact, statistics by split)."""
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(out)
    context = base_beam_executor.BaseBeamExecutor.Context(
        beam_pipeline_args=beam_args, tmp_dir=str(out / "tmp")
    )
    executor.Executor(context).Do(
        {standard_component_specs.EXAMPLES_KEY: [examples]},
        {standard_component_specs.STATISTICS_KEY: [statistics]},
        {standard_component_specs.EXCLUDE_SPLITS_KEY: "[]"},
    )
    by_split = {}
    for split in artifact_utils.decode_split_names(statistics.split_names):
        path = Path(artifact_utils.get_split_uri([statistics], split)) / "FeatureStats.pb"
        by_split[split] = statistics_pb2.DatasetFeatureStatisticsList.FromString(path.read_bytes())
    return statistics, by_split


def properties(statistics) -> dict:
    """The artifact's properties TFX's executor sets, as the MLMD artifact records them."""
    recorded = statistics.mlmd_artifact
    custom = dict(recorded.custom_properties)
    custom.pop(executor.COMPUTED_BY_PROPERTY)
    return {
        "split_names": statistics.split_names,
        "span": statistics.span,
        "custom": {name: str(value) for name, value in custom.items()},
    }


def assert_same_statistics(found: dict, expected: dict) -> None:
    """Equal statistics but for the last digits of floating-point sums (means, deviations),
    which Beam adds up batch by batch, in another order than one pass over all rows."""
    assert found.keys() == expected.keys()
    for split in found:
        assert_same_up_to_float_sums(
            json_format.MessageToDict(found[split]),
            json_format.MessageToDict(expected[split]),
            split,
        )


def both_ways(frame: pd.DataFrame, tmp_path: Path):
    examples = write_examples(frame, tmp_path / "examples")
    here = run_statistics_gen(examples, tmp_path / "in_process", [])
    beam = run_statistics_gen(examples, tmp_path / "beam", THROUGH_BEAM)
    return here, beam


@pytest.fixture(scope="module")
def penguins(tmp_path_factory) -> pd.DataFrame:
    return pd.read_csv(penguins_csv(tmp_path_factory.mktemp("penguin")))


@pytest.fixture(scope="module")
def taxi_rows(tmp_path_factory) -> pd.DataFrame:
    return pd.read_csv(taxi.write_rows(3_000, tmp_path_factory.mktemp("taxi") / "taxi.csv", seed=3))


def test_penguin_splits_are_computed_in_process_exactly_as_beam_computes_them(penguins, tmp_path):
    (statistics, found), (beam_statistics, beam_found) = both_ways(penguins, tmp_path)
    assert statistics.get_string_custom_property(executor.COMPUTED_BY_PROPERTY) == (
        executor.COMPUTED_IN_PROCESS
    )
    assert beam_statistics.get_string_custom_property(executor.COMPUTED_BY_PROPERTY) == (
        executor.COMPUTED_ON_BEAM
    )
    assert_same_statistics(found, beam_found)
    assert found["train"].datasets[0].num_examples == math.ceil(len(penguins) * 2 / 3)
    assert properties(statistics) == properties(beam_statistics)
    assert statistics.span == 7
    rates = statistics.get_json_value_custom_property(
        tfx_statistics_executor.SAMPLE_RATE_BY_SPLIT_PROPERTY_NAME
    )
    # TFX stores the JSON text as the JSON value; so does the in-process path.
    assert json.loads(rates) == {"train": 1.0, "eval": 1.0}


def test_taxi_rows_with_a_numeric_spread_and_many_categories_agree_too(taxi_rows, tmp_path):
    (statistics, found), (_, beam_found) = both_ways(taxi_rows, tmp_path)
    assert statistics.get_string_custom_property(executor.COMPUTED_BY_PROPERTY) == (
        executor.COMPUTED_IN_PROCESS
    )
    assert_same_statistics(found, beam_found)
    assert found != beam_found  # the sums' last digits: the comparison above is not vacuous


def test_a_string_feature_beyond_the_sketch_goes_to_beam(taxi_rows, tmp_path):
    """3,000 distinct ids: TFDV's in-memory top-k sketch would only estimate them."""
    with_ids = taxi_rows.assign(trip_id=[f"trip-{i:05d}" for i in range(len(taxi_rows))])
    assert len(with_ids) // 3 * 2 > in_process.MISRA_GRIES_BUCKETS
    (statistics, found), (_, beam_found) = both_ways(with_ids, tmp_path)
    assert statistics.get_string_custom_property(executor.COMPUTED_BY_PROPERTY) == (
        executor.COMPUTED_ON_BEAM
    )
    assert_same_statistics(found, beam_found)


def test_other_runners_and_big_examples_go_to_beam(penguins, tmp_path):
    examples = write_examples(penguins, tmp_path / "examples")
    options = in_process.stats_options_lib.StatsOptions()
    splits = list(SPLITS)
    assert in_process.refusal(examples, splits, options, {}, []) is None
    assert "DirectRunner" in in_process.refusal(examples, splits, options, {}, THROUGH_BEAM)
    assert "DirectRunner" in in_process.refusal(
        examples, splits, options, {}, ["--runner=DataflowRunner"]
    )
    sampled = in_process.stats_options_lib.StatsOptions(sample_rate=0.5)
    assert "sampled" in in_process.refusal(examples, splits, sampled, {}, [])
    sharded = {standard_component_specs.SHARDED_STATS_OUTPUT_KEY: True}
    assert "sharded" in in_process.refusal(examples, splits, options, sharded, [])
    padding = tmp_path / "examples" / "Split-train" / "padding"
    padding.write_bytes(b"\0" * (in_process.MAX_BYTES + 1))
    assert "MiB" in in_process.refusal(examples, splits, options, {}, [])
