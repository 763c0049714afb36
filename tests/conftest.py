"""Shared test setup. Environment variables TensorFlow reads at import are set here, before any
test module imports it."""

import contextlib
import json
import math
import os
import shutil
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# configs/team_mysql.yaml names its password's variable; building a pipeline reads it (tests
# that need a real or a missing password set or delete it themselves).
os.environ.setdefault("CONVEYOR_MYSQL_PASSWORD", "not-a-real-password")
# TensorFlow picks its gs:// filesystem when it is imported: tensorflow-io's plugin, which
# honours the storage emulators' endpoint (pipelines.core.storage.configure sets the same), even
# where another test imported TensorFlow before the emulators started.
os.environ.setdefault("TF_USE_MODULAR_FILESYSTEM", "1")

DATA_DIR = Path(__file__).parent / "data"
# `--set` values of a MySQL-compatible metadata store a spec names but no test reaches.
MYSQL_METADATA = [
    "runtime.metadata.kind=mysql",
    "runtime.metadata.host=metadata.example",
    "runtime.metadata.port=3306",
    "runtime.metadata.database=conveyor",
    "runtime.metadata.user=conveyor",
]
# The suite tests Conveyor on its example project, this repository's root, from any folder (some
# tests run commands in a temporary one); the subprocesses they start inherit it.
os.environ.setdefault("CONVEYOR_PROJECT", str(Path(__file__).resolve().parents[1]))

# gs:// and s3:// emulators for the whole session, started on first use (after the environment
# above is set).
from tests.storage_emulators import storage_emulators  # noqa: E402,F401


def pytest_collection_modifyitems(items):
    # Everything under tests/e2e is an end-to-end run, whether or not it says so.
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "work"


def copy_fixture(source: str | Path, target_dir: Path, filename: str) -> Path:
    """Replaces the CSVs in target_dir with `source` (a tests/data name or any path)."""
    target_dir.mkdir(parents=True, exist_ok=True)
    for old in target_dir.glob("*.csv"):
        old.unlink()
    return Path(shutil.copy(DATA_DIR / source, target_dir / filename))


@contextlib.contextmanager
def recording_webhook(entry: Callable[[BaseHTTPRequestHandler, dict], object] | None = None):
    """A real HTTP server on 127.0.0.1 that records each JSON body POSTed to it and answers 204.

    Yields (url, received); `entry(handler, body)` chooses what is recorded per POST (default:
    the body).
    """
    received: list = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append(entry(self, body) if entry else body)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hooks/nightly", received
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def running_pushgateway(folder: Path):
    """A real Pushgateway (Debian's `prometheus-pushgateway`, installed on demand) on 127.0.0.1
    on a free port, logging into `folder`; yields its URL."""
    import socket
    import subprocess
    import time
    import urllib.request

    from tests import system_packages

    program = system_packages.require({"prometheus-pushgateway": "prometheus-pushgateway"})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = folder / "pushgateway.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [program["prometheus-pushgateway"], f"--web.listen-address=127.0.0.1:{port}"],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the Pushgateway did not start: {log.read_text()[-2000:]}")
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def run_artifacts(store, run_id: str, type_name: str) -> list:
    """The artifacts of one type in a run's ML Metadata context (its pipeline_run), by run id."""
    context = store.get_context_by_type_and_name("pipeline_run", run_id)
    return [a for a in store.get_artifacts_by_context(context.id) if a.type == type_name]


def penguin_ci_run(workdir: Path):
    """Writes penguin's demo data under `workdir` and runs the pipeline once with the `ci`
    profile, as a cron night would; returns the run's RunPaths and its RunResult."""
    from pipelines import cli
    from pipelines.core.paths import RunPaths
    from pipelines.ops import nightly
    from pipelines.spec.loading import load_spec

    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    loaded = load_spec("penguin", env="ci", workdir=workdir)
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    return RunPaths(workdir=workdir, spec=loaded.spec), result


def assert_same_up_to_float_sums(found, expected, where: str = "statistics") -> None:
    """Equal JSON-like values (dicts, lists, scalars, as json_format.MessageToDict gives a
    proto), except that floats may differ in their last digits: sums added in another order
    (Beam's batches, several workers) give means and deviations that differ there."""
    if isinstance(expected, dict):
        assert sorted(found) == sorted(expected), where
        for key in expected:
            assert_same_up_to_float_sums(found[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert len(found) == len(expected), where
        for i, (a, b) in enumerate(zip(found, expected, strict=True)):
            assert_same_up_to_float_sums(a, b, f"{where}[{i}]")
    elif isinstance(expected, float) and not math.isnan(expected):
        assert found == pytest.approx(expected, rel=1e-9, abs=1e-12), where
    else:
        assert found == expected, where


def taxi_data_path_spec(folder: Path) -> Path:
    """taxi as shipped, cut to the Beam components of its data path (CsvExampleGen and
    StatisticsGen), written into `folder`: what runners are compared on."""
    import yaml

    from pipelines.core.project import find_project

    raw = yaml.safe_load((find_project().specs_dir / "taxi.yaml").read_text())
    for key in ("drift", "window_spans"):  # their resolvers are not in this cut
        raw["data"].pop(key, None)
    raw["trainer"]["warm_start"] = False
    raw["components"] = [{"type": "csv_example_gen"}, {"type": "statistics_gen"}]
    path = folder / "taxi.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
