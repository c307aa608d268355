"""Candidates of string attributes beyond those a schema lists: added by the analyst (the admin
API) or discovered (:mod:`.discovery`), DESIGN.md "Strings".

A new candidate's supports among the reports already stored are counted by the back-fill job
(:mod:`.backfill`); it is estimated once that is complete.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ...shared.attribute_types import MAX_CANDIDATES, STRING, parse_candidates
from ...shared.breakdowns import Breakdown
from ...shared.checks import SchemaError
from ...shared.schema import Attribute, Schema
from .. import cells, context
from ..catalog import Catalog
from ..cells import Limit
from ..store import CandidateRow, Tx

SOURCES = ("added", "discovered")


class CandidateError(ValueError):
    """Candidates that cannot be added: ``field`` names what is wrong, ``status`` the HTTP answer."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status


def add_candidates(catalog: Catalog, schema_name: str, version: int, attribute_name: str, values: Sequence[str], *,
                   source: str, limit: Limit, estimated: bool = True, added_at: str | None = None) -> int:
    """Add ``values`` to a string attribute's candidates; how many were new (one already a
    candidate, listed or added, is not new: no error). Each is prepared as a value is, at most
    ``max_length`` code points, and distinct from the others after that; at most
    :data:`MAX_CANDIDATES` an attribute in all, and the schema version within ``limit``
    (``LDP_MAX_CELLS``). ``estimated`` False (a discovered string still holding U+FFFD, which no
    report can support): listed, never counted nor estimated. Otherwise their counters are
    back-filled (:mod:`.backfill`). :class:`CandidateError` naming the field for anything
    else; then nothing is added."""
    if source not in SOURCES:
        raise CandidateError("source", f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    schema = catalog.schema(schema_name, version)
    if schema is None:
        raise CandidateError("version", f"no published schema {schema_name[:64]!r} version {version}", 404)
    attribute = schema.by_name.get(attribute_name) if isinstance(attribute_name, str) else None
    if attribute is None:
        raise CandidateError("attribute", f"schema {schema.name} version {schema.version} has no attribute "
                                          f"{str(attribute_name)[:64]!r}")
    if attribute.kind is not STRING:
        raise CandidateError("attribute", f"attribute {attribute.name} is not a string attribute: only strings "
                                          "have candidates")
    try:
        given = list(values) if isinstance(values, Sequence) and not isinstance(values, str) else values
        prepared = parse_candidates(given, attribute.max_length, "candidates")
    except SchemaError as exc:
        raise CandidateError(exc.field, str(exc)) from None

    def add(tx: Tx) -> int:
        # Read, checked and added in one write transaction: no add beside it can take the room meanwhile.
        stored = tx.candidates(schema.name, schema.version)
        held = cells.held_of(stored)
        breakdowns = cells.breakdowns_of(tx.breakdowns(schema.name, schema.version))
        known = set(attribute.candidates) | {c.value for c in stored if c.attribute == attribute.name}
        new = [v for v in prepared if v not in known]
        added = tx.add_candidates(schema.name, schema.version, attribute.name, new, source=source,
                                  estimated=estimated, added_at=added_at or context.iso(context.system_clock()),
                                  most=MAX_CANDIDATES - len(attribute.candidates))
        if added is None:
            raise CandidateError("candidates", f"attribute {attribute.name} may have at most {MAX_CANDIDATES} "
                                               "candidates in all (listed, added and discovered)")
        refusal = limit.refusal(schema, {**held, attribute.name: held.get(attribute.name, 0) + added}, breakdowns)
        if refusal is not None:  # raised in the transaction: what was added rolls back with it
            raise CandidateError("candidates", f"{added} new candidates for attribute {attribute.name} would "
                                               f"pass the limit: {refusal}")
        return added

    return catalog.store.run_tx("add_candidates", add)


def room(schema: Schema, attribute: Attribute, held: Mapping[str, int], limit: Limit,
         breakdowns: Sequence[Breakdown] = ()) -> int:
    """How many more candidates ``attribute`` may hold, with ``held`` stored per attribute and the
    version's ``breakdowns``: within :data:`MAX_CANDIDATES` and the schema version's cells within ``limit``."""
    return max(0, min(MAX_CANDIDATES - len(attribute.candidates) - held.get(attribute.name, 0),
                      limit.room(schema, held, breakdowns)))


def listing(schema: Schema, stored: Sequence[CandidateRow], published_at: str | None,
            attribute: str | None = None) -> list[dict[str, Any]]:
    """Every candidate of the schema's string attributes (or of ``attribute``), listed then stored:
    its source, fingerprint, the candidates it collides with, when it was added, and whether it is
    estimated."""
    out = []
    for a in schema.attributes:
        if attribute not in (None, a.name):
            continue
        mine = [c for c in stored if c.attribute == a.name]
        added = [published_at] * len(a.candidates) + [c.added_at for c in mine]
        estimated = [True] * len(a.candidates) + [c.estimated for c in mine]
        rows = a.kind.candidate_rows(a, [(c.value, c.source) for c in mine])
        out += [{"attribute": a.name, **row, "added_at": at, "estimated": e} for row, at, e in zip(rows, added, estimated)]
    return out


def sources(stored: Sequence[CandidateRow]) -> dict[tuple[str, str], str]:
    """``(attribute, value) -> source`` of stored candidates, in the order they were added (the
    schema's own candidates are ``listed``: their attribute's type says so)."""
    return {(c.attribute, c.value): c.source for c in stored}
