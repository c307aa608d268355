"""The attribute-type registry: one object per attribute type, and the only place that knows their names.

An attribute's ``type`` (``boolean``, ``categorical``, ``histogram``, ``numeric``) decides

- which schema fields it has of its own (``categories``, ``range``, ``edges``) and what they must be;
- how a device checks a record's true value and prepares it for the encoder (a category becomes
  its index, a numeric value is clipped to its range, a histogram's value becomes its bucket);
- which mechanisms may randomise it, and which one ``auto`` picks;
- the values its estimates are made for, how each is keyed in the counters and shown in the API;
- what simulation needs: true values for given shares (or a mean), and the shares they realise.

Schema parsing, report validation, simulation, the dashboard and the tools ask the attribute's
type object (``attribute.kind``); none of them compares type names. Adding a type (``string``,
to come) is adding one object to :data:`REGISTRY`.

Dependencies run one way: :mod:`.schema` imports this module, which imports :mod:`.mechanisms`;
neither of those imports the schema. What a type reads of an attribute is the :class:`Typed`
protocol, which the schema's ``Attribute`` satisfies.
"""

from __future__ import annotations

import unicodedata
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from . import mechanisms
from .checks import TOLERANCE, SchemaError, is_int, is_number, require_text, show, type_name
from . import discovery
from .discovery import MAX_ALPHABET
from .mechanisms import AUTO, Mechanism
from .mechanisms.olh import MAX_STRING_LENGTH, REPLACEMENT

if TYPE_CHECKING:  # numpy is for the aggregator and simulation only; a device never imports it
    import numpy as np

MIN_CATEGORIES = 2
MAX_CATEGORIES = 1024
MAX_CATEGORY_LENGTH = 64
MAX_BUCKETS = MAX_CATEGORIES
# Range ends and bucket edges are at most this in magnitude, so they convert to doubles exactly enough.
MAX_MAGNITUDE = 1e15
# Consecutive range ends or bucket edges differ by at least this much of the larger magnitude (and
# by at least this absolutely): the mean is then computed, and shown, in steps of at most 1e-7 of
# the range (a double carries 2.2e-16 of a number), and no variance of the range underflows. A
# narrower range is a wrong unit.
MIN_RELATIVE_WIDTH = 1e-9
# A number in a record beyond this (in magnitude) cannot be a double; smaller ones are clipped.
MAX_RECORD_NUMBER = 1e300
# How a boolean attribute's one estimate value (the share of true) is keyed in counters and estimates.
BOOLEAN_KEY = "true"
# How a numeric attribute's one estimate value (its mean) is keyed, and shown in the API's "value".
MEAN_KEY = "mean"
# A string attribute keeps the first max_length code points of a value: 64 unless given, at most
# MAX_STRING_LENGTH (256).
DEFAULT_STRING_LENGTH = 64
MAX_CANDIDATES = 10_000
# A numeric attribute's simulated devices draw their values from Beta(m·c, (1 - m)·c) stretched over
# its range, m the mean's position in it and c this concentration (a spread-out population).
CONCENTRATION = 4.0


@dataclass(frozen=True)
class Fields:
    """A type's own schema fields, parsed: a histogram's ``categories`` are its buckets' names."""

    categories: tuple[str, ...] = ()
    range: tuple[int | float, int | float] | None = None
    edges: tuple[int | float, ...] = ()
    max_length: int = 0  # a string attribute's: the code points of a value kept
    candidates: tuple[str, ...] = ()  # a string attribute's: the strings estimated, prepared
    discover: bool = False  # a string attribute's: whether the server discovers strings (PEM)
    alphabet: str = ""  # a string attribute's discovery alphabet
    levels: tuple[int, ...] = ()  # a discovering string attribute's prefix lengths (code points)


class Typed(mechanisms.Target, Protocol):
    """What a type reads of an attribute: what its mechanism reads, a histogram's edges and a
    string attribute's other fields."""

    @property
    def edges(self) -> tuple[int | float, ...]: ...

    @property
    def max_length(self) -> int: ...

    @property
    def candidates(self) -> tuple[str, ...]: ...


class AttributeType(ABC):
    """One attribute type: its schema fields, record values, mechanisms, estimate values, simulation."""

    name: ClassVar[str]  # as a schema's ``type`` names it
    fields: ClassVar[tuple[str, ...]] = ()  # its own schema fields (given, or derived and given back)
    mechanisms: ClassVar[tuple[Mechanism, ...]]  # those that may randomise it; the first wins a tie under auto
    ranked: ClassVar[bool] = False  # the dashboard lists its values largest first (else in their order)
    # How the dashboard draws it over windows: one value per window as a line with its interval as a
    # band ("line"), or several values per window as bars with whiskers ("bars").
    chart: ClassVar[str] = "bars"
    # Its values are candidate strings, each with a source; the dashboard sets apart those whose
    # interval includes zero.
    candidates_apart: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"<attribute type {self.name}>"

    def parse(self, raw: Mapping[str, Any], where: str) -> Fields:
        """Its own fields of the attribute ``raw`` (the JSON object at ``where``), checked;
        :class:`SchemaError` naming the field and the bad value if one is wrong."""
        return Fields()

    def to_dict(self, attribute: Typed) -> dict[str, Any]:
        """Its own fields as the derived schema shows them."""
        return {}

    def values_count(self, categories: tuple[str, ...]) -> int:
        """``d``, the number of values a mechanism chooses among: the ``categories`` (a
        histogram's buckets), or 2 (a boolean; a mean's mechanisms ignore it)."""
        return max(2, len(categories))

    def extent(self, attribute: Typed) -> float:
        """The width of the scale its estimates are on: 1 for a share (the planner and the
        dashboard size half-widths by it)."""
        return 1.0

    def choices(self) -> tuple[str, ...]:
        """The ``mechanism`` values a schema may give for an attribute of this type."""
        return (AUTO, *(m.name for m in self.mechanisms))

    def mechanism(self, requested: Any, *, epsilon: float, d: int) -> Mechanism:
        """The mechanism a schema asked for (a name, or ``auto``); ``ValueError`` saying what it
        must be if this type cannot take it."""
        if requested == AUTO:
            return self.auto(epsilon=epsilon, d=d)
        for mechanism in self.mechanisms:
            if mechanism.name == requested:
                return mechanism
        raise ValueError(f"must be one of {', '.join(self.choices())} for a {self.name} attribute")

    def auto(self, *, epsilon: float, d: int) -> Mechanism:
        """What ``auto`` picks: the lowest worst-case variance at ``epsilon`` and ``d`` (Wang et
        al. 2017 for GRR vs OUE: GRR exactly when :math:`d - 2 < 3e^\\varepsilon`; Wang et al.
        2019 for a mean: ``duchi`` up to ε ≈ 0.61, ``hm`` above)."""
        return min(self.mechanisms, key=lambda m: m.worst_variance(epsilon=epsilon, d=d))

    @abstractmethod
    def prepare(self, attribute: Typed, value: Any) -> Any:
        """A record's true ``value`` as the encoder takes it (a bool, a category or bucket index,
        a number clipped to the range); ``ValueError`` saying what it must be, never repeating
        ``value`` (it may be a true answer)."""

    def keys(self, attribute: Typed) -> tuple[str, ...]:
        """How each value an estimate is made for is keyed in the counters and estimates."""
        return attribute.categories

    def values(self, attribute: Typed) -> tuple[Any, ...]:
        """The values estimates are made for, as the API shows them, in :meth:`keys`' order."""
        return self.keys(attribute)

    def value_of(self, key: str) -> Any:
        """The API's ``value`` of a stored ``key``."""
        return key

    def complement(self, attribute: Typed) -> tuple[Any, ...]:
        """The values besides :meth:`values` whose indicator is one minus that of its one key (a
        boolean's ``false``: :math:`I_{false} = 1 - I_{true}`); none for the others. A breakdown by
        it shows them too (DESIGN.md, "Breakdowns")."""
        return ()

    def source(self, attribute: Typed, key: str) -> str | None:
        """Where the value keyed ``key`` came from, for a type whose values are candidates
        (``listed`` in the schema, ``added`` later, ``discovered``); None for the others."""
        return None

    def candidate_rows(self, attribute: Typed, more: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
        """Its candidates as ``GET .../candidates`` lists them (``value``, ``source``,
        ``fingerprint``, ``collides_with``), the listed ones and then ``more`` (``(value, source)``
        pairs, added later); none for a type whose values are not candidates."""
        return []

    @abstractmethod
    def example(self, attribute: Typed) -> Any:
        """A valid record value (benchmarks and tools fill records with it)."""

    # --- simulation (numpy) -------------------------------------------------------------------

    @abstractmethod
    def population(self, attribute: Typed, share: Any) -> list[float]:
        """A population spec checked and normalised: one share per value summing to 1 (a
        boolean's spec is its share of true), or a numeric attribute's mean; ``ValueError`` if not."""

    @abstractmethod
    def draw(self, attribute: Typed, shares: Sequence[float], n: int, rng: np.random.Generator, *,
             sampled: bool) -> np.ndarray:
        """``n`` devices' prepared true values for :meth:`population`'s ``shares`` (see
        :func:`..simulation.true_values`)."""

    @abstractmethod
    def realised(self, attribute: Typed, truth: np.ndarray) -> list[float]:
        """What ``truth`` (prepared values) holds of each estimate value: its shares, or its mean."""

    @abstractmethod
    def record_values(self, attribute: Typed, truth: np.ndarray) -> list[Any]:
        """Record values (JSON) that :meth:`prepare` turns into the prepared values ``truth``."""


class _Shares(AttributeType):
    """What the types estimated as shares have in common: one share per value, drawn as indices."""

    def population(self, attribute: Typed, share: Any) -> list[float]:
        d = len(attribute.keys)
        shares = list(share) if isinstance(share, (list, tuple)) else []
        # Comparisons that a NaN fails (`0 <= s <= 1`, `not ... <= TOLERANCE`), so NaN shares are rejected.
        valid = all(isinstance(s, (int, float)) and 0 <= s <= 1 for s in shares)
        if len(shares) != d or not valid or not abs(sum(shares) - 1) <= TOLERANCE:
            raise ValueError(f"{attribute.name}: give {d} non-negative shares summing to 1, got {share!r}")
        return [float(s) for s in shares]

    def draw(self, attribute: Typed, shares: Sequence[float], n: int, rng: np.random.Generator, *,
             sampled: bool) -> np.ndarray:
        import numpy as np

        if sampled:
            return rng.choice(len(shares), size=n, p=shares)
        counts = np.floor(np.asarray(shares) * n).astype(np.int64)
        counts[np.argmax(shares)] += n - counts.sum()  # the remainder goes to the largest share
        values = np.repeat(np.arange(len(counts)), counts)
        rng.shuffle(values)
        return values

    def realised(self, attribute: Typed, truth: np.ndarray) -> list[float]:
        import numpy as np

        return list(np.bincount(truth, minlength=len(attribute.keys)) / truth.shape[0])


class Boolean(_Shares):
    """``true`` or ``false``; estimated: the share of true. Binary randomised response."""

    name = "boolean"
    mechanisms = (mechanisms.RR,)
    chart = "line"  # the share of true

    def prepare(self, attribute: Typed, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"must be True or False, got a {type_name(value)}")
        return value

    def keys(self, attribute: Typed) -> tuple[str, ...]:
        return (BOOLEAN_KEY,)

    def values(self, attribute: Typed) -> tuple[Any, ...]:
        return (True,)

    def value_of(self, key: str) -> Any:
        return True

    def complement(self, attribute: Typed) -> tuple[Any, ...]:
        return (False,)

    def example(self, attribute: Typed) -> bool:
        return True

    def population(self, attribute: Typed, share: Any) -> list[float]:
        if not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise ValueError(f"{attribute.name}: the share of True must be a number in [0, 1], got {share!r}")
        return [float(share), 1.0 - float(share)]

    def draw(self, attribute: Typed, shares: Sequence[float], n: int, rng: np.random.Generator, *,
             sampled: bool) -> np.ndarray:
        is_true: np.ndarray = super().draw(attribute, shares, n, rng, sampled=sampled) == 0  # index 0 is True
        return is_true

    def realised(self, attribute: Typed, truth: np.ndarray) -> list[float]:
        return [float(truth.mean())]

    def record_values(self, attribute: Typed, truth: np.ndarray) -> list[Any]:
        return [bool(v) for v in truth]


class Categorical(_Shares):
    """One of 2 to 1024 named categories; estimated: each one's share. GRR or OUE."""

    name = "categorical"
    fields = ("categories",)
    mechanisms = (mechanisms.GRR, mechanisms.OUE)
    ranked = True  # with many categories, what matters is at the top

    def parse(self, raw: Mapping[str, Any], where: str) -> Fields:
        return Fields(categories=_categories(raw.get("categories"), f"{where}.categories"))

    def to_dict(self, attribute: Typed) -> dict[str, Any]:
        return {"categories": list(attribute.categories)}

    def prepare(self, attribute: Typed, value: Any) -> int:
        if not isinstance(value, str):
            raise ValueError(f"must be a category name (str), got a {type_name(value)}")
        index = attribute.index_of.get(value)
        if index is None:
            raise ValueError(f"must be one of the schema's categories ({attribute.categories_shown}); the value "
                             f"given is not")
        return index

    def example(self, attribute: Typed) -> str:
        return attribute.categories[0]

    def record_values(self, attribute: Typed, truth: np.ndarray) -> list[Any]:
        return [attribute.categories[i] for i in truth]


class Histogram(_Shares):
    """A number counted in the buckets its ``edges`` make; from there a categorical attribute."""

    name = "histogram"
    fields = ("edges", "categories")  # the categories are derived: given back, they must match
    mechanisms = (mechanisms.GRR, mechanisms.OUE)

    def parse(self, raw: Mapping[str, Any], where: str) -> Fields:
        edges = _increasing(raw.get("edges"), f"{where}.edges", MIN_CATEGORIES + 1, MAX_BUCKETS + 1)
        categories = bucket_names(edges)
        if "categories" in raw and raw["categories"] != list(categories):
            raise SchemaError(f"{where}.categories", f"{where}.categories is derived from edges and must be "
                                                     f"{show(list(categories))}, got {show(raw['categories'])}")
        return Fields(categories=categories, edges=edges)

    def to_dict(self, attribute: Typed) -> dict[str, Any]:
        return {"edges": list(attribute.edges), "categories": list(attribute.categories)}

    def prepare(self, attribute: Typed, value: Any) -> int:
        return bucket(attribute.edges, _record_number(value))

    def example(self, attribute: Typed) -> int | float:
        return attribute.edges[0]

    def record_values(self, attribute: Typed, truth: np.ndarray) -> list[Any]:
        return [attribute.edges[i] for i in truth]  # each bucket's lower edge is in it


class Numeric(AttributeType):
    """A number in a ``range``; estimated: its mean, in its own units. duchi, pm, hm or laplace."""

    name = "numeric"
    fields = ("range",)
    chart = "line"  # the mean
    # At ε ≤ 0.61 ``hm`` is ``duchi``: the tie goes to duchi, named first.
    mechanisms = (mechanisms.DUCHI, mechanisms.PM, mechanisms.HM, mechanisms.LAPLACE)

    def parse(self, raw: Mapping[str, Any], where: str) -> Fields:
        lo, hi = _increasing(raw.get("range"), f"{where}.range", 2, 2)
        return Fields(range=(lo, hi))

    def to_dict(self, attribute: Typed) -> dict[str, Any]:
        return {"range": list(mechanisms.span_of(attribute))}

    def prepare(self, attribute: Typed, value: Any) -> float:
        lo, hi = mechanisms.span_of(attribute)
        return float(min(max(_record_number(value), lo), hi))

    def keys(self, attribute: Typed) -> tuple[str, ...]:
        return (MEAN_KEY,)

    def extent(self, attribute: Typed) -> float:
        lo, hi = mechanisms.span_of(attribute)
        return float(hi - lo)

    def example(self, attribute: Typed) -> int | float:
        return mechanisms.span_of(attribute)[0]

    def population(self, attribute: Typed, share: Any) -> list[float]:
        lo, hi = mechanisms.span_of(attribute)
        if not is_number(share) or not lo <= share <= hi:
            raise ValueError(f"{attribute.name}: the mean must be a number from {lo} to {hi}, got {share!r}")
        return [float(share)]

    def draw(self, attribute: Typed, shares: Sequence[float], n: int, rng: np.random.Generator, *,
             sampled: bool) -> np.ndarray:
        import numpy as np

        lo, hi = mechanisms.span_of(attribute)
        m = (shares[0] - lo) / (hi - lo)
        if 0 < m < 1:
            return lo + (hi - lo) * rng.beta(m * CONCENTRATION, (1 - m) * CONCENTRATION, size=n)
        return np.full(n, float(shares[0]))

    def realised(self, attribute: Typed, truth: np.ndarray) -> list[float]:
        return [float(truth.mean())]

    def record_values(self, attribute: Typed, truth: np.ndarray) -> list[Any]:
        return [float(v) for v in truth]


class String(_Shares):
    """Any text (a URL, an app's name, an error identifier); estimated: the share of each candidate
    string (listed in the schema). Optimal local hashing (DESIGN.md, "Strings").

    A value is prepared before it is hashed: each lone surrogate, control (Cc) and format (Cf)
    character becomes U+FFFD, then NFC, then its first ``max_length`` code points. A record is
    never refused for what its string holds. Candidates are prepared alike, and must be distinct
    after that. Simulation draws candidates by index, as a categorical attribute's categories."""

    name = "string"
    fields = ("max_length", "candidates", "discover", "alphabet", "levels")
    mechanisms = (mechanisms.OLH,)
    ranked = True
    candidates_apart = True

    def parse(self, raw: Mapping[str, Any], where: str) -> Fields:
        max_length = raw.get("max_length", DEFAULT_STRING_LENGTH)
        if not is_int(max_length) or not 1 <= max_length <= MAX_STRING_LENGTH:
            raise SchemaError(f"{where}.max_length", f"{where}.max_length must be an integer from 1 to "
                                                     f"{MAX_STRING_LENGTH}, got {show(max_length)}")
        discover = raw.get("discover", False)
        if not isinstance(discover, bool):
            raise SchemaError(f"{where}.discover", f"{where}.discover must be true or false, got {show(discover)}")
        alphabet = _alphabet(raw["alphabet"], f"{where}.alphabet") if "alphabet" in raw else ""
        levels: tuple[int, ...] = ()
        if discover:
            if not alphabet:
                raise SchemaError(f"{where}.alphabet", f"{where}.alphabet is required to discover strings: the code "
                                                       f"points a discovered string may hold (others are found as "
                                                       f"U+FFFD), e.g. \"abcdefghijklmnopqrstuvwxyz0123456789.-\"")
            levels = (_levels(raw["levels"], max_length, alphabet, f"{where}.levels") if "levels" in raw
                      else discovery.derived_levels(max_length, alphabet))
        elif "levels" in raw:
            raise SchemaError(f"{where}.levels", f"{where}.levels belong to discovery: give them with "
                                                 f"\"discover\": true")
        return Fields(max_length=max_length, candidates=parse_candidates(raw.get("candidates", []), max_length,
                                                                         f"{where}.candidates"),
                      discover=discover, alphabet=alphabet, levels=levels)

    def to_dict(self, attribute: Typed) -> dict[str, Any]:
        out: dict[str, Any] = {"max_length": attribute.max_length, "candidates": list(attribute.candidates),
                               "discover": attribute.discover}
        if attribute.alphabet:
            out["alphabet"] = attribute.alphabet
        if attribute.discover:
            out["levels"] = list(attribute.levels)
        return out

    def prepare(self, attribute: Typed, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"must be a string (str), got a {type_name(value)}")
        return prepare_text(value, attribute.max_length)

    def keys(self, attribute: Typed) -> tuple[str, ...]:
        return attribute.candidates

    def source(self, attribute: Typed, key: str) -> str | None:
        return "listed"  # a key of the attribute is a listed candidate; stored ones carry their own source

    def candidate_rows(self, attribute: Typed, more: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
        """Each candidate (listed, then ``more``) with its fingerprint x and the other candidates
        that share it: no report can tell those apart, so their estimates are of the strings'
        combined share."""
        pairs = [(c, self.source(attribute, c)) for c in attribute.candidates] + list(more)
        fingerprints = [int(x) for x in mechanisms.olh.fingerprints(tuple(c for c, _ in pairs))]
        sharing: dict[int, list[str]] = {}
        for (candidate, _), x in zip(pairs, fingerprints):
            sharing.setdefault(x, []).append(candidate)
        return [{"value": c, "source": source, "fingerprint": x, "collides_with": [o for o in sharing[x] if o != c]}
                for (c, source), x in zip(pairs, fingerprints)]

    def example(self, attribute: Typed) -> str:
        return attribute.candidates[0] if attribute.candidates else "example"

    def record_values(self, attribute: Typed, truth: np.ndarray) -> list[Any]:
        return [attribute.candidates[i] for i in truth]


BOOLEAN, CATEGORICAL, HISTOGRAM, NUMERIC, STRING = Boolean(), Categorical(), Histogram(), Numeric(), String()
REGISTRY: dict[str, AttributeType] = {t.name: t for t in (BOOLEAN, CATEGORICAL, NUMERIC, HISTOGRAM, STRING)}
# Every type's own fields: a field of another type is refused on an attribute.
OWN_FIELDS = tuple(dict.fromkeys(f for t in REGISTRY.values() for f in t.fields))


def get(name: Any) -> AttributeType:
    """The type called ``name``; ``ValueError`` saying what it must be if there is none."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"must be one of {', '.join(REGISTRY)}, got {show(name)}") from None


def prepare_text(text: str, max_length: int | None) -> str:
    """A string value as the device hashes it (DESIGN.md, "Strings"): each lone surrogate, control
    character (Cc) and format character (Cf) becomes U+FFFD; then NFC; then the first
    ``max_length`` code points (never UTF-16 units or graphemes; None: all of them)."""
    cleaned = "".join(REPLACEMENT if 0xD800 <= ord(c) <= 0xDFFF or unicodedata.category(c) in ("Cc", "Cf") else c
                      for c in text)
    return unicodedata.normalize("NFC", cleaned)[:max_length]


def bucket(edges: Sequence[int | float], x: int | float) -> int:
    """The index of the histogram bucket of ``x``, clipped to ``[e0, ek]`` first (the last
    bucket is closed: ``ek`` is in it)."""
    return min(len(edges) - 2, max(0, bisect_right(edges, x) - 1))


def number_text(value: int | float) -> str:
    """How a bucket name writes an edge: an integer without a decimal point, else Python's shortest
    round-tripping form (``0.5``, ``1e-07``)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if isinstance(value, int) else repr(value)


def bucket_names(edges: tuple[int | float, ...]) -> tuple[str, ...]:
    """The names of the buckets that ``edges`` make: ``[e0, e1)``, ..., ``[e(k-1), ek]``."""
    texts = [number_text(e) for e in edges]
    last = len(edges) - 2
    return tuple(f"[{a}, {b}{']' if i == last else ')'}" for i, (a, b) in enumerate(zip(texts, texts[1:])))


def _record_number(value: Any) -> float:
    if not is_number(value) or abs(value) > MAX_RECORD_NUMBER:
        raise ValueError(f"must be a finite number (int or float, not a bool), got a {type_name(value)} or a "
                         f"number out of bounds")
    return value


def _increasing(raw: Any, where: str, least: int, most: int) -> tuple[int | float, ...]:
    """A list of ``least`` to ``most`` finite, strictly increasing numbers (a range, or edges),
    each at most :data:`MAX_MAGNITUDE` and each step at least :data:`MIN_RELATIVE_WIDTH` of the
    larger magnitude (and of 1)."""
    if not isinstance(raw, list) or not least <= len(raw) <= most:
        count = f"{least}" if least == most else f"{least} to {most}"
        raise SchemaError(where, f"{where} must be a list of {count} increasing numbers, got {show(raw)}")
    for i, value in enumerate(raw):
        if not is_number(value) or not abs(value) <= MAX_MAGNITUDE:
            raise SchemaError(f"{where}[{i}]", f"{where}[{i}] must be a finite number of magnitude at most "
                                               f"{MAX_MAGNITUDE:g}, got {show(value)}")
        if i and not float(value) > float(raw[i - 1]):
            raise SchemaError(f"{where}[{i}]", f"{where} must be strictly increasing; {show(value)} follows "
                                               f"{show(raw[i - 1])}")
        if i and not value - raw[i - 1] >= MIN_RELATIVE_WIDTH * max(1.0, abs(value), abs(raw[i - 1])):
            raise SchemaError(f"{where}[{i}]", f"{where}[{i}] must exceed {show(raw[i - 1])} by at least "
                                               f"{MIN_RELATIVE_WIDTH:g} of the larger number (and of 1; choose a "
                                               f"smaller unit), got {show(value)}")
    return tuple(raw)


def _categories(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not MIN_CATEGORIES <= len(raw) <= MAX_CATEGORIES:
        raise SchemaError(
            where, f"{where} must be a list of {MIN_CATEGORIES} to {MAX_CATEGORIES} strings, got {show(raw)}"
        )
    seen: set[str] = set()
    for i, category in enumerate(raw):
        if not isinstance(category, str) or not 1 <= len(category) <= MAX_CATEGORY_LENGTH:
            raise SchemaError(
                f"{where}[{i}]", f"{where}[{i}] must be a non-empty string of at most {MAX_CATEGORY_LENGTH} "
                f"characters, got {show(category)}"
            )
        require_text(category, f"{where}[{i}]")
        # Two spellings of one text (a precomposed é and e + a combining accent) would look the same
        # on every page and in every CSV.
        normal = unicodedata.normalize("NFC", category)
        if normal in seen:
            raise SchemaError(f"{where}[{i}]", f"{where} must be distinct, {category!r} appears twice "
                                               f"(compared after Unicode NFC normalisation)")
        seen.add(normal)
    return tuple(raw)


def parse_candidates(raw: Any, max_length: int, where: str) -> tuple[str, ...]:
    """A string attribute's candidates: at most :data:`MAX_CANDIDATES` strings, each prepared as a
    value is (:func:`prepare_text`), at most ``max_length`` code points before the cut, and
    distinct after preparation."""
    if not isinstance(raw, list) or len(raw) > MAX_CANDIDATES:
        raise SchemaError(where, f"{where} must be a list of at most {MAX_CANDIDATES} strings, got {show(raw)}")
    seen: dict[str, int] = {}
    for i, candidate in enumerate(raw):
        if not isinstance(candidate, str):
            raise SchemaError(f"{where}[{i}]", f"{where}[{i}] must be a string, got {show(candidate)}")
        prepared = prepare_text(candidate, None)
        if len(prepared) > max_length:
            raise SchemaError(f"{where}[{i}]", f"{where}[{i}] has {len(prepared)} code points after preparation; "
                                               f"a device keeps only the first max_length ({max_length})")
        if prepared in seen:
            raise SchemaError(f"{where}[{i}]", f"{where} must be distinct after preparation (U+FFFD for control, "
                                               f"format and surrogate characters, then NFC); {where}[{i}] is the "
                                               f"same as {where}[{seen[prepared]}]")
        seen[prepared] = i
    return tuple(seen)


def _levels(raw: Any, max_length: int, alphabet: str, where: str) -> tuple[int, ...]:
    """Given discovery levels: increasing prefix lengths from 1, the last ``max_length``, each
    level's candidate set within :data:`.discovery.MAX_LEVEL_CANDIDATES` (its first level
    enumerates every prefix, a later one extends K prefixes by its step)."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= max_length:
        raise SchemaError(where, f"{where} must be a list of 1 to max_length ({max_length}) increasing prefix "
                                 f"lengths ending at max_length, got {show(raw)}")
    for i, length in enumerate(raw):
        low = raw[i - 1] + 1 if i and is_int(raw[i - 1]) else 1
        if not is_int(length) or not low <= length <= max_length:
            raise SchemaError(f"{where}[{i}]", f"{where}[{i}] must be an integer from {low} to max_length "
                                               f"({max_length}), increasing, got {show(length)}")
    if raw[-1] != max_length:
        raise SchemaError(f"{where}[{len(raw) - 1}]", f"{where} must end at max_length ({max_length}): the last "
                                                      f"level's prefixes are whole values, got {show(raw[-1])}")
    for i, count in enumerate(discovery.level_candidates(raw, alphabet)):
        if count > discovery.MAX_LEVEL_CANDIDATES:
            what = (f"the first level enumerates every prefix of {raw[0]} code point(s)" if i == 0 else
                    f"a level {raw[i] - raw[i - 1]} code point(s) longer than the one before extends "
                    f"{discovery.KEEP} prefixes")
            shown = f"{count:,}" if count < 10**12 else "over 10^12"
            raise SchemaError(f"{where}[{i}]", f"{where}[{i}]: {what}, which with this alphabet ({len(alphabet)} code "
                                               f"points, U+FFFD and the padding) tests {shown} candidates, over the "
                                               f"{discovery.MAX_LEVEL_CANDIDATES:,} a level may test; take shorter "
                                               f"steps")
    return tuple(raw)


def _alphabet(raw: Any, where: str) -> str:
    """A discovery alphabet: NFC text of at most :data:`MAX_ALPHABET` distinct code points, none of
    them U+FFFD, U+0000, a control or a format character."""
    if not isinstance(raw, str) or not 1 <= len(raw) <= MAX_ALPHABET:
        raise SchemaError(where, f"{where} must be a string of 1 to {MAX_ALPHABET} code points, got {show(raw)}")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in raw):
        raise SchemaError(where, f"{where} must be valid Unicode text; it contains a lone UTF-16 surrogate")
    if unicodedata.normalize("NFC", raw) != raw:
        raise SchemaError(where, f"{where} must be in Unicode NFC")
    if REPLACEMENT in raw:
        raise SchemaError(where, f"{where} must not contain U+FFFD (it stands for characters outside the alphabet)")
    require_text(raw, where)  # U+0000 is a control character
    if len(set(raw)) != len(raw):
        raise SchemaError(where, f"{where} must not repeat a code point")
    return raw
