"""The aggregator's database, behind one door (:class:`Store`, :meth:`Store.run_tx`): the only
package that speaks SQL or imports a database driver.

``open_store(LDP_DB)`` picks the backend from the setting: a ``postgresql://`` (or
``postgres://``) URL is PostgreSQL (:mod:`.postgres`; psycopg is imported only then); anything
else is a file path, the embedded SQLite (:mod:`.sqlite`).

The rooms: :mod:`.store` (the door), :mod:`.tx` (what one transaction can do: the SQL both
databases share), :mod:`.rows` (the rows that cross the boundary), :mod:`.errors` (the store's
own errors), :mod:`.rollup` (increments arranged for writing), :mod:`.sqlite` with
:mod:`.sqlite_connection` and :mod:`.sqlite_migrations`, :mod:`.postgres` with
:mod:`.postgres_migrations`.
"""

from __future__ import annotations

from typing import Callable

from .tx import Tx
from .errors import StoreBusy, StoreError, StoreUnavailable
from .rollup import with_rollup
from .rows import (BATCH_N_PREFIX, NOT_READ, ROW_END, ROW_ID, ROW_VERSION, ROW_WINDOW, ROW_WIRE, Activity, AmountRow,
                   BreakdownAmountRow, BreakdownEstimateRow, BreakdownsQuery, CandidateBatch, CandidateRow, CrowdRow,
                   EstimateRow, EstimatesQuery, Expired, Increments, Known, ReportRow, Retention, Stale, StoredBreakdown,
                   StoredKey, TotalRow, WindowCounters, WireColumns, first_of_each_id)
from .sqlite import SQLiteBackend
from .store import Backend, Store
from .wire import Layout, NumericPage, layout

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(location: str) -> bool:
    """Whether ``LDP_DB`` names a PostgreSQL database (a URL) rather than a SQLite file."""
    return location.startswith(POSTGRES_SCHEMES)


def open_store(location: str, synchronous: str = "full",
               observe: Callable[[str, float], None] | None = None) -> Store:
    """The store ``LDP_DB`` names, not yet migrated. ``synchronous`` is SQLite's durability; a
    PostgreSQL commit is as durable as the server is configured to make it. ``observe(name,
    seconds)`` records each transaction's duration."""
    db: Backend
    if is_postgres(location):
        try:
            from .postgres import PostgresBackend
        except ModuleNotFoundError as exc:
            raise StoreUnavailable(f"a postgresql:// LDP_DB needs {exc.name}: "
                                   "pip install 'ldp-telemetry[aggregator]'") from None
        db = PostgresBackend(location)
    else:
        db = SQLiteBackend(location, synchronous)
    return Store(db, observe)


__all__ = ["BATCH_N_PREFIX", "NOT_READ", "ROW_END", "ROW_ID", "ROW_VERSION", "ROW_WINDOW", "ROW_WIRE", "Activity",
           "AmountRow", "BreakdownAmountRow", "BreakdownEstimateRow", "BreakdownsQuery", "CandidateBatch", "CandidateRow",
           "CrowdRow", "StoredBreakdown", "StoredKey",
           "Backend", "EstimateRow", "EstimatesQuery", "Expired", "Increments", "Known", "Layout", "NumericPage",
           "ReportRow", "Retention", "Stale", "Store", "StoreBusy", "StoreError", "StoreUnavailable", "TotalRow", "Tx",
           "WindowCounters", "WireColumns", "first_of_each_id", "is_postgres", "layout", "open_store", "with_rollup"]
