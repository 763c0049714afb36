"""Every spec under every profile loads, validates and builds; bad specs say exactly why."""

from pathlib import Path

import pytest
import yaml

from pipelines.core.project import find_project
from pipelines.spec import loading as config
from pipelines.spec.loading import SpecError, load_spec
from pipelines.spec.models import DEFAULT_COMPONENTS

PAIRS = [(name, env) for name in config.list_pipelines() for env in config.list_profiles()]


def test_the_project_ships_both_reference_pipelines_and_profiles():
    assert {"penguin", "taxi"} <= set(config.list_pipelines())
    assert {"local", "ci"} <= set(config.list_profiles())
    # penguin is the default chain; taxi is the nightly one (drift, window, warm start).
    assert [c.type for c in load_spec("penguin").spec.components] == list(DEFAULT_COMPONENTS)


@pytest.mark.parametrize(("name", "env"), PAIRS)
def test_every_spec_loads_validates_and_builds(name, env, tmp_path):
    from tfx.dsl.compiler import compiler

    from pipelines.builder.pipeline import build_pipeline

    spec = load_spec(name, env=env).spec
    pipeline = build_pipeline(spec, tmp_path)

    # TFX orders nodes topologically; ids come from the spec, one node per component.
    spec_ids = sorted(c.id for c in spec.components)
    assert sorted(node.id for node in pipeline.components) == spec_ids
    ir = compiler.Compiler().compile(pipeline)
    compiled_ids = [n.pipeline_node.node_info.id for n in ir.nodes]
    assert sorted(compiled_ids) == spec_ids
    assert ir.pipeline_info.id == name
    # Everything a run writes lives under the working directory.
    root = ir.runtime_spec.pipeline_root.runtime_parameter.default_value.string_value
    assert root == str(tmp_path / "pipeline_root" / name)


def test_layers_apply_in_order_spec_then_profile_then_overrides():
    base = load_spec("penguin", env="local").spec
    ci = load_spec("penguin", env="ci").spec
    overridden = load_spec("penguin", env="ci", overrides=["trainer.train_steps=7"]).spec
    assert base.trainer.train_steps == 300
    assert ci.trainer.train_steps == 150
    assert ci.trainer.eval_steps == 5  # from the profile's all-pipelines section
    assert overridden.trainer.train_steps == 7


def test_spec_is_frozen():
    spec = load_spec("penguin").spec
    with pytest.raises(Exception, match="frozen"):
        spec.trainer.train_steps = 1  # type: ignore[misc]


def _write_spec(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load((find_project().specs_dir / "penguin.yaml").read_text())
    edit(data)
    path = tmp_path / "penguin.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_unknown_key_names_the_file_and_the_key_path(tmp_path):
    path = _write_spec(tmp_path, lambda d: d["trainer"].update(batch_sise=32))
    with pytest.raises(SpecError) as raised:
        load_spec(str(path))
    assert str(raised.value) == (
        f"{path}: trainer.batch_sise: unknown key (allowed here: batch_size, cache_dataset, "
        "checkpoint_every_steps, config, devices, distribution, dropout, eval_steps, features, "
        "gradient_clip_norm, hidden_units, jit_compile, label, learning_rate, mixed_precision, "
        "module, profile_steps, scale_learning_rate, seed, task, train_steps, warm_start, "
        "warm_start_step_fraction)."
    )


def test_wrong_type_says_what_was_expected_and_where_it_came_from():
    with pytest.raises(SpecError) as raised:
        load_spec("penguin", overrides=["trainer.train_steps=abc"])
    assert str(raised.value) == (
        "--set trainer.train_steps=abc: trainer.train_steps: Input should be a valid integer, "
        "unable to parse string as an integer (got 'abc')."
    )


def test_missing_label_column_names_the_column_and_the_schema(tmp_path):
    path = _write_spec(tmp_path, lambda d: d["trainer"].update(label="speciez"))
    with pytest.raises(SpecError) as raised:
        load_spec(str(path))
    assert str(raised.value) == (
        f"{path}: trainer.label: column 'speciez' is not in schemas/penguin/schema.pbtxt "
        "(columns: species, island, bill_length_mm, bill_depth_mm, flipper_length_mm, "
        "body_mass_g, sex, year)."
    )


def test_an_inference_output_column_not_in_the_schema_is_named():
    with pytest.raises(SpecError) as raised:
        load_spec("penguin", overrides=['inference.output_columns=["island", "islnd"]'])
    assert str(raised.value).startswith(
        '--set inference.output_columns=["island", "islnd"]: inference.output_columns[1]: '
        "column 'islnd' is not in schemas/penguin/schema.pbtxt (columns: species, island, "
    )


def test_unknown_component_type_lists_the_known_ones(tmp_path):
    path = _write_spec(tmp_path, lambda d: d.update(components=[{"type": "transformer"}]))
    with pytest.raises(
        SpecError,
        match=r"components\.0\.type: unknown component type "
        r"'transformer' \(known: csv_example_gen, statistics_gen",
    ):
        load_spec(str(path))


def test_unknown_profile_and_pipeline_list_what_exists():
    with pytest.raises(SpecError, match=r"unknown profile 'prod'.*known profiles: .*\bci, "):
        load_spec("penguin", env="prod")
    with pytest.raises(SpecError, match=r"unknown pipeline 'pengiun'.*known pipelines: penguin"):
        load_spec("pengiun")


def test_duplicate_yaml_keys_are_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("name: a\nname: b\n")
    with pytest.raises(SpecError, match="duplicate key 'name'"):
        load_spec(str(path))


def test_a_component_needing_a_missing_input_is_refused_at_validation_naming_the_entry():
    with pytest.raises(
        SpecError, match=r"components\[0\] \(trainer\): needs 'examples'.*csv_example_gen"
    ):
        load_spec("penguin", overrides=["components=[{type: trainer}]"])


_GATE_ONLY = (
    "components=[{type: csv_example_gen}, {type: statistics_gen}, {type: schema_gen}, "
    "{type: example_validator}, {type: data_gate}]"
)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # without drift the gate needs no drift baseline
        (["data.drift={}", "data.window_spans=1", _GATE_ONLY], None),
        # a role needed only because of a spec key names that key
        (
            [_GATE_ONLY],
            "components[4] (data_gate): needs 'previous_statistics' (because of data.drift)",
        ),
        (
            ["components=[{type: csv_example_gen}, {type: pusher}]"],
            "components[1] (pusher): needs 'model'",
        ),
    ],
)
def test_the_component_table_checks_wiring_in_list_order(overrides, message):
    if message is None:
        assert load_spec("taxi", overrides=overrides).spec.components[-1].type == "data_gate"
        return
    with pytest.raises(SpecError) as err:
        load_spec("taxi", overrides=overrides)
    assert message in str(err.value)


def test_every_component_type_has_an_importable_build_function():
    from pipelines.builder.pipeline import build_function
    from pipelines.spec.components import COMPONENT_TYPES

    for name in COMPONENT_TYPES:
        assert callable(build_function(name)), name


def test_skipping_bad_rows_needs_a_reader_that_can(tmp_path):
    with pytest.raises(SpecError, match="data.bad_rows 'skip' needs data.reader 'arrow' or 'auto'"):
        load_spec("taxi", overrides=["data.bad_rows=skip", "data.reader=tfx"])


@pytest.mark.parametrize(
    ("overrides", "arrow"),
    [
        ([], False),  # a small input: TFX's own reader
        (["data.arrow_above_megabytes=0"], True),  # above the threshold: Arrow
        (["data.bad_rows=skip"], True),  # only Arrow can skip rows
        (["data.reader=arrow"], True),
        (["data.reader=tfx", "data.arrow_above_megabytes=0"], False),
    ],
)
def test_reader_auto_chooses_by_input_size(tmp_path, overrides, arrow):
    from pipelines.builder.context import use_arrow_reader

    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    assert use_arrow_reader(load_spec("penguin", overrides=overrides).spec, tmp_path, None) is arrow


@pytest.mark.parametrize(("name", "key"), [("penguin", None), ("taxi", "trip_start_timestamp")])
def test_split_key_reaches_example_gen_only_when_set(tmp_path, name, key):
    from pipelines.builder.pipeline import build_pipeline

    pipeline = build_pipeline(load_spec(name).spec, tmp_path)
    from tfx.proto import example_gen_pb2
    from tfx.utils import proto_utils

    example_gen = next(c for c in pipeline.components if c.id == "csv_example_gen")
    output_config = proto_utils.json_to_proto(
        example_gen.exec_properties["output_config"], example_gen_pb2.Output()
    )
    split_config = output_config.split_config
    # An empty partition_feature_name would still count as set and break TFX's splitting.
    assert split_config.HasField("partition_feature_name") is (key is not None)
    assert (split_config.partition_feature_name or None) == key


def test_thresholds_gate_the_whole_evaluation_set_not_each_slice():
    from pipelines.builder.nodes.evaluator import eval_config

    config = eval_config(load_spec("taxi").spec)
    assert [list(s.feature_keys) for s in config.slicing_specs] == [[], ["payment_type"]]
    accuracy, auc = config.metrics_specs[0].metrics
    (gate,) = accuracy.per_slice_thresholds
    assert [list(s.feature_keys) for s in gate.slicing_specs] == [[]]
    assert gate.threshold.value_threshold.lower_bound.value == 0.6
    assert gate.threshold.change_threshold.absolute.value == -0.01
    (auc_gate,) = auc.per_slice_thresholds
    assert [list(s.feature_keys) for s in auc_gate.slicing_specs] == [[]]
    assert not auc_gate.threshold.HasField("change_threshold")
    assert not accuracy.HasField("threshold") and not auc.HasField("threshold")


def test_warm_start_without_its_resolver_is_refused_at_validation():
    with pytest.raises(
        SpecError,
        match="needs 'warm_start_model' .because of trainer.warm_start.*warm_start_resolver",
    ):
        load_spec("penguin", overrides=["trainer.warm_start=true"])


def test_an_empty_mapping_clears_what_a_lower_layer_set():
    assert load_spec("taxi").spec.data.drift
    cleared = load_spec(
        "taxi",
        overrides=[
            "data.drift={}",
            "components=[{type: csv_example_gen}, {type: statistics_gen}]",
            "data.window_spans=1",
            "trainer.warm_start=false",
        ],
    ).spec
    assert cleared.data.drift == {}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00garbage", "not a YAML text file: byte 0x89 at line 1 (offset 0)"),
        (b"name: penguin\ndata: [unclosed\n", "not valid YAML: line 3, column 1: expected ','"),
        (b"- a\n- b\n", "expected a mapping at the top level, got list"),
    ],
)
def test_a_spec_that_is_not_yaml_is_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "broken.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError) as err:
        load_spec(str(path))
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text
    assert "\n" not in text
