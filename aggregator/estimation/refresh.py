"""The estimation job: turn changed counters into debiased estimates with their intervals.

Only windows whose counters changed since the last refresh are recomputed (the dirty marks
ingest leaves, the ``all`` rollup among them), and every window whose estimates are at another
confidence level than ``LDP_CONFIDENCE``. Everything is read from the counters, never from the
raw reports. Counters are read from a snapshot and the estimates written in short transactions
of a few windows each, so a refresh never holds the write lock for long and ingest goes on
beside it; a window that changed while it was computed stays dirty for the next refresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import groupby
from typing import Sequence

from flask import Flask

from ...shared.estimators import no_narrower_than_a_window
from ...shared.schema import Attribute, Schema
from ...shared.windows import ROLLUP
from .. import context
from ..store import CandidateRow, EstimateRow, Stale, StoreBusy, WindowCounters

log = logging.getLogger(__name__)

# Windows whose counters are read from one snapshot; estimate rows written per transaction (a
# window's rows always go together): ingest waits at most one such write.
WINDOWS_PER_READ = 32
ROWS_PER_WRITE = 2_000
# The rank of a stored candidate's estimates (its own rank added): after every value a schema lists
# (at most 64 attributes of 10,000), so the estimates of one window list the added ones last.
ADDED_RANK = 1_000_000
# Per attribute, its stored candidates by batch: (the attribute with them alone, the batch's
# deficit, {(attribute, candidate): rank}).
CandidateGroups = dict[str, list[tuple[Attribute, int, dict[tuple[str, str], int]]]]


@dataclass(frozen=True)
class RefreshResult:
    written: int  # estimate rows written
    windows: int  # windows recomputed (not counting the rollups)


def refresh(app: Flask) -> RefreshResult:
    """Recompute the estimates of every stale window (rollups included)."""
    store, catalog = context.store(app), context.catalog(app)
    confidence = app.config["LDP_CONFIDENCE"]
    computed_at = context.iso(context.now(app))
    written = windows = 0
    with context.metrics(app).refresh_seconds.time():
        settle(app)
        stale = store.run_tx("stale_windows", lambda tx: tx.stale_windows(confidence), write=False)
        for (name, version), group in groupby(stale, key=lambda s: (s.schema, s.version)):
            schema = catalog.schema(name, version)
            if schema is None:  # counters exist only for published schemas, which are never deleted
                raise RuntimeError(f"counters of {name!r} version {version}, which is not published")
            keys = list(group)
            stored = store.run_tx("candidates", lambda tx: tx.candidates(name, version), write=False)
            groups = candidate_groups(schema, [c for c in stored if c.complete and c.estimated])
            for start in range(0, len(keys), WINDOWS_PER_READ):
                chunk = keys[start:start + WINDOWS_PER_READ]
                counters = store.run_tx("window_counters", lambda tx: tx.window_counters(
                    name, version, [s.window for s in chunk]), write=False)
                rows: list[EstimateRow] = []
                done: list[Stale] = []
                for s in chunk:
                    rows += estimate_rows(schema, s.window, counters[s.window], confidence, computed_at, groups=groups)
                    done.append(s)
                    if len(rows) >= ROWS_PER_WRITE or s is chunk[-1]:
                        store.run_tx("save_estimates", lambda tx: tx.save_estimates(rows, done))
                        written += len(rows)
                        rows, done = [], []
                windows += sum(s.window != ROLLUP for s in chunk)
    return RefreshResult(written, windows)


def settle(app: Flask) -> None:
    """The refresh's first step: count what was acknowledged so far (and take arrival order out of
    what was stored). A database too busy for it now leaves the counters as they are: the next
    refresh counts the rest."""
    try:
        context.writer(app).settle()
    except StoreBusy as exc:
        log.warning("could not count every acknowledged report before the refresh: %s", exc)


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
