"""Retention: what is older than ``LDP_RETENTION_DAYS`` is refused at ingest and erased by a job.

One cutoff for both, so a retried old report can never be counted again after its window's
reports (the only record that it was counted) are gone.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from flask import Flask

from . import context
from .store import Expired


def retention_cutoff(now: datetime, retention_days: float) -> datetime:
    """A window that ended at or before this is past retention."""
    return now - timedelta(days=retention_days)


def expire(app: Flask) -> Expired:
    """The retention job: erase the raw reports, counters, estimates and dirty marks of windows
    past retention; each schema version's ``all`` rollup keeps their sums."""
    cutoff = retention_cutoff(context.now(app), app.config["LDP_RETENTION_DAYS"])
    return context.store(app).expire(int(cutoff.timestamp()))
