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

from collections.abc import Callable, Sequence

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


def resolve_reader(
    reader: str,
    bad_rows: str,
    above_megabytes: float,
    input_bytes: Callable[[], int] | None = None,
) -> tuple[str, str]:
    """Which CSV reader `data.reader` resolves to, and why: the one place that rule lives.

    `auto` takes the Arrow reader when rows are skipped (only it can skip them) or when the input
    is over `above_megabytes`, else TFX's CsvExampleGen. The build sizes its input through
    `input_bytes` (called only when the size decides); `conveyor validate`, which reads no input,
    passes none and gets ("auto", ...) where the size would decide.

    Args:
      reader: `data.reader` ("auto", "arrow" or "tfx").
      bad_rows: `data.bad_rows` ("fail" or "skip").
      above_megabytes: `data.arrow_above_megabytes`.
      input_bytes: the size of what ExampleGen will read, in bytes, computed on demand.

    Returns:
      ("arrow" or "tfx" or "auto", the setting that decided it).
    """
    if reader in ("tfx", "arrow"):
        return reader, f"data.reader: {reader}"
    if bad_rows == "skip":
        return "arrow", "data.bad_rows: skip needs it"
    decided_by = f"data.arrow_above_megabytes: {above_megabytes:g}"
    if input_bytes is None:
        return "auto", decided_by
    return ("arrow" if input_bytes() > above_megabytes * (1 << 20) else "tfx"), decided_by


def reader_summary(reader: str, bad_rows: str, above_megabytes: float, beam_args: Sequence[str]):
    """Which CSV reader a spec under a profile gets, and why, for `conveyor validate`.

    Args:
      reader: `data.reader` ("auto", "arrow" or "tfx").
      bad_rows: `data.bad_rows` ("fail" or "skip").
      above_megabytes: `data.arrow_above_megabytes`.
      beam_args: the profile's `runtime.beam_args`.
    """
    chosen, why = resolve_reader(reader, bad_rows, above_megabytes)
    arrow = f"Arrow, {describe(beam_args)}"
    if chosen == "tfx":
        return f"TFX's CsvExampleGen ({why})"
    if chosen == "arrow":
        return f"{arrow} ({why})"
    return f"auto: TFX's CsvExampleGen up to {above_megabytes:g} MiB of input, then {arrow}"
