"""The local runner's orchestrator concerns that need no pipeline run."""

import gc
import sys
from pathlib import Path

import pytest
from tfx.components.statistics_gen import executor as statistics_gen_executor
from tfx.dsl.components.base import base_beam_executor
from tfx.orchestration.local import local_dag_runner  # noqa: F401 (as after a run's imports)
from tfx.utils import dependency_utils

from pipelines.core.metadata.runs import NodeRecord
from pipelines.core.outcome import Outcome, RunResult
from pipelines.core.storage import StoreFailed
from pipelines.ops.supervisor import where_it_ended
from pipelines.run import local


def _beam_args_an_executor_gets(beam_args: list[str]) -> list[str]:
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=beam_args)
    return statistics_gen_executor.Executor(context)._beam_pipeline_args


def test_direct_runner_components_get_no_tfx_package_to_stage(monkeypatch):
    built = []
    monkeypatch.setattr(dependency_utils, "build_ephemeral_package", lambda: built.append(1))
    args = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    with local._no_tfx_package_for_direct_runner("DirectRunner"):
        staged = _beam_args_an_executor_gets(list(args))
    assert not built
    assert not any(a.startswith("--extra_package") for a in staged)
    # Outside the run, and for remote runners, TFX infers its package as it always does.
    _beam_args_an_executor_gets(list(args))
    with local._no_tfx_package_for_direct_runner("DataflowRunner"):
        _beam_args_an_executor_gets(list(args))
    assert len(built) == 2


def test_the_collector_is_paused_while_importing_and_restored_after():
    assert gc.isenabled()
    with local._collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ImportError), local._collector_paused():
        raise ImportError("an import that fails still gives the collector back")
    assert gc.isenabled()
    gc.disable()  # a caller that had it off keeps it off
    try:
        with local._collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_only_the_first_import_in_a_process_freezes_what_it_made(monkeypatch):
    # TFX's runner is imported in this process (above): a later run imports nothing and
    # freezes nothing, so the garbage of earlier runs stays collectable.
    frozen_before = gc.get_freeze_count()
    with local._collector_paused():
        garbage_cycle = []
        garbage_cycle.append(garbage_cycle)
    assert gc.get_freeze_count() == frozen_before
    # The first import in a process freezes everything that exists afterwards.
    monkeypatch.delitem(sys.modules, "tfx.orchestration.local.local_dag_runner")
    try:
        with local._collector_paused():
            pass
        assert gc.get_freeze_count() > frozen_before
    finally:
        gc.unfreeze()


def test_the_runner_warms_up_what_the_component_table_asks_for_and_names_no_component(tmp_path):
    from tfx.dsl.compiler import compiler

    from components.infra_validator import spare
    from pipelines.builder.pipeline import build_pipeline
    from pipelines.spec.components import WarmUp
    from pipelines.spec.loading import load_spec

    spec = load_spec("penguin", env="ci").spec
    ir = compiler.Compiler().compile(build_pipeline(spec, tmp_path))

    # The infra validator's row declares its spare server; the trainer makes its `model`.
    assert local._warm_ups(spec, ir) == [(spare.WARM_UP, {"trainer"})]
    started = []
    warm_up = WarmUp("model", start=lambda: started.append(1), discard=lambda: None)
    start = local._warm_up_starter([(warm_up, {"trainer"})])
    start("evaluator")
    start("trainer")
    assert started == [1]
    # A pipeline whose components ask for nothing gets no starter at all.
    assert local._warm_up_starter([]) is None
    # The runner knows no component by name: the table and the component carry the knowledge.
    source = Path(local.__file__).read_text()
    assert "infra_validator" not in source and "spare" not in source


class _SilentStoreFolder:
    """A run folder in a store that stopped answering: what the store gone mid-push leaves
    the supervisor to look into (its `is_file` raises as `ObjectPath.is_file` then does)."""

    def __truediv__(self, name: str) -> "_SilentStoreFolder":
        return self

    def is_file(self) -> bool:
        raise StoreFailed(5, "Could not connect to the endpoint URL", "s3://b/run/summary.json")


def test_where_a_killed_run_ended_is_told_when_its_store_no_longer_answers():
    # The lock lost to a silent store kills the run; the verdict then names the store, so
    # looking for the run's summary in that store must not raise instead.
    trainer = NodeRecord(node_id="trainer", state="complete", seconds=1.0)
    pusher = NodeRecord(node_id="pusher", state="failed", seconds=1.0)
    result = RunResult("r", "penguin", Outcome.FAILED, "", nodes=[trainer, pusher])
    assert where_it_ended(result, _SilentStoreFolder()) == "after pusher"
