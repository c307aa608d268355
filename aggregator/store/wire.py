"""The stored numeric form of a report's values: what the back-fill and discovery read, no JSON.

A report is stored twice over in one row: its values as received (JSON text, ``values``: what
counting at ingest and a breakdown's back-fill decode) and, beside them, ``wire``: the integer
fields of its attributes that have a columnar form (:meth:`Mechanism.columns`: a string
attribute's ``a``, ``b``, ``y`` and, when it discovers, ``level``), packed once at ingest from the
validated values. So a back-fill of new candidates over a million stored reports reads bytes the
database hands over as they are and numpy views as a matrix, where extracting the same fields from
JSON text cost PostgreSQL 2 to 3.5 s per 250,000 reports (0.13 s as bytes; measured on a 2-core
machine, 2026-11-28).

The layout is a schema version's, fixed at publication: for each attribute with columns, in the
schema's order, a flag (1: the report carries the attribute, 0: not, under ``split: "sample"``)
then its fields, each a little-endian signed 64-bit integer. A schema version with no such
attribute stores an empty ``wire``. Every stored report of a version has its width; a row that
has not (written behind the store's back) reads as damaged: carried, every field
:data:`.rows.NOT_READ`, which no field's range allows.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Mapping

import numpy as np

from ...shared.schema import Schema, parse_schema
from .rows import NOT_READ, WireColumns

_INT64 = np.dtype("<i8")


@dataclass(frozen=True)
class Layout:
    """Where each attribute with columns sits in a schema version's ``wire``: the index of its
    flag, then its fields in order; ``width``: the integers a report holds."""

    width: int
    places: dict[str, tuple[int, tuple[str, ...]]]  # attribute -> (index of its flag, its fields)
    _format: struct.Struct = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_format", struct.Struct(f"<{self.width}q"))

    @property
    def size(self) -> int:
        """The bytes of one report's ``wire``."""
        return self.width * _INT64.itemsize

    def pack(self, values: Mapping[str, Any]) -> bytes:
        """The ``wire`` of a report with these (validated) values."""
        if not self.width:
            return b""
        packed = [0] * self.width
        for name, (at, fields) in self.places.items():
            reported = values.get(name)
            if reported is not None:
                packed[at] = 1
                packed[at + 1:at + 1 + len(fields)] = [reported.get(f, 0) for f in fields]
        return self._format.pack(*packed)

    def damaged(self) -> bytes:
        """The ``wire`` a report reads as when its own is not of this layout's size."""
        packed = np.full(self.width, NOT_READ, dtype=_INT64)
        packed[[at for at, _ in self.places.values()]] = 1
        return packed.tobytes()

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


@lru_cache(maxsize=256)
def layout(schema: Schema) -> Layout:
    """The layout of ``schema``'s ``wire``."""
    places, width = {}, 0
    for attribute in schema.attributes:
        fields = attribute.mech.columns(attribute)
        if fields:
            places[attribute.name] = (width, fields)
            width += 1 + len(fields)
    return Layout(width, places)


def wire_columns(schema: Schema, attribute: str, windows: Mapping[str, int], window_ends: np.ndarray,
                 matrix: np.ndarray) -> WireColumns:
    """Reports of ``schema`` as ``attribute``'s columns: ``windows`` maps each of their windows to
    its end, ``window_ends`` is each report's, ``matrix`` their ``wire`` (:meth:`Layout.matrix`)."""
    names = sorted(windows, key=windows.__getitem__)
    ends = np.array([windows[w] for w in names], dtype=np.int64)
    carried, fields = layout(schema).columns(matrix, attribute)
    return WireColumns(schema.name, schema.version, tuple(names), tuple(int(e) for e in ends),
                       np.searchsorted(ends, window_ends), carried, fields)


# Stored reports a migration packs per statement.
PACK_CHUNK = 10_000


def packed_rows(definition: str, rows: Iterable[tuple[str, str]]) -> list[tuple[bytes, str]]:
    """``(wire, id)`` of stored reports ``(id, values as JSON)`` of the schema version whose stored
    definition (JSON) is ``definition``: what the migration that added ``wire`` writes. Values that
    no longer decode read as damaged, as a wire of another size does."""
    packing = layout(parse_schema(json.loads(definition)))
    out = []
    for report_id, values in rows:
        try:
            out.append((packing.pack(json.loads(values)), report_id))
        except (ValueError, TypeError, AttributeError, struct.error):
            out.append((packing.damaged(), report_id))
    return out
