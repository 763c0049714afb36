"""`python -m pipelines.serving.model_server`: serve SavedModels over TF Serving's REST API.

The flags mirror `tensorflow_model_server`'s (`--model_name`, `--model_base_path`,
`--model_config_file`, `--rest_api_port`, `--file_system_poll_wait_seconds`) in this project's
spelling; see docs/serving.md ("Local model server"). TF Serving's own spelling of the first four
is accepted too, so the command line the infra validator gives `tensorflow_model_server`
(`--port=G --rest_api_port=R --model_name=M --model_base_path=P`) starts this server unchanged:
with `--rest_api_port`, `--port` is TF Serving's gRPC port, which this server does not open.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pipelines.serving.model_server.process_options import (
    add_process_options,
    process_options_problem,
)


def build_parser() -> argparse.ArgumentParser:
    """The server's command line."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.serving.model_server",
        description="Serve SavedModel base paths over TF Serving's REST API (no gRPC).",
    )
    parser.add_argument("--model-name", "--model_name", help="the model's name in REST paths")
    parser.add_argument(
        "--model-base-path",
        "--model_base_path",
        help="the folder holding the model's numbered versions",
    )
    parser.add_argument(
        "--model-config-file",
        "--model_config_file",
        help="a models.config (TF Serving's ModelServerConfig, text format), re-read every poll: "
        "models, version policies and labels",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port",
        type=int,
        default=8501,
        help="port to listen on (0: any free port); with --rest_api_port, TF Serving's gRPC "
        "port, not opened",
    )
    parser.add_argument(
        "--rest_api_port",
        "--rest-api-port",
        type=int,
        dest="rest_api_port",
        help="as TF Serving's flag: the REST port; given it, --port is TF Serving's gRPC port, "
        "which this server does not open (so tensorflow_model_server's command line runs here)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=1.0,
        help="how often to look for new or removed versions and config changes",
    )
    parser.add_argument(
        "--ready-file",
        help='once every model has a warmed version, write {"port": N, "pid": PID} here',
    )
    parser.add_argument(
        "--monitoring-path",
        default="/monitoring/prometheus/metrics",
        help="path of the Prometheus metrics",
    )
    labels = parser.add_mutually_exclusive_group()
    labels.add_argument(
        "--allow-version-labels-for-unavailable-models",
        action="store_const",
        dest="version_labels",
        const="unused",
        help="as TF Serving's flag: a label not assigned yet may name a version not loaded yet "
        "(a label that moves must still name a loaded one)",
    )
    labels.add_argument(
        "--allow-label-moves-to-unavailable-versions",
        action="store_const",
        dest="version_labels",
        const="any",
        help="any label may name a version not loaded yet; it moves once that version is "
        "loaded (what `conveyor serve` uses; TF Serving has no such flag)",
    )
    parser.set_defaults(version_labels="available")
    parser.add_argument(
        "--enable-batching",
        "--enable_batching",
        action="store_true",
        help="as TF Serving's flag: merge concurrent requests to the same signature into one "
        "call (docs/serving.md, Server-side batching)",
    )
    parser.add_argument(
        "--batching-parameters-file",
        "--batching_parameters_file",
        help="as TF Serving's flag: the batching parameters (BatchingParameters, text proto); "
        "without it, TF Serving's defaults",
    )
    logged = parser.add_argument_group(
        "request log (docs/serving.md, Request log; TF Serving sets it in models.config, which "
        "open-source TF Serving refuses)"
    )
    logged.add_argument(
        "--request-log-dir",
        help="log a sampled share of answered requests as PredictionLog TFRecords under "
        "DIR/<model>/",
    )
    logged.add_argument(
        "--request-log-sampling-rate", type=float, default=1.0, help="share logged (default 1)"
    )
    logged.add_argument(
        "--request-log-max-megabytes",
        type=float,
        default=64.0,
        help="start a new file past this size (default 64)",
    )
    logged.add_argument(
        "--request-log-max-seconds",
        type=float,
        default=3600.0,
        help="start a new file once one is this old (default 3600)",
    )
    add_process_options(parser)
    # How a multi-worker server starts each worker: its options as JSON (internal).
    parser.add_argument("--worker-options", help=argparse.SUPPRESS)
    return parser


def options_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """The parsed command line as ServerOptions; a wrong combination is a usage error."""
    from pipelines.serving.model_server.server import ServerOptions

    if args.worker_options:
        return ServerOptions(**json.loads(args.worker_options))
    single = args.model_name or args.model_base_path
    if args.model_config_file and single:
        parser.error("give --model-config-file, or --model-name with --model-base-path, not both")
    if not args.model_config_file and not (args.model_name and args.model_base_path):
        parser.error("give --model-name with --model-base-path, or --model-config-file")
    if args.poll_seconds <= 0:
        parser.error("--poll-seconds must be positive")
    if args.rest_api_port is not None and args.rest_api_port <= 0:
        # TF Serving's 0 turns its REST API off; this server has nothing else to serve.
        parser.error("--rest_api_port must be a port: this server serves only the REST API")
    problem = process_options_problem(args)
    if problem:
        parser.error(problem)
    if not args.monitoring_path.startswith("/"):
        parser.error("--monitoring-path must start with /")
    if not 0 < args.request_log_sampling_rate <= 1:
        parser.error("--request-log-sampling-rate must be in (0, 1]")
    if args.request_log_max_megabytes <= 0 or args.request_log_max_seconds <= 0:
        parser.error("--request-log-max-megabytes and --request-log-max-seconds must be positive")
    if args.batching_parameters_file and not args.enable_batching:
        # TF Serving ignores the file without the flag; saying so beats a silent no-op.
        parser.error("--batching-parameters-file needs --enable-batching")
    return ServerOptions(
        model_name=args.model_name,
        model_base_path=args.model_base_path,
        model_config_file=args.model_config_file,
        host=args.host,
        port=args.port if args.rest_api_port is None else args.rest_api_port,
        poll_seconds=args.poll_seconds,
        ready_file=args.ready_file,
        monitoring_path=args.monitoring_path,
        version_labels=args.version_labels,
        workers=args.workers,
        intra_op_threads=args.intra_op_threads,
        inter_op_threads=args.inter_op_threads,
        busy_poll_us=args.busy_poll_us,
        batching=batching_from_args(args),
        request_log=request_log_from_args(args),
    )


def request_log_from_args(args: argparse.Namespace) -> dict | None:
    """The request log's options (`dataclasses.asdict` of RequestLogOptions) the flags ask
    for; None without `--request-log-dir`."""
    if not args.request_log_dir:
        return None
    return {
        "dir": args.request_log_dir,
        "sampling_rate": args.request_log_sampling_rate,
        "max_file_megabytes": args.request_log_max_megabytes,
        "max_file_seconds": args.request_log_max_seconds,
    }


def batching_from_args(args: argparse.Namespace) -> dict | None:
    """The batching options (`dataclasses.asdict` of BatchingOptions) the flags ask for; None
    without `--enable-batching`. A parameters file TF Serving would refuse raises
    ServingConfigError naming it."""
    if not args.enable_batching:
        return None
    import dataclasses

    from pipelines.serving.model_server.batching import BatchingOptions

    if args.batching_parameters_file:
        options = BatchingOptions.from_file(args.batching_parameters_file)
    else:
        options = BatchingOptions()
    return dataclasses.asdict(options)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the server; returns 0 when stopped by a signal, 1 for a config it cannot serve."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from pipelines.serving_state.config_files import ServingConfigError

    try:
        options = options_from_args(args, parser)
    except ServingConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    from pipelines.serving.model_server.server import run_server

    return run_server(options)


if __name__ == "__main__":
    sys.exit(main())
