r"""The mechanisms that estimate shares: binary RR, GRR and OUE.

Each is a randomised response whose output probabilities depend only on the device's true
value. For every estimate value :math:`j` a report contributes one Bernoulli *hit*:

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
:math:`\frac{p(1-q)}{q(1-p)} = e^\varepsilon`. The counters keep, per value, only the hits
that are not zero; the estimator and its interval are in :mod:`..estimators`.
"""

from __future__ import annotations

import json
import math
from abc import abstractmethod
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import product
from typing import TYPE_CHECKING, Any, TypeVar

from ..estimators import Estimate, estimate
from .base import SHARE, UNIT, Mechanism, Memo, OneBitColumns, Span, Target, WireError, check_epsilon
from .randomness import COIN_BYTES, COIN_SHIFT, RandomSource, bernoulli, randbelow, threshold

if TYPE_CHECKING:
    import numpy as np

# A share or chance: one number on a device, an array of them in simulation.
Share = TypeVar("Share", float, "np.ndarray")
# OUE vectors are simulated this many devices at a time, to bound memory at d = 1024.
_CHUNK = 1 << 16
_WORD_BITS = 64  # an OUE vector's bits per stored word (columns)
# Coins are little-endian on every machine; array("Q") reads in the machine's order.
_BIG_ENDIAN_MACHINE = array("Q", [1]).tobytes()[0] != 1


def hit_probability(p: float, q: float, theta: Share) -> Share:
    r"""The chance that one report hits a value whose true share is ``theta``: :math:`q + (p-q)\theta`."""
    return q + (p - q) * theta


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


class HitMechanism(Mechanism):
    r"""A mechanism whose report *hits* each estimate value with probability :math:`p` when that is
    the device's true value and :math:`q` otherwise: the three share mechanisms below and ``olh``
    (a report supports a string). Its estimate of a value is the share estimator
    :math:`\hat\theta = (\text{hits}/n - q)/(p - q)` with the mapped Wilson interval
    (:func:`..estimators.estimate`)."""

    estimand = SHARE

    def worst_variance(self, *, epsilon: float, d: int) -> float:
        p, q = self.parameters(epsilon=epsilon, d=d)
        # An ε so small that p == q in floating point carries nothing; the schema refuses it.
        return variance(p, q, n=1) if p > q else math.inf

    def report_variance(self, attribute: Target) -> float:
        r"""The variance of a sampled population's estimate, :math:`\pi(1-\pi)/(p-q)^2` with
        :math:`\pi = q + (p-q)\theta`, at its largest over :math:`\theta \in [0, 1]`: at
        :math:`\pi = 1/2` when :math:`q \le 1/2 \le p`, else at the end nearer 1/2. The Wilson
        interval's width follows the same :math:`\pi(1-\pi)`."""
        p, q = attribute.p, attribute.q
        pi = min(max(0.5, q), p)
        return pi * (1 - pi) / (p - q) ** 2

    def estimates(self, attribute: Target, n: int, amounts: Mapping[str, int | float],
                  confidence: float) -> list[tuple[str, Estimate]]:
        # Values with the same hits share one estimate: most of a wide attribute's values have none.
        by_hits: dict[int, Estimate] = {}
        out = []
        for key in attribute.keys:
            hits = int(amounts.get(key, 0))
            if hits not in by_hits:
                by_hits[hits] = estimate(hits, n, attribute.p, attribute.q, confidence)
            out.append((key, by_hits[hits]))
        return out


class ShareMechanism(HitMechanism):
    """What the three share mechanisms have in common: hits per value, the Wilson estimator, and
    memoisation.

    Each is a *response* on an internal value (a bool, a category index, a bit vector) with hit
    probabilities ``(p, q)``. Without memoisation a report is one response to the true value at
    the attribute's ``(p, q)``. With it (RAPPOR: Erlingsson, Pihur, Korolova, CCS 2014) the
    permanent randomised response (PRR) answers the true value at ``(p₁, q₁)``, the mechanism's own
    parameters at the attribute's share of ε∞, with coins derived from the device's secret so it
    never changes for the same value; the instantaneous response (IRR) then answers the PRR with
    fresh coins, keeping it with probability ``keep``. The two compose into one response of the
    same form with :math:`p = p_1 p_2 + (1 - p_1) q_2`, :math:`q = q_1 p_2 + (1 - q_1) q_2`
    (``(p₂, q₂)`` the IRR's hit probabilities), and ``keep`` is solved so that this one report is
    exactly ε-LDP: the estimator and its interval are unchanged within a window.
    """

    memoisable = True
    indicates = True  # each report gives each value an indicator (DESIGN.md, "Breakdowns")

    def _uninformative_keep(self, d: int) -> float:
        """The IRR's keep probability at which a report says nothing (the search's lower end)."""
        return 0.5

    def _irr(self, keep: float, d: int) -> tuple[float, float]:
        """The IRR's hit probabilities ``(p₂, q₂)`` when it keeps the PRR with probability ``keep``."""
        return keep, 1 - keep

    def _epsilon_of(self, p: float, q: float) -> float:
        """The ε of one response with hit probabilities ``(p, q)``: the largest log-ratio of an
        output's probabilities under two inputs."""
        return math.log(p / q)

    def memoise(self, *, epsilon: float, epsilon_permanent: float, d: int) -> Memo:
        """The two layers for one report of ε = ``epsilon`` over a permanent ``epsilon_permanent``.

        The composed ε rises monotonically from 0 (an IRR that says nothing) to ε∞ (an IRR that
        keeps the PRR), so bisection finds ``keep``; the lower end is kept, so the report's ε
        never exceeds ``epsilon``.
        """
        if not epsilon_permanent > epsilon:
            raise ValueError(f"epsilon_permanent must exceed epsilon, got {epsilon_permanent!r} <= {epsilon!r}")
        p1, q1 = self.parameters(epsilon=epsilon_permanent, d=d)
        low, high = self._uninformative_keep(d), 1.0
        for _ in range(200):
            middle = (low + high) / 2
            if middle in (low, high):
                break
            if self._epsilon_of(*self._compose(p1, q1, middle, d)) < epsilon:
                low = middle
            else:
                high = middle
        p, q = self._compose(p1, q1, low, d)
        p2, q2 = self._irr(low, d)
        return Memo(epsilon_permanent=epsilon_permanent, permanent_p=p1, permanent_q=q1,
                    instant_p=p2, instant_q=q2, p=p, q=q)

    def _compose(self, p1: float, q1: float, keep: float, d: int) -> tuple[float, float]:
        p2, q2 = self._irr(keep, d)
        return p1 * p2 + (1 - p1) * q2, q1 * p2 + (1 - q1) * q2

    def encode(self, attribute: Target, truth: Any, source: RandomSource,
               permanent: RandomSource | None = None) -> Any:
        value = self._internal(attribute, truth)
        memo = attribute.memo
        if memo is None:
            return self._wire(attribute, self._respond(attribute, value, attribute.p, attribute.q, source))
        if permanent is None:
            raise ValueError(f"{attribute.name} is memoised: its permanent response needs the device's secret")
        prr = self._respond(attribute, value, memo.permanent_p, memo.permanent_q, permanent)
        return self._wire(attribute, self._respond(attribute, prr, memo.instant_p, memo.instant_q, source))

    def permanent_response(self, attribute: Target, truth: Any, permanent: RandomSource) -> Any:
        """The wire form of a memoised attribute's permanent response to ``truth``: what the
        instantaneous layer randomises afresh in every report (never sent as it is)."""
        memo = attribute.memo
        if memo is None:
            raise ValueError(f"{attribute.name} is not memoised")
        value = self._internal(attribute, truth)
        return self._wire(attribute, self._respond(attribute, value, memo.permanent_p, memo.permanent_q, permanent))

    @abstractmethod
    def _internal(self, attribute: Target, truth: Any) -> Any:
        """The value a response works on, from the true value ``validate_record`` gives."""

    @abstractmethod
    def _respond(self, attribute: Target, value: Any, p: float, q: float, source: RandomSource) -> Any:
        """One response to ``value``: each possible hit with probability ``p`` where ``value`` has
        it, ``q`` where it does not."""

    @abstractmethod
    def _wire(self, attribute: Target, value: Any) -> Any:
        """The wire form of a response."""

class BinaryRR(OneBitColumns, ShareMechanism):
    """Binary randomised response (Warner 1965): the true bit with probability ``p``, else its
    negation. Wire value: JSON ``true`` or ``false``. One coin per report."""

    name = "rr"
    title = "binary randomised response"
    wire_schema = {"type": "boolean"}

    def parameters(self, *, epsilon: float, d: int = 2) -> tuple[float, float]:
        check_epsilon(epsilon)
        e = math.exp(epsilon)
        return e / (1 + e), 1 / (1 + e)

    def _internal(self, attribute: Target, truth: Any) -> bool:
        return bool(truth)

    def _respond(self, attribute: Target, value: bool, p: float, q: float, source: RandomSource) -> bool:
        return value if bernoulli(p, source) else not value

    def _wire(self, attribute: Target, value: bool) -> bool:
        return value

    def wire_bytes(self, attribute: Target) -> int:
        return len("false")

    def check(self, attribute: Target, reported: Any) -> None:
        if not isinstance(reported, bool):
            raise WireError("must be JSON true or false")

    def statistics(self, attribute: Target, reported: Any) -> Iterable[tuple[str, int]]:
        return ((attribute.keys[0], 1),) if reported else ()

    def wire_array(self, attribute: Target, reported: Sequence[Any]) -> np.ndarray:
        import numpy as np

        return np.array(reported, dtype=bool)

    def wire_of_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        reported: np.ndarray = columns["bit"] != 0
        return reported

    def report_amounts(self, attribute: Target, wire: np.ndarray) -> np.ndarray:
        """One column, ``true``'s indicator: the reported bit (``false``'s is one minus it)."""
        import numpy as np

        return wire.astype(np.int8).reshape(-1, 1)

    def respond_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        keep = rng.random(truth.shape[0]) < attribute.p
        reported: np.ndarray = np.where(keep, truth, ~truth)
        return reported

    def encode_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        return np.array([np.count_nonzero(self.respond_bulk(attribute, truth, rng))])

    def worst_pair(self, p: float, q: float) -> list[tuple[float, float]]:
        # The two outputs: the true value of x (p vs q) and that of x' (q vs p); for ε' ≥ 0 this
        # gives δ(ε') = [p − e^ε' q]₊.
        return [(p, q), (q, p)]

    def describe(self, p: float, q: float, d: int, percent: Callable[[float], str], span: Span = UNIT) -> str:
        return (f"A device keeps its true answer with probability {percent(p)} and flips it with "
                f"probability {percent(q)}.")


class GeneralisedRR(ShareMechanism):
    """Generalised (k-ary) randomised response: the true category with probability ``p``, else one
    of the other d−1 uniformly. Wire value: the reported category's name. Coins: one Bernoulli(p),
    then, if it failed, a uniform index below d−1 that skips over the true one."""

    name = "grr"
    title = "generalised randomised response"
    wire_schema = {"type": "string", "description": "the reported category"}

    def parameters(self, *, epsilon: float, d: int) -> tuple[float, float]:
        check_epsilon(epsilon)
        if d < 2:
            raise ValueError(f"grr needs at least 2 categories, got {d}")
        e = math.exp(epsilon)
        return e / (e + d - 1), 1 / (e + d - 1)

    def _uninformative_keep(self, d: int) -> float:
        return 1 / d

    def _irr(self, keep: float, d: int) -> tuple[float, float]:
        return keep, (1 - keep) / (d - 1)

    def _internal(self, attribute: Target, truth: Any) -> int:
        return int(truth)

    def _respond(self, attribute: Target, value: int, p: float, q: float, source: RandomSource) -> int:
        # q is implied: the other d-1 categories share 1 - p equally.
        if bernoulli(p, source):
            return value
        other = randbelow(len(attribute.categories) - 1, source)
        return other + 1 if other >= value else other

    def _wire(self, attribute: Target, value: int) -> str:
        return attribute.categories[value]

    def wire_bytes(self, attribute: Target) -> int:
        return max(len(json.dumps(c)) for c in attribute.categories)

    def check(self, attribute: Target, reported: Any) -> None:
        if not isinstance(reported, str) or reported not in attribute.index_of:
            raise WireError(f"must be one of the categories {attribute.categories_shown}")

    def statistics(self, attribute: Target, reported: Any) -> Iterable[tuple[str, int]]:
        return ((reported, 1),)

    column_format = "h"  # an index below MAX_CATEGORIES

    def columns(self, attribute: Target) -> tuple[str, ...]:
        return ("index",)

    def column_values(self, attribute: Target, reported: Any) -> list[int | float]:
        return [attribute.index_of[reported]]

    def valid_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        index: np.ndarray = (columns["index"] >= 0) & (columns["index"] < len(attribute.categories))
        return index

    def wire_of_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        return columns["index"]

    def wire_array(self, attribute: Target, reported: Sequence[Any]) -> np.ndarray:
        """The reported categories' indices."""
        import numpy as np

        index_of = attribute.index_of
        return np.fromiter((index_of[c] for c in reported), dtype=np.int64, count=len(reported))

    def report_amounts(self, attribute: Target, wire: np.ndarray) -> np.ndarray:
        """One-hot rows: category j's indicator is 1 where j was reported."""
        import numpy as np

        indicators = np.zeros((wire.shape[0], len(attribute.categories)), dtype=np.int8)
        indicators[np.arange(wire.shape[0]), wire] = 1
        return indicators

    def respond_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        d = len(attribute.categories)
        keep = rng.random(truth.shape[0]) < attribute.p
        other = rng.integers(0, d - 1, size=truth.shape[0])
        other += other >= truth
        reported: np.ndarray = np.where(keep, truth, other)
        return reported

    def encode_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        return np.bincount(self.respond_bulk(attribute, truth, rng), minlength=len(attribute.categories))

    def worst_pair(self, p: float, q: float) -> list[tuple[float, float]]:
        # As for rr, plus one "other" output carrying the q-vs-q mass (it never adds to δ for ε' ≥ 0).
        return [(p, q), (q, p), (q, q)]

    def describe(self, p: float, q: float, d: int, percent: Callable[[float], str], span: Span = UNIT) -> str:
        return (f"A device reports its true category with probability {percent(p)}; otherwise one of "
                f"the other {d - 1} categories, each with probability {percent(q)}.")


class OptimisedUnaryEncoding(ShareMechanism):
    """Optimised unary encoding (Wang et al. 2017): a one-hot vector whose true bit is reported as 1
    with probability ``p`` = 1/2 and every other bit with probability ``q``. Wire value: a list of
    d JSON integers 0 or 1 in the schema's category order. Coins: one per bit, in order."""

    name = "oue"
    title = "optimised unary encoding"
    wire_schema = {"type": "array", "items": {"type": "integer", "enum": [0, 1]},
                   "description": "one bit per category, in the schema's order"}

    def parameters(self, *, epsilon: float, d: int) -> tuple[float, float]:
        check_epsilon(epsilon)
        return 0.5, 1 / (math.exp(epsilon) + 1)

    def _epsilon_of(self, p: float, q: float) -> float:
        # Two inputs differ in two bits: p(1-q) / (q(1-p)).
        return math.log(p * (1 - q) / (q * (1 - p)))

    def _internal(self, attribute: Target, truth: Any) -> list[int]:
        bits = [0] * len(attribute.categories)
        bits[int(truth)] = 1
        return bits

    def _respond(self, attribute: Target, value: list[int], p: float, q: float, source: RandomSource) -> list[int]:
        # d coins in one read of the source (the same draws as d bernoulli() calls, faster).
        words = array("Q")
        words.frombytes(source.take(COIN_BYTES * len(value)))
        if _BIG_ENDIAN_MACHINE:
            words.byteswap()
        below = (threshold(q), threshold(p))
        return [1 if (w >> COIN_SHIFT) < below[bit] else 0 for w, bit in zip(words, value)]

    def _wire(self, attribute: Target, value: list[int]) -> list[int]:
        return value

    def wire_bytes(self, attribute: Target) -> int:
        return 3 * len(attribute.categories)  # "[0, 1, ..., 0]": three characters a bit

    def check(self, attribute: Target, reported: Any) -> None:
        d = len(attribute.categories)
        if (not isinstance(reported, list) or len(reported) != d
                or any(type(bit) is not int or bit not in (0, 1) for bit in reported)):
            raise WireError(f"must be a list of {d} integers, each 0 or 1 (OUE)")

    def statistics(self, attribute: Target, reported: Any) -> Iterable[tuple[str, int]]:
        categories = attribute.categories
        return ((categories[i], 1) for i, bit in enumerate(reported) if bit)

    column_format = "Q"

    def columns(self, attribute: Target) -> tuple[str, ...]:
        """The vector's bits packed 64 to a word (bit j of the vector is bit j mod 64 of word j // 64):
        a 1,024-category vector is 16 numbers, not 1,024."""
        return tuple(f"w{i}" for i in range(-(-len(attribute.categories) // _WORD_BITS)))

    def column_values(self, attribute: Target, reported: Any) -> list[int | float]:
        return [sum(bit << j for j, bit in enumerate(reported[start:start + _WORD_BITS]))
                for start in range(0, len(reported), _WORD_BITS)]

    def valid_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """No bit set past the last category (the words' other bits are the vector's)."""
        import numpy as np

        d = len(attribute.categories)
        spare = _WORD_BITS * len(self.columns(attribute)) - d
        last = columns[f"w{(d - 1) // _WORD_BITS}"]
        valid: np.ndarray = (last >> np.uint64(_WORD_BITS - spare) == 0) if spare else np.ones(len(last), dtype=bool)
        return valid

    def wire_of_columns(self, attribute: Target, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        import numpy as np

        words = np.column_stack([columns[f].astype("<u8") for f in self.columns(attribute)])
        bits = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, :len(attribute.categories)]
        return bits.astype(np.int8)

    def wire_array(self, attribute: Target, reported: Sequence[Any]) -> np.ndarray:
        """The reported vectors, one row each."""
        import numpy as np

        return np.array(reported, dtype=np.int8).reshape(len(reported), len(attribute.categories))

    def report_amounts(self, attribute: Target, wire: np.ndarray) -> np.ndarray:
        """The vectors themselves: bit j is category j's indicator."""
        return wire

    def respond_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        n = truth.shape[0]
        bits = (rng.random((n, len(attribute.categories))) < attribute.q).astype(np.int8)
        bits[np.arange(n), truth] = rng.random(n) < attribute.p
        return bits

    def encode_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        counts = np.zeros(len(attribute.categories), dtype=np.int64)
        for start in range(0, truth.shape[0], _CHUNK):
            counts += self.respond_bulk(attribute, truth[start : start + _CHUNK], rng).sum(axis=0, dtype=np.int64)
        return counts

    def worst_pair(self, p: float, q: float) -> list[tuple[float, float]]:
        # x and x' differ in two bits (x's bit is 1 w.p. p under x and q under x', x''s the other
        # way round); every other bit has the same law under both and cancels. The four outputs
        # are the combinations of those two bits, each a product of independent bits.
        def bit(probability_of_one: float, value: int) -> float:
            return probability_of_one if value else 1 - probability_of_one

        return [(bit(p, a) * bit(q, b), bit(q, a) * bit(p, b)) for a, b in product((1, 0), repeat=2)]

    def describe(self, p: float, q: float, d: int, percent: Callable[[float], str], span: Span = UNIT) -> str:
        return (f"A device sends one bit per category: its own category's bit is 1 with probability "
                f"{percent(p)}, every other bit with probability {percent(q)}.")


RR = BinaryRR()
GRR = GeneralisedRR()
OUE = OptimisedUnaryEncoding()
