"""The generated spec reference and JSON Schema are current, complete, and check real specs."""

import copy
import json
from pathlib import Path

import pytest

from pipelines.core.project import find_project
from pipelines.spec import models, reference
from pipelines.spec.components import COMPONENT_TYPES
from pipelines.spec.loading import SpecError, read_yaml, validate_layers

SPEC_FILES = sorted(find_project().specs_dir.glob("*.yaml"))


def _spec_models() -> list[type]:
    return [
        obj
        for obj in vars(models).values()
        if isinstance(obj, type)
        and issubclass(obj, models.StrictModel)
        and obj is not models.StrictModel
    ]


def _as_json(data):
    """YAML data as a JSON document holds it (a YAML date becomes its ISO text)."""
    return json.loads(json.dumps(data, default=str))


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((reference.DOCS_DIR / reference.SCHEMA_FILE).read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def test_the_committed_reference_and_schema_are_what_the_generator_writes():
    stale = [str(p.relative_to(reference.FRAMEWORK_ROOT)) for p in reference.stale_files()]
    assert not stale, f"{', '.join(stale)} out of date with pipelines/spec/: run `make docs`"


def test_check_names_the_stale_file_and_writing_fixes_it(tmp_path, capsys):
    assert reference.main(["--check"], docs_dir=tmp_path) == 1  # nothing written yet
    assert reference.main([], docs_dir=tmp_path) == 0
    assert reference.main(["--check"], docs_dir=tmp_path) == 0
    schema_file = tmp_path / reference.SCHEMA_FILE
    schema_file.write_text(schema_file.read_text().replace('"schema"', '"schema_"'))
    capsys.readouterr()

    assert reference.main(["--check"], docs_dir=tmp_path) == 1
    err = capsys.readouterr().err
    assert reference.SCHEMA_FILE in err and "make docs" in err
    assert reference.REFERENCE_FILE not in err


@pytest.mark.parametrize("model", _spec_models(), ids=lambda m: m.__name__)
def test_every_model_and_field_is_described(model):
    # The reference prints the model's own docstring, not the base class's.
    assert (model.__dict__.get("__doc__") or "").strip(), f"{model.__name__} has no docstring"
    undescribed = [
        name for name, field in model.model_fields.items() if not (field.description or "").strip()
    ]
    assert not undescribed, f"{model.__name__} fields without a description: {undescribed}"


def test_the_reference_covers_every_spec_model_and_component_type():
    reachable = [model for model, _ in reference.spec_models()]
    assert reachable[0] is models.PipelineSpec
    assert sorted(m.__name__ for m in reachable) == sorted(m.__name__ for m in _spec_models())
    text = reference.reference_text()
    for model in reachable:
        assert f"\n## {model.__name__}\n" in text
        for name, field in model.model_fields.items():
            assert f"| `{field.alias or name}` |" in text
    for name in COMPONENT_TYPES:
        assert f"| `{name}` |" in text
    # The YAML key, not the Python attribute, and where each nested section lives.
    assert "| `schema` | [SchemaSpec](#schemaspec) |" in text
    assert "Key: `evaluation.metrics[].change`." in text
    assert "Key: `push.deploy.resources`." in text  # first reached there, then by name:
    assert "mapping of identifier to [ResourcesSpec](#resourcesspec)" in text
    assert reference.MODELINE in text


def test_the_schema_is_a_valid_json_schema_keyed_as_the_yaml_is(validator):
    validator.check_schema(validator.schema)
    schema = validator.schema
    assert schema["$schema"] == reference.SCHEMA_DIALECT
    assert "schema" in schema["properties"] and "schema_" not in schema["properties"]
    assert schema["$defs"]["ComponentRef"]["properties"]["type"]["enum"] == list(COMPONENT_TYPES)


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_shipped_specs_point_at_the_schema_and_validate_against_it(path: Path, validator):
    first_line = path.read_text().splitlines()[0]
    assert first_line == reference.MODELINE
    target = first_line.split("$schema=", 1)[1]
    assert (path.parent / target).resolve() == (reference.DOCS_DIR / reference.SCHEMA_FILE)

    errors = [e.message for e in validator.iter_errors(_as_json(read_yaml(path)))]
    assert errors == []


@pytest.mark.parametrize(
    ("change", "wanted"),
    [
        (lambda s: s["trainer"].update(epochs=3), "'epochs' was unexpected"),
        (lambda s: s.update(owner="me"), "'owner' was unexpected"),
        (lambda s: s["data"].update(reader="pandas"), "'pandas' is not one of"),
        (lambda s: s.update(components=[{"type": "trainr"}]), "'trainr' is not one of"),
        (lambda s: s["trainer"].update(dropout=1.5), "1.5 is greater than or equal"),
        (
            lambda s: s["data"].update(splits={"train": 2, "eval": 1, "2b": 1}),
            "'2b' does not match any of the regexes",
        ),
        (lambda s: s.pop("push"), "'push' is a required property"),
    ],
    ids=[
        "unknown-key",
        "unknown-top-level-key",
        "bad-enum",
        "unknown-component",
        "range",
        "non-identifier-mapping-key",
        "missing",
    ],
)
def test_the_schema_rejects_what_the_models_reject(change, wanted, validator):
    spec = _as_json(read_yaml(find_project().specs_dir / "penguin.yaml"))
    broken = copy.deepcopy(spec)
    change(broken)

    messages = [e.message for e in validator.iter_errors(broken)]
    assert any(wanted in m for m in messages), messages
    with pytest.raises(SpecError):
        validate_layers([("penguin.yaml", broken)])
