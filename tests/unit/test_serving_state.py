"""Reconciling TF Serving's base path with ML Metadata, on a real SQLite ML Metadata store;
and serving state kept in its one room (pipelines/serving_state), checked on the source."""

import ast
import os

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipelines import serving_state
from pipelines.core.paths import FRAMEWORK_ROOT, RunPaths
from pipelines.serving_state import versions
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

    assert versions.served_versions(str(paths.serving_dir)) == [1, 2]
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
    assert versions.served_versions(str(paths.serving_dir)) == [1, 2]


def test_retention_retires_only_recorded_versions_beyond_keep(tmp_path):
    paths = _paths(tmp_path, keep=1)
    _serve(paths, [1, 2, 3, 4])
    _record_pushes(paths, [2, 3, 4])  # 1 is unknown: kept, whatever keep says
    assert serving_state.retain(paths, print) == [2, 3]
    assert versions.served_versions(str(paths.serving_dir)) == [1, 4]


def test_nothing_to_do_leaves_no_trace(tmp_path):
    paths = _paths(tmp_path)
    _serve(paths, [1])
    _record_pushes(paths, [1])
    assert not serving_state.reconcile(paths, print).changed
    assert not (paths.runs_dir / "serving_reconcile.jsonl").exists()


# --- one room: nobody outside pipelines/serving_state writes models.config or reads the hold --

# The room's own writers and hold readers: only modules of pipelines/serving_state use them.
ROOM_ONLY = {"update_entry", "write_serving_configs", "write_hold", "read_hold", "hold_file"}
SERVING_FILES = {"MODELS_CONFIG", "MONITORING_CONFIG", "BATCHING_CONFIG"}
SERVING_FILE_NAMES = ("models.config", "monitoring.config", "batching.config")
OPENERS = {"open", "Path", "join", "read_text", "write_text", "unlink", "replace", "rename"}


def _names_a_serving_file(node) -> bool:
    """Whether an expression names models.config or a config file beside it, or the hold."""
    for part in ast.walk(node):
        if isinstance(part, ast.Name) and part.id in SERVING_FILES:
            return True
        if isinstance(part, ast.Attribute) and part.attr in SERVING_FILES:
            return True
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            if part.value.endswith(SERVING_FILE_NAMES):
                return True
    return False


def _room_violations(source: str) -> list[str]:
    """What in `source` (a module outside the room) reaches into serving state's files: a
    use of the room's writers or hold readers, the hold file's name, or a path built to
    models.config (or monitoring.config, batching.config) to open, write or remove."""
    found = []
    for node in ast.walk(ast.parse(source)):
        used = None
        if isinstance(node, ast.Name):
            used = node.id
        elif isinstance(node, ast.Attribute):
            used = node.attr
        elif isinstance(node, ast.alias):
            used = node.name.rsplit(".", 1)[-1]
        if used in ROOM_ONLY:
            found.append(f"line {getattr(node, 'lineno', '?')}: uses {used}")
        if isinstance(node, ast.Constant) and ".conveyor-hold" in str(node.value):
            found.append(f"line {node.lineno}: names the hold file")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if _names_a_serving_file(node.right):
                found.append(f"line {node.lineno}: builds a path to {ast.unparse(node.right)}")
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in OPENERS and any(_names_a_serving_file(a) for a in node.args):
                found.append(f"line {node.lineno}: {name}() on a serving config file")
    return found


def test_only_the_serving_state_room_writes_models_config_or_reads_the_hold():
    wrong = []
    room = FRAMEWORK_ROOT / "pipelines" / "serving_state"
    for package in ("pipelines", "components", "monitoring", "bench"):
        for path in sorted((FRAMEWORK_ROOT / package).rglob("*.py")):
            if room in path.parents:
                continue
            for problem in _room_violations(path.read_text()):
                wrong.append(f"{path.relative_to(FRAMEWORK_ROOT)} {problem}")
    assert wrong == []


def test_the_room_check_catches_each_way_around_it():
    assert _room_violations("from pipelines.serving_state.labels import read_hold")
    assert _room_violations("from pipelines.serving_state import config_files as c\nc.update_entry")
    assert _room_violations("p = config_dir / MODELS_CONFIG")
    assert _room_violations("open(os.path.join(d, 'models.config'), 'w')")
    assert _room_violations("Path(d, config_files.BATCHING_CONFIG).unlink()")
    assert _room_violations("name = f'.conveyor-hold-{model}.json'")
    # Naming the file for a model server's flag is not opening it.
    assert not _room_violations("flag = f'--model_config_file={MOUNT}/{MODELS_CONFIG}'")
    assert not _room_violations("path = models_config_path(config_dir)")
