"""A warm Python for tests that run many `python -m MODULE ARGS` commands: one interpreter
imports TensorFlow, TFX, Beam, TFDV and TFMA once, then runs each command in a child forked
from it, so a command costs its own work and not those imports again.

Why: the compiled taxi week (tests/e2e/test_kubeflow_taxi.py) runs 78 task commands; each
fresh interpreter spent 12 to 16 s of a two-core machine importing the same libraries before
its task began, a quarter of an hour of `make test`. A forked child starts in under a second.

What differs from a fresh `python -m`: the libraries above are already imported (by this same
environment and working directory) when the module runs; everything else is as `python -m`
runs it: `runpy` runs the module as `__main__` with `sys.argv` = [its file, *ARGS], standard
input is empty, standard output and error go to the log, the exit status is SystemExit's. A
child ends with `os._exit` once its output is flushed (interpreter shutdown would wait on
threads only the parent has). A command that is not `python -m MODULE` runs as a subprocess.

The penguin job (tests/e2e/test_kubeflow_run.py) starts a fresh interpreter, as a pod starts,
the first time each entry module runs (`JobExecutor(fresh_once=True)`), so an entry point that
works only when something else imported first still fails there.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

# What every task's entry point imports, and most of its start-up time.
PRELOAD = (
    "tensorflow",
    "apache_beam",
    "tensorflow_data_validation",
    "tensorflow_model_analysis",
    "tfx.components",
    "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_entrypoint_utils",
)

# The interpreter's loop: one JSON request a line on standard input; for each, the child's pid,
# then its exit status, a line each on standard output.
_SERVER = r"""
import importlib, json, logging, os, runpy, sys, traceback

for name in {preload!r}:
    importlib.import_module(name)
print(json.dumps({{"ready": True}}), flush=True)


def run(request):
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.chdir(request["cwd"])
    sys.argv = [request["module"], *request["args"]]
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = run(request)
        finally:
            try:
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    print(json.dumps({{"pid": pid}}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({{"returncode": os.waitstatus_to_exitcode(status)}}), flush=True)
"""


class WarmPython:
    """The warm interpreter (see the module docstring), started on the first command.

    Args:
      env: the environment of the interpreter and so of every command (a command with another
        environment restarts it).
      cwd: the interpreter's working directory while it imports.
      preload: the modules it imports once.
    """

    def __init__(
        self, env: Mapping[str, str], cwd: Path | None = None, preload: tuple[str, ...] = PRELOAD
    ):
        self.env = dict(env)
        self.cwd = cwd
        self.preload = preload
        self._server: subprocess.Popen | None = None
        self._server_env: dict[str, str] | None = None
        self._server_log: Path | None = None

    def run(self, argv: list[str], log, env: Mapping[str, str], cwd, timeout: float) -> int:
        """Runs `argv` (`[python, -m, MODULE, *ARGS]`), its output appended to the open file
        `log`; returns its exit status. Raises subprocess.TimeoutExpired after `timeout` s
        (the command is killed)."""
        if len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
            return subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                timeout=timeout, check=False,
            ).returncode  # fmt: skip
        server = self._started(dict(env))
        log.flush()
        request = {"module": argv[2], "args": argv[3:], "log": log.name, "cwd": str(cwd or ".")}
        server.stdin.write((json.dumps(request) + "\n").encode())
        server.stdin.flush()
        pid = self._reply(None)["pid"]
        try:
            return self._reply(timeout)["returncode"]
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            self._reply(None)
            raise

    def _started(self, env: dict[str, str]) -> subprocess.Popen:
        stale = self._server_env != env or (self._server and self._server.poll() is not None)
        if self._server is not None and stale:
            self.close()
        if self._server is None:
            handle, name = tempfile.mkstemp(prefix="warm-python-", suffix=".log")
            self._server_log = Path(name)
            self._server = subprocess.Popen(
                [sys.executable, "-c", _SERVER.format(preload=self.preload)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=handle,
                env=env,
                cwd=self.cwd,
                bufsize=0,
            )
            os.close(handle)
            self._server_env = env
            self._reply(600)  # ready: every preloaded library imported
        return self._server

    def _reply(self, timeout: float | None) -> dict:
        """The interpreter's next line; TimeoutExpired when none comes within `timeout` s."""
        assert self._server is not None and self._server.stdout is not None
        out = self._server.stdout
        if timeout is not None and not select.select([out], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("warm python", timeout)
        line = out.readline()
        if not line:
            log = self._server_log.read_text(errors="replace")[-3000:] if self._server_log else ""
            raise RuntimeError(f"the warm interpreter ended:\n{log}")
        return json.loads(line)

    def close(self) -> None:
        """Ends the interpreter (it also ends when this process closes its standard input)."""
        if self._server is not None:
            self._server.stdin.close()
            try:
                self._server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._server.kill()
            self._server = None
        if self._server_log is not None:
            self._server_log.unlink(missing_ok=True)
            self._server_log = None
