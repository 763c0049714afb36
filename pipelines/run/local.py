"""Local runner: LocalDagRunner over the built pipeline, with progress.

It adds only what running locally needs: a run id it knows in advance (so the resolved spec,
the log and the summary land in `<workdir>/runs/<pipeline>/<run id>/`), live per-component
progress, the warm-ups components ask for (the component table's `warm_up`: slow start-up
work begun beside the node that feeds them), and the facts only this runner knows (`RunFacts`: what
LocalDagRunner raised, each node's state and time). What the run records is the one run-finish
contract's (`pipelines.finish.contract.finish_run`), as for every orchestrator.

A run's folder is its owner's alone (0700, files 0600), and secrets are masked in its log: TFX
logs the whole metadata connection, MySQL password included.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pipelines.builder import spans
from pipelines.core.events import emit
from pipelines.core.metadata import connection_config
from pipelines.finish.contract import RunFacts, stop_of
from pipelines.finish.run_folder import Redactor, open_run_dir, run_secrets, write_private
from pipelines.run.plan import Run
from pipelines.spec.components import COMPONENT_TYPES, WarmUp
from pipelines.spec.models import PipelineSpec


class _ProgressHandler(logging.Handler):
    """Turns the runner's log lines into one progress line per component."""

    def __init__(
        self, echo: Callable[[str], None], on_execute: Callable[[str], None] | None = None
    ):
        super().__init__(level=logging.INFO)
        self._echo = echo
        self._on_execute = on_execute  # called with a node's id when it executes (no cache hit)
        self._node: str | None = None
        self._started = 0.0
        self._state = "executed"
        self.timings: dict[str, tuple[str, float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        template, args = str(record.msg), record.args or ()
        if template == "Component %s is running.":
            # Stays "resolved" for nodes that only resolve inputs (the baseline resolver).
            self._node, self._started, self._state = str(args[0]), time.perf_counter(), "resolved"
            emit(self._echo, "component_started", node=self._node)
        elif template.startswith("A cached execution"):
            self._state = "cached"
        elif template.startswith("Going to run a new execution"):
            self._state = "executed"
            if self._on_execute and self._node:
                self._on_execute(self._node)
        elif template == "Component %s is finished." and self._node:
            seconds = time.perf_counter() - self._started
            self.timings[self._node] = (self._state, seconds)
            event = "component_cached" if self._state == "cached" else "component_finished"
            self._emit(event, self._state, seconds)
            self._node = None

    def _emit(self, event: str, state: str, seconds: float) -> None:
        text = f"  {self._node:<22} {state:<9} {seconds:6.1f}s"
        emit(self._echo, event, text, node=self._node, state=state, seconds=round(seconds, 2))

    def interrupted(self) -> None:
        if self._node:
            seconds = time.perf_counter() - self._started
            self.timings[self._node] = ("failed", seconds)
            self._emit("component_failed", "failed", seconds)


@contextlib.contextmanager
def _captured_logs(progress: logging.Handler, log_file: Path, secrets: tuple[str, ...] = ()):
    """TFX logs through absl at INFO: the full log goes to the run's file (owner-only), errors to
    stderr; `secrets` are masked in both, and in what the progress handler sees."""
    from absl import logging as absl_logging

    absl_logger = logging.getLogger("absl")
    saved = absl_logging.get_verbosity(), absl_logger.propagate
    log_file.parent.mkdir(parents=True, exist_ok=True)
    to_file = logging.FileHandler(write_private(log_file))  # appends to the private file
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    to_stderr = logging.StreamHandler()
    to_stderr.setLevel(logging.ERROR)
    handlers = (progress, to_file, to_stderr)
    redactor = Redactor(secrets)
    for handler in handlers:
        handler.addFilter(redactor)
    # Through absl's verbosity flag, not the logger: TensorFlow's saving code restores the
    # flag's value onto the logger after silencing it.
    absl_logging.set_verbosity(absl_logging.INFO)
    absl_logger.propagate = False
    # TensorFlow's deprecation notices (from TFMA and TFDV internals) are not the user's to act on.
    tf_logger = logging.getLogger("tensorflow")
    tf_level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)
    # Beam's note that python-snappy is missing (a slower checksum) is not actionable either.
    logging.getLogger("apache_beam.io.tfrecordio").setLevel(logging.ERROR)
    for handler in handlers:
        absl_logger.addHandler(handler)
    try:
        yield
    finally:
        for handler in handlers:
            absl_logger.removeHandler(handler)
            handler.removeFilter(redactor)
        to_file.close()
        absl_logging.set_verbosity(saved[0])
        absl_logger.propagate = saved[1]
        tf_logger.setLevel(tf_level)


@contextlib.contextmanager
def _no_tfx_package_for_direct_runner(beam_runner: str):
    """Stops TFX from packaging itself for Beam workers that already have it.

    Given any Beam arguments, TFX's BaseBeamExecutor builds an sdist of the whole installed
    TFX (a copy of the package and a `setup.py sdist` subprocess) for every Beam component it
    runs, and adds it as --extra_package for remote workers: about 1.7 s a component here. The
    DirectRunner's workers are this interpreter (or its subprocesses), and Beam's DirectRunner
    never stages packages, so locally that is time spent for nothing. Other runners keep TFX's
    behaviour: Dataflow, Flink and Spark workers do need the package.
    """
    if beam_runner != "DirectRunner":
        yield
        return
    from tfx.utils import dependency_utils

    infer_dependencies = dependency_utils.make_beam_dependency_flags
    dependency_utils.make_beam_dependency_flags = list  # the arguments, unchanged
    try:
        yield
    finally:
        dependency_utils.make_beam_dependency_flags = infer_dependencies


def new_run_id(pipeline: str) -> str:
    """`<pipeline>-<UTC time to the microsecond>Z`: unique per run, sorting by start time, and
    one folder name (no path separators), e.g. penguin-20261129T155717.645324Z."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{pipeline}-{stamp}"


def _quiet_libraries() -> None:
    import warnings

    # google-api-core warns once per module about Python 3.10, which TFX 1.16 requires.
    warnings.filterwarnings("ignore", category=FutureWarning)
    # TFMA divides by zero for the confusion-matrix thresholds no example reaches (a NaN the
    # report shows as such); the RuntimeWarning it prints mid-progress is noise.
    warnings.filterwarnings(
        "ignore", category=RuntimeWarning, module="tensorflow_model_analysis.metrics"
    )
    # Level 3: TF's C++ start-up logs (CUDA plugin registration on a CPU machine) are noise;
    # failures still surface as Python exceptions.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # TFMA 0.47 and TFX's Keras paths expect Keras 2 (tf-keras), not TF 2.16's Keras 3.
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


@contextlib.contextmanager
def _collector_paused():
    """Pauses Python's cyclic garbage collector while TensorFlow and TFX are imported, and
    afterwards keeps it off what those imports made.

    Importing them creates millions of long-lived objects (modules, classes, functions). Every
    so many allocations the collector walks them all again looking for cycles that are not
    there, and it walks them once more when the interpreter exits. Measured on a 150k-row data
    path on 2 cores: the imports and build took 4.3 s with the collector on and 3.0 s with it
    paused, and exit took 1.5 s after the last line printed, 0.2 s with them frozen. Nothing an
    import creates is garbage worth collecting, so the collector is off while importing. The
    first time in a process, what exists afterwards is frozen (gc.freeze: reference counting
    still frees it; the cycle collector no longer walks it). Later runs in the same process
    (tests, a backfill) import nothing new and freeze nothing more, so garbage they leave is
    still collected.
    """
    first_import = "tfx.orchestration.local.local_dag_runner" not in sys.modules
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if first_import:
            gc.freeze()
        if was_enabled:
            gc.enable()


def execute(
    planned: Run, echo: Callable[[str], None] = print, run_id: str | None = None
) -> RunFacts:
    """Runs the planned pipeline run with LocalDagRunner; never raises for a failed component
    (the facts say what stopped it), only for errors before the run starts.

    It writes the run's folder (resolved spec, run.log) and answers what only this runner
    knows: LocalDagRunner's failure, each node's state and time as seen live, the pipeline's
    seconds. What the run records (its outcome and reason, summary, report, alert, outcome
    record) is `pipelines.finish.contract.finish_run`'s, as for every orchestrator.

    Args:
      planned: the run as planned (spec, paths, span).
      echo: where progress lines go.
      run_id: the run's id (default: a new one); a supervising process names the run before
        it starts, so that it can read the run back from ML Metadata if this process dies.
    """
    loaded, paths, span = planned.loaded, planned.paths, planned.span
    spec = loaded.spec
    run_id = run_id or new_run_id(spec.name)
    open_run_dir(loaded, paths, run_id)
    emit(
        echo,
        "run_started",
        f"run {run_id}  (profile {loaded.env}, workdir {paths.workdir}"
        + (f", night {spans.describe(spec, span)})" if span is not None else ")"),
        pipeline=spec.name,
        run_id=run_id,
        profile=loaded.env,
        workdir=str(paths.workdir),
        span=span,
    )

    _quiet_libraries()
    # Building imports each component's executor (TFDV, TFMA...): most of the import time.
    with _collector_paused():
        from tfx.dsl.compiler import compiler, constants
        from tfx.orchestration.local.local_dag_runner import LocalDagRunner
        from tfx.orchestration.portable import runtime_parameter_utils

        from pipelines.builder.pipeline import build_pipeline

        pipeline = build_pipeline(
            spec,
            paths.workdir,
            span=span,
            metadata_connection_config=connection_config(spec, paths.metadata_path),
        )
        ir = compiler.Compiler().compile(pipeline)
    runtime_parameter_utils.substitute_runtime_parameter(
        ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id}
    )
    if paths.uses_object_storage:
        from pipelines.core import storage

        storage.share_beam_s3_clients()
    warm_ups = _warm_ups(spec, ir)
    progress = _ProgressHandler(echo, _warm_up_starter(warm_ups))
    secrets = run_secrets(spec)
    failure: Exception | None = None
    started = time.perf_counter()
    with (
        _captured_logs(progress, paths.run_log(run_id), secrets),
        _no_tfx_package_for_direct_runner(spec.runtime.beam_runner),
    ):
        try:
            LocalDagRunner().run_with_ir(ir)
        except Exception as err:  # a component failed: report it, keep the served model as is
            progress.interrupted()
            failure = err
        finally:
            for warm_up, _ in warm_ups:
                warm_up.discard()
    pipeline_seconds = time.perf_counter() - started
    emit(
        echo,
        "pipeline_finished",
        f"  {'pipeline':<22} {'total':<9} {pipeline_seconds:6.1f}s",
        run_id=run_id,
        seconds=round(pipeline_seconds, 2),
        failed=failure is not None,
    )

    return RunFacts(
        loaded,
        paths,
        run_id,
        span=span,
        night=spans.date_of_span(span).isoformat()
        if span is not None and spec.data.dated_spans
        else None,
        stop=stop_of(failure, paths) if failure is not None else None,
        timings=progress.timings,
        pipeline_seconds=round(pipeline_seconds, 2),
    )


def _warm_ups(spec: PipelineSpec, ir) -> list[tuple[WarmUp, set[str]]]:
    """Each warm-up the spec's components ask for (the component table's `warm_up`), with the
    nodes whose execution starts it: the producers of the component's `after_input`."""
    import importlib

    found = []
    for component in spec.components:
        row = COMPONENT_TYPES.get(component.type or "")
        if row is None or row.warm_up is None:
            continue
        module, _, attribute = row.warm_up.partition(":")
        warm_up = getattr(importlib.import_module(module), attribute)
        producers = {
            channel.producer_node_query.id
            for node in ir.nodes
            if node.pipeline_node.node_info.id == component.id
            for channel in node.pipeline_node.inputs.inputs[warm_up.after_input].channels
        }
        if producers:
            found.append((warm_up, producers))
    return found


def _warm_up_starter(warm_ups: list[tuple[WarmUp, set[str]]]) -> Callable[[str], None] | None:
    """What starts each warm-up when a node that produces its component's input executes; None
    for a pipeline that asks for none."""
    if not warm_ups:
        return None

    def start(node_id: str) -> None:
        for warm_up, producers in warm_ups:
            if node_id in producers:
                warm_up.start()

    return start
