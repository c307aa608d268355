"""A hostile or broken server, and odd settings and records, against the client library.

The client never raises into the app except a ValueError for a bad record or a bad setting, and
never drops a report it has no proof of delivery for. The servers here are real HTTP servers on
127.0.0.1 (http.server), answering as captive portals, proxies and broken servers do.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from client_support import BOOL_AND_OS, Clock, ScriptedTransport, closed_endpoint
from ldp_telemetry.client import RequestsTransport, TelemetryClient
from ldp_telemetry.client import transport as transport_module
from ldp_telemetry.shared import parse_schema

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


class Scripted(Hostile):
    """Answers every request with ``server.answer(handler)``; records (method, path)."""

    def do_GET(self):
        self.server.requests.append(("GET", self.path))
        self.server.answer(self)

    def do_POST(self):
        self.body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append(("POST", self.path))
        self.server.answer(self)


@pytest.fixture
def serve():
    """``serve(answer)``: a real HTTP server on 127.0.0.1 answering with ``answer(handler)``; its URL."""
    servers = []

    def start(answer):
        server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
        server.daemon_threads = True
        server.answer = answer
        server.requests = []
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        server.url = f"http://127.0.0.1:{server.server_address[1]}"
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def schema_or(elsewhere):
    """An answer: the schema at the redirect's target, ``elsewhere(handler)`` for any other path."""
    def answer(handler):
        if handler.path == "/moved/app-usage":
            return handler.send(200, json.dumps(BOOL_AND_OS).encode())
        return elsewhere(handler)
    return answer


def test_a_schema_redirect_to_another_origin_is_not_followed(tmp_path, serve, caplog):
    other = serve(schema_or(lambda h: h.send(404, b"{}")))
    hostile = serve(lambda h: h.send(302, headers=[("Location", other.url + "/moved/app-usage")]))
    client = TelemetryClient(hostile.url, "app-usage", max_epsilon=4, data_dir=tmp_path, backoff_base=0.05,
                             backoff_cap=0.1)
    try:
        assert not client.wait_for_schema(1)
        assert other.requests == [] and hostile.requests  # asked, never followed
        assert any("another origin is not followed" in r.getMessage() for r in caplog.records)
    finally:
        client.close(1)


def test_a_schema_redirect_within_the_origin_is_followed(tmp_path, serve):
    server = serve(schema_or(lambda h: h.send(301, headers=[("Location", "/moved/app-usage")])))
    with TelemetryClient(server.url, "app-usage", max_epsilon=4, data_dir=tmp_path) as client:
        assert client.wait_for_schema(10)
        # The schema served at the redirect's target, and it came by way of the redirect.
        assert client.schema.to_dict() == parse_schema(BOOL_AND_OS).to_dict()
    assert server.requests[:2] == [("GET", "/api/v1/schemas/app-usage"), ("GET", "/moved/app-usage")]


@pytest.mark.parametrize("same_origin", [True, False])
def test_a_post_is_redirected_only_within_the_origin_and_only_keeping_its_body(tmp_path, serve, same_origin):
    target = serve(lambda h: h.send(202, ACK))
    moved = (target.url if not same_origin else "") + "/api/v1/moved"

    def answer(handler):
        if handler.path == "/api/v1/moved":
            return handler.send(202, ACK)
        return handler.send(307, headers=[("Location", moved)])

    server = serve(answer)
    with TelemetryClient(server.url, BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path, backoff_base=0.05,
                         backoff_cap=0.1) as client:
        assert client.record(RECORD).queued
        assert client.flush(1 if not same_origin else 10) is same_origin
    assert (("POST", "/api/v1/moved") in server.requests) is same_origin
    assert target.requests == []


def drip(handler, what=b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 400):
    """Sends a byte every 0.25 s: each read gets data well within any per-read timeout."""
    try:
        for byte in what:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(0.25)
    except OSError:
        pass
    handler.close_connection = True


@pytest.mark.parametrize("method", ["post_json", "get_json"])
def test_a_byte_dripping_server_cannot_hold_a_request_past_its_deadline(serve, method):
    server = serve(drip)
    transport = RequestsTransport()
    args = (server.url + "/api/v1/reports", {"reports": []}) if method == "post_json" else (server.url + "/x",)
    started = time.monotonic()
    with pytest.raises(transport_module.DeadlineExceeded):
        getattr(transport, method)(*args, 2)
    # A 2 s deadline; the generous slack (3 s) is for a loaded machine. The drip alone would
    # hold the request for 100 s (400 bytes at 4 a second), and used to.
    assert time.monotonic() - started < 5
    transport.close()


def test_a_byte_dripping_body_is_cut_at_the_deadline_too(serve):
    def answer(handler):
        handler.send_response(202)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        drip(handler, b" " * 1000)

    server = serve(answer)
    transport = RequestsTransport()
    started = time.monotonic()
    with pytest.raises(transport_module.DeadlineExceeded):
        transport.post_json(server.url + "/api/v1/reports", {"reports": []}, 2)
    assert time.monotonic() - started < 5  # as above: 2 s, and slack for a loaded machine
    transport.close()


def test_requests_a_server_holds_past_their_deadline_are_bounded(serve):
    # An abandoned request's thread ends when the server lets it; a server that never does may
    # hold MAX_ABANDONED of them, and then no more requests are sent to it, so it cannot make
    # the client pile up threads and sockets. When they end, requests go out again.
    release = threading.Event()

    def hold(handler):
        # A header byte each 0.05 s: every read gets data within its timeout, and the headers never end.
        try:
            handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not release.wait(0.05):
                handler.wfile.write(b"a")
                handler.wfile.flush()
        except OSError:
            pass
        handler.close_connection = True

    server = serve(hold)
    transport = RequestsTransport()
    try:
        for _ in range(transport_module.MAX_ABANDONED + 2):
            with pytest.raises(transport_module.DeadlineExceeded):
                transport.post_json(server.url + "/api/v1/reports", {"reports": []}, 0.2)
        assert len(server.requests) == transport_module.MAX_ABANDONED
        release.set()  # the server closes them all: their threads end
        server.answer = lambda h: h.send(202, ACK)
        deadline = time.monotonic() + 30
        while True:
            try:
                reply = transport.post_json(server.url + "/api/v1/reports", {"reports": []}, 5)
                break
            except transport_module.DeadlineExceeded:
                assert time.monotonic() < deadline, "the abandoned requests never ended"
                time.sleep(0.05)
        assert reply.status == 202 and reply.body == json.loads(ACK)
    finally:
        release.set()
        transport.close()


def test_server_text_is_escaped_before_it_reaches_the_log(tmp_path, serve, caplog):
    forged = "no\nCRITICAL root: all reports deleted \x1b[2J"
    body = json.dumps({"error": forged, "details": [{"index": 0, "field": "x\ny", "message": forged}]}).encode()
    server = serve(lambda h: h.send(422, body))
    with TelemetryClient(server.url, BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path) as client:
        assert client.record(RECORD).queued
        assert client.flush(10)
    messages = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert messages and all("\n" not in m and "\x1b" not in m for m in messages)
    assert any("no\\nCRITICAL" in m for m in messages)


def test_a_schema_with_huge_reports_is_refused_like_a_greedy_one(tmp_path, serve):
    # 64 attributes of 1,024 categories under OUE: ~197 KB a report, 8-14 ms a record() before.
    huge = {"name": "app-usage", "version": 1, "epsilon": 4.0, "window": "day", "attributes": [
        {"name": f"a{i}", "type": "categorical", "mechanism": "oue", "categories": [f"c{j}" for j in range(1024)]}
        for i in range(64)]}
    server = serve(lambda h: h.send(200, json.dumps(huge).encode()))
    with TelemetryClient(server.url, "app-usage", max_epsilon=4, data_dir=tmp_path) as client:
        with pytest.raises(ValueError, match="max_report_bytes"):
            client.wait_for_schema(10)
        result = client.record({f"a{i}": "c0" for i in range(64)})
        assert not result.queued and not result.pending and "max_report_bytes" in result.reason
    assert [r for r in server.requests if r[0] == "POST"] == []
    with pytest.raises(ValueError, match="max_report_bytes"):  # given in code: at once
        TelemetryClient(server.url, huge, max_epsilon=4, data_dir=tmp_path / "code")


def test_the_report_size_bound_holds_for_real_reports():
    from ldp_telemetry.shared import parse_schema, randomize
    from ldp_telemetry.shared.reports import max_report_bytes

    schema = parse_schema({"name": "s", "version": 7, "epsilon": 3.0, "window": "hour", "attributes": [
        {"name": "b", "type": "boolean"},
        {"name": "g", "type": "categorical", "mechanism": "grr", "categories": ["é" * 60, "x"]},
        {"name": "o", "type": "categorical", "mechanism": "oue", "categories": [f"c{j}" for j in range(50)]}]})
    record = {"b": False, "g": "é" * 60, "o": "c1"}
    sizes = [len(json.dumps(randomize(schema, record))) for _ in range(200)]
    assert max(sizes) <= max_report_bytes(schema)


def test_batches_are_bounded_in_bytes(tmp_path):
    clock = Clock(datetime(2026, 11, 21, tzinfo=timezone.utc))
    with TelemetryClient("http://aggregator.test", BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=48,
                         data_dir=tmp_path, clock=clock, transport=DeadNetworkOnce()) as client:
        for _ in range(30):
            assert client.record(RECORD).queued
            clock.advance(hours=1)
    transport = ScriptedTransport()
    with TelemetryClient("http://aggregator.test", BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                         transport=transport, max_batch_bytes=4096, max_report_bytes=1024) as client:
        assert client.flush(10)
    sizes = [len(json.dumps({"reports": b}, separators=(",", ":"))) for b in transport.batches]
    assert sum(len(b) for b in transport.batches) == 30 and len(sizes) > 1 and max(sizes) <= 4096


def test_the_outbox_is_bounded_in_bytes_dropping_the_oldest(tmp_path, caplog):
    clock = Clock(datetime(2026, 11, 21, tzinfo=timezone.utc))
    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, max_epsilon_per_day=48, data_dir=tmp_path,
                         clock=clock, max_outbox_bytes=1000, backoff_base=60) as client:
        windows = []
        for _ in range(12):
            windows.append(client.record(RECORD).window)
            clock.advance(hours=1)
        client.flush(0.3)
        path = client.outbox_path
    db = sqlite3.connect(path)
    kept = [json.loads(b)["window"] for (b,) in db.execute("SELECT body FROM outbox ORDER BY seq")]
    assert sum(s for (s,) in db.execute("SELECT size FROM outbox")) <= 1000
    assert kept == windows[-len(kept):] and 0 < len(kept) < 12  # the newest, in order
    assert any("outbox is full" in r.getMessage() for r in caplog.records)


class DeadNetworkOnce(ScriptedTransport):
    """Every post fails: the reports stay in the outbox for the next client."""

    def post_json(self, url, body, timeout):
        raise ConnectionError("down")


GOOD_SCHEMA = json.dumps(BOOL_AND_OS).encode()


def schema_with(**fields):
    return json.dumps({**BOOL_AND_OS, **fields}).encode()


# Answers a hostile or broken server can give, each to the request it is given for. Each of these
# is answered a few times, then the server behaves: the client must have survived them all.
GARBAGE = {
    # Answers to a post of reports.
    "503, Retry-After: superscript two": ("POST", lambda h: h.send(503, b"{}", headers=[("Retry-After", "\u00b2")])),
    "429, Retry-After: 5,000 digits": ("POST", lambda h: h.send(429, b"{}", headers=[("Retry-After", "9" * 5000)])),
    "503, Retry-After: a date that is none": ("POST", lambda h: h.send(
        503, b"{}", headers=[("Retry-After", "Fri, 99 Foo 99999 99:99:99 GMT")])),
    "202, no JSON": ("POST", lambda h: h.send(202, b"{garbage")),
    "202, JSON nested past the recursion limit": ("POST", lambda h: h.send(202, b"[" * 100_000 + b"]" * 100_000)),
    "202, a number of 5,000 digits": ("POST", lambda h: h.send(202, b'{"accepted": ' + b"9" * 5000 + b', "duplicates": 0}')),
    "202, counts of the wrong types": ("POST", lambda h: h.send(202, b'{"accepted": 1e999, "duplicates": true}')),
    "400, details of the wrong types": ("POST", lambda h: h.send(400, json.dumps({
        "error": {"nested": ["\x1b[2J"]}, "details": [{"index": True}, {"index": 1e308}, {"index": -1}, 7,
                                                       {"index": "0"}, {"field": None}]}).encode())),
    "400, details not a list": ("POST", lambda h: h.send(400, b'{"error": null, "details": {"index": 0}}')),
    # Answers to a fetch of the schema.
    "schema: no JSON": ("GET", lambda h: h.send(200, b"{garbage")),
    "schema: a list": ("GET", lambda h: h.send(200, b"[1, 2]")),
    "schema: nested past the recursion limit": ("GET", lambda h: h.send(200, b"[" * 100_000 + b"]" * 100_000)),
    "schema: epsilon 5e-324 and a numeric attribute": ("GET", lambda h: h.send(200, schema_with(
        epsilon=5e-324, attributes=[{"name": "minutes", "type": "numeric", "range": [0, 120]}]))),
    "schema: epsilon as a string": ("GET", lambda h: h.send(200, schema_with(epsilon="2"))),
    "schema: epsilon of 400 digits": ("GET", lambda h: h.send(200, schema_with(epsilon=10 ** 400))),
    "schema: a range past any float": ("GET", lambda h: h.send(200, schema_with(
        attributes=[{"name": "minutes", "type": "numeric", "range": [0, "1e999"]}]).replace(b'"1e999"', b"1e999"))),
    "schema: attributes of the wrong types": ("GET", lambda h: h.send(200, schema_with(attributes=[[1], {"name": 5}]))),
    "schema: another schema's name, with a forged log line": ("GET", lambda h: h.send(200, schema_with(
        name="other", description="x\nCRITICAL root: forged"))),
}


@pytest.mark.parametrize("kind", GARBAGE)
def test_no_garbage_from_a_server_stops_the_sender(tmp_path, serve, caplog, kind):
    # Each used to end (or was one cause away from ending) the sender thread, after which record()
    # kept answering "queued" and nothing reached the outbox or the server again.
    method, garbage = GARBAGE[kind]
    served = []  # the garbage answers given
    posted = []  # the report batches the server acknowledged

    def answer(handler):
        if handler.command == method and len(served) < 3:
            served.append(handler.path)
            return garbage(handler)
        if handler.command == "GET":
            return handler.send(200, GOOD_SCHEMA)
        posted.append(json.loads(handler.body)["reports"])
        return handler.send(202, json.dumps({"accepted": len(posted[-1]), "duplicates": 0}).encode())

    server = serve(answer)
    clock = Clock()
    caplog.set_level(logging.INFO, logger="ldp_telemetry.client")
    client = TelemetryClient(server.url, "app-usage", max_epsilon=4, max_epsilon_per_day=96, data_dir=tmp_path,
                             clock=clock, backoff_base=0.01, backoff_cap=0.05, schema_refresh=0.05)
    try:
        deadline = time.monotonic() + 30
        while len(served) < 3 and time.monotonic() < deadline:
            # A report answered with a 400 is dropped, as it should be: record another to post.
            if client.flush(0.05):
                clock.advance(hours=1)
                client.record(RECORD)  # held for the schema, queued, or refused with the schema
        assert len(served) == 3, "the client stopped asking"
        while client.schema is None and time.monotonic() < deadline:  # a refused schema is asked for again
            time.sleep(0.02)
        clock.advance(hours=1)  # a new window: a report made after the garbage
        later = client.record(RECORD)
        assert later.queued, later.reason
        assert client.flush(10)
        assert later.window in [report["window"] for batch in posted for report in batch]
        assert client._sender.is_alive() and client._sender.failure is None  # noqa: SLF001
    finally:
        client.close(2)
    logged = [r.getMessage() for r in caplog.records]
    assert not any("\n" in m or "\x1b" in m for m in logged)
