"""The discovery job: find the common strings of each discovering string attribute among its
retained reports, and add them as candidates marked ``discovered`` (DESIGN.md, "Strings").

Per published schema version with an attribute that discovers, the job walks the stored reports a
page at a time (:meth:`Store.reports_after`, never all at once), keeps the prefix reports (level
1 or more) of each such attribute, at most :data:`MAX_REPORTS` of them (a uniform sample beyond
that: each report gets a random key and the smallest keys are kept), and runs PEM over them
(:func:`...shared.discovery.discover`). The strings that survive become candidates with source
``discovered`` (one still holding U+FFFD with ``estimated=False``: no level-0 report supports it);
the back-fill then counts the new ones over the retained reports, and the refresh estimates them
from the level-0 reports alone. Only the scheduler runs it, on the leading process (one node at a
time); its work per run is bounded by :data:`MAX_REPORTS` times the candidates a level tests.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
from flask import Flask

from ..shared import discovery
from ..shared.schema import Attribute, Schema
from . import context
from .candidates import CandidateError, add_candidates

log = logging.getLogger(__name__)

DISCOVERY_INTERVAL = 3600.0  # seconds between runs: the common strings of a day change slowly
# Prefix reports read into one run, per attribute: with at most 4,160 candidates a level, a run
# counts at most 4.2e9 (report, candidate) pairs (about 1.3e9 for a 38-symbol alphabet), and holds
# 4 int64 columns and a key per report: about 2 x 40 MB while sampling.
MAX_REPORTS = 1_000_000
PAGE = 20_000  # stored reports read at a time


def discover_strings(app: Flask, *, seed: int | None = None) -> int:
    """The job: discovery over every discovering attribute's retained reports; how many
    candidates it added. ``seed`` fixes the sample's keys (tests); None: fresh ones."""
    store, catalog = context.store(app), context.catalog(app)
    rng = np.random.default_rng(seed)
    added = 0
    for latest in store.latest_schemas():
        for version in store.schema_versions(latest["name"]):
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
        context.store(app).settle()
    return _discover_in(app, schema, attributes, rng or np.random.default_rng()) if attributes else 0


def _discover_in(app: Flask, schema: Schema, attributes: list[Attribute], rng: np.random.Generator) -> int:
    samples = {a.name: UniformSample(MAX_REPORTS, rng) for a in attributes}
    store, after = context.store(app), ""
    while True:
        rows = store.reports_after(schema.name, schema.version, after, PAGE)
        if not rows:
            break
        after = rows[-1].id
        columns: dict[str, list[tuple[int, int, int, int]]] = {a.name: [] for a in attributes}
        for row in rows:
            values: dict[str, Any] = json.loads(row.values)
            for name, kept in columns.items():
                wire = values.get(name)
                if wire is not None and wire["level"] > 0:
                    kept.append((wire["a"], wire["b"], wire["y"], wire["level"]))
        for name, kept in columns.items():
            samples[name].add(np.array(kept, dtype=np.int64).reshape(-1, 4))
    added = 0
    for attribute in attributes:
        run = discovery.discover(attribute, *samples[attribute.name].columns())
        for estimable in (True, False):
            values = [d.value for d in run.found if d.estimable is estimable]
            if not values:
                continue
            try:
                added += add_candidates(context.catalog(app), schema.name, schema.version, attribute.name, values,
                                        source="discovered", estimated=estimable)
            except CandidateError as exc:  # the attribute's 10,000 candidates are taken: the others go on
                log.warning("discovery: %s version %s attribute %s: %s", schema.name, schema.version,
                            attribute.name, exc)
        log.info("discovery: %s version %s attribute %s: %d found over %d prefix reports", schema.name,
                 schema.version, attribute.name, len(run.found), sum(run.reports))
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
        self._keys.append(self._rng.random(rows.shape[0]))
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
