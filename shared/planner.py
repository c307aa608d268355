r"""Planning: how wide an attribute's interval is with n reports, and how many reports a width needs.

An analyst's two questions, answered from the variance formulas alone (no data). For an
attribute whose one report has variance at most :math:`V` (per report, in the estimate's units)
and which a share :math:`s` of the reports carry (1 under ``split: "equal"``, :math:`1/k` under
``"sample"``), an interval at confidence level with normal quantile :math:`z` from :math:`n` reports
has half-width about

.. math:: h(n) = z \sqrt{V / (s n)}, \qquad n(h) = \left\lceil \frac{z^2 V}{s h^2} \right\rceil.

:math:`V` is the mechanism's bound over every true value (:meth:`Mechanism.report_variance`), so
the plan is what the widest interval would be. The *detection threshold* (RAPPOR's detection
frequency, Erlingsson et al. 2014) is the smallest true share an attribute can tell from zero:
the half-width at a share of 0, :math:`z\sqrt{q(1-q)/(s n)}/(p-q)`.

A discovering string attribute (``"discover": true``) estimates its candidates from its level-0
reports, half of those that carry it, so its :math:`s` is halved; the other half is spread over
its :math:`L` levels, :math:`n_L = s n / (2L)` reports a level, and the smallest share discovery
can find (:meth:`Plan.discovery_threshold`) is the share whose mean supports at the last level
reach the null threshold of :func:`.discovery.null_hits` (found in about half the runs there;
more common strings more often).

Each plan is made for the schema as published and for its alternatives (every attribute ε/k on
every report, or one attribute per report with the whole ε), so the panel can show what another
split would buy.

Half-widths are planned from :data:`MIN_RELATIVE_HALF_WIDTH` of the estimate's scale (1 for a
share, the range for a mean) up: at the least ε an attribute may have (1e-4), carried by one
report in 64, at 99.9% confidence, that is still a finite number of reports (about 10²³), where a
half-width of 1e-308 would need 10⁶¹⁶ (a float overflow, once a division by zero). A half-width
of the whole scale or more needs one report: the interval is clipped to the scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import breakdowns, discovery
from .estimators import DEFAULT_CONFIDENCE, z_value
from .mechanisms.olh import LEVEL_ZERO
from .schema import Attribute, Schema, SchemaError, parse_schema

ALTERNATIVES = ("equal", "sample")
# The narrowest half-width planned, as a share of the estimate's scale (see the module docstring).
MIN_RELATIVE_HALF_WIDTH = 1e-6
# The half-width a plan is made for when the analyst names none: 1% of the estimate's scale (one
# percentage point of a share, 1% of a mean's range), so a share and a mean in any unit read alike.
DEFAULT_TARGET = 0.01


@dataclass(frozen=True)
class Plan:
    """The planning figures of one attribute under one way of splitting the budget."""

    attribute: Attribute
    split: str  # "equal", "sample", or "per-attribute" (the schema's own ε per attribute)
    carried: float  # the share of reports that carry the attribute and are estimated (level 0 if discovering)
    variance: float  # per report, at most, in the estimate's units squared
    confidence: float = DEFAULT_CONFIDENCE
    per_level: float = 0.0  # a discovering attribute's share of reports at each discovery level

    def half_width(self, n: int) -> float:
        """About half the interval's width with ``n`` reports of the schema."""
        if not n >= 1:
            raise ValueError(f"n must be at least 1, got {n!r}")
        return z_value(self.confidence) * math.sqrt(self.variance / (self.carried * n))

    @property
    def scale(self) -> float:
        """The width of the scale the estimates are on: 1 for a share, the range for a mean."""
        return self.attribute.kind.extent(self.attribute)

    @property
    def default_half_width(self) -> float:
        """:data:`DEFAULT_TARGET` of :attr:`scale`: the dashboard's and the CLI's default."""
        return DEFAULT_TARGET * self.scale

    def reports_for(self, half_width: float) -> int:
        """Reports of the schema needed for an interval of about ``half_width`` either side;
        ``ValueError`` below :data:`MIN_RELATIVE_HALF_WIDTH` of :attr:`scale`."""
        if _within_reach(half_width, self.scale):
            return 1
        return max(1, math.ceil(z_value(self.confidence) ** 2 * self.variance / (self.carried * half_width ** 2)))

    def detection_threshold(self, n: int) -> float | None:
        """The smallest true share told from 0 with ``n`` reports; None for a mean."""
        if not self.attribute.mech.estimand.percent:
            return None
        p, q = self.attribute.p, self.attribute.q
        return z_value(self.confidence) * math.sqrt(q * (1 - q) / (self.carried * n)) / (p - q)


    def discovery_threshold(self, n: int) -> float | None:
        """The smallest share discovery finds (about half the time) with ``n`` reports of the
        schema; None for an attribute that does not discover, inf when no level has a report."""
        if not self.per_level:
            return None
        a = self.attribute
        return discovery.smallest_share(math.floor(n * self.per_level), a.p, a.q, discovery.last_level_tested(a))


def _within_reach(half_width: float, scale: float) -> bool:
    """Whether one report gives an interval of ``half_width`` either side on a scale ``scale``
    wide (the interval is clipped to the scale); ``ValueError`` below
    :data:`MIN_RELATIVE_HALF_WIDTH` of it."""
    least = MIN_RELATIVE_HALF_WIDTH * scale
    if not (isinstance(half_width, (int, float)) and math.isfinite(half_width) and half_width >= least):
        raise ValueError(f"half_width must be a number of at least {least:g} (a millionth of the scale), "
                         f"got {half_width!r}")
    return half_width >= scale


@dataclass(frozen=True)
class BreakdownPlan:
    r"""The planner's answer for one row of a breakdown (DESIGN.md, "Breakdowns"), from the ``all``
    rollup's sums: one report's variance of the ratio is

    .. math:: \sigma^2 = (s_{uu} - 2\hat R s_{uw} + \hat R^2 s_{ww}) / ar w^2

    (the delta method's, per report), so n reports give a half-width :math:`z\sigma/\sqrt n` and a
    half-width h needs :math:`(z\sigma/h)^2` reports. ``sigma`` None: the rollup has no row for it
    or a null one (its ratio means nothing yet): it needs reports first."""

    value: Any  # of `of`, as :class:`.breakdowns.Row` has it
    by_value: Any
    sigma: float | None  # in the estimate's units (a share's, or the `of` attribute's own)
    n: int  # the reports of the rollup
    scale: float  # the width of the estimate's scale: 1 for a share, the range for a mean
    confidence: float = DEFAULT_CONFIDENCE

    def half_width(self, n: int | None = None) -> float | None:
        """About half the interval's width with ``n`` reports (the rollup's own unless given)."""
        if self.sigma is None:
            return None
        n = self.n if n is None else n
        if not n >= 1:
            raise ValueError(f"n must be at least 1, got {n!r}")
        return z_value(self.confidence) * self.sigma / math.sqrt(n)

    def reports_for(self, half_width: float) -> int | None:
        """Reports needed for an interval of about ``half_width`` either side, ``(zσ/h)²`` rounded
        up; None while it needs reports first."""
        if self.sigma is None:
            return None
        if _within_reach(half_width, self.scale):
            return 1
        return max(1, math.ceil((z_value(self.confidence) * self.sigma / half_width) ** 2))


def plan_breakdown(schema: Schema, breakdown: breakdowns.Breakdown, rollup: breakdowns.BreakdownSums | None, *,
                   confidence: float = DEFAULT_CONFIDENCE) -> list[BreakdownPlan]:
    """A :class:`BreakdownPlan` per row of ``breakdown`` (in the rows' order) from the sums of its
    ``all`` rollup (None: it has none yet)."""
    of = schema.attribute(breakdown.of)
    cells = breakdowns.cell_moments(schema, breakdown, rollup or breakdowns.BreakdownSums({}))
    # One unit of the ratio's scale in the estimate's units: 1 for a share, half the range for a mean.
    slope = of.mech.to_estimate(of, 1.0) - of.mech.to_estimate(of, 0.0)
    scale = of.kind.extent(of)
    plans = []
    for value, by_value, m in cells:
        shown = breakdowns.row(of, value, by_value, m, confidence, memoised_rollup=False)
        sigma = None
        if shown.estimate is not None:
            ratio = m.u / m.w
            sigma = slope * math.sqrt(max(0.0, m.s_uu - 2 * ratio * m.s_uw + ratio * ratio * m.s_ww)) / abs(m.w)
        plans.append(BreakdownPlan(value, by_value, sigma, m.n, scale, confidence))
    return plans


def typed_half_width(attribute: Attribute, text: str) -> float:
    """The half-width an analyst typed for ``attribute`` (a share's in percentage points, a mean's
    in its own units), on the estimate's scale; ``ValueError`` with a sentence in the typed units
    unless it is from :data:`MIN_RELATIVE_HALF_WIDTH` of the scale to the whole scale."""
    percent = attribute.mech.estimand.percent
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"the half-width for {attribute.name} must be a positive number")
    shown = 100 if percent else 1  # typed per this much of the estimate's scale
    scale = attribute.kind.extent(attribute)
    least = MIN_RELATIVE_HALF_WIDTH * scale
    if not least <= value / shown <= scale:
        unit = " percentage points" if percent else ""
        raise ValueError(f"the half-width for {attribute.name} must be from {least * shown:g} to {scale * shown:g}"
                         f"{unit}, got {value:g}")
    return value / shown


def plan(schema: Schema | Mapping[str, Any], *, confidence: float = DEFAULT_CONFIDENCE) -> list[Plan]:
    """One :class:`Plan` per attribute of ``schema`` as published."""
    schema = parse_schema(schema)
    carried = 1 / len(schema.attributes) if schema.split == "sample" else 1.0
    label = schema.split if not _has_own_epsilons(schema) else "per-attribute"
    return [Plan(a, label, carried * (LEVEL_ZERO if a.discover else 1.0), a.mech.report_variance(a), confidence,
                 carried * (1 - LEVEL_ZERO) / len(a.levels) if a.discover else 0.0) for a in schema.attributes]


def alternatives(schema: Schema | Mapping[str, Any], *, confidence: float = DEFAULT_CONFIDENCE
                 ) -> dict[str, list[Plan] | str]:
    """The plans of ``schema`` as published and under each other split: a split's plans, or the
    sentence that says why the schema cannot take it (a memoised schema under ``sample`` needs
    ε below ε∞/k)."""
    schema = parse_schema(schema)
    published = plan(schema, confidence=confidence)
    out: dict[str, list[Plan] | str] = {published[0].split: published}
    for split in ALTERNATIVES:
        if split in out:
            continue
        definition = schema.to_dict()
        definition["split"] = split
        definition["attributes"] = [{k: v for k, v in a.items() if k in _CHOSEN} for a in definition["attributes"]]
        try:
            out[split] = plan(definition, confidence=confidence)
        except SchemaError as exc:
            out[split] = str(exc)
    return out


# What an operator chooses of an attribute; everything else is derived again under another split,
# the mechanism too (auto: the best one at the ε that split gives).
_CHOSEN = ("name", "type", "categories", "range", "edges", "max_length", "candidates", "discover", "alphabet", "levels")


def _has_own_epsilons(schema: Schema) -> bool:
    share = schema.epsilon if schema.split == "sample" else schema.epsilon / len(schema.attributes)
    return any(not math.isclose(a.epsilon, share, rel_tol=1e-12) for a in schema.attributes)
