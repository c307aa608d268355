"""The 202 made without Flask (aggregator/http/ingest_path.py) against the app's own answer.

Two apps on two databases of the same backend get the same requests, built by the RSGI bridge's
own environ code: one through :class:`IngestPath` (then the app, if it declines), one through the
app alone. The answers must be the same, header for header and byte for byte, and so must what
each database counted. Requests it must leave to the app (another path, method, Content-Type, a
query string, a body the one-pass reader leaves to the rules, a body cut short or too large, debug
mode) are declined, and the app's answer is then the answer; a store's refusal and a fault while
storing are handed to the app, which answers them without storing twice.
"""

from __future__ import annotations

import io
import json
import re
from types import SimpleNamespace

import pytest
from conftest import ADMIN_TOKEN, APP_USAGE, db_state, publish
from flask import url_for

from ldp_telemetry.aggregator import context
from ldp_telemetry.aggregator.http import ingest_path, rsgi
from ldp_telemetry.aggregator.http.api import REFUSED
from ldp_telemetry.aggregator.http.ingest_path import PATH, IngestPath
from ldp_telemetry.aggregator.ingest import inbox
from ldp_telemetry.aggregator.store import StoreBusy
from ldp_telemetry.shared import randomize

pytestmark = pytest.mark.backends


def reports(count: int) -> list[dict]:
    return [randomize(APP_USAGE, {"dark_mode": i % 2 == 0, "os": "linux"}) for i in range(count)]


def environ(body: bytes, *, content_type: str | None = "application/json", origin: str | None = None,
            method: str = "POST", path: str = "/api/v1/reports", query: str = "", length: int | None = None) -> dict:
    """A complete request as the bridge hands it to the app (``BufferedWSGI._environ``)."""
    pairs = [("host", "127.0.0.1:8000")] + ([("content-type", content_type)] if content_type else [])
    pairs += [("origin", origin)] if origin else []
    scope = SimpleNamespace(method=method, path=path, query_string=query, server="127.0.0.1:8000",
                            http_version="1.1", scheme="http", client="127.0.0.1:50000")
    bridge = rsgi.BufferedWSGI(lambda environ, start: [], max_body=1 << 20)
    return bridge._environ(scope, rsgi._headers(pairs), body, len(body) if length is None else length)


def by_the_app(app, env: dict) -> rsgi.Answer:
    env["wsgi.input"] = io.BytesIO(env["wsgi.input"].getvalue())
    return rsgi._call(app.wsgi_app, env)


def counted(app) -> dict[str, list[tuple]]:
    """What a database holds of the reports it was sent: every table but those holding its own keys,
    publication times and refresh marks."""
    return {table: rows for table, rows in db_state(app).items() if table not in ("ohttp_keys", "schemas", "dirty")}


def same(answer: rsgi.Answer) -> tuple:
    """An answer with its headers sorted, and a page's script nonce (new each answer) left out."""
    status, headers, body = answer
    return status, sorted((k, re.sub(r"'nonce-[^']*'", "'nonce'", v)) for k, v in headers), body


@pytest.fixture
def pair(make_app):
    """Two apps on two databases, the schema published on each; their fast paths."""
    def made(**config):
        apps = [make_app(**config), make_app(**config)]
        for app in apps:
            publish(app.test_client())
        return apps, IngestPath(apps[0])
    return made


def test_plain_batches_get_the_apps_answer_and_count_as_they_would(pair):
    (fast_app, app), fast = pair()
    batch = reports(30)
    bodies = [
        {"reports": batch[:20]},
        {"reports": batch[20:] + batch[20:23]},  # repeated in the batch
        {"reports": batch[:5] + batch[25:]},  # stored before, or waiting in the inbox
    ]
    for body in bodies:
        for content_type, origin in (("application/json", None), ("text/plain;charset=UTF-8", "https://a.example")):
            data = json.dumps(body).encode()
            answer = fast(environ(data, content_type=content_type, origin=origin))
            assert answer is not None
            assert same(answer) == same(by_the_app(app, environ(data, content_type=content_type, origin=origin)))
    assert json.loads(answer[2]) == {"accepted": 0, "duplicates": 10}
    assert counted(fast_app) == counted(app)
    assert len(counted(app)["reports"]) == 30


@pytest.mark.parametrize("origin", ["https://a.example", "https://b.example", "null", None])
def test_the_cors_headers_are_the_apps_for_a_list_of_origins(pair, origin):
    (_, app), fast = pair(LDP_CORS_ORIGINS="https://a.example")
    data = json.dumps({"reports": reports(3)}).encode()
    answer = fast(environ(data, origin=origin))
    assert answer is not None
    assert same(answer) == same(by_the_app(app, environ(data, origin=origin)))
    assert ("Vary", "Origin") in answer[1]


def reported(app) -> dict[str, float | None]:
    """What ``/metrics`` says of the reports the app was sent."""
    registry = context.metrics(app).registry
    return {name: registry.get_sample_value(name) for name in (
        "ldp_reports_accepted_total", "ldp_reports_duplicate_total", "ldp_batch_size_count", "ldp_batch_size_sum",
        "ldp_batches_rejected_total", "ldp_reports_rejected_total")}


def test_the_path_is_the_routes(pair):
    (_, app), _ = pair()
    with app.test_request_context():
        assert url_for("api.post_reports") == PATH


def test_the_metrics_are_the_apps(pair):
    (fast_app, app), fast = pair()
    batch = reports(12)
    for body in ({"reports": batch[:8]}, {"reports": batch[4:] + batch[4:6]}):
        data = json.dumps(body).encode()
        assert fast(environ(data)) is not None
        by_the_app(app, environ(data))
    assert reported(fast_app) == reported(app)
    assert reported(app)["ldp_reports_accepted_total"] == 12


def declined() -> list[tuple[str, dict]]:
    good = json.dumps({"reports": reports(3)}).encode()
    bad_window = json.dumps({"reports": [dict(r, window="1999-01-01") for r in reports(2)]}).encode()
    escaped = good.replace(b"app-usage", b"app\\u002dusage")  # the schema's name, escaped: still valid
    return [
        ("another path", dict(body=good, path="/api/v1/reportz")),
        ("another method", dict(body=good, method="PUT")),
        ("HEAD", dict(body=good, method="HEAD")),
        ("a preflight", dict(body=b"", method="OPTIONS", content_type=None, origin="https://a.example")),
        ("a query string", dict(body=good, query="x=1")),
        ("a charset the clients do not send", dict(body=good, content_type="application/json; charset=utf-8")),
        ("another spelling", dict(body=good, content_type="Application/JSON")),
        ("no Content-Type", dict(body=good, content_type=None)),
        ("a form", dict(body=good, content_type="application/x-www-form-urlencoded")),
        ("a body cut short", dict(body=good[:-5], length=len(good))),
        ("an empty body", dict(body=b"")),
        ("a report the rules refuse", dict(body=bad_window)),
        ("an escape, left to the rules", dict(body=escaped)),
        ("more reports than LDP_MAX_BATCH", dict(body=json.dumps({"reports": reports(MAX_BATCH + 1)}).encode())),
        ("a body over LDP_MAX_BODY", dict(body=json.dumps({"reports": reports(MAX_BATCH)}).encode())),
        ("not JSON", dict(body=b"{" * 50)),
    ]


MAX_BATCH = 40
MAX_BODY = 4096
DECLINED = declined()


@pytest.mark.parametrize("case", DECLINED, ids=[c[0] for c in DECLINED])
def test_what_it_declines_the_app_answers(pair, case):
    (fast_app, app), fast = pair(LDP_MAX_BATCH=MAX_BATCH, LDP_MAX_BODY=MAX_BODY)
    args = dict(case[1])
    body = args.pop("body")
    env = environ(body, **args)
    assert fast(env) is None and REFUSED not in env
    # Through the bridge's dispatch: the app's answer, the same as the other app's.
    answer = rsgi._answer(fast, fast_app.wsgi_app, environ(body, **args))
    assert same(answer) == same(by_the_app(app, environ(body, **args)))
    assert counted(fast_app) == counted(app)
    assert reported(fast_app) == reported(app)


def test_an_app_in_debug_mode_answers_itself(pair):
    """Its JSON is indented: the app's own answer, not a compact one."""
    (fast_app, _), fast = pair(DEBUG=True)
    data = json.dumps({"reports": reports(3)}).encode()
    assert fast(environ(data)) is None
    status, _, body = rsgi._answer(fast, fast_app.wsgi_app, environ(data))
    assert status == 202 and body.startswith(b"{\n")


def test_a_busy_inbox_is_handed_to_the_app_which_answers_503_without_storing(pair, monkeypatch, backend):
    if backend == "postgres":
        pytest.skip("PostgreSQL has no inbox")
    (fast_app, _), fast = pair()
    monkeypatch.setattr(inbox, "MAX_UNFOLDED", 2)
    env = environ(json.dumps({"reports": reports(3)}).encode())
    status, headers, _ = rsgi._answer(fast, fast_app.wsgi_app, env)
    assert isinstance(env[REFUSED], StoreBusy)
    assert status == 503 and "Retry-After" in dict(headers)
    assert counted(fast_app)["reports"] == []
    assert reported(fast_app)["ldp_batch_size_count"] == 0


def test_a_fault_before_storing_is_logged_and_the_app_reads_the_batch(pair, monkeypatch, caplog):
    (fast_app, _), fast = pair()

    def broken(app):
        raise RuntimeError("a bug")

    monkeypatch.setattr(ingest_path, "window_policy", broken)
    env = environ(json.dumps({"reports": reports(2)}).encode())
    status, _, body = rsgi._answer(fast, fast_app.wsgi_app, env)
    assert (status, json.loads(body)) == (202, {"accepted": 2, "duplicates": 0})
    assert "reading a batch of reports before the app failed" in caplog.text
    assert len(counted(fast_app)["reports"]) == 2


def test_a_fault_while_storing_is_answered_by_the_app_and_nothing_is_stored_twice(pair, monkeypatch):
    """After the write nothing is read or written again: the app answers the fault (500)."""
    (fast_app, _), fast = pair()
    stored = ingest_path.accept_batch

    def then_broken(app, rows, count):
        stored(app, rows, count)
        raise RuntimeError("a bug after storing")

    monkeypatch.setattr(ingest_path, "accept_batch", then_broken)
    env = environ(json.dumps({"reports": reports(4)}).encode())
    status, _, _ = rsgi._answer(fast, fast_app.wsgi_app, env)
    assert status == 500
    assert len(counted(fast_app)["reports"]) == 4
    assert reported(fast_app)["ldp_reports_accepted_total"] == 4
    assert reported(fast_app)["ldp_reports_duplicate_total"] == 0


def test_serve_answers_through_it(tmp_path, monkeypatch):
    """The bridge ``ldp-telemetry serve`` builds puts it before the app."""
    monkeypatch.setenv("LDP_DB", str(tmp_path / "served.db"))
    monkeypatch.setenv("LDP_ADMIN_TOKEN", ADMIN_TOKEN)
    monkeypatch.setenv("LDP_SCHEDULER", "false")
    bridge = rsgi.create_rsgi_app()
    assert isinstance(bridge.answer_first, IngestPath) and bridge.answer_first.app is bridge.wsgi_app
