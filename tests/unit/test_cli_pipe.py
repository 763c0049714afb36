"""`conveyor ... | head`: a reader that stops early ends the command quietly, no traceback."""

import subprocess
import sys
from pathlib import Path

from pipelines.core.paths import FRAMEWORK_ROOT


def _conveyor() -> list[str]:
    script = Path(sys.executable).with_name("conveyor")  # the console script `pip install` made
    return [str(script)] if script.is_file() else [sys.executable, "-m", "pipelines.cli"]


def test_a_closed_pipe_ends_the_command_without_a_traceback():
    # About 4 KB per resolved spec: 60 of them are far more than a pipe buffers (64 KiB), so the
    # command is still writing when the reader goes away, as with `| head -1`.
    argv = [*_conveyor(), "validate", *["taxi"] * 60, "--profile", "ci", "--print"]
    process = subprocess.Popen(
        argv, cwd=FRAMEWORK_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    first = process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.stderr.close()
    code = process.wait(timeout=120)

    assert first.startswith(b"ok   taxi [ci]")
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code == 141  # 128 + SIGPIPE, as a shell reports a command whose reader went away
