"""Chart geometry for the dashboard: data in, pixel coordinates out.

The dashboard draws its charts as inline SVG in the page (no JavaScript library, no CDN, works
offline). This module only computes numbers (coordinates, tick positions); the templates write
the SVG, so every label passes through Jinja's autoescape like any other text on the page.
All charts share one coordinate system, a ``viewBox`` of WIDTH × HEIGHT that the browser scales
to the page width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from ...shared.display import SHARE, Style, percent

WIDTH, HEIGHT = 520, 220
LEFT, RIGHT, TOP, BOTTOM = 52, 24, 12, 34  # margins for the axis labels
MAX_X_LABELS = 4
PALETTE_SIZE = 8  # series colours .s0 to .s7 in static/dashboard.css
NICE_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class Tick:
    at: float  # pixel position along the axis
    label: str
    minor: bool = False  # hidden on narrow screens, where long labels would overlap
    # "first" or "last" of a line's labels: on a narrow screen, where its larger text would run
    # past the plot's edge, it aligns inwards (static/dashboard.css); elsewhere every label is
    # centred on its window, so that evenly spaced windows read as evenly spaced.
    edge: str = ""


@dataclass(frozen=True)
class Scale:
    """A linear map from data values ``[lo, hi]`` to pixels ``[start, end]``."""

    lo: float
    hi: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = self.hi - self.lo or 1.0
        return round(self.start + (value - self.lo) / span * (self.end - self.start), 2)


@dataclass(frozen=True)
class Frame:
    """The plot area inside the viewBox, shared by every chart."""

    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    right_edge: int = WIDTH - RIGHT
    bottom_edge: int = HEIGHT - BOTTOM


FRAME = Frame()


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    low: float  # y of the interval's lower end
    high: float  # y of the interval's upper end
    label: str  # shown as the point's tooltip


@dataclass(frozen=True)
class LineChart:
    """A line with an optional band (the interval) and its axes."""

    points: list[Point]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    band: bool
    markers: list[Tick] = field(default_factory=list)  # vertical reference lines
    frame: Frame = FRAME

    @property
    def line(self) -> str:
        return " ".join(f"{p.x},{p.y}" for p in self.points)

    @property
    def band_polygon(self) -> str:
        upper = [f"{p.x},{p.high}" for p in self.points]
        lower = [f"{p.x},{p.low}" for p in reversed(self.points)]
        return " ".join(upper + lower)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    low: float  # whisker ends (y)
    high: float
    series: int  # colour index
    label: str


@dataclass(frozen=True)
class BarChart:
    """Groups of bars (one group per window, one bar per category) with interval whiskers."""

    bars: list[Bar]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    series: list[str]  # legend labels, in colour order
    frame: Frame = FRAME


@dataclass(frozen=True)
class Interval:
    """One estimate to draw: the value and its interval (shares in [0, 1])."""

    estimate: float
    low: float
    high: float


def nice_ticks(lo: float, hi: float, target: int = 5) -> tuple[float, float, list[float]]:
    """A rounded range covering ``[lo, hi]`` and its ticks at a step from :data:`NICE_STEPS`."""
    if hi <= lo:
        hi = lo + 1e-3
    # The steps, and the same times 10, 100, ...: a mean's range (0 to 120 minutes, 0 to 10,000 ms)
    # needs steps past the largest share step, or its axis gets dozens of overlapping labels.
    magnitude = 1.0
    while (hi - lo) / (NICE_STEPS[-1] * magnitude) > target:
        magnitude *= 10
    step = next(s * magnitude for s in NICE_STEPS if (hi - lo) / (s * magnitude) <= target)
    start = math.floor(lo / step + 1e-9) * step
    stop = math.ceil(hi / step - 1e-9) * step
    count = int(round((stop - start) / step))
    return start, stop, [round(start + i * step, 10) for i in range(count + 1)]


def share_scale(values: Sequence[float], *, from_zero: bool) -> tuple[Scale, list[Tick]]:
    """A y scale for shares covering ``values`` (within [0, 1]) and its tick labels in percent."""
    lo = 0.0 if from_zero or not values else max(0.0, min(values))
    hi = max(values, default=1.0)
    lo, hi, ticks = nice_ticks(lo, max(hi, lo + 0.01))
    scale = Scale(lo, hi, HEIGHT - BOTTOM, TOP)
    digits = _exact_digits(ticks)
    return scale, [Tick(scale(t), percent(t, digits)) for t in ticks]


def _exact_digits(shares: Sequence[float], most: int = 3) -> int:
    """The fewest decimals that label every share in percent exactly (2.5% needs one, 20% none)."""
    for digits in range(most + 1):
        if all(abs(round(s * 100, digits) - s * 100) < 1e-6 for s in shares):
            return digits
    return most


def window_ticks(windows: Sequence[str], positions: Sequence[float], *, centred: bool = False) -> list[Tick]:
    """At most :data:`MAX_X_LABELS` window labels, evenly spaced, counted back from the latest
    window, which is always labelled: equal gaps between labels mean equal spans of time.

    On a narrow screen only the outermost two stay (the others are ``minor``). A line's outermost
    labels are marked as its ``edge``s to align inwards there; ``centred`` labels (a bar chart's
    groups, inset by half a group) stay under their group.
    """
    count = len(windows)
    if count == 0:
        return []
    step = max(1, math.ceil((count - 1) / (MAX_X_LABELS - 1)))
    chosen = list(range(count - 1, -1, -step))[::-1]
    edges = {} if centred or len(chosen) == 1 else {chosen[0]: "first", chosen[-1]: "last"}
    return [Tick(positions[i], windows[i], minor=i not in (chosen[0], chosen[-1]), edge=edges.get(i, ""))
            for i in chosen]


def unit_scale(values: Sequence[float]) -> tuple[Scale, list[Tick]]:
    """A y scale in an attribute's own units covering ``values``, with plain number labels."""
    lo, hi = min(values, default=0.0), max(values, default=1.0)
    lo, hi, ticks = nice_ticks(lo, max(hi, lo + abs(lo) * 1e-6 + 1e-9))
    scale = Scale(lo, hi, HEIGHT - BOTTOM, TOP)
    return scale, [Tick(scale(t), f"{t:g}") for t in ticks]


def band_chart(windows: Sequence[str], values: Sequence[Interval], style: Style = SHARE) -> LineChart:
    """An attribute over windows: the estimate as a line, the interval as a band; a boolean's share
    in percent, or (a ``style`` not in percent) a numeric attribute's mean in its own units."""
    ends = [v.low for v in values] + [v.high for v in values]
    scale, y_ticks = share_scale(ends, from_zero=False) if style.percent else unit_scale(ends)
    xs = _spread(len(windows))
    points = [
        Point(x, scale(v.estimate), scale(v.low), scale(v.high),
              f"{w}: {style.value(v.estimate)} ({style.value(v.low)} to {style.value(v.high)})")
        for x, w, v in zip(xs, windows, values)
    ]
    return LineChart(points, window_ticks(windows, xs), y_ticks, band=True)


def point_chart(labels: Sequence[str], values: Sequence[Interval]) -> LineChart:
    """Means by category (a breakdown of a numeric attribute: its mean within each value of
    another): a point per category with its interval as a whisker, in the attribute's own units;
    no line, since the categories have no order to join."""
    scale, y_ticks = unit_scale([v.low for v in values] + [v.high for v in values])
    plot = (WIDTH - RIGHT) - LEFT
    group = plot / max(1, len(labels))
    xs = [round(LEFT + (i + 0.5) * group, 2) for i in range(len(labels))]
    points = [Point(x, scale(v.estimate), scale(v.low), scale(v.high),
                    f"{label}: {v.estimate:.4g} ({v.low:.4g} to {v.high:.4g})") for x, label, v in zip(xs, labels, values)]
    return LineChart(points, window_ticks(labels, xs, centred=True), y_ticks, band=False)


def bar_chart(windows: Sequence[str], categories: Sequence[str], values: Sequence[Sequence[Interval | None]]) -> BarChart:
    """A categorical attribute over windows: ``values[w][c]`` as grouped bars with whiskers.

    A missing estimate (``None``) leaves a gap in its group.
    """
    present = [v for row in values for v in row if v is not None]
    scale, y_ticks = share_scale([v.high for v in present], from_zero=True)
    plot = (WIDTH - RIGHT) - LEFT
    group = plot / max(1, len(windows))
    bar = group * 0.8 / max(1, len(categories))
    bars = []
    centres = []
    for w, (window, row) in enumerate(zip(windows, values)):
        first = LEFT + w * group + group * 0.1
        centres.append(round(first + bar * len(categories) / 2, 2))
        for c, (category, v) in enumerate(zip(categories, row)):
            if v is None:
                continue
            top = scale(max(0.0, v.estimate))
            bars.append(Bar(round(first + c * bar, 2), top, round(bar * 0.9, 2), round(scale(0.0) - top, 2),
                            scale(v.low), scale(v.high), c,
                            f"{window} · {category}: {percent(v.estimate)} ({percent(v.low)} to {percent(v.high)})"))
    return BarChart(bars, window_ticks(windows, centres, centred=True), y_ticks, list(categories))


@dataclass(frozen=True)
class ProfileChart:
    """Privacy profiles δ(ε') against ε': one curve per series, a reference line at each ε."""

    curves: list[str]  # polyline points, in series (colour) order
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    markers: list[Tick]
    series: list[str]  # legend labels
    frame: Frame = FRAME


def profile_chart(curves: Sequence[Sequence[tuple[float, float]]], epsilons: Sequence[float],
                  series: Sequence[str]) -> ProfileChart:
    """``curves[i]`` is the sampled profile of ``series[i]`` (ε' ascending) whose own ε is ``epsilons[i]``."""
    points = [point for curve in curves for point in curve]
    _, y_hi, y_values = nice_ticks(0.0, max(max((d for _, d in points), default=0.0), 0.01))
    _, x_hi, x_values = nice_ticks(0.0, max((e for e, _ in points), default=1.0))
    x = Scale(0.0, x_hi, LEFT, WIDTH - RIGHT)
    y = Scale(0.0, y_hi, HEIGHT - BOTTOM, TOP)
    return ProfileChart(
        [" ".join(f"{x(e)},{y(d)}" for e, d in curve) for curve in curves],
        [Tick(x(v), f"{v:g}") for v in x_values],
        [Tick(y(v), f"{v:g}") for v in y_values],
        [Tick(x(e), f"ε = {e:.3g}") for e in sorted(set(epsilons))],
        list(series),
    )


def _spread(count: int) -> list[float]:
    """``count`` x positions across the plot; a single one sits in the middle."""
    if count == 1:
        return [round((LEFT + WIDTH - RIGHT) / 2, 2)]
    x = Scale(0, count - 1, LEFT + 6, WIDTH - RIGHT - 6)
    return [x(i) for i in range(count)]
