"""Version labels (`stable`, `canary`): the rules every push, `conveyor promote` and
`conveyor rollback` follow, and the hold a rollback puts on `stable`.

- Where a label points after a push (`labels_after_push`) and what models.config entry a
  spec's `push.version_policy` gives (`served_model`).
- Folding recorded label moves in order (`fold`, over `records.recorded_events`) gives where
  each label points and whether `stable` is held.
- The hold file (`.conveyor-hold-<model>.json` beside models.config) says a rollback holds
  `stable`: the next pushes get only the other labels until `conveyor promote --label stable`.
  It exists so that the Pusher, which has no handle on ML Metadata, can read the hold. Only this
  package reads or writes it (`read_hold`, `write_hold`); `reconcile` rewrites it from the
  record after a crash.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.core.object_path import as_path
from pipelines.serving_state.config_files import ServedModel
from pipelines.serving_state.durable_files import fsync_dir, write_atomically

if TYPE_CHECKING:  # an annotation only: records builds on this module, not the other way
    from pipelines.serving_state.records import LabelEvent

STABLE = "stable"
LATEST_LABEL = "latest"  # what a rollback under `version_policy: latest` records as its label


@dataclass(frozen=True)
class Hold:
    """A rollback's hold on `stable`: set by `conveyor rollback` (with `push.after_rollback:
    canary`), cleared by `conveyor promote --label stable`."""

    rolled_back_to: int
    since: str
    by: str = ""
    reason: str = ""


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


def unlabelled_versions(entry: ServedModel | None) -> list[int]:
    """The versions a `labelled` entry loads that no label points to: left by a two-step move
    whose servers did not load the version in time (`roll_out`)."""
    if entry is None or entry.policy != "labelled":
        return []
    return sorted(set(entry.versions) - set(entry.labels.values()))


# --- the hold file ------------------------------------------------------------------------------


def hold_file(config_dir: Path, model_name: str) -> Path:
    """Where the hold of `model_name` is kept: a hidden file beside models.config."""
    return as_path(config_dir) / f".conveyor-hold-{model_name}.json"


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
            fsync_dir(path.parent)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"model": model_name, **hold.__dict__}
    write_atomically(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
