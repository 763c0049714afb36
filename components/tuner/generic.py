"""Conveyor's `tuner_fn`: KerasTuner's random search over Conveyor's trainer's hyperparameters.

TFX's Tuner calls `tuner_fn(fn_args)` (components.tuner.component adds the statistics path to
`fn_args.custom_config`, beside the spec's `trainer` and `tuning` blocks) and runs the search
it returns. Each trial builds Conveyor's network with its values (`tuning.search_space` over
learning_rate, dropout, hidden_units), trains it `tuning.trial_steps` steps on the train split
and scores it on the eval split by `tuning.objective`.

The first trial is the spec's own setting (`DefaultFirstOracle`), so the search is measured
against what the Trainer would have trained without it. The trials train tf-keras models,
like the Trainer; KerasTuner's own training loop is Keras 3's, so the trial is run here
(`GenericTuner.run_trial`) rather than through KerasTuner's `Tuner`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras_tuner
from keras_tuner.engine import trial as trial_module
from tfx.components.tuner.component import TunerFnResult

from components.trainer import model as model_lib
from components.trainer import run as run_lib
from components.trainer.hyperparameters import encode_layers, with_tuned
from pipelines.spec.models import TuningSpec


def search_space(trainer: Mapping[str, Any], space: Mapping[str, Any]):
    """KerasTuner HyperParameters for `tuning.search_space`, each defaulting to the trainer's
    own value (the spec checked it is among the values searched)."""
    hp = keras_tuner.HyperParameters()
    for name, dimension in space.items():
        choices = list(dimension.get("choices") or ())
        if name == "hidden_units":
            hp.Choice(
                name,
                [encode_layers(c) for c in choices],
                default=encode_layers(trainer[name]),
            )
        elif choices:
            hp.Choice(name, [float(c) for c in choices], default=float(trainer[name]))
        else:
            hp.Float(
                name,
                float(dimension["min"]),
                float(dimension["max"]),
                sampling=dimension.get("sampling", "linear"),
                default=float(trainer[name]),
            )
    return hp


class DefaultFirstOracle(keras_tuner.oracles.RandomSearchOracle):
    """Random search whose first trial is every hyperparameter's default: the spec's setting."""

    def populate_space(self, trial_id):
        """The defaults for the first trial, random values after it."""
        if not self.trials:
            values = {hp.name: hp.default for hp in self.hyperparameters.space}
            return {"status": trial_module.TrialStatus.RUNNING, "values": values}
        return super().populate_space(trial_id)


class GenericTuner(keras_tuner.engine.base_tuner.BaseTuner):
    """Trains Conveyor's network for each trial's values and scores it on the eval split."""

    def __init__(self, oracle, fn_args, features, preprocessor, trainer, **kwargs):
        super().__init__(oracle, hypermodel=None, **kwargs)
        self._fn_args, self._features, self._preprocessor = fn_args, features, preprocessor
        self._trainer = trainer

    def run_trial(self, trial, *fit_args, **fit_kwargs):
        """Builds, trains (`fn_args.train_steps`) and evaluates one trial; returns its metrics.

        A trial that fails stops the search (KerasTuner would otherwise mark it invalid and go
        on, and a search of only failed trials has no best hyperparameters to give)."""
        trainer = with_tuned(self._trainer, trial.hyperparameters.values)
        try:
            return self._train_and_evaluate(trainer)
        except Exception as err:  # a spec that cannot train: say so, do not search on
            raise keras_tuner.errors.FatalError(
                f"trial {trial.trial_id} ({trial.hyperparameters.values}) failed: "
                f"{type(err).__name__}: {err}"
            ) from err

    def _train_and_evaluate(self, trainer: Mapping[str, Any]) -> dict[str, float]:
        import tf_keras as keras

        fn_args, features = self._fn_args, self._features
        seed = int(trainer.get("seed", 42))
        keras.utils.set_random_seed(seed)  # every trial from the same start: a fair comparison
        batch_size = int(trainer["batch_size"])
        train_ds = run_lib.make_dataset(
            fn_args.train_files, features, self._preprocessor, batch_size, seed, shuffle=True
        )
        eval_ds = run_lib.make_dataset(
            fn_args.eval_files, features, self._preprocessor, batch_size, seed, shuffle=False
        )
        learning_rate = float(trainer["learning_rate"])
        network = run_lib.compiled_network(
            trainer, features, self._preprocessor, learning_rate, jit_compile=False
        )
        history = network.fit(
            train_ds,
            steps_per_epoch=fn_args.train_steps,
            epochs=1,
            validation_data=eval_ds,
            validation_steps=fn_args.eval_steps,
            verbose=0,
        )
        return {name: float(values[-1]) for name, values in history.history.items()}


def tuner_fn(fn_args: Any) -> TunerFnResult:
    """TFX's Tuner entry point (`tuner_fn="components.tuner.generic.tuner_fn"`)."""
    from components.trainer.autograph import leave_tf_keras_unconverted

    leave_tf_keras_unconverted()
    config = fn_args.custom_config
    trainer, tuning = config["trainer"], config["tuning"]
    features = run_lib.read_features(fn_args)
    preprocessor = model_lib.Preprocessor(features)
    # The spec's rule for an unset direction (min for a loss or an error), not a copy of it.
    direction = TuningSpec.model_validate(tuning).objective_direction.value
    oracle = DefaultFirstOracle(
        objective=keras_tuner.Objective(tuning["objective"], direction),
        max_trials=int(tuning["max_trials"]),
        hyperparameters=search_space(trainer, tuning["search_space"]),
        seed=int(trainer.get("seed", 42)),
        allow_new_entries=False,
        tune_new_entries=False,
    )
    tuner = GenericTuner(
        oracle,
        fn_args,
        features,
        preprocessor,
        trainer,
        directory=fn_args.working_dir,
        project_name="conveyor_tuning",
        overwrite=True,
    )
    return TunerFnResult(tuner=tuner, fit_kwargs={})
