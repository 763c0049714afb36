"""A run's events, as the text lines people read or as one JSON object per line for log
aggregators (`--log-format json`, the profile's `runtime.log_format`).

Every progress line of a run goes through an `echo` callable (print, by default). An event is
sent with `emit`: a plain echo gets its text line, exactly as before; an echo that logs JSON
(`JsonLog`, which says so with `structured = True`) gets an `Event`, a `str` that also carries
the event's name and fields. An `Event` pickles with its fields, so the lines a supervised
child process sends its parent stay events. Some events have no text line (a component
started): a text log shows nothing for them.

Events: run_started, component_started, component_finished, component_cached,
component_failed, pipeline_finished, gate (one per decision: data gate, model, infra
validation, TF Lite), push, report, verdict; any other line is a `message` event.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO


class Event(str):
    """A progress line that also carries what it says: `event` (its name) and `fields`.

    Printed, it is its text; `JsonLog` writes its fields."""

    event: str
    fields: dict[str, Any]

    def __new__(cls, text: str, event: str = "message", fields: dict[str, Any] | None = None):
        """An event named `event` whose text line is `text` (may be empty)."""
        line = super().__new__(cls, text)
        line.event = event
        line.fields = dict(fields or {})
        return line

    def __reduce__(self):
        return (Event, (str(self), self.event, self.fields))


def structured(echo: Callable[[str], None]) -> bool:
    """Whether `echo` logs events as JSON (and so wants the events that have no text)."""
    return bool(getattr(echo, "structured", False))


def emit(echo: Callable[[str], None], event: str, text: str | None = None, **fields: Any) -> None:
    """Sends one event to `echo`: its `text` to a text log (nothing when `text` is None), an
    `Event` with `fields` to a JSON one."""
    if structured(echo):
        echo(Event(text or "", event, fields))
    elif text is not None:
        echo(text)


class JsonLog:
    """An echo that writes each line as one JSON object on its own line of `stream`.

    An `Event` becomes `{"time", "event", **fields, "message"}`; any other line
    `{"time", "event": "message", "message"}`. `redact` masks secrets in the written line
    (the run's, see `pipelines.finish.run_folder.redact`); it sees the JSON text, so it must match a
    secret as JSON escapes it too.
    """

    structured = True

    def __init__(self, stream: TextIO | None = None, redact: Callable[[str], str] | None = None):
        """Writes to `stream` (default: the standard output at the time of each line)."""
        self._stream = stream
        self._redact = redact or (lambda text: text)

    def __call__(self, line: str) -> None:
        """Writes one event (or plain line) as a JSON object."""
        now = datetime.datetime.now(datetime.timezone.utc)
        record: dict[str, Any] = {
            "time": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "event": getattr(line, "event", "message"),
        }
        record.update(getattr(line, "fields", {}))
        if str(line):
            record["message"] = str(line).strip()
        text = self._redact(json.dumps(record, default=str, ensure_ascii=False))
        stream = self._stream or sys.stdout
        stream.write(text + "\n")
        stream.flush()
