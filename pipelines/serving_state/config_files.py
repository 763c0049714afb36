"""TF Serving's config files for a pipeline's pushes: models.config, monitoring.config and
batching.config, built with TF Serving's own protos, read back and checked as the server checks
them, and written in text proto format. The only writer of models.config is `update_entry`.

`tensorflow_model_server` reads these three files through `--model_config_file`,
`--monitoring_config_file` and `--batching_parameters_file`. models.config is a
`ModelServerConfig` from the `tensorflow-serving-api` wheel. That wheel ships no Python module
for `MonitoringConfig` nor `BatchingParameters`, so this module declares those two messages
itself, with the package, message names, field names and numbers of TF Serving's
`tensorflow_serving/config/monitoring_config.proto` and
`tensorflow_serving/servables/tensorflow/session_bundle_config.proto`: a file written here is
one the real server parses.

`read_models_config` refuses what the model server would refuse, checked the way TF Serving's
`ServerCore::ReloadConfig` (`tensorflow_serving/model_servers/server_core.cc`) checks it:
`ValidateModelConfigList` (one entry per model name; base paths absolute paths or URIs),
`GetPlatform` (a platform is set), `CreateStoragePathRoutes` (the platform is one the server
has: `tensorflow`) and `UpdateModelVersionLabelMap` (a label must point to a version the
server loads). This module imports no TensorFlow.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from pipelines.core.object_path import AnyPath, ObjectPath, as_path
from pipelines.serving_state.durable_files import fsync_dir, write_atomically

if TYPE_CHECKING:  # only for annotations: this module needs no spec model at run time
    from google.protobuf.message import Message

    from pipelines.spec.models import BatchingSpec, PushSpec

MODELS_CONFIG = "models.config"
MONITORING_CONFIG = "monitoring.config"
BATCHING_CONFIG = "batching.config"

# The only platform the stock `tensorflow_model_server` routes (its platform_config_map).
TENSORFLOW_PLATFORM = "tensorflow"
POLICIES = ("latest", "all", "labelled")


class ServingConfigError(ValueError):
    """A TF Serving config file the model server would refuse (or that cannot be read)."""


@dataclass(frozen=True)
class ServedModel:
    """One model in models.config: its name, base path (absolute path or URI), which versions
    the server loads, and the version labels.

    `policy` is `latest` (the newest version), `all`, or `labelled` (TF Serving's `specific`:
    the versions in `versions` plus every version a label points to; after construction
    `versions` holds them all). Frozen, but not hashable (labels is a dict)."""

    name: str
    base_path: str
    policy: str = "labelled"
    versions: tuple[int, ...] = ()
    labels: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Normalises the fields so two models that load the same thing compare equal: versions
        become a sorted tuple that, for `labelled`, includes every labelled version; labels
        become a plain dict (a copy)."""
        if self.policy not in POLICIES:
            raise ValueError(f"policy {self.policy!r} is not one of {', '.join(POLICIES)}")
        labels = {str(label): int(version) for label, version in self.labels.items()}
        versions = {int(version) for version in self.versions}
        if versions and self.policy != "labelled":
            raise ValueError(
                f"versions are listed only with policy `labelled`, not {self.policy!r}"
            )
        if self.policy == "labelled":
            versions |= set(labels.values())
        object.__setattr__(self, "versions", tuple(sorted(versions)))
        object.__setattr__(self, "labels", labels)


# ----------------------------------------------------------------------------- models.config


def models_config(models: Sequence[ServedModel]) -> model_server_config_pb2.ModelServerConfig:
    """The `ModelServerConfig` serving `models` (one `model_config_list` entry each, platform
    `tensorflow`), refusing with `ServingConfigError` what TF Serving would refuse."""
    config = model_server_config_pb2.ModelServerConfig()
    # An empty list still selects model_config_list, which the server accepts and can later
    # extend; an unset oneof would be "no config" instead.
    config.model_config_list.SetInParent()
    for model in models:
        entry = config.model_config_list.config.add()
        entry.name = model.name
        entry.base_path = model.base_path
        entry.model_platform = TENSORFLOW_PLATFORM
        policy = entry.model_version_policy
        if model.policy == "latest":
            policy.latest.num_versions = 1
        elif model.policy == "all":
            policy.all.SetInParent()
        else:
            policy.specific.versions.extend(model.versions)
        for label, version in sorted(model.labels.items()):
            entry.version_labels[label] = version
    problems = config_problems(config)
    if problems:
        raise ServingConfigError(
            f"models.config for {', '.join(m.name for m in models)} would be refused by TF "
            f"Serving: {'; '.join(problems)}."
        )
    return config


def config_problems(config: model_server_config_pb2.ModelServerConfig) -> list[str]:
    """What TF Serving (with its default flags) would refuse in `config`, one sentence each;
    empty when the server accepts it.

    The checks follow `ServerCore::ReloadConfig`. A label may only name a version the server
    loads: with `specific` that is decidable here; with `latest` and `all` it depends on the
    base path's contents and is left to the server. Conveyor numbers versions from 1, so a
    version or label value below 1 is refused too."""
    if config.WhichOneof("config") == "custom_model_config":
        return ["custom_model_config is not supported: use model_config_list"]
    problems = []
    seen: set[str] = set()
    for index, model in enumerate(config.model_config_list.config):
        who = f"model {model.name!r}" if model.name else f"config entry {index + 1}"
        if not model.name:
            problems.append(f"{who} has no name")
        elif model.name in seen:
            problems.append(f"{who} is listed more than once")
        seen.add(model.name)
        if not model.base_path:
            problems.append(f"{who} has no base_path")
        elif _is_relative_path(model.base_path):
            problems.append(
                f"{who} has base_path {model.base_path!r}, which is relative: the server "
                "needs an absolute path or a URI"
            )
        platform = model.model_platform
        if model.model_type and platform:
            problems.append(f"{who} sets both model_type (deprecated) and model_platform")
        elif not model.model_type and not platform:
            problems.append(f"{who} sets no model_platform")
        elif platform and platform != TENSORFLOW_PLATFORM:
            problems.append(
                f"{who} asks for platform {platform!r}; the model server has only "
                f"{TENSORFLOW_PLATFORM!r}"
            )
        problems.extend(_version_problems(who, model))
    return problems


def _version_problems(who: str, model: model_server_config_pb2.ModelConfig) -> list[str]:
    problems = []
    policy = model.model_version_policy
    chosen = policy.WhichOneof("policy_choice")
    specific = sorted(policy.specific.versions) if chosen == "specific" else None
    if specific is not None:
        if not specific:
            problems.append(f"{who} has a `specific` version policy listing no versions")
        bad = [v for v in specific if v < 1]
        if bad:
            problems.append(f"{who} lists version(s) {bad}; versions are numbered from 1")
    for label, version in sorted(model.version_labels.items()):
        if not label:
            problems.append(f"{who} has a version label with an empty name")
        if version < 1:
            problems.append(f"{who} labels version {version} {label!r}; versions start at 1")
        elif specific is not None and version not in specific:
            problems.append(
                f"{who} labels version {version} {label!r}, but its `specific` policy loads "
                f"only {specific}: TF Serving refuses a label on a version it has not loaded "
                "(unless --allow_version_labels_for_unavailable_models)"
            )
    return problems


def _is_relative_path(uri: str) -> bool:
    # TF Serving's UriIsRelativePath: no scheme, no host, and a path not starting with "/".
    return "://" not in uri and not uri.startswith("/")


def read_models_config(path: str | os.PathLike) -> model_server_config_pb2.ModelServerConfig:
    """Parses the models.config at `path`; `ServingConfigError` names the file and the
    problem when it cannot be read, does not parse, or TF Serving would refuse it."""
    path = as_path(path)
    config = model_server_config_pb2.ModelServerConfig()
    _parse_text(path, config)
    problems = config_problems(config)
    if problems:
        raise ServingConfigError(
            f"{path}: TF Serving would refuse this models.config: {'; '.join(problems)}."
        )
    return config


def served_models(path: str | os.PathLike) -> list[ServedModel]:
    """The models in the models.config at `path`, as `ServedModel`s (the inverse of
    `models_config`): `specific` reads back as `labelled` with its versions; no policy is
    TF Serving's default, `latest`."""
    config = read_models_config(path)
    models = []
    for entry in config.model_config_list.config:
        policy = entry.model_version_policy
        chosen = policy.WhichOneof("policy_choice")
        if chosen == "specific":
            name, versions = "labelled", tuple(policy.specific.versions)
        elif chosen == "all":
            name, versions = "all", ()
        else:
            name, versions = "latest", ()
        models.append(
            ServedModel(
                name=entry.name,
                base_path=entry.base_path,
                policy=name,
                versions=versions,
                labels=dict(entry.version_labels),
            )
        )
    return models


# ----------------------------------------------------- monitoring.config and batching.config

# Declared here because the tensorflow-serving-api wheel ships no Python module for them. Same
# package, messages, fields and numbers as TF Serving's (proto3):
#   tensorflow_serving/config/monitoring_config.proto:
#     message PrometheusConfig { bool enable = 1; string path = 2; }
#     message MonitoringConfig { PrometheusConfig prometheus_config = 1; }
#   tensorflow_serving/servables/tensorflow/session_bundle_config.proto (BatchingParameters
#   only; SessionBundleConfig itself is not a file the server reads):
#     google.protobuf.Int64Value max_batch_size = 1, batch_timeout_micros = 2,
#     max_enqueued_batches = 3, num_batch_threads = 4;
#     google.protobuf.StringValue thread_pool_name = 5;
#     repeated int64 allowed_batch_sizes = 6; bool pad_variable_length_inputs = 7;
_PACKAGE = "tensorflow.serving"
_BATCHING_FIELDS = (
    ("max_batch_size", 1, ".google.protobuf.Int64Value"),
    ("batch_timeout_micros", 2, ".google.protobuf.Int64Value"),
    ("max_enqueued_batches", 3, ".google.protobuf.Int64Value"),
    ("num_batch_threads", 4, ".google.protobuf.Int64Value"),
    ("thread_pool_name", 5, ".google.protobuf.StringValue"),
)


@functools.cache
def _serving_messages() -> dict[str, type]:
    """Builds the two files in a private descriptor pool (once, on first use), so they never
    clash with a real TF Serving module that some other package might register."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    fdp = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(wrappers_pb2.DESCRIPTOR.serialized_pb))

    monitoring = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/config/monitoring_config.proto",
        package=_PACKAGE,
        syntax="proto3",
    )
    prometheus = monitoring.message_type.add(name="PrometheusConfig")
    prometheus.field.add(name="enable", number=1, type=fdp.TYPE_BOOL, label=fdp.LABEL_OPTIONAL)
    prometheus.field.add(name="path", number=2, type=fdp.TYPE_STRING, label=fdp.LABEL_OPTIONAL)
    monitoring.message_type.add(name="MonitoringConfig").field.add(
        name="prometheus_config",
        number=1,
        type=fdp.TYPE_MESSAGE,
        type_name=f".{_PACKAGE}.PrometheusConfig",
        label=fdp.LABEL_OPTIONAL,
    )
    pool.Add(monitoring)

    session = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/servables/tensorflow/session_bundle_config.proto",
        package=_PACKAGE,
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    batching = session.message_type.add(name="BatchingParameters")
    for name, number, type_name in _BATCHING_FIELDS:
        batching.field.add(
            name=name,
            number=number,
            type=fdp.TYPE_MESSAGE,
            type_name=type_name,
            label=fdp.LABEL_OPTIONAL,
        )
    batching.field.add(
        name="allowed_batch_sizes", number=6, type=fdp.TYPE_INT64, label=fdp.LABEL_REPEATED
    )
    batching.field.add(
        name="pad_variable_length_inputs", number=7, type=fdp.TYPE_BOOL, label=fdp.LABEL_OPTIONAL
    )
    pool.Add(session)

    def message_class(full_name: str) -> type:
        descriptor = pool.FindMessageTypeByName(full_name)
        if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.21
            return message_factory.GetMessageClass(descriptor)
        return message_factory.MessageFactory(pool).GetPrototype(descriptor)

    return {
        "MonitoringConfig": message_class(f"{_PACKAGE}.MonitoringConfig"),
        "BatchingParameters": message_class(f"{_PACKAGE}.BatchingParameters"),
    }


def monitoring_config(metrics_path: str = "/monitoring/prometheus/metrics") -> Message:
    """TF Serving's `MonitoringConfig`: Prometheus metrics enabled on `metrics_path`."""
    config = _serving_messages()["MonitoringConfig"]()
    config.prometheus_config.enable = True
    config.prometheus_config.path = metrics_path
    return config


def batching_parameters(batching: BatchingSpec) -> Message:
    """TF Serving's `BatchingParameters` for the spec's `push.batching`."""
    parameters = _serving_messages()["BatchingParameters"]()
    parameters.max_batch_size.value = batching.max_batch_size
    parameters.batch_timeout_micros.value = batching.batch_timeout_micros
    parameters.max_enqueued_batches.value = batching.max_enqueued_batches
    parameters.num_batch_threads.value = batching.num_batch_threads
    return parameters


def read_monitoring_config(path: str | os.PathLike) -> Message:
    """Parses a monitoring.config; `ServingConfigError` names the file when it does not."""
    return _parse_text(as_path(path), _serving_messages()["MonitoringConfig"]())


def read_batching_config(path: str | os.PathLike) -> Message:
    """Parses a batching.config; `ServingConfigError` names the file when it does not, or when
    the server would refuse it (TF Serving requires `num_batch_threads` >= 1 and
    `allowed_batch_sizes`, if any, increasing and ending at `max_batch_size`)."""
    path = as_path(path)
    parameters = _parse_text(path, _serving_messages()["BatchingParameters"]())
    problems = []
    if parameters.HasField("num_batch_threads") and parameters.num_batch_threads.value < 1:
        problems.append("num_batch_threads must be at least 1")
    if parameters.HasField("max_batch_size") and parameters.max_batch_size.value < 1:
        problems.append("max_batch_size must be at least 1")
    sizes = list(parameters.allowed_batch_sizes)
    if sizes:
        if sizes != sorted(set(sizes)):
            problems.append(f"allowed_batch_sizes {sizes} are not increasing")
        if parameters.HasField("max_batch_size") and sizes[-1] != parameters.max_batch_size.value:
            problems.append("the last of allowed_batch_sizes must equal max_batch_size")
    if problems:
        raise ServingConfigError(
            f"{path}: TF Serving would refuse these batching parameters: {'; '.join(problems)}."
        )
    return parameters


# ----------------------------------------------------------------------------- writing


def serving_config_texts(models: Sequence[ServedModel], push_spec: PushSpec) -> dict[str, str]:
    """File name -> text proto for the configs `push_spec` asks for: models.config,
    monitoring.config, and batching.config when `push.batching` is set."""
    texts = {
        MODELS_CONFIG: text_format.MessageToString(models_config(models)),
        MONITORING_CONFIG: text_format.MessageToString(
            monitoring_config(push_spec.monitoring_path)
        ),
    }
    if push_spec.batching is not None:
        texts[BATCHING_CONFIG] = text_format.MessageToString(
            batching_parameters(push_spec.batching)
        )
    return texts


def models_config_path(config_dir: str | os.PathLike) -> Path:
    """Where the models.config of a config folder is (what a model server is pointed at)."""
    return as_path(config_dir) / MODELS_CONFIG


def current_entry(config_dir: str | os.PathLike, model_name: str) -> ServedModel | None:
    """This model's entry in models.config, or None when there is no file or no entry.

    Raises:
      ServingConfigError: models.config exists but TF Serving would refuse it.
    """
    path = models_config_path(config_dir)
    if not path.exists():
        return None
    return next((m for m in served_models(path) if m.name == model_name), None)


def update_entry(
    config_dir: str | os.PathLike,
    push: PushSpec,
    change: Callable[[ServedModel | None], ServedModel | None],
) -> tuple[ServedModel | None, ServedModel | None]:
    """Replaces this model's models.config entry with `change(current entry)`, keeping every
    other model's, in one atomic replace under the config folder's lock (pipelines sharing
    the folder push independently). Returns (before, after); nothing is written when `change`
    returns the entry unchanged or None. The room's one writer of models.config."""
    from filelock import FileLock

    config_dir = as_path(config_dir)
    config_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(_config_lock(config_dir), mode=0o600):
        path = config_dir / MODELS_CONFIG
        models = served_models(path) if path.exists() else []
        before = next((m for m in models if m.name == push.model_name), None)
        after = change(before)
        if after is None or after == before:
            return before, before
        if before is None:
            models.append(after)
        else:
            models = [after if m.name == push.model_name else m for m in models]
        write_serving_configs(config_dir, models, push)
        return before, after


def _config_lock(config_dir: AnyPath) -> Path:
    """The lock file of a config folder: in it on a local disk; for a folder in a bucket (no
    file locks there), a local file named after its URI, which orders the writers on this
    machine (runs on several machines are ordered by the run lock, docs/storage.md)."""
    if not isinstance(config_dir, ObjectPath):
        return config_dir / f".{MODELS_CONFIG}.lock"
    name = hashlib.sha256(str(config_dir).encode()).hexdigest()[:32]
    folder = Path(tempfile.gettempdir(), "conveyor-locks")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.{MODELS_CONFIG}.lock"


def write_serving_configs(
    config_dir: str | os.PathLike, models: Sequence[ServedModel], push_spec: PushSpec
) -> list[Path]:
    """Writes models.config, monitoring.config and (with `push.batching`) batching.config into
    `config_dir`, each atomically, and returns their paths. A batching.config left from when
    batching was on is removed, so the directory always says what the spec says.

    Nothing is written when models.config would be refused (`ServingConfigError`)."""
    config_dir = as_path(config_dir)
    texts = serving_config_texts(models, push_spec)
    config_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts.items():
        written.append(write_atomically(config_dir / name, text))
    stale = config_dir / BATCHING_CONFIG
    if BATCHING_CONFIG not in texts and stale.exists():
        stale.unlink()
        fsync_dir(config_dir)
    return written


def _parse_text(path: Path, message: Message) -> Message:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ServingConfigError(f"{path}: cannot read it ({error}).") from None
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        # ParseError reads "line:column : what"; the server's own parser stops at the same spot.
        raise ServingConfigError(
            f"{path}: not a valid {message.DESCRIPTOR.name} in text proto format: {error}."
        ) from None
    return message
