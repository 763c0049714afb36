"""A spare model-server process, started early so that its imports overlap with the run.

The infra validator serves the candidate in a fresh `python -m pipelines.serving.model_server`
process. Most of that process's start is importing TensorFlow and the server (about 5 of the
8.6 s to its ready file on the 2-core machine under load, 2026-12-01), none of which depends on
the model. A local run therefore starts a spare process when the node that makes the candidate (the
trainer) executes (`WARM_UP`, which the local runner calls), beside the training: it imports the
server's modules, then waits on its stdin. The infra validator takes it (`take`) and sends it
the server's command line and the file for its output; the spare then runs the server exactly as
`python -m pipelines.serving.model_server` would, in a process that has loaded no model yet, so
the candidate is still loaded fresh, by a separate process, from its SavedModel. Without a spare
(another runner, a component run alone, a spare that died), the executor starts the server as
before.

A spare dies with the process that started it (PR_SET_PDEATHSIG, as the server does), ends by
itself when its stdin closes without a command, and is ended by `discard` when the run no longer
needs it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from absl import logging

from pipelines.core.paths import FRAMEWORK_ROOT
from pipelines.spec.components import WarmUp

RUNTIME_MODULE = "pipelines.serving.model_server"

# What the spare runs (`python -c SPARE_PROGRAM PARENT_PID`): die with the parent, import what
# the server imports at its start, wait for one line of JSON ({"argv": [...], "output": path}),
# point stdout and stderr at the output file, and run the server module as `python -m` does.
# The first lines of a child started with this process's pid as argv[1]: ask Linux to SIGKILL
# it when this process dies (PR_SET_PDEATHSIG survives exec), and exit at once if the parent is
# already gone. The executor's fresh server starts with them too.
DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
)
SPARE_PROGRAM = DIE_WITH_PARENT + (
    "import json, runpy\n"
    # Not the model server's __main__: run_module below runs it afresh, as `python -m` would.
    "import tensorflow, uvicorn\n"
    f"import {RUNTIME_MODULE}.server, {RUNTIME_MODULE}.app\n"
    "line = sys.stdin.readline()\n"
    "if not line.strip():\n"
    "    sys.exit(0)\n"
    "order = json.loads(line)\n"
    "output = os.open(order['output'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
    "sys.stdout.flush(); sys.stderr.flush()\n"
    "os.dup2(output, 1); os.dup2(output, 2); os.close(output)\n"
    f"sys.argv = ['{RUNTIME_MODULE}', *order['argv']]\n"
    f"runpy.run_module('{RUNTIME_MODULE}', run_name='__main__', alter_sys=True)\n"
)

_lock = threading.Lock()
_spare: subprocess.Popen | None = None


def start() -> None:
    """Starts the spare process, unless one is already waiting (at most one per process).

    Its output until it is taken is discarded; it runs with Conveyor's packages on PYTHONPATH
    (so a source checkout serves too), in a process group of its own, as the executor starts a
    server.
    """
    global _spare
    with _lock:
        if _spare is not None and _spare.poll() is None:
            return
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(FRAMEWORK_ROOT), env.get("PYTHONPATH")) if p
        )
        _spare = subprocess.Popen(
            [sys.executable, "-c", SPARE_PROGRAM, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: the executor's stop() ends all of it
        )
        logging.info("Infra validation: spare model server started, pid %d", _spare.pid)


def waiting_pid() -> int | None:
    """The process id of the spare waiting to be taken, or None when there is none."""
    with _lock:
        return _spare.pid if _spare is not None else None


def take(argv: list[str], output: Path) -> subprocess.Popen | None:
    """Hands the waiting spare the server's arguments (after `-m pipelines.serving.model_server`)
    and the file for its output; returns its process, now the server, or None when there is
    no live spare (the caller starts a server itself)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is None:
        return None
    order = json.dumps({"argv": list(argv), "output": str(output)}) + "\n"
    try:
        if spare.poll() is not None:
            raise BrokenPipeError
        spare.stdin.write(order.encode())
        spare.stdin.close()
    except (BrokenPipeError, OSError):  # it died (killed, or its imports failed): not usable
        _end(spare)
        return None
    return spare


def discard() -> None:
    """Ends the spare if one is still waiting (a run that did not need it)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None:
        _end(spare)


def _end(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if process.stdin is not None:
        try:
            process.stdin.close()
        except OSError:
            pass
    process.wait()


def _start_or_warn() -> None:
    try:
        start()  # at most one waits at a time: a second start is a no-op
    except OSError as err:  # the executor then starts its server itself, as without one
        logging.warning("no spare model server: %s", err)


# What the local runner begins early for an infra validator (pipelines/spec/components.py): a
# spare started when the node making the candidate (the producer of the validator's `model`
# input, the trainer) executes, so that its imports run beside training; a run that stops
# before training (a data gate that blocks, cache hits throughout) starts none.
WARM_UP = WarmUp(after_input="model", start=_start_or_warn, discard=discard)
