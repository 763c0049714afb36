"""Benchmark: Conveyor's data path beside raw TFX's, on the same taxi-like rows, at several sizes.

The data path is ExampleGen, StatisticsGen, SchemaGen and ExampleValidator over one CSV. For each
size the CSV is generated once (pipelines/datasets/taxi.py, seed 0) and both tools read that file:

- the reference, bench/reference/raw_tfx_datapath.py (--raw-script runs another copy, e.g. the
  shared original it was taken from; see bench/README.md): TFX's CsvExampleGen and friends with
  one Beam worker, as TFX users run it;
- `conveyor run taxi --profile large --force` in a fresh workdir (the `large` profile: the Arrow
  reader and its Parquet copy, Beam in one process), with CONVEYOR_SETTINGS as `--set`
  overrides (only the four data components; --conveyor-set changes them).

Every measured run is its own process under GNU time (/usr/bin/time, Debian package `time`), so
wall seconds and peak memory include Python start-up and the TensorFlow/TFX imports. The tools
alternate within each repetition so that machine noise falls on both alike. Besides whole-process
rows/s, the table gives a pipeline-only figure: the reference's own `pipeline_seconds` (all four
components, timed around LocalDagRunner.run) and Conveyor's `pipeline total` line (the same
four, timed around LocalDagRunner.run_with_ir). Memory is given twice: GNU time's maximum
resident set size, which is that of the largest single process, and the peak of the summed PSS
of the whole process tree (sampled; needs psutil), which also counts Conveyor's separate Beam
worker processes. Ratios are raw TFX / Conveyor: above 1 means Conveyor is faster or smaller.

    .venv/bin/python bench/bench_datapath.py [--rows N ...] [--sizes-only-conveyor]
        [--conveyor-set KEY=VALUE ...] [--repeats N] [--json PATH] [--out-dir DIR] [--keep]

The reference takes about 7 minutes at 1.5M rows. This is a benchmark, not a test: it asserts
nothing about speed, and exits non-zero only when a run fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# bench/ is first on sys.path when this runs as `python bench/bench_datapath.py`.
import results_file
from measure import (
    GNU_TIME,
    BenchError,
    log_tail,
    run_benchmark,
    run_with_gnu_time,
    subprocess_env,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RAW_SCRIPT = REPO_ROOT / "bench/reference/raw_tfx_datapath.py"
VENV_PYTHON = REPO_ROOT / ".venv/bin/python"
CONVEYOR = REPO_ROOT / ".venv/bin/conveyor"

PIPELINE = "taxi"
DEFAULT_ROWS = [150_000, 1_500_000]
DATA_SEED = 0
CSV_NAME = "taxi.csv"
CONVEYOR_INPUT_CSV = Path("data/taxi") / CSV_NAME  # relative to the workdir
# The `--set` overrides every Conveyor run gets, in order; --conveyor-set replaces or adds keys.
# The `large` profile supplies the Arrow reader and in-process Beam; the components are cut
# to the reference's four.
CONVEYOR_ENV = "large"
CONVEYOR_SETTINGS = {
    "components": (
        "[{type: csv_example_gen}, {type: statistics_gen}, {type: schema_gen}, "
        "{type: example_validator}]"
    ),
    # The reference reads one CSV and infers its schema: so does Conveyor here, without the
    # nightly chain's spans, drift gate, window and warm start (none of them are data path).
    "data.span_pattern": "null",
    "data.window_spans": "1",
    "data.drift": "{}",
    "schema.source": "infer",
    "trainer.warm_start": "false",
}
CONVEYOR_FAILURES = ("FAILED:", "BLOCKED:")
CONVEYOR_OUTCOMES = ("PUSHED:", "NOT_PUSHED:", "UNCHANGED:", *CONVEYOR_FAILURES)
# Conveyor's per-component line, e.g. "  csv_example_gen        executed     4.5s".
COMPONENT_LINE = re.compile(r"^\s+(\w+)\s+(executed|cached|failed)\s+([\d.]+)s\s*$", re.M)
# Conveyor's pipeline-only figure: LocalDagRunner's whole run, as the reference times its own.
PIPELINE_LINE = re.compile(r"^\s+pipeline\s+total\s+([\d.]+)s\s*$", re.M)
# The components that must have executed (not come from the cache) for a run to count.
EXECUTED_COMPONENTS = ("csv_example_gen", "statistics_gen", "schema_gen", "example_validator")
TREE_SAMPLE_SECONDS = 0.5  # how often the process tree's memory is sampled


@dataclass
class Measurement:
    """What one measured process cost, and what it reported."""

    tool: str
    rows: int
    repetition: int
    command: list[str]
    log: str
    wall_seconds: float
    peak_rss_mib: float
    tree_peak_pss_mib: float | None = None
    pipeline_seconds: float | None = None
    component_seconds: dict[str, float] = field(default_factory=dict)
    outcome: str = ""


# --- measuring one process -----------------------------------------------------------------------


def run_failure(what: str, command: list[str], log_path: Path, reason: str) -> BenchError:
    """Builds the error for a failed run: what failed, why, its command and its log's tail."""
    return BenchError(
        f"{what} {reason}: {shlex.join(command)}\n"
        f"--- last lines of {log_path} ---\n{log_tail(log_path)}"
    )


def measure(
    command: list[str], log_path: Path, *, tool: str, rows: int, repetition: int
) -> Measurement:
    """Runs one process to completion under `/usr/bin/time -v`, which measures the whole process.

    Args:
        command: the process to run; its stdout and stderr go to `log_path`.
        log_path: where the process's output is written.
        tool: "raw" or "conveyor" (labels only).
        rows: the input's row count (labels only).
        repetition: which repetition this run belongs to.

    Returns:
        The measurement (wall time and peak memory; the tool-specific fields are left empty).

    Raises:
        BenchError: the process exited non-zero; the message holds its log's tail.
    """
    run = run_with_gnu_time(command, log_path, subprocess_env(), wait=sample_tree_peak_kib)
    if run.returncode != 0:
        what = f"{tool} at {rows:,} rows (repetition {repetition})"
        raise run_failure(what, command, log_path, f"exited {run.returncode}")
    wall_seconds, peak_mib = run.figures()
    tree_peak_kib = run.waited
    return Measurement(
        tool=tool,
        rows=rows,
        repetition=repetition,
        command=command,
        log=str(log_path),
        wall_seconds=wall_seconds,
        peak_rss_mib=peak_mib,
        tree_peak_pss_mib=None if tree_peak_kib is None else tree_peak_kib / 1024,
    )


def process_pss_kib(pid: int) -> int:
    """One process's proportional set size (its private pages plus its share of shared ones).

    Read from /proc/PID/smaps_rollup, which is cheap even for a process of several GB; 0 when
    the process has gone or the file cannot be read.
    """
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def sample_tree_peak_kib(process: subprocess.Popen) -> int | None:
    """Waits for `process`, sampling the summed PSS of it and all its descendants.

    GNU time's "Maximum resident set size" is the largest single process, which undercounts a
    run whose Beam workers are separate processes (multi_processing): the sum over the whole
    process tree is what the machine has to hold. PSS, not RSS, so that library pages shared by
    the workers are counted once. Sampling can miss a short spike; the figure is a lower bound.

    Returns:
        The largest sampled sum in KiB, or None when psutil (needed to find the descendants) is
        not installed or /proc has no smaps_rollup.
    """
    try:
        import psutil  # A dependency of the locked environment; only the sampler needs it.
    except ImportError:
        process.wait()
        return None
    if not Path(f"/proc/{process.pid}/smaps_rollup").exists():
        process.wait()
        return None
    root, peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        try:
            pids = [root.pid, *(child.pid for child in root.children(recursive=True))]
        except psutil.Error:  # the tree changed under us; the next sample will see it
            pids = [root.pid]
        peak = max(peak, sum(process_pss_kib(pid) for pid in pids))
        time.sleep(TREE_SAMPLE_SECONDS)
    return peak


# --- the input ------------------------------------------------------------------------------------


def count_rows(csv_path: Path) -> int:
    """Counts a CSV's data rows (lines after the header); the generated rows hold no newlines."""
    lines = 0
    with csv_path.open("rb") as handle:
        while block := handle.read(1 << 20):
            lines += block.count(b"\n")
    return max(lines - 1, 0)


def ensure_input(rows: int, out_root: Path) -> tuple[Path, float | None]:
    """Generates `<out_root>/data-<rows>/taxi.csv` unless it is already there with `rows` rows.

    The directory holds nothing else: the reference's CsvExampleGen reads every file in it.

    Returns:
        (the CSV's directory, seconds spent generating it, or None when it was reused).
    """
    data_dir = out_root / f"data-{rows}"
    csv_path = data_dir / CSV_NAME
    if csv_path.is_file() and count_rows(csv_path) == rows:
        return data_dir, None
    # Imported here: only generating needs pandas (the venv has the project installed, so
    # `pipelines` imports from any folder).
    from pipelines.datasets.taxi import write_rows

    if data_dir.exists():
        shutil.rmtree(data_dir)  # a stale or half-written CSV from an earlier, stopped run
    start = time.perf_counter()
    write_rows(rows, csv_path, seed=DATA_SEED)
    return data_dir, time.perf_counter() - start


def link_or_copy(source: Path, target: Path) -> None:
    """Puts `source` at `target`: a hard link when possible (no copying 200 MB), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copyfile(source, target)


# --- the two tools -------------------------------------------------------------------------------


def run_raw(
    rows: int, repetition: int, raw_script: Path, data_dir: Path, run_dir: Path
) -> Measurement:
    """Runs the raw-TFX reference once, into a fresh output directory.

    Raises:
        BenchError: it failed, or printed no `pipeline_seconds` line.
    """
    out_dir = run_dir / "raw"
    command = [str(VENV_PYTHON), str(raw_script), str(data_dir), str(out_dir)]
    log_path = run_dir / "raw.log"
    result = measure(command, log_path, tool="raw", rows=rows, repetition=repetition)
    found = re.search(r"^pipeline_seconds (\S+)$", log_path.read_text(errors="replace"), re.M)
    if not found:
        raise run_failure(f"raw at {rows:,} rows", command, log_path, "printed no pipeline_seconds")
    result.pipeline_seconds = float(found.group(1))
    return result


def conveyor_command(workdir: Path, settings: dict[str, str]) -> list[str]:
    """The `conveyor run` command line for one measured run."""
    command = [str(CONVEYOR), "run", PIPELINE, "--profile", CONVEYOR_ENV, "--force"]
    command += ["--workdir", str(workdir)]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    return command


def read_conveyor_log(log_text: str) -> tuple[dict[str, float], dict[str, str], str]:
    """Picks per-component seconds and states, and the outcome line, out of Conveyor's output.

    Returns:
        (seconds by node id, state by node id, outcome line or "" when there is none).
    """
    seconds, states = {}, {}
    for node, state, node_seconds in COMPONENT_LINE.findall(log_text):
        seconds[node], states[node] = float(node_seconds), state
    outcome = ""
    for line in reversed(log_text.splitlines()):
        if line.startswith(CONVEYOR_OUTCOMES):
            outcome = line
            break
    return seconds, states, outcome


def conveyor_problem(states: dict[str, str], outcome: str) -> str | None:
    """Why a Conveyor run that exited 0 still does not count, or None when it does."""
    if outcome.startswith(CONVEYOR_FAILURES):
        return f"ended {outcome.split(':')[0]}"
    for node in EXECUTED_COMPONENTS:
        if states.get(node) != "executed":
            # A cache hit or a missing line would make the seconds meaningless.
            return f"reported {node} as {states.get(node, 'absent')}, not executed"
    return None


def run_conveyor(
    rows: int, repetition: int, settings: dict[str, str], csv_path: Path, run_dir: Path
) -> Measurement:
    """Runs `conveyor run taxi --force` once, in a fresh workdir holding the input CSV.

    Raises:
        BenchError: it exited non-zero, ended FAILED:/BLOCKED:, did not execute all of
            EXECUTED_COMPONENTS, or printed no pipeline total.
    """
    workdir = run_dir / "conveyor"
    link_or_copy(csv_path, workdir / CONVEYOR_INPUT_CSV)
    command = conveyor_command(workdir, settings)
    log_path = run_dir / "conveyor.log"
    result = measure(command, log_path, tool="conveyor", rows=rows, repetition=repetition)
    log_text = log_path.read_text(errors="replace")
    seconds, states, outcome = read_conveyor_log(log_text)
    problem = conveyor_problem(states, outcome)
    if problem:
        raise run_failure(f"conveyor at {rows:,} rows", command, log_path, problem)
    result.component_seconds, result.outcome = seconds, outcome
    total = PIPELINE_LINE.search(log_text)
    if total is None:
        raise run_failure(f"conveyor at {rows:,} rows", command, log_path, "printed no total")
    result.pipeline_seconds = float(total.group(1))
    return result


def run_size(args: argparse.Namespace, rows: int, out_root: Path) -> tuple[dict, list[Path]]:
    """Prepares one size's input, then runs every repetition, the tools alternating.

    Returns:
        ({"input": ..., "runs": [Measurement, ...]}, the run directories created).
    """
    data_dir, generate_seconds = ensure_input(rows, out_root)
    csv_path = data_dir / CSV_NAME
    size_mb = csv_path.stat().st_size / 1e6
    made = "reused" if generate_seconds is None else f"generated in {generate_seconds:.1f} s"
    print(f"{rows:,} rows: {csv_path} ({size_mb:.1f} MB, {made})", flush=True)
    runs, created = [], []
    for repetition in range(args.repeats):
        run_root = Path(tempfile.mkdtemp(prefix=f"runs-{rows}-rep{repetition}-", dir=out_root))
        created.append(run_root)
        if not args.sizes_only_conveyor:
            runs.append(run_raw(rows, repetition, args.raw_script, data_dir, run_root))
            report_progress(runs[-1])
        runs.append(run_conveyor(rows, repetition, args.settings, csv_path, run_root))
        report_progress(runs[-1])
    data = {
        "csv": str(csv_path),
        "megabytes": size_mb,
        "generate_seconds": generate_seconds,
        "runs": runs,
    }
    return data, created


# --- reporting -----------------------------------------------------------------------------------


def report_progress(result: Measurement) -> None:
    """Prints one finished run, so a long benchmark shows where it is."""
    components = " ".join(f"{node}={s:.1f}s" for node, s in result.component_seconds.items())
    pipeline = (
        "" if result.pipeline_seconds is None else f"pipeline {result.pipeline_seconds:.1f} s"
    )
    tree = cell(result.tree_peak_pss_mib, ".0f")
    print(
        f"  rep {result.repetition} {result.tool:<8} {result.wall_seconds:7.1f} s "
        f"max RSS {result.peak_rss_mib:.0f} MiB, tree PSS {tree} MiB  {pipeline}  {components}",
        flush=True,
    )


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing (e.g. the reference was skipped)."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def tool_summary(runs: list[Measurement], tool: str, rows: int) -> dict | None:
    """Medians over one tool's repetitions at one size, and the rows/s they give.

    Returns:
        The summary, or None when the tool did not run.
    """
    mine = [r for r in runs if r.tool == tool]
    if not mine:
        return None
    wall = statistics.median(r.wall_seconds for r in mine)
    pipeline = statistics.median(r.pipeline_seconds for r in mine)
    summary = {
        "wall_seconds": wall,
        "wall_seconds_range": [
            min(r.wall_seconds for r in mine),
            max(r.wall_seconds for r in mine),
        ],
        "rows_per_second": rows / wall,
        "pipeline_seconds": pipeline,
        "pipeline_rows_per_second": rows / pipeline if pipeline else None,
        "peak_rss_mib": statistics.median(r.peak_rss_mib for r in mine),
        "tree_peak_pss_mib": median_or_none([r.tree_peak_pss_mib for r in mine]),
    }
    if tool == "conveyor":
        nodes = mine[0].component_seconds
        summary["component_seconds"] = {
            node: statistics.median(r.component_seconds.get(node, 0.0) for r in mine)
            for node in nodes
        }
    return summary


def median_or_none(values: list[float | None]) -> float | None:
    """The median of the values that were measured, or None when none was."""
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


def figure(summary: dict | None, key: str) -> float | None:
    """One figure of a tool summary, or None when that tool did not run."""
    return None if summary is None else summary[key]


def size_summary(rows: int, size_data: dict) -> dict:
    """One size's figures for both tools, and the raw / Conveyor ratios."""
    raw = tool_summary(size_data["runs"], "raw", rows)
    conveyor = tool_summary(size_data["runs"], "conveyor", rows)
    return {
        "rows": rows,
        "csv_megabytes": size_data["megabytes"],
        "generate_seconds": size_data["generate_seconds"],
        "raw": raw,
        "conveyor": conveyor,
        "wall_ratio": ratio(figure(raw, "wall_seconds"), conveyor["wall_seconds"]),
        "pipeline_ratio": ratio(figure(raw, "pipeline_seconds"), conveyor["pipeline_seconds"]),
        "peak_ratio": ratio(figure(raw, "peak_rss_mib"), conveyor["peak_rss_mib"]),
        "tree_peak_ratio": ratio(figure(raw, "tree_peak_pss_mib"), conveyor["tree_peak_pss_mib"]),
    }


def scaling(sizes: list[dict]) -> dict | None:
    """How each tool's wall time and peak memory grow from the smallest size to the largest.

    Returns:
        {"rows_factor": ..., tool: {"time_factor": ..., "memory_factor": ...}}, or None with
        fewer than two sizes.
    """
    if len(sizes) < 2:
        return None
    small, large = sizes[0], sizes[-1]
    result = {"from_rows": small["rows"], "to_rows": large["rows"]}
    result["rows_factor"] = large["rows"] / small["rows"]
    for tool in ("raw", "conveyor"):
        if small[tool] and large[tool]:
            result[tool] = {
                "time_factor": large[tool]["wall_seconds"] / small[tool]["wall_seconds"],
                "pipeline_time_factor": ratio(
                    large[tool]["pipeline_seconds"], small[tool]["pipeline_seconds"]
                ),
                "memory_factor": large[tool]["peak_rss_mib"] / small[tool]["peak_rss_mib"],
                "tree_memory_factor": ratio(
                    large[tool]["tree_peak_pss_mib"], small[tool]["tree_peak_pss_mib"]
                ),
            }
    return result


def cell(value: float | None, spec: str) -> str:
    """Formats a figure for the table; a missing one (reference skipped) is "-"."""
    return "-" if value is None else format(value, spec)


def times(value: float | None) -> str:
    """Formats a ratio or growth factor ("4.67x"); a missing one is "-"."""
    return "-" if value is None else f"{value:.2f}x"


def component_cell(summary: dict, node: str) -> str:
    """One component's seconds for the table; "-" for the reference, which prints none."""
    return cell(summary.get("component_seconds", {}).get(node), ".1f")


TABLE_COLUMNS = [
    # (header, width, function of a tool summary giving the cell)
    ("wall s", 8, lambda s: cell(s["wall_seconds"], ".1f")),
    ("rows/s (wall)", 13, lambda s: cell(s["rows_per_second"], ",.0f")),
    ("pipeline s", 10, lambda s: cell(s["pipeline_seconds"], ".1f")),
    ("rows/s (pipeline)", 17, lambda s: cell(s["pipeline_rows_per_second"], ",.0f")),
    ("ExampleGen s", 12, lambda s: component_cell(s, "csv_example_gen")),
    ("StatisticsGen s", 15, lambda s: component_cell(s, "statistics_gen")),
    ("max RSS MiB", 11, lambda s: cell(s["peak_rss_mib"], ",.0f")),
    ("tree PSS MiB", 12, lambda s: cell(s["tree_peak_pss_mib"], ",.0f")),
]


def format_table(sizes: list[dict], scale: dict | None) -> str:
    """Renders the per-size figures, the ratios and the scaling as plain text."""
    header = f"{'rows':>10} | {'tool':<8} | " + " | ".join(
        f"{name:>{width}}" for name, width, _ in TABLE_COLUMNS
    )
    lines = [header, "-" * len(header)]
    for size in sizes:
        for tool, label in (("raw", "raw TFX"), ("conveyor", "Conveyor")):
            if size[tool] is None:
                continue
            cells = " | ".join(f"{fn(size[tool]):>{width}}" for _, width, fn in TABLE_COLUMNS)
            lines.append(f"{size['rows']:>10,} | {label:<8} | {cells}")
        if size["raw"] is None:
            continue
        lines.append(
            f"{'':>10} | {'raw/Conv':<8} | time {times(size['wall_ratio'])} (wall), "
            f"{times(size['pipeline_ratio'])} (pipeline); "
            f"memory {times(size['peak_ratio'])} (max RSS), "
            f"{times(size['tree_peak_ratio'])} (tree PSS)"
        )
    lines += [
        "",
        "pipeline s: raw TFX's own pipeline_seconds (all four components, around "
        "LocalDagRunner.run);",
        "            Conveyor's `pipeline total` line (the same four, around "
        "LocalDagRunner.run_with_ir).",
        "max RSS: GNU time's maximum resident set size, i.e. of the largest single process.",
        "tree PSS: the largest sampled sum of PSS over the process and all its descendants "
        f"(every {TREE_SAMPLE_SECONDS} s),",
        "          which counts separate Beam worker processes; a lower bound.",
        "raw/Conv: raw TFX / Conveyor; above 1 means Conveyor is faster or smaller.",
    ]
    if scale:
        lines += ["", format_scaling(scale)]
    return "\n".join(lines)


def format_scaling(scale: dict) -> str:
    """Renders the smallest-to-largest growth of each tool's time and memory."""
    lines = [
        f"scaling from {scale['from_rows']:,} to {scale['to_rows']:,} rows "
        f"({scale['rows_factor']:.0f}x rows):"
    ]
    for tool, label in (("raw", "raw TFX"), ("conveyor", "Conveyor")):
        if tool in scale:
            growth = scale[tool]
            lines.append(
                f"  {label:<8} time {times(growth['time_factor'])} (wall), "
                f"{times(growth['pipeline_time_factor'])} (pipeline); "
                f"memory {times(growth['memory_factor'])} (max RSS), "
                f"{times(growth['tree_memory_factor'])} (tree PSS)"
            )
    return "\n".join(lines)


# --- entry point ---------------------------------------------------------------------------------


def parse_setting(text: str) -> tuple[str, str]:
    """Splits a --conveyor-set KEY=VALUE argument (the value is YAML, passed on unchanged)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=DEFAULT_ROWS,
        help=f"input sizes in rows, smallest first (default: {DEFAULT_ROWS})",
    )
    parser.add_argument("--repeats", type=int, default=1, help="repetitions at each size")
    parser.add_argument(
        "--raw-script",
        type=Path,
        default=DEFAULT_RAW_SCRIPT,
        help="the raw-TFX reference to run (default: Conveyor's copy, "
        f"{DEFAULT_RAW_SCRIPT.relative_to(REPO_ROOT)}; the shared original it was taken from "
        "is ../shared/bench/raw_tfx_datapath.py)",
    )
    parser.add_argument(
        "--sizes-only-conveyor",
        action="store_true",
        help="skip the raw-TFX reference (about 7 minutes at 1.5M rows)",
    )
    parser.add_argument(
        "--conveyor-set",
        type=parse_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="replace or add one of Conveyor's --set overrides; repeatable",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        help="where inputs and run directories go (default: a new temp dir); an input already "
        "there with the right row count is reused",
    )
    parser.add_argument("--keep", action="store_true", help="keep run directories and logs")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    results_file.add_arguments(parser, "datapath")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if any(rows < 1 for rows in args.rows):
        parser.error("--rows: every size must be at least 1")
    if not args.sizes_only_conveyor and not args.raw_script.is_file():
        parser.error(f"--raw-script: no file at {args.raw_script}")
    args.rows = sorted(set(args.rows))
    args.settings = {**CONVEYOR_SETTINGS, **dict(args.conveyor_set)}
    return args


def benchmark(args: argparse.Namespace, out_root: Path, created: list[Path]) -> dict:
    """Runs every size; returns the JSON-ready result."""
    sizes, runs = [], []
    for rows in args.rows:
        size_data, size_created = run_size(args, rows, out_root)
        created.extend(size_created)
        runs.extend(size_data["runs"])
        sizes.append(size_summary(rows, size_data))
    return {
        "command": shlex.join(sys.orig_argv),
        "raw_script": None if args.sizes_only_conveyor else str(args.raw_script),
        "conveyor_command": shlex.join(conveyor_command(Path("WORKDIR"), args.settings)),
        "data_seed": DATA_SEED,
        "repeats": args.repeats,
        "measured_with": f"{GNU_TIME} -v",
        "sizes": sizes,
        "scaling": scaling(sizes),
        "runs": [asdict(r) for r in runs],
    }


def results_figures(result: dict) -> tuple[dict, dict]:
    """Splits the result into the results file's settings and figures (runs left out)."""
    settings = {
        "rows": [size["rows"] for size in result["sizes"]],
        "repeats": result["repeats"],
        "raw_script": results_file.relative(result["raw_script"]),
        "conveyor_command": result["conveyor_command"],
        "data_seed": result["data_seed"],
    }
    return settings, {"sizes": result["sizes"], "scaling": result["scaling"]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A given --out-dir keeps its generated inputs, so the next run can reuse them.
    return run_benchmark(
        args,
        "bench-datapath-",
        benchmark,
        lambda result: format_table(result["sizes"], result["scaling"]),
        preamble=[f"conveyor: {shlex.join(conveyor_command(Path('WORKDIR'), args.settings))}"],
        contents="inputs and run directories",
        kept_contents="run directories",
        results=("datapath", results_figures),
    )


if __name__ == "__main__":
    sys.exit(main())
