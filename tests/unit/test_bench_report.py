"""The benchmark tables: bench/report.py renders a results file into the table it should, and
the committed README.md and bench/README.md hold exactly what it renders from the committed
bench/results/*.json (as test_monitoring_dashboards checks the committed dashboards), so no
figure in them is copied by hand or left behind by a newer run.

bench/report.py is loaded from its file, as test_bench_references loads a benchmark script: the
tests import nothing from bench/ as a package."""

import importlib.util
import json

import pytest

from pipelines.core.paths import FRAMEWORK_ROOT


def _load_report():
    spec = importlib.util.spec_from_file_location(
        "_bench_report_under_test", FRAMEWORK_ROOT / "bench" / "report.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = _load_report()

PENGUIN = {
    "format": 1,
    "benchmark": "penguin",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "dirty": False,
    "date": "2030-01-02T03:04:05+00:00",
    "command": ".venv/bin/python bench/bench_penguin.py --repeats 3",
    "machine": {
        "cores": 2,
        "memory_gib": 23.5,
        "cpu_model": "AMD EPYC",
        "os": "Linux-6.1-x86_64-with-glibc2.36",
        "python": "3.10.13",
        "load_average_at_end": [0.8, 1.0, 1.1],
    },
    "settings": {"repeats": 3, "raw_script": "bench/reference/raw_tfx_penguin.py"},
    "figures": {
        "scenarios": {
            "cold": {
                "label": "cold",
                "raw_scenario": "cold",
                "raw_seconds": 100.0,
                "conveyor_seconds": 25.0,
                "seconds_ratio": 0.25,
                "raw_peak_mib": 1066.4,
                "conveyor_peak_mib": 883.0,
                "peak_ratio": 0.828,
                "raw_seconds_range": [98.2, 111.0],
                "conveyor_seconds_range": [22.0, 26.4],
            },
            "rerun": {
                "label": "unchanged re-run",
                "raw_scenario": "rerun",
                "raw_seconds": 24.7,
                "conveyor_seconds": 0.5,
                "seconds_ratio": 0.0202,
                "raw_peak_mib": 980.0,
                "conveyor_peak_mib": 43.0,
                "peak_ratio": 0.0439,
                "raw_seconds_range": [24.7, 24.7],
                "conveyor_seconds_range": [0.4, 0.6],
            },
        },
        "conveyor_help": {"median_seconds": 0.281, "runs": [0.28, 0.281, 0.3]},
        "pushed_versions_after_run": {},
        "aims": [
            {"what": "cold run at most 0.25 of raw TFX's wall time", "value": 0.25, "met": True}
        ],
    },
}

PENGUIN_BLOCK = """\
| scenario | raw TFX s | Conveyor s | ratio | raw peak MiB | Conveyor peak MiB | ratio |
|---|---:|---:|---:|---:|---:|---:|
| cold | 100.0 (98.2-111.0) | 25.0 (22.0-26.4) | 0.25 | 1,066 | 883 | 0.83 |
| unchanged re-run | 24.7 | 0.5 (0.4-0.6) | 0.02 | 980 | 43 | 0.04 |
| `conveyor --help` |  | 0.28 |  |  |  |  |

- cold run at most 0.25 of raw TFX's wall time: 0.25, **met**

Measured at commit `0123456` on 2030-01-02 03:04:05 UTC with \
`.venv/bin/python bench/bench_penguin.py --repeats 3`; 2 cores, 23.5 GiB, AMD EPYC, \
Linux-6.1-x86_64-with-glibc2.36, Python 3.10.13; load average at the end 0.80.
"""


def test_a_results_file_renders_into_its_table():
    assert report.render_block("penguin", {"penguin": PENGUIN}) == PENGUIN_BLOCK


def test_only_the_text_between_markers_is_rewritten():
    text = (
        "before\n<!-- bench:penguin:start -->\nold figures\n<!-- bench:penguin:end -->\n"
        "after\n<!-- bench:trainer:start -->\n<!-- bench:trainer:end -->\n"
    )
    rendered = report.render_document(text, {"penguin": PENGUIN})
    assert rendered == (
        f"before\n<!-- bench:penguin:start -->\n{PENGUIN_BLOCK}<!-- bench:penguin:end -->\n"
        "after\n<!-- bench:trainer:start -->\n"
        "No results yet: `make bench-trainer` writes `bench/results/trainer.json`.\n"
        "<!-- bench:trainer:end -->\n"
    )
    assert report.render_document(rendered, {"penguin": PENGUIN}) == rendered


def test_the_summary_gives_each_benchmark_a_row_with_its_commit_or_its_command():
    summary = report.render_block("summary", {"penguin": PENGUIN})
    assert (
        "| penguin pipeline, Conveyor beside raw TFX | cold run 0.25 of raw TFX's wall time "
        "(25.0 s against 100.0 s); unchanged re-run 0.5 s against 24.7 s | `0123456`, 2 cores |"
    ) in summary
    assert "| trainer examples/s by distribution | no results yet (`make bench-trainer`) |  |" in (
        summary
    )
    assert summary.startswith("| benchmark | figures (medians) | measured at |\n")
    assert summary.count("\n| ") == len(report.SLOTS)  # one row per slot


def test_a_results_file_of_another_format_is_refused(tmp_path):
    (tmp_path / "penguin.json").write_text(json.dumps({**PENGUIN, "format": 0}))
    with pytest.raises(SystemExit, match="not a results file this script reads"):
        report.load_results(tmp_path)


@pytest.mark.parametrize("document", report.DOCUMENTS, ids=lambda path: path.name)
def test_the_committed_tables_are_what_the_results_render(document):
    text = document.read_text()
    assert report.MARKERS.search(text), f"{document.name} has no benchmark table markers"
    assert text == report.render_document(text, report.load_results()), (
        f"the benchmark tables of {document.name} are stale: run `make bench-report`"
    )


def _spread(median):
    return {"median": median, "min": median, "max": median}


def test_a_nightly_results_file_renders_each_tool_with_its_ratio_to_raw_tfx():
    def tool(wall, steps):
        return {
            "wall_seconds": _spread(wall),
            "pipeline_seconds": _spread(wall - 10),
            "peak_rss_mib": _spread(1000.0),
            "steps": {step: _spread(seconds) for step, seconds in steps.items()},
            "evaluator_share": steps["evaluator"] / wall,
            "outcomes": ["PUSHED"],
            "paused_seconds": [0.0],
        }

    nightly = {
        **PENGUIN,
        "benchmark": "nightly",
        "figures": {
            "sizes": {
                "1000000": {
                    "tools": {
                        "raw TFX": tool(800.0, {"evaluator": 400.0}),
                        "Conveyor": tool(64.0, {"evaluator": 16.0, "infra validator": 2.0}),
                    },
                    "wall_ratio_to_raw": {"Conveyor": 0.08},
                }
            },
            "growth": None,
            "aims": [{"what": "the Evaluator at most 30%", "value": 0.25, "met": True}],
        },
    }
    block = report.render_block("nightly", {"nightly": nightly})
    assert "| night two, 1,000,000 rows | raw TFX | Conveyor |" in block
    assert "| infra validator | - | 2.0 |" in block
    assert "| **whole process, wall** | **800.0** | **64.0** (0.08x raw TFX's) |" in block
    assert "| evaluator's share of the wall time | 50% | 25% |" in block
    assert "- the Evaluator at most 30%: 0.25, **met**" in block
    assert "1,000,000 rows: 64.0 s against raw TFX's 800.0 s (0.08x)" in report.headline(nightly)


def test_a_bucket_results_file_renders_each_pipeline_with_its_ratio_and_floor():
    def store(wall, peak, requests=None):
        return {
            "wall_seconds": {"median": wall, "min": wall - 1.0, "max": wall + 2.0},
            "peak_rss_mib": _spread(peak),
            "pipeline_seconds": _spread(wall - 5),
            "steps": {"evaluator": _spread(5.0)},
            "outcomes": ["PUSHED"],
            "paused_seconds": [0.0],
            "s3_requests": None if requests is None else _spread(requests),
        }

    bucket = {
        **PENGUIN,
        "benchmark": "bucket",
        "settings": {
            "repeats": 3,
            "taxi_rows": 1000000,
            "taxi_night": "2026-11-23",
            "profiles": {"penguin": "local", "taxi": "large"},
            "emulator": "moto_server 5.2.5 on 127.0.0.1",
            "floor": 1.5,
        },
        "figures": {
            "pipelines": {
                "penguin": {
                    "label": "penguin",
                    "local": store(40.0, 960.0),
                    "bucket": store(50.0, 1090.0, 1200.0),
                    "wall_ratio": 1.25,
                },
                "taxi": {
                    "label": "taxi night, 1,000,000 rows",
                    "local": store(100.0, 1500.0),
                    "bucket": store(160.0, 1600.0, 2500.0),
                    "wall_ratio": 1.6,
                },
            },
            "aims": [],
        },
    }
    block = report.render_block("bucket", {"bucket": bucket})
    assert (
        "| pipeline | local s | bucket s | bucket / local | floor 1.5x | local peak MiB | "
        "bucket peak MiB | S3 requests |"
    ) in block
    assert (
        "| penguin | 40.0 (39.0-42.0) | 50.0 (49.0-52.0) | **1.25x** | met | 960 | 1,090 | 1,200 |"
    ) in block
    assert (
        "| taxi night, 1,000,000 rows | 100.0 (99.0-102.0) | 160.0 (159.0-162.0) | **1.60x** | "
        "**missed** | 1,500 | 1,600 | 2,500 |"
    ) in block
    assert "profiles: penguin `local`, taxi `large`" in block
    assert report.headline(bucket).startswith(
        "penguin 1.25x the local run's wall time (50.0 s against 40.0 s); taxi night"
    )


def test_a_serving_results_file_judges_the_floors_against_the_limit_and_keeps_tf_api():
    def side(p50_ms, requests_per_s):
        return {
            "p50_ms": _spread(p50_ms),
            "p99_ms": _spread(p50_ms * 2),
            "requests_per_s": _spread(requests_per_s),
        }

    def cell(batch, clients, limit, tf_api, server):
        sides = {"signature": side(*limit), "tf_api": side(*tf_api), "server x2": side(*server)}
        ratios = {
            reference: {
                "server x2": {
                    "p50": server[0] / figures[0],
                    "p99": server[0] / figures[0],
                    "requests_per_s": server[1] / figures[1],
                }
            }
            for reference, figures in (("signature", limit), ("tf_api", tf_api))
        }
        return {"batch": batch, "clients": clients, "servers": ["server x2"], **sides,
                "ratios": ratios}  # fmt: skip

    serving = {
        **PENGUIN,
        "benchmark": "serving",
        "figures": {
            "load_generator": "wrk",
            "limit": "signature",
            "references": {"signature": "the server's own call", "tf_api": "TensorFlow's API"},
            "cells": [
                cell(1, 1, (0.1, 9000.0), (0.4, 2200.0), (0.5, 2000.0)),
                cell(1, 8, (0.1, 12000.0), (3.0, 2200.0), (3.5, 8000.0)),
            ],
            "floors": [
                {
                    "what": "p50 at batch 1, 1 client(s), server x2 / signature <= 3",
                    "reference": "signature",
                    "value": 5.0,
                    "met": False,
                },
                {
                    "what": "req/s at batch 1, 8 clients, server x2 / signature >= 0.6",
                    "reference": "signature",
                    "value": 0.67,
                    "met": True,
                },
            ],  # fmt: skip
            "breakdown": {
                "1": {"rows": [["JSON parse", 0.8], ["signature call", 110.0]]},
                "64": {"rows": [["JSON parse", 24.0], ["signature call", 180.0]]},
            },
        },
    }
    block = report.render_block("serving", {"serving": serving})
    assert "| batch | clients | figure | signature (the limit) | TF API | server x2 |" in block
    assert "| 1 | 1 | p50 ms | 0.10 | 0.40 | 0.50 |" in block
    assert (
        "| batch | clients | server | p50 / signature (the limit) | p50 / TF API | "
        "req/s / signature (the limit) | req/s / TF API |"
    ) in block
    assert "| 1 | 8 | server x2 | 35.00x | 1.17x | 67% | 364% |" in block
    assert "| floor, against the limit | value | verdict |" in block
    assert "| req/s at batch 1, 8 clients, server x2 / signature >= 0.6 | 0.67 | **met** |" in block
    assert "| one request, microseconds | batch 1 | batch 64 |" in block
    assert "| signature call | 110.0 | 180.0 |" in block
    assert report.headline(serving) == (
        "batch-1 p50 5.00x the signature's call (1.25x the TF API call); 8 clients, server x2: "
        "67% at batch 1 of its req/s; floors met: 1 of 2"
    )
