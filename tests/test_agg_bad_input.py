"""Bad input of every kind: a 4xx with a clear error, the documented body shape, nothing changed.

Each case runs against an app that already holds schemas, reports, counters and estimates, and
compares every table before and after.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from conftest import ADMIN, APP_USAGE, db_state, postgres_location, publish

from ldp_telemetry.shared import randomize

pytestmark = pytest.mark.backends

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
WIDE = {"name": "wide", "version": 1, "epsilon": 1.0,
        "attributes": [{"name": "page", "type": "categorical", "mechanism": "oue",
                        "categories": ["home", "search", "settings", "help"]}]}
SAMPLED = {**APP_USAGE, "name": "sampled", "split": "sample"}


def report(**changes):
    """A valid app-usage report with ``changes`` applied (``None`` removes a field)."""
    base = randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window="2026-11-21")
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def values(**changes):
    return report(values={"dark_mode": True, "os": "linux", **changes})


def wide(bits):
    return {**randomize(WIDE, {"page": "home"}, window="2026-11-21"), "values": {"page": bits}}


def batch(*reports):
    return {"json": {"reports": list(reports)}}


def raw(text: str | bytes, content_type: str = "application/json"):
    return {"data": text, "content_type": content_type}


R = "/api/v1/reports"
S = "/api/v1/schemas"
E = "/api/v1/estimates"
BAD_SCHEMA = {**APP_USAGE, "name": "other"}

CASES = [
    # -- the body of POST /api/v1/reports --
    ("malformed JSON", "POST", R, raw('{"reports": ['), 400),
    ("empty body", "POST", R, raw(""), 400),
    ("NaN", "POST", R, raw('{"reports": [NaN]}'), 400),
    ("a key given twice in the body", "POST", R, raw('{"reports": [], "reports": [' + json.dumps(report()) + "]}"), 400),
    ("a key given twice in a report", "POST", R,
     raw('{"reports": [' + json.dumps(report())[:-1] + ', "id": "another-id-of-24-chars"}]}'), 400),
    ("Infinity", "POST", R, raw('{"reports": [Infinity]}'), 400),
    ("-Infinity", "POST", R, raw('{"reports": [-Infinity]}'), 400),
    ("float overflowing to infinity", "POST", R, raw('{"reports": [1e999]}'), 400),
    ("integer of 5000 digits", "POST", R, raw('{"reports": [' + "9" * 5000 + "]}"), 400),
    ("nesting too deep", "POST", R, raw("[" * 200_000 + "]" * 200_000), 400),
    ("values nested too deep", "POST", R,
     raw(json.dumps({"reports": [report(values="@")]}).replace('"@"', "[" * 100_000 + "]" * 100_000)), 400),
    ("invalid UTF-8", "POST", R, raw(b'{"reports": ["\xff\xfe"]}'), 400),
    ("top-level list", "POST", R, raw("[]"), 400),
    ("top-level string", "POST", R, raw('"reports"'), 400),
    ("unknown top-level field", "POST", R, {"json": {"reports": [report()], "extra": 1}}, 400),
    ("reports missing", "POST", R, {"json": {}}, 400),
    ("reports not a list", "POST", R, {"json": {"reports": report()}}, 400),
    ("reports empty", "POST", R, {"json": {"reports": []}}, 400),
    ("more reports than LDP_MAX_BATCH", "POST", R, {"json": {"reports": [{}] * 1001}}, 400),
    # text/plain in UTF-8 is accepted (a browser's preflight-free post: DESIGN.md "Browsers"); another charset is not.
    ("text/plain in latin-1", "POST", R, raw(json.dumps({"reports": [report()]}), "text/plain;charset=latin-1"), 415),
    ("form-encoded", "POST", R, raw("reports=1", "application/x-www-form-urlencoded"), 415),
    ("no content type", "POST", R, {"data": json.dumps({"reports": [report()]})}, 415),
    ("body over LDP_MAX_BODY", "POST", R, raw('{"reports": ["' + "x" * (1 << 20) + '"]}'), 413),
    # -- one report --
    ("report not an object", "POST", R, batch(42), 400),
    ("id missing", "POST", R, batch(report(id=None)), 400),
    ("id null", "POST", R, batch({**report(), "id": None}), 400),
    ("id too short", "POST", R, batch(report(id="abc")), 400),
    ("id too long", "POST", R, batch(report(id="a" * 65)), 400),
    ("id with a slash", "POST", R, batch(report(id="abcdefgh/ijklmnop")), 400),
    ("id not a string", "POST", R, batch(report(id=1234567890123456789)), 400),
    ("unknown report field", "POST", R, batch(report(ip="203.0.113.9")), 400),
    ("unknown schema", "POST", R, batch(report(schema="nope")), 400),
    ("schema not a string", "POST", R, batch(report(schema=["app-usage"])), 400),
    ("unknown version", "POST", R, batch(report(version=2)), 400),
    ("version as a string", "POST", R, batch(report(version="1")), 400),
    ("version as a boolean", "POST", R, batch(report(version=True)), 400),
    ("huge version", "POST", R, batch(report(version=10**30)), 400),
    ("window malformed", "POST", R, batch(report(window="21-11-2026")), 400),
    ("hour window on a day schema", "POST", R, batch(report(window="2026-11-21T10")), 400),
    ("window not a real date", "POST", R, batch(report(window="2026-02-30")), 400),
    ("window in the future", "POST", R, batch(report(window="2026-11-23")), 400),
    ("window past retention", "POST", R, batch(report(window="2026-09-01")), 400),
    ("epsilon not the schema's", "POST", R, batch(report(epsilon=1.0)), 400),
    ("epsilon a string", "POST", R, batch(report(epsilon="2.0")), 400),
    ("epsilon a boolean", "POST", R, batch(report(epsilon=True)), 400),
    ("epsilon a huge integer", "POST", R, batch(report(epsilon=10**400)), 400),
    ("values not an object", "POST", R, batch(report(values=[True, "linux"])), 400),
    ("values null", "POST", R, batch({**report(), "values": None}), 400),
    ("attribute missing under split equal", "POST", R, batch(report(values={"dark_mode": True})), 400),
    ("unknown attribute", "POST", R, batch(values(theme="dark")), 400),
    ("boolean as 1", "POST", R, batch(values(dark_mode=1)), 400),
    ("boolean as a string", "POST", R, batch(values(dark_mode="true")), 400),
    ("unknown category", "POST", R, batch(values(os="beos")), 400),
    ("category not a string", "POST", R, batch(values(os=3)), 400),
    ("OUE vector too short", "POST", R, batch(wide([1, 0, 0])), 400),
    ("OUE vector too long", "POST", R, batch(wide([1, 0, 0, 0, 0])), 400),
    ("OUE vector of booleans", "POST", R, batch(wide([True, False, False, False])), 400),
    ("OUE bit 2", "POST", R, batch(wide([2, 0, 0, 0])), 400),
    ("OUE bit 1.0", "POST", R, batch(wide([1.0, 0, 0, 0])), 400),
    ("OUE as a category name", "POST", R, batch(wide("home")), 400),
    ("two attributes under split sample", "POST", R,
     batch({**randomize(SAMPLED, {"dark_mode": True, "os": "linux"}, window="2026-11-21"),
            "values": {"dark_mode": True, "os": "linux"}}), 400),
    ("one bad report among good ones", "POST", R, batch(report(), report(), values(os="beos")), 400),
    # -- schemas --
    ("publish without a token", "POST", S, {"json": BAD_SCHEMA}, 401),
    ("publish with a wrong token", "POST", S, {"json": BAD_SCHEMA, "headers": {"Authorization": "Bearer nope-nope"}}, 403),
    ("publish with basic auth", "POST", S, {"json": BAD_SCHEMA, "headers": {"Authorization": "Basic dGVzdA=="}}, 401),
    ("schema epsilon 0", "POST", S, {"json": {**BAD_SCHEMA, "epsilon": 0}, "headers": ADMIN}, 400),
    ("schema epsilon above 20", "POST", S, {"json": {**BAD_SCHEMA, "epsilon": 21}, "headers": ADMIN}, 400),
    ("schema name upper case", "POST", S, {"json": {**BAD_SCHEMA, "name": "Other"}, "headers": ADMIN}, 400),
    ("schema with repeated categories", "POST", S,
     {"json": {**BAD_SCHEMA, "attributes": [{"name": "os", "type": "categorical", "categories": ["a", "a"]}]},
      "headers": ADMIN}, 400),
    ("schema with unknown field", "POST", S, {"json": {**BAD_SCHEMA, "owner": "me"}, "headers": ADMIN}, 400),
    ("schema conflicting with the published one", "POST", S, {"json": {**APP_USAGE, "epsilon": 3.0}, "headers": ADMIN}, 409),
    ("schema body over LDP_MAX_BODY", "POST", S, {**raw(json.dumps({**BAD_SCHEMA, "description": "x" * (1 << 20)})),
                                                  "headers": ADMIN}, 413),
    ("schema as text/plain", "POST", S, {**raw(json.dumps(BAD_SCHEMA), "text/plain"), "headers": ADMIN}, 415),
    ("schema with a lone surrogate", "POST", S,
     {**raw('{"name": "sur", "version": 1, "epsilon": 2.0, "attributes": '
            '[{"name": "os", "type": "categorical", "categories": ["\\udfff", "b"]}]}'), "headers": ADMIN}, 400),
    ("schema NaN epsilon", "POST", S, {**raw(json.dumps(BAD_SCHEMA).replace("2.0", "NaN")), "headers": ADMIN}, 400),
    ("unknown schema name", "GET", S + "/nope", {}, 404),
    ("unknown schema version", "GET", S + "/app-usage/7", {}, 404),
    ("huge schema version", "GET", S + "/app-usage/99999999999999999999999", {}, 404),
    ("non-numeric schema version", "GET", S + "/app-usage/latest", {}, 404),
    # "²".isdigit() and "١".isdigit() are true; int() refuses the first and reads the second as 1
    ("superscript schema version", "GET", S + "/app-usage/%C2%B2", {}, 404),
    ("arabic-indic schema version", "GET", S + "/app-usage/%D9%A1", {}, 404),
    # -- estimates --
    ("estimates without schema", "GET", E, {}, 400),
    ("estimates of an unknown schema", "GET", E + "?schema=nope", {}, 404),
    ("estimates of an unknown version", "GET", E + "?schema=app-usage&version=9", {}, 404),
    ("estimates with a non-numeric version", "GET", E + "?schema=app-usage&version=one", {}, 400),
    ("estimates with a superscript version", "GET", E + "?schema=app-usage&version=%C2%B2", {}, 400),
    ("estimates with an 11-digit version", "GET", E + "?schema=app-usage&version=10000000001", {}, 400),
    ("estimates with a superscript limit", "GET", E + "?schema=app-usage&limit=%C2%B2", {}, 400),
    ("estimates with a superscript cursor rank", "GET", E + "?schema=app-usage&next=all:%C2%B2", {}, 400),
    ("estimates of an unknown attribute", "GET", E + "?schema=app-usage&attribute=theme", {}, 404),
    ("estimates since a malformed window", "GET", E + "?schema=app-usage&since=yesterday", {}, 400),
    ("estimates in XML", "GET", E + "?schema=app-usage&format=xml", {}, 400),
    ("estimates with an unknown parameter", "GET", E + "?schema=app-usage&atribute=os", {}, 400),
    ("estimates with a repeated parameter", "GET", E + "?schema=app-usage&schema=wide", {}, 400),
    ("refresh without a token", "POST", E + "/refresh", {}, 401),
    ("refresh with a wrong token", "POST", E + "/refresh", {"headers": {"Authorization": "Bearer wrong-token"}}, 403),
    # -- paths and methods --
    ("unknown API path", "GET", "/api/v1/nothing", {}, 404),
    ("PUT on reports", "PUT", R, batch(report()), 405),
    ("DELETE a schema", "DELETE", S + "/app-usage", {}, 405),
]


@pytest.fixture(scope="module")
def loaded(backend, tmp_path_factory, request):
    """An app holding three schemas, stored reports, counters and estimates."""
    from ldp_telemetry.aggregator import create_app

    location = (postgres_location(request.getfixturevalue("postgres_database")) if backend == "postgres"
                else str(tmp_path_factory.mktemp("bad") / "a.db"))
    app = create_app({"LDP_DB": location, "LDP_ADMIN_TOKEN": ADMIN["Authorization"][7:],
                      "LDP_SCHEDULER": False, "LDP_CLOCK": lambda: NOW, "TESTING": True})
    client = app.test_client()
    for schema in (APP_USAGE, WIDE, SAMPLED):
        publish(client, schema)
    assert client.post(R, json={"reports": [report() for _ in range(5)] + [wide([1, 0, 1, 0])]}).status_code == 202
    assert client.post(E + "/refresh", headers=ADMIN).status_code == 200
    return app, client


def test_there_are_at_least_forty_kinds():
    assert len({c[0] for c in CASES}) == len(CASES) >= 40


@pytest.mark.parametrize("name, method, path, kwargs, status", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_4xx_and_changes_nothing(loaded, name, method, path, kwargs, status):
    app, client = loaded
    before = db_state(app)
    response = client.open(path, method=method, **kwargs)
    assert response.status_code == status, response.get_data(as_text=True)[:300]
    body = response.get_json()
    assert set(body) == {"error", "details"}
    assert isinstance(body["error"], str) and len(body["error"]) > 10
    assert isinstance(body["details"], list)
    assert all({"field", "message"} <= set(d) for d in body["details"])
    assert db_state(app) == before


@pytest.mark.parametrize("number", ["9" * 5000, "-" + "9" * 5000])
def test_a_number_too_long_is_refused_in_a_sentence_of_ours(loaded, number):
    """Not in Python's words, which name its settings (sys.set_int_max_str_digits)."""
    _, client = loaded
    response = client.post(R, data='{"reports": [{"epsilon": ' + number + "}]}", content_type="application/json")
    assert response.status_code == 400
    assert response.get_json()["details"] == [{"field": "body", "message": f"the number {number[:40]}... has more "
                                                                           "than 4300 digits"}]


# Each request refuses a key it does not read in the same words (errors.refuse_unknown).
UNKNOWN_KEYS = [
    ("POST", R, {"json": {"reports": [report()], "extra": 1}}, "field", "reports"),
    ("POST", S + "/app-usage/1/candidates", {"json": {"attribute": "os", "candidates": [], "extra": 1},
                                             "headers": ADMIN}, "field", "attribute, candidates"),
    ("GET", S + "/app-usage/1/candidates?extra=1", {}, "query parameter", "attribute"),
    ("GET", E + "?schema=app-usage&extra=1", {}, "query parameter",
     "schema, version, attribute, since, until, limit, next, format"),
]


@pytest.mark.parametrize("method, path, kwargs, what, known", UNKNOWN_KEYS, ids=[f"{c[0]} {c[1]}" for c in UNKNOWN_KEYS])
def test_an_unknown_key_is_named_with_the_known_ones(loaded, method, path, kwargs, what, known):
    app, client = loaded
    response = client.open(path, method=method, **kwargs)
    assert response.status_code == 400
    assert response.get_json() == {"error": f"unknown {what} 'extra'; known: {known}",
                                   "details": [{"field": "extra", "message": f"unknown {what}"}]}


def test_a_read_token_guards_estimates(make_app):
    client = make_app(LDP_READ_TOKEN="reader-token-123").test_client()
    publish(client)
    path = E + "?schema=app-usage"
    assert client.get(path).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer wrong-token"}).status_code == 403
    assert client.get(path, headers={"Authorization": "Bearer reader-token-123"}).status_code == 200
    assert client.get(path, headers=ADMIN).status_code == 200
    assert client.get(S).status_code == 200  # schemas stay public: clients need them


# Any JSON at all, as a report or as the whole body: never a server error, never a change.
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=12)
REPORT_LIKE = st.fixed_dictionaries({}, optional={
    "id": st.text() | st.integers(), "schema": st.sampled_from(["app-usage", "wide", "sampled"]) | JSON,
    "version": st.integers() | JSON, "window": st.sampled_from(["2026-11-21", "2026-11-21T10"]) | st.text(),
    "epsilon": st.sampled_from([2.0, 1.0]) | JSON,
    "values": st.dictionaries(st.sampled_from(["dark_mode", "os", "page"]) | st.text(), JSON, max_size=3)})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=JSON | st.fixed_dictionaries({"reports": st.lists(REPORT_LIKE | JSON, min_size=1, max_size=3)}))
def test_no_json_body_causes_a_server_error(loaded, body):
    app, client = loaded
    before = db_state(app)
    response = client.post(R, data=json.dumps(body), content_type="application/json")
    assert response.status_code in (202, 400), response.get_data(as_text=True)[:300]
    if response.status_code == 400:
        assert db_state(app) == before
