"""The model served, as a Model artifact: what a Kubeflow run's Trainer warm-starts from and
its Evaluator compares against, read from the serving folder every task reaches.

A local or Airflow run resolves the served model from ML Metadata (`components.baseline.
strategy`). Kubeflow Pipelines runs a resolver as a query of its own ML Metadata that knows only
TFX's strategies, and TFX's LatestBlessedModelStrategy answers the latest *blessed* model: not
the one served after `conveyor rollback`, nor when the infra validator or the Pusher held a
blessed model back. What is served is in the serving folder (`push.base_dir`, a bucket or
Vertex AI's `/gcs/` mount, which every task sees): the version models.config's `stable` label
points to, else the newest complete version (`served_version`).
`ServedModel` copies that version's SavedModel into its Model artifact's `Format-Serving`
folder, where TFX's Trainer (`fn_args.base_model`) and Evaluator look, and records the version
it copied.

Before anything is served (the first night) the artifact holds no model: KFP gives every
declared output an artifact, so this one's folder stays empty and its `conveyor_served_version`
is 0. The Trainer and the Evaluator drop such an artifact (`without_empty_models`) and run as
a local run does when its resolver found nothing: training from scratch, judging on value
thresholds alone.

Its result depends on the serving folder, not on its inputs, so the compiled task never uses
KFP's cache (`pipelines.run.kubeflow`).
"""

import os
from typing import Any

from tfx import types
from tfx.dsl.component.experimental.annotations import OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts

# On the Model: the serving version it is a copy of; 0 when nothing was served.
SERVED_VERSION_PROPERTY = "conveyor_served_version"
# On the Model: the version folder it was copied from ("" when nothing was served).
SERVED_PATH_PROPERTY = "conveyor_served_path"
# The Model artifact's SavedModel folder (TFX's path_utils.serving_model_dir).
SERVING_MODEL_FOLDER = "Format-Serving"


def holds_model(artifact: types.Artifact) -> bool:
    """Whether a Model artifact holds a model: every one does, except the empty one `ServedModel`
    writes when nothing is served."""
    if not artifact.has_custom_property(SERVED_VERSION_PROPERTY):
        return True
    return bool(artifact.get_int_custom_property(SERVED_VERSION_PROPERTY))


def without_empty_models(input_dict: dict[str, list], key: str) -> dict[str, list]:
    """`input_dict` with the Models under `key` that hold no model left out: what an executor
    sees when a local run's resolver found nothing."""
    if not input_dict.get(key):
        return input_dict
    return {**input_dict, key: [a for a in input_dict[key] if holds_model(a)]}


def served_version(serving_dir: str, config_dir: str, model_name: str) -> int | None:
    """The version served: the one models.config's `stable` label points to, as after a
    rollback under labels; without that label the newest complete version folder, which is what
    `latest` loads (a rollback under it renames the newer ones away). None when nothing is."""
    from pipelines.serving_state.config_files import current_entry
    from pipelines.serving_state.labels import STABLE
    from pipelines.serving_state.versions import served_versions

    entry = current_entry(config_dir, model_name)
    if entry is not None and STABLE in entry.labels:
        return entry.labels[STABLE]
    versions = served_versions(serving_dir)
    return versions[-1] if versions else None


def copy_served_model(serving_dir: str, config_dir: str, model_name: str, model: Any) -> int:
    """Copies the served version's SavedModel (`served_version`) into `model`'s `Format-Serving`
    folder and records which version it is on `model`; returns the version (0: nothing served,
    nothing copied)."""
    from pipelines.core import storage
    from pipelines.serving_state.versions import PUSH_RECORD

    version = served_version(serving_dir, config_dir, model_name)
    if version is None:
        model.set_int_custom_property(SERVED_VERSION_PROPERTY, 0)
        model.set_string_custom_property(SERVED_PATH_PROPERTY, "")
        return 0
    source = storage.join(serving_dir, str(version))
    target = storage.join(model.uri, SERVING_MODEL_FOLDER)
    for relative in storage.list_files(source):
        if relative == PUSH_RECORD:  # the push's own record, not part of the SavedModel
            continue
        if not storage.is_remote(target):  # a store has no folders to make first
            os.makedirs(os.path.dirname(os.path.join(target, relative)), exist_ok=True)
        storage.copy(storage.join(source, relative), storage.join(target, relative))
    model.set_int_custom_property(SERVED_VERSION_PROPERTY, version)
    model.set_string_custom_property(SERVED_PATH_PROPERTY, source)
    return version


@component
def ServedModel(  # noqa: N802 - TFX names components like classes
    serving_dir: Parameter[str],
    serving_config_dir: Parameter[str],
    model_name: Parameter[str],
    model: OutputArtifact[standard_artifacts.Model],
) -> None:
    """The version of `model_name` served from `serving_dir` (its versions) and
    `serving_config_dir` (models.config), as a Model artifact; an empty one with
    `conveyor_served_version` 0 when nothing is served (module docstring)."""
    version = copy_served_model(serving_dir, serving_config_dir, model_name, model)
    print(f"served model: version {version} of {serving_dir}" if version else "nothing served")
