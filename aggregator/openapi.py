"""The OpenAPI 3 document of the HTTP API (served at ``/api/v1/openapi.json``)."""

from __future__ import annotations

from typing import Any


def openapi_document() -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "ldp-telemetry aggregator", "version": "1"}, "paths": {}}
