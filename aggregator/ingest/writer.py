"""The one write path of reports: each new id stored once and counted once, in the same transaction.

:class:`ReportWriter` sits above the store (as Janus's report write batcher does): it calls
counting (:mod:`.counting`) and hands the store the rows and their increments, in one
transaction per group (:meth:`..store.Store.run_tx`). Two ways to the same transaction, chosen by
what the database can afford:

- **Through an inbox** (SQLite, whose one write lock a commit holds through its fsync): a request's
  new reports are appended to this process's inbox segment and acknowledged
  (:mod:`.inbox`); the segment is *folded* in a moment later, :data:`FOLD_CHUNK` reports per
  transaction, each stored only if its id is not and counted only then. The reports found stored
  when folded were answered as new (a retry that raced its first send): ``on_late_duplicates``.
- **Directly** (PostgreSQL): the requests that arrive while a transaction commits share the next
  one (:class:`.groupcommit.GroupCommit`). Their increments are counted before the transaction
  (most batches hold no stored id and no candidate moved meanwhile) and counted again inside it
  only when that was not so.

A relay's batch (:meth:`ReportWriter.write_relayed`) takes neither way: one transaction of its
own, on either store, since its answer says how many reports were new and its crowds must be
written with them (DESIGN.md, "Relay and amplification").

Either way, inside the transaction: the reports of windows retention erased are left out, the new
ids are inserted, the schema versions' candidates are read with their rows locked against a
back-fill moving a watermark (:meth:`..store.Tx.known`, with the versions' breakdowns), and what
the new reports count is added: to the counters, to each breakdown's sums, and to how the
window's reports arrived (:class:`..store.CrowdRow`: one row per window and batch, not per report).

*Settling* (:meth:`ReportWriter.settle`) is the explicit first step of the jobs that read the
counters: fold everything acknowledged so far, and take arrival order out of what was stored.
No read of the store does it behind a caller's back.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Callable, Hashable, Mapping, NamedTuple, Sequence

from ..store import (ROW_END, ROW_ID, ROW_VERSION, ROW_WINDOW, CrowdRow, Increments, Known, ReportRow, Store, StoreBusy,
                     Tx, first_of_each_id, with_rollup)
from .counting import Counting
from .groupcommit import GroupCommit
from .inbox import SETTLE_SECONDS, FoldProgress, Inbox

log = logging.getLogger(__name__)

# Reports folded in from the inbox per transaction: a bound on how long the write lock is held.
FOLD_CHUNK = 5_000
# What a schema version's candidates count as before they were read: a mark no version has, so the
# transaction reads them (and counts again).
_UNREAD = Known(-1)


class _Batch(NamedTuple):
    """One request's new reports, handed to a group commit, with what they count if all are new
    and the candidates' marks they were counted at."""

    rows: Sequence[ReportRow]
    counted: Increments | None  # None: not counted yet
    marks: dict[tuple[str, int], int]
    # A relay's batch: what the aggregator can tell apart of each report's request (by id); the new
    # reports of a window that share it are a crowd. None: posted directly.
    looks: Mapping[str, Hashable] | None = None

class ReportWriter:
    """Stores and counts reports exactly once (see the module). ``on_late_duplicates(n)`` is told
    of reports answered as new and found stored when they were folded in."""

    def __init__(self, store: Store, counting: Counting, on_late_duplicates: Callable[[int], None] = lambda n: None):
        self.store = store
        self.counting = counting
        self._known: dict[tuple[str, int], Known] = {}  # counted candidates per schema version, by mark
        folder = store.inbox_folder
        self._inbox = None if folder is None else Inbox(
            folder, self._store_folded, durable=store.durable, on_duplicates=on_late_duplicates,
            after_folding=store.erase_arrival_order)
        self._group: GroupCommit[_Batch] = GroupCommit(self._commit_batches)

    def write(self, rows: Sequence[ReportRow]) -> int:
        """Store ``rows`` (ids distinct, validated) durably before it returns: how many were new as far
        as is known now (through the inbox, an id already stored is found when folded)."""
        if self._inbox is not None:
            return self._inbox.append(rows)
        self._look_up_schemas(rows)
        known = {key: self._known.get(key, _UNREAD) for key in set(map(ROW_VERSION, rows))}
        return int(self._group.run(_Batch(rows, self.counting(rows, known), {k: v.mark for k, v in known.items()})))

    def write_relayed(self, rows: Sequence[ReportRow], looks: Mapping[str, Hashable]) -> int:
        """Store a relay batch's ``rows`` (ids distinct, validated) in one transaction of their own,
        with the batch's crowd per window: how many were new. ``looks`` gives, by report id, what the
        aggregator sees of the report's request besides its content (its key id and size): a crowd
        is the reports stored for the first time there that look alike, and a window keeps the
        smallest of its crowds. No inbox and no group commit: the answer must know what is new, and a crowd is one
        batch's. Through an inbox, what was acknowledged before is folded in first (waiting for live
        processes as :meth:`settle` does), so a report posted directly too is a duplicate here, not
        part of the crowd."""
        if self._inbox is not None:  # what was acknowledged directly is stored first: found as duplicates here
            self._inbox.settle(SETTLE_SECONDS)
        self._look_up_schemas(rows)
        return int(self.store.run_tx("relay_batch", lambda tx: self._store_new(tx, [_Batch(rows, None, {}, looks)])[0]))

    def settle(self, *, wait: bool = True) -> None:
        """Count every report acknowledged before this call (in this process or another) and take
        arrival order out of what was stored. ``wait=False`` (a process starting up): only this
        process's and those of processes that died, without waiting for live ones. Raises the
        store's error if what was acknowledged cannot be counted now; a database too busy to take
        arrival order out now (PostgreSQL) is only logged: the counters are right, the next settle
        goes on."""
        if self._inbox is not None:
            self._inbox.settle(SETTLE_SECONDS if wait else 0.0)  # it erases arrival order after folding
        elif wait:
            try:
                self.store.erase_arrival_order()
            except StoreBusy as exc:
                log.warning("could not rewrite the reports stored since the last settle: %s", exc)

    def failing(self) -> str | None:
        """What this process's folds of the inbox have said while failing for a while without a
        success (the database cannot take what was acknowledged); None while they succeed, and
        always where there is no inbox."""
        return None if self._inbox is None else self._inbox.failing()

    def _look_up_schemas(self, rows: Sequence[ReportRow]) -> None:
        """Look up the schemas of ``rows`` before a transaction counts them (a lookup may open a
        transaction of its own)."""
        for name, version in set(map(ROW_VERSION, rows)):
            self.counting.schema(name, version)

    def _store_new(self, tx: Tx, batches: Sequence[_Batch]) -> list[int]:
        """In ``tx``: the schema versions' candidates read (their rows locked in key order) and the
        retention cutoff read (held) once; then for each batch in turn, those of its rows whose id
        is new and whose window is retained inserted and counted (by what was counted before the
        transaction, when it was counted at the marks read here and all are new), and what they
        count added. How many of each batch were new (an id in two batches is new in the first only)."""
        known = tx.known(set().union(*(map(ROW_VERSION, b.rows) for b in batches)), self._known)
        cutoff = tx.cutoff(lock=True)
        news, increments = [], Increments()
        for b in batches:
            kept = b.rows
            if cutoff is not None and b.rows and min(map(ROW_END, b.rows)) <= cutoff:
                kept = [r for r in b.rows if r.window_end > cutoff]
            inserted = tx.insert_new(kept)
            new = kept if len(inserted) == len(kept) else [r for r in kept if r.id in inserted]
            counted = b.counted
            if counted is None or len(new) != len(b.rows) or b.marks != {k: known[k].mark for k in b.marks if k in known}:
                counted = self.counting(new, known)
            increments.totals += counted.totals
            increments.amounts += counted.amounts
            increments.breakdowns += counted.breakdowns
            increments.crowds += _arrivals(new, b.looks)
            news.append(len(new))
        tx.add(with_rollup(increments))
        return news

    def _commit_batches(self, batches: Sequence[_Batch]) -> list[int]:
        """Store a group of batches in one transaction: how many reports of each were new."""
        return self.store.run_tx("ingest", lambda tx: self._store_new(tx, batches))

    def _store_folded(self, rows: list[ReportRow], validated: bool, progress: FoldProgress) -> None:
        """Fold inbox rows in, :data:`FOLD_CHUNK` at a time in id order, noting in ``progress`` each
        committed chunk's ids and how many of them were stored already (rows it holds already are
        skipped: their chunk was committed by an earlier fold that failed later). A row that cannot
        be counted (a damaged line of a dead process's segment: only rows not ``validated`` by this
        process's ingest are checked) is left out."""
        unique = [r for r in first_of_each_id(rows) if r.id not in progress.stored]
        countable = sorted(unique if validated else self.counting.countable(unique), key=ROW_ID)
        self._look_up_schemas(countable)
        for start in range(0, len(countable), FOLD_CHUNK):
            chunk = countable[start:start + FOLD_CHUNK]
            new = self.store.run_tx("fold", lambda tx: self._store_new(tx, [_Batch(chunk, None, {})])[0])
            progress.stored.update(map(ROW_ID, chunk))
            progress.duplicates += len(chunk) - new


def _arrivals(new: Sequence[ReportRow], looks: Mapping[str, Hashable] | None) -> list[CrowdRow]:
    """How ``new`` reports (one batch's, stored for the first time) arrived, per window: directly
    (``looks`` None), or through a relay, where the window's crowd is the fewest of them whose
    requests look alike (the same ``looks``): reports the aggregator can tell apart by their
    request's key id or size are no crowd for each other."""
    windows: Counter[tuple[str, int, str]] = Counter(map(ROW_WINDOW, new))
    if looks is None:
        return [CrowdRow(*key, 0, n, None) for key, n in sorted(windows.items())]
    alike = Counter(((r.schema, r.version, r.window), looks[r.id]) for r in new)
    crowd: dict[tuple[str, int, str], int] = {}
    for (window, _), n in alike.items():
        crowd[window] = min(n, crowd.get(window, n))
    return [CrowdRow(*key, n, 0, crowd[key]) for key, n in sorted(windows.items())]
