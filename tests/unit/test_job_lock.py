"""The lock of one Kubeflow run at a time (pipelines/core/job_lock.py,
pipelines/run/kubeflow_start.py): taken by a run's first task, released by its exit handler, and
held at most hold_seconds when no exit handler released it."""

import pytest

from pipelines.core import job_lock
from pipelines.run.kubeflow_start import PipelineBusy, take_or_wait


def test_a_mounted_buckets_lock_is_the_stores_object_and_a_local_one_a_file():
    assert job_lock.lock_uri("/gcs/bucket/conveyor/runs/taxi") == (
        "gs://bucket/conveyor/runs/taxi/.kubeflow_lock"
    )
    assert job_lock.lock_uri("/srv/runs/taxi/") == "/srv/runs/taxi/.kubeflow_lock"


def test_one_run_holds_it_until_it_releases_it(tmp_path):
    lock = str(tmp_path / "runs" / "taxi" / ".kubeflow_lock")
    assert job_lock.take(lock, "taxi-night-1", 3600, now=1000.0) is None
    assert job_lock.take(lock, "taxi-night-1", 3600, now=1010.0) is None  # a retried task
    holder = job_lock.take(lock, "taxi-backfill", 3600, now=1020.0)
    assert (holder.job, holder.taken_at, holder.expires_at) == ("taxi-night-1", 1000.0, 4600.0)
    assert "Kubeflow run taxi-night-1 since 1970-01-01 00:16:40 UTC" in holder.describe()
    assert not job_lock.release(lock, "taxi-backfill")  # not its lock: left as it is
    assert job_lock.take(lock, "taxi-backfill", 3600, now=1030.0).job == "taxi-night-1"
    assert job_lock.release(lock, "taxi-night-1")
    assert job_lock.take(lock, "taxi-backfill", 3600, now=1040.0) is None


def test_a_lock_no_exit_handler_released_expires_after_hold_seconds(tmp_path):
    lock = str(tmp_path / ".kubeflow_lock")
    assert job_lock.take(lock, "taxi-lost", 60, now=1000.0) is None
    assert job_lock.take(lock, "taxi-next", 60, now=1059.0).job == "taxi-lost"
    assert job_lock.take(lock, "taxi-next", 60, now=1061.0) is None
    assert not job_lock.release(lock, "taxi-lost")  # the lost run's exit handler, late
    assert job_lock.release(lock, "taxi-next")


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_busy_run_refuses_at_once_or_waits_for_the_release(tmp_path):
    lock = str(tmp_path / ".kubeflow_lock")
    job_lock.take(lock, "taxi-night-1", 3600)
    clock = FakeClock()
    with pytest.raises(PipelineBusy) as refused:
        take_or_wait(lock, "taxi-backfill", 3600, "refuse", 600, clock.sleep, clock)
    assert "busy: Kubeflow run taxi-night-1 since" in str(refused.value)
    assert "runtime.concurrency.when_busy is 'refuse'" in str(refused.value)
    assert clock.slept == []

    with pytest.raises(PipelineBusy) as waited:
        take_or_wait(lock, "taxi-backfill", 3600, "wait", 70, clock.sleep, clock)
    assert "waited 70 s (runtime.concurrency.wait_seconds)" in str(waited.value)
    assert clock.slept == [30, 30, 10]

    def released_meanwhile(seconds: float) -> None:
        clock.sleep(seconds)
        job_lock.release(lock, "taxi-night-1")

    take_or_wait(lock, "taxi-backfill", 3600, "wait", 600, released_meanwhile, clock)
    assert job_lock.take(lock, "another", 3600).job == "taxi-backfill"
