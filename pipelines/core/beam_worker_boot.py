"""Starts one Beam Python SDK worker as Beam's container boot does, without a container: the
`--container_executable` of Beam's worker pool (`apache_beam.runners.worker.worker_pool_main`).

Beam's pool started without one runs each worker as a bare `SdkHarness`, which never reads the
pipeline's options and so never imports `--beam_plugins`. Beam's SDK container runs its boot
program instead, which asks the runner's provision service for the job's options and starts
`sdk_worker_main` with them; this module does the same, in the pool's own Python environment,
and retrieves nothing: no staged packages (the pool's environment is the workers') and no pickled
main session (Conveyor's stages define nothing in `__main__`). Otherwise a worker started this
way is what Dataflow, Flink and Spark start in Beam's container: options, plugins and all.

    worker_pool_main --service_port=50000 --container_executable=WORKER_BOOT

where WORKER_BOOT is an executable script that runs
`exec PYTHON -m pipelines.core.beam_worker_boot "$@"` (the pool passes the endpoints as flags).
"""

from __future__ import annotations

import argparse
import os
import sys


def _environment(args: argparse.Namespace) -> dict[str, str]:
    """The variables `sdk_worker_main` reads, from the runner's provision service."""
    import grpc
    from apache_beam.portability.api import (
        beam_provision_api_pb2,
        beam_provision_api_pb2_grpc,
        endpoints_pb2,
    )
    from google.protobuf import json_format, text_format

    with grpc.insecure_channel(args.provision_endpoint) as channel:
        info = (
            beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
            .GetProvisionInfo(
                beam_provision_api_pb2.GetProvisionInfoRequest(),
                metadata=[("worker_id", args.id)],
            )
            .info
        )

    def descriptor(url: str) -> str:
        return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))

    control = info.control_endpoint.url or args.control_endpoint
    logging_url = info.logging_endpoint.url or args.logging_endpoint
    return {
        "WORKER_ID": args.id,
        "PIPELINE_OPTIONS": json_format.MessageToJson(info.pipeline_options),
        "CONTROL_API_SERVICE_DESCRIPTOR": descriptor(control),
        "LOGGING_API_SERVICE_DESCRIPTOR": descriptor(logging_url),
        "RUNNER_CAPABILITIES": " ".join(info.runner_capabilities),
    }


def main(argv: list[str] | None = None) -> None:
    """Reads the flags Beam's worker pool passes a container's boot, asks the provision service
    for the job's options and becomes `sdk_worker_main` with them (the process is replaced)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("id", "provision_endpoint", "control_endpoint", "logging_endpoint"):
        parser.add_argument(f"--{flag}", required=True)
    parser.add_argument("--artifact_endpoint")  # staged packages: nothing is installed here
    args, _ = parser.parse_known_args(argv)
    environ = {**os.environ, **_environment(args)}
    worker = [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"]
    os.execve(sys.executable, worker, environ)


if __name__ == "__main__":
    main()
