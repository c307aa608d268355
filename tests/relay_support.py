"""Helpers for the relay's tests: real encapsulated requests, a relay process, and a peer that
records the bytes the relay sends.

:class:`Upstream` is a real HTTP server on 127.0.0.1 standing where the aggregator stands: it
serves a key list and answers each batch with the statuses a test scripts, and keeps every batch's
exact bytes, which is what the relay's promises (same bytes after a restart, nothing before
--min-batch, stop on 401) are about and what no aggregator shows.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from ldp_telemetry.shared import ohttp
from ldp_telemetry.tools.process import ServerProcess

TOKEN = "relay-token-0123456789"
PRIVATE_KEY = bytes(range(32))
KEY_ID = 7


def key_config(key_id: int = KEY_ID) -> ohttp.KeyConfig:
    return ohttp.KeyConfig(key_id, ohttp.public_key_of(PRIVATE_KEY))


def encapsulated(content: bytes = b'{"reports":[]}', *, units: int = 1, config: ohttp.KeyConfig | None = None) -> bytes:
    """A real encapsulated request of 55 + ``units`` * 1,024 bytes."""
    message = ohttp.bhttp_request(content, units * ohttp.PAD_UNIT)
    return ohttp.encapsulate(config or key_config(), message)


class Upstream:
    """An HTTP server standing for the aggregator: keys, an empty schema list, and batches answered
    from ``statuses`` (then 200), each batch's bytes kept in ``batches``."""

    def __init__(self, keys: bytes | None = None) -> None:
        self.keys = ohttp.encode_key_configs([key_config()]) if keys is None else keys
        self.batches: list[bytes] = []
        self.authorizations: list[str | None] = []
        self.statuses: list[tuple[int, dict[str, str]]] = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/api/v1/ohttp-keys":
                    self._send(200, ohttp.KEYS_MEDIA_TYPE, upstream.keys)
                elif self.path == "/api/v1/schemas":
                    self._send(200, "application/json", b'{"schemas": []}')
                else:
                    self._send(404, "application/json", b'{"error": "no", "details": []}')

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with upstream.lock:
                    upstream.batches.append(body)
                    upstream.authorizations.append(self.headers.get("Authorization"))
                    status, headers = upstream.statuses.pop(0) if upstream.statuses else (200, {})
                answer = json.dumps({"accepted": 0, "duplicates": 0, "refused": 0}).encode()
                self._send(status, "application/json", answer, headers)

            def _send(self, status: int, media_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", media_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def relay_process(tmp_path: Path, aggregator: str, *flags: str, db: Path | None = None,
                  env: dict[str, str | None] | None = None) -> ServerProcess:
    """``ldp-telemetry relay`` on a free port with ``flags``, its token from the environment."""
    db = db or tmp_path / "relay.db"
    command = [sys.executable, "-m", "ldp_telemetry.tools.cli", "relay", "--aggregator", aggregator,
               "--port", "{port}", "--db", str(db), *flags]
    return ServerProcess(db, command=command, env={"LDP_RELAY_TOKEN": TOKEN, **(env or {})},
                         log_path=tmp_path / "relay.log")


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "the condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def wait_for_keys(relay: ServerProcess) -> None:
    wait_for(lambda: requests.get(relay.url + "/ohttp-keys", timeout=5).status_code == 200, what="the relay's keys")


def post(relay: ServerProcess, body: bytes, content_type: str = ohttp.REQUEST_MEDIA_TYPE,
         **headers: str) -> requests.Response:
    return requests.post(relay.url + "/relay", data=body, headers={"Content-Type": content_type, **headers},
                         timeout=10)


def metric(relay: ServerProcess, name: str, labels: str = "") -> float:
    """One sample of the relay's /metrics (0 when absent)."""
    wanted = name + (f"{{{labels}}}" if labels else "")
    for line in requests.get(relay.url + "/metrics", timeout=5).text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == wanted:
            return float(value)
    return 0.0


def split(batch: bytes) -> list[bytes]:
    return ohttp.split_batch(batch, max_requests=100_000)


def rows(db: Path, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(statement, args).fetchall()
