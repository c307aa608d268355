"""The schema model: parse, validate and derive a telemetry schema.

A schema names the attributes a report carries and fixes how each is randomised. The operator
publishes it; the server answers with the *derived* form (per-attribute ``epsilon``, resolved
``mechanism``, ``p`` and ``q`` filled in); clients randomise with exactly those parameters.
Parsing the derived form again gives the same schema, so a derived schema can be re-published.

Every invalid schema raises :class:`SchemaError` (a ``ValueError``) with one sentence naming
the field and the bad value, and the field itself in ``.field`` for code to use.
"""

from __future__ import annotations

import math
import re
import unicodedata
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from collections.abc import Mapping  # typing.Mapping's isinstance() is ~10x slower
from typing import Any

from . import mechanisms

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_EPSILON = 20.0
MAX_EPSILON_PERMANENT = 50.0
MAX_ATTRIBUTES = 64
MIN_CATEGORIES = 2
MAX_CATEGORIES = 1024
MAX_CATEGORY_LENGTH = 64
MAX_BUCKETS = MAX_CATEGORIES
# Range ends and bucket edges are at most this in magnitude, so they convert to doubles exactly enough.
MAX_MAGNITUDE = 1e15
MAX_DESCRIPTION_LENGTH = 10_000
MAX_VERSION = 2**31 - 1
EPSILON_SUM_TOLERANCE = 1e-9
# How a boolean attribute's one estimate value (the share of true) is keyed in counters and estimates.
BOOLEAN_KEY = "true"
# How a numeric attribute's one estimate value (its mean) is keyed, and shown in the API's "value".
MEAN_KEY = "mean"
# p and q given back in a re-posted derived schema must match what we derive.
PARAMETER_TOLERANCE = 1e-9

WINDOWS = ("hour", "day")
SPLITS = ("equal", "sample")
TYPES = ("boolean", "categorical", "numeric", "histogram")

_SCHEMA_FIELDS = {"name", "version", "epsilon", "epsilon_permanent", "window", "split", "description", "attributes"}
# "permanent" and "instantaneous" are derived (memoised schemas) and, like p and q, checked when given back.
_ATTRIBUTE_FIELDS = {"name", "type", "categories", "range", "edges", "mechanism", "epsilon", "p", "q", "permanent",
                     "instantaneous"}


class SchemaError(ValueError):
    """A schema is invalid. ``field`` says where (``attributes[2].categories``), ``str()`` says what."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Attribute:
    """One attribute of a schema, with its derived randomisation parameters.

    ``p`` is the probability that a report "hits" a value given the device's true value is that
    value, ``q`` the probability given it is another; see :mod:`ldp_telemetry.shared.mechanisms`.
    """

    name: str
    type: str  # one of TYPES
    epsilon: float
    mechanism: str  # the registry name of ``mech``
    p: float
    q: float
    categories: tuple[str, ...] = ()  # a histogram's are its buckets' names, derived from its edges
    memo: mechanisms.Memo | None = None  # the permanent and instantaneous layers of a memoised attribute
    range: tuple[int | float, int | float] | None = None  # a numeric attribute's [lo, hi], as given
    edges: tuple[int | float, ...] = ()  # a histogram's bucket edges, as given
    # category -> index, for O(1) validation and decoding of reports
    index_of: dict[str, int] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index_of", {c: i for i, c in enumerate(self.categories)})

    @property
    def mech(self) -> mechanisms.Mechanism:
        """The registry object of :attr:`mechanism`: its encoder, wire check, estimator, privacy."""
        return mechanisms.REGISTRY[self.mechanism]

    @property
    def categories_shown(self) -> str:
        """The categories for an error message: the first few, and how many there are."""
        limit = 8
        shown = ", ".join(repr(c) for c in self.categories[:limit])
        return shown + (f", ... ({len(self.categories)} in all)" if len(self.categories) > limit else "")

    @property
    def values(self) -> tuple[Any, ...]:
        """The values an estimate is made for: ``True`` for a boolean, ``"mean"`` for a numeric
        attribute, else each category (a histogram's buckets)."""
        return (True,) if self.type == "boolean" else self.keys

    @property
    def keys(self) -> tuple[str, ...]:
        """How each of :attr:`values` is stored and keyed: :data:`BOOLEAN_KEY`, :data:`MEAN_KEY`,
        else the category."""
        if self.type == "boolean":
            return (BOOLEAN_KEY,)
        return (MEAN_KEY,) if self.type == "numeric" else self.categories

    def value_of(self, key: str) -> Any:
        """The JSON value of a stored ``key``: ``True`` for a boolean, else the key itself."""
        return True if self.type == "boolean" else key

    def bucket(self, x: int | float) -> int:
        """The index of the histogram bucket of ``x``, clipped to ``[e0, ek]`` first (the last
        bucket is closed: ``ek`` is in it)."""
        edges = self.edges
        return min(len(edges) - 2, max(0, bisect_right(edges, x) - 1))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.type == "numeric":
            out["range"] = list(self.range)  # type: ignore[arg-type]
        if self.type == "histogram":
            out["edges"] = list(self.edges)
        if self.categories:
            out["categories"] = list(self.categories)
        out.update(epsilon=self.epsilon, mechanism=self.mechanism, p=self.p, q=self.q)
        out.update(self._memo_fields())
        return out

    def _memo_fields(self) -> dict[str, Any]:
        """The derived layers of a memoised attribute, as the derived schema shows them."""
        if self.memo is None:
            return {}
        m = self.memo
        return {"permanent": {"epsilon": m.epsilon_permanent, "p": m.permanent_p, "q": m.permanent_q},
                "instantaneous": {"p": m.instant_p, "q": m.instant_q}}


@dataclass(frozen=True)
class Schema:
    """A parsed, validated and derived schema. Build one with :func:`parse_schema`."""

    name: str
    version: int
    epsilon: float
    window: str
    split: str
    description: str
    attributes: tuple[Attribute, ...]
    epsilon_permanent: float | None = None  # memoisation's bound on what a value can ever cost
    # name -> attribute, built once: reports are validated against it on the ingest hot path
    by_name: dict[str, Attribute] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {a.name: a for a in self.attributes})

    def attribute(self, name: str) -> Attribute:
        """The attribute called ``name``; ``KeyError`` if there is none."""
        return self.by_name[name]

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(self.by_name)

    @cached_property
    def value_ranks(self) -> dict[tuple[str, str], int]:
        """``(attribute, value key) -> position`` in the schema's order: estimates are read in it."""
        keys = ((a.name, key) for a in self.attributes for key in a.keys)
        return {pair: rank for rank, pair in enumerate(keys)}

    def to_dict(self) -> dict[str, Any]:
        """The derived schema as the server serves it (JSON-ready)."""
        return {
            "name": self.name,
            "version": self.version,
            "epsilon": self.epsilon,
            "window": self.window,
            "split": self.split,
            "description": self.description,
            **({} if self.epsilon_permanent is None else {"epsilon_permanent": self.epsilon_permanent}),
            "attributes": [a.to_dict() for a in self.attributes],
        }


def parse_schema(obj: Any) -> Schema:
    """Validate a schema (as decoded from JSON, or a :class:`Schema`) and derive its parameters.

    Raises :class:`SchemaError` with a sentence naming the field and the bad value.
    """
    if isinstance(obj, Schema):
        return obj
    if not isinstance(obj, Mapping):
        raise SchemaError("schema", f"a schema must be a JSON object, got {_kind(obj)}")
    _reject_unknown(obj, _SCHEMA_FIELDS, "schema")
    name = _name(obj.get("name"), "name")
    version = obj.get("version")
    if not _is_int(version) or not 1 <= version <= MAX_VERSION:
        raise SchemaError("version", f"version must be an integer from 1 to {MAX_VERSION}, got {_show(version)}")
    epsilon = _epsilon(obj.get("epsilon"), "epsilon")
    window = obj.get("window", "day")
    if window not in WINDOWS:
        raise SchemaError("window", f"window must be one of {', '.join(WINDOWS)}, got {_show(window)}")
    split = obj.get("split", "equal")
    if split not in SPLITS:
        raise SchemaError("split", f"split must be one of {', '.join(SPLITS)}, got {_show(split)}")
    description = obj.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_LENGTH:
        raise SchemaError(
            "description", f"description must be a string of at most {MAX_DESCRIPTION_LENGTH} characters, "
            f"got {_show(description)}"
        )
    _require_text(description, "description")
    raw_attributes = obj.get("attributes")
    if not isinstance(raw_attributes, list) or not 1 <= len(raw_attributes) <= MAX_ATTRIBUTES:
        raise SchemaError(
            "attributes", f"attributes must be a list of 1 to {MAX_ATTRIBUTES} attributes, got {_show(raw_attributes)}"
        )
    epsilons = _split_budget(raw_attributes, epsilon, split)
    permanents = _permanent_budget(obj, epsilon, epsilons, split)
    attributes = tuple(
        _attribute(raw, eps, permanent, f"attributes[{i}]")
        for i, (raw, eps, permanent) in enumerate(zip(raw_attributes, epsilons, permanents))
    )
    seen: set[str] = set()
    for i, attribute in enumerate(attributes):
        if attribute.name in seen:
            raise SchemaError(f"attributes[{i}].name",
                              f"attribute names must be distinct, {attribute.name!r} appears twice")
        seen.add(attribute.name)
    return Schema(name, version, epsilon, window, split, description, attributes,
                  None if permanents[0] is None else float(obj["epsilon_permanent"]))


def _permanent_budget(obj: Mapping, epsilon: float, epsilons: list[float], split: str) -> list[float | None]:
    """Each attribute's share of ε∞, shared as ε is; all None when the schema is not memoised.

    Under ``split: "sample"`` a device may report each attribute in turn, so each permanent layer
    gets ε∞/k, and a report's ε must stay below that."""
    if "epsilon_permanent" not in obj:
        return [None] * len(epsilons)
    total = obj["epsilon_permanent"]
    if not is_number(total) or not epsilon < total <= MAX_EPSILON_PERMANENT:
        raise SchemaError("epsilon_permanent", f"epsilon_permanent must be a number above epsilon ({epsilon:g}) "
                                               f"and at most {MAX_EPSILON_PERMANENT:g}, got {_show(total)}")
    k = len(epsilons)
    if split == "sample":
        if not epsilon < total / k:
            raise SchemaError("epsilon_permanent", f"under split 'sample' each attribute's permanent layer gets "
                                                   f"epsilon_permanent / {k} = {total / k:g}, which must exceed "
                                                   f"epsilon ({epsilon:g})")
        return [total / k] * k
    return [total * e / epsilon for e in epsilons]


def _split_budget(raw_attributes: list, total: float, split: str) -> list[float]:
    """Each attribute's ε: given explicitly for all (or none), else ε/k or the whole ε (sample)."""
    for i, raw in enumerate(raw_attributes):
        if not isinstance(raw, Mapping):
            raise SchemaError(f"attributes[{i}]", f"attributes[{i}] must be a JSON object, got {_kind(raw)}")
    given = [raw.get("epsilon") for raw in raw_attributes]
    if all(e is None for e in given):
        share = total if split == "sample" else total / len(raw_attributes)
        return [share] * len(raw_attributes)
    if any(e is None for e in given):
        raise SchemaError("attributes", "attributes[].epsilon must be given for every attribute or for none")
    values = [_epsilon(e, f"attributes[{i}].epsilon") for i, e in enumerate(given)]
    if split == "sample":
        # Each report carries one attribute with the whole budget.
        for i, e in enumerate(values):
            if abs(e - total) > EPSILON_SUM_TOLERANCE:
                raise SchemaError(
                    f"attributes[{i}].epsilon", f"attributes[{i}].epsilon must equal the total epsilon {total} under split "
                    f"'sample', got {e}"
                )
    elif abs(math.fsum(values) - total) > EPSILON_SUM_TOLERANCE:
        raise SchemaError(
            "attributes", f"attributes[].epsilon must sum to the total epsilon {total}, got {math.fsum(values)}"
        )
    return values


def _attribute(raw: Mapping, epsilon: float, epsilon_permanent: float | None, where: str) -> Attribute:
    _reject_unknown(raw, _ATTRIBUTE_FIELDS, where)
    name = _name(raw.get("name"), f"{where}.name")
    kind = raw.get("type")
    if kind not in TYPES:
        raise SchemaError(f"{where}.type", f"{where}.type must be one of {', '.join(TYPES)}, got {_show(kind)}")
    allowed = {"categorical": "categories", "numeric": "range", "histogram": "edges"}
    for own in ("categories", "range", "edges"):
        if own in raw and allowed.get(kind) != own and not (kind == "histogram" and own == "categories"):
            raise SchemaError(f"{where}.{own}", f"{where}.{own} is not allowed on a {kind} attribute")
    categories: tuple[str, ...] = ()
    value_range = None
    edges: tuple[int | float, ...] = ()
    if kind == "categorical":
        categories = _categories(raw.get("categories"), f"{where}.categories")
    elif kind == "numeric":
        value_range = _increasing(raw.get("range"), f"{where}.range", 2, 2)
    elif kind == "histogram":
        edges = _increasing(raw.get("edges"), f"{where}.edges", MIN_CATEGORIES + 1, MAX_BUCKETS + 1)
        categories = bucket_names(edges)
        if "categories" in raw and raw["categories"] != list(categories):
            raise SchemaError(f"{where}.categories", f"{where}.categories is derived from edges and must be "
                                                     f"{_show(list(categories))}, got {_show(raw['categories'])}")
    d = max(2, len(categories))  # a boolean has two values
    try:
        mechanism = mechanisms.resolve(kind, raw.get("mechanism", mechanisms.AUTO), epsilon=epsilon, d=d)
    except ValueError as exc:
        raise SchemaError(f"{where}.mechanism",
                          f"{where}.mechanism {exc}, got {_show(raw.get('mechanism'))}") from None
    p, q = mechanism.parameters(epsilon=epsilon, d=d)
    if not p > q:  # e^ε rounds to 1: the reports carry nothing, and the estimator would divide by 0
        raise SchemaError(f"{where}.epsilon", f"{where}.epsilon must be large enough that p exceeds q in "
                                               f"floating point; {epsilon!r} is too small")
    memo = None
    if epsilon_permanent is not None:
        if not mechanism.memoisable:
            raise SchemaError(f"{where}.type", f"{where} cannot be memoised ({mechanism.title}); publish it in a "
                                               f"schema without epsilon_permanent")
        memo = mechanism.memoise(epsilon=epsilon, epsilon_permanent=epsilon_permanent, d=d)
        p, q = memo.p, memo.q
    for field, derived in (("p", p), ("q", q)):
        if field in raw:
            given = raw[field]
            # 0 <= given <= 1 first: subtracting a float from a huge JSON int overflows.
            if not is_number(given) or not 0 <= given <= 1 or abs(given - derived) > PARAMETER_TOLERANCE:
                raise SchemaError(
                    f"{where}.{field}", f"{where}.{field} is derived from epsilon and mechanism and must be {derived}, "
                    f"got {_show(given)}"
                )
    attribute = Attribute(name, kind, epsilon, mechanism.name, p, q, categories, memo,
                          None if value_range is None else (value_range[0], value_range[1]), edges)
    derived = attribute.to_dict()
    for key in ("permanent", "instantaneous"):
        if key in raw and raw[key] != derived.get(key):
            raise SchemaError(f"{where}.{key}", f"{where}.{key} is derived from epsilon_permanent and must be "
                                                f"{derived.get(key)}, got {_show(raw[key])}")
    return attribute


def _increasing(raw: Any, where: str, least: int, most: int) -> tuple[int | float, ...]:
    """A list of ``least`` to ``most`` finite, strictly increasing numbers (a range, or edges)."""
    if not isinstance(raw, list) or not least <= len(raw) <= most:
        count = f"{least}" if least == most else f"{least} to {most}"
        raise SchemaError(where, f"{where} must be a list of {count} increasing numbers, got {_show(raw)}")
    for i, value in enumerate(raw):
        if not is_number(value) or not abs(value) <= MAX_MAGNITUDE:
            raise SchemaError(f"{where}[{i}]", f"{where}[{i}] must be a finite number of magnitude at most "
                                               f"{MAX_MAGNITUDE:g}, got {_show(value)}")
        if i and not float(value) > float(raw[i - 1]):
            raise SchemaError(f"{where}[{i}]", f"{where} must be strictly increasing; {_show(value)} follows "
                                               f"{_show(raw[i - 1])}")
    return tuple(raw)


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


def _categories(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not MIN_CATEGORIES <= len(raw) <= MAX_CATEGORIES:
        raise SchemaError(
            where, f"{where} must be a list of {MIN_CATEGORIES} to {MAX_CATEGORIES} strings, got {_show(raw)}"
        )
    seen: set[str] = set()
    for i, category in enumerate(raw):
        if not isinstance(category, str) or not 1 <= len(category) <= MAX_CATEGORY_LENGTH:
            raise SchemaError(
                f"{where}[{i}]", f"{where}[{i}] must be a non-empty string of at most {MAX_CATEGORY_LENGTH} "
                f"characters, got {_show(category)}"
            )
        _require_text(category, f"{where}[{i}]")
        # Two spellings of one text (a precomposed é and e + a combining accent) would look the same
        # on every page and in every CSV.
        normal = unicodedata.normalize("NFC", category)
        if normal in seen:
            raise SchemaError(f"{where}[{i}]", f"{where} must be distinct, {category!r} appears twice "
                                               f"(compared after Unicode NFC normalisation)")
        seen.add(normal)
    return tuple(raw)


def _require_text(text: str, field: str) -> None:
    """Text that shows as what it is: valid Unicode, without control or format characters."""
    # JSON can escape a lone UTF-16 surrogate ("\ud800"), but that is no text: no page, CSV or
    # UTF-8 file could show it. Client and server must refuse it alike.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SchemaError(field, f"{field} must be valid Unicode text; it contains a lone UTF-16 surrogate") from None
    # C0 and C1 controls (Cc) and format characters (Cf: U+202E RIGHT-TO-LEFT OVERRIDE, zero-width
    # spaces, ...) can make a name read as another one, or break a log line, a CSV or a terminal.
    for character in text:
        if unicodedata.category(character) in ("Cc", "Cf"):
            raise SchemaError(field, f"{field} must not contain control or format characters; it contains "
                                     f"U+{ord(character):04X} ({unicodedata.name(character, 'a control character')})")


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise SchemaError(
            field, f"{field} must match [a-z0-9][a-z0-9_-]{{0,63}} (lower-case letters, digits, _ and -), "
            f"got {_show(value)}"
        )
    return value


def _epsilon(value: Any, field: str) -> float:
    if not is_number(value) or not 0 < value <= MAX_EPSILON:
        raise SchemaError(field, f"{field} must be a number in (0, {MAX_EPSILON:g}], got {_show(value)}")
    return float(value)


def _reject_unknown(obj: Mapping, allowed: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise SchemaError(where, f"{where} has unknown field(s): {', '.join(unknown)}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A JSON number: an int (however large) or a finite float, not a bool."""
    if isinstance(value, bool):
        return False
    # An int is finite however large; math.isfinite() would overflow on a huge one.
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number" if is_number(value) else type(value).__name__
    )


def _show(value: Any, limit: int = 60) -> str:
    """A short, safe rendering of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
