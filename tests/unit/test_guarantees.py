"""What `validate` and `compile` say a compiled pipeline does not keep of a local night's
guarantees (pipelines/spec/guarantees.py): by code, per target and per spec."""

from pipelines import cli
from pipelines.spec.components import Orchestrator
from pipelines.spec.guarantees import Guarantee, gaps
from pipelines.spec.loading import load_spec
from tests.conftest import MYSQL_METADATA

G = Guarantee
KUBEFLOW_RUN_GAPS = {
    G.ONE_RUN_AT_A_TIME,
    G.OPERATIONS_SEE_RUNS,
}


def _codes(name: str, target: Orchestrator, *overrides: str) -> list[Guarantee]:
    spec = load_spec(name, env="ci", overrides=list(overrides)).spec
    return [gap.guarantee for gap in gaps(spec, target)]


def test_a_local_night_keeps_every_guarantee():
    assert _codes("taxi", Orchestrator.LOCAL) == []


def test_taxi_on_kubeflow_keeps_its_resolvers_and_its_night_and_loses_what_follows_a_run():
    # Its spans, window, drift baseline and served model are kept by Conveyor's tasks, a
    # scheduled run reads its own night (pipelines/run/kubeflow_driver.py), and an unchanged
    # night answers UNCHANGED (pipelines/run/kubeflow_start.py).
    codes = _codes("taxi", Orchestrator.KUBEFLOW)
    assert len(codes) == len(set(codes))  # one line per guarantee
    assert set(codes) == KUBEFLOW_RUN_GAPS


def test_penguin_on_kubeflow_has_no_span_or_window_to_lose_and_keeps_its_served_baseline():
    codes = set(_codes("penguin", Orchestrator.KUBEFLOW))
    assert codes == KUBEFLOW_RUN_GAPS


def test_the_window_is_a_gap_on_kubeflow_only_for_a_teams_own_run_fn():
    # Conveyor's Trainer adds the window's spans from the record of accepted spans; TFX's
    # Trainer running a team's run_fn gets tonight's examples only.
    assert G.TRAINING_WINDOW not in _codes("taxi", Orchestrator.KUBEFLOW)
    own = _codes(
        "taxi", Orchestrator.KUBEFLOW, "trainer.module=tfx.examples.penguin.penguin_utils_keras"
    )
    assert G.TRAINING_WINDOW in own
    no_window = "data.window_spans=1"
    assert G.TRAINING_WINDOW not in _codes(
        "taxi",
        Orchestrator.KUBEFLOW,
        no_window,
        "trainer.module=tfx.examples.penguin.penguin_utils_keras",
    )


def test_an_inferred_schema_is_kept_on_kubeflow_where_a_data_gate_records_it():
    curated = _codes("penguin", Orchestrator.KUBEFLOW, "schema.source=file")
    inferred = _codes("penguin", Orchestrator.KUBEFLOW, "schema.source=infer")
    assert G.ACCEPTED_SCHEMA not in curated
    assert G.ACCEPTED_SCHEMA not in inferred
    # Without a data gate nothing records the schema of accepted data.
    spec = load_spec("penguin", env="ci", overrides=["schema.source=infer"]).spec
    ungated = spec.model_copy(
        update={"components": [c for c in spec.components if c.type != "data_gate"]}
    )
    (gap,) = [g for g in gaps(ungated, Orchestrator.KUBEFLOW) if g.guarantee is G.ACCEPTED_SCHEMA]
    assert gap.what == "schema_gen" and "inferred anew each run" in gap.how


def test_operations_see_a_kubeflow_run_anywhere_only_through_a_mysql_store():
    # The exit handler records the run's push in runtime.metadata: a SQLite file under the
    # pods' workdir is seen only through that folder; a MySQL-compatible server from anywhere.
    assert G.OPERATIONS_SEE_RUNS in _codes("penguin", Orchestrator.KUBEFLOW)
    assert G.OPERATIONS_SEE_RUNS not in _codes("penguin", Orchestrator.KUBEFLOW, *MYSQL_METADATA)


def test_airflow_keeps_the_resolvers_and_loses_the_lock_and_the_unchanged_answer():
    assert set(_codes("taxi", Orchestrator.AIRFLOW)) == {G.UNCHANGED_NIGHT, G.ONE_RUN_AT_A_TIME}


def test_validate_prints_one_line_per_gap_and_nothing_for_a_local_profile(capsys):
    assert cli.main(["validate", "taxi", "--profile", "kubeflow"]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    differs = [line for line in lines if line.startswith("differs on kubeflow: ")]
    assert "differs on kubeflow: one_run_at_a_time: run: " in "\n".join(differs)
    assert len(differs) == len(_codes("taxi", Orchestrator.KUBEFLOW))
    assert cli.main(["validate", "taxi", "--profile", "local"]) == 0
    assert "differs on" not in capsys.readouterr().out
