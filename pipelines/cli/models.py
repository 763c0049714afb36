"""`conveyor bless`, `lineage`, `models`, `promote` and `rollback`: the versions a pipeline
pushed, where they came from, and which of them are served under which label (the rules are in
pipelines/serving_state/).

Each handler imports what it needs when it runs: `conveyor --help`, `models` and `lineage` never
import TensorFlow or TFX.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.cli.options import add_common_options, load, workdir_of
from pipelines.core.outcome import EXIT_FAILED


def register(sub) -> None:
    """Adds `bless`, `lineage`, `models`, `promote` and `rollback` to the `conveyor` parser."""
    p = sub.add_parser(
        "bless",
        help="push a candidate held by evaluation.first_run: require_manual_bless",
        description="Publishes the candidate a run held for review as the next served version "
        "and records in ML Metadata who blessed it and why.",
    )
    p.add_argument("pipeline")
    p.add_argument("--run", required=True, metavar="RUN_ID", help="the run whose candidate to push")
    p.add_argument("--reason", required=True, help="why the candidate may be served (recorded)")
    p.add_argument("--by", help="who blesses it (default: the user name)")
    add_common_options(p)
    p.set_defaults(func=cmd_bless)

    p = sub.add_parser("lineage", help="which spans, schema and code made each pushed version")
    p.add_argument("pipeline")
    p.add_argument("--version", help="one pushed version only")
    add_common_options(p)
    p.set_defaults(func=cmd_lineage)

    p = sub.add_parser(
        "models",
        help="every version of a pipeline's model on disk: labels, run, spans, metrics",
        description="One row per version folder under the model's base path (newest first): "
        "the labels models.config gives it, whether ML Metadata recorded its push, the run "
        "that pushed it, the spans it learned from, its final validation metrics, when it "
        "was pushed and its model card page.",
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


def cmd_bless(args: argparse.Namespace) -> int:
    """`conveyor bless`: pushes the candidate a run held for review
    (`evaluation.first_run: require_manual_bless`) and records who blessed it and why.

    Exit code: 0 when pushed, 1 when the run's candidate cannot be blessed.
    """
    import getpass

    from pipelines.core.paths import RunPaths
    from pipelines.ops.bless import BlessError, bless

    loaded = load(args, args.pipeline)
    paths = RunPaths(workdir=workdir_of(args), spec=loaded.spec)
    try:
        blessed = bless(paths, args.run, args.by or getpass.getuser(), args.reason)
    except BlessError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    if blessed.model_card:
        print(f"model card: {blessed.model_card}")
    print(f"PUSHED: version {blessed.version} to {blessed.target} (blessed run {args.run})")
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    """`conveyor lineage`: prints, for each pushed version (or only `--version`), the spans,
    schema and code that made it, and the label moves to it, as ML Metadata records them.

    Exit code: 0; 1 when the `--version` asked for is not recorded (no pushes at all is 0).
    """
    from pipelines.core.metadata import open_store, pushed_lineage
    from pipelines.core.paths import RunPaths

    loaded = load(args, args.pipeline)
    paths = RunPaths(workdir=workdir_of(args), spec=loaded.spec)
    store = open_store(loaded.spec, paths.metadata_path)
    pushes = pushed_lineage(store, loaded.spec.name) if store else []
    if args.version:
        pushes = [p for p in pushes if p.version == args.version]
    if not pushes:
        print(f"no pushed versions of {loaded.spec.name} recorded in {paths.metadata_path}")
        return EXIT_FAILED if args.version else 0
    from pipelines import serving_state

    moves = serving_state.moves_by_version(store, loaded.spec.name)
    for push in pushes:
        print(push.describe())
        for move in moves.get(push.version, []):  # pushes, promotes, rollbacks to the version
            print(f"  labels    {move.describe()}")
    return 0


def _add_who_and_why(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reason", default="", help="why (recorded in ML Metadata)")
    p.add_argument("--by", help="who (default: the user name)")


def _paths(args: argparse.Namespace):
    from pipelines.core.paths import RunPaths

    return RunPaths(workdir=workdir_of(args), spec=load(args, args.pipeline).spec)


def cmd_models(args: argparse.Namespace) -> int:
    """`conveyor models`: one table of every version folder of the pipeline's model.

    Exit code: 0 (also with no versions); 1 when models.config cannot be read.
    """
    from pipelines import serving_state

    paths = _paths(args)
    push = paths.spec.push
    state = serving_state.models_table(paths)
    rows, entry, hold, unlabelled = state.rows, state.entry, state.hold, state.unlabelled
    if not rows:
        print(f"no versions of {push.model_name} in {paths.serving_dir}")
        return 0
    if state.entry_error:  # still show what is on disk
        print(f"warning: {state.entry_error}", file=sys.stderr)
    policy = entry.policy if entry else "(no entry)"
    print(f"{push.model_name}: {paths.serving_dir}; {state.config_file} policy {policy}")
    if hold is not None:
        why = f" by {hold.by}" if hold.by else ""
        why += f": {hold.reason}" if hold.reason else ""
        print(
            f"held: stable stays on version {hold.rolled_back_to} since the rollback of "
            f"{hold.since}{why}; pushes get canary until `conveyor promote --label stable`"
        )
    if unlabelled:
        print(
            f"loaded without a label: version {', '.join(map(str, unlabelled))} (its label move "
            "waited for push.serving_urls to load it, in vain; the labels stayed where they "
            "were: `conveyor promote` moves one there)"
        )
    table = [("version", "labels", "mlmd", "run", "spans", "metrics", "pushed (UTC)", "model card")]
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
                _file_name(row.model_card) or "-",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    cards = [row.model_card for row in rows if row.model_card]
    if cards:  # the table names each card's file; its folder once, as it may be long
        print(f"model cards in {cards[0][: -len(_file_name(cards[0]))].rstrip('/')}")
    return 0


def _file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _span_label(span: int) -> str:
    # Dated spans count days since 1970-01-01 (TFX's rule); a small number is a {SPAN}.
    import datetime

    if span > 3650:
        return (datetime.date(1970, 1, 1) + datetime.timedelta(days=span)).isoformat()
    return str(span)


def _move(args: argparse.Namespace, what: str, action) -> int:
    """Runs a label move under the pipeline's lock, after reconcile, and prints its result."""
    import getpass

    from pipelines import serving_state
    from pipelines.ops import nightly

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
    from pipelines import serving_state

    return _move(
        args,
        "promote",
        lambda paths, by: serving_state.promote(paths, args.version, args.label, by, args.reason),
    )


def cmd_rollback(args: argparse.Namespace) -> int:
    """`conveyor rollback`: serves `--to` (or the previous stable version) again and records it.

    Exit code: 0 when done; 1 when refused (no earlier version, a version not on disk or not
    recorded); 75 when another run holds the pipeline's lock.
    """
    from pipelines import serving_state

    return _move(
        args, "rollback", lambda paths, by: serving_state.rollback(paths, args.to, by, args.reason)
    )
