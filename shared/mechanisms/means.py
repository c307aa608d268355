r"""The mechanisms that estimate a mean: ``duchi``, ``pm``, ``hm`` and ``laplace``.

A ``numeric`` attribute has a ``range`` :math:`[lo, hi]`; the device clips its true value
:math:`x` to it and maps it to :math:`t = 2(x - lo)/(hi - lo) - 1 \in [-1, 1]`. Each mechanism
reports one number whose expectation is :math:`t` (an affine map of it, for ``duchi``), so the
mean of the reports estimates the mean of :math:`t`, and the same map back gives the mean of
:math:`x`. With :math:`C = (e^\varepsilon + 1)/(e^\varepsilon - 1)` and
:math:`z = e^{\varepsilon/2}`:

- ``duchi`` (Duchi, Jordan, Wainwright, *Minimax optimal procedures for locally private
  estimation*, JASA 2018; Microsoft's 1BitMean, Ding, Kulkarni, Yekhanin, NeurIPS 2017): a bit,
  1 with probability :math:`\frac12 + \frac{t(e^\varepsilon - 1)}{2(e^\varepsilon + 1)}`. The bit
  is binary randomised response on a share :math:`\theta = (t + 1)/2`, so the estimator and its
  Wilson interval are the shares' (:mod:`..estimators`), mapped to the range. Per-report variance
  of :math:`C(2b - 1)`: :math:`C^2 - t^2`.
- ``pm`` (Piecewise Mechanism; Wang, Xiao, Yang, Zhao, Hu, Li, Zhang, Cai, Yu, *Collecting and
  Analyzing Multidimensional Data with Local Differential Privacy*, ICDE 2019, Algorithm 2):
  with :math:`C_{pm} = (z + 1)/(z - 1)`, :math:`l = \frac{C_{pm} + 1}2 t - \frac{C_{pm} - 1}2`,
  :math:`r = l + C_{pm} - 1`: uniform on :math:`[l, r]` with probability :math:`z/(z + 1)`, else
  uniform on :math:`[-C_{pm}, l) \cup (r, C_{pm}]`. Variance (ibid., Lemma 1):
  :math:`\frac{t^2}{z - 1} + \frac{z + 3}{3(z - 1)^2}`.
- ``hm`` (Hybrid Mechanism, ibid., Algorithm 3): ``pm`` with probability
  :math:`\alpha = 1 - e^{-\varepsilon/2}` when :math:`\varepsilon > \varepsilon^* \approx 0.61`
  (else :math:`\alpha = 0`), otherwise ``duchi``'s bit written as :math:`\pm C`. Variance
  :math:`\alpha(\mathrm{Var}_{pm}(t) + t^2) + (1 - \alpha)C^2 - t^2`, the same for every
  :math:`t` when :math:`\alpha > 0` (ibid., Lemma 4).
- ``laplace`` (the local Laplace mechanism; Dwork, McSherry, Nissim, Smith 2006):
  :math:`t + \mathrm{Lap}(2/\varepsilon)` (sensitivity 2 over :math:`[-1, 1]`). Variance
  :math:`8/\varepsilon^2`.

Floating-point safety. A continuous sample written as a double leaks its input through its low
bits (Mironov, *On significance of the least significant bits for differential privacy*, CCS
2012). So ``pm``, ``hm``'s ``pm`` part and ``laplace`` round their output to the fixed grid
:data:`GRID` (:math:`2^{-20}`) with *randomised* rounding (up with probability the fractional
part): every output is an exact multiple of the grid, the same set whatever the input, the
expectation is unchanged (still unbiased), and the variance grows by at most
:math:`\text{GRID}^2/4`, which the variances below include. Uniforms are 53-bit integers
(:func:`.randomness.uniform53`), so probabilities are exact to :math:`2^{-53}` as for every coin
here; the Laplace tail is cut where a 53-bit uniform ends (:math:`|noise| \le 53 \ln 2 \cdot b`).

The counters keep ``n``, :math:`\Sigma` and :math:`\Sigma^2` of the wire values (``duchi``: the
number of 1 bits). For ``pm``, ``hm`` and ``laplace`` the interval is the normal interval
:math:`\bar y \pm z_{conf}\, s/\sqrt n` with :math:`s^2` the larger of the sample variance and the
mechanism's variance at the estimate (never narrower than theory), mapped to the range and
clipped to it; the point estimate is reported unclipped.

``(p, q)`` of a mean mechanism are the probabilities of its most telling event (a report at or
above 1, for ``duchi`` the bit 1) when the true value is the top of the range and when it is the
bottom: :math:`p/q = e^\varepsilon`, the bound attained. The privacy panel, the posterior bound
and the empirical-ε tests use them.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..checks import TOLERANCE
from ..estimators import Estimate, estimate, z_value
from .base import MEAN, UNIT, Mechanism, OneBitColumns, Span, Target, WireError, check_epsilon, span_of
from .randomness import SCALE, RandomSource, bernoulli, uniform53
from .shares import hit_probability

if TYPE_CHECKING:
    import numpy as np

# Outputs are rounded (randomly, without bias) to multiples of this: see the module docstring.
GRID = 2.0 ** -20
ROUNDING_VARIANCE = GRID * GRID / 4  # the most randomised rounding adds to a report's variance
# The largest exponential variate a 53-bit uniform gives: -ln(2^-53).
MAX_EXPONENTIAL = 53 * math.log(2)
# Slices of the Laplace privacy profile's middle region (its privacy loss varies continuously there).
_PROFILE_SLICES = 512
# HM uses PM above this ε (Wang et al. 2019, Eq. 6): the root at which α = 1 - e^{-ε/2} starts to pay.
EPSILON_STAR = math.log((-5 + 2 * (6353 - 405 * math.sqrt(241)) ** (1 / 3)
                         + 2 * (6353 + 405 * math.sqrt(241)) ** (1 / 3)) / 27)
SUM, SUM_SQUARES = "sum", "sumsq"
# The parameters the mean mechanisms show in a derived schema (``shown_parameters``), in words.
PARAMETERS = {
    "C": "(e^ε + 1)/(e^ε − 1): duchi's bit 1 is worth +C and 0 −C on the [−1, 1] scale (hm's ±C)",
    "z": "e^(ε/2): the piecewise mechanism reports from the band around its value with probability z/(z + 1)",
    "C_pm": "(z + 1)/(z − 1): the piecewise mechanism's outputs lie in [−C_pm, C_pm]",
    "alpha": "1 − e^(−ε/2) above ε ≈ 0.61, else 0: the probability that hm uses the piecewise mechanism",
    "scale": "2/ε: the Laplace noise's scale on the [−1, 1] scale",
    "g": "min(65536, floor(e^ε + 1/2) + 1): the number of values optimal local hashing hashes a string into",
}


def unit(attribute: Target, x: float) -> float:
    """``x`` clipped to the attribute's range and mapped to [-1, 1]."""
    lo, hi = span_of(attribute)
    x = min(max(x, lo), hi)
    return min(1.0, max(-1.0, 2 * (float(x) - lo) / (hi - lo) - 1))


def to_units(attribute: Target, t: float) -> float:
    """The value of the range that ``t`` in [-1, 1] stands for (``t`` outside maps outside)."""
    lo, hi = span_of(attribute)
    return lo + (t + 1) * (hi - lo) / 2


def _at(t: float, span: Span) -> str:
    """What ``t`` on the wire's [-1, 1] scale stands for in ``span``'s units, for people."""
    lo, hi = span
    return f"{lo + (t + 1) * (hi - lo) / 2:.3g}"


def _width(w: float, span: Span) -> str:
    """A width ``w`` on the [-1, 1] scale in ``span``'s units, for people."""
    return f"{w * (span[1] - span[0]) / 2:.3g}"


def _uniform(source: RandomSource) -> float:
    """A uniform float in [0, 1): a 53-bit integer over 2^53 (exact)."""
    return uniform53(source) / SCALE


def _exponential(source: RandomSource) -> float:
    """An Exp(1) variate by inversion of a uniform in (0, 1]: at most :data:`MAX_EXPONENTIAL`."""
    return -math.log((uniform53(source) + 1) / SCALE)


def snap(y: float, source: RandomSource) -> float:
    """``y`` rounded to a multiple of :data:`GRID`, up with probability its fractional part (so the
    expectation is ``y``). The scaling by a power of two and the subtraction are exact."""
    scaled = y / GRID
    below = math.floor(scaled)
    return (below + bernoulli(scaled - below, source)) * GRID


def _pm_constants(epsilon: float) -> tuple[float, float]:
    """``(z, C_pm)`` of the Piecewise Mechanism at ``epsilon``."""
    z = math.exp(epsilon / 2)
    return z, (z + 1) / (z - 1)


def _duchi_c(epsilon: float) -> float:
    """``C`` = (e^ε + 1)/(e^ε − 1): ``duchi``'s output ±1 scaled to be unbiased, and ``hm``'s ±C."""
    e = math.exp(epsilon)
    return (e + 1) / (e - 1)


def _hm_alpha(epsilon: float) -> float:
    """``alpha``: the probability that ``hm`` uses ``pm`` (0 up to :data:`EPSILON_STAR`)."""
    return 1 - math.exp(-epsilon / 2) if epsilon > EPSILON_STAR else 0.0


def _laplace_scale(epsilon: float) -> float:
    """``scale`` = 2/ε: the Laplace noise's scale on [-1, 1] (sensitivity 2)."""
    return 2 / epsilon


def pm_variance(epsilon: float, t: float) -> float:
    """The Piecewise Mechanism's variance at ``t`` (Wang et al. 2019, Lemma 1), rounding included."""
    z, _ = _pm_constants(epsilon)
    return t * t / (z - 1) + (z + 3) / (3 * (z - 1) ** 2) + ROUNDING_VARIANCE


def _pm_sample(t: float, epsilon: float, source: RandomSource) -> float:
    """One Piecewise Mechanism output for ``t`` (unrounded): two coins' worth of bytes."""
    z, c = _pm_constants(epsilon)
    left = (c + 1) / 2 * t - (c - 1) / 2
    right = left + c - 1
    inside = bernoulli(z / (z + 1), source)
    u = _uniform(source)
    if inside:
        y = left + (c - 1) * u
    else:
        s = u * (c + 1)  # a point of the two outer pieces laid end to end (lengths left + c, c - right)
        y = -c + s if s < left + c else right + (s - (left + c))
    return min(c, max(-c, y))


@lru_cache(maxsize=64)
def _pm_regions(epsilon: float) -> tuple[float, float, float]:
    """Masses of PM's output regions [1, C], [-C, -1] and (-1, 1) when t = 1 (reverse the first two
    for t = -1): the high band, the far band, the middle (low density under both)."""
    z, _ = _pm_constants(epsilon)
    return z / (z + 1), 1 / (z * (z + 1)), (z - 1) / (z * (z + 1))


class MeanMechanism(Mechanism):
    """What the mean mechanisms share: the unit map, the wire check, Σ and Σ², the estimator."""

    estimand = MEAN
    wire_schema = {"type": "number", "description": "the randomised value, on the [-1, 1] scale"}
    unbiased_number = True  # its report is an unbiased number of t (DESIGN.md, "Breakdowns")

    def counter_keys(self, attribute: Target) -> tuple[str, ...]:
        return (SUM, SUM_SQUARES)

    @abstractmethod
    def bound(self, epsilon: float) -> float:
        """The largest absolute wire value the device encoder can produce at ``epsilon``."""

    @abstractmethod
    def variance_at(self, epsilon: float, t: float) -> float:
        """One report's variance on the [-1, 1] scale when the true value is ``t``."""

    @abstractmethod
    def randomise(self, t: float, epsilon: float, source: RandomSource) -> Any:
        """The wire value for ``t`` in [-1, 1]."""

    def worst_variance(self, *, epsilon: float, d: int) -> float:
        # Every variance here is a quadratic in t² (monotone in |t|): the worst is at 0 or 1.
        return max(self.variance_at(epsilon, 0.0), self.variance_at(epsilon, 1.0))

    def report_variance(self, attribute: Target) -> float:
        r"""The worst per-report variance in the attribute's units: on [-1, 1] times
        :math:`((hi - lo)/2)^2`."""
        lo, hi = span_of(attribute)
        return self.worst_variance(epsilon=attribute.epsilon, d=2) * ((hi - lo) / 2) ** 2

    def encode(self, attribute: Target, truth: Any, source: RandomSource,
               permanent: RandomSource | None = None) -> Any:
        return self.randomise(unit(attribute, truth), attribute.epsilon, source)

    def wire_bytes(self, attribute: Target) -> int:
        return len("-2.2250738585072014e-308")  # the longest JSON text of a double

    def accepted(self, epsilon: float) -> float:
        """The largest absolute wire value :meth:`check` takes: :meth:`bound`, and another client's
        rounding past it."""
        return self.bound(epsilon) * (1 + TOLERANCE)

    def check(self, attribute: Target, reported: Any) -> None:
        if (isinstance(reported, bool) or not isinstance(reported, (int, float))
                or not abs(reported) <= self.accepted(attribute.epsilon)):
            limit = self.bound(attribute.epsilon)
            raise WireError(f"must be a number from {-limit:.17g} to {limit:.17g} ({self.title})")

    def statistics(self, attribute: Target, reported: Any) -> Iterable[tuple[str, int | float]]:
        y = float(reported)
        return ((SUM, y), (SUM_SQUARES, y * y)) if y else ()

    def mean_sums(self, attribute: Target, n: int, amounts: Mapping[str, int | float]) -> tuple[float, float]:
        """The wire values' Σ and Σ² themselves: each wire value is its report's unbiased :math:`v`."""
        return float(amounts.get(SUM, 0)), float(amounts.get(SUM_SQUARES, 0))

    def to_estimate(self, attribute: Target, y: float) -> float:
        return to_units(attribute, y)

    def estimate_span(self, attribute: Target) -> Span:
        lo, hi = span_of(attribute)
        return float(lo), float(hi)

    def estimates(self, attribute: Target, n: int, amounts: Mapping[str, int | float],
                  confidence: float) -> list[tuple[str, Estimate]]:
        total, squares = self.mean_sums(attribute, n, amounts)
        mean = total / n
        theory = self.variance_at(attribute.epsilon, min(1.0, max(-1.0, mean)))
        sample = max(0.0, (squares - total * mean) / (n - 1)) if n > 1 else 0.0
        half = z_value(confidence) * math.sqrt(max(sample, theory) / n)
        return [(attribute.keys[0], _in_units(attribute, mean, mean - half, mean + half, n))]

    column_format = "d"

    def columns(self, attribute: Target) -> tuple[str, ...]:
        return ("value",)

    def column_values(self, attribute: Target, reported: Any) -> list[int | float]:
        return [float(reported)]

    def valid_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """Numbers within :meth:`check`'s bound (NaN is not)."""
        import numpy as np

        valid: np.ndarray = np.abs(columns["value"]) <= self.accepted(attribute.epsilon)
        return valid

    def wire_array(self, attribute: Target, reported: Sequence[Any]) -> np.ndarray:
        import numpy as np

        return np.array(reported, dtype=float)

    def wire_of_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        return columns["value"]

    def report_amounts(self, attribute: Target, wire: np.ndarray) -> np.ndarray:
        """Two columns: the wire value and its square (Σ and Σ²'s amounts)."""
        import numpy as np

        return np.column_stack([wire, np.square(wire)])

    def respond_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.randomise_bulk(_units_bulk(attribute, truth), attribute.epsilon, rng)

    def encode_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        amounts: np.ndarray = self.report_amounts(attribute, self.respond_bulk(attribute, truth, rng)).sum(axis=0)
        return amounts

    @abstractmethod
    def randomise_bulk(self, t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
        """Many devices' wire values for ``t`` (any shape) at once: numpy, unrounded, simulation only."""


def _in_units(attribute: Target, mean: float, low: float, high: float, n: int, hits: int = 0) -> Estimate:
    """An estimate on the [-1, 1] scale, in the attribute's units, its interval clipped to the range."""
    lo, hi = span_of(attribute)

    def clip(x: float) -> float:
        return min(hi, max(lo, x))

    value = to_units(attribute, mean)
    return Estimate(value, clip(value), clip(to_units(attribute, low)), clip(to_units(attribute, high)), n, hits)


def _units_bulk(attribute: Target, truth: np.ndarray) -> np.ndarray:
    import numpy as np

    lo, hi = span_of(attribute)
    t: np.ndarray = np.clip(2 * (np.clip(truth.astype(float), lo, hi) - lo) / (hi - lo) - 1, -1.0, 1.0)
    return t


def _pm_bulk(t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    import numpy as np

    z, c = _pm_constants(epsilon)
    left = (c + 1) / 2 * t - (c - 1) / 2
    right = left + c - 1
    inside = rng.random(t.shape) < z / (z + 1)
    u = rng.random(t.shape)
    s = u * (c + 1)
    outside = np.where(s < left + c, -c + s, right + (s - (left + c)))
    return np.clip(np.where(inside, left + (c - 1) * u, outside), -c, c)


class Duchi(OneBitColumns, MeanMechanism):
    """Duchi et al.'s one-bit mechanism: bit 1 with probability :math:`\\frac12 + \\frac{t}{2C}`.
    Wire value: JSON integer 0 or 1. One coin per report. The estimate is the shares' Wilson
    estimate of :math:`\\theta = (t + 1)/2`, mapped to the range."""

    name = "duchi"
    title = "Duchi et al.'s one-bit mechanism"
    wire_schema = {"type": "integer", "enum": [0, 1], "description": "one bit (Duchi et al.)"}

    def parameters(self, *, epsilon: float, d: int = 2) -> tuple[float, float]:
        check_epsilon(epsilon)
        e = math.exp(epsilon)
        return e / (1 + e), 1 / (1 + e)

    def counter_keys(self, attribute: Target) -> tuple[str, ...]:
        return (SUM,)

    def shown_parameters(self, *, epsilon: float, d: int = 2) -> dict[str, float]:
        return {"C": _duchi_c(epsilon)}

    def bound(self, epsilon: float) -> float:
        return 1.0

    def variance_at(self, epsilon: float, t: float) -> float:
        return _duchi_c(epsilon) ** 2 - t * t

    def randomise(self, t: float, epsilon: float, source: RandomSource) -> int:
        p, q = self.parameters(epsilon=epsilon)
        return int(bernoulli(hit_probability(p, q, (t + 1) / 2), source))

    def wire_bytes(self, attribute: Target) -> int:
        return 1

    def check(self, attribute: Target, reported: Any) -> None:
        if type(reported) is not int or reported not in (0, 1):
            raise WireError("must be the JSON integer 0 or 1 (one bit)")

    def statistics(self, attribute: Target, reported: Any) -> Iterable[tuple[str, int]]:
        return ((SUM, 1),) if reported else ()

    def wire_array(self, attribute: Target, reported: Sequence[Any]) -> np.ndarray:
        import numpy as np

        return np.array(reported, dtype=np.int8)

    def wire_of_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        import numpy as np

        return columns["bit"].astype(np.int8)

    def report_amounts(self, attribute: Target, wire: np.ndarray) -> np.ndarray:
        """One column, the bit (Σ's amount: the counters keep the number of 1 bits)."""
        return wire.reshape(-1, 1)

    def respond_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        bits: np.ndarray = self.randomise_bulk(_units_bulk(attribute, truth), attribute.epsilon, rng).astype(np.int8)
        return bits

    def mean_sums(self, attribute: Target, n: int, amounts: Mapping[str, int | float]) -> tuple[float, float]:
        r"""From ``H`` 1 bits among ``n``: :math:`v = C(2b - 1)` gives :math:`\Sigma v = C(2H - n)`
        and :math:`\Sigma v^2 = C^2 n` (DESIGN.md, "Breakdowns")."""
        c = _duchi_c(attribute.epsilon)
        return c * (2 * int(amounts.get(SUM, 0)) - n), c * c * n

    def estimates(self, attribute: Target, n: int, amounts: Mapping[str, int | float],
                  confidence: float) -> list[tuple[str, Estimate]]:
        hits = int(amounts.get(SUM, 0))
        share = estimate(hits, n, attribute.p, attribute.q, confidence)
        # θ in [0, 1] is t = 2θ - 1: the clipped share and interval map into the range.
        return [(attribute.keys[0], _in_units(attribute, 2 * share.estimate - 1, 2 * share.ci_low - 1,
                                              2 * share.ci_high - 1, n, hits))]

    def encode_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        return np.array([np.count_nonzero(self.respond_bulk(attribute, truth, rng))])

    def randomise_bulk(self, t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
        p, q = self.parameters(epsilon=epsilon)
        return (rng.random(t.shape) < hit_probability(p, q, (t + 1) / 2)).astype(float)

    def worst_pair(self, p: float, q: float) -> list[tuple[float, float]]:
        return [(p, q), (q, p)]

    def describe(self, p: float, q: float, d: int, percent: Callable[[float], str], span: Span = UNIT) -> str:
        return (f"A device sends one bit: 1 with probability {percent(q)} when its value is the bottom of "
                f"the range, rising in a straight line to {percent(p)} at the top.")


class PiecewiseMechanism(MeanMechanism):
    """Wang et al.'s Piecewise Mechanism. Wire value: a JSON number in :math:`[-C_{pm}, C_{pm}]`,
    a multiple of :data:`GRID`. Coins: the band (8 bytes), the uniform (8), the rounding (8)."""

    name = "pm"
    title = "the piecewise mechanism"

    def parameters(self, *, epsilon: float, d: int = 2) -> tuple[float, float]:
        check_epsilon(epsilon)
        high, far, _ = _pm_regions(epsilon)
        return high, far

    def shown_parameters(self, *, epsilon: float, d: int = 2) -> dict[str, float]:
        z, c_pm = _pm_constants(epsilon)
        return {"z": z, "C_pm": c_pm}

    def bound(self, epsilon: float) -> float:
        return _pm_constants(epsilon)[1] + GRID

    def variance_at(self, epsilon: float, t: float) -> float:
        return pm_variance(epsilon, t)

    def randomise(self, t: float, epsilon: float, source: RandomSource) -> float:
        return snap(_pm_sample(t, epsilon, source), source)

    def randomise_bulk(self, t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
        return _pm_bulk(t, epsilon, rng)

    def worst_pair(self, p: float, q: float) -> list[tuple[float, float]]:
        # The top and the bottom of the range: the band [1, C] (p vs q), [-C, -1] (q vs p), and the
        # middle (-1, 1), at the low density under both.
        high, far, middle = _pm_regions(math.log(p / q))
        return [(high, far), (far, high), (middle, middle)]

    def describe(self, p: float, q: float, d: int, percent: Callable[[float], str], span: Span = UNIT) -> str:
        z, c = _pm_constants(math.log(p / q))
        return (f"A device sends a number that stands for {_at(-c, span)} to {_at(c, span)} in the attribute's units "
                f"(beyond its range): with probability {percent(z / (z + 1))} drawn from a band "
                f"{_width(c - 1, span)} wide around its value, otherwise from outside that band.")


class HybridMechanism(MeanMechanism):
    """Wang et al.'s Hybrid Mechanism: ``pm`` with probability α, else ``duchi``'s bit as ±C.
    Wire value: a JSON number (a multiple of :data:`GRID`, or exactly ±C). Coins: the choice (8
    bytes), then ``pm``'s or ``duchi``'s."""

    name = "hm"
    title = "the hybrid mechanism"

    def parameters(self, *, epsilon: float, d: int = 2) -> tuple[float, float]:
        check_epsilon(epsilon)
        alpha = _hm_alpha(epsilon)
        e = math.exp(epsilon)
        high, far, _ = _pm_regions(epsilon)
        return alpha * high + (1 - alpha) * e / (1 + e), alpha * far + (1 - alpha) / (1 + e)

    def shown_parameters(self, *, epsilon: float, d: int = 2) -> dict[str, float]:
        return {**PM.shown_parameters(epsilon=epsilon), **DUCHI.shown_parameters(epsilon=epsilon),
                "alpha": _hm_alpha(epsilon)}

    def bound(self, epsilon: float) -> float:
        return max(_pm_constants(epsilon)[1] + GRID, _duchi_c(epsilon))

    def variance_at(self, epsilon: float, t: float) -> float:
        alpha = _hm_alpha(epsilon)
        pm_part = pm_variance(epsilon, t) + t * t if alpha else 0.0
        return alpha * pm_part + (1 - alpha) * _duchi_c(epsilon) ** 2 - t * t

    def randomise(self, t: float, epsilon: float, source: RandomSource) -> float:
        if bernoulli(_hm_alpha(epsilon), source):
            return snap(_pm_sample(t, epsilon, source), source)
        c = _duchi_c(epsilon)
        return c if DUCHI.randomise(t, epsilon, source) else -c

    def randomise_bulk(self, t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        c = _duchi_c(epsilon)
        duchi = np.where(DUCHI.randomise_bulk(t, epsilon, rng) > 0, c, -c)
        return np.where(rng.random(t.shape) < _hm_alpha(epsilon), _pm_bulk(t, epsilon, rng), duchi)

    def worst_pair(self, p: float, q: float) -> list[tuple[float, float]]:
        epsilon = math.log(p / q)
        alpha = _hm_alpha(epsilon)
        e = math.exp(epsilon)
        pm = [(alpha * a, alpha * b) for a, b in PM.worst_pair(*_pm_regions(epsilon)[:2])]
        bit = [((1 - alpha) * a, (1 - alpha) * b) for a, b in ((e / (1 + e), 1 / (1 + e)), (1 / (1 + e), e / (1 + e)))]
        return pm + bit

    def describe(self, p: float, q: float, d: int, percent: Callable[[float], str], span: Span = UNIT) -> str:
        epsilon = math.log(p / q)
        alpha, c = _hm_alpha(epsilon), _duchi_c(epsilon)
        return (f"With probability {percent(alpha)} a device sends a number near its value (the piecewise "
                f"mechanism); otherwise one of two numbers that stand for {_at(c, span)} and {_at(-c, span)} in the "
                f"attribute's units, the larger the more likely the higher its value.")


class LocalLaplace(MeanMechanism):
    """The local Laplace mechanism: :math:`t + \\mathrm{Lap}(2/\\varepsilon)`, rounded to
    :data:`GRID`. Wire value: a finite JSON number. Coins: the sign (8 bytes), the exponential (8),
    the rounding (8)."""

    name = "laplace"
    title = "the local Laplace mechanism"

    def parameters(self, *, epsilon: float, d: int = 2) -> tuple[float, float]:
        check_epsilon(epsilon)
        return 0.5, math.exp(-epsilon) / 2

    def shown_parameters(self, *, epsilon: float, d: int = 2) -> dict[str, float]:
        return {"scale": _laplace_scale(epsilon)}

    def bound(self, epsilon: float) -> float:
        return 1 + _laplace_scale(epsilon) * MAX_EXPONENTIAL + GRID

    def variance_at(self, epsilon: float, t: float) -> float:
        return 8 / epsilon ** 2 + ROUNDING_VARIANCE

    def randomise(self, t: float, epsilon: float, source: RandomSource) -> float:
        negative = bernoulli(0.5, source)
        noise = _laplace_scale(epsilon) * _exponential(source)
        return snap(t - noise if negative else t + noise, source)

    def randomise_bulk(self, t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
        return t + rng.laplace(0.0, _laplace_scale(epsilon), t.shape)

    def worst_pair(self, p: float, q: float) -> list[tuple[float, float]]:
        # t = 1 against t = -1: above 1 and below -1 the loss is ±ε; in between it varies, so the
        # middle is cut into slices with their exact masses (a lower bound of δ, close at 512).
        epsilon = math.log(p / q)
        b = _laplace_scale(epsilon)
        cuts = [-1 + 2 * i / _PROFILE_SLICES for i in range(_PROFILE_SLICES + 1)]
        pairs = [(p, q), (q, p)]
        for a, c in zip(cuts, cuts[1:]):
            pairs.append((0.5 * (math.exp((c - 1) / b) - math.exp((a - 1) / b)),
                          0.5 * (math.exp(-(a + 1) / b) - math.exp(-(c + 1) / b))))
        return pairs

    def describe(self, p: float, q: float, d: int, percent: Callable[[float], str], span: Span = UNIT) -> str:
        epsilon = math.log(p / q)
        return (f"A device sends its value plus Laplace noise of scale {_width(_laplace_scale(epsilon), span)} in the "
                f"attribute's units (standard deviation {_width(math.sqrt(8) / epsilon, span)}).")


DUCHI = Duchi()
PM = PiecewiseMechanism()
HM = HybridMechanism()
LAPLACE = LocalLaplace()
