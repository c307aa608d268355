"""The planner (shared/planner.py) against its formulas and against simulation."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from ldp_telemetry.shared import parse_schema
from ldp_telemetry.shared.estimators import z_value
from ldp_telemetry.shared.planner import alternatives, plan, typed_half_width
from ldp_telemetry.shared.simulation import simulate

SCHEMA = {
    "name": "plan", "version": 1, "epsilon": 2.0,
    "attributes": [
        {"name": "flag", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"], "mechanism": "grr"},
    ],
}


def test_half_width_and_reports_needed_invert_each_other():
    for p in plan(SCHEMA):
        n = p.reports_for(0.02)
        # the smallest n whose half-width is at most 0.02
        assert p.half_width(n) <= 0.02 < p.half_width(n - 1)


def test_the_plan_is_the_closed_form():
    flag = plan(SCHEMA)[0]
    a = flag.attribute
    # binary RR: q < 1/2 < p, so a share of 1/2 reaches the hit rate's largest variance, 1/4
    assert flag.variance == pytest.approx(0.25 / (a.p - a.q) ** 2, rel=1e-15)
    assert flag.half_width(10_000) == pytest.approx(z_value(0.95) * math.sqrt(flag.variance / 10_000), rel=1e-15)
    # detection: the half-width at a share of 0, where the hit rate is q
    assert flag.detection_threshold(10_000) == pytest.approx(
        z_value(0.95) * math.sqrt(a.q * (1 - a.q) / 10_000) / (a.p - a.q), rel=1e-15)


def test_alternatives_show_the_other_split_and_say_why_one_is_impossible():
    out = alternatives(SCHEMA)
    assert set(out) == {"equal", "sample"}
    # under sample each attribute has the whole ε on half the reports
    assert out["sample"][0].attribute.epsilon == 2.0 and out["sample"][0].carried == 0.5
    memoised = {**SCHEMA, "epsilon_permanent": 3.0}
    assert "epsilon_permanent" in alternatives(memoised)["sample"]  # 3/2 is not above ε = 2
    own = {**SCHEMA, "attributes": [{**SCHEMA["attributes"][0], "epsilon": 0.5},
                                    {**SCHEMA["attributes"][1], "epsilon": 1.5}]}
    assert set(alternatives(own)) == {"per-attribute", "equal", "sample"}


@pytest.mark.parametrize(("split", "name", "shares"), [
    ("equal", "flag", 0.5),
    ("sample", "flag", 0.5),
    # GRR's variance is largest at a share of 1 here (p(1-p) > q(1-q)), where the plan is attained
    ("equal", "os", [1.0, 0.0, 0.0, 0.0]),
])
def test_the_planned_half_width_is_what_simulation_shows(split, name, shares):
    # 400 simulated populations of 20,000 devices. The planner's half-width is z times the
    # estimate's standard deviation; the standard deviation measured over 400 estimates has a
    # relative standard error of 1/sqrt(2 * 399) = 3.5%, so they must agree within 3 of those
    # (10.6%). The intervals' own mean half-width (Wilson, mapped) must agree within 1%: at this n
    # it differs from z·sd by O(z^2/n) and by the spread of the carried count (under sample).
    schema = parse_schema({**SCHEMA, "split": split})
    planned = next(p for p in plan(schema) if p.attribute.name == name)
    population = {"flag": 0.5, "os": [0.4, 0.3, 0.2, 0.1], name: shares}
    rng = np.random.default_rng(2024)
    estimates, half_widths = [], []
    for _ in range(400):
        result = next(r for r in simulate(schema, population, 20_000, rng=rng) if r.attribute == name)
        estimates.append(result.estimate.estimate)
        # the unclipped interval's half-width: at a share of 1 the clipped one is cut at 1
        half_widths.append((result.estimate.ci_high - result.estimate.ci_low) / 2)
    observed = z_value(0.95) * statistics.stdev(estimates)
    assert abs(observed / planned.half_width(20_000) - 1) < 3 / math.sqrt(2 * 399), (observed, planned.half_width(20_000))
    if isinstance(shares, float):
        assert statistics.mean(half_widths) == pytest.approx(planned.half_width(20_000), rel=0.01)


@pytest.mark.parametrize(("mechanism", "mean"), [
    # duchi's bit varies most at t = 0, the middle of the range (and a sampled population's bits are
    # Bernoulli(π) whatever its spread); pm's variance is largest at |t| = 1, every device at the top;
    # hm's and laplace's are the same at every t, and every device at the top leaves no spread of
    # the population's own (which the planner, a property of the mechanism, does not count).
    ("duchi", 60.0), ("pm", 120.0), ("hm", 120.0), ("laplace", 120.0),
])
def test_the_planned_half_width_of_a_mean_is_what_simulation_shows(mechanism, mean):
    # As above, for a numeric attribute in [0, 120] at ε 2: the planner's worst case, attained by
    # the population named, against z times the standard deviation of 400 simulated estimates
    # (relative standard error 3.5%, so within 10.6%), and the mean half-width of the intervals
    # themselves (within 2%: the sample variance's own spread and, for duchi, Wilson's O(z²/n)).
    schema = parse_schema({"name": "plan-mean", "version": 1, "epsilon": 2.0, "attributes": [
        {"name": "x", "type": "numeric", "range": [0, 120], "mechanism": mechanism}]})
    [planned] = plan(schema)
    rng = np.random.default_rng(77)
    estimates, half_widths = [], []
    for _ in range(400):
        [result] = simulate(schema, {"x": mean}, 20_000, rng=rng)
        estimates.append(result.estimate.estimate)
        # at the top of the range the interval is clipped at 120; its lower half is the normal one's
        half_widths.append((result.estimate.ci_high - result.estimate.ci_low) / 2 if mean < 120
                           else result.estimate.estimate - result.estimate.ci_low)
    observed = z_value(0.95) * statistics.stdev(estimates)
    assert abs(observed / planned.half_width(20_000) - 1) < 3 / math.sqrt(2 * 399), (observed, planned.half_width(20_000))
    assert statistics.mean(half_widths) == pytest.approx(planned.half_width(20_000), rel=0.02)
    print(f"{mechanism}: planned ±{planned.half_width(20_000):.4f}, observed z·sd ±{observed:.4f}, "
          f"mean interval ±{statistics.mean(half_widths):.4f}")


NUMERIC = {"name": "minutes", "version": 1, "epsilon": 2.0,
           "attributes": [{"name": "minutes", "type": "numeric", "range": [0, 120], "mechanism": "laplace"}]}


@pytest.mark.parametrize("schema, name, scale", [(SCHEMA, "os", 1.0), (NUMERIC, "minutes", 120.0)])
def test_a_half_width_below_a_millionth_of_the_scale_is_refused_naming_it(schema, name, scale):
    # 1e-308 squared is 0 (a ZeroDivisionError), 1e-200's needs overflow ceil(): both were a 500 on the dashboard
    p = next(p for p in plan(parse_schema(schema)) if p.attribute.name == name)
    assert p.scale == scale
    for half_width in (1e-308, 1e-200, 1e-150, 0.99e-6 * scale, 0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match=f"half_width must be a number of at least {1e-6 * scale:g}"):
            p.reports_for(half_width)
    assert p.reports_for(1e-6 * scale) > 10 ** 11


@pytest.mark.parametrize("schema, name, scale", [(SCHEMA, "os", 1.0), (NUMERIC, "minutes", 120.0)])
def test_a_half_width_of_the_whole_scale_or_more_needs_one_report(schema, name, scale):
    # the interval is clipped to the scale (a share's to [0, 1], a mean's to its range)
    p = next(p for p in plan(parse_schema(schema)) if p.attribute.name == name)
    assert p.reports_for(scale) == p.reports_for(2 * scale) == p.reports_for(1e308) == 1


def test_the_narrowest_plan_at_the_least_epsilon_is_a_finite_number_of_reports():
    # The worst case the planner's lower bound is chosen for: each attribute at ε = 1e-4, carried
    # by one report in 64 (split "sample"), at 99.9%: about 10^23 reports, an exact integer.
    attributes = [{"name": f"x{i}", "type": "numeric", "range": [0, 1], "mechanism": "laplace"} for i in range(63)]
    schema = parse_schema({"name": "s", "version": 1, "epsilon": 1e-4, "split": "sample",
                           "attributes": [{"name": "flag", "type": "boolean"}, *attributes]})
    for p in plan(schema, confidence=0.999):
        needed = p.reports_for(1e-6 * p.scale)
        expected = z_value(0.999) ** 2 * p.variance * 64 / (1e-6 * p.scale) ** 2
        assert needed == pytest.approx(expected, rel=1e-12) and 1e20 < needed < 1e24


@pytest.mark.parametrize("text, expected", [("1", 0.01), ("0.0001", 1e-6), ("100", 1.0), (" 2.5", 0.025)])
def test_a_typed_half_width_of_a_share_is_in_percentage_points(text, expected):
    assert typed_half_width(parse_schema(SCHEMA).attribute("os"), text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("attribute, text, message", [
    ("os", "1e-308", "the half-width for os must be from 0.0001 to 100 percentage points, got 1e-308"),
    ("os", "1e308", "the half-width for os must be from 0.0001 to 100 percentage points, got 1e+308"),
    ("os", "101", "the half-width for os must be from 0.0001 to 100 percentage points, got 101"),
    ("minutes", "1e-5", "the half-width for minutes must be from 0.00012 to 120, got 1e-05"),
    ("minutes", "121", "the half-width for minutes must be from 0.00012 to 120, got 121"),
    ("os", "-3", "the half-width for os must be a positive number"),
    ("os", "1e400", "the half-width for os must be a positive number"),
    ("os", "nan", "the half-width for os must be a positive number"),
    ("os", "ten", "the half-width for os must be a positive number"),
])
def test_a_typed_half_width_out_of_bounds_is_refused_in_the_typed_units(attribute, text, message):
    schema = parse_schema(SCHEMA if attribute == "os" else NUMERIC)
    with pytest.raises(ValueError) as caught:
        typed_half_width(schema.attribute(attribute), text)
    assert str(caught.value) == message


def test_a_discovering_string_attribute_plans_from_its_level_0_reports_and_its_levels():
    from ldp_telemetry.shared import discovery

    schema = {"name": "s", "version": 1, "epsilon": 4.0, "split": "sample", "attributes": [
        {"name": "flag", "type": "boolean"},
        {"name": "home", "type": "string", "max_length": 24, "discover": True, "alphabet": "abcdefghij.-"}]}
    flag, home = plan(schema)
    levels = home.attribute.levels
    assert (flag.carried, flag.discovery_threshold(10**6)) == (0.5, None)
    assert home.carried == 0.25 and home.per_level == 0.25 / len(levels)  # half of the half that carry it
    n_level = math.floor(10**6 * home.per_level)
    a = home.attribute
    tested = discovery.KEEP * (len(a.alphabet) + 2)  # the last step is one code point
    assert home.discovery_threshold(10**6) == (discovery.null_hits(n_level, a.q, discovery.ALPHA / tested) / n_level
                                               - a.q) / (a.p - a.q)
    assert home.discovery_threshold(10**7) < home.discovery_threshold(10**6) < 0.05 < home.discovery_threshold(1000)
