"""`conveyor models`: every version folder of a pipeline's model, with what disk,
models.config, the hold and ML Metadata say about it, read in one place.

Each pushed version's model card (`pipelines.finish.model_card` writes it) lies in the config
folder as `model_cards/<model name>/<version>.json` and `.html`: beside models.config, where
TF Serving never looks (it loads only the base paths models.config names), and apart from the
version folders, so retiring or republishing a version never touches its card.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipelines.core import storage
from pipelines.core.object_path import AnyPath, as_path
from pipelines.core.paths import RunPaths
from pipelines.serving_state import versions
from pipelines.serving_state.config_files import (
    ServedModel,
    current_entry,
    models_config_path,
)
from pipelines.serving_state.labels import Hold, read_hold, unlabelled_versions
from pipelines.serving_state.records import pushes_by_version

MODEL_CARDS_FOLDER = "model_cards"


def model_card_files(config_dir, model_name: str, version: int | str) -> tuple[AnyPath, AnyPath]:
    """(JSON, HTML) of a version's model card in a serving config folder (local or a bucket)."""
    folder = as_path(config_dir) / MODEL_CARDS_FOLDER / model_name
    return folder / f"{version}.json", folder / f"{version}.html"


@dataclass(frozen=True)
class ModelsTable:
    """What `conveyor models` shows: the model's models.config file and entry (`entry_error`
    says why there is none when the file cannot be read), the hold on `stable`, the versions
    loaded without a label, and one row per version folder, newest first."""

    config_file: Path
    entry: ServedModel | None
    entry_error: str
    hold: Hold | None
    unlabelled: list[int]
    rows: list[VersionRow]


def models_table(paths: RunPaths) -> ModelsTable:
    """Reads the table of `conveyor models` (files and ML Metadata only, no TFX)."""
    config_dir = paths.serving_config_dir
    model_name = paths.spec.push.model_name
    entry, error = None, ""
    try:
        entry = current_entry(config_dir, model_name)
    except ValueError as err:  # ServingConfigError: still show what is on disk
        error = str(err)
    return ModelsTable(
        config_file=models_config_path(config_dir),
        entry=entry,
        entry_error=error,
        hold=read_hold(config_dir, model_name),
        unlabelled=unlabelled_versions(entry),
        rows=version_rows(paths, entry),
    )


@dataclass
class VersionRow:
    """One version folder for `conveyor models`: what disk, models.config and ML Metadata say."""

    version: int
    folder: str
    labels: list[str]
    recorded: bool
    run_id: str = ""
    spans: list[int] | None = None
    metrics: dict[str, float] | None = None
    pushed_at: str = ""
    note: str = ""
    model_card: str = ""  # the version's model card page, "" when it has none


def version_rows(paths: RunPaths, entry: ServedModel | None) -> list[VersionRow]:
    """Every version folder of the model (served, rolled back, quarantined), newest first,
    with its labels, its push in ML Metadata (run, spans, the trained model's final
    validation metrics) and its push record; `entry` is the model's models.config entry (None
    when there is none or it cannot be read). Reads ML Metadata and files only (no TFX)."""
    from pipelines.core import metadata

    base = str(paths.serving_dir)
    by_version: dict[int, list[str]] = {}
    for label, version in sorted((entry.labels if entry else {}).items()):
        by_version.setdefault(version, []).append(label)
    folders = [(v, str(v), "") for v in versions.served_versions(base)]
    for name, prefix, note in (
        (n, p, w)
        for p, w in (
            (versions.ROLLED_BACK_PREFIX, "rolled back"),
            (versions.QUARANTINE_PREFIX, "quarantined"),
        )
        for n in versions.hidden_versions(base, p)
    ):
        number = name[len(prefix) :].split("-", 1)[0]
        folders.append((int(number), name, note))
    store = metadata.open_store(paths.spec, paths.metadata_path)
    pushes = pushes_by_version(store, paths.spec.name) if store is not None else {}
    rows = []
    for version, folder, note in sorted(folders, key=lambda f: (-f[0], f[1])):
        record = versions.read_push_record(storage.join(base, folder))
        push = pushes.get(version) if not note or note == "rolled back" else None
        row = VersionRow(
            version=version,
            folder=folder,
            labels=by_version.get(version, []) if not note else [],
            recorded=push is not None,
            pushed_at=str(record.get("pushed_at", "")),
            note=note,
        )
        if push is not None:
            row.run_id, row.spans, row.metrics = push
        _, card_page = model_card_files(
            paths.serving_config_dir, paths.spec.push.model_name, version
        )
        if storage.exists(str(card_page)):
            row.model_card = str(card_page)
        rows.append(row)
    return rows
