"""The store's own errors: what the rest of the aggregator catches, whatever the database. A
driver's errors leave the store as these (:meth:`.store.Store.run_tx`)."""

from __future__ import annotations


class StoreError(Exception):
    """Something went wrong in the database."""


class StoreBusy(StoreError):
    """Another writer held the database for longer than the store waits: retry shortly."""


class StoreUnavailable(StoreError):
    """The database cannot be used: it cannot be opened, is not a database, or failed (a full disk)."""
