"""A path that may be an object in a store: `as_path` gives a `pathlib.Path` for a local path
and an `ObjectPath` for `gs://` or `s3://`, with the part of pathlib's API Conveyor uses.

So code written against `Path` (a run folder, the serving folder, the pipeline root) works
unchanged when the workdir, the input or the serving base is a bucket, and every byte of an
object goes through `pipelines.core.storage` (TensorFlow's and Beam's filesystems).

An `ObjectPath` has no `__fspath__` on purpose: builtin `open`, `os` and `shutil` refuse it
with a TypeError rather than read a local file named `gs:/bucket/...`. `str()` gives the URI,
which TFX, TensorFlow and Beam accept as a path.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pipelines.core import storage


class ObjectPath:
    """`gs://BUCKET/KEY` or `s3://BUCKET/KEY`, with pathlib's names for what a store can do.

    Folders on a store are prefixes: `is_dir` is true when objects lie under the prefix (or its
    marker, which `mkdir` writes), and removing the last object under a prefix removes it.
    """

    __slots__ = ("_uri",)

    def __init__(self, uri: str):
        location = storage.parse(uri)
        if not location.remote:
            raise ValueError(f"{uri!r} is a local path; use pathlib.Path")
        key = location.key.rstrip("/")
        self._uri = f"{location.scheme}://{location.bucket}" + (f"/{key}" if key else "")

    # -- names -------------------------------------------------------------------------------

    def __str__(self) -> str:
        return self._uri

    def __repr__(self) -> str:
        return f"ObjectPath({self._uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and other._uri == self._uri

    def __hash__(self) -> int:
        return hash(self._uri)

    def __lt__(self, other: ObjectPath) -> bool:
        return self._uri < other._uri

    def __truediv__(self, part: str | os.PathLike) -> ObjectPath:
        text = os.fspath(part)
        if storage.is_remote(text):
            return ObjectPath(text)
        return ObjectPath(self._uri + "/" + text.strip("/"))

    def joinpath(self, *parts: str | os.PathLike) -> ObjectPath:
        """This path with `parts` appended, as `/` does."""
        result = self
        for part in parts:
            result = result / part
        return result

    @property
    def _location(self) -> storage.Location:
        return storage.parse(self._uri)

    @property
    def scheme(self) -> str:
        """gs or s3."""
        return self._location.scheme

    @property
    def bucket(self) -> str:
        """The bucket's name."""
        return self._location.bucket

    @property
    def key(self) -> str:
        """The object's name inside the bucket ("" for the bucket itself)."""
        return self._location.key

    @property
    def name(self) -> str:
        """The last part of the key ("" for the bucket)."""
        return posixpath.basename(self.key)

    @property
    def stem(self) -> str:
        """`name` without its last suffix."""
        return Path(self.name).stem

    @property
    def suffix(self) -> str:
        """The last suffix of `name`, with its dot."""
        return Path(self.name).suffix

    @property
    def parts(self) -> tuple[str, ...]:
        """`scheme://bucket` and then each part of the key."""
        head = f"{self.scheme}://{self.bucket}"
        return (head, *[part for part in self.key.split("/") if part])

    @property
    def parent(self) -> ObjectPath:
        """The folder this object is in (the bucket is its own parent)."""
        key = posixpath.dirname(self.key)
        return ObjectPath(f"{self.scheme}://{self.bucket}" + (f"/{key}" if key else ""))

    @property
    def parents(self) -> list[ObjectPath]:
        """Every folder above this path, nearest first, up to the bucket."""
        result, current = [], self
        while current.key:
            current = current.parent
            result.append(current)
        return result

    def with_name(self, name: str) -> ObjectPath:
        """A sibling named `name`."""
        return self.parent / name

    def with_suffix(self, suffix: str) -> ObjectPath:
        """This path with its last suffix replaced."""
        return self.with_name(self.stem + suffix)

    def relative_to(self, other: str | os.PathLike | ObjectPath) -> Path:
        """This path relative to `other` (a folder above it), as a relative `Path`."""
        base = str(other).rstrip("/")
        if self._uri == base:
            return Path(".")
        if not self._uri.startswith(base + "/"):
            raise ValueError(f"{self._uri!r} is not under {base!r}")
        return Path(self._uri[len(base) + 1 :])

    def is_relative_to(self, other: str | os.PathLike | ObjectPath) -> bool:
        """Whether this path lies under `other` (or is it)."""
        try:
            self.relative_to(other)
        except ValueError:
            return False
        return True

    def as_posix(self) -> str:
        """The URI."""
        return self._uri

    def as_uri(self) -> str:
        """The URI."""
        return self._uri

    def is_absolute(self) -> bool:
        """A URI is always absolute."""
        return True

    def resolve(self, strict: bool = False) -> ObjectPath:
        """Itself: a URI has no links and no relative parts."""
        return self

    def absolute(self) -> ObjectPath:
        """Itself."""
        return self

    def expanduser(self) -> ObjectPath:
        """Itself."""
        return self

    # -- the store ---------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether an object, or a folder (a prefix with objects under it), is here."""
        return storage.exists(self._uri)

    def is_dir(self) -> bool:
        """Whether this is a folder: a prefix with objects under it, or its marker."""
        return storage.isdir(self._uri)

    def is_file(self) -> bool:
        """Whether an object has this exact name."""
        try:
            storage.stat(self._uri)
        except FileNotFoundError:
            return False
        return True

    def iterdir(self) -> Iterator[ObjectPath]:
        """What is directly in this folder (FileNotFoundError when nothing is)."""
        if not self.is_dir():
            raise FileNotFoundError(2, "no such folder", self._uri)
        for name in storage.listdir(self._uri):
            yield self / name

    def glob(self, pattern: str) -> Iterator[ObjectPath]:
        """The objects and folders under this one whose path relative to it matches `pattern`
        (`*`, `?` and `[...]` within a part; `**` for any number of parts)."""
        if "**" in pattern:
            yield from self._walk_matching(pattern)
            return
        found: set[ObjectPath] = set()
        depth = len([part for part in pattern.split("/") if part])
        for uri in storage.glob(self._uri + "/" + pattern):
            found.add(ObjectPath(uri))
        # A store lists objects only; a folder whose path matches is the prefix of one.
        prefix_pattern = pattern.rstrip("/")
        for uri in storage.glob(self._uri + "/" + prefix_pattern + "/*"):
            relative = ObjectPath(uri).relative_to(self).parts[:depth]
            found.add(self.joinpath(*relative))
        yield from sorted(found)

    def rglob(self, pattern: str) -> Iterator[ObjectPath]:
        """`glob("**/" + pattern)`."""
        yield from self.glob("**/" + pattern)

    def _walk_matching(self, pattern: str) -> Iterator[ObjectPath]:
        found: set[ObjectPath] = set()
        for uri in storage.glob(self._uri + "/**"):
            relative = ObjectPath(uri).relative_to(self)
            parts = relative.parts
            for depth in range(1, len(parts) + 1):
                candidate = "/".join(parts[:depth])
                if _match(candidate, pattern):
                    found.add(self.joinpath(*parts[:depth]))
        yield from sorted(found)

    def mkdir(self, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        """Makes the folder (a marker object); a store needs no parents, so `parents` is moot."""
        if not exist_ok and self.is_dir():
            raise FileExistsError(17, "folder exists", self._uri)
        storage.makedirs(self._uri)

    def open(self, mode: str = "r", encoding: str | None = None, **_: object) -> IO:
        """Opens the object for streaming (r, rb, w, wb)."""
        return storage.open(self._uri, mode, encoding=encoding)

    def read_bytes(self) -> bytes:
        """The whole object."""
        return storage.read_bytes(self._uri)

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        """The whole object, decoded."""
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")

    def write_bytes(self, data: bytes) -> int:
        """Writes the whole object; it appears only when complete."""
        storage.write_bytes(self._uri, data)
        return len(data)

    def write_text(self, data: str, encoding: str | None = None, **_: object) -> int:
        """Writes the whole object as text."""
        return self.write_bytes(data.encode(encoding or "utf-8"))

    def unlink(self, missing_ok: bool = False) -> None:
        """Removes the object."""
        try:
            storage.remove(self._uri)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def rmdir(self) -> None:
        """Removes an empty folder's marker."""
        storage.remove_tree(self._uri)

    def stat(self) -> storage.ObjectStat:
        """The object's metadata: `size`, and a `version` that changes with every write."""
        return storage.stat(self._uri)

    def touch(self, exist_ok: bool = True) -> None:
        """Writes an empty object unless one is there."""
        if self.exists():
            if not exist_ok:
                raise FileExistsError(17, "object exists", self._uri)
            return
        self.write_bytes(b"")


def _match(path: str, pattern: str) -> bool:
    """Whether `path` matches `pattern`, part by part, `**` matching any number of parts."""
    path_parts, pattern_parts = path.split("/"), pattern.split("/")

    def match(i: int, j: int) -> bool:
        if j == len(pattern_parts):
            return i == len(path_parts)
        if pattern_parts[j] == "**":
            return any(match(k, j + 1) for k in range(i, len(path_parts) + 1))
        return (
            i < len(path_parts)
            and fnmatch.fnmatchcase(path_parts[i], pattern_parts[j])
            and match(i + 1, j + 1)
        )

    return match(0, 0)


AnyPath = Path | ObjectPath


def as_path(path: str | os.PathLike | ObjectPath) -> AnyPath:
    """`path` as an `ObjectPath` when it is a gs:// or s3:// URI, else as a `pathlib.Path`."""
    if isinstance(path, (Path, ObjectPath)):
        return path
    text = os.fspath(path)
    return ObjectPath(text) if storage.is_remote(text) else Path(text)


def under(base: AnyPath, relative_or_uri: str) -> AnyPath:
    """`relative_or_uri` under `base` when relative; a URI (or an absolute path) stands alone."""
    if storage.is_remote(relative_or_uri):
        return ObjectPath(relative_or_uri)
    if os.path.isabs(relative_or_uri):
        return Path(relative_or_uri)  # a local folder, even under a workdir in a bucket
    return base / relative_or_uri


def copy_file(source: AnyPath, target: AnyPath) -> None:
    """Copies one file between any two of local disk, gs:// and s3://."""
    storage.copy(str(source), str(target))


__all__ = ["AnyPath", "ObjectPath", "as_path", "copy_file", "under"]
