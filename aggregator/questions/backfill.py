"""The back-fill: count the retained reports for a question added after they arrived, exactly once.

A question is a batch of string candidates added together, or a breakdown added to a published
version: one mechanism for both, in one table of batches (``backfills``). Each batch has a
watermark (an id): its counters (a breakdown's: its sums) hold what the
stored reports with ids up to it count for it, and ingest counts a report for it iff the report's
id is at most the watermark (:meth:`..ingest.counting.Counting.__call__`). The back-fill moves the
watermark forward over the stored reports, a chunk at a time:

1. read the next chunk after the watermark, in id order, as the reports' numeric form
   (:mod:`..store.wire`; a read-only snapshot: no lock), and count it: a batch of candidates, its
   attribute's columns (:meth:`Counting.backfill_columns`); a breakdown, its two attributes'
   (:func:`..ingest.counting.breakdown_sums`);
2. in one short transaction, with the schema version's row locked against ingest's counting: if
   the watermark is still where it was read, add what the chunk counts, and what the reports stored
   in its range since the read count, less those of windows retention erased since, and move the
   watermark past it (or mark the batch complete).

So every retained report is counted for the batch once, by ingest or here, on every node and
store; several processes may back-fill at once (a chunk whose watermark moved meanwhile is
dropped). The job applies each chunk while it reads and counts the next one from where that apply
moves the watermark (the database's work beside numpy's, on another core): the next chunk's apply
finds the watermark there, or is dropped as any chunk is whose watermark moved. A complete batch
is estimated: in each retained window over all its reports, in the ``all`` rollup over the reports
of the windows still retained when it reached them (its ``n`` says how many).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from flask import Flask

from .. import context
from ..ingest.counting import Counting, breakdown_sums
from ..store import CandidateBatch, Increments, ReportRow, Store, StoredBreakdown, Tx, with_rollup

# (report, candidate) pairs one chunk of the back-fill reads and counts, without a lock, and at
# most MAX_BACKFILL_REPORTS reports; then a short transaction adds a counter per (window,
# candidate) and moves the watermark, so fewer, larger chunks cost less in all (`make bench` prints
# what a back-fill of 1,000 candidates over 1,000,000 reports takes). 250,000 reports keep a chunk's
# memory near 85 MB (the chunk being applied meanwhile keeps some 12 MB: its ids and what it counts;
# the job's peak measured no higher than before it read ahead) and the apply's lock short: under
# steady ingest new reports land inside the chunk's id range (ids are random), and the apply then
# compares the range's ids under the lock.
BACKFILL_CELLS = 250_000_000
MIN_BACKFILL_REPORTS = 100
MAX_BACKFILL_REPORTS = 250_000
BACKFILL_SECONDS = 30.0  # one run of the job goes on for about this long; the next run goes on
BACKFILL_INTERVAL = 5.0  # seconds between runs of the job (it also runs right after an add)


class BackfillChunk(NamedTuple):
    """Stored reports of a batch's back-fill read after its ``watermark`` (in ``batch``), up to
    ``through`` (None: every one after it), and what they count for it, per window; ``read``: how
    many reports of each window were read, and ``ids`` theirs (separated by spaces: they are
    split only when reports were stored in the range since)."""

    schema: str
    version: int
    batch: CandidateBatch | StoredBreakdown
    through: str | None
    ids: str
    counted: Increments
    ends: dict[str, int]  # window -> its end (Unix seconds)
    read: dict[str, int]



def backfill(app: Flask, seconds: float = BACKFILL_SECONDS) -> int:
    """The back-fill job: count the stored reports for the questions added since, a chunk of
    :data:`BACKFILL_CELLS` (report, candidate) pairs (at most :data:`MAX_BACKFILL_REPORTS` reports)
    at a time, for about ``seconds`` (what is left waits for the next run); how many batches it
    completed."""
    store, counting = context.store(app), context.writer(app).counting
    deadline = time.monotonic() + seconds
    completed = 0
    with ThreadPoolExecutor(1, thread_name_prefix="ldp-backfill-apply") as applying:
        for schema, version, batch, size in store.run_tx("filling", lambda tx: tx.filling(), write=False):
            reports = min(MAX_BACKFILL_REPORTS, max(MIN_BACKFILL_REPORTS, BACKFILL_CELLS // max(1, size)))
            if not fill(store, counting, applying, schema, version, batch, reports, deadline):
                return completed
            completed += 1
    return completed


def fill(store: Store, counting: Counting, applying: ThreadPoolExecutor, schema: str, version: int, batch: int,
         reports: int, deadline: float) -> bool:
    """Back-fill ``batch`` a chunk of at most ``reports`` reports at a time until it is complete (or
    gone): True; or until ``deadline`` (monotonic seconds) has passed: False. Each chunk is applied
    in ``applying`` while the next one is read and counted from where that apply moves the
    watermark; if another back-fill moved it first, the next chunk is read again from where it is."""
    def read(after: str | None = None) -> BackfillChunk | None:
        return _read(store, counting, schema, version, batch, reports, after)

    chunk = read()
    while chunk is not None:
        applied = applying.submit(store.run_tx, "backfill_apply", lambda tx, c=chunk: apply_chunk(tx, counting, c))
        # Nothing read ahead past the deadline: the next run of the job reads it.
        following = None if chunk.through is None or time.monotonic() >= deadline else read(chunk.through)
        outcome = applied.result()
        if outcome:
            return True
        if time.monotonic() >= deadline:
            return False
        chunk = following if outcome is not None else read()
    return True


def backfill_chunk(store: Store, counting: Counting, schema: str, version: int, batch: int, reports: int) -> bool:
    """Count for ``batch`` the next (at most ``reports``) stored reports of the schema version after
    its watermark, and move the watermark past them, one chunk on its own: whether the batch is now
    complete (or gone)."""
    chunk = _read(store, counting, schema, version, batch, reports)
    return True if chunk is None else bool(store.run_tx("backfill_apply", lambda tx: apply_chunk(tx, counting, chunk)))


def _read(store: Store, counting: Counting, schema: str, version: int, batch: int, reports: int,
          after: str | None = None) -> BackfillChunk | None:
    """:func:`read_chunk` in a read-only transaction of its own."""
    counting.schema(schema, version)  # looked up before the transaction: it may read the catalog
    return store.run_tx("backfill_read", lambda tx: read_chunk(tx, counting, schema, version, batch, reports, after),
                        write=False)


def read_chunk(tx: Tx, counting: Counting, schema: str, version: int, batch: int,
               reports: int, after: str | None = None) -> BackfillChunk | None:
    """The next chunk of ``batch``'s back-fill, read as the reports' numeric form and counted;
    None if the batch is complete or gone. It starts at the batch's watermark, or at ``after``: where
    the apply of the chunk before it, still running, moves the watermark."""
    target = tx.batch(schema, version, batch)
    if target is None or target.watermark is None:
        return None
    start = target.watermark if after is None else after
    target = target._replace(watermark=start)
    schema_read = counting.schema(schema, version)
    count, last, ids, page = tx.wire_page(schema_read, start, reports)
    if isinstance(target, StoredBreakdown):
        counted = Increments(breakdowns=breakdown_sums(page, [target]))
    else:
        counted = counting.backfill_columns(page.columns(target.attribute), target)
    per_window = np.bincount(page.window, minlength=len(page.windows))
    return BackfillChunk(schema, version, target, last if count == reports else None, ids, counted,
                         dict(zip(page.windows, page.ends)), {w: int(n) for w, n in zip(page.windows, per_window)})


def apply_chunk(tx: Tx, counting: Counting, chunk: BackfillChunk) -> bool | None:
    """Add what ``chunk`` counts (and the reports stored in its range since it was read; less those
    of windows retention erased since) and move the batch's watermark past it: whether the batch is
    complete (or gone); None if another back-fill moved the watermark first (nothing added).

    Reports of a window after the cutoff are never deleted (retention, and PostgreSQL's rewrite,
    delete only reports of windows at or before it), so the range holds as many of them as were
    read iff none was stored since: only then are the ids compared."""
    schema, version, batch = chunk.schema, chunk.version, chunk.batch
    tx.lock_schema(schema, version)
    exists, watermark = tx.watermark(batch.batch) if batch.batch is not None else (False, None)
    if not exists or watermark is None:  # gone, or complete
        return True
    if watermark != batch.watermark:  # moved by another back-fill
        return None
    kept = tx.cutoff(lock=True)
    cutoff = float("-inf") if kept is None else kept
    kept_read = sum(n for w, n in chunk.read.items() if chunk.ends[w] > cutoff)
    late: list[ReportRow] = []
    if tx.count_in_range(schema, version, watermark, chunk.through, cutoff) != kept_read:
        late = tx.rows_in_range_except(schema, version, watermark, chunk.through, set(chunk.ids.split()))
    counted = counting.backfill(late, batch)
    ends = {**chunk.ends, **{r.window: r.window_end for r in late}}
    retained = {w for w, end in ends.items() if end > cutoff}
    tx.add(with_rollup(Increments([], [a for a in chunk.counted.amounts + counted.amounts if a.window in retained],
                                  [b for b in chunk.counted.breakdowns + counted.breakdowns if b.window in retained])))
    number = batch.batch
    assert number is not None  # a breakdown being back-filled has its batch
    if chunk.through is None:
        tx.complete_batch(schema, version, batch.attribute if isinstance(batch, CandidateBatch) else None, number)
    else:
        tx.move_watermark(number, chunk.through)
    tx.candidates_moved(schema, version)
    return chunk.through is None
