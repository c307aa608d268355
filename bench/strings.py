"""String attributes' costs (issue 19): back-filling new candidates over the retained reports
(on SQLite and on PostgreSQL),
and ingest of reports whose string attribute has 1,000 candidates beside the same schema without it.

Both loads use reports with distinct ``(a, b, y)`` (as devices send them), never one repeated
template: counting decodes alike reports once, which would hide the supports' cost.
"""

from __future__ import annotations

import http.client
import json
import math
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import numpy as np
import requests

from ldp_telemetry.aggregator import create_app
from ldp_telemetry.aggregator.cells import Limit
from ldp_telemetry.aggregator.questions import candidates
from ldp_telemetry.aggregator.store import ReportRow, layout
from ldp_telemetry.aggregator.ingest.inbox import MAX_UNFOLDED
from ldp_telemetry.aggregator.questions.backfill import backfill as backfill_job
from ldp_telemetry.shared import parse_schema
from ldp_telemetry.shared.mechanisms.olh import P, buckets

from . import bulkload, servers

CANDIDATES = [f"site-{i}.example" for i in range(1000)]
EPSILON = 4.0  # the string attribute's: g = 56
BACKFILL_TARGET_SECONDS = 10.0
INGEST_RATIO_TARGET = 0.5
BATCH = 100
CONNECTIONS = 4


def _schema(name: str, strings: bool, listed: list[str]) -> dict[str, Any]:
    attributes: list[dict[str, Any]] = [{"name": "dark_mode", "type": "boolean", "epsilon": 1.0},
                                        {"name": "os", "type": "categorical", "epsilon": 1.0,
                                         "categories": ["linux", "macos", "windows", "other"]}]
    if strings:
        attributes.append({"name": "home", "type": "string", "epsilon": EPSILON, "candidates": listed})
    return {"name": name, "version": 1, "epsilon": 2.0 + (EPSILON if strings else 0.0), "attributes": attributes}


def _values(rng: np.random.Generator, count: int, strings: bool) -> list[str]:
    """``count`` distinct wire values (JSON) of :func:`_schema`'s attributes."""
    a, b = rng.integers(1, P, count), rng.integers(0, P, count)
    y, flags, os = rng.integers(0, buckets(EPSILON), count), rng.random(count) < 0.5, rng.integers(0, 4, count)
    names = ["linux", "macos", "windows", "other"]
    home = ',"home":{"a":%d,"b":%d,"y":%d}'
    return ['{"dark_mode":%s,"os":"%s"%s}' % ("true" if flags[i] else "false", names[os[i]],
                                              home % (a[i], b[i], y[i]) if strings else "") for i in range(count)]


Values = Callable[[np.random.Generator, int], list[str]]  # ``count`` distinct wire values (JSON) of a schema


def load_and_backfill(db: str, definition: dict[str, Any], values: Values, reports: int,
                      add: Callable[[Any], int]) -> tuple[float, float, int]:
    """Store ``reports`` reports of ``definition`` in ``db`` (a SQLite file or a PostgreSQL URL,
    through the writer as :mod:`.bulkload` does, with distinct ``values`` over 30 days, settled as
    the jobs leave them), then time ``add(app)`` (a question added: how many) and the back-fill
    job until nothing is left: ``(load seconds, back-fill seconds, added)``."""
    rng = np.random.default_rng(19)
    schema = parse_schema(definition)
    app = create_app({"LDP_DB": db, "LDP_ADMIN_TOKEN": servers.ADMIN_TOKEN,
                      "LDP_SCHEDULER": False, "LDP_SYNCHRONOUS": "normal"})
    store, writer = app.extensions["ldp"]["store"], app.extensions["ldp"]["writer"]
    store.run_tx("publish_schema", lambda tx: tx.publish_schema(schema.to_dict(), "2026-01-01T00:00:00Z"))
    days = bulkload.window_days(30)
    packing = layout(schema)
    started = time.perf_counter()
    for start in range(0, reports, MAX_UNFOLDED):
        size = min(MAX_UNFOLDED, reports - start)
        writer.write([ReportRow("%032x" % int(i), schema.name, 1, *days[int(d)], v, packing.pack(json.loads(v)))
                      for i, d, v in zip(rng.integers(0, 2**63, size), rng.integers(0, 30, size), values(rng, size))])
        writer.settle()
    # A settle rewrites for a few seconds at most, and PostgreSQL's back-fill reads faster from
    # reports rewritten in id order: settled all the way before the clock starts.
    while not store.erase_arrival_order():
        pass
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    added = add(app)
    while store.run_tx("filling", lambda tx: tx.filling(), write=False):
        backfill_job(app, seconds=math.inf)
    seconds = time.perf_counter() - started
    store.close()
    return loaded, seconds, added


def backfill(reports: int = 1_000_000, count: int = len(CANDIDATES), *, postgres: bool = False) -> dict[str, Any]:
    """Seconds to back-fill ``count`` new candidates over ``reports`` stored reports (loaded as
    :func:`load_and_backfill` does): on a SQLite file, or with ``postgres`` on a database made for
    the run on :data:`servers.POSTGRES_URL` (else the reason it was skipped)."""
    def add(app: Any) -> int:
        return candidates.add_candidates(app.extensions["ldp"]["catalog"], "backfill-bench", 1, "home",
                                         CANDIDATES[:count], source="added", limit=Limit.of(app.config))

    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder, ExitStack() as stack:
        if postgres:
            try:
                db = stack.enter_context(servers.postgres_database())
            except RuntimeError as exc:
                return {"skipped": str(exc)}
        else:
            db = f"{folder}/backfill.db"
        loaded, seconds, added = load_and_backfill(db, _schema("backfill-bench", True, []),
                                                   lambda rng, size: _values(rng, size, True), reports, add)
    return {"reports": reports, "candidates": added, "seconds": round(seconds, 2), "load_seconds": round(loaded, 1),
            "cells_per_second": round(reports * added / seconds), "target_seconds": BACKFILL_TARGET_SECONDS,
            "database": "PostgreSQL" if postgres else "SQLite"}


def _post_for(url: str, bodies: list[bytes], seconds: float) -> tuple[int, int]:
    """Post ``bodies`` in turn on one keep-alive connection for ``seconds``: (accepted reports, failures)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    accepted = failed = 0
    deadline = time.perf_counter() + seconds
    for body in bodies:
        if time.perf_counter() >= deadline:
            break
        conn.request("POST", "/api/v1/reports", body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        if answer.status == 202:
            accepted += BATCH
        else:
            failed += 1
    conn.close()
    return accepted, failed


def _ingest_rate(strings: bool, seconds: float, folder: Path) -> dict[str, Any]:
    """Reports per second over HTTP (``ldp-telemetry serve`` on SQLite) of :func:`_schema`."""
    return ingest_rate(_schema("ingest-strings" if strings else "ingest-plain", strings, CANDIDATES),
                       lambda rng, size: _values(rng, size, strings), seconds, folder, 7 if strings else 8)


def ingest_rate(schema: dict[str, Any], values: Values, seconds: float, folder: Path, seed: int) -> dict[str, Any]:
    """Reports per second over HTTP (``ldp-telemetry serve`` on SQLite) of ``schema`` (as published,
    so with its breakdowns, if any), in batches of :data:`BATCH` reports of distinct ``values``,
    until counted."""
    rng = np.random.default_rng(seed)
    window = bulkload.window_days(1)[0][0]
    per_connection = int(seconds * 200) + 10  # more batches than a connection sends in ``seconds``
    bodies = [[json.dumps({"reports": [
        {"id": "%032x" % int(i), "schema": schema["name"], "version": 1, "window": window,
         "epsilon": schema["epsilon"], "values": json.loads(v)}
        for i, v in zip(rng.integers(0, 2**63, BATCH), values(rng, BATCH))]}).encode()
        for _ in range(per_connection)] for _ in range(CONNECTIONS)]
    db = folder / f"ingest-{schema['name']}-{time.monotonic_ns()}.db"
    with servers.aggregator(db) as url:
        requests.post(url + "/api/v1/schemas", json=schema, timeout=30,
                      headers={"Authorization": f"Bearer {servers.ADMIN_TOKEN}"}).raise_for_status()
        results: list[tuple[int, int]] = []
        threads = [threading.Thread(target=lambda b=b: results.append(_post_for(url, b, seconds))) for b in bodies]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        answered = time.perf_counter() - started
        # SQLite counts a moment after it answers (its inbox): the rate is of reports counted.
        while any(p.stat().st_size for p in Path(f"{db}-inbox").glob("*.log")):
            time.sleep(0.01)
        counted = time.perf_counter() - started
    accepted = sum(r[0] for r in results)
    return {"reports_per_second": round(accepted / counted, 1), "answered_per_second": round(accepted / answered, 1),
            "failed": sum(r[1] for r in results)}


def ingest(seconds: float = 5.0, runs: int = 1) -> dict[str, Any]:
    """Ingest of the schema with a string attribute of 1,000 candidates against the same schema
    without it, alternately ``runs`` times; the median ratio."""
    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder:
        pairs = [(_ingest_rate(False, seconds, Path(folder)), _ingest_rate(True, seconds, Path(folder)))
                 for i in range(runs)]
    ratios = sorted(s["reports_per_second"] / p["reports_per_second"] for p, s in pairs)
    return {"plain": [p for p, _ in pairs], "strings": [s for _, s in pairs], "ratio": ratios[len(ratios) // 2],
            "candidates": len(CANDIDATES), "target_ratio": INGEST_RATIO_TARGET}
