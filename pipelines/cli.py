"""`conveyor`: validate, list, prepare data for, run and inspect pipelines.

`--help`, `list`, `validate` and `runs` never import TensorFlow or TFX (about 20 s here); only
`run` and `data` pay for the libraries they use, and only when they are called.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pipelines import config
from pipelines.config import SpecError

EXIT_BLOCKED = 2  # a gate stopped the run: the data or the model was not good enough
EXIT_FAILED = 1


def _workdir(args: argparse.Namespace) -> Path:
    return Path(args.workdir or os.environ.get("CONVEYOR_WORKDIR") or ".conveyor").resolve()


def _load(args: argparse.Namespace, name: str) -> config.LoadedSpec:
    return config.load_spec(name, env=args.env, overrides=args.set, workdir=_workdir(args))


def cmd_list(args: argparse.Namespace) -> int:
    print("pipelines:")
    for name in config.list_pipelines():
        spec = config.load_spec(name, env="local").spec
        print(f"  {name:<12} {spec.description}")
    print("profiles: " + ", ".join(config.list_profiles()))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    names = args.pipelines or config.list_pipelines()
    envs = [args.env] if args.env else config.list_profiles()
    failures = 0
    for name in names:
        for env in envs:
            try:
                loaded = config.load_spec(name, env=env, overrides=args.set)
            except SpecError as err:
                failures += 1
                print(f"FAIL {name} [{env}]: {err}", file=sys.stderr)
                continue
            print(f"ok   {name} [{env}]: {len(loaded.spec.components)} components")
            if args.print:
                import yaml

                print(yaml.safe_dump(loaded.spec.to_yaml_dict(), sort_keys=False))
    return 1 if failures else 0


def cmd_data(args: argparse.Namespace) -> int:
    from pipelines.datasets import DataPreparationError, prepare
    from pipelines.registry import RunPaths

    loaded = _load(args, args.pipeline)
    paths = RunPaths(workdir=_workdir(args), spec=loaded.spec)
    try:
        written = prepare(loaded.spec, paths.input_dir)
    except DataPreparationError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {written}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from pipelines.registry import RunPaths

    loaded = _load(args, args.pipeline)
    workdir = _workdir(args)
    paths = RunPaths(workdir=workdir, spec=loaded.spec)
    if config.csv_columns(paths.input_dir) is None:
        print(
            f"error: no CSV files in {paths.input_dir}. Prepare them with "
            f"`conveyor data {loaded.spec.name} --workdir {workdir}` or put your own there.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    from pipelines import fingerprint

    previous = None if args.force else fingerprint.unchanged_since(paths)
    if previous is not None:
        served = previous["served_versions"]
        print(
            f"UNCHANGED: same data, spec, schema and code as run {previous['run_id']}; nothing "
            f"executed, nothing pushed (serving {'version ' + served[-1] if served else 'nothing'}"
            "). --force runs the pipeline anyway (every component would be a cache hit)."
        )
        return 0
    from pipelines.runners import local

    result = local.run(loaded, workdir)
    print(f"{result.outcome.upper()}: {result.message}")
    print(f"run record: {result.run_dir}")
    if result.outcome == "blocked":
        return EXIT_BLOCKED
    return 0 if result.ok else EXIT_FAILED


def cmd_runs(args: argparse.Namespace) -> int:
    from pipelines.metadata import list_runs, open_store
    from pipelines.registry import RunPaths

    loaded = _load(args, args.pipeline)
    paths = RunPaths(workdir=_workdir(args), spec=loaded.spec)
    store = open_store(loaded.spec, paths.metadata_path)
    runs = list_runs(store, loaded.spec.name, args.limit) if store else []
    if not runs:
        print(f"no runs of {loaded.spec.name} recorded in {paths.metadata_path}")
        return 0
    print(f"{'run id':<40} {'started (UTC)':<20} {'state':<10} pushed")
    for run in runs:
        started = datetime.datetime.fromtimestamp(
            run.started_ms / 1000, tz=datetime.timezone.utc
        ).strftime("%Y-%m-%d %H:%M:%S")
        pushed = f"version {run.pushed_version}" if run.pushed_version else "-"
        print(f"{run.run_id:<40} {started:<20} {run.state:<10} {pushed}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="conveyor",
        description="Declarative TFX pipelines: validate, run and inspect them.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(
        p: argparse.ArgumentParser, workdir: bool = True, env_default: str | None = "local"
    ) -> None:
        p.add_argument("--env", default=env_default, help="environment profile in configs/")
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY.PATH=VALUE",
            help="override a spec value (YAML); repeatable, applied last",
        )
        if workdir:
            p.add_argument(
                "--workdir",
                help="where data, pipeline outputs, metadata and serving models live "
                "(default: $CONVEYOR_WORKDIR or ./.conveyor)",
            )

    p = sub.add_parser("list", help="list pipelines and environment profiles")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("validate", help="load and validate specs (all pipelines x profiles)")
    p.add_argument("pipelines", nargs="*", help="pipeline names or spec paths")
    common(p, workdir=False, env_default=None)  # no --env: every profile
    p.add_argument("--print", action="store_true", help="print the resolved spec")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("data", help="write a pipeline's input CSV from packaged data")
    p.add_argument("pipeline")
    common(p)
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("run", help="run a pipeline locally (LocalDagRunner)")
    p.add_argument("pipeline")
    p.add_argument(
        "--force",
        action="store_true",
        help="run through TFX even when nothing changed since the last successful run",
    )
    common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("runs", help="recent runs from the metadata store")
    p.add_argument("pipeline")
    p.add_argument("--limit", type=int, default=10)
    common(p)
    p.set_defaults(func=cmd_runs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
