"""Label moves a person asks for: `conveyor promote` points one label at a version,
`conveyor rollback` serves an earlier version again (holding `stable` there with
`push.after_rollback: canary`).

Both check that the version is on disk and recorded as pushed, move the labels through
`rollout.roll_out` (files first: the hold, then models.config), and then record one
`conveyor.LabelMove` per label moved (`records.record_moves`). Under `version_policy: latest`
a rollback has no label to move: it renames the newer versions out of the server's sight.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipelines.core.paths import RunPaths
from pipelines.serving_state import versions
from pipelines.serving_state.config_files import current_entry, update_entry
from pipelines.serving_state.labels import (
    LATEST_LABEL,
    STABLE,
    Hold,
    RecordedLabels,
    read_hold,
    served_model,
    write_hold,
)
from pipelines.serving_state.records import now, record_moves, recorded_state
from pipelines.serving_state.rollout import Rollout, roll_out


class LabelError(ValueError):
    """A promote or rollback that cannot be done; the message says why and what to do."""


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
    on_disk = versions.served_versions(str(paths.serving_dir))
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
    record_moves(paths, "promote", {label: (before.get(label, 0), version)}, by, reason)
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
    on_disk = versions.served_versions(str(paths.serving_dir))
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
        newer = [v for v in versions.served_versions(base) if v > target]
        if not newer:
            raise LabelError(f"version {target} is already the newest, the one served")
        # Oldest first: a `latest` server then switches once, from the newest straight to `to`.
        hidden = [versions.hide_rolled_back(base, v) for v in newer]
        update_entry(config_dir, push, lambda _: served_model(push, base, {}))
        record_moves(
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
            write_hold(config_dir, push.model_name, Hold(target, now(), by, reason))

    rollout = roll_out(config_dir, push, served_model(push, base, after), hold, echo)
    if rollout.not_moved:
        raise LabelError(_not_moved(push.model_name, target, rollout))
    moves = {
        label: (before.get(label, 0), target)
        for label in push.labels
        if before.get(label) != target or label == STABLE
    }
    record_moves(paths, "rollback", moves, by, reason)
    return Moved(before=before, after=after, held=held, hidden=[])
