"""A push: a model becomes the next version on disk, then the labels move onto it.

What the Pusher's executor and `conveyor bless` both do, in the same order: the version folder
is published (`versions.publish`: staged, flushed, renamed into place), then the labels move
and models.config is rewritten (`rollout.roll_out`, in two steps with `push.serving_urls`),
then the caller records the push in ML Metadata. A crash between any two of these leaves files
ahead of the record, which the next `reconcile` puts back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipelines.core.failpoints import failpoint
from pipelines.core.object_path import as_path
from pipelines.serving_state import versions
from pipelines.serving_state.config_files import current_entry
from pipelines.serving_state.labels import labels_after_push, read_hold, served_model
from pipelines.serving_state.rollout import Rollout, roll_out


@dataclass(frozen=True)
class Pushed:
    """What a push did: the new `version`, its folder (`target`), the labels on it now (what
    the push records as `conveyor_labels`) and, when some labels did not move because the
    model servers did not load the version in time, which and why (`note`; "" otherwise)."""

    version: int
    target: str
    labels: list[str]
    note: str = ""


def push_version(
    model_dir: str,
    base_dir: str,
    record: dict,
    push=None,
    config_dir: str | Path | None = None,
    extra_files: dict[str, str] | None = None,
    echo: Callable[[str], None] = print,
) -> Pushed:
    """Publishes the SavedModel in `model_dir` as the next version under `base_dir` (with
    `record` as its push record and `extra_files` inside the same rename), then, given `push`
    (a PushSpec or the Pusher node's dict of push keys), moves the labels onto it in
    `config_dir`'s models.config. Call before recording the push in ML Metadata.

    Raises:
      OSError: the version could not be staged (a full disk, say); nothing is left behind.
      ServingConfigError: models.config exists but TF Serving would refuse it.
    """
    version, target = versions.publish(model_dir, base_dir, record, extra_files=extra_files)
    if push is None:
        return Pushed(version=version, target=target, labels=[])
    rollout = label_pushed_version(config_dir, push, base_dir, version, echo)
    failpoint("push:configured")
    return Pushed(version=version, target=target, labels=rollout.on(version), note=rollout.note())


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
    config_dir = as_path(config_dir)
    hold = read_hold(config_dir, push.model_name)
    if push.after_rollback is not AfterRollback.CANARY:
        hold = None
    current = current_entry(config_dir, push.model_name)
    labels = labels_after_push(current.labels if current else {}, push.labels, version, hold)
    return roll_out(config_dir, push, served_model(push, base_path, labels), echo=echo)
