"""A relay in front of a real aggregator (``ldp-telemetry serve`` with its gateway): real reports,
encapsulated to the key the relay and the aggregator both serve, through real processes.

Nothing reaches the aggregator before ``--min-batch``; then exactly the batch; a kill -9 of the
relay between its 202 and its forward loses nothing and counts nothing twice; a wrong token stops
the relay, which keeps everything and delivers it once mended.
"""

from __future__ import annotations

import time

import pytest
import requests
from conftest import ADMIN, APP_USAGE
from relay_support import aggregator_for_relays, metric, post, relay_process, wait_for, wait_for_keys

from ldp_telemetry.shared import ohttp, parse_schema, randomize

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def aggregator(tmp_path):
    with aggregator_for_relays(tmp_path, APP_USAGE) as server:
        yield server


@pytest.fixture
def relays(tmp_path, aggregator):
    started = []

    def start(*flags, env=None):
        relay = relay_process(tmp_path, aggregator.url, *flags, env=env)
        started.append(relay)
        relay.start()
        wait_for_keys(relay)
        return relay

    yield start
    for relay in started:
        relay.kill()


def requests_for(relay, count):
    """``count`` reports of app-usage, each encapsulated alone to the key the relay serves."""
    keys = requests.get(relay.url + "/ohttp-keys", timeout=5).content
    config = ohttp.choose_key_config(keys)
    schema = parse_schema(APP_USAGE)
    return [ohttp.encapsulate_report(config, schema, randomize(schema, {"dark_mode": i % 2 == 0, "os": "linux"}))
            for i in range(count)]


def accepted(aggregator, name="ldp_reports_accepted_total"):
    return metric(aggregator, name)


def test_the_relay_serves_the_aggregators_keys_byte_for_byte(aggregator, relays):
    relay = relays()
    theirs = requests.get(aggregator.url + "/api/v1/ohttp-keys", timeout=5)
    ours = requests.get(relay.url + "/ohttp-keys", timeout=5)
    assert ours.content == theirs.content
    assert ours.headers["content-type"] == theirs.headers["content-type"] == ohttp.KEYS_MEDIA_TYPE
    # The schemas are fetched just after the keys.
    schema = wait_for(lambda: (r := requests.get(relay.url + "/api/v1/schemas/app-usage", timeout=5)).ok and r,
                      what="the relay's copy of the schema")
    assert schema.content == requests.get(aggregator.url + "/api/v1/schemas/app-usage", timeout=5).content


def test_nothing_arrives_before_min_batch_and_a_kill_9_loses_and_doubles_nothing(aggregator, relays):
    relay = relays("--min-batch", "5", "--max-batch", "5")
    sent = requests_for(relay, 10)
    for request in sent[:4]:
        assert post(relay, request).status_code == 202
    time.sleep(3)
    assert accepted(aggregator) == 0
    assert post(relay, sent[4]).status_code == 202
    wait_for(lambda: accepted(aggregator) == 5, what="the first batch at the aggregator")
    for request in sent[5:8]:
        assert post(relay, request).status_code == 202
    relay.kill()  # between the 202 and the forward
    relay = relays("--min-batch", "5", "--max-batch", "5")
    for request in sent[8:]:
        assert post(relay, request).status_code == 202
    wait_for(lambda: accepted(aggregator) == 10, what="the second batch at the aggregator")
    wait_for(lambda: metric(relay, "ldp_relay_stored_requests") == 0, what="the relay's deletion")
    time.sleep(2)
    assert accepted(aggregator) == 10
    assert accepted(aggregator, "ldp_reports_duplicate_total") == 0


def test_a_wrong_token_stops_the_relay_which_delivers_everything_once_mended(aggregator, relays):
    relay = relays("--min-batch", "3", env={"LDP_RELAY_TOKEN": "not-the-token-0123456789"})
    sent = requests_for(relay, 3)
    for request in sent:
        assert post(relay, request).status_code == 202
    wait_for(lambda: metric(relay, "ldp_relay_stopped") == 1, what="the stop")
    assert metric(relay, "ldp_relay_stopped_status") == 403
    assert metric(relay, "ldp_relay_stored_requests") == 3
    relay.stop()
    relay = relays("--min-batch", "3")
    wait_for(lambda: accepted(aggregator) == 3, what="the batch at the aggregator")
    wait_for(lambda: metric(relay, "ldp_relay_stored_requests") == 0, what="the relay's deletion")


def test_a_request_the_aggregator_cannot_open_is_refused_alone(aggregator, relays):
    # Its header names the aggregator's key, so the relay takes it; only the aggregator can tell.
    relay = relays("--min-batch", "4")
    good = requests_for(relay, 3)
    forged = good[0][:-1] + bytes([good[0][-1] ^ 1])  # the AEAD tag no longer matches
    for request in [*good, forged]:
        assert post(relay, request).status_code == 202
    wait_for(lambda: metric(aggregator, "ldp_relay_refused_total", 'reason="decrypt"') == 1, what="the refusal")
    assert accepted(aggregator) == 3
    wait_for(lambda: metric(relay, "ldp_relay_stored_requests") == 0, what="the relay's deletion")


def crowds(aggregator):
    """The window's and the rollup's crowd, after a refresh."""
    assert requests.post(aggregator.url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).ok
    rows = requests.get(aggregator.url + "/api/v1/estimates", params={"schema": "app-usage"}, timeout=10).json()
    return {(row["window"], row["crowd"], row["relayed"]) for row in rows["estimates"]}


def test_a_batch_resent_after_a_lost_acknowledgement_adds_only_duplicates(tmp_path, aggregator, relays):
    # The relay's file as it was before the 2xx (the batch formed, recorded, unacknowledged), taken
    # while a wrong token holds the batch; a relay started on that copy later sends it again, as a
    # relay killed between the aggregator's commit and its own deletion would.
    relay = relays("--min-batch", "3", env={"LDP_RELAY_TOKEN": "not-the-token-0123456789"})
    for request in requests_for(relay, 3):
        assert post(relay, request).status_code == 202
    wait_for(lambda: metric(relay, "ldp_relay_stopped") == 1, what="the stop")
    relay.stop()
    copy = tmp_path / "before-the-2xx.db"
    for suffix in ("", "-wal"):  # the file and its write-ahead log, as they are
        if (tmp_path / f"relay.db{suffix}").exists():
            (tmp_path / f"before-the-2xx.db{suffix}").write_bytes((tmp_path / f"relay.db{suffix}").read_bytes())
    relay = relays("--min-batch", "3")
    wait_for(lambda: accepted(aggregator) == 3, what="the batch")
    wait_for(lambda: metric(relay, "ldp_relay_stored_requests") == 0, what="the relay's deletion")
    first = crowds(aggregator)
    assert {crowd for _, crowd, _ in first} == {3} and {relayed for *_, relayed in first} == {1.0}
    relay.stop()
    again = relay_process(tmp_path, aggregator.url, "--min-batch", "3", db=copy)
    again.start()
    try:
        wait_for(lambda: accepted(aggregator, "ldp_reports_duplicate_total") == 3, what="the resend")
        wait_for(lambda: metric(again, "ldp_relay_stored_requests") == 0, what="the copy's deletion")
    finally:
        again.kill()
    assert accepted(aggregator) == 3
    assert crowds(aggregator) == first
