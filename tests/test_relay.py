"""``ldp-telemetry relay`` as deployed (DESIGN.md, "Relay"): real relay processes on real SQLite
files, real encapsulated requests, killed with SIGKILL where a crash is the point.

Where the promise is about the bytes the relay sends (nothing before --min-batch, the same bytes
after a restart, stop on 401), the batches go to :class:`relay_support.Upstream`, which keeps them;
the schemas come from a real aggregator.
"""

from __future__ import annotations

import collections
import itertools
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest
import requests
from conftest import ADMIN, APP_USAGE, LiveServer
from relay_support import (Upstream, encapsulated, key_config, metric, post, relay_process, rows, split, wait_for,
                           wait_for_keys)
from scipy.stats import chisquare

from ldp_telemetry.relay.forwarder import HOUR, hour_of
from ldp_telemetry.relay.store import RelayStore, Usage
from ldp_telemetry.shared import ohttp

pytestmark = pytest.mark.timeout(180)
CORS = {"access-control-allow-origin": "*", "access-control-expose-headers": "Retry-After"}


@pytest.fixture
def upstream():
    server = Upstream()
    yield server
    server.close()


@pytest.fixture
def relays(tmp_path, upstream):
    """Start relays (``start(*flags)``), each with its keys fetched; all killed at the end."""
    started = []

    def start(*flags, db=None, aggregator=None, keys=True):
        relay = relay_process(tmp_path, aggregator or upstream.url, *flags, db=db)
        started.append(relay)
        relay.start()
        if keys:
            wait_for_keys(relay)
        return relay

    yield start
    for relay in started:
        relay.kill()


def has_cors(response):
    return all(response.headers.get(name) == value for name, value in CORS.items())


@pytest.mark.parametrize("args, env, sentence", [
    ([], {}, "--aggregator (or LDP_RELAY_AGGREGATOR) is required"),
    (["--aggregator", "ftp://example.org"], {}, "must be the aggregator's base URL"),
    (["--aggregator", "http://127.0.0.1:9"], {"LDP_RELAY_TOKEN": "short"}, "at least 16 printable characters"),
    (["--aggregator", "http://127.0.0.1:9", "--min-batch", "0"], {},
     "--min-batch (LDP_RELAY_MIN_BATCH) must be a whole number of at least 1, got '0'"),
    (["--aggregator", "http://127.0.0.1:9"], {"LDP_RELAY_MAX_BATCH": "200000"}, "from 1 to 100000, got '200000'"),
    (["--aggregator", "http://127.0.0.1:9", "--min-batch", "10", "--max-batch", "5"], {},
     "--min-batch (10) must not exceed --max-batch (5)"),
    (["--aggregator", "http://127.0.0.1:9", "--max-wait", "100", "--max-age", "3700"], {},
     "--max-age (3700 s) must exceed --max-wait (100 s) plus an hour (3700 s)"),
    (["--aggregator", "http://127.0.0.1:9", "--max-batch-bytes", "1000"], {}, "--max-batch-bytes must be at least"),
    (["--aggregator", "http://127.0.0.1:9", "--port", "x"], {}, "--port (LDP_RELAY_PORT) must be a whole number"),
    (["--aggregator", "http://127.0.0.1:9", "--db", "/nonexistent/folder/relay.db"], {}, "cannot be used"),
])
def test_bad_settings_stop_start_up_with_a_sentence(args, env, sentence, tmp_path):
    environ = {"PATH": "/usr/bin:/bin", "LDP_RELAY_TOKEN": "relay-token-0123456789", **env}
    done = subprocess.run([sys.executable, "-m", "ldp_telemetry.tools.cli", "relay", *args], env=environ,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert sentence in done.stderr
    assert "Traceback" not in done.stderr


def test_post_relay_checks_size_media_type_and_key_with_cors_on_every_answer(relays):
    relay = relays("--min-batch", "1000")
    good = encapsulated()
    for size in (54, 55, 55 + 1023, 55 + 1025):
        answer = post(relay, good[:size] if size <= len(good) else good + bytes(size - len(good)))
        assert answer.status_code == 400, size
        assert "multiple of 1024" in answer.json()["error"] and has_cors(answer)
    for size in (55 + 64 * 1024, 70_000):
        answer = post(relay, bytes(size))
        assert answer.status_code == 413 and has_cors(answer)
    chunked = requests.post(relay.url + "/relay", data=iter([bytes(40_000), bytes(40_000)]),
                            headers={"Content-Type": ohttp.REQUEST_MEDIA_TYPE}, timeout=10)
    assert chunked.status_code == 413 and has_cors(chunked)

    answer = post(relay, good, "application/json")
    assert answer.status_code == 415 and has_cors(answer)

    other_key = encapsulated(config=key_config(key_id=9))
    other_suite = good[:3] + b"\x00\x02" + good[5:]  # a KDF we do not use
    for request in (other_key, other_suite):
        answer = post(relay, request)
        assert answer.status_code == 400 and has_cors(answer)
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["type"] == ohttp.KEY_PROBLEM_TYPE

    accepted = [post(relay, good), post(relay, encapsulated(units=63), "text/plain"),
                post(relay, encapsulated(), "text/plain;charset=UTF-8"),
                requests.post(relay.url + "/relay", data=iter([good[:100], good[100:]]),
                              headers={"Content-Type": ohttp.REQUEST_MEDIA_TYPE}, timeout=10)]
    assert [a.status_code for a in accepted] == [202] * 4
    assert all(a.content == b"" and has_cors(a) for a in accepted)
    assert metric(relay, "ldp_relay_stored_requests") == 4
    assert metric(relay, "ldp_relay_post_refused_total", 'reason="key"') == 2
    assert metric(relay, "ldp_relay_post_refused_total", 'reason="size"') == 7


def test_the_preflight_and_other_methods(relays):
    relay = relays()
    for path, method in (("/relay", "POST"), ("/ohttp-keys", "GET"), ("/api/v1/schemas/app-usage", "GET"),
                         ("/api/v1/schemas/app-usage/1", "GET")):
        answer = requests.options(relay.url + path, headers={"Origin": "https://app.example.org",
                                                             "Access-Control-Request-Method": method}, timeout=5)
        assert answer.status_code == 204 and has_cors(answer)
        assert answer.headers["access-control-allow-methods"] == f"{method}, OPTIONS"
        assert answer.headers["access-control-allow-headers"] == "Content-Type"
        assert int(answer.headers["access-control-max-age"]) <= 7200
    answer = requests.get(relay.url + "/relay", timeout=5)
    assert answer.status_code == 405 and has_cors(answer)
    for path in ("/metrics", "/healthz"):  # closed to other origins
        answer = requests.get(relay.url + path, timeout=5)
        assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers
    assert requests.get(relay.url + "/nothing", timeout=5).status_code == 404


def test_keys_are_the_aggregators_bytes_and_schemas_come_from_the_real_aggregator(tmp_path, upstream, relays):
    relay = relays()
    keys = requests.get(relay.url + "/ohttp-keys", timeout=5)
    assert keys.status_code == 200 and keys.content == upstream.keys and has_cors(keys)
    assert keys.headers["content-type"] == ohttp.KEYS_MEDIA_TYPE
    assert keys.headers["cache-control"] == "max-age=3600"

    aggregator = LiveServer(tmp_path / "aggregator.db", log_path=tmp_path / "aggregator.log")
    aggregator.start()
    try:
        assert requests.post(aggregator.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN,
                             timeout=10).status_code == 201
        second = relays(aggregator=aggregator.url, db=tmp_path / "second.db", keys=False)
        name = APP_USAGE["name"]
        for path in (f"/api/v1/schemas/{name}", f"/api/v1/schemas/{name}/1"):
            theirs = requests.get(aggregator.url + path, timeout=5)
            ours = wait_for(lambda: (r := requests.get(second.url + path, timeout=5)).status_code == 200 and r,
                            what=f"the relay's {path}")
            assert ours.content == theirs.content and ours.headers["content-type"] == "application/json"
            assert has_cors(ours)
        for path in (f"/api/v1/schemas/{name}/2", "/api/v1/schemas/unknown", f"/api/v1/schemas/{name}/x"):
            answer = requests.get(second.url + path, timeout=5)
            assert answer.status_code == 404 and has_cors(answer)
    finally:
        aggregator.stop()


def test_nothing_is_forwarded_before_min_batch_then_exactly_one_batch(relays, upstream):
    relay = relays("--min-batch", "5", "--max-batch", "5")
    sent = [encapsulated(b'{"n":%d}' % i) for i in range(6)]
    for request in sent[:4]:
        assert post(relay, request).status_code == 202
    time.sleep(3)
    assert upstream.batches == []
    assert post(relay, sent[4]).status_code == 202
    assert post(relay, sent[5]).status_code == 202
    wait_for(lambda: metric(relay, "ldp_relay_batches_sent_total") == 1, what="the batch")
    [batch] = upstream.batches
    members = split(batch)
    assert len(members) == len(set(members)) == 5 and set(members) < set(sent)
    assert upstream.authorizations == ["Bearer relay-token-0123456789"]
    assert metric(relay, "ldp_relay_stored_requests") == 1  # the sixth waits for four more
    time.sleep(2)
    assert len(upstream.batches) == 1


def test_kill_9_between_the_202_and_the_forward_loses_nothing(tmp_path, relays, upstream):
    db = tmp_path / "relay.db"
    relay = relays("--min-batch", "4", db=db)
    sent = [encapsulated(b'{"n":%d}' % i) for i in range(4)]
    for request in sent[:3]:
        assert post(relay, request).status_code == 202
    relay.kill()
    assert len(rows(db, "SELECT id FROM requests")) == 3  # on disk the moment it answered
    relay = relays("--min-batch", "4", db=db)
    assert post(relay, sent[3]).status_code == 202
    wait_for(lambda: upstream.batches, what="the batch")
    assert sorted(split(upstream.batches[0])) == sorted(sent)
    wait_for(lambda: metric(relay, "ldp_relay_stored_requests") == 0, what="the batch's deletion")


def test_a_formed_batch_is_resent_as_the_same_bytes_also_after_a_restart(tmp_path, relays, upstream):
    db = tmp_path / "relay.db"
    upstream.statuses = [(503, {"Retry-After": "1"}), (500, {}), (429, {"Retry-After": "60"})]
    relay = relays("--min-batch", "3", db=db)
    first = [encapsulated(b'{"n":%d}' % i) for i in range(3)]
    for request in first:
        assert post(relay, request).status_code == 202
    wait_for(lambda: len(upstream.batches) == 3, what="three tries")
    assert upstream.batches[0] == upstream.batches[1] == upstream.batches[2]
    assert sorted(split(upstream.batches[0])) == sorted(first)
    # Arriving while the batch waits out its Retry-After, these go to a later batch.
    later = [encapsulated(b'{"later":%d}' % i) for i in range(2)]
    for request in later:
        assert post(relay, request).status_code == 202
    assert metric(relay, "ldp_relay_forward_failures_total", 'status="429"') == 1
    relay.kill()
    relay = relays("--min-batch", "3", db=db)
    wait_for(lambda: len(upstream.batches) == 4, what="the batch sent again")
    assert upstream.batches[3] == upstream.batches[0]
    wait_for(lambda: metric(relay, "ldp_relay_stored_requests") == 2, what="the batch's deletion")
    time.sleep(2)
    assert len(upstream.batches) == 4  # the two later ones wait for a third
    assert sorted(r[0] for r in rows(db, "SELECT body FROM requests")) == sorted(later)


@pytest.mark.parametrize("status", [401, 403, 413, 415])
def test_an_operators_mistake_stops_sending_and_keeps_everything(status, tmp_path, relays, upstream):
    db = tmp_path / "relay.db"
    upstream.statuses = [(status, {})]
    relay = relays("--min-batch", "2", db=db)
    sent = [encapsulated(b'{"n":%d}' % i) for i in range(3)]
    for request in sent[:2]:
        assert post(relay, request).status_code == 202
    wait_for(lambda: metric(relay, "ldp_relay_stopped") == 1, what="the stop")
    assert metric(relay, "ldp_relay_stopped_status") == status
    assert requests.get(relay.url + "/healthz", timeout=5).json()["forwarding"] == f"stopped (HTTP {status})"
    assert post(relay, sent[2]).status_code == 202  # it still takes requests
    time.sleep(3)
    assert len(upstream.batches) == 1
    assert metric(relay, "ldp_relay_stored_requests") == 3
    assert "Sending has STOPPED" in (tmp_path / "relay.log").read_text()
    relay.stop()  # the operator mends it and restarts: the same batch goes, and nothing was lost
    relay = relays("--min-batch", "2", db=db)
    wait_for(lambda: len(upstream.batches) == 2, what="the batch after the restart")
    assert upstream.batches[1] == upstream.batches[0]
    wait_for(lambda: metric(relay, "ldp_relay_stored_requests") == 1, what="the batch's deletion")


def test_max_wait_sends_a_small_batch_once_the_oldest_hour_is_old_enough(tmp_path, relays, upstream):
    db = tmp_path / "relay.db"
    relay = relays("--min-batch", "100", "--max-wait", "3600", db=db)
    sent = [encapsulated(b'{"n":%d}' % i) for i in range(2)]
    for request in sent:
        assert post(relay, request).status_code == 202
    time.sleep(2)
    assert upstream.batches == []  # their hour has not even ended
    relay.stop()
    wal = tmp_path / "relay.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # a stop folds the log of recent writes in
    with_hours = rows(db, "SELECT hour FROM requests")
    assert with_hours == [(hour_of(time.time()),)] * 2 or with_hours == [(hour_of(time.time()) - 1,)] * 2
    # Two hours later, as far as the relay can tell: their hour ended more than --max-wait ago.
    rows(db, "UPDATE requests SET hour = hour - 2")
    relays("--min-batch", "100", "--max-wait", "3600", db=db)
    wait_for(lambda: upstream.batches, what="the batch")
    assert sorted(split(upstream.batches[0])) == sorted(sent)


def test_max_age_discards_and_counts(tmp_path, relays, upstream):
    db = tmp_path / "relay.db"
    relay = relays("--min-batch", "100", db=db)
    sent = [encapsulated(b'{"n":%d}' % i) for i in range(3)]
    for request in sent:
        assert post(relay, request).status_code == 202
    relay.stop()
    stale = sorted(rows(db, "SELECT id FROM requests"))[:2]
    rows(db, f"UPDATE requests SET hour = hour - {8 * 24} WHERE id IN (?, ?)", *(i for (i,) in stale))
    relay = relays("--min-batch", "100", db=db)
    wait_for(lambda: metric(relay, "ldp_relay_discarded_total") == 2, what="the discard")
    assert metric(relay, "ldp_relay_stored_requests") == 1
    assert len(rows(db, "SELECT id FROM requests")) == 1
    assert upstream.batches == []


@pytest.mark.parametrize("flag, value, fit", [("--max-stored", "2", 2), ("--max-stored-bytes", "130000", 2)])
def test_a_full_store_answers_503_with_retry_after(flag, value, fit, relays):
    relay = relays("--min-batch", "100", flag, value)
    for _ in range(fit):
        assert post(relay, encapsulated(units=63)).status_code == 202
    full = post(relay, encapsulated(units=63))
    assert full.status_code == 503 and int(full.headers["retry-after"]) > 0 and has_cors(full)
    assert metric(relay, "ldp_relay_stored_requests") == fit


def test_the_file_keeps_the_body_and_the_hour_and_no_order(tmp_path, relays, upstream):
    db = tmp_path / "relay.db"
    relay = relays("--min-batch", "30", db=db)
    sent = [encapsulated(b'{"n":%d}' % i) for i in range(29)]
    for request in sent:
        assert post(relay, request, **{"User-Agent": "SecretAgent/7.1", "X-Forwarded-For": "203.0.113.77"}).status_code == 202
    assert [c[1] for c in rows(db, "PRAGMA table_info(requests)")] == ["id", "hour", "position", "body"]
    stored = rows(db, "SELECT id, hour, position, body FROM requests ORDER BY id")
    assert {hour for _, hour, _, _ in stored} <= {hour_of(time.time()), hour_of(time.time() - HOUR)}
    assert all(position is None for _, _, position, _ in stored)
    assert [body for *_, body in stored] != sent  # ids are drawn at random: 1 chance in 29! to keep the order
    assert sorted(body for *_, body in stored) == sorted(sent)
    everything = db.read_bytes() + (tmp_path / "relay.db-wal").read_bytes()
    assert b"SecretAgent" not in everything and b"203.0.113.77" not in everything
    assert post(relay, encapsulated(b'{"n":29}')).status_code == 202
    wait_for(lambda: metric(relay, "ldp_relay_batches_sent_total") == 1, what="the batch")
    assert rows(db, "SELECT count(*) FROM requests") == [(0,)]
    assert (tmp_path / "relay.db-wal").stat().st_size == 0  # the log of recent writes, truncated


def test_a_kill_9_of_the_main_process_takes_the_worker_down_too(tmp_path, relays):
    # Else the worker would go on answering on the port beside a restarted relay (SO_REUSEPORT),
    # holding the forwarder's lock with its old settings.
    relay = relays()
    os.kill(relay.process.pid, signal.SIGKILL)  # the main process alone, as the OOM killer would
    relay.process.wait()

    def gone():
        try:
            requests.get(relay.url + "/healthz", timeout=1)
        except requests.ConnectionError:
            return True
        return False

    wait_for(gone, timeout=10, what="the worker to die with its master")


# --- the batch's order, on the store itself ---------------------------------------------------


def test_a_batch_takes_the_oldest_hours_first_within_its_limits(tmp_path):
    store = RelayStore(str(tmp_path / "relay.db"), Usage())
    by_hour = {hour: [secrets.token_bytes(1079) for _ in range(3)] for hour in (100, 101, 102)}
    for hour in (102, 100, 101):
        store.add(by_hour[hour], hour)
    assert store.form_batch(4, 10**9, lambda ids: None) == 4
    members = store.formed()
    assert set(by_hour[100]) < set(members) and len(set(members) & set(by_hour[101])) == 1
    assert store.form_batch(4, 10**9, lambda ids: None) == 0  # one batch at a time
    assert store.delete_formed() == 4
    assert store.form_batch(100, 3 * (1079 + 4), lambda ids: None) == 3  # the byte limit, with each length
    assert set(store.formed()) < set(by_hour[101] + by_hour[102])
    assert store.usage.requests == 5


def test_a_stale_member_goes_alone_and_the_rest_of_its_batch_waits_for_the_next(tmp_path):
    # The reviewer's finding: --max-age discarded a whole formed batch, younger members with it.
    store = RelayStore(str(tmp_path / "relay.db"), Usage())
    old, young = [secrets.token_bytes(1079) for _ in range(2)], [secrets.token_bytes(1079) for _ in range(3)]
    store.add(old, 100)
    store.add(young, 150)
    assert store.form_batch(10, 10**9, lambda ids: None) == 5
    assert store.discard_before(101) == 2
    assert store.formed() == []  # no longer formed: it cannot be sent as it was
    assert store.usage.requests == 3
    assert store.form_batch(10, 10**9, lambda ids: None) == 3 and sorted(store.formed()) == sorted(young)
    assert store.discard_before(101) == 0 and len(store.formed()) == 3  # a fresh batch is left as formed


def test_the_batch_order_is_uniform(tmp_path):
    store = RelayStore(str(tmp_path / "relay.db"), Usage())
    store.add([b"a", b"b", b"c"], 1)
    shuffle = secrets.SystemRandom().shuffle
    seen = collections.Counter()
    draws = 1800
    for _ in range(draws):
        store.form_batch(3, 10**6, shuffle)
        seen[tuple(store.formed())] += 1
        store.db.execute("UPDATE requests SET position = NULL")
    orders = list(itertools.permutations([b"a", b"b", b"c"]))
    assert set(seen) == set(orders)
    # Each of the 6 orders is expected 300 times; a uniform shuffle fails this one time in 10^6.
    assert chisquare([seen[o] for o in orders]).pvalue > 1e-6


def test_the_relay_and_the_aggregator_refuse_each_others_database(tmp_path):
    # The tester's finding: each started on the other's file and added its tables to it, so the
    # relay's requests and hours could end up in a file the aggregator's operator keeps.
    aggregator_db, relay_db = tmp_path / "aggregator.db", tmp_path / "relay.db"
    cli = [sys.executable, "-m", "ldp_telemetry.tools.cli"]
    assert subprocess.run([*cli, "schema", "list", "--db", str(aggregator_db)], capture_output=True,
                          timeout=60).returncode == 0  # an aggregator's database, migrated
    RelayStore(str(relay_db), Usage()).close()
    relay = subprocess.run([*cli, "relay", "--aggregator", "http://127.0.0.1:9", "--token", "t" * 16, "--port", "0",
                            "--db", str(aggregator_db)], capture_output=True, text=True, timeout=60)
    assert relay.returncode == 1 and "is an aggregator's database" in relay.stderr
    aggregator = subprocess.run([*cli, "serve", "--port", "0", "--db", str(relay_db)], capture_output=True, text=True,
                                timeout=60)
    assert aggregator.returncode == 1 and "is a relay's database" in aggregator.stderr
    assert {name for (name,) in rows(relay_db, "SELECT name FROM sqlite_master WHERE type = 'table'")} == {
        "requests", "cache"}  # nothing of the aggregator's added
