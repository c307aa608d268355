"""The 202 made without Flask (aggregator/http/ingest_path.py) against the app's own answer.

Two apps on two databases of the same backend get the same requests, built by the RSGI bridge's
own environ code: one through :class:`IngestPath` (then the app, if it declines), one through the
app alone. The answers must be the same, header for header and byte for byte, and so must what
each database counted. Requests it must leave to the app (another path, method, Content-Type, a
query string, a body the one-pass reader leaves to the rules, a body cut short, a busy inbox) are
declined, and the app's answer is then the answer.
"""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from conftest import APP_USAGE, db_state, publish

from ldp_telemetry.aggregator.http import rsgi
from ldp_telemetry.aggregator.http.ingest_path import IngestPath
from ldp_telemetry.aggregator.ingest import inbox
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
    status, headers, body = answer
    return status, sorted(headers), body


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


def declined() -> list[tuple[str, dict]]:
    good = json.dumps({"reports": reports(3)}).encode()
    bad_window = json.dumps({"reports": [dict(r, window="1999-01-01") for r in reports(2)]}).encode()
    escaped = good.replace(b"app-usage", b"app\\u002dusage")  # the schema's name, escaped: still valid
    return [
        ("another path", dict(body=good, path="/api/v1/reportz")),
        ("another method", dict(body=good, method="PUT")),
        ("a query string", dict(body=good, query="x=1")),
        ("a charset the clients do not send", dict(body=good, content_type="application/json; charset=utf-8")),
        ("no Content-Type", dict(body=good, content_type=None)),
        ("a form", dict(body=good, content_type="application/x-www-form-urlencoded")),
        ("a body cut short", dict(body=good[:-5], length=len(good))),
        ("an empty body", dict(body=b"")),
        ("a report the rules refuse", dict(body=bad_window)),
        ("an escape, left to the rules", dict(body=escaped)),
        ("not JSON", dict(body=b"{" * 50)),
    ]


@pytest.mark.parametrize("case", declined(), ids=[c[0] for c in declined()])
def test_what_it_declines_the_app_answers(pair, case):
    (fast_app, app), fast = pair()
    args = dict(case[1])
    body = args.pop("body")
    assert fast(environ(body, **args)) is None
    # Through the bridge's dispatch: the app's answer, the same as the other app's.
    answer = rsgi._answer(fast, fast_app.wsgi_app, environ(body, **args))
    assert same(answer) == same(by_the_app(app, environ(body, **args)))
    assert counted(fast_app) == counted(app)


def test_a_busy_inbox_is_left_to_the_app_which_answers_503(pair, monkeypatch, backend):
    if backend == "postgres":
        pytest.skip("PostgreSQL has no inbox")
    (fast_app, _), fast = pair()
    monkeypatch.setattr(inbox, "MAX_UNFOLDED", 2)
    data = json.dumps({"reports": reports(3)}).encode()
    assert fast(environ(data)) is None
    status, headers, body = rsgi._answer(fast, fast_app.wsgi_app, environ(data))
    assert status == 503 and "Retry-After" in dict(headers)
    assert db_state(fast_app)["reports"] == []


def test_a_fault_before_the_app_is_logged_and_the_app_answers(pair, caplog):
    (fast_app, _), _ = pair()

    def broken(env: dict) -> rsgi.Answer | None:
        raise RuntimeError("a bug")

    data = json.dumps({"reports": reports(2)}).encode()
    status, _, body = rsgi._answer(broken, fast_app.wsgi_app, environ(data))
    assert (status, json.loads(body)) == (202, {"accepted": 2, "duplicates": 0})
    assert "answering POST /api/v1/reports before the app failed" in caplog.text

