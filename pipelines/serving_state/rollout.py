"""Moving version labels in models.config, in two steps for model servers that must load a
version before a label may point to it, and the HTTP status polling that waits between them.

TF Serving refuses a models.config that moves a label to a version it has not loaded
(`ServerCore::UpdateModelVersionLabelMap`), and a refused config loads nothing new, so with
`push.serving_urls` a move onto such a version is written in two steps (`roll_out`): first the
version joins the loaded set with every label where it was, then, once each server reports
the version AVAILABLE, the labels move. A server that does not load it in time leaves the
first step in force: the version is loaded, the labels did not move, and the caller records so.

Whether a server has loaded a version is asked over TF Serving's REST status API:
`GET <url>/v1/models/NAME/versions/V` answers `{"model_version_status": [{"version": "V",
"state": "AVAILABLE", "status": {"error_code": "OK", ...}}]}` on `tensorflow_model_server` and
on Conveyor's own model server alike (TF Serving's `GetModelStatusResponse` in JSON). Standard
library only: no TensorFlow, no HTTP client package.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pipelines.serving_state.config_files import ServedModel, current_entry, update_entry

AVAILABLE = "AVAILABLE"
REQUEST_TIMEOUT_SECONDS = 5.0
POLL_SECONDS = 0.5


@dataclass(frozen=True)
class VersionStatus:
    """What one server said about one version: its state (AVAILABLE, LOADING, END...; "" when
    the server did not answer with one) and, when it is not available, why, in words."""

    url: str
    version: int
    state: str
    detail: str = ""

    @property
    def available(self) -> bool:
        """Whether the server can answer with this version now."""
        return self.state == AVAILABLE

    @property
    def failed(self) -> bool:
        """Whether the server gave up loading it (END with an error), so waiting is futile."""
        return self.state == "END" and bool(self.detail)


def version_status(url: str, model: str, version: int) -> VersionStatus:
    """The state `url` reports for `version` of `model` (one GET, a few seconds at most)."""
    address = f"{url.rstrip('/')}/v1/models/{model}/versions/{version}"
    try:
        with urllib.request.urlopen(address, timeout=REQUEST_TIMEOUT_SECONDS) as response:
            body = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:  # 404: not known (yet); the body says TF Serving's why
        try:
            reason = json.loads(err.read() or b"{}").get("error", "")
        except ValueError:
            reason = ""
        return VersionStatus(url, version, "", f"HTTP {err.code}: {reason or err.reason}")
    except (urllib.error.URLError, OSError, ValueError) as err:
        return VersionStatus(url, version, "", f"no answer: {getattr(err, 'reason', err)}")
    for entry in body.get("model_version_status", []):
        if str(entry.get("version")) == str(version):
            status = entry.get("status") or {}
            error = status.get("error_message", "") if status.get("error_code") != "OK" else ""
            return VersionStatus(url, version, str(entry.get("state", "")), error)
    return VersionStatus(url, version, "", "the answer does not list the version")


def not_available(urls: Sequence[str], model: str, versions: Sequence[int]) -> list[VersionStatus]:
    """Each (server, version) pair that is not AVAILABLE now; empty when all are."""
    statuses = [version_status(url, model, v) for url in urls for v in versions]
    return [s for s in statuses if not s.available]


def wait_until_available(
    urls: Sequence[str],
    model: str,
    versions: Sequence[int],
    seconds: float,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Polls every server until each reports every version AVAILABLE; returns "" then, or why
    not, in words: a version a server failed to load (TF Serving's END with its error) ends
    the wait at once; otherwise the last answers once `seconds` have passed."""
    deadline = time.monotonic() + seconds
    pending = [(url, v) for url in urls for v in versions]
    last: dict[tuple[str, int], VersionStatus] = {}
    while True:
        for url, version in list(pending):
            status = version_status(url, model, version)
            last[(url, version)] = status
            if status.available:
                pending.remove((url, version))
            elif status.failed:
                return f"{url} failed to load version {version}: {status.detail}"
        if not pending:
            return ""
        if time.monotonic() >= deadline:
            waiting = "; ".join(
                f"{url} version {version}: {_said(last[(url, version)])}"
                for url, version in pending
            )
            return f"not AVAILABLE within {seconds:g} s (push.serving_wait_seconds): {waiting}"
        sleep(POLL_SECONDS)


def _said(status: VersionStatus) -> str:
    if status.state:
        return status.state + (f" ({status.detail})" if status.detail else "")
    return status.detail or "no state"


# --- the two steps -------------------------------------------------------------------------------


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
