"""The driver of a Kubeflow job's ExampleGen (Vertex AI runs it before the task, as the
container's `preCacheCheck` hook): which night the run reads, then TFX's driver unchanged.

TFX's driver (`tfx.orchestration.kubeflow.v2.file_based_example_gen.driver`) reads the span
ExampleGen's `range_config` names, or the newest span in the input folder when it names none.
A compiled job cannot know the night it will run for, so for a spec with dated spans Conveyor's
compile (`pipelines.run.kubeflow`) gives the task two parameters and runs this module first:

- `range_config`, the job's runtime parameter: a RangeConfig (JSON), as `conveyor submit
  --date D` sets it for a backfill, read as it is;
- `scheduled_at`, KFP's `{{$.pipeline_job_schedule_time_utc}}`: when it names a time (a
  scheduled run), the run reads the night before that time in the spec's `schedule.timezone`
  (`--timezone`), as a local crontab runs `conveyor run --date yesterday` and Airflow's DAG
  run its logical date;
- neither (a run started by hand): the newest span, as `conveyor run` without `--date`.

The decision is written into the executor input's `range_config`; `scheduled_at` is taken
out, and TFX's driver runs with the rest of the arguments.

Run in the pipeline image as `python -m pipelines.run.kubeflow_driver --timezone=ZONE <TFX's
driver arguments>`.
"""

from __future__ import annotations

import datetime
import json
import sys
import zoneinfo

TFX_DRIVER = "tfx.orchestration.kubeflow.v2.file_based_example_gen.driver"
TIMEZONE_FLAG = "--timezone="
RANGE_CONFIG = "range_config"  # pipelines.builder.spans.RANGE_PARAMETER, TFX's key
SCHEDULED_AT = "scheduled_at"
INVOCATION_FLAG = "--json_serialized_invocation_args"


def scheduled_night(scheduled_at: str, zone: str) -> datetime.date | None:
    """The night a run scheduled at `scheduled_at` (RFC 3339, KFP's placeholder) reads: the day
    before, in `zone`; None when it names no time (empty, unresolved, or the epoch, which a
    run started by hand may get)."""
    from components.run_finish.component import utc_seconds

    seconds = utc_seconds(scheduled_at) if scheduled_at else None
    if not seconds:  # None, or 0: 1970-01-01T00:00:00Z
        return None
    moment = datetime.datetime.fromtimestamp(seconds, tz=zoneinfo.ZoneInfo(zone))
    return moment.date() - datetime.timedelta(days=1)


def decide_range(parameters: dict, zone: str) -> dict:
    """The task's parameter values with `range_config` decided (module docstring) and
    `scheduled_at` taken out."""
    from pipelines.builder import spans

    decided = dict(parameters)
    scheduled_at = str(decided.pop(SCHEDULED_AT, "") or "")
    if decided.get(RANGE_CONFIG):
        return decided
    night = scheduled_night(scheduled_at, zone)
    if night is not None:
        decided[RANGE_CONFIG] = spans.range_config_json(spans.span_of_date(night))
    return decided


def rewritten(argv: list[str]) -> tuple[str, list[str]]:
    """(the zone, TFX's driver arguments with the executor input's parameters decided)."""
    zone, rest = "UTC", []
    for argument in argv:
        if argument.startswith(TIMEZONE_FLAG):
            zone = argument[len(TIMEZONE_FLAG) :]
        else:
            rest.append(argument)
    if INVOCATION_FLAG in rest:
        at = rest.index(INVOCATION_FLAG) + 1
        executor_input = json.loads(rest[at])
        inputs = executor_input.setdefault("inputs", {})
        inputs["parameterValues"] = decide_range(inputs.get("parameterValues", {}), zone)
        rest[at] = json.dumps(executor_input)
    return zone, rest


def main(argv: list[str]) -> None:
    """Decides the night, then runs TFX's driver as `python -m` would."""
    import runpy

    zone, rest = rewritten(argv[1:])
    decided = json.loads(rest[rest.index(INVOCATION_FLAG) + 1]) if INVOCATION_FLAG in rest else {}
    chosen = decided.get("inputs", {}).get("parameterValues", {}).get(RANGE_CONFIG) or "newest"
    print(f"conveyor: ExampleGen reads range {chosen} (schedule zone {zone})", flush=True)
    sys.argv = [argv[0], *rest]
    runpy.run_module(TFX_DRIVER, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv)
