"""Local runner: LocalDagRunner over the built pipeline, with progress and a summary.

It adds only what running locally needs: a run id it knows in advance (so the resolved spec
and the summary land in `<workdir>/runs/<pipeline>/<run id>/`), live per-component progress,
and a final answer read back from ML Metadata: the version pushed, or exactly why none was.

A run's folder is its owner's alone (0700, files 0600), and secrets are masked in its log: TFX
logs the whole metadata connection, MySQL password included.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import yaml

from pipelines.builder import spans
from pipelines.core.metadata import (
    MetadataConfigError,
    connection_config,
    find_run,
    metadata_password,
    open_store,
)
from pipelines.core.outcome import Outcome, RunResult
from pipelines.core.paths import RESOLVED_SPEC, RUN_LOG, RUN_SUMMARY, RunPaths
from pipelines.run.events import emit
from pipelines.run.plan import Run
from pipelines.spec.models import PipelineSpec

REDACTED = "***"
# components.data_gate.component.FINDINGS_FILE, named here so that reading a run back imports no
# TFX (the process that supervises `conveyor run` reads a killed run back without TensorFlow).
GATE_FINDINGS_FILE = "findings.json"


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


def run_secrets(spec: PipelineSpec) -> tuple[str, ...]:
    """The secret values a run's logs must never show: the metadata database's password and the
    alert webhook's URL (both read from the environment variables the spec names)."""
    secrets = []
    try:
        secrets.append(metadata_password(spec))
    except MetadataConfigError:  # no password to leak (a MySQL run fails on it before logging)
        pass
    if spec.runtime.alert_webhook_env:
        secrets.append(os.environ.get(spec.runtime.alert_webhook_env, "").strip())
    return tuple(secret for secret in secrets if secret)


def _spellings(secret: str) -> set[str]:
    """A secret as it may appear in a log line: as is, and escaped the way protobuf's text
    format (TFX logs the connection config so), repr() and JSON write a string."""
    from google.protobuf import text_encoding

    return {
        secret,
        text_encoding.CEscape(secret.encode(), as_utf8=False),
        text_encoding.CEscape(secret, as_utf8=True),
        repr(secret)[1:-1],
        json.dumps(secret)[1:-1],
    }


class _Redactor(logging.Filter):
    """Replaces secret values with `***` in a record's message and exception text.

    The record is changed in place, so every handler after the first one that filters it (and
    any other handler of the logger) sees the masked text.
    """

    def __init__(self, secrets: tuple[str, ...]):
        super().__init__()
        spelled = {variant for secret in secrets if secret for variant in _spellings(secret)}
        # Longest first: an escaped spelling may contain the plain one.
        self._secrets = sorted(spelled, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets or getattr(record, "_conveyor_redacted", False):
            return True
        try:
            message, formatted = record.getMessage(), True
        except Exception:  # logging's own error report would print the arguments unmasked
            message, formatted = f"{record.msg} {record.args!r}", False
        redacted = self.redact(message)
        if redacted != message or not formatted:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        record._conveyor_redacted = True
        return True


def redact(text: str, spec: PipelineSpec) -> str:
    """`text` with the run's secrets (see `run_secrets`) masked: for a message that is written
    to a summary, a report or an alert."""
    return _Redactor(run_secrets(spec)).redact(text)


def _private_dir(path: Path) -> Path:
    """Creates `path` (and its parents) readable by its owner only, whatever the umask."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _write_private(path: Path, text: str = "") -> Path:
    """Writes `path` readable and writable by its owner only, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # os.open's mode passes through the umask; an existing file keeps its own
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return path


@contextlib.contextmanager
def _captured_logs(progress: logging.Handler, log_file: Path, secrets: tuple[str, ...] = ()):
    """TFX logs through absl at INFO: the full log goes to the run's file (owner-only), errors to
    stderr; `secrets` are masked in both, and in what the progress handler sees."""
    from absl import logging as absl_logging

    absl_logger = logging.getLogger("absl")
    saved = absl_logging.get_verbosity(), absl_logger.propagate
    to_file = logging.FileHandler(_write_private(log_file))  # appends to the private file
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    to_stderr = logging.StreamHandler()
    to_stderr.setLevel(logging.ERROR)
    handlers = (progress, to_file, to_stderr)
    redactor = _Redactor(secrets)
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
) -> RunResult:
    """Runs the planned pipeline run with LocalDagRunner; never raises for a failed component
    (the result says what failed), only for errors before the run starts.

    It writes the run's folder (resolved spec, run.log, summary.json) and nothing else: what
    follows a run (its report, alerts, the outcome record) is `pipelines.ops.finish`'s.

    Args:
      planned: the run as planned (spec, paths, span).
      echo: where progress lines go.
      run_id: the run's id (default: a new one); a supervising process names the run before
        it starts, so that it can read the run back from ML Metadata if this process dies.
    """
    loaded, paths, span = planned.loaded, planned.paths, planned.span
    spec = loaded.spec
    run_id = run_id or new_run_id(spec.name)
    run_dir = open_run_dir(planned, run_id)
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
    progress = _ProgressHandler(echo, _spare_server_starter(ir))
    secrets = run_secrets(spec)
    failure: Exception | None = None
    started = time.perf_counter()
    with (
        _captured_logs(progress, run_dir / RUN_LOG, secrets),
        _no_tfx_package_for_direct_runner(spec.runtime.beam_runner),
    ):
        try:
            LocalDagRunner().run_with_ir(ir)
        except Exception as err:  # a component failed: report it, keep the served model as is
            progress.interrupted()
            failure = err
        finally:
            _discard_spare_server()
    pipeline_seconds = time.perf_counter() - started
    emit(
        echo,
        "pipeline_finished",
        f"  {'pipeline':<22} {'total':<9} {pipeline_seconds:6.1f}s",
        run_id=run_id,
        seconds=round(pipeline_seconds, 2),
        failed=failure is not None,
    )

    result = summarise(spec.name, run_id, paths, failure, progress.timings)
    # A failure's text goes to the summary, the report and the alert: no secret in it either.
    result.message = _Redactor(secrets).redact(result.message)
    result.pipeline_seconds = round(pipeline_seconds, 2)
    complete_result(result, spec, span, run_dir)
    write_summary(run_dir, result)
    return result


INFRA_VALIDATOR_TYPE = "components.infra_validator.component.InfraValidator"


def _spare_server_starter(ir) -> Callable[[str], None] | None:
    """What starts the infra validator's spare model server (components/infra_validator/
    spare.py) when the node that makes the candidate (the producer of the infra validator's
    `model` input, the trainer) executes, so that the server's imports run beside training
    rather than at the infra validator; None for a pipeline without an infra validator. A run
    that stops before training (a data gate that blocks, cache hits throughout) starts none."""
    producers = {
        channel.producer_node_query.id
        for node in ir.nodes
        if node.pipeline_node.node_info.type.name == INFRA_VALIDATOR_TYPE
        for channel in node.pipeline_node.inputs.inputs["model"].channels
    }
    if not producers:
        return None

    def start_spare(node_id: str) -> None:
        if node_id not in producers:
            return
        from components.infra_validator import spare

        try:
            spare.start()  # at most one waits at a time: a second start is a no-op
        except OSError as err:  # the executor then starts its server itself, as without one
            logging.getLogger(__name__).warning("no spare model server: %s", err)

    return start_spare


def _discard_spare_server() -> None:
    """Ends a spare model server the run started and did not use."""
    from components.infra_validator import spare

    spare.discard()


def complete_result(result: RunResult, spec: PipelineSpec, span: int | None, run_dir: Path) -> None:
    """Fills in what ML Metadata does not say about a run: its folder, and its span and night
    when no Examples artifact recorded them (a run that failed before ExampleGen)."""
    result.run_dir = str(run_dir)
    if result.span is None:
        result.span = span
    if result.span is not None and spec.data.dated_spans:
        result.night = spans.date_of_span(result.span).isoformat()


def write_summary(run_dir: Path, result: RunResult) -> Path:
    """Writes the run's `summary.json` (owner-only, like the rest of its folder)."""
    _private_dir(run_dir)
    return _write_private(run_dir / RUN_SUMMARY, json.dumps(asdict(result), indent=2))


def open_run_dir(planned: Run, run_id: str) -> Path:
    """Creates the run's folder (owner-only: its log and summary are the run's own) with the
    resolved spec in it."""
    loaded, spec = planned.loaded, planned.spec
    run_dir = _private_dir(planned.paths.run_dir(run_id))
    _write_private(
        run_dir / RESOLVED_SPEC,
        f"# {spec.name} as run {run_id} (profile {loaded.env}; layers: "
        f"{', '.join(loaded.sources)})\n" + yaml.safe_dump(spec.to_yaml_dict(), sort_keys=False),
    )
    return run_dir


def summarise(
    pipeline: str,
    run_id: str,
    paths: RunPaths,
    failure: BaseException | str | None = None,
    timings: dict[str, tuple[str, float]] | None = None,
) -> RunResult:
    """What a run did, read back from ML Metadata: the version it pushed, why it pushed none,
    or (given `failure`) why it failed.

    Shared by every runner that can read the run's store afterwards: the local runner, an
    orchestrator's final step, and the process that supervises `conveyor run`.

    Args:
      pipeline: the pipeline's name.
      run_id: the name of the run's context in ML Metadata (see `pipelines.core.metadata.find_run`).
      paths: the pipeline's paths (its spec says where the store is).
      failure: what stopped the run: an exception (a `DataGateError` makes the run BLOCKED, any
        other FAILED), or a message in words (FAILED, with that message as is).
      timings: node id -> (state, seconds) as the runner saw each node live.
    """
    timings = timings or {}
    try:
        store = open_store(paths.spec, paths.metadata_path)
        record = find_run(store, run_id) if store is not None else None
        unread = None
    except Exception as err:  # the store went away (a MySQL server stopped mid-run, say)
        record = None
        unread = (
            f"the run's record could not be read back from the ML Metadata store "
            f"({_store_location(paths)}): {type(err).__name__}: {err}"
        )
        if failure is None:  # nothing says what the run did: it is not known to have pushed
            failure = unread
        elif isinstance(failure, str):
            failure = f"{failure}; {unread}"
    nodes = record.nodes if record else []
    for node in nodes:
        # The runner saw each node live: its wall-clock beats MLMD's stamps, and it tells a
        # resolver (which only resolves inputs) from a component that executed.
        node.state, seconds = timings.get(node.node_id, (node.state, node.seconds))
        node.seconds = round(seconds, 2)
    span = record.span if record else None
    gate = _gate_findings(record)
    if isinstance(failure, str):
        return RunResult(
            run_id=run_id,
            pipeline=pipeline,
            outcome=Outcome.FAILED,
            message=failure,
            pushed_version=record.pushed_version if record else None,
            nodes=nodes,
            span=span,
            data_gate=gate,
        )
    if failure is not None:
        from components.csv_input.checks import CsvInputError
        from components.data_gate.component import DataGateError

        blocked = isinstance(failure, DataGateError)
        # The gate's findings and a bad input file are explained in words already.
        worded = blocked or isinstance(failure, CsvInputError)
        message = str(failure) if worded else f"{type(failure).__name__}: {failure}"
        return RunResult(
            run_id=run_id,
            pipeline=pipeline,
            outcome=Outcome.BLOCKED if blocked else Outcome.FAILED,
            message=f"{message}; {unread}" if unread else message,
            nodes=nodes,
            span=span,
            data_gate=failure.findings if blocked else gate,
        )
    if record and record.pushed_version:
        path = paths.serving_dir / record.pushed_version
        # The push's reason ends with the labels that did not move when the model servers had
        # not loaded the version in time (pipelines/ops/labels.py, Rollout.note).
        reason = str(record.push_reason or "")
        said = reason[reason.find("labels not moved") :] if "; labels not moved" in reason else ""
        return RunResult(
            run_id,
            pipeline,
            Outcome.PUSHED,
            f"pushed version {record.pushed_version} to {path}" + (f"; {said}" if said else ""),
            record.pushed_version,
            str(path),
            nodes,
            span=span,
            data_gate=gate,
        )
    reason = (record.push_reason if record else None) or (
        "every component was a cache hit: same data, spec and code as an earlier run"
        if nodes and not any(n.state == "executed" for n in nodes)
        else "the Pusher did not run"
    )
    return RunResult(
        run_id,
        pipeline,
        Outcome.NOT_PUSHED,
        f"nothing pushed: {reason}",
        nodes=nodes,
        span=span,
        data_gate=gate,
    )


def _store_location(paths: RunPaths) -> str:
    """Where the run's ML Metadata store is, for messages (never its password)."""
    metadata = paths.spec.runtime.metadata
    if metadata.kind.value == "mysql":
        return f"MySQL database {metadata.database} at {metadata.host}:{metadata.port}"
    return f"SQLite file {paths.metadata_path}"


def _gate_findings(record) -> dict | None:
    """The data gate's findings.json from its output artifact (a passed or cached gate)."""
    if record is None or not record.gate_findings_uri:
        return None
    found = Path(record.gate_findings_uri) / GATE_FINDINGS_FILE
    return json.loads(found.read_text()) if found.is_file() else None
