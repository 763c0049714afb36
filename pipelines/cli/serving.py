"""`conveyor serve` and `conveyor deploy render`: the local model server on a pipeline's
pushed models, and Kubernetes manifests for serving them on a cluster.

Imports nothing heavy until a command runs: `conveyor --help` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from pipelines.cli.options import add_common_options, load, workdir_of
from pipelines.serving.model_server.process_options import (
    add_process_options,
    process_options_problem,
)

# manifests.TARGETS, repeated so that `conveyor --help` imports no protos (a test checks that
# the two agree).
DEPLOY_TARGETS = ("tf-serving", "kserve")


def register(sub) -> None:
    """Adds `serve` and `deploy render` to the `conveyor` parser."""
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

    deploy = sub.add_parser(
        "deploy",
        help="Kubernetes manifests for a pipeline's model server",
        description="Writes what a cluster needs to serve the pipeline's pushed models.",
    )
    actions = deploy.add_subparsers(dest="deploy_action", required=True)
    p = actions.add_parser(
        "render",
        help="write YAML manifests (TF Serving Deployment, Service, ConfigMap; or KServe)",
        description="tf-serving: a ConfigMap with models.config (the current version labels), "
        "monitoring.config and batching.config, a Deployment of the tensorflow/serving image "
        "and a Service; kserve: an InferenceService with a tensorflow predictor. Nothing is "
        "applied to a cluster: use `kubectl apply -f DIR`.",
    )
    p.add_argument("pipeline")
    p.add_argument("--target", required=True, choices=DEPLOY_TARGETS, help="what to render for")
    p.add_argument(
        "--output", help="folder to write (default: <workdir>/deploy/<pipeline>/<target>/)"
    )
    add_common_options(p)
    p.set_defaults(func=cmd_deploy_render)


def request_log_options(paths) -> dict | None:
    """The model server's request log from the spec's `push.request_log` (as the server's
    `RequestLogOptions`, a dict); None when the spec logs no requests."""
    logged = paths.spec.push.request_log
    if logged is None:
        return None
    return {
        "dir": str(paths.request_log_dir),
        "sampling_rate": logged.sampling_rate,
        "max_file_megabytes": logged.max_file_megabytes,
        "max_file_seconds": logged.max_file_seconds,
    }


def cmd_serve(args: argparse.Namespace) -> int:
    """`conveyor serve`: runs the server until interrupted.

    Exit code: 0 when stopped by Ctrl-C or SIGTERM; 1 (one `error:` line) for a spec error, a
    models.config TF Serving would refuse, or a port that cannot be opened.
    """
    from pipelines.core.paths import RunPaths
    from pipelines.serving.model_server.batching import BatchingOptions
    from pipelines.serving.model_server.server import ServerOptions, run_server
    from pipelines.serving_state.config_files import (
        MODELS_CONFIG,
        ServingConfigError,
        batching_parameters,
        models_config_path,
    )

    if args.poll_seconds <= 0:
        print("error: --poll-seconds must be positive", file=sys.stderr)
        return 1
    problem = process_options_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    workdir = workdir_of(args)
    spec = load(args, args.pipeline).spec
    paths = RunPaths(workdir=workdir, spec=spec)
    config_file = models_config_path(paths.serving_config_dir)
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
        busy_poll_us=args.busy_poll_us,
        # The Pusher without push.serving_urls moves labels in the same write that adds their
        # version: this server keeps such a label where it was until the version is loaded.
        version_labels="any",
        batching=batching,
        request_log=request_log_options(paths),
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
    if options.request_log:
        logged = options.request_log
        print(
            f"logging {logged['sampling_rate']:.0%} of answered requests under {logged['dir']} "
            "(push.request_log)",
            flush=True,
        )
    return run_server(options)


def cmd_deploy_render(args: argparse.Namespace) -> int:
    """`conveyor deploy render`: writes the manifests and prints each file written.

    Exit code: 0 when written; 1 when the spec, its `push.deploy` or the workdir's
    models.config cannot be used (one `error:` line naming the file or key).
    """
    from pipelines.core.paths import RunPaths
    from pipelines.serving.manifests import DeployError, default_output, write_manifests
    from pipelines.serving_state import ServingConfigError, current_entry

    workdir = workdir_of(args)
    spec = load(args, args.pipeline).spec
    paths = RunPaths(workdir=workdir, spec=spec)
    output = Path(args.output) if args.output else default_output(workdir, spec.name, args.target)
    try:
        # Both targets follow the labels: which versions serve, and the canary's share.
        current = current_entry(paths.serving_config_dir, spec.push.model_name)
        if current is None:
            print(
                f"note: no models.config for {spec.push.model_name} in "
                f"{paths.serving_config_dir}: the manifests serve by the spec's version "
                "policy, with no labels yet (render again after a push, promote or rollback)",
                file=sys.stderr,
            )
        written = write_manifests(spec, args.target, output, current)
    except (DeployError, ServingConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0
