"""The ceiling to compare ingest with: the same HTTP path and server, no validation, no database.

gunicorn with the same sync workers, Flask, the JSON body parsed, a 202 with the same shape: what
is left of the aggregator when validation, dedupe, counters and the durable commit are taken out.
"""

from __future__ import annotations

from flask import Flask, jsonify, request


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
