"""`conveyor init` on four CSVs of different shapes: each spec validates under every profile,
and the columns a model must not learn from are left out with the reason in the YAML.

The command runs for real (pandas, TFDV); the CSVs are written here: the palmerpenguins CSV
`conveyor data penguin` writes, taxi-like rows with an id, a leaky and a free-text column,
generated taxi rows whose fare is the label, and a small regression table with a column that
copies the label. tests/e2e/test_init_run.py runs the first three specs to a pushed model.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipelines import cli
from pipelines.datasets import taxi
from pipelines.spec.loading import load_spec


def penguins_csv(folder: Path) -> Path:
    """The penguin CSV as `conveyor data penguin` writes it."""
    prepared = folder / "prepared"
    assert cli.main(["data", "penguin", "--workdir", str(prepared)]) == 0
    return prepared / "data" / "penguin" / "penguins.csv"


def taxi_like_csv(folder: Path, rows: int = 600) -> Path:
    """Generated taxi rows plus an id column, a column the label is a threshold of, and a
    free-text note."""
    generated = taxi.write_rows(rows, folder / "generated.csv", seed=0)
    frame = pd.read_csv(generated)
    random = np.random.default_rng(0)
    frame.insert(0, "trip_id", [f"trip-{i:06d}" for i in range(rows)])
    # big_tipper is "tip above 20% of the fare": the tip's share gives the label away.
    frame["tip_share"] = np.where(
        frame["big_tipper"] == 1, 0.21 + random.random(rows) * 0.2, random.random(rows) * 0.19
    ).round(4)
    words = ["quiet", "fast", "late", "smooth", "bumpy", "friendly", "long", "short"]
    frame["rider_note"] = [
        f"the ride was {random.choice(words)}, the driver {random.choice(words)}, and we "
        f"waited {random.integers(60)} minutes"
        for _ in range(rows)
    ]
    path = folder / "trips.csv"
    frame.to_csv(path, index=False)
    return path


def taxi_fares_csv(folder: Path, rows: int = 600) -> Path:
    """Generated taxi rows as they are (missing values, text and integer categories), whose
    fare a regression predicts."""
    path = folder / "fares.csv"
    taxi.write_rows(rows, path, seed=1)
    return path


def regression_csv(folder: Path, rows: int = 300) -> Path:
    """A learnable numeric target from two numbers and a category, and a copy of it."""
    random = np.random.default_rng(1)
    x1, x2 = random.normal(size=rows), random.normal(size=rows)
    shop = random.choice(["north", "south", "east"], size=rows)
    effect = pd.Series(shop).map({"north": 1.0, "south": -1.0, "east": 0.0}).to_numpy()
    price = 3 * x1 - 2 * x2 + effect + random.normal(scale=0.1, size=rows)
    frame = pd.DataFrame(
        {"x1": x1.round(4), "x2": x2.round(4), "shop": shop, "price": price.round(3)}
    )
    frame["price_in_cents"] = (frame["price"] * 100).round()
    path = folder / "prices.csv"
    frame.to_csv(path, index=False)
    return path


def run_init(tmp_path: Path, name: str, csv: Path, label: str, *extra: str):
    spec = tmp_path / f"{name}.yaml"
    workdir = tmp_path / "work"
    argv = ["init", name, "--csv", str(csv), "--label", label, "--output", str(spec)]
    code = cli.main([*argv, "--workdir", str(workdir), *extra])
    return code, spec, workdir


def _written(spec: Path) -> tuple[dict, str]:
    text = spec.read_text()
    return yaml.safe_load(text), text


def test_penguins_spec_validates_and_keeps_every_measurement(tmp_path, capsys):
    code, spec, workdir = run_init(tmp_path, "penguins", penguins_csv(tmp_path), "species")
    assert code == 0
    data, text = _written(spec)
    features = {f["name"]: f["kind"] for f in data["trainer"]["features"]}
    assert features == {
        "island": "categorical",
        "bill_length_mm": "numeric",
        "bill_depth_mm": "numeric",
        "flipper_length_mm": "numeric",
        "body_mass_g": "numeric",
        "sex": "categorical",
        "year": "categorical",  # three distinct integers
    }
    assert data["trainer"]["task"] == "classification"
    assert data["evaluation"]["metrics"] == [
        {"name": "SparseCategoricalAccuracy", "lower_bound": 0.442}  # Adelie: 152 of 344
    ]
    assert "Left out" not in text
    assert (workdir / "data" / "penguins" / "penguins.csv").is_file()
    out = capsys.readouterr().out
    assert f"conveyor run {spec} --workdir {workdir}" in out
    assert "validated under" in out
    loaded = load_spec(str(spec), env="ci", workdir=workdir)
    assert loaded.spec.name == "penguins"


def test_taxi_like_spec_leaves_out_the_id_the_leak_and_the_text(tmp_path):
    code, spec, workdir = run_init(tmp_path, "trips", taxi_like_csv(tmp_path), "big_tipper")
    assert code == 0
    data, text = _written(spec)
    features = {f["name"] for f in data["trainer"]["features"]}
    assert {"trip_id", "tip_share", "rider_note"}.isdisjoint(features)
    assert {"fare", "trip_miles", "payment_type", "company", "trip_start_hour"} <= features
    assert "  # - trip_id: id-like: a distinct value in every row (600 of 600)" in text
    assert "  # - tip_share: leaky: its values for each class lie in a range no other" in text
    assert "  # - rider_note: free text" in text
    assert data["trainer"]["task"] == "classification"
    assert data["evaluation"]["metrics"][0]["name"] == "BinaryAccuracy"
    load_spec(str(spec), env="local", workdir=workdir)


def test_regression_spec_leaves_out_a_copy_of_the_label(tmp_path):
    code, spec, workdir = run_init(tmp_path, "prices", regression_csv(tmp_path), "price")
    assert code == 0
    data, text = _written(spec)
    assert data["trainer"]["task"] == "regression"
    assert {f["name"]: f["kind"] for f in data["trainer"]["features"]} == {
        "x1": "numeric",
        "x2": "numeric",
        "shop": "categorical",
    }
    assert "  # - price_in_cents: leaky: correlation 1.000 with the label" in text
    [metric] = data["evaluation"]["metrics"]
    assert metric["name"] == "MeanSquaredError"
    label = pd.read_csv(workdir / "data" / "prices" / "prices.csv")["price"]
    assert metric["upper_bound"] == pytest.approx(label.var(ddof=0), rel=1e-3)
    load_spec(str(spec), env="ci", workdir=workdir)


def test_taxi_fares_spec_is_a_regression_over_every_usable_column(tmp_path):
    code, spec, workdir = run_init(tmp_path, "fares", taxi_fares_csv(tmp_path), "fare")
    assert code == 0
    data, text = _written(spec)
    assert data["trainer"]["task"] == "regression"
    features = {f["name"]: f["kind"] for f in data["trainer"]["features"]}
    assert features["trip_miles"] == features["pickup_latitude"] == "numeric"  # with gaps
    assert features["payment_type"] == features["trip_start_hour"] == "categorical"
    assert "fare" not in features and "Left out" not in text
    [metric] = data["evaluation"]["metrics"]
    assert metric["name"] == "MeanSquaredError"
    label = pd.read_csv(workdir / "data" / "fares" / "fares.csv")["fare"]
    assert metric["upper_bound"] == pytest.approx(label.var(ddof=0), rel=1e-3)


def test_a_label_that_is_not_a_column_is_refused_by_name(tmp_path, capsys):
    code, spec, _ = run_init(tmp_path, "prices", regression_csv(tmp_path), "cost")
    assert code == 1
    assert not spec.exists()
    err = capsys.readouterr().err
    assert "error: --label cost: no such column (columns: x1, x2, shop, price" in err


def test_classification_of_fractional_numbers_is_refused(tmp_path, capsys):
    csv = regression_csv(tmp_path)
    code, spec, _ = run_init(tmp_path, "prices", csv, "price", "--task", "classification")
    assert code == 1
    assert "classification needs text or integers 0 to 49" in capsys.readouterr().err


def test_an_existing_spec_is_kept_without_force(tmp_path, capsys):
    spec = tmp_path / "prices.yaml"
    spec.write_text("mine\n")
    code, _, _ = run_init(tmp_path, "prices", regression_csv(tmp_path), "price")
    assert code == 1
    assert spec.read_text() == "mine\n"
    assert "exists; pass --force" in capsys.readouterr().err


def test_init_adds_the_spec_to_the_current_projects_specs(tmp_path, monkeypatch, capsys):
    from pipelines.core.project import PROJECT_ENV

    csv = penguins_csv(tmp_path)
    project = tmp_path / "team"
    assert cli.main(["new", str(project)]) == 0
    monkeypatch.delenv(PROJECT_ENV)
    monkeypatch.chdir(project / "specs")  # anywhere inside the project
    argv = ["init", "birds", "--csv", str(csv), "--label", "species", "--profile", "ci"]
    assert cli.main([*argv, "--workdir", str(tmp_path / "work")]) == 0
    assert (project / "specs" / "birds.yaml").is_file()
    assert "conveyor run birds " in capsys.readouterr().out
    assert load_spec("birds", env="ci").spec.name == "birds"
