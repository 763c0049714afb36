"""The lock of one Kubeflow run of a pipeline at a time: taken by the job's first task, released
by its exit handler.

`conveyor run` holds `<workdir>/runs/<pipeline>/.lock` from a process that lives through the run
(a file lock, or in a bucket a lease it renews: `pipelines.core.lease_lock`). No process lives
through a Kubeflow run, so its lock is a different object, `<runs dir>/.kubeflow_lock`, which
names the run (KFP's job) that took it and when, and is held until that run's exit handler
releases it or, if the exit handler never ran (the cluster lost the run), until
`runtime.concurrency.hold_seconds` after it was taken, by the clock of whoever reads it.

Every step is one conditional request to the store (`pipelines.core.storage`: create if absent,
replace or delete if unchanged) for a workdir in a bucket, also where Vertex AI mounts it at
`/gcs/BUCKET` (the mount's writes are not conditional, the store's are); on a local or shared
file system an exclusive create, and a replace of an expired lock by rename.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import dataclass

from pipelines.core import storage

KUBEFLOW_LOCK = ".kubeflow_lock"
_MOUNT = "/gcs/"  # Vertex AI mounts gs://BUCKET at /gcs/BUCKET in every task


@dataclass(frozen=True)
class JobHolder:
    """The run that holds the lock, when it took it (Unix seconds) and for how long at most."""

    job: str
    taken_at: float
    hold_seconds: int

    @property
    def expires_at(self) -> float:
        """When the lock stops counting as held without a release."""
        return self.taken_at + self.hold_seconds

    def describe(self) -> str:
        """'Kubeflow run JOB since 2026-11-28 02:00:04 UTC (held until ... at most)'."""

        def utc(seconds: float) -> str:
            return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))

        return (
            f"Kubeflow run {self.job} since {utc(self.taken_at)} "
            f"(held until {utc(self.expires_at)} at most)"
        )


def lock_uri(runs_dir: str) -> str:
    """The lock's location: in the store itself for a bucket mounted at `/gcs/`."""
    path = f"{str(runs_dir).rstrip('/')}/{KUBEFLOW_LOCK}"
    return "gs://" + path[len(_MOUNT) :] if path.startswith(_MOUNT) else path


def _encode(holder: JobHolder) -> bytes:
    record = {"job": holder.job, "taken_at": holder.taken_at, "hold_seconds": holder.hold_seconds}
    return json.dumps(record, sort_keys=True).encode()


def _decode(data: bytes) -> JobHolder:
    record = json.loads(data)
    return JobHolder(str(record["job"]), float(record["taken_at"]), int(record["hold_seconds"]))


def _read(uri: str) -> tuple[JobHolder, str] | None:
    """(the holder, the version read) or None when there is no lock."""
    try:
        if storage.is_remote(uri):
            found = storage.read_with_version(uri)
            return _decode(found.data), found.version
        with open(uri, "rb") as handle:
            data = handle.read()
        return _decode(data), str(os.stat(uri).st_mtime_ns)
    except FileNotFoundError:
        return None


def _create(uri: str, data: bytes) -> bool:
    if storage.is_remote(uri):
        try:
            storage.create_if_absent(uri, data)
        except storage.ObjectChanged:
            return False
        return True
    os.makedirs(os.path.dirname(uri), exist_ok=True)
    try:
        descriptor = os.open(uri, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    return True


def _replace(uri: str, data: bytes, version: str) -> bool:
    if storage.is_remote(uri):
        try:
            storage.replace_if_unchanged(uri, data, version)
        except storage.ObjectChanged:
            return False
        return True
    staged = f"{uri}.{os.getpid()}"
    with open(staged, "wb") as handle:
        handle.write(data)
    os.replace(staged, uri)
    return True


def take(uri: str, job: str, hold_seconds: int, now: float | None = None) -> JobHolder | None:
    """Takes the lock for `job`; returns None when it holds it now (also when it held it
    already: a retried task), else the run that holds it."""
    now = time.time() if now is None else now
    mine = JobHolder(job, now, hold_seconds)
    for _ in range(3):  # a lock released or replaced between two requests: look again
        if _create(uri, _encode(mine)):
            return None
        found = _read(uri)
        if found is None:
            continue
        holder, version = found
        if holder.job == job:
            return None
        if now < holder.expires_at:
            return holder
        if _replace(uri, _encode(mine), version):
            return None
    found = _read(uri)
    return found[0] if found is not None else JobHolder("(unknown)", now, hold_seconds)


def release(uri: str, job: str) -> bool:
    """Releases the lock if `job` holds it; returns whether it did."""
    found = _read(uri)
    if found is None or found[0].job != job:
        return False
    if storage.is_remote(uri):
        try:
            storage.delete_if_unchanged(uri, found[1])
        except storage.ObjectChanged:
            return False
        return True
    try:
        os.remove(uri)
    except OSError as err:
        if err.errno != errno.ENOENT:
            raise
        return False
    return True
