"""`conveyor models`, `conveyor promote` and `conveyor rollback`: the served versions of a
pipeline's model and its version labels (the rules are in pipelines/ops/labels.py).

Each handler imports what it needs when it runs: `conveyor --help` and `conveyor models` never
import TensorFlow or TFX.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.core.outcome import EXIT_FAILED


def register(sub, add_common_options) -> None:
    """Adds `models`, `promote` and `rollback` to the `conveyor` parser."""
    p = sub.add_parser(
        "models",
        help="every version of a pipeline's model on disk: labels, run, spans, metrics",
        description="One row per version folder under the model's base path (newest first): "
        "the labels models.config gives it, whether ML Metadata recorded its push, the run "
        "that pushed it, the spans it learned from, its final validation metrics and when it "
        "was pushed.",
    )
    p.add_argument("pipeline")
    add_common_options(p)
    p.set_defaults(func=cmd_models)

    p = sub.add_parser(
        "promote",
        help="point a version label (stable, canary) at a version",
        description="Moves one label in models.config (one atomic replace, under the "
        "pipeline's lock; two with push.serving_urls, waiting for the model servers to load "
        "the version) and records the move in ML Metadata. Promoting to stable ends the "
        "hold a `conveyor rollback` set.",
    )
    p.add_argument("pipeline")
    p.add_argument("--version", type=int, required=True, help="the version to label")
    p.add_argument("--label", required=True, help="stable or canary (one of push.labels)")
    _add_who_and_why(p)
    add_common_options(p)
    p.set_defaults(func=cmd_promote)

    p = sub.add_parser(
        "rollback",
        help="serve an earlier version again (every label moves to it)",
        description="Moves every label to --to (default: the version stable pointed to "
        "before, else the newest recorded version below the served one) and, with "
        "push.after_rollback: canary, holds stable there: later pushes get only canary until "
        "`conveyor promote --label stable`. Under version_policy latest the newer versions "
        "are renamed out of the server's sight instead.",
    )
    p.add_argument("pipeline")
    p.add_argument("--to", type=int, help="the version to serve")
    _add_who_and_why(p)
    add_common_options(p)
    p.set_defaults(func=cmd_rollback)


def _add_who_and_why(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reason", default="", help="why (recorded in ML Metadata)")
    p.add_argument("--by", help="who (default: the user name)")


def _paths(args: argparse.Namespace):
    from pipelines.core.paths import RunPaths, default_workdir
    from pipelines.spec.loading import load_spec

    workdir = default_workdir(args.workdir)
    loaded = load_spec(args.pipeline, env=args.env, overrides=args.set, workdir=workdir)
    return RunPaths(workdir=workdir, spec=loaded.spec)


def cmd_models(args: argparse.Namespace) -> int:
    """`conveyor models`: one table of every version folder of the pipeline's model.

    Exit code: 0 (also with no versions); 1 when models.config cannot be read.
    """
    from pipelines.ops import labels
    from pipelines.serving.config import MODELS_CONFIG

    paths = _paths(args)
    push = paths.spec.push
    config_file = paths.serving_config_dir / MODELS_CONFIG
    rows = labels.version_rows(paths)
    if not rows:
        print(f"no versions of {push.model_name} in {paths.serving_dir}")
        return 0
    entry = None
    try:
        entry = labels.current_entry(paths.serving_config_dir, push.model_name)
    except ValueError as err:  # ServingConfigError: still show what is on disk
        print(f"warning: {err}", file=sys.stderr)
    policy = entry.policy if entry else "(no entry)"
    print(f"{push.model_name}: {paths.serving_dir}; {config_file} policy {policy}")
    hold = labels.read_hold(paths.serving_config_dir, push.model_name)
    if hold is not None:
        why = f" by {hold.by}" if hold.by else ""
        why += f": {hold.reason}" if hold.reason else ""
        print(
            f"held: stable stays on version {hold.rolled_back_to} since the rollback of "
            f"{hold.since}{why}; pushes get canary until `conveyor promote --label stable`"
        )
    unlabelled = labels.unlabelled_versions(entry)
    if unlabelled:
        print(
            f"loaded without a label: version {', '.join(map(str, unlabelled))} (its label move "
            "waited for push.serving_urls to load it, in vain; the labels stayed where they "
            "were: `conveyor promote` moves one there)"
        )
    table = [("version", "labels", "mlmd", "run", "spans", "metrics", "pushed (UTC)")]
    for row in rows:
        metrics = " ".join(f"{k}={v:.4g}" for k, v in sorted((row.metrics or {}).items()))
        table.append(
            (
                str(row.version) if not row.note else f"{row.version} ({row.note})",
                ",".join(row.labels) or "-",
                "yes" if row.recorded else "no",
                row.run_id or "-",
                ",".join(_span_label(s) for s in row.spans or []) or "-",
                metrics or "-",
                row.pushed_at.replace("T", " ").rstrip("Z") or "-",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    return 0


def _span_label(span: int) -> str:
    # Dated spans count days since 1970-01-01 (TFX's rule); a small number is a {SPAN}.
    import datetime

    if span > 3650:
        return (datetime.date(1970, 1, 1) + datetime.timedelta(days=span)).isoformat()
    return str(span)


def _move(args: argparse.Namespace, what: str, action) -> int:
    """Runs a label move under the pipeline's lock, after reconcile, and prints its result."""
    import getpass

    from pipelines.ops import nightly, serving_state

    paths = _paths(args)
    by = args.by or getpass.getuser()
    try:
        with nightly.pipeline_lock(paths, f"a {what} of {paths.spec.name}"):
            serving_state.reconcile(paths)
            moved = action(paths, by)
    except ValueError as err:  # LabelError, ServingConfigError: one paragraph, no traceback
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{what.upper()}: {moved.describe()}")
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    """`conveyor promote`: points `--label` at `--version` and records it.

    Exit code: 0 when done (or already so); 1 when refused (unknown label, a version not on
    disk or not recorded); 75 when another run holds the pipeline's lock.
    """
    from pipelines.ops import labels

    return _move(
        args,
        "promote",
        lambda paths, by: labels.promote(paths, args.version, args.label, by, args.reason),
    )


def cmd_rollback(args: argparse.Namespace) -> int:
    """`conveyor rollback`: serves `--to` (or the previous stable version) again and records it.

    Exit code: 0 when done; 1 when refused (no earlier version, a version not on disk or not
    recorded); 75 when another run holds the pipeline's lock.
    """
    from pipelines.ops import labels

    return _move(
        args, "rollback", lambda paths, by: labels.rollback(paths, args.to, by, args.reason)
    )
