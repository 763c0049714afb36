"""Secrets stay out of what a run writes: its log masks them, its folder is its owner's alone."""

import logging
import os
import stat

import pytest
from absl import logging as absl_logging
from ml_metadata.proto import metadata_store_pb2

from pipelines.core.paths import RunPaths
from pipelines.finish import run_folder
from pipelines.run import local
from pipelines.spec.loading import load_spec

# Quotes, a backslash and a non-ASCII letter: protobuf's text format escapes each of them.
PASSWORD = 'sentinel-pw"\\é-31337'
WEBHOOK = "https://hooks.example.com/services/T000/B000/sentinel-webhook-token"
WEBHOOK_ENV = "CONVEYOR_TEST_WEBHOOK"


@pytest.fixture
def mysql_spec(monkeypatch):
    monkeypatch.setenv("CONVEYOR_MYSQL_PASSWORD", PASSWORD)
    monkeypatch.setenv(WEBHOOK_ENV, WEBHOOK)
    overrides = [f"runtime.alert_webhook_env={WEBHOOK_ENV}"]
    return load_spec("penguin", env="team_mysql", overrides=overrides).spec


@pytest.fixture
def umask_zero():
    """No umask at all: every mode a run's files get is then the one it asked for."""
    saved = os.umask(0)
    try:
        yield
    finally:
        os.umask(saved)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_secrets_of_a_run_are_its_password_and_webhook(mysql_spec):
    assert set(run_folder.run_secrets(mysql_spec)) == {PASSWORD, WEBHOOK}
    assert run_folder.run_secrets(load_spec("penguin", env="ci").spec) == ()


def test_no_secret_reaches_the_run_log_or_stderr(mysql_spec, tmp_path, capfd):
    from pipelines.core.metadata import connection_config

    log_file = tmp_path / "run.log"
    progress_lines: list[str] = []
    progress = local._ProgressHandler(progress_lines.append)
    config = connection_config(mysql_spec, tmp_path / "unused.sqlite")
    assert isinstance(config, metadata_store_pb2.ConnectionConfig)
    with local._captured_logs(progress, log_file, run_folder.run_secrets(mysql_spec)):
        # What TFX's LocalDagRunner logs at INFO before every run, word for word.
        absl_logging.info("Using connection config:\n %s", config)
        absl_logging.info("Component %s is running.", "trainer")
        absl_logging.info("Component %s is finished.", "trainer")
        absl_logging.error("could not reach %s", WEBHOOK)  # ERROR: also printed on stderr
        try:
            raise ConnectionError(f"refused with password {PASSWORD}")
        except ConnectionError:
            absl_logging.exception("metadata store: %s", "giving up")
    written = log_file.read_text()
    stderr = capfd.readouterr().err

    assert 'host: "127.0.0.1"' in written and 'user: "conveyor"' in written  # the rest stays
    assert 'password: "***"' in written
    assert "could not reach ***" in written and "could not reach ***" in stderr
    assert "ConnectionError: refused with password ***" in written
    for text in (written, stderr):
        assert "sentinel" not in text
    # Lines without a secret are left as they were: progress still reads TFX's templates.
    assert [line.split()[:2] for line in progress_lines] == [["trainer", "resolved"]]
    # Afterwards absl's logger has neither the run's handlers nor its filter.
    assert progress not in logging.getLogger("absl").handlers and not progress.filters


def test_a_run_folder_is_its_owners_alone_whatever_the_umask(tmp_path, umask_zero):
    loaded = load_spec("penguin", env="ci")
    paths = RunPaths(workdir=tmp_path, spec=loaded.spec)

    run_dir = run_folder.open_run_dir(loaded, paths, "penguin-20261201T020000.000000Z")
    with local._captured_logs(local._ProgressHandler(lambda line: None), run_dir / "run.log"):
        absl_logging.info("a line")
    run_folder.write_private(run_dir / "summary.json", "{}")

    assert run_dir == tmp_path / "runs" / "penguin" / "penguin-20261201T020000.000000Z"
    assert _mode(run_dir) == 0o700
    for name in ("resolved_spec.yaml", "run.log", "summary.json"):
        assert _mode(run_dir / name) == 0o600, name
    assert "a line" in (run_dir / "run.log").read_text()
    assert (run_dir / "resolved_spec.yaml").read_text().startswith("# penguin as run ")
