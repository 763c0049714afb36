"""The compiled Kubeflow job, executed: `conveyor compile penguin --profile kubeflow` (with the
`ci` profile's sizes), run task by task by tests/kfp_executor.py as KFP's launcher and Vertex AI
would run it: each task's container command in a subprocess of this virtualenv (a fresh
interpreter, as a pod starts, the first time each entry module runs; a warm one's children for
the other tasks), its
executor input built from the job, `pipeline_root` and the workdir in a local folder standing
for the bucket Vertex AI mounts at `/gcs/`.

One compile and one bucket through the module, in order: a first night that infers the schema,
pushes version 1 and serves it; a night whose data lacks a column, held to the schema night 1
accepted, stopped at the data gate with serving untouched and the run BLOCKED with the gate's
findings, as a local night; that night again, answered UNCHANGED by the job's first task with
every other task skipped. A second night that is
judged against the first night's model is taxi's (tests/e2e/test_kubeflow_taxi.py), which also
warm-starts from it.
"""

import json
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest
import tensorflow as tf

from components.accepted_schema.component import SCHEMA_FROM_PROPERTY
from pipelines import cli
from pipelines.core import job_lock
from pipelines.core.artifact_files import RUN_INPUTS_FILE
from pipelines.core.paths import RUN_SUMMARY, RunPaths
from pipelines.run.kubeflow import EXIT_HANDLER_ID, PIPELINE_DAG, job_tasks
from pipelines.serving_state.versions import model_digest, publish, served_versions
from pipelines.spec.loading import load_spec
from tests.conftest import copy_fixture
from tests.kfp_executor import SKIPPED, SUCCEEDED, compile_job

PIPELINE = "penguin"


def _ci_sizes() -> list[str]:
    """`--set` values giving the Kubeflow job the `ci` profile's sizes and Beam options, and
    an inferred schema (the taxi job's is curated): night 1 infers it, night 2 keeps it."""
    ci = load_spec(PIPELINE, env="ci").spec
    return [
        "schema.source=infer",
        "runtime.concurrency.when_busy=refuse",  # a busy run fails at once (the last test)
        f"trainer.train_steps={ci.trainer.train_steps}",
        f"trainer.eval_steps={ci.trainer.eval_steps}",
        f"runtime.beam_args={json.dumps(list(ci.runtime.beam_args))}",
    ]


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """The job compiled once, the bucket's folder with tonight's data, and an executor."""
    tmp = tmp_path_factory.mktemp("kubeflow-run")
    compiled = compile_job(PIPELINE, _ci_sizes(), tmp, warm=True, fresh_once=True)
    assert cli.main(["data", PIPELINE, "--workdir", str(compiled.workdir)]) == 0
    paths = RunPaths(workdir=compiled.workdir, spec=compiled.spec)
    shutil.copytree(paths.input_dir, tmp / "good-data")
    job, gcs, executor = compiled.job, compiled.gcs, compiled.executor
    compile_seconds = compiled.compile_seconds
    yield {
        "job": job,
        "paths": paths,
        "gcs": gcs,
        "tmp": tmp,
        "executor": executor,
        "compile_seconds": compile_seconds,
    }
    executor.close()


@pytest.fixture(scope="module")
def first_night(bucket):
    started = time.monotonic()
    run = bucket["executor"].run("penguin-night-1")
    print(
        f"compile {bucket['compile_seconds']:.0f} s; first night {time.monotonic() - started:.0f} s"
    )
    return run


def _summary(bucket, run) -> dict:
    return json.loads((bucket["paths"].runs_dir / run.run_id / RUN_SUMMARY).read_text())


def test_every_task_of_the_job_ran_and_succeeded(bucket, first_night):
    run = first_night
    # The entry point every container runs started once in a fresh interpreter, as in a pod.
    assert "pipelines.run.kubeflow_entrypoint" in bucket["executor"].started_fresh
    assert run.failed() == [], {n: run.tasks[n].error for n in run.failed()}
    assert run.state == SUCCEEDED
    expected = set(job_tasks(bucket["job"]["pipelineSpec"])) | {PIPELINE_DAG}
    assert {name: t.state for name, t in run.tasks.items()} == dict.fromkeys(expected, SUCCEEDED)
    # The exit handler ran last, told that the pipeline's DAG succeeded.
    assert list(run.tasks)[-1] == EXIT_HANDLER_ID
    assert run.final_status["state"] == SUCCEEDED


def test_the_pusher_pushed_version_1_and_it_classifies_penguins(bucket, first_night):
    serving = bucket["paths"].serving_dir
    assert served_versions(str(serving)) == [1]
    serve = tf.saved_model.load(str(serving / "1")).signatures["serving_default"]
    rows = pd.read_csv(bucket["tmp"] / "good-data" / "penguins.csv").iloc[[0, 200, 300]]
    outputs = serve(
        island=tf.constant(rows["island"].tolist()),
        sex=tf.constant(rows["sex"].fillna("").tolist()),
        **{
            column: tf.constant(rows[column].astype("float32").tolist())
            for column in ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")
        },
    )
    assert [c.decode() for c in outputs["classes"].numpy()] == rows["species"].tolist()


def test_outputs_are_where_kfp_puts_them(bucket, first_night):
    run = first_night
    root = Path(bucket["executor"].local(bucket["job"]["runtimeConfig"]["gcsOutputDirectory"]))
    assert root.is_relative_to(bucket["gcs"])
    run_root = root / PIPELINE / run.run_id
    containers = [t for t in run.tasks.values() if t.kind == "container"]
    assert containers
    for task in containers:
        outputs = task.executor_input["outputs"]
        task_root = Path(outputs["outputFile"]).parent
        assert task_root.parent == run_root / task.name, task.name
        for key, listed in task.artifacts.items():
            (artifact,) = listed
            assert Path(artifact["uri"]) == task_root / key, (task.name, key)
    produced = {
        (task.name, key): Path(listed[0]["uri"])
        for task in containers
        for key, listed in task.artifacts.items()
    }
    for task, key in [
        ("csv_example_gen", "examples"),
        ("statistics_gen", "statistics"),
        ("schema_gen", "schema"),
        ("example_validator", "anomalies"),
        ("data_gate", "findings"),
        ("trainer", "model"),
        ("evaluator", "evaluation"),
        ("evaluator", "blessing"),
    ]:
        assert any(produced[(task, key)].iterdir()), (task, key)
    # The Pusher's artifact is its metadata (KFP records it; no folder is written).
    (pushed,) = run.tasks["pusher"].artifacts["pushed_model"]
    assert pushed["metadata"]["pushed"] == 1
    assert pushed["metadata"]["pushed_version"] == "1"
    assert pushed["metadata"]["pushed_destination"] == str(bucket["paths"].serving_dir / "1")
    findings = json.loads((produced[("data_gate", "findings")] / "findings.json").read_text())
    assert findings["passed"] is True
    assert (produced[("evaluator", "blessing")] / "BLESSED").is_file()


def test_the_exit_handler_recorded_the_push(bucket, first_night):
    summary = _summary(bucket, first_night)
    assert summary["outcome"] == "pushed", summary
    assert summary["reason"] == "pushed"
    # The run's first task took the pipeline's lock; its exit handler released it.
    assert first_night.tasks["run_start"].state == SUCCEEDED
    assert not Path(job_lock.lock_uri(str(bucket["paths"].runs_dir))).exists()
    # ... and recorded the outcome with the inputs' fingerprint the first task took, as
    # `conveyor run` records a final outcome.
    paths = bucket["paths"]
    found = json.loads((paths.run_dir(first_night.run_id) / RUN_INPUTS_FILE).read_text())
    assert found["unchanged"] is None and found["span"] is None
    record = json.loads(paths.outcome_record(None).read_text())
    assert (record["run_id"], record["outcome"]) == (first_night.run_id, "pushed")
    assert record["fingerprint"] == found["fingerprint"]
    assert record["served_versions"] == ["1"]


def test_lineage_and_models_see_the_kubeflow_run(bucket, first_night, capsys):
    # KFP's own store is out of reach: the exit handler recorded the Pusher's decision in
    # Conveyor's store, which the operations read as they read a local run's.
    workdir = str(bucket["paths"].workdir)
    capsys.readouterr()
    assert cli.main(["lineage", PIPELINE, "--profile", "kubeflow", "--workdir", workdir]) == 0
    lineage = capsys.readouterr().out
    assert f"version 1: pushed by run {first_night.run_id}" in lineage, lineage
    (model,) = first_night.tasks["trainer"].artifacts["model"]
    assert f"model     {model['uri']} (trained in run {first_night.run_id})" in lineage
    (examples,) = first_night.tasks["csv_example_gen"].artifacts["examples"]
    assert f"examples  {examples['uri']}" in lineage
    assert cli.main(["models", PIPELINE, "--profile", "kubeflow", "--workdir", workdir]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if first_night.run_id in line]
    version, _labels, recorded, run_id, *_ = row.split()
    assert (version, recorded, run_id) == ("1", "yes", first_night.run_id), row


def test_a_night_without_a_column_stops_at_the_data_gate(bucket, first_night):
    paths = bucket["paths"]
    versions = served_versions(str(paths.serving_dir))
    served = model_digest(str(paths.serving_dir / str(versions[-1])))
    # A version no exit handler recorded (its run was lost after the push): the next run's
    # first task, holding the lock, moves it out of serving's sight before anything runs.
    serving = str(paths.serving_dir)
    unrecorded, _ = publish(f"{serving}/{versions[-1]}", serving, {"pushed_at": "lost"})
    copy_fixture("penguins_missing_column.csv", paths.input_dir, "penguins.csv")
    blocked = bucket["executor"].run("penguin-night-2")
    said = blocked.tasks["run_start"].log.read_text()
    assert "serving: quarantined versions ML Metadata never recorded" in said, said
    assert f": {unrecorded} -> .quarantined-{unrecorded}-" in said, said
    assert blocked.failed() == ["data_gate"]
    assert "flipper_length_mm" in blocked.tasks["data_gate"].error
    for name in ("trainer", "evaluator", "pusher"):
        assert blocked.tasks[name].state == "NOT_TRIGGERED", name
    # The schema is the one night 1 inferred and its gate accepted data against, not one
    # inferred from tonight's data (which lacks the column, and would not name it).
    (inferred,) = first_night.tasks["schema_gen"].artifacts["schema"]
    (kept,) = blocked.tasks["schema_gen"].artifacts["schema"]
    assert inferred["metadata"][SCHEMA_FROM_PROPERTY] == ""
    assert kept["metadata"][SCHEMA_FROM_PROPERTY] == inferred["uri"]
    assert blocked.tasks[EXIT_HANDLER_ID].state == SUCCEEDED
    assert served_versions(str(paths.serving_dir)) == versions
    assert model_digest(str(paths.serving_dir / str(versions[-1]))) == served
    summary = _summary(bucket, blocked)
    # BLOCKED with the gate's own words and findings, as a local night: the gate wrote its
    # verdict into the run's folder, where the exit handler finds it by the job's name.
    assert summary["outcome"] == "blocked", summary
    assert summary["reason"] == "data_gate_blocked"
    assert summary["message"].startswith("Data gate: the data in "), summary["message"]
    assert "flipper_length_mm" in summary["message"]
    columns = {row["column"] for row in summary["data_gate"]["anomalies"]}
    assert columns == {"flipper_length_mm"}, summary["data_gate"]


def test_the_same_night_again_is_unchanged_and_runs_nothing(bucket, first_night):
    # Night 2's data, spec, schema and code again: its first task finds the outcome recorded
    # with the same fingerprint, every other task is skipped, and the exit handler answers
    # UNCHANGED naming the run it repeats, as `conveyor run` does (and writes no report).
    paths = bucket["paths"]
    versions = served_versions(str(paths.serving_dir))
    again = bucket["executor"].run("penguin-night-2-again")
    assert again.failed() == [] and again.state == SUCCEEDED
    found = json.loads((paths.run_dir(again.run_id) / RUN_INPUTS_FILE).read_text())
    assert found["unchanged"]["run_id"] == "penguin-night-2"
    (inputs,) = again.tasks["run_start"].artifacts["inputs"]
    assert inputs["metadata"]["inputs"] == "unchanged"
    skipped = {
        name: task.state
        for name, task in again.tasks.items()
        if name not in ("run_start", EXIT_HANDLER_ID, PIPELINE_DAG)
    }
    assert skipped and set(skipped.values()) == {SKIPPED}, skipped
    assert again.final_status["state"] == SUCCEEDED
    said = again.tasks[EXIT_HANDLER_ID].log.read_text()
    assert (
        f"{PIPELINE}: UNCHANGED: same data, spec, schema and code as run penguin-night-2, which "
        f"was blocked by the data gate; nothing executed, nothing pushed (serving version "
        f"{versions[-1]})"
    ) in said, said
    assert not (paths.run_dir(again.run_id) / RUN_SUMMARY).exists()
    assert served_versions(str(paths.serving_dir)) == versions
    assert not Path(job_lock.lock_uri(str(paths.runs_dir))).exists()


def test_a_run_while_another_holds_the_lock_fails_first_naming_it(bucket, first_night):
    # Another run of the pipeline (a backfill started by hand, say) holds the lock: this one
    # stops at its first task, before reading data or touching serving, and the lock stays
    # the other run's (runtime.concurrency.when_busy: refuse; `wait` waits for it).
    paths = bucket["paths"]
    lock = job_lock.lock_uri(str(paths.runs_dir))
    assert job_lock.take(lock, "penguin-elsewhere", 3600) is None
    versions = served_versions(str(paths.serving_dir))
    try:
        busy = bucket["executor"].run("penguin-busy")
        assert busy.failed() == ["run_start"]
        assert "the pipeline is busy: Kubeflow run penguin-elsewhere since" in (
            busy.tasks["run_start"].error
        )
        for name in ("csv_example_gen", "trainer", "pusher"):
            assert busy.tasks[name].state == "NOT_TRIGGERED", name
        assert busy.tasks[EXIT_HANDLER_ID].state == SUCCEEDED
        summary = _summary(bucket, busy)
        assert (summary["outcome"], summary["reason"]) == ("failed", "component_failed")
        assert served_versions(str(paths.serving_dir)) == versions
        assert job_lock.take(lock, "penguin-next", 3600).job == "penguin-elsewhere"
    finally:
        job_lock.release(lock, "penguin-elsewhere")
