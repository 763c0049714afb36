"""Debian packages a test needs beyond requirements.lock (Prometheus, the Pushgateway,
Chromium...), installed on demand by `scripts/ensure_system_packages.sh`.

Where they cannot be installed (not root, no apt-get) the test is skipped with the reason,
except where the `CI` environment variable is set (CI services set it): there it fails, since
a skip would hide that the real program never ran. The MariaDB tests follow the same rule.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pipelines.core.paths import FRAMEWORK_ROOT

SCRIPT = FRAMEWORK_ROOT / "scripts" / "ensure_system_packages.sh"


def binary(name: str) -> str | None:
    """The path of an installed program, on PATH or in /usr/sbin, /usr/bin; None if absent."""
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )


def require(packages: dict[str, str]) -> dict[str, str]:
    """Makes sure each program is installed, installing its package when missing.

    Args:
      packages: Debian package -> the program the test runs from it.

    Returns:
      Program -> its path.
    """
    missing = {package: program for package, program in packages.items() if not binary(program)}
    if missing:
        done = subprocess.run([str(SCRIPT), *missing], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            reason = (
                f"{', '.join(missing)} not installed and cannot be installed here: "
                f"{done.stderr.strip()}"
            )
            if os.environ.get("CI"):  # CI must run the real programs: a skip would hide it
                pytest.fail(reason)
            pytest.skip(reason)
    found = {program: binary(program) for program in packages.values()}
    absent = sorted(program for program, path in found.items() if path is None)
    if absent:
        pytest.fail(f"installed, but {', '.join(absent)} still not found")
    return found
