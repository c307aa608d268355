"""The schemas API: admin publishing (201, 200 identical, 409 conflict), reading, 404s."""

from __future__ import annotations

import math

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


MEANS = {"name": "means", "version": 1, "epsilon": 8.0, "attributes": [
    {"name": "minutes", "type": "numeric", "range": [0, 120], "mechanism": "duchi", "epsilon": 2.0},
    {"name": "pages", "type": "numeric", "range": [1, 50], "mechanism": "pm", "epsilon": 2.0},
    {"name": "latency", "type": "numeric", "range": [-5, 5.5], "mechanism": "hm", "epsilon": 2.0},
    {"name": "crashes", "type": "numeric", "range": [0, 10], "mechanism": "laplace", "epsilon": 2.0},
    {"name": "slow", "type": "numeric", "range": [0, 10], "epsilon": 0.5, "mechanism": "hm"}]}


def test_a_derived_numeric_schema_served_over_http_carries_every_parameter_its_mechanism_uses(client):
    # DESIGN.md's formulas, written out: C = (e^ε + 1)/(e^ε − 1), z = e^(ε/2), C_pm = (z + 1)/(z − 1),
    # α = 1 − e^(−ε/2) above ε* ≈ 0.61 (else 0), laplace's scale 2/ε. Each attribute at ε = 2 (8 / 4)...
    schema = {**MEANS, "attributes": MEANS["attributes"][:4]}
    assert client.post("/api/v1/schemas", json=schema, headers=ADMIN).status_code == 201
    served = {a["name"]: a for a in client.get("/api/v1/schemas/means/1").get_json()["attributes"]}
    e, z = math.exp(2.0), math.exp(1.0)
    c, c_pm, alpha = (e + 1) / (e - 1), (z + 1) / (z - 1), 1 - math.exp(-1.0)
    expected = {"minutes": {"C": c}, "pages": {"z": z, "C_pm": c_pm},
                "latency": {"z": z, "C_pm": c_pm, "C": c, "alpha": alpha}, "crashes": {"scale": 1.0}}
    for name, parameters in expected.items():
        shown = {k: v for k, v in served[name].items() if k in ("C", "z", "C_pm", "alpha", "scale")}
        assert shown.keys() == parameters.keys(), name
        for key, value in parameters.items():
            assert shown[key] == pytest.approx(value, rel=1e-12), (name, key)
    # ... and at ε = 0.5, below ε* ≈ 0.61, hm is duchi: α = 0
    response = client.post("/api/v1/schemas", json={**MEANS, "version": 2, "epsilon": 8.5}, headers=ADMIN)
    assert response.status_code == 201
    slow = client.get("/api/v1/schemas/means/2").get_json()["attributes"][4]
    assert slow["alpha"] == 0.0 and slow["C"] == pytest.approx((math.exp(0.5) + 1) / (math.exp(0.5) - 1), rel=1e-12)
    # the document served beside it describes each of them
    document = client.get("/api/v1/openapi.json").get_json()
    properties = document["components"]["schemas"]["Attribute"]["properties"]
    for key, users in (("C", "duchi, hm"), ("z", "pm, hm"), ("C_pm", "pm, hm"), ("alpha", "hm"), ("scale", "laplace")):
        assert properties[key]["type"] == "number" and properties[key]["description"].endswith(f"(shown for {users})")


@pytest.mark.parametrize("epsilon, attributes, field", [
    (5e-324, [{"name": "x", "type": "numeric", "range": [0, 1], "mechanism": "duchi"}], "epsilon"),
    (1e-300, [{"name": "x", "type": "numeric", "range": [0, 1]}], "epsilon"),
    (1.5e-4, [{"name": "x", "type": "numeric", "range": [0, 1]}, {"name": "y", "type": "boolean"}],
     "attributes[0].epsilon"),
])
def test_a_numeric_attribute_at_a_tiny_epsilon_is_a_400_naming_the_field(app, client, epsilon, attributes, field):
    # 1e-300 was a 500: ZeroDivisionError in duchi's C = (e^ε + 1)/(e^ε − 1) once e^ε rounds to 1
    before = db_state(app)
    response = client.post("/api/v1/schemas", json={"name": "tiny", "version": 1, "epsilon": epsilon,
                                                     "attributes": attributes}, headers=ADMIN)
    assert response.status_code == 400, response.get_json()
    body = response.get_json()
    assert body["details"][0]["field"] == field and "too small" in body["error"] and "0.0001" in body["error"]
    assert db_state(app) == before
