"""The models a server serves, kept in step with their base paths as TF Serving keeps them.

Every poll (TF Serving's `--file_system_poll_wait_seconds`) the repository re-reads models.config
when it has one, lists each model's base path (a version is a folder named by an integer;
Conveyor's hidden `.incoming-*` and `.retired-*` folders never are), picks the versions its
policy aspires to (`latest`: the newest, `all`, `labelled`: the listed ones), and:

1. loads and warms each aspired version that is not loaded yet, while the versions already
   loaded keep answering;
2. publishes, in one reference assignment, a new `Snapshot`: the loaded versions the policy
   aspires to and the labels (a label moves only to a version that is available, as TF Serving
   requires); a request reads the snapshot once, so it sees either the old or the new set;
3. forgets the versions no longer aspired to. Requests already holding one finish on it.

When every aspired version fails to load, the versions loaded before stay (TF Serving's
availability-preserving policy); a version that failed is retried only once its folder changes.

Labels are checked as TF Serving's `ServerCore::UpdateModelVersionLabelMap` checks them: a
models.config whose label names a version that is not available is refused as a whole (the
config read before stays in force, and nothing it would have loaded is loaded), unless the
server was started to allow it (`version_labels`, one of VERSION_LABEL_POLICIES).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.core.object_path import AnyPath, ObjectPath, as_path
from pipelines.serving.model_server.errors import CODE_NAMES, invalid_argument, not_found
from pipelines.serving.model_server.metrics import ServerMetrics
from pipelines.serving.model_server.servable import LoadError, Servable
from pipelines.serving_state.config_files import ServedModel, ServingConfigError

if TYPE_CHECKING:
    from pipelines.serving.model_server.batching import BatchScheduler

log = logging.getLogger("conveyor.serving")

# ModelVersionStatus.State (tensorflow_serving/apis/get_model_status.proto).
LOADING, AVAILABLE, UNLOADING, END = "LOADING", "AVAILABLE", "UNLOADING", "END"

# What a label may name when the config is read. `available`: only a version that is available
# now (TF Serving's default). `unused`: also an unavailable one, for a label not assigned yet or
# not moving (`--allow_version_labels_for_unavailable_models`). `any`: any version; a label
# moved to one that is not loaded yet stays where it was until it is (Conveyor's; TF Serving's
# nearest is ServerCore's force_allow_any_version_labels_for_unavailable_models option, which
# has no flag and points the label at the unloaded version at once).
LABELS_AVAILABLE, LABELS_UNUSED, LABELS_ANY = "available", "unused", "any"
VERSION_LABEL_POLICIES = (LABELS_AVAILABLE, LABELS_UNUSED, LABELS_ANY)


@dataclass(frozen=True)
class VersionState:
    """What status reports for one version: its state and, after a failed load, the error."""

    state: str
    error_code: str = "OK"
    error_message: str = ""


@dataclass(frozen=True)
class ModelView:
    """One model as requests see it: available versions, labels, and every version's state."""

    name: str
    servables: Mapping[int, Servable] = field(default_factory=dict)
    labels: Mapping[str, int] = field(default_factory=dict)
    states: Mapping[int, VersionState] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """Every model served, at one instant; replaced whole, never changed."""

    models: Mapping[str, ModelView] = field(default_factory=dict)


def versions_on_disk(base_path: str | Path) -> dict[int, AnyPath]:
    """The version folders under `base_path`, by number (none when it does not exist). In a
    bucket, a folder counts once its SavedModel graph is there: a push writes it after the
    variables (pipelines.serving_state.versions), so a version is never loaded half-copied."""
    base = as_path(base_path)
    try:
        entries = list(base.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return {}
    if isinstance(base, ObjectPath):
        return {
            int(p.name): p for p in entries if p.name.isdigit() and (p / "saved_model.pb").is_file()
        }
    return {int(p.name): p for p in entries if p.name.isdigit() and p.is_dir()}


def aspired_versions(source: ServedModel, on_disk: Mapping[int, Path]) -> set[int]:
    """The versions the model's policy wants loaded, of those on disk."""
    if not on_disk:
        return set()
    if source.policy == "all":
        return set(on_disk)
    if source.policy == "labelled":
        return set(source.versions) & set(on_disk)
    return {max(on_disk)}


def _folder_signature(path: AnyPath) -> tuple:
    """Changes when a version folder is replaced or its SavedModel rewritten (in a bucket: the
    graph's generation or ETag, which a rewrite changes)."""
    if isinstance(path, ObjectPath):
        try:
            return ((path / "saved_model.pb").stat().version,)
        except FileNotFoundError:
            return (None,)
    stamps = []
    for candidate in (path, path / "saved_model.pb", path / "variables"):
        try:
            stat = candidate.stat()
            stamps.append((stat.st_ino, stat.st_mtime_ns))
        except FileNotFoundError:
            stamps.append(None)
    return tuple(stamps)


class ModelRepository:
    """The loaded models, polled from `sources` (called each poll; it may raise a ValueError
    for an unreadable config, which keeps the models served before).

    Requests call `resolve` and `status`; one thread calls `poll` (or `start` runs it every
    `poll_seconds`). `ready` is set once every model has an available version.
    """

    def __init__(
        self,
        sources: Callable[[], Sequence[ServedModel]],
        metrics: ServerMetrics,
        poll_seconds: float = 1.0,
        version_labels: str = LABELS_AVAILABLE,
        batcher: BatchScheduler | None = None,
    ):
        """`batcher`: a batching.BatchScheduler every loaded version's calls go through
        (--enable-batching); None runs each request as a call of its own."""
        self._batcher = batcher
        if version_labels not in VERSION_LABEL_POLICIES:
            raise ValueError(
                f"version_labels {version_labels!r} is not one of {VERSION_LABEL_POLICIES}"
            )
        self._version_labels = version_labels
        # The labels of the config in force, by model (TF Serving's model_labels_to_versions_):
        # with `unused`, what a label may keep or take without its version being available.
        self._label_map: dict[str, dict[str, int]] | None = None
        self._refusal = ""
        self._sources = sources
        self._metrics = metrics
        self._poll_seconds = poll_seconds
        self._snapshot = Snapshot()
        self._failed: dict[tuple[str, int], tuple] = {}
        self._last_sources: list[ServedModel] | None = None
        self._label_notes: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()

    @property
    def snapshot(self) -> Snapshot:
        """The models as they are now (an immutable view)."""
        return self._snapshot

    # ------------------------------------------------------------------------------ requests

    def resolve(self, name: str, version: int | None, label: str | None) -> Servable:
        """The servable a request names: a label, a version, or the latest available, with
        ServerCore::GetServableHandle's errors."""
        view = self._snapshot.models.get(name)
        if label is not None:
            if view is None or label not in view.labels:
                raise invalid_argument(f"Unrecognized servable version label: {label}")
            version = view.labels[label]
        if version is None:
            if view is not None and view.servables:
                return view.servables[max(view.servables)]
            raise not_found(f"Servable not found for request: Latest({name})")
        if view is not None and version in view.servables:
            return view.servables[version]
        raise not_found(f"Servable not found for request: Specific({name}, {version})")

    def status(self, name: str, version: int | None, label: str | None) -> dict:
        """TF Serving's GetModelStatus answer as JSON: every version it knows of the model
        (newest first), or the one a version or label names."""
        from google.protobuf import json_format
        from tensorflow_serving.apis import get_model_status_pb2

        view = self._snapshot.models.get(name)
        if label is not None:
            if view is None or label not in view.labels:
                raise invalid_argument(f"Unrecognized servable version label: {label}")
            version = view.labels[label]
        if view is None or not view.states:
            raise not_found(f"Could not find any versions of model {name}")
        if version is not None:
            if version not in view.states:
                raise not_found(f"Could not find version {version} of model {name}")
            listed = [(version, view.states[version])]
        else:
            listed = sorted(view.states.items(), reverse=True)
        response = get_model_status_pb2.GetModelStatusResponse()
        for number, state in listed:
            entry = response.model_version_status.add()
            entry.version = number
            entry.state = get_model_status_pb2.ModelVersionStatus.State.Value(state.state)
            entry.status.error_code = _error_code_value(state.error_code)
            entry.status.error_message = state.error_message
        return json_format.MessageToDict(response, including_default_value_fields=True)

    # ------------------------------------------------------------------------------ polling

    def start(self) -> None:
        """Polls now and then every `poll_seconds`, in a daemon thread, until `stop`."""

        def loop() -> None:
            while True:
                try:
                    self.poll()
                except Exception:  # a poll must never end the loop; the next one retries
                    log.exception("serving: poll failed")
                if self._stop.wait(self._poll_seconds):
                    return

        self._thread = threading.Thread(target=loop, name="model-repository", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the polling thread (after the poll under way, if any)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def read_sources(self) -> list[ServedModel]:
        """The models to serve: the config read now if the server accepts it, else the one in
        force (logged once per new refusal).

        Raises:
          ValueError: (ServingConfigError for a label refused) the first config cannot be
            served; the server then does not start, as TF Serving does not.
        """
        try:
            sources = list(self._sources())
            refusal = self.label_refusal(sources)
            if refusal:
                raise ServingConfigError(refusal)
        except ValueError as err:
            if self._last_sources is None:
                raise
            if str(err) != self._refusal:  # said once, not every poll
                self._refusal = str(err)
                log.error("serving: %s Serving the models as configured before.", err)
            return self._last_sources
        if self._refusal:
            log.info("serving: the config is accepted again")
        self._refusal = ""
        self._last_sources = sources
        self._label_map = {s.name: dict(s.labels) for s in sources}
        return sources

    def label_refusal(self, sources: Sequence[ServedModel]) -> str:
        """Why TF Serving would refuse `sources`' labels now ("" when it would not): the first
        label naming a version that is not available, unless `version_labels` allows it."""
        if self._version_labels == LABELS_ANY:
            return ""
        for source in sources:
            view = self._snapshot.models.get(source.name)
            available = view.servables if view is not None else {}
            in_force = (self._label_map or {}).get(source.name, {})
            for label, version in sorted(source.labels.items()):
                if version in available:
                    continue
                if (
                    self._version_labels == LABELS_UNUSED
                    and in_force.get(label, version) == version
                ):
                    continue  # a label not assigned yet, or not moving
                return (
                    f"Request to assign label to version {version} of model {source.name}, which "
                    "is not currently available for inference (label "
                    f"{label!r}; TF Serving's ServerCore refuses the whole config: "
                    + (
                        "move a label only to a loaded version, or start the server with "
                        "--allow-version-labels-for-unavailable-models for a label not assigned "
                        "yet)."
                        if self._version_labels == LABELS_AVAILABLE
                        else "move a label only to a version that is loaded)."
                    )
                )
        return ""

    def poll(self) -> None:
        """One pass over every model: load what is new, publish, forget what went away."""
        sources = self.read_sources()
        wanted = {s.name for s in sources}
        for gone in sorted(set(self._snapshot.models) - wanted):
            log.info("serving: model %s is no longer configured; unloading it", gone)
            self._publish_model(gone, None)
            self._metrics.loaded_versions.labels(gone).set(0)
        for source in sources:
            try:
                self._poll_model(source)
            except Exception:  # one model's trouble must not stop the others
                log.exception("serving: polling model %s failed", source.name)
        models = self._snapshot.models
        if sources and all(models.get(s.name) and models[s.name].servables for s in sources):
            self.ready.set()

    def _publish_model(self, name: str, view: ModelView | None) -> None:
        models = dict(self._snapshot.models)
        if view is None:
            models.pop(name, None)
        else:
            models[name] = view
        self._snapshot = Snapshot(models)

    def _poll_model(self, source: ServedModel) -> None:
        view = self._snapshot.models.get(source.name) or ModelView(source.name)
        on_disk = versions_on_disk(source.base_path)
        aspired = aspired_versions(source, on_disk)
        if not on_disk and not view.states:
            log.debug("serving: no versions of %s under %s yet", source.name, source.base_path)
        loaded = dict(view.servables)
        states = dict(view.states)
        newly_loaded = False
        for version in sorted(aspired - set(loaded), reverse=True):
            key = (source.name, version)
            signature = _folder_signature(on_disk[version])
            if self._failed.get(key) == signature:
                continue
            states[version] = VersionState(LOADING)
            view = replace(view, states=dict(states))
            self._publish_model(source.name, view)
            servable = self._load(source.name, version, on_disk[version], signature, states)
            if servable is not None:
                loaded[version] = servable
                states[version] = VersionState(AVAILABLE)
                newly_loaded = True
            view = replace(view, states=dict(states))
            self._publish_model(source.name, view)

        keep = {v: s for v, s in loaded.items() if v in aspired}
        if not keep and loaded and aspired:
            # Every aspired version failed to load: keep serving what was served.
            keep = {v: s for v, s in view.servables.items()}
        labels = self._labels(source, view.labels, keep)
        for version in sorted(set(loaded) - set(keep)):
            states[version] = VersionState(END)
        if keep != dict(view.servables) or labels != dict(view.labels) or newly_loaded:
            self._publish_model(source.name, ModelView(source.name, keep, labels, dict(states)))
        elif states != dict(view.states):
            self._publish_model(source.name, replace(view, states=dict(states)))
        for version in sorted(set(view.servables) - set(keep)):
            log.info("serving: %s version %d unloaded", source.name, version)
        self._metrics.loaded_versions.labels(source.name).set(len(keep))

    def _load(
        self, name: str, version: int, path: Path, signature: tuple, states: dict
    ) -> Servable | None:
        started = time.monotonic()
        try:
            servable = Servable.load(name, version, path, self._batcher)
            warmed = servable.warm_up()
        except LoadError as err:
            log.error("serving: %s version %d failed to load: %s", name, version, err)
            self._failed[(name, version)] = signature
            self._metrics.load_failures.labels(name).inc()
            states[version] = VersionState(END, "UNKNOWN", str(err))
            return None
        seconds = time.monotonic() - started
        self._metrics.load_seconds.labels(name).observe(seconds)
        self._failed.pop((name, version), None)
        log.info(
            "serving: %s version %d available (loaded and warmed in %.2f s; %s)",
            name,
            version,
            seconds,
            warmed,
        )
        return servable

    def _labels(
        self, source: ServedModel, before: Mapping[str, int], available: Mapping[int, Servable]
    ) -> dict[str, int]:
        """The labels to publish: each as configured when its version is available; otherwise
        where it pointed before, if that version is still available (TF Serving refuses to
        point a label at a version that is not), else dropped."""
        labels = {}
        for label, version in sorted(source.labels.items()):
            if version in available:
                labels[label] = version
                note = f"{source.name} label {label} -> version {version}"
            elif before.get(label) in available:
                labels[label] = before[label]
                note = (
                    f"{source.name} label {label} stays on version {before[label]}: version "
                    f"{version} is not available"
                )
            else:
                note = (
                    f"{source.name} label {label} points to version {version}, which is not "
                    "available"
                )
            # Said once per change, not every poll.
            if self._label_notes.get((source.name, label)) != note:
                self._label_notes[(source.name, label)] = note
                level = logging.INFO if labels.get(label) == version else logging.WARNING
                log.log(level, "serving: %s", note)
        return labels


def _error_code_value(name: str) -> int:
    return {v: k for k, v in CODE_NAMES.items()}[name]
