"""Benchmark: `conveyor infer` (Beam, tfx_bsl's RunInference) beside the same model called over
the same rows one at a time in a plain Python loop.

Setup, not measured: a workdir where `conveyor run taxi --profile ci` trained and pushed version
1 on one 3,000-row night, and a second night of N taxi-like rows (pipelines/datasets/taxi.py,
seed 0) to predict. Then, alternating within each repetition so that machine noise falls on
both alike, each a process of its own under GNU time (/usr/bin/time, Debian package `time`):

- Beam: `conveyor infer taxi --profile ci --date NIGHT --output DIR` (the DirectRunner in one
  process, as the `ci` and `local` profiles run Beam): rows read and typed as the model's
  `serving_default` inputs, `serving_examples` called in batches, PredictionLog TFRecords out;
- loop: this script's `--loop-worker` mode: the same CSV read with the csv module, each row
  made into the same tf.Example by the same RowReader, the same `serving_examples` signature
  called once per row, each answer written as a CSV line.

Wall seconds and peak memory include Python start-up and the TensorFlow imports: what a user
waits for. The floor: the loop's median wall time at least 5x Beam's. Both must predict every
row; a run that predicts fewer is a failure.

    .venv/bin/python bench/bench_infer.py [--rows N] [--repeats N] [--json PATH]
        [--out-dir DIR] [--keep] [--results PATH | --no-results]

This is a benchmark, not a test: it asserts nothing about speed, and exits non-zero only when a
run fails.
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

# bench/ is first on sys.path when this runs as `python bench/bench_infer.py`.
import results_file
from measure import BenchError, log_tail, run_benchmark, run_with_gnu_time, subprocess_env

REPO_ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = REPO_ROOT / ".venv/bin/python"
CONVEYOR = REPO_ROOT / ".venv/bin/conveyor"

PIPELINE = "taxi"
PROFILE = "ci"
TRAINING_NIGHT = "2026-11-28"  # 3,000 rows (the ci profile's), trained on and pushed
INFER_NIGHT = "2026-11-29"  # the N rows predicted
DEFAULT_ROWS = 1_000_000
DATA_SEED = 0
SIGNATURE = "serving_examples"  # what `conveyor infer` calls (inference.signature's default)
FLOOR = 5.0  # the loop's wall time over Beam's, at least
PREDICTED_LINE = re.compile(r"^predicted (\d+) rows", re.M)
LOOP_LINE = re.compile(r"^loop predicted (\d+) rows", re.M)


def conveyor(*args: str) -> list[str]:
    return [str(CONVEYOR), *args]


def setup(workdir: Path, rows: int) -> Path:
    """Trains and pushes version 1 on a 3,000-row night, then writes the night to predict;
    returns its CSV. Reuses a workdir where both are already there."""
    csv_path = workdir / "data" / PIPELINE / INFER_NIGHT / f"taxi-{rows}.csv"
    common = ["--profile", PROFILE, "--workdir", str(workdir)]
    if not (workdir / "serving" / PIPELINE / "1").is_dir():
        for step in (
            ["data", PIPELINE, "--date", TRAINING_NIGHT, *common],
            ["run", PIPELINE, "--date", TRAINING_NIGHT, *common],
        ):
            done = subprocess.run(
                conveyor(*step), env=subprocess_env(), capture_output=True, text=True
            )
            if done.returncode != 0:
                raise BenchError(
                    f"setup {shlex.join(step)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
                )
    if not csv_path.is_file():
        for old in csv_path.parent.glob("*.csv"):
            old.unlink()
        from pipelines.datasets.taxi import write_rows

        write_rows(rows, csv_path, seed=DATA_SEED)
    return csv_path


def beam_command(workdir: Path, output: Path) -> list[str]:
    return conveyor(
        "infer",
        PIPELINE,
        "--profile",
        PROFILE,
        "--workdir",
        str(workdir),
        "--date",
        INFER_NIGHT,
        "--output",
        str(output),
    )


def loop_command(workdir: Path, csv_path: Path, output: Path) -> list[str]:
    model = workdir / "serving" / PIPELINE / "1"
    return [
        str(VENV_PYTHON),
        str(Path(__file__).resolve()),
        "--loop-worker",
        str(csv_path),
        str(model),
        str(output),
    ]


def loop_worker(csv_path: str, model_dir: str, output: str) -> int:
    """The reference: one row at a time, each through the SavedModel's signature in Python."""
    import csv

    import tensorflow as tf

    from pipelines.ops.infer import RowReader, model_columns

    reader = RowReader(model_columns(model_dir))
    signature = tf.saved_model.load(model_dir).signatures[SIGNATURE]
    predicted = bad = 0
    with open(csv_path, "rb") as rows, open(output, "w", newline="") as out:
        writer = csv.writer(out)
        for tag, value in reader.examples(csv_path, rows):
            if tag != "parsed":
                bad += 1
                continue
            answer = signature(examples=tf.constant([value]))
            writer.writerow([v for name in sorted(answer) for v in answer[name].numpy().ravel()])
            predicted += 1
    print(f"loop predicted {predicted} rows ({bad} bad)")
    return 0


def measure(command: list[str], log: Path, pattern: re.Pattern, rows: int) -> dict:
    run = run_with_gnu_time(command, log, subprocess_env())
    if run.returncode != 0:
        raise BenchError(f"{shlex.join(command)} exited {run.returncode}:\n{log_tail(log)}")
    wall, peak = run.figures()
    found = pattern.search(log.read_text())
    predicted = int(found.group(1)) if found else -1
    if predicted != rows:
        raise BenchError(
            f"{shlex.join(command)} predicted {predicted} of {rows} rows:\n{log_tail(log)}"
        )
    return {"wall_seconds": round(wall, 2), "peak_rss_mib": round(peak, 1)}


def benchmark(args: argparse.Namespace, out_root: Path, created: list[Path]) -> dict:
    workdir = out_root / "work"
    started = time.monotonic()
    csv_path = setup(workdir, args.rows)
    print(f"setup {time.monotonic() - started:.0f} s: {csv_path}", flush=True)
    runs: dict[str, list[dict]] = {"beam": [], "loop": []}
    for repetition in range(args.repeats):
        for tool in ("beam", "loop"):
            folder = out_root / f"{tool}-{repetition}"
            created.append(folder)
            folder.mkdir(parents=True, exist_ok=True)
            if tool == "beam":
                command, pattern = beam_command(workdir, folder / "out"), PREDICTED_LINE
            else:
                command = loop_command(workdir, csv_path, folder / "predictions.csv")
                pattern = LOOP_LINE
            figures = measure(command, folder / "run.log", pattern, args.rows)
            runs[tool].append(figures)
            print(
                f"{tool} {repetition + 1}/{args.repeats}: {figures['wall_seconds']:.1f} s, "
                f"peak {figures['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
    created.append(workdir)
    summary = {
        tool: {
            "wall_seconds": results_file.spread(r["wall_seconds"] for r in measured),
            "peak_rss_mib": results_file.spread(r["peak_rss_mib"] for r in measured),
            "rows_per_second": round(
                args.rows / statistics.median(r["wall_seconds"] for r in measured)
            ),
        }
        for tool, measured in runs.items()
    }
    speedup = summary["loop"]["wall_seconds"]["median"] / summary["beam"]["wall_seconds"]["median"]
    return {
        "rows": args.rows,
        "repeats": args.repeats,
        "profile": PROFILE,
        "signature": SIGNATURE,
        "runs": runs,
        "tools": summary,
        "speedup": round(speedup, 2),
        "aims": [
            {
                "what": f"loop wall time / Beam wall time (floor {FLOOR:g}x)",
                "value": speedup,
                "met": speedup >= FLOOR,
            }
        ],
    }


def report(result: dict) -> str:
    lines = [f"{result['rows']:,} rows, {result['repeats']} repetition(s), medians (min-max):"]
    for tool, figures in result["tools"].items():
        wall, peak = figures["wall_seconds"], figures["peak_rss_mib"]
        lines.append(
            f"  {tool:5} {wall['median']:8.1f} s ({wall['min']:.1f}-{wall['max']:.1f})  "
            f"{figures['rows_per_second']:>9,} rows/s  peak {peak['median']:.0f} MiB"
        )
    lines.append(f"  Beam is {result['speedup']:.2f}x the loop (floor {FLOOR:g}x)")
    return "\n".join(lines)


def results_figures(result: dict) -> tuple[dict, dict]:
    settings = {k: result[k] for k in ("rows", "repeats", "profile", "signature")}
    figures = {k: result[k] for k in ("tools", "speedup", "aims")}
    return settings, figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="rows to predict")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions of each tool")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    parser.add_argument("--out-dir", type=Path, help="work here instead of a temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep the run folders")
    results_file.add_arguments(parser, "infer")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--loop-worker"]:
        return loop_worker(*argv[1:4])
    args = parse_args(argv)
    return run_benchmark(
        args,
        "bench-infer-",
        benchmark,
        report,
        preamble=[f"beam: {shlex.join(beam_command(Path('WORKDIR'), Path('OUT')))}"],
        contents="the workdir and run folders",
        results=("infer", results_figures),
    )


if __name__ == "__main__":
    sys.exit(main())
