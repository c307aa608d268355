"""Ingest throughput: single-report and 100-report batches, over real HTTP to ``ldp-telemetry serve``.

    .venv/bin/python -m ldp_telemetry.aggregator.bench [--seconds 5] [--workers 2] [--clients 4]
                                                       [--synchronous full|normal]

Starts a server on a fresh temporary database (127.0.0.1, a free port), publishes a two-attribute
schema, and for each batch size posts pre-built bodies from ``--clients`` threads for
``--seconds``; prints reports/s and requests/s. Every post must be acknowledged (202) and the
database must end up holding exactly the reports sent. The server is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import requests

from ..shared.reports import randomize
from .process import ServerProcess

SCHEMA = {"name": "bench", "version": 1, "epsilon": 2.0, "attributes": [
    {"name": "dark_mode", "type": "boolean"},
    {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]}]}
TOKEN = "bench-admin-token"


def _bodies(count: int, batch: int) -> list[bytes]:
    records = [{"dark_mode": i % 2 == 0, "os": SCHEMA["attributes"][1]["categories"][i % 4]} for i in range(4)]
    return [json.dumps({"reports": [randomize(SCHEMA, records[(i + j) % 4]) for j in range(batch)]}).encode()
            for i in range(count)]


def measure(url: str, batch: int, seconds: float, clients: int, budget: int) -> tuple[int, int, float]:
    """Post ``batch``-report bodies from ``clients`` threads for ``seconds``: (reports, requests, elapsed)."""
    bodies = _bodies(budget, batch)
    lock = threading.Lock()
    posted = [0]
    deadline = time.perf_counter() + seconds

    def client() -> None:
        session = requests.Session()
        headers = {"Content-Type": "application/json"}
        while time.perf_counter() < deadline:
            with lock:
                if posted[0] >= len(bodies):
                    return
                body = bodies[posted[0]]
                posted[0] += 1
            response = session.post(url + "/api/v1/reports", data=body, headers=headers, timeout=60)
            if response.status_code != 202 or response.json()["accepted"] != batch:
                raise RuntimeError(f"post failed: {response.status_code} {response.text[:200]}")

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return posted[0] * batch, posted[0], time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="Time per batch size.")
    parser.add_argument("--workers", type=int, default=2, help="Gunicorn workers.")
    parser.add_argument("--clients", type=int, default=4, help="Concurrent client threads.")
    parser.add_argument("--synchronous", choices=("full", "normal"), default="full", help="LDP_SYNCHRONOUS.")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ldp-bench-") as folder:
        db = Path(folder) / "bench.db"
        server = ServerProcess(db, workers=args.workers, env={
            "LDP_ADMIN_TOKEN": TOKEN, "LDP_SCHEDULER": "false", "LDP_SYNCHRONOUS": args.synchronous})
        server.start()
        try:
            requests.post(server.url + "/api/v1/schemas", json=SCHEMA, headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=10).raise_for_status()
            total = 0
            print(f"ingest over HTTP: {args.workers} gunicorn workers, {args.clients} client threads, "
                  f"{args.seconds:g} s per size, LDP_SYNCHRONOUS={args.synchronous}")
            for batch, budget in ((1, 20_000), (100, 2_000)):
                reports, posts, elapsed = measure(server.url, batch, args.seconds, args.clients, budget)
                total += reports
                print(f"  batch {batch:>3}: {reports / elapsed:>9,.0f} reports/s  {posts / elapsed:>7,.0f} requests/s"
                      f"  ({reports:,} reports in {elapsed:.1f} s)")
            with sqlite3.connect(db) as conn:
                stored = conn.execute("SELECT count(*) FROM reports").fetchone()[0]
            if stored != total:
                raise RuntimeError(f"the database holds {stored} reports, {total} were acknowledged")
        finally:
            server.stop()

if __name__ == "__main__":
    main()
