"""How the Arrow CSV reader reaches its input: Apache Beam's FileSystems, whatever the scheme.

A distributed runner's data lives on `gs://`, `s3://`, `hdfs://` or another filesystem Beam has
registered (TFX's CsvExampleGen reads through the same registry, with Beam's ReadFromText). So
every input file is matched, sized and read here through `apache_beam.io.filesystems`: matching
a pattern lists the files, planning the work units asks each file's size, and a work unit's
byte range is opened, sought to and read. Files are opened uncompressed: the ranges
are byte offsets of the file as stored.

One exception, for speed: a local path's range is memory-mapped by pyarrow rather than read
through a Python file object, so its bytes reach the parser without a copy. It is the same file
Beam's LocalFileSystem would open.

Outputs go under TFX's pipeline root, which TFX writes through TensorFlow's filesystems
(tf.io.gfile): so do the reader's TFRecords and, through `create_output`, its Parquet copy.
Beam and TensorFlow are imported when a function runs, not with this module.
"""

from __future__ import annotations

import io
from typing import IO


def is_local(path: str) -> bool:
    """Whether `path` is on this machine's filesystem: no `scheme://` Beam would dispatch on."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.get_scheme(path) is None


def join(base: str, *parts: str) -> str:
    """`parts` under `base`, joined as `base`'s filesystem joins paths."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.join(base, *parts)


def match(pattern: str) -> list[tuple[str, int]]:
    """The files matching `pattern` (Beam's glob: `*` stays within a folder, `**` does not),
    as (path, size in bytes), sorted by path so every run reads one order."""
    from apache_beam.io.filesystems import FileSystems

    (result,) = FileSystems.match([pattern])
    return sorted((meta.path, meta.size_in_bytes) for meta in result.metadata_list)


def size(path: str) -> int:
    """The size of the file `path`, in bytes."""
    matched = match(path)
    if not matched:
        raise FileNotFoundError(f"{path}: no such file")
    return matched[0][1]


def open_bytes(path: str) -> IO[bytes]:
    """`path` opened for reading its bytes as stored (no decompression), seekable."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


class _OutputFile(io.RawIOBase):
    """A tf.io.gfile.GFile being written, as the Python file object pyarrow writes to."""

    def __init__(self, path: str):
        import tensorflow as tf

        super().__init__()
        self._file = tf.io.gfile.GFile(path, "wb")

    def writable(self) -> bool:
        """An output file is written, never read."""
        return True

    def write(self, data) -> int:
        """Appends `data`; returns how many bytes."""
        self._file.write(bytes(data))
        return len(data)

    def tell(self) -> int:
        """Bytes written so far."""
        return self._file.tell()

    def close(self) -> None:
        """Flushes and closes the file: only then is it complete on a remote filesystem."""
        if not self.closed:
            self._file.close()
        super().close()


def create_output(path: str):
    """Where pyarrow writes the output file `path`: the path itself when local (pyarrow writes
    it natively), else a file object over tf.io.gfile, which writes any filesystem TensorFlow
    knows, as TFX writes its artifacts under the pipeline root."""
    return path if is_local(path) else _OutputFile(path)


class _Range(io.RawIOBase):
    """Bytes [start, end) of an open file, as a file of their own that ends at `end`."""

    def __init__(self, handle: IO[bytes], start: int, end: int):
        super().__init__()
        handle.seek(start)
        self._handle, self._left = handle, end - start

    def readable(self) -> bool:
        """A range is read, never written."""
        return True

    def readinto(self, buffer) -> int:
        """Fills `buffer` from the range; 0 at its end."""
        wanted = min(len(buffer), self._left)
        if wanted <= 0:
            return 0
        data = self._handle.read(wanted)
        buffer[: len(data)] = data
        self._left -= len(data)
        return len(data)

    def close(self) -> None:
        """Closes the file the range is of."""
        if not self.closed:
            self._handle.close()
        super().close()


def open_range(path: str, start: int, end: int):
    """Bytes [start, end) of `path`, for pyarrow's CSV reader: a memory-mapped buffer for a
    local file (no copy), else a stream through Beam's filesystem, read as the parser asks."""
    import pyarrow as pa

    if is_local(path):
        source = pa.memory_map(path)
        source.seek(start)
        return pa.BufferReader(source.read_buffer(end - start))
    return io.BufferedReader(_Range(open_bytes(path), start, end), buffer_size=1 << 20)
