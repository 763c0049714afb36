"""The local runner's orchestrator concerns that need no pipeline run."""

from tfx.components.statistics_gen import executor as statistics_gen_executor
from tfx.dsl.components.base import base_beam_executor
from tfx.utils import dependency_utils

from pipelines.runners import local


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
