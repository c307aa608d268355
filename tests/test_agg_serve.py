"""``ldp-telemetry serve`` as deployed: slow clients stop nobody, and its log names no client.

A real server (granian, 2 workers) on 127.0.0.1, raw sockets for the slow and malformed clients,
and workers killed as the OOM killer would.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from conftest import ADMIN, APP_USAGE, LiveServer, sql

from ldp_telemetry.aggregator.http.rsgi import BODY_SECONDS
from ldp_telemetry.aggregator.http.server import RESPAWN_FIRST_SECONDS, RESPAWN_MAX_SECONDS, respawn_pause
from ldp_telemetry.shared import parse_schema, randomize
from ldp_telemetry.shared.windows import ROLLUP

# What a client would give away: its address, and headers a proxy might add or pass on.
FORWARDED = "203.0.113.77"
AGENT = "SecretAgent/7.1 (device 0451)"
REFERER = "https://example.org/private-page"
TOKEN = "query-secret-0451"


@pytest.fixture
def server(tmp_path):
    server = LiveServer(tmp_path / "serve.db", env={"LDP_READ_TOKEN": TOKEN})
    server.start()
    try:
        assert requests.post(server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN, timeout=10).status_code == 201
        yield server
    finally:
        server.stop()


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def test_slow_and_idle_connections_stop_no_ingest(server):
    port = server.port
    held = []
    # More than the 2 workers and the 8 request threads of each, in every way a client can stall:
    # half a request line, all headers but the blank line, a body promised and not sent, nothing.
    for _ in range(4):
        s = _connect(port)
        s.sendall(b"POST /api/v1/rep")
        held.append(s)
    for _ in range(4):
        s = _connect(port)
        s.sendall(b"POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
        held.append(s)
    slow_bodies = []
    for _ in range(4):
        s = _connect(port)
        s.sendall(b"POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 5000\r\n\r\n{\"reports\": [")
        slow_bodies.append(s)
    held += [_connect(port) for _ in range(16)]
    started = time.monotonic()
    schema = parse_schema(APP_USAGE)
    session = requests.Session()
    for i in range(40):
        report = randomize(schema, {"dark_mode": i % 2 == 0, "os": "linux"})
        # A timeout well inside BODY_SECONDS: an answer here was not queued behind a stalled client.
        response = session.post(server.url + "/api/v1/reports", json={"reports": [report]}, timeout=BODY_SECONDS / 2)
        assert response.status_code == 202, response.text
        assert requests.get(server.url + "/healthz", timeout=BODY_SECONDS / 2).status_code == 200
    assert time.monotonic() - started < BODY_SECONDS  # all of it while every stalled client still stalled
    # The promised bodies never came: each gets a 408 with a sentence, and stores nothing.
    for s in slow_bodies:
        s.settimeout(BODY_SECONDS + 20)
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := s.recv(4096)):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        s.close()
    for s in held:
        s.close()
    metrics = requests.get(server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).text
    assert "ldp_reports_accepted_total 40.0" in metrics  # summed over both workers


def test_no_log_line_names_a_client_or_a_token(tmp_path):
    server = LiveServer(tmp_path / "logged.db", env={"LDP_READ_TOKEN": TOKEN})
    server.command = [sys.executable, "-m", "ldp_telemetry.tools.cli", "serve", "--host", "127.0.0.1",
                      "--port", "{port}", "--workers", "2", "--db", str(server.db_path), "--access-log"]
    server.start()
    nosy = {"X-Forwarded-For": FORWARDED, "X-Real-IP": FORWARDED, "User-Agent": AGENT, "Referer": REFERER}
    try:
        url = server.url
        schema = parse_schema(requests.post(url + "/api/v1/schemas", json=APP_USAGE, headers={**ADMIN, **nosy},
                                            timeout=10).json())
        reports = [randomize(schema, {"dark_mode": True, "os": "linux"}) for _ in range(30)]
        assert requests.post(url + "/api/v1/reports", json={"reports": reports}, headers=nosy,
                             timeout=10).status_code == 202
        # The dashboard's token link: answered with a cookie and a redirect; the query is not logged.
        assert requests.get(f"{url}/schemas/app-usage?token={TOKEN}", headers=nosy, timeout=10).status_code == 200
        assert requests.get(f"{url}/api/v1/estimates?schema=app-usage&token={TOKEN}", headers=nosy,
                            timeout=10).status_code == 401
        # Malformed requests carrying the token: the cases gunicorn logged with the request line.
        for raw in (f"NOT HTTP AT ALL /?token={TOKEN}\r\n\r\n",
                    f"GET /?token={TOKEN} HTTP/1.1\r\nHost x\r\n\r\n",
                    f"GET /?token={TOKEN} HTTP/9.9\r\nHost: x\r\n\r\n",
                    f"GET /\x01?token={TOKEN} HTTP/1.1\r\nHost: x\r\nUser-Agent: {AGENT}\r\n\r\n"):
            with _connect(server.port) as s:
                s.settimeout(10)
                s.sendall(raw.encode("latin-1"))
                answer = s.recv(200)
            assert not answer or answer.startswith(b"HTTP/1.1 4"), (raw, answer)
    finally:
        server.stop()
    log = server.log_path.read_text()
    assert '"POST /api/v1/reports HTTP/1.1" 202' in log
    assert '"GET /schemas/app-usage HTTP/1.1" 200' in log
    for secret in (FORWARDED, AGENT, REFERER, TOKEN, "token=", "Mozilla", "python-requests"):
        assert secret not in log, secret
    # Beyond the start-up lines (which name the listening address), no line holds an address.
    requests_lines = [line for line in log.splitlines() if line.startswith('"')]
    assert requests_lines
    for line in requests_lines:
        assert re.fullmatch(r'"[A-Z]+ /\S* HTTP/1\.1" \d{3} \d+\.\dms', line), line


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (granian forks its workers from the master)."""
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()]


def test_the_server_outlives_its_workers(tmp_path):
    # granian's own guard ended the whole server when a respawned worker died within 5.5 s.
    server = LiveServer(tmp_path / "crash.db")
    server.start()
    schema = parse_schema(APP_USAGE)
    acknowledged: set[str] = set()

    def post_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            reports = [randomize(schema, {"dark_mode": True, "os": "linux"}) for _ in range(5)]
            try:
                response = requests.post(server.url + "/api/v1/reports", json={"reports": reports}, timeout=5)
            except requests.RequestException:
                continue  # its worker was killed: not acknowledged, the client would send it again
            if response.status_code == 202:
                acknowledged.update(r["id"] for r in reports)
            time.sleep(0.05)

    try:
        assert requests.post(server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN, timeout=10).status_code == 201
        for _ in range(4):  # every worker, then each replacement, 1.5 s apart
            workers = _children(server.process.pid)
            assert workers
            for pid in workers:
                os.kill(pid, signal.SIGKILL)
            post_for(1.5)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and server.process.poll() is None:
            try:
                if requests.get(server.url + "/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.2)
        assert server.process.poll() is None, server.log_path.read_text()[-2000:]
        assert requests.get(server.url + "/healthz", timeout=5).json()["status"] == "ok"
        post_for(0.5)
        assert acknowledged
    finally:
        server.stop()
    stored = {i for (i,) in sql(str(server.db_path), "SELECT id FROM reports")}
    assert acknowledged <= stored
    counted = sql(str(server.db_path), f"SELECT n FROM totals WHERE attribute = 'dark_mode' AND \"window\" = '{ROLLUP}'")
    assert counted == [(len(stored),)]  # each stored report counted once


def test_the_pause_before_a_dead_worker_is_replaced_doubles_up_to_its_cap():
    pauses = [respawn_pause(deaths) for deaths in (1, 2, 3, 10**6)]  # a worker that can never start: for ever
    assert pauses == [RESPAWN_FIRST_SECONDS, 2 * RESPAWN_FIRST_SECONDS, 4 * RESPAWN_FIRST_SECONDS, RESPAWN_MAX_SECONDS]


def test_a_kill_9_of_the_master_takes_its_workers_down(tmp_path):
    # The tester's finding: orphaned workers went on answering on the port (SO_REUSEPORT) with their
    # old settings beside a restarted server: a revoked relay token still taken, a new one refused.
    server = LiveServer(tmp_path / "orphans.db")
    server.start()
    try:
        os.kill(server.process.pid, signal.SIGKILL)  # the master alone, as the OOM killer would
        server.process.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                requests.get(server.url + "/healthz", timeout=1)
            except requests.ConnectionError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("a worker still answers after its master was killed")
    finally:
        server.kill()


def test_a_second_server_on_a_taken_port_stops_with_a_sentence(tmp_path):
    # granian binds with SO_REUSEPORT: without the check a second server would share the port with
    # the first, each answering about half of the requests from its own database.
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for command in (["serve", "--db", str(tmp_path / "second.db")],
                        ["relay", "--aggregator", "http://127.0.0.1:9", "--token", "t" * 16, "--db",
                         str(tmp_path / "relay.db")]):
            done = subprocess.run([sys.executable, "-m", "ldp_telemetry.tools.cli", *command, "--host", "127.0.0.1",
                                   "--port", str(port)], capture_output=True, text=True, timeout=60)
            assert done.returncode == 1, done.stderr
            assert f"cannot listen on 127.0.0.1:{port} (--host, --port): Address already in use" in done.stderr
