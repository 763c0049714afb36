"""Named points where the fault tests kill a real process (`CONVEYOR_FAILPOINT=<name>`).

Conveyor's guarantees (a failed run leaves serving untouched; the next run repairs what a
killed one left) are proven by killing real runs at each phase of a push and inside components,
not by reading the code. A kill at an exact phase cannot be timed from outside the process, so
the phases call `failpoint(name)`: unless the environment variable names that point, it does
nothing; when it does, the process is killed with SIGKILL on the spot, as the OOM killer or a
power cut would.

The points of a push and its retention (`push:copied`, `push:renamed`, `push:configured`,
`retain:hidden`, `run:before_finish`) are listed in docs/serving.md#failpoints; inside the
components, for tests/faults/test_kill_resume.py:
  example_gen:mid           CSV ExampleGen has written its splits, not yet returned to TFX;
  trainer:after_checkpoint  the Trainer has checkpointed a chunk and recorded its step count.
"""

from __future__ import annotations

import os
import signal
import time

ENV = "CONVEYOR_FAILPOINT"
# With this set to a folder, the named point pauses instead of killing: it writes
# `<folder>/<name>.reached` and waits for `<folder>/<name>.go`, so that a test can break
# something outside the process (stop a store) at that exact phase and let the run go on.
PAUSE_ENV = "CONVEYOR_FAILPOINT_PAUSE_DIR"
PAUSE_SECONDS = 300


def failpoint(name: str) -> None:
    """Kills this process with SIGKILL when $CONVEYOR_FAILPOINT is `name` (pauses there when
    $CONVEYOR_FAILPOINT_PAUSE_DIR is set); else returns."""
    if os.environ.get(ENV) != name:
        return
    folder = os.environ.get(PAUSE_ENV)
    if not folder:
        os.kill(os.getpid(), signal.SIGKILL)
    with open(os.path.join(folder, f"{name}.reached"), "w"):
        pass
    deadline = time.monotonic() + PAUSE_SECONDS
    while not os.path.exists(os.path.join(folder, f"{name}.go")) and time.monotonic() < deadline:
        time.sleep(0.05)
