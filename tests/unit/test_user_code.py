"""User code a spec names (`trainer.module`, `transform.module`, text embeddings) is found and
classified at validate without being imported, its digest keys the cache, and every bad module
is refused with one paragraph naming the spec key and the module."""

import sys
import textwrap

import pytest

from pipelines.builder.context import code_version, user_code
from pipelines.spec import user_code as user_code_lib
from pipelines.spec.loading import SpecError, load_spec
from pipelines.spec.user_code import Contract, UserCodeError

PENGUIN_TFX = "tfx.examples.penguin.penguin_utils_keras"


@pytest.fixture
def team(tmp_path, monkeypatch):
    """A package `team_code` on the path; returns a function writing a module into it."""
    package = tmp_path / "team_code"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        (package / f"{name}.py").write_text(textwrap.dedent(source))
        return f"team_code.{name}"

    return write


def _load(*overrides: str):
    return load_spec("penguin", env="ci", overrides=overrides)


def test_a_run_fn_module_is_tfx_and_a_build_model_module_is_the_hook(team):
    tfx_module = team("tfx_style", "def run_fn(fn_args):\n    pass\n")
    hook = team("hook", "def build_model(inputs, spec):\n    return inputs\n")
    assert user_code_lib.trainer_contract(tfx_module) is Contract.TFX_RUN_FN
    assert user_code_lib.trainer_contract(hook) is Contract.CONVEYOR_HOOK


def test_tfx_penguin_module_is_classified_without_importing_it(monkeypatch):
    # An end-to-end test run earlier in this worker process may have imported it.
    monkeypatch.delitem(sys.modules, PENGUIN_TFX, raising=False)
    assert user_code_lib.trainer_contract(PENGUIN_TFX) is Contract.TFX_RUN_FN
    user_code_lib.check_transform_module(PENGUIN_TFX)  # preprocessing_fn = base.preprocessing_fn
    assert PENGUIN_TFX not in sys.modules


def test_validating_never_executes_the_module(team):
    module = team(
        "explodes",
        """
        raise RuntimeError("imported at validate")


        def build_model(inputs, spec):
            return inputs
        """,
    )
    loaded = _load(f"trainer.module={module}", "trainer.config={width: 8}")
    assert loaded.spec.trainer.module == module
    assert loaded.spec.trainer.config == {"width": 8}
    assert module not in sys.modules and "team_code" not in sys.modules


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = 1\n", "defines neither `run_fn`"),
        ("def run_fn(a):\n    pass\n\n\ndef build_model(i, s):\n    pass\n", "defines both"),
        ("def run_fn(:\n", "line 1: syntax error"),
    ],
)
def test_a_module_without_one_entry_point_is_refused_naming_key_and_module(team, source, expected):
    module = team("bad", source)
    with pytest.raises(SpecError) as caught:
        _load(f"trainer.module={module}")
    message = str(caught.value)
    assert f"trainer.module {module!r}" in message and expected in message
    assert "--set trainer.module" in message  # where the key came from
    assert "\n" not in message.strip()


def test_a_module_that_does_not_exist_is_refused(team):
    team("present", "def run_fn(a):\n    pass\n")
    with pytest.raises(SpecError, match=r"no module 'team_code\.absent' in package 'team_code'"):
        _load("trainer.module=team_code.absent")
    with pytest.raises(SpecError, match="no module 'no_such_team' on the Python path"):
        _load("trainer.module=no_such_team.models")


def test_transform_needs_its_component_a_run_fn_module_and_a_preprocessing_fn(team):
    run_fn = team("trainer_mod", "def run_fn(fn_args):\n    pass\n")
    hook = team("hook_mod", "def build_model(inputs, spec):\n    return inputs\n")
    no_fn = team("no_fn", "def other(inputs):\n    return inputs\n")
    with pytest.raises(SpecError, match=r"needs 'transform_graph'.*list one of \['transform'\]"):
        _load(f"trainer.module={run_fn}", f"transform.module={PENGUIN_TFX}")
    components = (
        "components=[{type: csv_example_gen}, {type: statistics_gen}, {type: schema_gen}, "
        "{type: transform}, {type: trainer}, {type: evaluator}, {type: pusher}]"
    )
    with pytest.raises(SpecError, match="needs `trainer.module` with a `run_fn`"):
        _load(components, f"transform.module={PENGUIN_TFX}")
    with pytest.raises(SpecError, match="is a build_model hook") as refused:
        _load(components, f"trainer.module={hook}", f"transform.module={PENGUIN_TFX}")
    message = str(refused.value)
    assert "\n" not in message.strip()  # one paragraph: why, and the two ways out
    assert "cannot turn it into the hook's input vector or find the label" in message
    assert "Either drop `transform`" in message and "TFX run_fn module" in message
    with pytest.raises(
        SpecError, match=r"transform.module 'team_code.no_fn'.*no `preprocessing_fn`"
    ):
        _load(components, f"trainer.module={run_fn}", f"transform.module={no_fn}")
    loaded = _load(components, f"trainer.module={run_fn}", f"transform.module={PENGUIN_TFX}")
    assert loaded.spec.transform.module == PENGUIN_TFX


def test_a_text_feature_needs_an_embedding_saved_on_disk(tmp_path):
    text_feature = "trainer.features=[{name: island, kind: text}]"
    with pytest.raises(SpecError, match="'island' is text and needs an `embedding`"):
        _load(text_feature)
    missing = f"trainer.features=[{{name: island, kind: text, embedding: {{module: {tmp_path}}}}}]"
    with pytest.raises(SpecError, match=r"embedding.module: .* is not a SavedModel folder"):
        _load(missing)
    trainable = (
        "trainer.features=[{name: island, kind: text, "
        f"embedding: {{module: {tmp_path}, trainable: true}}}}]"
    )
    with pytest.raises(SpecError, match="trainable: true is not supported"):
        _load(trainable)
    (tmp_path / "saved_model.pb").write_bytes(b"stand-in: validation only checks it is there")
    assert _load(missing).spec.trainer.features[0].embedding.module == str(tmp_path)


def test_the_digest_follows_the_modules_it_imports_so_an_edit_retrains(team, tmp_path):
    module = team(
        "model",
        """
        from team_code import layers

        def build_model(inputs, spec):
            from .helpers import WIDTH  # a lazy, relative import is followed too
            return layers.dense(inputs, WIDTH)
        """,
    )
    team("layers", "from team_code.nested.deep import ACTIVATION\n")
    nested = tmp_path / "team_code" / "nested"
    nested.mkdir()
    (nested / "__init__.py").write_text("")
    (nested / "deep.py").write_text("ACTIVATION = 'relu'\n")
    team("helpers", "WIDTH = 8\n")
    team("unrelated", "NOT_IMPORTED = 1\n")
    spec = _load(f"trainer.module={module}").spec
    first = user_code(spec, "trainer")
    assert list(first) == [module]
    assert user_code(spec, "trainer") == first  # unchanged: the same cache key
    assert code_version(first) == code_version(dict(first)) != code_version()

    # A module it does not import may change without re-training.
    (tmp_path / "team_code" / "unrelated.py").write_text("NOT_IMPORTED = 2\n")
    assert user_code(spec, "trainer") == first

    # Each module it imports, directly, lazily or through another, and the packages on the way.
    previous = first
    for path, text in [
        ("helpers.py", "WIDTH = 16\n"),
        ("nested/deep.py", "ACTIVATION = 'gelu'\n"),
        ("nested/__init__.py", "# a package's __init__ runs on import\n"),
        ("__init__.py", "# the top package's too\n"),
    ]:
        (tmp_path / "team_code" / path).write_text(text)
        now = user_code(spec, "trainer")
        assert now[module] != previous[module], path
        assert code_version(now) != code_version(previous)
        previous = now


def test_an_installed_module_digest_is_its_folder_and_version():
    digest = user_code_lib.code_digest(PENGUIN_TFX)
    assert digest == user_code_lib.code_digest(PENGUIN_TFX)
    assert len(digest) == 64


def test_find_source_does_not_import_packages(team):
    module = team("plain", "def run_fn(a):\n    pass\n")
    (user_code_lib.find_source(module).parent / "__init__.py").write_text("raise SystemExit(9)\n")
    assert user_code_lib.find_source(module).name == "plain.py"
    with pytest.raises(UserCodeError, match="is a module, not a package"):
        user_code_lib.find_source(f"{module}.deeper")


def test_a_module_in_namespace_packages_is_found_and_digested(tmp_path, monkeypatch):
    # Folders without __init__.py (PEP 420) are packages too; nothing is imported to find them.
    models = tmp_path / "ns_team" / "models"
    models.mkdir(parents=True)
    (models / "wide.py").write_text("from ns_team.models import shared\n")
    (models / "shared.py").write_text("WIDTH = 8\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert user_code_lib.find_source("ns_team.models.wide") == models / "wide.py"
    before = user_code_lib.code_digest("ns_team.models.wide")
    (models / "shared.py").write_text("WIDTH = 16\n")
    assert user_code_lib.code_digest("ns_team.models.wide") != before
    with pytest.raises(UserCodeError, match="no module 'ns_team.models.absent'"):
        user_code_lib.find_source("ns_team.models.absent")
    assert "ns_team" not in sys.modules
