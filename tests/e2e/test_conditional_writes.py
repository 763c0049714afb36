"""The store's conditional requests, on both emulators (tests/storage_emulators.py), and the lease
lock built on them (pipelines/core/lease_lock.py) in this process: create only if absent,
replace and delete only if unchanged, each refused when the object is not as named; a lock
renewed while held, taken over once its lease has passed without a renewal, and lost, loudly,
when its object is changed under its holder.
"""

import json
import time
import uuid

import pytest

from pipelines.core import lease_lock, storage

pytestmark = pytest.mark.e2e


@pytest.fixture(params=("gs", "s3"))
def key(request, storage_emulators) -> str:
    """A fresh object name in one store's bucket."""
    root = storage_emulators.root(request.param)
    return f"{root}/{request.node.originalname[:40]}-{uuid.uuid4().hex[:8]}/.lock"


def test_create_if_absent_is_refused_when_the_object_exists(key):
    first = storage.create_if_absent(key, b"first")
    with pytest.raises(storage.ObjectChanged, match="exists: not created"):
        storage.create_if_absent(key, b"second")
    assert storage.read_with_version(key) == storage.VersionedBytes(b"first", first)


def test_replace_and_delete_are_refused_on_a_changed_or_missing_version(key):
    with pytest.raises(FileNotFoundError):
        storage.read_with_version(key)
    first = storage.create_if_absent(key, b"one")
    second = storage.replace_if_unchanged(key, b"two", first)
    assert second != first
    assert storage.read_with_version(key) == storage.VersionedBytes(b"two", second)

    with pytest.raises(storage.ObjectChanged, match="no longer at version"):
        storage.replace_if_unchanged(key, b"three", first)
    with pytest.raises(storage.ObjectChanged, match="no longer at version"):
        storage.delete_if_unchanged(key, first)
    assert storage.read_bytes(key) == b"two"  # untouched by the refused requests

    storage.delete_if_unchanged(key, second)
    assert not storage.exists(key)
    with pytest.raises(storage.ObjectChanged):
        storage.replace_if_unchanged(key, b"four", second)
    with pytest.raises(storage.ObjectChanged):
        storage.delete_if_unchanged(key, second)
    assert not storage.exists(key)


def test_conditional_requests_are_for_objects_in_a_store(tmp_path):
    with pytest.raises(storage.StorageError, match="conditional writes are for an object"):
        storage.create_if_absent(str(tmp_path / "lock"), b"")


def _lock(key: str, lost: list[str], lease: float = 2) -> lease_lock.LeaseLock:
    return lease_lock.LeaseLock(key, lease, {"what": "a test"}, lost.append)


def test_a_held_lease_is_renewed_and_not_taken_over(key):
    lost: list[str] = []
    holder, waiter = _lock(key, lost), _lock(key, lost)
    assert holder.try_acquire()
    try:
        started = time.monotonic()
        assert not waiter.acquire(timeout=2.5 * holder.lease_seconds)  # more than two leases
        assert time.monotonic() - started >= 2.5 * holder.lease_seconds
        owner = json.loads(storage.read_bytes(key))
        assert owner["what"] == "a test" and owner["renewals"] >= 5  # every third of a lease
    finally:
        assert holder.release() is None
    assert lost == [] and not storage.exists(key)
    assert waiter.acquire(timeout=1)
    assert waiter.release() is None


def test_an_abandoned_lease_is_taken_over_after_the_lease_and_not_before(key):
    lost: list[str] = []
    # A holder that stopped renewing (as if killed): its object stays, unchanged.
    storage.create_if_absent(key, json.dumps({"what": "a dead run", "lease_seconds": 2}).encode())
    waiter = _lock(key, lost, lease=30)  # the holder's lease, not the waiter's, decides
    started = time.monotonic()
    assert waiter.acquire(timeout=10)
    waited = time.monotonic() - started
    try:
        assert 2 <= waited < 5
        assert waiter.expired is not None and waiter.expired.owner["what"] == "a dead run"
        assert json.loads(storage.read_bytes(key))["token"] == waiter._record["token"]
    finally:
        assert waiter.release() is None


def test_a_lease_whose_object_is_changed_under_its_holder_is_lost(key):
    lost: list[str] = []
    holder = _lock(key, lost)
    assert holder.try_acquire()
    # What a waiter does once it judges the lease expired: its own object in place.
    while True:
        current = storage.read_with_version(key)
        try:
            storage.delete_if_unchanged(key, current.version)
            break
        except storage.ObjectChanged:
            continue  # renewed in between
    storage.create_if_absent(key, b'{"what": "another run"}')
    deadline = time.monotonic() + 3
    while not lost and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(lost) == 1, lost
    assert lost[0].startswith(f"the lock {key} was lost: its object changed or is gone")
    assert holder.release().startswith("not removed: its object changed")
    assert storage.read_bytes(key) == b'{"what": "another run"}'  # the other's, kept


def test_a_kubeflow_runs_lock_in_a_bucket_is_held_released_and_expires(key):
    # pipelines/core/job_lock.py on the store's conditional requests (a Kubeflow workdir
    # mounted at /gcs/ is the same object): one run holds it, another is told which, only the
    # holder releases it, and one never released is taken over after hold_seconds.
    from pipelines.core import job_lock

    assert job_lock.take(key, "taxi-night-1", 60, now=1000.0) is None
    assert job_lock.take(key, "taxi-night-1", 60, now=1001.0) is None
    assert job_lock.take(key, "taxi-backfill", 60, now=1002.0).job == "taxi-night-1"
    assert not job_lock.release(key, "taxi-backfill")
    assert job_lock.release(key, "taxi-night-1")
    assert not storage.exists(key)
    assert job_lock.take(key, "taxi-lost", 60, now=2000.0) is None
    assert job_lock.take(key, "taxi-next", 60, now=2061.0) is None  # expired: taken over
    assert not job_lock.release(key, "taxi-lost")
    assert json.loads(storage.read_bytes(key))["job"] == "taxi-next"
