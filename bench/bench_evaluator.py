"""Benchmark: the Evaluator executor alone, TFMA against the vectorized engine.

Takes a working directory where a night has run with a baseline (for example night two of
`bench_nightly.py --keep`, or two `conveyor run taxi --profile large` nights of
pipelines/datasets/taxi_nights.py rows), finds that night's Evaluator execution in its ML
Metadata (examples, candidate, baseline), and runs Conveyor's Evaluator executor on those
artifacts in this process, once per engine and repetition, alternating which goes first. Each
line gives the executor's seconds (TensorFlow and TFX imports excluded: they are paid once per
process either way) and the load average before it; the medians close the table. As in a
pipeline run on the DirectRunner (pipelines/run/local.py), TFX does not package itself for Beam
workers here.

    .venv/bin/python bench/bench_evaluator.py WORKDIR [--pipeline taxi] [--env large]
        [--repeat 3] [--engine tfma --engine vectorized] [--beam-arg ARG ...]

`--engine vectorized` alone times the engine on splits where TFMA would take many minutes.
This is a benchmark, not a test: it asserts nothing about speed. When both engines run it also
checks that they wrote the same metrics and validation result, and exits non-zero when they
differ.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# bench/ is first on sys.path when this runs as `python bench/bench_evaluator.py`.
import results_file


def night_inputs(workdir: Path, spec) -> dict[str, list]:
    """The latest Evaluator execution's input artifacts (TFX types), which must include a
    baseline model."""
    from components.evaluator.replay import recorded_inputs
    from pipelines.core import metadata
    from pipelines.core.paths import RunPaths

    store = metadata.open_store(spec, RunPaths(workdir=workdir, spec=spec).metadata_path)
    try:
        inputs = recorded_inputs(store)
    except ValueError as err:
        raise SystemExit(f"{workdir}: {err}") from None
    if "baseline_model" not in inputs:
        raise SystemExit(f"{workdir}: the latest Evaluator ran without a baseline model")
    return inputs


def run_engine(engine: str, inputs, properties, beam_args, out: Path) -> float:
    """Runs the executor of `engine` on `inputs`; returns its seconds."""
    from components.evaluator.replay import evaluate

    start = time.perf_counter()
    evaluate(engine, inputs, properties, beam_args, out)
    return time.perf_counter() - start


def same_results(first: Path, second: Path) -> bool:
    """Whether two evaluations hold the same metrics (exactly) and validation result."""
    import tensorflow_model_analysis as tfma

    def metrics(path):
        return {
            (
                r.slice_key.SerializeToString(deterministic=True),
                kv.key.SerializeToString(),
            ): kv.value.SerializeToString()
            for r in tfma.load_metrics(str(path / "evaluation"))
            for kv in r.metric_keys_and_values
        }

    return metrics(first) == metrics(second) and tfma.load_validation_result(
        str(first / "evaluation")
    ) == tfma.load_validation_result(str(second / "evaluation"))


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints one line per run and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--pipeline", default="taxi")
    parser.add_argument("--env", default="large")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--engine",
        action="append",
        default=None,
        help="an engine to time (tfma or vectorized; default: both, alternating)",
    )
    parser.add_argument(
        "--beam-arg",
        action="append",
        default=None,
        help="Beam pipeline argument (default: the in-memory DirectRunner, one worker)",
    )
    results_file.add_arguments(parser, "evaluator")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from tfx.utils import dependency_utils

    from components.evaluator.replay import ENGINES, executor_properties
    from pipelines.builder.nodes.evaluator import eval_config
    from pipelines.spec.loading import load_spec

    spec = load_spec(args.pipeline, env=args.env, workdir=args.workdir).spec
    inputs = night_inputs(args.workdir, spec)
    properties = executor_properties(eval_config(spec))
    beam_args = args.beam_arg or ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    engines = tuple(e for e in ENGINES if e in (args.engine or ENGINES))
    if args.engine and set(args.engine) - set(ENGINES):
        parser.error(f"--engine: one of {', '.join(ENGINES)}")
    # What the local runner does for the DirectRunner: no sdist of TFX for workers that have it.
    dependency_utils.make_beam_dependency_flags = list
    seconds: dict[str, list[float]] = {engine: [] for engine in engines}
    with tempfile.TemporaryDirectory(prefix="bench-evaluator-") as scratch:
        for repetition in range(args.repeat):
            order = engines if repetition % 2 == 0 else engines[::-1]
            for engine in order:
                load = "/".join(f"{x:.2f}" for x in os.getloadavg())
                took = run_engine(engine, inputs, properties, beam_args, Path(scratch) / engine)
                seconds[engine].append(took)
                print(f"{engine:<11} run {repetition + 1}: {took:7.2f} s  (load before {load})")
            if len(engines) == 2 and not same_results(
                Path(scratch) / "tfma", Path(scratch) / "vectorized"
            ):
                print("the engines' metrics or validation differ", file=sys.stderr)
                return 1
    for engine in engines:
        runs = seconds[engine]
        print(
            f"{engine:<11} median {statistics.median(runs):7.2f} s "
            f"(min {min(runs):.2f}, max {max(runs):.2f}, {len(runs)} runs)"
        )
    settings = {
        "pipeline": args.pipeline,
        "env": args.env,
        "repeat": args.repeat,
        "engines": list(engines),
        "beam_args": beam_args,
    }
    figures = {
        "seconds": {engine: results_file.spread(seconds[engine]) for engine in engines},
        # Checked above: a difference ends the run before this.
        "same_metrics_and_validation": True if len(engines) == 2 else None,
    }
    results_file.write_from_args(
        args,
        "evaluator",
        settings=settings,
        figures=figures,
        placeholders={str(args.workdir): "WORKDIR"},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
