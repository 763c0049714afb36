"""Checks a profile must pass before anything is compiled, built or scheduled: the ones that
cross spec sections, or need the environment (a reachable MySQL store, Beam's option names).

The pydantic models (`pipelines.spec.models`) check each section on its own; these run after
them. Only `check_beam_options` imports Beam, and only when compiling or running.
"""

from __future__ import annotations

import socket
from pathlib import Path

from pipelines.spec.loading import (
    LoadedSpec,
    SpecError,
    current_project,
    profile_files,
    profile_label,
)
from pipelines.spec.models import (
    JOB_SERVICE_RUNNERS,
    MetadataKind,
    Orchestrator,
    PipelineSpec,
    Strategy,
    TrainingLauncher,
    check_beam_args,
    missing_image,
    parse_beam_args,
)


class ProfileError(SpecError):
    """A profile cannot be compiled or run as asked; the message names the key and why."""


def profile_file(loaded: LoadedSpec) -> str:
    """The profile's top layer, for messages: the project's `configs/<env>.yaml` when it has
    one (where the team changes it), else Conveyor's `pipelines/profiles/<env>.yaml`."""
    project = current_project()
    files = profile_files(loaded.env, project)
    return profile_label(files[-1], project) if files else ""


def target_of(loaded: LoadedSpec, target: str | None = None) -> Orchestrator:
    """The orchestrator `compile` writes for: `--target`, else the profile's."""
    if target is not None:
        try:
            return Orchestrator(target)
        except ValueError:
            known = ", ".join(o.value for o in Orchestrator if o is not Orchestrator.LOCAL)
            message = f"--target {target!r}: unknown orchestrator (known: {known})."
            raise ProfileError(message) from None
    return loaded.spec.runtime.orchestrator


def check_profile(loaded: LoadedSpec, target: Orchestrator | None = None) -> None:
    """Cheap checks across spec sections that the pydantic models cannot make on their own.

    Raises:
      ProfileError: naming the profile file and key.
    """
    spec = loaded.spec
    where = profile_file(loaded)
    prefix = f"{where}: " if where else ""
    target = target or spec.runtime.orchestrator
    nodes = [c.id for c in spec.components]
    for key in spec.runtime.container.resources:
        if key != "default" and key not in nodes:
            raise ProfileError(
                f"{prefix}runtime.container.resources.{key}: no node {key!r} in components "
                f"(nodes: {', '.join(nodes)}; `default` applies to every node)."
            )
    problem = missing_image(spec.runtime, target)
    if problem:
        raise ProfileError(f"{prefix}runtime.container.image: {problem}.")
    if target is Orchestrator.AIRFLOW and spec.schedule.start_date is None:
        raise ProfileError(
            f"{prefix}schedule.start_date: Airflow needs a start date for the nightly DAG."
        )
    check_training_launcher(spec, target, prefix)
    if target is Orchestrator.KUBEFLOW:
        check_task_environment(loaded)
    textfile_dir = spec.runtime.metrics.textfile_dir
    if target is Orchestrator.KUBEFLOW and textfile_dir and Path(textfile_dir).is_absolute():
        # The exit handler's pod is gone once it has written: only the workdir is shared.
        raise ProfileError(
            f"{prefix}runtime.metrics.textfile_dir: {textfile_dir} is a folder inside the "
            "Kubeflow exit handler's pod, which nothing reads; give a folder relative to the "
            "workdir (the storage every task sees), or use runtime.metrics.pushgateway_url_env."
        )


def task_variables(spec: PipelineSpec) -> dict[str, str]:
    """The environment variables Conveyor's tasks read on Kubeflow, by the key that names each
    (the exit handler's webhook and Pushgateway URL, and the password of a MySQL store, where
    it records the run's push); unset keys are left out."""
    runtime = spec.runtime
    named = {
        "runtime.alert_webhook_env": runtime.alert_webhook_env,
        "runtime.metrics.pushgateway_url_env": runtime.metrics.pushgateway_url_env,
    }
    if runtime.metadata.kind.value == "mysql":
        named["runtime.metadata.password_env"] = runtime.metadata.password_env
    return {key: variable for key, variable in named.items() if variable}


def check_task_environment(loaded: LoadedSpec) -> None:
    """Refuses a profile whose tasks would read a variable nothing sets: in a Kubeflow pod only
    `runtime.container.secret_env` sets them, and a missing webhook would be a silent alert.

    Raises:
      ProfileError: naming the key, the variable and the profile file to add it to.
    """
    secret_env = loaded.spec.runtime.container.secret_env
    for key, variable in task_variables(loaded.spec).items():
        if variable not in secret_env:
            raise ProfileError(
                f"{profile_file(loaded)}: {key} is {variable!r}, which no Kubeflow task has: "
                f"name the Kubernetes secret that holds it in runtime.container.secret_env "
                f"({variable}: {{secret: NAME, key: KEY}})."
            )


def check_training_launcher(spec: PipelineSpec, target: Orchestrator, prefix: str = "") -> None:
    """The trainer's launcher fits the orchestrator and the distribution: a cluster job only
    from a Kubeflow task, its replicas training together (multi_worker), and multi_worker on
    Kubeflow only through a cluster job (one pod alone has no TF_CONFIG and would fail).

    Raises:
      ProfileError: naming the key to change.
    """
    launcher = spec.runtime.training.launcher
    multi_worker = spec.trainer.distribution is Strategy.MULTI_WORKER
    if launcher is not TrainingLauncher.LOCAL and target is not Orchestrator.KUBEFLOW:
        raise ProfileError(
            f"{prefix}runtime.training.launcher: {launcher.value!r} launches the trainer from a "
            f"Kubeflow task, and this profile runs on {target.value}; set it to 'local' or "
            "use a kubeflow profile."
        )
    if launcher is not TrainingLauncher.LOCAL and not multi_worker:
        raise ProfileError(
            f"{prefix}runtime.training.launcher: {launcher.value!r} starts a chief and "
            f"{spec.runtime.training.workers} worker(s), which train together only with "
            f"trainer.distribution 'multi_worker' (it is {spec.trainer.distribution.value!r})."
        )
    if multi_worker and target is Orchestrator.KUBEFLOW and launcher is TrainingLauncher.LOCAL:
        raise ProfileError(
            f"{prefix}runtime.training.launcher: trainer.distribution 'multi_worker' on Kubeflow "
            "needs the workers launched: set it to 'tfjob' (Kubeflow's Training Operator) or "
            "'vertex' (a Vertex AI custom job); the Trainer's pod alone has no TF_CONFIG."
        )


def check_beam_options(spec: PipelineSpec) -> None:
    """The Beam arguments are well formed for their runner (the spec's own check) and every one
    is an option Beam knows (Beam ignores misspelt ones with a warning)."""
    import warnings

    try:
        check_beam_args(spec.runtime.beam_args)
    except ValueError as err:
        raise ProfileError(f"runtime.beam_args: {err}") from None

    with warnings.catch_warnings():  # google-api-core's notices about Python 3.10
        warnings.simplefilter("ignore", FutureWarning)
        from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(list(spec.runtime.beam_args))
    known = options.get_all_options(retain_unknown_options=False)
    unknown = sorted(set(options.get_all_options(retain_unknown_options=True)) - set(known))
    if unknown:
        raise ProfileError(
            f"runtime.beam_args: Beam does not know {', '.join('--' + u for u in unknown)}."
        )


def check_metadata_reachable(spec: PipelineSpec, timeout: float = 3.0) -> None:
    """A MySQL metadata store answers on its host and port, and its password is in the
    environment; a SQLite one needs nothing."""
    metadata = spec.runtime.metadata
    if metadata.kind is not MetadataKind.MYSQL:
        return
    from pipelines.core.metadata import MetadataConfigError, metadata_password

    try:
        metadata_password(spec)
    except MetadataConfigError as err:
        raise ProfileError(str(err)) from None
    try:
        with socket.create_connection((str(metadata.host), int(metadata.port)), timeout=timeout):
            pass
    except OSError as err:
        raise ProfileError(
            f"runtime.metadata: cannot reach the MySQL metadata database at "
            f"{metadata.host}:{metadata.port} ({err.strerror or err}); start it or fix "
            "runtime.metadata.host/port."
        ) from None


def check_job_service_reachable(spec: PipelineSpec, timeout: float = 5.0) -> None:
    """The Beam job service a portable runner's `--job_endpoint` names answers, before a run
    starts: the run waits a day on its Beam stages (`models.runner_beam_args`), so an endpoint
    nobody listens on must fail here, not hang there."""
    if spec.runtime.beam_runner not in JOB_SERVICE_RUNNERS:
        return
    endpoints = parse_beam_args(spec.runtime.beam_args).get("job_endpoint")
    if not endpoints:  # Flink and Spark start their own job service
        return
    endpoint = endpoints[-1]
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout):
            pass
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise ProfileError(
            f"runtime.beam_args: --job_endpoint={endpoint}: no Beam job service answers there "
            f"({reason}); start it (docs/data-at-scale.md) or give the right HOST:PORT."
        ) from None
