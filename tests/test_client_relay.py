"""The client's relay (``TelemetryClient(endpoint, ..., relay=URL)``), driven by a scripted network.

:class:`RelayNetwork` stands in for the network only, as ScriptedTransport does in
test_client_retry.py: it serves key configurations from a key this test holds (so it can open every
request the client sends), answers the relay's posts with scripted statuses, and records every
request. The client against a real relay and a real aggregator is test_client_relay_e2e.py. The
injected sleep moves the injected clock, so the minute between a key fetch and a post passes at once.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from client_support import BOOL_AND_OS, Clock
from ldp_telemetry.client import Response, TelemetryClient
from ldp_telemetry.client.relay import KEY_FETCH_GAP
from ldp_telemetry.shared import ohttp, parse_schema

RECORD = {"dark_mode": True, "os": "linux"}
NOON = datetime(2026, 11, 21, 12, 0, 0, tzinfo=timezone.utc)
AGGREGATOR, RELAY = "http://aggregator.test", "http://relay.test"


class RelayNetwork:
    """The relay and the aggregator as the client sees them over the network.

    ``keys`` is the aggregator's key list (its private keys by id); ``relay_keys``, when set, is
    what the relay serves instead (a relay with a stale or a forged list). ``answers`` are the
    relay's answers to the next posts (then 202). Every request is logged in ``log`` with the
    clock's time."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.private: dict[int, bytes] = {}
        self.made = 0  # keys made so far: the next one's id is this plus one
        self.keys = self.rotate()
        self.relay_keys: bytes | None = None
        self.answers: list[Response | Exception] = []
        self.log: list[tuple[datetime, str, str]] = []
        self.requests: list[bytes] = []  # every request posted to the relay
        self.schemas = {1: parse_schema(BOOL_AND_OS).to_dict()}  # the versions the relay serves
        self.relay_down = False  # posts to the relay fail as on a dead network

    def rotate(self) -> bytes:
        """A new key under the next id, listed first: the new list."""
        self.made += 1
        key_id = self.made
        self.private[key_id] = ohttp.generate_private_key()
        self.keys = ohttp.encode_key_configs([ohttp.KeyConfig(k, ohttp.public_key_of(self.private[k]))
                                              for k in sorted(self.private, reverse=True)])
        return self.keys

    def opened(self) -> list[dict[str, Any]]:
        """The report of every request posted, opened with the aggregator's key of its id."""
        found = []
        for request in self.requests:
            message = ohttp.decapsulate(request, self.private[ohttp.request_key_id(request)])
            body = json.loads(ohttp.bhttp_content(message))
            assert len(body["reports"]) == 1  # each report alone
            found.append(body["reports"][0])
        return found

    def post_json(self, url: str, body: Any, timeout: float) -> Response:
        self.log.append((self.clock.now, "POST", url))
        raise AssertionError("a client with a relay posted JSON to " + url)

    def get_json(self, url: str, timeout: float) -> Response:
        self.log.append((self.clock.now, "GET", url))
        if url == f"{RELAY}/api/v1/schemas/app-usage":
            return Response(200, {}, self.schemas[max(self.schemas)])
        for version, schema in self.schemas.items():
            if url == f"{RELAY}/api/v1/schemas/app-usage/{version}":
                return Response(200, {}, schema)
        return Response(404, {}, {"error": "no such schema"})

    def get_bytes(self, url: str, timeout: float) -> Response:
        self.log.append((self.clock.now, "GET", url))
        if url == f"{RELAY}/ohttp-keys":
            return Response(200, {}, None, self.relay_keys if self.relay_keys is not None else self.keys)
        if url == f"{AGGREGATOR}/api/v1/ohttp-keys":
            return Response(200, {}, None, self.keys)
        return Response(404, {}, None, b"")

    def post_bytes(self, url: str, data: bytes, content_type: str, timeout: float) -> Response:
        self.log.append((self.clock.now, "POST", url))
        assert url == f"{RELAY}/relay" and content_type == ohttp.REQUEST_MEDIA_TYPE
        if self.relay_down:
            raise ConnectionError("the relay is unreachable")
        answer = self.answers.pop(0) if self.answers else Response(202, {}, None)
        if isinstance(answer, Exception):
            raise answer
        if answer.status == 202:
            self.requests.append(data)
        return answer

    def close(self) -> None:
        pass


def problem(status: int, kind: str, **headers: str) -> Response:
    return Response(status, {k.replace("_", "-"): v for k, v in headers.items()}, {"type": kind, "title": "refused"})


@pytest.fixture
def clock() -> Clock:
    return Clock(NOON)


@pytest.fixture
def network(clock: Clock) -> RelayNetwork:
    return RelayNetwork(clock)


def make(tmp_path: Path, network: RelayNetwork, waits: list[float] | None = None, **options: Any) -> TelemetryClient:
    """A client of schema app-usage through the relay; its sleep records each wait and moves the clock."""
    clock = network.clock
    def sleep(seconds: float) -> None:
        if waits is not None:
            waits.append(seconds)
        clock.advance(seconds=seconds)
    options.setdefault("schema", "app-usage")
    return TelemetryClient(AGGREGATOR, relay=RELAY, max_epsilon=4, max_epsilon_per_day=96, data_dir=tmp_path,
                           transport=network, sleep=sleep, clock=clock, **options)


def record_hours(client: TelemetryClient, hours: int) -> None:
    assert client.wait_for_schema(5)
    for _ in range(hours):
        assert client.record(RECORD).queued
        client.settings.clock.advance(hours=1)


# --- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize("relay, complaint", [
    ("relay.test", "relay must be None or an http"), (7, "relay must be None or an http"),
    ("http://aggregator.test/", "another origin"), ("HTTP://Aggregator.test:80", "another origin"),
])
def test_a_bad_relay_is_refused(tmp_path, relay, complaint):
    with pytest.raises(ValueError, match=complaint):
        TelemetryClient(AGGREGATOR, BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path, relay=relay)


def test_a_transport_that_cannot_carry_bytes_is_refused_with_a_relay(tmp_path):
    class JsonOnly:
        def post_json(self, url, body, timeout): ...
        def get_json(self, url, timeout): ...
    with pytest.raises(ValueError, match="post_bytes"):
        TelemetryClient(AGGREGATOR, BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path, relay=RELAY, transport=JsonOnly())


def test_a_schema_too_big_for_a_relay_is_refused(tmp_path, network):
    huge = {"name": "huge", "version": 1, "epsilon": 2.0, "attributes": [
        {"name": f"a{i}", "type": "categorical", "mechanism": "oue", "categories": [str(j) for j in range(1024)]}
        for i in range(21)]}
    with pytest.raises(ValueError, match="cannot go through a relay"):
        make(tmp_path, network, schema=huge, max_report_bytes=1 << 20, max_batch_bytes=1 << 21)
    # Without a relay the same schema is fine (within max_report_bytes).
    TelemetryClient(AGGREGATOR, huge, max_epsilon=4, data_dir=tmp_path / "direct", max_report_bytes=1 << 20,
                    max_batch_bytes=1 << 21, transport=network).close(0)


# --- delivery ------------------------------------------------------------------------------------


def test_each_report_alone_through_the_relay_and_never_around_it(tmp_path, network):
    with make(tmp_path, network) as client:
        record_hours(client, 3)
        assert client.flush(10)
        schema = client.schema
    opened = network.opened()
    assert len(opened) == 3 and len({r["window"] for r in opened}) == 3
    assert {len(r) for r in network.requests} == {ohttp.REQUEST_OVERHEAD + ohttp.padded_size(schema)}
    assert [u for _, m, u in network.log if m == "POST"] == [f"{RELAY}/relay"] * 3
    # The schema came from the relay; the aggregator was asked for its keys alone.
    assert {u for _, _, u in network.log if u.startswith(AGGREGATOR)} == {f"{AGGREGATOR}/api/v1/ohttp-keys"}
    assert f"{RELAY}/api/v1/schemas/app-usage" in [u for _, _, u in network.log]


def test_a_new_start_sends_at_once_with_the_keys_an_earlier_start_kept(tmp_path, network):
    # The newcomer's finding: the keys lived in memory only, so a process shorter than a minute (a
    # command, a job) fetched them at every start and never sent. They are kept in the outbox now.
    with make(tmp_path, network) as client:
        record_hours(client, 1)
        assert client.flush(10)
    network.clock.advance(minutes=5)
    before = len(network.log)
    waits: list[float] = []
    with make(tmp_path, network, waits) as client:
        record_hours(client, 1)
        assert client.flush(10)
    since = [u for _, _, u in network.log[before:]]
    assert f"{AGGREGATOR}/api/v1/ohttp-keys" not in since and f"{RELAY}/ohttp-keys" not in since
    assert since.count(f"{RELAY}/relay") == 1 and not any(w >= 1 for w in waits)
    assert len(network.opened()) == 2


def test_kept_keys_a_day_old_are_fetched_again_a_minute_away_from_the_last_post(tmp_path, network):
    with make(tmp_path, network) as client:
        record_hours(client, 1)
        assert client.flush(10)
    network.clock.advance(days=1)
    waits: list[float] = []
    with make(tmp_path, network, waits) as client:
        record_hours(client, 1)
        assert client.flush(10)
    fetches = [t for t, _, u in network.log if u == f"{AGGREGATOR}/api/v1/ohttp-keys"]
    posts = [t for t, m, u in network.log if m == "POST"]
    assert len(fetches) == 2 and len(posts) == 2
    assert all(abs((f - p).total_seconds()) >= KEY_FETCH_GAP for f in fetches for p in posts)


def test_the_key_fetch_from_the_aggregator_is_never_within_a_minute_of_a_post(tmp_path, network):
    waits: list[float] = []
    with make(tmp_path, network, waits) as client:
        record_hours(client, 2)
        assert client.flush(10)
        network.clock.advance(days=1)  # the keys are a day old: fetched again before the next post
        record_hours(client, 1)
        assert client.flush(10)
    fetches = [t for t, _, u in network.log if u == f"{AGGREGATOR}/api/v1/ohttp-keys"]
    posts = [t for t, m, u in network.log if m == "POST"]
    assert len(fetches) == 2 and len(posts) == 3
    assert min(abs((f - p).total_seconds()) for f in fetches for p in posts) >= KEY_FETCH_GAP
    assert KEY_FETCH_GAP in waits


def test_keys_that_differ_between_relay_and_aggregator_send_nothing(tmp_path, network, caplog):
    network.relay_keys = ohttp.encode_key_configs([ohttp.KeyConfig(9, ohttp.public_key_of(ohttp.generate_private_key()))])
    with caplog.at_level(logging.ERROR, "ldp_telemetry.client"):
        with make(tmp_path, network, backoff_cap=1) as client:
            record_hours(client, 2)
            assert not client.flush(0.5)
            kept = client._outbox.count
    assert kept == 2 and network.requests == []
    assert not [u for _, m, u in network.log if m == "POST"]
    assert "serve different key configurations" in caplog.text
    # Once they agree, the kept reports go.
    network.relay_keys = None
    with make(tmp_path, network) as client:
        assert client.flush(10)
    assert len(network.opened()) == 2


def test_a_rotated_key_is_fetched_again_and_the_report_resent(tmp_path, network):
    with make(tmp_path, network) as client:
        record_hours(client, 1)
        assert client.flush(10)
        retired = network.private.pop(1)  # the aggregator rotated: key 1 is no longer served, key 2 is
        network.rotate()
        network.answers = [problem(400, ohttp.KEY_PROBLEM_TYPE)]
        record_hours(client, 1)
        assert client.flush(10)
    assert [ohttp.request_key_id(r) for r in network.requests] == [1, 2]
    network.private[1] = retired  # to open the first request
    assert len(network.opened()) == 2
    assert len([u for _, _, u in network.log if u == f"{AGGREGATOR}/api/v1/ohttp-keys"]) == 2


def test_413_and_other_4xx_drop_with_a_warning(tmp_path, network, caplog):
    network.answers = [Response(413, {}, None), problem(400, "about:blank")]
    with caplog.at_level(logging.WARNING, "ldp_telemetry.client"):
        with make(tmp_path, network) as client:
            record_hours(client, 3)
            assert client.flush(10)
    assert len(network.opened()) == 1
    assert caplog.text.count("dropped a report: the relay answered HTTP") == 2


def test_429_503_5xx_and_network_errors_are_retried_after_retry_after(tmp_path, network):
    waits: list[float] = []
    network.answers = [Response(429, {"retry-after": "120"}, None), Response(503, {"retry-after": "7"}, None),
                       Response(500, {}, None), ConnectionError("reset")]
    with make(tmp_path, network, waits, backoff_base=0.5, backoff_cap=1) as client:
        record_hours(client, 1)
        assert client.flush(10)
    assert len(network.opened()) == 1
    assert 120 in waits and 7 in waits


def test_a_report_of_an_older_version_goes_at_its_own_padded_size(tmp_path, network):
    """Made under version 1, sent two starts later under version 2 (whose reports are bigger, and
    which the client has cached since): the client asks the relay for version 1 and pads the report
    as version 1's are padded."""
    network.relay_down = True
    with make(tmp_path, network, backoff_cap=1) as client:
        record_hours(client, 1)
        assert not client.flush(0.3)
    wide = {**BOOL_AND_OS, "version": 2, "attributes": [*BOOL_AND_OS["attributes"], {
        "name": "pages", "type": "categorical", "mechanism": "oue", "categories": [f"p{i}" for i in range(400)]}]}
    network.schemas[2] = parse_schema(wide).to_dict()
    with make(tmp_path, network, backoff_cap=1) as client:  # takes version 2 (and caches it); sends nothing
        deadline = time.monotonic() + 5
        while (client.schema is None or client.schema.version != 2) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.schema.version == 2
        assert not client.flush(0.3)
    network.relay_down = False
    with make(tmp_path, network) as client:
        assert client.wait_for_schema(5) and client.schema.version == 2
        assert client.flush(10)
    (report,) = network.opened()
    assert report["version"] == 1
    assert len(network.requests[0]) == ohttp.REQUEST_OVERHEAD + ohttp.padded_size(parse_schema(BOOL_AND_OS))
    assert ohttp.padded_size(parse_schema(wide)) > ohttp.padded_size(parse_schema(BOOL_AND_OS))
    assert f"{RELAY}/api/v1/schemas/app-usage/1" in [u for _, _, u in network.log]


def test_without_cryptography_reports_stay_and_one_warning(tmp_path):
    """cryptography hidden behind a package of that name that fails to import, as if absent."""
    shadow = tmp_path / "shadow" / "cryptography"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('cryptography is not installed')\n")
    script = textwrap.dedent(f"""
        import logging, sys
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from client_support import BOOL_AND_OS
        from ldp_telemetry.client import TelemetryClient
        with TelemetryClient("http://127.0.0.1:9", BOOL_AND_OS, max_epsilon=4, data_dir={str(tmp_path / "data")!r},
                             relay="http://127.0.0.1:10") as client:
            assert client.record({{"dark_mode": True, "os": "linux"}}).queued
            assert not client.flush(1.5)
            print("kept", client._outbox.count)
    """)
    env = {**os.environ, "PYTHONPATH": str(shadow.parent)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kept 1"  # one report per window: the first is kept, never sent
    assert done.stderr.count("needs the cryptography package") == 1, done.stderr
