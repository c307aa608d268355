"""The tables the ``ldp-telemetry`` command prints: each a function from rows to lines of text.

Kept apart from the Click layer (:mod:`.cli`) so that a table has one printer whoever prints it:
``simulate`` and ``demo`` both print :func:`truth_table`. Every figure is written by
:mod:`...shared.display`, as the dashboard writes it: a share in percent, a mean in its units. An
estimate outside its scale (a share below 0 or above 1, a mean outside its range) is printed
clipped and marked ``*``, as the dashboard shows it, so a printed estimate always lies inside its
printed interval; the unbiased value is in the API's ``estimate`` (and the CSV's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..shared import display
from ..shared.breakdowns import Row
from ..shared.planner import Plan
from ..shared.schema import BOOLEAN_KEY, Schema
from ..shared.windows import ROLLUP

CLIPPED_NOTE = ("* outside its scale (below 0% or above 100%, or outside the range): the unbiased estimate, "
                "shown clipped to the scale; the API and the CSV give both")


@dataclass(frozen=True)
class TruthRow:
    """One value's estimate beside the population's truth."""

    attribute: str
    value: str  # "true" for a boolean's share, "mean" for a numeric attribute, else the category or bucket
    mechanism: str
    epsilon: float
    style: display.Style  # a share's (percent) or a mean's (its units)
    truth: float
    estimate: float  # unbiased
    estimate_clipped: float
    ci_low: float
    ci_high: float
    n: int

    @property
    def covered(self) -> bool:
        return self.ci_low <= self.truth <= self.ci_high


def truth_row(schema: Schema, attribute: str, value: Any, truth: float, estimate: Mapping[str, Any]) -> TruthRow:
    """A :class:`TruthRow` from an estimate with the API's fields."""
    a = schema.attribute(attribute)
    return TruthRow(attribute, BOOLEAN_KEY if value is True else str(value), a.mechanism, a.epsilon,
                    display.style_of(a), truth, estimate["estimate"], estimate["estimate_clipped"],
                    estimate["ci_low"], estimate["ci_high"], estimate["n"])


def truth_table(rows: Sequence[TruthRow], *, summary: str = "", sources: Mapping[str, str] | None = None
                ) -> list[str]:
    """Truth, estimate and interval of each row, whether the interval covers the truth, and a last
    line counting those that do (followed by ``summary``). Each row is written one decimal finer
    than the dashboard writes it, and finer still where its truth would print as one of its
    interval's ends: a "NO" never sits beside a truth that reads as a bound. With ``sources`` (a
    string attribute's candidates: value -> listed, added or discovered) each row shows the whole
    string and its source in place of the attribute and mechanism."""
    first = (f"{'value':<16} {'source':<10}" if sources is not None else
             f"{'attribute':<16} {'value':<12} {'mech':<7}")
    header = f"{first} {'eps':>6} {'n':>9} {'truth':>9} {'estimate':>10} {'interval':>21} covers"
    lines = [header, "-" * len(header)]
    for r in rows:
        show = r.style.finer(r.truth, (r.ci_low, r.ci_high)).value
        mark = "*" if r.estimate != r.estimate_clipped else " "
        first = (f"{r.value:<16} {sources.get(r.value, 'listed'):<10}" if sources is not None else
                 f"{r.attribute:<16.16} {r.value:<12.12} {r.mechanism:<7}")
        lines.append(f"{first} {r.epsilon:>6.3g} {display.count(r.n):>9} {show(r.truth):>9} {show(r.estimate_clipped):>9}{mark} "
                     f"{f'[{show(r.ci_low)}, {show(r.ci_high)}]':>21} {'yes' if r.covered else 'NO'}")
    if any(r.estimate != r.estimate_clipped for r in rows):
        lines.append(CLIPPED_NOTE)
    lines.append(f"{sum(r.covered for r in rows)} of {len(rows)} intervals cover the truth{summary}")
    return lines


@dataclass(frozen=True)
class BreakdownTruthRow:
    """One row of a breakdown (``GET /api/v1/breakdowns``, as :class:`...shared.breakdowns.Row`
    with its values as labels) beside the population's truth: the share of ``row.value`` of ``of``
    among the devices whose ``by`` is ``row.by_value`` (a numeric ``of``: its mean there)."""

    of: str
    by: str
    style: display.Style
    truth: float
    by_truth: float  # the true share of ``row.by_value``
    row: Row

    @property
    def covered(self) -> bool:
        r = self.row
        return r.ci_low is not None and r.ci_high is not None and r.ci_low <= self.truth <= r.ci_high


def breakdown_truth_table(rows: Sequence[BreakdownTruthRow], *, summary: str = "") -> list[str]:
    """Within each value of ``by``: its true share beside its estimated ``by share``, and each
    value of ``of`` with its true within-b share beside the estimate and interval, whether the
    interval covers the truth, and a line counting those that do (followed by ``summary``). Figures
    as :func:`truth_table` writes them. Rows with a ``reason`` (no estimate, or no interval) are set
    apart after the others, under a line that says so, each with its truth and its reason."""
    header = (f"{'of':<12} {'value':<10} {'by':<12} {'by value':<10} {'by truth':>9} {'by share':>9} {'n':>9} "
              f"{'truth':>9} {'estimate':>10} {'interval':>21} covers")
    lines = [header, "-" * len(header)]
    shown = [t for t in rows if t.row.reason is None]
    apart = [t for t in rows if t.row.reason is not None]

    def start(t: BreakdownTruthRow) -> str:
        r = t.row
        by_share = "—" if r.by_share is None else display.percent(r.by_share)
        return (f"{t.of:<12.12} {r.value:<10.10} {t.by:<12.12} {r.by_value:<10.10} {display.percent(t.by_truth):>9} "
                f"{by_share:>9} {display.count(r.n):>9}")

    for t in shown:
        r = t.row
        if r.estimate_clipped is None or r.ci_low is None or r.ci_high is None:  # no reason: all are there
            continue
        show = t.style.finer(t.truth, (r.ci_low, r.ci_high)).value
        lines.append(f"{start(t)} {show(t.truth):>9} {show(r.estimate_clipped):>9}{'*' if r.clipped else ' '} "
                     f"{f'[{show(r.ci_low)}, {show(r.ci_high)}]':>21} {'yes' if t.covered else 'NO'}")
    if any(t.row.clipped for t in shown):
        lines.append(CLIPPED_NOTE)
    lines.append(f"{sum(t.covered for t in shown)} of {len(shown)} intervals cover the truth{summary}")
    if apart:
        lines.append("Rows with a reason (no interval; no estimate either where by's share cannot be told from 0):")
        for t in apart:
            estimate = "—" if t.row.estimate_clipped is None else t.style.value(t.row.estimate_clipped)
            lines.append(f"{start(t)} {t.style.value(t.truth):>9} {estimate:>9}  {t.row.reason}")
    return lines


def estimates_table(schema: Schema, rows: Iterable[Mapping[str, Any]],
                    rollup: Iterable[Mapping[str, Any]] = ()) -> list[str]:
    """Estimate rows of the API as the dashboard shows them (:mod:`...shared.display`), the
    estimate clipped to its scale (marked ``*``). A string attribute's candidates are listed as
    its table lists them: most frequent first over all windows, each with its source (listed,
    added or discovered: the rows' ``source``), and those whose all-windows interval includes zero
    after the rest, under a line that says so; ``rollup``: the all-windows rows that rank them
    (those of ``rows`` by default)."""
    rows = list(rows)
    overall_of = {(e["attribute"], e["value"]): e for e in [*rollup, *rows] if e["window"] == ROLLUP}

    def ranked(group: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        attribute = schema.attribute(group[0]["attribute"])
        if not attribute.kind.candidates_apart:
            return group
        overall = {e["value"]: overall_of.get((e["attribute"], e["value"])) for e in group}
        order = display.most_frequent_first({v: o["estimate_clipped"] if o else None for v, o in overall.items()})
        by_value = {e["value"]: e for e in group}
        told = [v for v in order if (o := overall[v]) is not None and display.told_from_zero(o["ci_low"])]
        return [by_value[v] for v in told] + [by_value[v] for v in order if v not in told]

    header = (f"{'window':<13} {'attribute':<16} {'value':<16} {'estimate':>9} {'interval':>21} {'n':>9} {'eps':>6}"
              f"  source")
    lines = [header, "-" * len(header)]
    clipped = False
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for e in rows:
        groups.setdefault((e["window"], e["attribute"]), []).append(e)
    for group in groups.values():
        apart = False
        for e in ranked(group):
            style = display.style_of(schema.attribute(e["attribute"]))
            source = e.get("source")
            overall = overall_of.get((e["attribute"], e["value"]))
            if source and not apart and not (overall and display.told_from_zero(overall["ci_low"])):
                apart = True
                lines.append(f"  {e['attribute']}: candidates whose interval over all windows includes zero "
                             f"(not told apart from absent):")
            value = BOOLEAN_KEY if e["value"] is True else str(e["value"])
            mark = "*" if e["estimate"] != e["estimate_clipped"] else " "
            clipped |= mark == "*"
            interval = f"{style.value(e['ci_low'])} – {style.value(e['ci_high'])}"
            lines.append(f"{e['window']:<13} {e['attribute']:<16.16} {value:<16.16} "
                         f"{style.value(e['estimate_clipped']):>8}{mark} {interval:>21} {display.count(e['n']):>9} "
                         f"{e['epsilon']:>6.3g}  {source or ''}".rstrip())
    if clipped:
        lines.append(CLIPPED_NOTE)
    for name in dict.fromkeys(e["attribute"] for e in rows):
        if schema.attribute(name).discover:
            lines.append(f"n of {name}: its level-0 reports, about half of those that carry it (the others carry "
                         f"discovery's prefixes, which no estimate uses)")
    return lines


def breakdowns_table(schema: Schema, rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Breakdown rows of the API (``GET /api/v1/breakdowns``) as the dashboard shows them: within
    each value of ``by``, the share (or mean) of ``of``'s value with its interval, clipped to its
    scale (marked ``*``), beside ``by``'s own share; a row whose ``reason`` voids them says why."""
    header = (f"{'window':<13} {'of':<12} {'value':<12} {'by':<12} {'by value':<12} {'estimate':>9} "
              f"{'interval':>21} {'by share':>9} {'n':>9}")
    lines = [header, "-" * len(header)]
    clipped = False
    for r in rows:
        style = display.style_of(schema.attribute(r["of"]))
        value = BOOLEAN_KEY if r["value"] is True else str(r["value"])
        by_value = str(r["by_value"]).lower() if isinstance(r["by_value"], bool) else str(r["by_value"])
        by_share = "—" if r["by_share"] is None else display.percent(r["by_share"])
        start = f"{r['window']:<13} {r['of']:<12.12} {value:<12.12} {r['by']:<12.12} {by_value:<12.12} "
        if r["estimate"] is None:
            lines.append(f"{start}{'—':>9} {r['reason']:>21} {by_share:>9} {r['n']:>9}")
            continue
        mark = "*" if r["estimate"] != r["estimate_clipped"] else " "
        clipped |= mark == "*"
        interval = r["reason"] if r["ci_low"] is None else f"{style.value(r['ci_low'])} – {style.value(r['ci_high'])}"
        lines.append(f"{start}{style.value(r['estimate_clipped']):>8}{mark} {interval:>21} {by_share:>9} "
                     f"{display.count(r['n']):>9}")
    if clipped:
        lines.append(CLIPPED_NOTE)
    return lines


def plan_table(options: Mapping[str, Sequence[Plan] | str], reports: int, targets: Mapping[str, float]) -> list[str]:
    """The planner's figures per split, as the dashboard's planner line writes them: the
    half-width at most with ``reports`` reports of the schema, the reports each attribute's target
    half-width needs (``targets`` by attribute name, on the estimate's scale, else the planner's
    default: 1% of its scale), a share's half-widths in percentage points and a mean's in its units,
    the smallest share it tells from zero, and for a discovering string attribute the smallest
    share discovery finds from that many reports (all in percent)."""
    header = (f"{'split':<13} {'attribute':<16} {'mech':<7} {'eps':>6} {'± now':>9} {'for ±':>9} {'unit':<8} "
              f"{'needed':>12} {'detects':>8} {'finds':>8}")
    lines = [header, "-" * len(header)]
    for split, plans in options.items():
        if isinstance(plans, str):
            lines.append(f"{split:<13} not possible: {plans}")
            continue
        for p in plans:
            style = display.style_of(p.attribute)
            target = targets.get(p.attribute.name, p.default_half_width)
            needed = p.reports_for(target)
            detects, finds = p.detection_threshold(reports), p.discovery_threshold(reports)
            lines.append(f"{split:<13} {p.attribute.name:<16.16} {p.attribute.mechanism:<7} {p.attribute.epsilon:>6.3g} "
                         f"{style.width(p.half_width(reports), unit=False):>9} {style.width(target, unit=False):>9} "
                         f"{'pts' if style.percent else 'units':<8} {needed:>12,} "
                         f"{'' if detects is None else 'none' if detects >= 1 else display.percent(detects):>8} "
                         f"{'' if finds is None else 'none' if finds >= 1 else display.percent(finds):>8}")
    return lines


def schemas_table(definitions: Iterable[Mapping[str, Any]]) -> list[str]:
    """The published schemas (latest version of each), one line each."""
    header = f"{'name':<24} {'version':>7} {'eps':>6} {'window':<6} {'split':<6} {'attrs':>5}  description"
    lines = [header, "-" * len(header)]
    for d in definitions:
        lines.append(f"{d['name']:<24} {d['version']:>7} {d['epsilon']:>6.3g} {d.get('window', 'day'):<6} "
                     f"{d.get('split', 'equal'):<6} {len(d['attributes']):>5}  {d.get('description', '')[:60]}")
    return lines
