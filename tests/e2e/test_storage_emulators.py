"""pipelines.core.storage against real object stores on this machine: gcp-storage-emulator for
gs:// and moto's server for s3:// (tests/storage_emulators.py starts both once per session).

For each store: write, read, list, glob, stat (a rewrite to the same size is noticed), copy,
remove and folder semantics through TensorFlow's filesystems in this process; the same through
Beam's FileSystems (what Beam's readers and writers use), whose S3 calls share one client once
`share_beam_s3_clients` ran; and both in a fresh process whose only
preparation is `storage.configure`, as a Beam SDK worker's would be. And the input header read
of `conveyor run` on an object.
"""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from components.csv_input import checks
from pipelines.core import storage
from pipelines.spec import loading
from tests.storage_emulators import S3_CREDENTIALS

pytestmark = pytest.mark.e2e

STORES = ("gs", "s3")
# What `configure` sets, so that a child's environment can start without any of it.
CONFIGURED = (
    "TF_USE_MODULAR_FILESYSTEM",
    "CLOUD_STORAGE_EMULATOR_ENDPOINT",
    "STORAGE_EMULATOR_HOST",
    "S3_ENDPOINT",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    storage.S3_PATH_STYLE_VARIABLE,
    *storage.GCS_PLUGIN_DEFAULTS,
    *storage.S3_RETRY_DEFAULTS,
)


@pytest.fixture(params=STORES)
def base(request, storage_emulators) -> str:
    """A fresh prefix in one store's bucket, for one test."""
    name = request.node.originalname[:40]
    return f"{storage_emulators.root(request.param)}/{name}-{uuid.uuid4().hex[:8]}"


def test_write_read_list_and_glob(base):
    storage.write_text(f"{base}/in/a.csv", "a,b\n1,2\n")
    storage.write_bytes(f"{base}/in/b.csv", b"\x00\xff")
    storage.write_text(f"{base}/in/sub/c.csv", "deeper")
    storage.write_text(f"{base}/in/notes.txt", "not csv")

    assert storage.read_text(f"{base}/in/a.csv") == "a,b\n1,2\n"
    assert storage.read_bytes(f"{base}/in/b.csv") == b"\x00\xff"
    assert storage.exists(f"{base}/in/a.csv") and storage.exists(f"{base}/in")
    assert not storage.exists(f"{base}/in/missing.csv")
    assert storage.isdir(f"{base}/in") and storage.isdir(f"{base}/in/sub")
    assert not storage.isdir(f"{base}/in/a.csv")
    assert storage.listdir(f"{base}/in") == ["a.csv", "b.csv", "notes.txt", "sub"]
    assert storage.glob(f"{base}/in/*.csv") == [f"{base}/in/a.csv", f"{base}/in/b.csv"]
    assert storage.glob(f"{base}/in/*/*.csv") == [f"{base}/in/sub/c.csv"]
    assert storage.glob(f"{base}/nothing/*.csv") == []
    with storage.open(f"{base}/in/a.csv") as handle:
        assert list(handle) == ["a,b\n", "1,2\n"]
    with storage.open(f"{base}/streamed.bin", "wb") as handle:
        for _ in range(3):
            handle.write(b"x" * 1000)
    assert storage.stat(f"{base}/streamed.bin").size == 3000
    with pytest.raises(FileNotFoundError):
        storage.read_text(f"{base}/in/missing.csv")


def test_stat_notices_a_rewrite_to_the_same_size(base):
    uri = f"{base}/model.bin"
    storage.write_bytes(uri, b"aaaa")
    first = storage.stat(uri)
    storage.write_bytes(uri, b"bbbb")
    second = storage.stat(uri)

    assert first.size == second.size == 4
    assert first.version != second.version
    if uri.startswith("gs://"):
        assert first.generation != second.generation and first.crc32c != second.crc32c
        assert first.md5 and first.md5 != second.md5
    else:
        assert first.etag and first.etag != second.etag
    with pytest.raises(FileNotFoundError):
        storage.stat(f"{base}/missing.bin")


def test_copy_and_remove_across_stores_and_disk(base, tmp_path):
    storage.write_text(f"{base}/a.txt", "payload")
    storage.copy(f"{base}/a.txt", f"{base}/copies/b.txt")
    storage.copy(f"{base}/a.txt", tmp_path / "local.txt")
    (tmp_path / "local.txt").write_text("from disk")
    storage.copy(tmp_path / "local.txt", f"{base}/copies/c.txt")
    storage.copy(f"{base}/copies/c.txt", f"{base}/copies/b.txt")  # replaces

    assert storage.read_text(f"{base}/copies/b.txt") == "from disk"
    assert storage.listdir(f"{base}/copies") == ["b.txt", "c.txt"]
    storage.remove(f"{base}/copies/b.txt")
    assert storage.listdir(f"{base}/copies") == ["c.txt"]
    with pytest.raises(FileNotFoundError):
        storage.remove(f"{base}/copies/b.txt")
    storage.remove_tree(f"{base}/copies")
    assert not storage.exists(f"{base}/copies/c.txt")
    assert storage.read_text(f"{base}/a.txt") == "payload"


def test_makedirs_makes_an_empty_folder_that_fills(base):
    folder = f"{base}/runs/night-1"
    storage.makedirs(folder)
    storage.makedirs(folder)  # an existing folder is fine

    assert storage.isdir(folder) and storage.isdir(f"{base}/runs")
    assert storage.listdir(folder) == []
    assert storage.listdir(f"{base}/runs") == ["night-1"]
    storage.write_text(f"{folder}/summary.json", "{}")
    assert storage.listdir(folder) == ["summary.json"]
    assert storage.glob(f"{folder}/*") == [f"{folder}/summary.json"]


def _beam_filesystems():
    """Beam's FileSystems with the options a pipeline would set (its S3 filesystem needs them;
    unset there, its boto3 client reads the environment `configure` wrote)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions([]))
    return FileSystems


def test_beam_filesystems_read_and_write_the_same_objects(base):
    FileSystems = _beam_filesystems()  # noqa: N806 - Beam's class, used as Beam spells it

    storage.write_text(f"{base}/by-tf.txt", "written by TensorFlow")
    with FileSystems.create(f"{base}/by-beam.txt") as handle:
        handle.write(b"written by Beam")

    with FileSystems.open(f"{base}/by-tf.txt") as handle:
        assert handle.read() == b"written by TensorFlow"
    assert storage.read_text(f"{base}/by-beam.txt") == "written by Beam"
    (matched,) = FileSystems.match([f"{base}/*.txt"])
    assert sorted((m.path, m.size_in_bytes) for m in matched.metadata_list) == [
        (f"{base}/by-beam.txt", 15),
        (f"{base}/by-tf.txt", 21),
    ]
    assert FileSystems.checksum(f"{base}/by-beam.txt")
    FileSystems.delete([f"{base}/by-beam.txt"])
    assert not storage.exists(f"{base}/by-beam.txt")


def test_beams_s3_filesystem_shares_one_client_and_still_reaches_the_store(storage_emulators):
    """Beam makes a boto3 client per filesystem call (each reading the S3 model's JSON again);
    with `share_beam_s3_clients` its calls share one, and read and write as before."""
    from apache_beam.io.aws import s3io
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems = _beam_filesystems()  # noqa: N806 - Beam's class, used as Beam spells it
    options = PipelineOptions([])
    storage.share_beam_s3_clients()
    first, second = s3io.S3IO(options=options), s3io.S3IO(options=options)
    assert first.client.client is second.client.client
    base = f"{storage_emulators.root('s3')}/shared-client-{uuid.uuid4().hex[:8]}"
    with FileSystems.create(f"{base}/by-beam.txt") as handle:
        handle.write(b"one client")
    assert storage.read_text(f"{base}/by-beam.txt") == "one client"
    FileSystems.rename([f"{base}/by-beam.txt"], [f"{base}/renamed.txt"])
    assert storage.listdir(base) == ["renamed.txt"]


_AIRFLOW_TASK = """
import sys
from apache_beam.io.aws import s3io
from apache_beam.options.pipeline_options import PipelineOptions
from pipelines.run.airflow import airflow_dag
from pipelines.spec.loading import load_spec

def shared():
    options = PipelineOptions([])
    return s3io.S3IO(options=options).client.client is s3io.S3IO(options=options).client.client

before = shared()
dag = airflow_dag(load_spec("penguin", env="airflow").spec.to_yaml_dict(), sys.argv[1])
print(before, shared(), len(dag.tasks) > 5)
"""


def test_an_airflow_task_on_a_bucket_shares_beams_s3_clients(storage_emulators):
    # Airflow runs each task in a process that imports the DAG file: building the DAG there
    # gives that task's Beam pipeline the shared clients a local run has.
    workdir = f"{storage_emulators.root('s3')}/airflow-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-c", _AIRFLOW_TASK, workdir],
        env=storage_emulators.environment(_clean_environment()),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False True True"


# A process with only `storage.configure(settings)` before it touches a store, and tensorflow-io's
# S3 plugin registered as a worker would (importing TensorFlow does not load it): TensorFlow
# (in this order: configure, then the import) and Beam's FileSystems, timed.
_WORKER = """
import json, sys, time
from pipelines.core import storage
from pipelines.spec.models import StorageSpec

base, settings = sys.argv[1], StorageSpec.model_validate_json(sys.argv[2])
storage.configure(settings)
import tensorflow as tf

storage.register_tensorflow_filesystems()  # s3:// in TensorFlow (gs:// came with the import)
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

FileSystems.set_options(PipelineOptions([]))  # as a pipeline's worker has them

found = {"tf_read": tf.io.gfile.GFile(base + "/from-parent.txt", "r").read()}
with tf.io.gfile.GFile(base + "/from-child-tf.txt", "w") as handle:
    handle.write("child tf")
start = time.monotonic()
with FileSystems.open(base + "/from-parent.txt") as handle:
    found["beam_read"] = handle.read().decode()
found["beam_first_call_s"] = time.monotonic() - start
with FileSystems.create(base + "/from-child-beam.txt") as handle:
    handle.write(b"child beam")
found["beam_match"] = sorted(
    m.path.rsplit("/", 1)[1] for m in FileSystems.match([base + "/*.txt"])[0].metadata_list
)
found["stat_size"] = storage.stat(base + "/from-parent.txt").size
print(json.dumps(found))
"""


def _clean_environment() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in CONFIGURED}
    environ.update(S3_CREDENTIALS)
    return environ


def test_a_fresh_process_that_calls_configure_reaches_the_store(base, storage_emulators):
    storage.write_text(f"{base}/from-parent.txt", "parent")
    settings = storage_emulators.settings.model_dump_json()

    done = subprocess.run(
        [sys.executable, "-c", _WORKER, base, settings],
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["tf_read"] == found["beam_read"] == "parent"
    assert found["beam_match"] == [
        "from-child-beam.txt",
        "from-child-tf.txt",
        "from-parent.txt",
    ]
    assert found["stat_size"] == 6
    # Beam's GCS filesystem looks for Google credentials first; unconfigured, its retries took
    # about 20 s before it went on without them.
    assert found["beam_first_call_s"] < 5, found
    assert storage.read_text(f"{base}/from-child-tf.txt") == "child tf"
    assert storage.read_text(f"{base}/from-child-beam.txt") == "child beam"


def test_a_process_that_wrote_through_tensorflows_s3_plugin_exits_cleanly(storage_emulators):
    uri = f"{storage_emulators.root('s3')}/exit-{uuid.uuid4().hex[:8]}/x.txt"
    script = (
        "import sys\n"
        "from pipelines.core import storage\n"
        "from pipelines.spec.models import StorageSpec\n"
        "storage.configure(StorageSpec.model_validate_json(sys.argv[2]))\n"
        "storage.write_text(sys.argv[1], 'written')\n"
        "assert storage.read_text(sys.argv[1]) == 'written'\n"
        "print('done', flush=True)\n"
    )
    settings = storage_emulators.settings.model_dump_json()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script, uri, settings],
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr[-3000:]
    assert "terminate called" not in done.stderr, done.stderr[-3000:]
    assert time.monotonic() - started < 120
    assert storage.read_text(uri) == "written"


def test_the_input_header_is_read_from_an_object(storage_emulators):
    for scheme in STORES:
        folder = f"{storage_emulators.root(scheme)}/input-{uuid.uuid4().hex[:8]}"
        rows = [b"species,island\n"] + [b"Adelie,Torgersen\n"] * 10
        rows[7] = b"Adelie,Torg\xe9rsen\n"
        storage.write_bytes(f"{folder}/late/penguins.csv", b"".join(rows))
        storage.write_bytes(f"{folder}/header/penguins.csv", b"sp\xe9cies,island\n" + rows[1])

        assert loading.csv_columns(f"{folder}/late") == (
            f"{folder}/late/penguins.csv",
            ["species", "island"],
        )
        with pytest.raises(loading.SpecError) as raised:
            loading.csv_columns(f"{folder}/header")
        readers = checks.first_problem(
            [f"{folder}/header/penguins.csv"], opener=lambda path: storage.open(path, "rb")
        )
        assert str(raised.value) == readers
        assert "penguins.csv, line 1: bytes that are not UTF-8 (byte 0xe9 at offset 2" in readers
        assert loading.csv_columns(f"{folder}/none") is None
