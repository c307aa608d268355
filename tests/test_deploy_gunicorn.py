"""deploy/gunicorn.conf.py: the aggregator under gunicorn as deployed; its logs name no client."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from conftest import ADMIN, ADMIN_TOKEN, APP_USAGE, free_port

from ldp_telemetry.shared import parse_schema, randomize

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = Path(sys.executable).parent / "gunicorn"
# What a client would give away: its address, and headers a proxy might add or pass on.
FORWARDED = "203.0.113.77"
AGENT = "SecretAgent/7.1 (device 0451)"
REFERER = "https://example.org/private-page"


@pytest.fixture
def deployed(tmp_path):
    port = free_port()
    logs = {"access": tmp_path / "access.log", "error": tmp_path / "error.log"}
    env = {**os.environ, "LDP_DB": str(tmp_path / "ldp.db"), "LDP_ADMIN_TOKEN": ADMIN_TOKEN,
           "LDP_BIND": f"127.0.0.1:{port}", "LDP_WORKERS": "2", "LDP_ACCESS_LOG": str(logs["access"]),
           "LDP_ERROR_LOG": str(logs["error"])}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen([str(GUNICORN), "-c", "deploy/gunicorn.conf.py", "ldp_telemetry.aggregator:create_app()"],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, logs["error"].read_text() if logs["error"].exists() else "no error log"
            try:
                if requests.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "gunicorn did not answer /healthz"
            time.sleep(0.1)
        yield url, process, logs
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_reports_go_in_and_no_client_address_is_logged(deployed):
    url, process, logs = deployed
    nosy = {"X-Forwarded-For": FORWARDED, "X-Real-IP": FORWARDED, "User-Agent": AGENT, "Referer": REFERER}
    derived = requests.post(url + "/api/v1/schemas", json=APP_USAGE, headers={**ADMIN, **nosy}, timeout=10).json()
    schema = parse_schema(derived)
    reports = [randomize(schema, {"dark_mode": i % 3 == 0, "os": "linux"}) for i in range(300)]
    response = requests.post(url + "/api/v1/reports", json={"reports": reports}, headers=nosy, timeout=30)
    assert response.status_code == 202
    assert response.json() == {"accepted": 300, "duplicates": 0}
    assert requests.post(url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).status_code == 200
    estimates = requests.get(url + "/api/v1/estimates", params={"schema": "app-usage", "attribute": "dark_mode"},
                             headers=nosy, timeout=10).json()["estimates"]
    assert {e["n"] for e in estimates} == {300}
    assert requests.get(url + "/schemas/app-usage?token=query-secret", headers=nosy, timeout=10).status_code == 200
    # A malformed request: gunicorn's own error path, which would log "Invalid request from ip=...".
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 400")
    metrics = requests.get(url + "/metrics", timeout=10).text
    assert "ldp_reports_accepted_total 300.0" in metrics  # summed over the workers

    os.killpg(process.pid, signal.SIGTERM)  # gunicorn flushes its logs as it stops
    process.wait(20)
    access, error = logs["access"].read_text(), logs["error"].read_text()
    assert '"POST /api/v1/reports HTTP/1.1" 202' in access
    assert '"GET /schemas/app-usage HTTP/1.1" 200' in access
    for secret in ("127.0.0.1", FORWARDED, AGENT, REFERER, "query-secret", "token="):
        assert secret not in access, secret
    assert "Invalid request from ip=-: " in error
    for secret in (FORWARDED, AGENT, REFERER, "query-secret", "ip=127"):
        assert secret not in error, secret
