"""The compiled taxi job, executed for the simulated week: `conveyor compile taxi --profile
kubeflow` (with the `ci` profile's sizes and thresholds), run task by task by
tests/kfp_executor.py as Vertex AI would run it, against one bucket folder and one artifact
record.

Each night's span lands in the bucket before its run, as a nightly export would put it there:
2,000 rows a night, the six nights of pipelines/datasets/taxi_nights.py's week (normal, normal,
fares in cents, shuffled labels, payment_type missing, normal). The first night pushes version
1. The second night reads the new span, trains from the served model and is compared with it
(the warm-start and baseline resolvers, which on Kubeflow are Conveyor's ServedModel tasks
reading the serving folder) and is pushed as version 2 when the model gate blesses it. The
rest of the week ends as the local week does (tests/e2e/test_nightly_week.py): the drifted
night blocked at the data gate, the shuffled labels not blessed, the missing column blocked,
the last night pushed. Night 2 run again on its schedule is answered UNCHANGED; exported again,
it runs.

What the compiled job guarantees differs from `conveyor run` (pipelines.spec.components says
so for each resolver): Conveyor's driver decides ExampleGen's range when the run starts: the
newest span for a run started by hand (each night here), the night before the schedule time
for a scheduled run (the last run here); no resolver finds earlier spans: the data gate keeps
a record of the spans it accepts in the workdir and measures drift from the last one, and the
Trainer adds the window's earlier spans whose night was blessed (components/spans/accepted.py).

The exit handler records each night's push in Conveyor's store: the week ends with `conveyor
lineage` and `rollback` on that record.
"""

import datetime
import json
import time
from pathlib import Path

import pandas as pd
import pytest
import tensorflow as tf

from components.baseline.served import SERVED_VERSION_PROPERTY, SERVING_MODEL_FOLDER
from components.spans.accepted import BLESSED_KEY, TRAINED_SPANS_PROPERTY
from pipelines import cli
from pipelines.builder import spans
from pipelines.core.artifact_files import ACCEPTED_SPANS_FOLDER, RUN_INPUTS_FILE
from pipelines.core.paths import RUN_SUMMARY, RunPaths
from pipelines.datasets.taxi_nights import DROPPED_COLUMN, LABEL, WEEK, write_night
from pipelines.run.kubeflow import EXIT_HANDLER_ID, PIPELINE_DAG, job_tasks
from pipelines.serving_state.config_files import current_entry
from pipelines.serving_state.versions import served_versions
from pipelines.spec.loading import load_spec
from tests.kfp_executor import NOT_TRIGGERED, SKIPPED, SUCCEEDED, compile_job, type_title

PIPELINE = "taxi"
FIRST_NIGHT = datetime.date(2026, 11, 23)
ROWS = 2000  # as tests/e2e/test_nightly_week.py's nights
NIGHTS = range(1, len(WEEK) + 1)
SERVED_MODEL_TASKS = ("warm_start_resolver", "baseline_resolver")


def _ci_sizes() -> list[str]:
    """`--set` values giving the Kubeflow job the `ci` profile's sizes, Beam options and model
    gate (configs/ci.yaml: value floors for taxi at these sizes, no change threshold), which
    the local week (tests/e2e/test_nightly_week.py) runs with: the same gates judge both weeks.
    The candidate is still evaluated beside the served model (its baseline metrics)."""
    ci = load_spec(PIPELINE, env="ci").spec
    metrics = [m.model_dump(mode="json", exclude_defaults=True) for m in ci.evaluation.metrics]
    return [
        f"trainer.train_steps={ci.trainer.train_steps}",
        f"trainer.eval_steps={ci.trainer.eval_steps}",
        f"trainer.batch_size={ci.trainer.batch_size}",
        f"evaluation.metrics={json.dumps(metrics)}",
        f"runtime.beam_args={json.dumps(list(ci.runtime.beam_args))}",
    ]


def _write_night(paths: RunPaths, index: int) -> datetime.date:
    """Night `index` (1-based) of the simulated week, as tests/e2e/test_nightly_week.py writes
    it (`write_week`): its span's file in the bucket."""
    night = FIRST_NIGHT + datetime.timedelta(days=index - 1)
    change = WEEK[index - 1]
    write_night(paths.input_dir / night.isoformat() / "taxi.csv", ROWS, seed=index, change=change)
    return night


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """The job compiled once, then run for each night of the simulated week, each after its
    span landed."""
    tmp = tmp_path_factory.mktemp("kubeflow-taxi")
    # A warm interpreter's children run the week's 78 tasks (tests/warm_python.py); penguin's
    # first night (test_kubeflow_run.py) starts a fresh one per task, as a pod does.
    compiled = compile_job(PIPELINE, _ci_sizes(), tmp, warm=True)
    seconds = {"compile": compiled.compile_seconds}
    job, executor = compiled.job, compiled.executor
    paths = RunPaths(workdir=compiled.workdir, spec=compiled.spec)
    runs, dates = {}, {}
    for index in NIGHTS:
        dates[index] = _write_night(paths, index)
        started = time.monotonic()
        runs[index] = executor.run(f"taxi-night-{index}")
        seconds[f"night {index}"] = time.monotonic() - started
    print(", ".join(f"{step} {s:.0f} s" for step, s in seconds.items()))
    yield {"job": job, "paths": paths, "runs": runs, "dates": dates, "executor": executor}
    executor.close()


def _summary(nights, index: int) -> dict:
    run = nights["runs"][index]
    return json.loads((nights["paths"].runs_dir / run.run_id / RUN_SUMMARY).read_text())


def _blessed(run) -> bool:
    (blessing,) = run.tasks["evaluator"].artifacts["blessing"]
    return (Path(blessing["uri"]) / "BLESSED").exists()


def _examples_span(run) -> int:
    """The span on ExampleGen's Examples: the driver's custom property, which TFX's Kubeflow
    encoding names `custom:span` (Examples also declare a `span` property, left unset)."""
    (examples,) = run.tasks["csv_example_gen"].artifacts["examples"]
    return int(examples["metadata"]["custom:span"])


@pytest.mark.parametrize("index", [1, 2])
def test_every_task_of_each_night_ran_and_succeeded(nights, index):
    run = nights["runs"][index]
    assert run.failed() == [], {n: run.tasks[n].error for n in run.failed()}
    expected = set(job_tasks(nights["job"]["pipelineSpec"])) | {PIPELINE_DAG}
    assert {name: t.state for name, t in run.tasks.items()} == dict.fromkeys(expected, SUCCEEDED)
    assert list(run.tasks)[-1] == EXIT_HANDLER_ID
    assert run.final_status["state"] == SUCCEEDED


def test_the_job_has_no_window_or_drift_resolver(nights):
    tasks = job_tasks(nights["job"]["pipelineSpec"])
    assert not any(t.startswith(("span_window_resolver", "drift_baseline_resolver")) for t in tasks)
    assert set(SERVED_MODEL_TASKS) <= set(tasks)


@pytest.mark.parametrize("index", [1, 2])
def test_each_night_reads_the_newest_span_in_the_bucket(nights, index):
    run = nights["runs"][index]
    night = nights["dates"][index]
    # ExampleGen's driver chose the span and that span's files (night 2: both are there)...
    driver = run.tasks["csv_example_gen"].driver_output
    assert driver["parameterValues"]["span"] == spans.span_of_date(night)
    (split,) = json.loads(driver["parameterValues"]["input_config"])["splits"]
    assert split["pattern"] == f"{night.isoformat()}/*.csv"
    # ...and the Examples carry it.
    assert _examples_span(run) == spans.span_of_date(night)
    # The Trainer's input is that span's examples (its executor adds the window's earlier
    # spans from the record: test_each_night_learns_from_the_window_...).
    (trained_on,) = run.tasks["trainer"].executor_input["inputs"]["artifacts"]["examples"][
        "artifacts"
    ]
    assert trained_on["uri"] == run.tasks["csv_example_gen"].artifacts["examples"][0]["uri"]


def test_night_1s_gate_has_no_earlier_span_and_night_2s_measures_drift_from_night_1(nights):
    findings = {}
    for index in (1, 2):
        (artifact,) = nights["runs"][index].tasks["data_gate"].artifacts["findings"]
        findings[index] = json.loads((Path(artifact["uri"]) / "findings.json").read_text())
        assert findings[index]["passed"] is True, findings[index]
        assert findings[index]["anomalies"] == []
    assert (findings[1]["drift"], findings[1]["drift_against"]) == ([], None)
    assert findings[1]["notes"] == ["drift not checked: no earlier span has passed this gate yet"]
    # Night 2's gate found night 1's span in the record night 1's gate kept in the workdir.
    first = nights["dates"][1]
    against = f"span {spans.span_of_date(first)} ({first.isoformat()})"
    assert findings[2]["drift_against"] == against
    assert findings[2]["notes"] == []
    spec = load_spec(PIPELINE, env="kubeflow").spec
    assert {row["column"] for row in findings[2]["drift"]} == set(spec.data.drift)
    for row in findings[2]["drift"]:
        assert row["distance"] is not None and row["distance"] <= row["threshold"], row
        assert row["against"] == against
    records = nights["paths"].runs_dir / ACCEPTED_SPANS_FOLDER
    (statistics,) = nights["runs"][1].tasks["statistics_gen"].artifacts["statistics"]
    record = json.loads((records / f"{spans.span_of_date(first)}.json").read_text())
    assert record["statistics"]["uri"] == statistics["uri"]
    # Every night the gate accepted, and only those (nights 3 and 5 are blocked below).
    assert sorted(p.name for p in records.iterdir()) == [
        f"{spans.span_of_date(nights['dates'][i])}.json" for i in (1, 2, 4, 6)
    ]


def test_night_1_has_no_baseline_and_pushes_version_1(nights):
    first = nights["runs"][1]
    for task in SERVED_MODEL_TASKS:  # nothing served yet: an empty Model, version 0
        (model,) = first.tasks[task].artifacts["model"]
        assert model["metadata"][SERVED_VERSION_PROPERTY] == 0, task
        assert not Path(model["uri"]).exists(), task
    # ...which the Trainer and the model gate take as no model: from scratch, no baseline.
    (blessing,) = first.tasks["evaluator"].artifacts["blessing"]
    assert "baseline_model" not in blessing["metadata"]
    assert _blessed(first)
    (pushed,) = first.tasks["pusher"].artifacts["pushed_model"]
    assert pushed["metadata"]["pushed"] == 1
    assert pushed["metadata"]["pushed_version"] == "1"
    summary = _summary(nights, 1)
    assert (summary["outcome"], summary["reason"]) == ("pushed", "pushed"), summary
    assert summary["pushed_version"] == "1"
    # The exit handler has KFP's final status, not the run's artifacts: no span, no gate.
    assert (summary["span"], summary["data_gate"], summary["nodes"]) == (None, None, [])


def test_night_2_starts_from_and_is_compared_with_the_served_version_1(nights):
    first, second = nights["runs"][1], nights["runs"][2]
    (first_model,) = first.tasks["trainer"].artifacts["model"]
    trained = Path(first_model["uri"]) / SERVING_MODEL_FOLDER
    served = {}
    for task in SERVED_MODEL_TASKS:
        (model,) = second.tasks[task].artifacts["model"]
        assert type_title(model["type"]) == "tfx.Model"
        assert model["metadata"][SERVED_VERSION_PROPERTY] == 1, task
        # A copy of version 1 as served, which is night 1's model, byte for byte.
        copied = Path(model["uri"]) / SERVING_MODEL_FOLDER
        assert (copied / "saved_model.pb").read_bytes() == (
            trained / "saved_model.pb"
        ).read_bytes(), task
        served[task] = model["uri"]
    trained = [
        json.loads(
            run.tasks["trainer"].artifacts["model"][0]["metadata"]["conveyor_training_summary"]
        )
        for run in (first, second)
    ]
    assert [t["warm_started"] for t in trained] == [False, True]
    # The model gate compared the candidate with the served model.
    (blessing,) = second.tasks["evaluator"].artifacts["blessing"]
    assert blessing["metadata"]["baseline_model"] == served["baseline_resolver"]
    (evaluation,) = second.tasks["evaluator"].artifacts["evaluation"]
    assert "conveyor_baseline_metric_auc" in evaluation["metadata"]


def test_night_2_pushes_version_2_when_blessed_and_holds_it_back_otherwise(nights):
    second = nights["runs"][2]
    blessed = _blessed(second)
    (pushed,) = second.tasks["pusher"].artifacts["pushed_model"]
    summary = _summary(nights, 2)
    (evaluation,) = second.tasks["evaluator"].artifacts["evaluation"]
    measured = evaluation["metadata"]
    floors_met = (
        measured["conveyor_metric_binary_accuracy"] >= 0.5
        and measured["conveyor_metric_auc"] >= 0.65
    )
    assert blessed == floors_met, measured
    if blessed:
        assert pushed["metadata"]["pushed_version"] == "2"
        assert (summary["outcome"], summary["pushed_version"]) == ("pushed", "2"), summary
    else:
        assert pushed["metadata"]["pushed"] == 0
        assert summary["outcome"] == "not_pushed", summary


def test_the_newest_served_version_answers_taxi_rows(nights):
    paths = nights["paths"]
    newest = served_versions(str(paths.serving_dir))[-1]
    serve = tf.saved_model.load(str(paths.serving_dir / str(newest))).signatures["serving_default"]
    night = nights["dates"][2].isoformat()
    rows = pd.read_csv(paths.input_dir / night / "taxi.csv").drop(columns=[LABEL]).head(8)
    _, signature = serve.structured_input_signature
    inputs = {}
    for name, tensor in signature.items():
        column = rows[name]
        column = column.fillna("") if tensor.dtype == tf.string else column.fillna(0)
        values = column.astype(str) if tensor.dtype == tf.string else column
        inputs[name] = tf.constant(values.tolist(), tensor.dtype)
    probabilities = serve(**inputs)["probabilities"].numpy()
    assert probabilities.shape == (8, 1)
    assert ((probabilities >= 0) & (probabilities <= 1)).all()


# --- the rest of the week: the verdicts of the local week (tests/e2e/test_nightly_week.py) ----


def _outcomes(nights) -> list[str]:
    return [_summary(nights, index)["outcome"] for index in NIGHTS]


def test_the_week_ends_night_by_night_as_the_local_week_does(nights):
    # Push, push (when not worse), drift block, not blessed, missing column block, push.
    outcomes = _outcomes(nights)
    assert outcomes[1] in ("pushed", "not_pushed")
    assert outcomes[:1] + outcomes[2:] == ["pushed", "blocked", "not_pushed", "blocked", "pushed"]
    pushed = [_summary(nights, i)["pushed_version"] for i in NIGHTS if outcomes[i - 1] == "pushed"]
    assert pushed == [str(v) for v in range(1, len(pushed) + 1)]
    assert served_versions(str(nights["paths"].serving_dir)) == list(range(1, len(pushed) + 1))


def _blocked_before_training(nights, index: int) -> dict:
    """The summary of a night the data gate refused, after checking nothing ran after it."""
    run = nights["runs"][index]
    assert run.failed() == ["data_gate"], {n: run.tasks[n].error for n in run.failed()}
    for task in ("trainer", "evaluator", "pusher"):
        assert run.tasks[task].state == NOT_TRIGGERED, task
    assert run.tasks[EXIT_HANDLER_ID].state == SUCCEEDED
    summary = _summary(nights, index)
    assert (summary["outcome"], summary["reason"]) == ("blocked", "data_gate_blocked"), summary
    return summary


def test_night_3_drifted_fares_are_blocked_against_night_2s_span(nights):
    summary = _blocked_before_training(nights, 3)
    second = nights["dates"][2]
    against = f"span {spans.span_of_date(second)} ({second.isoformat()})"
    assert "fare: drift Jensen-Shannon" in summary["message"]
    assert f"above its threshold 0.25 (against {against})" in summary["message"]
    (fare,) = [row for row in summary["data_gate"]["drift"] if row["column"] == "fare"]
    assert fare["breached"] and fare["distance"] > fare["threshold"] == 0.25


def test_night_4_shuffled_labels_train_but_are_not_blessed_or_pushed(nights):
    fourth = nights["runs"][4]
    assert fourth.failed() == []
    assert not _blessed(fourth)
    (pushed,) = fourth.tasks["pusher"].artifacts["pushed_model"]
    assert pushed["metadata"]["pushed"] == 0
    summary = _summary(nights, 4)
    # The Pusher's own reason, as a local night gives it (its decision in the run's folder).
    assert (summary["outcome"], summary["reason"]) == ("not_pushed", "model_not_blessed")
    assert summary["message"] == "nothing pushed: the model did not pass the evaluation thresholds"


def test_night_5_missing_column_is_blocked_naming_it(nights):
    summary = _blocked_before_training(nights, 5)
    assert f"{DROPPED_COLUMN} (train split): Column dropped" in summary["message"]


def test_night_6_is_compared_with_the_model_served_and_measured_against_night_4(nights):
    sixth = nights["runs"][6]
    served = served_versions(str(nights["paths"].serving_dir))[:-1][-1]  # before night 6's push
    (baseline,) = sixth.tasks["baseline_resolver"].artifacts["model"]
    assert baseline["metadata"][SERVED_VERSION_PROPERTY] == served
    # Nights 3 and 5 were refused: the last span the gate accepted is night 4's.
    (artifact,) = sixth.tasks["data_gate"].artifacts["findings"]
    findings = json.loads((Path(artifact["uri"]) / "findings.json").read_text())
    fourth = nights["dates"][4]
    assert findings["drift_against"] == f"span {spans.span_of_date(fourth)} ({fourth.isoformat()})"


def _trained_spans(nights, index: int) -> list[int]:
    (model,) = nights["runs"][index].tasks["trainer"].artifacts["model"]
    return json.loads(model["metadata"][TRAINED_SPANS_PROPERTY])


def test_each_night_learns_from_the_window_of_blessed_spans_as_a_local_night_does(nights):
    # taxi's window is 3 spans: tonight's and the accepted spans before it whose own night's
    # model the Evaluator blessed (the record the Pusher keeps in the workdir).
    span = {i: spans.span_of_date(nights["dates"][i]) for i in NIGHTS}
    second_blessed = _blessed(nights["runs"][2])
    assert _trained_spans(nights, 1) == [span[1]]
    assert _trained_spans(nights, 2) == [span[1], span[2]]
    assert _trained_spans(nights, 4) == ([span[2]] if second_blessed else []) + [span[4]]
    # Night 4's shuffled labels were not blessed and night 5 was blocked: night 6 learns only
    # from its own span, as tests/e2e/test_nightly_week.py's night 6 does.
    assert _trained_spans(nights, 6) == [span[6]]
    records = nights["paths"].runs_dir / ACCEPTED_SPANS_FOLDER
    blessed = {
        index: json.loads((records / f"{span[index]}.json").read_text())[BLESSED_KEY]
        for index in (1, 2, 4, 6)
    }
    assert blessed == {1: True, 2: second_blessed, 4: False, 6: True}


# --- operations on the week's record (last: a rollback moves the labels) ----------------------


def test_rollback_and_lineage_work_on_the_kubeflow_weeks_record(nights, capsys):
    # The exit handler recorded each night's push in Conveyor's store: `conveyor rollback`
    # finds the version served before the newest, and `lineage` names the spans each learned
    # from and the move.
    paths = nights["paths"]
    pushed = [i for i in NIGHTS if _summary(nights, i)["outcome"] == "pushed"]
    workdir = ["--profile", "kubeflow", "--workdir", str(paths.workdir)]
    capsys.readouterr()
    assert cli.main(["lineage", PIPELINE, *workdir]) == 0
    lineage = capsys.readouterr().out
    for version, index in enumerate(pushed, start=1):
        run_id = nights["runs"][index].run_id
        assert f"version {version}: pushed by run {run_id}" in lineage, lineage
    sixth = spans.span_of_date(nights["dates"][6])
    assert f"  spans     {sixth} ({nights['dates'][6].isoformat()})\n" in lineage
    newest = len(pushed)
    argv = ["rollback", PIPELINE, *workdir, "--reason", "the week's test", "--by", "ci"]
    assert cli.main(argv) == 0, capsys.readouterr()
    entry = current_entry(paths.serving_config_dir, paths.spec.push.model_name)
    assert entry.labels["stable"] == newest - 1, entry
    assert cli.main(["lineage", PIPELINE, *workdir]) == 0
    assert "by rollback at" in capsys.readouterr().out


def test_a_scheduled_run_reads_its_night_not_the_newest(nights):
    # A recurring run fired at 02:00 UTC on the day after night 2 (KFP's schedule time, which
    # compile hands ExampleGen's driver) reads night 2's span though night 6's is the newest,
    # and the gate measures drift from the span accepted before it, night 1's. A backfill
    # (`conveyor submit --date`, the range_config parameter) takes the same path
    # (tests/unit/test_kubeflow_driver.py).
    second, first = nights["dates"][2], nights["dates"][1]
    fired = f"{second + datetime.timedelta(days=1)}T02:00:00.123456789Z"
    paths = nights["paths"]
    # Night 2's inputs have not changed since taxi-night-2 ran them: the job's first task
    # finds that night's outcome record (night 6's would name taxi-night-6), every other task
    # is skipped and the exit handler answers UNCHANGED, as `conveyor run --date` does.
    unchanged = nights["executor"].run("taxi-scheduled-night-2", scheduled_at=fired)
    assert unchanged.failed() == [] and unchanged.state == SUCCEEDED
    found = json.loads((paths.run_dir(unchanged.run_id) / RUN_INPUTS_FILE).read_text())
    assert found["span"] == spans.span_of_date(second)
    said = unchanged.tasks[EXIT_HANDLER_ID].log.read_text()
    assert f"{PIPELINE}: UNCHANGED: same data, spec, schema and code as run taxi-night-2, " in (
        said
    ), said
    assert unchanged.tasks["csv_example_gen"].state == SKIPPED
    # Night 2's file exported again, one row short: the night runs.
    write_night(paths.input_dir / second.isoformat() / "taxi.csv", ROWS - 1, seed=2)
    rerun = nights["executor"].run("taxi-scheduled-night-2-again", scheduled_at=fired)
    assert rerun.failed() == [], {n: rerun.tasks[n].error for n in rerun.failed()}
    assert _examples_span(rerun) == spans.span_of_date(second)
    (artifact,) = rerun.tasks["data_gate"].artifacts["findings"]
    findings = json.loads((Path(artifact["uri"]) / "findings.json").read_text())
    assert findings["drift_against"] == f"span {spans.span_of_date(first)} ({first.isoformat()})"
