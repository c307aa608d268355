"""The current app's parts, for code running in a request or a job: store, catalog, writer, reader, clock, metrics."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from flask import Flask, current_app

if TYPE_CHECKING:
    from .catalog import Catalog
    from .ingest.reader import BatchReader
    from .ingest.writer import ReportWriter
    from .metrics import Metrics
    from .store import Store


def store(app: Flask | None = None) -> "Store":
    part: Store = (app or current_app).extensions["ldp"]["store"]  # set by create_app
    return part


def catalog(app: Flask | None = None) -> "Catalog":
    part: Catalog = (app or current_app).extensions["ldp"]["catalog"]  # set by create_app
    return part


def writer(app: Flask | None = None) -> "ReportWriter":
    part: ReportWriter = (app or current_app).extensions["ldp"]["writer"]  # set by create_app
    return part


def reader(app: Flask | None = None) -> "BatchReader":
    part: BatchReader = (app or current_app).extensions["ldp"]["reader"]  # set by create_app
    return part


def metrics(app: Flask | None = None) -> "Metrics":
    part: Metrics = (app or current_app).extensions["ldp"]["metrics"]  # set by create_app
    return part


def now(app: Flask | None = None) -> datetime:
    """The app's clock (``LDP_CLOCK``, injectable for tests) as an aware UTC time."""
    moment: datetime = (app or current_app).config["LDP_CLOCK"]()
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def system_clock() -> datetime:
    return datetime.now(timezone.utc)


def iso(moment: datetime) -> str:
    """ISO 8601 UTC to the second, e.g. ``2026-11-21T11:30:00Z``."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
