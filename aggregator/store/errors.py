"""The store's own errors: what the rest of the aggregator catches, whatever the database, and
:func:`translating`, through which a driver's errors leave a store's methods as these."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class StoreError(Exception):
    """Something went wrong in the database."""


class StoreBusy(StoreError):
    """Another writer held the database for longer than the store waits: retry shortly."""


class StoreUnavailable(StoreError):
    """The database cannot be used: it cannot be opened, is not a database, or failed (a full disk)."""


def translating(classify: Callable[[Any, Exception], StoreError | None]) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A decorator for a store's methods: an exception that ``classify(store, exc)`` maps to a
    store error leaves as that error (the driver's chained to it); any other goes on as it is."""

    def decorate(method: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:
                error = classify(self, exc)
                if error is None:
                    raise
                raise error from exc

        return wrapper

    return decorate
