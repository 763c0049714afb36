"""A full disk under serving, for real: the model base path is a small tmpfs that holds version 1
and not much more. The next push runs out of space mid-copy: the run is FAILED naming the
cause, version 1 stays byte for byte, nothing half-copied is left, and ML Metadata records no
push. Mounting needs root (CI runs as root); elsewhere the test is skipped with that reason.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pipelines import cli
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.serving_state import versions
from pipelines.serving_state.records import recorded_pushes
from pipelines.spec.loading import load_spec

pytestmark = pytest.mark.e2e

ANY_MODEL = ["evaluation.metrics=[{name: SparseCategoricalAccuracy, lower_bound: 0.0}]"]


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_push_that_runs_out_of_space_fails_and_leaves_serving_as_it_was(tmp_path, small_disk):
    workdir = tmp_path / "work"
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0

    def run(steps: int, base_dir: Path):
        overrides = [*ANY_MODEL, f"trainer.train_steps={steps}", f"push.base_dir={base_dir}"]
        loaded = load_spec("penguin", env="ci", overrides=overrides, workdir=workdir)
        return loaded, nightly.run(loaded, workdir, echo=lambda _: None)

    # Version 1 on an ordinary disk, to learn its size.
    staging_area = tmp_path / "first-serving"
    _, first = run(20, staging_area)
    assert first.outcome == "pushed", first.message
    version_1 = staging_area / "penguin" / "1"
    size = _folder_bytes(version_1)

    # A disk with room for version 1 and half of another.
    mounted = subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={size + size // 2 + 65536}",
            "tmpfs",
            str(small_disk),
        ],
        capture_output=True,
        text=True,
    )
    assert mounted.returncode == 0, mounted.stderr  # CI runs as root: it must be able to
    shutil.copytree(version_1, small_disk / "penguin" / "1")
    served = str(small_disk / "penguin")
    digest_before = versions.model_digest(os.path.join(served, "1"))

    loaded, result = run(21, small_disk)

    assert result.outcome == "failed"
    assert "No space left on device" in result.message or "could not stage" in result.message
    assert versions.served_versions(served) == [1]
    assert versions.model_digest(os.path.join(served, "1")) == digest_before
    assert os.listdir(served) == ["1"]  # no .incoming-* left on the full disk
    paths = RunPaths(workdir=workdir.resolve(), spec=loaded.spec)
    assert recorded_pushes(paths)[1] == {1}  # the failed push is not recorded
