"""The stored numeric form of a report's values: what counting, the back-fill and discovery read, no JSON.

A report is stored twice over in one row: its values as received (compact JSON text, ``values``)
and, beside them, ``wire``: the numeric form of every attribute (:meth:`Mechanism.columns`: a
string attribute's ``a``, ``b``, ``y`` and, when it discovers, ``level``; a category's index; an
OUE vector's bits in words; a mean's number), packed once at ingest from the validated values. So
counting the reports folded in, back-filling new candidates or a breakdown over a million stored
reports, and discovery read bytes the database hands over as they are and numpy views as one
record a report, instead of parsing each report's JSON again.

The layout is a schema version's, fixed at publication: for each attribute, in the schema's order,
a one-byte flag (1: the report carries the attribute, 0: not, under ``split: "sample"``; -1:
damaged) then its fields, little-endian, each as narrow as its values allow
(:attr:`Mechanism.column_format`: a bit takes a byte, a category index two, a string's hash
parameters four each), so that a report's row stays short. Every stored report of a version has
its size; a row that has not (written behind the store's back) reads as damaged in every attribute.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ...shared.schema import Attribute, Schema, parse_schema
from ...shared.windows import window_of
from .rows import NOT_READ, WireColumns

log = logging.getLogger(__name__)

_CARRIED, _ABSENT, _DAMAGED = 1, 0, NOT_READ  # an attribute's flag, a signed byte
_FLAG_FORMAT = "b"
# Each struct format a field may be stored as: how numpy reads it, what it is read back as
# (integers widened to 64 bits: arithmetic on them never overflows) and what a damaged field holds
# (no valid value, though an intact flag is what says a field may be read).
_STORED: dict[str, tuple[str, type[np.generic], int | float]] = {
    "b": ("i1", np.int64, NOT_READ), "h": ("<i2", np.int64, NOT_READ), "i": ("<i4", np.int64, NOT_READ),
    "q": ("<i8", np.int64, NOT_READ), "Q": ("<u8", np.uint64, 2**64 - 1), "d": ("<f8", np.float64, float("nan"))}
# Stored reports the migrations that pack ``wire`` pack per statement.
PACK_CHUNK = 10_000


@dataclass(frozen=True)
class Place:
    """Where an attribute sits in a report's ``wire``: the index of its flag among the record's
    numbers, then its fields."""

    at: int
    attribute: Attribute
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    """Where each attribute sits in a schema version's ``wire``; ``record``: one report's, as numpy
    reads it (one named field a number: the flag ``"<attribute>"``, the fields ``"<attribute>.<field>"``)."""

    places: dict[str, Place]
    record: np.dtype = field(init=False, repr=False, compare=False)
    _format: struct.Struct = field(init=False, repr=False, compare=False)
    _damaged: list[int | float] = field(init=False, repr=False, compare=False)
    _damaged_wire: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        formats, names, damaged = [], [], []
        for name, place in self.places.items():
            kind = place.attribute.mech.column_format
            formats += [_FLAG_FORMAT] + [kind] * len(place.fields)
            names += [name] + [f"{name}.{f}" for f in place.fields]
            damaged += [_DAMAGED] + [_STORED[kind][2]] * len(place.fields)
        object.__setattr__(self, "record", np.dtype({"names": names, "formats": [_STORED[f][0] for f in formats]}))
        object.__setattr__(self, "_format", struct.Struct("<" + "".join(formats)))
        object.__setattr__(self, "_damaged", damaged)
        object.__setattr__(self, "_damaged_wire", self.pack({}, damaged=self.places))

    @property
    def size(self) -> int:
        """The bytes of one report's ``wire``."""
        return self._format.size

    def pack(self, values: Mapping[str, Any], damaged: Iterable[str] = ()) -> bytes:
        """The ``wire`` of a report with these (validated) values; the attributes ``damaged`` names
        are flagged so (a stored report's that no longer checks)."""
        packed: list[int | float] = [0] * len(self._damaged)
        for name, place in self.places.items():
            reported = values.get(name)
            if reported is not None:
                packed[place.at] = _CARRIED
                packed[place.at + 1:place.at + 1 + len(place.fields)] = place.attribute.mech.column_values(
                    place.attribute, reported)
        for name in damaged:
            at, count = self.places[name].at, 1 + len(self.places[name].fields)
            packed[at:at + count] = self._damaged[at:at + count]
        return self._format.pack(*packed)

    def damaged(self) -> bytes:
        """The ``wire`` a report reads as when its own is not of this layout's size."""
        return self._damaged_wire

    def records(self, wires: Iterable[bytes]) -> np.ndarray:
        """Reports' ``wire`` as one array of records (:attr:`record`), one a report (one of another
        size reads as damaged)."""
        wires = list(wires)
        if set(map(len, wires)) <= {self.size}:  # most pages: every wire of this layout, no Python step a report
            return self.joined(b"".join(wires))
        size, damaged = self.size, self._damaged_wire
        return self.joined(b"".join(w if len(w) == size else damaged for w in wires))

    def joined(self, data: bytes) -> np.ndarray:
        """Reports' ``wire`` of this layout's size, one after another, as one array of records."""
        return np.frombuffer(data, dtype=self.record)

    def columns(self, records: np.ndarray, attribute: str) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """From reports' records (:meth:`records`), whether each carries ``attribute`` (or is
        damaged), whether it is intact (carried and not damaged), and each of its fields, as read
        back (:data:`_STORED`)."""
        place = self.places[attribute]
        flag = records[attribute]
        read_as = _STORED[place.attribute.mech.column_format][1]
        return flag != _ABSENT, flag == _CARRIED, {f: records[f"{attribute}.{f}"].astype(read_as) for f in place.fields}


def layout(schema: Schema) -> Layout:
    """The layout of ``schema``'s ``wire`` (a few microseconds: callers keep it for a batch or a page)."""
    places, at = {}, 0
    for attribute in schema.attributes:
        fields = attribute.mech.columns(attribute)
        places[attribute.name] = Place(at, attribute, fields)
        at += 1 + len(fields)
    return Layout(places)


class NumericPage:
    """Reports of one schema version in their numeric form: each one's window worked out once, and
    any attribute's columns read from it (:meth:`columns`)."""

    def __init__(self, schema: Schema, packing: Layout, window_ends: np.ndarray, records: np.ndarray):
        """``packing``: the schema's layout; ``window_ends``: each report's window's end (which names
        the window: the one holding the second before it); ``records``: their ``wire``
        (:meth:`Layout.records`)."""
        self.schema, self.layout, self.records = schema, packing, records
        ends = np.unique(window_ends)
        self.windows = tuple(window_of(datetime.fromtimestamp(int(end) - 1, timezone.utc), schema.window)
                             for end in ends)
        self.ends = tuple(int(e) for e in ends)
        self.window = np.searchsorted(ends, window_ends)

    def columns(self, attribute: str) -> WireColumns:
        """``attribute``'s columns, for each report."""
        carried, intact, fields = self.layout.columns(self.records, attribute)
        return WireColumns(self.schema.name, self.schema.version, self.windows, self.ends, self.window,
                           carried, intact, fields)


def pack_stored_reports(definitions: Iterable[tuple[str, int, str]],
                        page: Callable[[str], list[tuple[str, str, int, str]]],
                        update: Callable[[list[tuple[bytes, str]]], None]) -> None:
    """What the migrations that pack ``wire`` do, on either database: pack every stored report of
    the schema versions ``definitions`` gives (name, version and stored definition of each) in the
    layout of today, one pass in id order over the reports, ``page(after)`` giving the next
    :data:`PACK_CHUNK` as ``(id, schema, version, values)`` and ``update`` writing ``(wire, id)``.
    Reports were validated when stored, but each attribute is checked again here: one that fails
    (a value written behind the store's back) packs as damaged, and so does every attribute of a
    report whose values are no JSON object. A definition that no longer parses is logged and its reports left unpacked
    (they read as damaged): a start must not fail for it."""
    packing: dict[tuple[str, int], tuple[Schema, Layout]] = {}
    for name, version, definition in definitions:
        try:
            schema = parse_schema(json.loads(definition))
        except ValueError as exc:
            log.warning("schema %r version %s: its stored definition does not parse (%s); its reports are not "
                        "packed and the back-fill leaves them out", name, version, exc)
            continue
        packing[(name, version)] = (schema, layout(schema))
    after = ""
    while rows := page(after):
        update([(_checked(*packing[(name, version)], values), report_id)
                for report_id, name, version, values in rows if (name, version) in packing])
        after = rows[-1][0]


def _checked(schema: Schema, packing: Layout, values: str) -> bytes:
    """The ``wire`` of stored ``values`` (JSON), each attribute checked first: one that fails is
    packed as damaged, as it read when counting parsed the JSON."""
    try:
        decoded = json.loads(values)
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        return packing.damaged()
    kept, damaged = {}, []
    for name in packing.places:
        if name in decoded:
            attribute = schema.attribute(name)
            try:
                attribute.mech.check(attribute, decoded[name])
                kept[name] = decoded[name]
            except ValueError:  # WireError
                damaged.append(name)
    return packing.pack(kept, damaged)
