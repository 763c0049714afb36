"""`data.prepare.derive`: a spec describes a column but never runs code, and the columns it
describes come out as pandas computes them."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from pipelines import cli
from pipelines.core.project import find_project
from pipelines.datasets.prepare import DataPreparationError, packaged_file, prepare
from pipelines.spec import expressions
from pipelines.spec import loading as config
from pipelines.spec.loading import SpecError, load_spec

KEY = "data.prepare.derive.big_tipper"

# (expression, what the error names). Each would write the marker file if it ever ran.
MALICIOUS = [
    ("__import__('os').system('touch {marker}')", "attribute access (.system)"),
    ("__import__('os')", "calling '__import__'"),
    ("@os.system('touch {marker}')", "`@name`"),
    ("fare.__class__", "attribute access (.__class__)"),
    ("fare.to_csv('{marker}')", "attribute access (.to_csv)"),
    ("open('{marker}', 'w')", "calling 'open'"),
    ("[c for c in fare]", "a comprehension"),
    ("(lambda: open('{marker}', 'w'))()", "a lambda"),
    ("fare[0]", "a subscript"),
    ("__builtins__", "the dunder name '__builtins__'"),
    ("f'{{fare}}'", "an f-string"),
    ("where(fare > 0, fare.to_csv('{marker}'), 0)", "attribute access (.to_csv)"),
    ("getattr(fare, 'to_csv')('{marker}')", "calling 'getattr'"),
    ("fare if tips else 0", "`a if c else b`"),
    ("fare in tips", "the operator In"),
]


@pytest.mark.parametrize(("template", "named"), MALICIOUS)
def test_a_malicious_expression_is_refused_when_the_spec_loads(template, named, tmp_path):
    marker = tmp_path / "X"
    expression = template.format(marker=marker)
    # JSON is YAML: the value reaches the spec as this exact string.
    override = f"{KEY}={json.dumps(expression)}"
    with pytest.raises(SpecError) as raised:
        load_spec("taxi", env="ci", overrides=[override])
    message = str(raised.value)
    assert f"--set {override}: {KEY}: " in message and named in message
    assert "\n" not in message
    # Evaluating it directly (what `conveyor data` does) refuses too.
    frame = pd.DataFrame({"fare": [1.0, 2.0], "tips": [0.5, 0.0]})
    with pytest.raises(expressions.ExpressionError, match="not allowed"):
        expressions.evaluate(expression, frame)
    assert not marker.exists()


def test_a_spec_file_with_a_malicious_expression_fails_validate(tmp_path, capsys):
    marker = tmp_path / "X"
    data = yaml.safe_load((find_project().specs_dir / "taxi.yaml").read_text())
    data["data"]["prepare"]["derive"]["big_tipper"] = f"tips.to_csv('{marker}')"
    path = tmp_path / "taxi.yaml"
    path.write_text(yaml.safe_dump(data))

    assert cli.main(["validate", str(path), "--env", "local"]) == 1
    err = capsys.readouterr().err
    assert f"{path}: {KEY}: attribute access (.to_csv) is not allowed" in err
    assert not marker.exists()


@pytest.fixture(scope="module")
def penguins():
    return pd.read_csv(packaged_file("palmerpenguins", "data/penguins.csv"))


# Expressions pandas' DataFrame.eval reads too: the results must be the same.
LIKE_PANDAS = [
    "bill_length_mm / bill_depth_mm",
    "body_mass_g // 100 % 7",
    "flipper_length_mm ** 2 - 3 * body_mass_g + 1.5",
    "-bill_depth_mm + +bill_length_mm",
    "body_mass_g > 4000",
    "bill_length_mm > 40 and bill_depth_mm < 18",
    "bill_length_mm > 50 or body_mass_g <= 3000",
    "(bill_length_mm > 40) & (sex == 'male')",
    "(island == 'Dream') | (island != 'Biscoe')",
    "not (body_mass_g >= 4000)",
    "40 < bill_length_mm < 45",
    "year == 2007",
    "True",
    "abs(bill_depth_mm - 17)",
    "sqrt(body_mass_g)",
    "log(flipper_length_mm)",
    "exp(bill_depth_mm / 10)",
]


@pytest.mark.parametrize("expression", LIKE_PANDAS)
def test_an_allowed_expression_gives_what_pandas_gives(expression, penguins):
    got = expressions.evaluate(expression, penguins)
    expected = penguins.eval(expression)
    if not isinstance(expected, pd.Series):  # pandas answers a constant with a scalar
        expected = pd.Series(expected, index=penguins.index)
    pd.testing.assert_series_equal(got, expected, check_names=False)


def test_the_functions_pandas_eval_lacks_are_numpys_and_pandas(penguins):
    mass, sex = penguins["body_mass_g"], penguins["sex"]
    got = expressions.evaluate("where(body_mass_g > 4000, 1, 0)", penguins)
    assert got.tolist() == np.where(mass > 4000, 1, 0).tolist()
    assert got.index.equals(penguins.index)
    assert expressions.evaluate("isnull(sex)", penguins).equals(sex.isnull())
    assert expressions.evaluate("notnull(sex)", penguins).equals(sex.notnull())
    pd.testing.assert_series_equal(
        expressions.evaluate("round(body_mass_g / 3, 1)", penguins), (mass / 3).round(1)
    )


def test_the_shipped_specs_derive_what_pandas_derived():
    checked = 0
    for name in config.list_pipelines():
        recipe = load_spec(name).spec.data.prepare
        if recipe is None or not recipe.derive:
            continue
        frame = pd.read_csv(packaged_file(recipe.package, recipe.path))
        for expression in recipe.derive.values():
            got = expressions.evaluate(expression, frame)
            pd.testing.assert_series_equal(got, frame.eval(expression), check_names=False)
            checked += 1
    assert checked  # taxi's big_tipper at least


def test_prepare_writes_a_derived_flag_as_integers(tmp_path):
    spec = load_spec("taxi", overrides=["data.prepare.rows=300"]).spec
    written = prepare(spec, tmp_path)
    source = pd.read_csv(packaged_file("tfx", spec.data.prepare.path)).head(300)
    expected = (source["tips"] > 0.2 * source["fare"]).astype(int)
    assert pd.read_csv(written)["big_tipper"].tolist() == expected.tolist()


def test_prepare_names_the_key_of_an_expression_over_a_missing_column(tmp_path):
    spec = load_spec("taxi", overrides=[f"{KEY}=tip > 0.2 * fare"]).spec
    with pytest.raises(DataPreparationError, match=rf"^{KEY}: no column 'tip' \(columns: "):
        prepare(spec, tmp_path)
