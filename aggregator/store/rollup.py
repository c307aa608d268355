"""Increments as a store adds them: summed per counter, with the rollup, in lock order.

Every window's totals, counters, breakdown sums and crowds are also added to its schema version's :data:`ROLLUP`
window when they are stored, so the rollup over every window costs as much to read as one
window, and stays whole when retention drops old windows. What the increments are is
:mod:`..ingest.counting`'s to say; this module only arranges them for writing.
"""

from __future__ import annotations

from collections import Counter

from ...shared.windows import ROLLUP
from .rows import AmountRow, BreakdownAmountRow, CrowdRow, Increments, TotalRow


def with_rollup(increments: Increments) -> Increments:
    """``increments`` summed per counter (a group of batches touches the same few), plus the same
    added to each schema version's rollup window; in key order, so that writers that lock the
    rows one after another all lock them in the same order."""
    totals: Counter[tuple[str, int, str, str]] = Counter()
    ends: dict[tuple[str, int, str, str], int | None] = {}
    amounts: dict[tuple[str, int, str, str, str], int | float] = {}
    for t in increments.totals:
        for window, end in ((t.window, t.window_end), (ROLLUP, None)):
            key = (t.schema, t.version, window, t.attribute)
            totals[key] += t.n
            ends[key] = end
    for a in increments.amounts:
        for window in (a.window, ROLLUP):
            key5 = (a.schema, a.version, window, a.attribute, a.value)
            amounts[key5] = amounts.get(key5, 0) + a.amount
    sums: dict[tuple[str, int, str, int, str, str], int | float] = {}
    for b in increments.breakdowns:
        for window in (b.window, ROLLUP):
            key6 = (b.schema, b.version, window, b.breakdown, b.of_key, b.by_key)
            sums[key6] = sums.get(key6, 0) + b.amount
    crowds: dict[tuple[str, int, str], CrowdRow] = {}
    for c in increments.crowds:
        for window in (c.window, ROLLUP):
            key3 = (c.schema, c.version, window)
            crowds[key3] = merge_crowds(crowds.get(key3), c._replace(window=window))
    return Increments([TotalRow(*key, totals[key], ends[key]) for key in sorted(totals)],
                      [AmountRow(*key, amounts[key]) for key in sorted(amounts) if amounts[key]],
                      [BreakdownAmountRow(*key, sums[key]) for key in sorted(sums) if sums[key]],
                      [crowds[key] for key in sorted(crowds)])


def merge_crowds(old: CrowdRow | None, new: CrowdRow) -> CrowdRow:
    """Two counts of how a window's reports arrived as one: the reports added up, the smaller crowd
    kept (None is no crowd). The store's upsert does the same (:data:`.tx.CROWDS_UPSERT`)."""
    if old is None:
        return new
    crowd = min((c for c in (old.crowd, new.crowd) if c is not None), default=None)
    return new._replace(relayed=old.relayed + new.relayed, direct=old.direct + new.direct, crowd=crowd)


def dirty_windows(increments: Increments) -> list[tuple[str, int, str]]:
    """The windows ``increments`` change (each gets a new dirty mark), in key order."""
    return sorted({(t.schema, t.version, t.window) for t in increments.totals}
                  | {(b.schema, b.version, b.window) for b in increments.breakdowns})
