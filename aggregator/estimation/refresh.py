"""The estimation job: turn changed counters into debiased estimates with their intervals.

Each window's breakdown rows are computed beside its estimates, from its breakdown sums
(:mod:`.breakdowns`), and written in the same transactions under the same rule. First, the
central epsilon of each crowd a relay batch changed is computed and kept (:mod:`.crowds`).

Only windows whose counters changed since the last refresh are recomputed (the dirty marks
ingest leaves, the ``all`` rollup among them), and every window whose estimates are at another
confidence level than ``LDP_CONFIDENCE``. Everything is read from the counters, never from the
raw reports. Counters are read from a snapshot and the estimates written in short transactions
of a few windows each, so a refresh never holds the write lock for long and ingest goes on
beside it; a window that changed while it was computed stays dirty for the next refresh.

Bounded work (DESIGN.md, "Bounded work per schema"). A schema version's cells (:mod:`..cells`)
bound what refreshing all of it can cost, whatever anonymous reports arrive; two more rules keep
one version's refresh from holding back another's:

- Only rows whose numbers changed are written. A window is marked dirty as a whole, so it is
  recomputed whole, but each row is compared with the stored one first (one read, cheaper than the
  write it saves): the rows of attributes no new report carried (``split: "sample"``), and the
  listed values of every window a completed back-fill re-marked, are not written again. (A report
  changes its attribute's ``n``, and so every row of that attribute in its window and in the
  rollup: those are written.)
- A run with a time budget (the scheduled job's: :data:`RUN_SHARE` of ``LDP_ESTIMATE_INTERVAL``)
  takes the stale versions oldest change first and gives each an equal share of what is left of
  the budget (and at least one read of :data:`VALUES_PER_READ` values) before moving on. A version
  whose share ran out stays stale, keeps its place at the front, and its next run goes on from the
  window after the last one saved (round robin: windows that keep changing never starve the
  others, the rollup among them). Every stale version is visited in every run, so one with new
  reports is refreshed by the run after they arrived, within two intervals, whatever another
  version's size or traffic.

Why slices of one job rather than a job per schema: the jobs run on one leading process and a
refresh's writes all go through the database's one writer (SQLite's write lock), so refreshes in
parallel would contend for it and for the cores rather than share them; a budget shared out in
turn bounds every version's wait by construction. "Oldest change" is as this process saw it (the
run that first found a version stale: :class:`Turns`); a new leader starts from the names' order.
An admin's refresh (``POST /api/v1/estimates/refresh``) has no budget: it recomputes all that is
stale before it answers.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Mapping, Sequence

from flask import Flask

from ...shared.estimators import no_narrower_than_a_window
from ...shared.schema import Attribute, Schema
from ...shared.windows import ROLLUP
from .. import cells, context
from ..store import BreakdownEstimateRow, CandidateRow, EstimateRow, Stale, WindowCounters
from . import breakdowns, crowds

log = logging.getLogger(__name__)

# The share of LDP_ESTIMATE_INTERVAL a scheduled run may take: it ends before the next one is due.
RUN_SHARE = 0.5
# Estimate values (a window's values times its windows) read from one snapshot and compared at a
# time: the step at which a run looks at its budget. Estimate rows written per transaction (a
# window's rows always go together): ingest waits at most one such write.
VALUES_PER_READ = 20_000
ROWS_PER_WRITE = 2_000
# What a computed estimate row is compared with the stored one of its rank (its value) by: a row
# whose numbers are the same is not written again (its computed_at stays when they were computed).
NUMBERS = ("estimate", "estimate_clipped", "ci_low", "ci_high", "n", "epsilon", "confidence")
_numbers = attrgetter(*NUMBERS)
# The rank of a stored candidate's estimates (its own rank added): after every value a schema lists
# (at most 64 attributes of 10,000), so the estimates of one window list the added ones last.
ADDED_RANK = 1_000_000
# Per attribute, its stored candidates by batch: (the attribute with them alone, the batch's
# deficit, {(attribute, candidate): rank}).
CandidateGroups = dict[str, list[tuple[Attribute, int, dict[tuple[str, str], int]]]]

Version = tuple[str, int]  # (schema, version)


@dataclass(frozen=True)
class RefreshResult:
    written: int  # estimate rows written
    windows: int  # windows recomputed (not counting the rollups)
    unfinished: int = 0  # stale schema versions whose share of the run's budget ran out


def scheduled(app: Flask) -> RefreshResult:
    """The scheduled job: a refresh within :data:`RUN_SHARE` of ``LDP_ESTIMATE_INTERVAL``."""
    return refresh(app, app.config["LDP_ESTIMATE_INTERVAL"] * RUN_SHARE)


def refresh(app: Flask, seconds: float | None = None, *,
            clock: Callable[[], float] = time.monotonic) -> RefreshResult:
    """Recompute the estimates of the stale windows (rollups included): every one, or, given
    ``seconds``, what about that long allows, shared out among the stale schema versions in
    :class:`Turns`' order; ``clock`` gives the time in seconds (tests pass one of their own)."""
    store = context.store(app)
    confidence = app.config["LDP_CONFIDENCE"]
    computed_at = context.iso(context.now(app))
    turns = app.extensions["ldp"].setdefault("refresh_turns", Turns())
    end = None if seconds is None else clock() + seconds
    written = windows = unfinished = 0
    with context.metrics(app).refresh_seconds.time():
        context.writer(app).settle()  # first, what was acknowledged is counted
        crowds.save_epsilons(app)  # a crowd's central epsilon, computed once here rather than at each read
        due: dict[Version, list[Stale]] = {}
        for s in store.run_tx("stale_windows", lambda tx: tx.stale_windows(confidence), write=False):
            due.setdefault((s.schema, s.version), []).append(s)
        order = turns.order(due)
        for place, (version, stale) in enumerate(order):
            deadline = None
            if end is not None:
                now = clock()
                deadline = now + max(0.0, end - now) / (len(order) - place)
            done = _refresh_version(app, version, stale, confidence, computed_at, deadline, clock)
            turns.left(version, done.last)
            written, windows, unfinished = written + done.written, windows + done.windows, unfinished + bool(done.last)
    if unfinished:
        log.info("refresh: %d schema versions still stale; the next run goes on with them first", unfinished)
    return RefreshResult(written, windows, unfinished)


@dataclass(frozen=True)
class _Done:
    written: int
    windows: int
    last: str | None  # the last window saved when the share ran out first; None: all done


def _refresh_version(app: Flask, version: Version, stale: Sequence[Stale], confidence: float, computed_at: str,
                     deadline: float | None, clock: Callable[[], float]) -> _Done:
    """Recompute ``stale`` windows of one schema version in order, :data:`VALUES_PER_READ` values at
    a time, until done or, after a read, past ``deadline``; write only the rows that changed."""
    store, name = context.store(app), version[0]
    schema = context.catalog(app).schema(*version)
    if schema is None:  # counters exist only for published schemas, which are never deleted
        raise RuntimeError(f"counters of {name!r} version {version[1]}, which is not published")
    stored, listed = store.run_tx("candidates", lambda tx: (tx.candidates(*version), tx.breakdowns(*version)),
                                  write=False)
    groups = candidate_groups(schema, [c for c in stored if c.complete and c.estimated])
    per_read = max(1, VALUES_PER_READ // max(1, cells.values_per_window(schema, cells.held_of(stored),
                                                                        cells.breakdowns_of(listed))))
    estimated = [b for b in listed if b.complete]  # one added later: once its back-fill is done
    written = windows = 0
    for start in range(0, len(stale), per_read):
        chunk = stale[start:start + per_read]
        names = [s.window for s in chunk]
        counters, before, before_breakdowns = store.run_tx("window_counters", lambda tx: (
            tx.window_counters(*version, names), tx.window_estimates(*version, names, NUMBERS),
            tx.window_breakdown_estimates(*version, names)), write=False)
        rows: list[EstimateRow] = []
        breakdown_rows: list[BreakdownEstimateRow] = []
        done: list[Stale] = []
        for s in chunk:
            computed = estimate_rows(schema, s.window, counters[s.window], confidence, computed_at, groups=groups)
            rows += changed(computed, before[s.window])
            breakdown_rows += breakdowns.changed(breakdowns.breakdown_rows(
                schema, s.window, counters[s.window], estimated, confidence, computed_at), before_breakdowns[s.window])
            done.append(s)
            if len(rows) + len(breakdown_rows) >= ROWS_PER_WRITE or s is chunk[-1]:
                store.run_tx("save_estimates", lambda tx: tx.save_estimates(rows, done, breakdown_rows))
                written += len(rows) + len(breakdown_rows)
                rows, breakdown_rows, done = [], [], []
        windows += sum(s.window != ROLLUP for s in chunk)
        if deadline is not None and start + per_read < len(stale) and clock() >= deadline:
            return _Done(written, windows, chunk[-1].window)
    return _Done(written, windows, None)


def changed(rows: Sequence[EstimateRow], stored: Mapping[int, tuple[Any, ...]]) -> list[EstimateRow]:
    """``rows`` less those stored already with the same :data:`NUMBERS` (``stored``: by rank)."""
    return [row for row in rows if stored.get(row.rank) != _numbers(row)]


class Turns:
    """The order a refresh takes the stale schema versions in: oldest change first, as this process
    saw it (the run that first found each one stale; a version left unfinished keeps its place,
    those found in the same run by name), each from the window after the last one saved by the
    run before (wrapping round). Shared by the refreshes of one app (the scheduled one and an
    admin's may run at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs = 0
        self._since: dict[Version, int] = {}  # the run that first found the version stale
        self._after: dict[Version, str] = {}  # the last window saved when its share ran out

    def order(self, due: Mapping[Version, Sequence[Stale]]) -> list[tuple[Version, list[Stale]]]:
        """The versions of ``due`` (their stale windows) in the order to refresh them, each with its
        windows in the order to take them."""
        with self._lock:
            self._runs += 1
            self._since = since = {v: self._since.get(v, self._runs) for v in due}
            self._after = after = {v: w for v, w in self._after.items() if v in due}
        out = []
        for version in sorted(due, key=lambda v: (since[v], v)):
            windows = sorted(due[version], key=lambda s: s.window)
            last = after.get(version)
            if last is not None:
                windows = [s for s in windows if s.window > last] + [s for s in windows if s.window <= last]
            out.append((version, windows))
        return out

    def left(self, version: Version, last: str | None) -> None:
        """A run left ``version`` after saving window ``last`` (None: nothing of it was left)."""
        with self._lock:
            if last is None:
                self._since.pop(version, None)
                self._after.pop(version, None)
            else:
                self._after[version] = last


def candidate_groups(schema: Schema, added: Sequence[CandidateRow]) -> CandidateGroups:
    """Per attribute, its stored candidates whose back-fill is complete, by batch: the attribute with
    them alone, the batch's ``deficit`` and their ranks (made once per schema version, not per window)."""
    batches: dict[tuple[str, int], list[CandidateRow]] = {}
    for c in added:
        if c.batch is not None:
            batches.setdefault((c.attribute, c.batch), []).append(c)
    groups: CandidateGroups = {}
    for (name, _), group in batches.items():
        groups.setdefault(name, []).append((schema.attribute(name).with_candidates(tuple(c.value for c in group)),
                                            group[0].deficit or 0, {(name, c.value): ADDED_RANK + c.rank for c in group}))
    return groups


def estimate_rows(schema: Schema, window: str, counters: WindowCounters, confidence: float,
                  computed_at: str, added: Sequence[CandidateRow] = (),
                  groups: CandidateGroups | None = None) -> list[EstimateRow]:
    """One estimate row per value of each attribute that has reports in ``counters``, from the
    attribute's mechanism (:meth:`Mechanism.estimates`); a value with no hits has its row too. The
    rollup of a memoised attribute gets an interval no narrower than a single window's
    (:func:`.no_narrower_than_a_window`: its reports across windows are correlated).

    ``added``: stored candidates whose back-fill is complete. In a window, such a candidate was
    counted over all its reports (``n``); in the rollup over all but its batch's ``deficit`` (the
    reports of windows erased before it reached them), so its ``n`` is the attribute's less that,
    and it has no row where that leaves none. (``groups``: :func:`candidate_groups` of ``added``,
    made by the caller once for many windows.)"""
    groups = candidate_groups(schema, added) if groups is None else groups
    ranks = schema.value_ranks
    rows = []
    for name, n in counters.totals.items():
        attribute = schema.attribute(name)
        targets = [(attribute, n, ranks)] + [(target, n - deficit if window == ROLLUP else n, rank_of)
                                             for target, deficit, rank_of in groups.get(name, ())]
        for target, count, rank_of in targets:
            if count <= 0:
                continue
            for key, e in target.mech.estimates(target, count, counters.amounts.get(name, {}), confidence):
                if window == ROLLUP and target.memo is not None:
                    e = no_narrower_than_a_window(e, target.p, target.q, counters.smallest.get(name), confidence)
                rows.append(EstimateRow(schema.name, schema.version, window, name, key, rank_of[(name, key)],
                                        e.estimate, e.estimate_clipped, e.ci_low, e.ci_high, count, target.epsilon,
                                        confidence, computed_at))
    return rows
