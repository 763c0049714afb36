"""Asks model servers whether they have loaded a version, over TF Serving's REST status API.

`GET <url>/v1/models/NAME/versions/V` answers `{"model_version_status": [{"version": "V",
"state": "AVAILABLE", "status": {"error_code": "OK", ...}}]}` on `tensorflow_model_server` and
on Conveyor's own model server alike (TF Serving's `GetModelStatusResponse` in JSON). A label move
onto a version waits here until every server that reads the models.config reports it
AVAILABLE (pipelines/ops/labels.py), because TF Serving refuses a config that moves a label to
a version it has not loaded. Standard library only: no TensorFlow, no HTTP client package.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
