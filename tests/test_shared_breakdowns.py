"""Breakdowns (shared/breakdowns.py; DESIGN.md, "Breakdowns"): the rules of a schema's breakdowns,
the counting, the closed forms against brute force, the rows and their reasons, the planner, and
the statistics of the estimator on simulated correlated populations.

The statistical tests simulate devices with fixed seeds (``shared.simulation``: each device's true
``by`` value, its ``of`` value drawn within it, both randomised by the mechanisms' bulk encoders),
count each population as ingest does (:func:`breakdowns.count_wire`) and estimate it as the refresh
does (:func:`breakdowns.estimate`). Tolerances are derived from the variance, beside each assertion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ldp_telemetry.shared import breakdowns
from ldp_telemetry.shared.breakdowns import (BY_SHARE_NOT_DISTINCT_FROM_0, MEMOISED_ROLLUP, TOO_FEW_REPORTS, TOTAL,
                                             Breakdown, BreakdownSums)
from ldp_telemetry.shared.checks import SchemaError
from ldp_telemetry.shared.estimators import z_value
from ldp_telemetry.shared.planner import plan_breakdown
from ldp_telemetry.shared.schema import Attribute, Schema, parse_schema
from ldp_telemetry.shared.simulation import correlated_truth, responses

OS = ["linux", "macos", "windows"]
LANGS = ["en", "de", "fr", "es"]


def schema_of(attributes: list[dict[str, Any]], *, epsilon_each: float = 1.0, **fields: Any) -> Schema:
    return parse_schema({"name": "app", "version": 1, "epsilon": epsilon_each * len(attributes),
                         "attributes": attributes, **fields})


APP = [{"name": "crashed", "type": "boolean"},
       {"name": "os", "type": "categorical", "categories": OS, "mechanism": "grr"},
       {"name": "lang", "type": "categorical", "categories": LANGS, "mechanism": "oue"},
       {"name": "minutes", "type": "numeric", "range": [0, 120], "mechanism": "pm"},
       {"name": "load", "type": "histogram", "edges": [0, 100, 1000]},
       {"name": "home", "type": "string"}]


# --- the rules ------------------------------------------------------------------------------------


def published(**changes: Any) -> dict[str, Any]:
    return {"name": "app", "version": 1, "epsilon": 6.0, "attributes": APP, **changes}


def test_a_published_schema_keeps_its_breakdowns_apart_from_the_served_schema():
    schema, found = breakdowns.parse_published(published(breakdowns=[
        {"of": "crashed", "by": "os"}, {"of": "minutes", "by": "crashed"}, {"of": "os", "by": "load"},
        {"by": "os", "of": "crashed"}]))
    assert found == (Breakdown("crashed", "os"), Breakdown("minutes", "crashed"), Breakdown("os", "load"))
    assert "breakdowns" not in schema.to_dict(), "clients in the field refuse unknown fields"
    assert schema == parse_schema(published())
    assert breakdowns.parse_published(published()) == (schema, ())


def test_cells_count_a_booleans_two_values_and_a_means_one():
    schema = parse_schema(published())
    assert breakdowns.cells(schema, Breakdown("crashed", "os")) == 2 * 3
    assert breakdowns.cells(schema, Breakdown("minutes", "crashed")) == 1 * 2
    assert breakdowns.cells(schema, Breakdown("lang", "load")) == 4 * 2


WIDE = [{"name": "wide", "type": "categorical", "categories": [f"c{i}" for i in range(1024)]},
        {"name": "eight", "type": "categorical", "categories": [f"e{i}" for i in range(8)]},
        {"name": "four", "type": "categorical", "categories": [f"f{i}" for i in range(4)]}]

# (name, the published schema, the field its error names, words of the rule's sentence)
REFUSED = [
    ("not-a-list", published(breakdowns={"of": "crashed", "by": "os"}), "breakdowns", "must be a list"),
    ("over-16", published(epsilon=5.0, attributes=[{"name": f"b{i}", "type": "boolean"} for i in range(5)],
                          breakdowns=[{"of": f"b{i}", "by": f"b{j}"} for i in range(5) for j in range(5) if i != j][:17]),
     "breakdowns", "at most 16"),
    ("not-an-object", published(breakdowns=["crashed by os"]), "breakdowns[0]", "must be a JSON object"),
    ("unknown-field", published(breakdowns=[{"of": "crashed", "by": "os", "within": "lang"}]), "breakdowns[0].within",
     "unknown field"),
    ("of-missing", published(breakdowns=[{"by": "os"}]), "breakdowns[0].of", "must name an attribute"),
    ("of-unknown", published(breakdowns=[{"of": "crash", "by": "os"}]), "breakdowns[0].of", "must name an attribute"),
    ("by-unknown", published(breakdowns=[{"of": "crashed", "by": 3}]), "breakdowns[0].by", "must name an attribute"),
    ("of-is-by", published(breakdowns=[{"of": "os", "by": "os"}]), "breakdowns[0].by", "another attribute"),
    ("by-numeric", published(breakdowns=[{"of": "crashed", "by": "minutes"}]), "breakdowns[0].by",
     "must be a boolean, categorical or histogram attribute"),
    ("by-string", published(breakdowns=[{"of": "crashed", "by": "home"}]), "breakdowns[0].by",
     "must be a boolean, categorical or histogram attribute"),
    ("of-string", published(breakdowns=[{"of": "home", "by": "os"}]), "breakdowns[0].of", "any attribute but a string"),
    ("over-4096-cells", published(epsilon=3.0, attributes=WIDE, breakdowns=[{"of": "wide", "by": "four"},
                                                                           {"of": "wide", "by": "eight"}]),
     "breakdowns[1]", "8,192 cells"),
    ("split-sample", published(split="sample", breakdowns=[{"of": "crashed", "by": "os"}]), "breakdowns",
     "split 'sample' cannot have breakdowns"),
]


@pytest.mark.parametrize(("schema", "field", "words"), [pytest.param(s, f, w, id=n) for n, s, f, w in REFUSED])
def test_each_rule_refuses_naming_its_field_and_the_rule(schema, field, words):
    with pytest.raises(SchemaError, match=words) as refused:
        breakdowns.parse_published(schema)
    assert refused.value.field == field


def test_a_schema_error_comes_before_its_breakdowns():
    with pytest.raises(SchemaError) as refused:
        breakdowns.parse_published(published(epsilon=-1, breakdowns=[{"of": "x", "by": "y"}]))
    assert refused.value.field == "epsilon"


def test_4096_cells_are_allowed_and_sample_without_breakdowns_too():
    schema, found = breakdowns.parse_published(published(epsilon=3.0, attributes=WIDE,
                                                         breakdowns=[{"of": "wide", "by": "four"}]))
    assert breakdowns.cells(schema, found[0]) == 4096
    assert breakdowns.parse_published(published(split="sample", breakdowns=[]))[1] == ()


def test_adding_a_breakdown_keeps_the_rules_and_is_idempotent():
    schema = parse_schema(published())
    one = breakdowns.add_breakdown({"of": "crashed", "by": "os"}, schema, ())
    assert one == (Breakdown("crashed", "os"),)
    assert breakdowns.add_breakdown({"of": "crashed", "by": "os"}, schema, one) == one
    with pytest.raises(SchemaError, match="must be a boolean, categorical or histogram attribute") as refused:
        breakdowns.add_breakdown({"of": "crashed", "by": "minutes"}, schema, one)
    assert refused.value.field == "by"
    sixteen = tuple(Breakdown(f"x{i}", "os") for i in range(16))
    with pytest.raises(SchemaError, match="at most 16 breakdowns, listed and added together") as refused:
        breakdowns.add_breakdown({"of": "lang", "by": "os"}, schema, sixteen)
    assert refused.value.field == "breakdowns"
    with pytest.raises(SchemaError, match="split 'sample'"):
        breakdowns.add_breakdown({"of": "crashed", "by": "os"}, parse_schema(published(split="sample")), ())


# --- counting and the closed forms -----------------------------------------------------------------

# Every kind of pair: (of, by) in a schema of these attributes (ε per attribute 0.7: p and q well
# inside (0, 1), so every closed-form term carries weight).
PAIRS = {
    "rr-by-grr": ("crashed", "os"), "grr-by-rr": ("os", "crashed"), "oue-by-oue": ("lang", "lang2"),
    "oue-by-histogram": ("lang", "load"), "duchi-by-rr": ("duchi", "crashed"), "pm-by-grr": ("minutes", "os"),
    "hm-by-oue": ("hm", "lang"), "laplace-by-rr": ("laplace", "crashed"),
}
EVERY = [*APP[:5], {"name": "lang2", "type": "categorical", "categories": LANGS, "mechanism": "oue"},
         *({"name": m, "type": "numeric", "range": [-3, 9], "mechanism": m} for m in ("duchi", "hm", "laplace"))]


def every_schema(**fields: Any) -> Schema:
    return schema_of(EVERY, epsilon_each=0.7, **fields)


def wire(attribute: Attribute, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` reports' wire arrays of ``attribute`` from uniformly drawn true values."""
    values = breakdowns.values_of(attribute)
    if attribute.mech.unbiased_number:
        lo, hi = attribute.range or (0, 1)
        truth = rng.uniform(lo, hi, n)
    else:
        truth = attribute.kind.draw(attribute, [1 / len(values)] * len(values), n, rng, sampled=True)
    return responses(attribute, truth, rng)


def brute_force(of: Attribute, by: Attribute, of_wire: np.ndarray, by_wire: np.ndarray, value_index: int,
                by_index: int) -> breakdowns.Moments:
    """DESIGN's per-report u and w, one report at a time, and their means and sample (co)variances."""
    def z(attribute: Attribute, indicator: np.ndarray) -> np.ndarray:
        return (indicator - attribute.q) / (attribute.p - attribute.q)

    def indicator(attribute: Attribute, column: np.ndarray, index: int) -> np.ndarray:
        amounts = attribute.mech.report_amounts(attribute, column).astype(float)
        return amounts[:, index] if index < amounts.shape[1] else 1 - amounts[:, 0]  # a boolean's false

    w = z(by, indicator(by, by_wire, by_index))
    if of.mech.unbiased_number:
        derived = of.derived_parameters
        v = derived["C"] * (2 * of_wire - 1) if of.mech.counter_keys(of) == ("sum",) else of_wire.astype(float)
        u = v * w
    else:
        u = z(of, indicator(of, of_wire, value_index)) * w
    covariance = np.cov(np.vstack([u, w]), ddof=1)
    return breakdowns.Moments(len(u), u.mean(), w.mean(), covariance[0, 0], covariance[0, 1], covariance[1, 1])


@pytest.mark.parametrize("pair", PAIRS)
def test_the_closed_forms_equal_the_brute_force_sums(pair):
    schema = every_schema()
    of, by = (schema.attribute(name) for name in PAIRS[pair])
    rng = np.random.default_rng(sorted(PAIRS).index(pair))
    of_wire, by_wire = wire(of, 60, rng), wire(by, 60, rng)
    sums = breakdowns.count_wire(of, by, of_wire, by_wire)
    for i in range(len(of.values)):
        for j in range(len(breakdowns.values_of(by))):
            closed, brute = breakdowns.moments(of, by, sums, i, j), brute_force(of, by, of_wire, by_wire, i, j)
            assert closed.n == brute.n == 60
            for name in ("u", "w", "s_uu", "s_uw", "s_ww"):
                assert math.isclose(getattr(closed, name), getattr(brute, name), rel_tol=1e-9, abs_tol=1e-9), name


@pytest.mark.parametrize("pair", PAIRS)
def test_counting_reports_as_they_arrive_is_counting_their_wire_arrays(pair):
    schema = every_schema()
    of, by = (schema.attribute(name) for name in PAIRS[pair])
    rng = np.random.default_rng(7)
    of_wire, by_wire = wire(of, 40, rng), wire(by, 40, rng)
    arrived = [{of.name: _json(of, a), by.name: _json(by, b), "other": 1} for a, b in zip(of_wire, by_wire)]
    counted = breakdowns.count(schema, Breakdown(of.name, by.name), arrived + [{of.name: arrived[0][of.name]}])
    assert counted.amounts == pytest.approx(breakdowns.count_wire(of, by, of_wire, by_wire).amounts, rel=1e-12)
    assert counted.n == 40, "a report without both attributes is not counted"


def _json(attribute: Attribute, value: Any) -> Any:
    """A wire array's row as its JSON wire value."""
    if isinstance(value, np.ndarray):
        return [int(bit) for bit in value]
    if attribute.mech.unbiased_number:
        return int(value) if attribute.mech.counter_keys(attribute) == ("sum",) else float(value)
    return bool(value) if isinstance(value, np.bool_) else attribute.categories[int(value)]


def test_sums_are_integers_where_the_amounts_are_and_keep_no_zero():
    schema = every_schema()
    rng = np.random.default_rng(3)
    crashed, os_, duchi, laplace = (schema.attribute(n) for n in ("crashed", "os", "duchi", "laplace"))
    shares = breakdowns.count_wire(crashed, os_, wire(crashed, 50, rng), wire(os_, 50, rng))
    assert all(type(v) is int and v for v in shares.amounts.values())
    assert set(shares.amounts) <= {(a, b) for a in (TOTAL, "true") for b in (TOTAL, *OS)}
    bits = breakdowns.count_wire(duchi, os_, wire(duchi, 50, rng), wire(os_, 50, rng))
    assert all(type(v) is int for v in bits.amounts.values())
    numbers = breakdowns.count_wire(laplace, os_, wire(laplace, 50, rng), wire(os_, 50, rng))
    assert type(numbers.amount("sum", "linux")) is float and type(numbers.amount(TOTAL, "linux")) is int


def test_sums_add_up_as_a_store_adds_them():
    schema = every_schema()
    rng = np.random.default_rng(4)
    of, by = schema.attribute("lang"), schema.attribute("os")
    a, b = wire(of, 90, rng), wire(by, 90, rng)
    first, second = breakdowns.count_wire(of, by, a[:50], b[:50]), breakdowns.count_wire(of, by, a[50:], b[50:])
    assert breakdowns.pooled([first, second]) == breakdowns.count_wire(of, by, a, b)
    assert breakdowns.pooled([]).n == 0


# --- rows, reasons, planner -----------------------------------------------------------------------


def simple() -> tuple[Schema, Breakdown]:
    return schema_of(APP[:2], epsilon_each=1.0), Breakdown("crashed", "os")


def sums_of(schema: Schema, breakdown: Breakdown, n: int, seed: int) -> BreakdownSums:
    of, by = schema.attribute(breakdown.of), schema.attribute(breakdown.by)
    rng = np.random.default_rng(seed)
    return breakdowns.count_wire(of, by, wire(of, n, rng), wire(by, n, rng))


def test_rows_are_each_by_value_then_each_of_value_with_a_booleans_true_only():
    schema, breakdown = simple()
    rows = breakdowns.estimate(schema, Breakdown("os", "crashed"), sums_of(schema, breakdown, 5000, 1), 0.95,
                               rollup=False)
    assert [(r.by_value, r.value) for r in rows] == [(b, v) for b in (True, False) for v in OS]
    rows = breakdowns.estimate(schema, breakdown, sums_of(schema, breakdown, 5000, 1), 0.95, rollup=False)
    assert [(r.by_value, r.value) for r in rows] == [(b, True) for b in OS]


def test_a_row_with_an_interval_holds_its_estimate_and_its_by_share_is_w_bar():
    schema, breakdown = simple()
    sums = sums_of(schema, breakdown, 20_000, 2)
    for row, (_, _, m) in zip(breakdowns.estimate(schema, breakdown, sums, 0.95, rollup=False),
                              breakdowns.cell_moments(schema, breakdown, sums)):
        assert row.reason is None and row.n == 20_000 and row.by_share == m.w
        assert row.estimate == m.u / m.w
        assert row.ci_low <= row.estimate_clipped <= row.ci_high


def test_too_few_reports_void_the_estimate_and_the_interval():
    schema, breakdown = simple()
    one = breakdowns.estimate(schema, breakdown, sums_of(schema, breakdown, 1, 3), 0.95, rollup=False)
    none = breakdowns.estimate(schema, breakdown, BreakdownSums({}), 0.95, rollup=True)
    for row in one + none:
        assert row.reason == TOO_FEW_REPORTS
        assert (row.estimate, row.estimate_clipped, row.ci_low, row.ci_high) == (None, None, None, None)
    assert all(row.by_share is not None and row.n == 1 for row in one)
    assert all(row.by_share is None and row.n == 0 for row in none)


def test_a_by_share_not_distinct_from_0_voids_the_ratio():
    # 1,000 reports, 'macos' reported exactly as often as it would be by devices none of which
    # hold it (n·q): w̄ = 0, so A = -z² s_ww / n < 0.
    schema, breakdown = simple()
    by = schema.attribute("os")
    nothing = round(1000 * by.q)
    sums = BreakdownSums({(TOTAL, TOTAL): 1000, (TOTAL, "macos"): nothing, ("true", TOTAL): 300,
                          ("true", "macos"): nothing // 3, (TOTAL, "linux"): 500, ("true", "linux"): 200})
    rows = {r.by_value: r for r in breakdowns.estimate(schema, breakdown, sums, 0.95, rollup=False)}
    macos = rows["macos"]
    assert macos.reason == BY_SHARE_NOT_DISTINCT_FROM_0
    assert (macos.estimate, macos.estimate_clipped, macos.ci_low, macos.ci_high) == (None, None, None, None)
    assert macos.by_share == pytest.approx((nothing - 1000 * by.q) / (by.p - by.q) / 1000)
    assert rows["linux"].reason is None


def test_the_rollup_of_a_memoised_schema_keeps_its_estimate_without_an_interval():
    schema = schema_of(APP[:2], epsilon_each=1.0, epsilon_permanent=5.0)
    breakdown = Breakdown("crashed", "os")
    sums = sums_of(schema, breakdown, 20_000, 5)
    window = breakdowns.estimate(schema, breakdown, sums, 0.95, rollup=False)
    rollup = breakdowns.estimate(schema, breakdown, sums, 0.95, rollup=True)
    for w, r in zip(window, rollup):
        assert w.reason is None and r.reason == MEMOISED_ROLLUP
        assert (r.estimate, r.estimate_clipped, r.by_share) == (w.estimate, w.estimate_clipped, w.by_share)
        assert (r.ci_low, r.ci_high) == (None, None)
    plain = schema_of(APP[:2], epsilon_each=1.0)
    assert all(r.reason is None for r in breakdowns.estimate(plain, breakdown, sums, 0.95, rollup=True))


def test_a_numeric_ratio_is_a_mean_in_its_units_clipped_to_its_range():
    schema = every_schema()
    breakdown = Breakdown("laplace", "crashed")  # range [-3, 9]: t = -1 is -3, t = 1 is 9
    sums = sums_of(schema, breakdown, 2000, 6)
    for row, (_, _, m) in zip(breakdowns.estimate(schema, breakdown, sums, 0.95, rollup=False),
                              breakdowns.cell_moments(schema, breakdown, sums)):
        assert row.value == "mean"
        assert row.estimate == pytest.approx(-3 + (m.u / m.w + 1) * 6)
        assert row.estimate_clipped == min(9, max(-3, row.estimate))
        assert -3 <= row.ci_low <= row.ci_high <= 9


def test_the_planner_needs_reports_first_and_then_answers_from_the_rollup():
    schema, breakdown = simple()
    assert all(p.sigma is None and p.half_width() is None and p.reports_for(0.01) is None
               for p in plan_breakdown(schema, breakdown, None))
    sums = sums_of(schema, breakdown, 200_000, 8)
    rows = breakdowns.estimate(schema, breakdown, sums, 0.95, rollup=False)
    for plan, row, (_, _, m) in zip(plan_breakdown(schema, breakdown, sums), rows,
                                    breakdowns.cell_moments(schema, breakdown, sums)):
        r = m.u / m.w
        sigma = math.sqrt(m.s_uu - 2 * r * m.s_uw + r * r * m.s_ww) / m.w
        assert plan.sigma == pytest.approx(sigma, rel=1e-12)
        assert plan.half_width() == pytest.approx(z_value(0.95) * sigma / math.sqrt(200_000), rel=1e-12)
        # At 200,000 reports the delta method's half-width is Fieller's to within a few percent.
        assert plan.half_width() == pytest.approx((row.ci_high - row.ci_low) / 2, rel=0.05)
        assert plan.reports_for(0.05) == math.ceil((z_value(0.95) * sigma / 0.05) ** 2)
    null = BreakdownSums({(TOTAL, TOTAL): 1})
    assert all(p.sigma is None for p in plan_breakdown(schema, breakdown, null))


def test_the_planner_answers_a_mean_in_its_units():
    schema = every_schema()
    breakdown = Breakdown("laplace", "crashed")
    sums = sums_of(schema, breakdown, 50_000, 9)
    for plan, (_, _, m) in zip(plan_breakdown(schema, breakdown, sums), breakdowns.cell_moments(schema, breakdown, sums)):
        r = m.u / m.w
        assert plan.sigma == pytest.approx(6 * math.sqrt(m.s_uu - 2 * r * m.s_uw + r * r * m.s_ww) / m.w, rel=1e-12)
        assert plan.reports_for(12) == 1, "a half-width of the whole range needs one report"


def test_a_simulated_population_needs_one_for_each_value_of_by():
    schema = schema_of(APP[:2])
    with pytest.raises(ValueError, match="for each of its 2 values"):
        correlated_truth(schema.attribute("os"), schema.attribute("crashed"), [1.0], [[0.2, 0.3, 0.5]], 10,
                         np.random.default_rng(0))


# --- statistics ----------------------------------------------------------------------------------

DEVICES = 10_000  # per simulated window: DESIGN's coverage bar holds from n = 10,000
TRIALS = 2000  # windows per configuration
BLOCK = 200  # windows simulated at once (bounds memory: 2 million devices)
LEVEL = 0.95


@dataclass(frozen=True)
class Case:
    """A correlated population: ``by``'s shares, and ``of``'s population within each value of it."""

    of: dict[str, Any]
    by: dict[str, Any]
    by_shares: list[float]
    of_within: list[Any]
    epsilon_permanent: float | None = None


BOOLEAN = {"name": "a", "type": "boolean"}


def categorical(name: str, mechanism: str, k: int) -> dict[str, Any]:
    return {"name": name, "type": "categorical", "categories": [f"{name}{i}" for i in range(k)], "mechanism": mechanism}


def numeric(mechanism: str) -> dict[str, Any]:
    return {"name": "a", "type": "numeric", "range": [0, 120], "mechanism": mechanism}


# Crash rate by OS, OS by crash, language by OS, minutes by plan: the `of` population differs by
# value of `by` (the breakdown has something to find), b's shares from 20% up.
CASES = {
    "rr-by-grr": Case(BOOLEAN, categorical("b", "grr", 3), [0.5, 0.3, 0.2], [0.1, 0.3, 0.6]),
    # DESIGN's hard case: at ε = 0.5 per attribute b's share 12% is 6 standard errors from 0.
    "rr-by-rr": Case(BOOLEAN, {"name": "b", "type": "boolean"}, [0.12, 0.88], [0.3, 0.1]),
    "grr-by-rr": Case(categorical("a", "grr", 3), {"name": "b", "type": "boolean"}, [0.35, 0.65],
                      [[0.6, 0.3, 0.1], [0.2, 0.3, 0.5]]),
    "oue-by-oue": Case(categorical("a", "oue", 3), categorical("b", "oue", 2), [0.4, 0.6],
                       [[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]]),
    "memoised-rr-by-grr": Case(BOOLEAN, categorical("b", "grr", 3), [0.5, 0.3, 0.2], [0.1, 0.3, 0.6],
                               epsilon_permanent=4.0),
    "memoised-oue-by-rr": Case(categorical("a", "oue", 3), {"name": "b", "type": "boolean"}, [0.35, 0.65],
                               [[0.6, 0.3, 0.1], [0.2, 0.3, 0.5]], epsilon_permanent=4.0),
    **{f"{m}-by-grr": Case(numeric(m), categorical("b", "grr", 2), [0.4, 0.6], [30.0, 80.0])
       for m in ("duchi", "pm", "hm", "laplace")},
}
# ε per attribute: DESIGN's example's, and the small ε where the delta method fails (0.5).
EPSILONS = {"eps1": 1.0, "eps05": 0.5}


@dataclass
class Windows:
    """TRIALS windows of one configuration: per row (value, by value), its truths and estimates."""

    ratio: np.ndarray  # (rows,): the true share (or mean) within b
    by_share: np.ndarray  # (rows,): θ_b
    joint: np.ndarray  # (rows,): θ_ab (numeric: E[t 1{b}], on the [-1, 1] scale)
    bar: np.ndarray  # (rows,): whether DESIGN's coverage bar applies
    u: np.ndarray  # (trials, rows): θ̂_ab
    w: np.ndarray  # (trials, rows): θ̂_b
    covered: np.ndarray  # (trials, rows)
    null: np.ndarray  # (trials, rows): rows without an interval


def simulate_windows(case: Case, epsilon: float, seed: int) -> Windows:
    schema = schema_of([case.of, case.by], epsilon_each=epsilon,
                       **({} if case.epsilon_permanent is None else {"epsilon_permanent": case.epsilon_permanent}))
    of, by = schema.attribute("a"), schema.attribute("b")
    breakdown = Breakdown("a", "b")
    rng = np.random.default_rng(seed)
    u, w, covered, null = [], [], [], []
    for _ in range(TRIALS // BLOCK):
        of_truth, by_truth = correlated_truth(of, by, case.by_shares, case.of_within, BLOCK * DEVICES, rng)
        of_wire, by_wire = responses(of, of_truth, rng), responses(by, by_truth, rng)
        for t in range(BLOCK):
            window = slice(t * DEVICES, (t + 1) * DEVICES)
            sums = breakdowns.count_wire(of, by, of_wire[window], by_wire[window])
            rows = breakdowns.estimate(schema, breakdown, sums, LEVEL, rollup=False)
            cells = breakdowns.cell_moments(schema, breakdown, sums)
            u.append([m.u for _, _, m in cells])
            w.append([m.w for _, _, m in cells])
            null.append([r.ci_low is None for r in rows])
            covered.append([r.ci_low is not None and r.ci_low <= truth <= r.ci_high
                            for r, truth in zip(rows, truths(of, case))])
    ratio = np.array(truths(of, case))
    by_share = np.repeat(case.by_shares, len(of.values))
    # θ_ab: the joint share; for a mean, E[t · 1{b}] with t the mean mapped to [-1, 1].
    lo, hi = of.range or (0.0, 1.0)
    on_scale = 2 * (ratio - lo) / (hi - lo) - 1 if of.mech.unbiased_number else ratio
    # DESIGN's bar: θ_b at least 5 standard errors of θ̂_b, √(Var(z_b)/n) at the true θ_b, where
    # z_b = (I_b − q)/Δ and I_b ~ Bernoulli(π = q + Δθ_b) for a device drawn from the population.
    pi = by.q + (by.p - by.q) * by_share
    standard_error = np.sqrt(pi * (1 - pi) / (by.p - by.q) ** 2 / DEVICES)
    return Windows(ratio, by_share, on_scale * by_share, by_share >= 5 * standard_error, np.array(u), np.array(w),
                   np.array(covered), np.array(null))


def truths(of: Attribute, case: Case) -> list[float]:
    """Each row's true ratio, in the rows' order (each b, then each value of `of`)."""
    return [of.kind.population(of, spec)[i] for spec in case.of_within for i in range(len(of.values))]


@pytest.fixture(scope="module", params=[(c, e) for c in CASES for e in EPSILONS], ids=lambda p: f"{p[0]}-{p[1]}")
def windows(request: pytest.FixtureRequest) -> Windows:
    name, epsilon = request.param
    return simulate_windows(CASES[name], EPSILONS[epsilon], seed=sorted(CASES).index(name) * 10 + len(epsilon))


def test_joint_and_by_shares_are_unbiased_within_3_standard_errors(windows: Windows):
    # θ̂_ab = ū and θ̂_b = w̄ are unbiased (E[z_a z_b] = θ_ab, E[z_b] = θ_b): over TRIALS windows
    # their mean errs from the truth by at most 3 standard errors of that mean (the sample
    # standard deviation over windows / √TRIALS).
    for estimates, truth in ((windows.u, windows.joint), (windows.w, windows.by_share)):
        error = estimates.mean(axis=0) - truth
        standard_error = estimates.std(axis=0, ddof=1) / math.sqrt(estimates.shape[0])
        assert np.all(np.abs(error) <= 3 * standard_error), (error, standard_error)


def test_fieller_intervals_cover_94_to_96_percent_where_designs_bar_applies(windows: Windows):
    # Coverage over TRIALS windows of each row where the bar applies (θ_b at least 5 standard
    # errors, n = 10,000), pooled over those rows. A 95% interval's coverage over K independent
    # windows has a binomial standard error of √(0.95·0.05/K): 0.49% at K = 2,000, less pooled
    # over a configuration's rows (each row's windows are independent; rows of one window are
    # not), so a true 95% lies at least 2 standard errors inside DESIGN's 94–96%.
    assert windows.bar.any()
    rows = windows.bar
    coverage = windows.covered[:, rows].mean()
    assert 0.94 <= coverage <= 0.96, (coverage, windows.covered[:, rows].mean(axis=0))
    # Where the bar applies A > 0 in every window here: b's share is told from 0.
    assert not windows.null[:, rows].any()
