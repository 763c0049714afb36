"""Runs components.trainer.run.train on the toy data in a process of its own.

Logical CPU devices and multi-worker clusters can only be set up before TensorFlow initialises,
so the tests that need them start this script:

    python -m tests.trainer_harness DATA_DIR EXPORT_DIR '{"distribution": "mirrored", ...}'

DATA_DIR must hold what tests.toy.make wrote. The JSON overrides tests.toy.TRAINER; optional
keys `train_steps` (default 40) and `checkpoint_dir`. Prints the training summary as one JSON
line, or `ERROR: <message>` and exits 3 on a TrainerConfigError.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def main() -> int:
    data_dir, export_dir, overrides = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    from components.trainer.features import TrainerConfigError
    from components.trainer.run import prepare_devices, train
    from tests import toy

    train_steps = int(overrides.pop("train_steps", 40))
    checkpoint_dir = overrides.pop("checkpoint_dir", None)
    trainer = {**toy.TRAINER, **overrides}
    prepare_devices(trainer)  # before anything initialises TensorFlow
    features, train_files, eval_files = toy.load(data_dir, trainer)
    try:
        summary = train(
            trainer=trainer,
            features=features,
            train_files=train_files,
            eval_files=eval_files,
            serving_model_dir=export_dir,
            model_run_dir="",
            train_steps=train_steps,
            eval_steps=2,
            checkpoint_dir=checkpoint_dir,
        )
    except TrainerConfigError as err:
        print(f"ERROR: {err}", flush=True)
        return 3
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
