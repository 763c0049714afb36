"""Busy polling: after answering a request, the event loop keeps polling its sockets for a short
window instead of sleeping until the next one arrives.

Why: a request that finds the server's core asleep pays for waking it, and on a virtual machine
a core that went idle is handed to other work and comes back with cold caches. Timed inside
the server on the 2-core VM `make bench-serving` runs on, every step of a request ran two to
four times slower with one client (an idle wait before each request) than back to back; the
benchmark measures a single client's p50 with polling on and off. TensorFlow's own thread
pools spin briefly before they park for the same reason. A loop that has a ready callback
polls its sockets without blocking (uvloop's `epoll_wait` with a timeout of 0), so a task
that yields every round keeps the loop's thread on its core and still reads each new request
within a round.

The cost is CPU: while requests arrive less than a window apart, the loop's thread takes a
whole core. Once none has been answered for a window, it sleeps in `epoll_wait` as before, so
an idle server costs nothing. The window is `--busy-poll-us` (`process_options.py` says why its
default is what it is); 0 turns it off.

The spinning task holds the GIL between rounds, so it runs only after requests answered on
the loop's thread; the server does not start it when requests run in worker threads
(server-side batching), where it would compete with them for the GIL.
"""

from __future__ import annotations

import asyncio
import time


class BusyPoll:
    """Keeps the event loop polling for `window_us` microseconds after each `answered()`.

    Created outside the loop; its task starts on the first `answered()` call, inside the loop.
    `rounds` counts the loop's polling rounds spent spinning (for tests)."""

    def __init__(self, window_us: int):
        self._window = window_us / 1e6
        self._last = 0.0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.rounds = 0

    def answered(self) -> None:
        """Called on the loop's thread after a request's answer is written: poll for the
        next request for a window from now."""
        self._last = time.perf_counter()
        if self._wake is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._spin(self._wake))
        self._wake.set()

    @property
    def spinning(self) -> bool:
        """Whether the task is polling now (False while it sleeps until the next answer)."""
        return self._wake is not None and self._wake.is_set()

    async def _spin(self, wake: asyncio.Event) -> None:
        clock, window = time.perf_counter, self._window
        while True:
            await wake.wait()
            while clock() - self._last < window:
                await asyncio.sleep(0)  # one round of the loop: its sockets polled, not waited on
                self.rounds += 1
            wake.clear()

    def stop(self) -> None:
        """Cancels the task (at shutdown)."""
        if self._task is not None:
            self._task.cancel()
