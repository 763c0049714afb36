"""Reconciling TF Serving's base path with ML Metadata, on a real SQLite ML Metadata store."""

import os

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from components.pusher import layout
from pipelines.core.paths import RunPaths
from pipelines.ops import serving_state
from pipelines.spec.loading import load_spec


def _paths(tmp_path, keep=None) -> RunPaths:
    overrides = [f"push.keep_versions={keep}"] if keep is not None else []
    return RunPaths(workdir=tmp_path, spec=load_spec("penguin", overrides=overrides).spec)


def _record_pushes(paths: RunPaths, versions) -> None:
    """What TFX leaves in ML Metadata after pushes: a pipeline context and PushedModel
    artifacts carrying Conveyor's `pushed` and `pushed_version` properties."""
    from pipelines.core.metadata import connection_config

    store = metadata_store.MetadataStore(connection_config(paths.spec, paths.metadata_path))
    context_type = store.put_context_type(metadata_store_pb2.ContextType(name="pipeline"))
    context = metadata_store_pb2.Context(type_id=context_type, name=paths.spec.name)
    [context_id] = store.put_contexts([context])
    artifact_type = store.put_artifact_type(metadata_store_pb2.ArtifactType(name="PushedModel"))
    artifacts = []
    for version in versions:
        artifact = metadata_store_pb2.Artifact(type_id=artifact_type, uri=f"/x/{version}")
        artifact.custom_properties["pushed"].int_value = 1
        artifact.custom_properties["pushed_version"].string_value = str(version)
        artifacts.append(artifact)
    ids = store.put_artifacts(artifacts)
    store.put_attributions_and_associations(
        [metadata_store_pb2.Attribution(artifact_id=i, context_id=context_id) for i in ids], []
    )


def _serve(paths: RunPaths, versions) -> None:
    for version in versions:
        folder = paths.serving_dir / str(version)
        folder.mkdir(parents=True)
        (folder / "saved_model.pb").write_bytes(b"model %d" % version)


def test_a_version_metadata_never_recorded_is_quarantined_and_serving_falls_back(tmp_path):
    paths = _paths(tmp_path)
    _serve(paths, [1, 2, 3])
    _record_pushes(paths, [1, 2])  # version 3's run was killed between rename and record
    (paths.serving_dir / ".incoming-4-77").mkdir()
    lines = []

    done = serving_state.reconcile(paths, lines.append)

    assert layout.served_versions(str(paths.serving_dir)) == [1, 2]
    [hidden] = [n for n in os.listdir(paths.serving_dir) if n.startswith(".quarantined-3-")]
    assert (paths.serving_dir / hidden / "saved_model.pb").read_bytes() == b"model 3"
    assert done.removed_leftovers == [".incoming-4-77"]
    assert "quarantined" in lines[0] and (paths.runs_dir / "serving_reconcile.jsonl").is_file()


def test_a_fresh_store_or_older_unknown_versions_are_never_removed(tmp_path):
    paths = _paths(tmp_path)
    _serve(paths, [1, 2])
    assert serving_state.reconcile(paths, print).quarantined == []  # no store at all
    _record_pushes(paths, [2])
    done = serving_state.reconcile(paths, print)
    assert done.quarantined == [] and done.unknown_kept == [1]
    assert layout.served_versions(str(paths.serving_dir)) == [1, 2]


def test_retention_retires_only_recorded_versions_beyond_keep(tmp_path):
    paths = _paths(tmp_path, keep=1)
    _serve(paths, [1, 2, 3, 4])
    _record_pushes(paths, [2, 3, 4])  # 1 is unknown: kept, whatever keep says
    assert serving_state.retain(paths, print) == [2, 3]
    assert layout.served_versions(str(paths.serving_dir)) == [1, 4]


def test_nothing_to_do_leaves_no_trace(tmp_path):
    paths = _paths(tmp_path)
    _serve(paths, [1])
    _record_pushes(paths, [1])
    assert not serving_state.reconcile(paths, print).changed
    assert not (paths.runs_dir / "serving_reconcile.jsonl").exists()
