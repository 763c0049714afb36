"""Writes N taxi-like rows in the layout `conveyor data taxi` writes, for tests and benchmarks.

The rows are drawn from the taxi sample that ships in the tfx package (15,002 rows), prepared
exactly as the taxi spec's `data.prepare` recipe says (the same derived `big_tipper` 0/1 label,
the same columns in the same order, missing values as empty fields). Each output row is a sampled
sample row whose fare, trip_miles and trip_seconds are jittered by a few percent and rounded as in
the source, so the output is not just N / 15,002 copies of the sample. Missing values stay
missing; whole numbers stay whole.

    .venv/bin/python -m pipelines.datasets.taxi N OUT_CSV [--seed 0]

The output is a function of N and the seed only: the same bytes on every run. Rows are written a
chunk at a time, so memory does not grow with N. Chunk k is drawn from its own seeded random
streams, so the first M rows of a larger N are the same as the output for N = M (useful for a
test that grows its data day by day). Other code can call `write_rows(n, path, seed)`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

PIPELINE = "taxi"
CHUNK_ROWS = 100_000
# Column -> decimals it is rounded to after jittering (as written in the shipped sample: fares
# and miles to the cent / hundredth, seconds whole). A column the spec does not keep is skipped.
JITTERED_COLUMNS = {"fare": 2, "trip_miles": 2, "trip_seconds": 0}
JITTER_FRACTION = 0.03  # each jittered value is multiplied by a factor in [0.97, 1.03]


def load_sample() -> pd.DataFrame:
    """Prepares the taxi sample with Conveyor's own `data.prepare` code and reads it back.

    Returns:
        The prepared rows. Only empty fields are read as missing, and floats are parsed to the
        exact double written, so writing an unchanged row reproduces its bytes.
    """
    from pipelines.datasets.prepare import prepare
    from pipelines.spec.loading import load_spec

    spec = load_spec(PIPELINE).spec
    with tempfile.TemporaryDirectory(prefix="taxi-sample-") as scratch:
        prepared = prepare(spec, Path(scratch))
        return pd.read_csv(
            prepared, keep_default_na=False, na_values=[""], float_precision="round_trip"
        )


def chunk_generators(seed: int, chunk_index: int) -> tuple[np.random.Generator, ...]:
    """Returns (row picker, jitter) generators for one chunk, independent of every other chunk.

    Seeding per chunk, with separate streams for picks and jitter, makes a chunk's first rows
    independent of how many rows the chunk has: a shorter output is a prefix of a longer one.
    """
    picks, jitter = np.random.SeedSequence([seed, chunk_index]).spawn(2)
    return np.random.default_rng(picks), np.random.default_rng(jitter)


def make_chunk(sample: pd.DataFrame, rows: int, seed: int, chunk_index: int) -> pd.DataFrame:
    """Draws `rows` sample rows and jitters their numeric columns.

    Args:
        sample: the prepared sample (see `load_sample`).
        rows: how many rows the chunk has.
        seed: the output's seed.
        chunk_index: which chunk of the output this is (0, 1, ...).

    Returns:
        The chunk, in the sample's columns and dtypes.
    """
    pick_rng, jitter_rng = chunk_generators(seed, chunk_index)
    chunk = sample.take(pick_rng.integers(0, len(sample), size=rows))
    factors = 1.0 + jitter_rng.uniform(
        -JITTER_FRACTION, JITTER_FRACTION, size=(rows, len(JITTERED_COLUMNS))
    )
    for position, column in enumerate(JITTERED_COLUMNS):
        if column not in chunk.columns:
            continue
        # NaN * factor stays NaN (missing stays missing); 0 stays 0. The result keeps the
        # column's dtype so that e.g. trip_seconds is written as the sample writes it.
        values = chunk[column].to_numpy(dtype=float) * factors[:, position]
        chunk[column] = values.round(JITTERED_COLUMNS[column]).astype(chunk[column].dtype)
    return chunk


def write_rows(n: int, path: str | Path, seed: int = 0) -> Path:
    """Writes `n` taxi-like rows (plus a header) to the CSV at `path`.

    Args:
        n: number of data rows, 0 or more.
        path: the CSV to write; its parent directories are created. It is written under a
            temporary name and renamed, so a reader never sees a half-written file.
        seed: selects the rows and the jitter; the same (n, seed) gives the same bytes.

    Returns:
        The path written.

    Raises:
        ValueError: `n` or `seed` is negative.
    """
    if n < 0 or seed < 0:
        raise ValueError(f"n and seed must be 0 or more (got n={n}, seed={seed})")
    sample = load_sample()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with partial.open("w", newline="") as handle:
        sample.iloc[:0].to_csv(handle, index=False)  # the header, even for n == 0
        for chunk_index, start in enumerate(range(0, n, CHUNK_ROWS)):
            rows = min(CHUNK_ROWS, n - start)
            make_chunk(sample, rows, seed, chunk_index).to_csv(handle, index=False, header=False)
    partial.replace(target)
    return target


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of `python -m pipelines.datasets.taxi N OUT_CSV [--seed S]`; exits with
    a usage error on a negative N or seed."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.datasets.taxi", description=__doc__.splitlines()[0]
    )
    parser.add_argument("n", type=int, metavar="N", help="number of data rows")
    parser.add_argument("out_csv", type=Path, metavar="OUT_CSV", help="the CSV to write")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    args = parser.parse_args(argv)
    if args.n < 0:
        parser.error("N must be 0 or more")
    if args.seed < 0:
        parser.error("--seed must be 0 or more")
    return args


def main(argv: list[str] | None = None) -> int:
    """Writes N synthetic taxi rows to OUT_CSV and prints the size and time taken; returns the
    exit status (0)."""
    args = parse_args(argv)
    start = time.perf_counter()
    written = write_rows(args.n, args.out_csv, seed=args.seed)
    seconds = time.perf_counter() - start
    size_mb = written.stat().st_size / 1e6
    print(f"wrote {args.n:,} rows ({size_mb:.1f} MB) to {written} in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
