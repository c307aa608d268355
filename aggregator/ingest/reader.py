"""Reading a plainly valid batch of reports in one pass, at C speed; the rest by the exact rules.

Almost every batch a client sends is plainly valid, and reading it by the exact rules (Python's
``json`` with a hook per object to refuse a key given twice, then :func:`...shared.reports.validate_report`
field by field) cost more than all the rest of ingest. :class:`BatchReader` reads such a body once,
with msgspec: each report's envelope is checked as it is parsed (every field there and no other,
the version's range, the types; the ids' form in one match over the batch), and each report's
``values`` are decoded and checked once per distinct text per schema version (most reports of a
schema share a few: a boolean and a four-category attribute make eight), by the same check as every report
(:func:`...shared.reports.check_values`, through :func:`.counting.checked_values`, which also checks
what a dead process's inbox left), into the form the store takes: their compact JSON
(:func:`.batch.stored_json`) and their packed numeric form (:mod:`..store.wire`).

It answers None for anything else (a body it cannot parse, a report the rules would refuse, a key
given twice, a backslash anywhere) and the caller then reads the body by the exact rules
(:func:`.batch.parse_batch`), which name every fault. So this path decides nothing the rules would
not: whatever it accepts, they accept, and it stores what they would.

A key given twice: msgspec, like Python's ``json``, keeps the last, so it is found by counting. In
valid JSON a colon outside a string separates a key from its value, so a body's colons are its keys
plus the colons inside its strings. A body with no backslash has no escapes: every string's bytes
are its characters. Then a batch read here has exactly ``1 + Σ (6 + c)`` colons, ``c`` the colons
of a report's values re-encoded (their keys, each once, and the colons inside their strings; the
envelope's strings hold none: an id, a published schema's name and a window cannot), and more
exactly when some object, anywhere, repeats a key.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Callable, NamedTuple

import msgspec

from ...shared.reports import ID_RE, MAX_BATCH_WINDOWS, REPORT_FIELDS
from ...shared.checks import TOLERANCE
from ...shared.schema import MAX_EPSILON, MAX_VERSION, Schema
from ..store import ROW_ID, ReportRow, first_of_each_id, layout
from .batch import WindowPolicy, stored_json
from .counting import checked_values

# Distinct values texts of a schema version kept checked (reports of a schema share a few), each of
# at most VALUES_CACHED_BYTES: a longer one (an OUE vector's, a string attribute's, which are all
# distinct anyway, or one padded with whitespace) is checked each time, so the cache stays small
# whatever clients send.
VALUES_CACHE = 4096
VALUES_CACHED_BYTES = 256


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """A report's fields, all required; ``values`` kept as their JSON text, read per schema."""

    id: str  # its form checked for the whole batch at once (_ids_valid)
    schema: str
    version: Annotated[int, msgspec.Meta(ge=1, le=MAX_VERSION)]
    window: str
    epsilon: float  # a JSON integer too, as the rules take it; never a bool
    values: msgspec.Raw


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    reports: list[_Envelope]


assert tuple(_Envelope.__struct_fields__) == REPORT_FIELDS  # the rules' fields, and the count below
_read_body = msgspec.json.Decoder(_Body).decode
# A batch's ids, each followed by a newline, each of the form ID_RE takes. One match over them all:
# a pattern on the envelope's field (msgspec calls Python's re once per report) was two thirds of
# the decode's time.
_IDS_RE = re.compile(rf"(?:{ID_RE.pattern}\n)*")


def _ids_valid(rows: list[ReportRow]) -> bool:
    """Whether every row's id has the form the rules take (:data:`...shared.reports.ID_RE`). An id
    holding a newline would match as two: the count of newlines rules that out (none reaches here
    today, JSON having no raw newline in a string and a body with an escape being left to the
    rules, but this check does not lean on that)."""
    joined = "\n".join(map(ROW_ID, rows)) + "\n"
    return joined.count("\n") == len(rows) and _IDS_RE.fullmatch(joined) is not None


class _Values(NamedTuple):
    """A report's values, checked, as the store keeps them; and the colons of their JSON."""

    text: str
    wire: bytes
    colons: int


class _Version:
    """What a schema version's reports are read with: the schema, and its values checked by text."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self._layout = layout(schema)
        self._cached: Callable[[bytes], _Values | None] = lru_cache(maxsize=VALUES_CACHE)(self._check)

    def values(self, raw: bytes) -> _Values | None:
        """A report's values (their JSON text), checked, as the store keeps them; None if invalid."""
        return self._cached(raw) if len(raw) <= VALUES_CACHED_BYTES else self._check(raw)

    def _check(self, raw: bytes) -> _Values | None:
        values = checked_values(self.schema, raw)
        if values is None:
            return None
        text = stored_json(values)
        return _Values(text, self._layout.pack(values), text.count(":"))


class BatchReader:
    """Reads plainly valid batches (see the module). ``schemas(name, version)`` gives a published
    schema (the catalog's cached lookup) or None; one reader per app, since its cache is of the
    schemas that app's database published."""

    def __init__(self, schemas: Callable[[str, int], Schema | None]):
        self._schemas = schemas
        self._versions: dict[tuple[str, int], _Version] = {}

    def rows(self, body: bytes, policy: WindowPolicy, max_batch: int) -> tuple[list[ReportRow], int] | None:
        """The rows to store of a body the exact rules would accept (each id once), and how many
        reports it held; None if it is not plainly valid (the rules then say why, or accept it)."""
        if b"\\" in body:
            return None
        try:
            reports = _read_body(body).reports
        except (msgspec.MsgspecError, ValueError, RecursionError):  # the rules answer each of them with a 400
            return None
        if not 0 < len(reports) <= max_batch:
            return None
        rows, colons = [], 1
        # Per window of a schema version: its reading, name and end, shared by its rows (and so the
        # hashes counting takes of them).
        windows: dict[tuple[str, int, str], tuple[_Version, str, str, int]] = {}
        for report in reports:
            key = (report.schema, report.version, report.window)
            window = windows.get(key)
            if window is None:
                version = self._version(report.schema, report.version)
                if version is None:
                    return None
                try:
                    window = windows[key] = (version, version.schema.name, report.window,
                                             policy.end(report.window, version.schema.window))
                except ValueError:  # ReportError, or a window of the wrong form
                    return None
            version, name, window_name, end = window
            values = version.values(bytes(report.values))
            # In range before subtracting, as the rules do.
            if values is None or not (0 < report.epsilon <= MAX_EPSILON
                                      and abs(report.epsilon - version.schema.epsilon) <= TOLERANCE):
                return None
            colons += len(REPORT_FIELDS) + values.colons
            # tuple.__new__: a NamedTuple's own __new__ is a Python function, a call per report.
            rows.append(tuple.__new__(ReportRow, (report.id, name, report.version, window_name, end,
                                                  values.text, values.wire)))
        if body.count(b":") != colons or len(windows) > MAX_BATCH_WINDOWS or not _ids_valid(rows):
            return None
        return first_of_each_id(rows), len(reports)

    def _version(self, name: str, version: int) -> _Version | None:
        """The reading of a published schema version (kept: a published version never changes)."""
        read = self._versions.get((name, version))
        if read is None:
            schema = self._schemas(name, version)
            if schema is None:
                return None
            read = self._versions[(name, version)] = _Version(schema)
        return read

