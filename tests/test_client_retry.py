"""The sender's retry policy, driven through every case by a scripted network.

ScriptedTransport stands in for the network only (statuses our server can send, and failures
it cannot), and the injected sleep records each wait instead of sleeping.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from client_support import BOOL_AND_OS, Clock, DeadNetwork, ScriptedTransport, closed_endpoint
from ldp_telemetry.client import Response, TelemetryClient
from ldp_telemetry.client import retry

RECORD = {"dark_mode": True, "os": "linux"}
NOON = datetime(2026, 11, 21, 12, 0, 0, tzinfo=timezone.utc)


class MaxJitter(random.Random):
    """Jitter that always takes the top of its range, so waits are exact."""

    def uniform(self, a: float, b: float) -> float:
        return b


def answer(status: int, body=None, **headers: str) -> Response:
    return Response(status, {k.lower().replace("_", "-"): v for k, v in headers.items()}, body)


def make(tmp_path, transport, waits, **options) -> TelemetryClient:
    options.setdefault("clock", Clock(NOON))
    return TelemetryClient("http://aggregator.test", BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=96, data_dir=tmp_path,
                           transport=transport, sleep=waits.append, **options)


def queue(client: TelemetryClient, count: int) -> None:
    for _ in range(count):
        assert client.record(RECORD).queued
        client.settings.clock.advance(hours=1)


def queue_offline(tmp_path, count: int) -> None:
    """Leave ``count`` reports in the outbox, made while the network was down, so that the next
    client's first post is one batch of them all."""
    with make(tmp_path, DeadNetwork(), []) as client:
        queue(client, count)


def test_5xx_408_429_and_network_errors_are_retried_with_doubling_waits(tmp_path):
    transport = ScriptedTransport(answer(503), answer(500), ConnectionError("refused"), answer(408), answer(429),
                                  answer(502))
    waits: list[float] = []
    with make(tmp_path, transport, waits, rng=MaxJitter(), backoff_base=0.5, backoff_cap=10) as client:
        queue(client, 1)
        assert client.flush(10)
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]  # base * 2**attempt, capped
    assert len(transport.batches) == 7 and all(b == transport.batches[0] for b in transport.batches)


def test_waits_are_jittered_within_the_doubling_bound(tmp_path):
    transport = ScriptedTransport(*[answer(503)] * 8)
    waits: list[float] = []
    with make(tmp_path, transport, waits, rng=random.Random(4), backoff_base=1, backoff_cap=60) as client:
        queue(client, 1)
        assert client.flush(10)
    assert len(waits) == 8
    assert all(0 <= w <= min(60, 2**k) for k, w in enumerate(waits))
    assert len(set(waits)) == 8  # drawn, not fixed


def test_retry_after_is_a_floor_in_seconds_or_as_a_date(tmp_path):
    when = format_datetime(NOON + timedelta(hours=1, seconds=30), usegmt=True)  # queue() moves the clock 1 h
    transport = ScriptedTransport(answer(429, retry_after="7"), answer(503, retry_after=when), answer(503))
    waits: list[float] = []
    with make(tmp_path, transport, waits, rng=MaxJitter(), backoff_base=1, backoff_cap=60) as client:
        queue(client, 1)
        assert client.flush(10)
    assert waits == [7.0, 30.0, 4.0]


def test_the_attempt_count_starts_again_after_a_success(tmp_path):
    transport = ScriptedTransport(answer(503), answer(503), answer(202, {"accepted": 1, "duplicates": 0}), answer(503))
    waits: list[float] = []
    with make(tmp_path, transport, waits, rng=MaxJitter(), backoff_base=1, backoff_cap=60) as client:
        queue(client, 1)
        assert client.flush(10)
        queue(client, 1)
        assert client.flush(10)
    assert waits == [1, 2, 1]


@pytest.mark.parametrize("status", [400, 409, 413, 415, 422])
def test_a_report_the_server_refuses_is_dropped_and_not_retried(tmp_path, status, caplog):
    transport = ScriptedTransport(answer(status, {"error": "no", "details": []}))
    waits: list[float] = []
    with make(tmp_path, transport, waits) as client:
        queue(client, 1)
        assert client.flush(10)
        assert client.privacy_spent() != {}  # the budget stays spent: the report may have been seen
    assert waits == [] and len(transport.batches) == 1
    assert any(f"HTTP {status}" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


@pytest.mark.parametrize("status", [401, 403, 404, 405])
def test_an_answer_that_is_no_verdict_on_the_reports_is_retried(tmp_path, status):
    # A wrong endpoint, or auth or a proxy in front of the aggregator, must not cost the reports.
    transport = ScriptedTransport(answer(status, {"error": "no", "details": []}))  # then 202
    waits: list[float] = []
    with make(tmp_path, transport, waits) as client:
        queue(client, 1)
        assert client.flush(10)
    assert len(transport.batches) == 2 and len(waits) == 1


def test_a_400_naming_reports_drops_only_those(tmp_path):
    details = {"error": "2 of 4 reports are invalid", "details": [
        {"index": 1, "field": "window", "message": "too old"}, {"index": 3, "field": "window", "message": "too old"},
        {"index": 9, "field": "window", "message": "out of range: ignored"},
        {"index": True, "field": "x", "message": "a bool is no index"}]}
    queue_offline(tmp_path, 4)
    transport = ScriptedTransport(answer(400, details))
    waits: list[float] = []
    with make(tmp_path, transport, waits) as client:
        assert client.flush(10)
    first, second = transport.batches
    assert second == [first[0], first[2]] and waits == []


def test_a_400_or_413_without_details_halves_the_batch(tmp_path):
    queue_offline(tmp_path, 8)
    transport = ScriptedTransport(answer(413), answer(400, {"error": "too many"}))
    waits: list[float] = []
    with make(tmp_path, transport, waits) as client:
        assert client.flush(10)
    assert [len(b) for b in transport.batches] == [8, 4, 2, 2, 2, 2]  # 413 at 8, 400 at 4, then 2 at a time
    assert sorted(r["id"] for b in transport.batches[2:] for r in b) == sorted(r["id"] for r in transport.batches[0])
    assert waits == []


def test_close_ends_a_long_backoff_and_keeps_the_reports(tmp_path):
    transport = ScriptedTransport(*[answer(503)] * 100)
    client = TelemetryClient("http://aggregator.test", BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                             transport=transport, backoff_base=3600, backoff_cap=3600, rng=MaxJitter())
    assert client.record(RECORD).queued
    assert not client.flush(0.2)  # in an hour-long backoff now, with the real (interruptible) sleep
    client.close(timeout=5)
    assert not client._sender.is_alive()  # noqa: SLF001
    assert sqlite3.connect(client.outbox_path).execute("SELECT COUNT(*) FROM outbox").fetchone() == (1,)


def test_interpreter_exit_stops_the_sender_and_keeps_the_reports(tmp_path):
    # A real interpreter that never calls close(): atexit must persist and stop within the bound.
    script = textwrap.dedent(f"""
        import sys
        from ldp_telemetry.client import TelemetryClient
        schema = {BOOL_AND_OS!r}
        client = TelemetryClient({closed_endpoint()!r}, schema, max_epsilon=4, data_dir={str(tmp_path)!r},
                                 backoff_base=3600, backoff_cap=3600, close_timeout=1)
        print(client.record({{"dark_mode": True, "os": "linux"}}).queued)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
    (path,) = tmp_path.glob("*.sqlite3")
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM outbox").fetchone() == (1,)


@pytest.mark.parametrize("status, retryable", [(408, True), (429, True), (500, True), (503, True), (599, True),
                                               (400, False), (401, True), (403, True), (404, True), (405, True),
                                               (409, False), (413, False), (422, False)])
def test_is_retryable(status, retryable):
    assert retry.is_retryable(status) is retryable


@pytest.mark.parametrize("value, seconds", [
    ("12", 12.0), (" 3 ", 3.0), ("0", 0.0), (format_datetime(NOON - timedelta(minutes=5), usegmt=True), 0.0),
    ("Sat, 21 Nov 2026 12:01:00 GMT", 60.0), ("99999999", retry.MAX_RETRY_AFTER), ("soon", None), ("-5", None),
    # Unicode digits pass str.isdigit() and then make float() raise: "²" ended the sender thread.
    ("\u00b2", None), ("\u0663", None), ("\uff11\uff12", None), ("1.5", None), ("1e5", None), ("+5", None),
    # 5,000 digits are past int()'s limit; a date that is no date must not raise either.
    ("9" * 5000, None), ("Fri, 99 Foo 99999 99:99:99 GMT", None), ("Mon, 01 Jan 1 00:00:00 +9999", None),
    ("Sat, 21 Nov 2026 12:01:00 GMT" + " " * 100, 60.0),
])
def test_retry_after_parsing(value, seconds):
    assert retry.retry_after({"retry-after": value}, NOON) == seconds
    assert retry.retry_after({}, NOON) is None


@pytest.mark.parametrize("headers", [{"retry-after": None}, {"retry-after": 5}, {"retry-after": b"5"}])
def test_retry_after_of_no_text_is_none(headers):
    assert retry.retry_after(headers, NOON) is None


def test_a_sender_that_ends_anyway_makes_record_say_so(tmp_path):
    # Nothing a server sends ends the sender now; were a bug to end it all the same, record() must
    # not keep answering "queued" while nothing reaches the outbox. The injected sleep failing is
    # such a bug: it is called while the sender handles a failed delivery.
    def broken_sleep(seconds: float) -> None:
        raise RuntimeError("the app's sleep is broken")

    client = TelemetryClient("http://aggregator.test", BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                             transport=DeadNetwork(), sleep=broken_sleep)
    try:
        assert client.record(RECORD).queued
        client._sender.join(10)  # noqa: SLF001
        result = client.record(RECORD)
        assert not result.queued and "sender stopped on an unexpected error: RuntimeError" in result.reason
        assert client._sender.failure == result.reason  # noqa: SLF001
    finally:
        client.close(1)
