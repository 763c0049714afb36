"""`push.tflite` through real penguin runs on one workdir: a float16 TF Lite model that matches is
pushed inside its version; one that drifts (tolerance 0: float16 weights always move the
answers) holds the push back under `required: true`, and without it the SavedModel is pushed
alone, the reason in ML Metadata, the report and the log. Taxi's parity is checked on its own
reference run (tests/e2e/test_taxi.py)."""

import json
from pathlib import Path

import markupsafe
import pytest

from pipelines import cli
from pipelines.core import metadata
from pipelines.core.paths import REPORT_FILE, RUN_SUMMARY, RunPaths
from pipelines.ops import nightly
from pipelines.serving_state.versions import model_digest
from pipelines.spec.loading import load_spec
from pipelines.spec.models import TFLITE_DEFAULT_TOLERANCE, TfLiteQuantization
from tests.conftest import run_artifacts
from tests.tflite_check import largest_difference

FLOAT16_TOLERANCE = TFLITE_DEFAULT_TOLERANCE[TfLiteQuantization.FLOAT16]
# A different model than version 1's (one more step), so that it is not "identical to the
# served version"; the same for both drift runs, so the second reuses the first's conversion.
DRIFT = ["trainer.train_steps=151", "push.tflite.tolerance=0"]


def _run(workdir: Path, *overrides: str):
    loaded = load_spec(
        "penguin",
        env="ci",
        overrides=["push.tflite.enabled=true", "push.tflite.quantization=float16", *overrides],
        workdir=workdir,
    )
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    return RunPaths(workdir=workdir, spec=loaded.spec), result


def _converted(paths: RunPaths, run_id: str):
    """The run's TFLiteModel and PushedModel (its context also holds the PushedModel of the
    run before, which the baseline resolver read: the newest is this run's)."""
    store = metadata.open_store(paths.spec, paths.metadata_path)
    newest = [
        max(run_artifacts(store, run_id, kind), key=lambda a: a.id)
        for kind in ("TFLiteModel", "PushedModel")
    ]
    return tuple(newest)


def _prop(artifact, key):
    return metadata.custom_property(artifact, key)


@pytest.fixture(scope="module")
def passed(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tflite")
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    paths, result = _run(workdir)
    return workdir, paths, result


@pytest.fixture(scope="module")
def refused(passed):
    workdir, paths, _ = passed
    served = model_digest(str(paths.serving_dir / "1"))
    _, result = _run(workdir, *DRIFT, "push.tflite.required=true")
    return paths, result, served


@pytest.fixture(scope="module")
def pushed_alone(refused):
    paths, _, _ = refused
    _, result = _run(paths.workdir, *DRIFT)
    return paths, result


def test_a_matching_tflite_model_is_pushed_inside_its_version(passed):
    workdir, paths, result = passed
    assert result.outcome == "pushed", result.message
    version = paths.serving_dir / "1"
    flatbuffer = version / "model.tflite"
    assert (version / "saved_model.pb").is_file() and flatbuffer.is_file()

    # What a client gets: rows fed to the served SavedModel and to the model.tflite beside it.
    worst, rows = largest_difference(version, workdir / "data" / "penguin" / "penguins.csv")
    assert rows == 344 and worst <= FLOAT16_TOLERANCE

    converted, pushed = _converted(paths, result.run_id)
    assert _prop(converted, "passed") == 1
    assert _prop(converted, "quantization") == "float16"
    assert _prop(converted, "size_bytes") == flatbuffer.stat().st_size
    assert _prop(converted, "tolerance") == f"{FLOAT16_TOLERANCE:g}"
    assert float(_prop(converted, "max_abs_difference")) <= FLOAT16_TOLERANCE
    assert 0 < _prop(converted, "parity_rows") <= 200  # the evaluation split, up to parity_rows
    assert _prop(converted, "metric") == "SparseCategoricalAccuracy"
    saved, lite = _prop(converted, "metric_savedmodel"), _prop(converted, "metric_tflite")
    assert _prop(converted, "metric_delta") == pytest.approx(lite - saved, abs=1e-6)
    assert _prop(converted, "conveyor_reason").startswith("float16 TF Lite model (")
    assert _prop(pushed, "conveyor_tflite") == "with model.tflite"

    report = (Path(result.run_dir) / REPORT_FILE).read_text()
    assert '<tr><td>TF Lite</td><td><span class="badge ok">passed</span> float16' in report
    assert "In the push: with model.tflite." in report


def test_drift_under_required_pushes_nothing(refused):
    paths, result, served = refused
    assert result.outcome == "not_pushed", result.message
    assert result.message.startswith(
        "nothing pushed: the TF Lite model did not pass (push.tflite.required): drift: the "
        "float16 TF Lite model's outputs differ from the SavedModel's by up to "
    ), result.message
    assert result.reason == "tflite_refused"
    assert result.alerts  # like an infra refusal: a blessed model that cannot ship as asked
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]
    assert model_digest(str(paths.serving_dir / "1")) == served

    converted, pushed = _converted(paths, result.run_id)
    assert _prop(converted, "passed") == 0 and _prop(converted, "tolerance") == "0"
    assert float(_prop(converted, "max_abs_difference")) > 0
    assert _prop(pushed, "pushed") == 0
    summary = json.loads((Path(result.run_dir) / RUN_SUMMARY).read_text())
    assert summary["reason"] == "tflite_refused"
    assert _prop(pushed, "conveyor_reason_code") == "tflite_refused"
    report = (Path(result.run_dir) / REPORT_FILE).read_text()
    assert '<tr><td>TF Lite</td><td><span class="badge warn">not passed</span> drift: ' in report


def test_drift_without_required_pushes_the_savedmodel_alone(pushed_alone):
    paths, result = pushed_alone
    assert result.outcome == "pushed", result.message
    version = paths.serving_dir / "2"
    assert (version / "saved_model.pb").is_file()
    assert not (version / "model.tflite").exists()
    # Only the Pusher's settings changed: the conversion and its verdict are the last run's.
    states = {n.node_id: n.state for n in result.nodes}
    assert states["tflite_converter"] == "cached" and states["pusher"] == "executed"

    _, pushed = _converted(paths, result.run_id)
    why = _prop(pushed, "conveyor_tflite")
    assert why.startswith("without model.tflite: drift: the float16 TF Lite model's outputs")
    assert _prop(pushed, "conveyor_reason") == f"pushed version 2, {why}"
    report = (Path(result.run_dir) / REPORT_FILE).read_text()
    assert f"In the push: {markupsafe.escape(why)}." in report
    log = (Path(result.run_dir) / "run.log").read_text()
    assert f"TF Lite: the version goes {why}" in log
