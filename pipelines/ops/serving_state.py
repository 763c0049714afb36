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
ML Metadata recorded them (`labels.reconcile_labels`), and `retain` never retires a version a
label points to.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from components.pusher import layout
from pipelines.core.paths import RunPaths
from pipelines.ops import labels

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


def recorded_pushes(paths: RunPaths) -> tuple[bool, set[int]]:
    """(whether ML Metadata holds any run of the pipeline, the versions it recorded as pushed)."""
    from pipelines.core.metadata import custom_property, open_store, successful_pushes

    store = open_store(paths.spec, paths.metadata_path)
    pushes = successful_pushes(store, paths.spec.name) if store is not None else None
    if pushes is None:
        return False, set()
    versions = {str(custom_property(a, "pushed_version")) for a in pushes}
    return True, {int(v) for v in versions if v.isdigit()}


def reconcile(paths: RunPaths, echo: Callable[[str], None] = print) -> Reconciled:
    """Brings the serving base path back in step with ML Metadata (see the module docstring)."""
    base = str(paths.serving_dir)
    done = Reconciled()
    for name in layout.leftovers(base):
        layout.remove_leftover(base, name)
        done.removed_leftovers.append(name)
    on_disk = layout.served_versions(base)
    if on_disk:
        has_runs, known = recorded_pushes(paths)
        if has_runs:
            newest_known = max(known, default=0)
            for version in on_disk:
                if version in known:
                    continue
                if version > newest_known:
                    done.quarantined.append(f"{version} -> {layout.quarantine(base, version)}")
                else:
                    done.unknown_kept.append(version)
    # After the quarantine: a label may have pointed to a version just moved out of sight.
    done.labels_fixed = labels.reconcile_labels(paths)
    if done.changed or done.unknown_kept:
        echo(done.describe())
        _log(paths, "reconcile", asdict(done))
    return done


def retain(paths: RunPaths, echo: Callable[[str], None] = print) -> list[int]:
    """Retires versions beyond `push.keep_versions`, after a push ML Metadata recorded.

    Returns the versions removed. Only versions ML Metadata recorded are retired, never one
    a label points to; a failure here never changes the run's outcome (the new version is
    served either way).
    """
    keep = paths.spec.push.keep_versions or 0
    if keep <= 0:
        return []
    base = str(paths.serving_dir)
    _, known = recorded_pushes(paths)
    unknown = set(layout.served_versions(base)) - known
    protected = unknown | labels.labelled_versions(paths)
    retired = layout.retire_old_versions(base, keep, protected=protected)
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
    with open(paths.runs_dir / RECONCILE_LOG, "a") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")
