"""The stored numeric form of a report's values: what the back-fill and discovery read, no JSON.

A report is stored twice over in one row: its values as received (JSON text, ``values``: what
counting at ingest and a breakdown's back-fill decode) and, beside them, ``wire``: the integer
fields of its attributes that have a columnar form (:meth:`Mechanism.columns`: a string
attribute's ``a``, ``b``, ``y`` and, when it discovers, ``level``), packed once at ingest from the
validated values. So a back-fill of new candidates over a million stored reports reads bytes the
database hands over as they are and numpy views as a matrix, instead of having the database
extract the same fields from each report's JSON text, which cost it many times more.

The layout is a schema version's, fixed at publication: for each attribute with columns, in the
schema's order, a flag (1: the report carries the attribute, 0: not, under ``split: "sample"``)
then its fields, each a little-endian signed 64-bit integer. A schema version with no such
attribute stores an empty ``wire``. Every stored report of a version has its width; a row that
has not (written behind the store's back) reads as damaged: carried, every field
:data:`.rows.NOT_READ`, which no field's range allows.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ...shared.schema import Schema, parse_schema
from ...shared.windows import window_of
from .rows import NOT_READ, WireColumns

log = logging.getLogger(__name__)

_INT64 = np.dtype("<i8")
# Stored reports the migration that added ``wire`` packs per statement.
PACK_CHUNK = 10_000


@dataclass(frozen=True)
class Layout:
    """Where each attribute with columns sits in a schema version's ``wire``: the index of its
    flag, then its fields in order; ``width``: the integers a report holds."""

    places: dict[str, tuple[int, tuple[str, ...]]]  # attribute -> (index of its flag, its fields)
    width: int = field(init=False)
    _format: struct.Struct = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "width", sum(1 + len(fields) for _, fields in self.places.values()))
        object.__setattr__(self, "_format", struct.Struct(f"<{self.width}q"))

    @property
    def size(self) -> int:
        """The bytes of one report's ``wire``."""
        return self.width * _INT64.itemsize

    def pack(self, values: Mapping[str, Any], damaged: Iterable[str] = ()) -> bytes:
        """The ``wire`` of a report with these (validated) values; the attributes ``damaged`` names
        read as carried with every field :data:`NOT_READ`, which no field's range allows."""
        if not self.width:
            return b""
        packed = [0] * self.width
        for name, (at, fields) in self.places.items():
            reported = values.get(name)
            if reported is not None:
                packed[at] = 1
                packed[at + 1:at + 1 + len(fields)] = [reported[f] for f in fields]
        for name in damaged:
            at, fields = self.places[name]
            packed[at:at + 1 + len(fields)] = [1] + [NOT_READ] * len(fields)
        return self._format.pack(*packed)

    def damaged(self) -> bytes:
        """The ``wire`` a report reads as when its own is not of this layout's size."""
        return self.pack({}, damaged=self.places)

    def matrix(self, wires: Iterable[bytes]) -> np.ndarray:
        """Reports' ``wire`` as one matrix, a row each (one of another size reads as damaged)."""
        size, damaged = self.size, self.damaged()
        return self.joined(b"".join(w if len(w) == size else damaged for w in wires))

    def joined(self, data: bytes) -> np.ndarray:
        """Reports' ``wire`` of this layout's size, one after another, as one matrix."""
        return np.frombuffer(data, dtype=_INT64).reshape(-1, self.width)

    def columns(self, matrix: np.ndarray, attribute: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """From a matrix of reports' ``wire`` (:meth:`matrix`), whether each carries ``attribute``
        (or is damaged), and each of its fields."""
        at, fields = self.places[attribute]
        return matrix[:, at] != 0, {f: matrix[:, at + 1 + i] for i, f in enumerate(fields)}


def layout(schema: Schema) -> Layout:
    """The layout of ``schema``'s ``wire`` (a few microseconds: callers keep it for a batch or a page)."""
    places, at = {}, 0
    for attribute in schema.attributes:
        fields = attribute.mech.columns(attribute)
        if fields:
            places[attribute.name] = (at, fields)
            at += 1 + len(fields)
    return Layout(places)


def wire_columns(schema: Schema, attribute: str, window_ends: np.ndarray, matrix: np.ndarray) -> WireColumns:
    """Reports of ``schema`` as ``attribute``'s columns: ``window_ends`` is each report's window's
    end (which names the window: the one holding the second before it), ``matrix`` their ``wire``
    (:meth:`Layout.matrix`)."""
    ends = np.unique(window_ends)
    names = tuple(window_of(datetime.fromtimestamp(int(end) - 1, timezone.utc), schema.window) for end in ends)
    carried, fields = layout(schema).columns(matrix, attribute)
    return WireColumns(schema.name, schema.version, names, tuple(int(e) for e in ends),
                       np.searchsorted(ends, window_ends), carried, fields)


def pack_stored_reports(definitions: Iterable[tuple[str, int, str]],
                        page: Callable[[str], list[tuple[str, str, int, str]]],
                        update: Callable[[list[tuple[bytes, str]]], None]) -> None:
    """What the migration that added ``wire`` does, on either database: pack every stored report of
    the schema versions with a columnar form (``definitions``: name, version and stored definition
    of each), one pass in id order over the reports, ``page(after)`` giving the next
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
        if layout(schema).width:
            packing[(name, version)] = (schema, layout(schema))
    after = ""
    while rows := page(after):
        update([(_checked(*packing[(name, version)], values), report_id)
                for report_id, name, version, values in rows if (name, version) in packing])
        after = rows[-1][0]


def _checked(schema: Schema, packing: Layout, values: str) -> bytes:
    """The ``wire`` of stored ``values`` (JSON), each attribute with a columnar form checked first:
    one that fails reads as damaged, as it did when the back-fill read the JSON."""
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
