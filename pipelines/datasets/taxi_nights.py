"""Writes nightly taxi-like spans, including the bad nights a production pipeline must survive.

Each night is `pipelines.datasets.taxi.write_rows(rows, seed=night number)` (rows drawn from the
taxi sample the tfx package ships), optionally changed the way real nights go wrong:

- `drift`: every fare is in cents (a unit change upstream);
- `shuffled_labels`: the `big_tipper` labels are permuted (a broken join): features look
  normal, so only the model gate can notice;
- `missing_column`: the `payment_type` column is gone (an export dropped it).

    .venv/bin/python -m pipelines.datasets.taxi_nights OUT_DIR [--first 2026-11-23] [--rows 2000]

writes the simulated week (WEEK, six nights; the seventh night of the story re-runs night six)
as `OUT_DIR/<YYYY-MM-DD>/taxi.csv`, the layout the taxi spec's `data.span_pattern` reads. The
output is a function of the arguments only.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines.core.object_path import as_path
from pipelines.datasets.taxi import write_rows

CHANGES = ("drift", "shuffled_labels", "missing_column")
DRIFTED_COLUMN, DRIFT_FACTOR = "fare", 100.0
LABEL = "big_tipper"
DROPPED_COLUMN = "payment_type"
# The simulated week: what each night's data is like.
WEEK = (None, None, "drift", "shuffled_labels", "missing_column", None)


def write_night(path: str | Path, rows: int, seed: int, change: str | None = None) -> Path:
    """Writes one night's CSV: `rows` taxi-like rows from `seed`, changed as `change` says."""
    if change is not None and change not in CHANGES:
        raise ValueError(f"change {change!r}: expected one of {CHANGES} or None")
    target = write_rows(rows, path, seed=seed)
    if change is None:
        return target
    frame = pd.read_csv(target, keep_default_na=False, na_values=[""], float_precision="round_trip")
    if change == "drift":
        frame[DRIFTED_COLUMN] = (frame[DRIFTED_COLUMN] * DRIFT_FACTOR).round(2)
    elif change == "shuffled_labels":
        frame[LABEL] = np.random.default_rng(seed).permutation(frame[LABEL].to_numpy())
    else:
        frame = frame.drop(columns=[DROPPED_COLUMN])
    frame.to_csv(target, index=False)
    return target


def write_week(
    input_dir: str | Path, first: datetime.date, rows: int, filename: str = "taxi.csv"
) -> list[tuple[datetime.date, str | None]]:
    """Writes the six nights of WEEK from `first` on; returns (night, change) in order."""
    plan = []
    for index, change in enumerate(WEEK):
        night = first + datetime.timedelta(days=index)
        write_night(as_path(input_dir) / night.isoformat() / filename, rows, index + 1, change)
        plan.append((night, change))
    return plan


def main(argv: list[str] | None = None) -> int:
    """Writes the six nights of WEEK under OUT_DIR (`<YYYY-MM-DD>/taxi.csv`) and prints each
    night's change; returns the exit status (0)."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.datasets.taxi_nights", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "out_dir", type=Path, metavar="OUT_DIR", help="where the <YYYY-MM-DD>/taxi.csv nights go"
    )
    parser.add_argument(
        "--first",
        type=datetime.date.fromisoformat,
        default="2026-11-23",
        help="the first night, YYYY-MM-DD (default: 2026-11-23)",
    )
    parser.add_argument("--rows", type=int, default=2000, help="rows per night (default: 2000)")
    args = parser.parse_args(argv)
    for night, change in write_week(args.out_dir, args.first, args.rows):
        print(f"{night.isoformat()}: {change or 'normal'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
