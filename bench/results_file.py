"""Writing a benchmark's figures to its results file, bench/results/<name>.json.

Every benchmark script in bench/ ends a completed run by writing one JSON file that replaces the
one before: which code was measured (the git commit, and whether the tree had uncommitted
changes), when, with which command, on which machine, with which settings, and the figures
(medians, min-max, peak memory, ratios against the reference, aims met or not). bench/report.py
renders the tables of bench/README.md and README.md from these files (`make bench-report`), so
no figure is copied by hand and a table always says where its figures come from.

The file holds summaries, not every run; `--json PATH` still writes a script's whole result. The
scripts import this module as `results_file` (bench/ is first on sys.path when a script runs as
`python bench/<script>.py`); it needs only the standard library.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
# Bumped when the layout of a results file changes, so bench/report.py can refuse an old one.
FORMAT_VERSION = 1


def default_path(benchmark: str) -> Path:
    """Where a benchmark's results file goes unless `--results` says otherwise."""
    return RESULTS_DIR / f"{benchmark}.json"


def add_arguments(parser: argparse.ArgumentParser, benchmark: str) -> None:
    """Adds `--results PATH` and `--no-results` to a benchmark's command line."""
    shown = default_path(benchmark).relative_to(REPO_ROOT)
    parser.add_argument(
        "--results",
        type=Path,
        default=default_path(benchmark),
        help=f"the results file this run writes, replacing it (default: {shown}; "
        "bench/report.py renders the README tables from bench/results/*.json)",
    )
    parser.add_argument(
        "--no-results", action="store_true", help="write no results file (e.g. a trial run)"
    )


def spread(values: Iterable[float]) -> dict[str, float]:
    """The median, minimum and maximum of some measured values (at least one)."""
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def git_state(root: Path = REPO_ROOT) -> dict[str, Any]:
    """The commit checked out under `root` and whether tracked files differ from it.

    Returns:
        {"commit": the full hash or None, "dirty": True/False or None}; None where git or the
        repository is not there (e.g. a copy of the code without .git).
    """

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What the figures were measured on: cores, memory, CPU, OS, Python, and the load then."""
    return {
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu_model": _cpu_model(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_end": [round(load, 2) for load in os.getloadavg()],
    }


def command_line(placeholders: Mapping[str, str] | None = None) -> str:
    """This process's command line, as run, with this checkout's own path left out (a path
    under it reads relative to the repository root) and the given paths (a model, a work
    directory) replaced by placeholders, so a committed file names no machine's folders."""
    command = shlex.join(sys.orig_argv)
    for path, placeholder in (placeholders or {}).items():
        command = command.replace(str(path), placeholder)
    return command.replace(f"{REPO_ROOT}/", "")


def write(
    benchmark: str,
    path: Path,
    *,
    settings: Mapping[str, Any],
    figures: Mapping[str, Any],
    placeholders: Mapping[str, str] | None = None,
) -> Path:
    """Writes one benchmark's results file, replacing the one before.

    Args:
        benchmark: which benchmark ("penguin", "datapath", "trainer", "nightly", "serving",
            "evaluator", "gpu", "bucket"): the renderer bench/report.py uses.
        path: the file to write (see add_arguments); its folder is created.
        settings: what the run was asked to do (rows, repeats, profile, ...).
        figures: what it measured.
        placeholders: machine paths in the command line and their placeholders.

    Returns:
        `path`.
    """
    document = {
        "format": FORMAT_VERSION,
        "benchmark": benchmark,
        **git_state(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(placeholders),
        "machine": machine(),
        "settings": dict(settings),
        "figures": dict(figures),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def write_from_args(
    args: argparse.Namespace,
    benchmark: str,
    *,
    settings: Mapping[str, Any],
    figures: Mapping[str, Any],
    placeholders: Mapping[str, str] | None = None,
) -> None:
    """Writes the results file named by `--results` unless `--no-results`, and says where."""
    if args.no_results:
        return
    path = write(
        benchmark, args.results, settings=settings, figures=figures, placeholders=placeholders
    )
    print(f"\nresults written to {path}")


def relative(path: Path | str | None) -> str | None:
    """A path as the results file records it: relative to the repository root when under it."""
    if path is None:
        return None
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
