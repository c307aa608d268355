"""Breakdowns of a published schema version (DESIGN.md, "Breakdowns"): those listed at publish
(stored beside the schema, never in the definition clients fetch) and those added later, a
question asked of the reports already stored: recorded here, back-filled by :mod:`.backfill` as a
batch of candidates is (one watermark mechanism for both), then counted by ingest.

What a breakdown is, its rules, counting and rows are :mod:`...shared.breakdowns`'; here is what
the aggregator keeps of them: adding one, the listing ``GET .../breakdowns`` answers, and which
stored breakdowns a read of rows asks for.
"""

from __future__ import annotations

from typing import Any, Sequence

from ...shared import breakdowns as shared_breakdowns
from ...shared.checks import SchemaError
from .. import cells
from ..catalog import Catalog
from ..cells import Limit
from ..store import StoredBreakdown, Tx


class BreakdownError(ValueError):
    """A breakdown that cannot be added: ``field`` names what is wrong, ``status`` the HTTP answer."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status


def add_breakdown(catalog: Catalog, schema_name: str, version: int, raw: Any, *, limit: Limit, added_at: str) -> bool:
    """Add the breakdown ``raw`` (``{"of": A, "by": B}``) to a published version, checked by the
    rules of publish (:func:`...shared.breakdowns.add_breakdown`: at most 16 with the stored ones)
    and with the version's cells within ``limit``; whether it is new (one there already: False).
    Its sums are back-filled from the retained reports (:mod:`.backfill`). :class:`BreakdownError`
    naming the field for anything else; then nothing is added."""
    schema = catalog.schema(schema_name, version)
    if schema is None:
        raise BreakdownError("version", f"no published schema {schema_name[:64]!r} version {version}", 404)

    def add(tx: Tx) -> bool:
        # Read, checked and added in one write transaction (the schema's row locked first): no add
        # beside it can take the room meanwhile.
        tx.lock_schema(schema.name, schema.version)
        stored = tx.breakdowns(schema.name, schema.version)
        existing = cells.breakdowns_of(stored)
        try:
            wanted = shared_breakdowns.add_breakdown(raw, schema, existing)
        except SchemaError as exc:
            raise BreakdownError(exc.field, f"invalid breakdown: {exc}") from None
        if len(wanted) == len(existing):
            return False
        refusal = limit.refusal(schema, cells.held_of(tx.candidates(schema.name, schema.version)), wanted)
        if refusal is not None:
            raise BreakdownError("breakdown", f"the breakdown would pass the limit: {refusal}")
        new = wanted[-1]
        return tx.add_breakdown(schema.name, schema.version, new.of, new.by, added_at)

    return catalog.store.run_tx("add_breakdown", add)


def listing(stored: Sequence[StoredBreakdown]) -> list[dict[str, Any]]:
    """Each breakdown with its source (``listed``, ``added``) and when it was added (ISO 8601 UTC)."""
    return [{"of": b.of, "by": b.by, "source": b.source, "added_at": b.added_at} for b in stored]


def chosen(stored: Sequence[StoredBreakdown], of: str | None, by: str | None) -> tuple[int, ...]:
    """The numbers of the stored breakdowns of ``of`` (any if None) by ``by`` (any if None)."""
    return tuple(b.id for b in stored if of in (None, b.of) and by in (None, b.by))

