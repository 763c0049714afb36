"""SKELETON (being written): the `conveyor models` subcommand(s)."""

from __future__ import annotations


def register(sub, add_common_options) -> None:
    """Adds the subcommand(s) to the `conveyor` parser."""
    p = sub.add_parser("models", help="(being written)")
    p.set_defaults(func=lambda args: 1)
