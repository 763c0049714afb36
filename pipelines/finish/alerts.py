"""A webhook alert when a night is blocked or fails.

The URL is a secret (a chat webhook's URL is its credential), so the spec names only the
environment variable that holds it (`runtime.alert_webhook_env`); with the variable unset or
empty nothing is sent, and no message ever shows the URL, only the variable's name. An alert that
cannot be delivered is reported to the caller, never raised: the run's own outcome and exit code
must not depend on a chat service being up, nor on the URL being well formed.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from pipelines.core.object_path import as_path
from pipelines.core.outcome import RunResult
from pipelines.core.paths import REPORT_FILE
from pipelines.spec.models import PipelineSpec

TIMEOUT_SECONDS = 10.0


def alert_payload(result: Any) -> dict[str, Any]:
    """The JSON body POSTed for a run (a `RunResult`): `reason` is its message in words,
    `reason_code` its `Reason` code, what a receiver should switch on."""
    report = as_path(result.run_dir) / REPORT_FILE if result.run_dir else None
    return {
        "pipeline": result.pipeline,
        "run_id": result.run_id,
        "outcome": result.outcome,
        "reason": result.message,
        "reason_code": result.reason,
        "night": result.night,
        "span": result.span,
        "report": str(report) if report is not None and report.is_file() else None,
        "data_gate": result.data_gate,
    }


def send_alert(
    spec: PipelineSpec, result: RunResult, timeout: float = TIMEOUT_SECONDS
) -> str | None:
    """POSTs an alert for a run that alerts (`RunResult.alerts`: blocked, failed, or a model
    the infra validator refused) to the URL in `runtime.alert_webhook_env`.

    Args:
      spec: the pipeline's resolved spec.
      result: the run's `RunResult`.
      timeout: seconds to wait for the webhook to answer.

    Returns:
      One line saying what happened (sent, or why delivery failed), or None when nothing was to
      be sent: the run succeeded, or no webhook is configured.
    """
    if not result.alerts:
        return None
    variable = spec.runtime.alert_webhook_env
    url = os.environ.get(variable, "").strip() if variable else ""
    if not url:
        return None
    try:
        # Only http(s): urllib would also "POST" to file:// and ftp:// URLs.
        if urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https"):
            return (
                f"alert not delivered: the webhook in ${variable} is not an http(s) URL "
                "(it needs the scheme, e.g. https://)"
            )
        body = json.dumps(alert_payload(result), default=str).encode()
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "conveyor-alert"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status = response.status
    except urllib.error.HTTPError as err:
        return f"alert not delivered: the webhook in ${variable} answered HTTP {err.code}"
    except (urllib.error.URLError, OSError, ValueError) as err:
        # Some reasons quote the URL (urllib's "unknown url type: ..."): never show it.
        reason = str(getattr(err, "reason", err)).replace(url, "***")
        return f"alert not delivered to the webhook in ${variable}: {reason}"
    return f"alert sent ({result.outcome}) to the webhook in ${variable}: HTTP {status}"
