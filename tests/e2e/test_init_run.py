"""A spec `conveyor init` wrote from the penguin CSV runs, unedited, to a pushed model that
classifies raw rows (ci profile, fewer steps)."""

import tensorflow as tf

from pipelines.ops import nightly
from pipelines.paths import RunPaths
from pipelines.spec.loading import load_spec
from tests.unit.test_init_command import penguins_csv, run_init


def test_init_spec_runs_to_a_pushed_model(tmp_path):
    code, spec, workdir = run_init(tmp_path, "penguins", penguins_csv(tmp_path), "species")
    assert code == 0
    loaded = load_spec(str(spec), env="ci", overrides=["trainer.train_steps=150"], workdir=workdir)
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    assert result.outcome == "pushed", result.message
    serving = RunPaths(workdir, loaded.spec).serving_dir / "1"
    serve = tf.saved_model.load(str(serving)).signatures["serving_default"]
    outputs = serve(
        island=tf.constant(["Torgersen", "Biscoe"]),
        sex=tf.constant(["male", "female"]),
        year=tf.constant([2007, 2009], dtype=tf.int64),
        bill_length_mm=tf.constant([39.1, 46.5]),
        bill_depth_mm=tf.constant([18.7, 14.5]),
        flipper_length_mm=tf.constant([181.0, 213.0]),
        body_mass_g=tf.constant([3750.0, 4800.0]),
    )
    assert [c.decode() for c in outputs["classes"].numpy()] == ["Adelie", "Gentoo"]
