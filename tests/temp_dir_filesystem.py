"""A Beam filesystem plugin for tests: the scheme `conveyortest://`, backed by a local folder.

`conveyortest://bucket/key` is the file `<root>/bucket/key`, where the root is the folder named
by the environment variable CONVEYOR_TEST_FS_ROOT (inherited by the worker processes of Beam's
multi-processing DirectRunner, which import this module through `--beam_plugins`). It is a real
Beam FileSystem, registered as every plugin is (a subclass, found by its scheme), so code that
reads `conveyortest://` paths through `apache_beam.io.filesystems.FileSystems` works, and code
that hands such a path to the local filesystem (os, open, pyarrow's memory map) fails.
"""

from __future__ import annotations

import os
import posixpath

from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.localfilesystem import LocalFileSystem

SCHEME = "conveyortest"
ROOT_VARIABLE = "CONVEYOR_TEST_FS_ROOT"
_PREFIX = f"{SCHEME}://"


class TempDirFileSystem(LocalFileSystem):
    """`conveyortest://` paths, translated to files under $CONVEYOR_TEST_FS_ROOT."""

    @classmethod
    def scheme(cls):
        """The URI scheme Beam dispatches on."""
        return SCHEME

    @staticmethod
    def to_local(uri: str) -> str:
        """The local file behind `uri`."""
        if not uri.startswith(_PREFIX):
            raise ValueError(f"not a {SCHEME} path: {uri}")
        return os.path.join(os.environ[ROOT_VARIABLE], uri[len(_PREFIX) :])

    @staticmethod
    def to_uri(local: str) -> str:
        """The URI of a local file under the root."""
        return _PREFIX + os.path.relpath(local, os.environ[ROOT_VARIABLE])

    def join(self, basepath, *paths):
        """Joins as URIs do: with `/`."""
        return posixpath.join(basepath, *paths)

    def split(self, path):
        """(parent URI, last component)."""
        return posixpath.split(path)

    def _url_dirname(self, url_or_path):
        return posixpath.dirname(url_or_path)

    def mkdirs(self, path):
        """Creates the folder behind `path`."""
        super().mkdirs(self.to_local(path))

    def _list(self, dir_or_prefix):
        # LocalFileSystem's own listing would ask this class whether its local folder exists.
        for folder, _, names in os.walk(self.to_local(dir_or_prefix)):
            for name in names:
                local = os.path.join(folder, name)
                yield FileMetadata(
                    self.to_uri(local), os.path.getsize(local), os.path.getmtime(local)
                )

    def create(
        self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO
    ):
        """Writes the file behind `path`."""
        return super().create(self.to_local(path), mime_type, compression_type)

    def open(
        self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO
    ):
        """Reads the file behind `path`."""
        return super().open(self.to_local(path), mime_type, compression_type)

    def exists(self, path):
        """Whether the file behind `path` exists."""
        return super().exists(self.to_local(path))

    def size(self, path):
        """The size of the file behind `path`."""
        return os.path.getsize(self.to_local(path))

    def last_updated(self, path):
        """When the file behind `path` last changed."""
        return os.path.getmtime(self.to_local(path))

    def checksum(self, path):
        """The size of the file behind `path`, as the local filesystem's checksum is."""
        return str(self.size(path))

    def metadata(self, path):
        """The metadata of the file behind `path`, named by its URI."""
        local = self.to_local(path)
        return FileMetadata(path, os.path.getsize(local), os.path.getmtime(local))

    def delete(self, paths):
        """Deletes the files behind `paths`."""
        super().delete([self.to_local(path) for path in paths])
