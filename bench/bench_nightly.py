"""Benchmark: one normal night of the taxi pipeline, Conveyor beside raw TFX, at 100k and 1M rows.

For each size the benchmark writes two nights of that many rows (pipelines/datasets/taxi_nights.py,
normal data, seeds 1 and 2) and gives each tool its own working directory:

- **raw TFX**: the reference night, `reference/raw_tfx_nightly.py` (`--raw-script` runs another
  copy, e.g. the shared original it was taken from): CsvExampleGen, StatisticsGen, SchemaGen,
  ExampleValidator, Trainer, the last blessed model as baseline, Evaluator (TFMA), Pusher;
- **Conveyor**: `conveyor run taxi` with the taxi spec as it is (a training window of the last
  spans, warm start from the served model, the drift gate, the infra validator);
- **Conveyor like for like**: the same with the work raw TFX does not do switched off
  (`--set data.window_spans=1 --set trainer.warm_start=false --set 'data.drift={}'`): it trains
  on the night's span alone, from scratch, with no drift gate (the data gate's schema checks and
  the infra validator stay).

Night one is the first run (no baseline) and is not reported; it is run once per tool and the
working directory it leaves is copied aside. Night two is the steady state every later night
looks like: the Evaluator compares the candidate with night one's blessed model. Each
repetition restores every tool's directory from its night-one copy (at the same path, so the
absolute paths ML Metadata holds stay valid) and runs night two of each tool at every size,
rotating which tool goes first and alternating which size does, so the machine's drift falls on
all alike. Every night two is its own process under GNU time (/usr/bin/time, Debian package
`time`): wall time and peak memory of the whole process, imports included. Where the host set
this (virtual) machine's wall clock forward during a night, as after freezing it, that jump
(wall clock minus monotonic clock, measure.TimedRun) is taken out of the wall time and reported
beside it. Per component seconds come from Conveyor's summary.json and, for raw
TFX, from its ML Metadata (each execution of the night's run: last update minus creation, which
TFX's launcher stamps when the component starts and when it publishes).

The report gives, per size, medians with min-max over the repetitions, the ratio of each Conveyor
row to raw TFX (of the medians), the Evaluator's share of each night, and, with two sizes, how a
night's cost grows with its data.

    .venv/bin/python bench/bench_nightly.py [--rows 100000 1000000] [--repeats 3]
        [--no-raw-tfx] [--no-like-for-like] [--raw-script PATH] [--env large]
        [--set KEY=VALUE ...] [--json PATH] [--out-dir DIR] [--keep]

10M rows (about 1.2 GB of CSV per night), Conveyor alone, once:
`make bench-nightly BENCH_ARGS="--rows 10000000 --repeats 1 --no-raw-tfx --no-like-for-like"`.

With `--out-dir DIR --keep`, a later run with the same DIR reuses the nights' CSVs and each
tool's night-one copy (`DIR/rows-N/night-one/`) instead of running night one again.

This is a benchmark, not a test: it asserts nothing about speed, and exits non-zero only when a
run fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sqlite3
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

# bench/ is first on sys.path when this runs as `python bench/bench_nightly.py`.
import results_file
from measure import (
    BenchError,
    add_set_option,
    log_tail,
    run_benchmark,
    run_with_gnu_time,
    subprocess_env,
)

from pipelines.datasets.taxi_nights import write_night

REPO_ROOT = Path(__file__).resolve().parents[1]
CONVEYOR = REPO_ROOT / ".venv/bin/conveyor"
PYTHON = REPO_ROOT / ".venv/bin/python"
DEFAULT_RAW_SCRIPT = REPO_ROOT / "bench/reference/raw_tfx_nightly.py"
PIPELINE = "taxi"
DEFAULT_ROWS = [100_000, 1_000_000]
DEFAULT_REPEATS = 3
# The `large` profile: the Arrow reader (with its Parquet copy for StatisticsGen), as big nights
# run here.
DEFAULT_ENV = "large"
FIRST_NIGHT = datetime.date(2026, 11, 23)
NIGHTS = (FIRST_NIGHT, FIRST_NIGHT + datetime.timedelta(days=1))  # set-up night, measured night
SMALL_SECONDS = 0.5  # steps below this in every column are listed, not tabled
# What Conveyor's taxi spec does that the raw night does not: train on a window of spans,
# warm-started from the served model, and gate on drift from the previous night.
LIKE_FOR_LIKE = ["data.window_spans=1", "trainer.warm_start=false", "data.drift={}"]

RAW, CONVEYOR_SPEC, CONVEYOR_LIKE = "raw TFX", "Conveyor", "Conveyor like for like"
# Each tool's steps under one name, so that a row of the table is the same work in every column:
# raw TFX's component class names and Conveyor's node ids of the taxi spec.
STEPS = {
    "CsvExampleGen": "example gen",
    "csv_example_gen": "example gen",
    "StatisticsGen": "statistics",
    "statistics_gen": "statistics",
    "SchemaGen": "schema",
    "schema_gen": "schema",
    "ExampleValidator": "example validator",
    "example_validator": "example validator",
    "Trainer": "trainer",
    "trainer": "trainer",
    "Evaluator": "evaluator",
    "evaluator": "evaluator",
    "Pusher": "pusher",
    "pusher": "pusher",
    "data_gate": "data gate",
    "infra_validator": "infra validator",
}
EVALUATOR = "evaluator"
# The aims for Conveyor's night: 10x the rows cost at most 5x the wall time, and the Evaluator
# takes at most 30% of a night.
GROWTH_AIM = (10, 5.0)
EVALUATOR_SHARE_AIM = 0.30


@dataclass(frozen=True)
class Tool:
    """One column of the benchmark: how to run a night and where it keeps its state."""

    name: str
    directory: str  # under rows-N/

    def command(self, args: argparse.Namespace, workdir: Path, night: datetime.date) -> list[str]:
        """The command line of one night of this tool in `workdir`."""
        span_dir = _night_dir(workdir.parent, night)
        if self.name == RAW:
            return [str(PYTHON), str(args.raw_script), str(workdir), "--span-dir", str(span_dir)]
        overrides = [*(LIKE_FOR_LIKE if self.name == CONVEYOR_LIKE else []), *args.set]
        return [
            str(CONVEYOR),
            "run",
            PIPELINE,
            "--profile",
            args.env,
            "--workdir",
            str(workdir),
            "--date",
            night.isoformat(),
            *[item for override in overrides for item in ("--set", override)],
        ]


def _night_dir(size_dir: Path, night: datetime.date) -> Path:
    return size_dir / "data" / PIPELINE / night.isoformat()


def _tools(args: argparse.Namespace) -> list[Tool]:
    tools = [] if args.no_raw_tfx else [Tool(RAW, "raw-tfx")]
    tools.append(Tool(CONVEYOR_SPEC, "conveyor"))
    if not args.no_like_for_like:
        tools.append(Tool(CONVEYOR_LIKE, "conveyor-like-for-like"))
    return tools


def _write_nights(size_dir: Path, rows: int) -> None:
    """Writes both nights' CSVs once per size directory (the rows are a function of the seed)."""
    done = size_dir / "data" / f"{rows}-rows.done"
    if done.exists():
        return
    for seed, night in enumerate(NIGHTS, start=1):
        write_night(_night_dir(size_dir, night) / "taxi.csv", rows, seed=seed)
    done.touch()


def _raw_step_seconds(workdir: Path) -> dict[str, float]:
    """Seconds of each step of raw TFX's latest run, from its ML Metadata (SQLite).

    TFX's launcher creates a component's execution when the component starts and updates it
    when the outputs are published, so the difference is the component's time. Read with
    sqlite3 (the MLMD schema's Execution, Type, Context and Association tables), so the
    benchmark process imports no TensorFlow.
    """
    with sqlite3.connect(workdir / "metadata.sqlite") as db:
        (run_context,) = db.execute(
            "SELECT c.id FROM Context c JOIN Type t ON c.type_id = t.id "
            "WHERE t.name = 'pipeline_run' ORDER BY c.create_time_since_epoch DESC, c.id DESC "
            "LIMIT 1"
        ).fetchone()
        rows = db.execute(
            "SELECT t.name, e.create_time_since_epoch, e.last_update_time_since_epoch "
            "FROM Execution e JOIN Type t ON e.type_id = t.id "
            "JOIN Association a ON a.execution_id = e.id WHERE a.context_id = ?",
            (run_context,),
        ).fetchall()
    seconds: dict[str, float] = {}
    for type_name, created_ms, updated_ms in rows:
        step = type_name.rsplit(".", 1)[-1]
        seconds[step] = seconds.get(step, 0.0) + round((updated_ms - created_ms) / 1000, 1)
    return seconds


def _run_night(
    args: argparse.Namespace, tool: Tool, workdir: Path, night: datetime.date, log: Path
) -> dict:
    command = tool.command(args, workdir, night)
    run = run_with_gnu_time(command, log, subprocess_env())
    output = log.read_text()
    if tool.name == RAW:
        ok = run.returncode == 0 and "pushed_versions " in output
    else:
        ok = run.returncode == 0 and "run record: " in output
    if not ok:
        raise BenchError(f"{' '.join(command)} exited {run.returncode}:\n{log_tail(log)}")
    wall, peak = run.figures()  # without the machine's pauses (measure.TimedRun)
    if tool.name == RAW:
        steps = _raw_step_seconds(workdir)
        versions = int(output.split("pushed_versions ")[-1].split()[0])
        outcome = f"{versions} version(s) in serving"
        pipeline = float(output.split("pipeline_seconds ")[-1].split()[0])
    else:
        run_dir = Path(output.split("run record: ")[-1].split()[0])
        summary = json.loads((run_dir / "summary.json").read_text())
        steps = {n["node_id"]: n["seconds"] for n in summary["nodes"] if n["seconds"]}
        outcome = summary["outcome"]
        pipeline = round(sum(n["seconds"] for n in summary["nodes"]), 1)
    return {
        "outcome": outcome,
        "wall_seconds": round(wall, 1),
        "paused_seconds": run.paused_seconds,
        "peak_rss_mib": round(peak),
        "pipeline_seconds": pipeline,
        "steps": {STEPS.get(name, name): value for name, value in steps.items()},
    }


def _restore(snapshot: Path, workdir: Path) -> None:
    """Puts a tool's directory back as night one left it, at the same path."""
    shutil.rmtree(workdir, ignore_errors=True)
    shutil.copytree(snapshot, workdir, symlinks=True)


def _prepare_night_one(args: argparse.Namespace, tool: Tool, size_dir: Path) -> None:
    """Runs night one of `tool` once and copies its directory aside (reused when present)."""
    snapshot = size_dir / "night-one" / tool.directory
    done = size_dir / "night-one" / f"{tool.directory}.done"
    if done.exists() and snapshot.is_dir():
        print(f"  {tool.name}: night one reused from {snapshot}", flush=True)
        return
    workdir = size_dir / tool.directory
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    if tool.name != RAW:
        (workdir / "data").symlink_to("../data")  # conveyor reads WORKDIR/data/taxi/<night>
    log = size_dir / "night-one" / f"{tool.directory}.log"
    measured = _run_night(args, tool, workdir, NIGHTS[0], log)
    print(
        f"  {tool.name}: night one {measured['wall_seconds']} s, {measured['outcome']} "
        "(set-up, not reported)",
        flush=True,
    )
    shutil.rmtree(snapshot, ignore_errors=True)
    shutil.copytree(workdir, snapshot, symlinks=True)
    done.touch()


def benchmark(args: argparse.Namespace, out_root: Path, created: list[Path]) -> dict:
    tools = _tools(args)
    for rows in args.rows:
        size_dir = out_root / f"rows-{rows}"
        created.append(size_dir)
        print(f"{rows:,} rows per night:", flush=True)
        _write_nights(size_dir, rows)
        for tool in tools:
            _prepare_night_one(args, tool, size_dir)
    results = {str(rows): {tool.name: [] for tool in tools} for rows in args.rows}
    for repetition in range(args.repeats):
        # Every repetition runs every size, in turn first and last, and rotates which tool goes
        # first: the machine's speed drifts over minutes, and so falls on all sizes and tools
        # alike (a growth ratio from sizes measured an hour apart measured the drift too).
        sizes = args.rows if repetition % 2 == 0 else args.rows[::-1]
        shift = repetition % len(tools)
        for rows in sizes:
            size_dir = out_root / f"rows-{rows}"
            for tool in tools[shift:] + tools[:shift]:
                workdir = size_dir / tool.directory
                _restore(size_dir / "night-one" / tool.directory, workdir)
                log = size_dir / "logs" / f"{tool.directory}-night-two-{repetition + 1}.log"
                measured = _run_night(args, tool, workdir, NIGHTS[1], log)
                results[str(rows)][tool.name].append(measured)
                evaluator = measured["steps"].get(EVALUATOR, 0.0)
                paused = measured["paused_seconds"]
                print(
                    f"  repetition {repetition + 1}, {rows:,} rows, {tool.name}: night two "
                    f"{measured['wall_seconds']} s"
                    + (f" ({paused} s more, the machine paused by its host)" if paused else "")
                    + f", {measured['peak_rss_mib']} MiB, evaluator {evaluator:.1f} s, "
                    f"{measured['outcome']}",
                    flush=True,
                )
    return {
        "env": args.env,
        "rows": args.rows,
        "repeats": args.repeats,
        "overrides": args.set,
        "like_for_like": LIKE_FOR_LIKE,
        "raw_script": str(args.raw_script),
        "night_two": results,
    }


def _median(runs: list[dict], key: str, step: str | None = None) -> tuple[float, float, float]:
    values = [run["steps"].get(step, 0.0) if step else run[key] for run in runs]
    return statistics.median(values), min(values), max(values)


def _size_table(rows: str, runs: dict[str, list[dict]], repeats: int) -> list[str]:
    tools = list(runs)
    width = 26
    header = f"{'night two, ' + f'{int(rows):,} rows':<{width}}"
    for name in tools:
        header += f"{name:>{width}}"
        if name != RAW and RAW in tools:
            header += f"{'/ raw':>8}"
    lines = [header]

    def row(label: str, key: str, step: str | None = None, digits: int = 1) -> str | None:
        cells = {name: _median(runs[name], key, step) for name in tools}
        if step and max(cell[0] for cell in cells.values()) < SMALL_SECONDS:
            return None
        text = f"{label:<{width}}"
        for name in tools:
            if step and not any(step in run["steps"] for run in runs[name]):
                text += f"{'-':>{width}}" + (f"{'':>8}" if name != RAW and RAW in tools else "")
                continue  # a step this tool does not have (raw TFX has no infra validator)
            median, low, high = cells[name]
            spread = f" ({low:.{digits}f}-{high:.{digits}f})" if repeats > 1 else ""
            text += f"{f'{median:.{digits}f}{spread}':>{width}}"
            if name != RAW and RAW in tools:
                raw = cells[RAW][0]
                text += f"{median / raw:>7.2f}x" if raw else f"{'':>8}"
        return text

    steps = list(dict.fromkeys(s for name in tools for run in runs[name] for s in run["steps"]))
    small = []
    for step in steps:
        line = row(f"  {step}", "", step)
        if line is None:
            small.append(step)
        else:
            lines.append(line)
    lines.append(row("pipeline (components)", "pipeline_seconds"))
    lines.append(row("whole process (wall)", "wall_seconds"))
    lines.append(row("peak memory (MiB)", "peak_rss_mib", digits=0))
    shares = []
    for name in tools:
        evaluator = _median(runs[name], "", EVALUATOR)[0]
        wall = _median(runs[name], "wall_seconds")[0]
        shares.append(f"{name} {100 * evaluator / wall:.0f}%")
    lines.append("evaluator share of the wall time (medians): " + ", ".join(shares))
    if small:
        lines.append(f"under {SMALL_SECONDS} s in every column: {', '.join(small)}")
    for name in tools:
        outcomes = ", ".join(run["outcome"] for run in runs[name])
        lines.append(f"outcomes, {name}: {outcomes}")
        pauses = [run.get("paused_seconds", 0.0) for run in runs[name]]
        if any(pauses):
            lines.append(
                f"paused by the host, {name}: {', '.join(f'{p:g}' for p in pauses)} s "
                "(taken out of the wall times above)"
            )
    return lines


def report(result: dict) -> str:
    overrides = "".join(f"; --set {o}" for o in result.get("overrides", []))
    repeats = result["repeats"]
    lines = [
        f"profile {result['env']}{overrides}; seconds unless noted; medians of {repeats} "
        f"repetition(s), min-max in brackets; ratios of the medians to raw TFX's",
        f"like for like: --set {' --set '.join(result['like_for_like'])}",
    ]
    nights = result["night_two"]
    for rows in nights:
        lines.append("")
        lines.extend(_size_table(rows, nights[rows], repeats))
    sizes = list(nights)
    if len(sizes) == 2:
        small, large = sizes
        growth = int(large) / int(small)
        lines.append("")
        lines.append(f"growth for {growth:g}x the rows (wall, medians):")
        for name in nights[small]:
            ratio = (
                _median(nights[large][name], "wall_seconds")[0]
                / _median(nights[small][name], "wall_seconds")[0]
            )
            lines.append(f"  {name}: {ratio:.2f}x")
    return "\n".join(lines)


def _tool_figures(runs: list[dict]) -> dict:
    """One tool's night two at one size: medians with min-max, step by step."""
    steps = list(dict.fromkeys(step for run in runs for step in run["steps"]))
    figures = {
        key: results_file.spread(run[key] for run in runs)
        for key in ("wall_seconds", "pipeline_seconds", "peak_rss_mib")
    }
    figures["steps"] = {
        step: results_file.spread(run["steps"].get(step, 0.0) for run in runs) for step in steps
    }
    figures["evaluator_share"] = (
        figures["steps"][EVALUATOR]["median"] / figures["wall_seconds"]["median"]
        if EVALUATOR in figures["steps"]
        else None
    )
    figures["outcomes"] = [run["outcome"] for run in runs]
    figures["paused_seconds"] = [run.get("paused_seconds", 0.0) for run in runs]
    return figures


def results_figures(result: dict) -> tuple[dict, dict]:
    """Summarizes the nights for the results file: per size and tool, medians with min-max,
    the ratio of each Conveyor column to raw TFX, the growth between two sizes, and the aims."""
    settings = {
        "env": result["env"],
        "rows": result["rows"],
        "repeats": result["repeats"],
        "overrides": result["overrides"],
        "like_for_like": result["like_for_like"],
        "raw_script": results_file.relative(result["raw_script"]),
    }
    sizes = {}
    for rows, tools in result["night_two"].items():
        size = {"tools": {name: _tool_figures(runs) for name, runs in tools.items()}}
        if RAW in tools:
            raw = size["tools"][RAW]["wall_seconds"]["median"]
            size["wall_ratio_to_raw"] = {
                name: figures["wall_seconds"]["median"] / raw
                for name, figures in size["tools"].items()
                if name != RAW
            }
        sizes[rows] = size
    aims = []
    for rows, size in sizes.items():
        share = size["tools"][CONVEYOR_SPEC]["evaluator_share"]
        if share is not None:
            aims.append(
                {
                    "what": f"the Evaluator at most {EVALUATOR_SHARE_AIM:.0%} of a "
                    f"{int(rows):,}-row night (Conveyor)",
                    "value": share,
                    "met": share <= EVALUATOR_SHARE_AIM,
                }
            )
    growth = None
    if len(sizes) == 2:
        small, large = sizes
        growth = {"from_rows": int(small), "to_rows": int(large)}
        growth["rows_factor"] = int(large) / int(small)
        growth["wall_factor"] = {
            name: sizes[large]["tools"][name]["wall_seconds"]["median"]
            / sizes[small]["tools"][name]["wall_seconds"]["median"]
            for name in sizes[small]["tools"]
        }
        rows_factor, wall_aim = GROWTH_AIM
        if growth["rows_factor"] == rows_factor:
            value = growth["wall_factor"][CONVEYOR_SPEC]
            aims.append(
                {
                    "what": f"{rows_factor}x the rows at most {wall_aim:g}x the night's wall "
                    "time (Conveyor)",
                    "value": value,
                    "met": value <= wall_aim,
                }
            )
    return settings, {"sizes": sizes, "growth": growth, "aims": aims}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=DEFAULT_ROWS)
    parser.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"night-two runs of each tool per size (default {DEFAULT_REPEATS})",
    )
    parser.add_argument("--no-raw-tfx", action="store_true", help="run Conveyor only")
    parser.add_argument(
        "--no-like-for-like", action="store_true", help="skip the like-for-like Conveyor column"
    )
    parser.add_argument(
        "--raw-script",
        type=Path,
        default=DEFAULT_RAW_SCRIPT,
        help=f"the raw-TFX night (default {DEFAULT_RAW_SCRIPT.relative_to(REPO_ROOT)}; the "
        "shared original it was taken from is ../shared/bench/raw_tfx_nightly.py)",
    )
    parser.add_argument("--env", default=DEFAULT_ENV, help="profile (default: large)")
    add_set_option(parser, "a spec override for every Conveyor night (conveyor run --set)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    results_file.add_arguments(parser, "nightly")
    parser.add_argument("--out-dir", type=Path, help="work here instead of a temporary dir")
    parser.add_argument("--keep", action="store_true", help="keep the working directories")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    if not args.raw_script.is_file():
        parser.error(f"--raw-script: no file at {args.raw_script}")
    args.raw_script = args.raw_script.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tools = ", ".join(tool.name for tool in _tools(args))
    return run_benchmark(
        args,
        "bench-nightly-",
        benchmark,
        report,
        preamble=[
            f"rows per night: {', '.join(f'{r:,}' for r in args.rows)}; profile {args.env}; "
            f"{tools}; {args.repeats} repetition(s)"
        ],
        contents="working directories",
        results=("nightly", results_figures),
    )


if __name__ == "__main__":
    sys.exit(main())
