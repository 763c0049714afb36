"""Named points where the fault tests kill a real process (`CONVEYOR_FAILPOINT=<name>`).

Conveyor's guarantees (a failed run leaves serving untouched; the next run repairs what a
killed one left) are proven by killing real runs at each phase of a push, not by reading the
code. A kill at an exact phase cannot be timed from outside the process, so the phases call
`failpoint(name)`: unless the environment variable names that point, it does nothing; when it
does, the process is killed with SIGKILL on the spot, as the OOM killer or a power cut would.
"""

from __future__ import annotations

import os
import signal

ENV = "CONVEYOR_FAILPOINT"


def failpoint(name: str) -> None:
    """Kills this process with SIGKILL when $CONVEYOR_FAILPOINT is `name`; else returns."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
