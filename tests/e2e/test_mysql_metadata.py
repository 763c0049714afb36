"""A team's metadata store for real: the penguin pipeline records into MariaDB (Debian's
mariadb-server), started by this module on 127.0.0.1 on a free port in a temporary data
directory and stopped at the end. `scripts/mariadb.sh` installs the package when it is missing."""

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipelines import cli
from pipelines.core import metadata
from pipelines.core.paths import FRAMEWORK_ROOT, RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec

PASSWORD = "conveyor-test-password"
DATABASE = "conveyor_metadata"  # as configs/team_mysql.yaml names it
USER = "conveyor"


@dataclass
class Server:
    port: int
    socket: Path
    base: Path
    process: subprocess.Popen | None = None

    def start(self) -> None:
        """Starts mariadbd on the data directory and waits until it answers."""
        log = self.base / "error.log"
        self.process = subprocess.Popen(
            [_binary("mariadbd"), "--no-defaults", "--user=root", f"--datadir={self.base / 'data'}"]
            + [f"--socket={self.socket}", f"--port={self.port}", "--bind-address=127.0.0.1"]
            + [f"--pid-file={self.base / 'mariadb.pid'}", f"--log-error={log}", "--skip-log-bin"],
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.sql("SELECT 1")
                return
            except subprocess.CalledProcessError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"mariadbd did not start: {log.read_text()[-2000:]}")
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)

    def sql(self, statement: str, user: str = "root") -> list[list[str]]:
        """Rows of a statement, through the mariadb client (not through ML Metadata)."""
        done = subprocess.run(
            ["mariadb", "--no-defaults", f"--socket={self.socket}", f"--user={user}"]
            + ["--batch", "--skip-column-names", "-e", statement],
            capture_output=True,
            text=True,
            check=True,
        )
        return [line.split("\t") for line in done.stdout.splitlines()]


def _binary(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory):
    if _binary("mariadbd") is None:
        done = subprocess.run(
            [str(FRAMEWORK_ROOT / "scripts" / "mariadb.sh")], capture_output=True, text=True
        )
        if done.returncode != 0:
            reason = f"no MariaDB server and it cannot be installed here: {done.stderr.strip()}"
            if os.environ.get("CI"):  # CI must run the real server: a skip would hide it
                pytest.fail(reason)
            pytest.skip(reason)
    base = tmp_path_factory.mktemp("mariadb")
    datadir = base / "data"
    subprocess.run(
        [_binary("mariadb-install-db"), "--no-defaults", "--user=root", f"--datadir={datadir}"]
        + ["--auth-root-authentication-method=socket", "--skip-test-db"],
        capture_output=True,
        check=True,
    )
    handle = Server(port=_free_port(), socket=base / "mariadb.sock", base=base)
    handle.start()
    try:
        handle.sql(
            f"CREATE DATABASE {DATABASE}; "
            f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'; "
            f"GRANT ALL PRIVILEGES ON {DATABASE}.* TO '{USER}'@'127.0.0.1';"
        )
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def penguin_on_mariadb(mariadb, tmp_path_factory):
    saved = os.environ.get("CONVEYOR_MYSQL_PASSWORD")
    os.environ["CONVEYOR_MYSQL_PASSWORD"] = PASSWORD
    try:
        workdir = tmp_path_factory.mktemp("penguin-mysql")
        assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
        overrides = [f"runtime.metadata.port={mariadb.port}", "trainer.train_steps=150"]
        argv = ["validate", "penguin", "--env", "team_mysql", "--connect"]
        assert cli.main(argv + [a for o in overrides for a in ("--set", o)]) == 0
        loaded = load_spec("penguin", env="team_mysql", overrides=overrides, workdir=workdir)
        result = nightly.run(loaded, workdir, echo=lambda line: None)
        store = metadata.open_store(loaded.spec, RunPaths(workdir, loaded.spec).metadata_path)
        yield loaded, workdir, result, store
    finally:
        if saved is None:
            os.environ.pop("CONVEYOR_MYSQL_PASSWORD", None)
        else:
            os.environ["CONVEYOR_MYSQL_PASSWORD"] = saved


def test_the_pipeline_pushes_a_model_with_its_metadata_in_mariadb(penguin_on_mariadb):
    loaded, workdir, result, _ = penguin_on_mariadb
    assert result.outcome == "pushed", result.message
    assert (RunPaths(workdir, loaded.spec).serving_dir / "1" / "saved_model.pb").is_file()
    assert not (workdir / "metadata.sqlite").exists()  # nothing went to a local SQLite file


def test_mariadb_holds_the_runs_executions_and_artifacts(penguin_on_mariadb, mariadb):
    _, _, result, _ = penguin_on_mariadb
    # ML Metadata's own tables, read with the mariadb client as the team's user would.
    rows = mariadb.sql(
        f"SELECT t.name, COUNT(*) FROM {DATABASE}.Execution e "
        f"JOIN {DATABASE}.Type t ON t.id = e.type_id GROUP BY t.name"
    )
    types = {name: int(count) for name, count in rows}
    assert any(name.endswith("Trainer") for name in types), types
    assert any("Pusher" in name for name in types), types
    contexts = [row[0] for row in mariadb.sql(f"SELECT name FROM {DATABASE}.Context")]
    assert result.run_id in contexts
    assert "penguin" in contexts
    models = mariadb.sql(
        f"SELECT COUNT(*) FROM {DATABASE}.Artifact a JOIN {DATABASE}.Type t "
        "ON t.id = a.type_id WHERE t.name = 'Model'"
    )
    assert int(models[0][0]) == 1


def test_conveyor_reads_the_run_back_from_mariadb(penguin_on_mariadb):
    _, _, result, store = penguin_on_mariadb
    record = metadata.find_run(store, result.run_id)
    assert record.state == "succeeded"
    assert record.pushed_version == "1"


def test_compiling_for_airflow_checks_the_live_server(mariadb, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CONVEYOR_MYSQL_PASSWORD", PASSWORD)
    metadata_at = (
        f"runtime.metadata={{kind: mysql, host: 127.0.0.1, port: {mariadb.port}, "
        f"database: {DATABASE}, user: {USER}, password_env: CONVEYOR_MYSQL_PASSWORD}}"
    )
    output = tmp_path / "penguin_dag.py"
    argv = ["compile", "penguin", "--env", "airflow", "--workdir", str(tmp_path)]
    assert cli.main(argv + ["--output", str(output), "--set", metadata_at]) == 0
    assert f"'port': {mariadb.port}" in output.read_text()
    mariadb_down = metadata_at.replace(f"port: {mariadb.port}", "port: 1")
    assert cli.main(argv + ["--output", str(tmp_path / "no.py"), "--set", mariadb_down]) == 1
    assert "cannot reach the MySQL metadata database at 127.0.0.1:1" in capsys.readouterr().err
    assert not (tmp_path / "no.py").exists()


def test_the_password_is_in_no_file_the_run_wrote(penguin_on_mariadb):
    loaded, workdir, result, _ = penguin_on_mariadb
    paths = RunPaths(workdir, loaded.spec)
    run_log = (Path(result.run_dir) / "run.log").read_text()
    # TFX logs the connection config (password field included) at INFO before every run.
    assert "Using connection config" in run_log and 'password: "***"' in run_log
    read, leaks = 0, []
    for folder in (Path(result.run_dir), paths.runs_dir, paths.pipeline_root, paths.serving_dir):
        for path in folder.rglob("*"):
            if path.is_file() and path.stat().st_size < 10 * 2**20:
                read += 1
                if PASSWORD.encode() in path.read_bytes():
                    leaks.append(str(path.relative_to(workdir)))
    assert read > 20, read  # the run's own files, every component's outputs, the served model
    assert leaks == []


def test_the_metadata_server_stopped_mid_run_fails_the_run_and_serving_keeps_its_version(
    penguin_on_mariadb, mariadb
):
    """The server goes away while the Trainer runs: the run ends FAILED with a message that
    names the metadata database, version 1 keeps serving, and once the server is back the next
    run finds serving and ML Metadata in step and goes through."""
    import sys

    from pipelines.serving_state import versions
    from pipelines.serving_state.records import recorded_pushes

    loaded, workdir, first, _ = penguin_on_mariadb
    paths = RunPaths(workdir, loaded.spec)
    served = str(paths.serving_dir)
    digest_before = versions.model_digest(os.path.join(served, "1"))
    argv = [str(Path(sys.executable).with_name("conveyor")), "run", "penguin"]
    argv += ["--env", "team_mysql", "--workdir", str(workdir)]
    argv += ["--set", f"runtime.metadata.port={mariadb.port}", "--set", "trainer.train_steps=400"]
    env = {**os.environ, "CONVEYOR_MYSQL_PASSWORD": PASSWORD, "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(
        argv, cwd=FRAMEWORK_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines = []
    try:
        for line in run.stdout:  # progress: one line per finished component
            lines.append(line)
            if line.split()[:1] == ["data_gate"]:  # the Trainer starts next
                time.sleep(2)
                mariadb.stop()
                break
        out = "".join(lines) + run.stdout.read()
        err = run.stderr.read()
        code = run.wait(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
        mariadb.start()

    assert code == 1, out + err
    verdict = next(line for line in out.splitlines() if line.startswith("FAILED"))
    assert "metadata" in verdict.lower() or "mysql" in verdict.lower(), verdict
    assert "Traceback" not in err
    assert versions.served_versions(served) == [1]
    assert versions.model_digest(os.path.join(served, "1")) == digest_before
    # Back up: serving and ML Metadata agree, and a run goes through.
    assert recorded_pushes(paths)[1] == {1}
    os.environ["CONVEYOR_MYSQL_PASSWORD"] = PASSWORD
    again = nightly.run(loaded, workdir, echo=lambda _: None)
    assert again.outcome in ("pushed", "not_pushed"), again.message
    assert set(versions.served_versions(served)) <= recorded_pushes(paths)[1]
