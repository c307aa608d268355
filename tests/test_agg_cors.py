"""CORS for the JavaScript client in web pages (DESIGN.md "Browsers"): reports and schema reads
open to other origins, errors included, Retry-After exposed, the preflight answered before any
content-type or token rule, text/plain report bodies; admin and read-token routes never open."""

from __future__ import annotations

import json

import pytest
from conftest import ADMIN, APP_USAGE, publish

from ldp_telemetry.aggregator.settings import SettingsError
from ldp_telemetry.shared import randomize

PAGE = "https://app.example.org"


def report_body(derived):
    return json.dumps({"reports": [randomize(derived, {"dark_mode": True, "os": "linux"})]})


def test_the_preflight_is_204_with_methods_headers_and_max_age(client):
    response = client.options("/api/v1/reports", headers={"Origin": PAGE, "Access-Control-Request-Method": "POST",
                                                         "Access-Control-Request-Headers": "content-type"})
    assert response.status_code == 204
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "POST" in response.headers["Access-Control-Allow-Methods"]
    assert response.headers["Access-Control-Allow-Headers"] == "Content-Type"
    assert response.headers["Access-Control-Max-Age"] == "7200"
    assert client.options("/api/v1/schemas/app-usage", headers={"Origin": PAGE}).status_code == 204


def test_a_text_plain_report_body_is_accepted_and_answered_for_the_page(client):
    derived = publish(client)
    response = client.post("/api/v1/reports", data=report_body(derived),
                           headers={"Origin": PAGE, "Content-Type": "text/plain;charset=UTF-8"})
    assert response.status_code == 202, response.get_json()
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert response.headers["Access-Control-Expose-Headers"] == "Retry-After"
    other = client.post("/api/v1/reports", data=report_body(derived),
                        headers={"Origin": PAGE, "Content-Type": "text/plain;charset=latin-1"})
    assert other.status_code == 415


def test_errors_on_open_routes_carry_the_headers_too(client):
    bad = client.post("/api/v1/reports", data="{}", headers={"Origin": PAGE, "Content-Type": "text/plain"})
    assert bad.status_code == 400
    assert bad.headers["Access-Control-Allow-Origin"] == "*"
    assert bad.headers["Access-Control-Expose-Headers"] == "Retry-After"
    missing = client.get("/api/v1/schemas/no-such", headers={"Origin": PAGE})
    assert missing.status_code == 404 and missing.headers["Access-Control-Allow-Origin"] == "*"


def test_admin_and_read_routes_never_allow_another_origin(make_app):
    client = make_app(LDP_READ_TOKEN="reader-token-1234").test_client()
    publish(client)
    for method, path in (("post", "/api/v1/schemas"), ("post", "/api/v1/estimates/refresh"),
                         ("get", "/api/v1/estimates?schema=app-usage"), ("get", "/metrics"), ("get", "/")):
        response = getattr(client, method)(path, headers={"Origin": PAGE, **ADMIN}, json=APP_USAGE if method == "post" else None)
        assert "Access-Control-Allow-Origin" not in response.headers, path
        preflight = client.options(path.split("?")[0], headers={"Origin": PAGE})
        # /api/v1/schemas is also the public list (GET): its preflight allows GET only, never POST.
        assert ("Access-Control-Allow-Origin" not in preflight.headers
                or preflight.headers["Access-Control-Allow-Methods"] == "GET, OPTIONS"), path
    # Publishing from a page cannot slip through as text/plain either: admin routes take JSON only.
    text = client.post("/api/v1/schemas", data=json.dumps(APP_USAGE), headers={"Content-Type": "text/plain", **ADMIN})
    assert text.status_code == 415


def test_a_list_echoes_an_allowed_origin_with_vary_and_never_null(make_app):
    client = make_app(LDP_CORS_ORIGINS=f"{PAGE}, http://localhost:8080").test_client()
    allowed = client.get("/api/v1/schemas", headers={"Origin": PAGE})
    assert allowed.headers["Access-Control-Allow-Origin"] == PAGE and allowed.headers["Vary"] == "Origin"
    for origin in ("https://evil.example", "null"):
        other = client.get("/api/v1/schemas", headers={"Origin": origin})
        assert "Access-Control-Allow-Origin" not in other.headers and other.headers["Vary"] == "Origin"


@pytest.mark.parametrize("value", ["null", "https://a.example/path", "*, https://a.example", "ftp://x"])
def test_a_bad_origin_list_stops_start_up(make_app, value):
    with pytest.raises(SettingsError, match="LDP_CORS_ORIGINS"):
        make_app(LDP_CORS_ORIGINS=value)
