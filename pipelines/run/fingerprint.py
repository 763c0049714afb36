"""Knowing, before importing TFX, that a run would change nothing.

Importing TensorFlow and TFX costs about 20 s here, more than an unchanged re-run's actual work
(every component a cache hit). After each run with a final outcome (pushed, not pushed, blocked:
what the same inputs would give again; a failure is always retried) its outcome record keeps a
fingerprint of everything that decides its outputs, and of nothing else
(`pipelines.finish.outcome_record`, written by `conveyor run`, Airflow's final task and
Kubeflow's exit handler):

- the resolved spec: its own file, the profile layers it was loaded with (Conveyor's and the
  project's) and the `--set`s, merged, so a comment edit changes nothing and another pipeline's
  `pipelines.NAME` block in a shared profile neither;
- Conveyor's version: `conveyor==X` from a wheel, else the digest of its source
  (`pipelines.core.paths.framework_version`);
- the lock: the project's `requirements.lock`, else Conveyor's own when it runs from source;
- the schema (the curated file, or the accepted one an inferring pipeline imports);
- the team's modules the spec names (`trainer.module`, `transform.module`, embeddings, custom
  components), by the digests the builder records as their code version;
- the content of every input file the run reads (the span's, the earlier spans its training
  window and drift check build on, the serving logs its skew check reads), per span for a spec
  with spans.

Another spec added to the project, or any file no key of this spec names, leaves it unchanged.
`conveyor run` compares it first; when nothing changed and what that run left served is still
served (see `unchanged_since`), it says so and stops without importing anything heavy. A
Kubeflow job's first task compares it the same way (`pipelines.run.kubeflow_start`).

Input files are fingerprinted by content (SHA-256), not by name, size and modification time: a
file rewritten in place with the same size and its old modification time restored is a change,
and a file merely touched is not. Every file is hashed again on every check; no cache keyed on
size and modification time is kept, since such a cache would trust exactly that in-place
rewrite, and hashing is cheap next to the import it saves (the figure is at `_CHUNK`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pipelines.builder.context import user_code
from pipelines.builder.nodes.schema_gen import previous_schema
from pipelines.builder.spans import available_spans, span_files
from pipelines.core import storage
from pipelines.core.artifact_files import REQUEST_LOG_SUFFIX
from pipelines.core.object_path import AnyPath, ObjectPath
from pipelines.core.outcome import Outcome
from pipelines.core.paths import FRAMEWORK_LOCK, RunPaths, framework_version
from pipelines.core.project import find_project
from pipelines.finish import outcome_record
from pipelines.spec.models import SchemaSource, ServingDataFormat

# Measured on 2 CPU cores with SHA extensions (OpenSSL 3.0): a 1,500,000-row taxi
# CSV (184 MB, `python -m pipelines.datasets.taxi 1500000 taxi.csv --seed 0`) hashes in 0.17 s
# with SHA-256, 0.27 s with BLAKE2b, 0.18 s with SHA-1, 0.34 s with MD5 (median of 3, the file
# in the page cache; evicted first with posix_fadvise DONTNEED, the same within noise); the
# chunk size (256 KiB to 4 MiB) made no difference. `compute` for a taxi night with that file
# in each of its 3 window spans took 0.55-0.62 s (0.004 s without input files), and up to 1.2 s
# while other jobs loaded both cores. xxhash and blake3 are not installed, so not measured.
_CHUNK = 1 << 20


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks so memory stays flat."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def window_spans(paths: RunPaths, span: int) -> list[int]:
    """The earlier spans on disk that `span`'s run may build on, ascending.

    The training window (components/spans/strategy.py) takes the spans among the
    `data.window_spans - 1` before this one whose own model was blessed, and drift is measured
    from the newest earlier span a data gate accepted. Which spans those are is known only to
    ML Metadata; from the files alone this takes every span on disk in the window's range, plus
    the newest earlier span on disk when `data.drift` is set. Taking too many only costs a
    re-run.
    """
    data = paths.spec.data
    earlier = [s for s in available_spans(paths.spec, paths.input_dir) if s < span]
    chosen = {s for s in earlier if s > span - data.window_spans}
    if data.drift and earlier:
        chosen.add(earlier[-1])
    return sorted(chosen)


def input_files(paths: RunPaths, span: int | None) -> list[Path]:
    """Every file under the input directory a run reads: the span's and its earlier spans'
    (see `window_spans`), or every file directly in the input directory for a spec without
    spans."""
    if span is None:
        return sorted(p for p in paths.input_dir.glob("*") if p.is_file())
    files: set[Path] = set()
    for each in [*window_spans(paths, span), span]:
        files.update(span_files(paths.spec, paths.input_dir, each))
    return sorted(files)


def serving_files(paths: RunPaths) -> list[Path]:
    """The serving logs the data gate measures skew against (its `*.csv`, or a request log's
    `*.tfrecord` files in the folders under it, as components/data_gate reads them), or none
    when the spec measures no skew."""
    folder = paths.serving_data_dir
    if not paths.spec.data.skew or folder is None or not folder.is_dir():
        return []
    if paths.spec.data.serving_data_format is ServingDataFormat.PREDICTION_LOG:
        found = folder.rglob(f"*{REQUEST_LOG_SUFFIX}")
    else:
        found = folder.glob("*.csv")
    return sorted(p for p in found if p.is_file())


def _described(files: list[AnyPath], base: AnyPath) -> list[list[Any]]:
    """[path relative to `base`, size, what identifies the content] per file: its SHA-256 for
    a local file; for an object, what the store says of it, without a download
    (`object_identity`)."""
    described = []
    for path in files:
        if isinstance(path, ObjectPath):
            facts = path.stat()
            described.append([str(path.relative_to(base)), facts.size, object_identity(facts)])
        else:
            described.append([str(path.relative_to(base)), path.stat().st_size, file_digest(path)])
    return described


def object_identity(facts: storage.ObjectStat) -> str:
    """What identifies an object's content, from its metadata alone: GCS's CRC32C and MD5
    checksums of the bytes with the generation (a new number on every write, so a rewrite with
    the same bytes re-runs once, as a touched local file does not; taking too much only costs
    a re-run), S3's ETag (the MD5 of a single-part upload, another value for a multipart one)
    with the version id when versioning is on. Reading every byte of a night's input over the
    network to hash it would cost more than the run it saves."""
    if facts.crc32c or facts.md5:
        return f"crc32c:{facts.crc32c} md5:{facts.md5} {facts.version}"
    return facts.version


def lock_file() -> Path:
    """The lock that pins the run's libraries: the project's `requirements.lock` when it keeps
    one, else Conveyor's own (present when Conveyor runs from its source checkout)."""
    project_lock = find_project().lock_file
    return project_lock if project_lock.is_file() else FRAMEWORK_LOCK


def team_modules(spec) -> dict[str, str]:
    """The team's code the spec names, name -> digest: the trainer's and Transform's modules and
    embeddings (as their nodes record them) and each custom component's module."""
    from pipelines.spec.user_code import code_digest

    found = {**user_code(spec, "trainer"), **user_code(spec, "transform")}
    for entry in spec.components:
        if entry.component:
            module = entry.component.rpartition(".")[0]
            found[module] = code_digest(module)[:16]
    return dict(sorted(found.items()))


def compute(
    paths: RunPaths, span: int | None = None, kept_schema: AnyPath | None = None
) -> dict[str, Any]:
    """Everything that decides a run's outputs, as comparable strings.

    `kept_schema`: for an inferring spec on Kubeflow, the file in which its data gate keeps the
    last accepted run's schema (components/accepted_schema), which that run imports in place of
    the one the spec's ML Metadata store holds (Kubeflow's runs are not in that store).
    """
    spec = paths.spec
    lock = lock_file()
    schema = ""
    if spec.schema_.source is SchemaSource.FILE:
        schema = _sha(find_project().file(spec.schema_.path).read_bytes())
    elif kept_schema is not None:
        schema = _sha(storage.read_bytes(str(kept_schema))) if storage.exists(kept_schema) else ""
    elif (accepted := previous_schema(spec, paths)) is not None:
        # Inferring: the run imports the last accepted run's schema (none yet: it infers).
        source = Path(accepted.source_file)
        schema = file_digest(source) if source.is_file() else f"missing {source}"
    serving = serving_files(paths)
    return {
        "span": span,
        "spec": _sha(json.dumps(spec.to_yaml_dict(), sort_keys=True).encode()),
        "conveyor": framework_version(),
        "lock": _sha(lock.read_bytes()) if lock.exists() else "",
        "schema": schema,
        "modules": team_modules(spec),
        # [path relative to the input directory, size, SHA-256]
        "inputs": _described(input_files(paths, span), paths.input_dir),
        "serving_data": _described(serving, paths.serving_data_dir) if serving else [],
    }


def _serving_lost(record: dict, now: list[str]) -> bool:
    """The version served after the recorded run is gone and no newer version replaced it
    (serving/ deleted, or a version rolled back): a re-run would push again."""
    served = record.get("served_versions") or []
    if not served or served[-1] in now:
        return False
    # A newer version is a later night's push; retention may then have removed this one.
    return not any(int(v) > int(served[-1]) for v in now)


def unchanged_since(
    paths: RunPaths, span: int | None = None, kept_schema: AnyPath | None = None
) -> dict | None:
    """The last final run's record (of this span) if running again would change nothing
    (`kept_schema`: see `compute`)."""
    latest = paths.outcome_record(span)
    if not latest.exists():
        return None
    try:
        record = json.loads(latest.read_text())
    except ValueError:
        return None
    now = outcome_record.served_versions(paths)
    if span is None and record.get("served_versions") != now:
        # Someone added or removed a served version: let the pipeline look again.
        return None
    if record.get("outcome") not in {o.value for o in Outcome if o.final}:
        return None
    if Outcome(record["outcome"]).ok and _serving_lost(record, now):
        # A night's record survives later nights' pushes (that night stays done), but not the
        # loss of what it left served. A blocked run never reached the pusher.
        return None
    if paths.spec.runtime.metadata.kind.value == "sqlite" and not paths.metadata_path.exists():
        return None
    if record.get("fingerprint") != compute(paths, span, kept_schema):
        return None
    return record
