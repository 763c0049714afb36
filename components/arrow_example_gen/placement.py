"""Where the Arrow CSV reader's work runs, read from a profile's Beam arguments.

The reader is a Beam pipeline of work units (executor.read_csv_splits). On Beam's DirectRunner
in its default mode, `in_memory`, Beam would run those units one after another in this very
process, adding only its own cost per stage; there the same functions run without Beam. Every
other runner or mode (the DirectRunner's `multi_threading` and `multi_processing`, Dataflow,
Flink, Spark) gets the Beam pipeline, whose units its workers share, once the input is more
than one unit.

Only the standard library here: `conveyor validate` says which a profile gets.
"""

from __future__ import annotations

from collections.abc import Sequence

_DIRECT_RUNNERS = {"direct", "directrunner"}
UNIT_BYTES = 64 << 20  # input bytes per work unit (and per output shard of every split)


def _option(beam_args: Sequence[str], name: str) -> str | None:
    """The last value of `--name=value` or `--name value` in `beam_args` (Beam's last wins)."""
    found = None
    flag = f"--{name}"
    for i, arg in enumerate(beam_args):
        if arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
        elif arg == flag and i + 1 < len(beam_args):
            found = beam_args[i + 1]
    return found


def runner_of(beam_args: Sequence[str]) -> tuple[str, str | None]:
    """(runner, DirectRunner running mode or None) as Beam reads `beam_args`."""
    runner = _option(beam_args, "runner") or "DirectRunner"
    if runner.lower() not in _DIRECT_RUNNERS:
        return runner, None
    return "DirectRunner", _option(beam_args, "direct_running_mode") or "in_memory"


def reads_in_process(beam_args: Sequence[str]) -> bool:
    """Whether the reader's units run in this process, without Beam: DirectRunner in memory."""
    return runner_of(beam_args) == ("DirectRunner", "in_memory")


def describe(beam_args: Sequence[str]) -> str:
    """How the Arrow reader runs under these Beam arguments, in a few words."""
    runner, mode = runner_of(beam_args)
    if mode == "in_memory":
        return "in process (DirectRunner in memory)"
    where = f"DirectRunner {mode}" if mode else runner
    # One unit has nothing to spread: it is read in process under every runner.
    return f"in process up to {UNIT_BYTES >> 20} MiB, beyond as Beam work over {where}'s workers"


def reader_summary(reader: str, bad_rows: str, above_megabytes: float, beam_args: Sequence[str]):
    """Which CSV reader a spec under a profile gets, and why, for `conveyor validate`.

    Args:
      reader: `data.reader` ("auto", "arrow" or "tfx").
      bad_rows: `data.bad_rows` ("fail" or "skip").
      above_megabytes: `data.arrow_above_megabytes`.
      beam_args: the profile's `runtime.beam_args`.
    """
    arrow = f"Arrow, {describe(beam_args)}"
    if reader == "tfx":
        return "TFX's CsvExampleGen (data.reader: tfx)"
    if reader == "arrow":
        return f"{arrow} (data.reader: arrow)"
    if bad_rows == "skip":
        return f"{arrow} (data.bad_rows: skip needs it)"
    return f"auto: TFX's CsvExampleGen up to {above_megabytes:g} MiB of input, then {arrow}"
