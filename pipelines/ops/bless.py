"""`conveyor bless NAME --run RUN_ID`: a person pushes a candidate the gate held for review.

With `evaluation.first_run: require_manual_bless`, the very first candidate (no model served
yet, so nothing to compare with) passes the Evaluator's value thresholds but is not pushed: the
Pusher records "not pushed" and why. A person reads the run's report and, if the model is good,
blesses it here. The candidate is published exactly as the Pusher publishes (next integer
version, atomic rename) and the push is recorded in ML Metadata the way the Pusher records
one, so the baseline resolver, `conveyor lineage`, reconcile and retention all see it, plus who
blessed it and why:

- an execution of type `conveyor.ManualBless` with custom properties `blessed_by`, `reason`,
  `run_id`, in the pipeline's context, the held run's context and the node context
  `<pipeline>.manual_bless`;
- its INPUT event: the held Model; its OUTPUT: a new PushedModel artifact carrying `pushed`,
  `pushed_version`, `pushed_destination`, `conveyor_model_id`, `conveyor_reason` and the
  labels it moved (`conveyor_labels`), as the Pusher records a push; models.config is rewritten
  before the record, as after a push (pipelines/serving_state/push.py);
- the version's model card beside models.config, as a run's push writes one, with the bless
  (who, why) as its last gate.

Only a candidate that the Evaluator blessed and the Pusher held is accepted: a model that
failed its thresholds cannot be pushed from here.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from pipelines import serving_state
from pipelines.core import storage
from pipelines.core.metadata import (
    NODE_CONTEXT_TYPE,
    PUSHED_MODEL_TYPE,
    RUN_CONTEXT_TYPE,
    custom_property,
    node_id_of,
    open_store,
)
from pipelines.core.outcome import REASON_CODE_PROPERTY, REASON_PROPERTY, Reason
from pipelines.core.paths import RunPaths

BLESS_EXECUTION_TYPE = "conveyor.ManualBless"
BLESS_NODE = "manual_bless"
# How a Pusher recorded a held first candidate before reason codes were recorded: the words
# are the only mark such a store has.
HELD_WORDS = "require_manual_bless"


class BlessError(ValueError):
    """The run has no candidate to bless; the message says why and what to do."""


@dataclass(frozen=True)
class Blessed:
    """What `bless` published: the new serving `version`, its directory (`target`), the held
    Model's `model_uri` and the version's model card page, for the command to print."""

    version: int
    target: str
    model_uri: str
    model_card: str | None = None  # its page, None when it could not be written


def _held_candidate(store, paths: RunPaths, run_id: str):
    """The held Model of `run_id` and the run's context, or BlessError."""
    from ml_metadata.proto import metadata_store_pb2

    context = store.get_context_by_type_and_name(RUN_CONTEXT_TYPE, run_id)
    if context is None or not run_id.startswith(paths.spec.name + "-"):
        raise BlessError(f"no run {run_id!r} of {paths.spec.name} in {paths.metadata_path}")
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    node_type = store.get_context_type(NODE_CONTEXT_TYPE)
    pushers = {c.id for c in paths.spec.components if c.type == "pusher"}
    for execution in store.get_executions_by_context(context.id):
        if node_id_of(store, execution, node_type.id) not in pushers:
            continue
        events = store.get_events_by_execution_ids([execution.id])
        linked = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events]) or []}
        inputs = [linked[e.artifact_id] for e in events if e.type == metadata_store_pb2.Event.INPUT]
        outputs = [
            linked[e.artifact_id] for e in events if e.type == metadata_store_pb2.Event.OUTPUT
        ]
        push = next((a for a in outputs if type_names.get(a.type_id) == PUSHED_MODEL_TYPE), None)
        model = next((a for a in inputs if type_names.get(a.type_id) == "Model"), None)
        blessing = next((a for a in inputs if type_names.get(a.type_id) == "ModelBlessing"), None)
        if push is None or model is None:
            continue
        if custom_property(push, "pushed"):
            raise BlessError(
                f"run {run_id} already pushed version {custom_property(push, 'pushed_version')}"
            )
        reason = custom_property(push, REASON_PROPERTY) or ""
        code = custom_property(push, REASON_CODE_PROPERTY)
        held = (
            code == Reason.AWAITING_MANUAL_BLESS.value
            if code is not None
            else HELD_WORDS in reason  # recorded before reason codes
        )
        if not custom_property(blessing, "blessed") or not held:
            raise BlessError(
                f"run {run_id}'s candidate was not held for review but not pushed because: "
                f"{reason or 'the Evaluator did not bless it'}; only a candidate held by "
                "evaluation.first_run: require_manual_bless can be blessed"
            )
        return model, context
    raise BlessError(f"run {run_id} has no Pusher execution with a candidate to bless")


def serving_model_dir(model_uri: str) -> str:
    """TFX's Trainer writes the SavedModel under `<uri>/Format-Serving` (path_utils)."""
    serving = storage.join(model_uri, "Format-Serving")
    return serving if storage.isdir(serving) else model_uri  # a pipeline root may be a bucket


def bless(paths: RunPaths, run_id: str, blessed_by: str, reason: str) -> Blessed:
    """Publishes the held candidate of `run_id` and records the push with who and why.

    Raises:
      BlessError: the run is unknown, has no held candidate, or the model is already served.
      nightly.PipelineBusy: a run of the pipeline holds the workdir's lock and
        `runtime.concurrency` says to refuse (or the wait timed out).
    """
    from pipelines.ops import nightly

    if not reason.strip():
        raise BlessError("--reason is required: say why the candidate may be served")

    # A bless publishes a version like a run does: one at a time, and on a serving folder that
    # is in step with ML Metadata.
    with nightly.pipeline_lock(paths, f"a bless of run {run_id}"):
        serving_state.reconcile(paths)
        return _bless_locked(paths, run_id, blessed_by, reason)


def _bless_locked(paths: RunPaths, run_id: str, blessed_by: str, reason: str) -> Blessed:
    from ml_metadata.proto import metadata_store_pb2

    store = open_store(paths.spec, paths.metadata_path)
    if store is None:
        raise BlessError(f"no metadata store at {paths.metadata_path}: nothing was run there")
    model, run_context = _held_candidate(store, paths, run_id)
    for earlier in _blessings(store):
        if custom_property(earlier, "run_id") == run_id:
            raise BlessError(
                f"run {run_id} was already blessed by {custom_property(earlier, 'blessed_by')}: "
                f"{custom_property(earlier, 'reason')}"
            )
    base = str(paths.serving_dir)
    model_dir = serving_model_dir(model.uri)
    digest = serving_state.model_digest(model_dir)
    served = serving_state.served_as(base, digest)
    if served is not None:
        raise BlessError(f"run {run_id}'s model is already served as version {served}")
    # As the Pusher does: labels and models.config after the rename, before the record.
    pushed = serving_state.push_version(
        model_dir,
        base,
        {
            "model_digest": digest,
            "model_artifact_id": model.id,
            "model_uri": model.uri,
            "pushed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "blessed_by": blessed_by,
            "reason": reason,
        },
        push=paths.spec.push,
        config_dir=paths.serving_config_dir,
    )
    version, target = pushed.version, pushed.target
    not_moved = f"; {pushed.note}" if pushed.note else ""
    execution_type = store.put_execution_type(
        metadata_store_pb2.ExecutionType(name=BLESS_EXECUTION_TYPE)
    )
    execution = metadata_store_pb2.Execution(
        type_id=execution_type, last_known_state=metadata_store_pb2.Execution.COMPLETE
    )
    for key, value in (("blessed_by", blessed_by), ("reason", reason), ("run_id", run_id)):
        execution.custom_properties[key].string_value = value
    push_type = store.get_artifact_type(PUSHED_MODEL_TYPE)
    push = metadata_store_pb2.Artifact(
        type_id=push_type.id, uri=target, state=metadata_store_pb2.Artifact.LIVE
    )
    push.custom_properties["pushed"].int_value = 1
    push.custom_properties["pushed_version"].string_value = str(version)
    push.custom_properties["pushed_destination"].string_value = target
    push.custom_properties["conveyor_model_id"].int_value = model.id
    push.custom_properties[serving_state.LABELS_PROPERTY].string_value = ",".join(pushed.labels)
    push.custom_properties[REASON_CODE_PROPERTY].string_value = Reason.PUSHED.value
    push.custom_properties[
        REASON_PROPERTY
    ].string_value = f"pushed version {version}: blessed by {blessed_by}: {reason}{not_moved}"
    node_context = _node_context(store, paths.spec.name)
    pipeline_context = store.get_context_by_type_and_name("pipeline", paths.spec.name)
    store.put_execution(
        execution,
        [
            (model, metadata_store_pb2.Event(type=metadata_store_pb2.Event.INPUT)),
            (push, metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT)),
        ],
        [c for c in (pipeline_context, run_context, node_context) if c is not None],
    )
    card = _write_model_card(paths, run_id, version, target, blessed_by, reason)
    return Blessed(version=version, target=target, model_uri=model.uri, model_card=card)


def _write_model_card(
    paths: RunPaths, run_id: str, version: int, target: str, blessed_by: str, reason: str
) -> str | None:
    """The blessed version's model card, as a run's push writes one (read from the push just
    recorded and the held run's artifacts), with the bless as its last gate; None, with the
    version served all the same, when it cannot be written: a card describes a version, it is
    never a reason to take one back."""
    from pipelines.core.outcome import Outcome, RunResult
    from pipelines.finish.model_card import Gate, write_model_card

    run_dir = paths.run_dir(run_id)
    result = RunResult(
        run_id=run_id,
        pipeline=paths.spec.name,
        outcome=Outcome.PUSHED,
        message=f"pushed version {version}: blessed by {blessed_by}",
        reason=Reason.PUSHED,
        pushed_version=str(version),
        pushed_path=target,
        run_dir=str(run_dir) if run_dir.is_dir() else "",
    )
    try:
        _, page = write_model_card(result, paths, (Gate("manual bless", blessed_by, reason),))
    except Exception as err:  # noqa: BLE001 - the push stands; the command says what is missing
        print(f"warning: no model card written: {type(err).__name__}: {err}", file=sys.stderr)
        return None
    return str(page)


def _blessings(store) -> list:
    """Every manual bless recorded so far (none before the first: its type does not exist)."""
    try:
        return list(store.get_executions_by_type(BLESS_EXECUTION_TYPE))
    except Exception:  # ml_metadata raises NotFoundError for a type never registered
        return []


def _node_context(store, pipeline: str):
    from ml_metadata.proto import metadata_store_pb2

    name = f"{pipeline}.{BLESS_NODE}"
    found = store.get_context_by_type_and_name(NODE_CONTEXT_TYPE, name)
    if found is not None:
        return found
    node_type = store.get_context_type(NODE_CONTEXT_TYPE)
    [context_id] = store.put_contexts([metadata_store_pb2.Context(type_id=node_type.id, name=name)])
    return store.get_contexts_by_id([context_id])[0]
