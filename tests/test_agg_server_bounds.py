"""What a stranger can make ``ldp-telemetry serve`` hold or write (issue 21, items 4, 5, 6, 9, 10, 11).

Real servers on 127.0.0.1 and raw sockets where the point is the HTTP path; the RSGI bridge
directly where the point is what it does with one request (headers, body framing).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
import requests
from conftest import ADMIN, APP_USAGE, LiveServer
from test_hostile_aggregator import chunked, exchange, status_of

from ldp_telemetry.aggregator.http.logs import EscapingFormatter
from ldp_telemetry.aggregator.http.rsgi import HEADER_BYTES, BufferedWSGI
from ldp_telemetry.aggregator.http.server import HEADER_READ_MS
from ldp_telemetry.shared import randomize

READ_TOKEN = "read-token-0451"
# One attribute of 1,024 categories in hourly windows: 1,024 estimate rows per window.
WIDE = {"name": "wide", "version": 1, "epsilon": 2.0, "window": "hour",
        "attributes": [{"name": "pick", "type": "categorical", "categories": [f"c{i:04d}" for i in range(1024)]}]}


def start(tmp_path, name: str, **env: str) -> LiveServer:
    server = LiveServer(tmp_path / f"{name}.db", env=env, log_path=tmp_path / f"{name}.log")
    server.start()
    return server


def load_wide(url: str, windows: int) -> int:
    """Publish :data:`WIDE` with one report in each of the last ``windows`` hours, refreshed; the
    number of estimate rows."""
    assert requests.post(url + "/api/v1/schemas", json=WIDE, headers=ADMIN, timeout=30).status_code == 201
    now = datetime.now(timezone.utc) - timedelta(hours=1)
    reports = [randomize(WIDE, {"pick": "c0001"}, window=now - timedelta(hours=h)) for h in range(windows)]
    for i in range(0, len(reports), 32):  # a batch spans at most 32 windows
        response = requests.post(url + "/api/v1/reports", json={"reports": reports[i:i + 32]}, timeout=30)
        assert response.status_code == 202, response.text
    assert requests.post(url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=120).status_code == 200
    return (windows + 1) * 1024  # every window and the rollup


# -- item 4: connections that never send a byte ------------------------------------------------

def test_silent_connections_stop_nobody_and_are_closed(tmp_path):
    # 1,100 connections that send nothing: beyond granian's default of 1,024 connections between
    # the workers, they stopped the whole server, and none was ever closed.
    server = start(tmp_path, "silent")
    silent = []
    try:
        for _ in range(1100):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            silent.append(s)
        opened = time.monotonic()
        for _ in range(5):
            assert requests.get(server.url + "/healthz", timeout=2).status_code == 200
        # Each silent one is closed by the server once its time to send headers is over.
        deadline = opened + HEADER_READ_MS / 1000 + 10
        open_ones = list(silent)
        while open_ones and time.monotonic() < deadline:
            time.sleep(0.5)
            still = []
            for s in open_ones:
                s.setblocking(False)
                try:
                    if s.recv(1) != b"":
                        pytest.fail("a silent connection got an answer")
                except BlockingIOError:
                    still.append(s)
                except OSError:
                    pass
            open_ones = still
        assert not open_ones, f"{len(open_ones)} of {len(silent)} silent connections still open"
        assert requests.get(server.url + "/healthz", timeout=2).status_code == 200
    finally:
        for s in silent:
            s.close()
        server.stop()


# -- item 5: HTTP/2 cleartext, and headers ---------------------------------------------------------

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # and an empty SETTINGS


def test_http2_cleartext_is_not_served(tmp_path):
    server = start(tmp_path, "h2c")
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(H2_PREFACE)
            answer = b""
            try:
                while chunk := s.recv(4096):
                    answer += chunk
            except (ConnectionResetError, socket.timeout):
                pass
        # An HTTP/2 server answers with its SETTINGS frame (type 4); HTTP/1.1 refuses the line.
        assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer[:40]
        assert requests.get(server.url + "/healthz", timeout=5).status_code == 200
    finally:
        server.stop()


class FakeProto:
    """What granian hands the bridge for one request: its body, and where the answer goes."""

    def __init__(self, body: bytes = b"", chunks: list[bytes] | None = None):
        self.body, self.chunks = body, chunks
        self.answer: tuple[int, list, bytes] | None = None

    async def __call__(self) -> bytes:
        return self.body

    def __aiter__(self):
        async def chunks():
            for chunk in [*(self.chunks or []), b""]:  # granian ends a body with an empty chunk
                yield chunk
        return chunks()

    def response_bytes(self, status, headers, body):
        self.answer = (status, headers, body)


class FakeHeaders:
    def __init__(self, pairs):
        self.pairs = pairs

    def items(self):
        return self.pairs

    def get(self, name, default=None):
        return next((value for key, value in self.pairs if key == name), default)


def run_bridge(pairs, proto, max_body=4096):
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        seen["body"] = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    scope = SimpleNamespace(proto="http", headers=FakeHeaders(pairs), method="POST", path="/x", query_string="",
                            server="127.0.0.1:1", client="127.0.0.1:2", scheme="http", http_version="1.1")
    bridge = BufferedWSGI(app, max_body=max_body, threads=1)
    try:
        asyncio.run(bridge.__rsgi__(scope, proto))
    finally:
        bridge.executor.shutdown()
        getattr(bridge, "heavy_executor", bridge.executor).shutdown()
    return proto.answer, seen


def test_repeated_headers_are_joined_and_bounded_like_http1():
    answer, environ = run_bridge([("x-a", "1"), ("content-type", "text/plain"), ("x-a", "2")], FakeProto())
    assert answer[0] == 200 and environ["HTTP_X_A"] == "1,2" and environ["CONTENT_TYPE"] == "text/plain"
    # 8,000 copies of a 1 KB header (what HTTP/2's compression fits in 9 KB): 431 before the app runs,
    # as HTTP/1.1 refuses more than HEADER_BYTES of headers.
    answer, environ = run_bridge([("x-a", "v" * 1000)] * 8000, FakeProto())
    assert answer[0] == 431 and not environ
    answer, environ = run_bridge([("x-a", "v" * 1000)] * (HEADER_BYTES // 1010), FakeProto())
    assert answer[0] == 200 and environ["HTTP_X_A"].count(",") == HEADER_BYTES // 1010 - 1


# -- item 11: chunked bodies ----------------------------------------------------------------------------

def test_a_chunked_body_reaches_the_app_whole_and_terminated():
    answer, environ = run_bridge([("transfer-encoding", "chunked")], FakeProto(chunks=[b"ab", b"cd"]))
    assert answer[0] == 200
    assert environ["body"] == b"abcd" and environ["CONTENT_LENGTH"] == "4"
    assert environ["wsgi.input_terminated"] is True and "HTTP_TRANSFER_ENCODING" not in environ
    # granian marks a broken body (cut off, a bad chunk) by an empty chunk before the last one.
    answer, environ = run_bridge([("transfer-encoding", "chunked")], FakeProto(chunks=[b"ab", b""]))
    assert answer[0] == 400 and not environ
    # Past the limit the bridge stops one byte beyond it; the app's own limit refuses it.
    answer, environ = run_bridge([("transfer-encoding", "chunked")], FakeProto(chunks=[b"x" * 3000] * 5))
    assert len(environ["body"]) == 4097 and environ["CONTENT_LENGTH"] == "4097"
    assert ("Connection", "close") in answer[1]


def test_chunked_reports_are_accepted_and_bounded(tmp_path):
    server = start(tmp_path, "chunked", LDP_MAX_BODY="4096")
    try:
        assert requests.post(server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN, timeout=10).status_code == 201
        good = json.dumps({"reports": [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"})]}).encode()
        answer = exchange(server.port, chunked(good, b"%x" % len(good)))
        assert status_of(answer) == 202, answer[:300]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"accepted": 1, "duplicates": 0}
        # From a client library: requests sends a generator's chunks as they come.
        more = json.dumps({"reports": [randomize(APP_USAGE, {"dark_mode": False, "os": "macos"})]}).encode()
        response = requests.post(server.url + "/api/v1/reports", data=iter([more[:9], more[9:]]),
                                 headers={"Content-Type": "application/json"}, timeout=10)
        assert response.status_code == 202 and response.json()["accepted"] == 1, response.text
        # One byte past LDP_MAX_BODY, chunked: 413 in the API's words, nothing stored.
        big = json.dumps({"reports": [], "pad": "x" * (4097 - 26)}).encode()
        assert len(big) == 4097
        answer = exchange(server.port, chunked(big, b"%x" % len(big)))
        assert status_of(answer) == 413, answer[:300]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        metrics = requests.get(server.url + "/metrics", timeout=10).text
        assert "ldp_reports_accepted_total 2.0" in metrics
    finally:
        server.stop()


# -- item 9: the read token's redirect -------------------------------------------------------------

def test_the_token_redirect_of_any_path_is_an_answer(tmp_path):
    server = start(tmp_path, "redirect", LDP_READ_TOKEN=READ_TOKEN)
    try:
        for path, location in [("/schemas/a%0d%0aSet-Cookie:%20x=1", "/schemas/a%0D%0ASet-Cookie:%20x=1"),
                               ("/schemas/caf%C3%A9%22%3C%00", "/schemas/caf%C3%A9%22%3C%00"),
                               ("/", "/")]:
            response = requests.get(f"{server.url}{path}?token={READ_TOKEN}&since=2026", allow_redirects=False,
                                    timeout=10)
            assert response.status_code == 302, (path, response.status_code, response.text[:200])
            assert response.headers["Location"] == location + "?since=2026", response.headers
            assert "x=1" not in response.headers.get("Set-Cookie", "")
    finally:
        server.stop()


# -- item 10: log lines ------------------------------------------------------------------------------

FORGED = '"POST /api/v1/schemas HTTP/1.1" 201 0.1ms'


def test_no_request_writes_a_line_of_its_choosing_into_the_log(tmp_path):
    server = LiveServer(tmp_path / "logs.db", log_path=tmp_path / "logs.log")
    server.command = [sys.executable, "-m", "ldp_telemetry.tools.cli", "serve", "--host", "127.0.0.1",
                      "--port", "{port}", "--workers", "2", "--db", str(server.db_path), "--access-log"]
    server.start()
    try:
        for raw in (b"GET /api/v1/x%0a%22POST%20/api/v1/schemas%20HTTP/1.1%22%20201%200.1ms HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /api/v1/x%0d%0a%22POST%20/api/v1/schemas%20HTTP/1.1%22%20201%200.1ms HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /api/v1/nul%00here HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /api/v1/sep%E2%80%A8x%C2%85y%ff HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /schemas/%0a%22POST HTTP/1.1\r\nHost: x\r\n\r\n"):
            answer = exchange(server.port, raw)
            assert 400 <= status_of(answer) < 500, answer[:200]
    finally:
        server.stop()
    log = server.log_path.read_bytes()
    assert b"\x00" not in log and b"\r" not in log and "\u2028".encode() not in log
    lines = log.decode("utf-8").split("\n")
    assert FORGED not in lines and not any(line.startswith('"POST') for line in lines), lines
    requests_lines = [line for line in lines if line.startswith('"') and "/healthz" not in line]
    assert len(requests_lines) == 5, lines
    for line in requests_lines:  # one quoted request line: every quote inside it escaped
        assert re.fullmatch(r'"GET /(?:[^"\\\x00-\x1f]|\\.)* HTTP/1\.1" 404 \d+\.\dms', line), line
    assert any("/api/v1/x\\x0a\\x22POST" in line for line in requests_lines), requests_lines


def test_the_escaping_formatter_keeps_each_record_one_line():
    formatter = EscapingFormatter("[%(levelname)s] %(message)s")

    def record(msg, args, exc_info=None):
        return logging.LogRecord("t", logging.ERROR, __file__, 1, msg, args, exc_info)

    assert (formatter.format(record("unexpected error on %s %s", ("GET", '/x\n[ERROR] "y"\\\x00\udcff')))
            == '[ERROR] unexpected error on GET /x\\x0a[ERROR] \\x22y\\x22\\x5c\\x00\\udcff')
    assert formatter.format(record('"%(path)s" %(status)d', {"path": '/a"\r\n', "status": 404})) == \
        '[ERROR] "/a\\x22\\x0d\\x0a" 404'
    assert formatter.format(record("built beforehand: /a\n[INFO] b", ())) == "[ERROR] built beforehand: /a\\x0a[INFO] b"
    try:
        raise ValueError("bad\n[ERROR] forged")
    except ValueError:
        text = formatter.format(record("boom", (), sys.exc_info()))
    assert all(line.startswith(("[ERROR] boom", "  ")) for line in text.split("\n")), text


# -- item 6: what an anonymous read can make a worker hold --------------------------------------------

def test_an_anonymous_page_of_estimates_is_bounded_and_continues(tmp_path):
    server = start(tmp_path, "pages")
    try:
        rows = load_wide(server.url, 12)
        url = server.url + "/api/v1/estimates?schema=wide&limit=100000"
        whole = requests.get(url, headers=ADMIN, timeout=60)
        assert len(whole.json()["estimates"]) == rows and whole.json()["next"] is None
        first = requests.get(url, timeout=60)
        assert first.status_code == 200 and len(first.content) < 3 * 2**20, len(first.content)
        page = first.json()
        assert len(page["estimates"]) == 10_000 and page["next"]
        second = requests.get(url + "&next=" + page["next"], timeout=60).json()
        assert second["next"] is None
        assert page["estimates"] + second["estimates"] == whole.json()["estimates"]
    finally:
        server.stop()


def test_large_reads_queue_in_a_lane_of_their_own():
    # 30 reads of the largest page at once took every request thread of a worker, and health
    # checks waited behind them for more than a second.
    release = threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/big":
            release.wait(10)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["PATH_INFO"].encode()]

    def scope(path):
        return SimpleNamespace(proto="http", headers=FakeHeaders([]), method="GET", path=path, query_string="",
                               server="127.0.0.1:1", client="127.0.0.1:2", scheme="http", http_version="1.1")

    bridge = BufferedWSGI(app, max_body=4096, threads=2, heavy=lambda method, path: path == "/big", heavy_threads=1)

    async def burst():
        big = [FakeProto() for _ in range(5)]
        waiting = [asyncio.create_task(bridge.__rsgi__(scope("/big"), proto)) for proto in big]
        await asyncio.sleep(0.1)
        health = FakeProto()
        await asyncio.wait_for(bridge.__rsgi__(scope("/healthz"), health), 5)
        assert health.answer[2] == b"/healthz" and not any(proto.answer for proto in big)
        release.set()
        await asyncio.gather(*waiting)
        assert all(proto.answer[2] == b"/big" for proto in big)

    try:
        asyncio.run(burst())
    finally:
        release.set()
        bridge.executor.shutdown()
        bridge.heavy_executor.shutdown()
