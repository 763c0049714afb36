"""Warm start through the real pipeline: enabling it is a spec change, the second night starts
from the served model and trains the share of the steps the spec gives a warm start, and an
unchanged re-run stays all cache hits."""

import json

import pandas as pd

from pipelines import cli
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec
from pipelines.spec.models import DEFAULT_COMPONENTS

# The default chain with a warm_start_resolver just before the trainer.
_TYPES = [
    resolved
    for component in DEFAULT_COMPONENTS
    for resolved in (["warm_start_resolver", component] if component == "trainer" else [component])
]
WITH_WARM_START = [
    "trainer.warm_start=true",
    "trainer.warm_start_step_fraction=0.5",
    "components=[" + ", ".join(f"{{type: {t}}}" for t in _TYPES) + "]",
]


def _trainer_summary(loaded, paths, run_id) -> dict:
    store = metadata.open_store(loaded.spec, paths.metadata_path)
    context = store.get_context_by_type_and_name("pipeline_run", run_id)
    models = [
        a
        for a in store.get_artifacts_by_context(context.id)
        if "conveyor_training_summary" in a.custom_properties
    ]
    # The run's context also holds the models it consumed (the warm-start source): the one it
    # trained is the newest.
    trained = max(models, key=lambda a: a.id)
    return json.loads(trained.custom_properties["conveyor_training_summary"].string_value)


def test_second_night_warm_starts_from_the_served_model(tmp_path):
    assert cli.main(["data", "penguin", "--workdir", str(tmp_path)]) == 0
    loaded = load_spec("penguin", env="ci", overrides=WITH_WARM_START, workdir=tmp_path)
    types = [c.type for c in loaded.spec.components]
    assert types.index("warm_start_resolver") == types.index("trainer") - 1
    paths = RunPaths(workdir=tmp_path, spec=loaded.spec)

    first = nightly.run(loaded, tmp_path, echo=lambda _: None)
    assert first.outcome == "pushed", first.message
    cold = _trainer_summary(loaded, paths, first.run_id)
    assert cold["warm_started"] is False
    assert cold["trained_steps"] == loaded.spec.trainer.train_steps == 150  # the ci profile's

    # The next night: the same columns, fewer rows (new examples, same feature set).
    csv = paths.input_dir / "penguins.csv"
    pd.read_csv(csv).sample(frac=0.9, random_state=1).to_csv(csv, index=False)
    second = nightly.run(loaded, tmp_path, echo=lambda _: None)
    assert second.outcome in ("pushed", "not_pushed"), second.message
    summary = _trainer_summary(loaded, paths, second.run_id)
    assert summary["warm_started"] is True
    assert summary["steps"] == summary["trained_steps"] == 75  # half, as the spec says

    again = nightly.run(loaded, tmp_path, echo=lambda _: None)
    executed = [n.node_id for n in again.nodes if n.state == "executed"]
    assert executed == [], f"an unchanged re-run executed {executed}"
