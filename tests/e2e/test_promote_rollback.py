"""Version labels through real pushes: penguin under the `ci` profile pushes twice, is rolled
back, pushes a third model that lands as canary only, and is promoted; after every step
models.config is one TF Serving parses, ML Metadata records each label move, and a running
`conveyor serve` answers `/labels/stable` and `/labels/canary` with the version the label
names (its predictions equal that version's in-process answers), also after a restart.

One working directory, in order. Each run trains a few steps more than the one before, so each
has a new model to push; thresholds are lowered so that any model may be pushed.
"""

import sys

import numpy as np
import pytest

from pipelines import cli, serving_state
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.serving_state import labels
from pipelines.serving_state.config_files import MODELS_CONFIG, read_models_config
from pipelines.spec.loading import load_spec
from tests.conftest import run_artifacts
from tests.serving_server import serving, wait_for

ANY_MODEL = ["evaluation.metrics=[{name: SparseCategoricalAccuracy, lower_bound: 0.0}]"]


def _push(workdir, steps: int) -> str:
    loaded = load_spec(
        "penguin", env="ci", overrides=[*ANY_MODEL, f"trainer.train_steps={steps}"], workdir=workdir
    )
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    assert result.outcome == "pushed", result.message
    return result.run_id


def _labels(paths: RunPaths) -> dict[str, int]:
    config = read_models_config(paths.serving_config_dir / MODELS_CONFIG)  # as the server parses
    [entry] = [m for m in config.model_config_list.config if m.name == "penguin"]
    assert sorted(entry.model_version_policy.specific.versions) == sorted(
        set(entry.version_labels.values())
    )
    return dict(entry.version_labels)


ROWS = [
    {"island": "Torgersen", "sex": "male", "bill_length_mm": 39.1, "bill_depth_mm": 18.7,
     "flipper_length_mm": 181.0, "body_mass_g": 3750.0},
    {"island": "Biscoe", "sex": "female", "bill_length_mm": 46.5, "bill_depth_mm": 14.5,
     "flipper_length_mm": 213.0, "body_mass_g": 4800.0},
]  # fmt: skip


def _in_process(paths: RunPaths, version: int) -> dict[str, np.ndarray]:
    """What version `version`'s serving_default answers for ROWS, called in this process."""
    import tensorflow as tf

    signature = tf.saved_model.load(str(paths.serving_dir / str(version))).signatures[
        "serving_default"
    ]
    inputs = signature.structured_input_signature[1]
    batch = {
        name: tf.constant([r[name] for r in ROWS], spec.dtype) for name, spec in inputs.items()
    }
    answers = {name: tensor.numpy() for name, tensor in signature(**batch).items()}
    # The numbers tell versions apart (class names are the same in every version).
    return {name: value for name, value in answers.items() if value.dtype.kind in "fiu"}


def _served_version(server, label: str, answers: dict[int, dict[str, np.ndarray]]) -> int | None:
    """Which version answers `/labels/<label>:predict`: the one whose in-process answers the
    server's equal (each version is trained for a different number of steps)."""
    response = server.post(f"/v1/models/penguin/labels/{label}:predict", {"instances": ROWS})
    if response.status_code != 200:
        return None
    predictions = response.json()["predictions"]
    for version, expected in answers.items():
        if all(
            np.allclose([p[name] for p in predictions], values, rtol=1e-5, atol=1e-6)
            for name, values in expected.items()
        ):
            return version
    return None


def _serves(server, paths: RunPaths, labels_to_versions: dict[str, int]) -> None:
    """Waits (a poll or two) until every label is answered by the version it names."""
    versions = sorted(p.name for p in paths.serving_dir.iterdir() if p.name.isdigit())
    answers = {int(v): _in_process(paths, int(v)) for v in versions}
    for label, version in labels_to_versions.items():
        wait_for(
            lambda label=label, version=version: _served_version(server, label, answers) == version,
            60,
            f"/labels/{label} to answer as version {version}",
            interval=0.5,
        )


def _cli(workdir, *argv: str) -> int:
    return cli.main([*argv[:1], "penguin", *argv[1:], "--env", "ci", "--workdir", str(workdir)])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("labels")
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    return workdir


def test_rollback_holds_stable_the_next_push_is_canary_and_promote_moves_stable(workdir, capsys):
    paths = RunPaths(workdir=workdir, spec=load_spec("penguin", env="ci").spec)
    _push(workdir, 20)
    assert _labels(paths) == {"stable": 1, "canary": 1}
    serve = [sys.executable, "-m", "pipelines.cli", "serve", "penguin", "--env", "ci"]
    args = ["--workdir", str(workdir), "--poll-seconds", "0.5"]
    with serving(args, workdir / "server", command=serve) as server:
        _serves(server, paths, {"stable": 1, "canary": 1})
        _push(workdir, 21)
        assert _labels(paths) == {"stable": 2, "canary": 2}
        _serves(server, paths, {"stable": 2, "canary": 2})

        assert _cli(workdir, "rollback", "--reason", "version 2 is slow", "--by", "ana") == 0
        assert "ROLLBACK: canary 2 -> 1; stable 2 -> 1; stable is held" in capsys.readouterr().out
        assert _labels(paths) == {"stable": 1, "canary": 1}
        _serves(server, paths, {"stable": 1, "canary": 1})

        third = _push(workdir, 22)
        assert _labels(paths) == {"stable": 1, "canary": 3}
        _serves(server, paths, {"stable": 1, "canary": 3})
    store = metadata.open_store(paths.spec, paths.metadata_path)
    # The run's context also holds the served push its baseline resolver read.
    [push] = [
        a
        for a in run_artifacts(store, third, "PushedModel")
        if metadata.custom_property(a, "pushed_version") == "3"
    ]
    assert metadata.custom_property(push, serving_state.LABELS_PROPERTY) == "canary"

    assert _cli(workdir, "models") == 0
    table = capsys.readouterr().out
    assert "held: stable stays on version 1" in table
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line[:1].isdigit()}
    assert rows["3"][1:4] == ["canary", "yes", third]
    assert rows["1"][1:3] == ["stable", "yes"] and rows["2"][1:3] == ["-", "yes"]

    assert _cli(workdir, "promote", "--version", "7", "--label", "stable") == 1
    assert "version 7 of penguin is not on disk" in capsys.readouterr().err
    assert _cli(workdir, "promote", "--version", "3", "--label", "stable", "--reason", "ok") == 0
    assert _labels(paths) == {"stable": 3, "canary": 3}
    assert labels.read_hold(paths.serving_config_dir, "penguin") is None
    # A server started afresh reads the labels from models.config.
    with serving(args, workdir / "server", command=serve) as server:
        _serves(server, paths, {"stable": 3, "canary": 3})

    assert _cli(workdir, "lineage", "--version", "1") == 0
    lineage = capsys.readouterr().out
    assert (
        "stable by rollback" in lineage and "(from version 2) by ana: version 2 is slow" in lineage
    )
