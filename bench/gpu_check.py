"""GPU check: the `gpu` profile (mirrored over every local GPU, XLA, mixed_float16) on the
penguin and taxi pipelines, printing the trainer's examples/s. Meant for a machine with GPUs,
in under 5 minutes:

    .venv/bin/python bench/gpu_check.py [--workdir DIR]

Each pipeline runs for real (`conveyor data`, then `conveyor run --profile gpu --force`); the
figures come from the training summary the trainer writes next to its TensorBoard logs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# bench/ is first on sys.path when this runs as `python bench/gpu_check.py`.
import results_file

REPO = Path(__file__).resolve().parents[1]
CONVEYOR = REPO / ".venv" / "bin" / "conveyor"
PIPELINES = ("penguin", "taxi")


def list_gpus() -> str:
    probe = "import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return done.stdout.strip() or done.stderr.strip()[-500:]


def run_pipeline(name: str, workdir: Path) -> dict:
    """Runs one pipeline under the gpu profile; returns its newest training summary."""
    subprocess.run([str(CONVEYOR), "data", name, "--workdir", str(workdir)], check=True)
    started = time.perf_counter()
    done = subprocess.run(
        [str(CONVEYOR), "run", name, "--profile", "gpu", "--force", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        check=False,
    )
    print(done.stdout.strip())
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{name}: conveyor run failed with exit code {done.returncode}")
    summaries = sorted(
        (workdir / "pipeline_root" / name / "trainer" / "model_run").glob(
            "*/training_summary.json"
        ),
        key=lambda p: p.stat().st_mtime,
    )
    summary = json.loads(summaries[-1].read_text())
    summary["pipeline_seconds"] = round(time.perf_counter() - started, 1)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="default: a new temporary directory")
    results_file.add_arguments(parser, "gpu")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="conveyor-gpu-check-"))
    gpus = list_gpus()
    print(f"GPUs: {gpus}")
    figures = {"gpus": gpus, "pipelines": {}}
    print(f"{'pipeline':<10} {'examples/s':>12} {'replicas':>8}  precision       XLA   run s")
    for name in PIPELINES:
        s = run_pipeline(name, workdir / name)
        print(
            f"{name:<10} {s['examples_per_second']:>12.0f} {s['replicas']:>8}  "
            f"{s['precision']:<15} {str(s['jit_compile']):<5} {s['pipeline_seconds']:>6}"
        )
        figures["pipelines"][name] = {
            key: s[key] for key in ("examples_per_second", "replicas", "precision", "jit_compile")
        }
        figures["pipelines"][name]["run_seconds"] = s["pipeline_seconds"]
    results_file.write_from_args(
        args,
        "gpu",
        settings={"profile": "gpu", "pipelines": list(PIPELINES)},
        figures=figures,
        placeholders={} if args.workdir is None else {str(args.workdir): "WORKDIR"},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
