"""Bounded work per schema (DESIGN.md, "Bounded work per schema"): the cells of a schema version,
and ``LDP_MAX_CELLS``, the most it may have.

Anonymous reports decide which windows and values get counters; the schema version decides how
many there can be: its cells, the values it counts a window times the windows retention keeps
(the retained ones, the current one and the ``all`` rollup). Counter rows, estimate rows and a
refresh's work are bounded by them. Publishing, adding candidates, discovery, the refresh's reads
and start-up all ask this one question, so its rule lives here once, in the aggregator rather than
in the shared schema model: it depends on this server's settings, as in force when it is asked
(raising ``LDP_RETENTION_DAYS`` or lowering ``LDP_MAX_CELLS`` later refuses no published version),
and on the candidates stored since publishing, which no client sees.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterable, Mapping, Sequence

from ..shared import breakdowns as shared_breakdowns
from ..shared.attribute_types import BOOLEAN
from ..shared.breakdowns import Breakdown
from ..shared.schema import Attribute, Schema
from ..shared.windows import LENGTH
from .store import CandidateRow, StoredBreakdown


def values_counted(attribute: Attribute, held: int = 0) -> int:
    """The values ``attribute`` counts a window: a boolean 2 (true and false, though only true's
    hits are kept), a numeric 1 (its mean), a categorical its categories, a histogram its buckets,
    a string its listed candidates and the ``held`` ones stored since (added or discovered, those
    never estimated included)."""
    return 2 if attribute.kind is BOOLEAN else len(attribute.keys) + held


def values_per_window(schema: Schema, held: Mapping[str, int], breakdowns: Sequence[Breakdown] = ()) -> int:
    """What the schema version counts a window; ``held``: its stored candidates per attribute;
    ``breakdowns``: its breakdowns, each its cells (the values of ``of`` times those of ``by``)."""
    return (sum(values_counted(a, held.get(a.name, 0)) for a in schema.attributes)
            + sum(shared_breakdowns.cells(schema, b) for b in breakdowns))


def breakdowns_of(stored: Iterable[StoredBreakdown]) -> list[Breakdown]:
    """Stored breakdowns as the cells count them."""
    return [Breakdown(b.of, b.by) for b in stored]


def held_of(stored: Iterable[CandidateRow]) -> dict[str, int]:
    """Stored candidates per attribute, each counted whatever its source or whether it is estimated."""
    return dict(Counter(c.attribute for c in stored))


@dataclass(frozen=True)
class Limit:
    """``LDP_MAX_CELLS`` and the ``LDP_RETENTION_DAYS`` the cells are counted over."""

    most: int
    retention_days: float

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Limit:
        """The limit of the settings ``config`` holds (an app's config, or checked settings)."""
        return cls(config["LDP_MAX_CELLS"], config["LDP_RETENTION_DAYS"])

    def windows(self, schema: Schema) -> int:
        """W + 1: the windows retention keeps of the schema's kind (W = the retained ones and the
        current one) and the ``all`` rollup."""
        retained = self.retention_days * (timedelta(days=1) / LENGTH[schema.window])  # days, or hours
        return math.ceil(retained) + 1 + 1

    def cells(self, schema: Schema, held: Mapping[str, int], breakdowns: Sequence[Breakdown] = ()) -> int:
        """The version's cells with ``held`` stored candidates per attribute and ``breakdowns``."""
        return values_per_window(schema, held, breakdowns) * self.windows(schema)

    def refusal(self, schema: Schema, held: Mapping[str, int], breakdowns: Sequence[Breakdown] = ()) -> str | None:
        """The sentence refusing the version with ``held`` stored candidates and ``breakdowns``
        (naming its cells and ``LDP_MAX_CELLS``), or None if it keeps within the limit."""
        cells = self.cells(schema, held, breakdowns)
        if cells <= self.most:
            return None
        windows = self.windows(schema)
        return (f"schema {schema.name} version {schema.version}: {cells:,} cells "
                f"({values_per_window(schema, held, breakdowns):,} values a window x {windows:,} windows: the {windows - 1:,} "
                f"{schema.window}s LDP_RETENTION_DAYS = {self.retention_days:g} keeps and the all rollup), more "
                f"than LDP_MAX_CELLS = {self.most:,}")

    def room(self, schema: Schema, held: Mapping[str, int], breakdowns: Sequence[Breakdown] = ()) -> int:
        """How many more values a window the version may count (0 if it is at or over the limit)."""
        return max(0, self.most // self.windows(schema) - values_per_window(schema, held, breakdowns))
