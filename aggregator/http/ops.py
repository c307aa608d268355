"""Operations endpoints: ``/healthz`` (liveness and a database check) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from .. import context
from ..auth import require_reader
from ..store import StoreError

bp = Blueprint("ops", __name__)


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    try:
        context.store().check()
    except StoreError as exc:
        current_app.logger.error("health check failed: %s", exc)
        # The details (file paths) go to the operator's log, not to anyone who asks.
        return jsonify({"status": "error", "database": "unavailable"}), 503
    return jsonify({"status": "ok", "database": "ok"}), 200


@bp.get("/metrics")
def metrics() -> Response:
    require_reader()  # what arrives and how often says something about the devices: not for anyone
    body, content_type = context.metrics().exposition()
    return Response(body, content_type=content_type)
