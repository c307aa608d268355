"""Helpers for the client tests: transports, a settable clock, a closed port.

- :class:`FlaskTransport` carries the client's requests into the real aggregator's
  ``app.test_client()`` (no sockets, nothing patched).
- :class:`ScriptedTransport` is a stand-in for the *network*, not for our server: it answers
  with scripted statuses so the retry policy can be driven through every case. End-to-end tests
  never use it.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

from ldp_telemetry.client import Response

BOOL_AND_OS: dict[str, Any] = {
    "name": "app-usage", "version": 1, "epsilon": 2.0, "window": "hour",
    "attributes": [
        {"name": "dark_mode", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
    ],
}


def closed_endpoint() -> str:
    """An http URL on 127.0.0.1 where nothing listens: every request is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class Clock:
    """A clock the test moves: ``clock.now`` is what the client reads."""

    def __init__(self, now: datetime | None = None):
        self.now = now or datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class FlaskTransport:
    """Posts into a Flask test client; ``down = True`` makes every request fail like a dead network."""

    def __init__(self, test_client: Any):
        self.test_client = test_client
        self.down = False
        self.posts = 0
        self.batch_sizes: list[int] = []  # of every batch posted

    def post_json(self, url: str, body: Any, timeout: float) -> Response:
        self._check()
        self.posts += 1
        self.batch_sizes.append(len(body["reports"]))
        return _response(self.test_client.post(urlsplit(url).path, json=body))

    def get_json(self, url: str, timeout: float) -> Response:
        self._check()
        return _response(self.test_client.get(urlsplit(url).path))

    def close(self) -> None:
        pass  # the test client holds no connection

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("the test network is down")


def _response(reply: Any) -> Response:
    return Response(reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, reply.get_json(silent=True))


class ScriptedTransport:
    """Answers each post with the next scripted item (a Response, or an exception to raise),
    then 202 for ever. Records every posted batch."""

    def __init__(self, *script: Response | Exception):
        self.script = list(script)
        self.batches: list[list[dict[str, Any]]] = []

    def post_json(self, url: str, body: Any, timeout: float) -> Response:
        self.batches.append(body["reports"])
        item = self.script.pop(0) if self.script else Response(202, {}, {"accepted": len(body["reports"]), "duplicates": 0})
        if isinstance(item, Exception):
            raise item
        return item

    def get_json(self, url: str, timeout: float) -> Response:
        raise ConnectionError("no schema server in a scripted test")

    def close(self) -> None:
        pass  # no connection to close


class DeadNetwork:
    """Every request fails, as with the cable pulled."""

    def post_json(self, url: str, body: Any, timeout: float) -> Response:
        raise ConnectionError("the network is down")

    def get_json(self, url: str, timeout: float) -> Response:
        raise ConnectionError("the network is down")

    def close(self) -> None:
        pass  # no connection to close


def hours_ago(clock: Clock, hours: int) -> None:
    """Set ``clock`` to ``hours`` hours before the real now."""
    clock.now = datetime.now(timezone.utc) - timedelta(hours=hours)


def windows_spent(client: Any) -> dict[str, dict[str, float]]:
    """``{schema: {window: ε}}`` from ``client.privacy_spent()`` (which groups windows by UTC day)."""
    return {schema: {w: e for day in days.values() for w, e in day["windows"].items()}
            for schema, days in client.privacy_spent().items()}
