"""What every model server runner does, as TFX's infra validator splits it
(tfx/components/infra_validator/model_server_runners/base_runner.py): start the server, wait
until it is running, give its endpoint, stop it. A runner manages the server's process or job
and nothing else; the canary requests are the executor's (executor.py).

Also here: the choice a pipeline makes (`ServerChoice`, from the spec's `push.infra_server`),
the error every check raises (`InfraValidationError`, whose message is the verdict's reason),
and the wait for the model to be AVAILABLE that servers without a ready file need.
"""

from __future__ import annotations

import abc
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

CONVEYOR = "conveyor"
TENSORFLOW_MODEL_SERVER = "tensorflow_model_server"
KUBERNETES = "kubernetes"
KINDS = (CONVEYOR, TENSORFLOW_MODEL_SERVER, KUBERNETES)

POLL_SECONDS = 0.1
STATUS_TIMEOUT_SECONDS = 5.0


class InfraValidationError(RuntimeError):
    """A check the candidate failed; the message is the verdict's reason."""


class RunnerSetupError(RuntimeError):
    """The chosen server cannot be started here at all (no binary, no cluster): a fault of the
    set-up, not of the candidate, so the execution fails instead of refusing the model."""


@dataclass(frozen=True)
class ServerChoice:
    """The server a pipeline validates with: the spec's `push.infra_server`, plus, for
    `kubernetes`, the image and resources of `push.deploy` (what `conveyor deploy render`
    serves with). Travels to the executor as JSON (an execution parameter)."""

    kind: str = CONVEYOR
    binary_path: str | None = None
    namespace: str | None = None
    image: str | None = None
    cpu: float | None = None
    memory: str | None = None
    gpu: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise RunnerSetupError(
                f"unknown infra validation server {self.kind!r}; known: {', '.join(KINDS)}"
            )

    def to_json(self) -> str:
        """The choice as the execution parameter carries it (only what is set)."""
        values = {k: v for k, v in asdict(self).items() if v not in (None, 0)}
        return json.dumps(values, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> ServerChoice:
        """The choice from its execution parameter; none given (a pipeline built before the
        choice existed): Conveyor's server."""
        return cls(**json.loads(text)) if text else cls()


class ModelServerRunner(abc.ABC):
    """One model server for one validation: `start`, `wait_until_running`, `get_endpoint`,
    `stop` (TFX's Start, WaitUntilRunning, GetEndpoint, Stop).

    `stop` is always called once `start` was, even when `start` or the wait failed, and never
    raises: it runs in the executor's `finally`.
    """

    kind: str = ""

    @abc.abstractmethod
    def describe(self) -> str:
        """Which server this is, in words, for the InfraBlessing and the run report."""

    @abc.abstractmethod
    def start(self) -> None:
        """Starts the server without waiting for it."""

    @abc.abstractmethod
    def wait_until_running(self, timeout_seconds: float) -> None:
        """Returns once the server answers with the model loaded, within `timeout_seconds` of
        `start`; raises `InfraValidationError` (with what the server said) when it ends or
        does not get there in time."""

    @abc.abstractmethod
    def get_endpoint(self) -> str:
        """The server's REST base URL (`http://host:port`), once it is running."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stops the server and removes what `start` made."""

    @property
    def pid(self) -> int | None:
        """The server's local process id, for the findings; None where it is not local."""
        return None


def wait_until_available(
    endpoint: str,
    model_name: str,
    deadline: float,
    still_starting: Callable[[], None],
    late: Callable[[], InfraValidationError],
) -> None:
    """Polls `GET /v1/models/M` at `endpoint` until some version is AVAILABLE (what TF Serving
    reports once it has loaded the model), by `deadline` (time.monotonic()).

    `still_starting` raises when the server has ended meanwhile; `late` is the error when the
    deadline passes. Connection errors are waited out: the port opens only once the server
    has started.
    """
    import httpx

    url = f"{endpoint}/v1/models/{model_name}"
    with httpx.Client(timeout=STATUS_TIMEOUT_SECONDS) as client:
        while True:
            still_starting()
            try:
                answer = client.get(url)
                if answer.status_code == 200 and _available(answer.json()):
                    return
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise late()
            time.sleep(POLL_SECONDS)


def _available(status: Any) -> bool:
    versions = status.get("model_version_status") if isinstance(status, dict) else None
    return any(isinstance(v, dict) and v.get("state") == "AVAILABLE" for v in versions or [])
