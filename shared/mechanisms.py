r"""The randomised-response mechanisms: binary RR, GRR and OUE.

Each mechanism is a randomised response whose output probabilities depend only on the device's
true value. For every estimate value :math:`j` a report contributes one Bernoulli *hit*:

- binary RR (``rr``): the report is ``true``;
- generalised RR (``grr``): the reported category is :math:`j`;
- optimised unary encoding (``oue``): bit :math:`j` of the reported vector is 1;

with probability :math:`p` when the true value is :math:`j` and :math:`q` otherwise, so
:math:`P(\text{hit}_j) = q + (p - q)\theta_j`. Parameters (Wang, Blocki, Li, Jha, *Locally
Differentially Private Protocols for Frequency Estimation*, USENIX Security 2017):

- ``rr``:  :math:`p = e^\varepsilon/(1+e^\varepsilon)`, :math:`q = 1/(1+e^\varepsilon)`
  (Warner 1965; the flip probability is :math:`q`).
- ``grr``: :math:`p = e^\varepsilon/(e^\varepsilon+d-1)`, :math:`q = 1/(e^\varepsilon+d-1)`.
- ``oue``: :math:`p = 1/2`, :math:`q = 1/(e^\varepsilon+1)`.

Each is :math:`\varepsilon`-LDP: for RR and GRR the ratio of output probabilities is at most
:math:`p/q = e^\varepsilon`; for OUE two inputs differ in two bits, giving
:math:`\frac{p(1-q)}{q(1-p)} = e^\varepsilon`.

The device encoders here draw from the operating system's CSPRNG (``os.urandom``, the source
of :mod:`secrets`): a predictable coin would undo randomised response. Bulk simulation lives in
:mod:`ldp_telemetry.shared.simulation` (numpy) and is never used on a device.
"""

from __future__ import annotations

import math
import os
import threading
from array import array
from typing import Iterator, Mapping

MECHANISMS = ("rr", "grr", "oue")

# A Bernoulli(p) draw compares 53 CSPRNG bits with p scaled to 2**53, so probabilities are exact
# to 2**-53 (a double's precision).
_BITS = 53
_SCALE = 1 << _BITS


def parameters(mechanism: str, epsilon: float, d: int = 2) -> tuple[float, float]:
    """``(p, q)`` of ``mechanism`` at ``epsilon`` for ``d`` categories (see the module docstring)."""
    check_epsilon(epsilon)
    e = math.exp(epsilon)
    if mechanism == "rr":
        return e / (1 + e), 1 / (1 + e)
    if mechanism == "grr":
        if d < 2:
            raise ValueError(f"grr needs at least 2 categories, got {d}")
        return e / (e + d - 1), 1 / (e + d - 1)
    if mechanism == "oue":
        return 0.5, 1 / (e + 1)
    raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")


def check_epsilon(epsilon: float) -> None:
    """``ValueError`` unless ``epsilon`` is a positive finite number."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")


def hit_probability(p: float, q: float, theta: float) -> float:
    r"""The chance that one report hits a value whose true share is ``theta``: :math:`q + (p-q)\theta`."""
    return q + (p - q) * theta


def choose(epsilon: float, d: int) -> str:
    r"""The categorical mechanism with the lower variance at ``epsilon`` for ``d`` categories.

    Wang et al. 2017: :math:`\mathrm{Var}^*_{GRR} = \frac{e^\varepsilon+d-2}{(e^\varepsilon-1)^2}`
    and :math:`\mathrm{Var}^*_{OUE} = \frac{4e^\varepsilon}{(e^\varepsilon-1)^2}` (times 1/n), so
    GRR wins exactly when :math:`d - 2 < 3e^\varepsilon`.
    """
    return "grr" if d - 2 < 3 * math.exp(epsilon) else "oue"


def variance(p: float, q: float, n: int, theta: float | None = None, *, conditional: bool = True) -> float:
    r"""Variance of the estimate :math:`\hat\theta = (f - q)/(p - q)` from ``n`` reports.

    - ``theta=None``: Wang et al.'s approximation :math:`\frac{q(1-q)}{n(p-q)^2}` (exact as
      :math:`\theta \to 0`); for GRR it equals :math:`\frac{e^\varepsilon+d-2}{n(e^\varepsilon-1)^2}`,
      for OUE :math:`\frac{4e^\varepsilon}{n(e^\varepsilon-1)^2}`.
    - ``conditional=True``: given the population's true values (a share :math:`\theta` hits with
      probability p, the rest with q): :math:`\frac{\theta p(1-p) + (1-\theta) q(1-q)}{n(p-q)^2}`
      (Wang et al. 2017, Eq. 2 generalised).
    - ``conditional=False``: devices drawn independently from a population with share
      :math:`\theta`, so each hit is Bernoulli(:math:`\pi = q + (p-q)\theta`):
      :math:`\frac{\pi(1-\pi)}{n(p-q)^2}`.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not p > q:
        raise ValueError(f"p must exceed q, got p={p}, q={q}")
    scale = n * (p - q) ** 2
    if theta is None:
        return q * (1 - q) / scale
    if not 0 <= theta <= 1:
        raise ValueError(f"theta must be in [0, 1], got {theta}")
    if conditional:
        return (theta * p * (1 - p) + (1 - theta) * q * (1 - q)) / scale
    pi = hit_probability(p, q, theta)
    return pi * (1 - pi) / scale


# --- on-device encoders (CSPRNG) ---------------------------------------------------------


class _EntropyPool:
    """Bytes from the OS CSPRNG (``os.urandom``, what :mod:`secrets` uses), read 4 KiB at a time.

    One system call then serves hundreds of coins, which makes the device encoders several times
    faster. Every byte is used once; a forked child starts with an empty pool, so a parent and its
    child never share coins.
    """

    _SIZE = 4096

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._position = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            start = self._position
            if start + n > len(self._buffer):
                self._buffer = os.urandom(max(self._SIZE, n))
                start = 0
            self._position = start + n
            return self._buffer[start : start + n]


_POOL = _EntropyPool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.reset)


def random_bytes(n: int) -> bytes:
    """``n`` bytes from the OS CSPRNG, through the pool (one ``os.urandom`` call costs ~20 µs on
    some virtual machines)."""
    return _POOL.take(n)


def _uniform53() -> int:
    """A uniform integer in [0, 2**53) from the CSPRNG."""
    return int.from_bytes(_POOL.take(7), "little") >> 3


def randbelow(n: int) -> int:
    """A uniform integer in [0, n) from the CSPRNG (rejection sampling, no modulo bias)."""
    bits = (n - 1).bit_length()
    if bits == 0:
        return 0
    mask, size = (1 << bits) - 1, (bits + 7) // 8
    while True:
        value = int.from_bytes(_POOL.take(size), "little") & mask
        if value < n:
            return value


def bernoulli(probability: float) -> bool:
    """True with ``probability``, from the OS CSPRNG."""
    return _uniform53() < int(probability * _SCALE)


def encode_rr(value: bool, p: float) -> bool:
    """Binary randomised response: the true bit with probability ``p``, else its negation."""
    return value if bernoulli(p) else not value


def encode_grr(index: int, d: int, p: float) -> int:
    """GRR: the true category index with probability ``p``, else one of the other d-1 uniformly."""
    if bernoulli(p):
        return index
    other = randbelow(d - 1)
    return other + 1 if other >= index else other


def encode_oue(index: int, d: int, p: float, q: float) -> list[int]:
    """OUE: bit ``index`` is 1 with probability ``p``, every other bit with probability ``q``."""
    # d draws of 53 bits, from 8 bytes each, in one read of the pool.
    words = array("Q")
    words.frombytes(_POOL.take(8 * d))
    low, high = int(q * _SCALE), int(p * _SCALE)
    bits = [1 if (w >> 11) < low else 0 for w in words]
    bits[index] = 1 if (words[index] >> 11) < high else 0
    return bits


# --- decoding on the aggregator ----------------------------------------------------------


def hit_indices(mechanism: str, reported: object, index_of: Mapping[str, int] | None = None) -> Iterator[int]:
    """Indices of the estimate values that one reported wire value hits.

    For ``rr`` the only estimate value is ``true`` (index 0); for ``grr`` the reported category;
    for ``oue`` every bit that is 1. ``index_of`` maps a category to its index (``grr``).
    ``reported`` must already be validated.
    """
    if mechanism == "rr":
        if reported:
            yield 0
    elif mechanism == "grr":
        yield index_of[reported]  # type: ignore[index]
    else:
        yield from (i for i, bit in enumerate(reported) if bit)  # type: ignore[union-attr]

