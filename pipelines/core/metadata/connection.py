"""Opening the ML Metadata store a profile's `runtime.metadata` describes.

The settings are read duck-typed (`kind`, `host`, `port`, `database`, `user`, `password_env`):
this floor sits under `pipelines.spec` and never imports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

if TYPE_CHECKING:  # only for annotations: the spec's layer sits above this one
    from pipelines.spec.models import PipelineSpec

SQLITE = "sqlite"  # the value of pipelines.spec.models.MetadataKind.SQLITE (a str enum)


class MetadataConfigError(ValueError):
    """The profile's metadata settings cannot give a connection; the message names the key."""


def metadata_password(spec: PipelineSpec) -> str:
    """The MySQL password from the environment variable `runtime.metadata.password_env` names.

    The one place the password is read: it is never stored in a spec, a profile or a file
    Conveyor writes.
    """
    variable = spec.runtime.metadata.password_env
    if not variable:
        return ""
    if variable not in os.environ:
        raise MetadataConfigError(
            f"runtime.metadata.password_env: the environment variable {variable!r} is not set "
            "(it holds the metadata database's password)."
        )
    return os.environ[variable]


def connection_config(
    spec: PipelineSpec, metadata_path: Path
) -> metadata_store_pb2.ConnectionConfig:
    """The ML Metadata connection the profile's `runtime.metadata` describes: what TFX's
    runners and Conveyor's own readers both open. A SQLite store's folder is created."""
    config = metadata_store_pb2.ConnectionConfig()
    metadata = spec.runtime.metadata
    if metadata.kind == SQLITE:
        metadata_path.parent.mkdir(parents=True, exist_ok=True)
        config.sqlite.filename_uri = str(metadata_path)
        config.sqlite.connection_mode = (
            metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
        )
    else:
        config.mysql.host = str(metadata.host)
        config.mysql.port = int(metadata.port or 3306)
        config.mysql.database = str(metadata.database)
        config.mysql.user = str(metadata.user)
        config.mysql.password = metadata_password(spec)
    return config


def open_store(spec: PipelineSpec, metadata_path: Path) -> metadata_store.MetadataStore | None:
    """The run's metadata store, or None when a local SQLite store does not exist yet."""
    if spec.runtime.metadata.kind == SQLITE and not metadata_path.exists():
        return None
    return metadata_store.MetadataStore(connection_config(spec, metadata_path))
