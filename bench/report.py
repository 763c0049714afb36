"""The benchmark tables of bench/README.md and README.md, generated from bench/results/*.json.

    .venv/bin/python bench/report.py      (or: make bench-report)

Each benchmark script writes its figures to a results file (bench/results_file.py): the commit,
the date, the command, the machine, the settings and the measured figures. This script renders
those files into Markdown and rewrites what stands between a pair of marker comments in the two
READMEs:

    <!-- bench:NAME:start -->
    ...generated...
    <!-- bench:NAME:end -->

NAME is a results file's name without `.json` (`penguin`, `nightly-scale`, ...), or `summary`
for the front door's one table over all of them. A table ends with the commit, date, command
and machine it was measured on; a benchmark without a results file shows one line saying so and
which command writes it. Nothing between the markers is written by hand:
tests/unit/test_bench_report.py fails when the committed READMEs differ from what this writes.

Standard library only, and no import of the benchmark scripts, so a test can load it from its
file (tests/unit/test_bench_report.py).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
DOCUMENTS = (REPO_ROOT / "README.md", REPO_ROOT / "bench" / "README.md")
FORMAT_VERSION = 1  # results_file.FORMAT_VERSION: the layout this script reads

# Every table slot: its results file's name, what the benchmark is (for the front door's
# summary), and the command that writes the file. The order is the summary's.
SLOTS: dict[str, tuple[str, str]] = {
    "penguin": (
        "penguin pipeline, Conveyor beside raw TFX",
        'make bench BENCH_ARGS="--repeats 3"',
    ),
    "bucket": (
        "penguin and a taxi night in an emulated S3 bucket, beside local disk",
        'make bench BENCH_ARGS="--repeats 3"',
    ),
    "datapath": ("data path at scale, beside raw TFX", "make bench-data"),
    "nightly": ("one taxi night, beside raw TFX", "make bench-nightly"),
    "nightly-scale": (
        "a taxi night at 1M and 10M rows, Conveyor alone",
        'make bench-nightly BENCH_ARGS="--rows 1000000 10000000 --no-raw-tfx '
        '--no-like-for-like --results bench/results/nightly-scale.json"',
    ),
    "trainer": ("trainer examples/s by distribution", "make bench-trainer"),
    "serving": (
        "model server :predict against the signature's own call",
        'make bench-serving BENCH_ARGS="--workers 1 2 --server-threads 1 1"',
    ),
    "evaluator": (
        "Evaluator executor, TFMA against the vectorized engine",
        ".venv/bin/python bench/bench_evaluator.py WORKDIR",
    ),
    "gpu": ("the gpu profile's examples/s", "make gpu-check"),
    "infer": (
        "batch inference (`conveyor infer`) against a Python loop over the rows",
        ".venv/bin/python bench/bench_infer.py",
    ),
    "warm_start": (
        "a week of taxi nights, warm start against training from scratch",
        "make bench-warm-start",
    ),
}
SUMMARY = "summary"
MARKERS = re.compile(
    r"(<!-- bench:(?P<name>[\w-]+):start -->\n)(?P<body>.*?)(<!-- bench:(?P=name):end -->)",
    re.DOTALL,
)


# --- numbers -------------------------------------------------------------------------------------


def number(value: float | None, digits: int = 1) -> str:
    """A figure with thousands separators; "-" when it was not measured."""
    return "-" if value is None else f"{value:,.{digits}f}"


def spread(figure: dict[str, float], digits: int = 1) -> str:
    """A median with its min-max in brackets, the min-max left out when they are the median."""
    median = number(figure["median"], digits)
    low, high = number(figure["min"], digits), number(figure["max"], digits)
    return median if low == high == median else f"{median} ({low}-{high})"


def ranged(median: float, bounds: list[float] | None, digits: int = 1) -> str:
    """A median and a [min, max] pair, as spread() writes them."""
    if not bounds:
        return number(median, digits)
    return spread({"median": median, "min": bounds[0], "max": bounds[1]}, digits)


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def table(header: list[str], rows: list[list[str]], align: str = "") -> list[str]:
    """A Markdown table; `align` has one letter per column, "r" for a right-aligned one."""
    marks = ["---:" if align[i : i + 1] == "r" else "---" for i in range(len(header))]
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(marks) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _aim_value(value: float) -> str:
    """A ratio to two decimals; a small difference (an accuracy's) to four, signed."""
    return f"{value:+.4f}" if abs(value) < 0.1 else f"{value:.2f}"


def aims(document: dict) -> list[str]:
    """One line per aim or floor the script checked: what, the value, met or not."""
    return [
        f"- {aim['what']}: {_aim_value(aim['value'])}, **{'met' if aim['met'] else 'missed'}**"
        for aim in document["figures"].get("aims", [])
    ]


# --- one renderer per benchmark ------------------------------------------------------------------


def render_penguin(document: dict) -> list[str]:
    figures = document["figures"]
    rows = []
    for row in figures["scenarios"].values():
        rows.append(
            [
                row["label"],
                ranged(row["raw_seconds"], row.get("raw_seconds_range")),
                ranged(row["conveyor_seconds"], row.get("conveyor_seconds_range")),
                f"{row['seconds_ratio']:.2f}",
                number(row["raw_peak_mib"], 0),
                number(row["conveyor_peak_mib"], 0),
                f"{row['peak_ratio']:.2f}",
            ]
        )
    help_seconds = figures["conveyor_help"]["median_seconds"]
    rows.append(["`conveyor --help`", "", f"{help_seconds:.2f}", "", "", "", ""])
    header = ["scenario", "raw TFX s", "Conveyor s", "ratio", "raw peak MiB"]
    header += ["Conveyor peak MiB", "ratio"]
    return table(header, rows, "lrrrrrr") + ["", *aims(document)]


def render_bucket(document: dict) -> list[str]:
    rows = []
    floor = document["settings"]["floor"]
    for row in document["figures"]["pipelines"].values():
        local, bucket = row["local"], row["bucket"]
        rows.append(
            [
                row["label"],
                spread(local["wall_seconds"]),
                spread(bucket["wall_seconds"]),
                f"**{times(row['wall_ratio'])}**",
                "met" if row["wall_ratio"] <= floor else "**missed**",
                spread(local["peak_rss_mib"], 0),
                spread(bucket["peak_rss_mib"], 0),
                spread(bucket["s3_requests"], 0) if bucket.get("s3_requests") else "-",
            ]
        )
    header = ["pipeline", "local s", "bucket s", "bucket / local", f"floor {floor:g}x"]
    header += ["local peak MiB", "bucket peak MiB", "S3 requests"]
    settings = document["settings"]
    profiles = ", ".join(f"{name} `{profile}`" for name, profile in settings["profiles"].items())
    return table(header, rows, "lrrrlrrr") + [
        "",
        f"Cold runs, medians (min-max) of {settings['repeats']}; profiles: {profiles}; the "
        f"bucket: {settings['emulator']}.",
    ]


def render_datapath(document: dict) -> list[str]:
    rows = []
    for size in document["figures"]["sizes"]:
        for tool, label in (("raw", "raw TFX"), ("conveyor", "Conveyor")):
            figures = size[tool]
            if figures is None:
                continue
            rows.append(
                [
                    f"{size['rows']:,}",
                    label,
                    ranged(figures["wall_seconds"], figures.get("wall_seconds_range")),
                    number(figures["rows_per_second"], 0),
                    number(figures["pipeline_seconds"]),
                    number(figures["peak_rss_mib"], 0),
                    number(figures["tree_peak_pss_mib"], 0),
                ]
            )
        if size["raw"] is not None:
            rows.append(
                [
                    "",
                    "raw / Conveyor",
                    f"**{times(size['wall_ratio'])}**",
                    "",
                    times(size["pipeline_ratio"]),
                    times(size["peak_ratio"]),
                    times(size["tree_peak_ratio"]),
                ]
            )
    header = ["rows", "tool", "wall s", "rows/s (wall)", "pipeline s", "max RSS MiB"]
    header.append("tree PSS MiB")
    lines = table(header, rows, "rlrrrrr")
    scale = document["figures"].get("scaling")
    if scale:
        lines.append("")
        for tool, label in (("raw", "raw TFX"), ("conveyor", "Conveyor")):
            if tool in scale:
                growth = scale[tool]
                lines.append(
                    f"- {label}, {scale['rows_factor']:g}x the rows ({scale['from_rows']:,} to "
                    f"{scale['to_rows']:,}): {times(growth['time_factor'])} the wall time, "
                    f"{times(growth['memory_factor'])} the peak memory"
                )
    return lines


def render_trainer(document: dict) -> list[str]:
    rows = [
        [
            row["label"],
            ranged(row["examples_per_second"], row.get("examples_per_second_range"), 0),
            f"{row['ratio_vs_baseline']:.2f}",
            number(row["peak_rss_mib"], 0),
            f"{row['final_loss']:.4f}",
        ]
        for row in document["figures"]["configurations"].values()
    ]
    header = ["configuration", "examples/s", "vs 1 device", "peak RSS MiB", "final loss"]
    return table(header, rows, "lrrrr")


def render_nightly(document: dict) -> list[str]:
    figures = document["figures"]
    lines: list[str] = []
    for rows, size in figures["sizes"].items():
        tools = size["tools"]
        ratios = size.get("wall_ratio_to_raw", {})
        header = [f"night two, {int(rows):,} rows", *tools]
        steps = list(dict.fromkeys(step for tool in tools.values() for step in tool["steps"]))
        body = []
        for step in steps:
            body.append(
                [
                    f"{step}",
                    *(
                        spread(t["steps"][step]) if step in t["steps"] else "-"
                        for t in tools.values()
                    ),
                ]
            )
        body.append(
            ["pipeline (components)", *(spread(t["pipeline_seconds"]) for t in tools.values())]
        )
        body.append(
            [
                "**whole process, wall**",
                *(
                    f"**{spread(t['wall_seconds'])}**"
                    + (f" ({times(ratios[name])} raw TFX's)" if name in ratios else "")
                    for name, t in tools.items()
                ),
            ]
        )
        body.append(["peak memory, MiB", *(spread(t["peak_rss_mib"], 0) for t in tools.values())])
        body.append(
            [
                "evaluator's share of the wall time",
                *(percent(t["evaluator_share"]) for t in tools.values()),
            ]
        )
        body.append(["outcomes", *(", ".join(t["outcomes"]) for t in tools.values())])
        if lines:
            lines.append("")
        lines += table(header, body, "l" + "r" * len(tools))
    growth = figures.get("growth")
    if growth:
        lines.append("")
        factors = ", ".join(
            f"{name} {times(value)}" for name, value in growth["wall_factor"].items()
        )
        lines.append(
            f"{growth['rows_factor']:g}x the rows ({growth['from_rows']:,} to "
            f"{growth['to_rows']:,}), wall time of the medians: {factors}."
        )
    found = aims(document)
    return lines + (["", *found] if found else [])


SERVING_SIDE_LABELS = {"signature": "signature (the limit)", "tf_api": "TF API"}


def render_serving(document: dict) -> list[str]:
    """The sides' figures, the servers' ratios to both in-process sides, the floors (judged
    against the limit) and where one request's time goes."""
    figures = document["figures"]
    cells = figures["cells"]
    references = list(figures["references"])
    servers = cells[0]["servers"]
    sides = [*references, *servers]
    header = ["batch", "clients", "figure", *(SERVING_SIDE_LABELS.get(s, s) for s in sides)]
    rows = []
    for cell in cells:
        for key, label, digits in (("p50_ms", "p50 ms", 2), ("requests_per_s", "req/s", 0)):
            rows.append(
                [str(cell["batch"]), str(cell["clients"]), label]
                + [spread(cell[side][key], digits) for side in sides]
            )
    lines = table(header, rows, "rrl" + "r" * len(sides))
    lines += [
        "",
        *(
            f"- {SERVING_SIDE_LABELS.get(side, side)}: {what}"
            for side, what in figures["references"].items()
        ),
    ]
    lines.append(f"- load generator: {figures['load_generator']}")
    lines.append("")
    ratio_header = ["batch", "clients", "server"]
    for key in ("p50", "req/s"):
        ratio_header += [f"{key} / {SERVING_SIDE_LABELS.get(r, r)}" for r in references]
    ratio_rows = []
    for cell in cells:
        for server in servers:
            ratios = [cell["ratios"][reference][server] for reference in references]
            ratio_rows.append(
                [str(cell["batch"]), str(cell["clients"]), server]
                + [times(r["p50"]) for r in ratios]
                + [percent(r["requests_per_s"]) for r in ratios]
            )
    lines += table(ratio_header, ratio_rows, "rrl" + "r" * 2 * len(references))
    lines.append("")
    lines += table(
        ["floor, against the limit", "value", "verdict"],
        [
            [floor["what"], f"{floor['value']:.2f}", "**met**" if floor["met"] else "missed"]
            for floor in figures["floors"]
        ],
        "lrl",
    )
    breakdown = figures.get("breakdown")
    if breakdown:
        batches = list(breakdown)
        steps = [what for what, _ in breakdown[batches[0]]["rows"]]
        by_batch = {batch: dict(breakdown[batch]["rows"]) for batch in batches}
        lines.append("")
        lines += table(
            ["one request, microseconds", *(f"batch {batch}" for batch in batches)],
            [[step, *(number(by_batch[b].get(step), 1) for b in batches)] for step in steps],
            "l" + "r" * len(batches),
        )
    return lines


def render_evaluator(document: dict) -> list[str]:
    seconds = document["figures"]["seconds"]
    lines = table(
        ["engine", "executor seconds, median (min-max)"],
        [[engine, spread(figure, 2)] for engine, figure in seconds.items()],
        "lr",
    )
    if document["figures"].get("same_metrics_and_validation"):
        lines += ["", "Both engines wrote the same metrics and validation result."]
    return lines


def render_gpu(document: dict) -> list[str]:
    figures = document["figures"]
    rows = [
        [
            name,
            number(s["examples_per_second"], 0),
            str(s["replicas"]),
            s["precision"],
            str(s["jit_compile"]),
            number(s["run_seconds"]),
        ]
        for name, s in figures["pipelines"].items()
    ]
    lines = table(
        ["pipeline", "examples/s", "replicas", "precision", "XLA", "run s"], rows, "lrrllr"
    )
    return lines + ["", f"GPUs: {figures['gpus']}"]


INFER_TOOL_LABELS = {"beam": "conveyor infer (Beam)", "loop": "Python loop, one row a call"}


def render_infer(document: dict) -> list[str]:
    """Both tools' wall time, rows/s and peak memory, and the floor."""
    tools = document["figures"]["tools"]
    rows = [
        [
            INFER_TOOL_LABELS.get(tool, tool),
            spread(figures["wall_seconds"]),
            number(figures["rows_per_second"], 0),
            spread(figures["peak_rss_mib"], 0),
        ]
        for tool, figures in tools.items()
    ]
    lines = table(["tool", "wall s", "rows/s", "peak RSS MiB"], rows, "lrrr")
    return [f"{document['settings']['rows']:,} rows:", "", *lines, "", *aims(document)]


def render_warm_start(document: dict) -> list[str]:
    """Each night's accuracy by chain, the differences with their intervals, the seconds."""
    settings, figures = document["settings"], document["figures"]

    def gap(figure: dict) -> str:
        return f"{figure['value']:+.4f} [{figure['low']:+.4f}, {figure['high']:+.4f}]"

    rows = [
        [
            str(night["night"]),
            str(night["spans"]),
            f"{night['scratch']['accuracy']:.4f}",
            f"{night['warm']['accuracy']:.4f}",
            gap(night["warm_minus_scratch"]),
            gap(night["noise_minus_scratch"]),
            f"{night['scratch']['fit_seconds']:.1f} / {night['scratch']['seconds']:.1f} "
            f"({night['scratch']['steps']})",
            f"{night['warm']['fit_seconds']:.1f} / {night['warm']['seconds']:.1f} "
            f"({night['warm']['steps']})",
        ]
        for night in figures["per_night"]
    ]
    header = [
        "night",
        "spans",
        "scratch acc.",
        "warm acc.",
        "warm - scratch [95%]",
        "noise - scratch [95%]",
        "scratch fit / call s (steps)",
        "warm fit / call s (steps)",
    ]
    lines = table(header, rows, "rrrrrrrr")
    intro = (
        f"{settings['rows']:,} rows a night, {settings['nights']} nights, a window of "
        f"{settings['window_spans']} spans, {settings['train_steps']} steps from scratch and "
        f"{settings['warm_start_step_fraction']:g} of them warm:"
    )
    call = f"- the whole `train` call, scratch / warm: {times(figures['call_speedup'])}"
    return [intro, "", *lines, "", *aims(document), call]


RENDERERS: dict[str, Callable[[dict], list[str]]] = {
    "penguin": render_penguin,
    "bucket": render_bucket,
    "datapath": render_datapath,
    "trainer": render_trainer,
    "nightly": render_nightly,
    "serving": render_serving,
    "evaluator": render_evaluator,
    "gpu": render_gpu,
    "infer": render_infer,
    "warm_start": render_warm_start,
}


# --- where the figures come from -----------------------------------------------------------------


def short_commit(document: dict) -> str:
    commit = document.get("commit")
    if not commit:
        return "an unknown commit"
    return f"`{commit[:7]}`" + (" with uncommitted changes" if document.get("dirty") else "")


def machine_text(machine: dict) -> str:
    memory = machine.get("memory_gib")
    parts = [f"{machine['cores']} cores", f"{memory:g} GiB" if memory else None]
    parts += [machine.get("cpu_model"), machine.get("os"), f"Python {machine.get('python')}"]
    return ", ".join(part for part in parts if part)


def provenance(document: dict) -> str:
    """The line under a table: commit, date, command, machine and its load at the end."""
    machine = document["machine"]
    date = document["date"].replace("T", " ").replace("+00:00", " UTC")
    load = machine.get("load_average_at_end")
    loaded = f"; load average at the end {load[0]:.2f}" if load else ""
    return (
        f"Measured at commit {short_commit(document)} on {date} with `{document['command']}`; "
        f"{machine_text(machine)}{loaded}."
    )


def missing(name: str) -> str:
    return f"No results yet: `{SLOTS[name][1]}` writes `bench/results/{name}.json`."


# --- the front door's summary --------------------------------------------------------------------


def headline(document: dict) -> str:
    """The one figure or two the front door gives for a benchmark."""
    figures, kind = document["figures"], document["benchmark"]
    if kind == "penguin":
        cold, rerun = figures["scenarios"]["cold"], figures["scenarios"]["rerun"]
        return (
            f"cold run {cold['seconds_ratio']:.2f} of raw TFX's wall time "
            f"({cold['conveyor_seconds']:.1f} s against {cold['raw_seconds']:.1f} s); unchanged "
            f"re-run {rerun['conveyor_seconds']:.1f} s against {rerun['raw_seconds']:.1f} s"
        )
    if kind == "bucket":
        return "; ".join(
            f"{row['label']} {times(row['wall_ratio'])} the local run's wall time "
            f"({row['bucket']['wall_seconds']['median']:.1f} s against "
            f"{row['local']['wall_seconds']['median']:.1f} s)"
            for row in figures["pipelines"].values()
        )
    if kind == "datapath":
        return "; ".join(
            f"{size['rows']:,} rows: {times(size['wall_ratio'])} faster, peak "
            f"{number(size['conveyor']['peak_rss_mib'], 0)} MiB against "
            f"{number(size['raw']['peak_rss_mib'], 0)}"
            if size["raw"]
            else f"{size['rows']:,} rows: {size['conveyor']['wall_seconds']:.1f} s"
            for size in figures["sizes"]
        )
    if kind == "nightly":
        parts = []
        for rows, size in figures["sizes"].items():
            tools = size["tools"]
            conveyor = tools["Conveyor"]["wall_seconds"]["median"]
            text = f"{int(rows):,} rows: {conveyor:.1f} s"
            if "raw TFX" in tools:
                raw = tools["raw TFX"]["wall_seconds"]["median"]
                text += f" against raw TFX's {raw:.1f} s ({times(conveyor / raw)})"
            parts.append(text)
        growth = figures.get("growth")
        if growth:
            parts.append(
                f"{growth['rows_factor']:g}x the rows cost "
                f"{times(growth['wall_factor']['Conveyor'])} the night"
            )
        return "; ".join(parts)
    if kind == "trainer":
        others = list(figures["configurations"].values())[1:]  # the first is the baseline
        ratios = "; ".join(f"{row['label']} {row['ratio_vs_baseline']:.2f}x" for row in others)
        return f"examples/s against one device: {ratios}"
    if kind == "serving":
        return serving_headline(figures)
    if kind == "evaluator":
        return ", ".join(
            f"{engine} {figure['median']:.1f} s" for engine, figure in figures["seconds"].items()
        )
    if kind == "infer":
        tools = figures["tools"]
        return (
            f"{document['settings']['rows']:,} rows: {times(figures['speedup'])} faster than the "
            f"loop ({tools['beam']['wall_seconds']['median']:.1f} s against "
            f"{tools['loop']['wall_seconds']['median']:.1f} s)"
        )
    if kind == "warm_start":
        return (
            f"accuracy warm - scratch {figures['median_warm_minus_scratch']:+.4f} (median; two "
            f"scratch trainings differ by up to {figures['widest_noise']:.4f}), training "
            f"{times(figures['fit_speedup'])} faster"
        )
    if kind == "gpu":
        return ", ".join(
            f"{name} {s['examples_per_second']:,.0f} examples/s"
            for name, s in figures["pipelines"].items()
        )
    return ""


def serving_headline(figures: dict) -> str:
    """The server against the limit (and TF's API): p50 at batch 1 with one client (one worker),
    requests/s with the most clients at each batch size (the most workers), floors met."""
    limit = figures["limit"]
    others = [reference for reference in figures["references"] if reference != limit]
    cells = figures["cells"]
    servers = [side for side in cells[0]["servers"] if not side.endswith("+b")]
    servers = servers or cells[0]["servers"]
    single, widest = servers[0], servers[-1]
    most = max(cell["clients"] for cell in cells)
    parts = []
    for cell in cells:
        if cell["batch"] == 1 and cell["clients"] == 1:
            ratios = cell["ratios"]
            text = f"batch-1 p50 {times(ratios[limit][single]['p50'])} the signature's call"
            for other in others:
                label = SERVING_SIDE_LABELS.get(other, other)
                text += f" ({times(ratios[other][single]['p50'])} the {label} call)"
            parts.append(text)
    shares = [
        f"{percent(cell['ratios'][limit][widest]['requests_per_s'])} at batch {cell['batch']}"
        for cell in cells
        if cell["clients"] == most
    ]
    if shares:
        parts.append(f"{most} clients, {widest}: {', '.join(shares)} of its req/s")
    met = sum(floor["met"] for floor in figures["floors"])
    parts.append(f"floors met: {met} of {len(figures['floors'])}")
    return "; ".join(parts)


def render_summary(documents: dict[str, dict]) -> list[str]:
    rows = []
    for name, (what, command) in SLOTS.items():
        document = documents.get(name)
        if document is None:
            rows.append([what, f"no results yet (`{command}`)", ""])
        else:
            cores = document["machine"]["cores"]
            rows.append([what, headline(document), f"{short_commit(document)}, {cores} cores"])
    lines = table(["benchmark", "figures (medians)", "measured at"], rows)
    lines += [
        "",
        "Dates, commands, machines and the full tables: [bench/README.md](bench/README.md).",
    ]
    return lines


# --- reading and writing -------------------------------------------------------------------------


def load_results(results_dir: Path = RESULTS_DIR) -> dict[str, dict]:
    """Every results file under `results_dir`, by name (the file's name without `.json`).

    Raises:
        SystemExit: a file is of another format version or an unknown benchmark.
    """
    documents = {}
    for path in sorted(results_dir.glob("*.json")):
        document = json.loads(path.read_text())
        if document.get("format") != FORMAT_VERSION or document.get("benchmark") not in RENDERERS:
            raise SystemExit(
                f"{path}: not a results file this script reads (format {FORMAT_VERSION}, "
                f"benchmark one of {', '.join(RENDERERS)}); run its benchmark again"
            )
        documents[path.stem] = document
    return documents


def render_block(name: str, documents: dict[str, dict]) -> str:
    """What stands between one pair of markers."""
    if name == SUMMARY:
        lines = render_summary(documents)
    elif name not in documents:
        if name not in SLOTS:
            raise SystemExit(f"no results file and no command known for <!-- bench:{name} -->")
        lines = [missing(name)]
    else:
        document = documents[name]
        lines = [*RENDERERS[document["benchmark"]](document), "", provenance(document)]
    return "\n".join(lines) + "\n"


def render_document(text: str, documents: dict[str, dict]) -> str:
    """A document with every marked block rewritten from the results."""
    return MARKERS.sub(
        lambda found: (
            found.group(1) + render_block(found.group("name"), documents) + found.group(4)
        ),
        text,
    )


def main(argv: list[str] | None = None) -> int:
    documents = load_results()
    for path in DOCUMENTS:
        text = path.read_text()
        rendered = render_document(text, documents)
        if rendered != text:
            path.write_text(rendered)
            print(f"rewrote the benchmark tables of {path.relative_to(REPO_ROOT)}")
    print(f"from {len(documents)} results file(s) under bench/results/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
