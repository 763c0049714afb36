"""A team's project outside this repository, with Conveyor installed from its wheel.

Conveyor's wheel is built from a copy of its packages, installed with `--no-deps` into a fresh
virtualenv over requirements.lock (uv's cache makes that a copy, not a download), and used only
through the `conveyor` on PATH, from a temporary folder: `conveyor new` writes a project,
`make pipeline-local` pushes a model, `make test` is green, `conveyor init` adds a second spec,
and the first pipeline's re-run then answers UNCHANGED without importing TensorFlow.

Building or installing failing is a failure here, never a skip: it is what this test is about.
"""

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.core.paths import CODE_PACKAGES, FRAMEWORK_LOCK, FRAMEWORK_ROOT

UV = Path(sys.executable).with_name("uv")
# The re-run, with what it imported: `conveyor run` as the console script calls it.
PROBE = """
import sys
from pipelines.cli import main
code = main(["run", "penguin", "--workdir", ".conveyor"])
print("HEAVY", sorted(m for m in ("tensorflow", "tfx", "apache_beam") if m in sys.modules))
sys.exit(code)
"""


def _run(argv, cwd, env, timeout=900) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The environment of a fresh virtualenv holding Conveyor's wheel and the locked libraries,
    as a shell that activated it would have, outside any project."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in CODE_PACKAGES:
        shutil.copytree(FRAMEWORK_ROOT / package, source / package, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(FRAMEWORK_ROOT / name, source / name)
    env = {k: v for k, v in os.environ.items() if k not in ("CONVEYOR_PROJECT", "PYTHONPATH")}
    _run(
        [UV, "build", "--wheel", "-q", "--python", sys.executable, "-o", root / "dist", source],
        root,
        env,
    )
    (wheel,) = (root / "dist").glob("conveyor-*.whl")
    venv = root / "venv"
    python = venv / "bin" / "python"
    _run([UV, "venv", "-q", "--seed", "--python", sys.executable, venv], root, env)
    _run([UV, "pip", "sync", "-q", "--python", python, FRAMEWORK_LOCK], root, env)
    _run([UV, "pip", "install", "-q", "--no-deps", "--python", python, wheel], root, env)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    # Python caches its compiles in the fresh virtualenv, so TensorFlow compiles once, not in
    # every process the test starts.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    yield env
    shutil.rmtree(venv)  # 3 GB: pytest keeps its last runs' temporary folders


def test_a_project_made_by_conveyor_new_runs_from_the_installed_wheel(installed, tmp_path):
    env = installed
    project = tmp_path / "fraud-models"
    assert not project.resolve().is_relative_to(FRAMEWORK_ROOT)
    shown = _run(["conveyor", "new", project], tmp_path, env)
    assert f"cd {project}" in shown.stdout
    # The installed Conveyor is the one running: its version, not a checkout's digest.
    where = _run(
        [
            "python",
            "-c",
            "import pipelines, pipelines.core.paths as p; "
            "print(pipelines.__file__); print(p.framework_version())",
        ],
        project,
        env,
    ).stdout.splitlines()
    assert "site-packages" in where[0] and where[1] == "conveyor==0.1.0"

    local = _run(["make", "pipeline-local"], project, env)
    assert "PUSHED: pushed version 1 to " in local.stdout, local.stdout
    assert (project / ".conveyor" / "serving" / "penguin" / "1" / "saved_model.pb").is_file()

    tests = _run(["make", "test"], project, env)
    assert " passed" in tests.stdout and "failed" not in tests.stdout, tests.stdout

    csv = project / ".conveyor" / "data" / "penguin" / "penguins.csv"
    init = ["conveyor", "init", "birds", "--csv", csv, "--label", "species", "--profile", "ci"]
    _run(init + ["--workdir", tmp_path / "birds-work"], project / "fraud_models", env)
    assert (project / "specs" / "birds.yaml").is_file()
    assert "birds" in _run(["conveyor", "list"], project, env).stdout

    again = _run(["python", "-c", PROBE], project, env)
    assert again.stdout.startswith("UNCHANGED: "), again.stdout
    assert "HEAVY []" in again.stdout
