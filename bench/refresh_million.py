"""A refresh that writes about 1,000,000 estimate rows on SQLite (issue 26: within 10 s).

A schema's estimate rows are its values a window times its windows with reports (and the ``all``
rollup), whatever the number of reports: so :data:`SCHEMA` has many categories, over 30 day
windows, and a thousand reports a window load quickly. Each report is randomized anew, as devices
send them, so the counters the refresh reads spread over the categories rather than one per
attribute. The app runs with ``serve``'s defaults (``LDP_SYNCHRONOUS=full``); what was
acknowledged is counted before the clock starts, so the refresh alone is timed.
"""

from __future__ import annotations

import math
import tempfile
import time
from typing import Any

from ldp_telemetry.aggregator import create_app
from ldp_telemetry.aggregator.estimation.refresh import refresh
from ldp_telemetry.shared import parse_schema

from . import bulkload, servers

ROWS_TARGET = 1_000_000
SECONDS_TARGET = 10.0
WINDOWS = 30  # day windows with reports; with the rollup, WINDOWS + 1 windows of estimates
ATTRIBUTES = 32
CATEGORIES = math.ceil(ROWS_TARGET / (ATTRIBUTES * (WINDOWS + 1)))  # 1,009: 1,000,928 rows
REPORTS_PER_WINDOW = 1_000  # ~1 report a category of each attribute: most counters are there
SCHEMA = parse_schema({
    "name": "refresh-million", "version": 1, "epsilon": ATTRIBUTES * 0.5,
    "attributes": [{"name": f"a{i}", "type": "categorical", "mechanism": "grr", "epsilon": 0.5,
                    "categories": [f"c{j}" for j in range(CATEGORIES)]} for i in range(ATTRIBUTES)]})


def run() -> dict[str, Any]:
    """Load the reports, then time one refresh of every window: rows written and seconds."""
    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder:
        db = f"{folder}/refresh-million.db"
        started = time.perf_counter()
        bulkload.add_reports(db, SCHEMA, 0, WINDOWS * REPORTS_PER_WINDOW, windows=WINDOWS, distinct=True)
        loaded = time.perf_counter() - started
        app = create_app({"LDP_DB": db, "LDP_ADMIN_TOKEN": servers.ADMIN_TOKEN, "LDP_SCHEDULER": False})
        app.extensions["ldp"]["writer"].settle()  # counted first: the refresh alone is measured
        started = time.perf_counter()
        result = refresh(app)
        seconds = time.perf_counter() - started
        app.extensions["ldp"]["store"].close()
    return {"rows": result.written, "windows": result.windows, "seconds": round(seconds, 2),
            "rows_per_second": round(result.written / seconds), "load_seconds": round(loaded, 1),
            "reports": WINDOWS * REPORTS_PER_WINDOW, "attributes": ATTRIBUTES, "categories": CATEGORIES,
            "target_rows": ROWS_TARGET, "target_seconds": SECONDS_TARGET}
