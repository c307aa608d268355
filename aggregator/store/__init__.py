"""The aggregator's database, behind one interface (:class:`Store`): the only package that
speaks SQL or imports a database driver.

``open_store(LDP_DB)`` picks the implementation from the setting: a file path is the embedded
SQLite store (:mod:`.sqlite`).
"""

from __future__ import annotations

from .base import (Activity, AmountRow, EstimateRow, EstimatesQuery, Expired, Increments, ReportRow, Stale, Store,
                   TotalRow, WindowCounters)
from .errors import StoreBusy, StoreError, StoreUnavailable
from .sqlite import SQLiteStore

def open_store(location: str, synchronous: str = "full") -> Store:
    """The store ``LDP_DB`` names, not yet migrated."""
    return SQLiteStore(location, synchronous)


__all__ = ["Activity", "AmountRow", "EstimateRow", "EstimatesQuery", "Expired", "Increments", "ReportRow",
           "Stale", "Store", "StoreBusy", "StoreError", "StoreUnavailable", "TotalRow",
           "WindowCounters", "open_store"]
