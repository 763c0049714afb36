"""The nightly loop's parts that need no pipeline run: the crontab entry, backfill's stop on a
missing night, `conveyor data --date`, and the data gate's TFDV drift and skew measurements."""

import datetime
import os
import stat

import pandas as pd
import pytest

from pipelines import cli
from pipelines.builder import spans
from pipelines.ops import nightly
from pipelines.spec.loading import SpecError, load_spec


def test_schedule_prints_a_crontab_line_for_last_nights_span(tmp_path, capsys):
    argv = ["schedule", "taxi", "--workdir", str(tmp_path), "--print"]
    assert cli.main([*argv, "--cron", "30 1 * * *"]) == 0
    zone, line = capsys.readouterr().out.splitlines()
    assert zone == "CRON_TZ=UTC"  # the spec's schedule.timezone (default UTC)
    assert line.startswith("30 1 * * * cd ")
    assert "conveyor run taxi --date yesterday --workdir " + str(tmp_path) in line
    assert line.endswith("# conveyor:taxi")
    assert cli.main(argv) == 0  # without --cron: the spec's schedule.cron
    assert capsys.readouterr().out.splitlines()[1].startswith("0 2 * * * ")


def test_schedule_refuses_a_cron_expression_it_cannot_read(tmp_path, capsys):
    assert cli.main(["schedule", "taxi", "--print", "--cron", "every night"]) == 1
    assert "needs five fields (minute hour day month weekday)" in capsys.readouterr().err


def test_schedule_timezone_must_be_an_iana_name():
    with pytest.raises(SpecError, match=r"schedule.timezone: not an IANA time zone name"):
        load_spec("taxi", overrides=["schedule.timezone=Mars/Olympus_Mons"])
    with pytest.raises(SpecError, match=r"schedule.timezone: not an IANA time zone name"):
        load_spec("taxi", overrides=["schedule.timezone=../../etc/passwd"])


@pytest.fixture
def crontab(tmp_path, monkeypatch):
    """A stand-in `crontab` on PATH that keeps the table in a file (the real one needs a cron
    daemon) and logs its calls. python-crontab runs it too: `-l` to list, a file to install.
    `fail_listing` makes `-l` fail the way an unreadable spool does."""
    table, calls = tmp_path / "table", tmp_path / "calls"
    fake = tmp_path / "bin" / "crontab"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$1" >> {calls}\n'
        'if [ "$1" = "-l" ]; then\n'
        f"  if [ -f {tmp_path}/fail_listing ]; then cat {tmp_path}/fail_listing >&2; exit 1; fi\n"
        f'  if [ ! -f {table} ]; then echo "no crontab for tester" >&2; exit 1; fi\n'
        f"  cat {table}\n"
        f'else cp "$1" {table}; fi\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return table


def test_schedule_installs_once_per_pipeline_keeping_other_entries(tmp_path, crontab):
    others = "MAILTO=ops@example.com\n# backups\n15 3 * * * backup.sh\n@reboot start.sh\n"
    crontab.write_text(others)

    for cron in ("0 2 * * *", "0 4 * * *"):
        assert cli.main(["schedule", "taxi", "--workdir", str(tmp_path), "--cron", cron]) == 0
    assert cli.main(["schedule", "penguin", "--workdir", str(tmp_path)]) == 0
    text = crontab.read_text()
    assert text.startswith(others)  # every other entry, as it was
    ours = [line for line in text.splitlines() if "# conveyor:" in line]
    assert len(ours) == 2  # taxi's was replaced, not added to
    assert ours[0].startswith("0 4 * * * ") and ours[0].endswith("# conveyor:taxi")
    assert ours[1].endswith("# conveyor:penguin")


def test_schedule_installs_into_an_empty_crontab(tmp_path, crontab):
    assert cli.main(["schedule", "taxi", "--workdir", str(tmp_path)]) == 0  # "no crontab for"
    lines = crontab.read_text().splitlines()
    assert lines[0] == "CRON_TZ=UTC" and lines[1].endswith("# conveyor:taxi")


@pytest.mark.parametrize("why", ["crontab: cannot open /var/spool/cron: Permission denied", ""])
def test_schedule_leaves_the_crontab_alone_when_it_cannot_be_read(why, tmp_path, crontab, capsys):
    crontab.write_text("15 3 * * * backup.sh\n")
    (tmp_path / "fail_listing").write_text(why)

    assert cli.main(["schedule", "taxi", "--workdir", str(tmp_path)]) == 1
    assert "`crontab -l` failed" in capsys.readouterr().err
    assert crontab.read_text() == "15 3 * * * backup.sh\n"
    assert (tmp_path / "calls").read_text() == "-l\n"  # nothing was written
    with pytest.raises(nightly.CrontabError, match="the crontab was left as it is"):
        nightly.install_crontab(nightly.cron_entry("taxi", "0 2 * * *", None, tmp_path))


def test_schedule_refuses_a_crontab_with_a_line_it_would_disable(tmp_path, crontab, capsys):
    crontab.write_text("15 3 * * * backup.sh\nthis is not a cron line\n")
    assert cli.main(["schedule", "taxi", "--workdir", str(tmp_path)]) == 1
    assert "cannot parse 'this is not a cron line'" in capsys.readouterr().err
    assert crontab.read_text() == "15 3 * * * backup.sh\nthis is not a cron line\n"


def test_the_schedules_time_zone_reaches_the_crontab_and_the_orchestrators(tmp_path, crontab):
    from pipelines.run.kubeflow import schedule_description

    berlin = ["--set", "schedule.timezone=Europe/Berlin"]
    assert cli.main(["schedule", "taxi", "--workdir", str(tmp_path), *berlin]) == 0
    zone, line = crontab.read_text().splitlines()
    assert zone == "CRON_TZ=Europe/Berlin"
    # The nightly run loads the spec that was scheduled, so "yesterday" is Berlin's too.
    assert "--set schedule.timezone=Europe/Berlin >> " in line

    spec = load_spec("taxi", overrides=["schedule.timezone=Europe/Berlin"]).spec
    vertex = schedule_description(spec, "taxi.json")["vertex_schedule"]
    assert vertex["cron"] == "TZ=Europe/Berlin 0 2 * * *"


def test_yesterday_is_the_schedules_zones_yesterday():
    # 23:30 UTC on 30 November is already 1 December in Berlin, still 30 November in UTC, and
    # 15:30 on 30 November in Los Angeles.
    now = datetime.datetime(2026, 11, 30, 23, 30, tzinfo=datetime.timezone.utc)
    assert spans.parse_night("yesterday", now=now) == datetime.date(2026, 11, 29)
    assert spans.parse_night("yesterday", zone="Europe/Berlin", now=now) == datetime.date(
        2026, 11, 30
    )
    assert spans.parse_night("today", zone="America/Los_Angeles", now=now) == datetime.date(
        2026, 11, 30
    )
    early = datetime.datetime(2026, 12, 1, 3, 0, tzinfo=datetime.timezone.utc)
    assert spans.parse_night("yesterday", zone="America/Los_Angeles", now=early) == (
        datetime.date(2026, 11, 29)
    )


def test_run_date_yesterday_is_computed_in_the_schedules_zone(tmp_path, capsys):
    from zoneinfo import ZoneInfo

    utc_today = datetime.datetime.now(datetime.timezone.utc).date()
    # One of these is always on another date than UTC (UTC+14 from 10:00 UTC, UTC-11 before
    # 11:00 UTC), so the test tells the zone's yesterday from UTC's at any hour.
    zone = next(
        z
        for z in ("Pacific/Kiritimati", "Pacific/Pago_Pago")
        if datetime.datetime.now(ZoneInfo(z)).date() != utc_today
    )
    yesterday = datetime.datetime.now(ZoneInfo(zone)).date() - datetime.timedelta(days=1)
    argv = ["run", "taxi", "--workdir", str(tmp_path), "--date", "yesterday"]
    assert cli.main([*argv, "--set", f"schedule.timezone={zone}"]) == 1  # no data that night
    assert f"no data for {yesterday.isoformat()} (span " in capsys.readouterr().err


def test_backfill_stops_at_a_night_without_data(tmp_path):
    loaded = load_spec("taxi", env="ci", workdir=tmp_path)
    night = datetime.date(2026, 11, 1)
    done = nightly.backfill(loaded, tmp_path, night, night + datetime.timedelta(days=2), print)
    assert len(done) == 1
    ((first, outcome),) = done
    assert first == night and outcome.outcome == "failed" and outcome.exit_code == 1
    assert "no data for 2026-11-01 (span 20758)" in outcome.message


def test_conveyor_backfill_supervises_each_night_as_conveyor_run_does(tmp_path, monkeypatch):
    """Each night with data goes to `run_night` with `supervised=True`: a night killed by a
    signal ends FAILED with its summary and alert (tests/faults/test_supervisor.py proves the
    supervised run itself)."""
    for night in ("2026-11-01", "2026-11-02"):
        argv = ["data", "taxi", "--workdir", str(tmp_path), "--date", night]
        assert cli.main(argv) == 0
    asked = []

    def run_night(planned, force=False, echo=print, supervised=False):
        asked.append((planned.span, supervised))
        return nightly.NightOutcome(planned.span, "not_pushed", "stand-in", unchanged=False)

    monkeypatch.setattr(nightly, "run_night", run_night)
    argv = ["backfill", "taxi", "--workdir", str(tmp_path), "--env", "ci"]
    assert cli.main([*argv, "--from", "2026-11-01", "--to", "2026-11-02"]) == 0
    assert asked == [(20758, True), (20759, True)]


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
