"""Benchmark: Conveyor's penguin pipeline beside raw TFX's, on the same rows and the same machine.

Every measured run is its own process, so the figures include what a user waits for: Python
start-up, the TensorFlow/TFX imports and the pipeline itself. Both tools get a cold run (fresh
directories) and an unchanged re-run (same directories, same data). Conveyor's unchanged re-run
answers from its fingerprint without importing TFX, so Conveyor also gets a forced re-run
(`--force`: through TFX, every component a cache hit); both of its re-runs are compared with the
one raw re-run. A like-for-like row runs TFX's own penguin module (the one the raw reference
trains, from the tfx wheel) through Conveyor, with Transform and the same steps
(bench/penguin_tfx_module.yaml), on the rows the raw reference writes, cold, against the same
raw cold run. The tools alternate within each repetition so that machine noise falls on both
alike. Peak memory comes from GNU time (/usr/bin/time, Debian package `time`).

    .venv/bin/python bench/bench_penguin.py [--repeats N] [--json PATH] [--out-dir DIR] [--keep]

The reference is bench/reference/raw_tfx_penguin.py, TFX's penguin pipeline written the way
TFX's examples write it (--raw-script runs another copy, e.g. the shared original it was taken
from; see bench/README.md). This is a benchmark, not a test: it asserts nothing about speed, and
exits non-zero only when a run fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

# bench/ is first on sys.path when this runs as `python bench/bench_penguin.py`.
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
DEFAULT_RAW_SCRIPT = REPO_ROOT / "bench/reference/raw_tfx_penguin.py"
# TFX's penguin module through Conveyor: trainer.module and transform.module name the module the
# raw reference trains (tfx.examples.penguin.penguin_utils_keras), with the same steps.
TFX_MODULE_SPEC = REPO_ROOT / "bench/penguin_tfx_module.yaml"
TFX_MODULE_INPUT_DIR = Path("data/penguin_tfx")  # relative to the workdir; the spec reads it
TFX_MODULE_SERVING_DIR = Path("serving/penguin_tfx")  # relative to the workdir
VENV_PYTHON = REPO_ROOT / ".venv/bin/python"
CONVEYOR = REPO_ROOT / ".venv/bin/conveyor"

PIPELINE = "penguin"
# The raw reference drops exactly these rows; Conveyor gets the same ones so both train on 342.
MEASUREMENT_COLUMNS = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
CONVEYOR_INPUT_CSV = Path("data/penguin/penguins.csv")  # relative to the workdir
CONVEYOR_SERVING_DIR = Path("serving/penguin")  # relative to the workdir
CONVEYOR_OUTCOMES = ("PUSHED:", "NOT_PUSHED:", "BLOCKED:", "FAILED:", "UNCHANGED:")

# The (tool, scenario) runs of one repetition, in order. Conveyor's "rerun" is a plain run of the
# unchanged workdir (fingerprint fast path, UNCHANGED:); "force" adds --force (through TFX).
# "conveyor_tfx" is TFX's penguin module through Conveyor; its cold run comes first, so the raw
# cold run both Conveyor cold runs are set against sits between them.
RUN_ORDER = [
    ("conveyor_tfx", "cold"),
    ("raw", "cold"),
    ("conveyor", "cold"),
    ("raw", "rerun"),
    ("conveyor", "rerun"),
    ("conveyor", "force"),
]
SCENARIOS = {
    "raw": ["cold", "rerun"],
    "conveyor": ["cold", "rerun", "force"],
    "conveyor_tfx": ["cold"],
}
# The table's rows: (Conveyor tool, its scenario, the raw scenario it is compared with, label).
COMPARISONS = [
    ("conveyor", "cold", "cold", "cold"),
    ("conveyor", "rerun", "rerun", "unchanged re-run"),
    ("conveyor", "force", "rerun", "unchanged re-run, --force (through TFX)"),
    ("conveyor_tfx", "cold", "cold", "cold, TFX's module (like for like)"),
]
LABEL_WIDTH = max(len(label) for *_, label in COMPARISONS)
HELP_RUNS = 5
# The aim for a cold run: at most this share of raw TFX's wall time (ratio of the medians).
COLD_RATIO_AIM = 0.25


@dataclass
class Measurement:
    """What one measured process cost, and what it left behind."""

    tool: str
    scenario: str
    repetition: int
    command: list[str]
    log: str
    wall_seconds: float
    peak_rss_mib: float
    pushed_versions: int | None = None
    details: dict[str, str] = field(default_factory=dict)


# --- measuring one process -----------------------------------------------------------------------


def measure(
    command: list[str], log_path: Path, *, tool: str, scenario: str, repetition: int
) -> Measurement:
    """Runs one process to completion and records its wall time and peak memory.

    Args:
        command: the process to run; its stdout and stderr go to `log_path`.
        log_path: where the process's output is written.
        tool: "raw", "conveyor", "conveyor_tfx" (labels only).
        scenario: "cold", "rerun", "force" or "help" (labels only).
        repetition: which repetition this run belongs to.

    Returns:
        The measurement.

    Raises:
        BenchError: the process exited non-zero; the message holds its log's tail.
    """
    run = run_with_gnu_time(command, log_path, subprocess_env())
    wall_seconds, peak_mib = run.figures()
    if run.returncode != 0:
        raise BenchError(
            f"{tool} {scenario} (repetition {repetition}) exited {run.returncode}: "
            f"{shlex.join(command)}\n--- last lines of {log_path} ---\n{log_tail(log_path)}"
        )
    return Measurement(
        tool=tool,
        scenario=scenario,
        repetition=repetition,
        command=command,
        log=str(log_path),
        wall_seconds=wall_seconds,
        peak_rss_mib=peak_mib,
    )


# --- the two tools -------------------------------------------------------------------------------


def penguins_source_csv() -> Path:
    """Locates palmerpenguins' CSV; finding the package's folder needs no import of it."""
    found = importlib.util.find_spec("palmerpenguins")
    if found is None or not found.submodule_search_locations:
        raise BenchError("palmerpenguins is not installed in this Python")
    return Path(next(iter(found.submodule_search_locations))) / "data" / "penguins.csv"


def write_conveyor_input(workdir: Path) -> int:
    """Writes the rows the raw reference trains on, in the columns Conveyor's spec reads.

    Returns:
        How many rows were written.
    """
    import pandas as pd  # Only the bench process pays for pandas, never a measured run.

    rows = pd.read_csv(penguins_source_csv()).dropna(subset=MEASUREMENT_COLUMNS)
    target = workdir / CONVEYOR_INPUT_CSV
    target.parent.mkdir(parents=True, exist_ok=True)
    rows.to_csv(target, index=False)
    return len(rows)


def read_raw_output(log_path: Path) -> dict[str, str]:
    """Picks the raw script's `pipeline_seconds` and `pushed_versions` lines out of its log."""
    found = re.findall(r"^(pipeline_seconds|pushed_versions) (\S+)$", log_path.read_text(), re.M)
    return dict(found)


def read_conveyor_outcome(log_path: Path) -> str:
    """Returns Conveyor's outcome line (PUSHED:, NOT_PUSHED:, ...), or "" if it printed none."""
    for line in reversed(log_path.read_text(errors="replace").splitlines()):
        if line.startswith(CONVEYOR_OUTCOMES):
            return line
    return ""


def count_raw_pushes(out_dir: Path) -> int:
    """Counts the model versions the raw pipeline's Pusher has written."""
    serving = out_dir / "serving"
    return len(os.listdir(serving)) if serving.is_dir() else 0


def count_conveyor_pushes(workdir: Path, serving_dir: Path = CONVEYOR_SERVING_DIR) -> int:
    """Counts the numbered model versions under a Conveyor serving directory of `workdir`."""
    serving = workdir / serving_dir
    if not serving.is_dir():
        return 0
    return sum(1 for entry in serving.iterdir() if entry.name.isdigit())


def run_raw(
    scenario: str, repetition: int, raw_script: Path, out_dir: Path, logs: Path
) -> Measurement:
    """Runs the raw reference once; `rerun` reuses the cold run's directory (--reuse)."""
    command = [str(VENV_PYTHON), str(raw_script), str(out_dir)]
    if scenario == "rerun":
        command.append("--reuse")
    result = measure(
        command, logs / f"raw-{scenario}.log", tool="raw", scenario=scenario, repetition=repetition
    )
    result.details = read_raw_output(Path(result.log))
    result.pushed_versions = count_raw_pushes(out_dir)
    return result


def run_conveyor(scenario: str, repetition: int, workdir: Path, logs: Path) -> Measurement:
    """Runs `conveyor run penguin` once; both re-runs use the cold run's workdir and data.

    `rerun` is a plain run of the unchanged workdir (the fingerprint fast path, UNCHANGED:);
    `force` adds --force, which goes through TFX with every component a cache hit.
    """
    command = [str(CONVEYOR), "run", PIPELINE, "--profile", "local", "--workdir", str(workdir)]
    if scenario == "force":
        command.append("--force")
    result = measure(
        command,
        logs / f"conveyor-{scenario}.log",
        tool="conveyor",
        scenario=scenario,
        repetition=repetition,
    )
    result.details = {"outcome": read_conveyor_outcome(Path(result.log))}
    result.pushed_versions = count_conveyor_pushes(workdir)
    return result


def load_raw_script(raw_script: Path):
    """The raw reference as a module, for its `prepare_data` (it imports nothing heavy at its
    top: pandas and palmerpenguins only when prepare_data runs)."""
    found = importlib.util.spec_from_file_location("_raw_tfx_penguin_reference", raw_script)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    if not callable(getattr(module, "prepare_data", None)):
        raise BenchError(f"{raw_script} has no prepare_data(data_dir): cannot give both the rows")
    return module


def write_tfx_module_input(workdir: Path, raw_script: Path) -> int:
    """Writes, with the raw reference's own `prepare_data`, the rows it trains on (TFX's
    processed penguin CSV: 342 rows, species 0..2, culmen_* columns) where the spec reads them.

    Returns:
        How many rows were written.
    """
    data_dir = workdir / TFX_MODULE_INPUT_DIR
    load_raw_script(raw_script).prepare_data(str(data_dir))
    return sum(len(path.read_text().splitlines()) - 1 for path in data_dir.glob("*.csv"))


def run_conveyor_tfx_module(
    scenario: str, repetition: int, workdir: Path, logs: Path
) -> Measurement:
    """Runs `conveyor run bench/penguin_tfx_module.yaml` once: TFX's penguin module through
    Conveyor (Transform, TFX's Trainer with the module's run_fn, the Evaluator, the Pusher)."""
    command = [str(CONVEYOR), "run", str(TFX_MODULE_SPEC), "--profile", "local"]
    command += ["--workdir", str(workdir)]
    result = measure(
        command,
        logs / f"conveyor_tfx-{scenario}.log",
        tool="conveyor_tfx",
        scenario=scenario,
        repetition=repetition,
    )
    result.details = {"outcome": read_conveyor_outcome(Path(result.log))}
    result.pushed_versions = count_conveyor_pushes(workdir, TFX_MODULE_SERVING_DIR)
    return result


def run_repetition(
    repetition: int, raw_script: Path, out_root: Path
) -> tuple[Path, list[Measurement]]:
    """Runs every (tool, scenario) of RUN_ORDER once, starting from fresh directories.

    Returns:
        (the repetition's directory, its measurements in run order).
    """
    rep_dir = Path(tempfile.mkdtemp(prefix=f"rep{repetition}-", dir=out_root))
    raw_dir, conveyor_dir, logs = rep_dir / "raw", rep_dir / "conveyor", rep_dir / "logs"
    tfx_module_dir = rep_dir / "conveyor_tfx"
    write_conveyor_input(conveyor_dir)
    write_tfx_module_input(tfx_module_dir, raw_script)
    results = []
    for tool, scenario in RUN_ORDER:
        if tool == "raw":
            results.append(run_raw(scenario, repetition, raw_script, raw_dir, logs))
        elif tool == "conveyor_tfx":
            results.append(run_conveyor_tfx_module(scenario, repetition, tfx_module_dir, logs))
        else:
            results.append(run_conveyor(scenario, repetition, conveyor_dir, logs))
        report_progress(results[-1])
    return rep_dir, results


def time_conveyor_help(out_root: Path) -> list[Measurement]:
    """Times `conveyor --help` HELP_RUNS times, each a fresh process."""
    logs = out_root / "help-logs"
    return [
        measure(
            [str(CONVEYOR), "--help"],
            logs / f"help-{index}.log",
            tool="conveyor",
            scenario="help",
            repetition=index,
        )
        for index in range(HELP_RUNS)
    ]


# --- reporting -----------------------------------------------------------------------------------


def report_progress(result: Measurement) -> None:
    """Prints one finished run, so a long benchmark shows where it is."""
    extra = " ".join(f"{key}={value}" for key, value in result.details.items())
    print(
        f"  rep {result.repetition} {result.tool:<12} {result.scenario:<5} "
        f"{result.wall_seconds:7.1f} s {result.peak_rss_mib:7.0f} MiB "
        f"versions_in_serving={result.pushed_versions} {extra}",
        flush=True,
    )


def median_of(results: list[Measurement], tool: str, scenario: str, attribute: str) -> float:
    """The median of one attribute over every repetition of (tool, scenario)."""
    return statistics.median(values_of(results, tool, scenario, attribute))


def values_of(results: list[Measurement], tool: str, scenario: str, attribute: str) -> list:
    """One attribute of every repetition of (tool, scenario), in run order."""
    return [getattr(r, attribute) for r in results if (r.tool, r.scenario) == (tool, scenario)]


def summarize(results: list[Measurement], help_runs: list[Measurement]) -> dict:
    """Reduces the runs to medians per comparison, ratios, help timing and pushed versions.

    `scenarios` is keyed by Conveyor's scenario ("cold", "rerun", "force"; "tfx_module_cold" for
    TFX's module through Conveyor); `raw_scenario` names the raw figure it is set against (both
    Conveyor re-runs are compared with the one raw re-run, both cold runs with the raw cold run).
    """
    scenarios = {}
    for tool, conveyor_scenario, raw_scenario, label in COMPARISONS:
        raw_s, raw_mib = (
            median_of(results, "raw", raw_scenario, attribute)
            for attribute in ("wall_seconds", "peak_rss_mib")
        )
        conveyor_s, conveyor_mib = (
            median_of(results, tool, conveyor_scenario, attribute)
            for attribute in ("wall_seconds", "peak_rss_mib")
        )
        scenarios[scenario_key(tool, conveyor_scenario)] = {
            "label": label,
            "raw_scenario": raw_scenario,
            "raw_seconds": raw_s,
            "conveyor_seconds": conveyor_s,
            "seconds_ratio": conveyor_s / raw_s,
            "raw_peak_mib": raw_mib,
            "conveyor_peak_mib": conveyor_mib,
            "peak_ratio": conveyor_mib / raw_mib,
            "raw_seconds_range": _range(values_of(results, "raw", raw_scenario, "wall_seconds")),
            "conveyor_seconds_range": _range(
                values_of(results, tool, conveyor_scenario, "wall_seconds")
            ),
        }
    pushed = {
        tool: {
            scenario: [
                r.pushed_versions for r in results if (r.tool, r.scenario) == (tool, scenario)
            ]
            for scenario in tool_scenarios
        }
        for tool, tool_scenarios in SCENARIOS.items()
    }
    help_seconds = [r.wall_seconds for r in help_runs]
    return {
        "scenarios": scenarios,
        "conveyor_help": {"median_seconds": statistics.median(help_seconds), "runs": help_seconds},
        "pushed_versions_after_run": pushed,
    }


def _range(values: list[float]) -> list[float]:
    return [min(values), max(values)]


def scenario_key(tool: str, scenario: str) -> str:
    """The summary's key of one comparison: Conveyor's own spec by scenario ("cold"), TFX's
    module through Conveyor prefixed ("tfx_module_cold")."""
    return scenario if tool == "conveyor" else f"tfx_module_{scenario}"


def format_table(summary: dict) -> str:
    """Renders the summary as the plain-text table the benchmark prints."""
    header = (
        f"{'scenario':<{LABEL_WIDTH}} | {'raw TFX s':>9} | {'Conveyor s':>10} | {'ratio':>5} | "
        f"{'raw peak MiB':>12} | {'Conveyor peak MiB':>17} | {'ratio':>5}"
    )
    lines = [header, "-" * len(header)]
    for tool, conveyor_scenario, _, label in COMPARISONS:
        row = summary["scenarios"][scenario_key(tool, conveyor_scenario)]
        lines.append(
            f"{label:<{LABEL_WIDTH}} | {row['raw_seconds']:>9.1f} | "
            f"{row['conveyor_seconds']:>10.1f} | {row['seconds_ratio']:>5.2f} | "
            f"{row['raw_peak_mib']:>12.0f} | "
            f"{row['conveyor_peak_mib']:>17.0f} | {row['peak_ratio']:>5.2f}"
        )
    help_seconds = summary["conveyor_help"]["median_seconds"]
    lines.append(f"{'conveyor --help':<{LABEL_WIDTH}} | {'-':>9} | {help_seconds:>10.2f} |")
    lines.append("")
    lines.append("pushed model versions after each run (one entry per repetition):")
    pushed = summary["pushed_versions_after_run"]
    for tool, conveyor_scenario, raw_scenario, label in COMPARISONS:
        lines.append(
            f"  {label:<{LABEL_WIDTH}} raw TFX {pushed['raw'][raw_scenario]}  "
            f"Conveyor {pushed[tool][conveyor_scenario]}"
        )
    return "\n".join(lines)


# --- entry point ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="repetitions of each scenario")
    parser.add_argument(
        "--raw-script",
        type=Path,
        default=DEFAULT_RAW_SCRIPT,
        help="the raw-TFX reference to run (default: Conveyor's copy, "
        f"{DEFAULT_RAW_SCRIPT.relative_to(REPO_ROOT)}; the shared original it was taken from "
        "is ../shared/bench/raw_tfx_penguin.py)",
    )
    parser.add_argument(
        "--out-dir", type=Path, help="where run directories go (default: a new temp dir)"
    )
    parser.add_argument("--keep", action="store_true", help="keep run directories and logs")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    results_file.add_arguments(parser, "penguin")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not args.raw_script.is_file():
        parser.error(f"--raw-script: no file at {args.raw_script}")
    return args


def benchmark(args: argparse.Namespace, out_root: Path, created: list[Path]) -> dict:
    """Runs every repetition and the help timing; returns the JSON-ready result."""
    results: list[Measurement] = []
    for repetition in range(args.repeats):
        rep_dir, rep_results = run_repetition(repetition, args.raw_script, out_root)
        created.append(rep_dir)
        results.extend(rep_results)
    created.append(out_root / "help-logs")
    help_runs = time_conveyor_help(out_root)
    return {
        "command": shlex.join(sys.orig_argv),
        "raw_script": str(args.raw_script),
        "repeats": args.repeats,
        "measured_with": f"{GNU_TIME} -v",
        **summarize(results, help_runs),
        "runs": [asdict(r) for r in [*results, *help_runs]],
    }


def results_figures(result: dict) -> tuple[dict, dict]:
    """Splits the result into the results file's settings and figures (runs left out)."""
    cold = result["scenarios"]["cold"]["seconds_ratio"]
    settings = {
        "repeats": result["repeats"],
        "raw_script": results_file.relative(result["raw_script"]),
    }
    figures = {
        "scenarios": result["scenarios"],
        "conveyor_help": result["conveyor_help"],
        "pushed_versions_after_run": result["pushed_versions_after_run"],
        "aims": [
            {
                "what": f"cold run at most {COLD_RATIO_AIM:g} of raw TFX's wall time",
                "value": cold,
                "met": cold <= COLD_RATIO_AIM,
            }
        ],
    }
    return settings, figures


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(
        parse_args(argv),
        "bench-penguin-",
        benchmark,
        format_table,
        results=("penguin", results_figures),
    )


if __name__ == "__main__":
    sys.exit(main())
