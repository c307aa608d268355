"""Breakdowns of a published schema version (DESIGN.md, "Breakdowns"): those listed at publish
(stored beside the schema, never in the definition clients fetch) and those added later.

What a breakdown is, its rules, counting and rows are :mod:`...shared.breakdowns`'; here is what
the aggregator keeps of them: the listing ``GET .../breakdowns`` answers, and which stored
breakdowns a read of rows asks for.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..store import StoredBreakdown


def listing(stored: Sequence[StoredBreakdown]) -> list[dict[str, Any]]:
    """Each breakdown with its source (``listed``, ``added``) and when it was added (ISO 8601 UTC)."""
    return [{"of": b.of, "by": b.by, "source": b.source, "added_at": b.added_at} for b in stored]


def chosen(stored: Sequence[StoredBreakdown], of: str | None, by: str | None) -> tuple[int, ...]:
    """The numbers of the stored breakdowns of ``of`` (any if None) by ``by`` (any if None)."""
    return tuple(b.id for b in stored if of in (None, b.of) and by in (None, b.by))

