"""Retention: what is older than ``LDP_RETENTION_DAYS`` is refused at ingest and erased by a job.

One cutoff for both, kept in the database (:meth:`.store.Tx.retention`), so a retried old
report can never be counted again after its window's reports (the only record that it was
counted) are gone, even if the clock moves back.

The clock is not trusted to jump: each run of the job moves the kept cutoff forward by at most
:data:`MAX_ADVANCE` (6 hours; runs are hourly, and one at each worker start). A machine that boots
with its clock weeks ahead erases at most 6 hours of windows early per run instead of every window
at once, and once the clock is right again the windows it did not reach are kept as they should
be. The price: a clock that stays wrong keeps moving the cutoff, up to 6 hours per run (a day of
wrong clock costs up to about 5 days of windows, which are then refused until real time catches
up); and a server stopped for a week catches up with retention in about a day and a half.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from flask import Flask

from . import context
from .store import Expired, Retention

# How far one run of the retention job may move the kept cutoff forward. Runs are hourly (and one
# at each worker start), so the cutoff moves at most about 6 times as fast as real time.
MAX_ADVANCE = timedelta(hours=6)
# How long a process trusts the kept cutoff it read (it only grows, and ingest's own transaction
# reads it again before storing, so a stale one costs no correctness).
CUTOFF_SECONDS = 5.0


def retention_cutoff(now: datetime, retention_days: float) -> datetime:
    """A window that ended at or before this is past retention by the clock."""
    return now - timedelta(days=retention_days)


def next_cutoff(wanted: int, kept: Retention) -> int | None:
    """Where a run moves the kept cutoff (Unix seconds): towards ``wanted``, by the clock, but at
    most :data:`MAX_ADVANCE` past the kept one (before the first run, past the oldest window's
    end); never back. None while nothing was ever stored: a first boot with a wrong clock must
    not leave a cutoff that refuses the right windows."""
    step = int(MAX_ADVANCE.total_seconds())
    if kept.cutoff is not None:
        return max(kept.cutoff, min(wanted, kept.cutoff + step))
    return None if kept.oldest_end is None else min(wanted, kept.oldest_end - 1 + step)


def expire(app: Flask) -> Expired:
    """The retention job: erase the raw reports, counters, estimates and dirty marks of windows
    past the kept cutoff, moved forward first (:func:`next_cutoff`); each schema version's
    ``all`` rollup keeps their sums."""
    store = context.store(app)
    context.writer(app).settle()  # the oldest window may still wait to be counted
    wanted = int(retention_cutoff(context.now(app), app.config["LDP_RETENTION_DAYS"]).timestamp())
    cutoff = next_cutoff(wanted, store.run_tx("retention", lambda tx: tx.retention(), write=False))
    if cutoff is None:
        return Expired(reports=0, windows=0)
    expired = store.expire(cutoff)
    app.extensions["ldp"].pop("retention", None)  # this process reads the new cutoff at once
    return expired


def kept_cutoff(app: Flask) -> int | None:
    """The kept cutoff as this process last read it (at most :data:`CUTOFF_SECONDS` ago)."""
    cache = app.extensions["ldp"].setdefault("retention", {"read_at": -CUTOFF_SECONDS, "cutoff": None})
    if time.monotonic() - cache["read_at"] >= CUTOFF_SECONDS:
        cache["cutoff"] = context.store(app).run_tx("retention_cutoff", lambda tx: tx.cutoff(), write=False)
        cache["read_at"] = time.monotonic()
    cutoff: int | None = cache["cutoff"]
    return cutoff
