"""A team's project apart from the framework: found by its marker file or CONVEYOR_PROJECT, its
profile layers over Conveyor's own, and `conveyor new` writing one."""

import shutil
from pathlib import Path

import pytest
import yaml

from pipelines import cli
from pipelines.core.paths import FRAMEWORK_PROFILES_DIR
from pipelines.core.project import MARKER, PROJECT_ENV, ProjectNotFound, find_project
from pipelines.ops import new_project
from pipelines.spec import checks, loading
from pipelines.spec.loading import SpecError, load_spec

EXAMPLE = find_project().root  # this repository: the framework's example project


def make_project(root: Path, profiles: dict[str, dict] | None = None) -> Path:
    """A project holding the example penguin spec and schema, and the given profile layers."""
    (root / "specs").mkdir(parents=True)
    (root / MARKER).write_text("# a test project\n")
    shutil.copy(EXAMPLE / "specs" / "penguin.yaml", root / "specs" / "penguin.yaml")
    shutil.copytree(EXAMPLE / "schemas" / "penguin", root / "schemas" / "penguin")
    (root / "configs").mkdir()
    for name, layer in (profiles or {}).items():
        (root / "configs" / f"{name}.yaml").write_text(yaml.safe_dump(layer))
    return root


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = make_project(tmp_path / "team")
    monkeypatch.setenv(PROJECT_ENV, str(root))
    return root


def test_the_environment_variable_names_the_project():
    found = find_project(environ={PROJECT_ENV: str(EXAMPLE)}, start="/")
    assert found.root == EXAMPLE
    assert found.specs_dir == EXAMPLE / "specs"


def test_the_nearest_marker_upwards_is_the_project(tmp_path):
    root = make_project(tmp_path / "team")
    nested = root / "team_modules" / "deep"
    nested.mkdir(parents=True)
    assert find_project(start=nested, environ={}).root == root.resolve()


def test_no_project_is_one_paragraph_naming_where_it_looked(tmp_path):
    with pytest.raises(ProjectNotFound) as raised:
        find_project(start=tmp_path, environ={})
    message = str(raised.value)
    assert "\n" not in message
    assert f"no {MARKER} in {tmp_path.resolve()} or any folder above it" in message
    assert "conveyor new DIR" in message and "--project DIR" in message


def test_a_variable_naming_no_project_is_refused(tmp_path):
    with pytest.raises(ProjectNotFound, match=rf"{PROJECT_ENV}=.* is not a Conveyor project"):
        find_project(environ={PROJECT_ENV: str(tmp_path)})


def test_commands_outside_a_project_say_so(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(PROJECT_ENV)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["list"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: no Conveyor project here")


def test_the_project_option_names_the_project(tmp_path, monkeypatch, capsys):
    root = make_project(tmp_path / "team")
    monkeypatch.delenv(PROJECT_ENV)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--project", str(root), "list"]) == 0
    assert "penguin" in capsys.readouterr().out


def test_a_project_layer_goes_over_conveyors_profile_of_the_same_name(tmp_path, monkeypatch):
    root = make_project(
        tmp_path / "team",
        {
            "ci": {
                "trainer": {"eval_steps": 7},
                "pipelines": {"penguin": {"trainer": {"train_steps": 9}}},
            }
        },
    )
    monkeypatch.setenv(PROJECT_ENV, str(root))
    loaded = load_spec("penguin", env="ci")
    assert loaded.spec.trainer.eval_steps == 7  # the project's layer over Conveyor's 5
    assert loaded.spec.trainer.train_steps == 9
    # Conveyor's ci layer still applies beneath it.
    assert loaded.spec.runtime.beam_args == (
        "--direct_running_mode=in_memory",
        "--direct_num_workers=1",
    )
    assert loaded.sources[:3] == (
        "specs/penguin.yaml",
        "pipelines/profiles/ci.yaml",
        "pipelines/profiles/ci.yaml (pipelines.penguin)",
    )
    assert loaded.sources[3:] == ("configs/ci.yaml", "configs/ci.yaml (pipelines.penguin)")


def test_a_project_may_add_profiles_and_list_shows_both(tmp_path, monkeypatch, capsys):
    root = make_project(tmp_path / "team", {"nightly_small": {"trainer": {"train_steps": 11}}})
    monkeypatch.setenv(PROJECT_ENV, str(root))
    profiles = loading.list_profiles()
    assert "nightly_small" in profiles
    assert {p.stem for p in FRAMEWORK_PROFILES_DIR.glob("*.yaml")} <= set(profiles)
    assert load_spec("penguin", env="nightly_small").spec.trainer.train_steps == 11
    assert cli.main(["list"]) == 0
    assert "nightly_small" in capsys.readouterr().out


def test_errors_name_the_layer_and_key_that_gave_the_value(tmp_path, monkeypatch):
    root = make_project(tmp_path / "team", {"ci": {"trainer": {"train_stepz": 3}}})
    monkeypatch.setenv(PROJECT_ENV, str(root))
    with pytest.raises(SpecError, match=r"^configs/ci\.yaml: trainer\.train_stepz: unknown key"):
        load_spec("penguin", env="ci")
    with pytest.raises(SpecError, match=r"unknown profile 'prod': no configs/prod"):
        load_spec("penguin", env="prod")


def test_a_check_names_conveyors_profile_when_the_project_has_no_layer(project):
    loaded = load_spec("penguin", env="airflow", overrides=["schedule.start_date=null"])
    with pytest.raises(checks.ProfileError, match=r"^pipelines/profiles/airflow\.yaml: schedule"):
        checks.check_profile(loaded)


def test_the_schema_is_the_projects(project):
    (project / "schemas" / "penguin" / "schema.pbtxt").write_text('feature { name: "species" }\n')
    with pytest.raises(SpecError, match=r"column 'island' is not in schemas/penguin/schema\.pbtxt"):
        load_spec("penguin", env="local")


def test_the_example_projects_profiles_resolve_as_before():
    # Conveyor's kubeflow profile and the example project's layer (its image and bucket).
    spec = load_spec("penguin", env="kubeflow").spec
    assert spec.runtime.orchestrator.value == "kubeflow"
    assert spec.runtime.container.image.endswith("/conveyor-prod/pipelines/conveyor:0.1.0")
    assert spec.runtime.container.resources["trainer"].cpu == 4
    assert load_spec("taxi", env="ci").spec.data.prepare.rows == 3000


def test_new_writes_a_project_that_validates(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(PROJECT_ENV)
    target = tmp_path / "fraud-models"
    assert cli.main(["new", str(target)]) == 0
    assert f"cd {target}" in capsys.readouterr().out
    for name in (
        MARKER,
        "Makefile",
        "README.md",
        "specs/penguin.yaml",
        "configs/ci.yaml",
        "schemas/penguin/schema.pbtxt",
        "fraud_models/__init__.py",
        "fraud_models/model.py",
        "tests/test_specs.py",
        ".gitignore",
    ):
        assert (target / name).is_file(), name
    makefile = (target / "Makefile").read_text()
    assert "pipeline-local:" in makefile and "\ntest:" in makefile
    monkeypatch.chdir(target / "fraud_models")
    spec = load_spec("penguin", env="ci").spec
    assert spec.trainer.module == "fraud_models.model"
    assert spec.trainer.train_steps == 100
    for profile in loading.list_profiles():
        checks.check_profile(load_spec("penguin", env=profile))


def test_new_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine\n")
    assert cli.main(["new", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path} is not empty") and err.count("\n") == 1
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize(
    "folder, package",
    [
        ("fraud-models", "fraud_models"),
        ("2026 Churn", "_2026_churn"),
        ("class", "_class"),
        ("specs", "specs_modules"),
    ],
)
def test_the_teams_package_is_named_after_the_folder(folder, package):
    assert new_project.package_name(Path("/x") / folder) == package
