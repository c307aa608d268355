"""The estimation job: turn changed counters into debiased estimates with Wilson intervals.

Only windows whose counters changed since the last refresh are recomputed (the ``dirty`` marks
ingest leaves), plus the ``all`` rollup of each schema version they belong to; every window is
recomputed when ``LDP_CONFIDENCE`` changed. Everything is read from the counters, never from the
raw reports, and written in one transaction, so concurrent refreshes (the scheduler, an admin's
``POST /api/v1/estimates/refresh``, another worker) simply take turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import Any, Iterable

from flask import Flask

from ..shared.schema import Schema
from ..shared.windows import ROLLUP
from . import context
from .ingest import window_policy


@dataclass(frozen=True)
class RefreshResult:
    written: int  # estimate rows written
    windows: int  # windows recomputed (not counting the rollups)


def refresh(app: Flask) -> RefreshResult:
    """Recompute the estimates of every stale window and their schema versions' rollups."""
    store, catalog = context.store(app), context.catalog(app)
    confidence = app.config["LDP_CONFIDENCE"]
    computed_at = context.iso(context.now(app))
    with context.metrics(app).refresh_seconds.time(), store.write():
        stale = store.stale_windows(confidence)
        rows: list[dict[str, Any]] = []
        for (name, version), keys in groupby(stale, key=lambda key: key[:2]):
            schema = catalog.schema(name, version)
            if schema is None:  # counters exist only for published schemas, which are never deleted
                raise RuntimeError(f"counters of {name!r} version {version}, which is not published")
            for _, _, window in keys:
                rows += estimate_rows(schema, window, store.window_counters(name, version, window),
                                      confidence, computed_at)
            rows += estimate_rows(schema, ROLLUP, store.rollup_counters(name, version), confidence, computed_at)
        store.save_estimates(rows, stale, confidence)
    return RefreshResult(len(rows), len(stale))


def estimate_rows(schema: Schema, window: str, counters: Iterable[tuple[str, str, int, int]], confidence: float,
                  computed_at: str) -> list[dict[str, Any]]:
    """One estimate row per value of each attribute in ``(attribute, value, n, amount)`` counters,
    from the attribute's mechanism (:meth:`Mechanism.estimates`)."""
    totals: dict[str, int] = {}
    amounts: dict[str, dict[str, int]] = {}
    for name, key, n, amount in counters:
        totals[name] = n
        amounts.setdefault(name, {})[key] = amount
    rows = []
    for name, n in totals.items():
        attribute = schema.attribute(name)
        for key, e in attribute.mech.estimates(attribute, n, amounts[name], confidence):
            rows.append({"schema": schema.name, "version": schema.version, "window": window, "attribute": name,
                         "value": key, "estimate": e.estimate, "estimate_clipped": e.estimate_clipped,
                         "ci_low": e.ci_low, "ci_high": e.ci_high, "n": n, "hits": e.hits,
                         "epsilon": attribute.epsilon, "computed_at": computed_at})
    return rows


def delete_expired_reports(app: Flask) -> int:
    """The retention job: delete raw reports of windows past ``LDP_RETENTION_DAYS`` (counters stay).

    Ingest rejects those same windows, so a retried old report cannot be counted twice.
    """
    policy = window_policy(app)
    return context.store(app).delete_reports_ended_by(int(policy.retention_cutoff.timestamp()))
