"""The run report's charts (matplotlib to inline SVG) on a taxi-sized run recorded here in a
SQLite ML Metadata store: one chart per feature with the splits and the drift reference
overlaid, the component timings, the page's size budget, unique ids, charts that cannot be
drawn left out; and the JSON event log of `--log-format json`."""

import io
import json
import pickle
import re
import subprocess
import sys

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as mlmd
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipelines.core.events import Event, JsonLog, emit
from pipelines.core.metadata import NodeRecord, connection_config, read_run_artifacts
from pipelines.core.outcome import Outcome, RunResult
from pipelines.core.paths import RunPaths
from pipelines.finish import charts, report
from pipelines.spec.loading import load_spec
from tests.unit.test_report import RUN_ID, _Recorder

NUMERIC = [f"numeric_{i}" for i in range(10)]
TEXT = [f"text_{i}" for i in range(5)]
Type = statistics_pb2.FeatureNameStatistics


def _dataset(stats, examples: int, shift: float, broken: str | None = None):
    """A split's statistics: 10 numeric columns with TFDV's 10-bucket histogram, 5 text ones
    with 20 top values; `broken` names a numeric column whose histogram is unusable."""
    dataset = stats.datasets.add(num_examples=examples)
    for name in NUMERIC:
        feature = dataset.features.add(type=Type.FLOAT)
        feature.path.step.append(name)
        numbers = feature.num_stats
        numbers.common_stats.num_non_missing = examples
        numbers.common_stats.tot_num_values = examples
        numbers.common_stats.max_num_values = 1
        numbers.mean, numbers.min, numbers.max = 5.0 + shift, 0.0 + shift, 10.0 + shift
        histogram = numbers.histograms.add(type=statistics_pb2.Histogram.STANDARD)
        for bucket in range(10):
            low = bucket + shift if name != broken else float("nan")
            histogram.buckets.add(
                low_value=low, high_value=low + 1, sample_count=examples / 10 + bucket
            )
    for name in TEXT:
        feature = dataset.features.add(type=Type.STRING)
        feature.path.step.append(name)
        strings = feature.string_stats
        strings.common_stats.num_non_missing = examples
        strings.common_stats.tot_num_values = examples
        strings.common_stats.max_num_values = 1
        strings.unique = 20
        for value in range(20):
            strings.top_values.add(value=f"<value {value}>", frequency=examples / (value + 2))


def _write(uri, splits: dict[str, tuple[int, float]], broken: str | None = None) -> None:
    for split, (examples, shift) in splits.items():
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        _dataset(stats, examples, shift, broken)
        folder = uri / f"Split-{split}"
        folder.mkdir(parents=True)
        (folder / "FeatureStats.pb").write_bytes(stats.SerializeToString())


NODES = [
    "csv_example_gen",
    "schema_gen",
    "statistics_gen",
    "example_validator",
    "data_gate",
    "trainer",
    "baseline_resolver",
    "evaluator",
    "infra_validator",
    "pusher",
]


@pytest.fixture
def taxi_sized(tmp_path):
    """A taxi-sized run: StatisticsGen's two splits of 15 columns, and a data gate given the
    previous night's statistics as its drift reference."""
    paths = RunPaths(workdir=tmp_path, spec=load_spec("taxi", env="ci").spec)
    store = metadata_store.MetadataStore(connection_config(paths.spec, paths.metadata_path))
    record = _Recorder(store)
    run = record.run(RUN_ID)
    current, previous = tmp_path / "statistics" / "2", tmp_path / "statistics" / "1"
    _write(current, {"train": (3000, 0.0), "eval": (1000, 0.5)}, broken="numeric_9")
    _write(previous, {"train": (2900, 2.0), "eval": (1000, 2.0)}, broken="numeric_9")
    statistics = record.artifact("ExampleStatistics", str(current))
    reference = record.artifact("ExampleStatistics", str(previous))
    record.execute(run, "statistics_gen", mlmd.Execution.COMPLETE, outputs={"s": statistics})
    record.execute(
        run,
        "data_gate",
        mlmd.Execution.COMPLETE,
        inputs={"statistics": statistics, "previous_statistics": reference},
    )
    run_dir = paths.run_dir(RUN_ID)
    run_dir.mkdir(parents=True)
    result = RunResult(
        run_id=RUN_ID,
        pipeline="taxi",
        outcome=Outcome.NOT_PUSHED,
        message="nothing pushed",
        run_dir=str(run_dir),
        nodes=[
            NodeRecord(n, "cached" if i < 3 else "executed", 1.5 * i) for i, n in enumerate(NODES)
        ],
        data_gate={"passed": True, "anomalies": [], "drift": [], "skew": []},
    )
    return paths, result, store


def test_a_taxi_sized_report_draws_each_feature_within_its_size_budget(taxi_sized):
    paths, result, _ = taxi_sized
    written = report.write_report(result, paths)
    page = written.read_text()
    size = written.stat().st_size
    assert size < report.SIZE_BUDGET_BYTES, f"{size:,} bytes"
    titles = re.findall(r'<svg class="chart" role="img" aria-label="([^"]+)"', page)
    # Every column but the one whose histogram is unusable, and the component timings.
    assert titles[0] == "Seconds per component"
    assert sorted(titles[1:]) == sorted(set(NUMERIC + TEXT) - {"numeric_9"})
    assert "<td>numeric_9</td>" in page  # its statistics are still in the table
    # The splits overlaid with the drift reference, dashed in grey.
    assert "the drift reference (split train of statistics artifact" in page
    chart = page[page.index('aria-label="numeric_0"') :]
    chart = chart[: chart.index("</svg>")]
    for colour in (charts.TRAIN, charts.EVAL, charts.REFERENCE):
        assert f"stroke: {colour}" in chart
    assert ">reference</text>" in chart and "stroke-dasharray" in chart
    # A text column's values are escaped as the table's are; nothing that is not inline.
    assert "&lt;value 0&gt;" in page and "<value 0>" not in page
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "<?xml" not in page and "<style" not in page[page.index("</head>") :]
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert ids and len(ids) == len(set(ids))
    for ref in re.findall(r'(?:url\(#|href="#)([^)"]+)', page):
        assert ref in ids


def test_a_chart_that_cannot_be_drawn_is_left_out_and_the_page_stays(taxi_sized):
    paths, result, store = taxi_sized
    renderer = charts.ChartRenderer("t")
    assert renderer.distribution("x", []) is None
    flat = charts.Histogram("train", [1.0, 1.0, 1.0], [3, 4])  # every bucket of width zero
    assert renderer.distribution("x", [flat]) is None
    assert renderer.top_values("x", [charts.Frequencies("train", {})]) is None
    assert renderer.draw("boom", 1, 1, lambda figure, axes: 1 / 0) is None
    nodes = read_run_artifacts(store, RUN_ID)
    page = report.render_report(result, paths, nodes)
    assert "Split train: 3,000 examples" in page


def test_the_report_module_imports_no_matplotlib():
    probe = "import sys, pipelines.finish.report; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_a_text_log_gets_lines_and_a_json_log_gets_events_with_secrets_masked():
    lines: list[str] = []
    emit(lines.append, "component_started", node="trainer")  # no text: nothing for people
    emit(lines.append, "component_finished", "  trainer executed 3.0s", node="trainer")
    assert lines == ["  trainer executed 3.0s"]

    stream = io.StringIO()
    log = JsonLog(stream, redact=lambda text: text.replace("hunter2", "***"))
    emit(log, "component_started", node="trainer")
    emit(log, "verdict", "FAILED: password hunter2 refused", outcome="failed", exit_code=1)
    log("a plain line")
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [r["event"] for r in records] == ["component_started", "verdict", "message"]
    assert records[0]["node"] == "trainer" and "message" not in records[0]
    assert records[1]["message"] == "FAILED: password *** refused"
    assert records[1]["outcome"] == "failed" and records[1]["exit_code"] == 1
    assert records[2]["message"] == "a plain line"
    assert all(r["time"].endswith("Z") for r in records)
    # An event crosses the supervisor's pipe (pickle) with its fields.
    event = pickle.loads(pickle.dumps(Event("text", "push", {"pushed_version": "3"})))
    assert (str(event), event.event, event.fields) == ("text", "push", {"pushed_version": "3"})
