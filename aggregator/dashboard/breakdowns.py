"""What the schema page shows of each breakdown (DESIGN.md, "Breakdowns" and "Dashboard"),
computed from the stored rows of the ``all`` rollup and its sums.

Pure functions from data to plain objects the template renders, as :mod:`.pages` is: per
breakdown, the ``by`` values each with its own share and, within it, each value of ``of``
(grouped bars with whiskers for shares, points with whiskers for means; a table for every row), the rows whose ``reason`` voids
them set apart, and a planner line (the widest half-width now, and the reports a half-width
needs: :func:`...shared.planner.plan_breakdown`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ...shared import display
from ...shared.breakdowns import Breakdown, BreakdownSums, Row
from ...shared.planner import DEFAULT_TARGET, plan_breakdown
from ...shared.schema import Schema
from ..estimation.breakdowns import value_of
from ..store import BreakdownEstimateRow, StoredBreakdown
from . import charts


@dataclass(frozen=True)
class BreakdownView:
    """One breakdown's section of the page."""

    of: str
    by: str
    source: str  # listed or added
    percent: bool  # a share of `of` (else its mean, in its units)
    style: display.Style  # how `of`'s figures are written (shared/display.py, as its own table's)
    single_value: bool  # `of` has one value estimated (a boolean's true, a numeric's mean): no column for it
    cells: list[Row]  # the rows with an estimate, by each value of `by` (their values as labels)
    apart: list[Row]  # the rows a reason voids
    by_shares: list[tuple[str, float | None]]  # each value of `by` and its estimated share
    chart: charts.BarChart | charts.LineChart | None  # grouped bars (shares) or points (means), with whiskers
    half_width: float | None  # the widest half-width of the rollup's rows now (None: needs reports first)
    target: float  # the half-width the planner line is about
    needed: int | None  # the reports that half-width needs (for the widest row); None: needs reports first
    n: int  # the reports of the rollup


def breakdown_views(schema: Schema, stored: Sequence[StoredBreakdown], rollup: Sequence[BreakdownEstimateRow],
                    sums: Mapping[int, Mapping[tuple[str, str], int | float]], confidence: float) -> list[BreakdownView]:
    """A :class:`BreakdownView` of each estimated breakdown (one still being back-filled has none
    yet), from the rollup's stored rows and sums."""
    views = []
    for b in stored:
        if not b.complete:
            continue
        of, by = schema.attribute(b.of), schema.attribute(b.by)
        rows = [r for r in rollup if r.breakdown == b.id]
        cells = [Row(display.label(value_of(of, r.value)), display.label(value_of(by, r.by_value)), r.estimate,
                               r.estimate_clipped, r.ci_low, r.ci_high, r.by_share, r.n, r.reason) for r in rows]
        shown = [c for c in cells if c.estimate is not None]
        by_shares = list(dict.fromkeys((c.by_value, c.by_share) for c in cells))
        percent = of.mech.estimand.percent
        chart: charts.BarChart | charts.LineChart | None = None
        with_interval = [c for c in shown if c.ci_low is not None]
        if percent and with_interval:
            by_values = list(dict.fromkeys(c.by_value for c in cells))
            values = list(dict.fromkeys(c.value for c in cells))
            at = {(c.by_value, c.value): c for c in with_interval}
            chart = charts.bar_chart(by_values, values, [[_interval(at.get((bv, v))) for v in values]
                                                         for bv in by_values])
        elif with_interval:
            intervals = [(c.by_value, _interval(c)) for c in with_interval]
            chart = charts.point_chart([bv for bv, i in intervals if i], [i for _, i in intervals if i])
        plans = plan_breakdown(schema, Breakdown(b.of, b.by), BreakdownSums(dict(sums.get(b.id, {}))),
                               confidence=confidence)
        known = [p for p in plans if p.sigma is not None]
        widest = max(known, key=lambda p: p.sigma or 0.0, default=None)
        target = DEFAULT_TARGET * (plans[0].scale if plans else 1.0)
        views.append(BreakdownView(b.of, b.by, b.source, percent, display.style_of(of), len(of.values) == 1, shown, [c for c in cells if c.estimate is None],
                                   by_shares, chart, widest.half_width() if widest and widest.n else None, target,
                                   widest.reports_for(target) if widest else None,
                                   max((c.n for c in cells), default=0)))
    return views


def _interval(cell: Row | None) -> charts.Interval | None:
    if cell is None or cell.estimate_clipped is None or cell.ci_low is None or cell.ci_high is None:
        return None
    return charts.Interval(cell.estimate_clipped, cell.ci_low, cell.ci_high)
