"""The end of a run, whoever ran it: one contract every orchestrator calls.

`finish_run(facts, echo)` decides what a finished run records and records it:

1. its result: the outcome with its reason code (`pipelines.core.outcome.Reason`), the version
   pushed, each node's state, the data gate's findings. Read back from ML Metadata where
   Conveyor can read the run's store (`conveyor run`, Airflow), from what the orchestrator
   says where it cannot (Kubeflow keeps its own store), and there the push its Pusher told
   (`RunFacts.told_push`) recorded in the spec's store, where operations read it;
2. `summary.json` in the run's folder, with the resolved spec beside it;
3. retention of old served versions after a run that did its job (`pipelines.serving_state`,
   after ML Metadata recorded the push, never before);
4. the model card of a pushed version (`pipelines.finish.model_card`, beside models.config),
   the report page that links it, the alert (the webhook), the `gate` and `push` events of a
   JSON log, the run's Prometheus metrics: news of the run, none of which can change its
   outcome or stop what follows;
5. the outcome record of a final outcome, which lets a re-run of unchanged inputs answer at
   once (`RunFacts.record_outcome`).

Each orchestrator supplies only what it alone knows, as `RunFacts`: the local runner
(`pipelines.run.local`) LocalDagRunner's failure and each node's state and time as it saw them;
the process supervising `conveyor run` that the pipeline process was killed; Airflow's final
task (`pipelines.run.airflow`) the DAG run's id and which tasks failed or did not run through;
Kubeflow's exit handler (`components.run_finish`) KFP's final status. What a run with the same
facts records is the same whoever ran it (ZenML's orchestrator flavors are the example).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pipelines.core import storage
from pipelines.core.events import emit, structured
from pipelines.core.failpoints import failpoint
from pipelines.core.metadata import find_output, find_run, open_store, read_run_artifacts
from pipelines.core.outcome import REASON_CODE_PROPERTY, Outcome, Reason, RunResult
from pipelines.core.paths import RunPaths
from pipelines.finish import alerts, artifacts, metrics, report
from pipelines.finish.run_folder import open_run_dir, publish_run_log, redact, write_summary
from pipelines.spec.loading import LoadedSpec
from pipelines.spec.models import PipelineSpec

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Stop:
    """What stopped a run before its end, as its orchestrator saw it: the reason code, the
    words for people, and the data gate's findings when the gate refused the data."""

    reason: Reason
    message: str
    findings: dict | None = None

    @property
    def outcome(self) -> Outcome:
        """BLOCKED for data the gate refused, FAILED for anything else that stopped a run."""
        return Outcome.BLOCKED if self.reason is Reason.DATA_GATE_BLOCKED else Outcome.FAILED


def stop_of(error: BaseException, paths: RunPaths | None = None) -> Stop:
    """The `Stop` of an exception a run raised. An error that knows its reason code (a class
    attribute `reason`: the data gate's `DataGateError`, a bad input file's `CsvInputError`)
    is explained in words already and keeps its message; when a bucket of the run's (`paths`)
    does not answer now, the stop is that bucket's; any other is a component that failed,
    named by its type."""
    reason = getattr(error, "reason", None)
    if isinstance(reason, Reason):
        return Stop(reason, str(error), getattr(error, "findings", None))
    words = f"{type(error).__name__}: {error}"
    if paths is not None and paths.uses_object_storage:
        # TensorFlow's filesystems say only "couldn't connect" or a curl code: whether a bucket
        # is what failed is asked of the buckets themselves, now.
        silent = [bucket for bucket in sorted(paths.buckets()) if not storage.answers(bucket)]
        if silent:
            return silent_store_stop(silent, words)
    return Stop(Reason.COMPONENT_FAILED, words)


def silent_store_stop(buckets: list[str], why: str) -> Stop:
    """The stop of a run whose object store did not answer: reason `storage_failed`, naming
    the buckets, with what went unanswered (`why`)."""
    return Stop(
        Reason.STORAGE_FAILED,
        f"the object store holding {', '.join(buckets)} did not answer ({why})",
    )


@dataclass
class RunFacts:
    """What an orchestrator alone knows of a run that has ended; `finish_run` reads or decides
    the rest.

    `in_store` says whether the run is in the ML Metadata store the spec names (the local runner
    and Airflow write there; Kubeflow records a run in its own store, which its tasks cannot
    read). A run that is not gives its outcome itself (`outcome`, with `possible_outcomes`
    when the orchestrator cannot tell several apart).
    """

    loaded: LoadedSpec  # the spec the run ran, its profile and layers
    paths: RunPaths
    run_id: str | None  # the run's name in its store, and in alerts; None: it has none
    span: int | None = None  # the span it was planned to ingest
    night: str | None = None  # that span's night (ISO date) for a spec with dated spans
    stop: Stop | None = None  # what stopped it, when something did
    # node id -> (state, seconds) as the orchestrator saw each node live (the local runner).
    timings: dict[str, tuple[str, float]] = field(default_factory=dict)
    pipeline_seconds: float | None = None
    folder: str | None = None  # the run folder's name (default: the run id; "": no folder)
    in_store: bool = True
    outcome: Outcome | None = None  # a run not in the store: its outcome as its runner knows it
    reason: Reason = Reason.UNKNOWN  # ... and its reason, when the runner knows it
    possible_outcomes: tuple[Outcome, ...] = ()  # ... or those it may have had (metrics)
    finished_at: float | None = None  # when it ended (Unix seconds); None: now
    last_push: tuple[int, float] | None = None  # a run not in the store: (version, pushed at)
    said: str = ""  # a run not in the store: its words for a run that pushed nothing
    # A run not in the store whose Pusher wrote its decision (Kubeflow): recorded in the store
    # (pipelines/core/metadata/told_push.py) before retention, so operations see the push.
    told_push: dict | None = None
    # Keeps the record of a final outcome; None: this orchestrator keeps none.
    record_outcome: Callable[[RunResult], None] | None = None
    # Sends the alert before writing the report, for a process that may itself be killed soon
    # (a SIGTERM's grace period): the report may import TFMA (seconds); the alert names no report.
    alert_first: bool = False

    @property
    def spec(self) -> PipelineSpec:
        """The resolved spec the run ran."""
        return self.loaded.spec


def compiled_spec(spec: PipelineSpec) -> LoadedSpec:
    """A spec an orchestrator runs from its compiled, resolved form (an Airflow DAG file and a
    Kubeflow job hold the resolved spec, not its profile and layers), as `RunFacts.loaded`."""
    return LoadedSpec(spec, spec.runtime.orchestrator.value, ("the compiled, resolved spec",))


def finish_run(facts: RunFacts, echo: Echo = print) -> RunResult:
    """Decides and records what a finished run records (module docstring), whoever ran it.

    Returns:
      The run's result, as written to its summary.
    """
    result = read_result(facts)
    # A failure's text goes to the summary, the report and the alert: no secret in it.
    result.message = redact(result.message, facts.spec)
    _write_folder(facts, result, echo)
    recorded = _record_told_push(facts, echo)
    failpoint("run:before_finish")
    pushed_outside_the_store = not facts.in_store and Outcome(result.outcome) is Outcome.PUSHED
    if result.ok and (facts.in_store or pushed_outside_the_store):
        # After the push is in ML Metadata, never before (see pipelines.serving_state); a run
        # whose store Conveyor cannot read (Kubeflow's) retires after the push its orchestrator
        # saw succeed. A failed run changes nothing in serving.
        from pipelines import serving_state

        try:
            serving_state.retain(facts.paths, echo, recorded=facts.in_store or recorded)
        except OSError as err:  # the new version is served either way: the outcome stands
            echo(f"warning: old versions not retired: {err}")
    try:
        if not facts.alert_first:
            _write_model_card(facts, result, echo)
            _write_report(facts, result, echo)
        _send_alert(facts, result, echo)
        if facts.alert_first:
            _write_model_card(facts, result, echo)
            _write_report(facts, result, echo)
        _log_decisions(facts, result, echo)
        _export_metrics(facts, result, echo)
    finally:
        # Recorded whatever the alert did: a night whose record is lost runs again and again.
        if Outcome(result.outcome).final and facts.record_outcome is not None:
            facts.record_outcome(result)
    return result


def read_result(facts: RunFacts) -> RunResult:
    """The run's result: its outcome and reason code, and what ML Metadata holds of it (each
    node's state, the version pushed, the data gate's findings) when the run is in the store."""
    if not facts.in_store:
        result = _told_result(facts)
    else:
        result = _read_back(facts)
    if result.span is None:
        result.span = facts.span
    if result.night is None:
        result.night = facts.night
    return result


def _told_result(facts: RunFacts) -> RunResult:
    """The result of a run whose store Conveyor cannot read: what its orchestrator told."""
    stop = facts.stop
    if stop is not None:
        outcome, reason, message = stop.outcome, stop.reason, stop.message
    else:
        outcome = facts.outcome or Outcome.NOT_PUSHED
        reason, message = facts.reason, facts.said or f"the run ended {outcome.label}"
    version = path = None
    if outcome is Outcome.PUSHED and facts.last_push is not None:
        # The orchestrator saw the push it reports (the newest version in the serving folder).
        version = str(facts.last_push[0])
        path = str(facts.paths.serving_dir / version)
        message = f"pushed version {version} to {path}"
    return RunResult(
        run_id=facts.run_id,
        pipeline=facts.spec.name,
        outcome=outcome,
        message=message,
        reason=reason,
        pushed_version=version,
        pushed_path=path,
        data_gate=stop.findings if stop is not None else None,
        pipeline_seconds=facts.pipeline_seconds,
    )


def _read_back(facts: RunFacts) -> RunResult:
    """What the run did, read back from ML Metadata: the version it pushed, why it pushed
    none, or (given a `Stop`) why it stopped."""
    paths, stop = facts.paths, facts.stop
    pipeline, run_id = facts.spec.name, str(facts.run_id)
    try:
        store = open_store(paths.spec, paths.metadata_path)
        record = find_run(store, run_id) if store is not None else None
        unread = None
    except Exception as err:  # the store went away (a MySQL server stopped mid-run, say)
        store = record = None
        unread = (
            f"the run's record could not be read back from the ML Metadata store "
            f"({_store_location(paths)}): {type(err).__name__}: {err}"
        )
        if stop is None:  # nothing says what the run did: it is not known to have pushed
            stop = Stop(Reason.STORE_UNREADABLE, unread)
        else:
            stop = Stop(stop.reason, f"{stop.message}; {unread}", stop.findings)
    nodes = record.nodes if record else []
    for node in nodes:
        # The runner saw each node live: its wall-clock beats MLMD's stamps, and it tells a
        # resolver (which only resolves inputs) from a component that executed.
        node.state, seconds = facts.timings.get(node.node_id, (node.state, node.seconds))
        node.seconds = round(seconds, 2)
    found = dict(
        run_id=run_id,
        pipeline=pipeline,
        nodes=nodes,
        span=record.span if record else None,
        data_gate=artifacts.findings_in(record.gate_findings_uri) if record else None,
        pipeline_seconds=facts.pipeline_seconds,
    )
    if stop is not None:
        if stop.findings is not None:
            found["data_gate"] = stop.findings
        pushed = record.pushed_version if record and stop.outcome is Outcome.FAILED else None
        return RunResult(
            outcome=stop.outcome,
            message=stop.message,
            reason=stop.reason,
            pushed_version=pushed,
            **found,
        )
    if record and record.pushed_version:
        path = paths.serving_dir / record.pushed_version
        # The push's words end with the labels that did not move when the model servers had
        # not loaded the version in time (pipelines.serving_state): the verdict repeats them.
        words = str(record.push_reason or "")
        mark = "; labels not moved"
        said = words[words.find(mark) + 2 :] if mark in words else ""
        return RunResult(
            outcome=Outcome.PUSHED,
            message=f"pushed version {record.pushed_version} to {path}"
            + (f"; {said}" if said else ""),
            reason=Reason.PUSHED,
            pushed_version=record.pushed_version,
            pushed_path=str(path),
            **found,
        )
    if record and record.push_reason is not None:
        reason, words = _push_decision(store, run_id), record.push_reason
    elif nodes and not any(n.state == "executed" for n in nodes):
        reason = Reason.NOTHING_NEW
        words = "every component was a cache hit: same data, spec and code as an earlier run"
    else:
        reason, words = Reason.PUSHER_NOT_RUN, "the Pusher did not run"
    return RunResult(
        outcome=Outcome.NOT_PUSHED, message=f"nothing pushed: {words}", reason=reason, **found
    )


def _record_told_push(facts: RunFacts, echo: Echo) -> bool:
    """Records the push decision a run not in the store told (`RunFacts.told_push`) in the
    store the spec names; returns whether the store now holds it. A store that cannot take it
    is said, never a reason to change the run's outcome (serving changed either way)."""
    if facts.in_store or facts.told_push is None:
        return False
    from ml_metadata.metadata_store import metadata_store

    from pipelines.core.metadata import connection_config
    from pipelines.core.metadata.told_push import record_told_push

    spec, where = facts.spec, _store_location(facts.paths)
    ids = tuple(
        next((c.id for c in spec.components if c.type == kind), kind)
        for kind in ("trainer", "pusher")
    )
    try:
        store = metadata_store.MetadataStore(connection_config(spec, facts.paths.metadata_path))
        record_told_push(store, spec.name, str(facts.folder or facts.run_id), ids, facts.told_push)
    except Exception as err:  # noqa: BLE001 - the served model stands whatever the store does
        words = redact(f"{type(err).__name__}: {err}", spec)
        echo(f"warning: the run's push decision is not recorded in {where}: {words}")
        return False
    echo(f"metadata: the run's push decision is recorded in {where}")
    return True


def _push_decision(store, run_id: str) -> Reason:
    """The reason code the Pusher recorded on its output in this run (UNKNOWN for a push
    recorded before Pusher decisions carried codes)."""
    node, pushed = find_output(read_run_artifacts(store, run_id), "PushedModel")
    code = pushed.get(REASON_CODE_PROPERTY) if pushed is not None and not node.cached else None
    try:
        return Reason(code)
    except ValueError:
        return Reason.UNKNOWN


def _store_location(paths: RunPaths) -> str:
    """Where the run's ML Metadata store is, for messages (never its password)."""
    metadata = paths.spec.runtime.metadata
    if metadata.kind.value == "mysql":
        return f"MySQL database {metadata.database} at {metadata.host}:{metadata.port}"
    return f"SQLite file {paths.metadata_path}"


def _write_folder(facts: RunFacts, result: RunResult, echo: Echo) -> None:
    """The run's folder with its resolved spec and summary.json; a folder that cannot be
    written is a warning (the alert must still go out), and the run then has no folder."""
    folder = facts.run_id if facts.folder is None else facts.folder
    if not folder:
        return
    try:
        run_dir = facts.paths.run_dir(folder)
        if not run_dir.is_dir():
            open_run_dir(facts.loaded, facts.paths, folder)
        result.run_dir = str(run_dir)
        write_summary(run_dir, result)
        publish_run_log(facts.paths, folder)
    except OSError as err:
        result.run_dir = ""
        echo(f"warning: no run folder written: {type(err).__name__}: {err}")


def _write_model_card(facts: RunFacts, result: RunResult, echo: Echo) -> None:
    """The pushed version's model card, before the report that links it; a run that pushed
    nothing, or whose store Conveyor cannot read (its lineage is not there), has none."""
    if Outcome(result.outcome) is not Outcome.PUSHED or not result.pushed_version:
        return
    if not facts.in_store:
        return
    try:
        from pipelines.finish.model_card import write_model_card

        _, page = write_model_card(result, facts.paths)
        emit(echo, "model_card", f"model card: {page}", run_id=result.run_id, path=str(page))
    except Exception as err:  # a card describes the version, never a reason to fail its run
        echo(f"warning: no model card written: {type(err).__name__}: {err}")


def _write_report(facts: RunFacts, result: RunResult, echo: Echo) -> None:
    if facts.folder == "":  # a run without a folder (no workdir to write in) has no page
        return
    try:
        # A run outside the store has no nodes to read: its page says what its runner told.
        written = report.write_report(result, facts.paths, None if facts.in_store else {})
        emit(echo, "report", f"report: {written}", run_id=result.run_id, path=str(written))
    except Exception as err:  # the report is a view of the run, never a reason to fail it
        echo(f"warning: no run report written: {type(err).__name__}: {err}")


def _send_alert(facts: RunFacts, result: RunResult, echo: Echo) -> None:
    try:
        alerted = alerts.send_alert(facts.spec, result)
        if alerted:
            echo(alerted)
    except Exception as err:  # an alert is news of the run, never its outcome
        # Its type only: the text of an error about the webhook may quote its (secret) URL.
        echo(f"alert not delivered: {type(err).__name__} while sending it")


def _log_decisions(facts: RunFacts, result: RunResult, echo: Echo) -> None:
    """A JSON log's `gate` events (data gate, model, infra validation, TF Lite) and `push`
    event; a text log has the report for them."""
    if not structured(echo) or not facts.in_store:
        return
    try:
        decided = report.gate_decisions(result, facts.paths)
    except Exception as err:  # a log line, never the run's outcome
        echo(f"warning: gate decisions not logged: {type(err).__name__}: {err}")
        return
    gates = (("data_gate", decided.data_gate), ("model", decided.model))
    for gate, badge in (*gates, ("infra_validation", decided.infra), ("tflite", decided.tflite)):
        if badge is not None:
            emit(echo, "gate", run_id=result.run_id, gate=gate, decision=badge.text,
                 note=badge.note)  # fmt: skip
    emit(echo, "push", run_id=result.run_id, decision=decided.push.text, reason=result.reason,
         pushed_version=result.pushed_version, note=decided.push.note)  # fmt: skip


def _export_metrics(facts: RunFacts, result: RunResult, echo: Echo) -> None:
    try:
        if facts.in_store:
            metrics.export_run_metrics(result, facts.paths, echo)
            return
        if not metrics.has_sink(facts.spec):
            return
        possible = facts.possible_outcomes or None
        told = metrics.result_metrics(result, facts.spec, facts.finished_at, possible)
        if facts.last_push is not None:
            metrics.set_last_push(told, result.pipeline, *facts.last_push)
        metrics.send_run_metrics(told.registry, facts.spec, facts.paths.workdir, echo)
    except Exception as err:  # metrics are news of the run, never its outcome
        echo(f"warning: run metrics not exported: {type(err).__name__}: {err}")
