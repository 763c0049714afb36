"""Versions on disk: TF Serving's model base path, with no TFX import. What a push publishes
(the Pusher, `conveyor bless`), and what reconcile and retention read and tidy.

A base path holds integer version folders (`<base>/1/`, `<base>/2/`...), each a SavedModel with
Conveyor's push record beside it. TF Serving loads only integer folders, so Conveyor's
transient folders are hidden names in the same base path (a rename within one file system is
atomic): `.incoming-<v>-<pid>` while a version is copied, `.retired-<v>-<pid>` while one is
deleted, `.quarantined-<v>-<stamp>` for a version ML Metadata never recorded, and
`.rolled-back-<v>-<stamp>` for a version `conveyor rollback` took out of a `latest` server's
sight (its number is never given to another version).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

from pipelines.core.failpoints import failpoint
from pipelines.serving_state.durable_files import fsync_dir, fsync_tree

PUSH_RECORD = "conveyor_push.json"  # TF Serving ignores files it does not know
INCOMING_PREFIX = ".incoming-"
RETIRED_PREFIX = ".retired-"
QUARANTINE_PREFIX = ".quarantined-"
ROLLED_BACK_PREFIX = ".rolled-back-"


def model_digest(model_dir: str) -> str:
    """SHA-256 over every file's relative path and bytes: equal digests, equal models."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(model_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, model_dir).encode())
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def served_versions(base_dir: str) -> list[int]:
    """Integer version directories under a TF Serving model base path, ascending."""
    if not os.path.isdir(base_dir):
        return []
    return sorted(
        int(name)
        for name in os.listdir(base_dir)
        if name.isdigit() and os.path.isdir(os.path.join(base_dir, name))
    )


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
        with open(os.path.join(version_dir, PUSH_RECORD)) as handle:
            return json.load(handle)
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
    os.makedirs(base_dir, exist_ok=True)
    # A rolled-back version's number stays taken: a model server or a client that knew it must
    # never find another model under it.
    taken = served_versions(base_dir) + rolled_back_versions(base_dir)
    version = max(taken) + 1 if taken else 1
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


def _hide_and_delete(base_dir: str, name: str, prefix: str) -> None:
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
    """Hidden folders a killed push or retention left behind (staging and retired copies)."""
    if not os.path.isdir(base_dir):
        return []
    return sorted(
        name
        for name in os.listdir(base_dir)
        if name.startswith((INCOMING_PREFIX, RETIRED_PREFIX))
        and os.path.isdir(os.path.join(base_dir, name))
        and not os.path.islink(os.path.join(base_dir, name))
    )


def remove_leftover(base_dir: str, name: str) -> None:
    """Deletes one leftover folder (its name from `leftovers`), never outside `base_dir`."""
    path = os.path.realpath(os.path.join(base_dir, name))
    if os.path.dirname(path) != os.path.realpath(base_dir):
        raise ValueError(f"{name!r} is not a folder directly under {base_dir}")
    shutil.rmtree(path)


def hidden_versions(base_dir: str, prefix: str) -> list[str]:
    """The hidden version folders whose names start with `prefix` (QUARANTINE_PREFIX,
    ROLLED_BACK_PREFIX), by name."""
    if not os.path.isdir(base_dir):
        return []
    return sorted(
        name
        for name in os.listdir(base_dir)
        if name.startswith(prefix)
        and name[len(prefix) :].split("-", 1)[0].isdigit()
        and os.path.isdir(os.path.join(base_dir, name))
    )


def rolled_back_versions(base_dir: str) -> list[int]:
    """The numbers of the versions a rollback hid, ascending."""
    names = hidden_versions(base_dir, ROLLED_BACK_PREFIX)
    return sorted(int(n[len(ROLLED_BACK_PREFIX) :].split("-", 1)[0]) for n in names)


def hide_rolled_back(base_dir: str, version: int) -> str:
    """Renames a version out of TF Serving's sight for a rollback, keeping its files (a `latest`
    server then serves the newest version left); returns the new name."""
    name = f"{ROLLED_BACK_PREFIX}{version}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    os.rename(os.path.join(base_dir, str(version)), os.path.join(base_dir, name))
    fsync_dir(base_dir)
    return name


def quarantine(base_dir: str, version: int) -> str:
    """Moves a version out of TF Serving's sight, keeping its files; returns the new name."""
    name = f"{QUARANTINE_PREFIX}{version}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    os.rename(os.path.join(base_dir, str(version)), os.path.join(base_dir, name))
    fsync_dir(base_dir)
    return name
