"""Which night a Kubeflow run's ExampleGen reads (pipelines/run/kubeflow_driver.py): the
backfill's range as `conveyor submit --date` sets it, else the night before a scheduled run's
time in the spec's zone, else the newest span; and the compiled job runs that driver first."""

import json

import pytest

from pipelines import cli
from pipelines.builder.spans import range_config_json, span_of_date
from pipelines.run.kubeflow import job_tasks
from pipelines.run.kubeflow_driver import TFX_DRIVER, decide_range, rewritten

NIGHT_25 = range_config_json(20782)  # 2026-11-25


def test_a_backfills_range_is_read_as_it_is():
    decided = decide_range(
        {"range_config": NIGHT_25, "scheduled_at": "2026-11-30T02:00:00Z", "input_base": "x"},
        "UTC",
    )
    assert decided == {"range_config": NIGHT_25, "input_base": "x"}


@pytest.mark.parametrize(
    ("scheduled_at", "zone", "night"),
    [
        ("2026-11-26T02:00:00.123456789Z", "UTC", "2026-11-25"),
        # 02:00 UTC is still the evening before in Los Angeles: yesterday is a day earlier.
        ("2026-11-26T02:00:00Z", "America/Los_Angeles", "2026-11-24"),
        ("2026-11-26T01:00:00Z", "Europe/Berlin", "2026-11-25"),
    ],
)
def test_a_scheduled_run_reads_the_night_before_its_time_in_the_specs_zone(
    scheduled_at, zone, night
):
    import datetime

    decided = decide_range({"range_config": "", "scheduled_at": scheduled_at}, zone)
    span = span_of_date(datetime.date.fromisoformat(night))
    assert decided == {"range_config": range_config_json(span)}


@pytest.mark.parametrize(
    "scheduled_at", ["", "{{$.pipeline_job_schedule_time_utc}}", "1970-01-01T00:00:00Z"]
)
def test_a_run_started_by_hand_reads_the_newest_span(scheduled_at):
    assert decide_range({"range_config": "", "scheduled_at": scheduled_at}, "UTC") == {
        "range_config": ""
    }


def test_the_driver_rewrites_only_the_executor_inputs_parameters():
    executor_input = {
        "inputs": {"parameterValues": {"range_config": "", "scheduled_at": "2026-11-26T02:00Z"}},
        "outputs": {"outputFile": "/gcs/out/executor_output.json"},
    }
    argv = [
        "--timezone=UTC",
        "--json_serialized_invocation_args",
        json.dumps(executor_input),
        "--json_serialized_inputs_spec_args",
        "{}",
        "--direct_num_workers=0",
    ]
    zone, rest = rewritten(argv)
    assert zone == "UTC"
    assert rest[0] == "--json_serialized_invocation_args" and rest[2:] == argv[3:]
    decided = json.loads(rest[1])
    assert decided["inputs"]["parameterValues"] == {"range_config": range_config_json(20782)}
    assert decided["outputs"] == executor_input["outputs"]


@pytest.mark.parametrize(("name", "dated"), [("taxi", True), ("penguin", False)])
def test_the_compiled_job_runs_conveyors_driver_for_dated_spans(name, dated, tmp_path):
    output = tmp_path / f"{name}.json"
    argv = ["compile", name, "--profile", "kubeflow", "--output", str(output)]
    assert cli.main(argv) == 0
    pipeline = json.loads(output.read_text())["pipelineSpec"]
    task = job_tasks(pipeline)["csv_example_gen"]
    component = pipeline["components"][task["componentRef"]["name"]]
    container = pipeline["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
    hook = container["lifecycle"]["preCacheCheck"]["command"]
    if not dated:
        assert hook[-1] == TFX_DRIVER
        assert "scheduled_at" not in task["inputs"]["parameters"]
        return
    assert hook == ["python", "-m", "pipelines.run.kubeflow_driver", "--timezone=UTC"]
    assert task["inputs"]["parameters"]["scheduled_at"] == {
        "runtimeValue": {"constant": "{{$.pipeline_job_schedule_time_utc}}"}
    }
    assert task["inputs"]["parameters"]["range_config"] == {
        "componentInputParameter": "range_config"
    }
