r"""Debiased frequency estimates with Wilson-mapped confidence intervals.

Every mechanism in :mod:`ldp_telemetry.shared.mechanisms` makes a report hit value :math:`j` with
probability :math:`\pi_j = q + (p - q)\theta_j`. With :math:`f_j = \text{hits}_j / n` the unbiased
estimator is

.. math:: \hat\theta_j = \frac{f_j - q}{p - q}

(Warner 1965; Wang et al. 2017). Its interval: the Wilson score interval for the binomial
proportion :math:`\pi_j` (Wilson 1927; Brown, Cai & DasGupta 2001) at the requested level, both
ends mapped through the same increasing linear map and clipped to [0, 1]. A monotone map keeps
the Wilson interval's coverage; a Wald interval on :math:`\hat\theta` under-covers near 0 and 1.
The point estimate is reported unclipped (it is unbiased; clipping would bias it), with the
clipped value beside it for display.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import NormalDist

DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """One debiased estimate: the share of devices whose true value is the estimate's value."""

    estimate: float  # unbiased, may fall outside [0, 1]
    estimate_clipped: float  # clipped to [0, 1], for display
    ci_low: float
    ci_high: float
    n: int
    hits: int


@lru_cache(maxsize=16)  # a refresh asks for the same level once per value
def z_value(confidence: float) -> float:
    """The two-sided standard normal quantile for ``confidence`` (1.959963... for 0.95)."""
    if not (isinstance(confidence, (int, float)) and 0 < confidence < 1):
        raise ValueError(f"confidence must be a number strictly between 0 and 1, got {confidence!r}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(hits: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    r"""Wilson score interval for a binomial proportion ``hits / n``.

    .. math:: \frac{f + \frac{z^2}{2n} \pm z\sqrt{\frac{f(1-f)}{n} + \frac{z^2}{4n^2}}}{1 + \frac{z^2}{n}}

    Agrees with ``statsmodels.stats.proportion.proportion_confint(method="wilson")``.
    """
    _check_counts(hits, n)
    z = z_value(confidence)
    f = hits / n
    z2n = z * z / n
    centre = (f + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(f * (1 - f) / n + z2n / (4 * n))
    # At hits = 0 (n) the closed form is exactly 0 (1); rounding lands a few ulps inside, which
    # would leave f itself outside the interval.
    low = 0.0 if hits == 0 else max(0.0, centre - half)
    high = 1.0 if hits == n else min(1.0, centre + half)
    return low, high


def debias(f: float, p: float, q: float) -> float:
    r"""The linear map from hit rate to share: :math:`(f - q)/(p - q)`."""
    if not p > q:
        raise ValueError(f"p must exceed q, got p={p}, q={q}")
    return (f - q) / (p - q)


def estimate(hits: int, n: int, p: float, q: float, confidence: float = DEFAULT_CONFIDENCE) -> Estimate:
    """Debiased estimate and Wilson-mapped interval from ``hits`` of ``n`` reports.

    ``p`` and ``q`` are the mechanism's hit probabilities (see the module docstring).
    """
    low, high = wilson_interval(hits, n, confidence)
    value = debias(hits / n, p, q)
    return Estimate(
        estimate=value,
        estimate_clipped=_clip(value),
        ci_low=_clip(debias(low, p, q)),
        ci_high=_clip(debias(high, p, q)),
        n=n,
        hits=hits,
    )


def no_narrower_than_a_window(e: Estimate, p: float, q: float, smallest_n: int | None,
                               confidence: float = DEFAULT_CONFIDENCE) -> Estimate:
    r"""The rollup over every window of a memoised attribute: its estimate, with an interval no
    narrower than the widest one a single window can have.

    A device's reports in several windows repeat one permanent response, so they are not
    independent and the pooled Wilson interval would be too narrow. Every window has at least
    ``smallest_n`` reports, and a Wilson interval from :math:`n` reports is widest at
    :math:`f = 1/2`, with half-width :math:`rac{z}{1 + z^2/n}\sqrt{rac1{4n} + rac{z^2}{4n^2}}`;
    mapped through the estimator that is the most any window's half-width can be. The interval
    is the pooled one widened to at least that either side of the estimate, clipped to [0, 1];
    with no retained window (``smallest_n`` None) it is all of [0, 1]: no interval.
    """
    if smallest_n is None:
        return replace(e, ci_low=0.0, ci_high=1.0)
    z = z_value(confidence)
    z2n = z * z / smallest_n
    half = z / (1 + z2n) * math.sqrt(0.25 / smallest_n + z2n / (4 * smallest_n)) / (p - q)
    return replace(e, ci_low=min(e.ci_low, _clip(e.estimate - half)), ci_high=max(e.ci_high, _clip(e.estimate + half)))


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def _check_counts(hits: int, n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not isinstance(hits, int) or isinstance(hits, bool) or not 0 <= hits <= n:
        raise ValueError(f"hits must be an integer from 0 to n={n}, got {hits!r}")
