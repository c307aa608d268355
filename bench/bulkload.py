"""Build big aggregator databases fast, for the read-latency benchmarks.

Rows go in through the aggregator's own writer (:class:`ReportWriter`: same tables, same transaction, same
counting and counter upserts) in chunks of 50,000, but their content is synthetic: ids are
sequential and every report carries the same values, so counting decodes one distinct value per
window (unless asked for distinct values). 10 million reports then take minutes instead of the hours the HTTP path would.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from ldp_telemetry.aggregator import open_database
from ldp_telemetry.aggregator.store import ReportRow, layout
from ldp_telemetry.aggregator.ingest.inbox import MAX_UNFOLDED
from ldp_telemetry.shared import randomize
from ldp_telemetry.shared.schema import Schema

CHUNK = MAX_UNFOLDED  # what SQLite's inbox takes at once


def window_days(count: int, today: datetime | None = None) -> list[tuple[str, int]]:
    """The last ``count`` day windows (name, end in Unix seconds), oldest first."""
    today = (today or datetime.now(timezone.utc)).replace(hour=0, minute=0, second=0, microsecond=0)
    days = [today - timedelta(days=i) for i in reversed(range(count))]
    return [(d.strftime("%Y-%m-%d"), int((d + timedelta(days=1)).timestamp())) for d in days]


def add_reports(db: Path | str, schema: Schema, start: int, count: int, *, windows: int = 30, seed: int = 1,
                distinct: bool = False) -> None:
    """Add reports ``start`` .. ``start + count - 1`` to ``db`` (a SQLite file or a PostgreSQL
    URL), spread evenly over ``windows`` days. With ``distinct``, each report's values are
    randomized anew, as devices send them, so its counters spread over the categories (slower:
    one ``randomize`` a report)."""
    database = open_database(str(db), "normal")
    store = database.store
    store.migrate()
    if store.run_tx("get_schema", lambda tx: tx.get_schema(schema.name, schema.version), write=False) is None:
        store.run_tx("publish_schema", lambda tx: tx.publish_schema(schema.to_dict(), "2026-01-01T00:00:00Z"))
    days = window_days(windows)
    record = {a.name: a.kind.example(a) for a in schema.attributes}

    packing = layout(schema)

    def wire_values() -> tuple[str, bytes]:
        values = randomize(schema, record)["values"]
        return json.dumps(values, separators=(",", ":")), packing.pack(values)

    sample = wire_values()
    for chunk_start in range(start, start + count, CHUNK):
        size = min(CHUNK, start + count - chunk_start)
        day_of = np.arange(chunk_start, chunk_start + size) % windows
        rows = [ReportRow(f"bulk{i:028d}", schema.name, schema.version, days[d][0], days[d][1],
                          *(wire_values() if distinct else sample))
                for i, d in zip(range(chunk_start, chunk_start + size), day_of.tolist())]
        database.writer.write(rows)
        database.writer.settle()  # counted before the next chunk
    store.close()
