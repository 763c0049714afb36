"""Version labels (`stable`, `canary`) in TF Serving's models.config: the rules every push,
`conveyor promote` and `conveyor rollback` follow, and their record in ML Metadata.

Where the state lives:
- models.config (`RunPaths.serving_config_dir`, written through `pipelines.serving.config`)
  says what the model server loads and where each label points. Several pipelines may share
  one config folder, so every change rereads the file and replaces only this model's entry,
  under a file lock beside it.
- ML Metadata is the record: a push records the labels it moved on its PushedModel artifact
  (`conveyor_labels`, e.g. "stable,canary"), a promote or rollback records one
  `conveyor.LabelMove` execution per label it moved. Folding these in order gives where each
  label points and whether the pipeline is held.
- The hold file (`.conveyor-hold-<model>.json` beside models.config) says a rollback holds
  `stable`: the next pushes get only the other labels until `conveyor promote --label stable`.
  It exists so that the Pusher, which has no handle on ML Metadata, can read the hold.

The order of every change is files first (the version folder, the hold file, models.config),
then ML Metadata; a crash in between leaves files that disagree with the record, and
`reconcile_labels` (run by `serving_state.reconcile` before every run, bless, promote and
rollback) rewrites the files from the record.

TF Serving refuses a models.config that moves a label to a version it has not loaded
(`ServerCore::UpdateModelVersionLabelMap`), and a refused config loads nothing new, so with
`push.serving_urls` a move onto such a version is written in two steps (`roll_out`): first the
version joins the loaded set with every label where it was, then, once each server reports
the version AVAILABLE, the labels move. A server that does not load it in time leaves the
first step in force: the version is loaded, the labels did not move, and the record says so.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from components.pusher import layout
from pipelines.core.metadata import custom_property, open_store, successful_pushes
from pipelines.core.paths import RunPaths
from pipelines.serving.config import MODELS_CONFIG, ServedModel, served_models, write_atomically

LABEL_MOVE_TYPE = "conveyor.LabelMove"
LABELS_PROPERTY = "conveyor_labels"  # on a PushedModel: the labels the push moved to it
STABLE = "stable"
LATEST_LABEL = "latest"  # what a rollback under `version_policy: latest` records as its label


class LabelError(ValueError):
    """A promote or rollback that cannot be done; the message says why and what to do."""


@dataclass(frozen=True)
class Hold:
    """A rollback's hold on `stable`: set by `conveyor rollback` (with `push.after_rollback:
    canary`), cleared by `conveyor promote --label stable`."""

    rolled_back_to: int
    since: str
    by: str = ""
    reason: str = ""


@dataclass(frozen=True)
class LabelEvent:
    """One recorded label move, in the order ML Metadata recorded them.

    `action` is `push` (a Pusher or `conveyor bless`: every label it moved), `promote` or
    `rollback` (one label each)."""

    action: str
    labels: tuple[str, ...]
    version: int
    previous_version: int = 0
    at_ms: int = 0
    by: str = ""
    reason: str = ""
    hidden: str = ""  # the folders a rollback under `latest` renamed out of sight

    def describe(self) -> str:
        """One line for `conveyor lineage`: what moved to this version, when, by whom, why."""
        at = datetime.datetime.fromtimestamp(self.at_ms / 1000, tz=datetime.timezone.utc)
        names = ", ".join(self.labels) or "no label"
        line = f"{names} by {self.action} at {at:%Y-%m-%d %H:%M:%S} UTC"
        if self.previous_version:
            line += f" (from version {self.previous_version})"
        if self.by:
            line += f" by {self.by}"
        if self.reason:
            line += f": {self.reason}"
        if self.hidden:
            line += f" (hid {self.hidden})"
        return line


@dataclass(frozen=True)
class RecordedLabels:
    """What ML Metadata's record says: where each label points, whether `stable` is held by a
    rollback, and each label's values in order (for rollback's default target)."""

    labels: dict[str, int]
    held: bool
    history: dict[str, list[int]]
    has_events: bool


# --- the rules ---------------------------------------------------------------------------------


def labels_after_push(
    current: Mapping[str, int], managed: Sequence[str], version: int, hold: Hold | None
) -> dict[str, int]:
    """Where the managed labels point after `version` is pushed.

    Not held: every managed label moves to `version`. Held (after a rollback, with
    `push.after_rollback: canary`): every managed label but `stable` moves; `stable` stays
    where it is (on the rolled-back-to version when nothing points it elsewhere)."""
    if hold is None:
        return {label: version for label in managed}
    moved = {label: version for label in managed if label != STABLE}
    if STABLE in managed:
        moved[STABLE] = current.get(STABLE, hold.rolled_back_to)
    return moved


def served_model(push, base_path: str, labels: Mapping[str, int]) -> ServedModel:
    """This model's models.config entry under `push.version_policy` (`push` is a PushSpec).

    `labelled` loads the labelled versions (`specific`); with no labels configured it serves
    the newest version, as `latest` does. `all` loads every version and keeps the labels;
    `latest` carries none."""
    policy = push.version_policy.value
    if policy == "latest" or not push.labels:
        return ServedModel(name=push.model_name, base_path=base_path, policy="latest")
    managed = {k: v for k, v in labels.items() if k in push.labels}
    return ServedModel(name=push.model_name, base_path=base_path, policy=policy, labels=managed)


def fold(events: Iterable[LabelEvent], managed: Sequence[str]) -> RecordedLabels:
    """Replays recorded label moves in order: the labels' values, the hold, the history.

    `stable` is held when the last move of `stable` was a rollback; a push or a promote that
    moves `stable` clears the hold. (Whether a hold applies is `push.after_rollback`'s call.)"""
    labels: dict[str, int] = {}
    history: dict[str, list[int]] = {label: [] for label in managed}
    held = found = False
    for event in events:
        for label in event.labels:
            if label not in managed:
                continue
            found = True
            labels[label] = event.version
            history[label].append(event.version)
            if label == STABLE:
                held = event.action == "rollback"
    return RecordedLabels(labels=labels, held=held, history=history, has_events=found)


# --- files: models.config and the hold ----------------------------------------------------------


def hold_file(config_dir: Path, model_name: str) -> Path:
    """Where the hold of `model_name` is kept: a hidden file beside models.config."""
    return Path(config_dir) / f".conveyor-hold-{model_name}.json"


def read_hold(config_dir: Path, model_name: str) -> Hold | None:
    """The model's hold, or None when `stable` is not held (or the file cannot be read: a
    hold lost that way is restored from ML Metadata by the next reconcile)."""
    try:
        data = json.loads(hold_file(config_dir, model_name).read_text())
        return Hold(
            rolled_back_to=int(data["rolled_back_to"]),
            since=str(data.get("since", "")),
            by=str(data.get("by", "")),
            reason=str(data.get("reason", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_hold(config_dir: Path, model_name: str, hold: Hold | None) -> None:
    """Sets (atomically, as models.config is written) or clears the model's hold."""
    path = hold_file(config_dir, model_name)
    if hold is None:
        if path.exists():
            path.unlink()
            layout.fsync_dir(str(path.parent))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"model": model_name, **hold.__dict__}
    write_atomically(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def current_entry(config_dir: Path, model_name: str) -> ServedModel | None:
    """This model's entry in models.config, or None when there is no file or no entry.

    Raises:
      ServingConfigError: models.config exists but TF Serving would refuse it.
    """
    path = Path(config_dir) / MODELS_CONFIG
    if not path.exists():
        return None
    return next((m for m in served_models(path) if m.name == model_name), None)


def update_entry(
    config_dir: Path, push, change: Callable[[ServedModel | None], ServedModel | None]
) -> tuple[ServedModel | None, ServedModel | None]:
    """Replaces this model's models.config entry with `change(current entry)`, keeping every
    other model's, in one atomic replace under the config folder's lock (pipelines sharing
    the folder push independently). Returns (before, after); nothing is written when `change`
    returns the entry unchanged or None."""
    from filelock import FileLock

    from pipelines.serving.config import write_serving_configs

    config_dir = Path(config_dir)
    config_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(config_dir / f".{MODELS_CONFIG}.lock", mode=0o600):
        path = config_dir / MODELS_CONFIG
        models = served_models(path) if path.exists() else []
        before = next((m for m in models if m.name == push.model_name), None)
        after = change(before)
        if after is None or after == before:
            return before, before
        if before is None:
            models.append(after)
        else:
            models = [after if m.name == push.model_name else m for m in models]
        write_serving_configs(config_dir, models, push)
        return before, after


# --- two-step label moves for servers that load before they label -------------------------------


@dataclass(frozen=True)
class Rollout:
    """How a label change reached models.config: where the labels point now, the labels the
    change meant to move but did not (its model servers did not load their version in time)
    and why."""

    labels: dict[str, int]
    not_moved: tuple[str, ...] = ()
    reason: str = ""

    def on(self, version: int) -> list[str]:
        """The labels on `version` now (what a push records as `conveyor_labels`)."""
        return sorted(label for label, v in self.labels.items() if v == version)

    def note(self) -> str:
        """One clause for a verdict or an error: which labels stayed and why ("" if none)."""
        if not self.not_moved:
            return ""
        stayed = ", ".join(
            f"{label} stays on {self.labels[label]}" if label in self.labels else f"no {label}"
            for label in self.not_moved
        )
        return f"labels not moved ({stayed}): {self.reason}"


def first_step(current: ServedModel | None, wanted: ServedModel) -> ServedModel:
    """The config that loads what `wanted` labels while every label stays where it is: the
    versions loaded now plus those `wanted`'s labels point to, labels as in `current` (a label
    `wanted` drops is dropped, which TF Serving always accepts; a label new to the model waits
    for the second step too, so the server needs no flag)."""
    kept = {k: v for k, v in (current.labels if current else {}).items() if k in wanted.labels}
    if wanted.policy != "labelled":  # `all` loads every version on disk by itself
        return replace(wanted, labels=kept)
    loaded = set(current.versions) if current and current.policy == "labelled" else set()
    return replace(wanted, versions=tuple(loaded | set(wanted.versions)), labels=kept)


def roll_out(
    config_dir: Path,
    push,
    wanted: ServedModel,
    before_move: Callable[[], None] | None = None,
    echo: Callable[[str], None] = print,
) -> Rollout:
    """Makes `wanted` this model's models.config entry, in one write or, for servers that must
    load a version before a label moves to it, two.

    With no `push.serving_urls`, or when every server already reports the versions the moved
    labels point to AVAILABLE: one write. Otherwise `first_step` is written, each server is
    polled (`GET /v1/models/NAME/versions/V`) for up to `push.serving_wait_seconds`, and then
    `wanted` is written. A server that fails to load the version, or does not within the wait,
    leaves the first step in force and returns the labels that did not move. `before_move`
    runs just before the labels move (a rollback sets its hold there)."""
    from pipelines.serving.model_status import not_available, wait_until_available

    current = current_entry(config_dir, push.model_name)
    before = dict(current.labels) if current else {}
    moving = {label: v for label, v in wanted.labels.items() if before.get(label) != v}
    targets = sorted(set(moving.values()))
    urls = list(push.serving_urls)
    if urls and targets and not_available(urls, push.model_name, targets):
        step = first_step(current, wanted)
        update_entry(config_dir, push, lambda _: step)
        echo(
            f"serving: models.config loads version(s) {', '.join(map(str, targets))} of "
            f"{push.model_name} with the labels unchanged; waiting for {', '.join(urls)} to "
            f"report them AVAILABLE (at most {push.serving_wait_seconds:g} s)"
        )
        problem = wait_until_available(urls, push.model_name, targets, push.serving_wait_seconds)
        if problem:
            echo(f"serving: labels {', '.join(sorted(moving))} not moved: {problem}")
            return Rollout(dict(step.labels), not_moved=tuple(sorted(moving)), reason=problem)
    if before_move is not None:
        before_move()
    update_entry(config_dir, push, lambda _: wanted)
    return Rollout(labels=dict(wanted.labels))


# --- what the Pusher and `conveyor bless` call after a push --------------------------------------


def label_pushed_version(
    config_dir: str | Path, push, base_path: str, version: int, echo: Callable[[str], None] = print
) -> Rollout:
    """Moves the labels for a version just renamed into place and rewrites models.config (in
    two steps for `push.serving_urls`, see `roll_out`); `.on(version)` is what the push
    records as `conveyor_labels`, `.note()` what it says about labels that did not move.

    `push` is the PushSpec, or the dict of push keys the Pusher node puts in its
    custom_config (pipelines/builder/nodes/pusher.py)."""
    from pipelines.spec.models import AfterRollback, PushSpec

    if isinstance(push, Mapping):
        push = PushSpec.model_validate(dict(push))
    config_dir = Path(config_dir)
    hold = read_hold(config_dir, push.model_name)
    if push.after_rollback is not AfterRollback.CANARY:
        hold = None
    current = current_entry(config_dir, push.model_name)
    labels = labels_after_push(current.labels if current else {}, push.labels, version, hold)
    return roll_out(config_dir, push, served_model(push, base_path, labels), echo=echo)


# --- reading the record back from ML Metadata ----------------------------------------------------


def _label_move_executions(store, pipeline_name: str) -> list:
    from ml_metadata import errors

    try:
        moves = store.get_executions_by_type(LABEL_MOVE_TYPE)
    except errors.NotFoundError:  # no move was ever recorded: its type does not exist yet
        return []
    context = store.get_context_by_type_and_name("pipeline", pipeline_name)
    if context is None or not moves:
        return []
    mine = {e.id for e in store.get_executions_by_context(context.id)}
    return [e for e in moves if e.id in mine]


def recorded_events(store, pipeline_name: str) -> list[LabelEvent]:
    """Every label move ML Metadata recorded for the pipeline, in order.

    A push's artifact id orders it; a LabelMove records the newest push id it followed
    (`after_push_id`), so it sorts after that push and before the next, whatever the clocks
    say. Pushes recorded before labels existed (no `conveyor_labels`) are not moves."""
    keyed = []
    for push in successful_pushes(store, pipeline_name) or []:
        version = str(custom_property(push, "pushed_version") or "")
        moved = custom_property(push, LABELS_PROPERTY)
        if moved is None or not version.isdigit():
            continue
        event = LabelEvent(
            action="push",
            labels=tuple(n for n in str(moved).split(",") if n),
            version=int(version),
            at_ms=push.create_time_since_epoch,
            by=str(custom_property(push, "conveyor_blessed_by") or ""),
        )
        keyed.append(((push.id, 0, 0), event))
    for move in _label_move_executions(store, pipeline_name):
        event = LabelEvent(
            action=str(custom_property(move, "action") or ""),
            labels=(str(custom_property(move, "label") or ""),),
            version=int(custom_property(move, "version") or 0),
            previous_version=int(custom_property(move, "previous_version") or 0),
            at_ms=move.create_time_since_epoch,
            by=str(custom_property(move, "by") or ""),
            reason=str(custom_property(move, "reason") or ""),
            hidden=str(custom_property(move, "hidden") or ""),
        )
        keyed.append(((int(custom_property(move, "after_push_id") or 0), 1, move.id), event))
    return [event for _, event in sorted(keyed, key=lambda pair: pair[0])]


def recorded_state(paths: RunPaths, store=None) -> tuple[bool, set[int], RecordedLabels]:
    """(whether ML Metadata holds any run of the pipeline, the versions it recorded as
    pushed, the labels its record gives)."""
    if store is None:
        store = open_store(paths.spec, paths.metadata_path)
    pushes = successful_pushes(store, paths.spec.name) if store is not None else None
    if pushes is None:
        return False, set(), fold([], paths.spec.push.labels)
    versions = {str(custom_property(a, "pushed_version")) for a in pushes}
    known = {int(v) for v in versions if v.isdigit()}
    return True, known, fold(recorded_events(store, paths.spec.name), paths.spec.push.labels)


def moves_by_version(store, pipeline_name: str) -> dict[str, list[LabelEvent]]:
    """Version (as `conveyor lineage` names it) -> the label moves to it, in order."""
    found: dict[str, list[LabelEvent]] = {}
    for event in recorded_events(store, pipeline_name):
        found.setdefault(str(event.version), []).append(event)
    return found


# --- reconcile ----------------------------------------------------------------------------------


def reconcile_labels(paths: RunPaths) -> list[str]:
    """Rewrites models.config and the hold file from ML Metadata's record; returns what it
    changed, one phrase each (empty: the files already agreed).

    A label goes where the record last put it, if that version is on disk; a label the record
    never moved keeps its place in models.config if that version is on disk and recorded;
    anything else (a label on a quarantined or deleted version) moves to the newest recorded
    version on disk. Nothing is written with no version on disk, nor when models.config has no
    entry for the model yet (its next push writes one)."""
    push = paths.spec.push
    base = str(paths.serving_dir)
    on_disk = layout.served_versions(base)
    if not on_disk:
        return []
    has_runs, known, record = recorded_state(paths)
    config_dir = paths.serving_config_dir
    changes: list[str] = []
    recorded_on_disk = [v for v in on_disk if v in known] if has_runs else on_disk
    fallback = (recorded_on_disk or on_disk)[-1]

    def change(current: ServedModel | None) -> ServedModel | None:
        if current is None:
            return None  # never written yet (no push since labels exist): the next push writes it
        placed = dict(current.labels)
        labels = {}
        for label in push.labels:
            version = record.labels.get(label)
            if version is None:
                version = placed.get(label)
                if version is not None and has_runs and version not in known:
                    version = None
            if version is None or version not in on_disk:
                version = fallback
            labels[label] = version
            if placed.get(label) != version:
                changes.append(f"label {label} {placed.get(label, '-')} -> {version}")
        wanted = served_model(push, str(paths.serving_dir), labels)
        if wanted.policy == "labelled" and current.policy == "labelled":
            # A version a two-step move loaded but did not label (its servers were too slow)
            # stays loaded while it is on disk and recorded: it is what serving has.
            unlabelled = {
                v for v in current.versions if v in on_disk and (not has_runs or v in known)
            }
            wanted = replace(wanted, versions=tuple(unlabelled))
        if current != wanted and not changes:
            changes.append(f"models.config entry of {push.model_name} rewritten")
        return wanted

    update_entry(config_dir, push, change)
    if has_runs and record.has_events:
        held = record.held and push.after_rollback.value == "canary"
        hold = read_hold(config_dir, push.model_name)
        if held and hold is None:
            target = record.labels.get(STABLE, fallback)
            write_hold(config_dir, push.model_name, Hold(rolled_back_to=target, since=_now()))
            changes.append(f"hold on stable restored (version {target})")
        elif not held and hold is not None:
            write_hold(config_dir, push.model_name, None)
            changes.append("hold on stable cleared (ML Metadata records none)")
    return changes


def unlabelled_versions(entry: ServedModel | None) -> list[int]:
    """The versions a `labelled` entry loads that no label points to: left by a two-step move
    whose servers did not load the version in time (`roll_out`)."""
    if entry is None or entry.policy != "labelled":
        return []
    return sorted(set(entry.versions) - set(entry.labels.values()))


def labelled_versions(paths: RunPaths) -> set[int]:
    """The versions a label in models.config points to: retention never retires them."""
    try:
        entry = current_entry(paths.serving_config_dir, paths.spec.push.model_name)
    except ValueError:  # an unreadable models.config: protect what the record labels instead
        return set(recorded_state(paths)[2].labels.values())
    return set(entry.labels.values()) if entry else set()


# --- promote and rollback -------------------------------------------------------------------------


@dataclass(frozen=True)
class Moved:
    """What a promote or rollback did: the labels before and after, the hold, what it hid."""

    before: dict[str, int]
    after: dict[str, int]
    held: bool
    hidden: list[str]

    def describe(self) -> str:
        """The command's answer: each label's move, the hold, the hidden folders."""
        moves = [
            f"{label} {self.before.get(label, '-')} -> {version}"
            for label, version in sorted(self.after.items())
            if self.before.get(label) != version
        ]
        text = "; ".join(moves) if moves else "no label moved"
        if self.hidden:
            text += f"; hid {', '.join(self.hidden)} (version_policy latest)"
        if self.held:
            text += "; stable is held: the next pushes get only canary until `conveyor promote`"
        return text


def _check_version(paths: RunPaths, version: int, known: set[int], has_runs: bool) -> None:
    on_disk = layout.served_versions(str(paths.serving_dir))
    if version not in on_disk:
        raise LabelError(
            f"version {version} of {paths.spec.push.model_name} is not on disk in "
            f"{paths.serving_dir} (versions there: {on_disk or 'none'})"
        )
    if not has_runs or version not in known:
        raise LabelError(
            f"version {version} is not recorded as pushed in ML Metadata "
            f"({paths.metadata_path}): only a version a push recorded can be labelled"
        )


def promote(
    paths: RunPaths,
    version: int,
    label: str,
    by: str,
    reason: str,
    echo: Callable[[str], None] = print,
) -> Moved:
    """Points `label` at `version` (`roll_out`: one models.config replace, or two with
    `push.serving_urls`) and records it; promoting to `stable` clears a rollback's hold. Call
    under the pipeline's lock, after reconcile (as `conveyor promote` does).

    Raises:
      LabelError: the label is not one `push.labels` manages, or the version is not on disk
        or not recorded in ML Metadata, or the servers did not load it in time (the label did
        not move and nothing is recorded).
    """
    push = paths.spec.push
    if push.version_policy.value == "latest" or not push.labels:
        raise LabelError(
            f"{paths.spec.name} has no version labels (push.version_policy: "
            f"{push.version_policy.value}, push.labels: {push.labels}): there is nothing to "
            "promote; the model server serves the newest version"
        )
    if label not in push.labels:
        raise LabelError(f"label {label!r} is not one of push.labels {push.labels}")
    has_runs, known, _ = recorded_state(paths)
    _check_version(paths, version, known, has_runs)
    config_dir = paths.serving_config_dir
    held = read_hold(config_dir, push.model_name) is not None
    current = current_entry(config_dir, push.model_name)
    before = dict(current.labels) if current else {}
    if before.get(label) == version and not (label == STABLE and held):
        return Moved(before=before, after=before, held=held, hidden=[])
    after = {**before, label: version}
    rollout = roll_out(
        config_dir, push, served_model(push, str(paths.serving_dir), after), echo=echo
    )
    if rollout.not_moved:
        raise LabelError(_not_moved(push.model_name, version, rollout))
    if label == STABLE:
        write_hold(config_dir, push.model_name, None)
        held = False
    _record_moves(paths, "promote", {label: (before.get(label, 0), version)}, by, reason)
    return Moved(before=before, after=after, held=held, hidden=[])


def _not_moved(model: str, version: int, rollout: Rollout) -> str:
    return (
        f"{rollout.note()}. models.config now loads version {version} of {model} beside the "
        "labelled versions; nothing was recorded: run the command again once the servers have "
        "loaded it"
    )


def default_rollback_target(paths: RunPaths, known: set[int], record: RecordedLabels) -> int:
    """The version `conveyor rollback` goes back to without `--to`: the last version `stable`
    pointed to before, below the current one, still on disk and recorded; else the newest
    recorded version on disk below the one served now."""
    push = paths.spec.push
    on_disk = layout.served_versions(str(paths.serving_dir))
    entry = current_entry(paths.serving_config_dir, push.model_name)
    served = entry.labels.get(STABLE) if entry and entry.labels else None
    if served is None:
        served = on_disk[-1] if on_disk else 0
    usable = [v for v in on_disk if v in known and v < served]
    for version in reversed(record.history.get(STABLE, [])):
        if version in usable:
            return version
    if not on_disk:
        raise LabelError(
            f"no version of {push.model_name} is on disk in {paths.serving_dir}: nothing has "
            "been pushed, so there is nothing to roll back to"
        )
    if not usable:
        raise LabelError(
            f"no version of {push.model_name} below the served version {served} is on disk "
            f"and recorded in ML Metadata: there is nothing to roll back to"
        )
    return usable[-1]


def rollback(
    paths: RunPaths, to: int | None, by: str, reason: str, echo: Callable[[str], None] = print
) -> Moved:
    """Serves `to` (default: `default_rollback_target`) instead of the current version.

    With labels: every managed label moves to `to` in one models.config replace, and (with
    `push.after_rollback: canary`) `stable` is held there: later pushes get only the other
    labels until `conveyor promote --label stable`. With `version_policy: latest` the versions
    above `to` are renamed to hidden `.rolled-back-<v>-<time>` folders (kept, never reused as
    numbers), so `latest` resolves to `to`. Recorded in ML Metadata either way. Call under the
    pipeline's lock, after reconcile.

    Raises:
      LabelError: `to` is not on disk, not recorded, or is the version already served; or there
        is no earlier version to go back to; or the servers did not load it in time (no label
        moved, nothing is recorded).
    """
    from pipelines.spec.models import AfterRollback

    push = paths.spec.push
    has_runs, known, record = recorded_state(paths)
    target = to if to is not None else default_rollback_target(paths, known, record)
    _check_version(paths, target, known, has_runs)
    config_dir = paths.serving_config_dir
    base = str(paths.serving_dir)
    current = current_entry(config_dir, push.model_name)
    before = dict(current.labels) if current else {}
    if push.version_policy.value == "latest" or not push.labels:
        newer = [v for v in layout.served_versions(base) if v > target]
        if not newer:
            raise LabelError(f"version {target} is already the newest, the one served")
        # Oldest first: a `latest` server then switches once, from the newest straight to `to`.
        hidden = [layout.hide_rolled_back(base, v) for v in newer]
        update_entry(config_dir, push, lambda _: served_model(push, base, {}))
        _record_moves(
            paths, "rollback", {LATEST_LABEL: (newer[-1], target)}, by, reason, ", ".join(hidden)
        )
        echo(f"serving: hid {', '.join(hidden)} so that `latest` is version {target}")
        return Moved(before={}, after={}, held=False, hidden=hidden)
    if before.get(STABLE) == target and set(before.values()) == {target}:
        raise LabelError(f"every label already points to version {target}")
    after = {label: target for label in push.labels}
    held = push.after_rollback is AfterRollback.CANARY

    def hold() -> None:  # files first: the hold, then models.config, then the record
        if held:
            write_hold(config_dir, push.model_name, Hold(target, _now(), by, reason))

    rollout = roll_out(config_dir, push, served_model(push, base, after), hold, echo)
    if rollout.not_moved:
        raise LabelError(_not_moved(push.model_name, target, rollout))
    moves = {
        label: (before.get(label, 0), target)
        for label in push.labels
        if before.get(label) != target or label == STABLE
    }
    _record_moves(paths, "rollback", moves, by, reason)
    return Moved(before=before, after=after, held=held, hidden=[])


def _record_moves(
    paths: RunPaths,
    action: str,
    moves: Mapping[str, tuple[int, int]],
    by: str,
    reason: str,
    hidden: str = "",
) -> None:
    """Records one `conveyor.LabelMove` execution per label moved, in the pipeline's context,
    each with the PushedModel of its version as its input."""
    from ml_metadata.proto import metadata_store_pb2

    store = open_store(paths.spec, paths.metadata_path)
    pushes = successful_pushes(store, paths.spec.name) or []
    pipeline = store.get_context_by_type_and_name("pipeline", paths.spec.name)
    type_id = store.put_execution_type(metadata_store_pb2.ExecutionType(name=LABEL_MOVE_TYPE))
    after_push_id = max((p.id for p in pushes), default=0)
    for label, (previous, version) in moves.items():
        execution = metadata_store_pb2.Execution(
            type_id=type_id, last_known_state=metadata_store_pb2.Execution.COMPLETE
        )
        values = {
            "action": action,
            "label": label,
            "reason": reason,
            "by": by,
            "at": _now(),
            "hidden": hidden,
        }
        for key, value in values.items():
            execution.custom_properties[key].string_value = value
        execution.custom_properties["version"].int_value = version
        execution.custom_properties["previous_version"].int_value = previous
        execution.custom_properties["after_push_id"].int_value = after_push_id
        pushed = [p for p in pushes if str(custom_property(p, "pushed_version")) == str(version)]
        events = (
            [(pushed[-1], metadata_store_pb2.Event(type=metadata_store_pb2.Event.INPUT))]
            if pushed
            else []
        )
        store.put_execution(execution, events, [pipeline] if pipeline is not None else [])


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --- `conveyor models` ---------------------------------------------------------------------------


@dataclass
class VersionRow:
    """One version folder for `conveyor models`: what disk, models.config and ML Metadata say."""

    version: int
    folder: str
    labels: list[str]
    recorded: bool
    run_id: str = ""
    spans: list[int] | None = None
    metrics: dict[str, float] | None = None
    pushed_at: str = ""
    note: str = ""


def version_rows(paths: RunPaths) -> list[VersionRow]:
    """Every version folder of the model (served, rolled back, quarantined), newest first,
    with its labels, its push in ML Metadata (run, spans, the trained model's final
    validation metrics) and its push record. Reads ML Metadata and files only (no TFX)."""
    base = str(paths.serving_dir)
    try:
        entry = current_entry(paths.serving_config_dir, paths.spec.push.model_name)
    except ValueError:
        entry = None
    by_version: dict[int, list[str]] = {}
    for label, version in sorted((entry.labels if entry else {}).items()):
        by_version.setdefault(version, []).append(label)
    folders = [(v, str(v), "") for v in layout.served_versions(base)]
    for name, prefix, note in (
        (n, p, w)
        for p, w in (
            (layout.ROLLED_BACK_PREFIX, "rolled back"),
            (layout.QUARANTINE_PREFIX, "quarantined"),
        )
        for n in layout.hidden_versions(base, p)
    ):
        number = name[len(prefix) :].split("-", 1)[0]
        folders.append((int(number), name, note))
    store = open_store(paths.spec, paths.metadata_path)
    pushes = _pushes_by_version(store, paths.spec.name) if store is not None else {}
    rows = []
    for version, folder, note in sorted(folders, key=lambda f: (-f[0], f[1])):
        record = layout.read_push_record(os.path.join(base, folder))
        push = pushes.get(version) if not note or note == "rolled back" else None
        row = VersionRow(
            version=version,
            folder=folder,
            labels=by_version.get(version, []) if not note else [],
            recorded=push is not None,
            pushed_at=str(record.get("pushed_at", "")),
            note=note,
        )
        if push is not None:
            row.run_id, row.spans, row.metrics = push
        rows.append(row)
    return rows


def _pushes_by_version(store, pipeline_name: str) -> dict[int, tuple]:
    """Version -> (run id, spans, final validation metrics) of its newest recorded push."""
    from ml_metadata.proto import metadata_store_pb2

    from pipelines.core.metadata import EXAMPLES_TYPE, RUN_CONTEXT_TYPE

    found: dict[int, tuple] = {}
    pushes = successful_pushes(store, pipeline_name) or []
    if not pushes:
        return found
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    run_type = store.get_context_type(RUN_CONTEXT_TYPE).id

    def linked(execution_id: int, kind) -> list:
        events = store.get_events_by_execution_ids([execution_id])
        chosen = [e.artifact_id for e in events if e.type == kind]
        return store.get_artifacts_by_id(chosen) if chosen else []

    def producer(artifact_id: int):
        ids = [
            e.execution_id
            for e in store.get_events_by_artifact_ids([artifact_id])
            if e.type == metadata_store_pb2.Event.OUTPUT
        ]
        return store.get_executions_by_id(ids)[0] if ids else None

    for push in pushes:
        version = str(custom_property(push, "pushed_version") or "")
        if not version.isdigit():
            continue
        pusher = producer(push.id)
        run_id, spans, metrics = "", [], {}
        if pusher is not None:
            run_id = next(
                (
                    c.name
                    for c in store.get_contexts_by_execution(pusher.id)
                    if c.type_id == run_type
                ),
                "",
            )
            inputs = linked(pusher.id, metadata_store_pb2.Event.INPUT)
            model = next((a for a in inputs if type_names.get(a.type_id) == "Model"), None)
            if model is not None:
                metrics = {
                    key[len("conveyor_final_") :]: value.double_value
                    for key, value in model.custom_properties.items()
                    if key.startswith("conveyor_final_val_")
                }
                trainer = producer(model.id)
                if trainer is not None:
                    examples = [
                        a
                        for a in linked(trainer.id, metadata_store_pb2.Event.INPUT)
                        if type_names.get(a.type_id) == EXAMPLES_TYPE
                    ]
                    spans = sorted({custom_property(a, "span") for a in examples} - {None})
        found[int(version)] = (run_id, spans, metrics)
    return found
