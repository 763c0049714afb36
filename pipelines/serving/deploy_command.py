"""`conveyor deploy render`: Kubernetes manifests for a pipeline's model server.

Imports nothing heavy: rendering reads the spec and the workdir's models.config and writes YAML.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# manifests.TARGETS, repeated so that `conveyor --help` imports no protos (a test checks that
# the two agree).
TARGETS = ("tf-serving", "kserve")


def register(sub, add_common_options) -> None:
    """Adds `conveyor deploy render` to the `conveyor` parser."""
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
    p.add_argument("--target", required=True, choices=TARGETS, help="what to render for")
    p.add_argument(
        "--output", help="folder to write (default: <workdir>/deploy/<pipeline>/<target>/)"
    )
    add_common_options(p)
    p.set_defaults(func=cmd_deploy_render)


def cmd_deploy_render(args: argparse.Namespace) -> int:
    """`conveyor deploy render`: writes the manifests and prints each file written.

    Exit code: 0 when written; 1 when the spec, its `push.deploy` or the workdir's
    models.config cannot be used (one `error:` line naming the file or key).
    """
    from pipelines.core.paths import RunPaths, default_workdir
    from pipelines.serving.config import ServingConfigError
    from pipelines.serving.manifests import (
        DeployError,
        current_model,
        default_output,
        write_manifests,
    )
    from pipelines.spec.loading import load_spec

    workdir = default_workdir(args.workdir)
    spec = load_spec(args.pipeline, env=args.env, overrides=args.set, workdir=workdir).spec
    paths = RunPaths(workdir=workdir, spec=spec)
    output = Path(args.output) if args.output else default_output(workdir, spec.name, args.target)
    try:
        current = None
        if args.target == "tf-serving":
            current = current_model(paths.serving_config_dir, spec.push.model_name)
            if current is None:
                print(
                    f"note: no models.config for {spec.push.model_name} in "
                    f"{paths.serving_config_dir}: the ConfigMap serves by the spec's version "
                    "policy, with no labels yet (render again after a push)",
                    file=sys.stderr,
                )
        written = write_manifests(spec, args.target, output, current)
    except (DeployError, ServingConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0
