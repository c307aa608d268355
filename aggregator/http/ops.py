"""Operations endpoints: ``/healthz`` (liveness, and whether the database can be read and written)
and ``/metrics`` (Prometheus).

``/healthz`` answers 200 ``{"status": "ok", "database": "ok", "writes": "ok"}``, or 503 with
``"status": "error"``, what failed (``database``: ``"unavailable"``; or ``writes``: ``"locked"``,
``"failing"``) and a ``problem`` sentence. A server that acknowledges reports it cannot count is
not healthy: a load balancer should send them elsewhere, a monitor should wake someone.
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from .. import context
from ..auth import require_reader
from ..store import StoreBusy, StoreError

bp = Blueprint("ops", __name__)

# Seconds /healthz waits for the database's write lock: the answer stays quick (a load balancer's
# check times out in a few seconds), well inside the store's own 10 s wait, and a lock held longer
# than this by someone else is what it reports.
WRITE_PROBE_SECONDS = 2.0


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    store = context.store()
    try:
        store.check()
    except StoreError as exc:
        return _unhealthy(exc, database="unavailable", writes="unknown", problem="the database cannot be read")
    try:
        store.check_writable(WRITE_PROBE_SECONDS)
    except StoreBusy as exc:
        return _unhealthy(exc, database="ok", writes="locked", problem=(
            f"another process held the database's write lock for over {WRITE_PROBE_SECONDS:g} s"))
    except StoreError as exc:
        failing: StoreError | str | None = exc
    else:
        failing = context.writer().failing()  # the lock is free, and yet folds fail (a full disk...)
    if failing is not None:
        return _unhealthy(failing, database="ok", writes="failing", problem=(
            "the database refuses writes, or counting the acknowledged reports keeps failing"))
    return jsonify({"status": "ok", "database": "ok", "writes": "ok"}), 200


def _unhealthy(cause: StoreError | str, **what: str) -> tuple[Response, int]:
    # The details (file paths, the driver's words) go to the operator's log, not to anyone who asks.
    current_app.logger.error("health check failed: %s", cause)
    return jsonify({"status": "error", **what}), 503


@bp.get("/metrics")
def metrics() -> Response:
    require_reader()  # what arrives and how often says something about the devices: not for anyone
    body, content_type = context.metrics().exposition()
    return Response(body, content_type=content_type)
