"""pipelines.core.storage without a store: URIs checked and their errors, local files exactly as
before (and without TensorFlow), what `configure` puts in an environment, the profile section,
and the input header read through the layer. The live stores are in
tests/e2e/test_storage_emulators.py.
"""

import json
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from components.csv_input import checks
from pipelines.core import storage
from pipelines.spec import loading
from pipelines.spec.models import GcsStorageSpec, RuntimeSpec, S3StorageSpec, StorageSpec


@pytest.mark.parametrize(
    ("uri", "scheme", "bucket", "key"),
    [
        ("gs://bucket-1/a/b.csv", "gs", "bucket-1", "a/b.csv"),
        ("s3://my.bucket/x/", "s3", "my.bucket", "x/"),
        ("gs://under_score", "gs", "under_score", ""),
        ("data/penguin", "", "", "data/penguin"),
        ("/abs/path", "", "", "/abs/path"),
        ("C:/windows/path", "", "", "C:/windows/path"),
    ],
)
def test_paths_and_uris_are_split(uri, scheme, bucket, key):
    assert storage.parse(uri) == storage.Location(scheme, bucket, key)
    assert storage.is_remote(uri) is bool(scheme)


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("hdfs://namenode/data", "names the scheme hdfs://, which Conveyor does not read or write"),
        ("file:///tmp/x", "names the scheme file://"),
        ("GS://bucket/data", "write the scheme in lower case, gs://"),
        ("gs:/bucket/data", "needs two slashes after 'gs:'"),
        ("s3://", "names no bucket"),
        ("gs:///data", "names no bucket"),
        ("gs://Bucket/data", "'Bucket' is not a valid bucket name"),
        ("s3://under_score/data", "'under_score' is not a valid bucket name"),
        ("gs://ab/data", "'ab' is not a valid bucket name"),
        ("s3://bucket/a//b", "an empty folder name"),
    ],
)
def test_a_malformed_uri_or_another_scheme_is_one_paragraph_naming_the_key(uri, words):
    with pytest.raises(storage.StorageError) as raised:
        storage.check(uri, key="push.base_dir")
    message = str(raised.value)
    assert message.startswith(f"push.base_dir: {uri!r}"), message
    assert words in message and "\n" not in message and "docs/storage.md" in message


def test_join_uses_slashes_on_a_store_and_the_os_locally():
    assert storage.join("gs://bkt/root/", "runs", "x.json") == "gs://bkt/root/runs/x.json"
    assert storage.join("s3://bkt", "a") == "s3://bkt/a"
    assert storage.join("local/dir", "a", "b") == os.path.join("local/dir", "a", "b")


def test_local_files_read_write_list_copy_and_remove_as_before(tmp_path):
    folder = tmp_path / "a" / "b"
    storage.makedirs(folder)
    storage.makedirs(folder)  # an existing folder is fine
    assert storage.isdir(folder) and storage.listdir(folder) == []
    target = folder / "x.txt"
    storage.write_text(target, "first")
    storage.write_text(target, "second")
    assert storage.read_text(target) == "second"
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in folder.iterdir()] == ["x.txt"]  # no temporary file left over
    storage.write_bytes(folder / "y.bin", b"\x00\xff")
    assert storage.read_bytes(folder / "y.bin") == b"\x00\xff"
    assert storage.listdir(folder) == ["x.txt", "y.bin"]
    assert storage.glob(os.path.join(folder, "*.txt")) == [str(target)]
    with storage.open(target) as handle:
        assert handle.read() == "second"
    storage.copy(target, folder / "z.txt")
    assert storage.read_text(folder / "z.txt") == "second"
    storage.remove(folder / "z.txt")
    assert not storage.exists(folder / "z.txt")
    with pytest.raises(FileNotFoundError):
        storage.remove(folder / "z.txt")
    storage.remove_tree(tmp_path / "a")
    assert not storage.exists(tmp_path / "a")


def test_a_failed_local_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "x.txt"
    storage.write_text(target, "old")
    with pytest.raises(UnicodeEncodeError):
        storage.write_text(target, "\udcff")  # a lone surrogate cannot be encoded
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["x.txt"]


def test_a_local_stat_notices_a_rewrite_to_the_same_size(tmp_path):
    target = tmp_path / "x.txt"
    target.write_text("aaaa")
    before = storage.stat(target)
    os.utime(target, ns=(before.mtime_ns + 10**9, before.mtime_ns + 10**9))
    after = storage.stat(target)
    assert before.size == after.size == 4 and before.version != after.version
    with pytest.raises(FileNotFoundError):
        storage.stat(tmp_path / "missing")


def test_local_paths_never_import_tensorflow_or_beam(tmp_path):
    script = (
        "import sys\n"
        "from pipelines.core import storage\n"
        f"p = {str(tmp_path)!r} + '/x.txt'\n"
        "storage.write_text(p, 'x'); storage.read_text(p); storage.glob(p); storage.stat(p)\n"
        f"storage.listdir({str(tmp_path)!r}); storage.copy(p, p + '.2'); storage.remove(p)\n"
        "heavy = [m for m in ('tensorflow', 'apache_beam', 'boto3') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _settings(**s3) -> StorageSpec:
    return StorageSpec(gcs=GcsStorageSpec(endpoint="http://127.0.0.1:9023"), s3=S3StorageSpec(**s3))


def test_configure_sets_each_librarys_variables_and_never_credentials():
    environ = {"GCS_STAT_CACHE_MAX_AGE": "30", "AWS_ACCESS_KEY_ID": "mine"}
    settings = _settings(endpoint="http://127.0.0.1:5000", region="eu-west-1", path_style=True)
    done = storage.configure(settings, environ)
    assert environ["TF_USE_MODULAR_FILESYSTEM"] == "1"
    assert environ["CLOUD_STORAGE_EMULATOR_ENDPOINT"] == "http://127.0.0.1:9023"
    assert environ["STORAGE_EMULATOR_HOST"] == "http://127.0.0.1:9023"
    assert environ["GCS_STAT_CACHE_MAX_AGE"] == "30"  # the environment's own value wins
    assert environ["GCS_READ_CACHE_MAX_SIZE_MB"] == "128"  # reads bypassing the cache crash
    assert environ["S3_ENDPOINT"] == environ["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:5000"
    assert environ["AWS_REGION"] == environ["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert environ[storage.S3_PATH_STYLE_VARIABLE] == "1"
    assert environ["AWS_ACCESS_KEY_ID"] == "mine"
    # For the emulator only: a placeholder google-auth accepts at once, holding no secret.
    placeholder = json.loads(open(done.pop("GOOGLE_APPLICATION_CREDENTIALS")).read())
    assert placeholder["token"] == "gcs-emulator" and placeholder["type"] == "authorized_user"
    assert not [name for name in done if any(word in name for word in SECRET_WORDS)], done


SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIALS")


def test_configure_without_endpoints_points_at_the_real_services():
    environ: dict[str, str] = {}
    storage.configure(StorageSpec(), environ)
    # TensorFlow's built-in gs:// for real GCS: the modular plugin crashes on reads.
    assert "TF_USE_MODULAR_FILESYSTEM" not in environ
    # A store gone away fails a night within seconds on both (TensorFlow's and AWS's retries).
    assert environ["GCS_RETRY_CONFIG_MAX_RETRIES"] == "3" and environ["AWS_MAX_ATTEMPTS"] == "3"
    assert not [name for name in environ if any(word in name for word in SECRET_WORDS)]
    for name in ("CLOUD_STORAGE_EMULATOR_ENDPOINT", "STORAGE_EMULATOR_HOST", "S3_ENDPOINT",
                 "AWS_ENDPOINT_URL_S3", "AWS_REGION"):  # fmt: skip
        assert name not in environ


def test_the_profile_section_is_strict():
    runtime = RuntimeSpec.model_validate(
        {"storage": {"s3": {"endpoint": "https://minio.example:9000/", "path_style": True}}}
    )
    assert runtime.storage.s3.endpoint == "https://minio.example:9000"
    assert runtime.storage.gcs.endpoint is None
    with pytest.raises(ValidationError, match="storage.s3.access_key"):
        RuntimeSpec.model_validate({"storage": {"s3": {"access_key": "AKIA"}}})
    with pytest.raises(ValidationError, match="is not http"):
        RuntimeSpec.model_validate({"storage": {"gcs": {"endpoint": "127.0.0.1:9023"}}})


PENGUIN_HEADER = b"species,island,bill_length_mm\n"


def _csv_with_byte_on(folder, line: int):
    rows = [PENGUIN_HEADER] + [b"Adelie,Torgersen,39.1\n"] * 10
    rows[line - 1] = rows[line - 1].replace(b"e", b"\xe9", 1)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "penguins.csv").write_bytes(b"".join(rows))
    return folder / "penguins.csv"


def test_the_header_read_decodes_only_the_header(tmp_path):
    path = _csv_with_byte_on(tmp_path / "in", 8)
    assert loading.csv_columns(tmp_path / "in") == (
        str(path),
        ["species", "island", "bill_length_mm"],
    )
    assert "line 8: bytes that are not UTF-8" in checks.first_problem([str(path)])


def test_a_header_that_is_not_utf8_gets_the_readers_words(tmp_path):
    path = _csv_with_byte_on(tmp_path / "in", 1)
    with pytest.raises(loading.SpecError) as raised:
        loading.csv_columns(tmp_path / "in")
    assert str(raised.value) == checks.first_problem([str(path)])
    assert loading.has_input_files(_penguin_spec(), tmp_path / "in")


def test_no_csv_is_no_input(tmp_path):
    assert loading.csv_columns(tmp_path) is None
    assert not loading.has_input_files(_penguin_spec(), tmp_path)


def _penguin_spec():
    return loading.load_spec("penguin", env="ci").spec
