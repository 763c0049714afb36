"""The taxi spec runs the same code on a dataset it was not written for: an inferred schema,
an integer binary label derived from two columns, hashed integer categories, missing values.
The run also converts the model to TF Lite (`push.tflite`), whose parity this checks on taxi's
columns (tests/e2e/test_tflite.py has the rest of TF Lite, on penguin)."""

import tensorflow as tf

from pipelines import cli
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec
from pipelines.spec.models import TFLITE_DEFAULT_TOLERANCE, TfLiteQuantization
from tests.tflite_check import largest_difference


def test_taxi_runs_fully_and_serves_a_binary_classifier(tmp_path):
    assert cli.main(["data", "taxi", "--env", "ci", "--workdir", str(tmp_path)]) == 0
    loaded = load_spec("taxi", env="ci", overrides=["push.tflite.enabled=true"], workdir=tmp_path)
    result = nightly.run(loaded, tmp_path, echo=lambda _: None)

    assert result.outcome == "pushed", result.message
    paths = RunPaths(workdir=tmp_path, spec=loaded.spec)
    serve = tf.saved_model.load(str(paths.serving_dir / "1")).signatures["serving_default"]
    nan = float("nan")
    rows = {
        "fare": [12.45, 40.0],
        "trip_miles": [1.2, 15.0],
        "trip_seconds": [300, 1500],
        "pickup_latitude": [41.88, nan],
        "pickup_longitude": [-87.63, nan],
        "dropoff_latitude": [41.9, nan],
        "dropoff_longitude": [-87.62, nan],
        "trip_start_hour": [19, 8],
        "trip_start_day": [6, 2],
        "trip_start_month": [5, 11],
        "pickup_community_area": [8, 76],
        "dropoff_community_area": [32, 8],
        "payment_type": ["Credit Card", "Cash"],
        "company": ["", "Flash Cab"],
    }
    # Each input takes the type its column has in the data (the schema decides, not the test).
    _, signature = serve.structured_input_signature
    assert set(signature) == set(rows)
    outputs = serve(
        **{name: tf.constant(rows[name], spec.dtype) for name, spec in signature.items()}
    )
    probabilities = outputs["probabilities"].numpy()
    assert probabilities.shape == (2, 1)
    assert ((probabilities >= 0) & (probabilities <= 1)).all()
    assert set(outputs["classes"].numpy().tolist()) <= {b"0", b"1"}

    # The float32 TF Lite model inside the version answers the data's rows as the SavedModel.
    [csv_file] = (tmp_path / "data" / "taxi").glob("*/taxi.csv")
    worst, compared = largest_difference(paths.serving_dir / "1", csv_file)
    assert compared == 400 and worst <= TFLITE_DEFAULT_TOLERANCE[TfLiteQuantization.NONE]
