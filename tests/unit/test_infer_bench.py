"""bench/bench_infer.py's results file renders as the other benchmarks' do: its table in
bench/README.md and its headline in the README's summary (bench/report.py)."""

import importlib.util
import sys

from pipelines.core.paths import FRAMEWORK_ROOT

BENCH = FRAMEWORK_ROOT / "bench"


def _load(name: str):
    sys.path.insert(0, str(BENCH))  # the scripts import their siblings (measure, results_file)
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}_module", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def _result(beam: float, loop: float) -> dict:
    def tool(seconds: float, memory: float) -> dict:
        return {
            "wall_seconds": {"median": seconds, "min": seconds, "max": seconds},
            "peak_rss_mib": {"median": memory, "min": memory, "max": memory},
            "rows_per_second": round(1_000_000 / seconds),
        }

    return {
        "rows": 1_000_000,
        "repeats": 1,
        "profile": "ci",
        "signature": "serving_examples",
        "runs": {},
        "tools": {"beam": tool(beam, 700.0), "loop": tool(loop, 540.0)},
        "speedup": loop / beam,
        "aims": [
            {
                "what": "loop wall time / Beam wall time (floor 5x)",
                "value": loop / beam,
                "met": loop / beam >= 5,
            }
        ],
    }


def test_the_results_file_renders_both_tools_and_the_floor():
    bench, report = _load("bench_infer"), _load("report")
    settings, figures = bench.results_figures(_result(60.0, 480.0))
    document = {"benchmark": "infer", "settings": settings, "figures": figures}
    lines = report.render_infer(document)
    assert lines[0] == "1,000,000 rows:"
    assert "| conveyor infer (Beam) | 60.0 | 16,667 | 700 |" in lines
    assert "| Python loop, one row a call | 480.0 | 2,083 | 540 |" in lines
    assert lines[-1] == "- loop wall time / Beam wall time (floor 5x): 8.00, **met**"
    assert report.headline(document) == (
        "1,000,000 rows: 8.00x faster than the loop (60.0 s against 480.0 s)"
    )
    assert "infer" in report.SLOTS


def test_the_report_printed_after_a_run_says_whether_the_floor_is_met():
    bench = _load("bench_infer")
    text = bench.report(_result(100.0, 300.0))
    assert "Beam is 3.00x the loop (floor 5x)" in text
