"""A Kubeflow run's first task (pipelines/run/kubeflow_start.py) and its exit handler
(components/run_finish): which span the run reads, whether its inputs changed since the last
final outcome, the outcome recorded with the fingerprint taken before the run, and an unchanged
night answered UNCHANGED. tests/e2e/test_kubeflow_run.py runs both in the compiled job."""

import datetime
import json

import pytest

from components.run_finish.component import finish_final_status
from pipelines.builder.spans import range_config_json, span_of_date
from pipelines.core import job_lock
from pipelines.core.artifact_files import RUN_INPUTS_FILE
from pipelines.core.paths import RunPaths
from pipelines.run.kubeflow_start import chosen_span, decide_inputs, forced
from pipelines.serving_state.versions import PUSH_RECORD
from pipelines.spec.loading import load_spec

DATED = ["name=penguin_dated", 'data.span_pattern="{YYYY}-{MM}-{DD}/*.csv"']
CREATED = "2026-11-28T02:00:00Z"  # KFP's {{$.pipeline_job_create_time_utc}}
ROWS = "species,island\nAdelie,Biscoe\n"
NIGHT_27, NIGHT_28 = (
    span_of_date(datetime.date(2026, 11, 27)),
    span_of_date(datetime.date(2026, 11, 28)),
)


@pytest.fixture
def dated(tmp_path):
    """A dated penguin spec on the kubeflow profile with two nights' input in place, and the
    SQLite store the exit handlers record pushes in (a lost store re-runs a night)."""
    spec = load_spec("penguin", env="kubeflow", overrides=DATED).spec
    paths = RunPaths(workdir=tmp_path.resolve(), spec=spec)
    for night in ("2026-11-27", "2026-11-28"):
        (paths.input_dir / night).mkdir(parents=True)
        (paths.input_dir / night / "penguins.csv").write_text(ROWS)
    paths.metadata_path.parent.mkdir(parents=True, exist_ok=True)
    paths.metadata_path.touch()
    return paths


def _spec(paths: RunPaths) -> str:
    return json.dumps(paths.spec.to_yaml_dict())


def test_the_span_is_the_jobs_range_else_the_scheduled_night_else_the_newest(dated):

    night_27, night_28 = NIGHT_27, NIGHT_28
    # `conveyor submit --date 2026-11-27` sets the job's range_config: it wins.
    assert chosen_span(dated, range_config_json(night_27), "2026-11-29T01:00:00Z", "UTC") == (
        night_27
    )
    # The proto's own JSON names are read too.
    camel = json.dumps({"staticRange": {"startSpanNumber": night_27, "endSpanNumber": night_27}})
    assert chosen_span(dated, camel, "", "UTC") == night_27
    # A scheduled run reads the night before its schedule time, in the spec's zone: 01:00 UTC
    # on the 29th is still the 28th in Chicago, so its night is the 27th there.
    assert chosen_span(dated, "", "2026-11-29T01:00:00Z", "UTC") == night_28
    assert chosen_span(dated, "", "2026-11-29T01:00:00Z", "America/Chicago") == night_27
    # Started by hand: the newest span on disk, as ExampleGen's driver takes it.
    assert chosen_span(dated, "", "", "UTC") == night_28
    assert chosen_span(dated, "", "1970-01-01T00:00:00Z", "UTC") == night_28
    with pytest.raises(ValueError, match="static_range"):
        chosen_span(dated, json.dumps({"rolling_range": {"num_spans": 1}}), "", "UTC")


def test_a_spec_without_spans_reads_no_span(tmp_path):
    spec = load_spec("penguin", env="kubeflow").spec
    paths = RunPaths(workdir=tmp_path.resolve(), spec=spec)
    assert chosen_span(paths, "", "2026-11-29T01:00:00Z", "UTC") is None


def _succeeded(job: str) -> str:
    return json.dumps({"state": "SUCCEEDED", "pipelineJobResourceName": f"jobs/{job}"})


def _start(paths: RunPaths, job: str, span: int) -> dict:
    """What the first task does, lock and decision, for the run `job`."""
    assert job_lock.take(job_lock.lock_uri(str(paths.runs_dir)), job, 3600) is None
    return decide_inputs(paths, paths.run_dir(job), span)


def _free(lock: str) -> bool:
    """Whether no run holds the lock (a probe takes it and gives it back)."""
    free = job_lock.take(lock, "probe", 60) is None
    job_lock.release(lock, "probe")
    return free


def _push(paths: RunPaths, version: int) -> None:
    folder = paths.serving_dir / str(version)
    folder.mkdir(parents=True)
    (folder / PUSH_RECORD).write_text(
        json.dumps({"version": version, "pushed_at": "2026-11-28T02:31:07Z"})
    )


def test_a_recorded_night_with_the_same_inputs_is_unchanged_and_skipped(dated):
    span, spec, workdir = NIGHT_28, _spec(dated), str(dated.workdir)
    lock = job_lock.lock_uri(str(dated.runs_dir))

    first = _start(dated, "penguin-1", span)
    assert first["unchanged"] is None and first["span"] == span
    assert json.loads((dated.run_dir("penguin-1") / RUN_INPUTS_FILE).read_text()) == first
    _push(dated, 1)  # what the run's Pusher did
    said = finish_final_status(_succeeded("penguin-1"), spec, workdir, CREATED, echo=print)
    assert said == "penguin_dated: the run succeeded; no alert"
    record = json.loads(dated.outcome_record(span).read_text())
    assert (record["run_id"], record["outcome"], record["reason"]) == (
        "penguin-1",
        "pushed",
        "pushed",
    )
    assert record["fingerprint"] == first["fingerprint"]  # taken before the run read anything
    assert _free(lock)

    again = _start(dated, "penguin-2", span)
    assert again["unchanged"]["run_id"] == "penguin-1"
    said = finish_final_status(_succeeded("penguin-2"), spec, workdir, CREATED, echo=print)
    assert said == (
        "penguin_dated: UNCHANGED: same data, spec, schema and code as run penguin-1, which "
        "pushed; nothing executed, nothing pushed (serving version 1)"
    )
    # As a local unchanged night: no report, and the record still names the run it repeats.
    assert not (dated.run_dir("penguin-2") / "report.html").exists()
    assert json.loads(dated.outcome_record(span).read_text())["run_id"] == "penguin-1"
    assert _free(lock)  # released all the same

    # Another night's data is another span's record; this night's rows rewritten a change.
    assert _start(dated, "penguin-3", NIGHT_27)["unchanged"] is None
    job_lock.release(lock, "penguin-3")
    (dated.input_dir / "2026-11-28" / "penguins.csv").write_text(ROWS + "Gentoo,Dream\n")
    assert _start(dated, "penguin-4", span)["unchanged"] is None


def test_a_failed_run_is_not_recorded_and_its_night_runs_again(dated):
    span, spec = NIGHT_28, _spec(dated)
    _start(dated, "penguin-1", span)
    failed = json.dumps(
        {
            "state": "FAILED",
            "error": {"code": 9, "message": "The failed tasks are: [trainer]."},
            "pipelineJobResourceName": "jobs/penguin-1",
        }
    )
    said = finish_final_status(failed, spec, str(dated.workdir), CREATED, echo=print)
    assert said.startswith("penguin_dated: FAILED: ")
    assert not dated.outcome_record(span).exists()
    assert _start(dated, "penguin-2", span)["unchanged"] is None


def test_force_runs_an_unchanged_night_and_records_it_again(dated):
    span, spec = NIGHT_28, _spec(dated)
    _start(dated, "penguin-1", span)
    _push(dated, 1)
    finish_final_status(_succeeded("penguin-1"), spec, str(dated.workdir), CREATED, echo=print)
    assert [forced(v) for v in ("true", "True", "1")] == [True] * 3
    assert not any(forced(v) for v in ("", "false", "no"))

    lock = job_lock.lock_uri(str(dated.runs_dir))
    assert job_lock.take(lock, "penguin-2", 3600) is None
    again = decide_inputs(dated, dated.run_dir("penguin-2"), span, force=True)
    assert again["unchanged"] is None and again["forced"] is True
    said = finish_final_status(_succeeded("penguin-2"), spec, str(dated.workdir), CREATED)
    assert "UNCHANGED" not in said
    # Its final outcome is the night's record now: the next unforced run repeats penguin-2.
    assert json.loads(dated.outcome_record(span).read_text())["run_id"] == "penguin-2"
