"""Judging a change threshold with the confidence interval of candidate minus baseline.

TFMA's validator judges a change threshold on the point value of the difference alone, so one
unlucky evaluation split can block a model that is no worse than the served one. Here a change
threshold fails only when the whole interval lies beyond it: the regression is significant at
the chosen level (one-sided, at (1 - level) / 2). A threshold the point value passes stays
passed, so the gate is never stricter than TFMA's.

No TensorFlow here: a t-distribution value is anything with TFMA's `ValueWithTDistribution`
fields (`sample_mean`, `sample_standard_deviation`, `sample_degrees_of_freedom`,
`unsampled_value`).
"""

from __future__ import annotations

import dataclasses
import math

from scipy import stats

HIGHER_IS_BETTER = "higher_is_better"
LOWER_IS_BETTER = "lower_is_better"


@dataclasses.dataclass(frozen=True)
class Interval:
    """A difference's point value and its two-sided confidence interval at `level`."""

    value: float
    lower: float
    upper: float
    level: float


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The gate's decision on one change threshold, and TFMA's on the point value."""

    passed: bool
    passed_point: bool
    reason: str


def interval(t_value, level: float) -> Interval | None:
    """The two-sided `level` interval of a TFMA t-distribution value, as TFMA draws it: the
    sample mean plus or minus Student's t quantile times the standard error (TFMA itself writes
    the 95% interval only). None when TFMA computed no interval for the value (too few
    non-empty samples, or a metric it skips)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level {level} must be between 0 and 1")
    mean = _finite(getattr(t_value, "sample_mean", None))
    error = _finite(getattr(t_value, "sample_standard_deviation", None))
    freedom = getattr(t_value, "sample_degrees_of_freedom", None)
    if mean is None or error is None or not freedom or freedom < 1:
        return None
    half = float(stats.t.ppf(0.5 + level / 2.0, freedom)) * error
    value = _finite(getattr(t_value, "unsampled_value", None))
    return Interval(
        value=mean if value is None else value, lower=mean - half, upper=mean + half, level=level
    )


def judge_change(value: float, span: Interval | None, direction: str, absolute: float) -> Judgement:
    """Judges `candidate - baseline = value` against an absolute change threshold.

    `higher_is_better`, absolute -0.01: TFMA fails `value < -0.01`; this gate fails only when
    the interval's upper end is below -0.01 too. `lower_is_better` is the mirror image (fails
    when the lower end is above the threshold). Without an interval TFMA's judgement stands.
    """
    if direction == HIGHER_IS_BETTER:
        passed_point = value >= absolute
        beyond = span is not None and span.upper < absolute
        side = "upper"
    elif direction == LOWER_IS_BETTER:
        passed_point = value <= absolute
        beyond = span is not None and span.lower > absolute
        side = "lower"
    else:
        raise ValueError(
            f"direction {direction!r}: expected {HIGHER_IS_BETTER!r} or {LOWER_IS_BETTER!r}"
        )
    if passed_point:
        return Judgement(True, True, "the point value is within the allowed change")
    if span is None:
        return Judgement(False, False, "no confidence interval: TFMA's judgement stands")
    if beyond:
        return Judgement(
            False,
            False,
            f"the whole {span.level:.0%} interval is beyond {absolute:+g}: a significant "
            "regression",
        )
    edge = span.upper if side == "upper" else span.lower
    return Judgement(
        True,
        False,
        f"the point value is beyond {absolute:+g} but the {span.level:.0%} interval's {side} "
        f"end {edge:+.4f} is not: within the noise of the evaluation split",
    )


def _finite(number) -> float | None:
    if number is None:
        return None
    try:
        number = float(number)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
