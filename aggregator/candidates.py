"""Candidates of string attributes beyond those a schema lists: added by the analyst (the admin
API) or discovered (the discovery job), and the back-fill of their counters (DESIGN.md, "Strings").

A new candidate's supports among the reports already stored are counted by the back-fill job, a
bounded chunk of reports at a time, over the stored reports' ids in order: each batch of candidates
added together has a watermark; the back-fill reads and counts the stored reports after it without
a lock, then in one short transaction adds them (and those stored in that range since) and moves
the watermark past them; ingest counts a report for them iff its id is at most the watermark. So
every retained report is counted for them once, by one or the other (:mod:`.store.dialect`,
"candidates"; :meth:`.store.Store.backfill`).
A batch is estimated once complete: in each retained window over all its reports, and in the ``all``
rollup over the reports of the windows still retained when it was added or reached (its ``n`` says
how many).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from flask import Flask

from ..shared.attribute_types import MAX_CANDIDATES, STRING, parse_candidates
from ..shared.checks import SchemaError
from ..shared.schema import Schema
from . import context
from .catalog import Catalog
from .store import CandidateRow

SOURCES = ("added", "discovered")
# (report, candidate) pairs one chunk of the back-fill reads and counts, without a lock, and at
# most MAX_BACKFILL_REPORTS reports; then a short transaction adds a counter per (window,
# candidate) and moves the watermark, so fewer, larger chunks cost less in all (1,000 candidates
# over 1,000,000 reports on SQLite: 7.7 s in chunks of 100,000 reports, 6.0 s of 250,000, 5.5 s of
# 500,000; PostgreSQL 14.0 s of 250,000, 12.4 s of 500,000). 250,000 keeps a chunk's memory near
# 85 MB (measured: 168 MB at 500,000) and the apply's lock short: under steady ingest new reports
# land inside the chunk's id range (ids are random), and the apply then compares the range's ids
# under the lock (0.53 s measured at 500,000; about half at 250,000).
BACKFILL_CELLS = 250_000_000
MIN_BACKFILL_REPORTS = 100
MAX_BACKFILL_REPORTS = 250_000
BACKFILL_SECONDS = 30.0  # one run of the job goes on for about this long; the next run goes on
BACKFILL_INTERVAL = 5.0  # seconds between runs of the job (it also runs right after an add)


class CandidateError(ValueError):
    """Candidates that cannot be added: ``field`` names what is wrong, ``status`` the HTTP answer."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status


def add_candidates(catalog: Catalog, schema_name: str, version: int, attribute_name: str, values: Sequence[str], *,
                   source: str, estimated: bool = True, added_at: str | None = None) -> int:
    """Add ``values`` to a string attribute's candidates; how many were new (one already a
    candidate, listed or added, is not new: no error). Each is prepared as a value is, at most
    ``max_length`` code points, and distinct from the others after that; at most
    :data:`MAX_CANDIDATES` an attribute in all. ``estimated`` False (a discovered string still
    holding U+FFFD, which no report can support): listed, never counted nor estimated. Otherwise
    their counters are back-filled by :func:`backfill`. :class:`CandidateError` naming the field
    for anything else; then nothing is added."""
    if source not in SOURCES:
        raise CandidateError("source", f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    schema = catalog.schema(schema_name, version)
    if schema is None:
        raise CandidateError("version", f"no published schema {schema_name[:64]!r} version {version}", 404)
    attribute = schema.by_name.get(attribute_name) if isinstance(attribute_name, str) else None
    if attribute is None:
        raise CandidateError("attribute", f"schema {schema.name} version {schema.version} has no attribute "
                                          f"{str(attribute_name)[:64]!r}")
    if attribute.kind is not STRING:
        raise CandidateError("attribute", f"attribute {attribute.name} is not a string attribute: only strings "
                                          "have candidates")
    try:
        given = list(values) if isinstance(values, Sequence) and not isinstance(values, str) else values
        prepared = parse_candidates(given, attribute.max_length, "candidates")
    except SchemaError as exc:
        raise CandidateError(exc.field, str(exc)) from None
    new = [v for v in prepared if v not in attribute.candidates]
    added = catalog.store.add_candidates(schema.name, schema.version, attribute.name, new, source=source,
                                         estimated=estimated, added_at=added_at or context.iso(context.system_clock()),
                                         most=MAX_CANDIDATES - len(attribute.candidates))
    if added is None:
        raise CandidateError("candidates", f"attribute {attribute.name} may have at most {MAX_CANDIDATES} candidates "
                                           "in all (listed, added and discovered)")
    return added


def listing(schema: Schema, stored: Sequence[CandidateRow], published_at: str | None,
            attribute: str | None = None) -> list[dict[str, Any]]:
    """Every candidate of the schema's string attributes (or of ``attribute``), listed then stored:
    its source, fingerprint, the candidates it collides with, when it was added, and whether it is
    estimated."""
    out = []
    for a in schema.attributes:
        if attribute not in (None, a.name):
            continue
        mine = [c for c in stored if c.attribute == a.name]
        added = [published_at] * len(a.candidates) + [c.added_at for c in mine]
        estimated = [True] * len(a.candidates) + [c.estimated for c in mine]
        rows = a.kind.candidate_rows(a, [(c.value, c.source) for c in mine])
        out += [{"attribute": a.name, **row, "added_at": at, "estimated": e} for row, at, e in zip(rows, added, estimated)]
    return out


def sources(stored: Sequence[CandidateRow]) -> dict[tuple[str, str], str]:
    """``(attribute, value) -> source`` of stored candidates, in the order they were added (the
    schema's own candidates are ``listed``: their attribute's type says so)."""
    return {(c.attribute, c.value): c.source for c in stored}


def backfill(app: Flask, seconds: float = BACKFILL_SECONDS) -> int:
    """The back-fill job: count the stored reports for the candidates added since, a chunk of
    :data:`BACKFILL_CELLS` (report, candidate) pairs (at most :data:`MAX_BACKFILL_REPORTS` reports)
    at a time, for about ``seconds`` (what is left waits for the next run); how many batches it completed. Several processes or
    nodes may run it at once: each chunk reads and moves its batch's watermark under a lock."""
    store = context.store(app)
    deadline = time.monotonic() + seconds
    completed = 0
    for schema, version, batch, size in store.filling():
        reports = min(MAX_BACKFILL_REPORTS, max(MIN_BACKFILL_REPORTS, BACKFILL_CELLS // max(1, size)))
        while not store.backfill(schema, version, batch, reports):
            if time.monotonic() >= deadline:
                return completed
        completed += 1
    return completed
