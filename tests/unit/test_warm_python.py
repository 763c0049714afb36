"""The warm interpreter the Kubeflow taxi week runs its tasks in (tests/warm_python.py): a
command runs as `python -m` would run it, in a child of its own."""

import os
import subprocess
import sys

import pytest

from tests.warm_python import WarmPython

MODULE = """
import os, sys
print("argv", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("WARM_PROBE"))
print("pid", os.getpid())
if sys.argv[1:] == ["fail"]:
    raise SystemExit("told to fail")
if sys.argv[1:] == ["raise"]:
    raise KeyError("column")
if sys.argv[1:] == ["sleep"]:
    import time; time.sleep(60)
sys.modules["json"].dumps  # imported by the interpreter, not by this module
"""


@pytest.fixture
def warm(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "probe.py").write_text(MODULE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "pkg"), "WARM_PROBE": "image"}
    interpreter = WarmPython(env, cwd=tmp_path, preload=("json",))
    yield interpreter, env, tmp_path
    interpreter.close()


def _run(warm, args, timeout=60):
    interpreter, env, tmp_path = warm
    log_path = tmp_path / f"{'-'.join(args) or 'ok'}.log"
    with log_path.open("a") as log:
        log.write("$ probe\n")
        code = interpreter.run(
            [sys.executable, "-m", "probe", *args], log, env, tmp_path / "pkg", timeout
        )
    return code, log_path.read_text()


def test_a_command_runs_as_python_m_in_a_child_of_its_own(warm):
    code, out = _run(warm, [])
    assert code == 0, out
    assert out.startswith("$ probe\n")  # the caller's line kept, the child's appended
    assert f"argv [] cwd {warm[2] / 'pkg'} env image" in out
    _, again = _run(warm, ["x"])
    pids = {line for line in (out + again).splitlines() if line.startswith("pid ")}
    assert len(pids) == 2  # a fresh child each time
    assert f"pid {os.getpid()}" not in pids


def test_exit_status_and_errors_are_python_ms(warm):
    code, out = _run(warm, ["fail"])
    assert code == 1 and "told to fail" in out
    code, out = _run(warm, ["raise"])
    assert code == 1 and "KeyError: 'column'" in out
    assert _run(warm, [])[0] == 0  # the interpreter itself goes on


def test_a_command_past_its_timeout_is_killed(warm):
    with pytest.raises(subprocess.TimeoutExpired):
        _run(warm, ["sleep"], timeout=2)
    assert _run(warm, [])[0] == 0
