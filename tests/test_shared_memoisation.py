"""Memoisation (DESIGN.md, "Longitudinal privacy"): a permanent randomised response per value,
derived from the device's secret, and a fresh instantaneous one per report.

The device draws are unseeded (OS CSPRNG, and fresh device secrets from it), so every statistical
check is a hypothesis test that a correct implementation fails with probability ALPHA = 1e-8;
this module makes 8 such checks: by the union bound a correct implementation fails a run with
probability below 1e-7.
"""

from __future__ import annotations

import math
import os
from collections import Counter

import pytest
from scipy import stats

from ldp_telemetry.shared import mechanisms, parse_schema, randomize
from ldp_telemetry.shared.mechanisms import SYSTEM
from ldp_telemetry.shared.reports import permanent_source, validate_record, validate_report
from ldp_telemetry.shared.schema import SchemaError
from privacy_support import ALPHA, Z, assert_ratio_is, draws_to_tell

MEMOISED = {
    "name": "memo", "version": 1, "epsilon": 2.0, "epsilon_permanent": 6.0,
    "attributes": [
        {"name": "flag", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"], "mechanism": "grr"},
        {"name": "lang", "type": "categorical", "categories": ["en", "de", "fr", "es", "it"], "mechanism": "oue"},
    ],
}


def schema(**changes):
    return parse_schema({**MEMOISED, **changes})


# --- the schema ----------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["equal", "sample"])
def test_each_report_is_exactly_epsilon_and_each_value_at_most_epsilon_permanent(split):
    s = schema(split=split, epsilon_permanent=8.0 if split == "equal" else 7.0)
    for attribute in s.attributes:
        memo = attribute.memo
        # the composed response's ε is the attribute's ε (never above it), to rounding
        composed = attribute.mech._epsilon_of(attribute.p, attribute.q)
        assert composed <= attribute.epsilon
        assert composed == pytest.approx(attribute.epsilon, rel=1e-12)
        # the permanent layer alone is the mechanism at the attribute's share of ε∞
        assert (memo.permanent_p, memo.permanent_q) == attribute.mech.parameters(
            epsilon=memo.epsilon_permanent, d=max(2, len(attribute.categories)))
        expected = s.epsilon_permanent / 3 if split == "sample" else s.epsilon_permanent * attribute.epsilon / s.epsilon
        assert memo.epsilon_permanent == pytest.approx(expected, rel=1e-15)


def test_the_derived_schema_shows_both_layers_and_parses_back_to_itself():
    s = schema()
    derived = s.to_dict()
    assert derived["epsilon_permanent"] == 6.0
    flag = derived["attributes"][0]
    assert set(flag["permanent"]) == {"epsilon", "p", "q"} and set(flag["instantaneous"]) == {"p", "q"}
    assert parse_schema(derived) == s
    tampered = {**derived, "attributes": [{**flag, "permanent": {**flag["permanent"], "p": 0.99}},
                                          *derived["attributes"][1:]]}
    with pytest.raises(SchemaError) as caught:
        parse_schema(tampered)
    assert caught.value.field == "attributes[0].permanent"


@pytest.mark.parametrize(("changes", "field"), [
    ({"epsilon_permanent": 2.0}, "epsilon_permanent"),  # not above ε
    ({"epsilon_permanent": 50.5}, "epsilon_permanent"),
    ({"epsilon_permanent": True}, "epsilon_permanent"),
    ({"epsilon_permanent": "8"}, "epsilon_permanent"),
    ({"split": "sample", "epsilon_permanent": 6.0}, "epsilon_permanent"),  # ε∞/k = 2 is not above ε = 2
])
def test_bad_epsilon_permanent_is_refused_naming_the_field(changes, field):
    with pytest.raises(SchemaError) as caught:
        schema(**changes)
    assert caught.value.field == field


# --- the permanent layer --------------------------------------------------------------------


def permanent(s, secret: bytes, name: str, value):
    attribute = s.attribute(name)
    truth = validate_record(s, {"flag": True, "os": "linux", "lang": "en", name: value})[name]
    return attribute.mech.permanent_response(attribute, truth, permanent_source(secret, s, attribute, truth))


def test_the_permanent_response_never_changes_for_the_same_device_and_value():
    s, secret = schema(), os.urandom(32)
    for name, value in (("flag", True), ("os", "macos"), ("lang", "fr")):
        first = permanent(s, secret, name, value)
        # again, and with the schema parsed anew (a restart): the same
        assert all(permanent(parse_schema(MEMOISED), secret, name, value) == first for _ in range(20))


def test_a_new_secret_is_a_new_device():
    # Over 200 secrets the permanent responses of one value spread over the outputs: a correct
    # derivation gives the true category w.p. p₁ and each other w.p. q₁ (a chi-square test).
    s = schema()
    attribute = s.attribute("os")
    counts = Counter(permanent(s, os.urandom(32), "os", "macos") for _ in range(2000))
    expected = [attribute.memo.permanent_p if c == "macos" else attribute.memo.permanent_q
                for c in attribute.categories]
    observed = [counts[c] for c in attribute.categories]
    assert stats.chisquare(observed, [2000 * e for e in expected]).pvalue > ALPHA


def test_randomize_needs_the_device_secret_for_a_memoised_schema():
    with pytest.raises(ValueError, match="device_secret"):
        randomize(schema(), {"flag": True, "os": "linux", "lang": "en"})
    with pytest.raises(ValueError, match="device_secret"):
        randomize(schema(), {"flag": True, "os": "linux", "lang": "en"}, device_secret=b"short")
    report = randomize(schema(), {"flag": True, "os": "linux", "lang": "en"}, device_secret=os.urandom(32))
    validate_report(report, schema())


# --- empirical ε: one report, and the permanent layer -----------------------------------------


@pytest.mark.parametrize("name", ["flag", "os", "lang"])
def test_one_report_of_a_fresh_device_is_epsilon_ldp(name):
    # Every device its own secret, so a report's randomness is the permanent layer's and the
    # instantaneous one's together: output "hit of x" under x and under x' must have ratio e^ε.
    s = schema()
    attribute = s.attribute(name)
    x, other = {"flag": (True, False), "os": ("linux", "other"), "lang": ("en", "it")}[name]
    key = attribute.keys[0] if attribute.type == "boolean" else x
    draws = draws_to_tell(attribute.p, attribute.q)
    hits = {}
    for value in (x, other):
        record = {"flag": True, "os": "linux", "lang": "en", name: value}
        hits[value] = sum(dict(attribute.mech.statistics(attribute, randomize(s, record, device_secret=os.urandom(32))
                                                         ["values"][name])).get(key, 0) for _ in range(draws))
    if attribute.mechanism == "oue":
        # OUE's bound is over the two bits that differ; one bit's ratio is p/q, the other's
        # (1-q)/(1-p), whose product is e^ε: check this bit's against p/q.
        assert_ratio_is(hits[x], hits[other], draws, math.log(attribute.p / attribute.q))
    else:
        assert_ratio_is(hits[x], hits[other], draws, attribute.epsilon)


@pytest.mark.parametrize("name", ["flag", "os"])
def test_the_permanent_layer_is_epsilon_permanent_ldp(name):
    # Decode many devices' permanent responses: what every report of a device ever repeats.
    s = schema()
    attribute = s.attribute(name)
    x, other = {"flag": (True, False), "os": ("linux", "other")}[name]
    wire = {"flag": True, "os": x}[name]
    draws = draws_to_tell(attribute.memo.permanent_p, attribute.memo.permanent_q)
    hits = {value: sum(permanent(s, os.urandom(32), name, value) == wire for _ in range(draws))
            for value in (x, other)}
    assert_ratio_is(hits[x], hits[other], draws, attribute.memo.epsilon_permanent)


# --- estimation within a window ---------------------------------------------------------------


def test_memoised_reports_of_distinct_devices_estimate_the_share_without_bias():
    # 20,000 devices, 30% of them true: within one window each device reports once with its own
    # secret, hitting w.p. p (true) or q (false); the estimate's sd is the conditional closed form.
    s = schema()
    attribute = s.attribute("flag")
    n, share = 20_000, 0.3
    hits = sum(randomize(s, {"flag": i < share * n, "os": "linux", "lang": "en"},
                         device_secret=os.urandom(32))["values"]["flag"] for i in range(n))
    [(key, estimate)] = attribute.mech.estimates(attribute, n, {"true": hits}, 0.95)
    sd = math.sqrt(mechanisms.variance(attribute.p, attribute.q, n, share))
    assert abs(estimate.estimate - share) < Z * sd, (estimate.estimate, sd)


def test_a_device_repeating_its_value_repeats_its_permanent_response_not_its_report():
    # The instantaneous layer is fresh: 2,000 reports of one device and one value hit at the
    # IRR's rate given the (fixed) permanent response, not always the same answer.
    s, secret = schema(), os.urandom(32)
    attribute = s.attribute("flag")
    prr = permanent(s, secret, "flag", True)
    rate = attribute.memo.instant_p if prr else attribute.memo.instant_q
    reports = [randomize(s, {"flag": True, "os": "linux", "lang": "en"}, device_secret=secret, source=SYSTEM)
               for _ in range(2000)]
    assert stats.binomtest(sum(r["values"]["flag"] for r in reports), 2000, rate).pvalue > ALPHA
