"""The privacy panel's math (shared/privacy.py), against values computed by hand."""

import math

import pytest

from ldp_telemetry.shared import mechanisms, privacy

LN2, LN3 = math.log(2), math.log(3)


@pytest.mark.parametrize(
    "epsilon, prior, expected",
    [
        (LN3, 0.5, 3 / 4),  # the coin example: keep w.p. 3/4
        (math.log(9), 0.5, 9 / 10),
        (LN3, 0.1, 0.1 * 3 / (0.1 * 3 + 0.9)),  # = 1/4
        (1e-12, 0.3, 0.3),  # ε → 0: nothing learnt
        (700.0, 0.5, 1.0),  # no overflow at a huge ε
    ],
)
def test_posterior_bound(epsilon, prior, expected):
    assert privacy.posterior_bound(epsilon, prior) == pytest.approx(expected, abs=1e-12)


def test_posterior_bound_equals_rr_keep_probability():
    for epsilon in (0.1, 0.5, 1.0, 2.0, 5.0):
        p, _ = mechanisms.get("rr").parameters(epsilon=epsilon, d=2)
        assert privacy.posterior_bound(epsilon) == pytest.approx(p)


# (mechanism, epsilon, d, epsilon_prime, expected δ), each worked out by hand:
#   rr  ε=ln3: p=3/4, q=1/4      -> δ(ε') = 3/4 - e^ε'/4
#   grr ε=ln3, d=4: p=1/2, q=1/6 -> δ(ε') = 1/2 - e^ε'/6
#   oue ε=ln3: p=1/2, q=1/4      -> δ(ε') = p(1-q) - e^ε' q(1-p) = 3/8 - e^ε'/8
PROFILE_CASES = [
    ("rr", LN3, 2, 0.0, 1 / 2),
    ("rr", LN3, 2, LN2, 1 / 4),
    ("rr", LN3, 2, LN3, 0.0),
    ("rr", LN3, 2, 2.0, 0.0),
    ("grr", LN3, 4, 0.0, 1 / 3),
    ("grr", LN3, 4, LN2, 1 / 6),
    ("grr", LN3, 4, LN3, 0.0),
    ("oue", LN3, 4, 0.0, 1 / 4),
    ("oue", LN3, 4, LN2, 1 / 8),
    ("oue", LN3, 4, LN3, 0.0),
]


@pytest.mark.parametrize("mechanism, epsilon, d, epsilon_prime, expected", PROFILE_CASES)
def test_privacy_profile_hand_values(mechanism, epsilon, d, epsilon_prime, expected):
    p, q = mechanisms.get(mechanism).parameters(epsilon=epsilon, d=d)
    assert privacy.privacy_profile(mechanism, p, q, epsilon_prime) == pytest.approx(expected, abs=1e-12)


def test_oue_worst_pair_is_a_distribution_over_the_two_bits():
    p, q = mechanisms.get("oue").parameters(epsilon=1.3, d=5)
    pairs = privacy.worst_pair("oue", p, q)
    assert len(pairs) == 4
    assert math.fsum(a for a, _ in pairs) == pytest.approx(1.0)
    assert math.fsum(b for _, b in pairs) == pytest.approx(1.0)


@pytest.mark.parametrize("mechanism, d", [("rr", 2), ("grr", 3), ("grr", 50), ("oue", 8)])
def test_profile_curve_falls_to_zero_at_epsilon(mechanism, d):
    epsilon = 1.5
    p, q = mechanisms.get(mechanism).parameters(epsilon=epsilon, d=d)
    curve = privacy.profile_curve(mechanism, p, q, epsilon, points=21)
    assert curve[0][0] == 0.0 and curve[-1][0] == pytest.approx(1.25 * epsilon)
    deltas = [delta for _, delta in curve]
    assert all(a >= b for a, b in zip(deltas, deltas[1:]))  # non-increasing
    assert deltas[0] > 0
    assert all(delta == 0 for x, delta in curve if x >= epsilon)


def test_window_budget_is_linear():
    assert privacy.window_budget(0.5, 30) == 15.0
    assert privacy.window_budget(2.0, 0) == 0.0
    with pytest.raises(ValueError):
        privacy.window_budget(2.0, -1)


def test_local_vs_central_hand_values():
    # rr at ε = ln 3, n = 10 000: local SE = sqrt(3/16) / (1/2 · 100); central SE = √2 / (10 000 ln 3)
    p, q = mechanisms.get("rr").parameters(epsilon=LN3, d=2)
    comparison = privacy.local_vs_central(p, q, LN3, 10_000)
    local = math.sqrt(3 / 16) / 50
    central = math.sqrt(2) / (10_000 * LN3)
    assert comparison.local_se == pytest.approx(local)
    assert comparison.central_se == pytest.approx(central)
    assert comparison.ratio == pytest.approx(local / central)
    assert comparison.ratio == pytest.approx(67.27, abs=0.01)


def test_local_to_central_ratio_grows_as_sqrt_n():
    p, q = mechanisms.get("grr").parameters(epsilon=1.0, d=4)
    small = privacy.local_vs_central(p, q, 1.0, 100)
    large = privacy.local_vs_central(p, q, 1.0, 10_000)
    assert large.ratio / small.ratio == pytest.approx(10.0)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan")])
def test_bad_epsilon_is_named(bad):
    with pytest.raises(ValueError, match="epsilon"):
        privacy.posterior_bound(bad)
