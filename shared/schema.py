"""The schema model: parse, validate and derive a telemetry schema.

A schema names the attributes a report carries and fixes how each is randomised. The operator
publishes it; the server answers with the *derived* form (per-attribute ``epsilon``, resolved
``mechanism``, ``p`` and ``q``, and every other parameter the mechanism's encoder and estimator
use, named as DESIGN.md names them: ``C``, ``z``, ``C_pm``, ``alpha``, ``scale``, and a memoised
attribute's ``permanent`` and ``instantaneous`` layers); clients randomise with exactly those
parameters. Parsing the derived form again gives the same schema, so a derived schema can be
re-published.

Every number of a schema is checked here, once, when it is parsed (finite, in range, and each
attribute's ε at least :data:`MIN_EPSILON`), so nothing derived from it later can divide by
zero or overflow. What differs by attribute type is the type object's (:mod:`.attribute_types`).

Every invalid schema raises :class:`SchemaError` (a ``ValueError``) with one sentence naming
the field and the bad value, and the field itself in ``.field`` for code to use.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping  # typing.Mapping's isinstance() is ~10x slower
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeGuard

from . import attribute_types, mechanisms
from .attribute_types import (BOOLEAN_KEY, MAX_BUCKETS, MAX_CATEGORIES, MAX_CATEGORY_LENGTH, MAX_MAGNITUDE, MEAN_KEY,
                              MIN_CATEGORIES, bucket_names, number_text)
from .checks import TOLERANCE, SchemaError, close, is_int, is_number, kind, parse_digits, require_text, show

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_EPSILON = 20.0
# The least ε an attribute may get (its share of the report's ε). At ε = 1e-4 one report's share
# estimate has a variance of about 1/ε² = 10⁸ (binary RR: q(1-q)/(p-q)² with p - q ≈ ε/2), so even
# one report from each of 8·10⁹ people gives a 95% interval of ±1.96/(ε√n) ≈ ±22 percentage
# points: below this bound a report says next to nothing to anyone. Above it every derived number
# is finite and well-conditioned (C = (e^ε + 1)/(e^ε - 1) ≤ 2·10⁴, laplace's scale 2/ε ≤ 2·10⁴,
# e^ε - 1 computed to 12 significant digits), so no later division can fail.
MIN_EPSILON = 1e-4
MAX_EPSILON_PERMANENT = 50.0
MAX_ATTRIBUTES = 64
MAX_DESCRIPTION_LENGTH = 10_000
MAX_VERSION = 2**31 - 1
# A version written in a URL or query: ASCII digits, at most as many as MAX_VERSION has.
VERSION_DIGITS = len(str(MAX_VERSION))

WINDOWS = ("hour", "day")
SPLITS = ("equal", "sample")
TYPES = tuple(attribute_types.REGISTRY)

_SCHEMA_FIELDS = {"name", "version", "epsilon", "epsilon_permanent", "window", "split", "description", "attributes"}
# Parameters every mechanism shows in the derived schema besides p and q (C, z, C_pm, alpha, scale).
_SHOWN_PARAMETERS = tuple(dict.fromkeys(name for m in mechanisms.REGISTRY.values()
                                        for name in m.shown_parameters(epsilon=1.0, d=2)))
# "permanent" and "instantaneous" are derived (memoised schemas) and, like p and q, checked when given back.
_ATTRIBUTE_FIELDS = {"name", "type", "mechanism", "epsilon", "p", "q", "permanent", "instantaneous",
                     *attribute_types.OWN_FIELDS, *_SHOWN_PARAMETERS}

__all__ = [
    "BOOLEAN_KEY", "MAX_ATTRIBUTES", "MAX_BUCKETS", "MAX_CATEGORIES", "MAX_CATEGORY_LENGTH", "MAX_DESCRIPTION_LENGTH",
    "MAX_EPSILON", "MAX_EPSILON_PERMANENT", "MAX_MAGNITUDE", "MAX_VERSION", "MEAN_KEY", "MIN_CATEGORIES",
    "MIN_EPSILON", "NAME_RE", "SPLITS", "TOLERANCE", "TYPES", "WINDOWS", "Attribute", "Schema", "SchemaError",
    "bucket_names", "is_number", "is_version", "number_text", "parse_schema", "version_from_text",
]


def is_version(value: Any) -> TypeGuard[int]:
    """A schema version as JSON carries it: an integer from 1 to :data:`MAX_VERSION`, not a bool.
    Bounded so that a lookup never gets an integer the database cannot hold."""
    return is_int(value) and 1 <= value <= MAX_VERSION


def version_from_text(text: str) -> int | None:
    """The schema version a URL path or query parameter writes (ASCII digits, at most
    :data:`VERSION_DIGITS` of them), or None for text no schema version can be."""
    number = parse_digits(text, VERSION_DIGITS)
    return number if number is not None and is_version(number) else None


@dataclass(frozen=True)
class Attribute:
    """One attribute of a schema, with its derived randomisation parameters.

    ``p`` is the probability that a report "hits" a value given the device's true value is that
    value, ``q`` the probability given it is another; see :mod:`ldp_telemetry.shared.mechanisms`.
    What depends on its type is its type object's (:attr:`kind`); what depends on how it is
    randomised, its mechanism object's (:attr:`mech`).
    """

    name: str
    type: str  # the registry name of ``kind``
    epsilon: float
    mechanism: str  # the registry name of ``mech``
    p: float
    q: float
    categories: tuple[str, ...] = ()  # a histogram's are its buckets' names, derived from its edges
    memo: mechanisms.Memo | None = None  # the permanent and instantaneous layers of a memoised attribute
    range: tuple[int | float, int | float] | None = None  # a numeric attribute's [lo, hi], as given
    edges: tuple[int | float, ...] = ()  # a histogram's bucket edges, as given
    max_length: int = 0  # a string attribute's: the code points of a value a device keeps
    candidates: tuple[str, ...] = ()  # a string attribute's: the strings estimated, prepared
    discover: bool = False  # a string attribute's: whether the server discovers strings
    alphabet: str = ""  # a string attribute's discovery alphabet
    levels: tuple[int, ...] = ()  # a discovering string attribute's prefix lengths, given or derived
    # category -> index, for O(1) validation and decoding of reports
    index_of: dict[str, int] = field(init=False, compare=False, repr=False)
    # the registry object of ``type``: its fields, record values, mechanisms, simulation (read on hot paths)
    kind: attribute_types.AttributeType = field(init=False, compare=False, repr=False)
    # how each estimate value is keyed in counters and estimates (the type's keys)
    keys: tuple[str, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index_of", {c: i for i, c in enumerate(self.categories)})
        object.__setattr__(self, "kind", attribute_types.REGISTRY[self.type])
        object.__setattr__(self, "keys", self.kind.keys(self))

    def with_candidates(self, candidates: tuple[str, ...]) -> Attribute:
        """This string attribute estimating ``candidates`` (prepared, distinct) instead of its listed
        ones: candidates added after publishing are counted and estimated through it."""
        return replace(self, candidates=candidates)

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
        attribute, else each category (a histogram's buckets), in :attr:`keys`' order."""
        return self.kind.values(self)

    def value_of(self, key: str) -> Any:
        """The JSON value of a stored ``key``: ``True`` for a boolean, else the key itself."""
        return self.kind.value_of(key)

    @property
    def derived_parameters(self) -> dict[str, float]:
        """Every parameter besides ``p`` and ``q`` that its encoder and estimator use, named as
        DESIGN.md names them (``C``, ``z``, ``C_pm``, ``alpha``, ``scale``; none for a share)."""
        return self.mech.shown_parameters_of(self, d=self.kind.values_count(self.categories))

    def to_dict(self) -> dict[str, Any]:
        """The derived attribute as the server serves it: as given, with every derived parameter."""
        out: dict[str, Any] = {"name": self.name, "type": self.type, **self.kind.to_dict(self)}
        out.update(epsilon=self.epsilon, mechanism=self.mechanism, p=self.p, q=self.q)
        out.update(self.derived_parameters)
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
        raise SchemaError("schema", f"a schema must be a JSON object, got {kind(obj)}")
    _reject_unknown(obj, _SCHEMA_FIELDS, "schema")
    name = _name(obj.get("name"), "name")
    version = obj.get("version")
    if not is_version(version):
        raise SchemaError("version", f"version must be an integer from 1 to {MAX_VERSION}, got {show(version)}")
    epsilon = _epsilon(obj.get("epsilon"), "epsilon")
    window = obj.get("window", "day")
    if window not in WINDOWS:
        raise SchemaError("window", f"window must be one of {', '.join(WINDOWS)}, got {show(window)}")
    split = obj.get("split", "equal")
    if split not in SPLITS:
        raise SchemaError("split", f"split must be one of {', '.join(SPLITS)}, got {show(split)}")
    description = obj.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_LENGTH:
        raise SchemaError(
            "description", f"description must be a string of at most {MAX_DESCRIPTION_LENGTH} characters, "
            f"got {show(description)}"
        )
    require_text(description, "description")
    raw_attributes = obj.get("attributes")
    if not isinstance(raw_attributes, list) or not 1 <= len(raw_attributes) <= MAX_ATTRIBUTES:
        raise SchemaError(
            "attributes", f"attributes must be a list of 1 to {MAX_ATTRIBUTES} attributes, got {show(raw_attributes)}"
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


def _permanent_budget(obj: Mapping[str, Any], epsilon: float, epsilons: list[float], split: str) -> list[float | None]:
    """Each attribute's share of ε∞, shared as ε is; all None when the schema is not memoised.

    Under ``split: "sample"`` a device may report each attribute in turn, so each permanent layer
    gets ε∞/k, and a report's ε must stay below that."""
    if "epsilon_permanent" not in obj:
        return [None] * len(epsilons)
    total = obj["epsilon_permanent"]
    if not is_number(total) or not epsilon < total <= MAX_EPSILON_PERMANENT:
        raise SchemaError("epsilon_permanent", f"epsilon_permanent must be a number above epsilon ({epsilon:g}) "
                                               f"and at most {MAX_EPSILON_PERMANENT:g}, got {show(total)}")
    k = len(epsilons)
    if split == "sample":
        if not epsilon < total / k:
            raise SchemaError("epsilon_permanent", f"under split 'sample' each attribute's permanent layer gets "
                                                   f"epsilon_permanent / {k} = {total / k:g}, which must exceed "
                                                   f"epsilon ({epsilon:g})")
        return [total / k] * k
    return [total * e / epsilon for e in epsilons]


def _split_budget(raw_attributes: list[Any], total: float, split: str) -> list[float]:
    """Each attribute's ε: given explicitly for all (or none), else ε/k or the whole ε (sample)."""
    for i, raw in enumerate(raw_attributes):
        if not isinstance(raw, Mapping):
            raise SchemaError(f"attributes[{i}]", f"attributes[{i}] must be a JSON object, got {kind(raw)}")
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
            if abs(e - total) > TOLERANCE:
                raise SchemaError(
                    f"attributes[{i}].epsilon", f"attributes[{i}].epsilon must equal the total epsilon {total} under split "
                    f"'sample', got {e}"
                )
    elif abs(math.fsum(values) - total) > TOLERANCE:
        raise SchemaError(
            "attributes", f"attributes[].epsilon must sum to the total epsilon {total}, got {math.fsum(values)}"
        )
    return values


def _attribute(raw: Mapping[str, Any], epsilon: float, epsilon_permanent: float | None, where: str) -> Attribute:
    _reject_unknown(raw, _ATTRIBUTE_FIELDS, where)
    name = _name(raw.get("name"), f"{where}.name")
    try:
        kind = attribute_types.get(raw.get("type"))
    except ValueError as exc:
        raise SchemaError(f"{where}.type", f"{where}.type {exc}") from None
    for own in attribute_types.OWN_FIELDS:
        if own in raw and own not in kind.fields:
            raise SchemaError(f"{where}.{own}", f"{where}.{own} is not allowed on a {kind.name} attribute")
    fields = kind.parse(raw, where)
    if not epsilon >= MIN_EPSILON:
        raise SchemaError(f"{where}.epsilon", f"{where}.epsilon is {epsilon:g} (its share of the total), which is "
                                              f"too small: an attribute needs at least {MIN_EPSILON:g}, below which "
                                              f"its reports say next to nothing; give fewer attributes, a larger "
                                              f"epsilon or split 'sample'")
    d = kind.values_count(fields.categories)
    try:
        mechanism = kind.mechanism(raw.get("mechanism", mechanisms.AUTO), epsilon=epsilon, d=d)
    except ValueError as exc:
        raise SchemaError(f"{where}.mechanism",
                          f"{where}.mechanism {exc}, got {show(raw.get('mechanism'))}") from None
    p, q = mechanism.given_parameters(raw, epsilon=epsilon, d=d) or mechanism.parameters(epsilon=epsilon, d=d)
    memo = None
    if epsilon_permanent is not None:
        if not mechanism.memoisable:
            raise SchemaError(f"{where}.type", f"{where} cannot be memoised ({mechanism.title}); publish it in a "
                                               f"schema without epsilon_permanent")
        memo = mechanism.memoise(epsilon=epsilon, epsilon_permanent=epsilon_permanent, d=d)
        p, q = memo.p, memo.q
    attribute = Attribute(name, kind.name, epsilon, mechanism.name, p, q, fields.categories, memo, fields.range,
                          fields.edges, fields.max_length, fields.candidates, fields.discover, fields.alphabet,
                          fields.levels)
    _check_derived(raw, attribute, where)
    return attribute


def _check_derived(raw: Mapping[str, Any], attribute: Attribute, where: str) -> None:
    """:class:`SchemaError` unless every derived field ``raw`` gives back (a derived schema
    re-published) is what we derive: numbers within :data:`TOLERANCE`, the layers exactly."""
    parameters = {"p": attribute.p, "q": attribute.q, **attribute.derived_parameters}
    for name, derived in parameters.items():
        if name in raw:
            given = raw[name]
            if not is_number(given) or not close(given, derived):
                raise SchemaError(
                    f"{where}.{name}", f"{where}.{name} is derived from epsilon and mechanism and must be {derived}, "
                    f"got {show(given)}"
                )
    for name in _SHOWN_PARAMETERS:
        if name in raw and name not in parameters:
            raise SchemaError(f"{where}.{name}", f"{where}.{name} is not a parameter of {attribute.mech.title}")
    derived_layers = attribute.to_dict()
    for key in ("permanent", "instantaneous"):
        if key in raw and raw[key] != derived_layers.get(key):
            raise SchemaError(f"{where}.{key}", f"{where}.{key} is derived from epsilon_permanent and must be "
                                                f"{derived_layers.get(key)}, got {show(raw[key])}")


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise SchemaError(
            field, f"{field} must match [a-z0-9][a-z0-9_-]{{0,63}} (lower-case letters, digits, _ and -), "
            f"got {show(value)}"
        )
    return value


def _epsilon(value: Any, field: str) -> float:
    """A total or per-attribute ε as given: a number in (0, :data:`MAX_EPSILON`], and at least
    :data:`MIN_EPSILON` (an attribute gets at most the total)."""
    if not is_number(value) or not 0 < value <= MAX_EPSILON:
        raise SchemaError(field, f"{field} must be a number in (0, {MAX_EPSILON:g}], got {show(value)}")
    if not value >= MIN_EPSILON:
        raise SchemaError(field, f"{field} is too small: every attribute needs at least {MIN_EPSILON:g}, below "
                                 f"which its reports say next to nothing; got {show(value)}")
    return float(value)


def _reject_unknown(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise SchemaError(where, f"{where} has unknown field(s): {', '.join(unknown)}")
