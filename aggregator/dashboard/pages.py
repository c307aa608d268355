"""What each dashboard page shows, computed from a schema and its stored estimate rows.

Pure functions from data to plain objects the templates render: no Flask, no SQL, so the
numbers on a page can be tested without a server. Estimate rows have the store's shape
(``window``, ``attribute``, ``value``, ``estimate``, ``estimate_clipped``, ``ci_low``, ``ci_high``,
``n``, ``epsilon``, ``computed_at``); ``value`` is the category, or ``"true"`` for a boolean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ...shared import display, mechanisms, privacy
from ...shared.planner import Plan, plan
from ...shared.schema import Attribute, Schema
from ...shared.windows import ROLLUP
from . import charts
from ..estimation.crowds import relay_fields
from ..questions.discovery import MAX_READ
from ..store import CrowdRow, EstimateRow

# A categorical chart draws the largest categories only; the table and the CSV have them all.
MAX_CHART_CATEGORIES = charts.PALETTE_SIZE
MAX_TABLE_VALUES = 50
# Grouped bars stay readable for this many windows; a line takes every window of the range.
MAX_BAR_WINDOWS = 12
MAX_LINE_WINDOWS = 400
# How many windows the budget table shows, per window kind.
BUDGET_WINDOWS = {"day": (1, 7, 30, 365), "hour": (1, 24, 24 * 7, 24 * 30)}
# An interval wider than this share of its scale (a share's [0, 1], a mean's range) either side of
# its estimate says too little to act on; the page says so. Judged by the planner's half-width at the
# latest window's reports (what the interval is at its widest), not by one noisy interval, which
# clipping to the scale can make look narrow.
TOO_WIDE = 0.25
# Discovery that can find only strings held by more than this share of devices finds little (the
# few most common ones at best); the planner line says so.
LITTLE_FOUND = 0.05


@dataclass(frozen=True)
class Cell:
    """One stored estimate, as shown."""

    estimate: float  # unbiased, may fall outside [0, 1]
    estimate_clipped: float
    ci_low: float
    ci_high: float
    n: int

    @property
    def clipped(self) -> bool:
        return self.estimate != self.estimate_clipped

    @property
    def interval(self) -> charts.Interval:
        return charts.Interval(self.estimate_clipped, self.ci_low, self.ci_high)


@dataclass(frozen=True)
class ValueRow:
    label: str  # "true" for a boolean's share, else the category (or a string attribute's candidate)
    latest: Cell | None
    rollup: Cell | None
    source: str | None = None  # where a string attribute's candidate came from (listed, added, discovered)

    @property
    def includes_zero(self) -> bool:
        """Whether its interval (all windows, else the latest) includes zero: not told from absent."""
        shown = self.rollup or self.latest
        return shown is None or not display.told_from_zero(shown.ci_low)


@dataclass(frozen=True)
class Comparison:
    """The interval shown for an attribute beside what a trusted curator could publish.

    The local half-width is read off the page's own table (half the width of the widest
    all-windows interval shown), not recomputed from a formula: the panel then never claims an
    interval narrower than the table's, also where the table's is wider than theory at θ = 0 (a
    share near 1/2, a memoised rollup held to its widest window).
    """

    n: int  # reports behind the all-windows estimates
    local_half_width: float
    central_half_width: float  # a curator adding Laplace noise to the raw count (or sum), same ε and n

    @property
    def ratio(self) -> float:
        """How many times wider the local interval is."""
        return self.local_half_width / self.central_half_width


@dataclass(frozen=True)
class AttributePrivacy:
    """The privacy of one attribute's randomisation, in numbers the panel puts into words."""

    epsilon: float
    mechanism: str
    mechanism_name: str
    description: str  # what a device does, in one sentence
    p: float
    q: float
    categories: int
    posterior: float  # most an observer of one report believes, from a 50/50 prior
    curve: list[tuple[float, float]]  # the privacy profile, sampled
    delta_at_zero: float  # δ(0): the total variation distance of the worst pair
    comparison: Comparison | None  # None until there is data
    epsilon_permanent: float | None = None  # a memoised attribute's share of ε∞


@dataclass(frozen=True)
class AttributeView:
    attribute: Attribute
    rows: list[ValueRow]
    hidden_rows: int  # values beyond MAX_TABLE_VALUES
    latest_window: str | None
    n: int  # reports that carried the attribute, over every window (the rollup's n)
    chart: charts.LineChart | charts.BarChart | None
    chart_note: str
    privacy: AttributePrivacy
    style: display.Style = display.SHARE  # how its figures are written: a share's, or a mean's in its units
    # A string attribute's candidates whose interval includes zero, set apart below its table
    # (most frequent first, at most MAX_TABLE_VALUES); ``hidden_apart`` more are not shown.
    apart: list[ValueRow] = field(default_factory=list)
    hidden_apart: int = 0

    @property
    def percent(self) -> bool:
        """Whether its estimates are shares (in percent), not a mean in its units."""
        return self.style.percent

    @property
    def level_zero(self) -> bool:
        """Whether its ``n`` counts level-0 reports only (a discovering string attribute: the
        other reports carry discovery's prefixes, which no estimate uses)."""
        return bool(self.attribute.discover)

    @property
    def sourced(self) -> bool:
        """Whether its values are candidates with a source (a string attribute)."""
        return self.attribute.kind.candidates_apart

    @property
    def any_clipped(self) -> bool:
        """Whether a shown estimate fell outside [0, 1] and is displayed clipped."""
        return any(c is not None and c.clipped for row in self.rows for c in (row.latest, row.rollup))


@dataclass(frozen=True)
class SchemaPrivacy:
    epsilon: float
    split: str
    window: str
    posterior: float
    budget: list[tuple[int, float]]  # (windows, at most this ε spent)
    profiles: charts.ProfileChart  # one curve per distinct mechanism, ε and category count
    epsilon_permanent: float | None = None  # memoisation: the most a value can ever cost


@dataclass(frozen=True)
class CrowdFigures:
    """The relay fields of one window, or of the ``all`` rollup, as the API's rows carry them
    (:func:`..estimation.crowds.relay_fields`)."""

    window: str
    relayed: float | None  # the share of its reports that came through a relay
    crowd: int | None  # the smallest crowd of a relay batch there
    epsilon_shuffled: float | None  # ε(crowd) against the aggregator, at ``delta``
    delta: float | None


@dataclass(frozen=True)
class RelayPrivacy:
    """What the privacy panel says of the reports that came through relays (DESIGN.md, "Relay and
    amplification"): the latest window's figures and the rollup's."""

    latest: CrowdFigures | None  # the latest window shown that holds reports
    rollup: CrowdFigures


def relay_privacy(schema: Schema, crowds: Mapping[str, CrowdRow], windows: Sequence[str],
                  delta: float) -> RelayPrivacy | None:
    """The relay's figures for the privacy panel from the schema version's crowd rows (``windows``:
    the page's, oldest first); None while no report came through a relay."""
    def figures(window: str) -> CrowdFigures:
        return CrowdFigures(window, **relay_fields(crowds[window], schema.epsilon, delta))

    if ROLLUP not in crowds or not crowds[ROLLUP].relayed:
        return None
    shown = [w for w in windows if w in crowds]
    return RelayPrivacy(figures(shown[-1]) if shown else None, figures(ROLLUP))


@dataclass(frozen=True)
class SchemaPage:
    schema: Schema
    attributes: list[AttributeView]
    windows: list[str]  # windows in range that have estimates, oldest first
    computed_at: str | None
    privacy: SchemaPrivacy
    relay: RelayPrivacy | None = None  # set where reports came through a relay

    @property
    def empty(self) -> bool:
        return not self.attributes or all(a.n == 0 for a in self.attributes)


def cell(row: EstimateRow) -> Cell:
    return Cell(row.estimate, row.estimate_clipped, row.ci_low, row.ci_high, row.n)


def schema_page(schema: Schema, rows: Sequence[EstimateRow], confidence: float,
                added: Mapping[tuple[str, str], str] | None = None, crowds: Mapping[str, CrowdRow] | None = None,
                delta: float = 0.0) -> SchemaPage:
    """Everything the schema page shows, from the estimate rows of one schema version; ``added``:
    the sources of candidates stored beyond the listed ones (``(attribute, value) -> source``);
    ``crowds``: how each window's reports arrived, with ``delta`` the shuffle's δ
    (``LDP_SHUFFLE_DELTA``)."""
    by_attribute: dict[str, dict[str, dict[str, Cell]]] = {a.name: {} for a in schema.attributes}
    for row in rows:
        if row.attribute in by_attribute:
            by_attribute[row.attribute].setdefault(row.window, {})[row.value] = cell(row)
    windows = sorted({r.window for r in rows if r.window != ROLLUP})
    computed = max((r.computed_at for r in rows), default=None)
    views = [attribute_view(a, by_attribute[a.name], confidence, added or {}) for a in schema.attributes]
    return SchemaPage(schema, views, windows, computed, schema_privacy(schema, views),
                      relay_privacy(schema, crowds or {}, windows, delta))


def attribute_view(attribute: Attribute, cells: dict[str, dict[str, Cell]], confidence: float,
                   added: Mapping[tuple[str, str], str] | None = None) -> AttributeView:
    """One attribute's table, chart and privacy from its cells by window and value (a string
    attribute's stored candidates, ``added``, after its listed ones)."""
    sources = {v: source for (a, v), source in (added or {}).items() if a == attribute.name}
    keys = list(attribute.keys) + list(sources)
    windows = sorted(w for w in cells if w != ROLLUP)
    latest = windows[-1] if windows else None
    rollup = cells.get(ROLLUP, {})
    kind = attribute.kind
    rows = [ValueRow(k, cells[latest].get(k) if latest else None, rollup.get(k),
                     sources.get(k) or kind.source(attribute, k)) for k in keys]
    n = max((c.n for c in rollup.values()), default=0)
    # In the schema's order, as the API, the CSV and the CLI list them. Where there are too many to
    # show, a ranked kind (categories) keeps its largest, still in that order; a histogram keeps its
    # first buckets, as before. A string attribute's candidates are listed most frequent first
    # (DESIGN.md, "Dashboard"), and those whose interval includes zero are set apart below.
    def size(i: int) -> float:
        cell = rows[i].rollup
        return -(cell.estimate_clipped if cell else -1.0)

    apart: list[ValueRow] = []
    if kind.candidates_apart:
        by_label = {r.label: r for r in rows}
        rows = [by_label[k] for k in display.most_frequent_first({
            r.label: r.rollup.estimate_clipped if r.rollup else None for r in rows})]
        apart = [r for r in rows if r.includes_zero]
        rows = [r for r in rows if not r.includes_zero]
        shown = rows[:MAX_TABLE_VALUES]
        charted = [r.label for r in rows[:MAX_CHART_CATEGORIES]]
    else:
        kept = sorted(range(len(rows)), key=size) if kind.ranked else list(range(len(rows)))
        shown = [rows[i] for i in sorted(kept[:MAX_TABLE_VALUES])]
        charted = [rows[i].label for i in sorted(kept[:MAX_CHART_CATEGORIES])]
    chart, note = _chart(attribute, windows, cells, charted, len(rows))
    widest = max(((c.ci_high - c.ci_low) / 2 for r in shown if (c := r.rollup) is not None), default=None)
    return AttributeView(attribute, shown, len(rows) - len(shown), latest, n, chart, note,
                         attribute_privacy(attribute, n, confidence, widest), display.style_of(attribute),
                         apart[:MAX_TABLE_VALUES], max(0, len(apart) - MAX_TABLE_VALUES))


def _chart(attribute: Attribute, windows: list[str], cells: dict[str, dict[str, Cell]],
           categories: list[str], total: int) -> tuple[charts.LineChart | charts.BarChart | None, str]:
    """A line and band for a single share or mean; else grouped bars of ``categories`` (the
    largest :data:`MAX_CHART_CATEGORIES` of ``total``, in the schema's order)."""
    if not windows:
        return None, ""
    notes = []
    if len(attribute.keys) == 1:  # a boolean's share, or a numeric attribute's mean: a line and band
        key = attribute.keys[0]
        shown = [w for w in windows if key in cells[w]][-MAX_LINE_WINDOWS:]
        if len(shown) < len(windows):
            notes.append(f"the last {len(shown)} windows of the range")
        return (charts.band_chart(shown, [cells[w][key].interval for w in shown], display.style_of(attribute)),
                "; ".join(notes))
    shown = windows[-MAX_BAR_WINDOWS:]
    if len(shown) < len(windows):
        notes.append(f"the last {len(shown)} of {len(windows)} windows in the range")
    if len(categories) < total:
        notes.append(f"the {len(categories)} largest of {total} categories")
    values = [[cells[w][c].interval if c in cells[w] else None for c in categories] for w in shown]
    return charts.bar_chart(shown, categories, values), "; ".join(notes)


def attribute_privacy(attribute: Attribute, n: int, confidence: float,
                      shown_half_width: float | None = None) -> AttributePrivacy:
    """``shown_half_width``: half the width of the widest all-windows interval the attribute's
    table shows (None before any estimate), which the comparison with a curator starts from."""
    p, q, epsilon = attribute.p, attribute.q, attribute.epsilon
    curve = privacy.profile_curve(attribute.mechanism, p, q, epsilon)
    if n == 0 or shown_half_width is None:
        comparison = None
    elif attribute.mech.estimand.percent:
        central = privacy.local_vs_central(p, q, epsilon, n, confidence).central_half_width
        comparison = Comparison(n, shown_half_width, central)
    else:
        lo, hi = mechanisms.span_of(attribute)
        central = privacy.mean_local_vs_central(attribute.mech.report_variance(attribute), hi - lo, epsilon, n,
                                                confidence).central_half_width
        comparison = Comparison(n, shown_half_width, central)
    return AttributePrivacy(
        epsilon=epsilon,
        mechanism=attribute.mechanism,
        mechanism_name=attribute.mech.title,
        # a mean's numbers in its own units (its range), not on the wire's [-1, 1] scale
        description=attribute.mech.describe(p, q, len(attribute.categories), display.percent,
                                            **({"span": mechanisms.span_of(attribute)} if attribute.range else {})),
        p=p,
        q=q,
        categories=len(attribute.categories),
        posterior=privacy.posterior_bound(epsilon),
        curve=curve,
        delta_at_zero=curve[0][1],
        comparison=comparison,
        epsilon_permanent=None if attribute.memo is None else attribute.memo.epsilon_permanent,
    )


def schema_privacy(schema: Schema, views: Sequence[AttributeView]) -> SchemaPrivacy:
    budget = [(w, privacy.window_budget(schema.epsilon, w)) for w in BUDGET_WINDOWS[schema.window]]
    # Attributes randomised alike share one curve (and one legend entry).
    alike: dict[tuple[str, float, float, float], list[AttributeView]] = {}
    for view in views:
        pv = view.privacy
        alike.setdefault((pv.mechanism, pv.epsilon, pv.p, pv.q), []).append(view)
    groups = list(alike.values())[:charts.PALETTE_SIZE]
    profiles = charts.profile_chart(
        [g[0].privacy.curve for g in groups], [g[0].privacy.epsilon for g in groups],
        [f"{', '.join(v.attribute.name for v in g)} ({g[0].privacy.mechanism}, ε {g[0].privacy.epsilon:.3g})"
         for g in groups])
    return SchemaPrivacy(schema.epsilon, schema.split, schema.window, privacy.posterior_bound(schema.epsilon),
                         budget, profiles, schema.epsilon_permanent)


@dataclass(frozen=True)
class PlanLine:
    """An attribute's planner line, in the planner's terms (:mod:`...shared.planner`): its
    ``reports`` are reports of the schema, a share ``carried`` of which carry the attribute and are
    estimated, so the ``n`` its table shows is about ``reports`` × ``carried``."""

    n: int  # the latest window's n, as the table shows it (reports that carried it and are estimated)
    reports: int  # the reports of the schema that n stands for: n / carried
    carried: float  # the share of the schema's reports that n counts (1 unless sampled or discovering)
    half_width: float | None  # at most, over every true value, with `reports`; None before any report
    target: float  # the half-width asked for, on the estimate's scale (a share, or units)
    needed: int  # reports of the schema for ±target, at most
    detection: float | None  # the detection threshold: the smallest share told from zero with `reports`
    discovery_reports: int  # reports of the schema discovery reads: every retained window's, to its bound
    discovery: float | None  # a discovering string attribute's: the smallest share it finds from those
    too_wide: bool  # the interval at n is wider than TOO_WIDE of its scale either side: too wide to use
    beyond_scale: bool = False  # the half-width at n exceeds the whole scale (a share's 1, a mean's range)

    @property
    def finds_little(self) -> bool:
        """Discovery can find only strings held by more than :data:`LITTLE_FOUND` of devices."""
        return self.discovery is not None and self.discovery > LITTLE_FOUND


def plan_lines(schema: Schema, views: Sequence[AttributeView], targets: dict[str, float],
               confidence: float) -> dict[str, PlanLine]:
    """Each attribute's :class:`PlanLine` from the planner (:mod:`...shared.planner`), at the
    reports its latest window holds, and for discovery at those of every retained window (what the
    discovery job reads, up to its bound); ``targets`` are the half-widths an analyst typed (a
    default of 1 percentage point, or 1% of a mean's range, where none was)."""
    plans: dict[str, Plan] = {p.attribute.name: p for p in plan(schema, confidence=confidence)}
    discovering = sum(1 for a in schema.attributes if a.discover)
    out = {}
    for view in views:
        p = plans[view.attribute.name]
        latest = next((r.latest.n for r in view.rows if r.latest is not None), 0)
        reports = round(latest / p.carried)
        read = min(round(view.n / p.carried), MAX_READ // max(1, discovering))
        target = targets.get(view.attribute.name, p.default_half_width)
        half = p.half_width(reports) if reports else None
        out[view.attribute.name] = PlanLine(latest, reports, p.carried, half, target, p.reports_for(target),
                                            p.detection_threshold(reports) if reports else None, read,
                                            p.discovery_threshold(read) if read else None,
                                            half is not None and half > TOO_WIDE * p.scale,
                                            half is not None and half > p.scale)
    return out
