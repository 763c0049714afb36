"""The nightly loop's parts that need no pipeline run: the crontab entry, backfill's stop on a
missing night, `conveyor data --date`, and the data gate's TFDV drift and skew measurements."""

import datetime
import os
import stat

import pandas as pd
import pytest

from pipelines import cli
from pipelines.build import spans
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec


def test_schedule_prints_a_crontab_line_for_last_nights_span(tmp_path, capsys):
    argv = ["schedule", "taxi", "--workdir", str(tmp_path), "--print"]
    assert cli.main([*argv, "--cron", "30 1 * * *"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("30 1 * * * cd ")
    assert "conveyor run taxi --date yesterday --workdir " + str(tmp_path) in line
    assert line.endswith("# conveyor:taxi")
    assert cli.main(argv) == 0  # without --cron: the spec's schedule.cron
    assert capsys.readouterr().out.startswith("0 2 * * * ")


def test_schedule_refuses_a_cron_expression_it_cannot_read(tmp_path, capsys):
    assert cli.main(["schedule", "taxi", "--print", "--cron", "every night"]) == 1
    assert "needs five fields (minute hour day month weekday)" in capsys.readouterr().err


def test_schedule_installs_once_per_pipeline_keeping_other_entries(tmp_path, monkeypatch):
    # A stand-in `crontab` that keeps the table in a file: the real one needs a cron daemon.
    table = tmp_path / "table"
    table.write_text("15 3 * * * backup.sh\n")
    fake = tmp_path / "bin" / "crontab"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nif [ "$1" = "-l" ]; then cat {table}; else cat > {table}; fi\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")

    for cron in ("0 2 * * *", "0 4 * * *"):
        assert cli.main(["schedule", "taxi", "--workdir", str(tmp_path), "--cron", cron]) == 0
    lines = table.read_text().splitlines()
    assert lines[0] == "15 3 * * * backup.sh"
    assert len(lines) == 2 and lines[1].startswith("0 4 * * * ")  # replaced, not added


def test_backfill_stops_at_a_night_without_data(tmp_path):
    loaded = load_spec("taxi", env="ci", workdir=tmp_path)
    night = datetime.date(2026, 11, 1)
    done = nightly.backfill(loaded, tmp_path, night, night + datetime.timedelta(days=2), print)
    assert len(done) == 1
    ((first, outcome),) = done
    assert first == night and outcome.outcome == "failed" and outcome.exit_code == 1
    assert "no data for 2026-11-01 (span 20758)" in outcome.message


def test_data_writes_the_packaged_sample_as_the_nights_span(tmp_path):
    assert cli.main(["data", "taxi", "--workdir", str(tmp_path), "--date", "2026-11-28"]) == 0
    written = tmp_path / "data" / "taxi" / "2026-11-28" / "taxi.csv"
    assert len(pd.read_csv(written)) == 15_002
    spec = load_spec("taxi").spec
    assert spans.available_spans(spec, tmp_path / "data" / "taxi") == [20785]


def _stats(frame):
    import tensorflow_data_validation as tfdv

    return tfdv.generate_statistics_from_dataframe(frame)


def test_gate_measures_drift_and_skew_with_tfdv_and_flags_only_breaches():
    import numpy as np
    import tensorflow_data_validation as tfdv

    from components.data_gate.component import measure, problems_of

    rng = np.random.default_rng(0)
    yesterday = pd.DataFrame(
        {"fare": rng.gamma(2, 6, 3000), "payment_type": rng.choice(["Cash", "Card"], 3000)}
    )
    tonight = yesterday.assign(fare=yesterday["fare"] * 100)  # fares in cents
    schema = tfdv.infer_schema(_stats(yesterday))
    limits = {"fare": 0.25, "payment_type": 0.1}

    drift, skew = measure(
        schema, _stats(tonight), _stats(yesterday), _stats(yesterday), limits, limits
    )
    by_column = {row["column"]: row for row in drift}
    assert by_column["fare"]["measure"] == "Jensen-Shannon" and by_column["fare"]["breached"]
    assert by_column["payment_type"]["measure"] == "L-infinity"
    assert not by_column["payment_type"]["breached"]
    assert {row["column"] for row in skew if row["breached"]} == {"fare"}
    findings = {"anomalies": [], "drift": drift, "skew": skew, "drift_against": "span 1"}
    assert problems_of(findings) == [
        f"fare: drift Jensen-Shannon {by_column['fare']['distance']:.4g} above its threshold "
        "0.25 (against span 1)",
        f"fare: skew Jensen-Shannon {skew[0]['distance']:.4g} above its threshold 0.25 "
        "(against serving data)",
    ]


def test_gate_without_a_previous_span_measures_no_drift():
    import tensorflow_data_validation as tfdv

    from components.data_gate.component import measure

    frame = pd.DataFrame({"fare": [1.0, 2.0, 3.0]})
    schema = tfdv.infer_schema(_stats(frame))
    assert measure(schema, _stats(frame), None, None, {"fare": 0.1}, {}) == ([], [])


@pytest.mark.parametrize("bad", ["2026-13-01", "soon"])
def test_run_refuses_a_date_it_cannot_read(bad, tmp_path, capsys):
    assert cli.main(["run", "taxi", "--workdir", str(tmp_path), "--date", bad]) == 1
    assert f"--date {bad!r}: expected YYYY-MM-DD" in capsys.readouterr().err


def test_a_night_whose_data_never_landed_fails_and_alerts_the_webhook(tmp_path, capsys):
    import http.server
    import json
    import threading

    received = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["CONVEYOR_TEST_HOOK"] = f"http://127.0.0.1:{server.server_port}/"
    try:
        code = cli.main(
            ["run", "taxi", "--workdir", str(tmp_path), "--date", "2026-11-28"]
            + ["--set", "runtime.alert_webhook_env=CONVEYOR_TEST_HOOK"]
        )
    finally:
        del os.environ["CONVEYOR_TEST_HOOK"]
        server.shutdown()
    assert code == 1
    assert "no data for 2026-11-28 (span 20785)" in capsys.readouterr().err
    (alert,) = received
    assert (alert["outcome"], alert["night"], alert["span"]) == ("failed", "2026-11-28", 20785)
    assert alert["reason"].startswith("taxi: no data for 2026-11-28")
