"""Counting: what stored reports add to the counters. The one home of that rule.

A report adds one to ``n`` of each attribute it carries in its window (unless its mechanism says it
is not counted: :meth:`Mechanism.counted`, a string prefix's report for discovery), and to each value key its
mechanism's statistics name (:meth:`Mechanism.statistics`: hits for shares, Σ and Σ² for numeric
means) that key's amount; only amounts that are not zero become rows, so a report adds a few rows
per attribute however many categories it has (DESIGN.md, "Storage").

:class:`Counting` is built once per app (``create_app``) and called by the writer
(:mod:`.writer`) inside the transaction that stores the reports it counts, and by the back-fill
(:mod:`..questions.backfill`). So counting is one step with one input (stored report rows) and one
output (:class:`Increments`), and the store itself never runs mechanism math nor decodes a report
(but once: the migration that packed the reports stored before their numeric form).
The back-fill of candidates reads reports' numeric form (:mod:`..store.wire`, packed once at
ingest), never their JSON: counting checks and counts those columns (:meth:`Counting.backfill_columns`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from functools import lru_cache
from operator import itemgetter
from typing import Any, Callable, Mapping, Sequence

import msgspec
import numpy as np

from ...shared import breakdowns as shared_breakdowns
from ...shared.reports import check_values
from ...shared.schema import Attribute, Schema
from ..store import (BATCH_N_PREFIX, AmountRow, BreakdownAmountRow, CandidateBatch, Increments, Known, ReportRow,
                     StoredBreakdown, TotalRow, WireColumns, layout, wire_columns)

log = logging.getLogger(__name__)

# Distinct wire values kept decoded: most reports of a schema share a few.
DECODED_CACHE = 4096
_ALL_BUT_ID = itemgetter(1, 2, 3, 4, 5)  # (schema, version, window, window_end, values) of a ReportRow
# Distinct wire values in one call from which they are parsed together rather than through the cache.
BULK_DECODE = 256
_NOTHING_KNOWN = Known(-1)  # a schema version of which no candidate or breakdown was read
_read_json = msgspec.json.Decoder().decode


@lru_cache(maxsize=DECODED_CACHE)
def _decode(values: str) -> dict[str, Any] | None:
    """A stored report's values (JSON), or None for a damaged one."""
    try:
        decoded = json.loads(values)
    except ValueError:
        return None
    return decoded if type(decoded) is dict else None


class Counting:
    """The counter increments of stored report rows. ``schemas(name, version)`` gives a published
    schema (the catalog's cached lookup) or None."""

    def __init__(self, schemas: Callable[[str, int], Schema | None]):
        self._schemas = schemas

    def countable(self, rows: Sequence[ReportRow]) -> list[ReportRow]:
        """``rows`` read back from a file (a dead process's inbox segment), each checked and packed
        (:mod:`..store.wire`), less those that cannot be counted (a damaged line: a schema that is
        not published, or values the rules refuse, :func:`checked_values`: no JSON object, an
        attribute the schema does not have, or lacks, a wire value its mechanism refuses), each left
        out with a warning, so one damaged line
        never stops the others. Each distinct wire text is checked once."""
        kept = []
        packed: dict[tuple[str, int, str], bytes | None] = {}
        for row in rows:
            key = (row.schema, row.version, row.values)
            if key not in packed:
                packed[key] = self._packed(*key)
            wire = packed[key]
            if wire is not None:
                kept.append(row._replace(wire=wire))
            else:
                log.warning("left out a stored report that cannot be counted (schema %r version %s)",
                            row.schema[:64], row.version)
        return kept

    def _packed(self, name: str, version: int, values: str) -> bytes | None:
        """The stored numeric form of countable values, else None."""
        schema = self._schemas(name, version)
        if schema is None:
            return None
        decoded = checked_values(schema, values)
        return None if decoded is None else layout(schema).pack(decoded)

    def __call__(self, rows: Sequence[ReportRow], known: Mapping[tuple[str, int], Known] | None = None
                 ) -> Increments:
        """What ``rows`` (countable ones) add to the counters, summed per counter. Rows alike (same
        window and wire values, which is most of them) are decoded once; each attribute's wire
        values of a window go to its mechanism together (:meth:`Mechanism.tally`), with the count
        of reports that sent each, so that equal values are counted once and a string attribute's
        supports are computed in bulk (numpy over every candidate).

        ``known``: per schema version, its candidates beyond the listed ones (:class:`Known`). A
        back-filled batch counts with the listed candidates, over every report; a batch being
        back-filled counts only the reports whose id is at most its watermark (the others are the
        back-fill's to count, :meth:`backfill`), and how many those are. Each of its breakdowns
        counts every report of each window, in bulk (:func:`breakdown_sums`); one being back-filled,
        as a batch is, only those up to its watermark."""
        complete: dict[tuple[str, int, str], tuple[str, ...]] = {}
        filling: list[tuple[str, int, str, CandidateBatch]] = []
        for (schema, version), k in (known or {}).items():
            for batch in k.batches:
                if batch.watermark is None:
                    complete[(schema, version, batch.attribute)] = batch.candidates
                else:
                    filling.append((schema, version, batch.watermark, batch))
        wire, ends, decoded = _wire(rows)
        wire = self._counted(wire)
        totals: list[TotalRow] = []
        amounts: list[AmountRow] = []
        for (schema, version, window, name), reported in wire.items():
            attribute = self.schema(schema, version).by_name[name]
            added = complete.get((schema, version, name))
            if added:
                attribute = attribute.with_candidates(attribute.candidates + added)
            totals.append(TotalRow(schema, version, window, name, sum(c for _, c in reported),
                                   ends[(schema, version, window)]))
            amounts += _amounts(attribute, (schema, version, window, name), reported)
        for schema, version, watermark, batch in filling:
            amounts += self.backfill([r for r in rows if r.schema == schema and r.version == version
                                      and r.id <= watermark], batch).amounts
        sums: list[BreakdownAmountRow] = []
        for (schema, version, window), values in decoded.items():
            counted = [b for b in (known or {}).get((schema, version), _NOTHING_KNOWN).breakdowns if b.complete]
            if counted:
                sums += breakdown_sums(self.schema(schema, version), counted, window, values)
        for (schema, version), k in (known or {}).items():
            for b in k.breakdowns:
                if b.watermark is not None:
                    sums += self.backfill([r for r in rows if r.schema == schema and r.version == version
                                           and r.id <= b.watermark], b).breakdowns
        return Increments(totals, amounts, sums)

    def backfill(self, rows: Sequence[ReportRow], batch: CandidateBatch | StoredBreakdown) -> Increments:
        """What ``rows`` (of one schema version) add to the supports of ``batch``'s candidates alone,
        and to the number of reports the batch was counted over (key :data:`BATCH_N_PREFIX` and its
        number: a batch's rollup ``n`` is the attribute's less the reports it missed, known when it
        is complete): :meth:`backfill_columns` of their numeric form (:mod:`..store.wire`, packed at
        ingest). For a breakdown: what they add to its sums (which count their own reports), per
        window, from their values decoded here."""
        if not rows:
            return Increments()
        if isinstance(batch, StoredBreakdown):
            return self._breakdown_backfill(rows, batch)
        schema = self.schema(rows[0].schema, rows[0].version)
        read = wire_columns(schema, batch.attribute, np.array([r.window_end for r in rows], dtype=np.int64),
                            layout(schema).matrix(r.wire for r in rows))
        return self.backfill_columns(read, batch)

    def _breakdown_backfill(self, rows: Sequence[ReportRow], breakdown: StoredBreakdown) -> Increments:
        """What ``rows`` (of one schema version, stored) add to ``breakdown``'s sums, per window;
        a report whose two values do not check (damaged) is left out with a warning."""
        schema = self.schema(rows[0].schema, rows[0].version)
        of, by = schema.attribute(breakdown.of), schema.attribute(breakdown.by)
        windows: dict[str, list[dict[str, Any]]] = {}
        damaged = 0
        for row, decoded in zip(rows, _decode_all([r.values for r in rows])):
            if decoded is None or not all(_checks(a, decoded[a.name]) for a in (of, by) if a.name in decoded):
                damaged += 1
                continue
            windows.setdefault(row.window, []).append(decoded)
        if damaged:
            log.warning("left out %d stored reports that cannot be counted (schema %r version %s)", damaged,
                        schema.name[:64], schema.version)
        return Increments(breakdowns=[s for window, values in windows.items()
                                      for s in breakdown_sums(schema, [breakdown], window, values)])

    def backfill_columns(self, read: WireColumns, batch: CandidateBatch) -> Increments:
        """:meth:`backfill` of reports read as columns: those whose attribute holds no valid value
        (damaged) are left out with a warning, those their mechanism does not count (:meth:`counted`,
        as for ingest) are left out, and the rest are counted per window, in one bulk pass."""
        attribute = self.schema(read.schema, read.version).by_name[batch.attribute].with_candidates(batch.candidates)
        mech = attribute.mech
        valid = read.carried & mech.valid_columns(attribute, read.fields)
        damaged = int(read.carried.sum()) - int(valid.sum())
        if damaged:
            log.warning("left out %d stored reports that cannot be counted (schema %r version %s)", damaged,
                        read.schema[:64], read.version)
        kept = np.flatnonzero(valid & mech.counted(attribute, read.fields))
        kept = kept[np.argsort(read.window[kept], kind="stable")]
        bounds = np.searchsorted(read.window[kept], np.arange(len(read.windows) + 1))
        sums = mech.tally_columns(attribute, {f: c[kept] for f, c in read.fields.items()}, bounds)
        keys = mech.counter_keys(attribute)
        amounts: list[AmountRow] = []
        for i, window in enumerate(read.windows):
            if bounds[i + 1] == bounds[i]:
                continue  # nothing of the attribute counted there: neither n nor any amount
            key = (read.schema, read.version, window, attribute.name)
            amounts += [AmountRow(*key, keys[j], int(sums[i, j])) for j in np.flatnonzero(sums[i])]
            amounts.append(AmountRow(*key, f"{BATCH_N_PREFIX}{batch.batch}", int(bounds[i + 1] - bounds[i])))
        return Increments([], amounts)

    def _counted(self, wire: dict[tuple[str, int, str, str], list[tuple[Any, int]]]
                 ) -> dict[tuple[str, int, str, str], list[tuple[Any, int]]]:
        """``wire`` less the values their mechanism does not count (a discovering string
        attribute's prefix reports, level 1 or more: discovery's alone), and the attributes left
        with none: they add neither to ``n`` nor to any amount."""
        out = {}
        for key, reported in wire.items():
            attribute = self.schema(key[0], key[1]).by_name[key[3]]
            kept = [(value, count) for value, count in reported if attribute.mech.counted(attribute, value)]
            if kept:
                out[key] = kept
        return out

    def schema(self, name: str, version: int) -> Schema:
        """The published schema of stored reports (cached by the catalog: look it up before a
        transaction that counts, since a lookup may open one)."""
        schema = self._schemas(name, version)
        if schema is None:  # countable() said it was published, and a published schema stays
            raise LookupError(f"schema {name!r} version {version} is not published")
        return schema


def breakdown_sums(schema: Schema, breakdowns: Sequence[StoredBreakdown], window: str,
                   values: Sequence[Mapping[str, Any]]) -> list[BreakdownAmountRow]:
    """What reports of ``schema`` in ``window`` (their decoded ``values``, one a report) add to each
    of ``breakdowns``' sums: :func:`...shared.breakdowns.count`, one matrix product a breakdown."""
    out = []
    for b in breakdowns:
        sums = shared_breakdowns.count(schema, shared_breakdowns.Breakdown(b.of, b.by), values)
        out += [BreakdownAmountRow(schema.name, schema.version, window, b.id, of_key, by_key, amount)
                for (of_key, by_key), amount in sums.amounts.items()]
    return out


def _wire(rows: Sequence[ReportRow]
          ) -> tuple[dict[tuple[str, int, str, str], list[tuple[Any, int]]], dict[tuple[str, int, str], int],
                     dict[tuple[str, int, str], list[dict[str, Any]]]]:
    """Per (schema, version, window, attribute) the wire values of ``rows`` with how many reports
    sent each (rows alike decoded once), each window's end, and per (schema, version, window)
    the decoded values of each report (those alike: the same object, repeated)."""
    alike = Counter(map(_ALL_BUT_ID, rows))
    wire: dict[tuple[str, int, str, str], list[tuple[Any, int]]] = {}
    ends: dict[tuple[str, int, str], int] = {}
    reports: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for ((schema, version, window, end, _), count), decoded in zip(alike.items(), _decode_all([k[4] for k in alike])):
        ends[(schema, version, window)] = end
        if decoded is not None:
            reports.setdefault((schema, version, window), []).extend([decoded] * count)
        for name, reported in (decoded or {}).items():
            wire.setdefault((schema, version, window, name), []).append((reported, count))
    return wire, ends, reports


def checked_values(schema: Schema, values: str | bytes) -> dict[str, Any] | None:
    """A report's values (their JSON text) decoded, if ``schema`` takes them as the rules do
    (:func:`...shared.reports.check_values`); None if not: a report that cannot be counted."""
    try:
        decoded: dict[str, Any] = _read_json(values)
        check_values(schema, decoded)
    except (msgspec.MsgspecError, ValueError, RecursionError):  # ReportError, UnicodeDecodeError, deep nesting
        return None
    return decoded  # a dict: check_values took it


def _checks(attribute: Attribute, reported: Any) -> bool:
    """Whether ``reported`` is a valid wire value of ``attribute``."""
    try:
        attribute.mech.check(attribute, reported)
    except ValueError:  # WireError
        return False
    return True


def _decode_all(texts: list[str]) -> list[dict[str, Any] | None]:
    """:func:`_decode` of each of ``texts``: a few through its cache (most reports of a schema share
    a few values), many distinct ones (a string attribute's) as one JSON array, which parses in
    half the time; one at a time if that fails (a damaged one among them)."""
    if len(texts) < BULK_DECODE:
        return [_decode(t) for t in texts]
    try:
        decoded = json.loads("[" + ",".join(texts) + "]")
    except ValueError:
        return [_decode(t) for t in texts]
    return [d if type(d) is dict else None for d in decoded] if len(decoded) == len(texts) else [
        _decode(t) for t in texts]


def _amounts(attribute: Attribute, key: tuple[str, int, str, str], reported: list[tuple[Any, int]]) -> list[AmountRow]:
    """The amounts the wire values ``reported`` (with their counts) add to ``attribute``'s value keys."""
    return [AmountRow(*key, value, amount) for value, amount in attribute.mech.tally(attribute, reported).items()
            if amount]
