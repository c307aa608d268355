"""Load and soak: a real 2-worker server under a mix of valid, duplicate and invalid batches.

Deselected by `make test` (marker ``load``); CI runs a short version:

    LDP_LOAD_SECONDS=10 make test PYTEST_ARGS="-m load"     # short (CI)
    make test PYTEST_ARGS="-m load"                          # about a minute

Afterwards: no 5xx, no dropped connection, counters exactly equal to the valid unique reports
sent, and the workers' memory not growing across the run.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest
import requests
from conftest import ADMIN, APP_USAGE, LiveServer, expected_counters, stored_counters

from ldp_telemetry.aggregator import open_database
from ldp_telemetry.aggregator.store.sqlite_connection import CACHE_KIB
from ldp_telemetry.shared import parse_schema, randomize

pytestmark = pytest.mark.load

SECONDS = float(os.environ.get("LDP_LOAD_SECONDS", "60"))
THREADS = 6
# Growth allowed in a worker's resident memory between the end of the warm-up (a quarter of the
# run) and the end: 20 MiB for allocator arenas, plus what SQLite's page cache may legitimately
# take, which is at most the database's growth over the same time (capped at CACHE_KIB). So the
# check catches a leak larger than that allowance, e.g. a few KiB per request over the tens of
# thousands of requests of the minute run; a smaller leak needs a longer soak to show.
RSS_GROWTH_LIMIT = 20 * 2**20


def worker_rss(master_pid: int) -> dict[int, int]:
    """Resident bytes of each child (a worker) of ``master_pid``, from /proc."""
    sizes = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != master_pid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    sizes[int(entry.name)] = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
    return sizes


def database_bytes(path: Path) -> int:
    """The database's size with its write-ahead log: what the workers' page caches can hold."""
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


class Traffic:
    """One connection's share of the load: what it sent, what came back."""

    def __init__(self, url: str, seed: int, deadline: float):
        self.url, self.deadline = url, deadline
        self.rng = random.Random(seed)  # chooses the mix only; reports are randomised by randomize()
        self.schema = parse_schema(APP_USAGE)
        self.valid: list[dict] = []  # every valid report sent and acknowledged
        self.accepted = 0  # the sum of the answers' "accepted"
        self.statuses: dict[int, int] = {}
        self.failures: list[str] = []

    def fresh_batch(self) -> list[dict]:
        return [randomize(self.schema, {"dark_mode": self.rng.random() < 0.3,
                                        "os": self.rng.choice(self.schema.attribute("os").categories)})
                for _ in range(self.rng.randint(1, 50))]

    def run(self) -> None:
        session = requests.Session()
        while time.monotonic() < self.deadline:
            kind = self.rng.random()
            if kind < 0.6 or not self.valid:
                batch, expect = self.fresh_batch(), "new"
            elif kind < 0.8:  # a retry: some reports already stored, plus one new
                batch = self.rng.sample(self.valid, min(len(self.valid), self.rng.randint(1, 20)))
                batch = batch + self.fresh_batch()[:1]
                expect = "retry"
            else:  # one bad report rejects the whole batch
                batch = self.fresh_batch()
                batch[self.rng.randrange(len(batch))]["values"]["os"] = "beos"
                expect = "invalid"
            try:
                response = session.post(self.url + "/api/v1/reports", json={"reports": batch}, timeout=30)
            except requests.RequestException as exc:
                self.failures.append(f"connection: {exc!r}")
                continue
            self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
            body = response.json()
            if expect == "invalid":
                if response.status_code != 400:
                    self.failures.append(f"invalid batch got {response.status_code}: {body}")
                continue
            if response.status_code != 202:
                self.failures.append(f"{expect} batch got {response.status_code}: {body}")
                continue
            # A retry's stored ids are duplicates that the SQLite store may find only when it counts
            # them, a moment after answering (DESIGN.md): the answer then says "accepted", and
            # /metrics says so (checked at the end). The new report of a retry is never a duplicate.
            if expect == "new" and body != {"accepted": len(batch), "duplicates": 0} or \
                    expect == "retry" and (body["accepted"] + body["duplicates"] != len(batch) or body["accepted"] < 1):
                self.failures.append(f"{expect} batch of {len(batch)}: got {body}")
            self.accepted += body["accepted"]
            self.valid.extend(batch if expect == "new" else batch[-1:])


def test_mixed_load_keeps_exact_counts_and_flat_memory(tmp_path: Path) -> None:
    server = LiveServer(tmp_path / "load.db")
    server.start()
    try:
        assert requests.post(server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN,
                             timeout=30).status_code == 201
        master = server.process.pid  # type: ignore[union-attr]
        started = time.monotonic()
        traffic = [Traffic(server.url, seed, started + SECONDS) for seed in range(THREADS)]
        threads = [threading.Thread(target=t.run) for t in traffic]
        for t in threads:
            t.start()
        time.sleep(SECONDS / 4)
        rss_warm, db_warm = worker_rss(master), database_bytes(server.db_path)
        for t in threads:
            t.join(SECONDS + 60)
        rss_end, db_end = worker_rss(master), database_bytes(server.db_path)
        cache_growth = min(max(0, db_end - db_warm), CACHE_KIB * 1024)

        failures = [f for t in traffic for f in t.failures]
        assert not failures, failures[:5]
        statuses: dict[int, int] = {}
        for t in traffic:
            for status, count in t.statuses.items():
                statuses[status] = statuses.get(status, 0) + count
        assert not [s for s in statuses if s >= 500], statuses
        assert statuses.get(202, 0) > 0 and statuses.get(400, 0) > 0, statuses

        sent = [r for t in traffic for r in t.valid]
        assert len({r["id"] for r in sent}) == len(sent)
        store = open_database(str(server.db_path))[0]
        try:
            stored = stored_counters(store, APP_USAGE, [r["window"] for r in sent])
            reports = store.footprint()["reports"]
        finally:
            store.close()
        assert reports == len(sent)
        assert stored == expected_counters(APP_USAGE, sent)
        metrics = requests.get(server.url + "/metrics", timeout=30).text
        late = float(next(line.split()[1] for line in metrics.splitlines()
                          if line.startswith("ldp_reports_duplicate_late_total ")))
        assert sum(t.accepted for t in traffic) - late == len(sent)

        assert set(rss_end) == set(rss_warm), "a worker was restarted during the run"
        for pid, size in rss_end.items():
            assert size - rss_warm[pid] <= RSS_GROWTH_LIMIT + cache_growth, (pid, rss_warm[pid], size, cache_growth)
    finally:
        server.stop()
