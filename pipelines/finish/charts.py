"""Charts for the run report and the history page: matplotlib figures as inline SVG.

Each function takes plain numbers and returns one `<svg>` element as text, ready to be put in a
page as it is (no scripts, no external references, so the page stays one mailable file), or
None when there is nothing to draw. A chart that cannot be drawn is None too, never an error:
a picture is a view of the run, never a reason to lose the page.

The SVG is kept small: text stays text (`svg.fonttype: none`: the browser's own sans-serif, no
glyph outlines), the XML prolog and matplotlib's metadata are dropped, and every `id` (clip
paths, markers) is prefixed with the chart's own, so that many charts in one page never refer
to each other's definitions.

matplotlib is imported when the first chart is drawn, never when this module is imported:
`conveyor --help` and the report's module stay quick to import.
"""

from __future__ import annotations

import io
import itertools
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# One palette for every chart, so that a colour means the same thing on every page (and the
# browser test can find the charts in a screenshot by these colours).
TRAIN = "#1f77b4"
EVAL = "#ff7f0e"
REFERENCE = "#6b6b6b"
CANDIDATE = "#1f77b4"
BASELINE = "#a6a6a6"
THRESHOLD = "#d62728"
SPLIT_COLOURS = {"train": TRAIN, "eval": EVAL}
OTHER_SPLITS = ("#2ca02c", "#9467bd", "#8c564b")
STATE_COLOURS = {"executed": "#1f77b4", "cached": "#a6a6a6", "resolved": "#c7c7c7"}
FAILED = "#d62728"
OUTCOME_COLOURS = {
    "pushed": "#2e9d4f",
    "not_pushed": "#e0a800",
    "blocked": "#d62728",
    "failed": "#7f1d1d",
}
SERIES_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
)

WIDTH_INCHES = 3.4  # a distribution: three to a row of the report
WIDE_INCHES = 7.2  # a chart across the page
RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "conveyor",  # deterministic clip-path ids
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # one name in each text's style, not matplotlib's ten
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#8a939e",
    "axes.labelcolor": "#1d232b",
    "xtick.color": "#4a5563",
    "ytick.color": "#4a5563",
    "legend.fontsize": 7,
    "legend.frameon": False,
    "path.simplify": True,
}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Histogram:
    """One series of a numeric distribution: `edges` (n + 1 bucket bounds) and `counts` (n)."""

    label: str
    edges: Sequence[float]
    counts: Sequence[float]
    reference: bool = False  # the drift reference: drawn dashed and grey


@dataclass(frozen=True)
class Frequencies:
    """One series of a categorical distribution: value -> share of the rows (0..1)."""

    label: str
    shares: dict[str, float]
    reference: bool = False


class ChartRenderer:
    """Draws the charts of one page; each chart's ids carry the page's `prefix` and a number,
    so no two SVG elements of the page share an id."""

    def __init__(self, prefix: str = "c"):
        self._prefix = prefix
        self._numbers = itertools.count(1)

    def draw(
        self,
        title: str,
        width: float,
        height: float,
        plot: Callable,
        margins: dict[str, float] | None = None,
    ) -> str | None:
        """Runs `plot(figure, axes)` on a new figure and returns it as SVG, or None when `plot`
        returns False or raises (the failure is logged, never raised).

        `margins` (subplots_adjust's fractions) place the axes at once; without them the
        layout is fitted to the labels, which draws the figure one more time."""
        try:
            from matplotlib import rc_context
            from matplotlib.figure import Figure

            with rc_context(RC):
                figure = Figure(figsize=(width, height), dpi=72)
                axes = figure.add_subplot()
                if plot(figure, axes) is False:
                    return None
                if title:
                    axes.set_title(_short(title, 90), loc="left")
                if margins:
                    figure.subplots_adjust(**margins)
                else:
                    figure.tight_layout(pad=0.4)
                buffer = io.StringIO()
                figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        except Exception as err:  # a chart is a view: no chart, never a failed page
            log.warning("chart %r not drawn: %s: %s", title, type(err).__name__, err)
            return None
        return self._clean(buffer.getvalue(), title)

    def _clean(self, svg: str, title: str) -> str:
        prefix = f"{self._prefix}{next(self._numbers)}-"
        svg = svg[svg.index("<svg") :]
        svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
        # A <style> inside inline SVG would style the whole page: the page's CSS has this rule.
        svg = re.sub(r"<style[^>]*>.*?</style>\s*", "", svg, flags=re.S)
        # HTML needs no namespaces on inline SVG (and a page with no URLs in it stays so).
        svg = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg).replace("xlink:href=", "href=")
        referenced = set(re.findall(r'(?:url\(#|href="#)([^)"]+)', svg))
        # Only the ids something refers to are kept (most are matplotlib's labels for groups).
        svg = re.sub(
            r'\s+id="([^"]+)"',
            lambda m: f' id="{prefix}{m.group(1)}"' if m.group(1) in referenced else "",
            svg,
        )
        svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", svg)
        svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}{m.group(1)}"', svg)
        # Indentation and line breaks inside path data are only bytes: one space does.
        svg = re.sub(r">\s+<", "><", re.sub(r"\s*\n\s*", " ", svg)).replace("<defs></defs>", "")
        label = title.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
        return svg.replace("<svg ", f'<svg class="chart" role="img" aria-label="{label}" ', 1)

    # --- the run report ------------------------------------------------------------------------

    def distribution(self, feature: str, series: Sequence[Histogram]) -> str | None:
        """A numeric feature's distribution, one outline per split (the first one filled) and
        the drift reference dashed; densities, so that splits of different sizes and ranges
        compare. None when no series has a bucket of non-zero width."""
        usable = [s for s in series if _usable_histogram(s)]
        if not usable:
            return None

        def plot(figure, axes):
            filled = False
            for index, s in enumerate(usable):
                edges = [float(e) for e in s.edges]
                total = sum(s.counts) or 1.0
                density = [
                    c / total / (high - low) if high > low else 0.0
                    for c, low, high in zip(s.counts, edges, edges[1:], strict=False)
                ]
                colour = REFERENCE if s.reference else _split_colour(s.label, index)
                style = "--" if s.reference else "-"
                if not filled and not s.reference:
                    axes.stairs(density, edges, fill=True, color=colour, alpha=0.35, linewidth=0)
                    filled = True
                axes.stairs(density, edges, color=colour, linestyle=style, linewidth=1.2)
                axes.plot([], [], color=colour, linestyle=style, label=_short(s.label, 30))
            axes.set_yticks([])
            _few_ticks(axes.xaxis)
            axes.legend(loc="best")

        return self.draw(feature, WIDTH_INCHES, 1.9, plot)

    def top_values(self, feature: str, series: Sequence[Frequencies], limit: int = 8):
        """A categorical feature's most frequent values as bars, one bar per split (the drift
        reference grey) beside each other; None without values."""
        usable = [s for s in series if s.shares]
        if not usable:
            return None
        values: list[str] = []
        for s in usable:  # the first split's order, then values only the others have
            for value in sorted(s.shares, key=lambda v: -s.shares[v]):
                if value not in values and len(values) < limit:
                    values.append(value)

        def plot(figure, axes):
            height = 0.8 / len(usable)
            for index, s in enumerate(usable):
                colour = REFERENCE if s.reference else _split_colour(s.label, index)
                positions = [i + index * height for i in range(len(values))]
                shares = [s.shares.get(v, 0.0) for v in values]
                axes.barh(positions, shares, height=height, color=colour, label=_short(s.label, 30))
            axes.set_yticks([i + 0.4 - height / 2 for i in range(len(values))])
            axes.set_yticklabels([_short(v) for v in values])
            axes.invert_yaxis()
            axes.xaxis.set_major_formatter(_percent())
            _few_ticks(axes.xaxis, percent=True)
            axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))

        return self.draw(feature, WIDTH_INCHES, 0.9 + 0.22 * len(values), plot)

    def slice_metric(
        self,
        metric: str,
        slices: Sequence[tuple[str, float | None, float | None]],
        lower: float | None = None,
        upper: float | None = None,
    ) -> str | None:
        """One metric per slice: (slice, candidate, baseline) bars side by side, and the value
        thresholds as red lines; None when no slice has a candidate value."""
        rows = [row for row in slices if row[1] is not None]
        if not rows:
            return None
        with_baseline = any(row[2] is not None for row in rows)

        def plot(figure, axes):
            height = 0.4 if with_baseline else 0.7
            positions = list(range(len(rows)))
            axes.barh(positions, [r[1] for r in rows], height=height, color=CANDIDATE,
                      label="candidate")  # fmt: skip
            if with_baseline:
                axes.barh(
                    [p + height for p in positions],
                    [r[2] if r[2] is not None else 0.0 for r in rows],
                    height=height,
                    color=BASELINE,
                    label="baseline (served)",
                )
            for bound, word in ((lower, "lower bound"), (upper, "upper bound")):
                if bound is not None:
                    axes.axvline(bound, color=THRESHOLD, linestyle="--", linewidth=1.2,
                                 label=f"{word} {bound:g}")  # fmt: skip
            axes.set_yticks([p + (height / 2 if with_baseline else 0) for p in positions])
            axes.set_yticklabels([_short(r[0], 28) for r in rows])
            axes.invert_yaxis()
            axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))

        return self.draw(metric, WIDTH_INCHES + 1.2, 0.9 + 0.3 * len(rows), plot)

    def loss_curve(
        self,
        train: Sequence[tuple[int, float]],
        validation: Sequence[tuple[int, float]] = (),
        profiled: tuple[int, int] | None = None,
    ) -> str | None:
        """The training loss by step as a line, the validation loss as dots joined by a
        dashed line, and the profiled steps shaded grey; None without a training point."""
        if not train:
            return None

        def plot(figure, axes):
            if profiled:
                axes.axvspan(profiled[0], profiled[1], color=BASELINE, alpha=0.35, linewidth=0,
                             label=f"profiled steps {profiled[0]}-{profiled[1]}")  # fmt: skip
            axes.plot([s for s, _ in train], [v for _, v in train], color=TRAIN, linewidth=1.4,
                      label="training (batch_loss)")  # fmt: skip
            if validation:
                axes.plot([s for s, _ in validation], [v for _, v in validation], color=EVAL,
                          linestyle="--", marker="o", markersize=3, linewidth=1.2,
                          label="validation")  # fmt: skip
            axes.set_xlabel("step")
            axes.set_ylabel("loss")
            _few_ticks(axes.xaxis)
            axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))

        return self.draw("Loss by training step", WIDE_INCHES, 2.2, plot, _TIME_MARGINS)

    def timings(self, nodes: Sequence[tuple[str, str, float]]) -> str | None:
        """Seconds per component as bars coloured by how it ran (executed, cached, failed)."""
        if not nodes:
            return None

        def plot(figure, axes):
            positions = list(range(len(nodes)))
            colours = [STATE_COLOURS.get(state, FAILED) for _, state, _ in nodes]
            axes.barh(positions, [seconds for *_, seconds in nodes], color=colours, height=0.7)
            axes.set_yticks(positions)
            axes.set_yticklabels([f"{node} ({state})" for node, state, _ in nodes])
            axes.invert_yaxis()
            axes.set_xlabel("seconds")

        return self.draw("Seconds per component", WIDE_INCHES, 0.7 + 0.2 * len(nodes), plot)

    # --- the history page ----------------------------------------------------------------------

    def outcomes(self, labels: Sequence[str], outcomes: Sequence[str]) -> str | None:
        """Each run's outcome as a coloured bar on a timeline (oldest left)."""
        if not labels:
            return None

        def plot(figure, axes):
            colours = [OUTCOME_COLOURS.get(o, "#a6a6a6") for o in outcomes]
            _bars(axes, [1.0] * len(labels), colours)
            for outcome, colour in OUTCOME_COLOURS.items():
                if outcome in outcomes:
                    axes.plot([], [], color=colour, linewidth=6, label=outcome.replace("_", " "))
            axes.set_ylim(0, 1)
            axes.set_yticks([])
            _label_x(axes, labels)
            axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))

        return self.draw("Outcome of each run", WIDE_INCHES, 1.5, plot, _TIME_MARGINS)

    def over_time(
        self,
        title: str,
        labels: Sequence[str],
        series: dict[str, Sequence[float | None]],
        thresholds: dict[str, float] | None = None,
        ylabel: str = "",
    ) -> str | None:
        """Lines over runs (x: `labels`, oldest left), one per series, gaps where a value is
        None, and each series' threshold dashed in its colour; None without a value."""
        if not any(v is not None for values in series.values() for v in values):
            return None
        thresholds = thresholds or {}

        def plot(figure, axes):
            for index, (name, values) in enumerate(sorted(series.items())):
                colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
                ys = [math.nan if v is None else v for v in values]
                axes.plot(range(len(ys)), ys, marker="o", markersize=2.5, linewidth=1.2,
                          color=colour, label=_short(name, 24))  # fmt: skip
                if name in thresholds:
                    axes.axhline(thresholds[name], color=colour, linestyle="--", linewidth=0.8)
            _label_x(axes, labels)
            if ylabel:
                axes.set_ylabel(ylabel)
            axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))

        return self.draw(title, WIDE_INCHES, 2.2, plot, _TIME_MARGINS)

    def bars_over_time(
        self, title: str, labels: Sequence[str], values: Sequence[float | None], ylabel: str
    ) -> str | None:
        """One bar per run (x: `labels`, oldest left); None without a value."""
        if not any(v is not None for v in values):
            return None

        def plot(figure, axes):
            _bars(axes, [v or 0.0 for v in values], [TRAIN] * len(values))
            axes.set_ylim(0, max(v or 0.0 for v in values) * 1.05 or 1.0)
            _label_x(axes, labels)
            axes.set_ylabel(ylabel)

        return self.draw(title, WIDE_INCHES, 1.8, plot, _TIME_MARGINS)


# Charts over runs share their axes' place, so they line up on the page (and need no fitting).
_TIME_MARGINS = {"left": 0.09, "right": 0.8, "bottom": 0.3, "top": 0.86}


def _bars(axes, heights: Sequence[float], colours: Sequence[str]) -> None:
    """One bar per run, as a single collection of thick lines: a hundred bars as one element,
    drawn many times faster than a hundred rectangles."""
    slots = max(len(heights), 10)
    width_points = WIDE_INCHES * 72 * (_TIME_MARGINS["right"] - _TIME_MARGINS["left"])
    axes.vlines(range(len(heights)), 0, heights, colors=colours,
                linewidth=0.8 * width_points / slots)  # fmt: skip


def _usable_histogram(series: Histogram) -> bool:
    edges = list(series.edges)
    if len(edges) != len(series.counts) + 1 or not any(series.counts):
        return False
    if not all(math.isfinite(float(e)) for e in edges):
        return False
    return any(high > low for low, high in zip(edges, edges[1:], strict=False))


def _split_colour(label: str, index: int) -> str:
    return SPLIT_COLOURS.get(label, OTHER_SPLITS[index % len(OTHER_SPLITS)])


def _short(text: str, limit: int = 18) -> str:
    """A label cut to `limit` characters, as plain text (matplotlib reads `$...$` as maths)."""
    text = str(text)
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("$", r"\$")


def _few_ticks(axis, percent: bool = False) -> None:
    """At most five ticks, written plainly (no offset such as `+2.007e3`)."""
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    axis.set_major_locator(MaxNLocator(5))
    if not percent:
        formatter = ScalarFormatter(useOffset=False)
        formatter.set_scientific(False)
        axis.set_major_formatter(formatter)


def _percent():
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(1.0, decimals=0)


def _label_x(axes, labels: Sequence[str], most: int = 10) -> None:
    """Ticks under at most `most` of the runs (evenly spread, the newest always labelled)."""
    if not labels:
        return
    step = max(1, math.ceil(len(labels) / most))
    ticks = list(range(len(labels) - 1, -1, -step))[::-1]
    axes.set_xticks(ticks)
    axes.set_xticklabels([_short(labels[i], 16) for i in ticks], rotation=30, ha="right")
    # Room for ten runs at least: one night is a bar, not the whole width.
    axes.set_xlim(-0.6, max(len(labels), 10) - 0.4)
