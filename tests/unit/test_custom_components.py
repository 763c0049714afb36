"""A team's TFX components in `components[]`, by import path: their inputs, outputs and
parameters read from the source without running it, every wiring mistake refused at validation
naming the entry (and the spec file), and the build wiring them as the spec says."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.core.paths import FRAMEWORK_ROOT, RunPaths
from pipelines.core.project import find_project
from pipelines.spec.components import COMPONENT_TYPES, ROLE_TYPES, Port
from pipelines.spec.custom_components import (
    STANDARD_ARTIFACTS,
    ComponentReadError,
    read_signature,
)
from pipelines.spec.loading import SpecError, load_spec

USER = "tests.user_code.components"
GATED = ["csv_example_gen", "statistics_gen", "schema_gen", "example_validator", "data_gate"]
AFTER = ["trainer", "evaluator", "pusher"]


def drop_missing(**changes) -> dict:
    """The custom entry of the tests' pipeline: rows without `sex` dropped before training."""
    entry = {
        "id": "drop_missing",
        "component": f"{USER}.DropMissing",
        "params": {"column": "sex", "min_rows": 10},
        "inputs": {"examples": "csv_example_gen.examples"},
        "provides": {"examples": "kept"},
    }
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


def write_spec(tmp_path: Path, components: list) -> Path:
    """The penguin spec with `components` (names or entries), written under tmp_path."""
    data = yaml.safe_load((find_project().specs_dir / "penguin.yaml").read_text())
    data["components"] = [{"type": c} if isinstance(c, str) else c for c in components]
    path = tmp_path / "penguin_custom.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refusal(tmp_path: Path, components: list) -> str:
    with pytest.raises(SpecError) as raised:
        load_spec(str(write_spec(tmp_path, components)))
    return str(raised.value)


# --- reading the source ------------------------------------------------------------------------


def test_a_function_component_is_read_from_its_annotations():
    signature = read_signature(f"{USER}.DropMissing")
    assert signature.inputs == {"examples": Port("Examples")}
    # OutputArtifact arguments and OutputDict values (an int is TFX's Integer artifact)
    assert signature.outputs == {"kept": Port("Examples"), "dropped": Port("Integer")}
    assert signature.parameters == {"column": Port("str"), "min_rows": Port("int", optional=True)}


def test_a_class_component_is_read_from_its_spec_class_with_constant_keys():
    signature = read_signature(f"{USER}.FilterExamples")
    assert signature.inputs == {"examples": Port("Examples"), "schema": Port("Schema", True)}
    assert signature.outputs == {"filtered": Port("Examples")}
    assert signature.parameters == {"min_rows": Port("int"), "column": Port("str", True)}


def test_a_class_with_its_own_init_takes_its_init_arguments():
    # Conveyor's infra validator: spec keys are constants of another module, and __init__ takes
    # `latency_budget_ms` where the spec has a parameter of another name.
    signature = read_signature("components.infra_validator.component.InfraValidator")
    assert signature.inputs["model_blessing"] == Port("ModelBlessing", optional=True)
    assert signature.parameters["latency_budget_ms"] == Port("float")
    assert signature.outputs == {"blessing": Port("InfraBlessing")}


def test_spreads_and_base_classes_are_followed_into_tfx_source():
    # `INPUTS = {**standard_component_specs.TrainerSpec.INPUTS, ...}`, read from tfx's source.
    signature = read_signature("components.trainer.component.Trainer")
    assert signature.inputs["examples"].type == "Examples"
    assert signature.inputs["statistics"].type == "ExampleStatistics"
    assert signature.outputs["model"].type == "Model"
    # A custom artifact class in reach is known by its TYPE_NAME.
    gate = read_signature("components.data_gate.component.DataGate")
    assert gate.outputs["findings"].type.endswith("DataGateFindings")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (f"{USER}.AliasedInput", "cannot tell from the source whether argument 'examples'"),
        (f"{USER}.Missing", "defines no class or function 'Missing'"),
        ("tests.user_code.no_such_module.Thing", "no module 'tests.user_code.no_such_module'"),
        (f"{USER}._has_value", "without TFX's @component decorator"),
    ],
)
def test_what_the_source_does_not_say_is_an_error_saying_so(path, message):
    with pytest.raises(ComponentReadError, match=message):
        read_signature(path)


def test_standard_artifact_names_are_tfx_s():
    from tfx.types import artifact, standard_artifacts

    tfx_names = {
        name
        for name, value in vars(standard_artifacts).items()
        if isinstance(value, type)
        and issubclass(value, artifact.Artifact)
        and getattr(value, "TYPE_NAME", None) == name
    }
    assert STANDARD_ARTIFACTS == tfx_names


def test_validating_imports_neither_the_component_nor_tfx(tmp_path):
    path = write_spec(tmp_path, [*GATED, drop_missing(), *AFTER])
    check = (
        "import sys; from pipelines.spec.loading import load_spec; "
        f"spec = load_spec({str(path)!r}).spec; "
        f"assert {USER!r} not in sys.modules and 'tfx' not in sys.modules, 'imported'; "
        "print(spec.components[5].id)"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=FRAMEWORK_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "drop_missing"


# --- wiring mistakes, refused at validation naming the entry ------------------------------------


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            drop_missing(inputs={"examples": "nowhere.examples"}),
            r"inputs.examples: 'nowhere.examples': unknown node 'nowhere' \(nodes before it: "
            r"csv_example_gen, statistics_gen",
        ),
        (
            drop_missing(inputs={"examples": "csv_example_gen.rows"}),
            r"node 'csv_example_gen' has no output 'rows' \(its outputs: examples\)",
        ),
        (
            drop_missing(inputs={"examples": "statistics_gen.statistics"}),
            r"'statistics_gen.statistics' carries ExampleStatistics, but input 'examples' "
            r"takes Examples",
        ),
        (
            drop_missing(inputs={"examples": "evaluator.blessing"}),
            r"refers to components\[7\] \(evaluator\), which comes after it",
        ),
        (
            drop_missing(inputs={"examples": "drop_missing.kept"}),
            r"'drop_missing.kept' is this node's own output: that would be a cycle",
        ),
        (
            drop_missing(inputs={"examples": "model"}),
            r"no earlier component provides the role 'model'",
        ),
        (
            drop_missing(inputs={"rows": "csv_example_gen.examples"}),
            r"inputs.rows: tests.user_code.components.DropMissing has no input 'rows' "
            r"\(inputs: examples\)",
        ),
        (drop_missing(inputs={}), r"DropMissing needs input examples: map each under `inputs`"),
        (
            drop_missing(params={"column": "sex", "colum": "x"}),
            r"params.colum: .*DropMissing has no parameter 'colum' \(parameters: column, "
            r"min_rows\)",
        ),
        (drop_missing(params={"min_rows": 3}), r"DropMissing needs parameter column"),
        (drop_missing(params={"column": "sex", "min_rows": "ten"}), r"'ten' is not int"),
        (
            drop_missing(provides={"examples": "dropped"}),
            r"provides.examples: output 'dropped' is Integer, but the role 'examples' carries "
            r"Examples",
        ),
        (drop_missing(provides={"examples": "filtered"}), r"has no output 'filtered'"),
        (
            drop_missing(component=f"{USER}.AliasedInput"),
            r"component 'tests.user_code.components.AliasedInput': .*cannot tell from the source",
        ),
    ],
)
def test_a_miswired_custom_component_is_refused_naming_the_entry_and_the_file(
    tmp_path, entry, message
):
    text = refusal(tmp_path, [*GATED, entry, *AFTER])
    assert text.startswith(f"{tmp_path / 'penguin_custom.yaml'}: components[5] (drop_missing): ")
    assert re.search(message, text), text


def test_a_built_in_s_inputs_are_checked_like_a_custom_component_s(tmp_path):
    text = refusal(tmp_path, [*GATED, {"type": "trainer", "inputs": {"labels": "examples"}}])
    assert "components[5] (trainer): inputs.labels: a trainer has no input 'labels'" in text
    text = refusal(
        tmp_path, [*GATED, {"type": "trainer", "inputs": {"examples": "schema_gen.schema"}}]
    )
    assert "'schema_gen.schema' carries Schema, but input 'examples' takes Examples" in text


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"type": "trainer", "component": f"{USER}.DropMissing", "id": "x"},
            "names a registered `type` or a team's `component`",
        ),
        ({"component": f"{USER}.DropMissing"}, "needs an `id`"),
        ({"type": "trainer", "params": {"a": 1}}, "`params` is for a team's `component`"),
    ],
)
def test_an_entry_names_a_type_or_a_component(tmp_path, entry, message):
    assert message in refusal(tmp_path, [*GATED, entry])


def test_a_custom_component_can_provide_a_role_a_later_built_in_needs(tmp_path):
    # The trainer needs `examples`; the custom node provides it, so the roles resolve.
    spec = load_spec(str(write_spec(tmp_path, [*GATED, drop_missing(), *AFTER]))).spec
    assert [c.id for c in spec.components][5] == "drop_missing"
    assert spec.components[5].provides == {"examples": "kept"}


# --- building ------------------------------------------------------------------------------------


def _built(tmp_path: Path, components: list):
    from pipelines.builder.pipeline import build_nodes

    spec = load_spec(str(write_spec(tmp_path, components))).spec
    ctx = build_nodes(spec, RunPaths(workdir=tmp_path / "work", spec=spec))
    return {node.id: node for node in ctx.nodes}, ctx


def test_the_trainer_reads_the_custom_node_s_output_and_the_node_runs_after_the_gate(tmp_path):
    from pipelines.builder.custom import CODE_VERSION_FLAG
    from pipelines.spec.user_code import code_digest

    nodes, _ = _built(
        tmp_path,
        [
            *GATED,
            drop_missing(),
            *AFTER[:1],
            {"type": "evaluator", "inputs": {"examples": "csv_example_gen.examples"}},
            "pusher",
        ],
    )
    custom = nodes["drop_missing"]
    assert nodes["trainer"].inputs["examples"] is custom.outputs["kept"]
    assert nodes["data_gate"] in custom.upstream_nodes
    # A built-in's `inputs` override its role: the evaluator reads the unfiltered examples.
    assert nodes["evaluator"].inputs["examples"] is nodes["csv_example_gen"].outputs["examples"]
    assert custom.exec_properties == {"column": "sex", "min_rows": 10}
    flag = f"{CODE_VERSION_FLAG}={code_digest(USER)[:16]}"
    assert flag in custom.executor_spec.extra_flags


def test_every_role_a_built_in_provides_carries_its_table_type(tmp_path):
    _, ctx = _built(tmp_path, [*GATED, *AFTER])
    for node_id, outputs in ctx.outputs.items():
        for role, channel in outputs.items():
            assert channel.type.TYPE_NAME == ROLE_TYPES[role], (node_id, role)
    assert {r for row in COMPONENT_TYPES.values() for r in row.provides} <= set(ROLE_TYPES)


def test_a_class_component_keeping_base_init_is_built_from_its_spec_class(tmp_path):
    entry = {
        "id": "filter",
        "component": f"{USER}.FilterExamples",
        "params": {"min_rows": 3},
        "inputs": {"examples": "examples"},
        "provides": {"examples": "filtered"},
    }
    nodes, _ = _built(tmp_path, [*GATED, entry, *AFTER])
    assert nodes["trainer"].inputs["examples"] is nodes["filter"].outputs["filtered"]
    assert nodes["filter"].inputs["examples"] is nodes["csv_example_gen"].outputs["examples"]


def test_a_component_whose_module_fails_to_import_fails_the_build_naming_the_entry(tmp_path):
    from pipelines.builder.context import BuildError

    entry = drop_missing(component="tests.user_code.broken_component.Broken", params={})
    entry.pop("provides")
    with pytest.raises(BuildError) as raised:
        _built(tmp_path, [*GATED, entry, *AFTER])
    assert str(raised.value).startswith(
        "components[5] (drop_missing): component 'tests.user_code.broken_component.Broken': "
        "module 'tests.user_code.broken_component' failed to import: RuntimeError: the team's "
        "module is broken on purpose."
    )
