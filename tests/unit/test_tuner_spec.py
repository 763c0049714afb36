"""The `tuning` block and the `tuner` component type: strict validation naming the key (user
code read, never imported), the decision whether a night tunes (from the spec and the night, and
from the last search ML Metadata holds: none yet, or under another schema), and the pipeline
built and compiled with a tuner for every orchestrator: TFX's Tuner on a tuning night
(Conveyor's tuner_fn, or a run_fn module's own unchanged), a latest-HyperParameters resolver
otherwise."""

import datetime
import json
import sys
import textwrap

import pytest

from pipelines import cli
from pipelines.builder.nodes.tuner import GENERIC_TUNER_FN, LATEST_SUFFIX, tuning_due
from pipelines.run.kubeflow import job_tasks
from pipelines.spec.loading import SpecError, load_spec
from pipelines.spec.models import DEFAULT_COMPONENTS, ObjectiveDirection, Orchestrator

_TYPES = [t for c in DEFAULT_COMPONENTS for t in (["tuner", c] if c == "trainer" else [c])]
WITH_TUNER = "components=[" + ", ".join(f"{{type: {t}}}" for t in _TYPES) + "]"
# penguin's trainer: learning_rate 0.02, hidden_units [16, 8], dropout 0.
SPACE = "tuning.search_space={learning_rate: {choices: [0.02, 0.1]}, hidden_units: " + (
    "{choices: [[16, 8], [32, 16]]}, dropout: {min: 0.0, max: 0.3}}"
)
PENGUIN_TFX = "tfx.examples.penguin.penguin_utils_keras"
MONDAY, TUESDAY = datetime.date(2026, 11, 30), datetime.date(2026, 12, 1)


def _load(*overrides: str):
    return load_spec("penguin", env="ci", overrides=[WITH_TUNER, SPACE, *overrides])


def test_a_tuning_block_validates_with_its_defaults():
    tuning = _load().spec.tuning
    assert tuning.max_trials == 5 and tuning.trial_steps == 100
    assert tuning.retune.value == "always" and tuning.weekday.value == "monday"
    assert tuning.objective_direction is ObjectiveDirection.MIN  # val_loss
    assert _load("tuning.objective=val_accuracy").spec.tuning.objective_direction.value == "max"
    assert _load("tuning.direction=min", "tuning.objective=val_accuracy").spec.tuning.direction


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["tuning.search_space.batch_size={choices: [32]}"], r"'batch_size' is not a hyper"),
        (
            ["tuning.search_space.dropout={choices: [0.1], min: 0, max: 1}"],
            r"tuning\.search_space\.dropout.*either `choices`.*or a range",
        ),
        (["tuning.search_space.dropout={min: 0.3, max: 0.1}"], r"min < max"),
        (
            ["tuning.search_space.learning_rate={min: 0, max: 0.1, sampling: log}"],
            r"`sampling: log` needs min above 0",
        ),
        (["tuning.search_space.hidden_units={choices: [16, 8]}"], r"hidden_units: give `choices`"),
        (["tuning.search_space.learning_rate={choices: [fast]}"], r"every choice must be a number"),
        (
            ["tuning.search_space.learning_rate={choices: [0.1, 0.5]}"],
            r"tuning\.search_space\.learning_rate: the trainer's own value 0\.02",
        ),
        (["tuning.max_trials=0"], r"tuning\.max_trials"),
        (["tuning.trial_steps=-1"], r"tuning\.trial_steps"),
        (["tuning.retune=monthly"], r"tuning\.retune.*always.*weekly.*reuse"),
        (["tuning.budget=3"], r"tuning\.budget.*unknown key"),
    ],
)
def test_bad_tuning_values_are_refused_naming_the_key(overrides, message):
    # Without SPACE: a `--set` of one dimension merges into the same dimension of an earlier one.
    good = "tuning.search_space.learning_rate={choices: [0.02]}"
    extra = [] if overrides[0].startswith("tuning.search_space") else [good]
    with pytest.raises(SpecError, match=message):
        load_spec("penguin", env="ci", overrides=[WITH_TUNER, *extra, *overrides])


def test_a_tuner_needs_the_block_and_the_block_needs_a_tuner():
    with pytest.raises(SpecError, match=r"a `tuner` component needs a `tuning` block"):
        load_spec("penguin", env="ci", overrides=[WITH_TUNER])
    with pytest.raises(SpecError, match=r"\(trainer\): needs 'hyperparameters' \(because of tun"):
        load_spec("penguin", env="ci", overrides=[SPACE])
    with pytest.raises(SpecError, match=r"tuning\.search_space is empty: name at least one"):
        load_spec("penguin", env="ci", overrides=[WITH_TUNER, "tuning.trial_steps=10"])
    after = WITH_TUNER.replace("{type: tuner}, {type: trainer}", "{type: trainer}, {type: tuner}")
    with pytest.raises(SpecError, match=r"\(trainer\): needs 'hyperparameters'.*\['tuner'\]"):
        load_spec("penguin", env="ci", overrides=[after, SPACE])


@pytest.fixture
def team(tmp_path, monkeypatch):
    """A package `team_tuning` on the path; returns a function writing a module into it."""
    package = tmp_path / "team_tuning"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        (package / f"{name}.py").write_text(textwrap.dedent(source))
        return f"team_tuning.{name}"

    return write


def test_a_run_fn_module_must_bring_its_own_tuner_fn_and_is_never_imported(team):
    without = team("no_tuner", "def run_fn(fn_args):\n    pass\n")
    with pytest.raises(SpecError, match=r"trainer\.module 'team_tuning\.no_tuner' defines no `tun"):
        _load(f"trainer.module={without}")
    exploding = team(
        "explodes",
        """
        raise RuntimeError("imported at validate")


        def run_fn(fn_args):
            pass


        def tuner_fn(fn_args):
            pass
        """,
    )
    with pytest.raises(SpecError, match=r"tuning\.search_space: .*defines its own search space"):
        _load(f"trainer.module={exploding}")
    loaded = _load(f"trainer.module={exploding}", "tuning.search_space={}")
    assert loaded.spec.tuning.search_space == {}
    assert exploding not in sys.modules


def test_a_build_model_hook_tunes_the_learning_rate_only(team):
    hook = team("hook", "def build_model(inputs, spec):\n    return inputs\n")
    with pytest.raises(SpecError, match=r"\['dropout', 'hidden_units'\] shape Conveyor's dense"):
        _load(f"trainer.module={hook}")
    only_rate = "tuning.search_space={learning_rate: {choices: [0.02]}}"
    load_spec("penguin", env="ci", overrides=[WITH_TUNER, f"trainer.module={hook}", only_rate])


@pytest.mark.parametrize(
    ("retune", "target", "night", "due"),
    [
        ("always", Orchestrator.LOCAL, TUESDAY, True),
        ("always", Orchestrator.KUBEFLOW, TUESDAY, True),
        ("reuse", Orchestrator.LOCAL, MONDAY, False),
        ("weekly", Orchestrator.LOCAL, MONDAY, True),
        ("weekly", Orchestrator.LOCAL, TUESDAY, False),
        ("weekly", Orchestrator.AIRFLOW, MONDAY, False),
        ("weekly", Orchestrator.KUBEFLOW, MONDAY, False),
    ],
)
def test_whether_a_night_tunes_comes_from_the_spec_and_the_night(retune, target, night, due):
    spec = _load(f"tuning.retune={retune}").spec
    assert tuning_due(spec, target, night) is due


def _nodes(spec, tmp_path, target=Orchestrator.LOCAL) -> dict:
    from pipelines.builder.pipeline import build_pipeline

    return {n.id: n for n in build_pipeline(spec, tmp_path, target=target).components}


def test_a_tuning_night_builds_the_tuner_and_feeds_its_best_to_the_trainer(tmp_path):
    nodes = _nodes(_load().spec, tmp_path)
    tuner, trainer = nodes["tuner"], nodes["trainer"]
    assert tuner.exec_properties["tuner_fn"] == GENERIC_TUNER_FN
    assert json.loads(tuner.exec_properties["train_args"]) == {"num_steps": 100}  # trial_steps
    assert set(tuner.inputs) >= {"examples", "schema", "statistics"}
    assert trainer.inputs["hyperparameters"] is tuner.outputs["best_hyperparameters"]
    assert nodes["data_gate"] in tuner.upstream_nodes  # no trial trains on blocked data


def _record_search(spec, workdir, schema: bytes) -> str:
    """Records in the run's real ML Metadata store what TFX records of a Tuner that completed:
    its execution under the `penguin.tuner` node and a run context, having read a Schema
    artifact holding `schema` and written a HyperParameters artifact. Returns the latter's uri."""
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2 as pb

    from pipelines.core.metadata import connection_config
    from pipelines.core.paths import RunPaths

    paths = RunPaths(workdir=workdir.resolve(), spec=spec)
    paths.metadata_path.parent.mkdir(parents=True, exist_ok=True)
    store = metadata_store.MetadataStore(connection_config(spec, paths.metadata_path))
    schema_dir = workdir / "root/schema_gen/schema/3"
    schema_dir.mkdir(parents=True)
    (schema_dir / "schema.pbtxt").write_bytes(schema)
    best = workdir / "root/tuner/best_hyperparameters/5"

    schema_type = store.put_artifact_type(pb.ArtifactType(name="Schema"))
    best_type = store.put_artifact_type(pb.ArtifactType(name="HyperParameters"))
    tuner_type = store.put_execution_type(pb.ExecutionType(name="tfx.components.Tuner"))
    node_type = store.put_context_type(pb.ContextType(name="node"))
    run_type = store.put_context_type(pb.ContextType(name="pipeline_run"))
    read, wrote = store.put_artifacts(
        [
            pb.Artifact(type_id=schema_type, uri=str(schema_dir), state=pb.Artifact.LIVE),
            pb.Artifact(type_id=best_type, uri=str(best), state=pb.Artifact.LIVE),
        ]
    )
    contexts = store.put_contexts(
        [
            pb.Context(type_id=node_type, name="penguin.tuner"),
            pb.Context(type_id=run_type, name="penguin-20261130T010000Z"),
        ]
    )
    (execution,) = store.put_executions(
        [pb.Execution(type_id=tuner_type, last_known_state=pb.Execution.COMPLETE)]
    )
    store.put_events(
        [
            pb.Event(execution_id=execution, artifact_id=read, type=pb.Event.INPUT),
            pb.Event(execution_id=execution, artifact_id=wrote, type=pb.Event.OUTPUT),
        ]
    )
    store.put_attributions_and_associations(
        [],
        [pb.Association(context_id=c, execution_id=execution) for c in contexts],
    )
    return str(best)


def test_a_night_that_does_not_tune_resolves_the_latest_hyperparameters(tmp_path):
    from tfx.dsl.input_resolution.strategies.latest_artifact_strategy import (
        LatestArtifactStrategy,
    )

    from pipelines.core.metadata import last_tuning, open_store
    from pipelines.core.paths import RunPaths, project_file

    spec = _load("tuning.retune=reuse").spec
    best = _record_search(spec, tmp_path, project_file(spec.schema_.path).read_bytes())
    store = open_store(spec, RunPaths(workdir=tmp_path.resolve(), spec=spec).metadata_path)
    last = last_tuning(store, "penguin", "tuner")
    assert last.hyperparameters_uri == best and last.run_id == "penguin-20261130T010000Z"
    nodes = _nodes(spec, tmp_path)
    assert "tuner" not in nodes
    resolver = nodes["tuner" + LATEST_SUFFIX]
    assert resolver.exec_properties["resolver_class"] is LatestArtifactStrategy
    assert nodes["trainer"].inputs["hyperparameters"] is resolver.outputs["hyperparameters"]


def test_reuse_tunes_while_ml_metadata_holds_no_search(tmp_path):
    from pipelines.builder.nodes.tuner import TuneReason, tune_reason
    from pipelines.builder.pipeline import build_nodes
    from pipelines.core.paths import RunPaths

    spec = _load("tuning.retune=reuse").spec
    ctx = build_nodes(spec, RunPaths(workdir=tmp_path.resolve(), spec=spec))
    assert "tuner" in {n.id for n in ctx.nodes}
    assert "tuner" + LATEST_SUFFIX not in {n.id for n in ctx.nodes}
    assert ctx.notes["tuner"] == "tunes: none_tuned"
    assert tune_reason(ctx, "tuner", TUESDAY) is TuneReason.NONE_TUNED


@pytest.mark.parametrize("on_change", [True, False])
def test_a_schema_other_than_the_last_searchs_tunes_again_unless_told_not_to(tmp_path, on_change):
    from pipelines.core.paths import project_file

    spec = _load("tuning.retune=reuse", f"tuning.retune_on_schema_change={on_change}").spec
    curated = project_file(spec.schema_.path).read_bytes()
    # The last search read the curated schema before a column was added to it.
    _record_search(spec, tmp_path, curated.replace(b'name: "sex"', b'name: "colour"', 1))
    assert b'name: "sex"' in curated
    nodes = _nodes(spec, tmp_path)
    if on_change:
        assert "tuner" in nodes and "tuner" + LATEST_SUFFIX not in nodes
    else:
        assert "tuner" not in nodes and "tuner" + LATEST_SUFFIX in nodes


def test_tfxs_own_penguin_tuner_fn_runs_unchanged_with_transform(tmp_path):
    from tfx.components.tuner.component import Tuner

    components = WITH_TUNER.replace("{type: tuner}", "{type: transform}, {type: tuner}")
    spec = load_spec(
        "penguin",
        env="ci",
        overrides=[
            components,
            f"trainer.module={PENGUIN_TFX}",
            f"transform.module={PENGUIN_TFX}",
            "tuning={trial_steps: 10}",
        ],
    ).spec
    nodes = _nodes(spec, tmp_path)
    tuner = nodes["tuner"]
    assert type(tuner) is Tuner
    assert tuner.exec_properties["tuner_fn"] == f"{PENGUIN_TFX}.tuner_fn"
    assert tuner.inputs["transform_graph"] is nodes["transform"].outputs["transform_graph"]
    assert nodes["trainer"].inputs["hyperparameters"] is tuner.outputs["best_hyperparameters"]


@pytest.mark.parametrize("retune", ["always", "weekly"])
def test_a_tuner_compiles_for_kubeflow(tmp_path, retune):
    output = tmp_path / "penguin.json"
    sets = [a for o in (WITH_TUNER, SPACE, f"tuning.retune={retune}") for a in ("--set", o)]
    argv = ["compile", "penguin", "--env", "kubeflow", "--output", str(output), *sets]
    assert cli.main(argv) == 0
    job = json.loads(output.read_text())
    tasks = job_tasks(job["pipelineSpec"])
    executors = json.dumps(job["pipelineSpec"]["deploymentSpec"])
    if retune == "always":
        assert "tuner" in set(tasks["trainer"]["dependentTasks"])
        assert "components.tuner.component.Executor" in executors
    else:  # compiled once for every night: the latest tuned, resolved by KFP itself
        assert "tuner" not in tasks and "tuner" + LATEST_SUFFIX in tasks
        assert "components.tuner.component.Executor" not in executors


def test_a_tuner_builds_as_an_airflow_dag(tmp_path):
    from pipelines.run.airflow import airflow_dag

    spec = load_spec("penguin", env="airflow", overrides=[WITH_TUNER, SPACE]).spec
    dag = airflow_dag(spec.to_yaml_dict(), str(tmp_path))
    assert "tuner" in dag.get_task("trainer").upstream_task_ids


def test_tuned_values_replace_the_specs_in_the_trainers_terms():
    from components.trainer.hyperparameters import encode_layers, with_tuned

    trainer = {"learning_rate": 0.02, "hidden_units": [16, 8], "dropout": 0.0, "seed": 1}
    tuned = with_tuned(trainer, {"learning_rate": 0.1, "hidden_units": encode_layers((32, 16))})
    assert tuned == {"learning_rate": 0.1, "hidden_units": [32, 16], "dropout": 0.0, "seed": 1}
    assert with_tuned(trainer, {"units_of_a_team_module": 3}) == trainer
    assert trainer["hidden_units"] == [16, 8]  # the spec's block is left as it was
