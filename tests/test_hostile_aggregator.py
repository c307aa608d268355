"""Hostile input against the aggregator: raw HTTP to a real `ldp-telemetry serve`, and edge cases of
the wire format. Every answer is a 4xx (or the documented success), never a 5xx, and a rejected
request changes nothing.
"""

from __future__ import annotations

import json
import re
import socket
from datetime import datetime, timezone

import pytest
import requests
from conftest import read, settle, ADMIN, APP_USAGE, db_state, file_state, publish, store_of

from ldp_telemetry.shared import parse_schema, randomize

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
HOURLY = {**APP_USAGE, "name": "hourly", "window": "hour"}


def exchange(port: int, data: bytes, *, half_close: bool = False, timeout: float = 10.0) -> bytes:
    """Send raw bytes, optionally end our side (a request cut off), and read one whole answer.

    Without ``half_close`` the connection stays open for the answer: the server's HTTP layer
    (hyper, under granian) drops the answer to a client that has shut its sending side, as a
    client gone, unless the request itself was left incomplete.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            head, _, body = out.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)", head)
            if _ and length and len(body) >= int(length.group(1)):
                break
    return out


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def chunked(body: bytes, size_line: bytes) -> bytes:
    return (b"POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + size_line + b"\r\n" + body + b"\r\n0\r\n\r\n")


@pytest.fixture
def live(live_server):
    assert requests.post(live_server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN).status_code == 201
    return live_server


def test_malformed_http_never_gets_a_5xx_from_a_live_server(live):
    good = json.dumps({"reports": [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"})]}).encode()
    head = b"POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
    cases = {
        # A chunk size the parser cannot read (was a 500 from gunicorn's InvalidChunkSize).
        "chunk size not hex": chunked(good, b"zz"),
        "chunk size negative": chunked(good, b"-5"),
        "chunk shorter than its size line says": chunked(good, b"%x" % (len(good) - 10)),
        "chunk longer than its data, then EOF": chunked(good, b"%x" % (len(good) + 100)),
        "chunked body cut off before the last chunk": (head + b"Transfer-Encoding: chunked\r\n\r\n"
                                                       + b"%x\r\n" % len(good) + good + b"\r\n"),
        "chunk size of 20 hex digits, then EOF": chunked(good, b"f" * 20),
        "Content-Length not a number": head + b"Content-Length: abc\r\n\r\n" + good,
        "Content-Length negative": head + b"Content-Length: -5\r\n\r\n" + good,
        "Content-Length twice": head + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n" + good,
        "Content-Length huge": head + b"Content-Length: 99999999999999999999999\r\n\r\n" + good,
        "body shorter than Content-Length, then EOF": head + b"Content-Length: %d\r\n\r\n" % (len(good) + 50) + good,
        "chunked and Content-Length": head + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + good,
        "unknown transfer coding": head + b"Transfer-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(good) + good,
        # Beyond serve's 64 KiB of headers (HEADER_BYTES).
        "header of 100,000 bytes": head + b"X-A: " + b"a" * 100_000 + b"\r\nContent-Length: %d\r\n\r\n" % len(good) + good,
        "URL of 10,000 bytes": b"GET /api/v1/estimates?schema=" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        "NUL in the request line": b"GET /api/v1/schemas/a\x00b HTTP/1.1\r\nHost: x\r\n\r\n",
        "escaped NUL in the path": b"GET /api/v1/schemas/a%00b HTTP/1.1\r\nHost: x\r\n\r\n",
        "invalid percent-escapes": b"GET /api/v1/estimates?schema=%ff%fe&since=%ED%A0%80 HTTP/1.1\r\nHost: x\r\n\r\n",
        "dashboard with invalid escapes": b"GET /schemas/%ff?version=%ff&since=%ff HTTP/1.1\r\nHost: x\r\n\r\n",
        "unknown method": b"FOO /api/v1/reports HTTP/1.1\r\nHost: x\r\n\r\n",
        "HTTP/9.9": b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
        "binary garbage": b"\x00\x01\x02\r\n\r\n",
        "HTTP/1.0 POST without a length": b"POST /api/v1/reports HTTP/1.0\r\nContent-Type: application/json\r\n\r\n" + good,
        "Content-Type with a latin-1 charset": (b"POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json; "
                                                b"charset=latin-1\r\nContent-Length: 14\r\n\r\n{\"reports\": \xe9}"),
    }
    before = file_state(live.db_path)
    answers = {name: exchange(live.port, data, half_close=name.endswith("then EOF") or "cut off" in name)
               for name, data in cases.items()}
    for name, answer in answers.items():
        assert answer.startswith(b"HTTP/1."), (name, answer[:200])
        assert 400 <= status_of(answer) < 500, (name, answer[:300])
    assert file_state(live.db_path) == before
    # Refusals of a body that could not be read speak the API's JSON error shape, with the headers
    # every answer of the app carries.
    for name in ("chunk size not hex", "body shorter than Content-Length, then EOF"):
        head, content = answers[name].split(b"\r\n\r\n", 1)
        body = json.loads(content)
        assert set(body) == {"error", "details"} and body["error"], (name, body)
        for header in (b"x-content-type-options: nosniff", b"x-frame-options: deny", b"cache-control: no-store",
                       b"content-security-policy: default-src 'none'"):
            assert header in head.lower(), (name, head)
    # The workers are all still serving.
    for _ in range(4):
        assert requests.get(live.url + "/healthz", timeout=5).status_code == 200
    # Nothing of it reached the server's log: beyond the start-up lines, which name the listening
    # address (and granian's advice on respawning workers where net.ipv4.tcp_migrate_req is off,
    # with serve's sentence on what it means), the log is empty (tests/test_agg_serve.py checks the
    # access log's lines).
    log = live.log_path.read_text().splitlines()
    start_up = ("[INFO] ", "[WARNING] Workers respawn is configured", "ldp-telemetry serve: granian warns below")
    assert log and all(line.startswith(start_up) for line in log), log
    assert not any("127.0.0.1" in line for line in log if "Listening at" not in line), log


@pytest.fixture
def loaded(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    publish(client, APP_USAGE)
    publish(client, HOURLY)
    report = randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window="2026-11-21")
    assert client.post("/api/v1/reports", json={"reports": [report]}).status_code == 202
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    return app, client


def _report(schema, window):
    return {**randomize(schema, {"dark_mode": True, "os": "linux"}, window="2026-11-21T10"
                        if schema["window"] == "hour" else "2026-11-21"), "window": window}


@pytest.mark.parametrize("schema, window", [(APP_USAGE, "9999-12-31"), (HOURLY, "9999-12-31T23"),
                                            (APP_USAGE, "0000-01-01"), (APP_USAGE, "0001-01-01"),
                                            (HOURLY, "2026-11-21T24"), (APP_USAGE, "2026-13-01"),
                                            (APP_USAGE, "2025-02-29")])
def test_windows_at_the_edges_of_the_calendar_are_a_400(loaded, schema, window):
    # The last window of year 9999 has no end a datetime can hold: it was an OverflowError, a 500.
    app, client = loaded
    before = db_state(app)
    response = client.post("/api/v1/reports", json={"reports": [_report(schema, window)]})
    assert response.status_code == 400, response.get_data(as_text=True)
    assert response.get_json()["details"][0]["field"] == "window"
    assert db_state(app) == before


def test_a_leap_day_window_is_accepted(make_app):
    app = make_app(LDP_CLOCK=lambda: datetime(2028, 2, 29, 12, tzinfo=timezone.utc))
    client = app.test_client()
    publish(client, APP_USAGE)
    report = randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window="2028-02-29")
    assert client.post("/api/v1/reports", json={"reports": [report]}).get_json() == {"accepted": 1, "duplicates": 0}


@pytest.mark.parametrize("changes", [
    {"epsilon": 1e-300},  # each attribute's share rounds e^ε to 1
    {"epsilon": 2.0, "attributes": [{"name": "a", "type": "boolean", "epsilon": 1e-320},
                                    {"name": "b", "type": "boolean", "epsilon": 2.0}]},
    {"epsilon": 1e-17, "attributes": [{"name": "c", "type": "categorical", "mechanism": "oue",
                                       "categories": ["x", "y", "z"]}]},
    # duchi's C = (e^ε + 1)/(e^ε - 1) divided by zero: a 500 at publish
    {"epsilon": 1e-300, "attributes": [{"name": "x", "type": "numeric", "range": [0, 1]}]},
    {"epsilon": 5e-324, "attributes": [{"name": "x", "type": "numeric", "range": [0, 1], "mechanism": "hm"}]},
])
def test_an_epsilon_too_small_to_carry_anything_is_refused_at_publish(loaded, changes):
    # p == q in floating point: it was published, and the next refresh divided by zero (a 500)
    # for every schema at once, since one refresh computes them all.
    app, client = loaded
    schema = {**APP_USAGE, "name": "tiny", **changes}
    with pytest.raises(ValueError, match="too small"):
        parse_schema(schema)  # the client refuses it alike
    before = db_state(app)
    response = client.post("/api/v1/schemas", json=schema, headers=ADMIN)
    assert response.status_code == 400, response.get_json()
    assert "too small" in response.get_json()["error"] and response.get_json()["details"][0]["field"].endswith("epsilon")
    assert db_state(app) == before
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200


def test_the_smallest_usable_epsilon_still_estimates(loaded):
    # two attributes at the least ε an attribute may have, 1e-4 each
    app, client = loaded
    schema = publish(client, {**APP_USAGE, "name": "small", "epsilon": 2e-4})
    assert [a["epsilon"] for a in schema["attributes"]] == [1e-4, 1e-4]
    report = randomize(schema, {"dark_mode": True, "os": "linux"}, window="2026-11-21")
    assert client.post("/api/v1/reports", json={"reports": [report]}).status_code == 202
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    assert client.get("/api/v1/estimates?schema=small").status_code == 200


@pytest.mark.parametrize("name, encode", [
    ("UTF-16", lambda text: text.encode("utf-16")),
    ("UTF-32", lambda text: text.encode("utf-32")),
    ("UTF-8-encoded lone surrogate", lambda text: text.replace('"reports"', '"reports", "\udfff": 1')
     .encode("utf-8", "surrogatepass")),
    ("latin-1", lambda text: text.replace('"reports"', '"reports", "caf\u00e9": 1').encode("latin-1")),
])
def test_a_body_that_is_not_utf8_is_a_400(loaded, name, encode):
    app, client = loaded
    text = json.dumps({"reports": [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window="2026-11-21")]})
    before = db_state(app)
    response = client.post("/api/v1/reports", data=encode(text), content_type="application/json")
    assert response.status_code == 400, response.get_data(as_text=True)
    assert response.get_json()["error"] == "the body is not valid JSON"
    assert db_state(app) == before


def test_a_utf8_body_with_a_byte_order_mark_is_still_read(loaded):
    _, client = loaded
    text = json.dumps({"reports": [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window="2026-11-21")]})
    response = client.post("/api/v1/reports", data=b"\xef\xbb\xbf" + text.encode(), content_type="application/json")
    assert response.get_json() == {"accepted": 1, "duplicates": 0}


def test_one_id_a_thousand_times_is_stored_once(loaded):
    app, client = loaded
    report = randomize(APP_USAGE, {"dark_mode": False, "os": "macos"}, window="2026-11-21")
    response = client.post("/api/v1/reports", json={"reports": [report] * 1000})
    assert response.get_json() == {"accepted": 1, "duplicates": 999}
    settle(app)
    totals = read(store_of(app), "window_counters", "app-usage", 1, ["2026-11-21"])["2026-11-21"].totals
    assert totals["dark_mode"] == 2  # the fixture's report and this one
