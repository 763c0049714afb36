"""`conveyor run penguin` as the kill-at-a-failpoint tests run it (tests/faults/test_push_faults.py,
tests/faults/test_kill_resume.py): the `ci` profile, a model gate any model passes, and the
supervising parent's verdict on a pipeline process that died of SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pipelines.core.failpoints import ENV as FAILPOINT
from pipelines.core.outcome import EXIT_FAILED
from pipelines.core.paths import FRAMEWORK_ROOT

CONVEYOR = str(Path(sys.executable).with_name("conveyor"))
ANY_MODEL = ["evaluation.metrics=[{name: SparseCategoricalAccuracy, lower_bound: 0.0}]"]
KILLED = "FAILED: the run was killed by SIGKILL (out of memory?)"  # the parent's verdict


def run_penguin(
    workdir: Path, *overrides: str, failpoint: str | None = None
) -> subprocess.CompletedProcess:
    """`conveyor run penguin --env ci` on `workdir` with ANY_MODEL and `overrides` set, killed
    at `failpoint` when one is named (and never at one this process's environment names)."""
    argv = [CONVEYOR, "run", "penguin", "--env", "ci", "--workdir", str(workdir)]
    argv += [f"--set={o}" for o in (*ANY_MODEL, *overrides)]
    env = {k: v for k, v in os.environ.items() if k != FAILPOINT}
    if failpoint:
        env[FAILPOINT] = failpoint
    return subprocess.run(
        argv, cwd=FRAMEWORK_ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def assert_killed(run: subprocess.CompletedProcess, where: str) -> None:
    """The pipeline process died by SIGKILL `where` ("during trainer;"...); its parent said so
    and exited FAILED."""
    assert run.returncode == EXIT_FAILED, run.stdout + run.stderr
    assert f"{KILLED} {where}" in run.stdout, run.stdout


def write_penguin_data(workdir: Path) -> None:
    """`conveyor data penguin` into `workdir`: the input every test's first run reads."""
    done = subprocess.run(
        [CONVEYOR, "data", "penguin", "--workdir", str(workdir)],
        cwd=FRAMEWORK_ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
