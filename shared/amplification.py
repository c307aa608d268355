r"""The central ε of m shuffled ε0-LDP reports: amplification by shuffling, for any randomiser.

A relay hands the aggregator a crowd of :math:`m` reports in a uniformly random order, each made
by an :math:`\varepsilon_0`-LDP randomiser (DESIGN.md, "Relay and amplification", "Accountant").
Against the aggregator one report is then :math:`(\varepsilon, \delta)`-DP (neighbouring crowds
differ in one device's data) with :math:`\varepsilon` far below :math:`\varepsilon_0`.
:func:`shuffle_epsilon` returns :math:`\min(\varepsilon_0, \varepsilon(m))` for the bound below.

**The bound.** Write :math:`p = e^{\varepsilon_0}` and :math:`w = e^{\varepsilon}`. Every other
device's report is, with probability :math:`2/(p+1)`, a "clone": half of the time a sample of one
distribution :math:`D_0`, half of the time of another, :math:`D_1`; the device that differs emits
:math:`D_0` with probability :math:`p/(p+1)` under one dataset and :math:`1/(p+1)` under the other
(:math:`D_1` otherwise). The shuffled crowd is a post-processing of how many :math:`D_0` and
:math:`D_1` samples it holds, so with :math:`C \sim \mathrm{Bin}(m-1, 2/(p+1))` clones among the
others, :math:`T = C + 1` and :math:`X \mid T \sim \mathrm{Bin}(T, 1/2)`:

.. math::

    \delta(\varepsilon) = \mathbb{E}_C\, h_{C+1}(\varepsilon), \qquad
    h_t(\varepsilon) = \sum_k \big(P_t(k) - w\,Q_t(k)\big)^+
    = K \Big( \tfrac14 B_{t-1}(j_t - 1) - (\tau - \tfrac12)\, S_t(j_t) \Big)

with :math:`P_t(k) = B_t(k)\,\frac{2}{t(p+1)}\,(pk + t - k)` (and :math:`Q_t` the same with
:math:`k \leftrightarrow t - k`), :math:`B_t` the :math:`\mathrm{Bin}(t, 1/2)` mass function and
:math:`S_t(j)` its tail :math:`P(X \ge j)`; the positive part is where :math:`k > \tau t`, so
:math:`j_t = \lfloor \tau t \rfloor + 1`, with

.. math:: \tau = \frac{p w - 1}{(p - 1)(w + 1)}, \qquad K = \frac{2 (p - 1)(w + 1)}{p + 1}.

(The closed form uses :math:`\mathbb{E}[X 1\{X \ge j\}] = \frac t2 S_{t-1}(j-1)` and
:math:`S_{t-1}(j-1) = S_t(j) + \frac12 B_{t-1}(j-1)`.) The two directions of the divergence are
equal by symmetry. :math:`\delta(\varepsilon)` falls as :math:`\varepsilon` grows, and
:math:`\varepsilon(m)` is the least :math:`\varepsilon` (by bisection, rounded up) with
:math:`\delta(\varepsilon) \le \delta`.

This is the general-randomiser bound of Wang et al., *Privacy Amplification via Shuffling:
Unified, Simplified, and Tightened* (VLDB 2024; arXiv 2304.05007: the variation-ratio reduction
with :math:`p = q = e^{\varepsilon_0}` and total variation :math:`\beta = (p-1)/(p+1)`, the largest
an :math:`\varepsilon_0`-LDP randomiser can have), numerically the "stronger clone" of Feldman,
McMillan and Talwar (SODA 2023). Why it holds for every :math:`\varepsilon_0`-LDP randomiser
:math:`R` (their erratum withdrew their own proof for general randomisers, whose clone decomposition
:math:`R(x) \ge (R(x^0) + R(x^1))/(p+1)` can fail): split
:math:`R(x^0) - R(x^1) = \beta(D_0 - D_1)` into its positive and negative parts, which have
disjoint supports. With :math:`a = \beta/(p-1)`,
:math:`R(x^0) = a p D_0 + a D_1 + (1 - a - ap) W` and :math:`R(x^1) = a D_0 + a p D_1 + (1 - a - ap) W`,
and for any other input :math:`R(x) \ge e^{-\varepsilon_0}\max(R(x^0), R(x^1)) \ge a D_0 + a D_1`
pointwise (the supports are disjoint). At :math:`\beta = (p-1)/(p+1)` (:math:`W` empty) this is
the pair above exactly; a smaller :math:`\beta` gives the pair with a "rest" part :math:`W` that
is identical under both datasets, and the tests check (tests/test_shared_amplification.py) that
the resulting divergence, computed exactly, never exceeds this one, and that exact shuffled binary
and 3-ary randomised response, valid lower bounds, never do either.

The sums run over the clones' counts within a window outside which a Chernoff bound leaves less
than :data:`TAIL` of :math:`C`'s mass (counted as :math:`h_1`, the largest term, since adding
independent clones is a post-processing); the tails :math:`S_t(j_t)` are marched from one
:math:`t` to the next (:math:`S_{t+1}(j) = S_t(j) + \frac12 B_t(j-1)`); the result is raised by
:data:`SLACK` against rounding. Below about :math:`m = e^{\varepsilon_0}` the crowd holds no
clone and the bound is barely below :math:`\varepsilon_0`. Above :data:`MAX_EPS0` a crowd of any
size holds no clone (:math:`2/(p+1) < 10^{-17}`) and :math:`\varepsilon_0` itself is returned.

numpy is imported where it is used: a device that imports ``shared`` never needs it.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is for the aggregator only
    import numpy as np

TAIL = 1e-30  # the clones' mass left outside the summed window (Chernoff), counted as h_1
SLACK = 1e-6  # relative margin on the computed δ(ε) for rounding (measured errors are below 1e-9)
MAX_EPS0 = 40.0  # above: 2/(e^ε0 + 1) < 1e-17, no crowd holds a clone; ε0 is returned
PRECISION = 1e-9  # the bisection stops when ε is known to this relative width


def shuffle_epsilon(m: int, eps0: float, delta: float) -> float:
    """min(ε0, ε): one of ``m`` shuffled ``eps0``-LDP reports is (ε, ``delta``)-DP against their
    receiver, for every ``eps0``-LDP randomiser (the module docstring gives the bound and its
    sources). Cached per (m, ε0, δ); ``ValueError`` naming a bad argument."""
    _check(m, eps0, delta)
    return _shuffle_epsilon(m, float(eps0), float(delta))


def shuffle_delta(m: int, eps0: float, epsilon: float) -> float:
    """An upper bound on the δ at which one of ``m`` shuffled ``eps0``-LDP reports is
    (``epsilon``, δ)-DP: δ(ε) of the module docstring, raised by :data:`SLACK`."""
    _check(m, eps0, 0.5)
    if not (isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool) and epsilon >= 0):
        raise ValueError(f"epsilon must be a number >= 0, got {epsilon!r}")
    return _delta(m, float(eps0), float(epsilon))


def _check(m: Any, eps0: Any, delta: Any) -> None:
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"m (the crowd's size) must be an integer >= 1, got {m!r}")
    if isinstance(eps0, bool) or not isinstance(eps0, (int, float)) or not (0 < eps0 < math.inf):
        raise ValueError(f"eps0 (the report's local epsilon) must be a finite number > 0, got {eps0!r}")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0 < delta < 1):
        raise ValueError(f"delta must be a number strictly between 0 and 1, got {delta!r}")


@lru_cache(maxsize=4096)  # the estimates refresh asks again for every window of every schema
def _shuffle_epsilon(m: int, eps0: float, delta: float) -> float:
    if eps0 > MAX_EPS0:
        return eps0
    low, high = 0.0, eps0  # δ(ε0) = 0: every report is ε0-DP against anyone
    while high - low > PRECISION * high:
        middle = (low + high) / 2
        if _delta(m, eps0, middle) <= delta:
            high = middle
        else:
            low = middle
    return high


def _delta(m: int, eps0: float, epsilon: float) -> float:
    if epsilon >= eps0 or eps0 > MAX_EPS0:
        return 0.0
    import numpy as np

    p, w = math.exp(eps0), math.exp(epsilon)
    single = (p - w) / (p + 1)  # h_1: the one report alone, the largest term
    tau = (p * w - 1) / ((p - 1) * (w + 1))
    if tau > 1 - 1e-9:  # within 1e-9 of ε0, floor(τt) is below float resolution: bound by h_1
        return single * (1 + SLACK)
    k_factor = 2 * (p - 1) * (w + 1) / (p + 1)
    clone = 2 / (p + 1)
    c_low, c_high, outside = _window(m - 1, clone)
    c = np.arange(c_low, c_high + 1, dtype=np.int64)
    weights = np.exp(_log_binomial_pmf(m - 1, c, math.log(clone), math.log1p(-clone)))
    t = c + 1
    j = np.floor(tau * t).astype(np.int64) + 1
    tails = _marched_tails(t, j)
    half = math.log(0.5)
    before = np.exp(_log_binomial_pmf_same(t - 1, j - 1, half))  # B_{t-1}(j_t - 1)
    h = k_factor * (before / 4 - (tau - 0.5) * tails)
    h = np.clip(h, 0.0, single)
    total = math.fsum((weights * h).tolist()) + outside * single
    return min(single, total) * (1 + SLACK)


def _marched_tails(t: np.ndarray, j: np.ndarray) -> np.ndarray:
    """S_t(j_t) = P(Bin(t, 1/2) >= j_t) for consecutive t with j_{t+1} - j_t in {0, 1}: the first
    summed, the others by S_{t+1}(j) = S_t(j) + B_t(j-1)/2, then S_{t+1}(j+1) = S_{t+1}(j) - B_{t+1}(j)."""
    import numpy as np

    half = math.log(0.5)
    t0, j0 = int(t[0]), int(j[0])
    # Past j0 + 40 sd (j0 >= t0/2) the terms are below e^-800 of the largest: they round to 0.
    ks = np.arange(j0, min(t0, j0 + 20 * math.isqrt(t0) + 64) + 1, dtype=np.int64)
    first = math.fsum(np.exp(_log_binomial_pmf_same(np.full_like(ks, t0), ks, half)).tolist()) if ks.size else 0.0
    if t.size == 1:
        return np.array([first])
    steps = np.diff(j)
    assert steps.min() >= 0 and steps.max() <= 1, "τ < 1 - 1e-9 keeps floor(τt) in steps of 0 or 1"
    t_now, j_now = t[:-1], j[:-1]
    grow = np.exp(_log_binomial_pmf_same(t_now, j_now - 1, half)) / 2
    drop = np.where(steps == 1, np.exp(_log_binomial_pmf_same(t_now + 1, j_now, half)), 0.0)
    tails: np.ndarray = np.maximum(first + np.concatenate(([0.0], np.cumsum(grow - drop))), 0.0)
    return tails


def _window(n: int, q: float) -> tuple[int, int, float]:
    """Counts [low, high] of Bin(n, q) to sum over, and a Chernoff bound on the mass outside
    (P(C <= a) <= exp(-n KL(a/n || q)) below the mean, likewise above), at most about TAIL."""
    if n == 0:
        return 0, 0, 0.0
    mean, sd = n * q, math.sqrt(n * q * (1 - q))
    stride = max(1, math.ceil(sd))
    low = max(0, math.floor(mean - 12 * sd))
    while low > 0 and _chernoff(n, q, low - 1) > TAIL:
        low = max(0, low - stride)
    high = min(n, math.ceil(mean + 12 * sd))
    while high < n and _chernoff(n, q, high + 1) > TAIL:
        high = min(n, high + stride)
    outside = (_chernoff(n, q, low - 1) if low > 0 else 0.0) + (_chernoff(n, q, high + 1) if high < n else 0.0)
    return low, high, outside


def _chernoff(n: int, q: float, a: int) -> float:
    """exp(-n KL(a/n || q)): bounds P(C <= a) for a <= nq and P(C >= a) for a >= nq."""
    x = a / n
    kl = (x * math.log(x / q) if x > 0 else 0.0) + ((1 - x) * math.log((1 - x) / (1 - q)) if x < 1 else 0.0)
    return math.exp(-n * kl)


def _log_binomial_pmf(n: int, k: np.ndarray, log_q: float, log_1q: float) -> np.ndarray:
    """log P(Bin(n, q) = k), elementwise over k."""
    logs: np.ndarray = _log_factorial(n) - _log_factorial(k) - _log_factorial(n - k) + k * log_q + (n - k) * log_1q
    return logs


def _log_binomial_pmf_same(n: np.ndarray, k: np.ndarray, log_half: float) -> np.ndarray:
    """log P(Bin(n, 1/2) = k), elementwise over n and k (-inf where k is outside 0..n)."""
    import numpy as np

    inside = (k >= 0) & (k <= n)
    kk, nn = np.where(inside, k, 0), np.where(inside, n, 0)
    logs: np.ndarray = np.where(inside, _log_factorial(nn) - _log_factorial(kk) - _log_factorial(nn - kk) + nn * log_half,
                                -np.inf)
    return logs


_SMALL = 16
_SMALL_LOG_FACTORIALS = [math.lgamma(k + 1) for k in range(_SMALL)]


def _log_factorial(count: int | np.ndarray) -> np.ndarray:
    """ln k!, elementwise: exact below 16, else Stirling's series to k^-7 (error below 1e-18)."""
    import numpy as np

    k = np.asarray(count, dtype=np.float64)
    big = np.maximum(k, _SMALL)
    inverse = 1 / big
    inverse2 = inverse * inverse
    series = inverse * (1 / 12 - inverse2 * (1 / 360 - inverse2 * (1 / 1260 - inverse2 / 1680)))
    stirling = big * np.log(big) - big + 0.5 * np.log(2 * math.pi * big) + series
    small = np.take(_SMALL_LOG_FACTORIALS, np.clip(k, 0, _SMALL - 1).astype(np.int64))
    exact: np.ndarray = np.where(k < _SMALL, small, stirling)
    return exact
