"""Breakdowns' costs (issue 28): ingest of a schema with 4 breakdowns against the same schema
without them, and the back-fill of one breakdown added over the retained reports.

Both loads use reports with distinct values (as devices send them), through the machinery of
:mod:`.strings` (the same loader, back-fill loop and HTTP load).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ldp_telemetry.aggregator.cells import Limit
from ldp_telemetry.aggregator.questions import breakdowns

from . import strings

BACKFILL_TARGET_SECONDS = 10.0
INGEST_RATIO_TARGET = 0.7
OS = ["linux", "macos", "windows", "other"]
PLANS = ["free", "pro", "team"]
BREAKDOWNS = [{"of": "dark_mode", "by": "os"}, {"of": "crashed", "by": "os"}, {"of": "os", "by": "plan"},
              {"of": "minutes", "by": "plan"}]


def _schema(name: str, with_breakdowns: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {"name": name, "version": 1, "epsilon": 4.0, "attributes": [
        {"name": "dark_mode", "type": "boolean"}, {"name": "crashed", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": OS},
        {"name": "plan", "type": "categorical", "categories": PLANS},
        {"name": "minutes", "type": "numeric", "range": [0, 120], "mechanism": "pm"}]}
    return {**schema, "breakdowns": BREAKDOWNS} if with_breakdowns else schema


def _values(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` distinct wire values (JSON) of :func:`_schema`'s attributes (pm's value makes
    each distinct)."""
    flags, crashed = rng.random(count) < 0.5, rng.random(count) < 0.2
    os, plan, minutes = rng.integers(0, len(OS), count), rng.integers(0, len(PLANS), count), rng.uniform(-1, 1, count)
    return ['{"dark_mode":%s,"crashed":%s,"os":"%s","plan":"%s","minutes":%r}' % (
        "true" if flags[i] else "false", "true" if crashed[i] else "false", OS[os[i]], PLANS[plan[i]],
        float(minutes[i])) for i in range(count)]


def backfill(reports: int = 1_000_000) -> dict[str, Any]:
    """Seconds to back-fill one breakdown (crashed by os) added over ``reports`` stored reports (SQLite)."""
    def add(app: Any) -> int:
        return int(breakdowns.add_breakdown(app.extensions["ldp"]["catalog"], "breakdown-bench", 1,
                                            {"of": "crashed", "by": "os"}, limit=Limit.of(app.config),
                                            added_at="2026-01-01T00:00:00Z"))

    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder:
        loaded, seconds, _ = strings.load_and_backfill(f"{folder}/backfill.db", _schema("breakdown-bench", False),
                                                       _values, reports, add)
    return {"reports": reports, "seconds": round(seconds, 2), "load_seconds": round(loaded, 1),
            "reports_per_second": round(reports / seconds), "target_seconds": BACKFILL_TARGET_SECONDS}


def ingest(seconds: float = 5.0, runs: int = 1) -> dict[str, Any]:
    """Ingest of the schema with 4 breakdowns against the same schema without them, alternately
    ``runs`` times; the median ratio."""
    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder:
        pairs = [(strings.ingest_rate(_schema("ingest-plain", False), _values, seconds, Path(folder), 8),
                  strings.ingest_rate(_schema("ingest-breakdowns", True), _values, seconds, Path(folder), 7))
                 for _ in range(runs)]
    ratios = sorted(b["reports_per_second"] / p["reports_per_second"] for p, b in pairs)
    return {"plain": [p for p, _ in pairs], "breakdowns": [b for _, b in pairs], "ratio": ratios[len(ratios) // 2],
            "count": len(BREAKDOWNS), "target_ratio": INGEST_RATIO_TARGET}
