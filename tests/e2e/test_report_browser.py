"""One real penguin run (`conveyor run --log-format json`), then its report and the pipeline's
history page opened in a real headless Chromium (Debian's `chromium`): the screenshots show the
charts drawn (the palette's colours over real areas), the browser logs no console message, the
DOM it built holds every SVG; and the run's standard output was one JSON event per line. The
run profiles a few training steps: the trace, the loss in the training summary and the report's
loss curve and log-directory link are checked too."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from pipelines.core.paths import FRAMEWORK_ROOT
from pipelines.finish import charts

pytestmark = pytest.mark.e2e

WIDTH = 1200
PROFILED = (2, 4)  # the training steps the run profiles (trainer.profile_steps)


def _chromium() -> str:
    """The chromium binary, installed with scripts/ensure_system_packages.sh when missing;
    skipped where it cannot be installed, except under CI (a skip would hide it)."""
    found = shutil.which("chromium")
    if found is None:
        script = FRAMEWORK_ROOT / "scripts" / "ensure_system_packages.sh"
        done = subprocess.run([str(script), "chromium"], capture_output=True, text=True)
        found = shutil.which("chromium")
        if done.returncode != 0 or found is None:
            reason = f"no chromium and it cannot be installed here: {done.stderr.strip()}"
            if os.environ.get("CI"):
                pytest.fail(reason)
            pytest.skip(reason)
    return found


def _conveyor(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *argv],
        cwd=FRAMEWORK_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def penguin(tmp_path_factory):
    """A pushed penguin run (ci profile) with a JSON event log, and its history page."""
    workdir = str(tmp_path_factory.mktemp("browser"))
    assert _conveyor("data", "penguin", "--workdir", workdir).returncode == 0
    run = _conveyor(
        "run", "penguin", "--env", "ci", "--workdir", workdir, "--log-format", "json",
        "--set", f"trainer.profile_steps=[{PROFILED[0]}, {PROFILED[1]}]",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    events = [json.loads(line) for line in run.stdout.splitlines()]  # every line is JSON
    history = _conveyor("report", "penguin", "--history", "--env", "ci", "--workdir", workdir)
    assert history.returncode == 0, history.stderr
    return events, events[-1]["run_dir"] + "/report.html", history.stdout.strip()


def _open(chromium: str, page: str, height: int, tmp_path, name: str):
    """Screenshots `page` in headless Chromium; returns (image, DOM, Chromium's log)."""
    shot = tmp_path / f"{name}.png"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--enable-logging=stderr", "--v=0", f"--window-size={WIDTH},{height}"]  # fmt: skip
    taken = subprocess.run(
        [*common, f"--screenshot={shot}", f"file://{page}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file(), taken.stderr[-2000:]
    dom = subprocess.run(
        [*common, "--dump-dom", f"file://{page}"], capture_output=True, text=True, timeout=120
    )
    return Image.open(shot).convert("RGB"), dom.stdout, taken.stderr + dom.stderr


def _console(log: str) -> list[str]:
    """The page's console messages (and failed loads) in Chromium's log."""
    return [line for line in log.splitlines() if "CONSOLE" in line or "Failed to load" in line]


def _pixels(image: Image.Image, colour: str, tolerance: int = 12) -> int:
    """How many pixels have `colour` (#rrggbb), within `tolerance` per channel."""
    want = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return sum(
        count
        for count, rgb in image.getcolors(maxcolors=WIDTH * 20000)
        if all(abs(a - b) <= tolerance for a, b in zip(rgb, want, strict=True))
    )


def test_the_run_logged_one_json_event_per_line(penguin):
    events, _, _ = penguin
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "verdict"
    started = {e["node"] for e in events if e["event"] == "component_started"}
    finished = {e["node"] for e in events if e["event"] == "component_finished"}
    assert {"csv_example_gen", "trainer", "evaluator", "pusher"} <= started
    assert started == finished
    trainer = next(
        e for e in events if e["event"] == "component_finished" and e["node"] == "trainer"
    )
    assert trainer["state"] == "executed" and trainer["seconds"] > 0
    gates = {e["gate"]: e["decision"] for e in events if e["event"] == "gate"}
    assert gates == {"data_gate": "passed", "model": "blessed", "infra_validation": "blessed"}
    push = next(e for e in events if e["event"] == "push")
    assert push["decision"] == "pushed version 1" and push["pushed_version"] == "1"
    verdict = events[-1]
    assert verdict["outcome"] == "pushed" and verdict["exit_code"] == 0
    assert verdict["message"].startswith("PUSHED: pushed version 1")


def test_the_trainer_wrote_its_loss_and_a_profile_trace_that_the_report_shows(penguin):
    from pipelines.finish.training_summary import read_training_log

    _, report, _ = penguin
    workdir = Path(report).parents[3]
    [model_run] = (workdir / "pipeline_root" / "penguin" / "trainer" / "model_run").iterdir()
    [trace] = model_run.glob("plugins/profile/*/*.xplane.pb")  # TensorFlow's profiler wrote it
    assert trace.stat().st_size > 1000
    found = read_training_log(model_run)
    steps = [step for step, _ in found.train_loss()]
    assert steps == list(range(1, found.summary["steps"] + 1))  # ci: every step
    assert found.validation_loss() and found.summary["profile_steps"] == list(PROFILED)
    page = open(report).read()
    training = page[page.index("<h2>Training</h2>") :]
    assert f'<a href="{model_run.as_uri()}">' in training
    assert f"tensorboard --logdir {model_run}" in training and str(trace) in training
    [svg] = re.findall(r'<svg class="chart" role="img" aria-label="Loss by training step".*?</svg>',
                       training, flags=re.S)  # fmt: skip
    # The training loss line (matplotlib simplifies it: 150 steps drew 34 vertices).
    lines = re.findall(rf'<path d="([^"]+)"[^>]*style="fill: none; stroke: {charts.TRAIN}', svg)
    assert max(d.count(" L ") for d in lines) >= 10


def test_the_report_renders_its_charts_in_chromium(penguin, tmp_path):
    _, report, _ = penguin
    chromium = _chromium()
    page = open(report).read()
    image, dom, log = _open(chromium, report, 4400, tmp_path, "report")
    assert _console(log) == []
    assert dom.count("<svg") == page.count("<svg") >= 10  # timings, 8 columns, a metric
    # Solid bars of the timings and of the top values (train), the eval split's bars, the
    # candidate's metric bars and its threshold line: real areas of the palette's colours.
    assert _pixels(image, charts.TRAIN) > 20_000
    assert _pixels(image, charts.EVAL) > 5_000
    assert _pixels(image, charts.THRESHOLD, tolerance=30) > 50
    assert image.getbbox() is not None


def test_the_history_page_renders_in_chromium(penguin, tmp_path):
    _, report, history = penguin
    chromium = _chromium()
    image, dom, log = _open(chromium, history, 1600, tmp_path, "history")
    assert _console(log) == []
    assert dom.count("<svg") == 4  # outcomes, metrics of the pushed version, rows, seconds
    assert _pixels(image, charts.OUTCOME_COLOURS["pushed"]) > 1_000
    assert _pixels(image, charts.TRAIN) > 2_000
    run_id = report.split("/")[-2]
    assert f'href="{run_id}/report.html"' in dom


def test_a_console_error_is_caught(tmp_path):
    """The check above can fail: a page that logs an error is seen to."""
    page = tmp_path / "noisy.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>console.error('broken chart')</script>")
    _, _, log = _open(_chromium(), str(page), 200, tmp_path, "noisy")
    assert any("broken chart" in line for line in _console(log))
