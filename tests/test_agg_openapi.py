"""The OpenAPI document: it covers every route, and schemathesis finds no server error with it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import requests
from conftest import ADMIN, APP_USAGE


def test_every_api_route_is_documented(app, client):
    document = client.get("/api/v1/openapi.json").get_json()
    assert document["openapi"].startswith("3.")
    documented = {(path, method.upper()) for path, ops in document["paths"].items() for method in ops}
    routes = {(re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule), method)
              for rule in app.url_map.iter_rules() if rule.endpoint.split(".")[0] in ("api", "ops")
              for method in rule.methods - {"HEAD", "OPTIONS"}}
    assert routes == documented


def test_schemathesis_finds_no_server_error(live_server, tmp_path: Path):
    assert requests.post(live_server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN).status_code == 201
    schemathesis = Path(sys.executable).with_name("schemathesis")
    # Bounded: 25 examples per operation and phase, a fixed seed, no example database.
    # positive_data_acceptance is left out on purpose: the API validates more than JSON Schema
    # can say (real dates, epsilon equal to the schema's, published names), so schema-valid
    # requests are rightly refused with 400.
    result = subprocess.run(
        [str(schemathesis), "run", live_server.url + "/api/v1/openapi.json", "--no-color",
         "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
         "--max-examples", "25", "--seed", "2017", "--generation-database", "none",
         "--header", f"Authorization: Bearer {live_server.admin_token}", "--request-timeout", "20"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env={**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks", "PYTHONPATH": str(Path(__file__).parent)})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
