"""Breakdown rows from breakdown sums: what the refresh writes for each breakdown of a schema
version in a window (or the ``all`` rollup), DESIGN.md "Breakdowns".

The statistics are :func:`...shared.breakdowns.estimate`'s (Fieller's interval, the reasons); here
is only how its rows are kept: each ranked within its window (the breakdown's number times
:data:`...shared.breakdowns.MAX_CELLS` plus the cell's place, so a window's rows read in the order
the breakdowns were listed, then added, and within one by each value of ``by``, each value of
``of``), and its values stored as keys (a boolean's ``true`` and ``false``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ...shared import breakdowns as shared_breakdowns
from ...shared.breakdowns import Breakdown, BreakdownSums
from ...shared.schema import Attribute, Schema
from ...shared.windows import ROLLUP
from ..store import BreakdownEstimateRow, StoredBreakdown, WindowCounters


def rank_of(breakdown: int, cell: int) -> int:
    """The rank of a breakdown's ``cell``-th row in its window."""
    return breakdown * shared_breakdowns.MAX_CELLS + cell


def key_of(value: Any) -> str:
    """How a value of ``of`` or ``by`` is stored: a boolean's ``true``/``false``, else itself."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def value_of(attribute: Attribute, key: str) -> Any:
    """The API's value of a stored ``key`` of ``attribute`` (a boolean's ``true`` and ``false``
    as JSON booleans)."""
    return {key_of(v): v for v in shared_breakdowns.values_of(attribute)}.get(key, key)


def breakdown_rows(schema: Schema, window: str, counters: WindowCounters, stored: Sequence[StoredBreakdown],
                   confidence: float, computed_at: str) -> list[BreakdownEstimateRow]:
    """The rows of each of ``stored`` that has sums in ``counters`` (one window's, or the rollup's:
    then a memoised schema's rows have no interval, ``memoised_rollup``)."""
    rows = []
    for b in stored:
        amounts = counters.breakdowns.get(b.id)
        if not amounts:
            continue
        estimated = shared_breakdowns.estimate(schema, Breakdown(b.of, b.by), BreakdownSums(amounts), confidence,
                                               rollup=window == ROLLUP)
        rows += [BreakdownEstimateRow(schema.name, schema.version, window, rank_of(b.id, cell), b.id,
                                      key_of(r.value), key_of(r.by_value), r.estimate, r.estimate_clipped, r.ci_low,
                                      r.ci_high, r.by_share, r.n, r.reason, confidence, computed_at)
                 for cell, r in enumerate(estimated)]
    return rows


def changed(rows: Sequence[BreakdownEstimateRow],
            stored: Mapping[int, BreakdownEstimateRow]) -> list[BreakdownEstimateRow]:
    """``rows`` less those stored already with the same numbers (only ``computed_at`` differing)."""
    return [r for r in rows if (old := stored.get(r.rank)) is None or old._replace(computed_at=r.computed_at) != r]


def shown(schema: Schema, breakdown: StoredBreakdown, row: BreakdownEstimateRow) -> dict[str, Any]:
    """A stored row of ``breakdown`` as ``GET /api/v1/breakdowns`` shows it (DESIGN.md's fields)."""
    return {"window": row.window, "of": breakdown.of, "value": value_of(schema.attribute(breakdown.of), row.value),
            "by": breakdown.by, "by_value": value_of(schema.attribute(breakdown.by), row.by_value),
            "estimate": row.estimate, "estimate_clipped": row.estimate_clipped, "ci_low": row.ci_low,
            "ci_high": row.ci_high, "by_share": row.by_share, "n": row.n, "reason": row.reason,
            "computed_at": row.computed_at}
