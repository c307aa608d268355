"""A hostile or broken server, and odd settings and records, against the client library.

The client never raises into the app except a ValueError for a bad record or a bad setting, and
never drops a report it has no proof of delivery for. The servers here are real HTTP servers on
127.0.0.1 (http.server), answering as captive portals, proxies and broken servers do.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from client_support import BOOL_AND_OS, ScriptedTransport, closed_endpoint
from ldp_telemetry.client import RequestsTransport, TelemetryClient
from ldp_telemetry.client import transport as transport_module

RECORD = {"dark_mode": True, "os": "linux"}
ACK = b'{"accepted": 1, "duplicates": 0}'


class Hostile(BaseHTTPRequestHandler):
    """Answers POST /api/v1/reports as ``server.mode`` says; ``server.mode = "ok"`` acknowledges."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def send(self, status, body=b"", ctype="application/json", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.server.requests.append(("GET", self.path))
        if self.path == "/api/v1/schemas/app-usage":
            if self.server.schema_mode == "portal":
                return self.send(200, b"<html>Welcome to the hotel wifi</html>", "text/html")
            return self.send(200, json.dumps(BOOL_AND_OS).encode())
        if self.path == "/portal":
            return self.send(200, b"<html>Welcome to the hotel wifi</html>", "text/html")
        return self.send(405, b'{"error": "method not allowed on this path", "details": []}')

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append(("POST", self.path))
        mode = self.server.mode
        if mode == "ok":
            return self.send(202, ACK)
        if mode == "301 to a page":
            return self.send(301, headers=[("Location", "/portal")])
        if mode == "302 to a 405":
            return self.send(302, headers=[("Location", "/elsewhere")])
        if mode == "200 HTML page":
            return self.send(200, b"<html>Welcome to the hotel wifi</html>", "text/html")
        if mode == "204 no body":
            return self.send(204)
        if mode == "202 wrong body":
            return self.send(202, b'{"ok": true}')
        if mode == "200 status line, then close":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self.close_connection = True
            return None
        if mode == "endless body":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(64 << 20))
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b" " * (1 << 20))
            except OSError:
                pass
            return None
        raise AssertionError(mode)


@pytest.fixture
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    server.mode = "ok"
    server.schema_mode = "ok"
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def outbox_count(path: Path) -> int:
    return sqlite3.connect(path).execute("SELECT COUNT(*) FROM outbox").fetchone()[0]


@pytest.mark.parametrize("mode", ["301 to a page", "302 to a 405", "200 HTML page", "204 no body", "202 wrong body",
                                  "200 status line, then close"])
def test_an_answer_that_is_no_acknowledgement_keeps_the_report(tmp_path, hostile, mode):
    # Each of these dropped the report before: requests turned the POST into a GET after a 301/302
    # (whose 200 page counted as delivery, whose 405 as a refusal), and any 2xx counted as delivery.
    hostile.mode = mode
    url = f"http://127.0.0.1:{hostile.server_address[1]}"
    client = TelemetryClient(url, BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path, backoff_base=0.02,
                             backoff_cap=0.05, request_timeout=5)
    try:
        assert client.record(RECORD).queued
        assert not client.flush(0.6)
        assert outbox_count(client.outbox_path) == 1
        assert ("GET", "/portal") not in hostile.requests and ("GET", "/elsewhere") not in hostile.requests
        hostile.mode = "ok"  # the network is back to normal: the report goes out
        assert client.flush(10)
        assert outbox_count(client.outbox_path) == 0
    finally:
        client.close(2)


def test_an_endless_response_body_is_not_read_into_memory(hostile):
    hostile.mode = "endless body"
    url = f"http://127.0.0.1:{hostile.server_address[1]}/api/v1/reports"
    transport = RequestsTransport()
    started = time.monotonic()
    with pytest.raises(transport_module.ResponseTooLarge):
        transport.post_json(url, {"reports": []}, 10)
    assert time.monotonic() - started < 10
    transport.close()


@pytest.mark.parametrize("options, message", [
    ({"data_dir": 5}, "data_dir"),
    ({"data_dir": b"/tmp/x"}, "data_dir"),
    ({"data_dir": ""}, "data_dir"),
    ({"data_dir": "/tmp/a\0b"}, "data_dir"),
    ({"close_timeout": "5"}, "close_timeout"),
    ({"close_timeout": float("nan")}, "close_timeout"),
    ({"close_timeout": -1}, "close_timeout"),
    ({"max_outbox": 10**30}, "max_outbox"),
    ({"max_batch": 2**63}, "max_batch"),
    ({"clock": 5}, "clock"),
    ({"sleep": "no"}, "sleep"),
])
def test_a_bad_setting_is_a_value_error(tmp_path, options, message):
    settings = {"data_dir": tmp_path, **options}
    with pytest.raises(ValueError, match=message):
        TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, transport=ScriptedTransport(), **settings)


def test_close_with_a_bad_timeout_is_a_value_error_and_the_client_still_closes(tmp_path):
    client = TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                             transport=ScriptedTransport())
    with pytest.raises(ValueError, match="timeout"):
        client.close("soon")
    client.close(2)
    assert not client._sender.is_alive()  # noqa: SLF001
    client.close()  # twice is fine
    assert not client.record(RECORD)


def test_a_numpy_bool_is_named_in_the_error(tmp_path):
    numpy = pytest.importorskip("numpy")
    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                         transport=ScriptedTransport()) as client:
        with pytest.raises(ValueError, match=r"dark_mode must be True or False, got a numpy\.bool"):
            client.record({"dark_mode": numpy.bool_(True), "os": "linux"})
        assert client.record({"dark_mode": bool(numpy.bool_(True)), "os": "linux"}).queued


def test_odd_but_valid_records(tmp_path):
    class Name(str):
        pass

    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                         transport=ScriptedTransport()) as client:
        for bad in (None, [("dark_mode", True)], {**RECORD, "extra": 1}, {**RECORD, 1: 1}, {"dark_mode": None, "os": "linux"},
                    {"dark_mode": 1, "os": "linux"}, {"dark_mode": True, "os": b"linux"}, {"dark_mode": True, "os": ["linux"]},
                    {**RECORD, "\ud800": 1}):
            with pytest.raises(ValueError):
                client.record(bad)
        assert client.record({"dark_mode": True, "os": Name("linux")}).queued


def test_a_damaged_outbox_row_is_dropped_and_the_rest_still_sent(tmp_path, caplog):
    # It was a JSONDecodeError in the sender thread, which stopped it for good: no later report
    # was ever sent, in this process or after any restart, while record() still said "queued".
    endpoint = "http://aggregator.test"
    with TelemetryClient(endpoint, BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path, transport=ScriptedTransport(
            *[ConnectionError("down")] * 50), backoff_base=60) as client:
        assert client.record(RECORD).queued
        path = client.outbox_path
    db = sqlite3.connect(path)
    db.execute("INSERT INTO outbox (endpoint, body) VALUES (?, ?)", (endpoint, "{not json"))
    db.execute("INSERT INTO outbox (endpoint, body) VALUES (?, ?)", (endpoint, "[1, 2]"))
    db.commit()
    db.close()
    transport = ScriptedTransport()
    with TelemetryClient(endpoint, BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path, transport=transport) as client:
        assert client.flush(10)
        assert client._sender.is_alive()  # noqa: SLF001
    assert [len(b) for b in transport.batches] == [1] and outbox_count(path) == 0
    assert any("unreadable" in r.getMessage() for r in caplog.records)


def test_a_damaged_cached_schema_is_ignored(tmp_path):
    endpoint = "http://aggregator.test"
    TelemetryClient(endpoint, "app-usage", max_epsilon=4, data_dir=tmp_path, transport=ScriptedTransport()).close(1)
    db = sqlite3.connect(tmp_path / "outbox-app-usage.sqlite3")
    db.execute("INSERT OR REPLACE INTO schemas VALUES (?, ?, ?)", (endpoint, "app-usage", "{garbage"))
    db.commit()
    db.close()
    client = TelemetryClient(endpoint, "app-usage", max_epsilon=4, data_dir=tmp_path, transport=ScriptedTransport())
    try:
        assert client.schema is None and not client.record(RECORD)
    finally:
        client.close(1)


def test_a_schema_fetch_answered_by_a_portal_page_is_asked_again_soon(tmp_path, hostile):
    # It counted as the server's answer: the client refused the schema and recorded nothing for
    # schema_refresh (an hour), and wait_for_schema() raised.
    hostile.schema_mode = "portal"
    url = f"http://127.0.0.1:{hostile.server_address[1]}"
    client = TelemetryClient(url, "app-usage", max_epsilon=4, data_dir=tmp_path, backoff_base=0.05, backoff_cap=0.1)
    try:
        assert not client.wait_for_schema(0.5)  # no error: nothing was refused
        hostile.schema_mode = "ok"
        assert client.wait_for_schema(10) and client.record(RECORD).queued
        assert client.flush(10)
    finally:
        client.close(2)


@pytest.mark.parametrize("timeout", [float("nan"), -1, "5", None, True])
def test_a_bad_flush_or_wait_timeout_is_a_value_error(tmp_path, timeout):
    # NaN made flush() wait for ever; "5" and None were TypeErrors.
    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                         transport=ScriptedTransport()) as client:
        with pytest.raises(ValueError, match="timeout"):
            client.flush(timeout)
        with pytest.raises(ValueError, match="timeout"):
            client.wait_for_schema(timeout)


@pytest.mark.parametrize("timeout", [float("inf"), 1e300])
def test_flush_and_wait_take_an_unbounded_timeout(tmp_path, timeout):
    # Both were OverflowErrors ("timestamp out of range") from the lock underneath.
    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                         transport=ScriptedTransport()) as client:
        assert client.wait_for_schema(timeout)
        assert client.record(RECORD).queued
        assert client.flush(timeout)
