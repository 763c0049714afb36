"""`runtime.concurrency.lease_seconds`: the lease of a lock in a bucket, with bounds checked when
the spec loads, and where the lock of each kind of workdir lives."""

import pytest

from pipelines.core.object_path import ObjectPath, as_path
from pipelines.core.paths import RunPaths
from pipelines.spec.loading import SpecError, load_spec


def test_the_lease_defaults_to_a_minute_and_takes_a_setting():
    assert load_spec("penguin", env="ci").spec.runtime.concurrency.lease_seconds == 60
    spec = load_spec("penguin", env="ci", overrides=["runtime.concurrency.lease_seconds=5"]).spec
    assert spec.runtime.concurrency.lease_seconds == 5


@pytest.mark.parametrize("value", ["1", "3601", "0"])
def test_a_lease_out_of_bounds_is_refused_naming_the_key(value):
    with pytest.raises(SpecError, match="runtime.concurrency.lease_seconds"):
        load_spec("penguin", env="ci", overrides=[f"runtime.concurrency.lease_seconds={value}"])


def test_a_bucket_workdir_locks_in_the_bucket_and_a_local_one_on_disk(tmp_path):
    spec = load_spec("penguin", env="ci").spec
    remote = RunPaths(as_path("s3://team-bucket/conveyor"), spec)
    assert remote.lock_object == ObjectPath("s3://team-bucket/conveyor/runs/penguin/.lock")
    local = RunPaths(tmp_path, spec)
    assert local.lock_file == tmp_path / "runs" / "penguin" / ".lock"
