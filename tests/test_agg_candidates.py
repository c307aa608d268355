"""GET /api/v1/schemas/<name>/<version>/candidates: a string attribute's candidates, their source,
fingerprint, collisions and when they were added."""

from __future__ import annotations

import hashlib

import pytest
from conftest import ADMIN, publish

pytestmark = pytest.mark.backends

# Two candidates whose fingerprints are equal (found by a search over site-<i>.example).
COLLIDING = ["site-2948.example", "site-30186.example"]
SCHEMA = {"name": "homes", "version": 1, "epsilon": 2.0, "attributes": [
    {"name": "home", "type": "string", "candidates": ["example.org", "cafe\u0301.fr", *COLLIDING]},
    {"name": "flag", "type": "boolean"}]}


def x(s: str) -> int:
    return int.from_bytes(hashlib.sha256(b"ldp-telemetry/string/v1\x00" + s.encode()).digest()[:8], "big") % (2**31 - 1)


def test_the_candidates_are_listed_with_fingerprints_and_collisions(client):
    publish(client, SCHEMA)
    answer = client.get("/api/v1/schemas/homes/1/candidates")
    assert answer.status_code == 200
    body = answer.get_json()
    assert (body["schema"], body["version"]) == ("homes", 1)
    rows = body["candidates"]
    assert [(r["attribute"], r["value"], r["source"]) for r in rows] == [
        ("home", v, "listed") for v in ["example.org", "caf\u00e9.fr", *COLLIDING]]
    assert [r["fingerprint"] for r in rows] == [x(r["value"]) for r in rows]
    assert x(COLLIDING[0]) == x(COLLIDING[1])
    assert [r["collides_with"] for r in rows] == [[], [], [COLLIDING[1]], [COLLIDING[0]]]
    assert len({r["added_at"] for r in rows}) == 1 and rows[0]["added_at"].endswith("Z")
    assert client.get("/api/v1/schemas/homes/1/candidates?attribute=flag").get_json()["candidates"] == []
    assert client.get("/api/v1/schemas/homes/1/candidates?attribute=home").get_json()["candidates"] == rows


@pytest.mark.parametrize("path, status, field", [
    ("/api/v1/schemas/homes/1/candidates?attribute=nope", 404, "attribute"),
    ("/api/v1/schemas/homes/2/candidates", 404, "version"),
    ("/api/v1/schemas/nope/1/candidates", 404, "version"),
    ("/api/v1/schemas/homes/1/candidates?limit=5", 400, "limit"),
])
def test_a_bad_candidates_request_names_the_field(client, path, status, field):
    publish(client, SCHEMA)
    answer = client.get(path)
    assert answer.status_code == status
    assert answer.get_json()["details"][0]["field"] == field


def test_the_read_token_guards_the_candidates(make_app):
    client = make_app(LDP_READ_TOKEN="r" * 32).test_client()
    publish(client, SCHEMA)
    assert client.get("/api/v1/schemas/homes/1/candidates").status_code == 401
    answer = client.get("/api/v1/schemas/homes/1/candidates", headers={"Authorization": "Bearer " + "r" * 32})
    assert answer.status_code == 200 and "Access-Control-Allow-Origin" not in answer.headers
