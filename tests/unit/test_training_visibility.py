"""Training visibility: `trainer.profile_steps` is validated with named errors; the trainer
writes its loss to TensorBoard's summary in TFX's ModelRun folder and, for those steps, a real
profiler trace; the run report reads both back without TensorFlow and draws the loss curve."""

import json
import re
import subprocess
import sys
import textwrap

import pytest

from pipelines.core.metadata import ArtifactRecord, NodeArtifacts
from pipelines.core.outcome import Outcome, RunResult
from pipelines.core.paths import RunPaths
from pipelines.finish import charts, report
from pipelines.finish.charts import ChartRenderer
from pipelines.finish.training_summary import read_training_log
from pipelines.spec.loading import SpecError, load_spec
from tests import toy as toy_data

TRAIN_STEPS = 60
PROFILED = [3, 5]


def _load(*overrides: str):
    return load_spec("penguin", env="ci", overrides=list(overrides)).spec


def test_profile_steps_is_optional_and_takes_a_range_of_training_steps():
    assert _load().trainer.profile_steps is None
    assert _load("trainer.profile_steps=[2, 4]").trainer.profile_steps == (2, 4)
    assert _load("trainer.profile_steps=[150, 150]").trainer.profile_steps == (150, 150)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("[4, 2]", "trainer.profile_steps: [4, 2] starts after it ends."),
        (
            "[1, 151]",
            "trainer.profile_steps: [1, 151] ends after the training's last step (150, "
            "trainer.train_steps).",
        ),
        ("[0, 3]", "trainer.profile_steps.0: Input should be greater than or equal to 1"),
        ("[1]", "trainer.profile_steps.1: required key is missing."),
        ("[1, 2, 3]", "trainer.profile_steps: Tuple should have at most 2 items"),
        ("[true, 3]", "trainer.profile_steps.0: Input should be a valid integer (got True)."),
        ("[1.5, 3]", "trainer.profile_steps.0: Input should be a valid integer (got 1.5)."),
        ("5", "trainer.profile_steps: Input should be a valid tuple (got 5)."),
    ],
)
def test_a_bad_profile_steps_is_refused_naming_the_key_and_where_it_came_from(value, expected):
    with pytest.raises(SpecError) as raised:
        _load(f"trainer.profile_steps={value}")
    message = str(raised.value)
    assert message.startswith(f"--set trainer.profile_steps={value}: ")
    assert expected in message


def test_a_run_fn_module_is_refused_profile_steps_it_would_ignore(tmp_path, monkeypatch):
    package = tmp_path / "team_profile"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "trainer.py").write_text(textwrap.dedent("def run_fn(fn_args):\n    pass\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _load("trainer.module=team_profile.trainer").trainer.module == "team_profile.trainer"
    with pytest.raises(SpecError) as raised:
        _load("trainer.module=team_profile.trainer", "trainer.profile_steps=[2, 4]")
    message = str(raised.value)
    assert message.startswith("--set trainer.profile_steps=[2, 4]: trainer.profile_steps: ")
    assert "run_fn module" in message and "fn_args.model_run_dir" in message


def test_profiled_batches_follow_a_resumed_training():
    from components.trainer import run as run_lib

    assert run_lib.profile_batches(None, 0) == (0, 0)
    assert run_lib.profile_batches((3, 5), 0) == (3, 5)
    # Resumed after step 4: Keras' batch 1 is training step 5.
    assert run_lib.profile_batches((3, 5), 4) == (1, 1)
    assert run_lib.profile_batches((3, 5), 100) == (0, 0)
    assert run_lib.summary_every(60) == 1 and run_lib.summary_every(1000) == 10


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The toy model trained TRAIN_STEPS steps in chunks of 20 with steps 3 to 5 profiled;
    returns the ModelRun folder and the training summary."""
    from components.trainer import run as run_lib

    root = tmp_path_factory.mktemp("visibility")
    described, _, _ = toy_data.make(root)
    model_run = root / "model_run"
    trainer = {**toy_data.TRAINER, "profile_steps": PROFILED, "checkpoint_every_steps": 20}
    summary = run_lib.train(
        trainer=trainer,
        features=described,
        train_files=[str(root / "train.gz")],
        eval_files=[str(root / "eval.gz")],
        serving_model_dir=str(root / "model"),
        model_run_dir=str(model_run),
        train_steps=TRAIN_STEPS,
        eval_steps=3,
    )
    return model_run, summary


def test_the_trainer_captures_a_profiler_trace_of_the_steps_asked_for(trained):
    model_run, summary = trained
    [trace] = sorted(model_run.glob("plugins/profile/*/*.xplane.pb"))
    assert trace.stat().st_size > 1000
    assert summary["profile_steps"] == PROFILED and summary["profile_trace"] == str(trace)
    written = json.loads((model_run / "training_summary.json").read_text())
    assert written["profile_trace"] == str(trace)


def test_the_summary_holds_the_loss_of_every_step_and_the_validation_of_each_chunk(trained):
    model_run, summary = trained
    found = read_training_log(model_run)
    train = found.train_loss()
    assert [step for step, _ in train] == list(range(1, TRAIN_STEPS + 1))
    assert all(loss > 0 for _, loss in train)
    # The last point is Keras' mean over the last chunk: the summary's final loss.
    assert train[-1][1] == pytest.approx(summary["metrics"]["loss"], rel=1e-5)
    # The loss before training (step 0), then one validation after each chunk of 20 steps.
    validation = found.validation_loss()
    assert [step for step, _ in validation] == [0, 20, 40, 60]
    assert validation[0][1] == pytest.approx(summary["initial_loss"])
    assert validation[-1][1] == pytest.approx(summary["metrics"]["val_loss"], rel=1e-5)
    assert validation[-1][1] < validation[0][1]
    assert ("train", "batch_accuracy") in found.scalars  # compiled metrics too
    assert found.traces == sorted(model_run.glob("plugins/profile/*/*.xplane.pb"))


def test_reading_the_summary_does_not_import_tensorflow(trained):
    model_run, _ = trained
    code = (
        "import sys\n"
        "from pipelines.finish.training_summary import read_training_log\n"
        f"found = read_training_log({str(model_run)!r})\n"
        "assert found.train_loss() and found.traces\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def _page(tmp_path, nodes) -> str:
    paths = RunPaths(workdir=tmp_path, spec=load_spec("penguin", env="ci").spec)
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    result = RunResult(
        run_id="penguin-1",
        pipeline="penguin",
        outcome=Outcome.PUSHED,
        message="pushed",
        run_dir=str(run_dir),
    )
    return report.render_report(result, paths, nodes)


def _trainer(model_run, state: str = "executed") -> dict[str, NodeArtifacts]:
    artifact = ArtifactRecord(id=7, type_name="ModelRun", uri=str(model_run))
    return {"trainer": NodeArtifacts("trainer", state, outputs={"model_run": [artifact]})}


def test_the_report_links_the_log_directory_and_draws_the_loss_curve(trained, tmp_path):
    model_run, summary = trained
    page = _page(tmp_path, _trainer(model_run))
    section = page[page.index("<h2>Training</h2>") : page.index("<h2>Evaluation</h2>")]
    assert f'<a href="file://{model_run}"><code>{model_run}</code></a>' in section
    assert f"<code>tensorboard --logdir {model_run}</code>" in section
    assert f"<code>{summary['profile_trace']}</code>" in section
    assert "of steps 3 to 5" in section
    [svg] = re.findall(r"<svg .*?</svg>", section, flags=re.S)
    assert 'aria-label="Loss by training step"' in svg
    # The training loss line, a real curve (matplotlib drops vertices on a straight stretch).
    lines = re.findall(rf'<path d="([^"]+)"[^>]*style="fill: none; stroke: {charts.TRAIN}', svg)
    assert max(d.count(" L ") for d in lines) >= 10
    assert "training (batch_loss)" in svg and "validation" in svg and "profiled steps 3-5" in svg
    assert len(section.encode()) < 40_000  # a small share of report.SIZE_BUDGET_BYTES


def test_the_report_says_what_it_lacks(trained, tmp_path):
    model_run, _ = trained
    empty = tmp_path / "empty_model_run"
    empty.mkdir()
    page = _page(tmp_path, _trainer(empty, state="cached"))
    assert "cached from an earlier run" in page
    assert "No profiler trace (set <code>trainer.profile_steps</code>" in page
    assert "The summary holds no training loss." in page
    page = _page(tmp_path, {})
    assert "The Trainer did not run: no training summary." in page
    assert ChartRenderer().loss_curve([]) is None


def test_the_loss_curve_stays_small_at_the_most_points_a_training_writes():
    from components.trainer.run import LOSS_CURVE_POINTS

    # summary_every rounds down: a training writes fewer than twice LOSS_CURVE_POINTS points.
    train = [(step, 1.0 / step) for step in range(1, 2 * LOSS_CURVE_POINTS)]
    svg = ChartRenderer().loss_curve(train, [(0, 1.2), (100, 0.4), (199, 0.3)], (2, 4))
    assert svg is not None and len(svg.encode()) < 20_000  # of report.SIZE_BUDGET_BYTES
