"""The schemas API: admin publishing (201, 200 identical, 409 conflict), reading, 404s."""

from __future__ import annotations

import pytest
from conftest import ADMIN, APP_USAGE, db_state

from ldp_telemetry.shared import parse_schema

pytestmark = pytest.mark.backends


def test_publish_answers_the_derived_schema(client):
    response = client.post("/api/v1/schemas", json=APP_USAGE, headers=ADMIN)
    assert response.status_code == 201
    assert response.get_json() == parse_schema(APP_USAGE).to_dict()
    assert [a["mechanism"] for a in response.get_json()["attributes"]] == ["rr", "grr"]


def test_republishing_is_idempotent_also_in_derived_form(app, client):
    derived = client.post("/api/v1/schemas", json=APP_USAGE, headers=ADMIN).get_json()
    before = db_state(app)
    for body in (APP_USAGE, derived):
        response = client.post("/api/v1/schemas", json=body, headers=ADMIN)
        assert (response.status_code, response.get_json()) == (200, derived)
    assert db_state(app) == before


def test_other_content_under_a_published_version_is_409(client):
    client.post("/api/v1/schemas", json=APP_USAGE, headers=ADMIN)
    response = client.post("/api/v1/schemas", json={**APP_USAGE, "description": "changed"}, headers=ADMIN)
    assert response.status_code == 409
    assert "new version" in response.get_json()["error"]


def test_invalid_schema_names_the_field(client):
    bad = {**APP_USAGE, "attributes": [APP_USAGE["attributes"][0], {"name": "os", "type": "colour"}]}
    body = client.post("/api/v1/schemas", json=bad, headers=ADMIN).get_json()
    assert body["details"][0]["field"] == "attributes[1].type"
    assert body["error"].startswith("invalid schema: attributes[1].type must be")


def test_admin_token_checks(make_app):
    client = make_app(LDP_ADMIN_TOKEN=None).test_client()
    no_token = client.post("/api/v1/schemas", json=APP_USAGE)
    assert no_token.status_code == 401 and no_token.headers["WWW-Authenticate"].startswith("Bearer")
    # With no admin token configured, no token is right.
    assert client.post("/api/v1/schemas", json=APP_USAGE, headers=ADMIN).status_code == 403


def test_list_has_the_latest_version_of_each(client):
    for schema in (APP_USAGE, {**APP_USAGE, "version": 3, "epsilon": 1.0}, {**APP_USAGE, "name": "crashes"}):
        client.post("/api/v1/schemas", json=schema, headers=ADMIN)
    schemas = client.get("/api/v1/schemas").get_json()["schemas"]
    assert [(s["name"], s["version"]) for s in schemas] == [("app-usage", 3), ("crashes", 1)]


def test_get_one_schema_latest_or_by_version(client):
    client.post("/api/v1/schemas", json=APP_USAGE, headers=ADMIN)
    client.post("/api/v1/schemas", json={**APP_USAGE, "version": 2, "epsilon": 1.0}, headers=ADMIN)
    assert client.get("/api/v1/schemas/app-usage").get_json()["version"] == 2
    assert client.get("/api/v1/schemas/app-usage/1").get_json()["epsilon"] == 2.0
    missing = client.get("/api/v1/schemas/app-usage/3")
    assert missing.status_code == 404 and "version 3" in missing.get_json()["error"]


def test_schemas_list_is_empty_at_first(client):
    assert client.get("/api/v1/schemas").get_json() == {"schemas": []}
