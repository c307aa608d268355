"""The device encoders (OS CSPRNG, so these draws are NOT seeded) against e^ε and the bulk encoders.

Because the device draws cannot be seeded, every check is a hypothesis test that a correct
encoder fails only with probability ALPHA = 1e-8. This module makes 76 such checks (rr 3 x 4,
grr 10 + 16, oue 5 + 10, randbelow 7, device vs bulk 3, end to end 13), so by the union bound a
correct implementation fails a run of it with probability below 7.6e-7 < 1e-6.
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

from ldp_telemetry.aggregator.ingest import counter_rows, value_key
from ldp_telemetry.shared import mechanisms, simulation
from ldp_telemetry.shared.estimators import estimate
from ldp_telemetry.shared.reports import randomize, validate_report
from ldp_telemetry.shared.schema import parse_schema

ALPHA = 1e-8
Z = NormalDist().inv_cdf(1 - ALPHA / 2)  # 5.73


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
    p, q = mechanisms.parameters("rr", epsilon)
    draws = 100_000
    true_given_true = sum(mechanisms.encode_rr(True, p) for _ in range(draws))
    true_given_false = sum(mechanisms.encode_rr(False, p) for _ in range(draws))
    assert_rate(true_given_true, draws, p)
    assert_rate(true_given_false, draws, q)
    # P(report true | true) / P(report true | false) = p/q = e^ε, and likewise for "false"
    assert_log_ratio(true_given_true / draws, draws, true_given_false / draws, draws, epsilon)
    assert_log_ratio((draws - true_given_false) / draws, draws, (draws - true_given_true) / draws, draws, epsilon)


# --- generalised randomised response ------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "d"), [(1.0, 4), (2.0, 7)])
def test_grr_output_ratio_is_e_to_the_epsilon(epsilon, d):
    p, q = mechanisms.parameters("grr", epsilon, d)
    draws = 60_000
    x, other = 0, d - 1  # the ends, where the skip-over of the true index matters most
    given_x = Counter(mechanisms.encode_grr(x, d, p) for _ in range(draws))
    given_other = Counter(mechanisms.encode_grr(other, d, p) for _ in range(draws))
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
    p, q = mechanisms.parameters("oue", epsilon, d)
    draws = 40_000
    ones = np.zeros(d, dtype=np.int64)
    for _ in range(draws):
        vector = mechanisms.encode_oue(index, d, p, q)
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
    counts = np.bincount([mechanisms.randbelow(n) for _ in range(draws)], minlength=n)
    assert counts.shape == (n,)
    assert stats.chisquare(counts).pvalue > ALPHA


def test_randbelow_1_is_0_and_bernoulli_edges_are_exact():
    assert {mechanisms.randbelow(1) for _ in range(100)} == {0}
    assert not any(mechanisms.bernoulli(0.0) for _ in range(10_000))
    assert all(mechanisms.bernoulli(1.0) for _ in range(10_000))


# --- device and bulk encoders agree in distribution ---------------------------------------


def assert_same_distribution(device: list, bulk: list) -> None:
    """A chi-square test of homogeneity on the two samples' histograms of outcomes."""
    outcomes = sorted(set(device) | set(bulk))
    device_counts, bulk_counts = Counter(device), Counter(bulk)
    table = np.array([[device_counts[o] for o in outcomes], [bulk_counts[o] for o in outcomes]])
    assert stats.chi2_contingency(table).pvalue > ALPHA, (outcomes, table)


DRAWS = 40_000


def test_rr_device_and_bulk_agree():
    p, _ = mechanisms.parameters("rr", 0.7)
    rng = np.random.default_rng(11)
    truth = np.array([True, False] * (DRAWS // 2))
    device = [(bool(t), mechanisms.encode_rr(bool(t), p)) for t in truth]
    bulk = list(zip(truth.tolist(), simulation.encode_rr_bulk(truth, p, rng).tolist()))
    assert_same_distribution(device, bulk)


def test_grr_device_and_bulk_agree():
    d = 5
    p, _ = mechanisms.parameters("grr", 1.2, d)
    rng = np.random.default_rng(12)
    truth = np.arange(DRAWS) % d  # every true index, so the pair (truth, output) is compared
    device = [(int(t), mechanisms.encode_grr(int(t), d, p)) for t in truth]
    bulk = list(zip(truth.tolist(), simulation.encode_grr_bulk(truth, d, p, rng).tolist()))
    assert_same_distribution(device, bulk)


def test_oue_device_and_bulk_agree_on_whole_vectors():
    # Whole vectors, so the bits' independence is compared too: 3 true indices x 2^3 vectors.
    d = 3
    p, q = mechanisms.parameters("oue", 0.9, d)
    rng = np.random.default_rng(13)
    truth = np.arange(DRAWS) % d
    device = [(int(t), tuple(mechanisms.encode_oue(int(t), d, p, q))) for t in truth]
    bulk_bits = simulation.encode_oue_bulk(truth, d, p, q, rng)
    bulk = [(int(t), tuple(int(b) for b in row)) for t, row in zip(truth, bulk_bits)]
    assert_same_distribution(device, bulk)


# --- the device path end to end: randomize -> validate_report -> hits -> estimate ----------


def test_device_reports_decode_to_the_population_shares():
    # A fixed population of 20,000 devices randomises on the device path; the aggregator's path
    # (validate_report, ingest.counter_rows, estimate) must recover every share. With the population
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
    for _, _, _, name, value, _, count in counter_rows(reports):
        hits[name, value] += count
    truth = {("flag", 0): 0.3, **{("os", i): s for i, s in enumerate(shares["os"])},
             **{("lang", i): s for i, s in enumerate(shares["lang"])}}
    for (name, index), theta in truth.items():
        attribute = schema.attribute(name)
        result = estimate(hits[name, value_key(attribute.values[index])], devices, attribute.p, attribute.q)
        sd = math.sqrt(mechanisms.variance(attribute.p, attribute.q, devices, theta))
        assert abs(result.estimate - theta) < Z * sd, (name, index, result.estimate, theta)


def bisect_index(shares: list[float], position: float) -> int:
    """The category whose cumulative-share interval holds ``position`` in [0, 1)."""
    return int(np.searchsorted(np.cumsum(shares), position, side="right"))
