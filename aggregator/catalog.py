"""Published schemas: publishing (idempotent, immutable) and a per-process cache of parsed ones.

A published schema never changes (any change is a new version), so caching the parsed
:class:`Schema` in each worker process is safe; unknown names are not cached, so a schema
published through another worker is seen at once.
"""

from __future__ import annotations

from typing import Any

from ..shared.breakdowns import Breakdown, parse_published
from ..shared.schema import Schema, parse_schema, version_from_text
from .cells import Limit, breakdowns_of, held_of
from .store import Store, Tx


def version_number(text: str) -> int:
    """A schema version from a URL path or query, 0 for one that cannot exist (so a 404, not a
    400). Checked before ``int()``, which refuses strings of over 4300 digits."""
    return version_from_text(text) or 0


class Catalog:
    def __init__(self, store: Store):
        self.store = store
        self._parsed: dict[tuple[str, int], Schema] = {}

    def schema(self, name: str, version: int | None = None) -> Schema | None:
        """The published schema ``name`` at ``version`` (latest if None), or None."""
        if version is not None and (name, version) in self._parsed:
            return self._parsed[(name, version)]
        definition = self.store.run_tx("get_schema", lambda tx: tx.get_schema(name, version), write=False)
        return None if definition is None else self._parse(definition)

    def latest(self) -> list[Schema]:
        """The latest version of every published schema."""
        definitions = self.store.run_tx("latest_schemas", lambda tx: tx.latest_schemas(), write=False)
        return [self._parse(definition) for definition in definitions]

    def _parse(self, definition: dict[str, Any]) -> Schema:
        """A stored definition, parsed once per process."""
        key = (definition["name"], definition["version"])
        if key not in self._parsed:
            self._parsed[key] = parse_schema(definition)
        return self._parsed[key]

    def lookup(self, name: str, version: int) -> Schema | None:
        """``(name, version) -> Schema | None``, as :func:`validate_report` takes it."""
        return self.schema(name, version)

    def publish(self, raw: Any, published_at: str, limit: Limit) -> tuple[str, dict[str, Any]]:
        """Parse and store a schema with its listed ``breakdowns``: ``("created" | "identical" |
        "conflict", derived definition)``. The definition (what clients fetch, and the answer) never
        carries the breakdowns: they are stored beside it (:meth:`breakdowns`), and a re-post is
        identical only with the same ones.

        Raises :class:`SchemaError` (from :func:`parse_published`) for an invalid schema or
        breakdown, and :class:`TooManyCells` for a new version over ``limit``, breakdown cells
        included (a version already published is never refused for it: its re-post is answered as
        before).
        """
        schema, listed = parse_published(raw)
        derived = schema.to_dict()
        refusal = limit.refusal(schema, {}, listed)

        def publish(tx: Tx) -> str:
            if refusal is not None and tx.get_schema(schema.name, schema.version) is None:
                raise TooManyCells(refusal)  # nothing written: the transaction rolls back
            return tx.publish_schema(derived, published_at, [(b.of, b.by) for b in listed])

        return self.store.run_tx("publish_schema", publish), derived

    def over(self, limit: Limit) -> list[str]:
        """A sentence for each published version over ``limit`` (published under other settings:
        it keeps working, and start-up says so)."""
        def versions(tx: Tx) -> list[tuple[str, int, dict[str, int], list[Breakdown]]]:
            return [(latest["name"], version, held_of(tx.candidates(latest["name"], version)),
                     breakdowns_of(tx.breakdowns(latest["name"], version)))
                    for latest in tx.latest_schemas() for version in tx.schema_versions(latest["name"])]

        sentences = []
        for name, version, held, breakdowns in self.store.run_tx("versions_over_the_cells_limit", versions,
                                                                 write=False):
            schema = self.schema(name, version)
            refusal = None if schema is None else limit.refusal(schema, held, breakdowns)
            sentences += [refusal] if refusal is not None else []
        return sentences


class TooManyCells(ValueError):
    """A schema version over ``LDP_MAX_CELLS``; the message names its cells and the limit."""
