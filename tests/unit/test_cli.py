"""The command line answers --help, list and validate without importing TensorFlow or TFX."""

import os
import subprocess
import sys

import pytest

from pipelines import cli
from pipelines.core.paths import FRAMEWORK_ROOT

# Run from an empty folder: `--project` names this repository's example project.
PROBE = """
import sys
from pipelines import cli
code = cli.main(["--project", {project!r}, *{argv!r}])
heavy = sorted(m for m in ("tensorflow", "tfx", "apache_beam") if m in sys.modules)
print("HEAVY", heavy)
sys.exit(code)
"""


@pytest.mark.parametrize(
    "argv",
    [["list"], ["validate"], ["validate", "taxi", "--profile", "ci"], ["runs", "penguin"]],
)
def test_light_commands_import_no_tensorflow(argv, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(project=str(FRAMEWORK_ROOT), argv=argv)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,  # `runs` reads ./.conveyor
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout


def test_report_prints_the_path_without_importing_tensorflow(tmp_path):
    run_id = "penguin-20261129T020000.000000Z"
    report = tmp_path / ".conveyor" / "runs" / "penguin" / run_id / "report.html"
    report.parent.mkdir(parents=True)
    report.write_text("<html></html>")
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(project=str(FRAMEWORK_ROOT), argv=["report", run_id])],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(report)
    assert "HEAVY []" in done.stdout


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for command in ("list", "validate", "data", "run", "runs"):
        assert command in out


def test_validate_reports_a_bad_override_and_fails(capsys):
    assert cli.main(["validate", "penguin", "--profile", "ci", "--set", "push.model_name=a b"]) == 1
    err = capsys.readouterr().err
    assert (
        "FAIL penguin [ci]: --set push.model_name=a b: push.model_name: String should match" in err
    )


def test_data_writes_the_packaged_csv_with_missing_values_as_empty_fields(tmp_path, capsys):
    assert cli.main(["data", "penguin", "--workdir", str(tmp_path)]) == 0
    written = tmp_path / "data" / "penguin" / "penguins.csv"
    lines = written.read_text().splitlines()
    assert (
        lines[0]
        == "species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year"
    )
    assert len(lines) == 345  # 344 penguins and the header
    assert "NA" not in written.read_text()
    assert any(",," in line for line in lines)  # the missing values are kept, as empty fields


def test_runs_on_an_empty_workdir_says_so(tmp_path, capsys):
    assert cli.main(["runs", "penguin", "--workdir", str(tmp_path)]) == 0
    assert "no runs of penguin recorded" in capsys.readouterr().out


def test_preparing_the_same_data_again_leaves_the_file_untouched(tmp_path, capsys):
    assert cli.main(["data", "penguin", "--workdir", str(tmp_path)]) == 0
    written = tmp_path / "data" / "penguin" / "penguins.csv"
    first = written.stat().st_mtime_ns
    assert cli.main(["data", "penguin", "--workdir", str(tmp_path)]) == 0
    assert written.stat().st_mtime_ns == first  # ExampleGen's fingerprint stays the same
    assert not list(written.parent.glob("*.partial"))


def test_env_is_another_name_for_profile(capsys):
    assert cli.main(["validate", "taxi", "--profile", "ci"]) == 0
    by_profile = capsys.readouterr()
    assert cli.main(["validate", "taxi", "--env", "ci"]) == 0
    assert capsys.readouterr() == by_profile
    assert by_profile.out.startswith("ok   taxi [ci]: ")
    assert "[local]" not in by_profile.out  # one profile, not all of them


def test_the_crontab_line_names_the_profile_with_profile(tmp_path, capsys):
    argv = ["schedule", "penguin", "--print", "--workdir", str(tmp_path)]
    assert cli.main([*argv, "--env", "ci"]) == 0
    by_env = capsys.readouterr().out
    assert cli.main([*argv, "--profile", "ci"]) == 0
    assert capsys.readouterr().out == by_env
    assert " --profile ci" in by_env and "--env" not in by_env


@pytest.mark.parametrize(
    "argv",
    [
        ["--project", ".", "list"],  # before the subcommand
        ["list", "--project", "."],
        ["validate", "penguin", "--profile", "ci", "--project", "."],
    ],
)
def test_project_sets_conveyor_project_to_its_absolute_path(argv, monkeypatch, capsys):
    monkeypatch.setenv("CONVEYOR_PROJECT", "/nowhere")  # restored after the test
    monkeypatch.chdir(FRAMEWORK_ROOT)
    assert cli.main(argv) == 0
    assert os.environ["CONVEYOR_PROJECT"] == str(FRAMEWORK_ROOT)


def test_without_project_conveyor_project_is_left_alone(monkeypatch, capsys):
    monkeypatch.setenv("CONVEYOR_PROJECT", str(FRAMEWORK_ROOT))
    monkeypatch.chdir("/")
    assert cli.main(["list"]) == 0
    assert os.environ["CONVEYOR_PROJECT"] == str(FRAMEWORK_ROOT)
