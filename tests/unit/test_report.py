"""The run report without a pipeline: what it says when ML Metadata holds nothing, escaping, and
finding a report by run id."""

from pipelines.metadata import NodeRecord
from pipelines.ops.report import find_report, recent_run_ids, write_report
from pipelines.outcome import RunResult
from pipelines.paths import RunPaths
from pipelines.spec.loading import load_spec


def test_a_blocked_run_without_metadata_still_gets_a_report(tmp_path):
    spec = load_spec("penguin", env="ci").spec
    paths = RunPaths(workdir=tmp_path, spec=spec)
    run_dir = paths.runs_dir / "penguin-20261129T020000.000000Z"
    run_dir.mkdir(parents=True)
    result = RunResult(
        run_id=run_dir.name,
        pipeline="penguin",
        outcome="blocked",
        message="Data gate: <island> has 'Atlantis' & more",
        nodes=[NodeRecord("data_gate", "failed", 0.01)],
        run_dir=str(run_dir),
        night="2026-11-28",
        span=3,
        data_gate={
            "passed": False,
            "anomalies": [{"column": "island", "split": "train", "description": "<new value>"}],
            "drift": [
                {
                    "column": "body_mass_g",
                    "measure": "jensen_shannon_divergence",
                    "distance": 0.31,
                    "threshold": 0.1,
                    "breached": True,
                    "against": "span 2",
                }
            ],
            "skew": [],
        },
    )

    report = write_report(result, paths)

    assert report == run_dir / "report.html"
    page = report.read_text()
    assert "Data gate: &lt;island&gt; has &#x27;Atlantis&#x27; &amp; more" in page
    assert "<new value>" not in page and "&lt;new value&gt;" in page
    assert "<td>jensen_shannon_divergence</td>" in page and ">0.31<" in page
    assert 'Training/serving skew</h3><p class="note">not checked' in page
    assert "ML Metadata holds no record of this run" in page
    assert "No evaluation: the run was blocked at the data gate" in page
    assert "The Pusher did not run: serving is unchanged." in page
    assert "<td>night</td><td>2026-11-28</td>" in page
    assert not list(run_dir.glob("*.partial"))


def test_reports_are_found_by_run_id_and_recent_runs_listed_newest_first(tmp_path):
    older = tmp_path / "runs" / "taxi" / "taxi-20261128T020000.000000Z"
    newer = tmp_path / "runs" / "penguin" / "penguin-20261129T020000.000000Z"
    for run_dir in (older, newer):
        run_dir.mkdir(parents=True)
    (newer / "report.html").write_text("<html></html>")
    assert find_report(tmp_path, newer.name) == newer / "report.html"
    assert find_report(tmp_path, older.name) is None  # a run from before reports existed
    assert find_report(tmp_path, "penguin-nope") is None
    assert recent_run_ids(tmp_path) == [newer.name, older.name]
