"""`conveyor compile NAME --profile airflow` for a real Airflow 2 on SQLite in a temporary
AIRFLOW_HOME: the DAG folder imports with no errors (DagBag), the DAG has the profile's schedule
and the spec's edges, the logical date selects the night's span, a final task finishes every DAG
run, and `airflow dags test` runs the penguin DAG to a pushed model, with its summary, report and
outcome record. That DAG also has a tuner (two small trials) and a bulk inferrer, which Airflow
runs as tasks like the others: the Trainer trains with the tuned hyperparameters and the eval
split is predicted. Airflow runs in subprocesses: it configures logging and its database from
the environment at import."""

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import cli
from pipelines.builder.pipeline import build_pipeline
from pipelines.builder.spans import RANGE_CONFIG_TEMPLATE
from pipelines.core.paths import REPORT_FILE, RUN_SUMMARY, RunPaths
from pipelines.finish.artifacts import read_hyperparameters
from pipelines.run.airflow import FINAL_TASK_ID, FIRST_TASK_ID
from pipelines.spec.loading import load_spec
from pipelines.spec.models import DEFAULT_COMPONENTS

AIRFLOW = str(Path(sys.executable).parent / "airflow")
NIGHT = datetime.date(2026, 11, 28)
FAST = [
    'runtime.beam_args=["--direct_running_mode=in_memory", "--direct_num_workers=1"]',
    "trainer.train_steps=150",
]
DATED = ["name=penguin_dated", 'data.span_pattern="{YYYY}-{MM}-{DD}/*.csv"']
# The penguin DAG's components: the spec's, with a tuner before the trainer and a bulk inferrer
# before the pusher (penguin's own learning rate, 0.02, is among those searched).
_WITH_BOTH = [
    added
    for component in DEFAULT_COMPONENTS
    for added in (
        ["tuner", component]
        if component == "trainer"
        else ["bulk_inferrer", component]
        if component == "pusher"
        else [component]
    )
]
TUNER_AND_INFERRER = [
    "components=[" + ", ".join(f"{{type: {t}}}" for t in _WITH_BOTH) + "]",
    "tuning={search_space: {learning_rate: {choices: [0.02, 0.05]}}, max_trials: 2, "
    "trial_steps: 10}",
    "inference.splits=[eval]",
    "inference.output_columns=[island, species]",
]

DAGBAG_PROBE = """
import json, sys
from airflow import macros
from airflow.models import DagBag

bag = DagBag(sys.argv[1], include_examples=False)
report = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in bag.dags.items():
    report["dags"][dag_id] = {
        "schedule": dag.schedule_interval,
        "start_date": dag.start_date.isoformat(),
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "upstream": {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks},
        "trigger_rules": {t.task_id: str(t.trigger_rule) for t in dag.tasks},
        "leaves": sorted(t.task_id for t in dag.leaves),
    }
    # What Airflow renders for ExampleGen when the run's logical date is sys.argv[2].
    task = dag.get_task("csv_example_gen")
    context = {"ds": sys.argv[2], "macros": macros, "dag_run": None}
    rendered = task.render_template(task.op_kwargs, context)["exec_properties"]
    report["dags"][dag_id]["range_config"] = rendered.get("range_config")
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow")
    dags, workdir = home / "dags", home / "work"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        # Importing the DAG file imports TensorFlow and TFX (about 20 s here).
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
        "AIRFLOW__CORE__DAG_FILE_PROCESSOR_TIMEOUT": "600",
    }
    migrated = subprocess.run(
        [AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, check=False
    )
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    for name, overrides in (
        ("penguin", FAST + TUNER_AND_INFERRER),
        ("penguin_dated", FAST + DATED),
    ):
        argv = ["compile", "penguin", "--env", "airflow", "--workdir", str(workdir)]
        argv += ["--output", str(dags / f"{name}_dag.py")]
        assert cli.main(argv + [a for o in overrides for a in ("--set", o)]) == 0
    return env, dags, workdir


@pytest.fixture(scope="module")
def dagbag(airflow):
    env, dags, _ = airflow
    done = subprocess.run(
        [sys.executable, "-c", DAGBAG_PROBE, str(dags), NIGHT.isoformat()],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :])


def test_the_dag_folder_imports_without_errors(dagbag):
    assert dagbag["errors"] == {}
    assert sorted(dagbag["dags"]) == ["penguin", "penguin_dated"]


def test_the_dag_has_the_profiles_schedule_and_the_specs_edges(dagbag, tmp_path):
    dag = dagbag["dags"]["penguin"]
    schedule = load_spec("penguin", env="airflow").spec.schedule
    assert dag["schedule"] == schedule.cron == "@daily"
    assert dag["start_date"] == f"{schedule.start_date.isoformat()}T00:00:00+00:00"
    assert dag["catchup"] is schedule.catchup is False
    assert dag["max_active_runs"] == 1
    spec = load_spec("penguin", env="local", overrides=TUNER_AND_INFERRER).spec
    pipeline = build_pipeline(spec, tmp_path)
    edges = {n.id: sorted(u.id for u in n.upstream_nodes) for n in pipeline.components}
    upstream = dict(dag["upstream"])
    upstream.pop(FINAL_TASK_ID)
    assert upstream.pop(FIRST_TASK_ID) == []
    # Every TFX task with no TFX upstream waits for the first task (reconcile) instead.
    assert upstream == {node: parents or [FIRST_TASK_ID] for node, parents in edges.items()}


@pytest.mark.parametrize("name", ["penguin", "penguin_dated"])
def test_a_final_task_runs_after_every_task_whatever_their_state(dagbag, name):
    dag = dagbag["dags"][name]
    tfx_tasks = sorted(set(dag["upstream"]) - {FINAL_TASK_ID})
    assert dag["upstream"][FINAL_TASK_ID] == tfx_tasks  # downstream of every TFX task
    assert dag["trigger_rules"][FINAL_TASK_ID] == "all_done"  # blocked or failed nights too
    # The only leaf: its state is the DAG run's (it fails a blocked or failed night).
    assert dag["leaves"] == [FINAL_TASK_ID]


def test_the_logical_date_selects_the_nights_span(dagbag):
    span = (NIGHT - datetime.date(1970, 1, 1)).days  # TFX's number of a dated span
    rendered = json.loads(dagbag["dags"]["penguin_dated"]["range_config"])
    assert rendered == {"static_range": {"start_span_number": span, "end_span_number": span}}
    # Without dated spans ExampleGen reads every file: nothing is templated.
    assert dagbag["dags"]["penguin"]["range_config"] != RANGE_CONFIG_TEMPLATE


def test_airflow_dags_test_runs_penguin_to_a_pushed_model(airflow):
    env, _, workdir = airflow
    # A push killed mid-copy left a staging folder: the first task removes it before the night.
    leftover = workdir / "serving" / "penguin" / ".incoming-9-12345"
    leftover.mkdir(parents=True)
    done = subprocess.run(
        [AIRFLOW, "dags", "test", "penguin", NIGHT.isoformat()],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = done.stdout + done.stderr
    assert "DagRun Finished: dag_id=penguin" in log and "state=success" in log
    version = workdir / "serving" / "penguin" / "1"
    assert (version / "saved_model.pb").is_file()
    assert not leftover.exists()
    push = json.loads((version / "conveyor_push.json").read_text())
    assert push["version"] == 1
    assert push["model_uri"].startswith(str(workdir / "pipeline_root" / "penguin" / "trainer"))
    # The run is in the profile's ML Metadata, under Airflow's run id.
    from pipelines.core import metadata

    spec = load_spec("penguin", env="airflow").spec
    store = metadata.open_store(spec, workdir / spec.runtime.metadata.path)
    contexts = {c.name for c in store.get_contexts()}
    run_id = f"penguin.manual__{NIGHT.isoformat()}T00:00:00+00:00"
    assert run_id in contexts  # the Airflow run
    # The final task read that run back: its summary, report and outcome record, as after
    # `conveyor run`.
    paths = RunPaths(workdir=workdir.resolve(), spec=spec)
    summary = json.loads((paths.run_dir(run_id) / RUN_SUMMARY).read_text())
    assert summary["outcome"] == "pushed" and summary["pushed_version"] == "1"
    states = {n["node_id"]: n["state"] for n in summary["nodes"]}
    assert {"trainer", "pusher", "data_gate"} <= set(states)
    # The tuner searched and the bulk inferrer predicted, as Airflow tasks of this run.
    assert states["tuner"] == states["bulk_inferrer"] == "executed", states
    root = workdir / "pipeline_root" / "penguin"
    (best,) = root.glob("tuner/best_hyperparameters/*")
    assert read_hyperparameters(str(best))["learning_rate"] in (0.02, 0.05)
    assert list(root.glob("bulk_inferrer/inference_result/*/prediction_logs-*.gz"))
    assert (paths.run_dir(run_id) / REPORT_FILE).is_file()
    recorded = json.loads(paths.outcome_record(None).read_text())
    assert recorded["run_id"] == run_id and recorded["outcome"] == "pushed"
