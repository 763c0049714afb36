"""The `multiprocess` profile (Beam's DirectRunner, one worker process per core) runs the taxi
pipeline's data path, and StatisticsGen's statistics are the single-process run's."""

from pathlib import Path

import pytest
from google.protobuf import json_format

from pipelines import cli
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec
from tests.conftest import assert_same_up_to_float_sums, taxi_data_path_spec

SINGLE_PROCESS = 'runtime.beam_args=["--direct_running_mode=in_memory", "--direct_num_workers=1"]'


def _statistics(workdir: Path, spec) -> dict[str, dict]:
    from tensorflow_metadata.proto.v0 import statistics_pb2

    root = RunPaths(workdir, spec).pipeline_root / "statistics_gen" / "statistics"
    found = {}
    for path in sorted(root.glob("*/Split-*/FeatureStats.pb")):
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        stats.ParseFromString(path.read_bytes())
        dataset = json_format.MessageToDict(stats)["datasets"][0]
        # Features come in the order the workers finished them: key them by column.
        dataset["features"] = {"/".join(f["path"]["step"]): f for f in dataset["features"]}
        found[path.parent.name] = dataset
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("beam")
    spec_file = taxi_data_path_spec(tmp)
    results = {}
    for label, overrides in (("multi", []), ("single", [SINGLE_PROCESS])):
        workdir = tmp / label
        argv = ["data", "taxi", "--workdir", str(workdir), "--date", "2026-11-28"]
        assert cli.main(argv) == 0
        loaded = load_spec(str(spec_file), env="multiprocess", overrides=overrides)
        result = nightly.run(loaded, workdir, echo=lambda line: None)
        results[label] = (loaded.spec, result, _statistics(workdir, loaded.spec))
    return results


def test_the_multiprocess_profile_runs_beam_in_worker_processes(runs):
    spec, result, statistics = runs["multi"]
    assert spec.runtime.beam_runner == "DirectRunner"
    assert "--direct_running_mode=multi_processing" in spec.runtime.beam_args
    states = {n.node_id: n.state for n in result.nodes}
    assert states == {"csv_example_gen": "executed", "statistics_gen": "executed"}, result.message
    assert sorted(statistics) == ["Split-eval", "Split-train"]


def _split_off_quantiles(statistics: dict) -> list[tuple[str, dict, dict]]:
    """Takes the quantile-sketch results (median and both histograms) out of each numeric
    column: TFDV derives them from a mergeable quantiles sketch whose result depends on how the
    workers' partial sketches merge, within the sketch's rank error."""
    taken = []
    for split, dataset in statistics.items():
        for column, feature in dataset["features"].items():
            numbers = feature.get("numStats")
            if numbers is None:
                continue
            quantiles = numbers.pop("histograms", [])
            sketch = {"median": numbers.pop("median", 0.0), "quantiles": quantiles}
            taken.append((f"{split}.{column}", numbers, sketch))
    return taken


def test_statistics_match_the_single_process_run(runs):
    _, _, multi = runs["multi"]
    _, _, single = runs["single"]
    # Sketched: within 1% of the column's range and 1% of its count (TFDV's sketch error).
    for (where, numbers, sketch), (_, _, other) in zip(
        _split_off_quantiles(multi), _split_off_quantiles(single), strict=True
    ):
        spread = numbers.get("max", 0.0) - numbers.get("min", 0.0)
        count = float(numbers["commonStats"].get("numNonMissing", 0))
        assert sketch["median"] == pytest.approx(other["median"], abs=0.01 * spread), where
        for mine, theirs in zip(sketch["quantiles"], other["quantiles"], strict=True):
            for a, b in zip(mine["buckets"], theirs["buckets"], strict=True):
                assert a.get("lowValue", 0.0) == pytest.approx(
                    b.get("lowValue", 0.0), abs=0.01 * spread
                ), where
                assert a.get("highValue", 0.0) == pytest.approx(
                    b.get("highValue", 0.0), abs=0.01 * spread
                ), where
                assert a.get("sampleCount", 0.0) == pytest.approx(
                    b.get("sampleCount", 0.0), abs=0.01 * count
                )
    # Everything else (counts, missing values, min, max, zeros, top values, unique counts,
    # string lengths) exactly; means and standard deviations up to the order of addition.
    counts = {split: int(stats["numExamples"]) for split, stats in single.items()}
    assert sum(counts.values()) == 15002  # the whole shipped sample, one night
    assert_same_up_to_float_sums(multi, single)
