"""Model server runners: what serves the candidate during infra validation.

One interface (base.py: start, wait until running, endpoint, stop), three runners, chosen by
the spec's `push.infra_server.kind`:
- `conveyor` (the default): Conveyor's model server as a child process (local.py);
- `tensorflow_model_server`: TF Serving's binary on this machine, by its own flags (local.py);
- `kubernetes`: TF Serving's image as a Kubernetes Job, for the Kubeflow target (kubernetes.py).
"""

from __future__ import annotations

from pathlib import Path

from components.infra_validator.runners.base import (
    CONVEYOR,
    KUBERNETES,
    TENSORFLOW_MODEL_SERVER,
    ModelServerRunner,
    ServerChoice,
)


def make_runner(
    choice: ServerChoice, model_name: str, base_path: str, workdir: Path
) -> ModelServerRunner:
    """The runner `choice` names, serving `base_path` as `model_name` (local files in
    `workdir`). Raises `RunnerSetupError` when that server cannot run here."""
    if choice.kind == CONVEYOR:
        from components.infra_validator.runners.local import ConveyorRunner

        return ConveyorRunner(model_name, Path(base_path), workdir)
    if choice.kind == TENSORFLOW_MODEL_SERVER:
        from components.infra_validator.runners.local import BinaryRunner, find_binary

        return BinaryRunner(find_binary(choice.binary_path), model_name, Path(base_path), workdir)
    from components.infra_validator.runners.kubernetes import KubernetesRunner

    return KubernetesRunner.in_cluster(choice, model_name, base_path)


def serves_from_shared_storage(choice: ServerChoice) -> bool:
    """Whether the server runs elsewhere and so reads the candidate from the pipeline root's
    storage rather than this machine's disk."""
    return choice.kind == KUBERNETES
