"""The aggregator's database, behind one interface (:class:`Store`): the only package that
speaks SQL or imports a database driver.

``open_store(LDP_DB)`` picks the implementation from the setting: a ``postgresql://`` (or
``postgres://``) URL is the PostgreSQL store (:mod:`.postgres`; psycopg is imported only then);
anything else is a file path, the embedded SQLite store (:mod:`.sqlite`).

The rooms: :mod:`.base` (the interface and the rows that cross it), :mod:`.errors` (the store's
own errors), :mod:`.dialect` (the SQL both databases share), :mod:`.rollup` (increments arranged
for writing), :mod:`.sqlite` with :mod:`.sqlite_connection`, :mod:`.sqlite_migrations` and :mod:`.inbox` (where SQLite's
acknowledged reports wait to be folded in), :mod:`.postgres` with :mod:`.postgres_migrations`,
and :mod:`.groupcommit` (one commit for the requests that arrive meanwhile).
"""

from __future__ import annotations

from .base import (BATCH_N_PREFIX, Activity, AmountRow, BackfillChunk, CandidateBatch, CandidateRow, Counts, EstimateRow,
                   EstimatesQuery, Expired, Increments, Known, NOT_READ, ReportRow, Retention, Stale, Store, TotalRow,
                   WindowCounters, WireColumns, first_of_each_id)
from .errors import StoreBusy, StoreError, StoreUnavailable
from .sqlite import SQLiteStore

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(location: str) -> bool:
    """Whether ``LDP_DB`` names a PostgreSQL database (a URL) rather than a SQLite file."""
    return location.startswith(POSTGRES_SCHEMES)


def open_store(location: str, synchronous: str = "full") -> Store:
    """The store ``LDP_DB`` names, not yet migrated, and not yet given its counting
    (:meth:`Store.count_with`). ``synchronous`` is SQLite's durability; a PostgreSQL commit is as
    durable as the server is configured to make it."""
    if is_postgres(location):
        try:
            from .postgres import PostgresStore
        except ModuleNotFoundError as exc:
            raise StoreUnavailable(f"a postgresql:// LDP_DB needs {exc.name}: "
                                   "pip install 'ldp-telemetry[aggregator]'") from None
        return PostgresStore(location)
    return SQLiteStore(location, synchronous)


__all__ = ["BATCH_N_PREFIX", "Activity", "AmountRow", "BackfillChunk", "CandidateBatch", "CandidateRow", "Counts", "Known", "EstimateRow", "EstimatesQuery", "Expired", "Increments", "NOT_READ", "ReportRow",
           "Retention", "Stale", "Store", "StoreBusy", "StoreError", "StoreUnavailable", "TotalRow", "WindowCounters", "WireColumns",
           "first_of_each_id", "is_postgres", "open_store"]
