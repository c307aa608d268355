"""Counting: what stored reports add to the counters. The one home of that rule.

A report adds one to ``n`` of each attribute it carries in its window (unless its mechanism says it
is not counted: :meth:`Mechanism.counted`, a string prefix's report for discovery), and to each value key its
mechanism's statistics name (:meth:`Mechanism.statistics`: hits for shares, Σ and Σ² for numeric
means) that key's amount; only amounts that are not zero become rows, so a report adds a few rows
per attribute however many categories it has (DESIGN.md, "Storage").

:class:`Counting` is built once per app (``create_app``) and called by the writer
(:mod:`.writer`) inside the transaction that stores the reports it counts, and by the back-fill
(:mod:`..questions.backfill`). So counting is one step with one input (stored report rows, or
their numeric form read as columns) and one output (:class:`Increments`), and the store itself
never runs mechanism math nor decodes a report (but once: the migration that packed the reports
stored before their numeric form, :func:`..store.wire.pack_stored_reports`).

A report's values are decoded and checked once, at ingest (:mod:`.reader`, or :meth:`Counting.countable`
for lines read back from a dead process's inbox), and packed into their numeric form
(:mod:`..store.wire`); counting reads that form alone, one array of records per schema version, each
attribute's columns counted in bulk by its mechanism (:meth:`Mechanism.tally_columns`), each
breakdown's by one matrix product: no JSON is parsed to count, at ingest or in a back-fill.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator, Mapping, Sequence

import msgspec
import numpy as np

from ...shared import breakdowns as shared_breakdowns
from ...shared.reports import check_values
from ...shared.schema import Attribute, Schema
from ..store import (BATCH_N_PREFIX, ROW_END, ROW_VERSION, ROW_WIRE, AmountRow, BreakdownAmountRow, CandidateBatch,
                     Increments, Known, Layout, NumericPage, ReportRow, StoredBreakdown, TotalRow, WireColumns, layout)

log = logging.getLogger(__name__)

_NOTHING_KNOWN = Known(-1)  # a schema version of which no candidate or breakdown was read
_read_json = msgspec.json.Decoder().decode


class Counting:
    """The counter increments of stored report rows. ``schemas(name, version)`` gives a published
    schema (the catalog's cached lookup) or None."""

    def __init__(self, schemas: Callable[[str, int], Schema | None]):
        self._schemas = schemas
        # Each schema version's layout, kept with the schema it was made from (published versions
        # never change): counting one small batch costs no new layout.
        self._layouts: dict[tuple[str, int], tuple[Schema, Layout]] = {}

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
        """What ``rows`` (countable ones) add to the counters, summed per counter: per schema
        version their numeric form as one array of records, each attribute's columns of a window counted by
        its mechanism together (:meth:`Mechanism.tally_columns`: a string attribute's supports in
        bulk, numpy over every candidate).

        ``known``: per schema version, its candidates beyond the listed ones (:class:`Known`). A
        back-filled batch counts with the listed candidates, over every report; a batch being
        back-filled counts only the reports whose id is at most its watermark (the others are the
        back-fill's to count, :meth:`backfill`), and how many those are. Each of its breakdowns
        counts every report of each window, in bulk (:func:`breakdown_sums`); one being back-filled,
        as a batch is, only those up to its watermark."""
        complete: dict[tuple[str, int, str], tuple[str, ...]] = {}
        filling: list[tuple[str, int, str, CandidateBatch]] = []
        for (name, version), k in (known or {}).items():
            for batch in k.batches:
                if batch.watermark is None:
                    complete[(name, version, batch.attribute)] = batch.candidates
                else:
                    filling.append((name, version, batch.watermark, batch))
        totals: list[TotalRow] = []
        amounts: list[AmountRow] = []
        sums: list[BreakdownAmountRow] = []
        for (name, version), group in _by_version(rows).items():
            schema = self.schema(name, version)
            page = self._page(schema, group)
            for attribute in schema.attributes:
                added = complete.get((name, version, attribute.name))
                if added:
                    attribute = attribute.with_candidates(attribute.candidates + added)
                read = page.columns(attribute.name)
                keys = attribute.mech.counter_keys(attribute)
                for i, n, tallied in self._tallied(read, attribute):
                    key = (name, version, read.windows[i], attribute.name)
                    totals.append(TotalRow(*key, n, read.ends[i]))
                    amounts += [AmountRow(*key, keys[j], tallied[j].item()) for j in np.flatnonzero(tallied)]
            counted = [b for b in (known or {}).get((name, version), _NOTHING_KNOWN).breakdowns if b.complete]
            if counted:
                sums += breakdown_sums(page, counted)
        for name, version, watermark, batch in filling:
            amounts += self.backfill([r for r in rows if r.schema == name and r.version == version
                                      and r.id <= watermark], batch).amounts
        for (name, version), k in (known or {}).items():
            for b in k.breakdowns:
                if b.watermark is not None:
                    sums += self.backfill([r for r in rows if r.schema == name and r.version == version
                                           and r.id <= b.watermark], b).breakdowns
        return Increments(totals, amounts, sums)

    def backfill(self, rows: Sequence[ReportRow], batch: CandidateBatch | StoredBreakdown) -> Increments:
        """What ``rows`` (of one schema version) add to the supports of ``batch``'s candidates alone,
        and to the number of reports the batch was counted over (key :data:`BATCH_N_PREFIX` and its
        number: a batch's rollup ``n`` is the attribute's less the reports it missed, known when it
        is complete); for a breakdown, what they add to its sums (which count their own reports),
        per window. From their numeric form (:mod:`..store.wire`, packed at ingest)."""
        if not rows:
            return Increments()
        page = self._page(self.schema(rows[0].schema, rows[0].version), rows)
        if isinstance(batch, StoredBreakdown):
            return Increments(breakdowns=breakdown_sums(page, [batch]))
        return self.backfill_columns(page.columns(batch.attribute), batch)

    def backfill_columns(self, read: WireColumns, batch: CandidateBatch) -> Increments:
        """:meth:`backfill` of reports read as columns: those whose attribute holds no valid value
        (damaged) are left out with a warning, those their mechanism does not count (:meth:`counted`,
        as for ingest) are left out, and the rest are counted per window, in one bulk pass."""
        attribute = self.schema(read.schema, read.version).by_name[batch.attribute].with_candidates(batch.candidates)
        keys = attribute.mech.counter_keys(attribute)
        amounts: list[AmountRow] = []
        for i, n, tallied in self._tallied(read, attribute):
            key = (read.schema, read.version, read.windows[i], attribute.name)
            amounts += [AmountRow(*key, keys[j], tallied[j].item()) for j in np.flatnonzero(tallied)]
            amounts.append(AmountRow(*key, f"{BATCH_N_PREFIX}{batch.batch}", n))
        return Increments([], amounts)

    def _page(self, schema: Schema, rows: Sequence[ReportRow]) -> NumericPage:
        """``rows`` (of ``schema``'s version) in their numeric form."""
        key = (schema.name, schema.version)
        kept = self._layouts.get(key)
        if kept is None or kept[0] is not schema:
            kept = self._layouts[key] = (schema, layout(schema))
        packing = kept[1]
        return NumericPage(schema, packing, np.fromiter(map(ROW_END, rows), dtype=np.int64, count=len(rows)),
                           packing.records(map(ROW_WIRE, rows)))

    def _tallied(self, read: WireColumns, attribute: Attribute) -> Iterator[tuple[int, int, np.ndarray]]:
        """Per window of ``read`` (by its index) where ``attribute`` counts some report: how many it
        counts (its ``n``) and each :meth:`Mechanism.counter_keys` amount. Reports whose attribute
        is damaged are left out with a warning, and those its mechanism does not count
        (:meth:`Mechanism.counted`: a prefix's report, discovery's alone) are left out."""
        mech = attribute.mech
        valid = _valid(read, attribute)
        kept = np.flatnonzero(valid & mech.counted(attribute, read.fields))
        if len(read.windows) == 1:  # most pages: nothing to sort
            bounds = np.array([0, len(kept)])
        else:
            kept = kept[np.argsort(read.window[kept], kind="stable")]
            bounds = np.searchsorted(read.window[kept], np.arange(len(read.windows) + 1))
        tallied = mech.tally_columns(attribute, {f: c[kept] for f, c in read.fields.items()}, bounds)
        for i in range(len(read.windows)):
            if bounds[i + 1] > bounds[i]:
                yield i, int(bounds[i + 1] - bounds[i]), tallied[i]

    def schema(self, name: str, version: int) -> Schema:
        """The published schema of stored reports (cached by the catalog: look it up before a
        transaction that counts, since a lookup may open one)."""
        schema = self._schemas(name, version)
        if schema is None:  # countable() said it was published, and a published schema stays
            raise LookupError(f"schema {name!r} version {version} is not published")
        return schema


def breakdown_sums(page: NumericPage, breakdowns: Sequence[StoredBreakdown]) -> list[BreakdownAmountRow]:
    """What the reports of ``page`` add to each of ``breakdowns``' sums, per window: over those that
    carry both attributes intact, :func:`...shared.breakdowns.count_wire`, one matrix product a
    breakdown and window."""
    schema, out = page.schema, []
    for b in breakdowns:
        of, by = schema.attribute(b.of), schema.attribute(b.by)
        of_read, by_read = page.columns(of.name), page.columns(by.name)
        both = _valid(of_read, of) & _valid(by_read, by)
        for i, window in enumerate(page.windows):
            kept = np.flatnonzero(both & (page.window == i))
            if not len(kept):
                continue
            sums = shared_breakdowns.count_wire(
                of, by, of.mech.wire_of_columns(of, {f: c[kept] for f, c in of_read.fields.items()}),
                by.mech.wire_of_columns(by, {f: c[kept] for f, c in by_read.fields.items()}))
            out += [BreakdownAmountRow(schema.name, schema.version, window, b.id, of_key, by_key, amount)
                    for (of_key, by_key), amount in sums.amounts.items()]
    return out


def _valid(read: WireColumns, attribute: Attribute) -> np.ndarray:
    """Which reports of ``read`` carry ``attribute`` intact and valid; those that carry it damaged
    (written behind the store's back) are logged."""
    valid: np.ndarray = read.intact & attribute.mech.valid_columns(attribute, read.fields)
    damaged = np.count_nonzero(read.carried) - np.count_nonzero(valid)
    if damaged:
        log.warning("left out %d stored reports that cannot be counted (schema %r version %s)", damaged,
                    read.schema[:64], read.version)
    return valid


def _by_version(rows: Sequence[ReportRow]) -> dict[tuple[str, int], list[ReportRow]]:
    """``rows`` per schema version, in order."""
    versions = set(map(ROW_VERSION, rows))
    if len(versions) == 1:  # most batches: no Python step a row
        return {versions.pop(): list(rows)}
    out: dict[tuple[str, int], list[ReportRow]] = {}
    for row in rows:
        out.setdefault((row.schema, row.version), []).append(row)
    return out


def checked_values(schema: Schema, values: str | bytes) -> dict[str, Any] | None:
    """A report's values (their JSON text) decoded, if ``schema`` takes them as the rules do
    (:func:`...shared.reports.check_values`); None if not: a report that cannot be counted."""
    try:
        decoded: dict[str, Any] = _read_json(values)
        check_values(schema, decoded)
    except (msgspec.MsgspecError, ValueError, RecursionError):  # ReportError, UnicodeDecodeError, deep nesting
        return None
    return decoded  # a dict: check_values took it
