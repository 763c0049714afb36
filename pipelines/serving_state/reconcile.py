"""Keeping TF Serving's base path and ML Metadata in step, around every run.

A push is two steps that no file system and database can make atomic together: the Pusher
renames the new version into the base path, then TFX records the push in ML Metadata. A run
killed between the two leaves a served version that ML Metadata does not know: the next run
would call a new candidate "identical, not pushed", take the version before as its baseline,
and lineage would have a hole. So:

- `reconcile` runs before every run (under the pipeline's lock): a version newer than every
  push ML Metadata recorded is moved out of TF Serving's sight (`.quarantined-<v>-<time>`, its
  files kept for inspection), so serving falls back to the last recorded version, which is what
  ML Metadata says is served; staging and retired copies a killed push or retention left are
  deleted. What it did is appended to `<workdir>/runs/<pipeline>/serving_reconcile.jsonl`.
- `retain` runs after a run whose push ML Metadata recorded: only then are versions beyond
  `push.keep_versions` retired, so a crash at any point leaves the version that was served
  before.

Versions older than the newest recorded one that ML Metadata does not know (a store that was
reset, say) are left where they are, with a warning: deleting a served model is never the
safe guess. Nothing outside the model's own base path is ever touched, but for this model's
entry in models.config and its hold file: `reconcile` then puts the version labels back where
ML Metadata recorded them (`reconcile_labels`), and `retain` never retires a version a
label points to.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from pipelines.core.object_path import ObjectPath
from pipelines.core.paths import RunPaths
from pipelines.serving_state import versions
from pipelines.serving_state.config_files import ServedModel, current_entry, update_entry
from pipelines.serving_state.labels import STABLE, Hold, read_hold, served_model, write_hold
from pipelines.serving_state.records import now, recorded_pushes, recorded_state

RECONCILE_LOG = "serving_reconcile.jsonl"


@dataclass
class Reconciled:
    """What `reconcile` found and did."""

    quarantined: list[str] = field(default_factory=list)  # "v -> hidden name"
    removed_leftovers: list[str] = field(default_factory=list)
    unknown_kept: list[int] = field(default_factory=list)
    labels_fixed: list[str] = field(default_factory=list)  # "label stable 3 -> 2", ...

    @property
    def changed(self) -> bool:
        """Whether `reconcile` changed the serving directory (quarantined or removed something)
        or its models.config."""
        return bool(self.quarantined or self.removed_leftovers or self.labels_fixed)

    def describe(self) -> str:
        """What was found and done, in one `serving: ...` line for the command's output."""
        parts = []
        if self.quarantined:
            parts.append(
                "quarantined versions ML Metadata never recorded (a push killed before its "
                f"record): {', '.join(self.quarantined)}"
            )
        if self.removed_leftovers:
            parts.append(f"removed leftovers {', '.join(self.removed_leftovers)}")
        if self.unknown_kept:
            parts.append(
                f"left versions {self.unknown_kept} in place although ML Metadata does not "
                "know them (older than its newest push)"
            )
        if self.labels_fixed:
            parts.append(
                "models.config put back in step with ML Metadata: " + ", ".join(self.labels_fixed)
            )
        return "serving: " + "; ".join(parts)


def reconcile(paths: RunPaths, echo: Callable[[str], None] = print) -> Reconciled:
    """Brings the serving base path back in step with ML Metadata (see the module docstring)."""
    base = str(paths.serving_dir)
    done = Reconciled()
    for name in versions.leftovers(base):
        versions.remove_leftover(base, name)
        done.removed_leftovers.append(name)
    on_disk = versions.served_versions(base)
    if on_disk:
        has_runs, known = recorded_pushes(paths)
        if has_runs:
            newest_known = max(known, default=0)
            for version in on_disk:
                if version in known:
                    continue
                if version > newest_known:
                    done.quarantined.append(f"{version} -> {versions.quarantine(base, version)}")
                else:
                    done.unknown_kept.append(version)
    # After the quarantine: a label may have pointed to a version just moved out of sight.
    done.labels_fixed = reconcile_labels(paths)
    if done.changed or done.unknown_kept:
        echo(done.describe())
        _log(paths, "reconcile", asdict(done))
    return done


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
    on_disk = versions.served_versions(base)
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
            write_hold(config_dir, push.model_name, Hold(rolled_back_to=target, since=now()))
            changes.append(f"hold on stable restored (version {target})")
        elif not held and hold is not None:
            write_hold(config_dir, push.model_name, None)
            changes.append("hold on stable cleared (ML Metadata records none)")
    return changes


def labelled_versions(paths: RunPaths) -> set[int]:
    """The versions a label in models.config points to: retention never retires them."""
    try:
        entry = current_entry(paths.serving_config_dir, paths.spec.push.model_name)
    except ValueError:  # an unreadable models.config: protect what the record labels instead
        return set(recorded_state(paths)[2].labels.values())
    return set(entry.labels.values()) if entry else set()


def retain(
    paths: RunPaths, echo: Callable[[str], None] = print, recorded: bool = True
) -> list[int]:
    """Retires versions beyond `push.keep_versions`, after a push ML Metadata recorded.

    Returns the versions removed. Only versions ML Metadata recorded are retired, never one
    a label points to; a failure here never changes the run's outcome (the new version is
    served either way). `recorded=False` is for a run whose store Conveyor cannot read
    (Kubeflow's exit handler, after its Pusher's task succeeded): there every complete version
    counts as pushed, as a model server counts it (in a bucket its push record is the last
    object a push writes; on a disk it appeared by one rename); labels still protect theirs.
    """
    keep = paths.spec.push.keep_versions or 0
    if keep <= 0:
        return []
    base = str(paths.serving_dir)
    complete = set(versions.served_versions(base))
    known = recorded_pushes(paths)[1] if recorded else complete
    unknown = complete - known
    protected = unknown | labelled_versions(paths)
    retired = versions.retire_old_versions(base, keep, protected=protected)
    if retired:
        echo(f"serving: retired versions {retired} (push.keep_versions: {keep})")
        _log(paths, "retain", {"retired": retired, "keep_versions": keep})
    return retired


def _log(paths: RunPaths, action: str, details: dict) -> None:
    paths.runs_dir.mkdir(parents=True, exist_ok=True)
    entry = {
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "action": action,
        "serving_dir": str(paths.serving_dir),
        **details,
    }
    line = json.dumps(entry, sort_keys=True) + "\n"
    log = paths.runs_dir / RECONCILE_LOG
    if isinstance(log, ObjectPath):  # an object cannot be appended to: rewritten whole
        log.write_text((log.read_text() if log.exists() else "") + line)
        return
    with open(log, "a") as handle:
        handle.write(line)
