"""`conveyor submit`: the compiled Kubeflow job created as a run now, or as the nightly recurring
run, on an open-source Kubeflow Pipelines API server, through KFP's SDK client (`kfp.Client`,
which speaks the API's v2beta1 REST calls).

The job is the file `conveyor compile` writes (`pipelines.run.kubeflow`): its `pipelineSpec`
and, when the profile names secret env, its kubernetes `platformSpec` go to KFP as the package
KFP's own compiler writes (a PipelineSpec document, then the platform spec document), with the
job's output directory as the pipeline root and its runtime parameters as the run's
(`--date D` sets ExampleGen's range to that night's span: a backfill). The
recurring run takes the spec's `schedule`: KFP's cron has a seconds field, fires in UTC and
runs one night at a time. The host is `--host` or `runtime.kubeflow.host`; a bearer token comes
only from the environment variable `runtime.kubeflow.token_env` names.

Vertex AI runs the same job through its own client; no profile targets it yet, so there is no
Vertex submission here. This module imports kfp only when it submits.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.run.kubeflow import schedule_description
from pipelines.spec.models import PipelineSpec


class SubmitError(Exception):
    """The job cannot be submitted, or the API refused it; the message says which and why."""


@dataclass(frozen=True)
class Submitted:
    """What KFP created: a run or a recurring run, in an experiment."""

    kind: str  # "run" or "recurring run"
    id: str
    display_name: str
    experiment_id: str
    link: str


def api_host(spec: PipelineSpec, host: str | None) -> str:
    """The KFP API's URL: `--host`, else `runtime.kubeflow.host`."""
    if host:
        from pydantic import ValidationError

        from pipelines.spec.models import KubeflowSpec

        try:
            host = KubeflowSpec(host=host).host
        except ValidationError as err:
            message = err.errors()[0]["msg"].removeprefix("Value error, ")
            raise SubmitError(f"--host: {message}") from None
    host = host or spec.runtime.kubeflow.host
    if not host:
        raise SubmitError(
            "no Kubeflow Pipelines API to submit to: give --host URL or set "
            "runtime.kubeflow.host in the profile"
        )
    return host.rstrip("/")


def api_token(spec: PipelineSpec, environ: Mapping[str, str] = os.environ) -> str | None:
    """The bearer token from the variable `runtime.kubeflow.token_env` names; None when it names
    none. A named variable that is unset is an error: the API would answer 401 or 403 later."""
    variable = spec.runtime.kubeflow.token_env
    if not variable:
        return None
    token = environ.get(variable)
    if not token:
        raise SubmitError(
            f"runtime.kubeflow.token_env is {variable!r}, which is unset or empty: export the "
            "KFP API's token in it"
        )
    return token


def experiment_name(spec: PipelineSpec) -> str:
    """The KFP experiment the pipeline's runs go in: the profile's, else the pipeline's name."""
    return spec.runtime.kubeflow.experiment or spec.name


def read_job(job_file: Path, spec: PipelineSpec) -> dict[str, Any]:
    """The compiled PipelineJob in `job_file`, refused when it is another pipeline's."""
    try:
        job = json.loads(Path(job_file).read_text())
        name = job["pipelineSpec"]["pipelineInfo"]["name"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SubmitError(f"{job_file} is not a job `conveyor compile` wrote: {err}") from None
    if name != spec.name:
        raise SubmitError(f"{job_file} is pipeline {name!r}'s job, not {spec.name!r}'s")
    return job


def kfp_package(job: dict[str, Any]) -> str:
    """The job as the package `kfp.compiler` writes and `kfp.Client` reads: the PipelineSpec as
    one YAML document and the platform spec, when there is one, as the next. (JSON is YAML.)"""
    documents = [job["pipelineSpec"]]
    if job.get("platformSpec"):
        documents.append(job["platformSpec"])
    return "\n---\n".join(json.dumps(document, sort_keys=True) for document in documents) + "\n"


def recurring_run_cron(spec: PipelineSpec) -> str:
    """The spec's schedule as KFP's cron (seconds first, fired in UTC). A schedule in another
    zone is refused: KFP's scheduler has no time zone, and a cron shifted to UTC would move
    with daylight saving time."""
    if spec.schedule.timezone != "UTC":
        raise SubmitError(
            f"schedule.timezone is {spec.schedule.timezone!r}, but KFP's recurring runs fire in "
            "UTC: give schedule.cron in UTC with schedule.timezone UTC for Kubeflow"
        )
    return schedule_description(spec, "")["kfp_recurring_run"]["trigger"]["cron_schedule"]["cron"]


def _client(host: str, token: str | None, namespace: str | None):
    import kfp

    options: dict[str, Any] = {"host": host, "existing_token": token}
    if namespace:
        options["namespace"] = namespace
    with warnings.catch_warnings():
        # "This client only works with Kubeflow Pipeline v2.0.0-beta.2 and later versions."
        warnings.simplefilter("ignore", FutureWarning)
        return kfp.Client(**options)


def _refusal(err: Exception, host: str) -> SubmitError:
    """One line for what the API or the connection answered."""
    import kfp_server_api

    if isinstance(err, kfp_server_api.ApiException):
        try:
            message = json.loads(err.body or "{}").get("message") or err.body
        except ValueError:
            message = err.body
        return SubmitError(f"{host} answered {err.status} {err.reason}: {message}")
    return SubmitError(f"cannot reach the Kubeflow Pipelines API at {host}: {err}")


def _existing_recurring_runs(client, experiment_id: str, display_name: str) -> list[str]:
    predicate = {"operation": "EQUALS", "key": "display_name", "stringValue": display_name}
    found = client.list_recurring_runs(
        experiment_id=experiment_id, filter=json.dumps({"predicates": [predicate]})
    )
    runs = found.recurring_runs or []
    return [run.recurring_run_id for run in runs if run.display_name == display_name]


def check_force(force: bool, schedule: bool) -> None:
    """Raises SubmitError for `--force` on a recurring run: every night would run in full."""
    if force and schedule:
        raise SubmitError(
            "--force makes one run that ignores the unchanged check; a recurring run takes no "
            "--force (every night would run in full)"
        )


def night_of(spec: PipelineSpec, date: str | None, schedule: bool) -> datetime.date | None:
    """The night `--date` names (a backfill), or None for the newest span.

    Raises:
      SubmitError: a night for a spec without dated spans, for a recurring run, or not a date.
    """
    if date is None:
        return None
    from pipelines.builder import spans

    if schedule:
        raise SubmitError("--date makes one run of that night; a recurring run takes no --date")
    if not spec.data.dated_spans:
        raise SubmitError(
            f"--date {date}: {spec.name}'s data.span_pattern has no {{YYYY}}-{{MM}}-{{DD}}: "
            "a run reads the newest span"
        )
    try:
        return spans.parse_night(date, zone=spec.schedule.timezone)
    except spans.SpanError as err:
        raise SubmitError(str(err)) from None


def submit(
    spec: PipelineSpec,
    job_file: Path,
    host: str,
    schedule: bool = False,
    environ: Mapping[str, str] = os.environ,
    now: datetime.datetime | None = None,
    night: datetime.date | None = None,
    force: bool = False,
) -> Submitted:
    """Creates a run of the compiled job now, or with `schedule` the nightly recurring run.

    Args:
      spec: the resolved spec the job was compiled from (its name, schedule, runtime.kubeflow).
      job_file: the PipelineJob JSON `conveyor compile` wrote.
      host: the KFP API's URL (`api_host`).
      schedule: create the recurring run from `spec.schedule` instead of one run. Refused when
        the experiment already holds a recurring run of that name: two would run each night.
      environ: where the token's variable is read.
      now: the time a run's name carries (default: now, UTC).
      night: the night the run reads (`night_of`): ExampleGen's runtime parameter
        (`pipelines.builder.spans.RANGE_PARAMETER`) set to its span; None: the newest span.
      force: run the night even when its inputs are unchanged since its last final outcome
        (the job's `force` parameter, `pipelines.run.kubeflow_start`).

    Raises:
      SubmitError: no token where one is named, a schedule KFP cannot keep, a job of another
        pipeline, an existing recurring run, or what the API answered instead of creating it.
    """
    import kfp_server_api
    import urllib3

    token = api_token(spec, environ)
    job = read_job(job_file, spec)
    cron = recurring_run_cron(spec) if schedule else None
    runtime_config = job.get("runtimeConfig", {})
    pipeline_root = runtime_config.get("gcsOutputDirectory")
    parameters = runtime_config.get("parameterValues") or None
    if force:
        from pipelines.core.artifact_files import FORCE_PARAMETER

        parameters = {**(parameters or {}), FORCE_PARAMETER: "true"}
    if night is not None:
        from pipelines.builder import spans

        parameters = {
            **(parameters or {}),
            spans.RANGE_PARAMETER: spans.range_config_json(spans.span_of_date(night)),
        }
    with tempfile.TemporaryDirectory(prefix="conveyor-submit-") as folder:
        package = Path(folder) / f"{spec.name}.yaml"
        package.write_text(kfp_package(job))
        try:
            # The client prints links of its own; the command prints one line.
            with contextlib.redirect_stdout(io.StringIO()):
                client = _client(host, token, spec.runtime.kubeflow.namespace)
                experiment = client.create_experiment(
                    name=experiment_name(spec), namespace=spec.runtime.kubeflow.namespace
                )
                if cron is None:
                    return _create_run(
                        client, spec, package, experiment, pipeline_root, parameters, host, now
                    )
                return _create_recurring_run(
                    client, spec, package, experiment, pipeline_root, parameters, host, cron
                )
        except (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            raise _refusal(err, host) from err


def _create_run(client, spec, package, experiment, pipeline_root, parameters, host, now):
    now = now or datetime.datetime.now(datetime.timezone.utc)
    # `<pipeline>-<UTC time>`, as a local run's id: where KFP names the job after the run, its
    # folder and its record in runtime.metadata are found by the pipeline's prefix, as
    # `conveyor runs` and `bless` look for them.
    display_name = f"{spec.name}-{now:%Y%m%dT%H%M%SZ}"
    result = client.create_run_from_pipeline_package(
        pipeline_file=str(package),
        arguments=parameters,
        run_name=display_name,
        experiment_id=experiment.experiment_id,
        pipeline_root=pipeline_root,
    )
    return Submitted(
        kind="run",
        id=result.run_id,
        display_name=display_name,
        experiment_id=experiment.experiment_id,
        link=f"{host}/#/runs/details/{result.run_id}",
    )


def _create_recurring_run(client, spec, package, experiment, pipeline_root, parameters, host, cron):
    described = schedule_description(spec, package.name)["kfp_recurring_run"]
    display_name = described["display_name"]
    existing = _existing_recurring_runs(client, experiment.experiment_id, display_name)
    if existing:
        raise SubmitError(
            f"experiment {experiment_name(spec)!r} already has the recurring run "
            f"{display_name!r} ({', '.join(existing)}): delete it in KFP first, or two would "
            "run each night"
        )
    trigger = described["trigger"]["cron_schedule"]
    created = client.create_recurring_run(
        experiment_id=experiment.experiment_id,
        job_name=display_name,
        description=described["description"],
        start_time=trigger.get("start_time"),
        cron_expression=cron,
        max_concurrency=int(described["max_concurrency"]),
        no_catchup=described["no_catchup"],
        params=parameters,
        pipeline_package_path=str(package),
        enabled=True,
        pipeline_root=pipeline_root,
    )
    return Submitted(
        kind="recurring run",
        id=created.recurring_run_id,
        display_name=display_name,
        experiment_id=experiment.experiment_id,
        link=f"{host}/#/recurringrun/details/{created.recurring_run_id}",
    )
