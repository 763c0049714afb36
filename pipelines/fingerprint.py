"""Knowing, before importing TFX, that a run would change nothing.

Importing TensorFlow and TFX costs about 20 s here, more than an unchanged re-run's actual work
(every component a cache hit). After each successful run the local runner records a fingerprint
of everything that decides its outputs: the resolved spec, Conveyor's code, the dependency lock,
the curated schema and the input files (name, size, modification time, as CsvExampleGen's own
fingerprint uses). `conveyor run` compares it first; when nothing changed and the served
versions are as that run left them, it says so and stops without importing anything heavy.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pipelines.config import PROJECT_ROOT, source_digest
from pipelines.registry import RunPaths
from pipelines.spec import SchemaSource

LATEST_FILE = "latest_success.json"
_CODE_DIRS = ("pipelines", "components")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def compute(paths: RunPaths) -> dict[str, Any]:
    """Everything that decides a run's outputs, as comparable strings."""
    spec = paths.spec
    lock = PROJECT_ROOT / "requirements.lock"
    schema = ""
    if spec.schema_.source is SchemaSource.FILE:
        schema = _sha((PROJECT_ROOT / str(spec.schema_.path)).read_bytes())
    inputs = [
        [p.name, p.stat().st_size, p.stat().st_mtime_ns]
        for p in sorted(paths.input_dir.glob("*"))
        if p.is_file()
    ]
    return {
        "spec": _sha(json.dumps(spec.to_yaml_dict(), sort_keys=True).encode()),
        "code": source_digest(_CODE_DIRS, (".py", ".yaml")),
        "lock": _sha(lock.read_bytes()) if lock.exists() else "",
        "schema": schema,
        "inputs": inputs,
    }


def served_versions(paths: RunPaths) -> list[str]:
    if not paths.serving_dir.is_dir():
        return []
    return sorted((p.name for p in paths.serving_dir.iterdir() if p.name.isdigit()), key=int)


def record_success(paths: RunPaths, run_id: str, outcome: str, fingerprint: dict) -> None:
    paths.runs_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "run_id": run_id,
        "outcome": outcome,
        "fingerprint": fingerprint,
        "served_versions": served_versions(paths),
        "metadata": str(paths.metadata_path),
    }
    partial = paths.runs_dir / (LATEST_FILE + ".partial")
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(paths.runs_dir / LATEST_FILE)


def unchanged_since(paths: RunPaths) -> dict | None:
    """The last successful run's record if running again would change nothing, else None."""
    latest = paths.runs_dir / LATEST_FILE
    if not latest.exists():
        return None
    try:
        record = json.loads(latest.read_text())
    except ValueError:
        return None
    if record.get("served_versions") != served_versions(paths):
        return None  # someone added or removed a served version: let the pipeline look again
    if paths.spec.runtime.metadata.kind.value == "sqlite" and not paths.metadata_path.exists():
        return None
    if record.get("fingerprint") != compute(paths):
        return None
    return record
