"""The device encoders (OS CSPRNG, so these draws are NOT seeded) against e^ε and the bulk encoders.

Because the device draws cannot be seeded, every check is a hypothesis test that a correct
encoder fails only with probability ALPHA = 1e-8. This module makes 109 such checks (rr 3 x 4,
grr 10 + 16, oue 5 + 10, randbelow 7, device vs bulk 36, end to end 13), so by the union bound a
correct implementation fails a run of it with probability below 1.09e-6.
Draw counts are then chosen so that a real error of a few per cent in a probability is caught.
"""

from __future__ import annotations

import math
from collections import Counter
from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats

from test_shared_examples import example

from ldp_telemetry.aggregator.ingest.batch import report_rows
from ldp_telemetry.aggregator.ingest.counting import Counting
from ldp_telemetry.shared import attribute_types, mechanisms
from ldp_telemetry.shared.mechanisms.randomness import SYSTEM, bernoulli, randbelow
from ldp_telemetry.shared.estimators import estimate
from ldp_telemetry.shared.reports import randomize, validate_report
from ldp_telemetry.shared.schema import Attribute, parse_schema

ALPHA = 1e-8
Z = NormalDist().inv_cdf(1 - ALPHA / 2)  # 5.73


def attribute_of(mechanism: str, epsilon: float, d: int = 2) -> Attribute:
    """A parsed attribute randomised by ``mechanism`` at ``epsilon`` with ``d`` categories (a
    boolean for ``rr``)."""
    kind = next(t for t in attribute_types.REGISTRY.values() if mechanisms.get(mechanism) in t.mechanisms)
    raw = {"name": "a", "type": kind.name, "mechanism": mechanism}
    if "categories" in kind.fields:
        raw["categories"] = [f"c{i}" for i in range(d)]
    return parse_schema({"name": "s", "version": 1, "epsilon": epsilon, "attributes": [raw]}).attributes[0]


def encode(attribute: Attribute, truth: object) -> object:
    """One device draw, from the OS CSPRNG; a category comes back as its index."""
    out = attribute.mech.encode(attribute, truth, SYSTEM)
    return attribute.index_of[out] if isinstance(out, str) else out


def assert_rate(successes: int, draws: int, probability: float) -> None:
    """An exact two-sided binomial test of ``successes / draws`` against ``probability``."""
    pvalue = stats.binomtest(successes, draws, probability).pvalue
    assert pvalue > ALPHA, (successes / draws, probability, pvalue)


def assert_log_ratio(p_hat: float, n_p: int, q_hat: float, n_q: int, expected: float) -> None:
    """``log(p̂/q̂)`` against ``expected``, within Z delta-method standard errors.

    Var(log p̂) ≈ (1 - p)/(n p) for a binomial proportion, and the two estimates are independent.
    """
    se = math.sqrt((1 - p_hat) / (n_p * p_hat) + (1 - q_hat) / (n_q * q_hat))
    assert abs(math.log(p_hat / q_hat) - expected) < Z * se, (math.exp(math.log(p_hat / q_hat)), math.exp(expected))


# --- binary randomised response -----------------------------------------------------------


@pytest.mark.parametrize("epsilon", [1.0, math.log(3), 3.0])
def test_rr_output_ratio_is_e_to_the_epsilon(epsilon):
    # 100,000 draws per input: at ε = 1 the log-ratio's standard error is
    # sqrt((1-p)/(Np) + (1-q)/(Nq)) = 0.0056, so a ratio off by more than 3.2% fails.
    rr = attribute_of("rr", epsilon)
    p, q = rr.p, rr.q
    draws = 100_000
    true_given_true = sum(encode(rr, True) for _ in range(draws))
    true_given_false = sum(encode(rr, False) for _ in range(draws))
    assert_rate(true_given_true, draws, p)
    assert_rate(true_given_false, draws, q)
    # P(report true | true) / P(report true | false) = p/q = e^ε, and likewise for "false"
    assert_log_ratio(true_given_true / draws, draws, true_given_false / draws, draws, epsilon)
    assert_log_ratio((draws - true_given_false) / draws, draws, (draws - true_given_true) / draws, draws, epsilon)


# --- generalised randomised response ------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "d"), [(1.0, 4), (2.0, 7)])
def test_grr_output_ratio_is_e_to_the_epsilon(epsilon, d):
    grr = attribute_of("grr", epsilon, d)
    p, q = grr.p, grr.q
    draws = 60_000
    x, other = 0, d - 1  # the ends, where the skip-over of the true index matters most
    given_x = Counter(encode(grr, x) for _ in range(draws))
    given_other = Counter(encode(grr, other) for _ in range(draws))
    assert set(given_x) | set(given_other) <= set(range(d))
    for output in range(d):
        assert_rate(given_x[output], draws, p if output == x else q)
        assert_rate(given_other[output], draws, p if output == other else q)
    # the worst-case ratio over outputs is p/q = e^ε, at output x (and its mirror at `other`)
    assert_log_ratio(given_x[x] / draws, draws, given_other[x] / draws, draws, epsilon)
    assert_log_ratio(given_other[other] / draws, draws, given_x[other] / draws, draws, epsilon)


# --- optimised unary encoding -------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "d", "index"), [(1.0, 4, 2), (2.0, 9, 0)])
def test_oue_bit_probabilities_and_ratio(epsilon, d, index):
    oue = attribute_of("oue", epsilon, d)
    p, q = oue.p, oue.q
    draws = 40_000
    ones = np.zeros(d, dtype=np.int64)
    for _ in range(draws):
        vector = encode(oue, index)
        assert len(vector) == d
        ones += vector
    for bit in range(d):
        assert_rate(int(ones[bit]), draws, p if bit == index else q)
    # Inputs x and x' differ in bits x and x'; the worst-case output ratio is
    # [p/q]·[(1-q)/(1-p)] = e^ε. Its log is logit(p) - logit(q); Var(logit(p̂)) ≈ 1/(N p(1-p)),
    # and q̂ pools the d - 1 other bits, (d-1)·N independent draws.
    p_hat = ones[index] / draws
    q_hat = (ones.sum() - ones[index]) / ((d - 1) * draws)
    se = math.sqrt(1 / (draws * p_hat * (1 - p_hat)) + 1 / ((d - 1) * draws * q_hat * (1 - q_hat)))
    logit = lambda x: math.log(x / (1 - x))  # noqa: E731
    assert abs(logit(p_hat) - logit(q_hat) - epsilon) < Z * se


# --- the CSPRNG primitives ----------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 6, 7, 10, 300])
def test_randbelow_is_uniform(n):
    draws = 20 * n if n > 100 else 30_000
    counts = np.bincount([randbelow(n, SYSTEM) for _ in range(draws)], minlength=n)
    assert counts.shape == (n,)
    assert stats.chisquare(counts).pvalue > ALPHA


def test_randbelow_1_is_0_and_bernoulli_edges_are_exact():
    assert {randbelow(1, SYSTEM) for _ in range(100)} == {0}
    assert not any(bernoulli(0.0, SYSTEM) for _ in range(10_000))
    assert all(bernoulli(1.0, SYSTEM) for _ in range(10_000))


# --- device and bulk encoders agree in distribution ---------------------------------------


DRAWS = 40_000


@pytest.mark.parametrize(("mechanism", "epsilon", "d", "seed"), [("rr", 0.7, 2, 11), ("grr", 1.2, 5, 12),
                                                                  ("oue", 0.9, 3, 13)])
def test_device_and_bulk_encoders_agree(mechanism, epsilon, d, seed):
    # The bulk encoder returns each value key's summed amount. Per true value and key, the device's
    # count (from its statistics) and the bulk's are binomial draws of the same probability if the
    # encoders agree: a 2 x 2 homogeneity test each (rr 2, grr 25, oue 9 checks of this module).
    attribute = attribute_of(mechanism, epsilon, d)
    rng = np.random.default_rng(seed)
    per_truth = DRAWS // d
    for true_index in range(d):
        truth_value = true_index == 0 if mechanism == "rr" else true_index
        device: Counter = Counter()
        for _ in range(per_truth):
            reported = attribute.mech.encode(attribute, truth_value, SYSTEM)
            device.update(dict(attribute.mech.statistics(attribute, reported)))
        truth = np.full(per_truth, truth_value, dtype=bool if mechanism == "rr" else np.int64)
        bulk = attribute.mech.encode_bulk(attribute, truth, rng).tolist()
        for key, bulk_hits in zip(attribute.keys, bulk):
            table = np.array([[device[key], per_truth - device[key]], [bulk_hits, per_truth - bulk_hits]])
            assert stats.chi2_contingency(table).pvalue > ALPHA, (true_index, key, table)


# --- the device path end to end: randomize -> validate_report -> hits -> estimate ----------


def test_device_reports_decode_to_the_population_shares():
    # A fixed population of 20,000 devices randomises on the device path; the aggregator's path
    # (validate_report, the stored rows, counting, estimate) must recover every share. With the population
    # fixed, each estimate's standard deviation is the conditional closed form; 13 values, each
    # within Z = 5.73 of them (13 of this module's checks).
    schema = parse_schema(example("every-mechanism"))
    devices = 20_000
    shares = {"os": [0.1, 0.2, 0.3, 0.4], "lang": [0.5, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.0]}
    population = [
        {"flag": i % 10 < 3, "os": schema.attribute("os").categories[bisect_index(shares["os"], i / devices)],
         "lang": schema.attribute("lang").categories[bisect_index(shares["lang"], i / devices)]}
        for i in range(devices)
    ]
    reports = [validate_report(randomize(schema, record), schema) for record in population]
    hits: Counter = Counter()  # summed over windows, in case the run straddles midnight UTC
    count = Counting(lambda name, version: schema)
    for row in count(report_rows(reports, [0] * len(reports))).amounts:
        hits[row.attribute, row.value] += row.amount
    truth = {("flag", 0): 0.3, **{("os", i): s for i, s in enumerate(shares["os"])},
             **{("lang", i): s for i, s in enumerate(shares["lang"])}}
    for (name, index), theta in truth.items():
        attribute = schema.attribute(name)
        result = estimate(hits[name, attribute.keys[index]], devices, attribute.p, attribute.q)
        sd = math.sqrt(mechanisms.variance(attribute.p, attribute.q, devices, theta))
        assert abs(result.estimate - theta) < Z * sd, (name, index, result.estimate, theta)


def bisect_index(shares: list[float], position: float) -> int:
    """The category whose cumulative-share interval holds ``position`` in [0, 1)."""
    return int(np.searchsorted(np.cumsum(shares), position, side="right"))
