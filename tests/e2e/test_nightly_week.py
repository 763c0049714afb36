"""The simulated week: seven nights of the taxi pipeline, from generated dated spans.

`pipelines/datasets/taxi_nights.py` writes six nights from the taxi sample (normal, normal, fares
in cents, shuffled labels, payment_type missing, normal); `conveyor backfill` runs them in order
with alerts going to a webhook on 127.0.0.1; night seven runs night six again. Everything is
real: TFX components, Beam, the SQLite ML Metadata store, the SavedModels in serving.
"""

import datetime
import http.server
import json
import threading

import pandas as pd
import pytest
import tensorflow as tf

from pipelines import cli
from pipelines.builder import spans
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.datasets.taxi import write_rows
from pipelines.datasets.taxi_nights import DROPPED_COLUMN, LABEL, write_week
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec

FIRST_NIGHT = datetime.date(2026, 11, 23)
ROWS = 2000
WEBHOOK_ENV = "CONVEYOR_TEST_WEBHOOK"
# Retention is part of the story: only the two newest versions stay servable. Skew is measured
# against requests serving logged (normal data, no label).
OVERRIDES = [
    f"runtime.alert_webhook_env={WEBHOOK_ENV}",
    "push.keep_versions=2",
    "data.serving_data_dir=serving_log",
    # Looser than drift: TFDV's approximate Jensen-Shannon on its equal-width histograms put a
    # normal night 0.3 from a normal serving log here; fares in cents are over 0.8 away.
    "data.skew={fare: 0.6, payment_type: 0.1}",
]


class _Alerts(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        length = int(self.headers["Content-Length"])
        self.received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("week")
    server = http.server.HTTPServer(("127.0.0.1", 0), _Alerts)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv(WEBHOOK_ENV, f"http://127.0.0.1:{server.server_port}/alerts")
    loaded = load_spec("taxi", env="ci", overrides=OVERRIDES, workdir=workdir)
    paths = RunPaths(workdir=workdir, spec=loaded.spec)
    plan = write_week(paths.input_dir, FIRST_NIGHT, ROWS)
    logged = write_rows(ROWS, workdir / "serving_log" / "requests.csv", seed=99)
    pd.read_csv(logged).drop(columns=[LABEL]).to_csv(logged, index=False)
    last = plan[-1][0]
    nights = nightly.backfill(loaded, workdir, FIRST_NIGHT, last, echo=lambda _: None)
    yield loaded, paths, plan, dict(nights)
    monkeypatch.undo()
    server.shutdown()


def _night(week, index):
    _, _, plan, nights = week
    return nights[plan[index - 1][0]]


def _summary(outcome) -> dict:
    """The run's summary.json (every night of the backfill ran through the pipeline)."""
    assert outcome.run_dir, outcome.message
    with open(f"{outcome.run_dir}/summary.json") as handle:
        return json.load(handle)


def test_every_night_of_the_week_ran_in_order(week):
    _, _, plan, nights = week
    assert list(nights) == [night for night, _ in plan]
    assert not any(outcome.unchanged for outcome in nights.values())


def test_night_1_normal_is_pushed_as_version_1(week):
    first = _night(week, 1)
    assert (first.outcome, _summary(first)["pushed_version"]) == ("pushed", "1"), first.message
    gate = _summary(first)["data_gate"]
    assert gate["passed"] and gate["drift"] == []  # no earlier span to drift from
    assert {r["column"] for r in gate["skew"]} == {"fare", "payment_type"}
    assert not any(r["breached"] for r in gate["skew"])


def test_night_2_is_compared_with_version_1_and_pushed_if_not_worse(week):
    loaded, paths, _, _ = week
    second = _night(week, 2)
    assert second.outcome in ("pushed", "not_pushed"), second.message
    report = (paths.runs_dir / _summary(second)["run_id"] / "report.html").read_text()
    assert "baseline" in report.lower()  # the served version 1 was the baseline
    if second.outcome == "pushed":
        assert _summary(second)["pushed_version"] == "2"
    else:
        assert "evaluation thresholds" in second.message


def test_night_3_drifted_fares_are_blocked_before_training(week):
    third = _night(week, 3)
    assert third.outcome == "blocked"
    assert "fare: drift Jensen-Shannon" in third.message
    assert "above its threshold 0.25" in third.message
    assert f"against span {spans.span_of_date(FIRST_NIGHT) + 1} (2026-11-24)" in third.message
    summary = _summary(third)
    states = {n["node_id"]: n["state"] for n in summary["nodes"]}
    assert states["data_gate"] == "failed" and "trainer" not in states
    (fare,) = [row for row in summary["data_gate"]["drift"] if row["column"] == "fare"]
    assert fare["breached"] and fare["distance"] > fare["threshold"] == 0.25
    assert fare["against"] == "span 20781 (2026-11-24)"
    # Serving still sends fares in dollars: the training data is skewed from it too.
    assert "fare: skew Jensen-Shannon" in third.message
    assert {r["column"] for r in summary["data_gate"]["skew"] if r["breached"]} == {"fare"}
    # Every compared column is in the report's drift table, breached or not.
    report = (week[1].runs_dir / summary["run_id"] / "report.html").read_text()
    assert all(column in report for column in ("fare", "payment_type", "company"))


def test_night_4_shuffled_labels_train_but_are_not_blessed_or_pushed(week):
    fourth = _night(week, 4)
    assert fourth.outcome == "not_pushed"
    assert "did not pass the evaluation thresholds" in fourth.message
    states = {n["node_id"]: n["state"] for n in _summary(fourth)["nodes"]}
    assert states["trainer"] == "executed" and states["evaluator"] == "executed"


def test_night_5_missing_column_is_blocked_naming_it(week):
    fifth = _night(week, 5)
    assert fifth.outcome == "blocked"
    assert f"{DROPPED_COLUMN} (train split): Column dropped" in fifth.message


def test_blocked_nights_alerted_the_webhook_with_their_reason(week):
    alerts = {a["night"]: a for a in _Alerts.received}
    assert sorted(alerts) == ["2026-11-25", "2026-11-27"]
    assert alerts["2026-11-25"]["outcome"] == "blocked"
    assert "fare" in alerts["2026-11-25"]["reason"]
    assert DROPPED_COLUMN in alerts["2026-11-27"]["reason"]


def test_night_6_normal_is_pushed_and_learns_only_from_good_spans(week):
    loaded, paths, plan, _ = week
    sixth = _night(week, 6)
    assert sixth.outcome == "pushed", sixth.message
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    latest = metadata.pushed_lineage(store, "taxi")[-1]
    assert latest.version == _summary(sixth)["pushed_version"]
    # Window of 3 nights: night 5 was blocked and night 4's model was not blessed, so the
    # only span learned from is night 6's own.
    assert latest.spans == [spans.span_of_date(plan[5][0])]


def test_night_7_reruns_night_6_and_nothing_new_executes(week, capsys):
    loaded, paths, plan, _ = week
    served_before = sorted(p.name for p in paths.serving_dir.iterdir())
    sets = [arg for override in OVERRIDES for arg in ("--set", override)]
    argv = ["run", "taxi", "--env", "ci", "--workdir", str(paths.workdir), *sets]
    night_6 = plan[5][0].isoformat()

    assert cli.main([*argv, "--date", night_6]) == 0
    assert capsys.readouterr().out.startswith("UNCHANGED: ")
    # Through TFX as well: every component is a cache hit and nothing is pushed.
    assert cli.main([*argv, "--date", night_6, "--force"]) == 0
    out = capsys.readouterr().out
    assert "\nNOT_PUSHED: nothing pushed: every component was a cache hit" in out, out
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == served_before
    # A backfill over the whole week skips every night: all are done.
    again = nightly.backfill(loaded, paths.workdir, FIRST_NIGHT, plan[-1][0], echo=lambda _: None)
    assert all(outcome.unchanged for _, outcome in again)


def test_serving_holds_exactly_the_versions_the_story_expects(week):
    loaded, paths, _, nights = week
    pushed = [_summary(o)["pushed_version"] for o in nights.values() if o.outcome == "pushed"]
    assert len(pushed) in (2, 3)  # nights 1 and 6, and night 2 if it was not worse
    assert pushed == [str(v) for v in range(1, len(pushed) + 1)]
    # push.keep_versions=2: the two newest stay; older ones were retired.
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == pushed[-2:]
    model = tf.saved_model.load(str(paths.serving_dir / pushed[-1]))
    assert "serving_default" in model.signatures


def test_metadata_answers_spans_schema_and_code_for_every_pushed_version(week, capsys):
    loaded, paths, plan, nights = week
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    lineage = metadata.pushed_lineage(store, "taxi")
    pushed_nights = [night for night, o in nights.items() if o.outcome == "pushed"]
    assert [entry.version for entry in lineage] == [
        _summary(nights[n])["pushed_version"] for n in pushed_nights
    ]
    for entry, night in zip(lineage, pushed_nights, strict=True):
        assert spans.span_of_date(night) == max(entry.spans)  # trained on that night's span
        assert entry.schema_sha256 and entry.code_version and entry.examples_uris
        assert entry.run_id == _summary(nights[night])["run_id"]
    assert lineage[0].spans == [spans.span_of_date(FIRST_NIGHT)]
    # The command line prints the same answer.
    assert cli.main(["lineage", "taxi", "--env", "ci", "--workdir", str(paths.workdir)]) == 0
    out = capsys.readouterr().out
    assert all(f"version {entry.version}: pushed by run {entry.run_id}" in out for entry in lineage)
