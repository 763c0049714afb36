"""A run's folder and the secrets it must never show.

`<workdir>/runs/<pipeline>/<run id>/` holds the resolved spec the run ran, its log, its
`summary.json` and its report. It is its owner's alone (0700, files 0600): the log is TFX's,
which prints the whole metadata connection, MySQL password included, before Conveyor masks it.
Every text a run writes for people (its log, summary, report, alert) has the run's secrets
masked (`redact`, `Redactor`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict

import yaml

from pipelines.core.metadata import MetadataConfigError, metadata_password
from pipelines.core.object_path import AnyPath, ObjectPath, copy_file
from pipelines.core.outcome import RunResult
from pipelines.core.paths import RESOLVED_SPEC, RUN_LOG, RUN_SUMMARY, RunPaths
from pipelines.spec.loading import LoadedSpec
from pipelines.spec.models import PipelineSpec

REDACTED = "***"


def run_secrets(spec: PipelineSpec) -> tuple[str, ...]:
    """The secret values a run's logs must never show: the metadata database's password and the
    alert webhook's URL (both read from the environment variables the spec names)."""
    secrets = []
    try:
        secrets.append(metadata_password(spec))
    except MetadataConfigError:  # no password to leak (a MySQL run fails on it before logging)
        pass
    if spec.runtime.alert_webhook_env:
        secrets.append(os.environ.get(spec.runtime.alert_webhook_env, "").strip())
    return tuple(secret for secret in secrets if secret)


def _spellings(secret: str) -> set[str]:
    """A secret as it may appear in a log line: as is, and escaped the way protobuf's text
    format (TFX logs the connection config so), repr() and JSON write a string."""
    from google.protobuf import text_encoding

    return {
        secret,
        text_encoding.CEscape(secret.encode(), as_utf8=False),
        text_encoding.CEscape(secret, as_utf8=True),
        repr(secret)[1:-1],
        json.dumps(secret)[1:-1],
    }


class Redactor(logging.Filter):
    """Replaces secret values with `***` in a record's message and exception text.

    The record is changed in place, so every handler after the first one that filters it (and
    any other handler of the logger) sees the masked text.
    """

    def __init__(self, secrets: tuple[str, ...]):
        super().__init__()
        spelled = {variant for secret in secrets if secret for variant in _spellings(secret)}
        # Longest first: an escaped spelling may contain the plain one.
        self._secrets = sorted(spelled, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """`text` with every spelling of every secret masked."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        """Masks the record's secrets in place; never drops it."""
        if not self._secrets or getattr(record, "_conveyor_redacted", False):
            return True
        try:
            message, formatted = record.getMessage(), True
        except Exception:  # logging's own error report would print the arguments unmasked
            message, formatted = f"{record.msg} {record.args!r}", False
        redacted = self.redact(message)
        if redacted != message or not formatted:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        record._conveyor_redacted = True
        return True


def redact(text: str, spec: PipelineSpec) -> str:
    """`text` with the run's secrets (see `run_secrets`) masked: for a message that is written
    to a summary, a report or an alert."""
    return Redactor(run_secrets(spec)).redact(text)


def private_dir(path: AnyPath) -> AnyPath:
    """Creates `path` (and its parents) readable by its owner only, whatever the umask. In a
    bucket, who reads is the bucket's access policy's to say; the folder is its marker."""
    path.mkdir(parents=True, exist_ok=True)
    if not isinstance(path, ObjectPath):
        os.chmod(path, 0o700)
    return path


def write_private(path: AnyPath, text: str = "") -> AnyPath:
    """Writes `path` readable and writable by its owner only, whatever the umask (in a bucket:
    the whole object at once, under the bucket's access policy)."""
    if isinstance(path, ObjectPath):
        path.write_text(text)
        return path
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # os.open's mode passes through the umask; an existing file keeps its own
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return path


def open_run_dir(loaded: LoadedSpec, paths: RunPaths, run_id: str) -> AnyPath:
    """Creates the run's folder (owner-only: its log and summary are the run's own) with the
    resolved spec in it."""
    spec = loaded.spec
    run_dir = private_dir(paths.run_dir(run_id))
    write_private(
        run_dir / RESOLVED_SPEC,
        f"# {spec.name} as run {run_id} (profile {loaded.env}; layers: "
        f"{', '.join(loaded.sources)})\n" + yaml.safe_dump(spec.to_yaml_dict(), sort_keys=False),
    )
    return run_dir


def publish_run_log(paths: RunPaths, run_id: str) -> None:
    """Copies the run's log into its folder in the bucket, when the workdir is one. The log is
    written as the run goes to a local file (`RunPaths.run_log`: an object cannot be appended
    to), and the run's end publishes it whole, beside the summary."""
    local_log, run_dir = paths.run_log(run_id), paths.run_dir(run_id)
    if isinstance(run_dir, ObjectPath) and local_log.is_file():
        copy_file(local_log, run_dir / RUN_LOG)


def write_summary(run_dir: AnyPath, result: RunResult) -> AnyPath:
    """Writes the run's `summary.json` (owner-only, like the rest of its folder)."""
    private_dir(run_dir)
    return write_private(run_dir / RUN_SUMMARY, json.dumps(asdict(result), indent=2))
