r"""Optimal local hashing (``olh``) for string attributes: open domains (URLs, app names, errors).

Wang, Blocki, Li, Jha, *Locally Differentially Private Protocols for Frequency Estimation*,
USENIX Security 2017, §4.4. A device hashes its string with a fresh hash from a universal family
into :math:`g` values and randomises the hash value with generalised randomised response over
them; the report is the hash's seed and the randomised value, a few bytes however large the
domain. Every detail is DESIGN.md's ("Strings"), so that every client computes the same report:

- the fingerprint of a string :math:`s`: :math:`x(s)` = the first 8 bytes of
  SHA-256("ldp-telemetry/string/v1" ‖ 0x00 ‖ UTF-8 of :math:`s`), big-endian, mod :math:`P`, with
  :math:`P = 2^{31} - 1`;
- :math:`g = \min(65536, \lfloor e^\varepsilon + \tfrac12 \rfloor + 1)` (OLH's optimum is
  :math:`e^\varepsilon + 1`), :math:`p = e^\varepsilon / (e^\varepsilon + g - 1)`, :math:`q = 1/g`;
- the draws: :math:`a = 1 + \text{randbelow}(P - 1)`, :math:`b = \text{randbelow}(P)`,
  :math:`h = ((a x + b) \bmod P) \bmod g` in exact integers; a coin at :math:`p` keeps
  :math:`y = h`, else :math:`j = \text{randbelow}(g - 1)` and :math:`y = j + [j \ge h]`;
- wire value ``{"a": a, "b": b, "y": y}``;
- discovery (PEM: Wang, Li, Jha, TDSC 2019): for an attribute with ``discover``, before ``a`` a
  coin at 1/2 picks level 0 (the value itself, as above), else level :math:`i = 1 +
  \text{randbelow}(L)`, whose report encodes :func:`prefix` of the value at ``levels[i - 1]``
  code points instead; the wire value then carries ``"level": i`` (0 included). The level is drawn
  independently of the value, so every report is ε-LDP whatever its level.

A report *supports* a string :math:`s` when :math:`((a\,x(s) + b) \bmod P) \bmod g = y`: with
probability :math:`p` when :math:`s` is the device's string, and :math:`1/g` otherwise (up to
about :math:`1/P` for this hash family), so the share estimator with :math:`p` and
:math:`q = 1/g` is unbiased and the mapped Wilson interval covers. The counters keep, per
candidate string, the number of supporting reports; numpy computes them for every candidate at
once, in int64 (:math:`a\,x + b < 2^{62} + 2^{31}`, never a float).

A string attribute cannot be memoised: a fixed :math:`(a, b)` would link a device's reports.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .base import UNIT, Span, Target, WireError, check_epsilon
from .randomness import RandomSource, bernoulli, randbelow
from .shares import HitMechanism

if TYPE_CHECKING:
    import numpy as np

P = 2**31 - 1  # the hash family's prime modulus
MAX_G = 65536
FINGERPRINT_TAG = b"ldp-telemetry/string/v1"
WIRE_KEYS = frozenset(("a", "b", "y"))
LEVEL_WIRE_KEYS = WIRE_KEYS | {"level"}  # a discovering attribute's reports
# A discovery prefix keeps a code point of the alphabet, writes this for any other, and is padded
# with PADDING to its length (DESIGN.md, "Strings").
REPLACEMENT = "\ufffd"
PADDING = "\u0000"
# A string attribute keeps at most this many code points of a value, so it has at most this many
# discovery levels (one a code point).
MAX_STRING_LENGTH = 256
LEVEL_ZERO = 0.5  # a discovering attribute's coin: the chance a report is of the value itself (level 0)
# Supports are computed over at most this many (report, candidate) pairs at a time: two uint64
# buffers of 1 MiB, which stay in a core's cache between the passes (bigger ones ran slower), laid
# out as candidates by up to _BLOCK reports, so that each pass runs along the reports' columns
# (measured: 8,192 reports by 16 candidates ran a fifth faster than 131 by 1,000).
_CELLS = 1 << 17
_BLOCK = 1 << 13
# Pairs from which the supports are computed in several threads, and at most how many threads.
_THREAD_CELLS = 1 << 24
_THREADS = min(4, os.cpu_count() or 1)


def fingerprint(text: str) -> int:
    """:math:`x(s)`: the first 8 bytes of SHA-256(tag ‖ 0x00 ‖ UTF-8 of ``text``), big-endian,
    mod :math:`P`. ``text`` is taken exactly as given (a prepared value or candidate)."""
    digest = hashlib.sha256(FINGERPRINT_TAG + b"\x00" + text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % P


def prefix(value: str, length: int, alphabet: str) -> str:
    """The discovery prefix of the prepared ``value``: its first ``length`` code points, each kept
    if it is in ``alphabet`` else :data:`REPLACEMENT`, padded with :data:`PADDING` to ``length``.
    Never prepared again (preparation would turn the padding into U+FFFD)."""
    kept = "".join(c if c in alphabet else REPLACEMENT for c in value[:length])
    return kept + PADDING * (length - len(kept))


def hash_value(a: int, b: int, x: int, g: int) -> int:
    """:math:`((a x + b) \\bmod P) \\bmod g`, in exact integers."""
    return ((a * x + b) % P) % g


def buckets(epsilon: float) -> int:
    r""":math:`g = \min(65536, \lfloor e^\varepsilon + \frac12 \rfloor + 1)`: the hash range."""
    check_epsilon(epsilon)
    return min(MAX_G, math.floor(math.exp(epsilon) + 0.5) + 1)


def buckets_of(attribute: Target) -> int:
    """The ``g`` an attribute was parsed with (its ``q`` is exactly 1/g): the derived one, or the
    neighbour a served schema gave (:meth:`OptimalLocalHashing.given_parameters`)."""
    return round(1 / attribute.q)


@lru_cache(maxsize=64)
def fingerprints(texts: tuple[str, ...]) -> np.ndarray:
    """The fingerprints of ``texts`` as an int64 array (cached: a schema's candidates are hashed once)."""
    import numpy as np

    return np.fromiter((fingerprint(t) for t in texts), dtype=np.int64, count=len(texts))


def supports(a: np.ndarray, b: np.ndarray, y: np.ndarray, x: np.ndarray, g: int,
             weights: np.ndarray | None = None, groups: np.ndarray | None = None) -> np.ndarray:
    r"""For each fingerprint in ``x``, how many of the reports ``(a, b, y)`` support it (each
    report counted ``weights`` times, else once): :math:`\sum_r w_r [((a_r x + b_r) \bmod P)
    \bmod g = y_r]`. ``groups`` (the bounds of consecutive runs of reports, ``[0, ..., len(a)]``):
    one row of supports per run instead (the back-fill's windows). Exact integers throughout, a
    block of candidates by :data:`_BLOCK` reports at a time (buffers reused, small enough to stay in
    the CPU's cache), without a division:

    - :math:`v = a x + b < 2^{62} + 2^{31}` is reduced mod the Mersenne prime :math:`P = 2^{31} - 1`
      by one fold, :math:`v \mapsto (v \mathbin{\&} P) + (v \gg 31) \le 2^{32}` (as
      :math:`2^{31} \equiv 1`), then :math:`v \mapsto (v + ((v + 1) \gg 31)) \mathbin{\&} P`,
      exact for every :math:`v \le 2^{32}`;
    - :math:`r \bmod g = y` iff :math:`n = r + g - y` (below :math:`2^{32}`) is divisible by
      :math:`g`, iff :math:`n c \bmod 2^{64} < c` with :math:`c = \lceil 2^{64} / g \rceil` (Lemire,
      Kaser, Kurz, "Faster remainder by direct computation", 2019: exact for 32-bit :math:`n` and
      :math:`g`), in uint64, whose products wrap mod :math:`2^{64}`."""
    import numpy as np

    a, b, y = (np.asarray(v, dtype=np.int64) for v in (a, b, y))
    w = None if weights is None else np.asarray(weights, dtype=np.int64)
    if w is not None and bool((w == 1).all()):
        w = None
    bounds = np.array([0, a.shape[0]]) if groups is None else np.asarray(groups)
    out = np.zeros((bounds.shape[0] - 1, x.shape[0]), dtype=np.int64)
    if x.shape[0] and a.shape[0]:
        # numpy lets go of the GIL inside each pass: a share of the reports per core, summed.
        parts = min(_THREADS, max(1, a.shape[0] * x.shape[0] // _THREAD_CELLS))
        cuts = np.linspace(0, a.shape[0], parts + 1).astype(int)
        a64, b64, rest64 = a.astype(np.uint64), b.astype(np.uint64), (g - y).astype(np.uint64)
        fingerprints = x.astype(np.uint64)

        def part(i: int) -> np.ndarray:
            lo, hi = cuts[i], cuts[i + 1]
            mine = np.clip(bounds, lo, hi) - lo
            return _supports_part(a64[lo:hi], b64[lo:hi], rest64[lo:hi], fingerprints, g,
                                  None if w is None else w[lo:hi], mine)

        if parts == 1:
            out += part(0)
        else:
            with ThreadPoolExecutor(parts) as pool:
                for counted in pool.map(part, range(parts)):
                    out += counted
    return out if groups is not None else out[0]


def _supports_part(a: np.ndarray, b: np.ndarray, rest: np.ndarray, x: np.ndarray, g: int, w: np.ndarray | None,
                   bounds: np.ndarray) -> np.ndarray:
    """:func:`supports` of some reports (``rest`` = g - y, all uint64), per run of ``bounds``, in
    one thread, with buffers of its own."""
    import numpy as np

    out = np.zeros((bounds.shape[0] - 1, x.shape[0]), dtype=np.int64)
    c = np.uint64(((1 << 64) - 1) // g + 1)
    below = np.uint64(int(c) - 1)
    p, s, one = np.uint64(P), np.uint64(31), np.uint64(1)
    columns = max(1, min(_BLOCK, a.shape[0]))
    rows = min(x.shape[0], max(1, _CELLS // columns))
    v = np.empty((rows, columns), dtype=np.uint64)
    t, hit = np.empty_like(v), np.empty(v.shape, dtype=bool)
    for group in range(bounds.shape[0] - 1):
        for start in range(bounds[group], bounds[group + 1], _BLOCK):
            end = min(start + _BLOCK, bounds[group + 1])
            aa, bb, rr = a[start:end], b[start:end], rest[start:end]
            for first in range(0, x.shape[0], rows):
                k = min(rows, x.shape[0] - first)
                vv, tt, hh = v[:k, :end - start], t[:k, :end - start], hit[:k, :end - start]
                np.multiply(x[first:first + k, None], aa, out=vv)
                vv += bb
                np.right_shift(vv, s, out=tt)
                vv &= p
                vv += tt
                np.add(vv, one, out=tt)
                tt >>= s
                vv += tt
                vv &= p
                vv += rr
                vv *= c
                np.less_equal(vv, below, out=hh)
                out[group, first:first + k] += (np.count_nonzero(hh, axis=1) if w is None
                                                else hh @ w[start:end])
    return out


def randomise_bulk(x: np.ndarray, g: int, p: float, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Many devices' reports ``(a, b, y)`` for the fingerprints ``x`` at once (numpy; simulation)."""
    import numpy as np

    n: int = x.shape[0]
    a = rng.integers(1, P, size=n, dtype="int64")
    b = rng.integers(0, P, size=n, dtype="int64")
    h = ((a * x + b) % P) % g
    j = rng.integers(0, g - 1, size=n, dtype="int64")
    y = np.where(rng.random(n) < p, h, j + (j >= h))
    return a, b, y


def _ranges(attribute: Target) -> tuple[tuple[str, int, int], ...]:
    """Each integer field of a wire value with its lowest and highest value (``level`` only on a
    discovering attribute's): what :meth:`OptimalLocalHashing.check` allows."""
    fields = (("a", 1, P - 1), ("b", 0, P - 1), ("y", 0, buckets_of(attribute) - 1))
    return (*fields, ("level", 0, len(attribute.levels))) if attribute.discover else fields


class OptimalLocalHashing(HitMechanism):
    """Optimal local hashing (Wang et al. 2017): a fresh hash of the string into ``g`` values, then
    generalised randomised response over them. Wire value: ``{"a": a, "b": b, "y": y}``."""

    name = "olh"
    title = "optimal local hashing"
    wire_schema = {"type": "object", "additionalProperties": False, "required": ["a", "b", "y"],
                   "properties": {"a": {"type": "integer", "minimum": 1, "maximum": P - 1},
                                  "b": {"type": "integer", "minimum": 0, "maximum": P - 1},
                                  "y": {"type": "integer", "minimum": 0, "maximum": MAX_G - 1},
                                  "level": {"type": "integer", "minimum": 0, "maximum": MAX_STRING_LENGTH}},
                   "description": "the hash's seed (a, b) and the randomised hash value y; on every report of an "
                                  "attribute that discovers strings (and no other), the level: 0 for the value, "
                                  "i for its prefix of levels[i - 1] code points"}

    def parameters(self, *, epsilon: float, d: int = 2) -> tuple[float, float]:
        r""":math:`p = e^\varepsilon/(e^\varepsilon + g - 1)` (the report supports the true string),
        :math:`q = 1/g` (it supports another one); ``d`` plays no part: the domain is open."""
        g = buckets(epsilon)
        e = math.exp(epsilon)
        return e / (e + g - 1), 1 / g

    def shown_parameters(self, *, epsilon: float, d: int) -> dict[str, float]:
        return {"g": buckets(epsilon)}

    def shown_parameters_of(self, attribute: Target, *, d: int) -> dict[str, float]:
        return {"g": buckets_of(attribute)}

    def given_parameters(self, given: Mapping[str, Any], *, epsilon: float, d: int) -> tuple[float, float] | None:
        """A served ``g`` that is the other neighbour where :math:`e^\varepsilon` is within 1e-9 of
        a half-integer (another language's ``exp`` may round it the other way; DESIGN.md: either
        neighbour is accepted, and the client randomises with the served one): its ``(p, q)``."""
        g, e = given.get("g"), math.exp(epsilon)
        half = math.floor(e) + 0.5
        if type(g) is not int or g == buckets(epsilon) or abs(e - half) > 1e-9 or g not in (half + 0.5, half + 1.5):
            return None
        if g > MAX_G:
            return None
        return e / (e + g - 1), 1 / g

    def encode(self, attribute: Target, truth: Any, source: RandomSource,
               permanent: RandomSource | None = None) -> dict[str, int]:
        """The report of the prepared string ``truth``: draws in DESIGN.md's order (the level's
        first, for a discovering attribute)."""
        level = 0
        if attribute.discover and not bernoulli(LEVEL_ZERO, source):
            level = 1 + randbelow(len(attribute.levels), source)
            truth = prefix(truth, attribute.levels[level - 1], attribute.alphabet)
        g = buckets_of(attribute)
        x = fingerprint(truth)
        a = 1 + randbelow(P - 1, source)
        b = randbelow(P, source)
        h = hash_value(a, b, x, g)
        if bernoulli(attribute.p, source):
            y = h
        else:
            j = randbelow(g - 1, source)
            y = j + 1 if j >= h else j
        return {"a": a, "b": b, "y": y, "level": level} if attribute.discover else {"a": a, "b": b, "y": y}

    def wire_bytes(self, attribute: Target) -> int:
        widest = {"a": P - 1, "b": P - 1, "y": MAX_G - 1}
        return len(json.dumps({**widest, "level": len(attribute.levels)} if attribute.discover else widest))

    def check(self, attribute: Target, reported: Any) -> None:
        keys = LEVEL_WIRE_KEYS if attribute.discover else WIRE_KEYS
        if not isinstance(reported, dict) or reported.keys() != keys:
            if attribute.discover:
                raise WireError('must be an object {"a": a, "b": b, "y": y, "level": level} with no other keys '
                                '(the attribute discovers strings)')
            if isinstance(reported, dict) and "level" in reported:
                raise WireError("must not carry a level: the attribute does not discover strings")
            raise WireError('must be an object {"a": a, "b": b, "y": y} with no other keys')
        for key, low, high in _ranges(attribute):
            value = reported.get(key, 0)
            if type(value) is not int or not low <= value <= high:
                raise WireError(f"{key} must be an integer from {low} to {high}")

    def counted(self, attribute: Target, reported: Any) -> Any:
        """Level 0 only: a prefix's report (level ≥ 1) is for discovery, and supports no candidate."""
        return reported.get("level", 0) == 0

    column_format = "i"  # each field below P = 2^31 - 1

    def columns(self, attribute: Target) -> tuple[str, ...]:
        return tuple(key for key, _, _ in _ranges(attribute))

    def column_values(self, attribute: Target, reported: Any) -> list[int | float]:
        return [reported[key] for key in self.columns(attribute)]

    def valid_columns(self, attribute: Target,
                      columns: Mapping[str, np.ndarray]) -> np.ndarray:
        import numpy as np

        valid = np.ones(len(next(iter(columns.values()))), dtype=bool)
        for key, low, high in _ranges(attribute):
            valid &= (columns[key] >= low) & (columns[key] <= high)
        return valid

    def tally_columns(self, attribute: Target, columns: Mapping[str, np.ndarray], groups: np.ndarray) -> np.ndarray:
        """Supports of every candidate per run, in one pass over the reports (threaded)."""
        return supports(columns["a"], columns["b"], columns["y"], fingerprints(attribute.keys),
                        buckets_of(attribute), groups=groups)

    def statistics(self, attribute: Target, reported: Any) -> Iterable[tuple[str, int | float]]:
        """One support for each candidate the report supports (about k/g of k)."""
        return self.tally(attribute, [(reported, 1)]).items()

    def tally(self, attribute: Target, reported: Iterable[tuple[Any, int]]) -> dict[str, int | float]:
        """Supports of every candidate (:attr:`Target.keys`), in bulk: numpy over all reports and
        candidates at once, bounded by the 10,000-candidate limit."""
        import numpy as np

        pairs = list(reported)
        candidates = attribute.keys
        if not pairs or not candidates:
            return {}
        columns = np.array([(v["a"], v["b"], v["y"], c) for v, c in pairs], dtype=np.int64)
        counts = supports(columns[:, 0], columns[:, 1], columns[:, 2], fingerprints(candidates),
                          buckets_of(attribute), columns[:, 3])
        return {candidates[i]: int(counts[i]) for i in np.flatnonzero(counts)}

    def encode_bulk(self, attribute: Target, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``truth`` holds indices into the candidates; the supports of each candidate."""
        x = fingerprints(attribute.keys)
        g = buckets_of(attribute)
        return supports(*randomise_bulk(x[truth], g, attribute.p, rng), x, g)

    def worst_pair(self, p: float, q: float) -> list[tuple[float, float]]:
        # For a given (a, b) a report is GRR over g hash values, whose other values each have
        # (1 - p)/(g - 1) = 1/(e^ε + g - 1); two strings leak most when their hashes differ (as GRR).
        g = round(1 / q)
        other = (1 - p) / (g - 1)
        return [(p, other), (other, p), (other * (g - 2), other * (g - 2))] if g > 2 else [(p, other), (other, p)]

    def describe(self, p: float, q: float, d: int, percent: Callable[[float], str], span: Span = UNIT) -> str:
        g = round(1 / q)
        return (f"A device hashes its string with a fresh random hash into {g} values and reports that value "
                f"with probability {percent(p)}, otherwise one of the other {g - 1}; a report supports "
                f"a string that is not its own with probability {percent(q)}.")


OLH = OptimalLocalHashing()

