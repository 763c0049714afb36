"""Measuring whole processes for the benchmarks: wall time and peak memory from GNU time.

The benchmark scripts in bench/ (bench_penguin.py, bench_datapath.py, bench_trainer.py,
bench_nightly.py) run every measured command as a process of its own under `/usr/bin/time -v`
(Debian package `time`), so that their figures include Python start-up and the TensorFlow/TFX
imports. This module holds what they share: where GNU time is and the check that it is there,
running a command under it (and how long the host froze this virtual machine meanwhile, which
the wall time leaves out: TimedRun), reading its report, the error a failed run raises, the end
of a run's log for that error, the environment that keeps TensorFlow quiet, and the main()
scaffolding around a whole benchmark, which ends a completed run by writing its results file
(results_file.py).

The scripts import it as `measure`: each is run as `python bench/<script>.py`, which puts bench/
first on sys.path. It needs only the standard library, so importing it costs a measured process
(bench_trainer's workers import their own script) next to nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import results_file

GNU_TIME = Path("/usr/bin/time")
LOG_TAIL_LINES = 40
# Below this, a difference between the wall clock and the monotonic clock over a run is clock
# adjustment, not a pause of the machine (see TimedRun.paused_seconds).
PAUSE_NOISE_SECONDS = 0.5
# Read by TensorFlow when it is first imported: log only fatal errors from C++, and use the
# Keras 2 that TFX 1.16 trains with.
QUIET_TF_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "TF_USE_LEGACY_KERAS": "1",
}

Env = TypeVar("Env", bound=MutableMapping[str, str])


class BenchError(RuntimeError):
    """A measured run failed or could not be read; the message says which and why.

    Where the run left a log, the message says where it is and ends with the log's last lines.
    """


def add_set_option(parser: argparse.ArgumentParser, what: str) -> None:
    """Adds `--set KEY=VALUE` (repeatable; `args.set`, a list): spec overrides, as
    `conveyor run --set` takes them, for `what`."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=what)


def require_gnu_time() -> str | None:
    """Checks that GNU time is where the benchmarks run it from.

    Returns:
        None when GNU_TIME is a file; otherwise a one-line message saying what to install, for
        the caller to print after "error: ".
    """
    if GNU_TIME.is_file():
        return None
    return (
        f"GNU time is needed at {GNU_TIME} to measure peak memory; "
        "install the Debian package `time` (apt-get install time)."
    )


def quiet_tf_env(env: Env, *, override: bool = False) -> Env:
    """Sets QUIET_TF_ENV's variables in an environment mapping, in place.

    Args:
        env: the mapping to change, e.g. a copy of os.environ for a child process, or os.environ
            itself before this process imports TensorFlow.
        override: replace values already set; by default a value the caller chose is kept.

    Returns:
        `env` itself, changed.
    """
    for name, value in QUIET_TF_ENV.items():
        if override:
            env[name] = value
        else:
            env.setdefault(name, value)
    return env


def subprocess_env(*, override: bool = False) -> dict[str, str]:
    """Returns the environment a measured process runs with.

    Args:
        override: let QUIET_TF_ENV's values replace any the caller's environment already has.

    Returns:
        A copy of os.environ plus quiet TensorFlow logging and the Keras 2 that TFX 1.16 needs
        (unless the caller already chose otherwise and `override` is False).
    """
    return quiet_tf_env(dict(os.environ), override=override)


def parse_gnu_time_report(report: str) -> tuple[float, float]:
    """Reads wall time and peak memory out of a `/usr/bin/time -v` report.

    Args:
        report: the text `time -v -o FILE` wrote.

    Returns:
        (wall seconds, maximum resident set size in MiB).

    Raises:
        BenchError: the report lacks either figure.
    """
    elapsed = re.search(r"Elapsed \(wall clock\) time.*?: ([\d:.]+)", report)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", report)
    if not elapsed or not peak:
        raise BenchError(f"cannot read /usr/bin/time's report:\n{report}")
    seconds = 0.0
    for part in elapsed.group(1).split(":"):  # "m:ss.ss" or "h:mm:ss"
        seconds = seconds * 60 + float(part)
    return seconds, int(peak.group(1)) / 1024


def start_with_gnu_time(
    command: list[str], report_path: Path, **popen_kwargs: Any
) -> subprocess.Popen:
    """Starts `command` under `/usr/bin/time -v`, which measures the whole process.

    Args:
        command: the process to measure.
        report_path: where GNU time writes its report (read it with parse_gnu_time_report once
            the process has exited).
        **popen_kwargs: passed to subprocess.Popen (stdout, stderr, env, cwd, ...).

    Returns:
        The running GNU time process; its `args` are the whole command line, GNU time included.
    """
    return subprocess.Popen([str(GNU_TIME), "-v", "-o", str(report_path), *command], **popen_kwargs)


@dataclass(frozen=True)
class TimedRun:
    """A finished run under GNU time: its exit code, its report, what waiting returned, and how
    long the machine itself was paused while it ran.

    `paused_seconds`: how much further the wall clock moved than the monotonic clock. The
    benchmarks run on a virtual machine whose wall clock (which GNU time's elapsed time reads)
    its host sometimes sets forward, as after freezing the machine; the monotonic clock does not
    jump. Once it was 33 s inside a 10M-row night's Evaluator: its component time (monotonic)
    was 38 s, its log's timestamps 71 s apart. Either way the monotonic clock is the time the run
    took: figures() takes the difference out of the wall time. 0.0 when under
    PAUSE_NOISE_SECONDS.
    """

    returncode: int
    report_path: Path
    waited: Any = None
    paused_seconds: float = 0.0

    def figures(self) -> tuple[float, float]:
        """Reads the run's figures out of its GNU time report.

        Returns:
            What parse_gnu_time_report returns, wall seconds and peak RSS in MiB, with the
            machine's pauses (`paused_seconds`) taken out of the wall seconds.

        Raises:
            BenchError: the report lacks either figure.
        """
        wall, peak = parse_gnu_time_report(self.report_path.read_text())
        return wall - self.paused_seconds, peak


def run_with_gnu_time(
    command: list[str],
    log_path: Path,
    env: dict[str, str],
    *,
    wait: Callable[[subprocess.Popen], Any] = subprocess.Popen.wait,
) -> TimedRun:
    """Runs `command` to completion under `/usr/bin/time -v`, its output in one log.

    The report is left unread, so a caller can decide whether a failed run's figures matter:
    call `figures()` on the result.

    Args:
        command: the process to measure.
        log_path: where its stdout and stderr both go (parent directories are created); GNU
            time's report goes beside it, with the suffix `.time`.
        env: the process's environment (see subprocess_env).
        wait: called with the started process; must return once it has exited, e.g. after
            sampling it while it runs. What it returns is kept as `waited`. Should it raise, the
            process is killed before the exception goes on.

    Returns:
        The finished run.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    report_path = log_path.with_suffix(".time")
    wall_start, monotonic_start = time.time(), time.monotonic()
    with log_path.open("w") as log:
        process = start_with_gnu_time(
            command, report_path, stdout=log, stderr=subprocess.STDOUT, env=env
        )
        with process:
            try:
                waited = wait(process)
            except BaseException:  # e.g. KeyboardInterrupt: leave nothing running
                process.kill()
                raise
    returncode = process.wait()
    paused = (time.time() - wall_start) - (time.monotonic() - monotonic_start)
    return TimedRun(
        returncode, report_path, waited, round(paused, 1) if paused >= PAUSE_NOISE_SECONDS else 0.0
    )


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Returns the last `lines` lines of a log, for a failure message.

    Args:
        path: the log.
        lines: how many lines, at most.

    Returns:
        The lines, joined by newlines; "(no file)" when there is no file at `path`.
    """
    if not path.is_file():
        return "(no file)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run_benchmark(
    args: argparse.Namespace,
    prefix: str,
    benchmark: Callable[[argparse.Namespace, Path, list[Path]], dict[str, Any]],
    report: Callable[[dict[str, Any]], str],
    *,
    preamble: Iterable[str] = (),
    contents: str = "run directories",
    kept_contents: str | None = None,
    results: tuple[str, Callable[[dict[str, Any]], tuple[dict, dict]]] | None = None,
) -> int:
    """Runs a benchmark script's main() around its `benchmark` function.

    Checks for GNU time, prints the command (and `preamble`), makes the output root, runs the
    benchmark, prints its report, writes `--json` and the results file (`--results`, unless
    `--no-results`), and cleans up unless `--keep`: the whole
    output root when it is a temporary directory made here, otherwise only the paths the
    benchmark listed in `created` (so a given `--out-dir` keeps anything else, e.g. generated
    inputs the next run can reuse). After a failure every directory stays, since their logs
    explain it.

    Args:
        args: the parsed command line; needs `out_dir` (a Path, or None for a new temporary
            directory), `json` (a Path, or None) and `keep` (a bool).
        prefix: the name prefix of the temporary output root, e.g. "bench-penguin-".
        benchmark: called as benchmark(args, out_root, created); appends to `created` the paths
            it makes under out_root that clean-up removes, and returns the result written as JSON.
        report: turns the result into the text printed after the run.
        preamble: lines printed after the command line, before the output root is made.
        contents: what the output root holds, for the line "<contents> under <out_root>".
        kept_contents: what the failure message says is kept under the output root; defaults
            to `contents`.
        results: (the benchmark's name in its results file, a function splitting the result
            into (settings, figures)); `args` then needs `results` and `no_results` too
            (results_file.add_arguments).

    Returns:
        The exit code: 0, or 1 when GNU time is missing or the benchmark raised BenchError
        (the message is printed to stderr after "error: ").
    """
    if problem := require_gnu_time():
        print(f"error: {problem}", file=sys.stderr)
        return 1
    print(f"command: {shlex.join(sys.orig_argv)}", flush=True)
    for line in preamble:
        print(line, flush=True)
    own_temp_dir = args.out_dir is None
    out_root = Path(tempfile.mkdtemp(prefix=prefix)) if own_temp_dir else args.out_dir
    out_root.mkdir(parents=True, exist_ok=True)
    print(f"{contents} under {out_root}", flush=True)
    created: list[Path] = []
    try:
        result = benchmark(args, out_root, created)
    except BenchError as err:
        # The directories stay: their logs are what explains the failure.
        kept = contents if kept_contents is None else kept_contents
        print(f"error: {err}\n({kept} kept under {out_root})", file=sys.stderr)
        return 1
    print()
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nJSON written to {args.json}")
    if results is not None:
        name, split = results
        settings, figures = split(result)
        placeholders = {} if own_temp_dir else {str(out_root): "OUT_DIR"}
        if args.json:  # a file of this machine's: the committed command names none
            placeholders[str(args.json)] = "RUNS.json"
        results_file.write_from_args(
            args, name, settings=settings, figures=figures, placeholders=placeholders
        )
    if not args.keep:
        for path in [out_root] if own_temp_dir else created:
            shutil.rmtree(path, ignore_errors=True)
    return 0
