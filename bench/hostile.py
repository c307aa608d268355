"""The hostile batch of the architecture issue, replayed against a real server.

One anonymous client sends 720 reports, one per hourly window of the last 30 days, of one
attribute with 1,024 categories under generalised randomised response (a 104 KB body).
Dense counters made that 737,280 counter rows, a 9.6 s refresh holding the write lock and an
8.4 s wait for a one-report ingest beside it. Measured here: what the one request gets now (a
batch may name at most ``MAX_BATCH_WINDOWS`` windows), what the same reports cost when sent in
batches the server accepts, and how long a refresh of all of it, a one-report ingest during
that refresh, and the anonymous reads (dashboard pages, estimates as JSON and CSV) during and after
it take, and how many bytes such a read can be made to return.
"""

from __future__ import annotations

import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import requests

from ldp_telemetry.aggregator import open_database
from ldp_telemetry.shared import parse_schema, randomize
from ldp_telemetry.shared.reports import MAX_BATCH_WINDOWS

from . import servers

WINDOWS = 720
CATEGORIES = 1024
SCHEMA = parse_schema({"name": "hostile", "version": 1, "epsilon": 2.0, "window": "hour", "attributes": [
    {"name": "page", "type": "categorical", "mechanism": "grr",
     "categories": [f"page-{i}" for i in range(CATEGORIES)]}]})


def run() -> dict[str, Any]:
    now = datetime.now(timezone.utc)
    hours = [(now - timedelta(hours=h)).strftime("%Y-%m-%dT%H") for h in range(1, WINDOWS + 1)]
    batch = [randomize(SCHEMA, {"page": f"page-{i % CATEGORIES}"}, window=w) for i, w in enumerate(hours)]
    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder:
        db = Path(folder) / "hostile.db"
        with servers.aggregator(db, synchronous="normal") as url:
            servers.publish(url, SCHEMA.to_dict())
            one_request = requests.post(url + "/api/v1/reports", json={"reports": batch}, timeout=120)
            for start in range(0, len(batch), MAX_BATCH_WINDOWS):
                chunk = batch[start:start + MAX_BATCH_WINDOWS]
                requests.post(url + "/api/v1/reports", json={"reports": chunk}, timeout=120).raise_for_status()
            rows = _footprint(db)
            bytes_on_disk = sum(p.stat().st_size for p in Path(folder).glob("hostile.db*"))
            refresh_ms, side_ms, reads = _refresh_beside_ingest(url, hours[0])
    return {"anonymous_reads": len(reads), "anonymous_read_max_ms": round(max(ms for ms, _ in reads), 1),
            "anonymous_read_max_bytes": max(size for _, size in reads),"one_request_status": one_request.status_code, "reports": len(batch),
            "counter_rows": rows["counters"], "total_rows": rows["totals"], "bytes": bytes_on_disk,
            "refresh_ms": round(refresh_ms, 1), "side_ingest_max_ms": round(max(side_ms), 1),
            "side_ingest_p50_ms": round(sorted(side_ms)[len(side_ms) // 2], 1),
            "side_ingest_p99_ms": round(sorted(side_ms)[int(len(side_ms) * 0.99)], 1), "side_ingests": len(side_ms)}


def _footprint(db: Path) -> dict[str, int]:
    database = open_database(str(db))
    try:
        database.writer.settle()
        return database.store.run_tx("footprint", lambda tx: tx.footprint(), write=False)
    finally:
        database.store.close()


# What an anonymous visitor can ask for: the dashboard and the estimates (default page size).
READS = ("/", f"/schemas/{SCHEMA.name}", f"/api/v1/estimates?schema={SCHEMA.name}",
         f"/api/v1/estimates?schema={SCHEMA.name}&format=csv")


def _refresh_beside_ingest(url: str, window: str) -> tuple[float, list[float], list[tuple[float, int]]]:
    """The refresh's duration, the latencies of one-report ingests sent while it ran, and the
    (latency ms, bytes) of anonymous reads sent while it ran and a few rounds after."""
    done = threading.Event()
    took: list[float] = []
    reads: list[tuple[float, int]] = []

    def read_anonymously() -> None:
        with requests.Session() as session:
            rounds_after = 0
            while rounds_after < 3:
                rounds_after += done.is_set()
                for path in READS:
                    started = time.perf_counter()
                    response = session.get(url + path, timeout=120)
                    response.raise_for_status()
                    reads.append(((time.perf_counter() - started) * 1000, len(response.content)))

    def refresh() -> None:
        started = time.perf_counter()
        requests.post(url + "/api/v1/estimates/refresh", timeout=300,
                      headers={"Authorization": f"Bearer {servers.ADMIN_TOKEN}"}).raise_for_status()
        took.append((time.perf_counter() - started) * 1000)
        done.set()

    thread = threading.Thread(target=refresh)
    reader = threading.Thread(target=read_anonymously)
    thread.start()
    reader.start()
    side: list[float] = []
    with requests.Session() as session:
        while not done.is_set() or not side:
            report = randomize(SCHEMA, {"page": "page-1"}, window=window)
            started = time.perf_counter()
            session.post(url + "/api/v1/reports", json={"reports": [report]}, timeout=120).raise_for_status()
            side.append((time.perf_counter() - started) * 1000)
    thread.join()
    reader.join()
    return took[0], side, reads
