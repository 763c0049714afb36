"""A training's TensorBoard log directory read back for the run report, without TensorFlow.

Conveyor's trainer writes its summary with Keras' TensorBoard callback into TFX's ModelRun
folder (components/trainer/run.py): `train/` holds the batch loss and metrics (`batch_loss`,
every few steps) and `validation/` the validation after each checkpointed chunk
(`evaluation_loss_vs_iterations`, at the step it was taken); a profiler trace, when
`trainer.profile_steps` asked for one, lies under `plugins/profile/<time>/<host>.xplane.pb`.

The event files are read with the `tensorboard` package's pure-Python record reader and its
copy of the Event proto: importing TensorFlow (about 20 s here) for a page of charts would cost
more than the page. That reader checks each record's CRC in Python, which is slow only for
large records (the model graph): a penguin run's files read in well under a second.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.core.artifact_files import TRAINING_SUMMARY_FILE
from pipelines.core.object_path import as_path

TRAIN_LOSS = ("train", "batch_loss")
VALIDATION_LOSS = ("validation", "evaluation_loss_vs_iterations")
TRACE_PATTERN = "plugins/profile/*/*.xplane.pb"

log = logging.getLogger(__name__)

Points = list[tuple[int, float]]


@dataclass
class TrainingLog:
    """What a ModelRun folder holds: scalars by (run, tag) as (step, value) points in step
    order, the profiler traces, and the trainer's own summary (empty when it wrote none)."""

    log_dir: Path
    scalars: dict[tuple[str, str], Points] = field(default_factory=dict)
    traces: list[Path] = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    @property
    def resumed_from_step(self) -> int:
        """The step a resumed training started after (0 for one that started fresh)."""
        return int(self.summary.get("resumed_from_step") or 0)

    def train_loss(self) -> Points:
        """The batch loss by training step (counted from the training's start, so a resumed
        training's points continue after the step it resumed from)."""
        offset = self.resumed_from_step
        return [(step + offset, value) for step, value in self.scalars.get(TRAIN_LOSS, [])]

    def validation_loss(self) -> Points:
        """The validation loss by training step: the trainer's loss before training (step 0,
        for a training that started fresh) and one point after each checkpointed chunk."""
        points = list(self.scalars.get(VALIDATION_LOSS, []))
        initial = self.summary.get("initial_loss")
        if initial is not None and not self.resumed_from_step:
            points.insert(0, (0, float(initial)))
        return points


def read_training_log(log_dir: str | Path) -> TrainingLog:
    """Reads the scalars, traces and training summary under `log_dir`; a folder without event
    files reads as empty, and a damaged event file is read up to its damage."""
    root = as_path(log_dir)
    found = TrainingLog(log_dir=root, traces=sorted(root.glob(TRACE_PATTERN)))
    summary = root / TRAINING_SUMMARY_FILE
    if summary.is_file():
        found.summary = json.loads(summary.read_text())
    by_step: dict[tuple[str, str], dict[int, float]] = {}
    # Event file names start with their creation time: a later file's value of a step wins.
    for path in sorted(root.rglob("events.out.tfevents.*")):
        run = path.parent.relative_to(root).as_posix()
        for step, tag, value in _scalars(path):
            by_step.setdefault((run, tag), {})[step] = value
    found.scalars = {key: sorted(points.items()) for key, points in by_step.items()}
    return found


def _scalars(path: Path) -> Iterator[tuple[int, str, float]]:
    """(step, tag, value) of every numeric scalar in one event file: TF2 summaries (a rank-0
    tensor) and TF1 ones (`simple_value`); text, histograms and graphs are skipped."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
    from tensorboard.util import tensor_util

    reader = PyRecordReader_New(str(path).encode())
    try:
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:
                return
            except errors.DataLossError as err:  # a file still being written ends mid-record
                log.warning("%s: read up to a damaged record: %s", path, err)
                return
            event = event_pb2.Event.FromString(reader.record())
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    yield event.step, value.tag, float(value.simple_value)
                elif kind == "tensor" and not value.tensor.tensor_shape.dim:
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.dtype.kind in "fiu":
                        yield event.step, value.tag, float(array)
    finally:
        reader.file_handle.close()
