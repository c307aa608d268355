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
independent clones is a post-processing); the tails :math:`S_t(j_t)` are marched from the largest
:math:`t` down (:math:`S_{t+1}(j) = S_t(j) + \frac12 B_t(j-1)`), the direction in which they
grow; the result is raised by :data:`SLACK` against rounding. Below about
:math:`m = e^{\varepsilon_0}` the crowd holds no clone and the bound is barely below
:math:`\varepsilon_0`. Above :data:`MAX_EPS0`, :math:`\varepsilon_0` itself is returned (always
valid; a crowd of :math:`10^{12}` holds a clone with probability below :math:`10^{-5}` there).

numpy is imported where it is used: a device that imports ``shared`` never needs it.
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is for the aggregator only
    import numpy as np

TAIL = 1e-30  # the clones' mass left outside the summed window (Chernoff), counted as h_1: δ >> 1e-30
SLACK = 1e-6  # relative margin on the computed δ(ε) for rounding (against scipy: errors below 1e-9)
MAX_EPS0 = 40.0  # above: 2/(e^ε0 + 1) < 1e-17, too few clones to count; ε0 is returned
PRECISION = 1e-9  # the bisection stops when ε is known to this relative width


def shuffle_epsilon(m: int, eps0: float, delta: float) -> float:
    """min(ε0, ε): one of ``m`` shuffled ``eps0``-LDP reports is (ε, ``delta``)-DP against their
    receiver, for every ``eps0``-LDP randomiser (the module docstring gives the bound and its
    sources). Cached per (m, ε0, δ); ``ValueError`` naming a bad argument."""
    _check(m, eps0, delta)
    return _shuffle_epsilon(int(m), float(eps0), float(delta))


def shuffle_delta(m: int, eps0: float, epsilon: float) -> float:
    """An upper bound on the δ at which one of ``m`` shuffled ``eps0``-LDP reports is
    (``epsilon``, δ)-DP: δ(ε) of the module docstring, raised by :data:`SLACK`."""
    _check(m, eps0, 0.5)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon < math.inf:
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    return _delta(int(m), float(eps0), float(epsilon))


def _check(m: Any, eps0: Any, delta: Any) -> None:
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1:
        raise ValueError(f"m (the crowd's size) must be an integer >= 1, got {m!r}")
    if isinstance(eps0, bool) or not isinstance(eps0, (int, float)) or not (0 < eps0 < math.inf):
        raise ValueError(f"eps0 (the report's local epsilon) must be a finite number > 0, got {eps0!r}")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0 < delta < 1):
        raise ValueError(f"delta must be a number strictly between 0 and 1, got {delta!r}")


@lru_cache(maxsize=4096)  # the estimates refresh asks again for every window of every schema
def _shuffle_epsilon(m: int, eps0: float, delta: float) -> float:
    """The least ε (to :data:`PRECISION`, from above) with δ(ε) <= delta: regula falsi on
    log δ(ε) - log delta, Illinois variant (the end that stays has its value halved), keeping a
    bracket low (δ above) < high (δ at most delta); about a dozen evaluations, not thirty halvings."""
    if eps0 > MAX_EPS0:
        return eps0

    def excess(epsilon: float) -> float:  # -inf where δ(ε) rounds to 0
        found = _delta(m, eps0, epsilon)
        return math.log(found / delta) if found > 0 else -math.inf

    low, high = 0.0, eps0  # δ(ε0) = 0: every report is ε0-DP against anyone
    at_low, at_high = excess(low), -math.inf
    if at_low <= 0:
        return 0.0
    kept = 0  # which end the last step moved: -1 low, +1 high
    for _ in range(200):  # ends long before; high is valid whenever it stops
        if high - low <= PRECISION * high:
            break
        middle = (low + high) / 2
        if math.isfinite(at_high):
            secant = high - at_high * (high - low) / (at_high - at_low)
            if low < secant < high:
                middle = secant
        value = excess(middle)
        if value <= 0:
            high, at_high = middle, value
            if kept == 1:
                at_low /= 2
            kept = 1
        else:
            low, at_low = middle, value
            if kept == -1:
                at_high /= 2
            kept = -1
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
    weights = _binomial_pmf(m - 1, c, clone)
    t = c + 1
    j = np.floor(tau * t).astype(np.int64) + 1
    tails = _marched_tails(t, j)
    before = _binomial_pmf(t - 1, j - 1, 0.5)  # B_{t-1}(j_t - 1)
    h = k_factor * (before / 4 - (tau - 0.5) * tails)
    h = np.clip(h, 0.0, single)
    total = math.fsum((weights * h).tolist()) + outside * single
    return min(single, total) * (1 + SLACK)


def _marched_tails(t: np.ndarray, j: np.ndarray) -> np.ndarray:
    """S_t(j_t) = P(Bin(t, 1/2) >= j_t) for consecutive t with j_{t+1} - j_t in {0, 1}: the last
    summed, then down the t by S_{t+1}(j) = S_t(j) + B_t(j-1)/2 and S_{t+1}(j+1) = S_{t+1}(j) - B_{t+1}(j).
    Downwards, since the tails grow as t falls (j_t/t >= 1/2): every partial sum is then about as
    large as the tail it ends at, so rounding stays relative even where the tails span 1e-30 to 1."""
    import numpy as np

    last_t, last_j = int(t[-1]), int(j[-1])
    # Past j + 40 sd (j >= t/2) the terms are below e^-800 of the largest: they round to 0.
    ks = np.arange(last_j, min(last_t, last_j + 20 * math.isqrt(last_t) + 64) + 1, dtype=np.int64)
    last = math.fsum(_binomial_pmf(last_t, ks, 0.5).tolist()) if ks.size else 0.0
    steps = np.diff(j)
    assert steps.size == 0 or (steps.min() >= 0 and steps.max() <= 1), "τ < 1 - 1e-9 keeps floor(τt) in steps of 0, 1"
    t_now, j_now = t[:-1], j[:-1]
    grow = _binomial_pmf(t_now, j_now - 1, 0.5) / 2
    drop = np.where(steps == 1, _binomial_pmf(t_now + 1, j_now, 0.5), 0.0)
    # S_t = S_last - (sum of the steps from t to the last), summed from the last step backwards.
    from_the_end = np.cumsum((grow - drop)[::-1])[::-1]
    tails: np.ndarray = np.maximum(last - np.concatenate((from_the_end, [0.0])), 0.0)
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


def _binomial_pmf(n: int | np.ndarray, k: np.ndarray, prob: float) -> np.ndarray:
    """P(Bin(n, prob) = k), elementwise (0 where k is outside 0..n), by Loader's saddle-point form
    (*Fast and Accurate Computation of Binomial Probabilities*, 2000): no difference of large
    log-factorials, so its relative error stays near 1e-14 at any n."""
    import numpy as np

    n, k = np.broadcast_arrays(np.asarray(n, dtype=np.float64), np.asarray(k, dtype=np.float64))
    inside = (k >= 0) & (k <= n)
    interior = inside & (k > 0) & (k < n)
    ki, ri = np.where(interior, k, 1.0), np.where(interior, n - k, 1.0)
    ni = ki + ri
    saddle = (_stirling_error(ni) - _stirling_error(ki) - _stirling_error(ri) - _deviance(ki, ni * prob)
              - _deviance(ri, ni * (1 - prob)) + 0.5 * np.log(ni / (2 * math.pi * ki * ri)))
    edge = np.where(k == 0, n * math.log1p(-prob), n * math.log(prob))  # (1 - prob)^n, prob^n
    mass: np.ndarray = np.where(inside, np.exp(np.where(interior, saddle, edge)), 0.0)
    return mass


_SMALL = 16
# ln x! - (x ln x - x + ln(2 pi x)/2) for x = 1..15 (0 unused: the edges are apart).
_SMALL_STIRLING_ERRORS = [0.0] + [math.lgamma(x + 1) - (x * math.log(x) - x + 0.5 * math.log(2 * math.pi * x))
                                  for x in range(1, _SMALL)]


def _stirling_error(x: np.ndarray) -> np.ndarray:
    """ln x! - (x ln x - x + ln(2 pi x)/2) for integers x >= 1: exact below 16, else Stirling's
    series to x^-7 (error below 1e-18)."""
    import numpy as np

    big = np.maximum(x, _SMALL)
    inverse2 = 1 / (big * big)
    series = (1 / 12 - inverse2 * (1 / 360 - inverse2 * (1 / 1260 - inverse2 / 1680))) / big
    small = np.take(_SMALL_STIRLING_ERRORS, np.clip(x, 0, _SMALL - 1).astype(np.int64))
    error: np.ndarray = np.where(x < _SMALL, small, series)
    return error


def _deviance(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """x ln(x/mean) + mean - x, without its cancellation where x is near mean (Loader's series in
    v = (x - mean)/(x + mean): (x - mean) v + 2x sum_j v^(2j+1)/(2j+1))."""
    import numpy as np

    v = (x - mean) / (x + mean)
    near = np.abs(v) < 0.1
    term, series = 2 * x * v, (x - mean) * v
    for j in range(1, 13):  # v^2 < 0.01: twelve terms reach 1e-24
        term = term * v * v
        series = series + term / (2 * j + 1)
    direct = x * np.log(np.where(near, 1.0, x / mean)) + mean - x
    deviance: np.ndarray = np.where(near, series, direct)
    return deviance
