"""Reading estimates: the one query the API and the dashboard share.

The rules live here once: which window names a range may use and that ``since`` is not after
``until``; at most ``limit`` rows a read, with a cursor to the next page; and the confidence level
the shown intervals were computed at (the rows', which after a change of ``LDP_CONFIDENCE`` keep
the old level until the next refresh; the configured one when there are no rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from flask import Flask

from ...shared.checks import parse_digits
from ...shared.schema import Schema
from ...shared.windows import ROLLUP, window_start
from .. import context
from ..store import BreakdownEstimateRow, BreakdownsQuery, CrowdRow, EstimateRow, EstimatesQuery, Tx

DEFAULT_LIMIT = 10_000
MAX_LIMIT = 100_000
_MAX_RANK = 10**9  # far above any schema's value count, far below what int() would struggle with


class ReadError(ValueError):
    """A read asked for something that cannot be: ``field`` names the query parameter."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


# What a read returns rows of: estimates, or breakdown rows (both keyed by window and rank).
Row = TypeVar("Row", EstimateRow, BreakdownEstimateRow)


@dataclass(frozen=True)
class Readout(Generic[Row]):
    rows: list[Row]  # windows in time order, the rollup last, then by rank (values in schema order)
    confidence: float
    next: str | None  # the cursor of the next page, if there is more
    # How each window's reports arrived (the rollup's too), read in the same snapshot: what the
    # rows' relay fields are made of (:func:`.crowds.relay_fields`).
    crowds: dict[str, CrowdRow]


def window_bound(schema: Schema, field: str, name: str) -> str:
    """``name`` if it is a window of ``schema``'s kind; :class:`ReadError` naming ``field`` if not."""
    try:
        window_start(name, schema.window)
    except ValueError as exc:
        raise ReadError(field, str(exc)) from None
    return name


def check_range(since: str | None, until: str | None) -> None:
    """:class:`ReadError` if ``since`` is after ``until`` (window names sort in time)."""
    if since is not None and until is not None and since > until:
        raise ReadError("since", f"since ({since}) is after until ({until}): no window is in that range")


def limit_of(text: str | None) -> int:
    """The ``limit`` query parameter: 1 to :data:`MAX_LIMIT`, :data:`DEFAULT_LIMIT` if absent."""
    if text is None:
        return DEFAULT_LIMIT
    limit = parse_digits(text, len(str(MAX_LIMIT)))
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise ReadError("limit", f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return limit


def cursor_of(schema: Schema, text: str | None) -> tuple[str, int] | None:
    """The position a ``next`` cursor names (``WINDOW:RANK``), or :class:`ReadError`."""
    if text is None:
        return None
    window, _, rank = text.partition(":")
    if window != ROLLUP:
        try:
            window_start(window, schema.window)
        except ValueError:
            raise ReadError("next", "next must be a cursor from the previous page") from None
    number = parse_digits(rank, 10)
    if number is None or number > _MAX_RANK:
        raise ReadError("next", "next must be a cursor from the previous page")
    return window, number


def read(app: Flask, schema: Schema, *, attribute: str | None = None, since: str | None = None,
         until: str | None = None, limit: int = DEFAULT_LIMIT,
         after: tuple[str, int] | None = None) -> Readout[EstimateRow]:
    """The stored estimates of ``schema`` in ``since``..``until`` (the rollup always), a page of at
    most ``limit`` rows from after the position ``after``."""
    check_range(since, until)
    query = EstimatesQuery(schema.name, schema.version, attribute, since, until, limit + 1, after)
    return _page(app, schema, "estimates", lambda tx: tx.estimates(query), limit)


def read_breakdowns(app: Flask, schema: Schema, *, breakdowns: tuple[int, ...] | None = None,
                    since: str | None = None, until: str | None = None, limit: int = DEFAULT_LIMIT,
                    after: tuple[str, int] | None = None) -> Readout[BreakdownEstimateRow]:
    """The stored rows of ``schema``'s breakdowns numbered ``breakdowns`` (every one if None), paged
    as :func:`read` pages estimates."""
    check_range(since, until)
    query = BreakdownsQuery(schema.name, schema.version, breakdowns, since, until, limit + 1, after)
    return _page(app, schema, "breakdown_estimates", lambda tx: tx.breakdown_estimates(query), limit)


def _page(app: Flask, schema: Schema, name: str, fetch: Callable[[Tx], list[Row]], limit: int) -> Readout[Row]:
    """The page ``fetch`` reads (at most ``limit`` + 1 rows: one more tells there is a next page),
    with the confidence level its rows were computed at, the cursor of the next page and how the
    schema version's windows' reports arrived (a row per window)."""
    rows, crowds = context.store(app).run_tx(name, lambda tx: (fetch(tx), tx.crowds(schema.name, schema.version)),
                                             write=False)
    more = len(rows) > limit
    rows = rows[:limit]
    levels = {r.confidence for r in rows}
    confidence = levels.pop() if len(levels) == 1 else app.config["LDP_CONFIDENCE"]
    return Readout(rows, confidence, f"{rows[-1].window}:{rows[-1].rank}" if more else None, crowds)
