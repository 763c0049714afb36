"""Versions on disk: TF Serving's model base path, with no TFX import. What a push publishes
(the Pusher, `conveyor bless`), and what reconcile and retention read and tidy.

A base path holds integer version folders (`<base>/1/`, `<base>/2/`...), each a SavedModel with
Conveyor's push record beside it. TF Serving loads only integer folders, so Conveyor's
transient folders are hidden names in the same base path (a rename within one file system is
atomic): `.incoming-<v>-<pid>` while a version is copied, `.retired-<v>-<pid>` while one is
deleted, `.quarantined-<v>-<stamp>` for a version ML Metadata never recorded, and
`.rolled-back-<v>-<stamp>` for a version `conveyor rollback` took out of a `latest` server's
sight (its number is never given to another version).

A base path in a bucket (gs://, s3://) has no rename: a "move" there is a copy of each object
and then a deletion. So a version is published in an order a reader can rely on: its files are
staged under `.incoming-<v>-<pid>/`, then copied into `<v>/` with the SavedModel's graph
(`saved_model.pb`) after every variable and asset, and Conveyor's push record last. What TF
Serving sees at each step (docs/storage.md): nothing of the staging prefix (it loads integer
folders only); `<v>/` without its graph, which it cannot load and retries; then a whole model.
Conveyor counts a version in a bucket as published only once its push record is there, and
reconcile deletes a `<v>/` a killed push left without one. Taking a version away deletes its
graph first, so no server starts loading what is being deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

from pipelines.core import storage
from pipelines.core.failpoints import failpoint
from pipelines.serving_state.durable_files import fsync_dir, fsync_tree

PUSH_RECORD = "conveyor_push.json"  # TF Serving ignores files it does not know
INCOMING_PREFIX = ".incoming-"
RETIRED_PREFIX = ".retired-"
QUARANTINE_PREFIX = ".quarantined-"
ROLLED_BACK_PREFIX = ".rolled-back-"
SAVED_MODEL_GRAPH = "saved_model.pb"  # what TF Serving's SavedModel loader reads first


# Folders under a base path, local or in a bucket.


def _folders(base_dir: str, links: bool = True) -> list[str]:
    """The names of the folders directly under `base_dir` ([] when there is none); locally,
    with `links` False, not a link to a folder (never deleted through)."""
    if storage.is_remote(base_dir):
        if not storage.isdir(base_dir):
            return []
        return [n for n in storage.listdir(base_dir) if storage.isdir(storage.join(base_dir, n))]
    if not os.path.isdir(base_dir):
        return []
    paths = {name: os.path.join(base_dir, name) for name in os.listdir(base_dir)}
    wanted = [n for n, path in paths.items() if os.path.isdir(path)]
    return wanted if links else [n for n in wanted if not os.path.islink(paths[n])]


def _publication_order(files: list[str]) -> list[str]:
    """Files in the order a reader may rely on: everything else, then the SavedModel's graph,
    then the push record (the mark that the version is whole)."""
    last = (SAVED_MODEL_GRAPH, PUSH_RECORD)
    return [f for f in files if f not in last] + [f for f in last if f in files]


def _remove_folder(path: str) -> None:
    """Deletes a folder and all under it; in a bucket, the graph first (a server polling the
    base path then no longer starts loading it), then the rest."""
    if not storage.is_remote(path):
        shutil.rmtree(path)
        return
    graph = storage.join(path, SAVED_MODEL_GRAPH)
    if storage.exists(graph):
        storage.remove(graph)
    storage.remove_tree(path)


def _move_folder(base_dir: str, name: str, new_name: str) -> None:
    """Renames `base_dir/name` to `base_dir/new_name`: atomically on a local disk; in a bucket a
    copy of each object (the graph and the push record last) and then the deletion of the old
    ones (the graph first)."""
    source, target = os.path.join(base_dir, name), os.path.join(base_dir, new_name)
    if not storage.is_remote(base_dir):
        os.rename(source, target)
        fsync_dir(base_dir)
        return
    source, target = storage.join(base_dir, name), storage.join(base_dir, new_name)
    for relative in _publication_order(storage.list_files(source)):
        storage.copy(storage.join(source, relative), storage.join(target, relative))
    _remove_folder(source)


def model_digest(model_dir: str) -> str:
    """SHA-256 over every file's relative path and bytes: equal digests, equal models."""
    digest = hashlib.sha256()
    if storage.is_remote(model_dir):
        for relative in storage.list_files(model_dir):
            digest.update(relative.encode())
            digest.update(storage.read_bytes(storage.join(model_dir, relative)))
        return digest.hexdigest()
    for root, dirs, files in os.walk(model_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, model_dir).encode())
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def _numbered_folders(base_dir: str) -> tuple[list[int], list[int]]:
    """(complete, incomplete) integer folders under a base path, ascending. Locally every one
    is complete (a version appears by one rename); in a bucket one is complete once its push
    record, the last object a push writes, is there."""
    numbered = sorted(int(name) for name in _folders(base_dir) if name.isdigit())
    if not storage.is_remote(base_dir):
        return numbered, []
    recorded = {v for v in numbered if storage.exists(storage.join(base_dir, str(v), PUSH_RECORD))}
    return [v for v in numbered if v in recorded], [v for v in numbered if v not in recorded]


def served_versions(base_dir: str) -> list[int]:
    """Integer version directories under a TF Serving model base path, ascending; in a bucket
    only those whose push record is there (the last object a push writes)."""
    return _numbered_folders(base_dir)[0]


def incomplete_versions(base_dir: str) -> list[int]:
    """Integer folders in a bucket without their push record: what a push killed while it
    copied left ([] on a local disk, where a version appears by one rename)."""
    return _numbered_folders(base_dir)[1]


def served_as(base_dir: str, digest: str) -> int | None:
    """The newest version under `base_dir` when its model has `digest` (`model_digest`), else
    None: a push of an identical model is no push."""
    versions = served_versions(base_dir)
    if not versions:
        return None
    newest = read_push_record(os.path.join(base_dir, str(versions[-1])))
    return versions[-1] if newest.get("model_digest") == digest else None


def read_push_record(version_dir: str) -> dict:
    """The push record of a version ({} when it has none or it cannot be read)."""
    try:
        return json.loads(storage.read_text(storage.join(version_dir, PUSH_RECORD)))
    except (OSError, ValueError):
        return {}


def publish(
    model_dir: str, base_dir: str, record: dict, extra_files: dict[str, str] | None = None
) -> tuple[int, str]:
    """Copies a SavedModel to the next version under base_dir atomically; returns both.

    The copy goes to a hidden staging folder, is flushed to disk (files, then folders), and is
    renamed into place: a model server polling the base path sees the version whole or not at
    all, also after a crash or a power cut. `extra_files` (name in the version -> file to copy)
    go in with it, inside the same rename (`model.tflite` beside `saved_model.pb`).
    """
    if storage.is_remote(base_dir):
        return _publish_to_bucket(model_dir, base_dir, record, extra_files or {})
    os.makedirs(base_dir, exist_ok=True)
    version = _next_version(base_dir)
    target = os.path.join(base_dir, str(version))
    staging = os.path.join(base_dir, f"{INCOMING_PREFIX}{version}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(model_dir, staging)
        for name, source in (extra_files or {}).items():
            shutil.copyfile(source, os.path.join(staging, name))
        with open(os.path.join(staging, PUSH_RECORD), "w") as handle:
            json.dump({**record, "version": version}, handle, indent=2)
        fsync_tree(staging)
    except OSError as err:  # a full disk, say: leave nothing half-copied behind
        shutil.rmtree(staging, ignore_errors=True)
        raise OSError(
            err.errno, f"could not stage version {version} in {base_dir}: {err.strerror}"
        ) from err
    failpoint("push:copied")
    # rename() within one filesystem is atomic: the version appears complete or not at all.
    os.rename(staging, target)
    fsync_dir(base_dir)
    failpoint("push:renamed")
    return version, target


def _next_version(base_dir: str) -> int:
    # A rolled-back version's number stays taken: a model server or a client that knew it must
    # never find another model under it; so does a bucket's incomplete one until reconciled.
    complete, incomplete = _numbered_folders(base_dir)
    taken = complete + incomplete + rolled_back_versions(base_dir)
    return max(taken) + 1 if taken else 1


def _publish_to_bucket(
    model_dir: str, base_dir: str, record: dict, extra_files: dict[str, str]
) -> tuple[int, str]:
    """`publish` into a bucket, in the order the module docstring gives."""
    version = _next_version(base_dir)
    target = storage.join(base_dir, str(version))
    staging_name = f"{INCOMING_PREFIX}{version}-{os.getpid()}"
    staging = storage.join(base_dir, staging_name)
    try:
        for relative in storage.list_files(model_dir):
            storage.copy(storage.join(model_dir, relative), storage.join(staging, relative))
        for name, source in extra_files.items():
            storage.copy(source, storage.join(staging, name))
        storage.write_text(
            storage.join(staging, PUSH_RECORD), json.dumps({**record, "version": version}, indent=2)
        )
    except OSError as err:  # the store refused or went away: leave nothing half-copied behind
        _remove_quietly(staging)
        raise OSError(
            err.errno, f"could not stage version {version} in {base_dir}: {err.strerror or err}"
        ) from err
    failpoint("push:copied")
    try:
        _move_folder(base_dir, staging_name, str(version))
    except OSError as err:
        _remove_quietly(target)
        raise OSError(
            err.errno, f"could not publish version {version} in {base_dir}: {err.strerror or err}"
        ) from err
    failpoint("push:renamed")
    return version, target


def _remove_quietly(path: str) -> None:
    """Best-effort removal after a failure (reconcile removes what is left)."""
    try:
        _remove_folder(path)
    except OSError:
        pass


def _hide_and_delete(base_dir: str, name: str, prefix: str) -> None:
    if storage.is_remote(base_dir):
        # No rename to hide it first: the graph goes first, so no server starts loading it.
        failpoint("retain:hidden")
        _remove_folder(storage.join(base_dir, name))
        return
    hidden = os.path.join(base_dir, f"{prefix}{name}-{os.getpid()}")
    os.rename(os.path.join(base_dir, name), hidden)
    failpoint("retain:hidden")
    shutil.rmtree(hidden)


def retire_old_versions(base_dir: str, keep: int, protected: set[int] = frozenset()) -> list[int]:
    """Removes all but the newest `keep` versions (keep <= 0: none); returns those removed.

    Each is first renamed to a hidden name (atomic: TF Serving stops seeing the version whole)
    and then deleted. Versions in `protected` are never removed; nothing outside `base_dir` is
    ever touched.
    """
    if keep <= 0:
        return []
    retired = [v for v in served_versions(base_dir)[:-keep] if v not in protected]
    for version in retired:
        _hide_and_delete(base_dir, str(version), RETIRED_PREFIX)
    return retired


def leftovers(base_dir: str) -> list[str]:
    """Folders a killed push or retention left behind: hidden staging and retired copies, and
    in a bucket a version folder a killed push left without its push record."""
    hidden = [
        n
        for n in _folders(base_dir, links=False)
        if n.startswith((INCOMING_PREFIX, RETIRED_PREFIX))
    ]
    return sorted(hidden + [str(v) for v in incomplete_versions(base_dir)])


def remove_leftover(base_dir: str, name: str) -> None:
    """Deletes one leftover folder (its name from `leftovers`), never outside `base_dir`."""
    if "/" in name or os.sep in name or name in ("", ".", ".."):
        raise ValueError(f"{name!r} is not a folder directly under {base_dir}")
    if storage.is_remote(base_dir):
        _remove_folder(storage.join(base_dir, name))
        return
    path = os.path.realpath(os.path.join(base_dir, name))
    if os.path.dirname(path) != os.path.realpath(base_dir):
        raise ValueError(f"{name!r} is not a folder directly under {base_dir}")
    shutil.rmtree(path)


def hidden_versions(base_dir: str, prefix: str) -> list[str]:
    """The hidden version folders whose names start with `prefix` (QUARANTINE_PREFIX,
    ROLLED_BACK_PREFIX), by name."""
    return sorted(
        name
        for name in _folders(base_dir)
        if name.startswith(prefix) and name[len(prefix) :].split("-", 1)[0].isdigit()
    )


def rolled_back_versions(base_dir: str) -> list[int]:
    """The numbers of the versions a rollback hid, ascending."""
    names = hidden_versions(base_dir, ROLLED_BACK_PREFIX)
    return sorted(int(n[len(ROLLED_BACK_PREFIX) :].split("-", 1)[0]) for n in names)


def hide_rolled_back(base_dir: str, version: int) -> str:
    """Renames a version out of TF Serving's sight for a rollback, keeping its files (a `latest`
    server then serves the newest version left); returns the new name."""
    name = f"{ROLLED_BACK_PREFIX}{version}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    _move_folder(base_dir, str(version), name)
    return name


def quarantine(base_dir: str, version: int) -> str:
    """Moves a version out of TF Serving's sight, keeping its files; returns the new name."""
    name = f"{QUARANTINE_PREFIX}{version}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    _move_folder(base_dir, str(version), name)
    return name
