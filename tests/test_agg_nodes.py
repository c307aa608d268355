"""Several stateless aggregator nodes on one PostgreSQL (DESIGN.md, "Storage"): any node answers
any request, exactly-once holds across nodes, and the scheduled jobs run on one node at a time.

Three ``ldp-telemetry serve`` processes (two workers each, the scheduler on, refreshing every
half second) share one database. Senders stream batches to all of them; a request that fails is
sent again to the next node until one acknowledges it, as a client would, and every third
acknowledged batch is sent again to another node. Mid-stream the node leading the jobs is
SIGKILLed and restarted, twice. Then:

- the database holds every report sent, once; its counters are exactly those of the wire values;
- the acknowledgements add up: ``accepted`` over all answers is the number of reports, less at
  most the reports of batches with an attempt that failed (they may have been stored by the
  killed node, then are duplicates on the retry); a retried acknowledged batch is all duplicates;
- each node never killed counted in its ``/metrics`` exactly what it answered;
- after a refresh every node serves the same estimates, whose rollup ``n`` is every report;
- only the nodes seen holding the jobs' lock ever ran a scheduled refresh, and leadership moved
  when the leader was killed.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from conftest import read, write, ADMIN, APP_USAGE, LiveServer, expected_counters, postgres_location, stored_counters

from ldp_telemetry.aggregator import open_database
from ldp_telemetry.shared import randomize

pytestmark = pytest.mark.postgres_only

NODES, BATCHES, BATCH, SENDERS = 3, 150, 20, 6
JOBS_LOCK = 0x1D9_0001  # the store's advisory lock class for the jobs (aggregator/store/postgres.py)


def metric(node: LiveServer, name: str) -> float:
    """A counter's value (summed over the node's workers) from its ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(node.url + "/metrics", timeout=10).text
    return sum(s.value for family in text_string_to_metric_families(text) if family.name == name
               for s in family.samples if s.name == name + "_total" or s.name == name + "_count")


def leader(conn, schema: str) -> str | None:
    """The application name (the node) of the session holding the jobs' lock of ``schema``, if any."""
    row = conn.execute(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objsubid = 2 "
        "AND l.objid = (hashtext(%s)::bigint & 4294967295)::oid AND l.database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())", (JOBS_LOCK, schema)).fetchone()
    return row[0] if row else None


def test_three_nodes_count_exactly_once_through_kills_and_retries(backend, postgres_database, tmp_path):
    import psycopg

    location = postgres_location(postgres_database)
    schema = location.rpartition("application_name=")[2]
    nodes = [LiveServer(location.replace(f"application_name={schema}", f"application_name=node{i}"), workers=2, log_path=tmp_path / f"node{i}.log",
                        env={"LDP_SCHEDULER": "true", "LDP_ESTIMATE_INTERVAL": "0.5"}) for i in range(NODES)]
    watcher = psycopg.connect(location, autocommit=True)
    stop = threading.Event()
    try:
        for node in nodes:
            node.start()
        published = requests.post(nodes[0].url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN, timeout=10)
        assert published.status_code == 201
        rng = random.Random(13)
        batches = [[randomize(APP_USAGE, {"dark_mode": rng.random() < 0.3, "os": rng.choice(["linux", "macos"])})
                    for _ in range(BATCH)] for _ in range(BATCHES)]

        lock = threading.Lock()
        answers: list[tuple[int, int, int, int]] = []  # (batch, node, accepted, duplicates) per 202
        in_doubt: set[int] = set()  # batches with an attempt that failed: maybe stored, not acknowledged
        acked = threading.Semaphore(0)

        def post(b: int, first: int) -> tuple[int, dict]:
            """Send batch ``b`` from node ``first`` on until a node acknowledges it."""
            for attempt in range(200):
                i = (first + attempt) % NODES
                try:
                    response = requests.post(nodes[i].url + "/api/v1/reports", json={"reports": batches[b]},
                                             timeout=30)
                except requests.RequestException:
                    response = None
                if response is not None and response.status_code == 202:
                    body = response.json()
                    with lock:
                        answers.append((b, i, body["accepted"], body["duplicates"]))
                    return i, body
                assert response is None or response.status_code >= 500, response.text  # never a 4xx
                with lock:
                    in_doubt.add(b)
                time.sleep(0.05)
            raise AssertionError(f"batch {b} was never acknowledged")

        def send(b: int) -> None:
            i, _ = post(b, b % NODES)
            acked.release()
            if b % 3 == 0:  # the client did not see the answer: it sends the batch again, elsewhere
                _, again = post(b, i + 1)
                assert again == {"accepted": 0, "duplicates": BATCH}

        leaders: set[str] = set()

        def watch() -> None:
            while not stop.is_set():
                holder = leader(watcher, schema)
                if holder:
                    leaders.add(holder)
                time.sleep(0.02)

        killed: list[str] = []

        def kill_twice() -> None:
            victim = None
            for threshold in (BATCHES // 3, 2 * BATCHES // 3):
                for _ in range(threshold - (0 if victim is None else BATCHES // 3)):
                    acked.acquire()
                if victim is None:  # the leader, the first time; the same node again the second
                    deadline = time.monotonic() + 10
                    while (name := leader(watcher, schema)) is None and time.monotonic() < deadline:
                        time.sleep(0.05)
                    victim = nodes[int(name[-1])] if name else nodes[0]
                killed.append(f"node{nodes.index(victim)}")
                victim.kill()
                victim.start()

        watching = threading.Thread(target=watch, daemon=True)
        watching.start()
        killer = threading.Thread(target=kill_twice, daemon=True)
        killer.start()
        with ThreadPoolExecutor(SENDERS) as pool:
            for future in [pool.submit(send, b) for b in range(BATCHES)]:
                future.result()
        killer.join(60)
        assert not killer.is_alive() and len(killed) == 2

        # The database: every report once, the counters exactly those of the wire values.
        sent = [r for batch in batches for r in batch]
        database = open_database(location)
        try:
            windows = sorted({r["window"] for r in sent})
            assert stored_counters(database, APP_USAGE, windows) == expected_counters(APP_USAGE, sent)
            assert read(database.store, "footprint")["reports"] == len(sent)
        finally:
            database.store.close()

        # The answers: accepted adds up to every report, less at most what was in doubt.
        accepted = sum(a for _, _, a, _ in answers)
        assert len(sent) - BATCH * len(in_doubt) <= accepted <= len(sent)
        for b in range(BATCHES):
            mine = [a for batch, _, a, _ in answers if batch == b]
            assert sum(mine) <= BATCH and (sum(mine) == BATCH or b in in_doubt)

        # Each node never killed counted what it answered.
        for i, node in enumerate(nodes):
            if f"node{i}" not in killed:
                assert metric(node, "ldp_reports_accepted") == sum(a for _, n, a, _ in answers if n == i)
                assert metric(node, "ldp_reports_duplicate") == sum(d for _, n, _, d in answers if n == i)

        # The jobs: only leaders ran a scheduled refresh, and leadership moved when the leader was killed.
        stop.set()
        watching.join(5)
        assert len(leaders) >= 2, leaders
        for i, node in enumerate(nodes):
            if metric(node, "ldp_refresh_duration_seconds") > 0:
                assert f"node{i}" in leaders

        # The same estimates from every node, the rollup over every report.
        assert requests.post(nodes[1].url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).status_code == 200
        shown = [requests.get(node.url + "/api/v1/estimates?schema=app-usage", timeout=10).json() for node in nodes]
        assert shown[0] == shown[1] == shown[2]
        assert {e["n"] for e in shown[0]["estimates"] if e["window"] == "all"} == {len(sent)}

    finally:
        stop.set()
        stop_all = [threading.Thread(target=node.stop) for node in nodes]
        for t in stop_all:
            t.start()
        for t in stop_all:
            t.join()
        watcher.close()


STRINGS = {"name": "homes", "version": 1, "epsilon": 4.0, "window": "day",
           "attributes": [{"name": "home", "type": "string", "max_length": 8, "discover": True,
                           "alphabet": "abcdefghijklmnopqrstuvwxyz.", "candidates": ["abc.org"]}]}
HOMES = {"abc.org": 0.3, "xy.net": 0.2, "zz.io": 0.15, **{f"r{c}{d}.de": 0.35 / 100 for c in "abcdefghij"
                                                          for d in "klmnopqrst"}}


def test_two_nodes_add_discover_and_back_fill_strings_while_ingesting_and_count_each_support_once(
        backend, postgres_database, tmp_path):
    """Two nodes ingest a string attribute's reports from four senders while one node adds
    candidates and the other runs discovery mid-stream; their back-fills race ingest on both nodes.
    Afterwards each window's supports of every candidate equal a decode of the wire values written
    out here (level-0 reports only), and both nodes serve the same estimates."""
    import hashlib

    location = postgres_location(postgres_database)
    schema = location.rpartition("application_name=")[2]
    nodes = [LiveServer(location.replace(f"application_name={schema}", f"application_name=node{i}"), workers=2,
                        log_path=tmp_path / f"node{i}.log", env={"LDP_SCHEDULER": "true", "LDP_ESTIMATE_INTERVAL": "0.5"})
             for i in range(2)]
    try:
        for node in nodes:
            node.start()
        assert requests.post(nodes[0].url + "/api/v1/schemas", json=STRINGS, headers=ADMIN, timeout=10).status_code == 201
        derived = requests.get(nodes[1].url + "/api/v1/schemas/homes/1", timeout=10).json()
        rng = random.Random(29)
        values, weights = list(HOMES), list(HOMES.values())
        batches = [[randomize(derived, {"home": rng.choices(values, weights)[0]}) for _ in range(100)]
                   for _ in range(120)]
        sent = threading.Semaphore(0)

        def send(b: int) -> None:
            answer = requests.post(nodes[b % 2].url + "/api/v1/reports", json={"reports": batches[b]}, timeout=60)
            assert answer.status_code == 202 and answer.json() == {"accepted": 100, "duplicates": 0}, answer.text
            sent.release()

        def mid_stream() -> None:
            for _ in range(40):
                sent.acquire()
            added = requests.post(nodes[0].url + "/api/v1/schemas/homes/1/candidates", headers=ADMIN, timeout=60,
                                  json={"attribute": "home", "candidates": ["xy.net", "never.de"]})
            assert added.status_code == 202 and added.json() == {"added": 2}
            for _ in range(30):
                sent.acquire()
            assert requests.post(nodes[1].url + "/api/v1/schemas/homes/1/discover", headers=ADMIN,
                                 timeout=120).status_code == 200

        with ThreadPoolExecutor(4) as pool:
            middle = pool.submit(mid_stream)
            for future in [pool.submit(send, b) for b in range(len(batches))]:
                future.result()
            middle.result()

        # Every candidate to estimate gets its rollup once its back-fill is done (the leader's job).
        deadline = time.monotonic() + 120
        while True:
            listed = requests.get(nodes[0].url + "/api/v1/schemas/homes/1/candidates", timeout=10).json()["candidates"]
            requests.post(nodes[0].url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=60)
            rows = requests.get(nodes[0].url + "/api/v1/estimates?schema=homes", timeout=10).json()["estimates"]
            if {c["value"] for c in listed if c["estimated"]} <= {r["value"] for r in rows if r["window"] == "all"}:
                break
            assert time.monotonic() < deadline, "the back-fill did not finish in 120 s"
            time.sleep(0.5)
        candidates = [c["value"] for c in listed if c["estimated"]]
        assert {"abc.org", "xy.net", "never.de"} <= set(candidates)
        assert "zz.io" in candidates  # discovered (share 15%, far above what 6,000 prefix reports can find)

        big_p, g = 2**31 - 1, derived["attributes"][0]["g"]

        def x(s: str) -> int:
            return int.from_bytes(hashlib.sha256(b"ldp-telemetry/string/v1\x00" + s.encode()).digest()[:8], "big") % big_p

        expected: dict[tuple[str, str], int] = {}
        level_0: dict[str, int] = {}
        for report in (r for batch in batches for r in batch):
            wire = report["values"]["home"]
            if wire["level"] != 0:
                continue
            level_0[report["window"]] = level_0.get(report["window"], 0) + 1
            for c in candidates:
                supported = ((wire["a"] * x(c) + wire["b"]) % big_p) % g == wire["y"]
                expected[(report["window"], c)] = expected.get((report["window"], c), 0) + supported
        database = open_database(location)
        try:
            database.writer.settle()
            counted = read(database.store, "window_counters", "homes", 1, sorted(level_0))
        finally:
            database.store.close()
        assert {w: c.totals["home"] for w, c in counted.items()} == level_0
        assert {(w, c): counted[w].amounts.get("home", {}).get(c, 0) for w, c in expected} == expected

        shown = [requests.get(node.url + "/api/v1/estimates?schema=homes", timeout=10).json() for node in nodes]
        assert shown[0] == shown[1]
    finally:
        for node in nodes:
            node.stop()
