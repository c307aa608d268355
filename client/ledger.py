"""The ledger: what this device has spent, and the rules that bound it.

Two rules, per schema, applied by :func:`refusal` alone:

1. one report per window, where a day and the hours in it overlap (either spends the other), so
   a server that moves a schema between day and hour windows buys no second report for that time;
2. at most ``max_epsilon_per_day`` ε per UTC day, summed over the day's windows, so a server that
   moves a schema to shorter windows gains nothing unless the app allowed it.

The ledger lives in the outbox file: a row per (schema, window), committed in the transaction
that stores its report, so it holds across restarts and for every process sharing the data
folder (:meth:`Ledger.commit` decides under the file's write lock). A copy in memory answers
``record()`` without touching the disk (:meth:`Ledger.claim`).
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import timedelta
from typing import Any, Iterable, Mapping

from ldp_telemetry.shared.checks import TOLERANCE
from ldp_telemetry.shared.windows import day_of, overlapping

TABLE = """
CREATE TABLE IF NOT EXISTS ledger (schema TEXT NOT NULL, window TEXT NOT NULL, epsilon REAL NOT NULL,
                                   PRIMARY KEY (schema, window));
"""
# Far beyond any server's retention (reports that old are refused anyway); keeps the ledger small.
KEPT = timedelta(days=400)
# Hour windows sort after their day ("2026-11-21T05" > "2026-11-21") and before "2026-11-21U":
# the rows of one day are one range of the primary key.
_DAY_END = "U"


def refusal(day: Mapping[str, float], window: str, epsilon: float, per_day: float) -> str | None:
    """Why a report of ``epsilon`` in ``window`` may not be made, given the windows already spent
    that UTC day (``{window: ε}``); None when it may."""
    for name in overlapping(window):
        if name in day:
            return f"already reported in window {window} (one report per schema per window; a day and its hours overlap)"
    total = sum(day.values()) if day else 0.0
    if total + epsilon > per_day + TOLERANCE:
        return (f"the daily cap: epsilon {total:g} already spent on {day_of(window)} (UTC) and this report "
                f"would spend {epsilon:g} more, over max_epsilon_per_day {per_day:g}")
    return None


class Ledger:
    """The spending rules over the ledger in memory (for ``record()``) and on disk (for every process)."""

    def __init__(self, *, per_day: float, rows: Iterable[tuple[str, str, float]]):
        self.per_day = per_day
        self._lock = threading.Lock()
        self._days: dict[tuple[str, str], dict[str, float]] = {}  # (schema, day) -> {window: ε}
        for schema, window, epsilon in rows:
            self._days.setdefault((schema, day_of(window)), {})[window] = epsilon

    def claim(self, schema: str, window: str, epsilon: float) -> str | None:
        """Spend ``epsilon`` in ``window`` in memory if the rules allow it; else why not."""
        key = (schema, day_of(window))
        with self._lock:
            day = self._days.setdefault(key, {})
            reason = refusal(day, window, epsilon, self.per_day)
            if reason is None:
                day[window] = epsilon
            return reason

    def release(self, schema: str, window: str) -> None:
        """Undo a :meth:`claim` whose report was never queued."""
        with self._lock:
            self._days.get((schema, day_of(window)), {}).pop(window, None)

    def commit(self, db: sqlite3.Connection, report: Mapping[str, Any]) -> str | None:
        """Inside the outbox's write transaction: spend the report's ε on disk if the rules allow
        it given what every process on this file has spent that day; else why not (and this
        process learns what the others spent)."""
        schema, window, epsilon = report["schema"], report["window"], report["epsilon"]
        day = day_of(window)
        spent = dict(db.execute('SELECT "window", epsilon FROM ledger WHERE schema = ? AND "window" >= ? '
                                'AND "window" < ?', (schema, day, day + _DAY_END)).fetchall())
        reason = refusal(spent, window, epsilon, self.per_day)
        if reason is None:
            db.execute("INSERT INTO ledger VALUES (?, ?, ?)", (schema, window, epsilon))
            return None
        with self._lock:
            known = self._days.setdefault((schema, day), {})
            known.pop(window, None)
            known.update(spent)
        return reason

    def spent(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{schema: {day: {"epsilon": ε that day, "max_epsilon_per_day": cap, "windows": {window: ε}}}}``."""
        with self._lock:
            days = sorted((key, dict(windows)) for key, windows in self._days.items() if windows)
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for (schema, day), windows in days:
            out.setdefault(schema, {})[day] = {"epsilon": sum(windows.values()), "max_epsilon_per_day": self.per_day,
                                               "windows": dict(sorted(windows.items()))}
        return out
