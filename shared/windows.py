"""Aggregation windows: the UTC hour or day a report was made in.

A window is named by its start: ``YYYY-MM-DD`` for a day, ``YYYY-MM-DDTHH`` for an hour. The
window is the finest time the server ever learns about a report.
"""

from __future__ import annotations

import re
import time
from functools import lru_cache
from datetime import datetime, timedelta, timezone

# [0-9], not \d: \d also matches non-ASCII digits, which strptime accepts ("2026-11-2\u0661"),
# and the same window would then be stored under a second name.
_FORMATS = {"day": ("%Y-%m-%d", re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")),
            "hour": ("%Y-%m-%dT%H", re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}"))}
# Either kind of window name, for documents that describe both (the OpenAPI document).
NAME_PATTERN = rf"{_FORMATS['day'][1].pattern}(T[0-9]{{2}})?"
LENGTH = {"day": timedelta(days=1), "hour": timedelta(hours=1)}
# The name of the rollup over every window of a schema version, where a window name would stand.
ROLLUP = "all"


def window_of(moment: datetime, kind: str) -> str:
    """The name of the ``kind`` window (``"hour"`` or ``"day"``) containing ``moment``.

    A naive ``moment`` is taken as UTC.
    """
    fmt, _ = _format(kind)
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.strftime(fmt)


def current_window(kind: str, now: datetime | None = None) -> str:
    """The window containing ``now`` (default: the current UTC time)."""
    if now is not None:
        return window_of(now, kind)
    _format(kind)  # an unknown kind is a ValueError, not a KeyError
    seconds = int(LENGTH[kind].total_seconds())
    return _window_by_index(int(time.time()) // seconds, kind)


@lru_cache(maxsize=64)  # formatting a date costs microseconds; the window changes once an hour
def _window_by_index(index: int, kind: str) -> str:
    return window_of(datetime.fromtimestamp(index * LENGTH[kind].total_seconds(), timezone.utc), kind)


def overlapping(name: str) -> tuple[str, ...]:
    """The window names whose time overlaps window ``name``: itself, and its day (for an hour) or
    its 24 hours (for a day). The client's ledger counts all of them as spent, so moving a schema
    between day and hour windows buys no second report for the same time."""
    if len(name) > 10:  # YYYY-MM-DDTHH
        return (name, name[:10])
    return (name, *(f"{name}T{hour:02d}" for hour in range(24)))


def day_of(name: str) -> str:
    """The UTC day (``YYYY-MM-DD``) window ``name`` falls in: itself for a day, its date for an hour."""
    return name[:10]


def window_start(name: str, kind: str) -> datetime:
    """The aware UTC start of the window called ``name``; ``ValueError`` if it is not one."""
    if not isinstance(name, str):
        raise ValueError(f"window must be a string naming a {kind} window, got {type(name).__name__}")
    return _window_start(name, kind)


def window_end(name: str, kind: str) -> datetime:
    """The aware UTC end of the window called ``name`` (its start plus its length)."""
    return window_start(name, kind) + LENGTH[kind]


@lru_cache(maxsize=4096)  # reports name few distinct windows
def _window_start(name: str, kind: str) -> datetime:
    _, pattern = _format(kind)
    if not pattern.fullmatch(name):
        shape = "YYYY-MM-DD" if kind == "day" else "YYYY-MM-DDTHH"
        raise ValueError(f"window must be a {kind} window of the form {shape} (UTC), got {name!r:.40}")
    try:
        # The pattern fixed where the ASCII digits are; datetime() checks the date is real
        # (strptime, many times slower, runs for every report of a batch).
        hour = int(name[11:13]) if kind == "hour" else 0
        return datetime(int(name[0:4]), int(name[5:7]), int(name[8:10]), hour, tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"window {name!r} names no real {'day' if kind == 'day' else 'hour'} (UTC)") from None


def _format(kind: str) -> tuple[str, re.Pattern[str]]:
    try:
        return _FORMATS[kind]
    except KeyError:
        raise ValueError(f"window kind must be 'hour' or 'day', got {kind!r}") from None
