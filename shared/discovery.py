r"""Discovering the common strings nobody listed: PEM by levels.

Wang, Li, Jha, *Locally Differentially Private Heavy Hitter Identification*, TDSC 2019 (PEM,
prefix extending method); the wire side is DESIGN.md's ("Strings"). Half of a discovering
attribute's reports are of the value itself (level 0: the candidates' estimates); the other half
are spread evenly over the levels :math:`1..L`, a level-:math:`i` report being optimal local
hashing of the value's prefix of ``levels[i-1]`` code points (:func:`.mechanisms.olh.prefix`:
out-of-alphabet code points as U+FFFD, padded with U+0000). The server, level by level:

1. the first level enumerates every prefix of its length over the extension symbols (the
   alphabet, U+FFFD and the padding U+0000, the padding only as a suffix);
2. later levels extend each of the :data:`KEEP` prefixes with the most supports at the level
   before by every suffix of the step's length (a prefix already ending in padding has one
   extension: more padding);
3. each level counts the supports of its candidates among its own reports
   (:func:`.mechanisms.olh.supports`) and keeps the :data:`KEEP` with the most;
4. at the last level (prefixes of ``max_length``: whole values) a candidate survives only if its
   supports reach the null threshold below; a survivor without its padding is a discovered string
   (one holding U+FFFD stands for several strings and cannot be estimated: no level-0 report
   supports it).

**False discoveries.** A string of share 0 has, at the last level, supports
:math:`\mathrm{Binomial}(n_L, q)` with :math:`q = 1/g` (exact to about :math:`1/P` for the hash
family), independent of the selection, which used other levels' reports. Among the :math:`m`
candidates tested there a threshold :math:`h^*`, the least :math:`h` with
:math:`P(\mathrm{Binomial}(n_L, q) \ge h) \le \alpha/m` (the exact tail, not the normal one: at
:math:`\alpha/m \approx 10^{-5}` and :math:`n_L q` in the hundreds the normal tail is about 1.6
times too thin), bounds the chance that *any* share-0 string survives by :math:`\alpha`
(Bonferroni), so a string with share 0 is reported in at most :data:`ALPHA` = 5% of runs.

**The parameters**, chosen with ``make bench``'s ``discovery`` step (``python -m bench.discovery
--keep 8,16,32,64``: Zipf(1.1) over 20,000 domain-like names, ``max_length`` 24, a 38-symbol
alphabet, so 40 extension symbols a code point and 23 levels of :math:`n/46` reports):

- *levels*: each level costs :math:`n_\ell \times K \times E^{s}` hash cells (:math:`E`
  extension symbols, step :math:`s`), and every level takes :math:`1/(2L)` of the reports, so
  fewer, longer levels give each more reports but cost :math:`E^{s-1}` times more: a step of 2
  code points over 40 symbols is 51,200 candidates a level, 40 times the work for
  :math:`\sqrt{2}` less noise. The derived rule (:func:`derived_levels`) takes the longest first
  level and the longest step whose candidate sets stay within :data:`MAX_LEVEL_CANDIDATES`: for an
  alphabet of 10 code points or more a first level of 2 or 3 code points, then one a level, so
  :math:`L \approx` ``max_length``, whose choice is the analyst's lever (near the length of the
  strings sought: each code point more is a level more).
- *K* = 32: top-10 recall at :math:`n = 10^6`, ε = 4 (median of 3 runs) was 0.6 at K = 8, 0.9 at
  16, 1.0 at 32 and 1.0 at 64, which doubles the work. Below 32 the prefixes of common strings
  crowd each other out of the kept set at the middle levels.
- *α* = 0.05: the threshold lies :math:`\Phi^{-1}(1 - \alpha/m)` standard errors up, 3.95 at
  :math:`m` = 1,280; :math:`\alpha` = 0.01 would put it 0.4 SE further (about a tenth fewer
  strings within reach), for one run in 20 rather than 100 listing a string nobody holds, which
  the level-0 estimate of that candidate then shows near 0.

numpy is imported where it is used: a device imports this module (for the level rules) and never
numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import product
from typing import TYPE_CHECKING

from .mechanisms import Target, olh

if TYPE_CHECKING:
    import numpy as np

# The most distinct code points an alphabet may hold.
MAX_ALPHABET = 128
KEEP = 32  # K: the prefixes kept at each level (see the module docstring)
ALPHA = 0.05  # the stated rate of runs that report a string of share 0
# The most candidates one level may test: K prefixes extended by one code point of the largest
# alphabet (and U+FFFD and the padding). Bounds each level's work at n_level × this many hash cells.
MAX_LEVEL_CANDIDATES = KEEP * (MAX_ALPHABET + 2)


def extension_symbols(alphabet: str) -> int:
    """:math:`E`: the code points a prefix may hold: the alphabet's, U+FFFD and the padding."""
    return len(alphabet) + 2


def level_candidates(levels: tuple[int, ...] | list[int], alphabet: str) -> list[int]:
    """The most candidates each level tests: :math:`E^{\\ell_1}` at the first (every prefix of its
    length), then :math:`K \\cdot E^{s}` for a step of :math:`s` code points."""
    e = extension_symbols(alphabet)
    steps = [levels[0]] + [b - a for a, b in zip(levels, levels[1:])]
    return [e ** steps[0], *(KEEP * e ** s for s in steps[1:])]


def derived_levels(max_length: int, alphabet: str) -> tuple[int, ...]:
    """The levels when a schema gives none: the longest first level :math:`f` with
    :math:`E^f \\le` :data:`MAX_LEVEL_CANDIDATES`, then steps of the longest :math:`s` with
    :math:`K E^s \\le` :data:`MAX_LEVEL_CANDIDATES` (each level within the bound; the last is
    ``max_length``). With :math:`E` of 12 or more (an alphabet of 10 or more code points) the step
    is 1: ``f, f + 1, ..., max_length``."""
    e = extension_symbols(alphabet)
    first = _longest(lambda s: e ** s, max_length)
    step = _longest(lambda s: KEEP * e ** s, max_length)
    return tuple(range(first, max_length, step)) + (max_length,) if first < max_length else (max_length,)


def _longest(cost: Callable[[int], int], most: int) -> int:
    s = 1
    while s < most and cost(s + 1) <= MAX_LEVEL_CANDIDATES:
        s += 1
    return s


def null_hits(n: int, q: float, alpha: float) -> int:
    """:math:`h^*`, the least :math:`h` with :math:`P(\\mathrm{Binomial}(n, q) \\ge h) \\le \\alpha`:
    the exact tail, summed from the top (each term from ``lgamma``), where it is accurate."""
    if n <= 0 or alpha >= 1:
        return 0
    mean, sd = n * q, math.sqrt(n * q * (1 - q))
    # Beyond t = 10 sd + 30 above the mean the tail is below exp(-t^2 / (2 (sd^2 + t/3))) < 1e-19
    # (Bernstein), far below any alpha tested here: the sum starts there, at most ~10 sd + 30 terms.
    k = min(n, math.ceil(mean + 10 * sd + 30))
    log_q, log_r, log_n1 = math.log(q), math.log1p(-q), math.lgamma(n + 1)
    tail = 0.0
    while k >= 0:
        tail += math.exp(log_n1 - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q + (n - k) * log_r)
        if tail > alpha:
            return k + 1
        k -= 1
    return 0


def smallest_share(n_level: int, p: float, q: float, tested: int, alpha: float = ALPHA) -> float:
    """The smallest share a string needs at the last level to reach the threshold on average:
    :math:`(h^*/n_L - q)/(p - q)` with :math:`h^*` = :func:`null_hits` at :math:`\\alpha/m`
    (``tested`` = :math:`m`); inf without reports."""
    if n_level <= 0:
        return math.inf
    return (null_hits(n_level, q, alpha / tested) / n_level - q) / (p - q)


def last_level_tested(attribute: Target) -> int:
    """:math:`m`'s bound: the most candidates the last level tests (the Bonferroni divisor)."""
    return level_candidates(attribute.levels, attribute.alphabet)[-1]


def extensions(prefix: str, step: int, alphabet: str) -> Iterator[str]:
    """Every extension of ``prefix`` by ``step`` code points: the alphabet's, U+FFFD, then the
    padding as a suffix only; a prefix ending in padding has one extension, padding."""
    if prefix.endswith(olh.PADDING):
        yield prefix + olh.PADDING * step
        return
    symbols = alphabet + olh.REPLACEMENT
    for kept in range(step, -1, -1):
        for tail in product(symbols, repeat=kept):
            yield prefix + "".join(tail) + olh.PADDING * (step - kept)


@dataclass(frozen=True)
class Discovered:
    """A string that survived the last level."""

    value: str  # without its padding
    estimable: bool  # False: it holds U+FFFD (several strings), which no level-0 report supports
    hits: int  # its supports among the last level's reports


@dataclass(frozen=True)
class Run:
    """What one discovery run found, and what it could find."""

    found: list[Discovered]
    reports: list[int]  # per level 1..L, the reports read
    tested: int  # candidates tested at the last level (m)


def discover(attribute: Target, a: np.ndarray, b: np.ndarray, y: np.ndarray, level: np.ndarray, *,
             keep: int = KEEP, alpha: float = ALPHA) -> Run:
    """PEM over the reports ``(a, b, y, level)`` of one discovering attribute (level-0 ones are
    ignored here): see the module docstring. Work: at most :data:`MAX_LEVEL_CANDIDATES` hash
    cells per report read."""
    import numpy as np

    g, q = olh.buckets_of(attribute), attribute.q
    order = np.argsort(level, kind="stable")
    levels_sorted = np.asarray(level)[order]
    bounds = np.searchsorted(levels_sorted, np.arange(len(attribute.levels) + 2))
    reports: list[int] = []
    kept = [""]
    previous = 0
    for i, length in enumerate(attribute.levels, start=1):
        candidates = [c for prefix in kept for c in extensions(prefix, length - previous, attribute.alphabet)]
        rows = order[bounds[i]:bounds[i + 1]]
        reports.append(len(rows))
        hits = olh.supports(a[rows], b[rows], y[rows], olh.fingerprints(tuple(candidates)), g)
        ranked = np.argsort(-hits, kind="stable")
        if i < len(attribute.levels):
            kept = [candidates[j] for j in ranked[:keep]]
            previous = length
            continue
        tested = len(candidates)
        threshold = null_hits(len(rows), q, alpha / tested) if len(rows) else len(rows) + 1
        found = [Discovered(candidates[j].rstrip(olh.PADDING), olh.REPLACEMENT not in candidates[j], int(hits[j]))
                 for j in ranked[:keep] if len(rows) and hits[j] >= threshold]
        return Run(found, reports, tested)
    raise ValueError("an attribute that discovers strings has at least one level")
