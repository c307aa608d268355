"""Every response's headers (no caching, no framing, no sniffing, a nonce for the one inline
script) and /metrics behind the read token."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from conftest import ADMIN, APP_USAGE, publish

from ldp_telemetry.aggregator.estimation import refresh
from ldp_telemetry.shared import randomize


def test_every_answer_is_uncached_and_unframeable(client):
    publish(client)
    for path in ("/", "/schemas/app-usage", "/api/v1/schemas", "/api/v1/estimates?schema=app-usage", "/healthz",
                 "/metrics", "/no-such-page", "/static/dashboard.css"):
        headers = client.get(path).headers
        assert headers["Cache-Control"] == "no-store", path
        assert headers["X-Content-Type-Options"] == "nosniff" and headers["X-Frame-Options"] == "DENY", path
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"], path


def test_the_inline_script_runs_under_this_responses_nonce_only(client):
    publish(client)
    seen = set()
    for _ in range(2):
        response = client.get("/schemas/app-usage")
        policy = response.headers["Content-Security-Policy"]
        nonce = re.search(r"script-src 'nonce-([^']+)'", policy).group(1)
        assert f'<script nonce="{nonce}">' in response.get_data(as_text=True)
        assert "unsafe-inline" not in policy
        seen.add(nonce)
    assert len(seen) == 2  # a fresh nonce per response


def test_metrics_need_the_read_token_when_one_is_set(make_app):
    client = make_app(LDP_READ_TOKEN="reader-token-1234").test_client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong-token-1234"}).status_code == 403
    ok = client.get("/metrics", headers={"Authorization": "Bearer reader-token-1234"})
    assert ok.status_code == 200 and b"ldp_reports_accepted" in ok.data
    assert client.get("/metrics", headers=ADMIN).status_code == 200
    assert client.get("/healthz").status_code == 200  # liveness stays open for the load balancer


def test_a_schema_page_is_computed_once_per_refresh(make_app):
    app = make_app(LDP_CLOCK=lambda: datetime(2026, 11, 21, 12, tzinfo=timezone.utc))
    client = app.test_client()
    publish(client)

    def one_report() -> None:
        report = randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window="2026-11-21")
        assert client.post("/api/v1/reports", json={"reports": [report]}).status_code == 202

    def view():
        client.get("/schemas/app-usage")
        (generation, made), = app.extensions["ldp"]["pages"]._views.values()
        return generation, made

    one_report()
    refresh.refresh(app)
    first = view()
    assert view()[1] is first[1]  # asked again: the same view, not read again
    one_report()
    assert view()[1] is first[1]  # a report alone does not change the estimates
    refresh.refresh(app)
    again = view()
    assert again[0] > first[0] and again[1] is not first[1]  # made anew after the refresh
