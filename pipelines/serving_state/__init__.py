"""Serving state, in one room: what a model server serves, and the record of how it got there.

Where the state lives, and the module that owns each part:

- `versions`: the model's base path on disk (`<base>/1/`, `<base>/2/`...): publishing a version
  (staged, flushed, renamed into place), model digests, push records, retiring, quarantining,
  hiding a rolled-back version, the leftovers of a killed push.
- `config_files`: TF Serving's models.config (which versions load, where each label points),
  monitoring.config and batching.config beside it; read and checked as the server checks them.
  Several pipelines may share one config folder, so every change rereads models.config and
  replaces only this model's entry, under a file lock beside it (`update_entry`, its only
  writer).
- `labels`: the label rules (`stable`, `canary`) and the hold file a rollback leaves
  (`.conveyor-hold-<model>.json` beside models.config).
- `rollout`: moving labels in two steps for servers that must load a version first, and the
  HTTP status polling that waits between the steps.
- `records`: the pushes and label moves recorded in ML Metadata, and folding them into where
  each label points.
- `push`, `promotion`, `reconcile`, `models_table`: the operations below, built from those.
- `durable_files`: crash-safe writes (fsync, atomic rename) for all of it.

The order of every change is files first (the version folder, the hold file, models.config),
then ML Metadata; a crash in between leaves files that disagree with the record, and
`reconcile` (before every run, bless, promote and rollback) puts the files back in step.

Nothing outside this package writes models.config or reads the hold file
(tests/unit/test_serving_state.py checks the source). Callers use the operations below:
`push_version` (the Pusher, `conveyor bless`), `promote`, `rollback`, `reconcile` (before every
run, bless, promote and rollback), `retain` (after a run whose push ML Metadata recorded),
`models_table` (`conveyor models`), `moves_by_version` (`conveyor lineage`) and `current_entry`
(`conveyor deploy render`); the model server reads models.config through
`config_files.served_models`.
"""

from pipelines.serving_state.config_files import ServingConfigError, current_entry
from pipelines.serving_state.models_table import ModelsTable, VersionRow, models_table
from pipelines.serving_state.promotion import LabelError, Moved, promote, rollback
from pipelines.serving_state.push import Pushed, push_version
from pipelines.serving_state.reconcile import Reconciled, reconcile, retain
from pipelines.serving_state.records import LABELS_PROPERTY, LabelEvent, moves_by_version
from pipelines.serving_state.versions import model_digest, served_as, served_versions

__all__ = [
    "LABELS_PROPERTY",
    "LabelError",
    "LabelEvent",
    "ModelsTable",
    "Moved",
    "Pushed",
    "Reconciled",
    "ServingConfigError",
    "VersionRow",
    "current_entry",
    "model_digest",
    "models_table",
    "moves_by_version",
    "promote",
    "push_version",
    "reconcile",
    "retain",
    "rollback",
    "served_as",
    "served_versions",
]
