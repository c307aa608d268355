"""The Python client through a real relay to a real aggregator, all on 127.0.0.1: real processes,
real SQLite files (DESIGN.md, "Relay and amplification", "Client").

The client's sleep moves its clock instead of sleeping, so the minute it keeps between a key
fetch from the aggregator and a post to the relay passes at once; its clock starts hours before
the real now so that each report falls in a window of its own, none later than the aggregator's
now.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import requests
from client_support import BOOL_AND_OS, Clock
from conftest import ADMIN, sql
from relay_support import aggregator_for_relays, metric, relay_process, wait_for, wait_for_keys

from ldp_telemetry.client import TelemetryClient
from ldp_telemetry.shared import ohttp

pytestmark = pytest.mark.timeout(240)
RECORD = {"dark_mode": True, "os": "linux"}


@pytest.fixture
def aggregator(tmp_path):
    with aggregator_for_relays(tmp_path, BOOL_AND_OS) as server:
        yield server


@pytest.fixture
def relay(tmp_path, aggregator, request):
    """A relay that forwards a batch once it holds ``--min-batch`` requests (the test's indirect
    parameter, else 1), its keys and schema fetched."""
    process = relay_process(tmp_path, aggregator.url, "--min-batch", str(getattr(request, "param", 1)))
    process.start()
    wait_for_keys(process)
    try:
        yield process
    finally:
        process.kill()


def client(tmp_path: Path, aggregator: Any, relay: Any, clock: Clock, **options: Any) -> TelemetryClient:
    return TelemetryClient(aggregator.url, "app-usage", relay=relay.url, max_epsilon=4, max_epsilon_per_day=96,
                           data_dir=tmp_path / "device", clock=clock, sleep=lambda s: clock.advance(seconds=s),
                           backoff_cap=1.0, **options)


def hours_back(hours: int) -> Clock:
    return Clock(datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours))


def stored(aggregator: Any) -> list[tuple[str, str]]:
    """(id, window) of every report the aggregator stored, read from its file."""
    return sorted(sql(str(aggregator.db_path), 'SELECT id, "window" FROM reports'))


def arrivals(aggregator: Any) -> dict[str, tuple[int, int]]:
    """Per window, the reports the aggregator took through relays and directly (its crowds table)."""
    return {window: (relayed, direct) for window, relayed, direct
            in sql(str(aggregator.db_path), 'SELECT "window", relayed, direct FROM crowds')}


def direct_batches(aggregator: Any) -> float:
    """Batches the aggregator took at POST /api/v1/reports (around any relay), from its /metrics."""
    text = requests.get(aggregator.url + "/metrics", timeout=10).text
    counts = [float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith("ldp_batch_size_count")]
    assert counts, "the aggregator's /metrics shows no ldp_batch_size_count"
    return sum(counts)


@pytest.mark.parametrize("relay", [3], indirect=True, ids=["min-batch-3"])
def test_reports_arrive_exactly_once_through_the_relay_and_never_directly(tmp_path, aggregator, relay):
    clock = hours_back(4)
    with client(tmp_path, aggregator, relay, clock) as device:
        assert device.wait_for_schema(20)
        for _ in range(3):
            assert device.record(RECORD).queued
            clock.advance(hours=1)
        assert device.flush(60)
    wait_for(lambda: len(stored(aggregator)) == 3, 30, "three reports at the aggregator")
    windows = [w for _, w in stored(aggregator)]
    assert len(set(windows)) == 3
    assert {w: a for w, a in arrivals(aggregator).items() if w in windows} == {w: (1, 0) for w in windows}
    assert all(direct == 0 for _, direct in arrivals(aggregator).values())
    assert metric(relay, "ldp_relay_stored_requests") == 0  # forwarded, nothing left
    assert metric(relay, "ldp_relay_batches_sent_total") == 1  # the three in one batch (--min-batch 3)
    assert direct_batches(aggregator) == 0
    # The aggregator counts every report of these windows as relayed.
    refresh = requests.post(aggregator.url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30)
    assert refresh.status_code == 200, refresh.text
    rows = requests.get(aggregator.url + "/api/v1/estimates", params={"schema": "app-usage"}, timeout=10).json()
    relayed = {row["window"]: row["relayed"] for row in rows["estimates"]}
    assert relayed and set(relayed.values()) == {1}
    # A restart sends nothing again: the outbox is empty.
    with client(tmp_path, aggregator, relay, clock) as device:
        assert device.flush(10)
    assert len(stored(aggregator)) == 3


def test_a_retired_key_takes_the_ohttp_key_path_and_the_report_still_arrives(tmp_path, aggregator, relay):
    first = ohttp.choose_key_config(requests.get(relay.url + "/ohttp-keys", timeout=10).content).key_id
    clock = hours_back(4)
    with client(tmp_path, aggregator, relay, clock) as device:
        assert device.wait_for_schema(20)
        assert device.record(RECORD).queued
        assert device.flush(60)
        wait_for(lambda: len(stored(aggregator)) == 1, 30, "the first report at the aggregator")
        # The aggregator rotates, and the old key's grace ends (its row deleted, as the grace job
        # does); the relay, restarted, lists the new key alone. The client's copy is an hour old.
        rotated = subprocess.run([sys.executable, "-m", "ldp_telemetry.tools.cli", "relay-key", "rotate", "--db",
                                  str(aggregator.db_path)], capture_output=True, text=True, timeout=60)
        assert rotated.returncode == 0, rotated.stderr
        with sqlite3.connect(aggregator.db_path) as connection:
            connection.execute("DELETE FROM ohttp_keys WHERE key_id = ?", (first,))
        relay.kill()
        relay.start()
        wait_for_keys(relay)
        served = requests.get(relay.url + "/ohttp-keys", timeout=10).content
        assert served == requests.get(aggregator.url + "/api/v1/ohttp-keys", timeout=10).content
        assert ohttp.choose_key_config(served).key_id != first
        clock.advance(hours=1)
        assert device.record(RECORD).queued
        assert device.flush(60)
    wait_for(lambda: len(stored(aggregator)) == 2, 30, "the second report at the aggregator")
    assert metric(relay, "ldp_relay_post_refused_total", 'reason="key"') == 1  # the 400 the client resent after
    assert direct_batches(aggregator) == 0
    assert all(direct == 0 for _, direct in arrivals(aggregator).values())


def test_keys_that_differ_between_relay_and_aggregator_send_nothing(tmp_path, aggregator, relay):
    # Rotated after the relay cached the keys: for the next minutes (the relay refreshes every 300 s)
    # the relay lists the first key and the aggregator the new one and the first.
    rotated = subprocess.run([sys.executable, "-m", "ldp_telemetry.tools.cli", "relay-key", "rotate", "--db",
                              str(aggregator.db_path)], capture_output=True, text=True, timeout=60)
    assert rotated.returncode == 0, rotated.stderr
    assert (requests.get(relay.url + "/ohttp-keys", timeout=10).content
            != requests.get(aggregator.url + "/api/v1/ohttp-keys", timeout=10).content)
    clock = hours_back(4)
    with client(tmp_path, aggregator, relay, clock) as device:
        assert device.wait_for_schema(20)
        assert device.record(RECORD).queued
        assert not device.flush(3)
        kept = device._outbox.count
    assert kept == 1
    assert metric(relay, "ldp_relay_received_total") == 0 and metric(relay, "ldp_relay_stored_requests") == 0
    assert stored(aggregator) == [] and direct_batches(aggregator) == 0
