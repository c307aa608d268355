r"""What a privacy budget means, in numbers the dashboard can show.

Everything here is a closed form of an attribute's mechanism and its ``(p, q)`` (see
:mod:`.mechanisms`); nothing depends on the data. References: C. Dimitrakakis, *Machine learning
in science and society*, ch. 3 ("Privacy": randomised response, posterior of an adversary,
local vs central model, the Laplace mechanism); Balle, Barthe & Gaboardi, *Privacy
amplification by subsampling*, NeurIPS 2018 (the privacy profile); Wang et al., USENIX
Security 2017 (the mechanisms and their variance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from . import mechanisms
from .estimators import DEFAULT_CONFIDENCE, z_value


def posterior_bound(epsilon: float, prior: float = 0.5) -> float:
    r"""The most an observer of one ε-DP report can believe about the true value.

    Bayes with the DP bound :math:`\pi(a|x) \le e^\varepsilon \pi(a|x')` (Dimitrakakis, §3.6,
    Eq. 3.6.2): :math:`P(x|a) \le \frac{\beta e^\varepsilon}{\beta e^\varepsilon + 1 - \beta}`
    for a prior :math:`\beta`; with :math:`\beta = 1/2`, :math:`\frac{e^\varepsilon}{1+e^\varepsilon}`.
    For binary RR that is exactly the keep probability ``p``: the bound is attained.
    """
    mechanisms.check_epsilon(epsilon)
    if not 0 <= prior <= 1:
        raise ValueError(f"prior must be in [0, 1], got {prior!r}")
    # e^-ε form avoids overflow at large ε.
    return prior / (prior + (1 - prior) * math.exp(-epsilon))


def hockey_stick(pairs: Sequence[tuple[float, float]], epsilon_prime: float) -> float:
    r""":math:`\sum_o [P(o) - e^{\varepsilon'} P'(o)]_+` over outputs ``o`` given as ``(P(o), P'(o))``.

    The hockey-stick divergence of two output distributions: the smallest δ for which the pair
    satisfies :math:`P(A) \le e^{\varepsilon'} P'(A) + \delta` for every set of outputs ``A``.
    """
    e = math.exp(epsilon_prime)
    return math.fsum(max(0.0, a - e * b) for a, b in pairs)


def worst_pair(mechanism: str, p: float, q: float) -> list[tuple[float, float]]:
    """The output distributions ``(P(o|x), P(o|x'))`` of the pair of inputs that leaks most, as
    the mechanism called ``mechanism`` gives them (:meth:`Mechanism.worst_pair`)."""
    return mechanisms.get(mechanism).worst_pair(p, q)


def privacy_profile(mechanism: str, p: float, q: float, epsilon_prime: float) -> float:
    r"""δ(ε'): the privacy profile of one report of an attribute, at ``epsilon_prime`` ≥ 0.

    :math:`\delta(\varepsilon') = \max_{x, x'} \sum_o [P(o|x) - e^{\varepsilon'} P(o|x')]_+`
    (Balle et al. 2018). The mechanism is (ε', δ(ε'))-DP for every ε'; δ(ε) = 0 at the
    mechanism's own ε and δ(0) is the total variation distance between the worst pair.
    """
    if not epsilon_prime >= 0:
        raise ValueError(f"epsilon_prime must be at least 0, got {epsilon_prime!r}")
    return hockey_stick(worst_pair(mechanism, p, q), epsilon_prime)


def profile_curve(mechanism: str, p: float, q: float, epsilon: float, points: int = 41) -> list[tuple[float, float]]:
    """``points`` samples ``(ε', δ(ε'))`` with ε' evenly from 0 to 1.25·``epsilon`` (δ is 0 past ε)."""
    mechanisms.check_epsilon(epsilon)
    if points < 2:
        raise ValueError(f"points must be at least 2, got {points}")
    top = 1.25 * epsilon
    return [(x, privacy_profile(mechanism, p, q, x)) for x in (top * i / (points - 1) for i in range(points))]


def window_budget(epsilon: float, windows: int) -> float:
    r"""Privacy spent by a device that reports in ``windows`` windows: at most :math:`W\varepsilon`.

    Sequential composition (Dimitrakakis, §3.6.1): ε-DP reports about the same person compose to
    (Σε)-DP. The client's ledger sends at most one report per schema per window, so W windows
    cost at most W·ε, whatever the device does in between.
    """
    mechanisms.check_epsilon(epsilon)
    if windows < 0:
        raise ValueError(f"windows must be at least 0, got {windows}")
    return windows * epsilon


@dataclass(frozen=True)
class LocalVsCentral:
    """Standard errors of one share, estimated from ``n`` reports, under the two trust models."""

    n: int
    local_se: float
    central_se: float
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def ratio(self) -> float:
        """How many times wider the local interval is (the same z multiplies both)."""
        return self.local_se / self.central_se

    @property
    def local_half_width(self) -> float:
        """Half the width of a normal interval at ``confidence``: z times the standard error."""
        return z_value(self.confidence) * self.local_se

    @property
    def central_half_width(self) -> float:
        return z_value(self.confidence) * self.central_se


def local_standard_error(p: float, q: float, n: int) -> float:
    r"""Standard error of the local estimate: :math:`\frac{\sqrt{q(1-q)}}{(p-q)\sqrt{n}}`.

    Wang et al.'s variance at θ → 0 (:func:`.mechanisms.variance`); it shrinks as :math:`1/\sqrt n`.
    """
    return math.sqrt(mechanisms.variance(p, q, n))


def central_standard_error(epsilon: float, n: int) -> float:
    r"""Standard error of a share if a trusted curator published the exact count plus Laplace noise.

    One device changes one value's count by at most 1, so Laplace(1/ε) noise on that count is
    ε-DP (Dimitrakakis, §3.7, Theorem 3.7.1); its standard deviation is :math:`\sqrt2/\varepsilon`,
    so the share's is :math:`\frac{\sqrt2}{\varepsilon n}`: it shrinks as 1/n, not :math:`1/\sqrt n`.
    (The curator's own sampling error is left out: both models share it. This is one value's
    count; publishing every category's count at once would need Laplace(2/ε), since a device
    that changes its answer moves two counts, doubling this standard error.)
    """
    mechanisms.check_epsilon(epsilon)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return math.sqrt(2) / (epsilon * n)


def mean_local_vs_central(variance: float, span: float, epsilon: float, n: int,
                          confidence: float = DEFAULT_CONFIDENCE) -> LocalVsCentral:
    r"""Both standard errors of a numeric attribute's mean at ``n`` reports: locally
    :math:`\sqrt{V/n}` with ``variance`` :math:`V` one report's worst (:meth:`Mechanism.report_variance`);
    centrally, a trusted curator adding Laplace noise to the sum of the raw values, whose
    sensitivity is the range's ``span`` (one device moves its value from end to end):
    :math:`\sqrt2\,	ext{span}/(arepsilon n)`."""
    mechanisms.check_epsilon(epsilon)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return LocalVsCentral(n, math.sqrt(variance / n), math.sqrt(2) * span / (epsilon * n), confidence)


def local_vs_central(p: float, q: float, epsilon: float, n: int,
                     confidence: float = DEFAULT_CONFIDENCE) -> LocalVsCentral:
    """Both standard errors of one attribute's share at ``n`` reports, with the same ``epsilon``,
    and the half-widths of intervals at ``confidence``."""
    return LocalVsCentral(n, local_standard_error(p, q, n), central_standard_error(epsilon, n), confidence)
