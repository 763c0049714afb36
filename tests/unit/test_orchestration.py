"""Production profiles: every one validates; bad ones fail at validate/compile time, before
TensorFlow is imported, anything is compiled or a run starts, with the key and the reason."""

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import cli
from pipelines.core.paths import FRAMEWORK_ROOT
from pipelines.spec import checks
from pipelines.spec import loading as config
from pipelines.spec.loading import SpecError, load_spec
from pipelines.spec.models import (
    JOB_SERVICE_TIMEOUT_SECONDS,
    Orchestrator,
    ResourcesSpec,
    check_beam_args,
    runner_beam_args,
)

PROBE = """
import sys
from pipelines import cli
code = cli.main({argv!r})
heavy = sorted(m for m in ("tensorflow", "tfx", "apache_beam") if m in sys.modules)
print("HEAVY", heavy)
sys.exit(code)
"""


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends: nothing listens


def _light(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )


def test_the_production_profiles_exist_and_every_spec_validates_under_each():
    profiles = set(config.list_profiles())
    assert {"kubeflow", "airflow", "team_mysql", "multiprocess", "dataflow", "flink", "spark"} <= (
        profiles
    )
    for name in config.list_pipelines():
        for env in profiles:
            checks.check_profile(load_spec(name, env=env))


@pytest.mark.parametrize(
    ("env", "runner"),
    [
        ("local", "DirectRunner"),
        ("multiprocess", "DirectRunner"),
        ("dataflow", "DataflowRunner"),
        ("flink", "FlinkRunner"),
        ("spark", "SparkRunner"),
    ],
)
def test_beam_profiles_choose_their_runner_and_beam_knows_every_argument(env, runner):
    spec = load_spec("taxi", env=env).spec
    assert spec.runtime.beam_runner == runner
    checks.check_beam_options(spec)  # Beam's own parser: no unknown option
    if env == "multiprocess":
        assert "--direct_running_mode=multi_processing" in spec.runtime.beam_args


def test_a_misspelt_beam_option_is_caught_by_beams_parser():
    # (Beam's parser takes an unambiguous prefix, e.g. --direct_num_worker, as the option.)
    spec = load_spec("taxi", overrides=['runtime.beam_args=["--direct_workers=2"]']).spec
    with pytest.raises(SpecError, match="Beam does not know --direct_workers"):
        checks.check_beam_options(spec)


@pytest.mark.parametrize(
    ("beam_args", "message"),
    [
        ('["--runner=SparkRuner"]', "unknown runner 'SparkRuner' (known: DirectRunner"),
        ('["--runner=DataflowRunner", "--region=x"]', "DataflowRunner needs --project"),
        ('["--runner=FlinkRunner"]', "FlinkRunner needs --flink_master"),
        (
            '["--runner=FlinkRunner", "--flink_master=h:8081", "--direct_num_workers=2"]',
            "direct_num_workers only apply to DirectRunner, not FlinkRunner",
        ),
        ('["--direct_running_mode=multi_procesing"]', "is not one of in_memory"),
        ('["--direct_num_workers=all"]', "is not a count"),
        ('["direct_num_workers=2"]', "is neither --option nor the value of one"),
        (
            '["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=/tmp/x"]',
            "--temp_location=/tmp/x must be a gs:// path",
        ),
    ],
)
def test_bad_beam_args_fail_validation_with_the_reason(beam_args, message):
    with pytest.raises(SpecError) as err:
        load_spec("taxi", overrides=[f"runtime.beam_args={beam_args}"])
    assert "runtime.beam_args: " in str(err.value)
    assert message in str(err.value)


def test_beam_args_accept_the_space_separated_form():
    assert check_beam_args(["--runner", "FlinkRunner", "--flink_master", "h:8081"]) == (
        "FlinkRunner"
    )


def test_a_job_service_runner_waits_a_day_for_its_beam_job_unless_the_profile_says():
    # Beam's default (60 s) is the deadline of the job's message stream: a longer stage failed.
    portable = ["--runner=PortableRunner", "--job_endpoint=localhost:8099"]
    assert runner_beam_args(portable) == [
        *portable,
        f"--job_server_timeout={JOB_SERVICE_TIMEOUT_SECONDS}",
    ]
    flink = ["--runner", "FlinkRunner", "--flink_master", "h:8081", "--job_server_timeout", "600"]
    assert runner_beam_args(flink) == flink
    assert runner_beam_args(["--direct_num_workers=2"]) == ["--direct_num_workers=2"]


def test_a_portable_run_whose_job_service_is_down_fails_before_it_starts(tmp_path):
    endpoint = f"127.0.0.1:{_closed_port()}"
    beam_args = (
        f"runtime.beam_args=[--runner=PortableRunner, --job_endpoint={endpoint}, "
        "--environment_type=EXTERNAL, --environment_config=127.0.0.1:50000]"
    )
    argv = ["run", "penguin", "--workdir", str(tmp_path / "w"), "--set", beam_args]
    done = _light(argv, tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"--job_endpoint={endpoint}: no Beam job service answers there" in done.stderr
    assert "Connection refused" in done.stderr
    assert "HEAVY []" in done.stdout
    assert not (tmp_path / "w" / "runs").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["runtime.container.image=null"],
            "runtime: orchestrator 'kubeflow' needs container.image",
        ),
        (["runtime.container.image=Not An/Image"], "is not an image reference"),
        (["runtime.container.resources.trainer.gpu=1"], "gpu needs gpu_type"),
        (["runtime.container.resources.trainer.memory=lots"], "is not a quantity"),
        (["runtime.orchestrator=argo"], "runtime.orchestrator: Input should be"),
        (["schedule.cron=61 2 * * *"], "is not a schedule Airflow (croniter) can parse"),
        (["schedule.cron=0 2 * *"], "needs five fields"),
    ],
)
def test_bad_profiles_fail_validation(overrides, message):
    with pytest.raises(SpecError) as err:
        load_spec("penguin", env="kubeflow", overrides=overrides)
    assert message in str(err.value)


def test_resources_for_a_node_the_spec_does_not_have_are_refused():
    loaded = load_spec(
        "penguin", env="kubeflow", overrides=["runtime.container.resources.trainr={}"]
    )
    with pytest.raises(SpecError, match=r"resources\.trainr: no node 'trainr' in components"):
        checks.check_profile(loaded)


def test_memory_quantities_convert_to_gigabytes():
    assert ResourcesSpec(memory="16G").memory_gb == 16.0
    assert ResourcesSpec(memory="8Gi").memory_gb == pytest.approx(8.589934592)
    assert ResourcesSpec(memory="512Mi").memory_gb == pytest.approx(0.536870912)


def test_the_gpu_profile_asks_for_a_gpu_for_the_trainer_only():
    resources = load_spec("taxi", env="gpu").spec.runtime.container.resources
    assert (resources["trainer"].gpu, resources["trainer"].gpu_type) == (1, "NVIDIA_L4")
    assert resources["default"].gpu == 0


def test_compile_targets_the_profiles_orchestrator():
    assert checks.target_of(load_spec("penguin", env="kubeflow")) is Orchestrator.KUBEFLOW
    assert checks.target_of(load_spec("penguin", env="airflow")) is Orchestrator.AIRFLOW
    gpu = load_spec("penguin", env="gpu")
    assert checks.target_of(gpu, "kubeflow") is Orchestrator.KUBEFLOW


def test_compile_of_a_local_profile_says_what_to_do(capsys):
    assert cli.main(["compile", "penguin", "--env", "local"]) == 1
    assert "runtime.orchestrator is 'local'" in capsys.readouterr().err


def test_airflow_without_a_start_date_fails_before_tensorflow_is_imported(tmp_path):
    argv = ["compile", "penguin", "--env", "airflow", "--set", "schedule.start_date=null"]
    done = _light(argv + ["--output", str(tmp_path / "dag.py")], tmp_path)
    assert done.returncode == 1
    assert (
        "pipelines/profiles/airflow.yaml: schedule.start_date: Airflow needs a start" in done.stderr
    )
    assert "HEAVY []" in done.stdout
    assert not (tmp_path / "dag.py").exists()


def test_kubeflow_without_an_image_fails_before_tensorflow_is_imported(tmp_path):
    argv = ["compile", "penguin", "--env", "gpu", "--target", "kubeflow"]
    argv += ["--set", "runtime.container.image=null", "--output", str(tmp_path / "job.json")]
    done = _light(argv, tmp_path)
    assert done.returncode == 1
    assert "runtime.container.image: Kubeflow needs the pipeline image" in done.stderr
    assert "HEAVY []" in done.stdout
    assert not (tmp_path / "job.json").exists()


def test_an_unreachable_metadata_database_fails_validate_and_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVEYOR_MYSQL_PASSWORD", "secret")
    port = _closed_port()
    mysql = [
        "--set",
        f"runtime.metadata={{kind: mysql, host: 127.0.0.1, port: {port}, database: m, user: u, "
        "password_env: CONVEYOR_MYSQL_PASSWORD}",
    ]
    done = _light(["validate", "penguin", "--env", "airflow", "--connect"] + mysql, tmp_path)
    assert done.returncode == 1
    assert f"cannot reach the MySQL metadata database at 127.0.0.1:{port}" in done.stderr
    assert "Connection refused" in done.stderr
    output = tmp_path / "dag.py"
    done = _light(
        ["compile", "penguin", "--env", "airflow", "--output", str(output)] + mysql, tmp_path
    )
    assert done.returncode == 1
    assert f"127.0.0.1:{port}" in done.stderr
    assert "HEAVY []" in done.stdout
    assert not output.exists()


def test_a_missing_metadata_password_variable_is_named(monkeypatch):
    monkeypatch.delenv("CONVEYOR_MYSQL_PASSWORD", raising=False)
    with pytest.raises(SpecError, match="'CONVEYOR_MYSQL_PASSWORD' is not set"):
        checks.check_metadata_reachable(load_spec("penguin", env="team_mysql").spec)


def test_the_dockerfile_installs_the_repositorys_lock_with_the_makefiles_uv():
    dockerfile = (FRAMEWORK_ROOT / "Dockerfile").read_text()
    makefile = (FRAMEWORK_ROOT / "Makefile").read_text()
    uv_version = re.search(r"^UV_VERSION := (\S+)$", makefile, re.M).group(1)
    assert re.search(r"^FROM python:3\.10[.\d]*-slim AS base$", dockerfile, re.M)
    assert f"uv=={uv_version}" in dockerfile
    assert "COPY requirements.lock ./" in dockerfile
    assert "uv pip sync --system requirements.lock" in dockerfile
    # Conveyor installed as a package (runs record its version), not editable.
    assert "uv pip install --system --no-deps /tmp/conveyor" in dockerfile
    for line in dockerfile.splitlines():
        if line.startswith("COPY ") and not line.startswith("COPY --from="):
            for source in line.split()[1:-1]:
                assert (FRAMEWORK_ROOT / source).exists(), f"Dockerfile copies missing {source}"
    # The image's project root is where the profiles say it is, found as the command line finds
    # it; a team's project replaces the `project` stage (--build-context project=DIR).
    assert "FROM scratch AS project" in dockerfile
    assert "COPY --from=project / /conveyor/" in dockerfile
    assert "CONVEYOR_PROJECT=/conveyor" in dockerfile
    assert load_spec("penguin", env="kubeflow").spec.runtime.container.project_root == "/conveyor"
    lock = (FRAMEWORK_ROOT / "requirements.lock").read_text()
    for pinned in ("tfx==1.16.0", "kfp==", "kfp-pipeline-spec==", "apache-airflow==", "protobuf=="):
        assert re.search(rf"^{re.escape(pinned)}", lock, re.M), pinned
