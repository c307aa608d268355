"""Statistical tests of string estimates (optimal local hashing), on populations simulated with fixed seeds.

Each population holds listed candidates and strings nobody listed. Devices are randomised with
olh's numpy encoder (:func:`olh.randomise_bulk`, checked against the device encoder at the end of
this module), supports are counted by the aggregator's own bulk path (:func:`olh.supports`) and
estimated with ``shared.estimators``. A report supports its own string with probability p and any
other with probability 1/g (exact to about 1/P for the hash family), so hits of a candidate of
true share θ are Binomial(n, π) with π = q + (p - q)θ, q = 1/g: the tolerances below come from that.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy import stats

from ldp_telemetry.shared import mechanisms
from ldp_telemetry.shared.estimators import estimate
from ldp_telemetry.shared.mechanisms import olh
from ldp_telemetry.shared.mechanisms.randomness import SYSTEM
from ldp_telemetry.shared.schema import parse_schema

DEVICES = 1000  # per simulated population
TRIALS = 10_000  # populations per ε
LISTED = {"example.org": 0.30, "caf\u00e9.fr": 0.15, "\U0001f600": 0.05, "rare.net": 0.02, "absent-1": 0.0,
          "absent-2": 0.0}
# The rest of the population: 48% spread evenly over 60 strings nobody listed.
UNLISTED = [f"unlisted-{i}.example" for i in range(60)]
EPSILONS = (2.0, 4.0)  # g = 8 and g = 56


def attribute_at(epsilon: float):
    return parse_schema({"name": "s", "version": 1, "epsilon": epsilon, "attributes": [
        {"name": "home", "type": "string", "candidates": list(LISTED)}]}).attribute("home")


@functools.lru_cache(maxsize=None)
def trials(epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """(hits, covered): per trial and listed candidate, its supports and whether its interval covered."""
    attribute = attribute_at(epsilon)
    g = olh.buckets(epsilon)
    strings = list(LISTED) + UNLISTED
    shares = np.array(list(LISTED.values()) + [(1 - sum(LISTED.values())) / len(UNLISTED)] * len(UNLISTED))
    x = olh.fingerprints(tuple(strings))
    listed_x = x[: len(LISTED)]
    rng = np.random.default_rng(190_000 + int(epsilon))
    hits = np.empty((TRIALS, len(LISTED)), dtype=np.int64)
    for t in range(TRIALS):
        truth = rng.choice(len(strings), size=DEVICES, p=shares)  # devices drawn independently
        hits[t] = olh.supports(*olh.randomise_bulk(x[truth], g, attribute.p, rng), listed_x, g)
    theta = np.array(list(LISTED.values()))
    covered = np.empty_like(hits, dtype=bool)
    for t in range(TRIALS):
        for j, h in enumerate(hits[t]):
            e = estimate(int(h), DEVICES, attribute.p, attribute.q)
            covered[t, j] = e.ci_low <= theta[j] <= e.ci_high
    return hits, covered


def exact_coverage(attribute, theta: float, n: int) -> float:
    """P(interval covers θ) when hits ~ Binomial(n, π), π = q + (p - q)θ, with the real estimate()."""
    pi = attribute.q + (attribute.p - attribute.q) * theta
    h = np.arange(n + 1)
    covers = np.array([(e := estimate(int(k), n, attribute.p, attribute.q)).ci_low <= theta <= e.ci_high for k in h])
    return float(stats.binom.pmf(h, n, pi)[covers].sum())


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_the_mean_error_of_each_listed_string_is_within_3_standard_errors(epsilon):
    # θ̂ = (hits/n - q)/(p - q) has variance σ² = π(1-π)/(n(p-q)²) with π = q + (p-q)θ (devices
    # drawn independently, unlisted strings included: each supports a listed one w.p. q); the mean
    # of T trials has standard error sqrt(σ²/T). DESIGN's bar: the mean error within 3 of those.
    attribute = attribute_at(epsilon)
    hits, _ = trials(epsilon)
    estimates = (hits / DEVICES - attribute.q) / (attribute.p - attribute.q)
    for j, (name, theta) in enumerate(LISTED.items()):
        se = math.sqrt(mechanisms.variance(attribute.p, attribute.q, DEVICES, theta, conditional=False) / TRIALS)
        error = estimates[:, j].mean() - theta
        assert abs(error) < 3 * se, (name, error, se)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_intervals_of_listed_strings_cover_94_to_96_percent(epsilon):
    # DESIGN's bar: for 0 < θ < 1 the coverage of the mapped Wilson interval, computed exactly over
    # hits ~ Binomial(n, π) by exact_coverage(), is in [94%, 96%]. The simulation shows the encoder,
    # the hashing and the supports really deliver it: the simulated coverage of T trials is
    # Binomial(T, c)/T with standard error sqrt(c(1-c)/T) (0.0022 at T = 10,000, c = 0.95) and must
    # lie within 4 of those of the exact c (a correct implementation fails one such check with
    # probability 6e-5). At θ = 0 clipping makes the interval one-sided (about 97.5%): there the
    # exact coverage must be at least 95%, and the simulated one again within 4 standard errors.
    attribute = attribute_at(epsilon)
    _, covered = trials(epsilon)
    for j, (name, theta) in enumerate(LISTED.items()):
        exact = exact_coverage(attribute, theta, DEVICES)
        observed = covered[:, j].mean()
        assert abs(observed - exact) < 4 * math.sqrt(exact * (1 - exact) / TRIALS), (name, observed, exact)
        assert (0.94 <= exact <= 0.96) if theta > 0 else exact >= 0.95, (name, exact)


def test_the_device_encoder_supports_its_own_string_with_p_and_another_with_1_over_g():
    # The OS CSPRNG (not seeded): N = 20,000 reports; a support rate r is Binomial(N, r)/N, so
    # |observed - r| < 5.73 sqrt(r(1-r)/N) fails a correct encoder with probability 1e-8 per check.
    attribute = attribute_at(2.0)
    g = olh.buckets(2.0)
    n = 20_000
    own = other = 0
    x_own, x_other = olh.fingerprint("example.org"), olh.fingerprint("unlisted-0.example")
    for _ in range(n):
        r = attribute.mech.encode(attribute, "example.org", SYSTEM)
        own += olh.hash_value(r["a"], r["b"], x_own, g) == r["y"]
        other += olh.hash_value(r["a"], r["b"], x_other, g) == r["y"]
    for observed, rate in ((own / n, attribute.p), (other / n, 1 / g)):
        assert abs(observed - rate) < 5.73 * math.sqrt(rate * (1 - rate) / n), (observed, rate)
