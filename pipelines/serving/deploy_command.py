"""SKELETON (being written): the `conveyor deploy` subcommand(s)."""

from __future__ import annotations


def register(sub, add_common_options) -> None:
    """Adds the subcommand(s) to the `conveyor` parser."""
    p = sub.add_parser("deploy", help="(being written)")
    p.set_defaults(func=lambda args: 1)
