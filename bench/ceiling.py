"""The ceiling to compare ingest with: the same HTTP path and server, no validation, no database.

The same server and workers, Flask, the JSON body parsed, a 202 with the same shape: what is
left of the aggregator when validation, dedupe, counters and the durable commit are taken out.
:func:`create_app` is the WSGI app (gunicorn); :func:`create_rsgi_app` puts it behind the same
body-buffering bridge ``ldp-telemetry serve`` uses on granian.
"""

from __future__ import annotations

from flask import Flask, jsonify, request

from ldp_telemetry.aggregator.http.rsgi import BufferedWSGI
from ldp_telemetry.aggregator.settings import BY_NAME


def create_app() -> Flask:
    app = Flask(__name__)

    @app.post("/api/v1/reports")
    def post_reports():  # type: ignore[no-untyped-def]
        body = request.get_json()
        return jsonify(accepted=len(body["reports"]), duplicates=0), 202

    @app.get("/healthz")
    def healthz():  # type: ignore[no-untyped-def]
        return {"status": "ok"}

    return app


def create_rsgi_app() -> BufferedWSGI:
    return BufferedWSGI(create_app(), max_body=BY_NAME["LDP_MAX_BODY"].default)
