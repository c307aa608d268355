"""The discovery job: find the common strings of each discovering string attribute among its
retained reports, and add them as candidates marked ``discovered`` (DESIGN.md, "Strings").

Per published schema version with an attribute that discovers, the job walks the stored reports a
page at a time as each such attribute's wire fields (:meth:`Tx.wire_columns`, never all at
once), one attribute after another, at most :data:`MAX_READ` reports from a random id on for all of
them together; it keeps their prefix reports (level 1 or more), at most :data:`MAX_REPORTS` for all
of them together (a uniform sample beyond that: each report gets a random key and the smallest keys
are kept), and runs PEM over them
(:func:`...shared.discovery.discover`). The strings that survive become candidates with source
``discovered`` (one still holding U+FFFD with ``estimated=False``: no level-0 report supports it);
the back-fill then counts the new ones over the retained reports, and the refresh estimates them
from the level-0 reports alone. The scheduler runs it on the leading process (one node at a time),
and an admin may run it at once for one schema version (``POST .../discover``); a run reads at most
:data:`MAX_READ` stored reports and counts at most :data:`MAX_REPORTS` times the candidates a level
tests.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
from flask import Flask

from ...shared import discovery
from ...shared.attribute_types import MAX_CANDIDATES
from ...shared.schema import Attribute, Schema
from .. import cells, context
from ..cells import Limit
from ..store import Store, WireColumns
from . import candidates

log = logging.getLogger(__name__)

DISCOVERY_INTERVAL = 3600.0  # seconds between runs: the common strings of a day change slowly
# Prefix reports read into one run, per attribute: with at most 4,160 candidates a level, a run
# counts at most 4.2e9 (report, candidate) pairs (about 1.3e9 for a 38-symbol alphabet), and holds
# 4 int64 columns and a key per report: about 2 x 40 MB while sampling.
MAX_REPORTS = 1_000_000
PAGE = 20_000  # stored reports read at a time
# Stored reports read in one run, per schema version: twice MAX_REPORTS, as about half are prefix
# reports; a run reads at most this many whatever is retained (a sample from a random id on).
MAX_READ = 2 * MAX_REPORTS
ID_SYMBOLS = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"  # a report id's (url-safe)
START_SYMBOLS = 8  # of the random id the read starts at


class Found(NamedTuple):
    """What a discovery run did with the new strings it found."""

    added: int  # became candidates
    left_out: int  # found, but no room for them (the candidate limit, or LDP_MAX_CELLS)


def discover_strings(app: Flask, *, seed: int | None = None) -> int:
    """The job: discovery over every discovering attribute's retained reports; how many
    candidates it added. ``seed`` fixes the sample's keys (tests); None: fresh ones."""
    store, catalog = context.store(app), context.catalog(app)
    rng = np.random.default_rng(seed)
    added = 0
    for latest in store.run_tx("latest_schemas", lambda tx: tx.latest_schemas(), write=False):
        for version in store.run_tx("schema_versions", lambda tx: tx.schema_versions(latest["name"]), write=False):
            schema = catalog.schema(latest["name"], version)
            if schema is not None:
                added += discover_in(app, schema, rng=rng).added
    return added


def discover_in(app: Flask, schema: Schema, *, rng: np.random.Generator | None = None) -> Found:
    """Discovery over one schema version's discovering attributes now (the job's step, and what an
    admin's ``POST .../discover`` runs): how many candidates it added and how many strings found
    it left out (none if no attribute discovers). The reports ingested before the call are
    settled first, so that discovery reads them all."""
    attributes = [a for a in schema.attributes if a.discover]
    if not attributes:
        return Found(0, 0)
    context.writer(app).settle()
    return _discover_in(app, schema, attributes, rng or np.random.default_rng())


def _stored_columns(store: Store, schema: Schema, attribute: Attribute, start: str, budget: int
                    ) -> Iterator[WireColumns]:
    """Pages of the schema version's stored reports, as ``attribute``'s wire fields (the store's
    columnar read of their numeric form), in id order from ``start`` on, wrapping round to
    those before it, at most ``budget`` reports in all. Ids are random tokens, so a random
    ``start`` makes the reports read, when not all of them, a sample that no id a client chose can
    favour."""
    for after, through in ((start, None), ("", start)):
        while budget > 0:
            asked = min(PAGE, budget)
            read, count, last, _ = store.run_tx("discovery_read", lambda tx: tx.wire_columns(
                schema, attribute.name, after, asked, through), write=False)
            if count and last is not None:
                budget, after = budget - count, last
                yield read
            if count < asked:
                break


def _discover_in(app: Flask, schema: Schema, attributes: list[Attribute], rng: np.random.Generator) -> Found:
    # One budget for all of the version's discovering attributes, taken one after another: memory
    # and work per run stay bounded however many attributes discover.
    store, added, left_out = context.store(app), 0, 0
    for attribute in attributes:
        sample = UniformSample(MAX_REPORTS // len(attributes), rng)
        start = "".join(ID_SYMBOLS[i] for i in rng.integers(0, len(ID_SYMBOLS), size=START_SYMBOLS))
        for read in _stored_columns(store, schema, attribute, start, MAX_READ // len(attributes)):
            fields = read.fields
            # Prefix reports (level 1 or more) only; a damaged value (no valid wire value) is left out.
            kept = read.carried & attribute.mech.valid_columns(attribute, fields) & (fields["level"] > 0)
            sample.add(np.column_stack([fields[f][kept] for f in ("a", "b", "y", "level")]))
        run = discovery.discover(attribute, *sample.columns())
        found = _add_found(app, schema, attribute, run.found)
        added, left_out = added + found.added, left_out + found.left_out
        log.info("discovery: %s version %s attribute %s: %d found over %d prefix reports", schema.name,
                 schema.version, attribute.name, len(run.found), sum(run.reports))
    return Found(added, left_out)


def _add_found(app: Flask, schema: Schema, attribute: Attribute, found: list[discovery.Discovered]) -> Found:
    """Add the strings found as discovered candidates, the most supported first while they fit
    (:func:`.candidates.room`: the 10,000-candidate limit and ``LDP_MAX_CELLS``); how many were
    new and how many were left out for want of room (counted in ``/metrics``, and logged)."""
    catalog = context.catalog(app)
    limit = Limit.of(app.config)
    stored, breakdowns = catalog.store.run_tx("candidates", lambda tx: (
        tx.candidates(schema.name, schema.version), tx.breakdowns(schema.name, schema.version)), write=False)
    known = set(attribute.candidates) | {c.value for c in stored if c.attribute == attribute.name}
    fresh = [d for d in found if d.value not in known]  # most supported first, as discover() ranks them
    fits = fresh[:candidates.room(schema, attribute, cells.held_of(stored), limit, cells.breakdowns_of(breakdowns))]
    added, left_out = 0, len(fresh) - len(fits)
    for estimable in (True, False):
        values = [d.value for d in fits if d.estimable is estimable]
        try:
            added += candidates.add_candidates(catalog, schema.name, schema.version, attribute.name, values,
                                               source="discovered", estimated=estimable, limit=limit) if values else 0
        except candidates.CandidateError:  # an admin's add beside this one took the room
            left_out += len(values)
    if left_out:
        context.metrics(app).discovery_left_out.inc(left_out)
        log.warning("discovery: %s version %s attribute %s: %d of the %d new strings found left out for want of room "
                    "(at most %s candidates an attribute, and at most LDP_MAX_CELLS = %s cells a schema version)",
                    schema.name, schema.version, attribute.name, left_out, len(fresh), MAX_CANDIDATES, limit.most)
    return Found(added, left_out)


class UniformSample:
    """At most ``size`` rows, a uniform sample of those added: the ``size`` with the smallest of
    random keys (pages held as they come, trimmed once they hold twice ``size``)."""

    def __init__(self, size: int, rng: np.random.Generator):
        self._size, self._rng = size, rng
        self._pages: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []
        self._held = 0

    def add(self, rows: np.ndarray) -> None:
        self._pages.append(rows)
        self._keys.append(self._rng.random(size=int(rows.shape[0])))
        self._held += rows.shape[0]
        if self._held > 2 * self._size:
            self._trim()

    def _trim(self) -> None:
        if not self._pages:
            return
        rows, keys = np.concatenate(self._pages), np.concatenate(self._keys)
        if rows.shape[0] > self._size:
            kept = np.argpartition(keys, self._size)[: self._size]
            rows, keys = rows[kept], keys[kept]
        self._pages, self._keys, self._held = [rows], [keys], rows.shape[0]

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(a, b, y, level)`` of the sample."""
        self._trim()
        rows = self._pages[0] if self._pages else np.empty((0, 4), dtype=np.int64)
        return rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
