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

import numpy as np
from flask import Flask

from ...shared import discovery
from ...shared.schema import Attribute, Schema
from .. import context
from ..store import Store, WireColumns
from .candidates import CandidateError, add_candidates

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
                added += discover_in(app, schema, rng=rng)
    return added


def discover_in(app: Flask, schema: Schema, *, rng: np.random.Generator | None = None) -> int:
    """Discovery over one schema version's discovering attributes now (the job's step, and what an
    admin's ``POST .../discover`` runs); how many candidates it added (0 if none discovers). The
    reports ingested before the call are settled first, so that discovery reads them all."""
    attributes = [a for a in schema.attributes if a.discover]
    if attributes:
        context.writer(app).settle()
    return _discover_in(app, schema, attributes, rng or np.random.default_rng()) if attributes else 0


def _stored_columns(store: Store, schema: Schema, attribute: Attribute, start: str, budget: int
                    ) -> Iterator[WireColumns]:
    """Pages of the schema version's stored reports, as ``attribute``'s wire fields (the store's
    columnar read: the database extracts them), in id order from ``start`` on, wrapping round to
    those before it, at most ``budget`` reports in all. Ids are random tokens, so a random
    ``start`` makes the reports read, when not all of them, a sample that no id a client chose can
    favour."""
    fields = attribute.mech.columns(attribute)
    for after, through in ((start, None), ("", start)):
        while budget > 0:
            asked = min(PAGE, budget)
            read, count, last, _ = store.run_tx("discovery_read", lambda tx: tx.wire_columns(
                schema.name, schema.version, attribute.name, fields, after, asked, through), write=False)
            if last is not None:  # the page holds reports
                budget, after = budget - count, last
                yield read
            if count < asked:
                break


def _discover_in(app: Flask, schema: Schema, attributes: list[Attribute], rng: np.random.Generator) -> int:
    # One budget for all of the version's discovering attributes, taken one after another: memory
    # and work per run stay bounded however many attributes discover.
    store, added = context.store(app), 0
    for attribute in attributes:
        sample = UniformSample(MAX_REPORTS // len(attributes), rng)
        start = "".join(ID_SYMBOLS[i] for i in rng.integers(0, len(ID_SYMBOLS), size=START_SYMBOLS))
        for read in _stored_columns(store, schema, attribute, start, MAX_READ // len(attributes)):
            fields = read.fields
            # Prefix reports (level 1 or more) only; a damaged value (no valid wire value) is left out.
            kept = read.carried & attribute.mech.valid_columns(attribute, fields) & (fields["level"] > 0)
            sample.add(np.column_stack([fields[f][kept] for f in ("a", "b", "y", "level")]))
        run = discovery.discover(attribute, *sample.columns())
        added += _add_found(app, schema, attribute, run.found)
        log.info("discovery: %s version %s attribute %s: %d found over %d prefix reports", schema.name,
                 schema.version, attribute.name, len(run.found), sum(run.reports))
    return added


def _add_found(app: Flask, schema: Schema, attribute: Attribute, found: list[discovery.Discovered]) -> int:
    """Add the strings found as discovered candidates; how many were new. Near the attribute's
    10,000 candidates, as many as fit, the most supported first (the rest are logged)."""
    def add(values: list[str], estimable: bool) -> int:
        return add_candidates(context.catalog(app), schema.name, schema.version, attribute.name, values,
                              source="discovered", estimated=estimable) if values else 0

    added = 0
    for estimable in (True, False):
        values = [d.value for d in found if d.estimable is estimable]  # most supported first, as discover() ranks them
        try:
            added += add(values, estimable)
        except CandidateError as exc:  # they do not all fit: one at a time until one does not
            log.warning("discovery: %s version %s attribute %s: %s", schema.name, schema.version, attribute.name, exc)
            for value in values:
                try:
                    added += add([value], estimable)
                except CandidateError:
                    break
    return added


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
        self._keys.append(self._rng.random(len(rows)))
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
