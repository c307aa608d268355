"""Numeric attributes (DESIGN.md, "Numeric attributes"): duchi, pm, hm and laplace.

Unbiasedness and coverage run on populations simulated with fixed seeds through the bulk
encoders and the aggregator's estimator (:meth:`Mechanism.estimates`); the device encoders (OS
CSPRNG, unseeded) are checked against the same variance formulas and for their empirical ε, each
as a hypothesis test a correct implementation fails with probability at most ALPHA = 1e-8.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldp_telemetry.shared import mechanisms, parse_schema, randomize
from ldp_telemetry.shared.mechanisms import SYSTEM, WireError
from ldp_telemetry.shared.mechanisms.means import GRID, to_units, unit
from ldp_telemetry.shared.reports import validate_record, validate_report
from ldp_telemetry.shared.schema import SchemaError
from ldp_telemetry.shared.simulation import CONCENTRATION, true_values
from privacy_support import Z, assert_ratio_is, draws_to_tell

MEANS = ("duchi", "pm", "hm", "laplace")
EPSILONS = (0.5, 1.0, 2.0, 4.0)
RANGE = (0, 120)
DEVICES = 1000  # per simulated population: the coverage bar is for n >= 1,000
TRIALS = 4000  # populations per (mechanism, ε, mean)
POSITIONS = (0.05, 0.5, 0.95)  # the true mean's place in the range: near each end, and the middle


def numeric(mechanism: str, epsilon: float = 1.0, value_range=RANGE):
    return parse_schema({"name": "means", "version": 1, "epsilon": epsilon, "attributes": [
        {"name": "x", "type": "numeric", "range": list(value_range), "mechanism": mechanism}]})


# --- unbiasedness and coverage ------------------------------------------------------------------


def trials(mechanism: str, epsilon: float, position: float, seed: int):
    """TRIALS populations of DEVICES devices, each device's value drawn from the Beta population of
    shared.simulation (mean ``position`` of the way along the range): the estimates and intervals."""
    s = numeric(mechanism, epsilon)
    attribute = s.attribute("x")
    lo, hi = RANGE
    mean = lo + position * (hi - lo)
    rng = np.random.default_rng(seed)
    x = true_values(attribute, [mean], TRIALS * DEVICES, rng, sampled=True)
    y = attribute.mech.randomise_bulk(np.clip(2 * (x - lo) / (hi - lo) - 1, -1, 1), epsilon, rng).reshape(TRIALS, DEVICES)
    sums, squares = y.sum(axis=1), np.square(y).sum(axis=1)
    keys = attribute.mech.counter_keys(attribute)
    out = [attribute.mech.estimates(attribute, DEVICES, dict(zip(keys, (a, b))), 0.95)[0][1]
           for a, b in zip(sums.tolist(), squares.tolist())]
    return attribute, mean, out


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("mechanism", MEANS)
def test_the_mean_is_unbiased_and_its_interval_covers(mechanism, epsilon, position):
    seed = 10_000 * MEANS.index(mechanism) + int(1000 * epsilon + 100 * position)
    attribute, mean, estimates = trials(mechanism, epsilon, position, seed)
    errors = np.array([e.estimate - mean for e in estimates])
    # Unbiased: one report on the [-1, 1] scale varies by the mechanism's variance at its device's t
    # (at most the worst case, report_variance) plus the population's own spread, Var(t) =
    # 4 m(1 - m)/(c + 1) for the Beta population; the mean of TRIALS estimates of DEVICES reports
    # then has a standard error of at most sqrt((worst + Var(t)) / (DEVICES * TRIALS)) on that
    # scale, times (hi - lo)/2 in units. The mean error must be within 3 of those.
    spread = 4 * position * (1 - position) / (CONCENTRATION + 1) * ((RANGE[1] - RANGE[0]) / 2) ** 2
    se = math.sqrt((attribute.mech.report_variance(attribute) + spread) / (DEVICES * TRIALS))
    assert abs(errors.mean()) < 3 * se, (errors.mean(), se)
    # Coverage: 94% to 96% of the 95% intervals hold the true mean (DESIGN.md's bar for n >= 1,000).
    # For duchi it is computed exactly below; here it is a count over TRIALS populations, whose
    # standard error is sqrt(0.95 * 0.05 / 4000) = 0.34 percentage points.
    if mechanism != "duchi":
        covered = np.mean([e.ci_low <= mean <= e.ci_high for e in estimates])
        assert 0.94 <= covered <= 0.96, covered
    # The point estimate is unclipped; the clipped one and the interval stay in the range.
    assert all(RANGE[0] <= e.ci_low <= e.estimate_clipped <= e.ci_high <= RANGE[1] for e in estimates)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_duchi_coverage_is_exactly_in_the_bar(epsilon):
    # A sampled population's bits are independent Bernoulli(π), π = q + (p - q)(t̄ + 1)/2, so the
    # number of 1 bits is Binomial(n, π) and the coverage of the Wilson-mapped interval is a finite
    # sum: no simulation error. Positions from 1% to 99% of the range, n = 1,000 and 4,000.
    s = numeric("duchi", epsilon)
    attribute = s.attribute("x")
    lo, hi = RANGE
    for n in (DEVICES, 4 * DEVICES):
        for position in (0.01, 0.02, 0.05, 0.2, 0.5, 0.8, 0.95, 0.98, 0.99):
            mean = lo + position * (hi - lo)
            pi = attribute.q + (attribute.p - attribute.q) * position
            coverage = 0.0
            for hits in range(n + 1):
                [(_, e)] = attribute.mech.estimates(attribute, n, {"sum": hits}, 0.95)
                if e.ci_low <= mean <= e.ci_high:
                    coverage += stats.binom.pmf(hits, n, pi)
            assert 0.94 <= coverage <= 0.96, (n, position, coverage)


# --- the device encoders ------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MEANS)
@pytest.mark.parametrize("t", [-1.0, 0.3, 1.0])
def test_the_device_encoder_has_the_mean_and_variance_of_the_formulas(mechanism, t):
    # 20,000 CSPRNG reports of one t: their mean is within Z standard errors of t (sd from the
    # variance formula), and their variance within Z standard errors of the formula's, the standard
    # error of a sample variance being sqrt((m4 - V²)/N) with m4 the fourth central moment, here
    # bounded by B²·V (B the largest |y - t| a wire value can have).
    attribute = numeric(mechanism, 1.0).attribute("x")
    mech, draws = attribute.mech, 20_000
    y = np.array([mech.encode(attribute, to_units(attribute, t), SYSTEM) for _ in range(draws)], dtype=float)
    centred = 2 * y - 1 if mechanism == "duchi" else y  # duchi's bit b stands for C(2b - 1)
    if mechanism == "duchi":
        centred = centred * (math.exp(1) + 1) / (math.exp(1) - 1)
    variance = mech.variance_at(1.0, t)
    assert abs(centred.mean() - t) < Z * math.sqrt(variance / draws)
    reach = mech.bound(1.0) * (math.exp(1) + 1) / (math.exp(1) - 1) + 1 if mechanism == "duchi" else mech.bound(1.0) + 1
    assert abs(centred.var() - variance) < Z * reach * math.sqrt(variance / draws)
    for value in y:
        mech.check(attribute, value.item() if mechanism != "duchi" else int(value))


@pytest.mark.parametrize("mechanism", ["pm", "hm", "laplace"])
def test_continuous_outputs_lie_on_the_fixed_grid(mechanism):
    # Floating-point safety: every output is a multiple of GRID (or exactly ±C for hm's bit), a set
    # that does not depend on the input, so the low bits of a report say nothing about the value.
    attribute = numeric(mechanism, 2.0).attribute("x")
    c = (math.exp(2.0) + 1) / (math.exp(2.0) - 1)
    for x in (0, 1e-9, 17.3, 60, 119.99999):
        for _ in range(300):
            y = attribute.mech.encode(attribute, x, SYSTEM)
            assert (y / GRID).is_integer() or abs(y) == c, y


EVENT_INPUTS = {"duchi": lambda y: y == 1, "pm": lambda y: y >= 1, "hm": lambda y: y >= 1, "laplace": lambda y: y >= 1}


@pytest.mark.parametrize("mechanism", MEANS)
def test_empirical_epsilon_of_the_device_encoder(mechanism):
    # The most telling event (a report at or above 1; duchi's bit 1) under the top and the bottom of
    # the range has probabilities p and q with p/q = e^ε (the derived schema's p, q). Draws per
    # input from draws_to_tell: the Clopper–Pearson range of the ratio must hold e^ε and be narrow
    # enough (< a factor 1.1) to tell a 10% excess.
    epsilon = 1.0
    attribute = numeric(mechanism, epsilon).attribute("x")
    event = EVENT_INPUTS[mechanism]
    draws = draws_to_tell(attribute.p, attribute.q)
    hits = [sum(event(attribute.mech.encode(attribute, x, SYSTEM)) for _ in range(draws)) for x in RANGE[::-1]]
    assert_ratio_is(hits[0], hits[1], draws, epsilon)


# --- wire values and schemas ------------------------------------------------------------------


@pytest.mark.parametrize(("mechanism", "bad"), [
    ("duchi", True), ("duchi", 2), ("duchi", 0.0), ("duchi", "1"), ("duchi", None),
    ("pm", True), ("pm", "0.5"), ("pm", 1e6), ("pm", [0.5]),
    ("hm", False), ("hm", 1e3),
    ("laplace", 1e300), ("laplace", "nan"), ("laplace", -1e9),
])
def test_a_wire_value_outside_what_the_encoder_can_send_is_refused(mechanism, bad):
    attribute = numeric(mechanism, 1.0).attribute("x")
    with pytest.raises(WireError):
        attribute.mech.check(attribute, bad)


def test_a_report_round_trips_and_the_record_is_clipped_to_the_range():
    for mechanism in MEANS:
        s = numeric(mechanism)
        for value in (-50, 0, 33.3, 120, 1e12):
            validate_report(randomize(s, {"x": value}), s)
    attribute = numeric("pm").attribute("x")
    assert unit(attribute, -50) == -1.0 and unit(attribute, 1e12) == 1.0 and unit(attribute, 60) == 0.0
    for bad in (True, "3", None, float("nan"), float("inf"), 10**400):
        with pytest.raises(ValueError, match="x must be a finite number"):
            validate_record(numeric("pm"), {"x": bad})


@pytest.mark.parametrize(("epsilon", "expected"), [(0.1, "duchi"), (0.5, "duchi"), (0.6, "duchi"), (0.62, "hm"),
                                                   (1.0, "hm"), (4.0, "hm")])
def test_auto_picks_duchi_up_to_about_0_61_and_hm_above(epsilon, expected):
    assert numeric("auto", epsilon).attribute("x").mechanism == expected


@pytest.mark.parametrize(("attribute", "field"), [
    ({"name": "x", "type": "numeric"}, "attributes[0].range"),
    ({"name": "x", "type": "numeric", "range": [5, 5]}, "attributes[0].range[1]"),
    ({"name": "x", "type": "numeric", "range": [0, 1, 2]}, "attributes[0].range"),
    ({"name": "x", "type": "numeric", "range": [0, True]}, "attributes[0].range[1]"),
    ({"name": "x", "type": "numeric", "range": [0, 1e300]}, "attributes[0].range[1]"),
    ({"name": "x", "type": "numeric", "range": [0, 1], "mechanism": "grr"}, "attributes[0].mechanism"),
    ({"name": "x", "type": "numeric", "range": [0, 1], "categories": ["a", "b"]}, "attributes[0].categories"),
    ({"name": "x", "type": "categorical", "categories": ["a", "b"], "range": [0, 1]}, "attributes[0].range"),
    ({"name": "x", "type": "boolean", "mechanism": "duchi"}, "attributes[0].mechanism"),
])
def test_bad_numeric_attributes_are_refused_naming_the_field(attribute, field):
    with pytest.raises(SchemaError) as caught:
        parse_schema({"name": "bad", "version": 1, "epsilon": 1.0, "attributes": [attribute]})
    assert caught.value.field == field


def test_numeric_attributes_cannot_be_memoised():
    with pytest.raises(SchemaError) as caught:
        parse_schema({"name": "bad", "version": 1, "epsilon": 1.0, "epsilon_permanent": 4.0, "attributes": [
            {"name": "flag", "type": "boolean"}, {"name": "x", "type": "numeric", "range": [0, 1]}]})
    assert caught.value.field == "attributes[1].type"


@pytest.mark.parametrize("mechanism", MEANS)
def test_the_derived_numeric_attribute_parses_back_and_its_p_over_q_is_e_to_the_epsilon(mechanism):
    s = numeric(mechanism, 1.5)
    derived = s.to_dict()
    assert derived["attributes"][0]["range"] == [0, 120] and derived["attributes"][0]["mechanism"] == mechanism
    assert parse_schema(derived) == s
    a = s.attribute("x")
    assert math.log(a.p / a.q) == pytest.approx(1.5, rel=1e-12)
    # the privacy profile's worst pair is a pair of distributions, and δ(ε) = 0 at the mechanism's ε
    pairs = a.mech.worst_pair(a.p, a.q)
    assert sum(x for x, _ in pairs) == pytest.approx(1, abs=1e-9) and sum(y for _, y in pairs) == pytest.approx(1, abs=1e-9)
    assert sum(max(0.0, x - math.exp(1.5) * y) for x, y in pairs) == pytest.approx(0, abs=1e-12)


def test_the_estimate_is_in_units_unclipped_with_its_interval_clipped():
    a = numeric("laplace", 1.0).attribute("x")
    # 100 reports averaging 1.2 on the [-1, 1] scale: the mean is 60 + 1.2·60 = 132, above the range
    # and a sample variance of 7, below the mechanism's 8: the interval uses the theory's
    [(key, e)] = a.mech.estimates(a, 100, {"sum": 120.0, "sumsq": 100 * 1.44 + 99 * 7.0}, 0.95)
    assert key == "mean" and e.estimate == pytest.approx(132) and e.estimate_clipped == 120 and e.ci_high == 120
    half = 1.959963984540054 * math.sqrt(a.mech.variance_at(1.0, 1.0) / 100) * 60
    assert e.ci_low == pytest.approx(132 - half, rel=1e-9)
    # a sample variance of 10, above it: the interval uses the sample's
    [(_, e)] = a.mech.estimates(a, 100, {"sum": 120.0, "sumsq": 100 * 1.44 + 99 * 10.0}, 0.95)
    assert e.ci_low == pytest.approx(132 - 1.959963984540054 * math.sqrt(10 / 100) * 60, rel=1e-9)
