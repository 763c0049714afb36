"""Crash-safe writes for everything serving reads: a reader (a polling model server) sees the
old file or the new one, never a part, and a rename survives a crash or a power cut.

Each write goes to a temporary name in the same folder, is flushed to disk, renamed over its
target (atomic within one file system), and then the folder itself is flushed so the rename is
on disk too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pipelines.core import storage
from pipelines.core.object_path import AnyPath, ObjectPath, as_path


def fsync_dir(folder: str | os.PathLike | ObjectPath) -> None:
    """Flushes a folder's entries (a rename or a removal in it) to disk (nothing to flush in a
    bucket: a store's write is durable when it returns)."""
    if isinstance(folder, ObjectPath) or storage.is_remote(os.fspath(folder)):
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str) -> None:
    """Flushes every file and folder under `root` to disk, so that a rename published after
    this never exposes a version whose bytes a power cut could still lose."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(folder)


def write_atomically(path: str | os.PathLike | ObjectPath, text: str) -> AnyPath:
    """Writes `text` to `path` so a reader sees the old file or the new one, never a part: a
    temporary file in the same directory, fsynced, renamed over `path`, then the directory
    fsynced so the rename survives a crash. In a bucket an object is replaced whole when its
    upload completes, which gives the same."""
    path = as_path(path)
    if isinstance(path, ObjectPath):
        path.write_text(text)
        return path
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; the server may run as another user
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path
