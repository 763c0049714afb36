"""pipelines.core.storage on gs:// through TensorFlow's built-in gs:// filesystem, the one real
GCS uses, against gcp-storage-emulator: a fresh process with no gcs endpoint configured, whose
TensorFlow reaches Google's hosts through tests/gcs_tls_proxy.py (tests/storage_emulators.py's
`real_gcs_environment`).

Each request TensorFlow makes of GCS is exercised once: metadata (stat), ranged reads, resumable
uploads (an empty object and one of several megabytes), folder markers (`makedirs`), listing
with a prefix and a delimiter, rename (GCS's rewrite, then a delete) and delete; with the
storage layer's own calls through google-cloud-storage (whole reads and writes, listings, glob,
stat, copy inside the store) and Beam's FileSystems reading what TensorFlow wrote.
"""

import json
import subprocess
import sys
import uuid

import pytest

from tests.storage_emulators import GCS_BUCKET

pytestmark = pytest.mark.e2e

_SCRIPT = """
import json, os, sys
from pipelines.core import storage

base = sys.argv[1]
found = {}
big = os.urandom(5 * 1024 * 1024 + 7)
storage.makedirs(f"{base}/folder")
import tensorflow as tf  # its uploads: the storage layer writes whole objects with the client
with tf.io.gfile.GFile(f"{base}/folder/big.bin", "wb") as handle:
    handle.write(big)
storage.write_text(f"{base}/folder/a.txt", "one")
with tf.io.gfile.GFile(f"{base}/empty", "wb") as handle:
    handle.write(b"")
found["big_back"] = storage.read_bytes(f"{base}/folder/big.bin") == big
with storage.open(f"{base}/folder/big.bin", "rb") as handle:
    handle.seek(len(big) - 3)
    found["tail"] = handle.read(100) == big[-3:]
found["empty"] = storage.read_bytes(f"{base}/empty")
found["isdir"] = storage.isdir(f"{base}/folder")
found["listdir"] = sorted(storage.listdir(base))
found["glob"] = storage.glob(f"{base}/*/*.txt")
before = storage.stat(f"{base}/folder/a.txt").version
storage.write_text(f"{base}/folder/a.txt", "two")
found["rewrite_noticed"] = storage.stat(f"{base}/folder/a.txt").version != before
found["rewritten"] = storage.read_text(f"{base}/folder/a.txt")
storage.copy(f"{base}/folder/a.txt", f"{base}/copied.txt")
found["copied"] = storage.read_text(f"{base}/copied.txt")

tf.io.gfile.makedirs(f"{base}/made/by/tensorflow")
found["tf_makedirs"] = storage.isdir(f"{base}/made/by/tensorflow")
tf.io.gfile.rename(f"{base}/copied.txt", f"{base}/renamed.txt")
found["renamed"] = [storage.exists(f"{base}/copied.txt"), storage.read_text(f"{base}/renamed.txt")]

from apache_beam.io.filesystems import FileSystems
with FileSystems.open(f"{base}/folder/a.txt") as handle:
    found["beam_read"] = handle.read().decode()

storage.remove(f"{base}/renamed.txt")
storage.remove_tree(f"{base}/folder")
storage.remove_tree(f"{base}/made")
found["after_remove"] = sorted(storage.listdir(base))
found["modular"] = os.environ.get("TF_USE_MODULAR_FILESYSTEM")
print(json.dumps(found, default=repr))
"""


def test_the_storage_layer_on_tensorflows_builtin_gs(storage_emulators):
    base = f"gs://{GCS_BUCKET}/builtin-{uuid.uuid4().hex[:8]}"
    proxy = storage_emulators.google_hosts
    before = len(proxy.requests)

    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, base],
        env=storage_emulators.real_gcs_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "big_back": True,
        "tail": True,
        "empty": "b''",
        "isdir": True,
        "listdir": ["empty", "folder"],
        "glob": [f"{base}/folder/a.txt"],
        "rewrite_noticed": True,
        "rewritten": "two",
        "copied": "two",
        "tf_makedirs": True,
        "renamed": [False, "two"],
        "beam_read": "two",
        "after_remove": ["empty"],
        "modular": None,
    }
    # TensorFlow's requests went to Google's hosts, each kind the emulator answered.
    requests = proxy.requests[before:]
    for kind in (
        "GET www.googleapis.com/storage/v1/b/",  # stat and listing
        "uploadType=media",  # a folder marker
        "uploadType=resumable",  # starting an upload
        "PUT www.googleapis.com/upload/storage/v1/b/",  # its session URI
        "GET storage.googleapis.com/",  # ranged reads
        "/rewriteTo/b/",  # rename
        "DELETE www.googleapis.com/storage/v1/b/",
    ):
        assert any(kind in line for line in requests), (kind, requests)
    assert not [line for line in requests if line.endswith(("-> 500", "-> 501", "-> 502"))]
