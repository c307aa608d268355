"""Operations and cross-cutting behaviour: /healthz, /metrics, JSON errors, the minimal dashboard."""

from __future__ import annotations

import pytest
from conftest import ADMIN, APP_USAGE, publish, sql

from ldp_telemetry.aggregator.errors import error_response
from ldp_telemetry.shared import randomize

pytestmark = pytest.mark.backends


def test_healthz(client):
    response = client.get("/healthz")
    assert (response.status_code, response.get_json()) == (200, {"status": "ok", "database": "ok"})


def test_healthz_reports_a_broken_database(app, client):
    sql(app.config["LDP_DB"], "DROP TABLE schemas")
    response = client.get("/healthz")
    assert response.status_code == 503 and response.get_json()["status"] == "error"


def metric(client, name: str) -> float:
    for line in client.get("/metrics").get_data(as_text=True).splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


def test_metrics_count_reports_batches_and_refreshes(client):
    publish(client)
    batch = [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}) for _ in range(4)]
    client.post("/api/v1/reports", json={"reports": batch + batch[:1]})
    client.post("/api/v1/reports", json={"reports": [{**batch[0], "epsilon": 9}, {"id": 1}]})
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    response = client.get("/metrics")
    assert response.status_code == 200 and response.mimetype == "text/plain"
    assert metric(client, "ldp_reports_accepted_total") == 4
    assert metric(client, "ldp_reports_duplicate_total") == 1
    assert metric(client, "ldp_reports_rejected_total") == 2
    assert metric(client, "ldp_batches_rejected_total") == 1
    assert metric(client, "ldp_batch_size_count") == 1 and metric(client, "ldp_batch_size_sum") == 5
    assert metric(client, "ldp_refresh_duration_seconds_count") == 1


def test_the_error_shape(app):
    with app.app_context():
        response = error_response(400, "bad thing", [{"index": 0, "field": "id", "message": "too short"}])
    assert response.get_json() == {"error": "bad thing",
                                   "details": [{"index": 0, "field": "id", "message": "too short"}]}


def test_405_keeps_the_allow_header(client):
    response = client.get("/api/v1/reports")
    assert response.status_code == 405 and response.headers["Allow"]
    assert set(response.get_json()) == {"error", "details"}


def test_dashboard_lists_schemas_escaped(client):
    publish(client, {**APP_USAGE, "description": "<script>alert(1)</script>"})
    page = client.get("/").get_data(as_text=True)
    assert "app-usage" in page and "&lt;script&gt;" in page and "<script>alert" not in page
    assert client.get("/schemas/app-usage").status_code == 200
    assert client.get("/schemas/nope").status_code == 404
