"""Empirical ε: Clopper–Pearson bounds on the ratio of an output's probabilities under two inputs.

The device draws these tests make are unseeded (the OS CSPRNG), so every check is a hypothesis
test that a correct implementation fails with probability at most ALPHA = 1e-8.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from scipy import stats

ALPHA = 1e-8
Z = NormalDist().inv_cdf(1 - ALPHA / 2)  # 5.73


def clopper_pearson(successes: int, draws: int) -> tuple[float, float]:
    """The two-sided Clopper–Pearson interval at level 1 - ALPHA/2 for each of the two rates a ratio
    uses (so both hold together with probability at least 1 - ALPHA)."""
    a = ALPHA / 2
    low = stats.beta.ppf(a / 2, successes, draws - successes + 1) if successes else 0.0
    high = stats.beta.ppf(1 - a / 2, successes + 1, draws - successes) if successes < draws else 1.0
    return low, high


def assert_ratio_is(hits_x: int, hits_other: int, draws: int, epsilon: float) -> None:
    """P(output | x) / P(output | x') from ``draws`` each: its Clopper–Pearson range must hold e^ε
    (the bound holds, and is attained) and span less than a factor 1.1, so that a ratio 10% above
    e^ε would have put the whole range above e^ε (the test can tell a 10% excess)."""
    px, po = clopper_pearson(hits_x, draws), clopper_pearson(hits_other, draws)
    low, high = px[0] / po[1], px[1] / po[0]
    assert low <= math.exp(epsilon) <= high, (low, math.exp(epsilon), high)
    assert high / low < 1.1, (low, high)


def draws_to_tell(p: float, q: float) -> int:
    """Draws per input so that the Clopper–Pearson range of p̂/q̂ spans less than a factor 1.1.

    Each rate's bound is about z·sqrt((1-p)/(Np)) from it in log terms, z the normal quantile of
    each bound's tail (ALPHA/4), and the ratio's range takes one bound of each rate, so its half
    width is about z·(sqrt((1-p)/p) + sqrt((1-q)/q))/sqrt(N), the whole range twice that; a
    factor 1.2 on N covers the Clopper–Pearson bounds being a little wider than normal ones."""
    z = NormalDist().inv_cdf(1 - ALPHA / 4)
    spread = 2 * z * (math.sqrt((1 - p) / p) + math.sqrt((1 - q) / q))
    return math.ceil(1.2 * (spread / math.log(1.1)) ** 2)
