"""Benchmark: warm start against training from scratch, over a simulated week of taxi nights.

Does starting each night from the served model cost accuracy, and what does it save? The
Trainer is what differs between the two, so the week is the Trainer's alone, on the taxi spec's
model and sizes (`train_steps`, batch, learning rate, its `data.window_spans`):

- night N's data: `pipelines.datasets.taxi.write_rows(rows, seed=N)`, normal nights, split 80/20
  by the spec's `data.split_key` as the pipeline splits them, as gzipped tf.Examples, with each
  split's statistics;
- each night trains on the window (that night's span and the spans before it, up to
  `data.window_spans`) and is scored on that night's eval split;
- three chains side by side, in an order that rotates every night:
    scratch   every night from fresh weights, `train_steps` steps;
    warm      night 1 as scratch; every later night starts from the warm chain's model of the
              night before (as the warm_start_resolver hands the Trainer the served model) and
              trains `trainer.warm_start_step_fraction` of the steps;
    noise     scratch again with another seed: how far two from-scratch trainings differ.

Per night: each chain's accuracy on the night's eval split and, for warm - scratch and
noise - scratch, the difference with a 95% interval from 20 Poisson-bootstrap resamples of the
eval rows (TFMA's method for the model gate's intervals, `evaluation.confidence`); and each
training's seconds, of Keras' fit and of the whole `train` call (dataset, fit, export). The
aims: the median warm - scratch difference within the noise (no further below zero than the
widest noise - scratch difference), and the scratch chain's fit time at least 1.5x the warm
chain's (medians over the nights that warm start); the whole call's ratio is reported beside.

    .venv/bin/python bench/bench_warm_start.py [--rows 300000] [--nights 7]
        [--set KEY=VALUE ...] [--out-dir DIR] [--keep]

This is a benchmark, not a test: it asserts nothing, and exits non-zero only when a run fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# bench/ is first on sys.path when this runs as `python bench/bench_warm_start.py`.
import bench_trainer
import results_file
from measure import add_set_option

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

DEFAULT_ROWS = 300_000
DEFAULT_NIGHTS = 7
NOISE_SEED_OFFSET = 1000  # the noise chain's seed: the spec's plus this
RESAMPLES = 20  # TFMA's Poisson bootstrap draws 20 resamples
T_975_19 = 2.093  # Student's t, 97.5th percentile, 19 degrees of freedom
SPEEDUP_FLOOR = 1.5
CHAINS = ("scratch", "warm", "noise")
EVAL_STATS_FILE = "eval_stats.pb"


def split_by_key(frame: Any, key: str, splits: dict[str, int]) -> tuple[Any, Any]:
    """(train, eval) rows by a stable hash of the spec's `data.split_key`, as ExampleGen splits
    the pipeline's spans: a trip lands in the same split every night. The generated nights draw
    their rows from the same sample of trips, so a split by position would score a model on
    trips it trained on the night before."""
    import zlib

    buckets = sum(splits.values())
    hashed = frame[key].astype(str).map(lambda value: zlib.crc32(value.encode()) % buckets)
    is_eval = hashed >= splits["train"]
    return frame[~is_eval].reset_index(drop=True), frame[is_eval].reset_index(drop=True)


def prepare_night(out: Path, night: int, rows: int, spec: Any) -> Path:
    """Night `night`'s split examples and statistics under `out/rows-R/night-N` (kept between
    runs of the same --out-dir)."""
    import pandas as pd
    import tensorflow_data_validation as tfdv

    from pipelines.datasets.taxi import write_rows

    folder = out / f"rows-{rows}" / f"night-{night}"
    if (folder / EVAL_STATS_FILE).exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    frame = pd.read_csv(write_rows(rows, folder / "taxi.csv", seed=night))
    train_frame, eval_frame = split_by_key(frame, spec.data.split_key, dict(spec.data.splits))
    bench_trainer.write_examples(train_frame, folder / bench_trainer.TRAIN_FILE)
    bench_trainer.write_examples(eval_frame, folder / bench_trainer.EVAL_FILE)
    bench_trainer.write_statistics_and_schema(train_frame, folder)
    eval_stats = tfdv.generate_statistics_from_dataframe(eval_frame)
    (folder / EVAL_STATS_FILE).write_bytes(eval_stats.SerializeToString())
    (folder / "taxi.csv").unlink()
    return folder


def night_statistics(folder: Path) -> dict[str, Any]:
    """The night's statistics by split, as the pipeline hands the Trainer tonight's."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    def read(name: str):
        return statistics_pb2.DatasetFeatureStatisticsList.FromString((folder / name).read_bytes())

    return {"train": read(bench_trainer.STATS_FILE), "eval": read(EVAL_STATS_FILE)}


def correct_flags(model_dir: Path, eval_file: Path) -> Any:
    """1 for each eval row the exported model classifies right, else 0 (TFMA's BinaryAccuracy
    at 0.5 is the same count), through the `serving_examples` signature TFMA calls."""
    import numpy as np
    import tensorflow as tf

    loaded = tf.saved_model.load(str(model_dir))
    predict, encode = loaded.signatures["serving_examples"], loaded.signatures["transform_features"]
    flags = []
    records = tf.data.TFRecordDataset(str(eval_file), compression_type="GZIP").batch(8192)
    for batch in records:
        (label,) = encode(examples=batch).values()
        predicted = predict(examples=batch)["class_ids"]
        flags.append((predicted.numpy().reshape(-1) == label.numpy().reshape(-1)).astype(np.int8))
    return np.concatenate(flags)


def difference(flags: Any, reference: Any, seed: int) -> dict[str, float]:
    """Accuracy of `flags` minus `reference`'s on the same rows, with the Poisson bootstrap's
    95% interval (mean of the resamples +- t * their deviation, as TFMA computes it)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(RESAMPLES):
        weights = rng.poisson(1.0, size=len(flags))
        total = weights.sum()
        diffs.append(float((weights @ flags - weights @ reference) / total))
    centre = float(flags.mean() - reference.mean())
    half = T_975_19 * statistics.stdev(diffs)
    return {
        "value": round(centre, 5),
        "low": round(centre - half, 5),
        "high": round(centre + half, 5),
    }


def train_night(
    trainer: dict[str, Any], nights: list[Path], export: Path, base: Path | None
) -> dict[str, Any]:
    """One `train` call on the window `nights` (the last is tonight's), warm from `base` when
    given; returns the trainer's summary with the call's seconds."""
    import tf_keras as keras

    from components.trainer.run import train

    keras.backend.clear_session()
    features = bench_trainer.load_feature_set(nights[-1], trainer)
    started = time.perf_counter()
    summary = train(
        trainer=trainer,
        features=features,
        train_files=[str(night / bench_trainer.TRAIN_FILE) for night in nights],
        eval_files=[str(nights[-1] / bench_trainer.EVAL_FILE)],
        serving_model_dir=str(export),
        model_run_dir="",
        train_steps=int(trainer["train_steps"]),
        eval_steps=int(trainer["eval_steps"]),
        base_model_dir=str(base) if base else None,
        statistics=night_statistics(nights[-1]),
    )
    summary["call_seconds"] = round(time.perf_counter() - started, 2)
    return summary


def benchmark(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from pipelines.spec.loading import load_spec

    spec = load_spec("taxi", env=bench_trainer.SPEC_ENV, overrides=args.set).spec
    trainer = spec.trainer.model_dump(mode="json")
    warm_spec = load_spec("taxi", env=bench_trainer.SPEC_ENV, overrides=args.set + args.warm_set)
    warm_trainer = warm_spec.spec.trainer.model_dump(mode="json")
    window = spec.data.window_spans
    chains = {
        "scratch": {**trainer, "warm_start": False},
        "warm": {**warm_trainer, "warm_start": True},
        "noise": {**trainer, "warm_start": False, "seed": trainer["seed"] + NOISE_SEED_OFFSET},
    }
    folders = []
    nights = []
    previous_warm: Path | None = None
    for night in range(1, args.nights + 1):
        folders.append(prepare_night(out, night, args.rows, spec))
        in_window = folders[-window:]
        order = CHAINS[night % 3 :] + CHAINS[: night % 3]  # rotate who trains first
        record: dict[str, Any] = {"night": night, "spans": len(in_window), "order": list(order)}
        flags = {}
        for chain in order:
            export = out / "models" / f"{chain}-{night}"
            shutil.rmtree(export, ignore_errors=True)
            base = previous_warm if chain == "warm" else None
            summary = train_night(chains[chain], in_window, export, base)
            flags[chain] = correct_flags(export, in_window[-1] / bench_trainer.EVAL_FILE)
            record[chain] = {
                "accuracy": round(float(flags[chain].mean()), 5),
                "seconds": summary["call_seconds"],
                "fit_seconds": summary["seconds"],
                "steps": summary["trained_steps"],
                "warm_started": summary["warm_started"],
            }
        previous_warm = out / "models" / f"warm-{night}"
        record["warm_minus_scratch"] = difference(flags["warm"], flags["scratch"], night)
        record["noise_minus_scratch"] = difference(flags["noise"], flags["scratch"], night)
        nights.append(record)
        print(progress_line(record), flush=True)
    return summarize(args, spec, nights)


def summarize(args: argparse.Namespace, spec: Any, nights: list[dict]) -> dict[str, Any]:
    warm_nights = [n for n in nights if n["warm"]["warm_started"]]
    gaps = [n["warm_minus_scratch"]["value"] for n in warm_nights]
    noise = [abs(n["noise_minus_scratch"]["value"]) for n in nights]

    def ratio(key: str) -> float:
        """Scratch over warm: the medians of `key` over the nights that warm start."""
        warm = statistics.median(n["warm"][key] for n in warm_nights)
        return statistics.median(n["scratch"][key] for n in warm_nights) / warm if warm else 0.0

    fit_speedup, call_speedup = ratio("fit_seconds"), ratio("seconds")
    median_gap, widest_noise = statistics.median(gaps), max(noise)
    return {
        "rows": args.rows,
        "nights": args.nights,
        "window_spans": spec.data.window_spans,
        "train_steps": spec.trainer.train_steps,
        "warm_start_step_fraction": spec.trainer.warm_start_step_fraction,
        "learning_rate": spec.trainer.learning_rate,
        "per_night": nights,
        "median_warm_minus_scratch": round(median_gap, 5),
        "widest_noise": round(widest_noise, 5),
        "fit_speedup": round(fit_speedup, 2),
        "call_speedup": round(call_speedup, 2),
        "aims": [
            {
                "what": "median accuracy, warm - scratch, against minus the widest "
                f"noise - scratch ({-widest_noise:+.4f})",
                "value": median_gap,
                "met": median_gap >= -widest_noise,
            },
            {
                "what": "training (Keras fit) s, scratch / warm, medians over the warm-started "
                f"nights (floor {SPEEDUP_FLOOR:g}x)",
                "value": fit_speedup,
                "met": fit_speedup >= SPEEDUP_FLOOR,
            },
        ],
    }


def progress_line(record: dict) -> str:
    parts = [f"night {record['night']} ({record['spans']} spans):"]
    for chain in CHAINS:
        figures = record[chain]
        parts.append(
            f"{chain} {figures['accuracy']:.4f} in {figures['seconds']:.0f} s "
            f"({figures['steps']} steps)"
        )
    gap, noise = record["warm_minus_scratch"], record["noise_minus_scratch"]
    parts.append(f"warm-scratch {gap['value']:+.4f} [{gap['low']:+.4f}, {gap['high']:+.4f}]")
    parts.append(f"noise-scratch {noise['value']:+.4f}")
    return "  ".join(parts)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="rows a night")
    parser.add_argument("--nights", type=int, default=DEFAULT_NIGHTS, help="nights in the week")
    add_set_option(parser, "a taxi spec override for every chain")
    parser.add_argument(
        "--warm-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a spec override for the warm chain alone (e.g. trainer.learning_rate=0.001)",
    )
    parser.add_argument("--out-dir", type=Path, help="work here (and keep the data) instead")
    parser.add_argument("--keep", action="store_true", help="keep the models")
    results_file.add_arguments(parser, "warm_start")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-warm-start-"))
    try:
        result = benchmark(args, out)
    finally:
        if not args.keep:
            shutil.rmtree(out / "models", ignore_errors=True)
            if args.out_dir is None:
                shutil.rmtree(out, ignore_errors=True)
    print(f"the whole train call (dataset, fit, export), scratch / warm: {result['call_speedup']}x")
    for aim in result["aims"]:
        print(f"{aim['what']}: {aim['value']:.4f} ({'met' if aim['met'] else 'missed'})")
    if not args.no_results:
        settings = {
            k: result[k]
            for k in (
                "rows",
                "nights",
                "window_spans",
                "train_steps",
                "warm_start_step_fraction",
                "learning_rate",
            )
        }
        figures = {
            k: result[k]
            for k in (
                "per_night",
                "median_warm_minus_scratch",
                "widest_noise",
                "fit_speedup",
                "call_speedup",
                "aims",
            )
        }
        path = results_file.write(
            "warm_start",
            args.results,
            settings=settings,
            figures=figures,
            placeholders={str(out): "OUT_DIR"},
        )
        print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
