"""A Kubeflow run's first task: takes the pipeline's lock of one run at a time
(`pipelines.core.job_lock`), which the run's exit handler releases (`components.run_finish`),
then reconciles serving with the record the exit handlers keep in `runtime.metadata`.

Every task of the job runs after it (`pipelines.run.kubeflow` makes each depend on it), so a
second run of the pipeline on the same workdir (a run started by hand, a backfill, while the
nightly runs) waits for the first, or with `runtime.concurrency.when_busy: refuse` fails at
once naming the run that holds the lock, before it reads data or touches serving. KFP's cache
is off for this task: holding the lock is not a result to reuse.
"""

from tfx.dsl.component.experimental.annotations import Parameter
from tfx.dsl.component.experimental.decorators import component

POLL_SECONDS = 30


class PipelineBusy(RuntimeError):
    """Another Kubeflow run of the pipeline holds the lock."""


def take_or_wait(
    lock: str,
    job: str,
    hold_seconds: int,
    when_busy: str,
    wait_seconds: int,
    sleep=None,
    clock=None,
) -> None:
    """Takes the lock for `job`, waiting for it up to `wait_seconds` under `when_busy: wait`.

    Raises:
      PipelineBusy: it is held by another run (refuse), or still after the wait.
    """
    import time

    from pipelines.core import job_lock

    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    deadline = clock() + (wait_seconds if when_busy == "wait" else 0)
    while True:
        holder = job_lock.take(lock, job, hold_seconds)
        if holder is None:
            print(f"conveyor: run {job} holds {lock}", flush=True)
            return
        left = deadline - clock()
        if left <= 0:
            key = "runtime.concurrency"
            how = (
                f"{key}.when_busy is 'refuse'"
                if when_busy != "wait"
                else f"waited {wait_seconds} s ({key}.wait_seconds)"
            )
            raise PipelineBusy(
                f"the pipeline is busy: {holder.describe()} holds {lock}; {how}. Its exit "
                "handler releases it when that run ends."
            )
        print(f"conveyor: waiting for {lock}: {holder.describe()}", flush=True)
        sleep(min(POLL_SECONDS, left))


def reconcile_serving(resolved_spec: str, workdir: str) -> None:
    """Puts serving back in step with the record in `runtime.metadata` before the run, as
    `conveyor run` and Airflow's first task do (`serving_state.reconcile`): a version newer
    than every push the store recorded (a run whose exit handler never recorded its push) is
    moved out of TF Serving's sight, and the labels go back where the record put them. With
    no run recorded yet it only clears what a killed push left behind."""
    import json

    from pipelines import serving_state
    from pipelines.core.object_path import as_path
    from pipelines.core.paths import RunPaths
    from pipelines.spec.models import PipelineSpec

    spec = PipelineSpec.model_validate(json.loads(resolved_spec))
    serving_state.reconcile(RunPaths(as_path(workdir), spec), lambda line: print(line, flush=True))


@component
def RunLock(  # noqa: N802 - TFX names components like classes
    lock: Parameter[str],
    job_name: Parameter[str],
    job_resource_name: Parameter[str],
    hold_seconds: Parameter[int],
    when_busy: Parameter[str],
    wait_seconds: Parameter[int],
    resolved_spec: Parameter[str],
    workdir: Parameter[str],
) -> None:
    """Takes the lock for this run (named as the exit handler names it, from KFP's job name
    placeholders), or waits, or fails naming the run that holds it (`take_or_wait`); then,
    holding it, reconciles serving with the record (`reconcile_serving`)."""
    from components.run_finish.component import report_run_id

    resolved = [n for n in (job_resource_name, job_name) if n and not n.startswith("{{")]
    if not resolved:
        print("conveyor: KFP named no job: the run takes no lock", flush=True)
    else:
        take_or_wait(lock, report_run_id(resolved[0]), hold_seconds, when_busy, wait_seconds)
    reconcile_serving(resolved_spec, workdir)


RUN_LOCK_ID = "run_lock"


def run_lock_node(spec, paths):
    """The RunLock node of a Kubeflow build (`spec.runtime.concurrency` says how long it holds
    and whether a busy run waits); the builder makes every other node run after it."""
    import json

    from pipelines.core import job_lock

    concurrency = spec.runtime.concurrency
    return RunLock(
        lock=job_lock.lock_uri(str(paths.runs_dir)),
        resolved_spec=json.dumps(spec.to_yaml_dict()),
        workdir=str(paths.workdir),
        job_name="{{$.pipeline_job_name}}",
        job_resource_name="{{$.pipeline_job_resource_name}}",
        hold_seconds=concurrency.hold_seconds,
        when_busy=concurrency.when_busy.value,
        wait_seconds=concurrency.wait_seconds,
    ).with_id(RUN_LOCK_ID)
