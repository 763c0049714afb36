"""Files that may live in an object store: the one place Conveyor touches a path that may be
`gs://BUCKET/PATH` or `s3://BUCKET/PATH` rather than a local path.

Local paths go through Python's own `os`, `open` and `shutil`, exactly as before: a local
write is atomic (a temporary file renamed over its target) and nothing here imports TensorFlow
for them, so `conveyor validate` stays fast. URIs go through the filesystems TFX and Beam read
and write with, so what Conveyor writes is what a component reads:

- `tf.io.gfile` (TFX's `fileio` is built on it) for reading, writing, listing and copying:
  gs:// through tensorflow-io-gcs-filesystem (with `TF_USE_MODULAR_FILESYSTEM=1`, the plugin that
  honours an emulator's endpoint), s3:// through tensorflow-io's S3 plugin;
- the stores' own clients (google-cloud-storage and boto3, which Beam's filesystems are built
  on) for what the store does best by itself, with a bounded number of retries so that a store
  gone away fails the caller within seconds: matching a pattern (one listing of the prefix,
  where TensorFlow's glob lists folder by folder), a copy inside a store (made by the store,
  no bytes through this process), and `stat` (the object's generation, CRC32C, MD5 or ETag,
  which neither TensorFlow nor Beam's `FileSystems` exposes).

`configure` puts what those libraries need (endpoints, region, addressing, caches) in the
environment of this process and of every process it starts, Beam's workers included.
Credentials are never set here: each library finds its own in the environment (for a GCS
emulator, which checks none, google-auth is given a placeholder; see `configure`).

TensorFlow, Beam and the clients are imported inside functions, only when a URI is used.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import functools
import glob as local_glob
import os
import re
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator, MutableMapping
from typing import IO, Any, Protocol

SCHEMES = ("gs", "s3")
DOCS = "docs/storage.md"

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//?)(.*)$", re.DOTALL)
# Bucket names as the stores accept them (lower case; GCS also allows `_`, and dotted names up
# to 222 characters made of parts of at most 63).
_BUCKETS = {
    "gs": re.compile(r"^(?=.{3,222}$)[a-z0-9][a-z0-9._-]*[a-z0-9]$"),
    "s3": re.compile(r"^(?=.{3,63}$)[a-z0-9][a-z0-9.-]*[a-z0-9]$"),
}
_BUCKET_RULES = {
    "gs": "3 to 63 characters (222 with dots) of lower-case letters, digits, '-', '_' and '.', "
    "starting and ending with a letter or digit",
    "s3": "3 to 63 characters of lower-case letters, digits, '-' and '.', starting and ending "
    "with a letter or digit",
}


class StorageError(ValueError):
    """A path or URI Conveyor cannot use, or an object store that failed; the message is one
    paragraph that names the key or the object."""


class StoreFailed(OSError):
    """An object store did not answer, or answered with an error, for one object or listing
    (not a missing object: FileNotFoundError); the message names it. An OSError, as a local
    disk's failures are, so callers that handle one handle both."""


@dataclasses.dataclass(frozen=True)
class Location:
    """A checked path: `scheme` is "" for a local path, else "gs" or "s3"."""

    scheme: str
    bucket: str
    key: str  # the object's name inside the bucket ("" for the bucket itself)

    @property
    def remote(self) -> bool:
        """Whether this is an object in a store rather than a local path."""
        return bool(self.scheme)


def parse(path: str | os.PathLike, key: str = "path") -> Location:
    """Checks `path` and splits a URI into scheme, bucket and object name.

    Args:
      path: a local path, `gs://BUCKET/PATH` or `s3://BUCKET/PATH`.
      key: what names the value for the person who gave it (a spec key such as
        `push.base_dir`), quoted in the error.

    Raises:
      StorageError: an unsupported scheme (`hdfs://`, `file://`...) or a malformed URI (no
        bucket, a bucket name the store refuses, `gs:/bucket` with one slash).
    """
    text = os.fspath(path)
    where = f"{key}: " if key else ""  # "" for a validator, which reports the key itself
    match = _URI.match(text)
    if not match or len(match.group(1)) == 1:  # no scheme, or a drive letter (C:/...)
        return Location("", "", text)
    scheme, slashes, rest = match.group(1), match.group(2), match.group(3)
    if scheme.lower() in SCHEMES and scheme not in SCHEMES:
        raise StorageError(
            f"{where}{text!r}: write the scheme in lower case, {scheme.lower()}://, as the "
            f"stores' libraries read it ({DOCS})."
        )
    if scheme not in SCHEMES:
        raise StorageError(
            f"{where}{text!r} names the scheme {scheme}://, which Conveyor does not read or "
            "write: use a local path, gs://BUCKET/PATH or s3://BUCKET/PATH "
            f"({DOCS})."
        )
    shape = f"{scheme}://BUCKET/PATH"
    if slashes != "//":
        raise StorageError(
            f"{where}{text!r} is not a {scheme}:// URI: it needs two slashes after "
            f"'{scheme}:', as in {shape} (a path that went through pathlib loses one; "
            f"{DOCS})."
        )
    bucket, _, name = rest.partition("/")
    if not bucket:
        raise StorageError(f"{where}{text!r} names no bucket: expected {shape} ({DOCS}).")
    if not _BUCKETS[scheme].match(bucket) or ".." in bucket:
        raise StorageError(
            f"{where}{text!r}: {bucket!r} is not a valid bucket name; a {scheme}:// bucket "
            f"name is {_BUCKET_RULES[scheme]} ({DOCS})."
        )
    if "//" in name:
        raise StorageError(
            f"{where}{text!r} has an empty folder name ('//') in its path; object stores "
            f"would keep it as a separate name ({DOCS})."
        )
    return Location(scheme, bucket, name)


def check(path: str | os.PathLike, key: str = "path") -> str:
    """`path` as a string when it is a local path or a well-formed gs:// or s3:// URI, for
    validators; raises StorageError (a ValueError, which pydantic reports under the key)."""
    parse(path, key)
    return os.fspath(path)


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` is a URI of an object store (gs://, s3://) rather than a local path."""
    return parse(path).remote


def join(base: str | os.PathLike, *parts: str) -> str:
    """`base` and `parts` joined with '/' for a URI (never a backslash), `os.path.join` for a
    local path."""
    text = os.fspath(base)
    if not is_remote(text):
        return os.path.join(text, *parts)
    for part in parts:
        text = text.rstrip("/") + "/" + part.lstrip("/") if part else text
    return text


# ---------------------------------------------------------------------------------------------
# Configuration


class _GcsSettings(Protocol):
    endpoint: str | None


class _S3Settings(Protocol):
    endpoint: str | None
    region: str | None
    path_style: bool


class Settings(Protocol):
    """What `configure` reads: the profile's `runtime.storage` (pipelines.spec.models.StorageSpec)
    or anything with the same attributes."""

    gcs: _GcsSettings
    s3: _S3Settings


# tensorflow-io-gcs-filesystem (the gs:// that honours an emulator) reads these when its
# filesystem is created, unguarded. Its reads crash the process now and then (SIGSEGV or a heap
# abort: tensorflow/io#2020, also against real GCS), the more often when they bypass its block
# cache (a cache of size or staleness 0, its defaults, or a read larger than a block). Conveyor
# turns the cache on, blocks of 64 MB, 128 MB in all, kept up to 10 minutes, which makes the
# small reads of the storage layer's tests reliable; a whole pipeline still crashes (docs/
# storage.md). With the stat cache off (age 0) each open compares the object's generation, and a
# write from this process drops its cached blocks, so a rewritten object is read anew. The
# environment's own values win.
GCS_PLUGIN_DEFAULTS = {
    "GCS_READ_CACHE_BLOCK_SIZE_MB": "64",
    "GCS_READ_CACHE_MAX_SIZE_MB": "128",
    "GCS_READ_CACHE_MAX_STALENESS": "600",
    "GCS_STAT_CACHE_MAX_AGE": "0",
    "GCS_STAT_CACHE_MAX_ENTRIES": "1024",
}
S3_RETRY_DEFAULTS = {"AWS_MAX_ATTEMPTS": "3", "AWS_RETRY_MODE": "standard"}
# TensorFlow's built-in gs:// (tsl's gcs_file_system.cc) retries a failed request 10 times,
# waiting 1 s doubling up to 32 s: over two minutes a write to a store gone away. Three retries
# (1, 2, 4 s) ride out a transient 429 or 503 and fail a night whose store is gone within
# seconds; it is retried whole.
GCS_RETRY_DEFAULTS = {"GCS_RETRY_CONFIG_MAX_RETRIES": "3"}
# Set by `configure` for this module's own S3 client (stat) in every process: boto3 has no
# environment variable for path-style addressing.
S3_PATH_STYLE_VARIABLE = "CONVEYOR_S3_PATH_STYLE"


def configure(
    settings: Settings | None, environ: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """Sets, in `environ` (this process's environment by default, which every process it
    starts inherits, Beam's SDK workers included), what TensorFlow, Beam and the stores' clients
    need to reach gs:// and s3:// as `settings` say. Returns the variables it set.

    Call it before TensorFlow is imported: TensorFlow picks its gs:// filesystem at import
    (`TF_USE_MODULAR_FILESYSTEM`), and the plugins read the rest when they first connect.

    - gs://: nothing for real GCS (TensorFlow's built-in gs:// and google-cloud-storage find
      it and its credentials themselves). With an endpoint: `TF_USE_MODULAR_FILESYSTEM=1`, so
      TensorFlow's gs:// is tensorflow-io's plugin, the one that honours an emulator, with its
      cache variables (`GCS_PLUGIN_DEFAULTS`, unless the environment has its own) and
      `CLOUD_STORAGE_EMULATOR_ENDPOINT` (the plugin then sends no credentials),
      `STORAGE_EMULATOR_HOST` (google-cloud-storage, under Beam's filesystem and `stat`) and
      `GOOGLE_APPLICATION_CREDENTIALS` naming a placeholder with no secret in it, which spares
      Beam's search for credentials (about 20 s).
    - s3://: with an endpoint, `S3_ENDPOINT` (tensorflow-io's plugin; its scheme says http or
      https) and `AWS_ENDPOINT_URL_S3` (boto3, under Beam's filesystem and `stat`); with a
      region, `AWS_REGION` and `AWS_DEFAULT_REGION`; with path_style, boto3's addressing for
      `stat` (tensorflow-io's plugin always addresses by path).

    Raises:
      StorageError: TensorFlow was imported before, with its own gs:// filesystem, and an
        emulator endpoint is asked for: that filesystem would ignore it.
    """
    environ = os.environ if environ is None else environ
    wanted: dict[str, str] = {}
    gcs = getattr(settings, "gcs", None)
    s3 = getattr(settings, "s3", None)
    if gcs is not None and gcs.endpoint:
        # Only for an endpoint of one's own: TensorFlow's built-in gs:// serves real GCS and
        # ignores endpoints, while the modular plugin that honours one crashes the process on
        # reads (tensorflow/io#2020; docs/storage.md).
        wanted["TF_USE_MODULAR_FILESYSTEM"] = "1"
        for name, value in GCS_PLUGIN_DEFAULTS.items():
            wanted[name] = environ.get(name, value)
        wanted["CLOUD_STORAGE_EMULATOR_ENDPOINT"] = gcs.endpoint
        wanted["STORAGE_EMULATOR_HOST"] = gcs.endpoint
        wanted["GOOGLE_APPLICATION_CREDENTIALS"] = _emulator_credentials_file()
    # The AWS SDKs (tensorflow-io's S3 plugin's, and botocore) read these: three attempts in
    # AWS's standard mode, not the plugin's default, which spent 102 s retrying one write to a
    # store that was gone (2 s with these): a failed night fails fast and is retried whole.
    for name, value in (S3_RETRY_DEFAULTS | GCS_RETRY_DEFAULTS).items():
        wanted[name] = environ.get(name, value)
    if s3 is not None:
        if s3.endpoint:
            wanted["S3_ENDPOINT"] = s3.endpoint
            wanted["AWS_ENDPOINT_URL_S3"] = s3.endpoint
        if s3.region:
            wanted["AWS_REGION"] = s3.region
            wanted["AWS_DEFAULT_REGION"] = s3.region
        if s3.path_style:
            wanted[S3_PATH_STYLE_VARIABLE] = "1"
    if (
        environ is os.environ
        and "tensorflow" in sys.modules
        and os.environ.get("TF_USE_MODULAR_FILESYSTEM") not in ("1", "true")
        and "CLOUD_STORAGE_EMULATOR_ENDPOINT" in wanted
    ):
        raise StorageError(
            "storage: TensorFlow was imported before storage.configure, with its built-in gs:// "
            "filesystem, which ignores the emulator's endpoint "
            f"({wanted['CLOUD_STORAGE_EMULATOR_ENDPOINT']}): configure storage before "
            f"anything imports TensorFlow, or set TF_USE_MODULAR_FILESYSTEM=1 ({DOCS})."
        )
    for name, value in wanted.items():
        environ[name] = value
    return wanted


# Beam's GCS filesystem (2.61) asks google-auth for application default credentials before
# it makes a client and, where there are none, tries four more times with backoff (about 20 s)
# before it goes on anonymously; Beam has no option that says "none". For an emulator, which
# checks nothing, `configure` points google-auth at this placeholder: a fixed access token that
# is no secret, never expires and so is never refreshed (a refresh would ask Google), so
# google-auth answers at once. Never for real GCS.
_EMULATOR_CREDENTIALS = (
    '{"type": "authorized_user", "client_id": "conveyor-gcs-emulator", '
    '"client_secret": "none", "refresh_token": "none", "token": "gcs-emulator", '
    '"expiry": "9999-12-31T00:00:00Z"}\n'
)


def _emulator_credentials_file() -> str:
    path = os.path.join(tempfile.gettempdir(), "conveyor-gcs-emulator-credentials.json")
    try:
        with _builtin_open(path) as handle:
            written = handle.read()
    except OSError:
        written = None
    if written != _EMULATOR_CREDENTIALS:
        _write_local_atomically(path, _EMULATOR_CREDENTIALS.encode())
    return path


# ---------------------------------------------------------------------------------------------
# TensorFlow's filesystems


@functools.cache
def _gfile() -> Any:
    """tf.io.gfile with every store registered."""
    import tensorflow as tf

    register_tensorflow_filesystems()
    return tf.io.gfile


@functools.cache
def register_tensorflow_filesystems() -> None:
    """Registers s3:// in TensorFlow (tensorflow-io's plugin; gs:// comes with TensorFlow's
    import once `configure` has run) and makes this process exit cleanly after using it.

    This module's functions call it themselves. A process that reaches s3:// through TensorFlow
    otherwise (TFX's fileio in a component, a Beam worker) calls it first: importing TensorFlow
    does not load tensorflow-io.
    """
    import warnings

    with warnings.catch_warnings():  # tensorflow-io warns about its optional libraries
        warnings.simplefilter("ignore")
        import tensorflow_io  # noqa: F401 - registers s3:// (and az, http, hdfs) in TensorFlow
    _exit_without_static_destructors()


@functools.cache
def share_beam_s3_clients() -> None:
    """Makes Beam's s3:// filesystem reuse one boto3 client per configuration in this process.

    Beam (2.61) makes a new boto3 session and client for every filesystem call (each `exists`,
    `open`, `rename` of `S3FileSystem` builds its own `S3IO`), and a new session reads the S3
    service's model files again: about 40 ms of JSON parsing a call. TFMA's writers alone make
    dozens of calls, which cost the Evaluator about 5 s per run on a bucket. Low-level boto3
    clients are safe to share between threads; creating them is not, hence the lock. The
    clients keep the arguments Beam gives (endpoint, region, credentials from the options).
    """
    import threading

    import boto3
    from apache_beam.io.aws.clients.s3 import boto3_client

    session = boto3.session.Session()
    clients: dict[tuple, Any] = {}
    creating = threading.Lock()

    class SharedSession:
        def client(self, **arguments: Any) -> Any:
            key = tuple(sorted(arguments.items()))
            with creating:
                if key not in clients:
                    clients[key] = session.client(**arguments)
                return clients[key]

    boto3_client.boto3 = types.SimpleNamespace(session=types.SimpleNamespace(Session=SharedSession))


def _tf_errors() -> Any:
    import tensorflow as tf

    return tf.errors


@contextlib.contextmanager
def _store_errors(uri: str) -> Iterator[None]:
    """TensorFlow's errors as Python's: a missing object is FileNotFoundError, anything else the
    store answered an OSError naming the object."""
    errors = _tf_errors()
    try:
        yield
    except errors.NotFoundError as err:
        raise FileNotFoundError(errno.ENOENT, f"no such object: {err.message}", uri) from None
    except errors.OpError as err:
        raise StoreFailed(errno.EIO, f"{uri}: {err.message}") from None


def _remote(path: str | os.PathLike) -> str | None:
    text = os.fspath(path)
    return text if parse(text).remote else None


def exists(path: str | os.PathLike) -> bool:
    """Whether a file, or a folder (a prefix with objects under it, or its marker), exists."""
    uri = _remote(path)
    if uri is None:
        return os.path.exists(path)
    # Through the store's client, not TensorFlow's: the S3 plugin answers False for a store
    # it cannot reach, which would read as "no such version" to reconcile.
    if not parse(uri).key.strip("/"):
        return isdir(uri)
    try:
        stat(uri)
        return True
    except FileNotFoundError:
        return isdir(uri)


def isdir(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder: on a store, a prefix with objects under it or a marker that
    `makedirs` made."""
    uri = _remote(path)
    if uri is None:
        return os.path.isdir(path)
    location = parse(uri)
    if not location.key.strip("/"):
        return True  # the bucket itself
    prefix = location.key.rstrip("/") + "/"
    return bool(_list_names(uri, location.scheme, location.bucket, prefix, limit=1))


def listdir(path: str | os.PathLike) -> list[str]:
    """The names directly in a folder (files and folders, without a trailing '/'), sorted."""
    uri = _remote(path)
    if uri is None:
        return sorted(os.listdir(path))
    # One listing of the prefix through the store's client (not TensorFlow, as `read_bytes`),
    # each name cut at its first '/' below the folder.
    location = parse(uri)
    prefix = location.key.rstrip("/") + "/" if location.key.strip("/") else ""
    names = _list_names(uri, location.scheme, location.bucket, prefix)
    if not names:
        raise FileNotFoundError(errno.ENOENT, "no such folder", uri)
    return sorted({n[len(prefix) :].split("/", 1)[0] for n in names} - {""})


def glob(pattern: str | os.PathLike) -> list[str]:
    """The paths matching `pattern` (`*`, `?` and `[...]` within one path segment, `**` across
    segments), sorted.

    A URI is matched on one listing of the prefix before the first wildcard, through the
    store's own client (the one Beam's filesystems wrap), with a bounded number of retries, so
    that a store gone away fails the caller within seconds (TensorFlow's glob lists each folder
    in turn). On a store only objects match: a folder is no object there (locally, a folder that
    matches is listed too).
    """
    uri = _remote(pattern)
    if uri is None:
        return sorted(local_glob.glob(os.fspath(pattern)))
    location = parse(uri)
    literal = re.split(r"[*?\[]", location.key, maxsplit=1)[0]
    matcher = re.compile(_translate(location.key))
    head = f"{location.scheme}://{location.bucket}/"
    names = _list_names(uri, location.scheme, location.bucket, literal)
    # Objects ending in '/' are folder markers, not files.
    return sorted(head + n for n in names if not n.endswith("/") and matcher.fullmatch(n))


def _translate(pattern: str) -> str:
    """A glob pattern as a regular expression, as Beam's filesystems read one: `**` any
    characters, `*` and `?` within one segment, `[...]` a character class."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                out.append("[" + pattern[i + 1 : end].replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def answers(uri: str) -> bool:
    """Whether the store holding `uri` answers a listing of its bucket now (a few quick
    attempts): for telling a store gone away from another failure."""
    location = parse(uri)
    try:
        _list_names(uri, location.scheme, location.bucket, "", limit=1)
    except OSError:
        return False
    return True


def _list_names(
    uri: str, scheme: str, bucket: str, prefix: str, limit: int | None = None
) -> list[str]:
    """The object names in `bucket` that start with `prefix` (at most `limit`), through the
    store's client; OSError naming `uri` when the store does not answer."""
    if scheme == "gs":
        try:
            client = _gcs()
            blobs = client.list_blobs(bucket, prefix=prefix, max_results=limit, **_gcs_bounded())
            return [blob.name for blob in blobs]
        except _gcs_failures() as err:
            raise StoreFailed(errno.EIO, f"{uri}: cannot list: {err}") from None
    from botocore.exceptions import BotoCoreError, ClientError

    names: list[str] = []
    paging = {"MaxItems": limit} if limit else {}
    try:
        pages = (
            _s3()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=bucket, Prefix=prefix, PaginationConfig=paging)
        )
        for page in pages:
            names.extend(item["Key"] for item in page.get("Contents", []))
    except (BotoCoreError, ClientError) as err:
        raise StoreFailed(errno.EIO, f"{uri}: cannot list: {err}") from None
    return names[:limit] if limit else names


def list_files(folder: str | os.PathLike) -> list[str]:
    """Every file under `folder`, at any depth, as paths relative to it with '/', sorted ([]
    when there is no such folder). On a store: one listing of the prefix; folder markers are
    no files."""
    uri = _remote(folder)
    if uri is None:
        root = os.fspath(folder)
        found = []
        for parent, _, files in os.walk(root):
            for name in files:
                found.append(os.path.relpath(os.path.join(parent, name), root).replace(os.sep, "/"))
        return sorted(found)
    prefix = uri.rstrip("/") + "/"
    return sorted(path[len(prefix) :] for path in glob(prefix + "**") if path.startswith(prefix))


def makedirs(path: str | os.PathLike) -> None:
    """Makes a folder and its parents; an existing one is fine.

    On a store this writes a folder marker, an empty object named `PATH/` (what the consoles and
    gsutil write), through the store's client, so that `isdir` is true and `listdir` empty
    before anything is in it; the parents exist as prefixes of it. TensorFlow's own makedirs
    does not serve here: the S3 plugin writes nothing, and the GCS plugin's call did not return
    against the emulator.
    """
    uri = _remote(path)
    if uri is None:
        os.makedirs(path, exist_ok=True)
        return
    location = parse(uri)
    marker = location.key.strip("/") + "/"
    if marker == "/":
        return  # the bucket itself
    if location.scheme == "gs":
        try:
            _gcs().bucket(location.bucket).blob(marker).upload_from_string(b"", **_gcs_bounded())
        except _gcs_failures() as err:
            raise StoreFailed(errno.EIO, f"{uri}: {err}") from None
        return
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        _s3().put_object(Bucket=location.bucket, Key=marker, Body=b"")
    except (BotoCoreError, ClientError) as err:
        raise StoreFailed(errno.EIO, f"{uri}: {err}") from None


def read_bytes(path: str | os.PathLike) -> bytes:
    """The whole file. An object is read through the store's client, not TensorFlow: the
    records a run reads before it starts (outcome records, `models.config`, push records) must
    not import TensorFlow into `conveyor run`'s process, which then could no longer fork its
    supervised pipeline (pipelines/ops/supervisor.py)."""
    uri = _remote(path)
    if uri is None:
        with open(path, "rb") as handle:
            return handle.read()
    location = parse(uri)
    if location.scheme == "s3":
        with _s3_errors(uri, f"{uri}: cannot read"):
            return _s3().get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
    from google.api_core import exceptions

    bucket = _gcs().bucket(location.bucket)
    try:
        return bucket.blob(location.key).download_as_bytes(**_gcs_bounded())
    except exceptions.NotFound:
        raise FileNotFoundError(errno.ENOENT, "no such object", uri) from None
    except _gcs_failures() as err:
        raise StoreFailed(errno.EIO, f"{uri}: cannot read: {err}") from None


def read_text(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """The whole file, decoded (strictly: bytes that are not `encoding` raise)."""
    return read_bytes(path).decode(encoding)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes the whole file so that a reader sees the old content or the new, never a part:
    locally a temporary file in the same folder, flushed and renamed over `path`; on a store the
    object appears only when its upload completes."""
    uri = _remote(path)
    if uri is None:
        _write_local_atomically(os.fspath(path), data)
        return
    # Through the store's client, as `read_bytes`: no TensorFlow in the supervising process.
    location = parse(uri)
    if location.scheme == "s3":
        with _s3_errors(uri, f"{uri}: cannot write"):
            _s3().put_object(Bucket=location.bucket, Key=location.key, Body=data)
        return
    bucket = _gcs().bucket(location.bucket)
    try:
        bucket.blob(location.key).upload_from_string(data)
    except _gcs_failures() as err:
        raise StoreFailed(errno.EIO, f"{uri}: cannot write: {err}") from None


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """`write_bytes` of `text` encoded."""
    write_bytes(path, text.encode(encoding))


def _write_local_atomically(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(
        dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes 0600, as a plain write would not
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise


def open(path: str | os.PathLike, mode: str = "r", encoding: str | None = None) -> IO:  # noqa: A001
    """Opens a file for streaming (`r`, `rb`, `w`, `wb`); text is UTF-8 unless `encoding` says.

    On a store a written object appears when the handle is closed, whole; a local file is
    written in place (use `write_bytes` for an atomic replacement).
    """
    uri = _remote(path)
    if uri is None:
        if "b" in mode:
            return _builtin_open(path, mode)
        return _builtin_open(path, mode, encoding=encoding or "utf-8")
    if mode not in ("r", "rb", "w", "wb"):
        raise ValueError(f"mode {mode!r}: a store's object opens with r, rb, w or wb")
    gfile = _gfile()
    with _store_errors(uri):
        if mode in ("r", "w") and (encoding or "utf-8").lower().replace("_", "-") != "utf-8":
            raise ValueError(f"{uri}: objects are read and written as UTF-8 text or bytes")
        if mode.startswith("r") and not gfile.exists(uri):
            raise FileNotFoundError(errno.ENOENT, "no such object", uri)
        return _GFileWithErrors(gfile.GFile(uri, mode), uri)


_builtin_open = __builtins__["open"] if isinstance(__builtins__, dict) else __builtins__.open


class _GFileWithErrors:
    """A GFile whose TensorFlow errors are Python's (FileNotFoundError, OSError)."""

    def __init__(self, handle: Any, uri: str):
        self._handle, self._uri = handle, uri

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._handle, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            with _store_errors(self._uri):
                return attribute(*args, **kwargs)

        return call

    def __iter__(self) -> Iterator:
        with _store_errors(self._uri):
            yield from self._handle

    def __enter__(self) -> _GFileWithErrors:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with _store_errors(self._uri):
            self._handle.close()


def copy(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Copies one file, between any two of local disk, gs:// and s3://; replaces `target`."""
    source_uri, target_uri = _remote(source), _remote(target)
    if source_uri is None and target_uri is None:
        shutil.copyfile(source, target)
        return
    if source_uri and target_uri and parse(source_uri).scheme == parse(target_uri).scheme:
        _copy_in_store(source_uri, target_uri)
        return
    where = source_uri or target_uri
    assert where is not None
    with _store_errors(where):
        _gfile().copy(os.fspath(source), os.fspath(target), overwrite=True)


def _copy_in_store(source_uri: str, target_uri: str) -> None:
    """A copy the store makes itself (no bytes through this process), through its client with
    a bounded number of retries."""
    source, target = parse(source_uri), parse(target_uri)
    if source.scheme == "gs":
        from google.api_core import exceptions

        client = _gcs()
        try:
            blob = client.bucket(source.bucket).blob(source.key)
            client.bucket(source.bucket).copy_blob(
                blob, client.bucket(target.bucket), target.key, **_gcs_bounded()
            )
        except exceptions.NotFound:
            raise FileNotFoundError(errno.ENOENT, "no such object", source_uri) from None
        except _gcs_failures() as err:
            raise StoreFailed(errno.EIO, f"{target_uri}: cannot copy {source_uri}: {err}") from None
        return
    with _s3_errors(source_uri, f"{target_uri}: cannot copy {source_uri}"):
        _s3().copy_object(
            Bucket=target.bucket,
            Key=target.key,
            CopySource={"Bucket": source.bucket, "Key": source.key},
        )


@contextlib.contextmanager
def _s3_errors(uri: str, what: str) -> Iterator[None]:
    """boto3's errors as Python's: a missing object (`uri`) is FileNotFoundError, anything
    else an OSError that starts with `what`."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            raise FileNotFoundError(errno.ENOENT, "no such object", uri) from None
        raise StoreFailed(errno.EIO, f"{what}: {err}") from None
    except BotoCoreError as err:
        raise StoreFailed(errno.EIO, f"{what}: {err}") from None


def remove(path: str | os.PathLike) -> None:
    """Removes one file (FileNotFoundError when there is none). An object is removed through
    the store's client (as `read_bytes`: no TensorFlow in a supervising process)."""
    uri = _remote(path)
    if uri is None:
        os.remove(path)
        return
    stat(uri)  # FileNotFoundError for none: S3 deletes a missing key silently
    _delete_objects(uri, parse(uri).bucket, [parse(uri).key])


def remove_tree(path: str | os.PathLike) -> None:
    """Removes a folder and everything under it (FileNotFoundError when there is none)."""
    uri = _remote(path)
    if uri is None:
        shutil.rmtree(path)
        return
    location = parse(uri)
    prefix = location.key.rstrip("/") + "/"
    names = _list_names(uri, location.scheme, location.bucket, prefix)
    if not names:
        raise FileNotFoundError(errno.ENOENT, "no such folder", uri)
    _delete_objects(uri, location.bucket, names)


def _delete_objects(uri: str, bucket: str, keys: list[str]) -> None:
    """Deletes the objects `keys` of `bucket` (the store of `uri`), in their order."""
    if parse(uri).scheme == "s3":
        with _s3_errors(uri, f"{uri}: cannot delete"):
            for start in range(0, len(keys), 1000):  # S3's most per request
                batch = [{"Key": key} for key in keys[start : start + 1000]]
                answer = _s3().delete_objects(
                    Bucket=bucket, Delete={"Objects": batch, "Quiet": True}
                )
                if answer.get("Errors"):  # Quiet: only the keys it could not delete
                    first = answer["Errors"][0]
                    raise StoreFailed(
                        errno.EIO,
                        f"{uri}: cannot delete {first.get('Key')}: {first.get('Message')} "
                        f"({len(answer['Errors'])} not deleted)",
                    )
        return
    from google.api_core import exceptions

    client = _gcs()
    for key in keys:
        try:
            client.bucket(bucket).blob(key).delete(**_gcs_bounded())
        except exceptions.NotFound:
            pass  # gone already: what was wanted
        except _gcs_failures() as err:
            raise StoreFailed(errno.EIO, f"{uri}: cannot delete: {err}") from None


# ---------------------------------------------------------------------------------------------
# Metadata


@dataclasses.dataclass(frozen=True)
class ObjectStat:
    """What a store says of one object (or the local filesystem of a file), without reading
    it: enough to notice that it changed, including a rewrite to the same size."""

    path: str
    size: int
    generation: str | None = None  # GCS: a new number on every write of the object
    crc32c: str | None = None  # GCS: base64 of the big-endian CRC32C of the content
    md5: str | None = None  # GCS: base64 of the MD5 of the content (not for composite objects)
    etag: str | None = None  # S3 (and GCS): changes with the content
    version_id: str | None = None  # S3 with versioning on
    mtime_ns: int | None = None  # local files, and a store's last update

    @property
    def st_size(self) -> int:
        """`size`, under os.stat_result's name, for code written against pathlib."""
        return self.size

    @property
    def st_mtime(self) -> float:
        """The last write in seconds, under os.stat_result's name (0 when unknown)."""
        return (self.mtime_ns or 0) / 1e9

    @property
    def version(self) -> str:
        """One string that changes whenever the object is written again."""
        if self.generation is not None:
            return f"generation:{self.generation}"
        if self.etag is not None:
            tail = f"/{self.version_id}" if self.version_id else ""
            return f"etag:{self.etag}{tail}"
        return f"mtime_ns:{self.mtime_ns}"


def stat(path: str | os.PathLike) -> ObjectStat:
    """The metadata of one file or object (FileNotFoundError when there is none)."""
    text = os.fspath(path)
    location = parse(text)
    if location.scheme == "gs":
        return _stat_gcs(text, location)
    if location.scheme == "s3":
        return _stat_s3(text, location)
    status = os.stat(text)
    return ObjectStat(text, status.st_size, mtime_ns=status.st_mtime_ns)


@functools.cache
def _gcs_client(endpoint: str | None) -> Any:
    """google-cloud-storage's client, one per process and endpoint (it reads
    STORAGE_EMULATOR_HOST itself, and then sends no credentials). Reading an object's metadata
    needs no project, so none is looked for."""
    from google.cloud import storage as gcs

    return gcs.Client(project=None)


def _gcs() -> Any:
    """This process's google-cloud-storage client, as the environment (`configure`, or the
    emulator's STORAGE_EMULATOR_HOST) says."""
    return _gcs_client(os.environ.get("STORAGE_EMULATOR_HOST"))


def _stat_gcs(uri: str, location: Location) -> ObjectStat:

    client = _gcs()
    try:
        blob = client.bucket(location.bucket).get_blob(location.key, **_gcs_bounded())
    except _gcs_failures() as err:
        raise StoreFailed(errno.EIO, f"{uri}: {err}") from None
    if blob is None:
        raise FileNotFoundError(errno.ENOENT, "no such object", uri)
    updated = blob.updated
    return ObjectStat(
        uri,
        int(blob.size),
        generation=str(blob.generation),
        crc32c=blob.crc32c,
        md5=blob.md5_hash,
        etag=blob.etag,
        mtime_ns=int(updated.timestamp() * 1e9) if updated else None,
    )


@functools.cache
def _s3_client(endpoint: str | None, region: str | None, path_style: bool) -> Any:
    import boto3
    from botocore.config import Config

    # A bounded number of quick retries: a store gone away fails the caller within seconds, and
    # the run with it (it is retried whole), rather than hanging in backoff.
    config = Config(
        s3={"addressing_style": "path"} if path_style else {},
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=5,
        read_timeout=60,
    )
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=region, config=config
    )


def _s3() -> Any:
    """This process's boto3 S3 client, as the environment (`configure`) says."""
    return _s3_client(
        os.environ.get("AWS_ENDPOINT_URL_S3"),
        os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        os.environ.get(S3_PATH_STYLE_VARIABLE) == "1",
    )


def _stat_s3(uri: str, location: Location) -> ObjectStat:
    with _s3_errors(uri, uri):
        head = _s3().head_object(Bucket=location.bucket, Key=location.key)
    modified = head.get("LastModified")
    return ObjectStat(
        uri,
        int(head["ContentLength"]),
        etag=head.get("ETag", "").strip('"') or None,
        version_id=head.get("VersionId"),
        mtime_ns=int(modified.timestamp() * 1e9) if modified else None,
    )


# ---------------------------------------------------------------------------------------------
# Conditional writes: what a lock in a bucket (pipelines.core.lease_lock) is built on
#
# Both stores apply a write or a delete only if the object is in the state the request names,
# atomically, and answer 412 Precondition Failed otherwise: S3's `If-None-Match: *` (create)
# and `If-Match: ETAG` (replace, delete), GCS's `ifGenerationMatch` (0: create). See
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html,
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-deletes.html and
# https://cloud.google.com/storage/docs/request-preconditions. A version here is opaque: S3's
# ETag as the store gives it (quotes included), GCS's generation as a string. On S3 a rewrite
# with the same bytes keeps its ETag, so a caller that needs each write to be a new version
# writes different bytes each time.


class ObjectChanged(StorageError):
    """A conditional write or delete the store refused: the object was there where it was to be
    created, or is not (or no longer) the version the caller named. The message names it."""


@dataclasses.dataclass(frozen=True)
class VersionedBytes:
    """An object's content and the version it was read at, from one answer of the store."""

    data: bytes
    version: str


# What S3 answers for a condition that did not hold: 412, or 409 when a conditional write races
# another upload of the same key; and for an object that is gone (If-Match on a missing key).
_S3_CONDITION_CODES = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")
_S3_MISSING_CODES = ("404", "NoSuchKey", "NotFound")


def read_with_version(uri: str) -> VersionedBytes:
    """The content of the object `uri` and its version (FileNotFoundError when there is none)."""
    location = _conditional_location(uri)
    if location.scheme == "s3":
        with _s3_errors(uri, f"{uri}: cannot read"):
            answer = _s3().get_object(Bucket=location.bucket, Key=location.key)
            return VersionedBytes(answer["Body"].read(), answer["ETag"])
    from google.api_core import exceptions

    bucket = _gcs().bucket(location.bucket)
    for _ in range(3):  # metadata and content are two requests: retried if it changed between
        try:
            found = bucket.get_blob(location.key, **_gcs_quick())
            if found is None:
                break
            # Downloaded through a blob of the client's own endpoint: the metadata's media link
            # is the store's word for where it is, which an emulator may get wrong.
            data = bucket.blob(location.key).download_as_bytes(
                if_generation_match=found.generation, **_gcs_quick()
            )
            return VersionedBytes(data, str(found.generation))
        except (exceptions.NotFound, exceptions.PreconditionFailed):
            continue
        except _gcs_failures() as err:
            raise StoreFailed(errno.EIO, f"{uri}: cannot read: {err}") from None
    raise FileNotFoundError(errno.ENOENT, "no such object", uri)


def create_if_absent(uri: str, data: bytes) -> str:
    """Writes the object `uri` only if there is none; returns its version.

    Raises:
      ObjectChanged: the object exists (its content is left as it was).
    """
    location = _conditional_location(uri)
    refused = f"{uri} exists: not created"
    if location.scheme == "s3":
        with _s3_conditions(uri, refused, refused):
            answer = _s3().put_object(
                Bucket=location.bucket, Key=location.key, Body=data, IfNoneMatch="*"
            )
        return answer["ETag"]
    return _gcs_conditional_upload(uri, location, data, 0, refused, refused)


def replace_if_unchanged(uri: str, data: bytes, version: str) -> str:
    """Overwrites the object `uri` only if it is still at `version`; returns the new version.

    Raises:
      ObjectChanged: the object is at another version, or gone.
    """
    location = _conditional_location(uri)
    changed = f"{uri} is no longer at version {version}: not replaced"
    gone = f"{uri} is gone: not replaced"
    if location.scheme == "s3":
        with _s3_conditions(uri, changed, gone):
            answer = _s3().put_object(
                Bucket=location.bucket, Key=location.key, Body=data, IfMatch=version
            )
        return answer["ETag"]
    return _gcs_conditional_upload(uri, location, data, int(version), changed, gone)


def delete_if_unchanged(uri: str, version: str) -> None:
    """Deletes the object `uri` only if it is still at `version`.

    Raises:
      ObjectChanged: the object is at another version, or gone.
    """
    location = _conditional_location(uri)
    changed = f"{uri} is no longer at version {version}: not deleted"
    gone = f"{uri} is gone: not deleted"
    if location.scheme == "s3":
        with _s3_conditions(uri, changed, gone):
            _s3().delete_object(Bucket=location.bucket, Key=location.key, IfMatch=version)
        return
    from google.api_core import exceptions

    blob = _gcs().bucket(location.bucket).blob(location.key)
    try:
        blob.delete(if_generation_match=int(version), **_gcs_quick())
    except exceptions.PreconditionFailed:
        raise ObjectChanged(changed) from None
    except exceptions.NotFound:
        raise ObjectChanged(gone) from None
    except _gcs_failures() as err:
        raise StoreFailed(errno.EIO, f"{uri}: cannot delete: {err}") from None


def _conditional_location(uri: str) -> Location:
    location = parse(uri)
    if not location.remote or not location.key:
        raise StorageError(f"{uri!r}: conditional writes are for an object in a store ({DOCS}).")
    return location


@contextlib.contextmanager
def _s3_conditions(uri: str, changed: str, gone: str) -> Iterator[None]:
    """boto3's answers to a conditional request: a condition that did not hold is
    ObjectChanged (`changed`, or `gone` for a missing object), anything else an OSError."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code")
        if code in _S3_CONDITION_CODES:
            raise ObjectChanged(changed) from None
        if code in _S3_MISSING_CODES:
            raise ObjectChanged(gone) from None
        raise StoreFailed(errno.EIO, f"{uri}: {err}") from None
    except BotoCoreError as err:
        raise StoreFailed(errno.EIO, f"{uri}: {err}") from None


def _gcs_conditional_upload(
    uri: str, location: Location, data: bytes, generation: int, changed: str, gone: str
) -> str:
    from google.api_core import exceptions

    blob = _gcs().bucket(location.bucket).blob(location.key)
    try:
        blob.upload_from_string(data, if_generation_match=generation, **_gcs_quick())
    except exceptions.PreconditionFailed:
        raise ObjectChanged(changed) from None
    except exceptions.NotFound:  # a replace of an object that is gone
        raise ObjectChanged(gone) from None
    except _gcs_failures() as err:
        raise StoreFailed(errno.EIO, f"{uri}: cannot write: {err}") from None
    return str(blob.generation)


def _gcs_quick() -> dict[str, Any]:
    """A conditional request's time limits: 10 s per attempt, retried for up to 20 s (the
    client's defaults, 60 s and 120 s, would outlast a lock's lease). A retried write the store
    had applied is refused by its own precondition; the lock tells that from a rival's write by
    the object's content."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    return {"timeout": 10, "retry": DEFAULT_RETRY.with_deadline(20)}


def _gcs_bounded() -> dict[str, Any]:
    """The time limits of an ordinary request: 60 s each, retried for up to 10 s (1, 2, 4 s
    apart), as the S3 client's three attempts: a store gone away fails the caller within
    seconds rather than after the client's 120 s of retries."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    return {"timeout": 60, "retry": DEFAULT_RETRY.with_deadline(10)}


def _gcs_failures() -> tuple[type[Exception], ...]:
    """What google-cloud-storage raises for a store that answered with an error, or did not
    answer at all (its transport's connection errors are not API errors)."""
    import requests
    from google.api_core import exceptions

    return (
        exceptions.GoogleAPICallError,
        exceptions.RetryError,  # the client's retries ran out (a store that does not answer)
        requests.exceptions.RequestException,
    )


@functools.cache
def _exit_without_static_destructors() -> None:
    """Makes this process end without running C++ static destructors, keeping its exit status.

    tensorflow-io's S3 plugin aborts the process as it exits ("pure virtual method called",
    status 134: tensorflow/io#2039) once it has been used: its AWS SDK objects are destroyed
    after what they depend on. So when the plugin is loaded, a Python exit handler registers
    glibc's `_exit` as the first function `exit()` runs (`on_exit` hands it the status): Python
    has finalized by then (its streams flushed, its own exit handlers run), and the process ends
    with the status it was leaving with, before any static destructor. Where there is no
    `on_exit` (not glibc), nothing changes.
    """
    import ctypes

    libc = ctypes.CDLL(None)
    if not hasattr(libc, "on_exit"):
        return

    def register() -> None:
        # Registered at Python's exit, after every static object of the plugin (some are made on
        # first use) registered its destructor: the last registered runs first.
        libc.on_exit.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        libc.on_exit(ctypes.cast(libc._exit, ctypes.c_void_p), None)

    atexit.register(register)


__all__ = [
    "SCHEMES",
    "Location",
    "ObjectChanged",
    "VersionedBytes",
    "answers",
    "ObjectStat",
    "Settings",
    "StorageError",
    "check",
    "configure",
    "copy",
    "create_if_absent",
    "delete_if_unchanged",
    "exists",
    "glob",
    "is_remote",
    "isdir",
    "join",
    "list_files",
    "listdir",
    "makedirs",
    "open",
    "parse",
    "read_bytes",
    "read_text",
    "read_with_version",
    "register_tensorflow_filesystems",
    "remove",
    "remove_tree",
    "replace_if_unchanged",
    "share_beam_s3_clients",
    "stat",
    "write_bytes",
    "write_text",
]
