"""The tables the ``ldp-telemetry`` command prints: each a function from rows to lines of text.

Kept apart from the Click layer (:mod:`.cli`) so that a table has one printer whoever prints it:
``simulate`` and ``demo`` both print :func:`truth_table`. An estimate outside its scale (a share
below 0 or above 1, a mean outside its range) is printed clipped and marked ``*``, as the
dashboard shows it, so a printed estimate always lies inside its printed interval; the unbiased
value is in the API's ``estimate`` (and the CSV's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..aggregator.dashboard.charts import shown
from ..shared.planner import Plan
from ..shared.schema import BOOLEAN_KEY, Schema

CLIPPED_NOTE = ("* outside its scale (below 0% or above 100%, or outside the range): the unbiased estimate, "
                "shown clipped to the scale; the API and the CSV give both")


@dataclass(frozen=True)
class TruthRow:
    """One value's estimate beside the population's truth."""

    attribute: str
    value: str  # "true" for a boolean's share, "mean" for a numeric attribute, else the category or bucket
    mechanism: str
    epsilon: float
    percent: bool  # a share (printed to 4 decimals), else a mean in its units (6 significant digits)
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
                    a.mech.estimand.percent, truth, estimate["estimate"], estimate["estimate_clipped"],
                    estimate["ci_low"], estimate["ci_high"], estimate["n"])


def truth_table(rows: Sequence[TruthRow], *, summary: str = "", sources: Mapping[str, str] | None = None
                ) -> list[str]:
    """Truth, estimate and interval of each row, whether the interval covers the truth, and a last
    line counting those that do (followed by ``summary``). With ``sources`` (a string attribute's
    candidates: value -> listed, added or discovered) each row shows the whole string and its
    source in place of the attribute and mechanism."""
    first = (f"{'value':<16} {'source':<10}" if sources is not None else
             f"{'attribute':<16} {'value':<12} {'mech':<7}")
    header = f"{first} {'eps':>6} {'n':>9} {'truth':>9} {'estimate':>10} {'interval':>21} covers"
    lines = [header, "-" * len(header)]
    for r in rows:
        show = "{:.4f}".format if r.percent else "{:.6g}".format
        mark = "*" if r.estimate != r.estimate_clipped else " "
        first = (f"{r.value:<16} {sources.get(r.value, 'listed'):<10}" if sources is not None else
                 f"{r.attribute:<16.16} {r.value:<12.12} {r.mechanism:<7}")
        lines.append(f"{first} {r.epsilon:>6.3g} {r.n:>9} {show(r.truth):>9} {show(r.estimate_clipped):>9}{mark} "
                     f"{f'[{show(r.ci_low)}, {show(r.ci_high)}]':>21} {'yes' if r.covered else 'NO'}")
    if any(r.estimate != r.estimate_clipped for r in rows):
        lines.append(CLIPPED_NOTE)
    lines.append(f"{sum(r.covered for r in rows)} of {len(rows)} intervals cover the truth{summary}")
    return lines


def estimates_table(schema: Schema, rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Estimate rows of the API as the dashboard shows them: a share in percent to one decimal, a
    mean in its units to 4 significant digits, the estimate clipped to its scale (marked ``*``)."""
    header = f"{'window':<13} {'attribute':<16} {'value':<16} {'estimate':>9} {'interval':>21} {'n':>9} {'eps':>6}"
    lines = [header, "-" * len(header)]
    clipped = False
    for e in rows:
        percent = schema.attribute(e["attribute"]).mech.estimand.percent
        value = BOOLEAN_KEY if e["value"] is True else str(e["value"])
        mark = "*" if e["estimate"] != e["estimate_clipped"] else " "
        clipped |= mark == "*"
        interval = f"{shown(e['ci_low'], percent)} – {shown(e['ci_high'], percent)}"
        lines.append(f"{e['window']:<13} {e['attribute']:<16.16} {value:<16.16} "
                     f"{shown(e['estimate_clipped'], percent):>8}{mark} {interval:>21} {e['n']:>9} {e['epsilon']:>6.3g}")
    if clipped:
        lines.append(CLIPPED_NOTE)
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
        percent = schema.attribute(r["of"]).mech.estimand.percent
        value = BOOLEAN_KEY if r["value"] is True else str(r["value"])
        by_value = str(r["by_value"]).lower() if isinstance(r["by_value"], bool) else str(r["by_value"])
        by_share = "—" if r["by_share"] is None else shown(r["by_share"], True)
        start = f"{r['window']:<13} {r['of']:<12.12} {value:<12.12} {r['by']:<12.12} {by_value:<12.12} "
        if r["estimate"] is None:
            lines.append(f"{start}{'—':>9} {r['reason']:>21} {by_share:>9} {r['n']:>9}")
            continue
        mark = "*" if r["estimate"] != r["estimate_clipped"] else " "
        clipped |= mark == "*"
        interval = r["reason"] if r["ci_low"] is None else f"{shown(r['ci_low'], percent)} – {shown(r['ci_high'], percent)}"
        lines.append(f"{start}{shown(r['estimate_clipped'], percent):>8}{mark} {interval:>21} {by_share:>9} {r['n']:>9}")
    if clipped:
        lines.append(CLIPPED_NOTE)
    return lines


def plan_table(options: Mapping[str, Sequence[Plan] | str], reports: int, targets: Mapping[str, float]) -> list[str]:
    """The planner's figures per split: the half-width now with ``reports`` reports, the reports
    each attribute's target half-width needs (``targets`` by attribute name, else the planner's
    default: 1% of its scale), the smallest share it tells from zero, and for a discovering string
    attribute the smallest share discovery finds. ``ValueError`` naming the attribute for a target
    narrower than the planner plans for."""
    header = (f"{'split':<13} {'attribute':<16} {'mech':<7} {'eps':>6} {'± now':>9} {'for ±':>9} {'needed':>12} "
              f"{'detects':>8} {'finds':>8}")
    lines = [header, "-" * len(header)]
    for split, plans in options.items():
        if isinstance(plans, str):
            lines.append(f"{split:<13} not possible: {plans}")
            continue
        for p in plans:
            target = targets.get(p.attribute.name, p.default_half_width)
            try:
                needed = p.reports_for(target)
            except ValueError as exc:
                raise ValueError(f"{p.attribute.name}: {exc}") from None
            detects, finds = p.detection_threshold(reports), p.discovery_threshold(reports)
            lines.append(f"{split:<13} {p.attribute.name:<16.16} {p.attribute.mechanism:<7} {p.attribute.epsilon:>6.3g} "
                         f"{p.half_width(reports):>9.4g} {target:>9.4g} {needed:>12,} "
                         f"{'' if detects is None else f'{detects:.4f}':>8} "
                         f"{'' if finds is None else 'none' if finds >= 1 else f'{finds:.4f}':>8}")
    return lines


def schemas_table(definitions: Iterable[Mapping[str, Any]]) -> list[str]:
    """The published schemas (latest version of each), one line each."""
    header = f"{'name':<24} {'version':>7} {'eps':>6} {'window':<6} {'split':<6} {'attrs':>5}  description"
    lines = [header, "-" * len(header)]
    for d in definitions:
        lines.append(f"{d['name']:<24} {d['version']:>7} {d['epsilon']:>6.3g} {d.get('window', 'day'):<6} "
                     f"{d.get('split', 'equal'):<6} {len(d['attributes']):>5}  {d.get('description', '')[:60]}")
    return lines
