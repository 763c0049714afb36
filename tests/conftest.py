"""Shared test setup. Environment variables TensorFlow reads at import are set here, before any
test module imports it."""

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# configs/team_mysql.yaml names its password's variable; building a pipeline reads it (tests
# that need a real or a missing password set or delete it themselves).
os.environ.setdefault("CONVEYOR_MYSQL_PASSWORD", "not-a-real-password")

DATA_DIR = Path(__file__).parent / "data"


def pytest_collection_modifyitems(items):
    # Everything under tests/e2e is an end-to-end run, whether or not it says so.
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "work"


def copy_fixture(source: str | Path, target_dir: Path, filename: str) -> Path:
    """Replaces the CSVs in target_dir with `source` (a tests/data name or any path)."""
    target_dir.mkdir(parents=True, exist_ok=True)
    for old in target_dir.glob("*.csv"):
        old.unlink()
    return Path(shutil.copy(DATA_DIR / source, target_dir / filename))
