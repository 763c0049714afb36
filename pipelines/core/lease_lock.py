"""A lock of one holder at a time that lives in an object store (gs://, s3://), held by a lease.

Machines that share a bucket share no file system and no clock, so the lock is one object and
every step is a conditional request the store applies atomically (`pipelines.core.storage`):

- **Take**: create the object only if there is none (S3 `If-None-Match: *`, GCS
  `ifGenerationMatch=0`). Its content is JSON: who holds it (what, pid, host, started, command,
  as the local lock's owner file), the lease length, a random token and a renewal count.
- **Hold**: a daemon thread rewrites the object every third of the lease, only if it is still
  the version this holder wrote (S3 `If-Match: ETAG`, GCS `ifGenerationMatch=GENERATION`); the
  count changes the bytes, so every renewal is a new version on S3 too (an ETag follows the
  content). A renewal refused (the object changed or is gone: another process judged the lease
  expired) or a lease gone by without a successful renewal (the store unreachable) means the
  lock is lost: `on_lost` is called once and renewing stops.
- **Expire**: a process that wants the lock and finds it taken notes the object's version and
  the time on its own monotonic clock; once it has seen that version unchanged for longer than
  the holder's lease, the holder stopped renewing (killed, or cut off): it deletes the object
  only if it is still that version, and creates its own. No clock of another machine is read,
  so clock skew between machines does not matter; only the rate of the clocks does.
- **Release**: the holder deletes the object only if it is still its version.

What a lease cannot do: a holder that stalls longer than the lease (a long pause of the whole
process, a network partition) can be judged expired while it still believes it holds the lock,
and whatever it writes before it notices is not stopped by the store. The holder's own deadline
(`on_lost` a little before its lease runs out without a renewal, by its own clock) narrows that
window when the process is running; a process that is stopped notices only when it runs again.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipelines.core import storage

# Every store request of a renewal thread is made holding this lock, and a fork waits for it
# (os.register_at_fork): a child forked while a renewal's request was half-way through would
# inherit the store client's connection pool locked by a thread it does not have.
_REQUESTS = threading.Lock()
# The lock objects this process holds (a forked child sees its parent's: it runs under them).
_HELD: dict[str, LeaseLock] = {}


def _before_fork() -> None:
    _REQUESTS.acquire()


def _after_fork() -> None:
    _REQUESTS.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


def held(uri: str) -> LeaseLock | None:
    """The lock this process (or the process it was forked from) holds at `uri`, if any."""
    return _HELD.get(uri)


@dataclass(frozen=True)
class Holder:
    """What the lock object says of its holder (an empty `owner` when it could not be read)."""

    owner: dict[str, Any]
    version: str


def read_holder(uri: str) -> Holder | None:
    """Who holds the lock object `uri`, as it says (None: nobody).

    Raises:
      OSError: the store did not answer.
    """
    try:
        current = storage.read_with_version(uri)
    except FileNotFoundError:
        return None
    return Holder(_decode(current.data), current.version)


class LeaseLock:
    """One lock object in a store, as one process takes, holds and releases it.

    Args:
      uri: the lock object (`s3://BUCKET/PREFIX/runs/NAME/.lock`).
      lease_seconds: how long the lock outlives its holder's last renewal.
      owner: who this process is, for the others' messages (JSON-serializable).
      on_lost: called once, from the renewal thread, with a sentence saying why, when the lock
        is lost while held.
    """

    def __init__(
        self,
        uri: str,
        lease_seconds: float,
        owner: dict[str, Any],
        on_lost: Callable[[str], None],
    ):
        self.uri = uri
        self.lease_seconds = float(lease_seconds)
        self._record = {
            **owner,
            "lease_seconds": lease_seconds,
            "token": secrets.token_hex(16),
            "renewals": 0,
        }
        self._on_lost = on_lost
        self._version: str | None = None
        self._seen: tuple[str, float] | None = None  # a holder's version, first seen when
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_renewed = 0.0  # when the last successful renewal (or the create) was sent
        self._losing = threading.Lock()
        self._pid = os.getpid()
        self.lost: str | None = None
        # The store's last failure to answer a renewal: set with `lost` when the lock was lost
        # because renewals failed for a lease (the store gone), not taken by another.
        self.unanswered: Exception | None = None
        self._last_problem: Exception | None = None
        self._renewing_since: float | None = None  # when the renewal in flight was sent
        self.expired: Holder | None = None  # the holder whose expired lease this one replaced

    @property
    def poll_seconds(self) -> float:
        """How often a waiting process looks at the lock object again."""
        return min(max(self.lease_seconds / 10, 0.2), 5.0)

    @property
    def renew_seconds(self) -> float:
        """How often the holder renews its lease: three times per lease."""
        return self.lease_seconds / 3

    def holder(self) -> Holder | None:
        """Who holds the lock now, as its object says (None: nobody)."""
        return read_holder(self.uri)

    def try_acquire(self) -> bool:
        """One attempt to take the lock: True when this process holds it now.

        A taken lock whose version this process has seen unchanged for longer than its lease
        (since the first of these attempts that saw it) is deleted, if it is still that version,
        and taken.

        Raises:
          OSError: the store did not answer.
        """
        started = time.monotonic()
        for _ in range(3):  # a lock released or expired in between is looked at again
            try:
                current = storage.read_with_version(self.uri)
            except FileNotFoundError:
                if self._create():
                    return True
                continue
            owner = _decode(current.data)
            if owner.get("token") == self._record["token"]:
                # Our own create, applied by the store though its answer was lost and the
                # client's retry was refused.
                self._version = current.version
                self._start_renewing(started)
                return True
            now = time.monotonic()
            if self._seen is None or self._seen[0] != current.version:
                self._seen = (current.version, now)
                return False
            lease = lease_of(owner, self.lease_seconds)
            if now - self._seen[1] <= lease:
                return False
            try:
                storage.delete_if_unchanged(self.uri, current.version)
            except storage.ObjectChanged:
                self._seen = None  # renewed (or taken) just now
                continue
            self.expired = Holder(owner, current.version)
            self._seen = None
        return False

    def acquire(self, timeout: float, on_busy: Callable[[], None] = lambda: None) -> bool:
        """Takes the lock, trying until `timeout` seconds have passed (0: one attempt);
        `on_busy` is called once, when the first attempt finds it taken. True when held."""
        deadline = time.monotonic() + timeout
        if self.try_acquire():
            return True
        on_busy()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self.poll_seconds, remaining))
            if self.try_acquire():
                return True

    def release(self) -> str | None:
        """Stops renewing and deletes the lock object if it is still this holder's; returns
        what went wrong, when the object could not be removed (None: released). Nothing in a
        process forked from the holder: the lock is its parent's."""
        if os.getpid() != self._pid:
            return None
        self._stop.set()
        for thread in self._threads:
            thread.join()
        _HELD.pop(self.uri, None)
        if self.lost is not None:
            return f"not removed: {self.lost}"
        try:
            storage.delete_if_unchanged(self.uri, self._version or "")
        except storage.ObjectChanged as err:
            return f"not removed: {err}"
        except OSError as err:
            return f"not removed ({err}): it expires a lease after its last renewal"
        return None

    # -- inside ---------------------------------------------------------------------------------

    def _encode(self) -> bytes:
        self._record["renewed"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        return json.dumps(self._record, sort_keys=True).encode()

    def _create(self) -> bool:
        sent = time.monotonic()
        try:
            self._version = storage.create_if_absent(self.uri, self._encode())
        except storage.ObjectChanged:
            return False
        self._start_renewing(sent)
        return True

    def _start_renewing(self, sent: float) -> None:
        """Holds the lock from here; `sent` is when the write that took it was sent, the
        earliest a waiter can have started counting its lease."""
        _HELD[self.uri] = self
        self._stop.clear()
        self._last_renewed = sent
        self._threads = [
            threading.Thread(target=target, name=f"{name} {self.uri}", daemon=True)
            for target, name in ((self._renew_until_stopped, "lease of"), (self._watch, "watch"))
        ]
        for thread in self._threads:
            thread.start()

    def _renew_until_stopped(self) -> None:
        next_renewal = self._last_renewed + self.renew_seconds
        while not self._stop.wait(max(next_renewal - time.monotonic(), 0)):
            started = time.monotonic()
            with _REQUESTS:
                if self._stop.is_set() or self.lost is not None:
                    return
                self._renewing_since = started
                problem = self._renew()
                self._renewing_since = None
            if problem is None:
                self._last_renewed, next_renewal = started, started + self.renew_seconds
                self._last_problem = None
            elif isinstance(problem, storage.ObjectChanged):
                self._lose(
                    f"its object changed or is gone ({problem}): another process judged its "
                    "lease expired and may hold it now"
                )
                return
            else:  # the store did not answer: tried again soon, until the lease runs out
                self._last_problem = problem
                next_renewal = started + max(self.renew_seconds / 3, 0.2)

    def _watch(self) -> None:
        """Gives the lock up a tenth of a lease before a waiter could judge it expired, even
        while a renewal's request hangs: a waiter starts counting only once it has seen the
        version of the last renewal, which was written after that renewal was sent."""
        give_up_after = self.lease_seconds * 0.9
        while True:
            since = time.monotonic() - self._last_renewed
            if self._stop.wait(max(give_up_after - since, 0)) or self.lost is not None:
                return
            since = time.monotonic() - self._last_renewed
            if since >= give_up_after:
                self._lose(
                    f"no renewal of its lease succeeded for {since:.0f} s (lease "
                    f"{self.lease_seconds:g} s): another process may have taken it since",
                    unanswered=self._unanswered(),
                )
                return

    def _unanswered(self) -> Exception | None:
        """Why no renewal succeeded, when the store is why: the last renewal's failure, or a
        renewal still waiting for its answer (a client retrying a store that went away can
        take longer than the rest of the lease). None when no renewal failed or waits: the
        process itself was stopped (SIGSTOP, a pause)."""
        if self._last_problem is not None:
            return self._last_problem
        since = self._renewing_since
        if since is not None:
            waited = time.monotonic() - since
            return TimeoutError(f"a renewal sent {waited:.0f} s ago is still unanswered")
        return None

    def _renew(self) -> Exception | None:
        self._record["renewals"] += 1
        try:
            self._version = storage.replace_if_unchanged(self.uri, self._encode(), self._version)
            return None
        except storage.ObjectChanged as err:
            try:  # our own renewal, applied though its answer was lost and the retry refused
                current = storage.read_with_version(self.uri)
                if _decode(current.data).get("renewals") == self._record["renewals"] and (
                    _decode(current.data).get("token") == self._record["token"]
                ):
                    self._version = current.version
                    return None
            except OSError:  # FileNotFoundError included: gone, so not ours
                pass
            return err
        except Exception as err:  # noqa: BLE001 - the store did not answer: tried again soon
            return err

    def _lose(self, why: str, unanswered: Exception | None = None) -> None:
        with self._losing:  # the renewer and the watch may both find it lost: said once
            if self.lost is not None:
                return
            self.lost, self.unanswered = why, unanswered
        if os.getpid() == self._pid:
            self._on_lost(f"the lock {self.uri} was lost: {why}")


def _decode(data: bytes) -> dict[str, Any]:
    try:
        owner = json.loads(data)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def lease_of(owner: dict[str, Any], default: float) -> float:
    """The lease a lock object's holder renews by (its own, which may not be the waiter's)."""
    lease = owner.get("lease_seconds")
    return float(lease) if isinstance(lease, int | float) and lease > 0 else default
