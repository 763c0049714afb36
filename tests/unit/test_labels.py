"""Version labels in models.config, promote and rollback, on a real SQLite ML Metadata store.

A push here is what the Pusher does minus TFX: `versions.publish` renames a (tiny) version into
place, `push.label_pushed_version` moves the labels and rewrites models.config,
and the push is recorded in ML Metadata the way TFX records the Pusher's execution (a Trainer
with its Examples and Model, a Pusher with its PushedModel carrying `pushed`, `pushed_version`
and `conveyor_labels`), so the rules, the record and `conveyor models` read real files and a
real store.
"""

import json
import os
import subprocess
import sys
import time

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipelines import cli, serving_state
from pipelines.core.metadata import connection_config, custom_property
from pipelines.core.paths import FRAMEWORK_ROOT, RunPaths
from pipelines.serving_state import config_files, labels, records, versions
from pipelines.serving_state.config_files import MODELS_CONFIG, read_models_config, served_models
from pipelines.serving_state.push import label_pushed_version
from pipelines.serving_state.reconcile import reconcile_labels
from pipelines.spec.loading import load_spec


def _paths(tmp_path, *overrides: str) -> RunPaths:
    spec = load_spec("penguin", overrides=list(overrides)).spec
    return RunPaths(workdir=tmp_path, spec=spec)


class Pipeline:
    """One pipeline's serving folder and ML Metadata store, pushed to as the Pusher does."""

    def __init__(self, paths: RunPaths):
        self.paths = paths
        self.store = metadata_store.MetadataStore(
            connection_config(paths.spec, paths.metadata_path)
        )
        put = self.store.put_context_type
        self.pipeline_type = put(metadata_store_pb2.ContextType(name="pipeline"))
        self.run_type = put(metadata_store_pb2.ContextType(name="pipeline_run"))
        self.node_type = put(metadata_store_pb2.ContextType(name="node"))
        [self.pipeline] = self.store.put_contexts(
            [metadata_store_pb2.Context(type_id=self.pipeline_type, name=paths.spec.name)]
        )
        artifact = self.store.put_artifact_type
        self.types = {
            n: artifact(metadata_store_pb2.ArtifactType(name=n))
            for n in ("Examples", "Model", "PushedModel")
        }
        self.runs = 0

    def push(self, record: bool = True, write_model=None) -> int:
        """Publishes the next version and moves its labels; records it unless told not to
        (a push killed after models.config was rewritten, before TFX's record).
        `write_model(folder, run)` writes a real SavedModel instead of a stand-in file."""
        self.runs += 1
        model = self.paths.workdir / f"model-{self.runs}"
        if write_model is None:
            model.mkdir(parents=True)
            (model / "saved_model.pb").write_bytes(b"model %d" % self.runs)
        else:
            write_model(model, self.runs)
        base = str(self.paths.serving_dir)
        version, _ = versions.publish(str(model), base, {"pushed_at": "2026-12-01T10:00:00Z"})
        self.rollout = label_pushed_version(
            self.paths.serving_config_dir, self.paths.spec.push, base, version, lambda _: None
        )
        if record:
            self._record(version, self.rollout.on(version))
        return version

    def _record(self, version: int, moved: list[str]) -> None:
        store = self.store
        run_name = f"{self.paths.spec.name}-2026120{self.runs}T100000.000000Z"
        [run] = store.put_contexts(
            [metadata_store_pb2.Context(type_id=self.run_type, name=run_name)]
        )
        examples = metadata_store_pb2.Artifact(type_id=self.types["Examples"], uri="/e")
        examples.custom_properties["span"].int_value = 20400 + self.runs  # a dated span
        model = metadata_store_pb2.Artifact(type_id=self.types["Model"], uri=f"/m/{version}")
        model.custom_properties["conveyor_final_val_accuracy"].double_value = 0.9 + version / 100
        push = metadata_store_pb2.Artifact(type_id=self.types["PushedModel"], uri=f"/p/{version}")
        push.custom_properties["pushed"].int_value = 1
        push.custom_properties["pushed_version"].string_value = str(version)
        push.custom_properties[serving_state.LABELS_PROPERTY].string_value = ",".join(moved)
        contexts = store.get_contexts_by_id([self.pipeline, run])
        for node, inputs, output in (("Trainer", [examples], model), ("Pusher", [model], push)):
            type_id = store.put_execution_type(metadata_store_pb2.ExecutionType(name=node))
            execution = metadata_store_pb2.Execution(
                type_id=type_id, last_known_state=metadata_store_pb2.Execution.COMPLETE
            )
            events = [
                (a, metadata_store_pb2.Event(type=metadata_store_pb2.Event.INPUT)) for a in inputs
            ]
            events.append((output, metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT)))
            _, ids, _ = store.put_execution(execution, events, contexts)
            for artifact, artifact_id in zip([*inputs, output], ids, strict=True):
                artifact.id = artifact_id

    def entry(self):
        """This model's models.config entry, read back as TF Serving would parse it."""
        path = self.paths.serving_config_dir / MODELS_CONFIG
        read_models_config(path)  # raises if the server would refuse the file
        [entry] = [m for m in served_models(path) if m.name == self.paths.spec.push.model_name]
        return entry

    def held(self) -> bool:
        return labels.read_hold(self.paths.serving_config_dir, "penguin") is not None

    def moves(self) -> list:
        return list(self.store.get_executions_by_type(records.LABEL_MOVE_TYPE))


def test_pushes_move_every_label_a_rollback_holds_stable_and_promote_ends_the_hold(tmp_path):
    pipeline = Pipeline(_paths(tmp_path))
    paths = pipeline.paths
    assert pipeline.push() == 1 and pipeline.push() == 2
    entry = pipeline.entry()
    assert entry.labels == {"stable": 2, "canary": 2}
    assert entry.policy == "labelled" and entry.versions == (2,)
    assert entry.base_path == str(paths.serving_dir)
    assert (paths.serving_config_dir / "monitoring.config").is_file()

    moved = serving_state.rollback(
        paths, None, "ana", "version 2 answers slowly", echo=lambda _: None
    )

    assert moved.before == {"stable": 2, "canary": 2} and moved.after == {"stable": 1, "canary": 1}
    assert pipeline.entry().labels == {"stable": 1, "canary": 1}
    assert pipeline.entry().versions == (1,)
    assert pipeline.held() and versions.served_versions(str(paths.serving_dir)) == [1, 2]
    recorded = {custom_property(m, "label"): m for m in pipeline.moves()}
    assert set(recorded) == {"stable", "canary"}
    stable = recorded["stable"]
    assert custom_property(stable, "action") == "rollback"
    assert custom_property(stable, "version") == 1
    assert custom_property(stable, "previous_version") == 2
    assert custom_property(stable, "reason") == "version 2 answers slowly"
    assert custom_property(stable, "by") == "ana" and custom_property(stable, "at")

    # Held: the next pushes get canary only; stable stays on the rolled-back-to version.
    assert pipeline.push() == 3
    assert pipeline.entry().labels == {"stable": 1, "canary": 3}
    assert pipeline.entry().versions == (1, 3)
    assert pipeline.push() == 4
    assert pipeline.entry().labels == {"stable": 1, "canary": 4}
    assert not reconcile_labels(paths)  # files and record agree

    serving_state.promote(paths, 4, "stable", "ana", "canary 4 looked good for a day")
    assert pipeline.entry().labels == {"stable": 4, "canary": 4} and not pipeline.held()
    assert pipeline.push() == 5
    assert pipeline.entry().labels == {"stable": 5, "canary": 5}


def test_with_after_rollback_stable_the_next_push_takes_every_label(tmp_path):
    pipeline = Pipeline(_paths(tmp_path, "push.after_rollback=stable"))
    pipeline.push(), pipeline.push()
    serving_state.rollback(pipeline.paths, 1, "ana", "", echo=lambda _: None)
    assert pipeline.entry().labels == {"stable": 1, "canary": 1} and not pipeline.held()
    pipeline.push()
    assert pipeline.entry().labels == {"stable": 3, "canary": 3}


def test_a_second_rollback_goes_further_back_not_forward(tmp_path):
    pipeline = Pipeline(_paths(tmp_path))
    for _ in range(3):
        pipeline.push()
    serving_state.rollback(pipeline.paths, None, "ana", "3 is bad", echo=lambda _: None)
    assert pipeline.entry().labels["stable"] == 2
    pipeline.push()  # 4, canary only
    serving_state.promote(pipeline.paths, 4, "stable", "ana", "")
    serving_state.rollback(pipeline.paths, None, "ana", "4 is bad too", echo=lambda _: None)
    assert pipeline.entry().labels == {"stable": 2, "canary": 2}  # stable's previous value
    serving_state.rollback(pipeline.paths, None, "ana", "and 2", echo=lambda _: None)
    assert pipeline.entry().labels == {"stable": 1, "canary": 1}


def test_all_lists_every_version_and_keeps_the_labels(tmp_path):
    pipeline = Pipeline(_paths(tmp_path, "push.version_policy=all"))
    pipeline.push(), pipeline.push()
    serving_state.promote(pipeline.paths, 1, "canary", "ana", "compare")
    entry = pipeline.entry()
    assert entry.policy == "all" and entry.versions == ()
    assert entry.labels == {"stable": 2, "canary": 1}


def test_retention_never_retires_a_labelled_version(tmp_path):
    pipeline = Pipeline(_paths(tmp_path, "push.keep_versions=1"))
    pipeline.push(), pipeline.push()
    serving_state.rollback(pipeline.paths, 1, "ana", "", echo=lambda _: None)
    for _ in range(3):
        pipeline.push()  # 3, 4, 5: canary only, stable held on 1

    retired = serving_state.retain(pipeline.paths, lambda _: None)

    assert retired == [2, 3, 4]
    assert versions.served_versions(str(pipeline.paths.serving_dir)) == [1, 5]
    assert pipeline.entry().labels == {"stable": 1, "canary": 5}


def test_refusals_name_the_version_or_label(tmp_path):
    pipeline = Pipeline(_paths(tmp_path))
    paths = pipeline.paths
    with pytest.raises(
        serving_state.LabelError, match="nothing has been pushed, so there is nothing"
    ):
        serving_state.rollback(paths, None, "ana", "", echo=lambda _: None)
    pipeline.push()
    with pytest.raises(
        serving_state.LabelError, match="below the served version 1 .* nothing to roll"
    ):
        serving_state.rollback(paths, None, "ana", "", echo=lambda _: None)
    with pytest.raises(serving_state.LabelError, match="version 7 of penguin is not on disk"):
        serving_state.promote(paths, 7, "stable", "ana", "")
    pipeline.push(record=False)  # version 2: on disk, never recorded
    with pytest.raises(serving_state.LabelError, match="version 2 is not recorded as pushed"):
        serving_state.promote(paths, 2, "canary", "ana", "")
    with pytest.raises(serving_state.LabelError, match="label 'beta' is not one of push.labels"):
        serving_state.promote(paths, 1, "beta", "ana", "")
    latest = _paths(tmp_path, "push.version_policy=latest", "push.labels=[]")
    with pytest.raises(serving_state.LabelError, match="has no version labels"):
        serving_state.promote(latest, 1, "stable", "ana", "")
    assert pipeline.moves() == []  # nothing refused was recorded


def test_rollback_under_latest_hides_the_newer_versions_and_numbers_stay_above_them(tmp_path):
    pipeline = Pipeline(_paths(tmp_path, "push.version_policy=latest", "push.labels=[]"))
    base = str(pipeline.paths.serving_dir)
    for _ in range(3):
        pipeline.push()
    assert pipeline.entry().policy == "latest" and pipeline.entry().labels == {}

    moved = serving_state.rollback(pipeline.paths, 1, "ana", "bad week", echo=lambda _: None)

    assert versions.served_versions(base) == [1]  # what `latest` resolves to now
    assert [h.split("-")[2] for h in moved.hidden] == ["2", "3"]
    assert sorted(os.listdir(base))[:2] == moved.hidden  # files kept, hidden from the server
    assert [custom_property(m, "label") for m in pipeline.moves()] == [labels.LATEST_LABEL]
    assert pipeline.push() == 4  # never 2 again: that number was served once


def test_reconcile_moves_labels_off_a_push_killed_before_its_record(tmp_path):
    pipeline = Pipeline(_paths(tmp_path))
    paths = pipeline.paths
    pipeline.push(), pipeline.push()
    serving_state.rollback(paths, 1, "ana", "", echo=lambda _: None)
    pipeline.push()  # 3: canary
    # A push killed between models.config and the record: canary points to an unknown 4.
    assert pipeline.push(record=False) == 4
    assert pipeline.entry().labels == {"stable": 1, "canary": 4}
    labels.write_hold(paths.serving_config_dir, "penguin", None)  # and the hold file lost

    done = serving_state.reconcile(paths, lambda _: None)

    assert done.quarantined and done.quarantined[0].startswith("4 -> .quarantined-4-")
    # Back where ML Metadata last put each label (canary on 3, not the newest recorded alone).
    assert pipeline.entry().labels == {"stable": 1, "canary": 3}
    assert pipeline.held()
    assert "label canary 4 -> 3" in done.labels_fixed
    assert "models.config put back in step" in done.describe()


def test_a_promote_killed_before_its_record_is_undone_by_reconcile(tmp_path):
    pipeline = Pipeline(_paths(tmp_path))
    pipeline.push(), pipeline.push()
    config_dir = pipeline.paths.serving_config_dir
    push = pipeline.paths.spec.push
    base = str(pipeline.paths.serving_dir)
    # What a promote does before its record: models.config only.
    config_files.update_entry(
        config_dir, push, lambda _: labels.served_model(push, base, {"stable": 1, "canary": 2})
    )
    assert reconcile_labels(pipeline.paths) == ["label stable 1 -> 2"]
    assert pipeline.entry().labels == {"stable": 2, "canary": 2}


def test_models_config_keeps_the_other_pipelines_models(tmp_path):
    penguin = Pipeline(_paths(tmp_path))
    penguin.push()
    taxi_spec = load_spec("taxi").spec
    taxi = RunPaths(workdir=tmp_path, spec=taxi_spec)
    assert taxi.serving_config_dir == penguin.paths.serving_config_dir  # both `serving`
    config_files.update_entry(
        taxi.serving_config_dir,
        taxi_spec.push,
        lambda _: labels.served_model(taxi_spec.push, str(taxi.serving_dir), {"stable": 7}),
    )
    penguin.push()
    models = {m.name: m for m in served_models(taxi.serving_config_dir / MODELS_CONFIG)}
    assert models["taxi"].labels == {"stable": 7}
    assert models["penguin"].labels == {"stable": 2, "canary": 2}


def test_lineage_shows_the_label_moves_of_each_version(tmp_path, capsys):
    pipeline = Pipeline(_paths(tmp_path))
    pipeline.push(), pipeline.push()
    serving_state.rollback(pipeline.paths, 1, "ana", "slow", echo=lambda _: None)
    capsys.readouterr()
    assert cli.main(["lineage", "penguin", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    one = out[out.index("version 1:") : out.index("version 2:")]
    assert "labels    canary, stable by push at" in one
    assert "labels    stable by rollback at" in one and "(from version 2) by ana: slow" in one
    assert "labels    canary, stable by push" in out[out.index("version 2:") :]


def test_conveyor_models_lists_every_version_without_importing_tensorflow(tmp_path):
    pipeline = Pipeline(_paths(tmp_path))
    for _ in range(3):
        pipeline.push()
    serving_state.rollback(pipeline.paths, 2, "ana", "3 is slow", echo=lambda _: None)
    pipeline.push(record=False)  # 4: on disk, unknown to ML Metadata
    probe = (
        "import sys, time; start = time.perf_counter(); from pipelines import cli; "
        f"code = cli.main(['models', 'penguin', '--workdir', {str(tmp_path)!r}]); "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tfx')); "
        "print('PROBE', code, round(time.perf_counter() - start, 3), heavy)"
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=FRAMEWORK_ROOT, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    *table, probe_line = done.stdout.strip().splitlines()
    _, code, seconds, heavy = probe_line.split(" ", 3)
    assert code == "0" and heavy == "[]"
    # What keeps it fast is that nothing heavy is imported (checked above); the time itself is
    # a figure for the docs (0.84 s on 2026-12-01), not an assertion.
    print(f"conveyor models: {seconds} s in the command, {wall:.2f} s wall")
    assert "held: stable stays on version 2" in table[0] + table[1]
    rows = {line.split()[0]: line.split() for line in table if line[:1].isdigit()}
    assert rows["4"][1:3] == ["canary", "no"]  # the unrecorded push moved canary
    assert rows["3"][1:3] == ["-", "yes"]
    assert rows["2"][1:3] == ["stable", "yes"]
    assert rows["2"][3] == "penguin-20261202T100000.000000Z"
    assert rows["2"][4] == "2025-11-10"  # span 20402, a night
    assert rows["2"][5] == "val_accuracy=0.92"
    # The pushed-at time, then the model card column (no card: these pushes ran no pipeline).
    assert " ".join(rows["1"][-3:-1]) == "2026-12-01 10:00:00" and rows["1"][-1] == "-"
    assert json.loads((pipeline.paths.serving_dir / "2" / versions.PUSH_RECORD).read_text())
