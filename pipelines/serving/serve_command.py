"""`conveyor serve`: the local model server on a pipeline's pushed models.

Imports nothing heavy until the command runs: `conveyor --help` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from pipelines.serving.model_server.process_options import (
    add_process_options,
    process_options_problem,
)


def register(sub, add_common_options) -> None:
    """Adds `conveyor serve` to the `conveyor` parser."""
    p = sub.add_parser(
        "serve",
        help="serve the pipeline's pushed models over TF Serving's REST API (local server)",
        description="Serves <workdir>/<push.base_dir>/models.config (its versions and labels, "
        "re-read every poll), or the model base path when no models.config was written, with "
        "TF Serving's REST API: /v1/models/NAME[/versions/N|/labels/L][:predict|:classify|"
        ":regress|/metadata], and Prometheus metrics on push.monitoring_path; with "
        "push.batching, concurrent requests are batched as TF Serving's --enable_batching "
        "batches them. Stops on Ctrl-C.",
    )
    p.add_argument("pipeline")
    add_common_options(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8501, help="port to listen on (0: any free port)")
    p.add_argument(
        "--poll-seconds",
        type=float,
        default=1.0,
        help="how often to look for new versions and config changes (default 1)",
    )
    p.add_argument(
        "--ready-file",
        help='once every model has a warmed version, write {"port": N, "pid": PID} here',
    )
    add_process_options(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """`conveyor serve`: runs the server until interrupted.

    Exit code: 0 when stopped by Ctrl-C or SIGTERM; 1 (one `error:` line) for a spec error, a
    models.config TF Serving would refuse, or a port that cannot be opened.
    """
    from pipelines.core.paths import RunPaths, default_workdir
    from pipelines.serving.config import MODELS_CONFIG, ServingConfigError, batching_parameters
    from pipelines.serving.model_server.batching import BatchingOptions
    from pipelines.serving.model_server.server import ServerOptions, run_server
    from pipelines.spec.loading import load_spec

    if args.poll_seconds <= 0:
        print("error: --poll-seconds must be positive", file=sys.stderr)
        return 1
    problem = process_options_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    workdir = default_workdir(args.workdir)
    spec = load_spec(args.pipeline, env=args.env, overrides=args.set, workdir=workdir).spec
    paths = RunPaths(workdir=workdir, spec=spec)
    config_file = paths.serving_config_dir / MODELS_CONFIG
    batching = None
    if spec.push.batching is not None:
        # The parameters the Pusher writes to batching.config for TF Serving, from the spec.
        try:
            batching = dataclasses.asdict(
                BatchingOptions.from_message(
                    batching_parameters(spec.push.batching), f"{args.pipeline}: push.batching"
                )
            )
        except ServingConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    common = dict(
        host=args.host,
        port=args.port,
        poll_seconds=args.poll_seconds,
        ready_file=args.ready_file,
        monitoring_path=spec.push.monitoring_path,
        workers=args.workers,
        intra_op_threads=args.intra_op_threads,
        inter_op_threads=args.inter_op_threads,
        # The Pusher without push.serving_urls moves labels in the same write that adds their
        # version: this server keeps such a label where it was until the version is loaded.
        version_labels="any",
        batching=batching,
    )
    if config_file.is_file():
        print(f"serving {config_file} (re-read every {args.poll_seconds:g} s)", flush=True)
        options = ServerOptions(model_config_file=str(config_file), **common)
    else:
        print(
            f"serving {paths.serving_dir} as {spec.push.model_name} (no {MODELS_CONFIG}: the "
            "latest version, no labels)",
            flush=True,
        )
        options = ServerOptions(
            model_name=spec.push.model_name, model_base_path=str(paths.serving_dir), **common
        )
    return run_server(options)
