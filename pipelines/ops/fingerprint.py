"""Knowing, before importing TFX, that a run would change nothing.

Importing TensorFlow and TFX costs about 20 s here, more than an unchanged re-run's actual work
(every component a cache hit). After each run with a final outcome (pushed, not pushed, blocked:
what the same inputs would give again; a failure is always retried) the local runner records a
fingerprint of everything that decides its outputs: the resolved spec, Conveyor's code, the
dependency lock, the curated schema and the input files (name, size, modification time, as
CsvExampleGen's own fingerprint uses), per span for a spec with spans. `conveyor run` compares
it first; when nothing changed (and, without spans, the served versions are as that run left
them), it says so and stops without importing anything heavy.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pipelines.build.spans import span_files
from pipelines.outcome import Outcome
from pipelines.paths import CODE_PACKAGES, LOCK_FILE, RunPaths, project_file
from pipelines.spec.loading import source_digest
from pipelines.spec.models import SchemaSource


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def input_files(paths: RunPaths, span: int | None) -> list[Path]:
    """The files a run ingests: the span's, or every file directly in the input directory."""
    if span is not None:
        return span_files(paths.spec, paths.input_dir, span)
    return sorted(p for p in paths.input_dir.glob("*") if p.is_file())


def compute(paths: RunPaths, span: int | None = None) -> dict[str, Any]:
    """Everything that decides a run's outputs, as comparable strings."""
    spec = paths.spec
    lock = LOCK_FILE
    schema = ""
    if spec.schema_.source is SchemaSource.FILE:
        schema = _sha(project_file(spec.schema_.path).read_bytes())
    inputs = [
        [str(p.relative_to(paths.input_dir)), p.stat().st_size, p.stat().st_mtime_ns]
        for p in input_files(paths, span)
    ]
    return {
        "span": span,
        "spec": _sha(json.dumps(spec.to_yaml_dict(), sort_keys=True).encode()),
        "code": source_digest(CODE_PACKAGES, (".py", ".yaml")),
        "lock": _sha(lock.read_bytes()) if lock.exists() else "",
        "schema": schema,
        "inputs": inputs,
    }


def served_versions(paths: RunPaths) -> list[str]:
    if not paths.serving_dir.is_dir():
        return []
    return sorted((p.name for p in paths.serving_dir.iterdir() if p.name.isdigit()), key=int)


def record_outcome(
    paths: RunPaths, run_id: str, outcome: str, fingerprint: dict, span: int | None = None
) -> None:
    """Records a run whose outcome a re-run of the same inputs would repeat."""
    target = paths.outcome_record(span)
    target.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "run_id": run_id,
        "outcome": outcome,
        "fingerprint": fingerprint,
        "served_versions": served_versions(paths),
        "metadata": str(paths.metadata_path),
    }
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(target)


def unchanged_since(paths: RunPaths, span: int | None = None) -> dict | None:
    """The last final run's record (of this span) if running again would change nothing."""
    latest = paths.outcome_record(span)
    if not latest.exists():
        return None
    try:
        record = json.loads(latest.read_text())
    except ValueError:
        return None
    if span is None and record.get("served_versions") != served_versions(paths):
        # Someone added or removed a served version: let the pipeline look again. (A night's
        # record is kept when later nights push: that night stays done.)
        return None
    if paths.spec.runtime.metadata.kind.value == "sqlite" and not paths.metadata_path.exists():
        return None
    if record.get("outcome") not in {o.value for o in Outcome if o.final}:
        return None
    if record.get("fingerprint") != compute(paths, span):
        return None
    return record
