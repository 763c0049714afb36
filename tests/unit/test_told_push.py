"""A Kubeflow run's push in Conveyor's store: the Pusher writes its decision into the run's
folder (components/pusher/executor.py), the exit handler reads it for the run's outcome and
records it in the spec's ML Metadata store (pipelines/core/metadata/told_push.py), and the
operations that read that store (`lineage`, `models`, `rollback`, `bless`) see the run as they
see a local one. The decisions here are written by the Pusher's own function from TFX
artifacts, as a Pusher task writes them; the exit handler is the component's own function.
"""

import json
from pathlib import Path

import pytest
from tfx.types import standard_artifacts

from components.pusher.executor import (
    JOB_NAME_KEY,
    JOB_RESOURCE_NAME_KEY,
    RUNS_DIR_KEY,
    write_push_decision,
)
from components.run_finish.component import final_status_facts, finish_final_status
from pipelines.core import metadata
from pipelines.core.metadata.told_push import TRAINED_FROM_PROPERTY
from pipelines.core.paths import RunPaths
from pipelines.finish.contract import read_result
from pipelines.serving_state.records import recorded_state
from pipelines.spec.loading import load_spec

CREATED = "2026-11-28T02:00:00Z"
SUCCEEDED = "SUCCEEDED"


@pytest.fixture
def kubeflow(tmp_path):
    """The penguin spec compiled for Kubeflow, its paths in a workdir, and its JSON."""
    spec = load_spec("penguin", env="kubeflow").spec
    paths = RunPaths(workdir=tmp_path / "workdir", spec=spec)
    return paths, json.dumps(spec.to_yaml_dict())


def _model(tmp_path: Path, name: str, spans: list[int]) -> standard_artifacts.Model:
    """A Model as the Trainer leaves it: a SavedModel's files, its final metrics and what it
    learned from (examples of `spans`, a schema, the code version)."""
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / "pipeline_root" / name / "trainer" / "model")
    serving = Path(model.uri) / "Format-Serving"
    serving.mkdir(parents=True)
    (serving / "saved_model.pb").write_text(f"the model of {name}")
    model.set_float_custom_property("conveyor_final_val_accuracy", 0.93)
    trained_from = {
        "examples": [
            {"uri": str(tmp_path / "pipeline_root" / f"night-{s}" / "examples"), "span": s}
            for s in spans
        ],
        "schema": str(tmp_path / "pipeline_root" / name / "schema_gen" / "schema"),
        "code_version": "abc123",
        "user_code": None,
    }
    model.set_string_custom_property(TRAINED_FROM_PROPERTY, json.dumps(trained_from))
    return model


def _as_kubeflow_input(artifact, title: str):
    """The artifact as TFX's Kubeflow entry point hands it to a downstream task: through KFP's
    RuntimeArtifact, its custom properties become struct values."""
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as kfp

    runtime = kfp.to_runtime_artifact(artifact, {})
    runtime.type.schema_title = title
    return kfp._parse_raw_artifact(runtime, {})


def _decide(paths: RunPaths, job: str, model, blessed: bool, push: dict) -> None:
    """Writes the decision a Pusher task of job `job` writes, for a PushedModel with `push`'s
    custom properties, given the Model and the blessing as KFP hands them to the task."""
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = model.uri.replace("trainer/model", "evaluator/blessing")
    blessing.set_int_custom_property("blessed", int(blessed))
    model = _as_kubeflow_input(model, "tfx.Model")
    blessing = _as_kubeflow_input(blessing, "tfx.ModelBlessing")
    pushed = standard_artifacts.PushedModel()
    pushed.uri = model.uri.replace("trainer/model", "pusher/pushed_model")
    for key, value in push.items():
        if isinstance(value, int):
            pushed.set_int_custom_property(key, value)
        else:
            pushed.set_string_custom_property(key, value)
    written = write_push_decision(
        {"model": [model], "model_blessing": [blessing]},
        {"pushed_model": [pushed]},
        {
            RUNS_DIR_KEY: str(paths.runs_dir),
            JOB_NAME_KEY: job,
            JOB_RESOURCE_NAME_KEY: "{{$.pipeline_job_resource_name}}",  # not resolved here
        },
    )
    assert written == str(paths.run_dir(job) / "push_decision.json")


def _pushed(paths: RunPaths, job: str, version: int) -> dict:
    """A push of `version` as the Pusher records it, with the version's folder in place."""
    folder = paths.serving_dir / str(version)
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_text(f"version {version}")
    return {
        "pushed": 1,
        "pushed_version": str(version),
        "pushed_destination": str(folder),
        "conveyor_labels": "stable",
        "conveyor_reason_code": "pushed",
        "conveyor_reason": f"pushed version {version}",
    }


def _finish(paths: RunPaths, resolved: str, job: str) -> list[str]:
    said: list[str] = []
    status = json.dumps({"state": SUCCEEDED, "pipelineJobName": job})
    finish_final_status(status, resolved, str(paths.workdir), CREATED, echo=said.append)
    return said


def test_a_kubeflow_push_is_recorded_where_lineage_and_models_read_it(kubeflow, tmp_path):
    paths, resolved = kubeflow
    for night, version in ((1, 1), (2, 2)):
        job = f"penguin-night-{night}"
        # Night 2 learned from night 1's span too (its training window).
        model = _model(tmp_path, job, spans=list(range(1, night + 1)))
        _decide(paths, job, model, blessed=True, push=_pushed(paths, job, version))
        said = _finish(paths, resolved, job)
        assert any(
            line.startswith("metadata: the run's push decision is recorded") for line in said
        )
        summary = json.loads((paths.run_dir(job) / "summary.json").read_text())
        assert (summary["outcome"], summary["pushed_version"]) == ("pushed", str(version))

    store = metadata.open_store(paths.spec, paths.metadata_path)
    lineage = metadata.pushed_lineage(store, "penguin")
    assert [(p.version, p.run_id, p.spans) for p in lineage] == [
        ("1", "penguin-night-1", [1]),
        ("2", "penguin-night-2", [1, 2]),
    ]
    assert lineage[1].code_version == "abc123"
    assert lineage[1].model_uri.endswith("penguin-night-2/trainer/model")
    assert lineage[1].schema_uri.endswith("penguin-night-2/schema_gen/schema")
    # Night 1's examples are one artifact, linked from both nights' Trainers.
    examples = [a for a in store.get_artifacts() if a.uri.endswith("night-1/examples")]
    assert len(examples) == 1
    has_runs, known, labels = recorded_state(paths)
    assert (has_runs, known) == (True, {1, 2})
    assert labels.labels.get("stable") == 2

    # An exit handler run again (KFP retries it) records the push once.
    _finish(paths, resolved, "penguin-night-2")
    assert [p.version for p in metadata.pushed_lineage(store, "penguin")] == ["1", "2"]


def test_a_model_held_back_is_not_pushed_with_the_pushers_reason(kubeflow, tmp_path):
    paths, resolved = kubeflow
    job = "penguin-night-4"
    model = _model(tmp_path, job, spans=[4])
    held = {
        "pushed": 0,
        "conveyor_reason_code": "model_not_blessed",
        "conveyor_reason": "the model did not pass the evaluation thresholds",
    }
    _decide(paths, job, model, blessed=False, push=held)
    status = json.dumps({"state": SUCCEEDED, "pipelineJobName": job})
    result = read_result(final_status_facts(status, resolved, str(paths.workdir), CREATED))
    assert (result.outcome, result.reason) == ("not_pushed", "model_not_blessed")
    assert result.message == "nothing pushed: the model did not pass the evaluation thresholds"
    _finish(paths, resolved, job)
    has_runs, known, _ = recorded_state(paths)
    assert (has_runs, known) == (True, set())


def test_a_candidate_held_for_review_on_kubeflow_can_be_blessed(kubeflow, tmp_path):
    from pipelines.ops.bless import bless
    from pipelines.serving_state.versions import served_versions

    paths, resolved = kubeflow
    job = "penguin-night-1"
    model = _model(tmp_path, job, spans=[1])
    held = {
        "pushed": 0,
        "conveyor_reason_code": "awaiting_manual_bless",
        "conveyor_reason": "no model is served yet and evaluation.first_run is ...",
    }
    _decide(paths, job, model, blessed=True, push=held)
    _finish(paths, resolved, job)

    blessed = bless(paths, job, "ana", "reviewed the report")
    assert blessed.version == 1
    assert served_versions(str(paths.serving_dir)) == [1]
    store = metadata.open_store(paths.spec, paths.metadata_path)
    (lineage,) = metadata.pushed_lineage(store, "penguin")
    assert (lineage.version, lineage.run_id, lineage.spans) == ("1", job, [1])


def test_a_store_that_cannot_take_the_push_is_said_and_the_outcome_stands(kubeflow, tmp_path):
    paths, resolved = kubeflow
    job = "penguin-night-1"
    _decide(paths, job, _model(tmp_path, job, [1]), blessed=True, push=_pushed(paths, job, 1))
    paths.metadata_path.parent.mkdir(parents=True, exist_ok=True)
    paths.metadata_path.mkdir()  # a folder where the SQLite file should be
    said = _finish(paths, resolved, job)
    assert any(line.startswith("warning: the run's push decision is not recorded") for line in said)
    summary = json.loads((paths.run_dir(job) / "summary.json").read_text())
    assert (summary["outcome"], summary["pushed_version"]) == ("pushed", "1")
