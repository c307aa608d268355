"""The bulk simulation: its inputs, the populations it draws, and the split it honours."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_shared_examples import example

from ldp_telemetry.shared import simulation
from ldp_telemetry.shared.schema import parse_schema
from ldp_telemetry.shared.mechanisms import shares
from ldp_telemetry.shared.simulation import hit_counts, population_shares, simulate, true_values

SHARES = {"flag": 0.3, "os": [0.1, 0.2, 0.3, 0.4], "lang": [0.5, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.0]}


def schema(name: str = "every-mechanism"):
    return parse_schema(example(name))


@pytest.mark.parametrize(("attribute", "share"), [
    ("flag", 1.5), ("flag", -0.1), ("flag", math.nan), ("flag", "0.5"), ("flag", [0.5, 0.5]), ("flag", None),
    ("os", [0.5, 0.5]), ("os", [0.5, 0.5, 0.5, -0.5]), ("os", [math.nan, 0.5, 0.5, 0.0]), ("os", 0.25),
    ("os", [0.25, 0.25, 0.25, 0.2]), ("os", "abcd"), ("os", ["0.25"] * 4), ("os", None), ("os", [math.inf, 0, 0, 0]),
])
def test_bad_shares_are_a_value_error_naming_the_attribute(attribute, share):
    with pytest.raises(ValueError, match=f"^{attribute}: "):
        population_shares(schema().attribute(attribute), share)


def test_shares_must_cover_every_attribute_and_no_other():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="no true shares given for: lang"):
        simulate(schema(), {k: v for k, v in SHARES.items() if k != "lang"}, 100, rng=rng)
    with pytest.raises(ValueError, match="the schema does not have: flags"):
        simulate(schema(), {**SHARES, "flags": 0.5}, 100, rng=rng)
    with pytest.raises(ValueError, match="at least 1"):
        simulate(schema(), SHARES, 0, rng=rng)


def test_a_fixed_population_has_exactly_the_given_shares():
    rng = np.random.default_rng(1)
    truth = true_values(schema().attribute("os"), [0.1, 0.2, 0.3, 0.4], 1000, rng, sampled=False)
    assert np.bincount(truth, minlength=4).tolist() == [100, 200, 300, 400]
    flags = true_values(schema().attribute("flag"), [0.3, 0.7], 1001, rng, sampled=False)
    assert flags.dtype == bool and flags.sum() == 300  # floor(0.3 * 1001); the remainder goes to False


def test_a_sampled_population_draws_each_device_from_the_shares():
    rng = np.random.default_rng(2)
    n = 100_000
    truth = true_values(schema().attribute("os"), [0.1, 0.2, 0.3, 0.4], n, rng, sampled=True)
    counts = np.bincount(truth, minlength=4)
    # each count is Binomial(n, s): within 5 sd of n·s (fixed seed)
    for count, share in zip(counts, [0.1, 0.2, 0.3, 0.4]):
        assert abs(count - n * share) < 5 * math.sqrt(n * share * (1 - share))


def test_every_value_gets_one_row_with_its_truth():
    rows = simulate(schema(), SHARES, 2000, rng=np.random.default_rng(3))
    assert [(r.attribute, r.value) for r in rows] == [("flag", True)] + [("os", c) for c in
                                                                         schema().attribute("os").categories] + \
        [("lang", c) for c in schema().attribute("lang").categories]
    assert [r.truth for r in rows] == [0.3] + SHARES["os"] + SHARES["lang"]
    assert all(r.estimate.n == 2000 for r in rows)


def test_sample_split_gives_each_attribute_about_a_third_of_the_devices():
    n = 30_000
    rows = simulate(schema("sampled"), SHARES, n, rng=np.random.default_rng(4))
    carried = {r.attribute: r.estimate.n for r in rows}
    assert sum(carried.values()) == n
    # Binomial(n, 1/3) each: sd = sqrt(n·2/9) = 81.6; 5 sd either side (fixed seed)
    assert all(abs(c - n / 3) < 5 * math.sqrt(n * 2 / 9) for c in carried.values())
    assert {a.epsilon for a in schema("sampled").attributes} == {3.0}


def test_oue_counts_over_several_chunks_hit_each_bit_at_its_rate():
    # OUE vectors are built a chunk of devices at a time (to bound memory); across chunks, with
    # devices drawn from the shares, every bit j is Binomial(n, q + (p - q)θ_j): within 5 sd.
    attribute = schema().attribute("lang")
    n = 3 * shares._CHUNK + 17
    rng = np.random.default_rng(5)
    counts = hit_counts(attribute, true_values(attribute, SHARES["lang"], n, rng, sampled=True), rng)
    for count, share in zip(counts, SHARES["lang"]):
        pi = attribute.q + (attribute.p - attribute.q) * share
        assert abs(count - n * pi) < 5 * math.sqrt(n * pi * (1 - pi))


def test_a_discovering_string_attribute_is_estimated_from_its_level_0_reports_alone():
    """Half the devices report at level 0 (a coin at 1/2): n is Binomial(10,000, 1/2), within 4 sd (50)."""
    schema = {"name": "s", "version": 1, "epsilon": 4.0, "attributes": [
        {"name": "h", "type": "string", "discover": True, "alphabet": "abc", "max_length": 3, "candidates": ["a", "b"]}]}
    results = simulate(schema, {"h": [0.7, 0.3]}, 10_000, rng=np.random.default_rng(1))
    assert {abs(r.estimate.n - 5_000) <= 4 * 50 for r in results} == {True}
