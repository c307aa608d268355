r"""Breakdowns: one attribute within each value of another (DESIGN.md, "Breakdowns").

A breakdown ``{"of": A, "by": B}`` estimates, within each value :math:`b` of B, the share of each
value :math:`a` of A (for a numeric A, its mean). It needs no new report: under ``split: "equal"``
(or per-attribute ε) every report carries both, each randomised with its own coins, so given the
true values A's and B's reports are independent (memoised ones too, within a window: their
permanent layers come from different HMAC messages). With the (p, q) a share attribute's estimator
uses (the composed ones of a memoised attribute) and :math:`\Delta = p - q`, a report's unbiased
estimate of the indicator of value :math:`j` is

.. math:: z_j = (I_j - q) / \Delta, \qquad E[z_j \mid x] = 1\{x = j\}

(:math:`I_j` the report's indicator of :math:`j`, :meth:`Mechanism.report_amounts`; a boolean's
:math:`I_{false} = 1 - I_{true}`). For a numeric A, :math:`v` is the report's unbiased estimate of
:math:`t` (duchi :math:`C(2b - 1)`; pm, hm, laplace the wire value). Per report :math:`w = z_b` and
:math:`u = z_a z_b` (numeric: :math:`u = v z_b`); over the :math:`n` reports that carry both,

.. math:: \hat\theta_b = \bar w, \qquad \hat\theta_{ab} = \bar u, \qquad \hat R = \bar u / \bar w

and Fieller's interval for a ratio of means (Fieller 1954), with :math:`s` the sample
(co)variances (divisor :math:`n - 1`) and :math:`z` the normal quantile of the level:
:math:`A = \bar w^2 - z^2 s_{ww}/n`, :math:`B = \bar u\bar w - z^2 s_{uw}/n`,
:math:`C = \bar u^2 - z^2 s_{uu}/n`, the interval :math:`(B \mp \sqrt{B^2 - AC})/A` when
:math:`A > 0` (it then holds :math:`\hat R`); when :math:`A \le 0`, b's share cannot be told from 0
and the ratio means nothing.

Everything follows from integer counts (:class:`BreakdownSums`), because :math:`I^2 = I`: with
:math:`\alpha = (1 - 2q)/\Delta^2` and :math:`\beta = q^2/\Delta^2`, :math:`z^2 = \alpha I + \beta`
(:func:`moments` has every closed form). So ingest counts a batch as one matrix product
(:func:`count_wire`), a store adds the sums up per window and over windows, and estimation is
O(cells).

This module holds the rules of a schema's ``breakdowns`` (:func:`parse_breakdowns`,
:func:`add_breakdown`, :func:`parse_published`), the counting (numpy, imported where it is used:
the client never counts) and the rows (:func:`estimate`). The planner's answer for a breakdown is
:func:`.planner.plan_breakdown`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from . import attribute_types
from .checks import SchemaError, kind, show
from .estimators import z_value
from .mechanisms import Mechanism
from .schema import Attribute, Schema, parse_schema

if TYPE_CHECKING:  # numpy is for the aggregator and simulation only; a device never imports it
    import numpy as np

MAX_BREAKDOWNS = 16  # per schema version, listed and added together
MAX_CELLS = 4096  # per breakdown: the values of `of` times those of `by`
# The key that stands for "every report" in :class:`BreakdownSums` (no value key is empty: a
# category, a bucket's name, "true", "sum" and "sumsq" all have a character).
TOTAL = ""
# A row's `reason`: why fields of it are null.
BY_SHARE_NOT_DISTINCT_FROM_0 = "by_share_not_distinct_from_0"  # A <= 0: estimate and interval null
MEMOISED_ROLLUP = "memoised_rollup"  # the `all` rollup of a memoised schema: the interval null
TOO_FEW_REPORTS = "too_few_reports"  # n < 2: estimate and interval null
# The split under which no report carries two attributes.
ONE_ATTRIBUTE_A_REPORT = "sample"
_FIELDS = ("of", "by")


@dataclass(frozen=True)
class Breakdown:
    """The breakdown of attribute ``of`` within each value of attribute ``by``."""

    of: str
    by: str

    def to_dict(self) -> dict[str, str]:
        return {"of": self.of, "by": self.by}


def values_of(attribute: Attribute) -> tuple[Any, ...]:
    """The values of ``attribute`` a breakdown counts: those it is estimated for (a boolean's
    ``true``, a numeric attribute's ``"mean"``, each category or bucket) and a boolean's ``false``.
    A breakdown's rows are for each of these of its ``by`` and each estimated value of its ``of``."""
    return attribute.values + attribute.kind.complement(attribute)


def cells(schema: Schema, breakdown: Breakdown) -> int:
    """The cells of ``breakdown``: the values of ``of`` (a boolean 2, a numeric 1) times those of
    ``by`` (a boolean 2)."""
    return len(values_of(schema.attribute(breakdown.of))) * len(values_of(schema.attribute(breakdown.by)))


# --- the rules ----------------------------------------------------------------------------------


def parse_published(obj: Any) -> tuple[Schema, tuple[Breakdown, ...]]:
    """A schema as published, with its ``breakdowns`` (optional): the schema parsed without them
    (the served schema never carries them: clients in the field refuse unknown fields), then its
    breakdowns against it. :class:`SchemaError` naming the field and the rule."""
    if isinstance(obj, Mapping) and "breakdowns" in obj:
        schema = parse_schema({k: v for k, v in obj.items() if k != "breakdowns"})
        return schema, parse_breakdowns(obj["breakdowns"], schema)
    return parse_schema(obj), ()


def parse_breakdowns(raw: Any, schema: Schema) -> tuple[Breakdown, ...]:
    """A schema's ``breakdowns`` list checked against ``schema`` (DESIGN.md, "Breakdowns"): at most
    :data:`MAX_BREAKDOWNS`, each as :func:`parse_breakdown` checks it, none under ``split:
    "sample"``. The same breakdown listed twice is one (as adding one that is there changes
    nothing)."""
    if not isinstance(raw, list):
        raise SchemaError("breakdowns", f'breakdowns must be a list of {{"of": A, "by": B}} objects, got {kind(raw)}')
    if raw:
        _refuse_one_attribute_a_report(schema)
    distinct = dict.fromkeys(parse_breakdown(item, schema, f"breakdowns[{i}]") for i, item in enumerate(raw))
    _check_count(len(distinct))
    return tuple(distinct)


def add_breakdown(raw: Any, schema: Schema, existing: Sequence[Breakdown]) -> tuple[Breakdown, ...]:
    """``existing`` with the breakdown ``raw`` (``{"of": A, "by": B}``, as ``POST .../breakdowns``
    takes it) added, checked by the same rules as at publish; ``existing`` itself if it is there."""
    _refuse_one_attribute_a_report(schema)
    breakdown = parse_breakdown(raw, schema)
    if breakdown in existing:
        return tuple(existing)
    _check_count(len(existing) + 1)
    return (*existing, breakdown)


def parse_breakdown(raw: Any, schema: Schema, where: str = "") -> Breakdown:
    """One breakdown ``{"of": A, "by": B}`` checked against ``schema``: ``of`` and ``by`` two
    different attributes of it; ``by`` one whose report indicates each value (a boolean,
    categorical or histogram attribute); ``of`` any but a string; at most :data:`MAX_CELLS` cells.
    ``where`` is its place in the request (``breakdowns[2]``; empty: the request itself)."""
    if not isinstance(raw, Mapping):
        raise SchemaError(where or "breakdown", f'{where or "a breakdown"} must be a JSON object {{"of": A, "by": B}}, '
                                                f"got {kind(raw)}")
    unknown = sorted(str(k) for k in raw if k not in _FIELDS)
    if unknown:
        raise SchemaError(_at(where, unknown[0]), f'{where or "a breakdown"} has unknown field(s): {", ".join(unknown)}; '
                                                  f'a breakdown is {{"of": A, "by": B}}')
    of, by = (_named_attribute(raw.get(name), schema, _at(where, name)) for name in _FIELDS)
    if of is by:
        raise SchemaError(_at(where, "by"), f"{_at(where, 'by')} must be another attribute than of ({of.name!r}): a "
                                            f"breakdown is one attribute within each value of another")
    if not by.mech.indicates:
        raise SchemaError(_at(where, "by"), f"{_at(where, 'by')} must be a {_types(lambda m: m.indicates)} attribute "
                                            f"(its values divide the reports); {by.name!r} is {by.type}")
    if not (of.mech.indicates or of.mech.unbiased_number):
        raise SchemaError(_at(where, "of"), f"{_at(where, 'of')} may be any attribute but a "
                                            f"{_types(lambda m: not (m.indicates or m.unbiased_number))} one; "
                                            f"{of.name!r} is {of.type}")
    breakdown = Breakdown(of.name, by.name)
    count = cells(schema, breakdown)
    if count > MAX_CELLS:
        raise SchemaError(where or "breakdown", f"{where or 'a breakdown'} would have {count:,} cells ({len(values_of(of))} "
                                                f"values of {of.name!r} times {len(values_of(by))} of {by.name!r}); a "
                                                f"breakdown may have at most {MAX_CELLS:,}")
    return breakdown


def _named_attribute(name: Any, schema: Schema, field: str) -> Attribute:
    if not isinstance(name, str) or name not in schema.by_name:
        raise SchemaError(field, f"{field} must name an attribute of the schema, got {show(name)}")
    return schema.attribute(name)


def _refuse_one_attribute_a_report(schema: Schema) -> None:
    if schema.split == ONE_ATTRIBUTE_A_REPORT:
        raise SchemaError("breakdowns", f"a schema with split {ONE_ATTRIBUTE_A_REPORT!r} cannot have breakdowns: no report "
                                 f"carries two attributes")


def _check_count(count: int) -> None:
    if count > MAX_BREAKDOWNS:
        raise SchemaError("breakdowns", f"a schema version may have at most {MAX_BREAKDOWNS} breakdowns, listed and "
                                        f"added together; these would make {count}")


def _types(allowed: Callable[[Mechanism], bool]) -> str:
    """The attribute types all of whose mechanisms are ``allowed``, in words ("a, b or c")."""
    names = [t.name for t in attribute_types.REGISTRY.values() if all(allowed(m) for m in t.mechanisms)]
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))


def _at(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


# --- counting -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BreakdownSums:
    r"""The sufficient statistics of one breakdown over some reports (DESIGN.md, "Breakdowns"):
    ``amounts[(of_key, by_key)]`` is the sum over the reports of A's amount of ``of_key`` (its
    :meth:`Mechanism.counter_keys`: a share's indicator :math:`I_a`, duchi's bit, pm's wire value
    and its square) times B's indicator :math:`I_b` of ``by_key`` (B's stored keys: a boolean's
    ``true`` only), with :data:`TOTAL` standing for 1: ``(TOTAL, TOTAL)`` is n, ``(TOTAL, b)``
    :math:`N_b`, ``(a, TOTAL)`` :math:`N_a` (or V, Q, H), ``(a, b)`` :math:`N_{ab}` (or
    :math:`V_b`, :math:`Q_b`, :math:`H_b`). Only amounts that are not zero are kept; integers where
    the amounts are. A store adds them up key by key (``+``), per window and over windows."""

    amounts: Mapping[tuple[str, str], int | float]

    @property
    def n(self) -> int:
        """The reports counted (those that carried both attributes)."""
        return int(self.amount(TOTAL, TOTAL))

    def amount(self, of_key: str, by_key: str) -> int | float:
        return self.amounts.get((of_key, by_key), 0)

    def __add__(self, other: BreakdownSums) -> BreakdownSums:
        added = dict(self.amounts)
        for key, amount in other.amounts.items():
            added[key] = added.get(key, 0) + amount
        return BreakdownSums({key: amount for key, amount in added.items() if amount})


def pooled(sums: Iterable[BreakdownSums]) -> BreakdownSums:
    """The sums of several windows added up: the ``all`` rollup's."""
    total = BreakdownSums({})
    for window in sums:
        total = total + window
    return total


def count(schema: Schema, breakdown: Breakdown, values: Sequence[Mapping[str, Any]]) -> BreakdownSums:
    """The sums of ``breakdown`` over checked reports' ``values`` (each a report's ``values`` object
    as it arrived: attribute -> wire value), those that carry both attributes: the definition from
    wire values, which the aggregator's count from the stored numeric form must agree with (the
    tests hold it to that)."""
    of, by = schema.attribute(breakdown.of), schema.attribute(breakdown.by)
    carried = [v for v in values if of.name in v and by.name in v]
    return count_wire(of, by, of.mech.wire_array(of, [v[of.name] for v in carried]),
                      by.mech.wire_array(by, [v[by.name] for v in carried]))


def count_wire(of: Attribute, by: Attribute, of_wire: np.ndarray, by_wire: np.ndarray) -> BreakdownSums:
    """The sums of the breakdown of ``of`` by ``by`` over reports given as wire arrays
    (:meth:`Mechanism.wire_array`, one row each, in the same order): one matrix product,
    :math:`[1\\ M_A]^T [1\\ I_B]`, of A's per-report amounts and B's indicators, each with a column
    of ones before it. The products are of 0/1 integers in doubles: exact below 2^53 reports."""
    import numpy as np

    a = of.mech.report_amounts(of, of_wire)
    b = by.mech.report_amounts(by, by_wire)
    ones = np.ones((a.shape[0], 1))
    products = np.hstack([ones, a]).T @ np.hstack([ones, b])
    of_keys = (TOTAL, *of.mech.counter_keys(of))
    by_keys = (TOTAL, *by.mech.counter_keys(by))
    integral = np.issubdtype(a.dtype, np.integer)  # B's indicators always are
    return BreakdownSums({(of_keys[i], by_keys[j]): int(round(products[i, j])) if integral or i == 0
                          else float(products[i, j]) for i, j in zip(*np.nonzero(products))})


# --- estimation ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Moments:
    """Of one cell (a value of ``of``, a value of ``by``) over ``n`` reports: the means of u and w
    and their sample (co)variances (divisor n - 1; NaN below 2 reports, the means NaN at 0)."""

    n: int
    u: float  # ū: θ̂_ab, or the mean of v z_b for a numeric `of`
    w: float  # w̄: θ̂_b
    s_uu: float
    s_uw: float
    s_ww: float


@dataclass(frozen=True)
class Row:
    """One row of a breakdown, as DESIGN.md's API names its fields; ``reason`` says why the ones it
    voids are null."""

    value: Any  # of `of`: True for a boolean, a category or bucket, "mean" for a numeric attribute
    by_value: Any  # of `by`: True or False for a boolean, a category or bucket
    estimate: float | None  # R̂ (for a numeric `of` in its units), unclipped
    estimate_clipped: float | None
    ci_low: float | None
    ci_high: float | None
    by_share: float | None  # θ̂_b = w̄ of the same reports, unclipped
    n: int
    reason: str | None

    @property
    def clipped(self) -> bool:
        """Whether the estimate lies outside its scale (``estimate_clipped`` differs from it)."""
        return self.estimate is not None and self.estimate != self.estimate_clipped


def cell_moments(schema: Schema, breakdown: Breakdown, sums: BreakdownSums) -> list[tuple[Any, Any, Moments]]:
    """``(value, by_value, moments)`` of each cell of ``breakdown`` a row is made for: each value
    of ``by`` (:func:`values_of`), and within it each value ``of`` is estimated for."""
    of, by = schema.attribute(breakdown.of), schema.attribute(breakdown.by)
    return [(value, by_value, moments(of, by, sums, i, j))
            for j, by_value in enumerate(values_of(by)) for i, value in enumerate(of.values)]


def moments(of: Attribute, by: Attribute, sums: BreakdownSums, value_index: int, by_index: int) -> Moments:
    r"""The cell of ``of``'s value ``value_index`` and ``by``'s value ``by_index`` (of
    :func:`values_of`), from the integer counts alone (DESIGN.md, "Breakdowns"; :math:`I^2 = I`):

    .. math::

        \Sigma w &= (N_b - n q_B)/\Delta_B, \qquad \Sigma w^2 = \alpha_B N_b + \beta_B n \\
        \Sigma u &= (N_{ab} - q_A N_b - q_B N_a + n q_A q_B)/(\Delta_A \Delta_B) \\
        \Sigma uw &= (\alpha_B (N_{ab} - q_A N_b) + \beta_B (N_a - q_A n))/\Delta_A \\
        \Sigma u^2 &= \alpha_A\alpha_B N_{ab} + \alpha_A\beta_B N_a + \beta_A\alpha_B N_b + \beta_A\beta_B n

    and for a numeric A, with :math:`V = \Sigma v`, :math:`Q = \Sigma v^2` and :math:`V_b, Q_b`
    their sums where :math:`I_b = 1` (:meth:`Mechanism.mean_sums`): :math:`\Sigma u = (V_b - q_B
    V)/\Delta_B`, :math:`\Sigma uw = \alpha_B V_b + \beta_B V`, :math:`\Sigma u^2 = \alpha_B Q_b +
    \beta_B Q`."""
    n = sums.n
    if n < 1:
        return Moments(n, math.nan, math.nan, math.nan, math.nan, math.nan)
    within = _within(by, sums, by_index)
    n_b = within(TOTAL)
    q_b, delta_b, alpha_b, beta_b = _parameters(by)
    sum_w = (n_b - n * q_b) / delta_b
    sum_ww = alpha_b * n_b + beta_b * n
    if of.mech.indicates:
        key = of.keys[value_index]
        n_a, n_ab = sums.amount(key, TOTAL), within(key)
        q_a, delta_a, alpha_a, beta_a = _parameters(of)
        sum_u = (n_ab - q_a * n_b - q_b * n_a + n * q_a * q_b) / (delta_a * delta_b)
        sum_uw = (alpha_b * (n_ab - q_a * n_b) + beta_b * (n_a - q_a * n)) / delta_a
        sum_uu = alpha_a * alpha_b * n_ab + alpha_a * beta_b * n_a + beta_a * alpha_b * n_b + beta_a * beta_b * n
    else:
        keys = of.mech.counter_keys(of)
        v, q = of.mech.mean_sums(of, n, {key: sums.amount(key, TOTAL) for key in keys})
        v_b, q_of_b = of.mech.mean_sums(of, int(n_b), {key: within(key) for key in keys})
        sum_u = (v_b - q_b * v) / delta_b
        sum_uw = alpha_b * v_b + beta_b * v
        sum_uu = alpha_b * q_of_b + beta_b * q
    u, w = sum_u / n, sum_w / n
    if n < 2:
        return Moments(n, u, w, math.nan, math.nan, math.nan)
    return Moments(n, u, w, (sum_uu - sum_u * u) / (n - 1), (sum_uw - sum_u * w) / (n - 1),
                   (sum_ww - sum_w * w) / (n - 1))


def _parameters(attribute: Attribute) -> tuple[float, float, float, float]:
    """``(q, Δ, α, β)`` of a share attribute: :math:`\\Delta = p - q`, :math:`\\alpha = (1 -
    2q)/\\Delta^2`, :math:`\\beta = q^2/\\Delta^2`, so that :math:`z^2 = \\alpha I + \\beta`."""
    q, delta = attribute.q, attribute.p - attribute.q
    return q, delta, (1 - 2 * q) / delta ** 2, q * q / delta ** 2


def _within(by: Attribute, sums: BreakdownSums, by_index: int) -> Callable[[str], int | float]:
    """``of_key -> Σ amount · I_b`` for ``by``'s value ``by_index``: stored, or for a boolean's
    ``false`` the total less ``true``'s (:math:`I_{false} = 1 - I_{true}`)."""
    if by_index < len(by.keys):
        key = by.keys[by_index]
        return lambda of_key: sums.amount(of_key, key)
    only = by.keys[0]
    return lambda of_key: sums.amount(of_key, TOTAL) - sums.amount(of_key, only)


def fieller(m: Moments, z: float) -> tuple[float, float] | None:
    r"""Fieller's interval (Fieller 1954) for :math:`\bar u / \bar w` at the normal quantile ``z``:
    :math:`(B \mp \sqrt{B^2 - AC})/A`; None when :math:`A \le 0` (the denominator cannot be told
    from 0: the set is unbounded)."""
    k = z * z / m.n
    a = m.w * m.w - k * m.s_ww
    if not a > 0:
        return None
    b = m.u * m.w - k * m.s_uw
    c = m.u * m.u - k * m.s_uu
    # B² − AC ≥ 0 whenever A > 0 (the quadratic is ≤ 0 at R̂); rounding may take a hair below.
    root = math.sqrt(max(0.0, b * b - a * c))
    return (b - root) / a, (b + root) / a


def row(of: Attribute, value: Any, by_value: Any, m: Moments, confidence: float, *, memoised_rollup: bool) -> Row:
    """The row of one cell. Fewer than 2 reports: ``too_few_reports``; :math:`A \\le 0`:
    ``by_share_not_distinct_from_0``; both void the estimate and the interval. Otherwise
    :math:`\\hat R` in ``of``'s units (unclipped and clipped) with Fieller's interval mapped and
    clipped, which the ``all`` rollup of a memoised schema voids (``memoised_rollup``): a
    device's reports in several windows share their permanent layer, so the pooled interval would
    be too narrow."""
    by_share = m.w if m.n >= 1 else None
    interval = fieller(m, z_value(confidence)) if m.n >= 2 else None
    if interval is None:
        reason = TOO_FEW_REPORTS if m.n < 2 else BY_SHARE_NOT_DISTINCT_FROM_0
        return Row(value, by_value, None, None, None, None, by_share, m.n, reason)
    mech = of.mech
    low, high = mech.estimate_span(of)

    def clip(x: float) -> float:
        return min(high, max(low, x))

    estimate = mech.to_estimate(of, m.u / m.w)
    if memoised_rollup:
        return Row(value, by_value, estimate, clip(estimate), None, None, by_share, m.n, MEMOISED_ROLLUP)
    return Row(value, by_value, estimate, clip(estimate), clip(mech.to_estimate(of, interval[0])),
               clip(mech.to_estimate(of, interval[1])), by_share, m.n, None)


def estimate(schema: Schema, breakdown: Breakdown, sums: BreakdownSums, confidence: float, *,
             rollup: bool) -> list[Row]:
    """The rows of ``breakdown`` from ``sums`` (one window's, or pooled over windows for the ``all``
    rollup: ``rollup``), at the ``confidence`` level: for each value of ``by``, each value of ``of``
    (a boolean's ``true``; a numeric's ``"mean"``)."""
    of, by = schema.attribute(breakdown.of), schema.attribute(breakdown.by)
    memoised_rollup = rollup and (of.memo is not None or by.memo is not None)
    return [row(of, value, by_value, m, confidence, memoised_rollup=memoised_rollup)
            for value, by_value, m in cell_moments(schema, breakdown, sums)]
