"""Estimators: the debiasing map, the Wilson interval against statsmodels, and the variance forms."""

from __future__ import annotations

import math

import pytest
from statsmodels.stats.proportion import proportion_confint

from ldp_telemetry.shared import mechanisms
from ldp_telemetry.shared.estimators import DEFAULT_CONFIDENCE, debias, estimate, wilson_interval, z_value

GRID_N = [1, 2, 3, 5, 10, 37, 100, 1000, 123_457, 10**7]
CONFIDENCES = [0.5, 0.8, 0.9, 0.95, 0.99, 0.999]


def hits_for(n: int) -> list[int]:
    """0, n and a spread between, including 1 and n - 1."""
    return sorted(h for h in {0, 1, n // 3, n // 2, n - 1, n} if 0 <= h <= n)


@pytest.mark.parametrize("confidence", CONFIDENCES)
@pytest.mark.parametrize("n", GRID_N)
def test_wilson_agrees_with_statsmodels(n, confidence):
    for hits in hits_for(n):
        low, high = wilson_interval(hits, n, confidence)
        ref_low, ref_high = proportion_confint(hits, n, alpha=1 - confidence, method="wilson")
        # Both evaluate the same closed form in doubles: agreement to rounding.
        assert low == pytest.approx(ref_low, abs=1e-12), (hits, n, confidence)
        assert high == pytest.approx(ref_high, abs=1e-12), (hits, n, confidence)
        assert 0.0 <= low <= hits / n <= high <= 1.0


def test_wilson_at_the_edges_is_one_sided():
    assert wilson_interval(0, 50)[0] == 0.0
    assert wilson_interval(50, 50)[1] == 1.0
    assert 0 < wilson_interval(0, 50)[1] < 0.1


def test_z_value_is_the_two_sided_normal_quantile():
    assert z_value(0.95) == pytest.approx(1.959963984540054, rel=1e-12)
    assert z_value(0.99) == pytest.approx(2.5758293035489, rel=1e-12)
    assert DEFAULT_CONFIDENCE == 0.95


@pytest.mark.parametrize("confidence", [0, 1, -0.5, 1.5, math.nan, "0.95", None, True])
def test_confidence_must_be_strictly_between_0_and_1(confidence):
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(5, 10, confidence)


@pytest.mark.parametrize(("hits", "n"), [(-1, 10), (11, 10), (0, 0), (1, -5), (2.0, 10), (2, 10.0), (True, 10),
                                         (2, None)])
def test_counts_must_be_integers_with_0_le_hits_le_n(hits, n):
    with pytest.raises(ValueError, match="hits|n must"):
        estimate(hits, n, 0.75, 0.25)


def test_debias_is_the_linear_map_f_minus_q_over_p_minus_q():
    # the coin example: p_flip = 1/4, so (f - 1/4) / (1/2)
    assert debias(0.25, 0.75, 0.25) == 0.0
    assert debias(0.75, 0.75, 0.25) == 1.0
    assert debias(0.5, 0.75, 0.25) == 0.5
    assert debias(0.0, 0.75, 0.25) == -0.5  # unclipped
    with pytest.raises(ValueError, match="p must exceed q"):
        debias(0.5, 0.25, 0.25)


def test_estimate_is_unclipped_and_maps_the_wilson_ends():
    p, q = 0.75, 0.25
    e = estimate(10, 100, p, q)
    assert e.estimate == pytest.approx((0.1 - 0.25) / 0.5)  # -0.3, reported as it is
    assert e.estimate_clipped == 0.0
    low, high = wilson_interval(10, 100)
    assert e.ci_low == 0.0  # (low - q)/(p - q) < 0, clipped
    assert e.ci_high == pytest.approx(max(0.0, (high - q) / (p - q)))
    assert (e.n, e.hits) == (100, 10)
    top = estimate(100, 100, p, q)
    assert top.estimate == 1.5 and top.estimate_clipped == 1.0 and top.ci_high == 1.0
    mid = estimate(500, 1000, p, q, confidence=0.9)
    low, high = wilson_interval(500, 1000, 0.9)
    assert (mid.ci_low, mid.ci_high) == (pytest.approx((low - q) / (p - q)), pytest.approx((high - q) / (p - q)))
    assert mid.ci_low < mid.estimate == 0.5 < mid.ci_high


# --- variance closed forms (Wang et al. 2017) ---------------------------------------------


@pytest.mark.parametrize("epsilon", [0.5, 1.0, math.log(3), 4.0])
@pytest.mark.parametrize("d", [2, 4, 32, 1024])
def test_the_approximate_variance_has_wang_et_al_closed_forms(epsilon, d):
    e = math.exp(epsilon)
    n = 1000
    grr = mechanisms.variance(*mechanisms.get("grr").parameters(epsilon=epsilon, d=d), n)
    oue = mechanisms.variance(*mechanisms.get("oue").parameters(epsilon=epsilon, d=d), n)
    assert grr == pytest.approx((e + d - 2) / (n * (e - 1) ** 2), rel=1e-12)
    assert oue == pytest.approx(4 * e / (n * (e - 1) ** 2), rel=1e-12)


@pytest.mark.parametrize("theta", [0.0, 0.02, 0.5, 1.0])
def test_conditional_and_unconditional_variance_by_hand(theta):
    p, q, n = 0.75, 0.25, 400
    # conditional: a share θ hits with p, the rest with q: Var(hits) = n[θ p(1-p) + (1-θ) q(1-q)]
    conditional = (theta * 0.75 * 0.25 + (1 - theta) * 0.25 * 0.75) / (n * 0.25)
    # unconditional: every hit is Bernoulli(π), π = q + (p - q)θ
    pi = 0.25 + 0.5 * theta
    unconditional = pi * (1 - pi) / (n * 0.25)
    assert mechanisms.variance(p, q, n, theta) == pytest.approx(conditional, rel=1e-12)
    assert mechanisms.variance(p, q, n, theta, conditional=False) == pytest.approx(unconditional, rel=1e-12)
    # sampling the population adds exactly θ(1-θ)/n
    assert unconditional - conditional == pytest.approx(theta * (1 - theta) / n, abs=1e-15)


def test_wang_et_al_eq_2_form_of_the_conditional_variance():
    # Var = q(1-q)/(n(p-q)^2) + θ(1-p-q)/(n(p-q))
    p, q = mechanisms.get("grr").parameters(epsilon=1.5, d=6)
    n, theta = 5000, 0.3
    expected = q * (1 - q) / (n * (p - q) ** 2) + theta * (1 - p - q) / (n * (p - q))
    assert mechanisms.variance(p, q, n, theta) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("args", "kwargs"), [((0.75, 0.25, 0), {}), ((0.25, 0.75, 10), {}),
                                              ((0.75, 0.25, 10, 1.5), {}), ((0.75, 0.25, 10, -0.1), {})])
def test_variance_rejects_bad_arguments(args, kwargs):
    with pytest.raises(ValueError):
        mechanisms.variance(*args, **kwargs)


@pytest.mark.parametrize(("mechanism", "epsilon", "d"), [("no-such-mechanism", 1.0, 2), ("rr", 0, 2), ("rr", -1, 2),
                                                          ("oue", math.inf, 4), ("grr", 1.0, 1)])
def test_parameters_reject_bad_arguments(mechanism, epsilon, d):
    with pytest.raises(ValueError):
        mechanisms.get(mechanism).parameters(epsilon=epsilon, d=d)
